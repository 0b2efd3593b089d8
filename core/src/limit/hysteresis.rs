//! `HysteresisAimd`: seed 000's "Rate-Limited AIMD with Hysteresis" — healthy / warning /
//! critical zones on a rolling p99, jump detection on an EWMA of the mean, a cool-off after
//! critical events, a hard cap.

use super::common::{
    check_app_limited, check_duration, check_f64_below, check_positive, clamp_limit,
    is_app_limited, quantize, AlgorithmMetrics, Counters, SlowStart, NCL_APP_LIMITED_FRACTION,
};
use super::{check_bounds, Algorithm, Window};
use crate::time::{Monotonic, MS, SEC};
use crate::ConfigError;

/// Buckets of the rolling p99 (one per `p99_window_ns / 10`).
const P99_BUCKETS: usize = 10;
/// Buckets of the jump detector's look-back (one per `jump_window_ns / 4`).
const JUMP_BUCKETS: usize = 4;

/// Configuration of [`HysteresisAimd`]. `Default` is seed 000's numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HysteresisConfig {
    /// The limit before any window (seed 000 gives none; 20).
    pub initial_limit: f64,
    /// Floor (seed 000: `max(1, C × 0.5)`). May be below 1.
    pub min_limit: f64,
    /// Hard cap (seed 000: 1000).
    pub max_limit: f64,
    /// The latency the zones are measured against (seed 000's example: 50 ms). ns.
    pub target_latency_ns: u64,
    /// HEALTHY while the rolling p99 is below `healthy_below × target` (seed 000: 0.8).
    pub healthy_below: f64,
    /// CRITICAL once the rolling p99 is above `critical_above × target` (seed 000: 1.5).
    pub critical_above: f64,
    /// The factor of a critical event, in `(0, 1)` (seed 000: 0.5).
    pub critical_factor: f64,
    /// A jump is a rise of the average latency by more than this fraction within
    /// `jump_window_ns` (seed 000: 0.2, i.e. 20 %), in `(0, 100]`.
    pub jump_rise: f64,
    /// The look-back of jump detection (seed 000: 2 s). ns.
    pub jump_window_ns: u64,
    /// The factor applied on a jump, in `(0, 1)` (seed 000: 0.8).
    pub jump_factor: f64,
    /// EWMA weight of each completion in the average latency, in `(0, 1]` (seed 000: 0.1).
    pub avg_alpha: f64,
    /// After a critical event, no additive increase for this long (seed 000: 5 s). ns.
    pub cool_off_ns: u64,
    /// The horizon of the rolling p99 (seed 000: 10 s). ns.
    pub p99_window_ns: u64,
    /// No growth while `max_inflight < app_limited_fraction × limit`, in `[0, 1]`.
    pub app_limited_fraction: f64,
    /// Slow start until the first window that is not HEALTHY, a jump or a drop.
    pub slow_start: bool,
}

impl Default for HysteresisConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20.0,
            // seed 000: `max(1, C × 0.5)` and the 1000 hard cap
            min_limit: 1.0,
            max_limit: 1000.0,
            // seed 000: "target_latency: Fixed target (e.g., 50ms for this service)"
            target_latency_ns: 50 * MS,
            // seed 000 zones: HEALTHY < 0.8 × target, CRITICAL > 1.5 × target
            healthy_below: 0.8,
            critical_above: 1.5,
            // seed 000: CRITICAL → C × 0.5
            critical_factor: 0.5,
            // seed 000: "lat_avg increased by >20% in 2 seconds" → C × 0.8
            jump_rise: 0.2,
            jump_window_ns: 2 * SEC,
            jump_factor: 0.8,
            // seed 000: lat_avg EWMA alpha = 0.1
            avg_alpha: 0.1,
            // seed 000: "the ACC waits 5 seconds before starting the additive increase"
            cool_off_ns: 5 * SEC,
            // seed 000: "lat_p99: Rolling 99th percentile latency (over 10s window)"
            p99_window_ns: 10 * SEC,
            app_limited_fraction: NCL_APP_LIMITED_FRACTION,
            slow_start: false,
        }
    }
}

