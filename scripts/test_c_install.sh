#!/usr/bin/env bash
# The C install, as a user meets it (part of `make installtest`):
#   1. `make install PREFIX=<tmp>/usr` and the installed tree: the header, libsurgeguard.a,
#      libsurgeguard.so.X.Y.Z whose SONAME names the link libsurgeguard.so.N that points at it,
#      libsurgeguard.so -> the SONAME link, and surgeguard.pc whose Version is the workspace's;
#   2. tests/c/example_server.c built with flags from `pkg-config` alone (no -I/-L into the
#      source tree), shared (it must load the installed libsurgeguard.so.N) and static
#      (pkg-config --static), and run: it exits 0 when every request was answered;
#   3. a DESTDIR (staged) install relocated with --define-variable=prefix builds as well.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
failed=0
check() { # check DESCRIPTION COMMAND...
    local what="$1"
    shift
    if "$@"; then echo "  ok: $what"; else echo "  FAILED: $what" >&2; failed=$((failed + 1)); fi
}

prefix="$tmp/usr"
make -s --no-print-directory install PREFIX="$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; exit 1; }
lib="$prefix/lib"
soname=$(readelf -d "$lib/libsurgeguard.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "c install: surgeguard $version into $prefix (SONAME $soname)"
check "header installed" test -f "$prefix/include/surgeguard.h"
check "header identical to include/surgeguard.h" cmp -s include/surgeguard.h "$prefix/include/surgeguard.h"
check "static library installed" test -f "$lib/libsurgeguard.a"
check "SONAME is libsurgeguard.so.<major>" [ "$soname" = "libsurgeguard.so.${version%%.*}" ]
check "$soname -> libsurgeguard.so.$version" [ "$(readlink "$lib/$soname")" = "libsurgeguard.so.$version" ]
check "libsurgeguard.so -> $soname" [ "$(readlink "$lib/libsurgeguard.so")" = "$soname" ]

export PKG_CONFIG_PATH="$lib/pkgconfig"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
check "pkg-config --modversion = $version" [ "$(pkg-config --modversion surgeguard)" = "$version" ]
check "pkg-config libdir is the install's" [ "$(pkg-config --variable=libdir surgeguard)" = "$lib" ]
cflags=$(pkg-config --cflags surgeguard)
libs=$(pkg-config --libs surgeguard)
check "pkg-config flags do not point into the source tree" bash -c "! grep -qF '$root' <<<'$cflags $libs'"

# Shared: compiled in a folder without the source tree; the rpath is the installed libdir.
cp tests/c/example_server.c "$tmp/app.c"
# shellcheck disable=SC2086
check "example_server builds (shared) from pkg-config flags" \
    gcc -std=c11 -Wall -Wextra -Werror -pedantic "$tmp/app.c" -o "$tmp/app" $cflags $libs -Wl,-rpath,"$lib" -lpthread
check "it needs $soname" bash -c "readelf -d '$tmp/app' | grep -qE 'NEEDED.*\[$soname\]'"
check "the loader resolves it to the install" bash -c "ldd '$tmp/app' | grep -qF '$soname => $lib/$soname'"
check "example_server runs (shared)" bash -c "timeout 60 '$tmp/app' >'$tmp/app.out' && grep -q '^example_server: ' '$tmp/app.out'"
tail -n 1 "$tmp/app.out" | sed 's/^/    /'

# Static: the archive plus Libs.private, nothing of surgeguard loaded at run time.
# shellcheck disable=SC2086
check "example_server builds (static) from pkg-config --static" \
    gcc -std=c11 "$tmp/app.c" -o "$tmp/app.static" $cflags "$lib/libsurgeguard.a" $(pkg-config --static --libs-only-l surgeguard | sed 's/-lsurgeguard//') -lpthread
check "static build does not load libsurgeguard.so" bash -c "! readelf -d '$tmp/app.static' | grep -q libsurgeguard"
check "example_server runs (static)" bash -c "timeout 60 '$tmp/app.static' >/dev/null"

# Staged: DESTDIR install, relocated at build time with --define-variable=prefix.
make -s --no-print-directory install PREFIX=/opt/surgeguard DESTDIR="$tmp/stage" >"$tmp/install2.log" 2>&1 || { cat "$tmp/install2.log" >&2; exit 1; }
staged="$tmp/stage/opt/surgeguard"
pc_staged=(pkg-config --define-variable=prefix="$staged")
check "staged surgeguard.pc names prefix=/opt/surgeguard" grep -qx 'prefix=/opt/surgeguard' "$staged/lib/pkgconfig/surgeguard.pc"
# shellcheck disable=SC2046
check "example_server builds against the staged tree" \
    env PKG_CONFIG_PATH="$staged/lib/pkgconfig" gcc -std=c11 "$tmp/app.c" -o "$tmp/app.staged" \
    $(PKG_CONFIG_PATH="$staged/lib/pkgconfig" "${pc_staged[@]}" --cflags --libs surgeguard) -Wl,-rpath,"$staged/lib" -lpthread
check "it runs" bash -c "timeout 60 '$tmp/app.staged' >/dev/null"

if [ "$failed" -ne 0 ]; then echo "c install: $failed check(s) failed" >&2; exit 1; fi
echo "c install: all checks passed"
