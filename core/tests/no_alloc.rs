//! No code path of the core allocates: every structure is built and driven through its
//! hot and cold paths (admission, release, window folds, rejections, metrics, the kill
//! switch) under a global allocator that counts allocations made by this thread.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use surgeguard_core::backoff::{Backoff, BackoffConfig};
use surgeguard_core::breaker::{CircuitBreaker, CircuitBreakerConfig};
use surgeguard_core::flow::{
    Credits, CreditsConfig, LagMeter, LagMeterConfig, Watermarks, WatermarksConfig,
};
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::keyed::{actionable, KeyedConfig, KeyedLimits};
use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, FixedConfig, Gradient2Config, GradientConfig, HysteresisConfig,
    VegasConfig,
};
use surgeguard_core::rate::{PacedDrain, PacedDrainConfig, RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::{
    RetryBudget, RetryBudgetConfig, TokenRetryThrottle, TokenThrottleConfig,
};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::stats::{Ewma, Histogram, SampleWindow, WindowedMin};
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get)
}

const MS: u64 = 1_000_000;

fn drive_limiter(algorithm: AlgorithmConfig) {
    let limiter = Limiter::new(LimiterConfig::with_algorithm(algorithm)).unwrap();
    let mut now = 0;
    for i in 0..5_000u64 {
        let level = Priority::new((i % 3) as u8).unwrap();
        let mut held = [None, None, None, None];
        for slot in held.iter_mut() {
            *slot = limiter.try_acquire(now, level).ok();
        }
        now += MS;
        for (k, p) in held.into_iter().enumerate() {
            if let Some(p) = p {
                let outcome =
                    if i % 50 == 0 && k == 0 { Outcome::Dropped } else { Outcome::Success };
                p.release(now + (i % 7) * MS, outcome);
            }
        }
        if i == 2_000 {
            limiter.set_static_limit(Some(5.0)).unwrap();
        }
        if i == 3_000 {
            limiter.set_static_limit(None).unwrap();
        }
    }
    let m = limiter.metrics();
    assert!(m.windows > 0 && m.successes > 0);
}

fn drive_gate() {
    let gate: Gate<64> = Gate::new(GateConfig::default()).unwrap();
    let mut held = [const { None }; 16];
    let mut events = [const { None }; 8];
    for i in 0..20_000u64 {
        let now = i * MS / 4;
        let level = Priority::new((i % 3) as u8).unwrap();
        let deadline = (i % 5 == 0).then_some(now + 30 * MS);
        match gate.arrive(now, level, deadline) {
            Arrival::Admitted(p) => {
                if let Some(old) = held[(i % 16) as usize].replace(p) {
                    gate.release(old, now, Outcome::Success).unwrap();
                }
            }
            Arrival::Queued(t) if i % 7 == 0 => {
                let _ = gate.cancel(t);
            }
            Arrival::Queued(_) | Arrival::Rejected(_) => {}
        }
        let n = gate.poll(now, &mut events);
        for e in events[..n].iter_mut() {
            if let Some(Event::Granted(_, p)) = e.take() {
                gate.release(p, now + MS, Outcome::Dropped).unwrap();
            }
        }
        if i == 10_000 {
            gate.set_shed_level(Priority::new(2));
        }
        let _ = gate.next_wakeup(now);
    }
    for p in held.iter_mut().filter_map(Option::take) {
        gate.release(p, 6 * 1_000 * MS, Outcome::Ignored).unwrap();
    }
    let _ = (gate.metrics(), gate.state());
}

