#![cfg(loom)]
//! loom models of the client-side controls, tiny on purpose (two threads, a few steps):
//! breaker half-open probe slots, the GCRA compare-and-swap, budget deposit/withdraw, and
//! a withdrawal racing a fold.
//!
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p surgeguard-core --release --test loom_client

use loom::sync::Arc;
use loom::thread;
use surgeguard_core::breaker::{BreakerState, BreakerWindow, CircuitBreaker, CircuitBreakerConfig};
use surgeguard_core::rate::RateLimiter;
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::Outcome;

const T: u64 = 100 * SEC;

fn breaker(probes: u32) -> CircuitBreaker {
    let cfg = CircuitBreakerConfig {
        window: BreakerWindow::Count(1),
        minimum_calls: 1,
        open_duration: SEC,
        open_jitter: 0.0,
        half_open_probes: probes,
        probe_lease: 10 * SEC,
        ramp_duration: 0,
        ..CircuitBreakerConfig::default()
    };
    let b = CircuitBreaker::new(cfg).unwrap();
    let p = b.try_acquire(T).unwrap();
    b.record(p, T, Outcome::Dropped, MS);
    assert_eq!(b.state(T), BreakerState::Open);
    b
}

/// Two callers arrive together as the open period ends: exactly one gets the single probe
/// slot, and its report closes the breaker.
#[test]
fn one_probe_slot_two_callers() {
    loom::model(|| {
        let b = Arc::new(breaker(1));
        let t = T + SEC;
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.try_acquire(t).ok())
            })
            .collect();
        let permits: Vec<_> = handles.into_iter().filter_map(|h| h.join().unwrap()).collect();
        assert_eq!(permits.len(), 1);
        let p = permits.into_iter().next().unwrap();
        assert!(p.is_probe());
        b.record(p, t, Outcome::Success, MS);
        assert_eq!(b.state(t), BreakerState::Closed);
    });
}

/// Two probes report at once (each may miss the other's report); the breaker still ends up
/// closed — by one of them, or by the next caller — never stuck half-open.
#[test]
fn concurrent_probe_reports_never_stick_half_open() {
    loom::model(|| {
        let b = Arc::new(breaker(2));
        let t = T + SEC;
        let p1 = b.try_acquire(t).unwrap();
        let p2 = b.try_acquire(t).unwrap();
        assert!(b.try_acquire(t).is_err());
        let b1 = b.clone();
        let h1 = thread::spawn(move || b1.record(p1, t, Outcome::Success, MS));
        let b2 = b.clone();
        let h2 = thread::spawn(move || b2.record(p2, t, Outcome::Success, MS));
        h1.join().unwrap();
        h2.join().unwrap();
        let next = b.try_acquire(t).unwrap();
        assert!(!next.is_probe());
        assert_eq!(b.state(t), BreakerState::Closed);
        assert_eq!(b.metrics(t).closed, 1);
    });
}

/// Burst of one: two callers at the same instant, exactly one passes, and the word ends at
/// one emission interval past `now`.
#[test]
fn gcra_cas_admits_exactly_the_burst() {
    loom::model(|| {
        let l = Arc::new(RateLimiter::with_interval(10, 1).unwrap());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || l.check(1000, 1).is_ok())
            })
            .collect();
        let passed = handles.into_iter().map(|h| h.join().unwrap()).filter(|ok| *ok).count();
        assert_eq!(passed, 1);
        assert_eq!(l.wait_time(1000, 1), 10);
        let m = l.metrics();
        assert_eq!((m.allowed, m.denied), (1, 1));
    });
}

/// A reserve of exactly one retry: two concurrent withdrawals, exactly one succeeds.
#[test]
fn budget_never_overspends_under_concurrent_withdrawals() {
    loom::model(|| {
        let cfg = RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 1, percent_can_retry: 1.0 };
        let b = Arc::new(RetryBudget::new(cfg).unwrap());
        assert_eq!(b.available(T), 1); // folds the first slot before the threads start
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.try_withdraw(T).is_ok())
            })
            .collect();
        let ok = handles.into_iter().map(|h| h.join().unwrap()).filter(|ok| *ok).count();
        assert_eq!(ok, 1);
        let m = b.metrics();
        assert_eq!((m.retries_allowed, m.retries_denied, m.available), (1, 1, 0));
    });
}

