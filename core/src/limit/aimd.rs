//! `Aimd`: additive increase, multiplicative decrease (the classic latency-target limiter), with a Netflix parity
//! mode (Netflix concurrency-limits `AIMDLimit`).

use super::common::{
    check_app_limited, check_duration, check_f64_below, check_whole, clamp_limit, is_app_limited,
    AlgorithmMetrics, Counters, LatencyStat, SlowStart, NCL_APP_LIMITED_FRACTION,
};
use super::{bound_paths, check_bounds, Algorithm, Window};
use crate::time::{MS, SEC};
use crate::ConfigError;

/// Configuration of [`Aimd`].
///
/// `Default` is the classic latency-target AIMD (initial 10, floor 1, ceiling 200, ×0.9); see
/// [`AimdConfig::netflix`] for NCL's `AIMDLimit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AimdConfig {
    /// The limit before any window. May be fractional (not in parity mode).
    pub initial_limit: f64,
    /// Floor. May be below 1 (not in parity mode).
    pub min_limit: f64,
    /// Ceiling.
    pub max_limit: f64,
    /// Seed mode: a window whose latency is below this grows the limit by 1, one above it
    /// backs off. Ignored in parity mode (NCL has no target). ns, in `[1 ns, 1 day]`.
    pub target_latency_ns: u64,
    /// Which latency of the window seed mode compares with the target: `0` = the mean,
    /// `0.5`, `0.9` or `0.99` = that percentile. Parity mode uses the mean (NCL's
    /// average window).
    pub latency_percentile: f64,
    /// The factor applied on overload, in `[0.5, 1)` (NCL's range; NCL's default: 0.9).
    pub backoff_ratio: f64,
    /// A window whose latency exceeds this counts as a drop (NCL `timeout`, default 5 s).
    /// ns, in `[1 ns, 1 day]`.
    pub timeout_ns: u64,
    /// No growth while `max_inflight < app_limited_fraction × limit`; in `[0, 1]`, 0 turns
    /// the guard off. NCL's `inflight * 2 >= limit` rule is 0.5.
    pub app_limited_fraction: f64,
    /// Slow start: grow by `min(samples, limit)` per window (≈ ×2 per round trip) until the
    /// first drop or latency at or over the target (parity mode: the first drop).
    pub slow_start: bool,
    /// Reproduce NCL `AIMDLimit` exactly: whole-number limits, `(int)(L × backoff)` on a
    /// drop or a latency over `timeout_ns`, otherwise +1 unless app-limited. Requires
    /// whole-number `initial_limit`, `min_limit` and `max_limit`.
    pub netflix_parity: bool,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self {
            // a latency-target AIMD: initial 10, floor 1, ceiling 200
            initial_limit: 10.0,
            min_limit: 1.0,
            max_limit: 200.0,
            // the target is the caller's; 50 ms is a common example target
            target_latency_ns: 50 * MS,
            latency_percentile: 0.0,
            // `int(limit * 0.9)`; NCL AIMDLimit backoffRatio default
            backoff_ratio: 0.9,
            // NCL AIMDLimit DEFAULT_TIMEOUT
            timeout_ns: 5 * SEC,
            app_limited_fraction: NCL_APP_LIMITED_FRACTION,
            slow_start: false,
            netflix_parity: false,
        }
    }
}

impl AimdConfig {
    /// NCL `AIMDLimit`'s defaults in parity mode: initial 20, min 20, max 200, backoff 0.9,
    /// timeout 5 s, grow only while `inflight * 2 >= limit`, no slow start.
    pub fn netflix() -> Self {
        Self {
            // NCL AIMDLimit.Builder defaults (PR #114 "AIMD Bounds")
            initial_limit: 20.0,
            min_limit: 20.0,
            max_limit: 200.0,
            netflix_parity: true,
            ..Self::default()
        }
    }
}

