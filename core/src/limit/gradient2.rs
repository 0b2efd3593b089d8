//! `Gradient2`: Netflix concurrency-limits `Gradient2Limit`, with a `fixed` mode
//! that honours drops and stops the runaway growth of NCL PR #134.

use super::common::{
    check_app_limited, check_f64, check_f64_below, check_positive, clamp_limit, is_app_limited,
    quantize, AlgorithmMetrics, Counters, SlowStart, NCL_APP_LIMITED_FRACTION,
};
use super::{bound_paths, check_bounds, Algorithm, Window};
use crate::ConfigError;

/// NCL Gradient2Limit: `new ExpAvgMeasurement(longWindow, 10)` — simple mean first.
const LONG_RTT_WARMUP: u32 = 10;
/// NCL Gradient2Limit: `if (longRtt / shortRtt > 2)` the long RTT decays ×0.95.
const LONG_RTT_RECOVERY_RATIO: f64 = 2.0;
/// NCL Gradient2Limit: the decay factor of that fast recovery.
const LONG_RTT_RECOVERY_DECAY: f64 = 0.95;
/// NCL Gradient2Limit: the gradient is clamped to `[0.5, 1.0]`.
const MIN_GRADIENT: f64 = 0.5;
/// congestion-limiter Gradient: the queue is added only when the gradient is above 0.9
/// (the congestion-limiter crate); here "at or above".
const FIXED_QUEUE_GRADIENT: f64 = 0.9;

/// Configuration of [`Gradient2`].
///
/// `Default` is the `fixed` mode recommended for users (floor 1, ceiling 1000);
/// [`Gradient2Config::netflix`] is NCL's `Gradient2Limit` exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gradient2Config {
    /// The limit before any window (NCL default 20).
    pub initial_limit: f64,
    /// Floor (NCL default 20).
    pub min_limit: f64,
    /// Ceiling (NCL `maxConcurrency`, default 200).
    pub max_limit: f64,
    /// Weight of the new value: `L = (1 − s)·L + s·new`, in `(0, 1]` (NCL default 0.2).
    pub smoothing: f64,
    /// The queue allowance added each window (NCL's constant `queueSize`, default 4), in
    /// `[0, 1e6]`.
    pub queue_size: f64,
    /// Windows in the long-term RTT average: an EWMA with α = 2 / (n + 1) after a simple
    /// mean over the first 10 (NCL `longWindow`, default 600), in `[1, 1e6]`.
    pub long_window: u32,
    /// How far the short RTT may exceed the long one before the limit shrinks, in
    /// `[1, 1000]` (NCL `rttTolerance`, default 1.5, "must be >= 1.0").
    pub rtt_tolerance: f64,
    /// `true`: a drop multiplies the limit by `backoff_ratio`, and the queue allowance is
    /// added only while the gradient is ≥ 0.9 (congestion-limiter's fix of the runaway
    /// growth, NCL PR #134). `false`: NCL parity — drops are ignored (NCL#176).
    pub fixed: bool,
    /// The factor applied on a drop in `fixed` mode, in `[0.5, 1)` (0.9 as AIMD).
    pub backoff_ratio: f64,
    /// No growth while `max_inflight < app_limited_fraction × L`, in `[0, 1]` (NCL: 0.5).
    pub app_limited_fraction: f64,
    /// Slow start until the first drop (fixed mode) or gradient below 1.
    pub slow_start: bool,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Self { min_limit: 1.0, max_limit: 1000.0, fixed: true, ..Self::netflix() }
    }
}

impl Gradient2Config {
    /// NCL `Gradient2Limit` defaults, parity mode: initial 20, min 20, max 200, smoothing
    /// 0.2, queue 4, long window 600, tolerance 1.5, drops ignored, no slow start.
    pub const fn netflix() -> Self {
        Self {
            // NCL Gradient2Limit.Builder defaults
            initial_limit: 20.0,
            min_limit: 20.0,
            max_limit: 200.0,
            smoothing: 0.2,
            queue_size: 4.0,
            long_window: 600,
            rtt_tolerance: 1.5,
            fixed: false,
            // NCL AIMDLimit / congestion-limiter backoff
            backoff_ratio: 0.9,
            app_limited_fraction: NCL_APP_LIMITED_FRACTION,
            slow_start: false,
        }
    }
}