/// A time-bucketed rolling extreme: a ring of `N` buckets of `width` ns, each holding the
/// max (or min) of the values recorded in it. A query covers the current bucket and the
/// `N − 1` before it, i.e. the last `(N − 1)·width` to `N·width` ns. Empty buckets hold the
/// neutral value (−∞ for a max, +∞ for a min), so no per-bucket flags or epochs are needed.
#[derive(Clone, Copy, Debug)]
struct Rolling<const N: usize> {
    width: u64,
    /// The epoch (`now / width`) of the newest bucket.
    head: u64,
    /// `values[epoch % N]` for the epochs `head − N + 1 ..= head`.
    values: [f64; N],
    keep_max: bool,
}

impl<const N: usize> Rolling<N> {
    fn new(horizon_ns: u64, keep_max: bool) -> Self {
        let empty = if keep_max { f64::NEG_INFINITY } else { f64::INFINITY };
        Self { width: (horizon_ns / N as u64).max(1), head: 0, values: [empty; N], keep_max }
    }

    fn empty(&self) -> f64 {
        if self.keep_max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }
    }

    fn pick(&self, a: f64, b: f64) -> f64 {
        if self.keep_max {
            a.max(b)
        } else {
            a.min(b)
        }
    }

    fn clear(&mut self) {
        self.values = [self.empty(); N];
    }

    fn insert(&mut self, now: u64, value: f64) {
        let epoch = now / self.width;
        if epoch > self.head {
            // Empty the buckets of the epochs skipped since the newest one.
            let gap = epoch - self.head;
            if gap >= N as u64 {
                self.clear();
            } else {
                for k in 1..=gap {
                    self.values[((self.head + k) % N as u64) as usize] = self.empty();
                }
            }
            self.head = epoch;
        }
        // Times are clamped monotonic by the caller, so `epoch == head` here.
        let i = (self.head % N as u64) as usize;
        self.values[i] = self.pick(self.values[i], value);
    }

    /// The extreme over the buckets still inside the horizon at `now` (`now` ≥ every
    /// insert), `None` when they are all empty.
    fn get(&self, now: u64) -> Option<f64> {
        let age = (now / self.width).saturating_sub(self.head);
        let live = (N as u64).saturating_sub(age);
        let mut out = self.empty();
        for k in 0..live {
            let i = ((self.head + N as u64 - k) % N as u64) as usize;
            out = self.pick(out, self.values[i]);
        }
        if out.is_finite() {
            Some(out)
        } else {
            None
        }
    }
}

