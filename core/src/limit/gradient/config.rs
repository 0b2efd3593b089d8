//! [`GradientConfig`]: every field a plain number, its defaults and its validation.

use super::super::{bound_paths, check_bounds};
use crate::time::{MS, SEC};
use crate::types::check_range;
use crate::ConfigError;

/// Configuration of [`Gradient`](super::Gradient).
///
/// Every field is a plain number, so that bindings can fill it in. `Default` is the
/// probe-free controller tuned on the closed-loop scenarios; [`GradientConfig::envoy`] is
/// Envoy parity. Which baseline is used:
///
/// - `pinned_baseline_ns > 0`: that fixed value (Envoy's PinnedGradientController);
/// - else `probe_interval_ns > 0`: Envoy's jittered min-RTT probe;
/// - else the probe-free baseline (the default).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradientConfig {
    /// The limit before any window.
    pub initial_limit: f64,
    /// Floor. May be below 1 (a fractional limit admits that fraction).
    pub min_limit: f64,
    /// Ceiling.
    pub max_limit: f64,
    /// Latency allowance over the baseline before the gradient falls below 1 (Envoy
    /// `buffer`, 25% there). Range `[0, 10]`.
    pub buffer: f64,
    /// Multiplier of the `sqrt(limit · gradient)` headroom (Envoy: 1, not configurable
    /// there). Range `[0, 10]`.
    pub headroom: f64,
    /// Fraction of each computed step that is applied, `L += smoothing · (target − L)`
    /// (Envoy: 1). Range `[0.01, 1]`.
    pub smoothing: f64,
    /// The latency percentile of a window used as the sample RTT, in `[50, 99]` (Envoy
    /// `sample_aggregate_percentile`, default 50). Exact at 50, 90 and 99; in between,
    /// interpolated linearly between the window's p50, p90 and p99.
    pub sample_percentile: f64,
    /// Envoy's min-RTT re-measurement interval in ns (at least 1 ms); `0` selects the
    /// probe-free baseline.
    pub probe_interval_ns: u64,
    /// Envoy `jitter`: each probe starts in `[interval, interval·(1 + jitter))`. Range `[0, 1]`.
    pub probe_jitter: f64,
    /// The limit pinned during a probe, at most the current limit (Envoy
    /// `min_concurrency`, default 3; PR #46602 clamps it to the current limit).
    pub probe_limit: f64,
    /// Samples that end a probe (Envoy `request_count`, default 50).
    pub probe_samples: u32,
    /// A fixed baseline in ns (Envoy PinnedGradientController); `0` disables it.
    pub pinned_baseline_ns: u64,
    /// Multiplicative back-off on a window whose drops exceed `drop_tolerance`; `1` ignores
    /// drops (Envoy). Deeper when most of the window dropped and at least half the limit
    /// was in flight: `min(backoff, 1 − share/2)`.
    /// Range `[0.1, 1]`.
    pub backoff: f64,
    /// Share of a window's outcomes that may be drops without a back-off. Range `[0, 0.999]`.
    /// Probe-free, drops found not to respond to back-off add their share on top (see
    /// [`Gradient`](super::Gradient), step 2).
    pub drop_tolerance: f64,
    /// Double the limit per uncongested window until the first congestion signal.
    pub slow_start: bool,
    /// No growth while the window's most in-flight is below `ratio · limit`; `0` disables.
    /// Range `[0, 1]`.
    pub app_limited_ratio: f64,
    /// Seed of the probe jitter.
    pub seed: u64,
}

impl Default for GradientConfig {
    /// The probe-free controller. `buffer`, `headroom` and `smoothing` were tuned in
    /// `core/tests/convergence.rs`. Envoy's 25% buffer with the full `sqrt` headroom settles
    /// near 1.55× the uncongested median; after a dependency slowdown that keeps p99 above
    /// 2× the new base latency. `buffer 0.1, headroom 0.8` keeps a standing queue of about
    /// `0.1·C + 0.8·sqrt(C)` requests (enough for ~99.5% goodput under Poisson arrivals at
    /// 150% load; 0.4 kept ~99% there, but refused the bursts of a long-tailed or bimodal
    /// dependency at 80% load), and smoothing 0.3 damps window-to-window noise.
    /// `app_limited_ratio 0.6`: a limit grows only while a window used 60% of it (the
    /// congestion-limiter AIMD's 0.8 held the limit about 1.25× above the usual peak, and
    /// the rarer bursts of a long-tailed dependency met it).
    ///
    /// **Warm-up.** The limit starts at 20 (Netflix concurrency-limits' initial limit), so a
    /// freshly started service admits a modest load at once instead of refusing, or
    /// queueing and CoDel-sloughing, all but one request of its first second. Slow start
    /// then doubles it per window (100 ms at least) while latency stays at the baseline and
    /// the window took every permit.
    /// If every window the first baseline came from held those 20 permits full (on
    /// average, not only at a burst's peak), the dependency may have been queueing
    /// already: when slow start ends, the limit drains once to an eighth of that and the
    /// baseline is learned again. A service that expects
    /// `n` concurrent requests sets `initial_limit: n` (a few more for Poisson bursts).
    fn default() -> Self {
        Self {
            // Netflix concurrency-limits' initial limit: a fresh service admits a modest
            // load at once; slow start doubles it from there (see "Warm-up" below).
            initial_limit: 20.0,
            min_limit: 1.0,
            max_limit: 1000.0, // Envoy max_concurrency_limit default
            buffer: 0.1,
            headroom: 0.8,
            smoothing: 0.3,
            sample_percentile: 50.0, // Envoy default
            probe_interval_ns: 0,
            probe_jitter: 0.15, // Envoy default
            probe_limit: 3.0,   // Envoy min_concurrency default
            probe_samples: 50,  // Envoy request_count default
            pinned_baseline_ns: 0,
            backoff: 0.9, // NCL AIMD / congestion-limiter back-off ratio
            drop_tolerance: 0.01,
            slow_start: true,
            app_limited_ratio: 0.6,
            seed: 0x5EED_5EED_5EED_5EED,
        }
    }
}