/// NCL `ExpAvgMeasurement`: mean of the first `warmup` samples, then an EWMA.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ExpAvg {
    value: f64,
    sum: f64,
    count: u32,
    factor: f64,
}

impl ExpAvg {
    fn new(window: u32) -> Self {
        // NCL: `factor(n) = 2.0 / (n + 1)`
        Self { value: 0.0, sum: 0.0, count: 0, factor: 2.0 / (window as f64 + 1.0) }
    }

    fn add(&mut self, x: f64) -> f64 {
        if self.count < LONG_RTT_WARMUP {
            self.count += 1;
            self.sum += x;
            self.value = self.sum / self.count as f64;
        } else {
            self.value = self.value * (1.0 - self.factor) + x * self.factor;
        }
        self.value
    }
}

/// A gradient concurrency limit: compares each window's RTT with a long-term average RTT
/// and grows by a queue allowance while the two agree.
///
/// Per window with samples (short RTT = the window's mean latency):
///
/// 1. `long = ewma.add(short)`; if `long / short > 2` the stored long RTT decays ×0.95
///    (this window still uses the undecayed value, as NCL does; during the 10-window
///    warm-up the decay is overwritten by the next mean, also as NCL does).
/// 2. App-limited (`max_inflight < 0.5 L`) → hold.
/// 3. `g = clamp(tolerance × long / short, 0.5, 1)`, `new = L·g + queue`,
///    `L = L·(1 − s) + new·s`, clamp to `[min, max]`.
///
/// **Parity** (`fixed: false`, [`Gradient2Config::netflix`]): exactly the above; drops
/// are ignored as in NCL (NCL#176) and a window without latency samples changes nothing.
/// The reported limit is NCL's `(int)` of the estimate. Under modest overload this limit
/// creeps upward (+0.8 per window at `g = 1`, fixed point `q / (1 − g)`).
///
/// **Fixed** (default): a drop multiplies the limit by `backoff_ratio` (no smoothing), and
/// the queue allowance is added only while `g ≥ 0.9`, so a sustained gradient below 0.9
/// shrinks the limit, but never below `2 × queue_size` (8 by default; NCL's fixed point
/// at the steepest gradient) on latency alone: below that the allowance stays. Without
/// that floor a dependency that only got slower (its latency above the 600-window long
/// average, which takes minutes to follow) took the limit to 1 and kept it there with
/// idle slots (a dependency of 8 slots whose latency tripled: 30% of its capacity).
/// Drops still take it lower. The reported limit is the exact estimate (fractions allowed).
///
/// **A slower dependency reads as congestion.** The long average follows a new latency
/// over minutes (α = 2/601 per window), so a dependency that got uniformly slower, with the
/// same parallelism, shrinks the limit below what it serves: a 64-worker server made 2x
/// slower keeps the limit near 40 and 55-60% of its degraded capacity in the fixed mode
/// (74-76% in NCL parity), where the default `Gradient` keeps 97% (the simulator's
/// busy-but-useless server, alone in a closed loop; `sim/tests/sweep.rs`). That is the
/// algorithm, not its integration; prefer `Gradient` when dependencies slow down.
///
/// ```
/// use surgeguard_core::limit::{Algorithm, Gradient2, Gradient2Config, Window};
/// use surgeguard_core::time::MS;
///
/// let mut g2 = Gradient2::new(Gradient2Config::netflix())?;
/// // No queueing: L = 20 × 0.8 + (20 + 4) × 0.2 = 20.8, reported as NCL's (int) 20.
/// assert_eq!(g2.update(&Window::single(0, 10 * MS, 20, false)), 20.0);
/// assert_eq!(g2.update(&Window::single(1, 10 * MS, 20, false)), 21.0); // 21.6
/// # Ok::<(), surgeguard_core::ConfigError>(())
/// ```
///
/// Progress: not shared (`&mut self`). Cost: O(1) per window, two divisions.
#[derive(Clone, Debug)]
pub struct Gradient2 {
    estimate: f64,
    min: f64,
    max: f64,
    smoothing: f64,
    queue_size: f64,
    tolerance: f64,
    fixed: bool,
    backoff: f64,
    app_limited_fraction: f64,
    long_rtt: ExpAvg,
    last_rtt: u64,
    slow_start: SlowStart,
    counters: Counters,
}