/// Seed 000's adaptive concurrency limit with hysteresis.
///
/// Per window (times are the windows' `now`, clamped so they never run backwards):
///
/// 1. Latency metrics: the average latency is an EWMA with α = 0.1 **per completion** (a
///    window of `n` samples with mean `x` moves it by `1 − 0.9ⁿ` towards `x`; the first
///    window sets it). The rolling p99 is the **maximum of the window p99s recorded in the
///    last 10 s**, kept in ten 1-second buckets (so the horizon is 9–10 s) — an upper bound
///    of the true rolling p99 that never allocates or sorts, in the spirit of the seed's
///    own "max since reset" code.
/// 2. Zone: HEALTHY `p99 < 0.8 T`; WARNING `0.8 T ≤ p99 ≤ 1.5 T`; CRITICAL `p99 > 1.5 T`.
/// 3. CRITICAL → `C = max(floor, ⌊C × 0.5⌋)`, the rolling p99 is reset to the average
///    latency (the seed's `latP99 = latAvg`, so one slow window does not halve the limit
///    again and again), and a 5 s cool-off starts.
///    Otherwise a **jump** — the average rose by more than 20 % over its minimum within the
///    last 1.5–2 s (four 500 ms buckets) — gives `C = ⌊C × 0.8⌋`, also in WARNING and
///    instead of the HEALTHY increase; after a jump or critical event the jump reference
///    restarts from the current average, so one rise is counted once.
///    WARNING holds. HEALTHY adds 1 (per window), except during the cool-off or while
///    app-limited.
/// 4. Clamp to `[min_limit, max_limit]` (the hard cap).
///
/// A drop is a critical event (×0.5 and cool-off; the p99 is not reset): a timeout's
/// latency would put the p99 in CRITICAL anyway. As in the seed, `C` is a whole number
/// from 1 up; below 1 (only with a fractional floor) fractions are kept.
///
/// ```
/// use surgeguard_core::limit::{Algorithm, HysteresisAimd, HysteresisConfig, Window};
/// use surgeguard_core::time::{MS, SEC};
///
/// let cfg = HysteresisConfig { target_latency_ns: 100 * MS, ..HysteresisConfig::default() };
/// let mut h = HysteresisAimd::new(cfg)?;
/// assert_eq!(h.update(&Window::single(0, 50 * MS, 20, false)), 21.0); // HEALTHY: +1
/// assert_eq!(h.update(&Window::single(SEC, 200 * MS, 20, false)), 10.0); // CRITICAL: ⌊21 × 0.5⌋
/// assert_eq!(h.update(&Window::single(2 * SEC, 50 * MS, 20, false)), 10.0); // cooling off
/// # Ok::<(), surgeguard_core::ConfigError>(())
/// ```
///
/// Progress: not shared (`&mut self`). Cost: O(1) per window — two scans of 10 and 4
/// buckets, one `pow` when a window holds more than one sample. Size: under 400 bytes.
#[derive(Clone, Debug)]
pub struct HysteresisAimd {
    limit: f64,
    min: f64,
    max: f64,
    target_ns: u64,
    healthy_below_ns: f64,
    critical_above_ns: f64,
    critical_factor: f64,
    jump_rise: f64,
    jump_factor: f64,
    avg_alpha: f64,
    cool_off_ns: u64,
    app_limited_fraction: f64,
    clock: Monotonic,
    avg_ns: Option<f64>,
    p99: Rolling<P99_BUCKETS>,
    jump_ref: Rolling<JUMP_BUCKETS>,
    cool_off_until: u64,
    critical_events: u64,
    jumps: u64,
    slow_start: SlowStart,
    counters: Counters,
}

impl HysteresisAimd {
    /// Builds it, validating every number of the config.
    pub fn new(config: HysteresisConfig) -> Result<Self, ConfigError> {
        check_bounds(config.min_limit, config.initial_limit, config.max_limit)?;
        check_duration(config.target_latency_ns, "target_latency_ns")?;
        check_positive(config.healthy_below, 1000.0, "healthy_below")?;
        check_positive(config.critical_above, 1000.0, "critical_above")?;
        if config.healthy_below > config.critical_above {
            return Err(ConfigError::Inconsistent("healthy_below > critical_above"));
        }
        for (f, what) in
            [(config.critical_factor, "critical_factor"), (config.jump_factor, "jump_factor")]
        {
            check_f64_below(f, 0.0, 1.0, what)?;
            if f <= 0.0 {
                return Err(ConfigError::OutOfRange(what));
            }
        }
        check_positive(config.jump_rise, 100.0, "jump_rise")?;
        check_duration(config.jump_window_ns, "jump_window_ns")?;
        check_positive(config.avg_alpha, 1.0, "avg_alpha")?;
        check_duration(config.cool_off_ns, "cool_off_ns")?;
        check_duration(config.p99_window_ns, "p99_window_ns")?;
        check_app_limited(config.app_limited_fraction)?;
        let target = config.target_latency_ns as f64;
        Ok(Self {
            limit: clamp_limit(quantize(config.initial_limit), config.min_limit, config.max_limit),
            min: config.min_limit,
            max: config.max_limit,
            target_ns: config.target_latency_ns,
            healthy_below_ns: config.healthy_below * target,
            critical_above_ns: config.critical_above * target,
            critical_factor: config.critical_factor,
            jump_rise: config.jump_rise,
            jump_factor: config.jump_factor,
            avg_alpha: config.avg_alpha,
            cool_off_ns: config.cool_off_ns,
            app_limited_fraction: config.app_limited_fraction,
            clock: Monotonic::new(),
            avg_ns: None,
            p99: Rolling::new(config.p99_window_ns, true),
            jump_ref: Rolling::new(config.jump_window_ns, false),
            cool_off_until: 0,
            critical_events: 0,
            jumps: 0,
            slow_start: SlowStart::new(config.slow_start),
            counters: Counters::default(),
        })
    }