fn drive_client_controls() {
    let budget = RetryBudget::new(RetryBudgetConfig::default()).unwrap();
    let tokens = TokenRetryThrottle::new(TokenThrottleConfig::default()).unwrap();
    let throttle = AdaptiveThrottle::new(AdaptiveThrottleConfig::default()).unwrap();
    let breaker = CircuitBreaker::new(CircuitBreakerConfig::default()).unwrap();
    let rate = RateLimiter::new(RateLimiterConfig { per_second: 100.0, burst: 10 }).unwrap();
    let drain = PacedDrain::new(PacedDrainConfig::new(1_000.0)).unwrap();
    let keyed: KeyedLimits<64> = KeyedLimits::new(KeyedConfig::new(4)).unwrap();
    let mut backoff = Backoff::new(BackoffConfig::default()).unwrap();
    let mut rng = SplitMix64::new(7);
    let mut body = [0u8; 256];
    for i in 0..20_000u64 {
        let now = i * MS;
        budget.deposit(now);
        let _ = budget.try_withdraw(now);
        tokens.record(i % 3 != 0);
        let _ = tokens.try_retry();
        throttle.record(now, i % 4 != 0);
        let _ = throttle.should_throttle(now, rng.next_u64());
        if let Ok(p) = breaker.try_acquire(now) {
            let outcome = if i % 5 < 3 { Outcome::Dropped } else { Outcome::Success };
            breaker.record(p, now + MS, outcome, MS);
        }
        let _ = rate.check(now, 1);
        let _ = drain.permits(now, 1_000);
        let _ = backoff.next_delay((i % 6) as u32, None, &mut rng);
        match keyed.try_acquire(i % 17, now, 1) {
            Ok(p) => keyed.release(p).unwrap(),
            Err(r) => {
                let _ = actionable(&r).write_json(&mut body);
            }
        }
    }
    let _ = (budget.metrics(), tokens.metrics(), throttle.metrics(), breaker.metrics(0));
    let _ = (rate.metrics(), drain.metrics(), keyed.metrics());
}

#[test]
fn no_structure_allocates() {
    let n = allocations_in(|| {
        drive_limiter(AlgorithmConfig::Fixed(FixedConfig::default()));
        drive_limiter(AlgorithmConfig::Aimd(AimdConfig::default()));
        drive_limiter(AlgorithmConfig::Hysteresis(HysteresisConfig::default()));
        drive_limiter(AlgorithmConfig::Gradient(GradientConfig::default()));
        drive_limiter(AlgorithmConfig::Gradient2(Gradient2Config::default()));
        drive_limiter(AlgorithmConfig::Vegas(VegasConfig::default()));

        let mut h = Histogram::new();
        let mut w = SampleWindow::new(10 * MS, 5);
        let mut e = Ewma::new(0.1).unwrap();
        let mut m = WindowedMin::new(100 * MS);
        for i in 0..1_000u64 {
            h.record(i * 1_000);
            w.record(i * MS, i * 1_000, 3);
            e.update(i as f64);
            m.update(i * MS, 1_000 - i);
            let _ = w.try_close(i * MS, 3);
        }
        assert!(h.quantile(0.99) > 0);

        let credits = Credits::new(CreditsConfig::default()).unwrap();
        credits.grant(10);
        for _ in 0..20 {
            let _ = credits.try_take(1);
        }
        let _ = credits.complete(5);
        let lag: LagMeter<61> = LagMeter::new(LagMeterConfig::default()).unwrap();
        let marks = Watermarks::new(WatermarksConfig::default()).unwrap();
        for i in 0..500u64 {
            lag.record_produced(i * 10 * MS, 12);
            lag.record_consumed(i * 10 * MS, 10);
            let _ = marks.observe(i * MS, i * 37 % 400);
        }
        let _ = lag.time_to_drain(5 * 1_000 * MS);
        let _ = (credits.metrics(), lag.metrics(5_000 * MS), marks.metrics(5_000 * MS));

        drive_client_controls();
        drive_gate();
    });
    assert_eq!(n, 0, "the core allocated {n} times");
}

#[test]
fn the_counter_sees_allocations() {
    // The guard above could not fail if counting were broken: prove it counts.
    let n = allocations_in(|| {
        let v: Vec<u64> = (0..10).collect();
        assert_eq!(v.len(), 10);
    });
    assert!(n >= 1);
}
