#!/bin/sh
# The image's entry: runs `embers <command>` from /app (the image's WORKDIR).
# Under cgroup v2, a cgroup can hand its controllers (memory, pids, cpu) to children only while
# no process sits in it; in a container with a writable cgroup of its own (the agent's, which is
# privileged) the container's processes move to a leaf first, so that the sandbox's per-replica
# cgroups get their memory and pids limits (runtime/sandbox.ts). Only as tini's child (PPID 1):
# never when run outside a container.
set -e
if [ "$1" = agent ] && [ "$PPID" = 1 ] && [ "$(cat /proc/self/cgroup)" = "0::/" ] && [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then
  mkdir -p /sys/fs/cgroup/agent
  for pid in $(cat /sys/fs/cgroup/cgroup.procs); do echo "$pid" > /sys/fs/cgroup/agent/cgroup.procs 2>/dev/null || true; done
fi
exec node --max-semi-space-size=32 cli/bin.mjs "$@"