    /// The rolling p99 (ns) as of the latest window; 0 before any sample.
    pub fn rolling_p99_ns(&self) -> u64 {
        self.p99.get(self.clock.latest()).unwrap_or(0.0) as u64
    }

    /// The EWMA of the mean latency (ns); 0 before any sample.
    pub fn avg_latency_ns(&self) -> u64 {
        self.avg_ns.unwrap_or(0.0) as u64
    }

    /// Whether additive increase is suspended at `now` after a critical event.
    pub fn is_cooling_off(&self, now: u64) -> bool {
        now.max(self.clock.latest()) < self.cool_off_until
    }

    /// Critical events so far (CRITICAL zone or drops).
    pub fn critical_events(&self) -> u64 {
        self.critical_events
    }

    /// Jumps detected so far.
    pub fn jumps(&self) -> u64 {
        self.jumps
    }

    /// A snapshot of its counters and gauges (`latency_ns` = rolling p99, `baseline_ns` =
    /// target).
    pub fn metrics(&self) -> AlgorithmMetrics {
        self.counters.snapshot(
            self.limit,
            self.slow_start.is_active(),
            self.rolling_p99_ns(),
            self.target_ns,
        )
    }

    /// Folds the window's mean into the EWMA (α per completion); returns whether it
    /// jumped against the reference of the last 1.5–2 s.
    fn update_average(&mut self, now: u64, w: &Window) -> bool {
        let x = w.avg_ns as f64;
        let avg = match self.avg_ns {
            None => x,
            // seed 000: `latAvg*(1-alpha) + latency*alpha` per completion
            Some(a) if w.samples == 1 => a * (1.0 - self.avg_alpha) + x * self.avg_alpha,
            Some(a) => {
                let keep = libm::pow(1.0 - self.avg_alpha, w.samples as f64);
                a * keep + x * (1.0 - keep)
            }
        };
        self.avg_ns = Some(avg);
        let jumped = self
            .jump_ref
            .get(now)
            .is_some_and(|reference| avg > reference * (1.0 + self.jump_rise));
        self.jump_ref.insert(now, avg);
        jumped
    }

    fn restart_jump_reference(&mut self, now: u64) {
        self.jump_ref.clear();
        if let Some(avg) = self.avg_ns {
            self.jump_ref.insert(now, avg);
        }
    }

    /// A critical event: ×critical_factor, cool-off, slow start over.
    fn critical(&mut self, now: u64) -> f64 {
        self.critical_events = self.critical_events.saturating_add(1);
        self.cool_off_until = now.saturating_add(self.cool_off_ns);
        self.slow_start.end();
        self.restart_jump_reference(now);
        self.limit * self.critical_factor
    }
}

impl Algorithm for HysteresisAimd {
    fn limit(&self) -> f64 {
        self.limit
    }

