#!/usr/bin/env bash
# make dist-qemu: runs the aarch64 artifacts of make dist under qemu-user (a dist check, not
# part of make test). Installs Debian's qemu-user-static if missing (skips with a message if
# it cannot) and unpacks an arm64 Debian userland (python3.11, nodejs and their libraries,
# ~28 MB of .deb) into target/qemu-arm64-sysroot, without changing dpkg's architectures.
#   - the manylinux2014 aarch64 wheel: imported by arm64 CPython 3.11, a Gate admits a permit;
#   - surgeguard + surgeguard-linux-arm64-gnu tarballs (npm install --force, as the platform
#     differs from the host's) under arm64 Node: require, version, a Gate admits a permit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! command -v qemu-aarch64-static >/dev/null; then
    if ! { apt-get install -y -qq qemu-user-static >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq qemu-user-static >/dev/null; }; }; then
        echo "dist-qemu: qemu-user-static cannot be installed here: skipped"
        exit 0
    fi
fi
sysroot="$root/target/qemu-arm64-sysroot"
if [ ! -x "$sysroot/usr/bin/node" ] || [ ! -x "$sysroot/usr/bin/python3.11" ]; then
    mkdir -p "$tmp/lists/partial" "$tmp/debs" "$sysroot"
    o=(-qq -oAPT::Architecture=arm64 -oAPT::Architectures=arm64 -oDir::State::Lists="$tmp/lists" -oAPT::Sandbox::User=root)
    apt-get "${o[@]}" update
    for p in python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 zlib1g libexpat1 libffi8 \
        nodejs libnode108 libuv1 libicu72 libssl3 libc-ares2 libbrotli1 libnghttp2-14 libstdc++6 libgcc-s1 \
        node-acorn node-cjs-module-lexer node-undici; do
        (cd "$tmp/debs" && apt-get "${o[@]}" download "$p") # one name per call: an unknown one aborts the call
    done
    for d in "$tmp"/debs/*.deb; do dpkg -x "$d" "$sysroot"; done
fi
q=(qemu-aarch64-static -L "$sysroot")

wheel="dist/python/surgeguard-$version-cp310-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"
mkdir -p "$tmp/wheel" && (cd "$tmp/wheel" && python3 -m zipfile -e "$root/$wheel" .)
PYTHONHOME="$sysroot/usr" PYTHONPATH="$tmp/wheel" "${q[@]}" "$sysroot/usr/bin/python3.11" -c '
import platform, surgeguard as sg
assert platform.machine() == "aarch64", platform.machine()
g = sg.Gate(limit=1)
with g.acquire(timeout=0.1):
    pass
print(f"dist-qemu: wheel: surgeguard {sg.__version__} on {platform.machine()} CPython {platform.python_version()}")
'

app="$tmp/app"
mkdir -p "$app"
(cd "$app" && npm init -y >/dev/null && npm install --force --no-audit --no-fund --loglevel=error --prefer-offline \
    "$root/dist/npm/surgeguard-$version.tgz" "$root/dist/npm/surgeguard-linux-arm64-gnu-$version.tgz" >/dev/null 2>&1)
(cd "$app" && "${q[@]}" "$sysroot/usr/bin/node" -e '
const sg = require("surgeguard")
if (process.arch !== "arm64") throw new Error(process.arch)
const addon = Object.keys(require.cache).find((k) => k.endsWith(".node"))
if (!addon.includes("surgeguard-linux-arm64-gnu")) throw new Error(addon)
if (sg.version !== require("surgeguard/package.json").version) throw new Error(sg.version)
const p = new sg.Gate().tryAcquire()
if (!p) throw new Error("no permit")
p.success()
console.log(`dist-qemu: npm: surgeguard ${sg.version} on ${process.arch} Node ${process.version} from ${addon.replace(/.*node_modules\//, "")}`)
')
echo "dist-qemu: all checks passed"
