#!/usr/bin/env bash
# make installtest: the artifacts install and work the way users get them (~1-3 min warm on a
# loaded 2-core machine: a fresh venv per CPython costs ~10 s; the wheel build is cold once).
#   1. one version: scripts/check_version.py, and a tampered copy of the tree fails it;
#   2. C: scripts/test_c_install.sh (make install into a temp prefix, example server via pkg-config);
#   3. the host target's slice of make dist (`scripts/dist.sh host`: the same steps for the
#      x86_64 manylinux2014 abi3 wheel, the linux-x64-gnu prebuilt addon, glibc 2.17 through
#      zig, and the npm tarballs) run in a copy of the files git does not ignore (under target/),
#      as in a fresh clone: no bindings-node/native/, no prebuilt addons, no dist/. The tools
#      (.dist-venv, bindings-node/node_modules) are linked in and the target directory is the
#      tree's, so registry crates built by `make wheel` and earlier steps are reused;
#      the Python wheel installed into a fresh venv per CPython (this one, and 3.10/3.12/3.13
#      from pyenv when present) with no cargo/rustc on PATH; scripts/smoke/smoke.py in each,
#      and the one-version check of surgeguard.__version__;
#   4. npm: the main package and surgeguard-linux-x64-gnu from step 3 installed into a
#      fresh folder with no Rust on PATH; CommonJS and ESM smoke programs, the
#      addon's version; the main package alone (no prebuilt): the install fails with a clear
#      message when there is no Rust, installs without an addon under SURGEGUARD_SKIP_BUILD=1
#      (require throws SG_NO_NATIVE_ADDON), and builds the addon from source with cargo on PATH.
# Tools (maturin, ziglang, ...) come from the project-local .dist-venv (make dist-tools).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
clean_path=/usr/bin:/bin
for t in cargo rustc; do
    if PATH=$clean_path command -v $t >/dev/null; then echo "installtest: $t is in $clean_path; the no-Rust checks would be void" >&2; exit 1; fi
done

echo "installtest: 1. one version"
scripts/check_version.py
mkdir -p "$tmp/tree" && git ls-files -z -- Cargo.toml '*/Cargo.toml' bindings-python/pyproject.toml \
    bindings-node/package.json 'bindings-node/npm/*/package.json' include CHANGELOG.md | xargs -0 cp --parents -t "$tmp/tree"
sed -i 's/"version": "\([0-9.]*\)"/"version": "\1-tampered"/' "$tmp/tree/bindings-node/npm/linux-x64-gnu/package.json"
if scripts/check_version.py --root "$tmp/tree" >"$tmp/tamper.log" 2>&1; then
    echo "installtest: check_version.py accepted a tampered version" >&2; exit 1
fi
grep -q 'linux-x64-gnu/package.json version' "$tmp/tamper.log"

echo "installtest: 2. C install (at ${SECONDS} s)"
scripts/test_c_install.sh | tail -n 2