    fn update(&mut self, w: &Window) -> f64 {
        if w.samples == 0 && w.drops == 0 {
            return self.limit;
        }
        let now = self.clock.observe(w.now);
        let old = self.limit;
        let mut jumped = false;
        if w.samples > 0 {
            jumped = self.update_average(now, w);
            self.p99.insert(now, w.p99_ns as f64);
        }
        let new = if w.dropped() {
            self.counters.count_drop();
            self.critical(now)
        } else {
            let p99 = self.p99.get(now).unwrap_or(0.0);
            if p99 > self.critical_above_ns {
                // seed 000: "reset P99 to prevent repeated immediate drops"
                self.p99.clear();
                self.p99.insert(now, self.avg_ns.unwrap_or(0.0));
                self.critical(now)
            } else if jumped {
                self.jumps = self.jumps.saturating_add(1);
                self.slow_start.end();
                self.restart_jump_reference(now);
                old * self.jump_factor
            } else if p99 >= self.healthy_below_ns {
                // WARNING: the hysteresis dead band. Not healthy: slow start is over.
                self.slow_start.end();
                old
            } else if now < self.cool_off_until {
                old
            } else if is_app_limited(w.max_inflight, old, self.app_limited_fraction) {
                self.counters.count_app_limited();
                old
            } else {
                self.slow_start.grow(old, w.samples, old + 1.0)
            }
        };
        self.limit = clamp_limit(quantize(new), self.min, self.max);
        self.counters.record(old, self.limit);
        self.limit
    }

    fn name(&self) -> &'static str {
        "hysteresis_aimd"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Target 100 ms: HEALTHY < 80 ms, WARNING 80..=150 ms, CRITICAL > 150 ms.
    fn h() -> HysteresisAimd {
        HysteresisAimd::new(HysteresisConfig {
            target_latency_ns: 100 * MS,
            ..HysteresisConfig::default()
        })
        .unwrap()
    }

    fn at(h: &mut HysteresisAimd, now: u64, rtt: u64) -> f64 {
        h.update(&Window::single(now, rtt, 10_000, false))
    }

    #[test]
    fn zone_transitions_healthy_warning_critical() {
        let mut h = h();
        // Windows 2.5 s apart: the jump detector (2 s look-back) never sees two of them,
        // while the rolling p99 (10 s) keeps the highest.
        let t = |i: u64| i * 2500 * MS;
        assert_eq!(at(&mut h, t(0), 50 * MS), 21.0, "HEALTHY: +1");
        assert_eq!(at(&mut h, t(1), 79 * MS), 22.0, "79 ms < 80 ms: HEALTHY");
        assert_eq!(at(&mut h, t(2), 80 * MS), 22.0, "80 ms = 0.8 T: WARNING, hold");
        assert_eq!(at(&mut h, t(3), 150 * MS), 22.0, "150 ms = 1.5 T: still WARNING");
        assert_eq!(at(&mut h, t(4), 150 * MS + 1), 11.0, "above 1.5 T: CRITICAL, ⌊22/2⌋");
        assert_eq!(h.critical_events(), 1);
        assert_eq!(h.jumps(), 0);
        assert_eq!(h.metrics().decreases, 1);
        assert_eq!(h.metrics().increases, 2);
        assert_eq!(h.metrics().windows, 5);
    }

    #[test]
    fn rolling_p99_keeps_a_slow_window_for_ten_seconds() {
        let mut h = h();
        at(&mut h, 0, 50 * MS);
        assert_eq!(at(&mut h, 500 * MS, 90 * MS), 21.0, "WARNING");
        // Fast windows afterwards: the 90 ms p99 (bucket [0 s, 1 s)) still counts ...
        let mut t = SEC;
        while t < 10 * SEC {
            assert_eq!(at(&mut h, t, 50 * MS), 21.0, "t = {t}: still WARNING");
            assert_eq!(h.rolling_p99_ns(), 90 * MS);
            t += 500 * MS;
        }
        // ... until its bucket leaves the 10 s horizon.
        assert_eq!(at(&mut h, 10 * SEC, 50 * MS), 22.0, "HEALTHY again");
        assert_eq!(h.rolling_p99_ns(), 50 * MS);
    }

