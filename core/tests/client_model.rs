#![cfg(not(loom))]
//! quickcheck models of the client-side controls: each runs random operations against the
//! real structure and a plain sequential reference, and checks the stated invariants
//! — retries ≤ percent × requests + min_per_sec × ttl; at most N half-open probes;
//! GCRA admits at most burst + rate × t — plus decision-for-decision agreement.

use quickcheck::{quickcheck, Arbitrary, Gen, TestResult};
use surgeguard_core::breaker::{
    BreakerPermit, BreakerState, BreakerWindow, CircuitBreaker, CircuitBreakerConfig,
};
use surgeguard_core::rate::{PacedDrain, PacedDrainConfig, RateLimiter};
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig, BUDGET_SLOTS, SCALE};
use surgeguard_core::throttle::{
    AdaptiveThrottle, AdaptiveThrottleConfig, ThrottleForm, THROTTLE_BUCKETS,
};
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::{Outcome, Reason};

const T0: u64 = 1_000 * SEC;

/// A time step: mostly short, sometimes long enough to expire windows.
fn step(g: &mut Gen, short: u64, long: u64) -> u64 {
    if u8::arbitrary(g) % 8 == 0 {
        u64::arbitrary(g) % long
    } else {
        u64::arbitrary(g) % short
    }
}

// ---------------------------------------------------------------------------------------
// Retry budget

#[derive(Clone, Debug)]
enum BudgetOp {
    Deposit(u64),
    Withdraw(u64),
}

#[derive(Clone, Debug)]
struct BudgetCase {
    ttl_s: u64,
    min_per_sec: u32,
    percent: f64,
    ops: Vec<BudgetOp>,
}

impl Arbitrary for BudgetCase {
    fn arbitrary(g: &mut Gen) -> Self {
        let percents = [0.0, 0.05, 0.1, 0.15, 0.2, 0.5, 1.0, 3.0];
        let n = usize::arbitrary(g) % 400;
        let ops = (0..n)
            .map(|_| {
                let dt = step(g, 200 * MS, 30 * SEC);
                // Retries are rarer than requests, as in life, but often enough to drain.
                if u8::arbitrary(g) % 3 == 0 {
                    BudgetOp::Withdraw(dt)
                } else {
                    BudgetOp::Deposit(dt)
                }
            })
            .collect();
        BudgetCase {
            ttl_s: 1 + u64::arbitrary(g) % 20,
            min_per_sec: u32::arbitrary(g) % 4,
            percent: *g.choose(&percents).unwrap(),
            ops,
        }
    }
}

fn budget_matches_model(case: BudgetCase) -> TestResult {
    let cfg = RetryBudgetConfig {
        ttl: case.ttl_s * SEC,
        min_retries_per_sec: case.min_per_sec,
        percent_can_retry: case.percent,
    };
    let budget = RetryBudget::new(cfg).unwrap();
    let (dep, wd, reserve) = (
        if case.percent == 0.0 { 0 } else { SCALE },
        budget.withdrawal_units(),
        budget.reserve_units(),
    );
    let width = cfg.ttl / BUDGET_SLOTS as u64;
    // The model: (epoch, deposits, withdrawals) per event, window = the last 10 slots.
    let mut events: Vec<(u64, i64, i64)> = Vec::new();
    let mut now = T0;
    let window = |events: &[(u64, i64, i64)], epoch: u64| {
        events
            .iter()
            .filter(|e| e.0 + BUDGET_SLOTS as u64 > epoch)
            .fold((0i64, 0i64), |acc, e| (acc.0 + e.1, acc.1 + e.2))
    };
    for op in case.ops {
        match op {
            BudgetOp::Deposit(dt) => {
                now += dt;
                budget.deposit(now);
                events.push((now / width, 1, 0));
            }
            BudgetOp::Withdraw(dt) => {
                now += dt;
                let epoch = now / width;
                let (d, w) = window(&events, epoch);
                let expected = reserve + dep * d - wd * w >= wd;
                let got = budget.try_withdraw(now);
                if got.is_ok() != expected {
                    return TestResult::error(format!("at {now}: got {got:?}, model {expected}"));
                }
                if let Err(r) = got {
                    assert_eq!(r.reason, Reason::BudgetExhausted);
                    continue;
                }
                events.push((epoch, 0, 1));
                // The invariant at every retry, over the window it is judged on (the last
                // ttl), in units and as the docs state it. (A later window may show more
                // retries than requests: deposits expire before the retries they funded.)
                let (d, w) = window(&events, epoch);
                if wd * w > reserve + dep * d {
                    return TestResult::error("window overspent");
                }
                let p = if case.percent == 0.0 { 0.0 } else { SCALE as f64 / wd as f64 };
                let bound = p * d as f64 + case.min_per_sec as f64 * case.ttl_s as f64;
                if w as f64 > bound + 1e-9 {
                    return TestResult::error(format!("{w} retries > {bound}"));
                }
            }
        }
    }
    let m = budget.metrics();
    let total = |f: fn(&(u64, i64, i64)) -> i64| events.iter().map(f).sum::<i64>() as u64;
    TestResult::from_bool(m.requests == total(|e| e.1) && m.retries_allowed == total(|e| e.2))
}

