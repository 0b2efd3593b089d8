//! Helpers shared by the limit algorithms (floor/ceiling, slow start, app-limited guard,
//! config checks, the metrics snapshot).
//!
//! The rules every algorithm in this directory follows, written once:
//!
//! - **Empty windows change nothing.** A window with no samples and no drops is ignored.
//! - **Floor and ceiling.** Every new limit is clamped to `[min_limit, max_limit]`; a NaN
//!   candidate (impossible by construction, checked anyway) becomes the floor.
//! - **App-limited guard.** No growth while `max_inflight < app_limited_fraction × limit`:
//!   a limit nobody is using says nothing about capacity (NCL's rule is `inflight < L/2`,
//!   i.e. fraction 0.5, as in Netflix concurrency-limits). Fraction 0 disables it.
//! - **Slow start** (opt-in): until the first congestion signal, a window that would grow
//!   the limit grows it by `min(samples, limit)` instead — TCP's +1 per acknowledgement,
//!   so at most ×2 per window and about ×2 per round trip (TCP slow start, RFC 5681).
//!   It ends for good at the first drop or at the algorithm's own congestion
//!   condition; each algorithm's docs say which.
//! - **Integer limits where the reference has them.** Netflix's limits and `HysteresisAimd`'s `C` are
//!   integers; [`quantize`] truncates values at or above 1 and keeps fractions below 1, so
//!   parity holds whenever the floor is a whole number ≥ 1 and fractional floors still work.

use crate::types::check_range;
use crate::ConfigError;

/// The largest duration any algorithm accepts in its config (one day, in ns). Longer
/// values are almost certainly unit mistakes (seconds passed as nanoseconds × 1e9).
pub(crate) const MAX_DURATION_NS: u64 = 86_400 * crate::time::SEC;

/// The app-limited fraction NCL uses everywhere (`inflight * 2 < limit` → hold).
pub(crate) const NCL_APP_LIMITED_FRACTION: f64 = 0.5;

/// A metrics snapshot of a limit algorithm: plain counters and gauges.
///
/// Every algorithm in [`crate::limit`] returns one from `metrics()`. Counters count windows
/// folded since construction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AlgorithmMetrics {
    /// The current limit (what [`Algorithm::limit`](super::Algorithm::limit) returns).
    pub limit: f64,
    /// Non-empty windows folded (windows with neither samples nor drops are not counted).
    pub windows: u64,
    /// Windows after which the limit was higher than before.
    pub increases: u64,
    /// Windows after which the limit was lower than before.
    pub decreases: u64,
    /// Windows that carried at least one drop (or a latency over the timeout, where the
    /// algorithm treats that as a drop).
    pub drop_windows: u64,
    /// Windows in which the app-limited guard blocked growth.
    pub app_limited: u64,
    /// Whether slow start is still running.
    pub slow_start: bool,
    /// The latency (ns) the last decision looked at: the configured statistic (AIMD), the
    /// rolling p99 (hysteresis), the window RTT (Vegas, Gradient2). 0 before any sample.
    pub latency_ns: u64,
    /// What that latency was compared against (ns): the target (AIMD, hysteresis), the
    /// no-load RTT (Vegas), the long-term RTT average (Gradient2). 0 when there is none.
    pub baseline_ns: u64,
}

/// Counters shared by the algorithms; folded into [`AlgorithmMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) windows: u64,
    pub(crate) increases: u64,
    pub(crate) decreases: u64,
    pub(crate) drop_windows: u64,
    pub(crate) app_limited: u64,
}

impl Counters {
    /// Counts one non-empty window that moved the limit from `old` to `new`.
    pub(crate) fn record(&mut self, old: f64, new: f64) {
        self.windows = self.windows.saturating_add(1);
        if new > old {
            self.increases = self.increases.saturating_add(1);
        } else if new < old {
            self.decreases = self.decreases.saturating_add(1);
        }
    }

    pub(crate) fn count_drop(&mut self) {
        self.drop_windows = self.drop_windows.saturating_add(1);
    }

    pub(crate) fn count_app_limited(&mut self) {
        self.app_limited = self.app_limited.saturating_add(1);
    }