    #[test]
    fn critical_resets_p99_to_average_and_cools_off_for_five_seconds() {
        let mut h = h();
        assert_eq!(at(&mut h, 0, 50 * MS), 21.0);
        // avg = 0.9 × 50 + 0.1 × 200 = 65 ms; the p99 becomes 65 ms (HEALTHY).
        assert_eq!(at(&mut h, SEC, 200 * MS), 10.0);
        assert_eq!(h.avg_latency_ns(), 65 * MS);
        assert_eq!(h.rolling_p99_ns(), 65 * MS);
        assert!(h.is_cooling_off(SEC));
        // HEALTHY windows during the cool-off: no additive increase.
        for t in [2 * SEC, 4 * SEC, 6 * SEC - 1] {
            assert_eq!(at(&mut h, t, 50 * MS), 10.0, "t = {t}");
        }
        assert!(!h.is_cooling_off(6 * SEC));
        assert_eq!(at(&mut h, 6 * SEC, 50 * MS), 11.0, "cool-off over at 1 s + 5 s");
        assert_eq!(h.critical_events(), 1, "the reset stops repeated halving");
        assert_eq!(h.jumps(), 0, "the rise of the critical window was not counted twice");
    }

    #[test]
    fn cool_off_does_not_block_decreases_and_restarts() {
        let mut h = h();
        at(&mut h, 0, 50 * MS);
        // avg 61 ms: the p99 resets to 61 (HEALTHY).
        assert_eq!(at(&mut h, SEC, 160 * MS), 10.0);
        // Another critical window during the cool-off halves again (avg 70.9, p99 reset).
        assert_eq!(at(&mut h, 2 * SEC, 160 * MS), 5.0);
        assert_eq!(h.rolling_p99_ns(), h.avg_latency_ns());
        assert!(h.rolling_p99_ns() < 80 * MS);
        assert_eq!(at(&mut h, 6 * SEC + 500 * MS, 10 * MS), 5.0, "cool-off restarted at 2 s");
        assert_eq!(at(&mut h, 7 * SEC, 10 * MS), 6.0, "over at 2 s + 5 s");
    }

    #[test]
    fn jump_in_healthy_replaces_the_increase() {
        let mut h = h();
        let mut t = 0;
        let mut l = 0.0;
        for _ in 0..30 {
            l = at(&mut h, t, 40 * MS);
            t += 100 * MS;
        }
        assert_eq!(l, 50.0);
        // 75 ms windows (still HEALTHY): avg 43.5, 46.65, 49.485 > 1.2 × 40 = 48 → jump.
        assert_eq!(at(&mut h, t, 75 * MS), 51.0);
        assert_eq!(at(&mut h, t + 100 * MS, 75 * MS), 52.0);
        assert_eq!(at(&mut h, t + 200 * MS, 75 * MS), 41.0, "⌊52 × 0.8⌋");
        assert_eq!(h.jumps(), 1);
        // The reference restarts at 49.5 ms: the next 75 ms window (avg 52.0) is no jump.
        assert_eq!(at(&mut h, t + 300 * MS, 75 * MS), 42.0);
        assert!(!h.is_cooling_off(t + 300 * MS), "a jump starts no cool-off");
    }

    #[test]
    fn jump_in_warning_zone_within_two_seconds() {
        let mut h = h();
        let mut t = 0;
        for _ in 0..20 {
            at(&mut h, t, 85 * MS); // WARNING: hold at 20
            t += 100 * MS;
        }
        // Reference model of the seed's EWMA: the first 110 ms window whose average
        // exceeds 1.2 × 85 = 102 ms must bring the jump.
        let mut avg = 85.0 * MS as f64;
        let mut expected_at = None;
        for i in 0..40u64 {
            avg = avg * 0.9 + 110.0 * MS as f64 * 0.1;
            let l = at(&mut h, t + i * 100 * MS, 110 * MS);
            if expected_at.is_none() && avg > 102.0 * MS as f64 {
                expected_at = Some(i);
                assert_eq!(l, 16.0, "⌊20 × 0.8⌋ at window {i}");
            } else if expected_at.is_none() {
                assert_eq!(l, 20.0, "WARNING hold at window {i}");
            }
        }
        let i = expected_at.unwrap();
        assert!(i * 100 * MS < 2 * SEC, "a rise within the 2 s window");
        assert_eq!(h.jumps(), 1);
    }