// ---------------------------------------------------------------------------------------
// Circuit breaker

#[derive(Clone, Debug)]
enum BreakerOp {
    /// Ask for a permit after `dt`.
    Acquire(u64),
    /// Report outstanding permit `index % len` after `dt`.
    Record { index: usize, outcome: u8, slow: bool, dt: u64 },
}

#[derive(Clone, Debug)]
struct BreakerCase {
    probes: u32,
    short_lease: bool,
    ignore_allowed: bool,
    ops: Vec<BreakerOp>,
}

impl Arbitrary for BreakerCase {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = usize::arbitrary(g) % 300;
        let ops = (0..n)
            .map(|_| {
                let dt = step(g, 300 * MS, 20 * SEC);
                if bool::arbitrary(g) {
                    BreakerOp::Acquire(dt)
                } else {
                    BreakerOp::Record {
                        index: usize::arbitrary(g),
                        outcome: u8::arbitrary(g) % 3,
                        slow: u8::arbitrary(g) % 4 == 0,
                        dt,
                    }
                }
            })
            .collect();
        BreakerCase {
            probes: 1 + u32::arbitrary(g) % 4,
            short_lease: bool::arbitrary(g),
            ignore_allowed: bool::arbitrary(g),
            ops,
        }
    }
}

fn breaker_admits_at_most_n_probes(case: BreakerCase) -> TestResult {
    let lease = if case.short_lease { SEC } else { 86_400 * SEC };
    let cfg = CircuitBreakerConfig {
        window: BreakerWindow::Count(8),
        minimum_calls: 4,
        open_duration: 2 * SEC,
        open_jitter: 0.5,
        half_open_probes: case.probes,
        probe_lease: lease,
        ramp_duration: 3 * SEC,
        slow_call_duration: SEC,
        seed: case.ops.len() as u64,
        ..CircuitBreakerConfig::default()
    };
    let b = CircuitBreaker::new(cfg).unwrap();
    let n = case.probes as usize;
    let mut now = T0;
    // Outstanding permits: (permit, issued at, half-open phase at issue).
    let mut out: Vec<(BreakerPermit, u64, u64)> = Vec::new();
    let mut phase = 0u64;
    let mut probes_in_phase = 0usize;
    let mut freed_in_phase = 0usize;
    for op in case.ops {
        match op {
            BreakerOp::Acquire(dt) => {
                now += dt;
                let before = b.state(now);
                match b.try_acquire(now) {
                    Ok(p) => {
                        if p.is_probe() {
                            let m = b.metrics(now);
                            if m.half_opened != phase {
                                (phase, probes_in_phase, freed_in_phase) = (m.half_opened, 0, 0);
                            }
                            probes_in_phase += 1;
                        } else if before == BreakerState::Open || before == BreakerState::HalfOpen {
                            return TestResult::error("a plain permit while not closed");
                        }
                        out.push((p, now, phase));
                    }
                    Err(r) => {
                        if r.reason != Reason::BreakerOpen {
                            return TestResult::error("wrong reason");
                        }
                        if before == BreakerState::Closed {
                            return TestResult::error("refused while closed");
                        }
                    }
                }
            }
            BreakerOp::Record { index, outcome, slow, dt } => {
                if out.is_empty() {
                    continue;
                }
                now += dt;
                let (permit, _, _) = out.swap_remove(index % out.len());
                let outcome = match outcome {
                    0 => Outcome::Success,
                    1 => Outcome::Dropped,
                    _ if case.ignore_allowed => Outcome::Ignored,
                    _ => Outcome::Success,
                };
                let was_probe = permit.is_probe();
                let m = b.metrics(now);
                b.record(permit, now, outcome, if slow { 2 * SEC } else { MS });
                if was_probe && outcome == Outcome::Ignored && m.half_opened == phase {
                    freed_in_phase += 1;
                }
            }
        }
        // Outstanding probes of the current phase with a live lease never exceed N.
        let m = b.metrics(now);
        if m.state == BreakerState::HalfOpen && m.half_opened == phase {
            let live = out
                .iter()
                .filter(|(p, at, ph)| p.is_probe() && *ph == phase && *at + lease > now)
                .count();
            if live > n {
                return TestResult::error(format!("{live} live probes > {n}"));
            }
        }
        // Without lease expiry, a phase admits N probes plus one per probe given back.
        if !case.short_lease && probes_in_phase > n + freed_in_phase {
            return TestResult::error(format!("{probes_in_phase} probes in a phase > {n}"));
        }
    }
    TestResult::passed()
}