/// Additive-increase / multiplicative-decrease concurrency limit.
///
/// **Target mode** (default): per window, a latency (mean or a percentile) below
/// `target_latency_ns` adds 1; a drop, a latency over the target or over `timeout_ns`
/// multiplies by `backoff_ratio` (0.9); a latency exactly at the target holds. The classic rule
/// truncates with `int(limit × 0.9)`; here the product is kept exact so that fractional
/// limits below 1 decay smoothly instead of jumping to the floor.
///
/// **Parity mode** (`netflix_parity`, [`AimdConfig::netflix`]): NCL `AIMDLimit` exactly —
/// `if drop || rtt > timeout { L = (int)(L × backoff) } else if inflight*2 >= L { L += 1 }`,
/// then clamp. Golden values from NCL's `AIMDLimitTest` are unit tests here.
///
/// Both modes: the app-limited guard blocks growth while the window's `max_inflight` is
/// below `app_limited_fraction × limit`; optional slow start; empty windows are ignored.
///
/// ```
/// use surgeguard_core::limit::{Aimd, AimdConfig, Algorithm, Window};
/// use surgeguard_core::time::MS;
///
/// let mut aimd = Aimd::new(AimdConfig::netflix())?;
/// assert_eq!(aimd.update(&Window::single(0, MS, 10, false)), 21.0); // NCL golden
/// assert_eq!(aimd.update(&Window::single(MS, MS, 0, true)), 20.0); // (int)(21 × 0.9) = 18 → min 20
/// # Ok::<(), surgeguard_core::ConfigError>(())
/// ```
///
/// Progress: not shared (`&mut self`). Cost: O(1) per window, a few float operations.
#[derive(Clone, Debug)]
pub struct Aimd {
    limit: f64,
    min: f64,
    max: f64,
    target_ns: u64,
    stat: LatencyStat,
    backoff: f64,
    timeout_ns: u64,
    app_limited_fraction: f64,
    parity: bool,
    slow_start: SlowStart,
    counters: Counters,
    last_latency_ns: u64,
}

impl Aimd {
    /// Builds it, validating every number of the config.
    pub fn new(config: AimdConfig) -> Result<Self, ConfigError> {
        check_bounds(
            config.min_limit,
            config.initial_limit,
            config.max_limit,
            bound_paths!("aimd"),
        )?;
        check_duration(config.target_latency_ns, "limiter.aimd.target_latency_ns")?;
        let stat = LatencyStat::from_percentile(
            config.latency_percentile,
            "limiter.aimd.latency_percentile",
        )?;
        // NCL AIMDLimit: "Backoff ratio must be in the range [0.5, 1.0)"
        check_f64_below(config.backoff_ratio, 0.5, 1.0, "limiter.aimd.backoff_ratio")?;
        check_duration(config.timeout_ns, "limiter.aimd.timeout_ns")?;
        check_app_limited(config.app_limited_fraction, "limiter.aimd.app_limited_fraction")?;
        if config.netflix_parity {
            const PARITY: &str = "limiter.aimd.netflix_parity";
            check_whole(config.initial_limit, "limiter.aimd.initial_limit", PARITY)?;
            check_whole(config.min_limit, "limiter.aimd.min_limit", PARITY)?;
            check_whole(config.max_limit, "limiter.aimd.max_limit", PARITY)?;
        }
        Ok(Self {
            limit: config.initial_limit,
            min: config.min_limit,
            max: config.max_limit,
            target_ns: config.target_latency_ns,
            stat: if config.netflix_parity { LatencyStat::Mean } else { stat },
            backoff: config.backoff_ratio,
            timeout_ns: config.timeout_ns,
            app_limited_fraction: config.app_limited_fraction,
            parity: config.netflix_parity,
            slow_start: SlowStart::new(config.slow_start),
            counters: Counters::default(),
            last_latency_ns: 0,
        })
    }

    /// A snapshot of its counters and gauges (`baseline_ns` is the target in seed mode,
    /// the timeout in parity mode).
    pub fn metrics(&self) -> AlgorithmMetrics {
        let baseline = if self.parity { self.timeout_ns } else { self.target_ns };
        self.counters.snapshot(
            self.limit,
            self.slow_start.is_active(),
            self.last_latency_ns,
            baseline,
        )
    }

    fn decrease(&self, limit: f64) -> f64 {
        let product = limit * self.backoff;
        if self.parity {
            // NCL: `(int) (currentLimit * backoffRatio)`
            libm::floor(product)
        } else {
            product
        }
    }

    fn grow(&mut self, limit: f64, w: &Window) -> f64 {
        if is_app_limited(w.max_inflight, limit, self.app_limited_fraction) {
            self.counters.count_app_limited();
            return limit;
        }
        self.slow_start.grow(limit, w.samples, limit + 1.0)
    }
}

impl Algorithm for Aimd {
    fn limit(&self) -> f64 {
        self.limit
    }

    fn update(&mut self, w: &Window) -> f64 {
        if w.samples == 0 && w.drops == 0 {
            return self.limit;
        }
        let old = self.limit;
        let latency = if w.samples > 0 { self.stat.of(w) } else { 0 };
        if w.samples > 0 {
            self.last_latency_ns = latency;
        }
        let new = if w.dropped() || latency > self.timeout_ns {
            self.counters.count_drop();
            self.slow_start.end();
            self.decrease(old)
        } else if self.parity || latency < self.target_ns {
            self.grow(old, w)
        } else {
            // At or over the target: no headroom, slow start is over.
            self.slow_start.end();
            if latency > self.target_ns {
                self.decrease(old)
            } else {
                old
            }
        };
        self.limit = clamp_limit(new, self.min, self.max);
        self.counters.record(old, self.limit);
        self.limit
    }

