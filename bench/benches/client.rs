//! Client-side controls, one uncontended thread, beside `governor` in the same run.
//!
//! Workload simulated: the per-request cost a client pays on its hot path —
//! a retry-budget check (a deposit for the request and a withdrawal for a retry), a breaker
//! admit + record of a successful call, and a GCRA rate-limit check that passes. Time
//! advances 1 µs per iteration (`now` is an argument in surgeguard, so no clock is read).
//!
//! Peers: governor's direct `RateLimiter::check` with its default clock (quanta, what users
//! run) and with `FakeRelativeClock` (no clock cost, like ours). Floor: one atomic
//! `fetch_add`. Report ratios to governor's check. The fleet-leased rate limit's take
//! (`TokenLease::try_take`) is reported against the in-process GCRA check.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter as Governor};
use surgeguard_core::breaker::{CircuitBreaker, CircuitBreakerConfig};
use surgeguard_core::fleet::{TokenLease, TokenLeaseConfig};
use surgeguard_core::rate::RateLimiter;
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::time::{MS, SEC, US};
use surgeguard_core::Outcome;

fn client(c: &mut Criterion) {
    let mut g = c.benchmark_group("client");

    let floor = AtomicU64::new(0);
    g.bench_function("floor/atomic_fetch_add", |b| {
        b.iter(|| black_box(floor.fetch_add(1, Ordering::Relaxed)))
    });

    // Never refuses: a huge rate and burst, so both sides take the admit path.
    let quota = Quota::per_second(NonZeroU32::MAX);
    let governor = Governor::direct(quota);
    g.bench_function("governor/check", |b| b.iter(|| black_box(governor.check().is_ok())));
    let governor_fake = Governor::direct_with_clock(quota, FakeRelativeClock::default());
    g.bench_function("governor/check_fake_clock", |b| {
        b.iter(|| black_box(governor_fake.check().is_ok()))
    });

    let gcra = RateLimiter::with_interval(1, 1_000_000_000).unwrap();
    let mut now = 1000 * SEC;
    g.bench_function("surgeguard/gcra_check", |b| {
        b.iter(|| {
            now += US;
            black_box(gcra.check(black_box(now), 1).is_ok())
        })
    });

    // The fleet-leased rate limit's hot path: tokens of a TokenLease (re-granted when spent,
    // once per million takes), beside the in-process GCRA above (goal: at most 1.5x it).
    let lease = TokenLease::new(TokenLeaseConfig {
        rate_per_sec: 1e12,
        burst: 1_000_000_000,
        max_batch: 1_000_000,
        ..TokenLeaseConfig::default()
    })
    .unwrap();
    g.bench_function("surgeguard/fleet_token_take", |b| {
        b.iter(|| {
            now += US;
            if lease.try_take(black_box(now), 1).is_err() {
                lease.grant(now, 1_000_000, 3600 * SEC, 1);
            }
        })
    });

    // 100 % retries so the balance stays level: every deposit funds the next withdrawal.
    let budget = RetryBudget::new(RetryBudgetConfig {
        percent_can_retry: 1.0,
        ..RetryBudgetConfig::default()
    })
    .unwrap();
    g.bench_function("surgeguard/budget_deposit_withdraw", |b| {
        b.iter(|| {
            now += US;
            budget.deposit(black_box(now));
            black_box(budget.try_withdraw(now).is_ok())
        })
    });

    let breaker = CircuitBreaker::new(CircuitBreakerConfig::default()).unwrap();
    g.bench_function("surgeguard/breaker_admit_record", |b| {
        b.iter(|| {
            now += US;
            let permit = breaker.try_acquire(black_box(now)).unwrap();
            breaker.record(permit, now, Outcome::Success, black_box(MS));
        })
    });

    g.finish();
}

criterion_group!(benches, client);
criterion_main!(benches);