#[derive(Clone, Debug)]
struct TripCase {
    count_window: bool,
    size: u32,
    minimum: u32,
    failure_pct: u8,
    slow_pct: u8,
    calls: Vec<(u64, bool, bool)>,
}

impl Arbitrary for TripCase {
    fn arbitrary(g: &mut Gen) -> Self {
        let size = 1 + u32::arbitrary(g) % 40;
        let n = usize::arbitrary(g) % 300;
        let fail_one_in = 2 + u8::arbitrary(g) % 6;
        TripCase {
            count_window: bool::arbitrary(g),
            size,
            minimum: 1 + u32::arbitrary(g) % size,
            failure_pct: 10 + u8::arbitrary(g) % 91,
            slow_pct: 10 + u8::arbitrary(g) % 91,
            calls: (0..n)
                .map(|_| {
                    (
                        step(g, 100 * MS, 5 * SEC),
                        u8::arbitrary(g) % fail_one_in == 0,
                        u8::arbitrary(g) % 5 == 0,
                    )
                })
                .collect(),
        }
    }
}

/// While closed, the breaker opens exactly when a plain reference of the window says so.
fn breaker_trips_exactly_when_the_window_says(case: TripCase) -> TestResult {
    let window = if case.count_window {
        BreakerWindow::Count(case.size)
    } else {
        BreakerWindow::Time(case.size as u64 * 100 * MS)
    };
    let cfg = CircuitBreakerConfig {
        window,
        minimum_calls: case.minimum,
        failure_rate_threshold: case.failure_pct as f64 / 100.0,
        slow_call_rate_threshold: case.slow_pct as f64 / 100.0,
        slow_call_duration: SEC,
        ..CircuitBreakerConfig::default()
    };
    let b = CircuitBreaker::new(cfg).unwrap();
    let bucket = case.size as u64 * 10 * MS;
    let mut seen: Vec<(u64, bool, bool)> = Vec::new();
    let mut now = T0;
    for (dt, failed, slow) in case.calls {
        now += dt;
        let permit = b.try_acquire(now).unwrap();
        let outcome = if failed { Outcome::Dropped } else { Outcome::Success };
        b.record(permit, now, outcome, if slow { SEC } else { MS });
        seen.push((now, failed, slow));
        let in_window: Vec<_> = if case.count_window {
            seen.iter().rev().take(case.size as usize).collect()
        } else {
            let epoch = now / bucket;
            seen.iter().filter(|c| c.0 / bucket + 10 > epoch).collect()
        };
        let calls = in_window.len() as u64;
        let f = in_window.iter().filter(|c| c.1).count() as u64;
        let s = in_window.iter().filter(|c| c.2).count() as u64;
        let trips = calls >= case.minimum as u64
            && (f * 100 >= case.failure_pct as u64 * calls
                || s * 100 >= case.slow_pct as u64 * calls);
        let open = b.state(now) == BreakerState::Open;
        if open != trips {
            return TestResult::error(format!("model {trips} ({calls}, {f}, {s}), open {open}"));
        }
        if open {
            break;
        }
    }
    TestResult::passed()
}

// ---------------------------------------------------------------------------------------
// GCRA and paced drain

#[derive(Clone, Debug)]
struct GcraCase {
    emission: u64,
    burst: u32,
    ops: Vec<(u64, u32, bool)>,
}

