#!/usr/bin/env bash
# The C ABI's tests (make ctest). Builds libsurgeguard (.a and .so), then:
#   1. checks the shared library: SONAME libsurgeguard.so.0, only sg_* symbols exported,
#      one per function in include/surgeguard.h, and every one called by a C program here;
#   2. compiles every C program as C11 and as C++17 (-Wall -Wextra -Werror -pedantic),
#      against the static and against the shared library, and runs all four builds;
#   3. runs them under valgrind memcheck (zero errors, zero definite/indirect leaks);
#      replays the conformance vectors (replay_vectors.c, C11 static, plain and valgrind);
#   4. builds the example server through pkg-config (PKG_CONFIG_PATH=include) and runs it.
#   5. sweeps every function with seeded hostile arguments (sweep_api.c), plain and under
#      valgrind.
# Prints "ctest: N passed, N failed" last; exits non-zero on any failure.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
here=tests/c
target="${CARGO_TARGET_DIR:-$root/target}"
libdir="$target/release"
out="$target/ctest"
mkdir -p "$out"

passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }
# Runs "$@" quietly (output kept in a log, shown on failure) and counts the result.
step() {
    local name="$1"
    shift
    local log="$out/$name.log"
    if "$@" >"$log" 2>&1; then
        pass
        grep -E '^[a-z_]+: [0-9]+ passed, [0-9]+ failed$|^(stress_gate|example_server): [0-9]' "$log" \
            | sed "s/^/  [$name] /" || true
    else
        fail "$name (log: $log)"
        tail -n 30 "$log" >&2
    fi
}

for tool in gcc g++ valgrind pkg-config readelf nm python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "run.sh: installing what provides $tool" >&2
        apt-get update -qq && apt-get install -y -qq gcc g++ valgrind pkg-config binutils >/dev/null
        break
    fi
done

echo "ctest: building libsurgeguard (release)"
cargo build --release --quiet -p surgeguard-ffi
ln -sf libsurgeguard.so "$libdir/libsurgeguard.so.0" # the SONAME the programs ask for

