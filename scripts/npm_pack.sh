#!/usr/bin/env bash
# Packs the npm packages the napi-rs way (used by make dist and make installtest):
#   - each per-platform package bindings-node/npm/<platform>/ whose addon
#     surgeguard.<platform>.node is present, from a staged copy, by `npm pack`;
#   - the main package from a staged copy of what `npm pack` would ship, without any .node
#     file, with `optionalDependencies` on every per-platform package at this version (what
#     `napi prepublish` adds), the addon's Rust sources in rust/ (the core and the addon crate
#     in a two-member workspace with the lock file) and one script, `install`
#     (bindings-node/scripts/install.js): it compiles nothing when a prebuilt addon loads, and
#     otherwise builds the addon from rust/ with cargo, or fails saying what to do.
# Usage: scripts/npm_pack.sh OUTDIR    (prints the tarballs' paths)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
pkg="$root/bindings-node"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
test -f "$pkg/native/binding.js" || { echo "npm_pack: $pkg/native/binding.js missing (run npm run build there first)" >&2; exit 1; }

for dir in "$pkg"/npm/*/; do
    platform=$(basename "$dir")
    node_file="$dir/surgeguard.$platform.node"
    [ -f "$node_file" ] || continue
    mkdir -p "$stage/$platform"
    cp "$dir/package.json" "$dir/README.md" "$node_file" "$stage/$platform/"
    (cd "$stage/$platform" && npm pack --ignore-scripts --silent --pack-destination "$out" >/dev/null)
    echo "$out/surgeguard-$platform-$(node -p "require('$dir/package.json').version").tgz"
done

mkdir -p "$stage/main"
(cd "$pkg" && npm pack --dry-run --json --ignore-scripts 2>/dev/null) \
    | node -e 'for (const f of JSON.parse(require("fs").readFileSync(0))[0].files) console.log(f.path)' \
    | grep -v '\.node$' | while read -r f; do install -D -m 644 "$pkg/$f" "$stage/main/$f"; done
node - "$stage/main/package.json" "$pkg" <<'JS'
const fs = require('fs')
const path = require('path')
const [file, pkg] = process.argv.slice(2)
const p = JSON.parse(fs.readFileSync(file))
p.optionalDependencies = {}
for (const d of fs.readdirSync(path.join(pkg, 'npm')).sort()) {
  const sub = path.join(pkg, 'npm', d, 'package.json')
  if (!fs.existsSync(sub)) continue
  const s = JSON.parse(fs.readFileSync(sub))
  if (s.version !== p.version) throw new Error(`${sub}: version ${s.version} != ${p.version}`)
  p.optionalDependencies[s.name] = s.version
}
p.scripts = { install: 'node install.js' }
p.files = [...p.files, 'install.js', 'rust/']
fs.writeFileSync(file, JSON.stringify(p, null, 2) + '\n')
JS
install -m 644 "$pkg/scripts/install.js" "$stage/main/install.js"
# The source build's workspace: the root manifest with only the two members it needs.
mkdir -p "$stage/main/rust"
# The addon needs the core and the std crate `surgeguard` (its `shm` module: shared memory).
(cd "$root" && git ls-files -z -- core/Cargo.toml core/src surgeguard/Cargo.toml surgeguard/README.md surgeguard/src \
    bindings-node/Cargo.toml bindings-node/build.rs bindings-node/src \
    | xargs -0 cp --parents -t "$stage/main/rust")
cp "$root/Cargo.lock" "$stage/main/rust/Cargo.lock"
node - "$root/Cargo.toml" "$stage/main/rust/Cargo.toml" "$stage/main/rust/surgeguard/Cargo.toml" <<'JS'
const fs = require('fs')
const [from, to, std] = process.argv.slice(2)
const text = fs.readFileSync(from, 'utf8')
const members = /^members = \[[\s\S]*?^\]/m
if (!members.test(text)) throw new Error(`${from}: no members = [...]`)
fs.writeFileSync(to, text.replace(members, 'members = ["core", "surgeguard", "bindings-node"]'))
// surgeguard's tests, examples and dev-dependencies (other workspace crates) are not shipped:
// drop those sections so the two-crate workspace resolves.
const sections = fs.readFileSync(std, 'utf8').split(/^(?=\[)/m)
const keep = sections.filter((s) => !/^\[(dev-dependencies|\[test\]|\[example\]|\[bench\])/.test(s))
fs.writeFileSync(std, keep.join(''))
JS
if find "$stage/main" -name '*.node' | grep -q .; then echo "npm_pack: a .node file in the main package" >&2; exit 1; fi
(cd "$stage/main" && npm pack --ignore-scripts --silent --pack-destination "$out" >/dev/null)
echo "$out/surgeguard-$(node -p "require('$pkg/package.json').version").tgz"