impl Arbitrary for GcraCase {
    fn arbitrary(g: &mut Gen) -> Self {
        let emission = 1 + u64::arbitrary(g) % 1000;
        let burst = 1 + u32::arbitrary(g) % 8;
        let n = usize::arbitrary(g) % 300;
        GcraCase {
            emission,
            burst,
            ops: (0..n)
                .map(|_| {
                    (
                        step(g, emission * 2, emission * 50),
                        1 + u32::arbitrary(g) % (burst + 1),
                        bool::arbitrary(g),
                    )
                })
                .collect(),
        }
    }
}

/// Decision-for-decision a token bucket of `burst` tokens refilled one per emission
/// interval (in ns of credit), and never more than burst + rate × t in any interval.
fn gcra_is_a_token_bucket_and_bounded(case: GcraCase) -> TestResult {
    let l = RateLimiter::with_interval(case.emission, case.burst).unwrap();
    let (t, cap) = (case.emission as u128, case.emission as u128 * case.burst as u128);
    let mut credit = cap;
    let mut now = T0;
    let mut last = now;
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    for (dt, cost, take_up_to) in case.ops {
        now += dt;
        credit = (credit + (now - last) as u128).min(cap);
        last = now;
        if take_up_to {
            let n = l.take_up_to(now, cost);
            let expected = (credit / t).min(cost as u128) as u32;
            if n != expected {
                return TestResult::error(format!("take_up_to {n}, model {expected}"));
            }
            credit -= n as u128 * t;
            admitted.push((now, n as u64));
        } else {
            let need = cost as u128 * t;
            match l.check(now, cost) {
                Ok(()) if credit >= need => {
                    credit -= need;
                    admitted.push((now, cost as u64));
                }
                Err(r) if cost > case.burst && r.retry_after == u64::MAX => {}
                Err(r) if cost <= case.burst && credit < need => {
                    if r.retry_after as u128 != need - credit {
                        return TestResult::error("wrong wait");
                    }
                }
                other => return TestResult::error(format!("{other:?} with credit {credit}")),
            }
        }
    }
    // burst + rate × T over every interval [a, b] of admissions.
    for (i, a) in admitted.iter().enumerate() {
        let mut sum = 0;
        for b in &admitted[i..] {
            sum += b.1;
            if sum > case.burst as u64 + (b.0 - a.0) / case.emission {
                return TestResult::error("over burst + rate × t");
            }
        }
    }
    TestResult::passed()
}

fn paced_drain_never_exceeds_its_rate(steps: Vec<(u16, u32)>, headroom: u8, burst: u8) -> bool {
    let cfg = PacedDrainConfig {
        target_per_sec: 1000.0,
        headroom: (headroom % 100) as f64 / 100.0,
        burst: 1 + burst as u32 % 50,
    };
    let d = PacedDrain::new(cfg).unwrap();
    let emission = (SEC as f64 / d.drain_per_sec()).round() as u64;
    let mut now = T0;
    let mut started: Vec<(u64, u64)> = Vec::new();
    for (dt, backlog) in steps {
        now += dt as u64 * 10_000;
        let n = d.permits(now, backlog as u64);
        if n as u64 > backlog as u64 {
            return false;
        }
        started.push((now, n as u64));
    }
    (0..started.len()).all(|i| {
        let mut sum = 0;
        started[i..].iter().all(|b| {
            sum += b.1;
            sum <= cfg.burst as u64 + (b.0 - started[i].0) / emission
        })
    })
}

// ---------------------------------------------------------------------------------------
// Adaptive throttle

#[derive(Clone, Debug)]
struct ThrottleCase {
    ema: bool,
    k10: u8,
    cap_pct: u8,
    ops: Vec<(u64, bool, bool, u64)>,
}

impl Arbitrary for ThrottleCase {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = usize::arbitrary(g) % 400;
        ThrottleCase {
            ema: bool::arbitrary(g),
            k10: 10 + u8::arbitrary(g) % 30,
            cap_pct: u8::arbitrary(g) % 101,
            ops: (0..n)
                .map(|_| {
                    (
                        step(g, 2 * SEC, 200 * SEC),
                        bool::arbitrary(g),
                        u8::arbitrary(g) % 3 != 0,
                        u64::arbitrary(g),
                    )
                })
                .collect(),
        }
    }
}