    pub(crate) fn snapshot(
        &self,
        limit: f64,
        slow_start: bool,
        latency_ns: u64,
        baseline_ns: u64,
    ) -> AlgorithmMetrics {
        AlgorithmMetrics {
            limit,
            windows: self.windows,
            increases: self.increases,
            decreases: self.decreases,
            drop_windows: self.drop_windows,
            app_limited: self.app_limited,
            slow_start,
            latency_ns,
            baseline_ns,
        }
    }
}

/// Clamps `x` to `[min, max]`; NaN becomes `min`.
pub(crate) fn clamp_limit(x: f64, min: f64, max: f64) -> f64 {
    if x.is_nan() || x < min {
        min
    } else if x > max {
        max
    } else {
        x
    }
}

/// Integer part for values ≥ 1 (Java's `(int)` cast on a positive double), the value
/// itself below 1 (a fractional limit).
pub(crate) fn quantize(x: f64) -> f64 {
    if x >= 1.0 {
        libm::floor(x)
    } else {
        x
    }
}

/// Whether the window shows the limit unused: `max_inflight < fraction × limit`.
pub(crate) fn is_app_limited(max_inflight: u32, limit: f64, fraction: f64) -> bool {
    (max_inflight as f64) < fraction * limit
}

/// Slow start state: running until the first congestion signal, then never again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlowStart {
    active: bool,
}

impl SlowStart {
    pub(crate) const fn new(enabled: bool) -> Self {
        Self { active: enabled }
    }

    pub(crate) const fn is_active(&self) -> bool {
        self.active
    }

    /// The first congestion signal: slow start is over for good.
    pub(crate) fn end(&mut self) {
        self.active = false;
    }

    /// The limit after a growing window: `max(candidate, limit + min(samples, limit))`
    /// while active, `candidate` otherwise.
    pub(crate) fn grow(&self, limit: f64, samples: u32, candidate: f64) -> f64 {
        if !self.active {
            return candidate;
        }
        let step = (samples as f64).min(limit);
        candidate.max(limit + step)
    }
}

/// Which latency statistic of a window a rule looks at, decoded from a plain number so
/// that bindings can pass it: `0` = mean, `0.5` / `0.9` / `0.99` = p50 / p90 / p99.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LatencyStat {
    Mean,
    P50,
    P90,
    P99,
}

impl LatencyStat {
    pub(crate) fn from_percentile(p: f64, what: &'static str) -> Result<Self, ConfigError> {
        if !p.is_finite() {
            return Err(ConfigError::not_finite(what));
        }
        // Exact matches only: the window carries these statistics and no others.
        if p == 0.0 {
            Ok(Self::Mean)
        } else if p == 0.5 {
            Ok(Self::P50)
        } else if p == 0.9 {
            Ok(Self::P90)
        } else if p == 0.99 {
            Ok(Self::P99)
        } else {
            Err(ConfigError::out_of_range(what))
        }
    }

    pub(crate) fn of(self, w: &super::Window) -> u64 {
        match self {
            Self::Mean => w.avg_ns,
            Self::P50 => w.p50_ns,
            Self::P90 => w.p90_ns,
            Self::P99 => w.p99_ns,
        }
    }
}

/// `x` finite and in `[lo, hi]`.
pub(crate) fn check_f64(x: f64, lo: f64, hi: f64, what: &'static str) -> Result<(), ConfigError> {
    check_range(x, lo, hi, what).map(|_| ())
}

/// `x` finite and in `[lo, hi)` (a ratio that must stay below its upper end).
pub(crate) fn check_f64_below(
    x: f64,
    lo: f64,
    hi: f64,
    what: &'static str,
) -> Result<(), ConfigError> {
    check_range(x, lo, hi, what)?;
    if x >= hi {
        return Err(ConfigError::out_of_range(what));
    }
    Ok(())
}

/// `x` finite and in `(0, hi]`.
pub(crate) fn check_positive(x: f64, hi: f64, what: &'static str) -> Result<(), ConfigError> {
    check_range(x, 0.0, hi, what)?;
    if x <= 0.0 {
        return Err(ConfigError::out_of_range(what));
    }
    Ok(())
}

