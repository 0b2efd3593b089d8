//! A `RawPermit` dropped without `release_raw` is a lost slot, so dropping one is loud:
//! the process-wide `leaked_permits` counter always counts it, and with the `std` feature
//! a debug build panics (unless the thread is already panicking). Run the panic checks
//! with `cargo test -p surgeguard-core --features std --test limiter_permit_drop`.
//!
//! The tests here share one process-wide counter, so they run under one lock.
#![cfg(not(loom))]

use std::sync::Mutex;
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::limiter::leaked_permits;
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, UsageError};

static SERIAL: Mutex<()> = Mutex::new(());

fn limiter() -> Limiter {
    Limiter::new(LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: 4.0,
        min_limit: 1.0,
        max_limit: 4.0,
    })))
    .unwrap()
}

#[test]
fn released_permits_are_not_counted_as_leaked() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = leaked_permits();
    let (a, b) = (limiter(), limiter());
    let p = a.try_acquire_raw(1, Priority::NORMAL).unwrap();
    let q = a.try_acquire_raw(1, Priority::NORMAL).unwrap();
    a.release_raw(p, 2, Outcome::Success).unwrap();
    // Refusals consume the permit without counting it (the C ABI keeps its own copy).
    assert!(!b.owns(&q) && a.owns(&q));
    assert_eq!(b.release_raw(q, 2, Outcome::Success), Err(UsageError::ForeignHandle));
    assert_eq!(a.inflight(), 1, "a refusal changes nothing: one slot still held");
    // `Permit` releases itself on drop (as Ignored).
    drop(a.try_acquire(4, Priority::NORMAL).unwrap());
    assert_eq!(a.inflight(), 1);
    assert_eq!(leaked_permits(), before);
}

#[test]
fn a_dropped_raw_permit_is_counted() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let l = limiter();
    let before = leaked_permits();
    let p = l.try_acquire_raw(1, Priority::NORMAL).unwrap();
    // Unwinding past a held permit (another panic in flight) counts it and never aborts.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = p;
        panic!("user code failed while holding a permit");
    }));
    assert!(unwound.is_err());
    assert_eq!(leaked_permits(), before + 1);
    assert_eq!(l.inflight(), 1, "the slot is lost");
    let q = l.try_acquire_raw(2, Priority::NORMAL).unwrap();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(q)));
    assert_eq!(leaked_permits(), before + 2);
    // With `std` in a debug build, the plain drop panics; without `std`, only the count.
    let loud = cfg!(all(feature = "std", debug_assertions));
    assert_eq!(dropped.is_err(), loud);
}

#[test]
fn a_permit_released_at_an_out_of_range_now_still_returns_its_slot() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let l = limiter();
    let before = leaked_permits();
    l.try_acquire(5, Priority::NORMAL).unwrap().release(u64::MAX, Outcome::Success);
    assert_eq!(l.inflight(), 0);
    assert_eq!(l.metrics().successes, 1);
    assert_eq!(leaked_permits(), before);
}
