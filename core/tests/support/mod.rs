//! The closed-loop plant of the convergence tests, and their scenarios and figures.
//!
//! The plant itself (Poisson arrivals, a FIFO in front of a dependency with `slots` servers
//! and a random service time, client timeouts; the [`Control`]s under test: [`Real`],
//! [`Windowed`], [`Static`]) is the simulator's `sim/src/closed_loop.rs`, included here so
//! that the robustness sweep and these tests run one and the same model. What stays here is
//! what only these tests use: the peers' four scenarios (and a few more), and the figures of
//! the peers' comparison table.

#![allow(dead_code)]

#[path = "../../../sim/src/closed_loop.rs"]
mod closed_loop;

pub use closed_loop::*;

use surgeguard_core::time::{MS, SEC};

/// The four scenarios the peers were measured on, shortened where the result does not
/// depend on length. Capacity 1,600 req/s (16 slots × ~10 ms).
pub mod scenarios {
    use super::*;

    pub const SLOTS: usize = 16;
    pub const OVERLOAD_RATE: f64 = 2400.0; // 150% of 1,600 req/s

    fn base(
        name: &'static str,
        service: Service,
        phases: Vec<Phase>,
        dur: u64,
        seed: u64,
    ) -> Scenario {
        Scenario {
            name,
            service,
            phases,
            duration: dur,
            timeout: 100 * MS,
            seed,
            span: (0, dur),
            denominator: Denominator::Capacity,
        }
    }

    /// 150% of capacity, steady. Measure from 2 s to the end.
    pub fn overload(seed: u64) -> Scenario {
        let p = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        base("overload 150%", Service::BASE, vec![p], 10 * SEC, seed)
    }

    pub const SLOW_AT: u64 = 10 * SEC;
    pub const QUIET_RATE: f64 = 1200.0; // 75% of 1,600 req/s
    pub const SLOW_FOR: u64 = 30 * SEC;

    /// A quiet 75% load (1,200 req/s); at 10 s the dependency becomes twice as slow for 30 s,
    /// which makes the same load 150% of the degraded capacity.
    pub fn halved(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: QUIET_RATE, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: SLOW_AT, slow: 2.0, ..p0 };
        let p2 = Phase { at: SLOW_AT + SLOW_FOR, ..p0 };
        base(
            "capacity halved 30 s",
            Service::BASE,
            vec![p0, p1, p2],
            SLOW_AT + SLOW_FOR + 5 * SEC,
            seed,
        )
    }

    pub const STEP_AT: u64 = 5 * SEC;

    /// 150% of the original capacity; the dependency gains 16 slots (now 75% of capacity).
    pub fn step_up(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: STEP_AT, slots: 2 * SLOTS, ..p0 };
        base("slots 16 -> 32", Service::BASE, vec![p0, p1], STEP_AT + 10 * SEC, seed)
    }

    /// `overload` scaled up: `slots` slots at 150% load.
    pub fn overload_at(seed: u64, slots: usize) -> Scenario {
        let rate = 1.5 * slots as f64 * 100.0;
        let p = Phase { at: 0, rate, slots, slow: 1.0 };
        base("overload 150% (scaled)", Service::BASE, vec![p], 6 * SEC, seed)
    }

    pub const REMOVE_AT: u64 = 5 * SEC;

    /// 150% load; at 5 s half the slots disappear (capacity halved, latency unchanged), so
    /// Little's law's optimum in flight halves too.
    pub fn slots_removed(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: REMOVE_AT, slots: SLOTS / 2, ..p0 };
        base("slots 16 -> 8", Service::BASE, vec![p0, p1], REMOVE_AT + 8 * SEC, seed)
    }

    /// 150% of nominal load, heavy-tailed service time.
    pub fn heavy_tail(seed: u64) -> Scenario {
        let p = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        base("heavy tail", Service::WIDE, vec![p], 10 * SEC, seed)
    }

    /// 8 slots; from 5 s the service time triples for 10 s, no errors (a 1 s timeout);
    /// 400 req/s: half the capacity before, 150% of it during.
    pub fn tripled(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 400.0, slots: 8, slow: 1.0 };
        let p1 = Phase { at: 5 * SEC, slow: 3.0, ..p0 };
        let p2 = Phase { at: 15 * SEC, ..p0 };
        Scenario {
            timeout: SEC,
            ..base("latency x3", Service::BASE, vec![p0, p1, p2], 20 * SEC, seed)
        }
    }

    /// 80% of capacity, [`Service::HEAVY`] service time.
    pub fn long_tail(seed: u64) -> Scenario {
        let p = Phase { at: 0, rate: 1280.0, slots: SLOTS, slow: 1.0 };
        base("long tail 80%", Service::HEAVY, vec![p], 10 * SEC, seed)
    }

    /// The simulator's `retry-storm` database, alone: 32 slots of Erlang-2 work (10 ms mean).
    pub const TAIL_SLOTS: usize = 32;
    pub const TAIL_SERVICE: Service = Service::Erlang { mean_ms: 10.0, shape: 2 };
    pub const TAIL_SLOW_AT: u64 = 10 * SEC;
    pub const TAIL_SLOW_FOR: u64 = 10 * SEC;
    /// The slowdown factor and the client timeout: 10 × 10 ms with a 150 ms timeout times
    /// out ~20% of the calls on service time alone (Erlang-2: `P(X > 1.5·mean) = 4e^{-3}`),
    /// whatever the concurrency.
    pub const TAIL_SLOW: f64 = 10.0;
    pub const TAIL_TIMEOUT: u64 = 150 * MS;

    /// `rate` req/s; from 10 s to 20 s the dependency is 10× slower *uniformly* (same slots),
    /// so by Little's law it needs the same concurrency, and the client's 150 ms timeout cuts
    /// its tail: some drops are intrinsic, not caused by our concurrency. 10 s after.
    pub fn slow_tail(seed: u64, rate: f64) -> Scenario {
        let p0 = Phase { at: 0, rate, slots: TAIL_SLOTS, slow: 1.0 };
        let p1 = Phase { at: TAIL_SLOW_AT, slow: TAIL_SLOW, ..p0 };
        let p2 = Phase { at: TAIL_SLOW_AT + TAIL_SLOW_FOR, ..p0 };
        Scenario {
            name: "10x slower, timeout in the tail",
            service: TAIL_SERVICE,
            phases: vec![p0, p1, p2],
            duration: TAIL_SLOW_AT + TAIL_SLOW_FOR + 10 * SEC,
            timeout: TAIL_TIMEOUT,
            seed,
            span: (0, TAIL_SLOW_AT + TAIL_SLOW_FOR + 10 * SEC),
            denominator: Denominator::Capacity,
        }
    }
}