/// A deposit racing a withdrawal: the withdrawal succeeds only if the deposit funded it,
/// and the books balance either way.
#[test]
fn budget_deposit_and_withdraw_keep_the_books() {
    loom::model(|| {
        let cfg = RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 0, percent_can_retry: 1.0 };
        let b = Arc::new(RetryBudget::new(cfg).unwrap());
        assert_eq!(b.available(T), 0);
        let bd = b.clone();
        let depositor = thread::spawn(move || bd.deposit(T));
        let bw = b.clone();
        let withdrawer = thread::spawn(move || bw.try_withdraw(T).is_ok());
        depositor.join().unwrap();
        let withdrew = withdrawer.join().unwrap();
        let m = b.metrics();
        assert_eq!(m.requests, 1);
        assert_eq!(m.retries_allowed, withdrew as u64);
        assert_eq!(m.available, 1 - withdrew as u64);
    });
}

/// A withdrawal with an old `now` races a caller whose `now` starts a new slot and
/// expires the only deposit: the old caller may spend the deposit only before it expires,
/// the new one never, and never both.
#[test]
fn budget_fold_racing_a_withdrawal_never_spends_expired_credit() {
    loom::model(|| {
        let cfg = RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 0, percent_can_retry: 1.0 };
        let b = Arc::new(RetryBudget::new(cfg).unwrap());
        b.deposit(T);
        let late = b.clone();
        let new_slot = thread::spawn(move || late.try_withdraw(T + SEC).is_ok());
        let early = b.clone();
        let old_slot = thread::spawn(move || early.try_withdraw(T).is_ok());
        assert!(!new_slot.join().unwrap());
        let spent = old_slot.join().unwrap();
        let m = b.metrics();
        assert_eq!((m.requests, m.retries_allowed, m.available), (1, spent as u64, 0));
    });
}

/// The reserve (one retry) is already spent in the closing slot: neither the caller who
/// folds the next slot nor an old caller racing the fold may spend it again.
#[test]
fn budget_fold_racing_a_withdrawal_never_double_spends() {
    loom::model(|| {
        let cfg = RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 1, percent_can_retry: 1.0 };
        let b = Arc::new(RetryBudget::new(cfg).unwrap());
        assert!(b.try_withdraw(T).is_ok());
        let folder = b.clone();
        let next_slot = thread::spawn(move || folder.try_withdraw(T + 100 * MS).is_ok());
        let racer = b.clone();
        let old_slot = thread::spawn(move || racer.try_withdraw(T).is_ok());
        assert!(!next_slot.join().unwrap());
        assert!(!old_slot.join().unwrap());
        assert_eq!(b.metrics().retries_allowed, 1);
    });
}

/// Two withdrawals reach a new slot at once with credit to spare: the one that folds is
/// allowed; the other is allowed too, or — if it looked twice while the fold was still
/// running — refused with `retry_after` 0 (the documented caveat), never with a hint that
/// pretends the budget is spent.
#[test]
fn budget_withdrawal_during_a_fold_is_allowed_or_refused_with_zero_hint() {
    loom::model(|| {
        let cfg = RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 100, percent_can_retry: 1.0 };
        let b = Arc::new(RetryBudget::new(cfg).unwrap());
        assert!(b.try_withdraw(T).is_ok());
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.try_withdraw(T + 100 * MS))
            })
            .collect();
        let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(results.iter().any(Result::is_ok), "the folder is never refused");
        for r in results.iter().filter_map(|r| r.err()) {
            assert_eq!(r.retry_after, 0);
        }
        let m = b.metrics();
        assert_eq!(m.retries_allowed + m.retries_denied, 3);
    });
}
