#!/bin/sh
# Starts this pod's Redis or its Sentinel (argument: redis | sentinel). The primary is the one the
# Sentinels name; with no Sentinel answering yet (a first start), redis-0. A pod that comes back
# after a failover therefore starts as a replica, never as a second primary.
set -eu
self="$(hostname).redis"
primary=""
for s in redis-0.redis redis-1.redis redis-2.redis; do
  # Sentinels have no password: without REDISCLI_AUTH (the probe's) redis-cli tries none on them.
  # Only a pod's name is taken for an answer.
  answer="$(env -u REDISCLI_AUTH redis-cli -h "$s" -p 26379 --raw sentinel get-master-addr-by-name embers 2>/dev/null | head -n 1 || true)"
  case "$answer" in
    redis-[0-9]*.redis) primary="$answer"; break ;;
  esac
done
[ -n "$primary" ] || primary="redis-0.redis"

case "$1" in
  redis)
    set -- redis-server /etc/redis/redis.conf --requirepass "$REDIS_PASSWORD" --masterauth "$REDIS_PASSWORD" --replica-announce-ip "$self"
    [ "$primary" = "$self" ] || set -- "$@" --replicaof "$primary" 6379
    exec "$@"
    ;;
  sentinel)
    # Sentinel rewrites its file as it learns the group: a writable copy on an emptyDir.
    cat > /sentinel/sentinel.conf <<CONF
port 26379
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $self
sentinel monitor embers $primary 6379 2
sentinel auth-pass embers $REDIS_PASSWORD
sentinel down-after-milliseconds embers 5000
sentinel failover-timeout embers 30000
sentinel parallel-syncs embers 1
CONF
    exec redis-server /sentinel/sentinel.conf --sentinel
    ;;
esac
echo "usage: start.sh redis|sentinel" >&2
exit 2
