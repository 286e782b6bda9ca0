#!/bin/sh
# The image's entry: runs `embers <command>` from /app (the image's WORKDIR). An agent sets up its
# cgroups itself, on cgroup v1 or v2, in a container or not (runtime/replica/sandbox.ts).
set -e
exec node --max-semi-space-size=32 cli/bin.mjs "$@"
