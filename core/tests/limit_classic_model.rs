#![cfg(not(loom))]
//! quickcheck model tests of the classic limit algorithms (`Fixed`, `Aimd`,
//! `HysteresisAimd`, `Vegas`, `Gradient2`): arbitrary configs and arbitrary sequences of
//! windows — including empty windows, zero and enormous latencies, `u32::MAX` counts and
//! time running backwards — checked step by step against a reference model of what every
//! algorithm promises:
//!
//! - the limit is finite and within `[min_limit, max_limit]` after every window;
//! - `update` returns what `limit` then reports;
//! - an empty window (no samples, no drops) changes nothing;
//! - a window with drops never raises the limit (except Gradient2 parity, which ignores
//!   drops as NCL does, and `Fixed`, which never moves);
//! - an app-limited window (`max_inflight < fraction × limit`) never raises it;
//! - the same inputs give the same outputs (determinism, incl. Vegas's seeded probe).

use quickcheck::{quickcheck, Arbitrary, Gen, TestResult};
use surgeguard_core::limit::{
    Aimd, AimdConfig, Algorithm, AlgorithmConfig, AnyAlgorithm, Fixed, FixedConfig, Gradient2,
    Gradient2Config, HysteresisAimd, HysteresisConfig, Vegas, VegasConfig, Window,
};
use surgeguard_core::time::{MS, SEC};

fn pick<T: Copy>(g: &mut Gen, xs: &[T]) -> T {
    *g.choose(xs).expect("non-empty")
}

fn below(g: &mut Gen, n: u64) -> u64 {
    u64::arbitrary(g) % n.max(1)
}

fn latency(g: &mut Gen) -> u64 {
    match below(g, 10) {
        0 => pick(g, &[0, 1, 999, u64::MAX / 2, u64::MAX]),
        1 => 10 * SEC + below(g, 100 * SEC),
        _ => below(g, 300 * MS),
    }
}

fn count(g: &mut Gen, big: u32) -> u32 {
    match below(g, 10) {
        0 => pick(g, &[0, 1, u32::MAX]),
        1..=3 => below(g, big as u64) as u32,
        _ => below(g, 64) as u32,
    }
}

/// One step: a window (time advances by `dt`, or jumps back when `backwards`).
#[derive(Clone, Debug)]
enum Op {
    Window { dt: u64, backwards: bool, window: Window },
    Empty { dt: u64 },
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let dt = match below(g, 4) {
            0 => 0,
            1 => below(g, 3 * SEC),
            _ => below(g, 200 * MS),
        };
        if below(g, 10) == 0 {
            return Op::Empty { dt };
        }
        let avg = latency(g);
        let drops = if below(g, 4) == 0 { count(g, 10) } else { 0 };
        let window = Window {
            now: 0,
            samples: count(g, 2000),
            drops,
            avg_ns: avg,
            min_ns: avg / 2,
            p50_ns: avg,
            p90_ns: if below(g, 2) == 0 { avg } else { latency(g) },
            p99_ns: if below(g, 2) == 0 { avg } else { latency(g) },
            max_inflight: count(g, 3000),
            inflight: count(g, 3000),
        };
        Op::Window { dt, backwards: below(g, 20) == 0, window }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        // Only ever towards simpler steps (a backwards step becomes a forward one), so
        // shrinking terminates.
        match self {
            Op::Window { dt, backwards: true, window } => Box::new(core::iter::once(Op::Window {
                dt: *dt,
                backwards: false,
                window: *window,
            })),
            _ => Box::new(core::iter::empty()),
        }
    }
}

/// A floor/initial/ceiling triple: fractional floors included.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    min: f64,
    initial: f64,
    max: f64,
}

impl Arbitrary for Bounds {
    fn arbitrary(g: &mut Gen) -> Self {
        let min = pick(g, &[0.1, 0.5, 1.0, 2.0, 20.0, 1.5]);
        let max = min + pick(g, &[0.0, 0.4, 3.0, 50.0, 180.0, 5000.0]);
        let initial = min + (max - min) * (below(g, 101) as f64 / 100.0);
        Bounds { min, initial, max }
    }
}

impl Bounds {
    /// Whole numbers for NCL parity modes.
    fn whole(self) -> Self {
        let min = self.min.ceil().max(1.0);
        let max = self.max.floor().max(min);
        Bounds { min, initial: self.initial.round().clamp(min, max), max }
    }
}

/// What each algorithm promises, checked after every step.
struct Promise {
    min: f64,
    max: f64,
    drops_never_raise: bool,
    app_limited_fraction: f64,
}