impl Gradient2 {
    /// Builds it, validating every number of the config.
    pub fn new(config: Gradient2Config) -> Result<Self, ConfigError> {
        check_bounds(
            config.min_limit,
            config.initial_limit,
            config.max_limit,
            bound_paths!("gradient2"),
        )?;
        check_positive(config.smoothing, 1.0, "limiter.gradient2.smoothing")?;
        check_f64(config.queue_size, 0.0, 1e6, "limiter.gradient2.queue_size")?;
        if config.long_window == 0 || config.long_window > 1_000_000 {
            return Err(ConfigError::out_of_range("limiter.gradient2.long_window"));
        }
        // NCL Gradient2Limit: "Tolerance must be >= 1.0"
        check_f64(config.rtt_tolerance, 1.0, 1000.0, "limiter.gradient2.rtt_tolerance")?;
        check_f64_below(config.backoff_ratio, 0.5, 1.0, "limiter.gradient2.backoff_ratio")?;
        check_app_limited(config.app_limited_fraction, "limiter.gradient2.app_limited_fraction")?;
        Ok(Self {
            estimate: config.initial_limit,
            min: config.min_limit,
            max: config.max_limit,
            smoothing: config.smoothing,
            queue_size: config.queue_size,
            tolerance: config.rtt_tolerance,
            fixed: config.fixed,
            backoff: config.backoff_ratio,
            app_limited_fraction: config.app_limited_fraction,
            long_rtt: ExpAvg::new(config.long_window),
            last_rtt: 0,
            slow_start: SlowStart::new(config.slow_start),
            counters: Counters::default(),
        })
    }

    /// The long-term RTT average (ns, fractional); 0 before the first sample.
    pub fn long_rtt_ns(&self) -> f64 {
        self.long_rtt.value
    }

    /// The unrounded internal limit estimate (NCL's `estimatedLimit`).
    pub fn estimate(&self) -> f64 {
        self.estimate
    }

    /// A snapshot of its counters and gauges (`baseline_ns` = long-term RTT).
    pub fn metrics(&self) -> AlgorithmMetrics {
        self.counters.snapshot(
            self.limit(),
            self.slow_start.is_active(),
            self.last_rtt,
            self.long_rtt.value as u64,
        )
    }

    fn back_off(&mut self) {
        self.slow_start.end();
        self.estimate = clamp_limit(self.estimate * self.backoff, self.min, self.max);
    }
}

impl Algorithm for Gradient2 {
    fn limit(&self) -> f64 {
        if self.fixed {
            self.estimate
        } else {
            // NCL returns `(int) newLimit`.
            clamp_limit(quantize(self.estimate), self.min, self.max)
        }
    }