/// The ring form decides exactly as the SRE formula over the last 120 buckets; both forms
/// keep p in [0, cap].
fn throttle_matches_the_sre_formula(case: ThrottleCase) -> TestResult {
    let cfg = AdaptiveThrottleConfig {
        k: case.k10 as f64 / 10.0,
        max_drop_probability: case.cap_pct as f64 / 100.0,
        form: if case.ema { ThrottleForm::Ema } else { ThrottleForm::Ring },
        ..AdaptiveThrottleConfig::default()
    };
    let t = AdaptiveThrottle::new(cfg).unwrap();
    let width = cfg.window / THROTTLE_BUCKETS as u64;
    let mut events: Vec<(u64, bool)> = Vec::new();
    let mut now = T0;
    for (dt, is_record, accepted, rand) in case.ops {
        now += dt;
        let epoch = now / width;
        if is_record {
            t.record(now, accepted);
            events.push((epoch, accepted));
            continue;
        }
        let p = t.drop_probability(now);
        if !(0.0..=cfg.max_drop_probability).contains(&p) {
            return TestResult::error(format!("p = {p}"));
        }
        let refused = t.should_throttle(now, rand).is_err();
        let u = (rand >> 11) as f64 / (1u64 << 53) as f64;
        if refused != (u < p) {
            return TestResult::error("decision disagrees with p");
        }
        if !case.ema {
            let live = events.iter().filter(|e| e.0 + THROTTLE_BUCKETS as u64 > epoch);
            let (r, a) = live.fold((0.0, 0.0), |acc, e| (acc.0 + 1.0, acc.1 + e.1 as u8 as f64));
            let model = ((r - cfg.k * a) / (r + 1.0)).max(0.0).min(cfg.max_drop_probability);
            if p != model {
                return TestResult::error(format!("p {p} model {model}"));
            }
        }
        if refused {
            events.push((epoch, false));
        }
    }
    TestResult::passed()
}

#[test]
fn quickcheck_budget() {
    quickcheck(budget_matches_model as fn(BudgetCase) -> TestResult);
}

#[test]
fn quickcheck_breaker_probes() {
    quickcheck(breaker_admits_at_most_n_probes as fn(BreakerCase) -> TestResult);
}

#[test]
fn quickcheck_breaker_trips() {
    quickcheck(breaker_trips_exactly_when_the_window_says as fn(TripCase) -> TestResult);
}

#[test]
fn quickcheck_gcra() {
    quickcheck(gcra_is_a_token_bucket_and_bounded as fn(GcraCase) -> TestResult);
}

#[test]
fn quickcheck_paced_drain() {
    quickcheck(paced_drain_never_exceeds_its_rate as fn(Vec<(u16, u32)>, u8, u8) -> bool);
}

#[test]
fn quickcheck_throttle() {
    quickcheck(throttle_matches_the_sre_formula as fn(ThrottleCase) -> TestResult);
}

/// The retry budget's one progress caveat, pinned: with credit to spare (a reserve far
/// above what is withdrawn), concurrent withdrawals crossing many slot boundaries are
/// refused only while another thread folds, and such a refusal says `BudgetExhausted`
/// with `retry_after` 0; every other withdrawal is allowed, and the books balance. The
/// same calls on one thread are never refused.
#[test]
#[cfg_attr(miri, ignore)] // threads and many slots: too slow under Miri
fn retry_budget_fold_refusals() {
    use std::sync::Arc;
    const THREADS: u64 = 2;
    const CALLS: u64 = 20_000;
    // 1 s ttl: a slot is 100 ms, and every call starts a new one, so the two threads fold
    // against each other all the time. The reserve (10^6 retries per second) never runs out.
    let cfg =
        RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 1_000_000, percent_can_retry: 0.1 };
    let single = RetryBudget::new(cfg).unwrap();
    for i in 0..THREADS * CALLS {
        assert!(single.try_withdraw(1_000 * SEC + (i / THREADS) * 100 * MS).is_ok(), "call {i}");
    }
    let b = Arc::new(RetryBudget::new(cfg).unwrap());
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut refused = 0u64;
                for i in 0..CALLS {
                    if let Err(r) = b.try_withdraw(1_000 * SEC + i * 100 * MS) {
                        assert_eq!((r.reason, r.retry_after), (Reason::BudgetExhausted, 0));
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let refused: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let m = b.metrics();
    assert_eq!(m.retries_denied, refused);
    assert_eq!(m.retries_allowed + m.retries_denied, THREADS * CALLS);
    eprintln!("refused during folds: {refused} of {}", THREADS * CALLS);
}