echo "installtest: 3. the host slice of make dist, in a fresh copy of the tree (at ${SECONDS} s)"
# At a fixed path, rebuilt from nothing each run; mtimes kept, so cargo reuses its builds of
# the copy's workspace crates while their sources are unchanged.
target_dir="${CARGO_TARGET_DIR:-$root/target}"
fresh="$target_dir/installtest-tree"
rm -rf "$fresh" && mkdir -p "$fresh"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    if [ -e "$f" ]; then printf '%s\0' "$f"; fi # a tracked file deleted in the tree is not copied
done >"$tmp/files"
xargs -0 cp -P -p --parents -t "$fresh" <"$tmp/files"
# The same files in the copy's index (scripts/npm_pack.sh lists the Rust sources with git).
git -C "$fresh" -c init.defaultBranch=main init -q
git -C "$fresh" add --pathspec-from-file="$tmp/files" --pathspec-file-nul
test -d .dist-venv || { echo "installtest: no .dist-venv (make dist-tools)" >&2; exit 1; }
[ -d bindings-node/node_modules/@napi-rs/cli ] || (cd bindings-node && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
ln -s "$root/.dist-venv" "$fresh/.dist-venv"
ln -s "$root/bindings-node/node_modules" "$fresh/bindings-node/node_modules"
CARGO_TARGET_DIR="$target_dir" "$fresh/scripts/dist.sh" host
echo "installtest: 3. the Python wheel (at ${SECONDS} s)"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
wheel="$fresh/dist/python/surgeguard-$version-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
pythons=("$(command -v python3)")
pyenv_root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
for v in 3.10 3.12 3.13; do
    exe=$(ls -d "$pyenv_root"/versions/$v.*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$exe" ]; then pythons+=("$exe"); else echo "installtest: no CPython $v under $pyenv_root/versions: skipped"; fi
done
for py in "${pythons[@]}"; do
    v="$tmp/venv-$(basename "$(dirname "$(dirname "$py")")")-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    "$py" -m venv "$v"
    env -i PATH="$v/bin:$clean_path" HOME="$HOME" pip install -q --no-index --disable-pip-version-check "$wheel"
    (cd "$tmp" && env -i PATH="$v/bin:$clean_path" HOME="$HOME" python "$root/scripts/smoke/smoke.py")
    scripts/check_version.py --python "$v/bin/python" >/dev/null
done

echo "installtest: 4. npm packages (at ${SECONDS} s)"
npm_dir="$fresh/dist/npm"
npm_env=(env -i PATH="$clean_path" HOME="$HOME" npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false)
app="$tmp/app"
mkdir -p "$app" && cp scripts/smoke/smoke.cjs scripts/smoke/smoke.mjs "$app/"
(cd "$app" && "${npm_env[@]}" npm init -y >/dev/null \
    && "${npm_env[@]}" npm install --prefer-offline --loglevel=error "$npm_dir/surgeguard-$version.tgz" "$npm_dir/surgeguard-linux-x64-gnu-$version.tgz" \
    && "${npm_env[@]}" node smoke.cjs && "${npm_env[@]}" node smoke.mjs)
scripts/check_version.py --node-dir "$app" >/dev/null
# No prebuilt (--omit=optional): with no Rust on PATH the install fails and says what to do;
# SURGEGUARD_SKIP_BUILD=1 installs without an addon and require throws SG_NO_NATIVE_ADDON;
# with cargo on PATH the install script builds the addon from the shipped sources (into the
# project's target directory, so registry crates already built by `make nodetest` are reused).
bare="$tmp/bare"
mkdir -p "$bare"
(cd "$bare" && "${npm_env[@]}" npm init -y >/dev/null)
if (cd "$bare" && "${npm_env[@]}" npm install --prefer-offline --loglevel=error --omit=optional "$npm_dir/surgeguard-$version.tgz") >"$tmp/bare-install.log" 2>&1; then
    echo "installtest: with no prebuilt and no Rust on PATH, npm install succeeded silently" >&2; exit 1
fi
grep -q 'surgeguard: no prebuilt addon for linux-x64.*Rust toolchain' "$tmp/bare-install.log" \
    || { echo "installtest: no clear install message without a prebuilt or Rust:" >&2; cat "$tmp/bare-install.log" >&2; exit 1; }
echo "installtest: without a prebuilt or Rust, npm install fails with: $(grep -o 'surgeguard: no prebuilt addon for [^.]*' "$tmp/bare-install.log" | head -n 1)"
rm -rf "$bare" && mkdir -p "$bare"
(cd "$bare" && "${npm_env[@]}" npm init -y >/dev/null \
    && "${npm_env[@]}" SURGEGUARD_SKIP_BUILD=1 npm install --prefer-offline --loglevel=error --omit=optional "$npm_dir/surgeguard-$version.tgz")
if (cd "$bare" && "${npm_env[@]}" node -e "require('surgeguard')") 2>"$tmp/bare.err"; then
    echo "installtest: the main package without a prebuilt loaded an addon" >&2; exit 1
fi
grep -q 'surgeguard: no native addon for this platform (linux-x64).*build' "$tmp/bare.err" \
    || { echo "installtest: no clear message without a prebuilt:" >&2; cat "$tmp/bare.err" >&2; exit 1; }
echo "installtest: SURGEGUARD_SKIP_BUILD=1, no prebuilt: require fails with: $(grep -o 'surgeguard: no native addon[^.]*' "$tmp/bare.err")"
src="$tmp/src"
mkdir -p "$src" && cp scripts/smoke/smoke.cjs scripts/smoke/smoke.mjs "$src/"
cargo_bin="$(dirname "$(command -v cargo)")"
(cd "$src" && "${npm_env[@]}" npm init -y >/dev/null \
    && env -i PATH="$cargo_bin:$clean_path" HOME="$HOME" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}" npm_config_update_notifier=false \
        npm_config_fund=false npm_config_audit=false \
        npm install --prefer-offline --loglevel=error --omit=optional --foreground-scripts "$npm_dir/surgeguard-$version.tgz" \
        >"$tmp/src-install.log" 2>&1) || { echo "installtest: the source build failed:" >&2; cat "$tmp/src-install.log" >&2; exit 1; }
grep -q 'surgeguard: built native/surgeguard.linux-x64-gnu.node from source' "$tmp/src-install.log" \
    || { echo "installtest: the source build did not say what it built:" >&2; cat "$tmp/src-install.log" >&2; exit 1; }
test ! -e "$src/node_modules/surgeguard-linux-x64-gnu" || { echo "installtest: the source-build case installed the prebuilt" >&2; exit 1; }
(cd "$src" && "${npm_env[@]}" SG_SMOKE_SOURCE_BUILT=1 node smoke.cjs && "${npm_env[@]}" SG_SMOKE_SOURCE_BUILT=1 node smoke.mjs)
scripts/check_version.py --node-dir "$src" >/dev/null
echo "installtest: no prebuilt, cargo on PATH: built from source, CommonJS and ESM smoke passed"
# A prebuilt that matches compiles nothing: the first install put no addon into native/.
if ls "$app/node_modules/surgeguard/native/"*.node >/dev/null 2>&1; then echo "installtest: the install with a prebuilt built an addon" >&2; exit 1; fi
echo "installtest: all checks passed in ${SECONDS} s"