    #[test]
    fn slow_rise_is_no_jump() {
        let mut h = h();
        // 40 → 70 ms over 60 s: about 1 ms per 2 s, far below 20 %.
        let mut prev = 0.0;
        for i in 0..600u64 {
            let l = at(&mut h, i * 100 * MS, 40 * MS + i * 50 * crate::time::US);
            assert!(l >= prev);
            prev = l;
        }
        assert_eq!(h.jumps(), 0);
        assert_eq!(h.metrics().decreases, 0);
    }

    #[test]
    fn hard_cap_and_floor() {
        let mut h = HysteresisAimd::new(HysteresisConfig {
            initial_limit: 998.0,
            target_latency_ns: 100 * MS,
            ..HysteresisConfig::default()
        })
        .unwrap();
        assert_eq!(at(&mut h, 0, 10 * MS), 999.0);
        assert_eq!(at(&mut h, 1, 10 * MS), 1000.0);
        assert_eq!(at(&mut h, 2, 10 * MS), 1000.0, "seed 000 hard cap");
        let mut t = SEC;
        for _ in 0..20 {
            h.update(&Window::single(t, 0, 0, true));
            t += SEC;
        }
        assert_eq!(h.limit(), 1.0, "seed 000: max(1, C × 0.5)");
    }

    #[test]
    fn drop_is_a_critical_event() {
        let mut h = h();
        at(&mut h, 0, 50 * MS);
        assert_eq!(h.update(&Window::single(SEC, 0, 0, true)), 10.0);
        assert!(h.is_cooling_off(SEC + 4 * SEC));
        assert_eq!(h.metrics().drop_windows, 1);
        assert_eq!(h.rolling_p99_ns(), 50 * MS, "a drop does not reset the p99");
    }

    #[test]
    fn fractional_floor_keeps_fractions_below_one() {
        let mut h = HysteresisAimd::new(HysteresisConfig {
            initial_limit: 3.0,
            min_limit: 0.1,
            ..HysteresisConfig::default()
        })
        .unwrap();
        let mut t = 0;
        let mut seen = [0.0; 6];
        for s in &mut seen {
            *s = h.update(&Window::single(t, 0, 0, true));
            t += SEC;
        }
        // 3 → ⌊1.5⌋ = 1 → 0.5 → 0.25 → 0.125 → 0.1 (floor).
        assert_eq!(seen, [1.0, 0.5, 0.25, 0.125, 0.1, 0.1]);
    }

    #[test]
    fn app_limited_guard_and_multi_sample_average() {
        let mut h = h();
        assert_eq!(h.update(&Window::single(0, 50 * MS, 9, false)), 20.0, "9 < 0.5 × 20");
        assert_eq!(h.metrics().app_limited, 1);
        assert_eq!(h.update(&Window::single(1, 50 * MS, 10, false)), 21.0);
        // A 10-sample window at 60 ms: avg = 50 × 0.9¹⁰ + 60 × (1 − 0.9¹⁰).
        let w = Window { samples: 10, ..Window::single(2, 60 * MS, 20, false) };
        h.update(&w);
        let keep = libm::pow(0.9, 10.0);
        let want = 50.0 * MS as f64 * keep + 60.0 * MS as f64 * (1.0 - keep);
        assert_eq!(h.avg_latency_ns(), want as u64);
    }