impl GradientConfig {
    /// Envoy's controller with its defaults (Envoy's adaptive_concurrency filter docs): a min-RTT probe
    /// every `interval_ns` plus up to 15% jitter, pinned at 3 for 50 samples; buffer 25%;
    /// sample p50; limit 3..1000 starting inside a probe; full `sqrt` headroom, no
    /// smoothing; drops, slow start and the app-limited guard off (Envoy has none).
    pub fn envoy(interval_ns: u64) -> Self {
        Self {
            initial_limit: 3.0,
            min_limit: 3.0,
            max_limit: 1000.0,
            buffer: 0.25,
            headroom: 1.0,
            smoothing: 1.0,
            probe_interval_ns: interval_ns,
            backoff: 1.0,
            drop_tolerance: 0.0,
            slow_start: false,
            app_limited_ratio: 0.0,
            ..Self::default()
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_bounds(self.min_limit, self.initial_limit, self.max_limit, bound_paths!("gradient"))?;
        check_range(self.buffer, 0.0, 10.0, "limiter.gradient.buffer")?;
        check_range(self.headroom, 0.0, 10.0, "limiter.gradient.headroom")?;
        check_range(self.smoothing, 0.01, 1.0, "limiter.gradient.smoothing")?;
        check_range(self.sample_percentile, 50.0, 99.0, "limiter.gradient.sample_percentile")?;
        check_range(self.probe_jitter, 0.0, 1.0, "limiter.gradient.probe_jitter")?;
        check_range(self.probe_limit, 1e-6, 1e9, "limiter.gradient.probe_limit")?;
        check_range(self.backoff, 0.1, 1.0, "limiter.gradient.backoff")?;
        check_range(self.drop_tolerance, 0.0, 0.999, "limiter.gradient.drop_tolerance")?;
        check_range(self.app_limited_ratio, 0.0, 1.0, "limiter.gradient.app_limited_ratio")?;
        if self.pinned_baseline_ns > 3600 * SEC {
            return Err(ConfigError::out_of_range("limiter.gradient.pinned_baseline_ns"));
        }
        if self.probe_interval_ns > 0 {
            // Envoy: the interval is at least 1 ms; a day bounds the jitter arithmetic.
            if self.probe_interval_ns < MS || self.probe_interval_ns > 86_400 * SEC {
                return Err(ConfigError::out_of_range("limiter.gradient.probe_interval_ns"));
            }
            if self.probe_samples == 0 || self.probe_samples > 1_000_000 {
                return Err(ConfigError::out_of_range("limiter.gradient.probe_samples"));
            }
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::limit::Gradient;

    #[test]
    fn bad_configs_are_refused() {
        let d = GradientConfig::default();
        let bad = [
            GradientConfig { buffer: f64::NAN, ..d },
            GradientConfig { buffer: -0.1, ..d },
            GradientConfig { headroom: f64::INFINITY, ..d },
            GradientConfig { smoothing: 0.0, ..d },
            GradientConfig { sample_percentile: 40.0, ..d },
            GradientConfig { sample_percentile: 99.5, ..d },
            GradientConfig { probe_jitter: 2.0, ..d },
            GradientConfig { probe_limit: 0.0, ..d },
            GradientConfig { backoff: 0.0, ..d },
            GradientConfig { drop_tolerance: 1.0, ..d },
            GradientConfig { app_limited_ratio: 1.5, ..d },
            GradientConfig { min_limit: 5.0, max_limit: 4.0, initial_limit: 4.5, ..d },
            GradientConfig { initial_limit: 0.0, ..d },
            GradientConfig { probe_interval_ns: 1, ..d },
            GradientConfig { probe_interval_ns: SEC, probe_samples: 0, ..d },
            GradientConfig { pinned_baseline_ns: u64::MAX, ..d },
        ];
        for c in bad {
            assert!(Gradient::new(c).is_err(), "{c:?}");
        }
        assert!(Gradient::new(d).is_ok());
        assert!(Gradient::new(GradientConfig::envoy(60 * SEC)).is_ok());
    }
}