# 1. The shared library and the header agree, and the tests call every function.
header_fns="$out/header.fns"
lib_fns="$out/lib.fns"
grep -oE '^[a-z_0-9 *]*\bsg_[a-z0-9_]+\(' include/surgeguard.h | grep -oE 'sg_[a-z0-9_]+\($' | tr -d '(' | sort -u >"$header_fns"
nm -D --defined-only "$libdir/libsurgeguard.so" | awk '{print $3}' | sort -u >"$lib_fns"
if readelf -d "$libdir/libsurgeguard.so" | grep -q 'SONAME.*\[libsurgeguard\.so\.0\]'; then pass; else fail "SONAME is not libsurgeguard.so.0"; fi
if diff -u "$header_fns" "$lib_fns" >"$out/symbols.diff"; then pass; else fail "exported symbols differ from the header: $out/symbols.diff"; fi
# LIFECYCLE(T, cfg) in test_api.c calls sg_T_{config_default,new,free,size,align,init,deinit}.
called="$out/called.txt"
{
    cat "$here"/*.c
    grep -oE 'LIFECYCLE\([a-z_]+' "$here"/*.c | sed 's/.*(//' | while read -r t; do
        for verb in config_default new free size align init deinit; do echo "sg_${t}_${verb}"; done
    done
} >"$called"
uncalled=""
while read -r fn; do
    grep -q "\b$fn\b" "$called" || uncalled="$uncalled $fn"
done <"$header_fns"
if [ -z "$uncalled" ]; then pass; else fail "functions no C program calls:$uncalled"; fi
echo "ctest: $(wc -l <"$header_fns") functions exported, all called by tests/c"

# 2. Every program, as C11 and C++17, static and shared.
cflags=(-O1 -g -Wall -Wextra -Werror -pedantic -Iinclude -I"$here")
static_libs=("$libdir/libsurgeguard.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc)
shared_libs=(-L"$libdir" -lsurgeguard -Wl,-rpath,"$libdir" -lpthread -lm)
programs=(test_api test_gate test_shared test_shared_gate test_shared_more stress_gate)
for prog in "${programs[@]}"; do
    for lang in c cpp; do
        if [ "$lang" = c ]; then cc=(gcc -std=c11); else cc=(g++ -std=c++17 -x c++); fi
        for link in static shared; do
            bin="$out/$prog.$lang.$link"
            if [ "$link" = static ]; then libs=("${static_libs[@]}"); else libs=("${shared_libs[@]}"); fi
            step "build:$prog.$lang.$link" "${cc[@]}" "${cflags[@]}" "$here/$prog.c" -x none "${libs[@]}" -o "$bin"
            if [ "$link" = shared ]; then
                if readelf -d "$bin" | grep -q 'NEEDED.*libsurgeguard\.so\.0'; then pass; else fail "$bin does not load libsurgeguard.so.0"; fi
            fi
            step "run:$prog.$lang.$link" "$bin"
        done
    done
done

# 3. valgrind memcheck: zero errors, zero definite or indirect leaks.
vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect)
for prog in test_api test_gate test_shared test_shared_gate test_shared_more; do
    for build in c.static cpp.shared; do
        step "valgrind:$prog.$build" "${vg[@]}" "$out/$prog.$build"
    done
done
step "valgrind:stress_gate.c.static" "${vg[@]}" "$out/stress_gate.c.static" 150
step "valgrind:stress_gate.cpp.shared" "${vg[@]}" "$out/stress_gate.cpp.shared" 150

# 3a. The sweep (sweep_api.c): every function with hostile arguments, seeded; its call
# table is generated from the header (gen_sweep.py). SG_SWEEP_ITERS / SG_SWEEP_SEED run
# longer or other sweeps (make csweep runs a long one).
step "gen:sweep_calls" python3 "$here/gen_sweep.py" include/surgeguard.h "$out/sweep_calls.inc"
step "build:sweep_api.c.static" gcc -std=c11 "${cflags[@]}" -I"$out" "$here/sweep_api.c" -x none "${static_libs[@]}" -o "$out/sweep_api.c.static"
step "build:sweep_api.cpp.shared" g++ -std=c++17 -x c++ "${cflags[@]}" -I"$out" "$here/sweep_api.c" -x none "${shared_libs[@]}" -o "$out/sweep_api.cpp.shared"
step "run:sweep_api.c.static" timeout 300 "$out/sweep_api.c.static" "${SG_SWEEP_ITERS:-20000}" "${SG_SWEEP_SEED:-1}"
step "run:sweep_api.cpp.shared" timeout 300 "$out/sweep_api.cpp.shared" "${SG_SWEEP_ITERS:-20000}" "${SG_SWEEP_SEED:-2}"
step "valgrind:sweep_api.c.static" timeout 600 "${vg[@]}" "$out/sweep_api.c.static" "${SG_SWEEP_VG_ITERS:-3000}" "${SG_SWEEP_SEED:-3}"

# 3b. The conformance vectors (tests/vectors/README.md): the C replayer, C11 static, and
# once under valgrind.
step "build:replay_vectors.c.static" gcc -std=c11 "${cflags[@]}" "$here/replay_vectors.c" -x none "${static_libs[@]}" -o "$out/replay_vectors"
step "run:replay_vectors" "$out/replay_vectors" tests/vectors/vectors.txt
step "valgrind:replay_vectors" "${vg[@]}" "$out/replay_vectors" tests/vectors/vectors.txt
# The same vectors through the shared placement (sg_<type>_open_shared, anonymous).
step "run:replay_vectors.shared" "$out/replay_vectors" --shared tests/vectors/vectors.txt
# A changed expectation fails the replay: the first numeric expectation of the first
# scenario of each kind below gets a digit appended.
tamper() {
    local t="$out/tampered_$1.txt"
    awk -v K="$1" '/^scenario /{inside=($3==K)} inside && !d && /^step .*\| .*=[0-9]+$/ {sub(/[0-9]+$/, "&7"); d=1} {print}' \
        tests/vectors/vectors.txt >"$t"
    ! cmp -s "$t" tests/vectors/vectors.txt && ! "$out/replay_vectors" "$t" && ! "$out/replay_vectors" --shared "$t"
}
for k in limiter credits lag_meter watermarks paced_drain keyed deadline; do
    step "tamper:replay_vectors.$k" tamper "$k"
done

# 4. The example server, linked the way a user would: through pkg-config.
export PKG_CONFIG_PATH="$root/include"
pc_flags=$(pkg-config --define-variable=libdir="$libdir" --cflags --libs surgeguard)
pc_version=$(pkg-config --modversion surgeguard)
cargo_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
if [ "$pc_version" = "$cargo_version" ]; then pass; else fail "surgeguard.pc Version $pc_version != Cargo.toml $cargo_version"; fi
# shellcheck disable=SC2086
step "build:example_server.c" gcc -std=c11 -Wall -Wextra -Werror -pedantic "$here/example_server.c" -o "$out/example_server" $pc_flags -Wl,-rpath,"$libdir" -lpthread
# shellcheck disable=SC2086
step "build:example_server.cpp" g++ -std=c++17 -x c++ -Wall -Wextra -Werror -pedantic "$here/example_server.c" -x none -o "$out/example_server.cpp" $pc_flags -Wl,-rpath,"$libdir" -lpthread
# (timeout: a pump that misses a due wakeup leaves a waiter queued for good)
step "run:example_server" timeout 120 "$out/example_server"
step "valgrind:example_server" timeout 300 "${vg[@]}" "$out/example_server.cpp"

echo "ctest: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