    #[test]
    fn slow_start_until_not_healthy() {
        let mut h = HysteresisAimd::new(HysteresisConfig {
            target_latency_ns: 100 * MS,
            slow_start: true,
            ..HysteresisConfig::default()
        })
        .unwrap();
        let w =
            |t: u64, rtt: u64, n: u32| Window { samples: n, ..Window::single(t, rtt, n, false) };
        assert_eq!(h.update(&w(0, 50 * MS, 20)), 40.0);
        assert_eq!(h.update(&w(SEC, 50 * MS, 40)), 80.0);
        // One 90 ms completion (avg +8 %, no jump): WARNING ends slow start.
        assert_eq!(h.update(&w(2 * SEC, 90 * MS, 1)), 80.0);
        assert!(!h.metrics().slow_start);
        // 50 ms again — but the 90 ms p99 is in the 10 s window: wait it out.
        assert_eq!(h.update(&w(13 * SEC, 50 * MS, 80)), 81.0, "additive now");
    }

    #[test]
    fn time_never_runs_backwards() {
        let mut h = h();
        at(&mut h, 10 * SEC, 50 * MS);
        at(&mut h, 11 * SEC, 300 * MS); // critical: cool-off until 16 s
                                        // A window stamped 1 s (before anything seen) counts as 11 s: still cooling off.
        assert_eq!(at(&mut h, SEC, 50 * MS), 10.0);
        assert!(h.is_cooling_off(0));
    }

    #[test]
    fn empty_window_changes_nothing() {
        let mut h = h();
        assert_eq!(h.update(&Window { now: 5 * SEC, p99_ns: SEC, ..Window::default() }), 20.0);
        assert_eq!(h.metrics().windows, 0);
        assert_eq!(h.rolling_p99_ns(), 0);
    }

    #[test]
    fn rolling_ring_expires_buckets() {
        let mut r: Rolling<4> = Rolling::new(4, true);
        assert_eq!(r.get(0), None);
        r.insert(0, 5.0);
        r.insert(0, 3.0);
        r.insert(2, 1.0);
        assert_eq!(r.get(3), Some(5.0));
        assert_eq!(r.get(4), Some(1.0), "epoch 0 left the horizon");
        r.insert(9, 2.0); // a gap longer than the ring empties it
        assert_eq!(r.get(9), Some(2.0));
        let mut m: Rolling<4> = Rolling::new(4, false);
        m.insert(1, 7.0);
        m.insert(2, 9.0);
        assert_eq!(m.get(2), Some(7.0));
        m.clear();
        assert_eq!(m.get(2), None);
    }

    #[test]
    fn size_is_as_documented() {
        assert!(core::mem::size_of::<HysteresisAimd>() < 400);
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = HysteresisConfig::default();
        let bad = [
            HysteresisConfig { target_latency_ns: 0, ..base },
            HysteresisConfig { healthy_below: 2.0, critical_above: 1.5, ..base },
            HysteresisConfig { healthy_below: f64::NAN, ..base },
            HysteresisConfig { critical_above: -1.0, ..base },
            HysteresisConfig { critical_factor: 1.0, ..base },
            HysteresisConfig { critical_factor: 0.0, ..base },
            HysteresisConfig { jump_factor: f64::INFINITY, ..base },
            HysteresisConfig { jump_rise: 0.0, ..base },
            HysteresisConfig { jump_window_ns: 0, ..base },
            HysteresisConfig { avg_alpha: 1.5, ..base },
            HysteresisConfig { cool_off_ns: u64::MAX, ..base },
            HysteresisConfig { p99_window_ns: 0, ..base },
            HysteresisConfig { app_limited_fraction: -1.0, ..base },
            HysteresisConfig { max_limit: 1e12, ..base },
        ];
        for c in bad {
            assert!(HysteresisAimd::new(c).is_err(), "{c:?}");
        }
        assert_eq!(HysteresisAimd::new(base).unwrap().name(), "hysteresis_aimd");
    }
}