/// The figures of the peers' comparison table for one algorithm and seed.
///
/// Definitions (the peers' comparison gives the columns, not their exact measurement):
/// - overload: goodput = completions within the timeout from 2 s to the end, as % of the
///   dependency's capacity; p99 of client latency over the same span (a timeout counts as
///   the timeout);
/// - halved: goodput over the 30 s slowdown as % of the degraded capacity (the transient
///   included); `base` = the slowed dependency's unloaded mean latency (20 ms); settle = the
///   first time after the slowdown (250 ms steps) from which the p99 of everything until the
///   slowdown ends is below 2× base (`None`: never); p99 = from 5 s after the slowdown on;
/// - step-up: goodput from 2 s after the step to the end, as % of what was offered;
/// - heavy tail: goodput as % of the nominal capacity (16 slots / 10 ms), as the note does.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    pub overload_goodput: f64,
    pub overload_p99_ms: f64,
    pub overload_mean_limit: f64,
    pub halved_goodput: f64,
    pub halved_base_ms: f64,
    /// Until p99 < 2× base.
    pub halved_settle_s: Option<f64>,
    /// Until p99 < 2.1× base.
    pub halved_settle_21_s: Option<f64>,
    pub halved_p99_ms: f64,
    pub halved_mean_limit: f64,
    pub step_goodput_of_offered: f64,
    pub step_mean_limit: f64,
    pub heavy_goodput: f64,
    pub heavy_p99_ms: f64,
}

/// Runs the four scenarios with a fresh controller from `make` each time.
pub fn figures(seed: u64, make: &mut dyn FnMut() -> Box<dyn Control>) -> Figures {
    use scenarios::*;
    let mut f = Figures::default();
    let ms = MS as f64;

    let s = overload(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (2 * SEC, s.duration);
    f.overload_goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
    f.overload_p99_ms = r.quantile_between(0.99, a, b) as f64 / ms;
    f.overload_mean_limit = r.mean_limit(a, b);

    let s = halved(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (SLOW_AT, SLOW_AT + SLOW_FOR);
    f.halved_goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
    let base = s.base_latency(a);
    f.halved_base_ms = base / ms;
    let secs = |t: Option<u64>| t.map(|t| t as f64 / SEC as f64);
    f.halved_settle_s = secs(r.settle_time(2.0 * base, a, b));
    f.halved_settle_21_s = secs(r.settle_time(2.1 * base, a, b));
    f.halved_p99_ms = r.quantile_between(0.99, a + 5 * SEC, b) as f64 / ms;
    f.halved_mean_limit = r.mean_limit(a + 5 * SEC, b);

    let s = step_up(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (STEP_AT + 2 * SEC, s.duration);
    f.step_goodput_of_offered = 100.0 * r.good_between(a, b) as f64 / s.offered_between(a, b);
    f.step_mean_limit = r.mean_limit(a, b);

    let s = heavy_tail(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (2 * SEC, s.duration);
    let nominal = s.capacity_between(a, b) * s.service.mean_ns() / Service::BASE.mean_ns();
    f.heavy_goodput = 100.0 * r.good_between(a, b) as f64 / nominal;
    f.heavy_p99_ms = r.quantile_between(0.99, a, b) as f64 / ms;
    f
}

/// Mean and range of one figure over several seeds.
pub fn spread(all: &[Figures], pick: impl Fn(&Figures) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = all.iter().map(pick).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}
