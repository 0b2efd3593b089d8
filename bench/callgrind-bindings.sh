#!/bin/sh
# Instructions per iteration of the binding hot paths under callgrind (repeatable on a
# loaded machine, unlike wall-clock time). JIT and garbage collection make the Node counts
# move by a few hundred instructions between runs: compare paths of one run, and repeat.
#
#   bench/callgrind-bindings.sh node     # builds the addon (release) and loads it directly
#   bench/callgrind-bindings.sh python   # the surgeguard installed in `python3` (a venv)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
per_iter() { # runner script path n1 n2
    a=$(count "$1" "$2" "$3" "$4")
    b=$(count "$1" "$2" "$3" "$5")
    echo "$3: $(( (b - a) / ($5 - $4) )) instructions/iteration"
}
case "${1:-node}" in
node)
    cargo build -q --release -p surgeguard-node
    # Node loads an addon only from a file named `*.node` (a `.so` is read as JavaScript).
    target="${CARGO_TARGET_DIR:-$(cd "$here/.." && pwd)/target}"
    SG_ADDON="$(mktemp -d)/surgeguard.node"
    cp "$target/release/libsurgeguard_node.so" "$SG_ADDON"
    export SG_ADDON
    node=$(command -v node)
    for p in floor fast facade limiter shared; do per_iter "$node" "$here/bindings/node_loop.js" "$p" 20000 120000; done
    ;;
python)
    # The interpreter itself, not a shim script (pyenv), so callgrind follows it.
    py=$(python3 -c 'import sys; print(sys.executable)')
    for p in floor with try; do per_iter "$py" "$here/bindings/py_loop.py" "$p" 2000 22000; done
    ;;
*) echo "usage: $0 node|python" >&2; exit 2 ;;
esac