/// Runs `ops` through `a`, checking the promise after every step; `inner` returns an
/// internal estimate that must also stay within bounds (or `None`). Returns the trace of
/// limits, or what went wrong (no panics: quickcheck shrinks quietly).
fn run<A: Algorithm>(
    mut a: A,
    promise: &Promise,
    ops: &[Op],
    inner: impl Fn(&A) -> Option<f64>,
) -> Result<Vec<f64>, String> {
    let mut now = 0u64;
    let mut trace = Vec::with_capacity(ops.len());
    let in_bounds = |x: f64| x.is_finite() && x >= promise.min && x <= promise.max;
    if !in_bounds(a.limit()) {
        return Err(format!("initial limit {} out of bounds", a.limit()));
    }
    for op in ops {
        let before = a.limit();
        let (w, empty) = match op {
            Op::Empty { dt } => {
                now = now.saturating_add(*dt);
                (Window { now, ..Window::default() }, true)
            }
            Op::Window { dt, backwards, window } => {
                now = now.saturating_add(*dt);
                let t = if *backwards { now / 3 } else { now };
                let empty = window.samples == 0 && window.drops == 0;
                (Window { now: t, ..*window }, empty)
            }
        };
        let after = a.update(&w);
        let name = a.name();
        if after.to_bits() != a.limit().to_bits() {
            return Err(format!("{name}: update returned {after}, limit is {}", a.limit()));
        }
        if !in_bounds(after) {
            return Err(format!(
                "{name}: {after} outside [{}, {}] after {w:?}",
                promise.min, promise.max
            ));
        }
        if let Some(x) = inner(&a) {
            if !in_bounds(x) {
                return Err(format!("{name}: estimate {x} out of bounds after {w:?}"));
            }
        }
        if empty && after != before {
            return Err(format!("{name}: an empty window moved {before} → {after}"));
        }
        if promise.drops_never_raise && w.drops > 0 && after > before {
            return Err(format!("{name}: a drop raised {before} → {after} ({w:?})"));
        }
        if (w.max_inflight as f64) < promise.app_limited_fraction * before && after > before {
            return Err(format!("{name}: app-limited {w:?} raised {before} → {after}"));
        }
        trace.push(after);
    }
    Ok(trace)
}

/// Two runs of the same inputs must pass and agree bit for bit.
fn twice<A: Algorithm>(
    make: impl Fn() -> A,
    promise: &Promise,
    ops: &[Op],
    inner: impl Fn(&A) -> Option<f64> + Copy,
) -> TestResult {
    match (run(make(), promise, ops, inner), run(make(), promise, ops, inner)) {
        (Ok(t1), Ok(t2)) if t1 == t2 => TestResult::passed(),
        (Ok(_), Ok(_)) => TestResult::error("same inputs, different limits"),
        (Err(e), _) | (_, Err(e)) => TestResult::error(e),
    }
}

fn fraction(g: u8) -> f64 {
    [0.0, 0.25, 0.5, 0.5, 0.8, 1.0][g as usize % 6]
}