    fn update(&mut self, w: &Window) -> f64 {
        if w.samples == 0 && w.drops == 0 {
            return self.limit();
        }
        let old = self.limit();
        if w.dropped() {
            self.counters.count_drop();
        }
        if w.samples == 0 {
            // Drops only: no latency to learn from.
            if self.fixed {
                self.back_off();
            }
            let limit = self.limit();
            self.counters.record(old, limit);
            return limit;
        }
        // An RTT of 0 counts as 1 ns (NCL would divide by zero).
        let rtt = w.avg_ns.max(1);
        self.last_rtt = rtt;
        let short = rtt as f64;
        let long = self.long_rtt.add(short);
        if long / short > LONG_RTT_RECOVERY_RATIO {
            self.long_rtt.value *= LONG_RTT_RECOVERY_DECAY;
        }
        if self.fixed && w.dropped() {
            self.back_off();
        } else if is_app_limited(w.max_inflight, self.estimate, self.app_limited_fraction) {
            self.counters.count_app_limited();
        } else {
            let l = self.estimate;
            // NCL: `Math.max(0.5, Math.min(1.0, tolerance * longRtt / shortRtt))`
            let gradient = (self.tolerance * long / short).clamp(MIN_GRADIENT, 1.0);
            // Fixed mode: the allowance only near g = 1 (no runaway growth), and below
            // NCL's own fixed point at the steepest gradient, `2 × queue_size`: without it
            // the fixed point of `L·g` is 0, and a dependency that is only slower (its
            // latency above the long average, not ours) would take the limit to its floor
            // and keep it there with idle capacity.
            let queue = if !self.fixed
                || gradient >= FIXED_QUEUE_GRADIENT
                || l < self.queue_size / (1.0 - MIN_GRADIENT)
            {
                self.queue_size
            } else {
                0.0
            };
            let target = l * gradient + queue;
            let mut new = l * (1.0 - self.smoothing) + target * self.smoothing;
            if gradient < 1.0 {
                // Latency beyond the tolerance: the congestion signal that ends slow start.
                self.slow_start.end();
            } else {
                new = self.slow_start.grow(l, w.samples, new);
            }
            self.estimate = clamp_limit(new, self.min, self.max);
        }
        let limit = self.limit();
        self.counters.record(old, limit);
        limit
    }

    fn name(&self) -> &'static str {
        "gradient2"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    fn ncl() -> Gradient2 {
        Gradient2::new(Gradient2Config::netflix()).unwrap()
    }

