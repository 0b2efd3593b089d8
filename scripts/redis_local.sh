#!/usr/bin/env bash
# A project-local redis-server for the shared-memory benchmark's Redis row (bench/benches/shm.rs):
# Debian's redis-tools package (which holds the redis-server binary) and the two libraries it
# needs that a build machine usually lacks, unpacked with dpkg -x under .tools/redis (nothing
# is installed system-wide), and a wrapper .tools/bin/redis-server that finds those libraries.
# Usage: scripts/redis_local.sh   (then PATH=$PWD/.tools/bin:$PATH; `make bench-shm` does both)
# Needs apt-get (Debian/Ubuntu) with package lists; prints a note and exits 1 otherwise.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
if [ -x "$tools/bin/redis-server" ] && "$tools/bin/redis-server" --version >/dev/null 2>&1; then
    exit 0
fi
command -v apt-get >/dev/null || { echo "redis_local: no apt-get here; put a redis-server on PATH to get the Redis row" >&2; exit 1; }
debs="$(mktemp -d)"
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && chmod 777 . && apt-get download redis-tools libjemalloc2 liblzf1 >/dev/null 2>&1) \
    || { echo "redis_local: apt-get download failed (run apt-get update first?)" >&2; exit 1; }
rm -rf "$tools/redis"
mkdir -p "$tools/redis" "$tools/bin"
for d in "$debs"/*.deb; do dpkg -x "$d" "$tools/redis"; done
# One binary: it runs as the server unless called as redis-check-rdb/-aof (the redis-server
# package only adds this link).
ln -sf redis-check-rdb "$tools/redis/usr/bin/redis-server"
libdir="$(dirname "$(find "$tools/redis" -name 'libjemalloc.so.2' | head -n1)")"
cat >"$tools/bin/redis-server" <<SH
#!/bin/sh
LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$tools/redis/usr/bin/redis-server" "\$@"
SH
chmod +x "$tools/bin/redis-server"
"$tools/bin/redis-server" --version