    fn name(&self) -> &'static str {
        "aimd"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn aimd(c: AimdConfig) -> Aimd {
        Aimd::new(c).unwrap()
    }

    /// A window of `n` samples, all with latency `lat`, `inflight` at peak.
    fn win(now: u64, lat: u64, n: u32, inflight: u32) -> Window {
        Window {
            samples: n,
            max_inflight: inflight,
            inflight,
            ..Window::single(now, lat, 0, false)
        }
    }

    // ---- NCL AIMDLimitTest golden values ----

    #[test]
    fn netflix_increase_on_success() {
        let mut a = aimd(AimdConfig::netflix());
        assert_eq!(a.update(&Window::single(0, MS, 10, false)), 21.0);
    }

    #[test]
    fn netflix_decrease_on_drop() {
        let mut a = aimd(AimdConfig { initial_limit: 30.0, ..AimdConfig::netflix() });
        // NCL feeds onSample(0, 0, 0, true).
        assert_eq!(a.update(&Window::single(0, 0, 0, true)), 27.0);
    }

    #[test]
    fn netflix_success_overflow_stays_at_max() {
        let mut a =
            aimd(AimdConfig { initial_limit: 21.0, max_limit: 21.0, ..AimdConfig::netflix() });
        assert_eq!(a.update(&Window::single(0, MS, 10, false)), 21.0);
    }

    #[test]
    fn netflix_truncates_and_times_out() {
        let mut a = aimd(AimdConfig { initial_limit: 25.0, ..AimdConfig::netflix() });
        // (int)(25 × 0.9) = (int)22.5 = 22: truncation, not rounding.
        assert_eq!(a.update(&Window::single(0, 0, 0, true)), 22.0);
        // rtt 6 s > timeout 5 s counts as a drop: (int)(22 × 0.9) = 19 → floor 20.
        assert_eq!(a.update(&Window::single(1, 6 * SEC, 22, false)), 20.0);
        // Latency is no signal in parity mode below the timeout: 4.9 s grows it.
        assert_eq!(a.update(&Window::single(2, 4900 * MS, 10, false)), 21.0);
        // App-limited: 10 * 2 < 21, hold.
        assert_eq!(a.update(&Window::single(3, MS, 10, false)), 21.0);
        assert_eq!(a.update(&Window::single(4, MS, 11, false)), 22.0);
        let m = a.metrics();
        assert_eq!((m.windows, m.increases, m.decreases, m.drop_windows), (5, 2, 2, 2));
        assert_eq!(m.app_limited, 1);
    }

    #[test]
    fn netflix_needs_whole_limits() {
        let c = AimdConfig { initial_limit: 20.5, ..AimdConfig::netflix() };
        let e = Aimd::new(c).unwrap_err();
        assert_eq!(
            (e.field, e.other),
            ("limiter.aimd.initial_limit", Some("limiter.aimd.netflix_parity"))
        );
        assert_eq!(
            std::string::ToString::to_string(&e),
            "limiter.aimd.initial_limit must be a whole number with limiter.aimd.netflix_parity"
        );
    }

    // ---- target mode ----

    #[test]
    fn seed_mode_additive_increase_and_multiplicative_decrease() {
        let mut a = aimd(AimdConfig::default());
        assert_eq!(a.limit(), 10.0);
        assert_eq!(a.update(&Window::single(0, 10 * MS, 10, false)), 11.0);
        assert_eq!(a.update(&Window::single(1, 49 * MS, 10, false)), 12.0);
        // Exactly at target: hold.
        assert_eq!(a.update(&Window::single(2, 50 * MS, 10, false)), 12.0);
        // Over target: × 0.9 (exact, no truncation).
        let l = a.update(&Window::single(3, 51 * MS, 10, false));
        assert!((l - 10.8).abs() < 1e-12, "{l}");
        // A drop: × 0.9.
        let l = a.update(&Window::single(4, 0, 0, true));
        assert!((l - 9.72).abs() < 1e-12, "{l}");
    }

    #[test]
    fn seed_mode_uses_the_configured_percentile() {
        let mut w = win(0, 10 * MS, 20, 20);
        w.p99_ns = 80 * MS;
        let mut mean = aimd(AimdConfig::default());
        let mut p99 = aimd(AimdConfig { latency_percentile: 0.99, ..AimdConfig::default() });
        assert_eq!(mean.update(&w), 11.0);
        assert!(p99.update(&w) < 10.0);
        assert_eq!(p99.metrics().latency_ns, 80 * MS);
    }