    fn s(rtt: u64, inflight: u32) -> Window {
        Window::single(0, rtt, inflight, false)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn a_slower_dependency_does_not_take_the_fixed_limit_to_its_floor() {
        // The dependency's latency triples (10 → 30 ms) and stays there; the limit binds.
        // The 600-window long average barely moves in 20 s, so g sits at 0.5.
        let mut g = Gradient2::new(Gradient2Config::default()).unwrap();
        for k in 0..100u64 {
            g.update(&Window { samples: 50, ..Window::single(k, 10 * MS, 20, false) });
        }
        let mut lowest = f64::MAX;
        for k in 100..300u64 {
            let inflight = libm::ceil(g.limit()) as u32;
            g.update(&Window { samples: 50, ..Window::single(k, 30 * MS, inflight, false) });
            lowest = lowest.min(g.limit());
        }
        // NCL's fixed point at the steepest gradient: q / (1 − 0.5) = 8 (one step of 0.9
        // from just above it dips under it). Before, the limit sank to its floor of 1.
        assert!(lowest >= 7.0, "{lowest}");
        assert!(g.limit() >= 7.0, "{}", g.limit());
        // A drop still backs off below it.
        let l = g.limit();
        g.update(&Window::single(301, 30 * MS, 8, true));
        assert!(g.limit() < l);
    }

    // ---- parity checks computed by hand from NCL's formula ----

    #[test]
    fn parity_growth_without_queueing() {
        let mut g = ncl();
        // g = clamp(1.5 × 10/10) = 1; new = 20 + 4 = 24; L = 20·0.8 + 24·0.2 = 20.8.
        assert_eq!(g.update(&s(10 * MS, 20)), 20.0);
        assert!(close(g.estimate(), 20.8));
        // Each window adds s·q = 0.8: 21.6, 22.4.
        assert_eq!(g.update(&s(10 * MS, 20)), 21.0);
        assert_eq!(g.update(&s(10 * MS, 20)), 22.0);
        assert!(close(g.estimate(), 22.4));
        assert!(close(g.long_rtt_ns(), 10.0 * MS as f64));
    }

    #[test]
    fn parity_shrinks_on_a_slow_window() {
        let mut g = ncl();
        for _ in 0..3 {
            g.update(&s(10 * MS, 20));
        }
        // Warm-up mean: long = (3·10 + 40)/4 = 17.5 ms; g = 1.5 × 17.5/40 = 0.65625;
        // new = 22.4 × 0.65625 + 4 = 18.7; L = 22.4·0.8 + 18.7·0.2 = 21.66 → (int) 21.
        assert_eq!(g.update(&s(40 * MS, 22)), 21.0);
        assert!(close(g.estimate(), 21.66), "{}", g.estimate());
        assert!(close(g.long_rtt_ns(), 17.5 * MS as f64));
    }

    #[test]
    fn parity_long_rtt_fast_recovery_after_warmup() {
        let mut g = ncl();
        for _ in 0..10 {
            g.update(&s(100 * MS, 20));
        }
        assert!(close(g.long_rtt_ns(), 100.0 * MS as f64));
        let before = g.estimate();
        // EWMA: long = 100·(1 − 2/601) + 40·2/601 = 99.80033 ms; long/short = 2.495 > 2,
        // so the stored value decays to 0.95 × 99.80033 = 94.81032 ms, but this window
        // still uses 99.8: g = clamp(1.5 × 99.8/40) = 1 → L grows by 0.8.
        g.update(&s(40 * MS, 40));
        let f = 2.0 / 601.0;
        let long = 100.0 * MS as f64 * (1.0 - f) + 40.0 * MS as f64 * f;
        assert!(close(g.long_rtt_ns(), long * 0.95), "{}", g.long_rtt_ns());
        assert!(close(g.estimate(), before * 0.8 + (before + 4.0) * 0.2));
    }

    #[test]
    fn parity_warmup_overwrites_the_decay() {
        let mut g = ncl();
        g.update(&s(100 * MS, 20));
        // long = (100 + 10)/2 = 55 ms; 55/10 > 2 → stored 52.25 ms ...
        g.update(&s(10 * MS, 20));
        assert!(close(g.long_rtt_ns(), 52.25 * MS as f64));
        // ... which the next warm-up mean forgets: (100 + 10 + 25)/3 = 45 ms (45/25 < 2,
        // no decay this time).
        g.update(&s(25 * MS, 20));
        assert!(close(g.long_rtt_ns(), 45.0 * MS as f64));
    }

    #[test]
    fn parity_ignores_drops_and_holds_when_app_limited() {
        let mut g = ncl();
        g.update(&s(10 * MS, 20));
        let est = g.estimate();
        assert_eq!(g.update(&Window::single(0, 10 * MS, 20, true)), 20.0);
        assert_eq!(g.estimate(), est, "a drop-only window changes nothing in parity");
        // A window with samples and drops: the drops are ignored, the samples count.
        g.update(&Window { drops: 5, ..s(10 * MS, 20) });
        assert!(close(g.estimate(), est * 0.8 + (est + 4.0) * 0.2));
        assert_eq!(g.metrics().drop_windows, 2);
        // inflight 10 < 21.6 / 2: app-limited hold.
        let est = g.estimate();
        g.update(&s(10 * MS, 10));
        assert_eq!(g.estimate(), est);
        assert_eq!(g.metrics().app_limited, 1);
    }

    // ---- fixed mode ----

    #[test]
    fn fixed_mode_backs_off_on_drops() {
        let mut g = Gradient2::new(Gradient2Config::default()).unwrap();
        assert_eq!(g.update(&Window::single(0, 0, 0, true)), 18.0);
        let w = Window { drops: 1, ..s(10 * MS, 18) };
        assert!(close(g.update(&w), 16.2));
        assert_eq!(g.metrics().decreases, 2);
    }

    #[test]
    fn fixed_mode_adds_queue_only_near_gradient_one() {
        let mut g = Gradient2::new(Gradient2Config::default()).unwrap();
        for _ in 0..3 {
            g.update(&s(10 * MS, 20));
        }
        assert!(close(g.estimate(), 22.4));
        // As in parity_shrinks_on_a_slow_window, but g = 0.65625 < 0.9 drops the queue:
        // new = 22.4 × 0.65625 = 14.7; L = 17.92 + 2.94 = 20.86 (parity: 21.66).
        assert!(close(g.update(&s(40 * MS, 22)), 20.86));
        // A gradient in [0.9, 1) keeps the queue term (fresh limiter, warm-up means):
        let mut g = Gradient2::new(Gradient2Config::default()).unwrap();
        g.update(&s(10 * MS, 20)); // long 10, g 1: L = 20.8
        g.update(&s(16 * MS, 20)); // long 13, g = 1.5 × 13/16 > 1 → 1: L = 21.6
        g.update(&s(24 * MS, 21)); // long 16.67, g = 1.5 × 16.67/24 > 1 → 1: L = 22.4
        let l = g.estimate();
        assert!(close(l, 22.4));
        // long = (10 + 16 + 24 + 34)/4 = 21; g = 1.5 × 21/34 = 0.92647 ≥ 0.9:
        // new = L·g + 4, L = L·0.8 + new·0.2.
        g.update(&s(34 * MS, 21));
        let gr = 1.5 * 21.0 / 34.0;
        assert!((0.9..1.0).contains(&gr));
        assert!(close(g.estimate(), l * 0.8 + (l * gr + 4.0) * 0.2));
    }

    #[test]
    fn fixed_mode_shrinks_under_timeouts_where_parity_grows() {
        // NCL PR #134 / NCL#176: the long RTT has absorbed the overload latency (g = 1)
        // and every window also carries timeouts. Parity ignores them and adds s·q = 0.8
        // per window; fixed backs off ×0.9 per window to the floor.
        let cfg = Gradient2Config { min_limit: 20.0, max_limit: 200.0, ..Default::default() };
        let mut fixed = Gradient2::new(cfg).unwrap();
        let mut parity = ncl();
        let overloaded = Window { drops: 2, ..s(50 * MS, 200) };
        for _ in 0..100 {
            fixed.update(&overloaded);
            parity.update(&overloaded);
        }
        assert_eq!(fixed.limit(), 20.0);
        // 20 + 100 × 0.8 = 100.
        assert_eq!(parity.limit(), 100.0, "{}", parity.estimate());
    }

    #[test]
    fn slow_start_until_gradient_drops() {
        let mut g =
            Gradient2::new(Gradient2Config { slow_start: true, ..Default::default() }).unwrap();
        let w = |rtt: u64, n: u32| Window { samples: n, ..s(rtt * MS, n) };
        assert_eq!(g.update(&w(10, 20)), 40.0);
        assert_eq!(g.update(&w(10, 40)), 80.0);
        // long = (10+10+40)/3 = 20; g = 1.5 × 20/40 = 0.75 < 1: slow start over.
        let l = g.update(&w(40, 80));
        assert!(close(l, 80.0 * 0.8 + 80.0 * 0.75 * 0.2), "{l}");
        assert!(!g.metrics().slow_start);
        let l2 = g.update(&w(10, 80));
        assert!(close(l2, l * 0.8 + (l + 4.0) * 0.2), "additive again");
    }

    #[test]
    fn empty_window_and_zero_rtt() {
        let mut g = ncl();
        assert_eq!(g.update(&Window::default()), 20.0);
        assert_eq!(g.metrics().windows, 0);
        assert!(g.update(&s(0, 20)).is_finite());
        assert!(g.update(&s(0, 20)).is_finite());
        assert_eq!(g.long_rtt_ns(), 1.0);
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = Gradient2Config::default();
        let bad = [
            Gradient2Config { smoothing: 0.0, ..base },
            Gradient2Config { smoothing: f64::NAN, ..base },
            Gradient2Config { queue_size: -1.0, ..base },
            Gradient2Config { queue_size: f64::INFINITY, ..base },
            Gradient2Config { long_window: 0, ..base },
            Gradient2Config { rtt_tolerance: 0.9, ..base },
            Gradient2Config { backoff_ratio: 1.0, ..base },
            Gradient2Config { app_limited_fraction: f64::NAN, ..base },
            Gradient2Config { min_limit: 300.0, ..base },
        ];
        for c in bad {
            assert!(Gradient2::new(c).is_err(), "{c:?}");
        }
        assert_eq!(Gradient2::new(base).unwrap().name(), "gradient2");
    }
}