/// A duration in `[1 ns, one day]`.
pub(crate) fn check_duration(ns: u64, what: &'static str) -> Result<(), ConfigError> {
    if ns == 0 || ns > MAX_DURATION_NS {
        return Err(ConfigError::out_of_range(what));
    }
    Ok(())
}

/// The app-limited fraction (at path `what`): finite, in `[0, 1]`.
pub(crate) fn check_app_limited(fraction: f64, what: &'static str) -> Result<(), ConfigError> {
    check_f64(fraction, 0.0, 1.0, what)
}

/// Netflix parity (the setting at `parity`) needs whole-number limits (NCL's limits are
/// `int`): `x`, at path `what`.
pub(crate) fn check_whole(
    x: f64,
    what: &'static str,
    parity: &'static str,
) -> Result<(), ConfigError> {
    if libm::floor(x) != x {
        return Err(ConfigError::inconsistent(what, "must be a whole number with", parity));
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn clamp_and_quantize() {
        assert_eq!(clamp_limit(f64::NAN, 2.0, 5.0), 2.0);
        assert_eq!(clamp_limit(1.0, 2.0, 5.0), 2.0);
        assert_eq!(clamp_limit(9.0, 2.0, 5.0), 5.0);
        assert_eq!(clamp_limit(3.5, 2.0, 5.0), 3.5);
        assert_eq!(quantize(20.8), 20.0);
        assert_eq!(quantize(1.0), 1.0);
        assert_eq!(quantize(0.25), 0.25);
    }

    #[test]
    fn app_limited_matches_ncl_integer_rule() {
        // NCL: `inflight * 2 < limit` holds; the fraction form must agree for integers.
        for limit in 1..60u32 {
            for inflight in 0..60u32 {
                assert_eq!(
                    is_app_limited(inflight, limit as f64, NCL_APP_LIMITED_FRACTION),
                    inflight * 2 < limit,
                    "limit {limit} inflight {inflight}"
                );
            }
        }
        assert!(!is_app_limited(0, 100.0, 0.0), "fraction 0 disables the guard");
    }

    #[test]
    fn slow_start_doubles_at_most_and_ends_for_good() {
        let mut s = SlowStart::new(true);
        assert_eq!(s.grow(10.0, 4, 11.0), 14.0);
        assert_eq!(s.grow(10.0, 50, 11.0), 20.0, "at most x2 per window");
        assert_eq!(s.grow(0.25, 1, 0.3), 0.5, "fractions double");
        assert_eq!(s.grow(10.0, 1, 16.0), 16.0, "never below the algorithm's own step");
        s.end();
        assert!(!s.is_active());
        assert_eq!(s.grow(10.0, 50, 11.0), 11.0);
        assert!(!SlowStart::new(false).is_active());
    }

    #[test]
    fn latency_stat_accepts_exact_percentiles_only() {
        assert_eq!(LatencyStat::from_percentile(0.0, "p"), Ok(LatencyStat::Mean));
        assert_eq!(LatencyStat::from_percentile(0.99, "p"), Ok(LatencyStat::P99));
        assert_eq!(LatencyStat::from_percentile(0.95, "p"), Err(ConfigError::out_of_range("p")));
        assert_eq!(LatencyStat::from_percentile(f64::NAN, "p"), Err(ConfigError::not_finite("p")));
    }

    #[test]
    fn checks_refuse_bad_numbers() {
        assert!(check_positive(0.0, 1.0, "x").is_err());
        assert!(check_positive(-1.0, 1.0, "x").is_err());
        assert!(check_positive(f64::INFINITY, 1.0, "x").is_err());
        assert!(check_positive(0.5, 1.0, "x").is_ok());
        assert!(check_f64_below(1.0, 0.5, 1.0, "x").is_err());
        assert!(check_f64_below(0.9, 0.5, 1.0, "x").is_ok());
        assert!(check_duration(0, "d").is_err());
        assert!(check_duration(MAX_DURATION_NS + 1, "d").is_err());
        assert!(check_duration(1, "d").is_ok());
        assert!(check_app_limited(1.5, "a").is_err());
        assert!(check_app_limited(f64::NAN, "a").is_err());
        assert!(check_whole(20.5, "w", "p").is_err());
        assert!(check_whole(20.0, "w", "p").is_ok());
    }
}