    #[test]
    fn floor_and_ceiling_hold_and_fractions_work() {
        let mut a = aimd(AimdConfig {
            initial_limit: 1.0,
            min_limit: 0.1,
            max_limit: 3.0,
            ..AimdConfig::default()
        });
        let mut t = 0;
        let mut prev = a.limit();
        for _ in 0..30 {
            t += MS;
            let l = a.update(&Window::single(t, 0, 0, true));
            assert!(l >= 0.1 && l <= prev);
            prev = l;
        }
        assert_eq!(a.limit(), 0.1);
        // One completion with headroom: 0.1 + 1 = 1.1 (app-limited guard: 1 ≥ 0.5 × 0.1).
        assert!((a.update(&Window::single(t + 1, MS, 1, false)) - 1.1).abs() < 1e-12);
        for i in 0..10 {
            a.update(&Window::single(t + 2 + i, MS, 100, false));
        }
        assert_eq!(a.limit(), 3.0);
    }

    #[test]
    fn app_limited_guard_blocks_growth_only() {
        let mut a = aimd(AimdConfig { initial_limit: 40.0, ..AimdConfig::default() });
        assert_eq!(a.update(&Window::single(0, MS, 19, false)), 40.0);
        assert_eq!(a.metrics().app_limited, 1);
        assert_eq!(a.update(&Window::single(1, MS, 20, false)), 41.0);
        // Decrease is never blocked.
        assert!(a.update(&Window::single(2, 0, 0, true)) < 41.0);
        let mut off = aimd(AimdConfig {
            initial_limit: 40.0,
            app_limited_fraction: 0.0,
            ..AimdConfig::default()
        });
        assert_eq!(off.update(&Window::single(0, MS, 0, false)), 41.0);
    }

    #[test]
    fn slow_start_doubles_until_latency_reaches_target() {
        let mut a = aimd(AimdConfig { slow_start: true, ..AimdConfig::default() });
        assert!(a.metrics().slow_start);
        // Windows whose samples equal the limit (everything in flight completed): ×2.
        assert_eq!(a.update(&win(0, MS, 10, 10)), 20.0);
        assert_eq!(a.update(&win(1, MS, 20, 20)), 40.0);
        // Fewer samples: + samples.
        assert_eq!(a.update(&win(2, MS, 5, 40)), 45.0);
        // First congestion signal (latency over target): back off, slow start over.
        let l = a.update(&win(3, 60 * MS, 45, 45));
        assert!((l - 40.5).abs() < 1e-12);
        assert!(!a.metrics().slow_start);
        let l = a.update(&win(4, MS, 45, 45));
        assert!((l - 41.5).abs() < 1e-12, "additive from now on: {l}");
    }

    #[test]
    fn slow_start_ends_at_first_drop_and_in_parity_mode() {
        let mut a = aimd(AimdConfig { slow_start: true, ..AimdConfig::netflix() });
        assert_eq!(a.update(&win(0, MS, 20, 20)), 40.0);
        assert_eq!(a.update(&Window::single(1, 0, 0, true)), 36.0);
        assert!(!a.metrics().slow_start);
        assert_eq!(a.update(&win(2, MS, 36, 36)), 37.0);
        // Parity default has no slow start.
        let mut p = aimd(AimdConfig::netflix());
        assert_eq!(p.update(&win(0, MS, 20, 20)), 21.0);
    }

    #[test]
    fn empty_windows_change_nothing() {
        let mut a = aimd(AimdConfig::default());
        let w = Window { now: 5, avg_ns: SEC * 10, max_inflight: 100, ..Window::default() };
        assert_eq!(a.update(&w), 10.0);
        assert_eq!(a.metrics().windows, 0);
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = AimdConfig::default();
        let bad = [
            AimdConfig { backoff_ratio: 1.0, ..base },
            AimdConfig { backoff_ratio: 0.4, ..base },
            AimdConfig { backoff_ratio: f64::NAN, ..base },
            AimdConfig { target_latency_ns: 0, ..base },
            AimdConfig { timeout_ns: u64::MAX, ..base },
            AimdConfig { latency_percentile: 0.95, ..base },
            AimdConfig { app_limited_fraction: -0.1, ..base },
            AimdConfig { min_limit: f64::NEG_INFINITY, ..base },
            AimdConfig { initial_limit: 500.0, ..base },
        ];
        for c in bad {
            assert!(Aimd::new(c).is_err(), "{c:?}");
        }
        assert!(Aimd::new(base).is_ok());
        assert_eq!(Aimd::new(base).unwrap().name(), "aimd");
    }
}