quickcheck! {
    fn fixed_never_moves(b: Bounds, ops: Vec<Op>) -> TestResult {
        let c = FixedConfig { initial_limit: b.initial, min_limit: b.min, max_limit: b.max };
        let p = Promise { min: b.initial, max: b.initial, drops_never_raise: true, app_limited_fraction: 0.0 };
        twice(|| Fixed::new(c).unwrap(), &p, &ops, |_| None)
    }

    fn aimd_stays_in_bounds(b: Bounds, parity: bool, slow_start: bool, knobs: (u8, u8, u8), ops: Vec<Op>) -> TestResult {
        let b = if parity { b.whole() } else { b };
        let c = AimdConfig {
            initial_limit: b.initial,
            min_limit: b.min,
            max_limit: b.max,
            target_latency_ns: [MS, 50 * MS, 200 * MS][knobs.0 as usize % 3],
            latency_percentile: [0.0, 0.5, 0.9, 0.99][knobs.1 as usize % 4],
            backoff_ratio: [0.5, 0.9, 0.99][knobs.2 as usize % 3],
            timeout_ns: 5 * SEC,
            app_limited_fraction: fraction(knobs.0 ^ knobs.2),
            slow_start,
            netflix_parity: parity,
        };
        let p = Promise { min: b.min, max: b.max, drops_never_raise: true, app_limited_fraction: c.app_limited_fraction };
        twice(|| Aimd::new(c).unwrap(), &p, &ops, |_| None)
    }

    fn hysteresis_stays_in_bounds(b: Bounds, slow_start: bool, knobs: (u8, u8), ops: Vec<Op>) -> TestResult {
        let c = HysteresisConfig {
            initial_limit: b.initial,
            min_limit: b.min,
            max_limit: b.max,
            target_latency_ns: [MS, 50 * MS, 100 * MS][knobs.0 as usize % 3],
            cool_off_ns: [1, 5 * SEC][knobs.1 as usize % 2],
            p99_window_ns: [3, 10 * SEC][knobs.0 as usize % 2],
            jump_window_ns: [1, 2 * SEC][knobs.1 as usize % 2],
            app_limited_fraction: fraction(knobs.0 ^ knobs.1),
            slow_start,
            ..HysteresisConfig::default()
        };
        let p = Promise { min: b.min, max: b.max, drops_never_raise: true, app_limited_fraction: c.app_limited_fraction };
        twice(|| HysteresisAimd::new(c).unwrap(), &p, &ops, |_| None)
    }

    fn vegas_stays_in_bounds(b: Bounds, slow_start: bool, seed: u64, knobs: (u8, u8, u8), ops: Vec<Op>) -> TestResult {
        let c = VegasConfig {
            initial_limit: b.initial,
            min_limit: b.min,
            max_limit: b.max,
            smoothing: [1.0, 0.5, 0.01][knobs.0 as usize % 3],
            decrease_ratio: [None, Some(0.5), Some(0.99)][knobs.1 as usize % 3],
            alpha: [None, Some(3), Some(0)][knobs.2 as usize % 3],
            beta: [None, Some(6), Some(1000)][knobs.2 as usize % 3],
            probe_multiplier: [0, 1, 30][knobs.0 as usize % 3],
            seed,
            app_limited_fraction: fraction(knobs.1 ^ knobs.2),
            slow_start,
            ..VegasConfig::netflix()
        };
        let p = Promise { min: b.min, max: b.max, drops_never_raise: true, app_limited_fraction: c.app_limited_fraction };
        twice(|| Vegas::new(c).unwrap(), &p, &ops, |v| Some(v.estimate()))
    }

    fn gradient2_stays_in_bounds(b: Bounds, fixed: bool, slow_start: bool, knobs: (u8, u8), ops: Vec<Op>) -> TestResult {
        let c = Gradient2Config {
            initial_limit: b.initial,
            min_limit: b.min,
            max_limit: b.max,
            smoothing: [0.2, 1.0, 0.01][knobs.0 as usize % 3],
            queue_size: [0.0, 4.0, 1000.0][knobs.1 as usize % 3],
            long_window: [1, 600][knobs.0 as usize % 2],
            rtt_tolerance: [1.0, 1.5, 1000.0][knobs.1 as usize % 3],
            fixed,
            app_limited_fraction: fraction(knobs.0 ^ knobs.1),
            slow_start,
            ..Gradient2Config::netflix()
        };
        let p = Promise { min: b.min, max: b.max, drops_never_raise: fixed, app_limited_fraction: c.app_limited_fraction };
        twice(|| Gradient2::new(c).unwrap(), &p, &ops, |g| Some(g.estimate()))
    }

    fn any_algorithm_matches_the_concrete_one(b: Bounds, ops: Vec<Op>) -> TestResult {
        let c = AimdConfig { initial_limit: b.initial, min_limit: b.min, max_limit: b.max, ..AimdConfig::default() };
        let p = Promise { min: b.min, max: b.max, drops_never_raise: true, app_limited_fraction: 0.5 };
        let any = AnyAlgorithm::new(AlgorithmConfig::Aimd(c)).unwrap();
        match (run(any, &p, &ops, |_| None), run(Aimd::new(c).unwrap(), &p, &ops, |_| None)) {
            (Ok(t1), Ok(t2)) => TestResult::from_bool(t1 == t2),
            (Err(e), _) | (_, Err(e)) => TestResult::error(e),
        }
    }
}

#[test]
fn default_and_netflix_configs_build() {
    assert!(Aimd::new(AimdConfig::default()).is_ok());
    assert!(Aimd::new(AimdConfig::netflix()).is_ok());
    assert!(HysteresisAimd::new(HysteresisConfig::default()).is_ok());
    assert!(Vegas::new(VegasConfig::default()).is_ok());
    assert!(Gradient2::new(Gradient2Config::default()).is_ok());
    assert!(Gradient2::new(Gradient2Config::netflix()).is_ok());
    assert!(Fixed::new(FixedConfig::default()).is_ok());
    // The metrics snapshot is reachable from outside the crate.
    let m = Gradient2::new(Gradient2Config::default()).unwrap().metrics();
    assert_eq!(m.limit, 20.0);
    assert_eq!(m.windows, 0);
}
