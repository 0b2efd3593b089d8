#!/bin/sh
# Instructions per iteration of each hot path (callgrind; repeatable on a loaded machine).
# Usage: bench/callgrind.sh   (builds the `paths` example in release first)
set -eu
cargo build -q --release -p surgeguard-bench --example paths
exe="${CARGO_TARGET_DIR:-target}/release/examples/paths"
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
for p in admit limiter shared queue; do
    a=$(ir "$p" 10000)
    b=$(ir "$p" 110000)
    echo "$p: $(( (b - a) / 100000 )) instructions/iteration"
done
