# surgeguard — one entry point for humans and CI.
#   make test   all checks: fmt, clippy (-D warnings), unit/integration/doc tests, loom, no_std
#               builds, Miri (pinned nightly), C/C++ under valgrind, pytest, node --test
#   make demo   the main job: the overload simulator's comparison table and plots
#   make bench  criterion benchmarks beside the peers (writes target/criterion)
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
NO_STD_TARGET := aarch64-unknown-none
# Cortex-M4/M7 (32-bit CAS, no 64-bit atomics) and Cortex-M0+ (no CAS): portable-atomic.
MCU_TARGETS := thumbv7em-none-eabihf thumbv6m-none-eabi
LOOM_TESTS := $(patsubst core/tests/%.rs,%,$(wildcard core/tests/loom_*.rs))

.PHONY: test setup fmt clippy unit loom nostd ctest csweep demo bench pytest miri nodetest

test: setup fmt clippy unit loom nostd miri ctest pytest nodetest
	@echo "make test: all checks passed"

# Everything a fresh machine of this kind needs (idempotent).
setup:
	rustup component add rustfmt clippy >/dev/null 2>&1 || rustup component add rustfmt clippy
	rustup target add $(NO_STD_TARGET) $(MCU_TARGETS) >/dev/null 2>&1 || rustup target add $(NO_STD_TARGET) $(MCU_TARGETS)

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	RUSTFLAGS=-Dwarnings $(CARGO) clippy --workspace --all-targets --quiet

unit:
	RUSTFLAGS=-Dwarnings $(CARGO) test --workspace --quiet
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
# Miri (the quickcheck suites and statistical tests, which use fewer cases or are ignored
# under cfg(miri)); these take ~2 min.
MIRI_TOOLCHAIN ?= nightly-2026-10-30
MIRI_CORE_TESTS := limiter:: stats:: time:: rng:: sync:: codel:: queue:: gate:: retry:: rate:: \
  breaker:: flow:: keyed::
miri:
	rustup toolchain install $(MIRI_TOOLCHAIN) --profile minimal --component miri,rust-src >/dev/null 2>&1 \
	  || rustup toolchain install $(MIRI_TOOLCHAIN) --profile minimal --component miri,rust-src
	$(CARGO) +$(MIRI_TOOLCHAIN) miri setup >/dev/null
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -q -p surgeguard-core --lib -- $(MIRI_CORE_TESTS)
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -q -p surgeguard-ffi --test permit

demo:
	$(CARGO) run --release --quiet -p surgeguard-sim

bench:
	$(CARGO) bench -p surgeguard-bench

# Python package: a project-local venv, `pip install ./bindings-python` (maturin builds the
# native module), test deps, then pytest. Exit 5 (no tests collected) is a failure here.
PYTHON ?= python3
VENV := .venv
pytest:
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check ./bindings-python -r bindings-python/tests/requirements.txt
	@cd bindings-python && rc=0 && ../$(VENV)/bin/python -m pytest -q -p no:cacheprovider || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest: no tests were collected" >&2; exit 1; fi; exit $$rc

# Differential fuzzing of the Gate (core/tests/gate_fuzz.rs) at length: a bounded slice
# of it runs in `make test` (unit); this runs SG_FUZZ_CASES cases in release mode.
.PHONY: fuzz
SG_FUZZ_CASES ?= 20000
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

# The limit algorithms' robustness sweep: every algorithm on nine closed-loop scenarios
# (five it was tuned on, four it was not), 200 seeds each; a min / median table and the
# goals. SWEEP_SEEDS / SWEEP_THREADS override. A 10-seed slice runs in `make unit`
# (sim/tests/sweep.rs).
SWEEP_SEEDS ?= 200
SWEEP_THREADS ?= 2
.PHONY: sweep
sweep:
	$(CARGO) run --release --quiet -p surgeguard-sim --bin sweep -- $(SWEEP_SEEDS) $(SWEEP_THREADS)
