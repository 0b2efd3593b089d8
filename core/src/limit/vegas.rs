//! `Vegas`: delay-based limit estimating the queue from the no-load RTT, in parity with
//! Netflix concurrency-limits `VegasLimit`.

use super::common::{
    check_app_limited, check_f64_below, check_positive, clamp_limit, is_app_limited, quantize,
    AlgorithmMetrics, Counters, SlowStart, NCL_APP_LIMITED_FRACTION,
};
use super::{bound_paths, check_bounds, Algorithm, Window};
use crate::rng::SplitMix64;
use crate::ConfigError;

/// The largest `alpha`, `beta`, `threshold` or `probe_multiplier` accepted.
const MAX_PARAM: u32 = 1_000_000;

/// Configuration of [`Vegas`]. `Default` is NCL `VegasLimit`'s defaults (= [`VegasConfig::netflix`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VegasConfig {
    /// The limit before any window (NCL default 20).
    pub initial_limit: f64,
    /// Floor (NCL: 1). May be below 1.
    pub min_limit: f64,
    /// Ceiling (NCL `maxConcurrency`, default 1000).
    pub max_limit: f64,
    /// Weight of the new value: `L = (1 − s)·L + s·new`, in `(0, 1]`; 1 = no smoothing
    /// (NCL default).
    pub smoothing: f64,
    /// Queue size under which the limit grows by `log10(L)`. `None` = NCL's `3·log10(L)`.
    pub alpha: Option<u32>,
    /// Queue size above which the limit shrinks. `None` = NCL's `6·log10(L)`.
    pub beta: Option<u32>,
    /// Queue size at or under which the limit grows by `beta` at once. `None` = NCL's
    /// `log10(L)`.
    pub threshold: Option<u32>,
    /// The decrease: `None` = NCL's `L − log10(L)`; `Some(r)` = `L × r`, `r` in `(0, 1)`
    /// (NCL's tests use `decreaseFunction(L -> L / 2)`, i.e. `Some(0.5)`).
    pub decrease_ratio: Option<f64>,
    /// Re-measure the no-load RTT every `jitter × probe_multiplier × L` windows with
    /// `jitter` uniform in `[0.5, 1)` (NCL default 30). 0 disables probing.
    pub probe_multiplier: u32,
    /// Seed of the probe jitter (SplitMix64), so runs replay exactly.
    pub seed: u64,
    /// No growth while `max_inflight < app_limited_fraction × L`, in `[0, 1]` (NCL: 0.5).
    pub app_limited_fraction: f64,
    /// Slow start until the first drop or the first window whose queue estimate reaches
    /// `alpha` (off in NCL).
    pub slow_start: bool,
}

impl Default for VegasConfig {
    fn default() -> Self {
        Self::netflix()
    }
}

impl VegasConfig {
    /// NCL `VegasLimit.newDefault()`: initial 20, max 1000, no smoothing, α/β/threshold
    /// from `log10(L)`, decrease `L − log10(L)`, probe multiplier 30.
    pub const fn netflix() -> Self {
        Self {
            // NCL VegasLimit.Builder defaults
            initial_limit: 20.0,
            min_limit: 1.0,
            max_limit: 1000.0,
            smoothing: 1.0,
            alpha: None,
            beta: None,
            threshold: None,
            decrease_ratio: None,
            probe_multiplier: 30,
            seed: 0,
            app_limited_fraction: NCL_APP_LIMITED_FRACTION,
            slow_start: false,
        }
    }
}

/// A TCP-Vegas-style concurrency limit: estimates the queue at the dependency from how far
/// the window's RTT sits above the no-load RTT, and steers it between `alpha` and `beta`.
///
/// Per window with samples (RTT = the window's mean latency, as NCL's average window):
///
/// 1. Probe: every `jitter × probe_multiplier × L` windows the no-load RTT is **reset** to
///    this RTT and the limit holds. Otherwise a new minimum RTT becomes the no-load RTT and
///    the limit holds.
/// 2. `q = ceil(L × (1 − rtt_noload / rtt))` (from the limit, not the in-flight count).
/// 3. Drop → decrease. App-limited (`max_inflight < 0.5 L`) → hold. `q ≤ threshold` →
///    `L + beta`; `q < alpha` → `L + log10(L)`; `q > beta` → decrease; else hold.
/// 4. Clamp to `[min, max]`, then smooth: `L = (1 − s)·L + s·new`.
///
/// `log10(L)` is NCL's integer `max(1, ⌊log10 ⌊L⌋⌋)`. The reported limit is `⌊L⌋` (NCL's
/// `(int)`) at or above 1 and the exact value below 1, clamped to the floor and ceiling.
/// NCL's golden tests (10 → 16, 10 → 9, 10 → 10, 10000 → 10024, 100 → 75 → 56) are unit
/// tests here.
///
/// Deviations from NCL, all for robustness and none visible in its tests: the probe jitter
/// comes from a seeded SplitMix64 (`seed`), and probing can be turned off; a drop always
/// decreases (NCL holds when the dropped sample's RTT is a new minimum); a window with only
/// drops never touches the no-load RTT (fast rejections do not poison the baseline,
/// congestion-limiter's fix); an RTT of 0 counts as 1 ns.
///
/// **The trap: a long tail or a slow mode reads as a queue.** The no-load RTT is the
/// *smallest* window RTT seen, and the queue estimate is `L × (1 − rtt_noload / rtt)`. On a
/// dependency whose windows' mean latency varies for reasons other than queueing (a
/// log-normal tail, a bimodal service, a slowdown that does not end before the next
/// probe), every window sits far above the luckiest one, `q` exceeds `beta` at any
/// concurrency, and the limit decreases towards its floor while the dependency idles.
/// This is the algorithm, not its integration: the closed-loop sweep (`make sweep`) shows
/// Vegas at ~40% of capacity where every other algorithm gets ~80% (heavy tail p50 6.1 ms
/// / p99 61.3 ms; bimodal 5 / 80 ms), in Netflix's own `VegasLimit` configuration. Use
/// it only for dependencies with a tight latency distribution; the default Gradient
/// compares medians against a baseline learned with its error bars instead.
///
/// ```
/// use surgeguard_core::limit::{Algorithm, Vegas, VegasConfig, Window};
/// use surgeguard_core::time::MS;
///
/// let mut vegas = Vegas::new(VegasConfig { initial_limit: 10.0, max_limit: 20.0, ..VegasConfig::netflix() })?;
/// vegas.update(&Window::single(0, 10 * MS, 10, false)); // learns the no-load RTT
/// assert_eq!(vegas.update(&Window::single(1, 10 * MS, 11, false)), 16.0); // no queue: + beta
/// # Ok::<(), surgeguard_core::ConfigError>(())
/// ```
///
/// Progress: not shared (`&mut self`). Cost: O(1) per window, one division and a few
/// multiplications; one PRNG draw per probe.
#[derive(Clone, Debug)]
pub struct Vegas {
    estimate: f64,
    min: f64,
    max: f64,
    smoothing: f64,
    alpha: Option<u32>,
    beta: Option<u32>,
    threshold: Option<u32>,
    decrease_ratio: Option<f64>,
    probe_multiplier: u32,
    app_limited_fraction: f64,
    rtt_noload: u64,
    last_rtt: u64,
    probe_count: u64,
    probe_jitter: f64,
    rng: SplitMix64,
    slow_start: SlowStart,
    counters: Counters,
}

/// NCL `Log10RootIntFunction.create(0)`: `max(1, (int) log10(t))` for the integer part `t`
/// of the limit (a table below 1000, the logarithm above; both are the decimal digit
/// count minus one, computed here on integers so that powers of ten are exact).
fn log10_int(limit: f64) -> u32 {
    // Java `(int)` on a positive double: truncation (the limit never exceeds 1e9).
    let mut t = limit as u64;
    let mut digits_minus_one = 0u32;
    while t >= 10 {
        t /= 10;
        digits_minus_one += 1;
    }
    digits_minus_one.max(1)
}

impl Vegas {
    /// Builds it, validating every number of the config.
    pub fn new(config: VegasConfig) -> Result<Self, ConfigError> {
        check_bounds(
            config.min_limit,
            config.initial_limit,
            config.max_limit,
            bound_paths!("vegas"),
        )?;
        check_positive(config.smoothing, 1.0, "limiter.vegas.smoothing")?;
        for (v, what) in [
            (config.alpha, "limiter.vegas.alpha"),
            (config.beta, "limiter.vegas.beta"),
            (config.threshold, "limiter.vegas.threshold"),
        ] {
            if v.is_some_and(|v| v > MAX_PARAM) {
                return Err(ConfigError::out_of_range(what));
            }
        }
        if let (Some(a), Some(b)) = (config.alpha, config.beta) {
            if a > b {
                return Err(ConfigError::inconsistent(
                    "limiter.vegas.alpha",
                    "must not be above",
                    "limiter.vegas.beta",
                ));
            }
        }
        if let Some(r) = config.decrease_ratio {
            check_f64_below(r, 0.0, 1.0, "limiter.vegas.decrease_ratio")?;
            if r <= 0.0 {
                return Err(ConfigError::out_of_range("limiter.vegas.decrease_ratio"));
            }
        }
        if config.probe_multiplier > MAX_PARAM {
            return Err(ConfigError::out_of_range("limiter.vegas.probe_multiplier"));
        }
        check_app_limited(config.app_limited_fraction, "limiter.vegas.app_limited_fraction")?;
        let mut rng = SplitMix64::new(config.seed);
        let probe_jitter = jitter(&mut rng);
        Ok(Self {
            estimate: config.initial_limit,
            min: config.min_limit,
            max: config.max_limit,
            smoothing: config.smoothing,
            alpha: config.alpha,
            beta: config.beta,
            threshold: config.threshold,
            decrease_ratio: config.decrease_ratio,
            probe_multiplier: config.probe_multiplier,
            app_limited_fraction: config.app_limited_fraction,
            rtt_noload: 0,
            last_rtt: 0,
            probe_count: 0,
            probe_jitter,
            rng,
            slow_start: SlowStart::new(config.slow_start),
            counters: Counters::default(),
        })
    }

    /// The no-load RTT (ns) the queue estimate uses; 0 before the first sample.
    pub fn rtt_noload_ns(&self) -> u64 {
        self.rtt_noload
    }

    /// The unrounded internal limit estimate (NCL's `estimatedLimit`).
    pub fn estimate(&self) -> f64 {
        self.estimate
    }

    /// A snapshot of its counters and gauges (`baseline_ns` = no-load RTT).
    pub fn metrics(&self) -> AlgorithmMetrics {
        self.counters.snapshot(
            self.limit(),
            self.slow_start.is_active(),
            self.last_rtt,
            self.rtt_noload,
        )
    }

    fn decrease(&self, l: f64) -> f64 {
        match self.decrease_ratio {
            Some(r) => l * r,
            None => l - log10_int(l) as f64,
        }
    }

    fn should_probe(&self) -> bool {
        // NCL: `probeJitter * probeMultiplier * estimatedLimit <= probeCount`
        self.probe_multiplier > 0
            && self.probe_jitter * self.probe_multiplier as f64 * self.estimate
                <= self.probe_count as f64
    }

    /// The decision for a window that is not a drop: `Some(new)` or `None` to hold.
    fn steer(&mut self, w: &Window, rtt: u64) -> Option<f64> {
        let l = self.estimate;
        // NCL: `(int) Math.ceil(estimatedLimit * (1 - (double) rtt_noload / rtt))`
        let queue = libm::ceil(l * (1.0 - self.rtt_noload as f64 / rtt as f64)) as i64;
        if is_app_limited(w.max_inflight, l, self.app_limited_fraction) {
            self.counters.count_app_limited();
            return None;
        }
        let log = log10_int(l);
        let alpha = i64::from(self.alpha.unwrap_or(3 * log));
        let beta = self.beta.unwrap_or(6 * log);
        let threshold = i64::from(self.threshold.unwrap_or(log));
        if queue <= threshold {
            Some(self.slow_start.grow(l, w.samples, l + beta as f64))
        } else if queue < alpha {
            Some(self.slow_start.grow(l, w.samples, l + log as f64))
        } else {
            // A queue is building: the congestion signal that ends slow start.
            self.slow_start.end();
            if queue > i64::from(beta) {
                Some(self.decrease(l))
            } else {
                None
            }
        }
    }
}

/// NCL: `ThreadLocalRandom.nextDouble(0.5, 1)`, here seeded.
fn jitter(rng: &mut SplitMix64) -> f64 {
    0.5 + 0.5 * rng.next_f64()
}

impl Algorithm for Vegas {
    fn limit(&self) -> f64 {
        clamp_limit(quantize(self.estimate), self.min, self.max)
    }

    fn update(&mut self, w: &Window) -> f64 {
        if w.samples == 0 && w.drops == 0 {
            return self.limit();
        }
        let old = self.limit();
        let mut rtt = 0;
        if w.samples > 0 {
            rtt = w.avg_ns.max(1);
            self.last_rtt = rtt;
            self.probe_count = self.probe_count.saturating_add(1);
            let new_baseline = if self.should_probe() {
                self.probe_jitter = jitter(&mut self.rng);
                self.probe_count = 0;
                true
            } else {
                self.rtt_noload == 0 || rtt < self.rtt_noload
            };
            if new_baseline {
                self.rtt_noload = rtt;
                if !w.dropped() {
                    self.counters.record(old, old);
                    return old;
                }
            }
        }
        let new = if w.dropped() {
            self.counters.count_drop();
            self.slow_start.end();
            Some(self.decrease(self.estimate))
        } else {
            self.steer(w, rtt)
        };
        if let Some(new) = new {
            let new = clamp_limit(new, self.min, self.max);
            // NCL: `(1 - smoothing) * estimatedLimit + smoothing * newLimit`; clamped again
            // because the blend of two in-range values can round one ulp outside.
            let smoothed = (1.0 - self.smoothing) * self.estimate + self.smoothing * new;
            self.estimate = clamp_limit(smoothed, self.min, self.max);
        }
        let limit = self.limit();
        self.counters.record(old, limit);
        limit
    }

    fn name(&self) -> &'static str {
        "vegas"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::{MS, SEC};

    /// NCL `VegasLimitTest.create()`: alpha 3, beta 6, smoothing 1, initial 10, max 20.
    fn create() -> Vegas {
        Vegas::new(VegasConfig {
            alpha: Some(3),
            beta: Some(6),
            smoothing: 1.0,
            initial_limit: 10.0,
            max_limit: 20.0,
            ..VegasConfig::netflix()
        })
        .unwrap()
    }

    fn s(rtt: u64, inflight: u32) -> Window {
        Window::single(0, rtt, inflight, false)
    }

    fn win(rtt: u64, n: u32, inflight: u32) -> Window {
        Window { samples: n, ..Window::single(0, rtt, inflight, false) }
    }

    // ---- NCL VegasLimitTest golden values ----

    #[test]
    fn golden_increase_limit() {
        let mut v = create();
        assert_eq!(v.update(&s(10 * MS, 10)), 10.0);
        assert_eq!(v.update(&s(10 * MS, 11)), 16.0);
    }

    #[test]
    fn golden_decrease_limit() {
        let mut v = create();
        assert_eq!(v.update(&s(10 * MS, 10)), 10.0);
        assert_eq!(v.update(&s(50 * MS, 11)), 9.0);
    }

    #[test]
    fn golden_no_change_within_thresholds() {
        let mut v = create();
        assert_eq!(v.update(&s(10 * MS, 10)), 10.0);
        // q = ceil(10 × (1 − 10/14)) = 3: not < alpha 3, not > beta 6 → hold.
        assert_eq!(v.update(&s(14 * MS, 14)), 10.0);
    }

    #[test]
    fn golden_large_limit_increase() {
        let mut v = Vegas::new(VegasConfig {
            initial_limit: 10000.0,
            max_limit: 20000.0,
            ..VegasConfig::netflix()
        })
        .unwrap();
        assert_eq!(v.update(&s(10 * SEC, 5000)), 10000.0);
        // q = 0 ≤ threshold 4 → + beta = 6 × log10(10000) = 24.
        assert_eq!(v.update(&s(10 * SEC, 6000)), 10024.0);
    }

    #[test]
    fn golden_decrease_with_and_without_smoothing() {
        let half = VegasConfig {
            decrease_ratio: Some(0.5),
            initial_limit: 100.0,
            max_limit: 200.0,
            ..VegasConfig::netflix()
        };
        let mut v = Vegas::new(VegasConfig { smoothing: 0.5, ..half }).unwrap();
        assert_eq!(v.update(&s(10 * MS, 100)), 100.0);
        assert_eq!(v.update(&s(20 * MS, 100)), 75.0);
        assert_eq!(v.update(&s(20 * MS, 100)), 56.0);
        assert_eq!(v.estimate(), 56.25, "the estimate keeps its fraction, as NCL's double");
        let mut v = Vegas::new(half).unwrap();
        assert_eq!(v.update(&s(10 * MS, 100)), 100.0);
        assert_eq!(v.update(&s(20 * MS, 100)), 50.0);
        assert_eq!(v.update(&s(20 * MS, 100)), 25.0);
    }

    #[test]
    fn log10_matches_ncl_table() {
        // NCL Log10RootIntFunction: lookup[i] = max(1, (int) log10(i)) for i < 1000.
        for (t, want) in [(0, 1), (1, 1), (9, 1), (10, 1), (99, 1), (100, 2), (999, 2)] {
            assert_eq!(log10_int(t as f64), want, "{t}");
        }
        for (t, want) in [(1000.0, 3), (9999.9, 3), (10000.0, 4), (1e9, 9), (0.5, 1)] {
            assert_eq!(log10_int(t), want, "{t}");
        }
    }

    // ---- behaviour beyond the golden values ----

    #[test]
    fn app_limited_holds() {
        let mut v = create();
        v.update(&s(10 * MS, 10));
        // inflight 4 × 2 < 10: hold even though there is no queue.
        assert_eq!(v.update(&s(10 * MS, 4)), 10.0);
        assert_eq!(v.metrics().app_limited, 1);
        assert_eq!(v.update(&s(10 * MS, 5)), 16.0);
    }

    #[test]
    fn drops_always_decrease_and_never_set_the_baseline() {
        let mut v = create();
        // A drop-only window before any sample: decrease, no baseline.
        assert_eq!(v.update(&Window::single(0, MS, 10, true)), 9.0);
        assert_eq!(v.rtt_noload_ns(), 0);
        v.update(&s(10 * MS, 10));
        assert_eq!(v.rtt_noload_ns(), 10 * MS);
        // A window with samples faster than the baseline *and* drops: the new minimum is
        // taken (the samples were real) but the drop still decreases (NCL would hold).
        let w = Window { drops: 3, ..s(5 * MS, 10) };
        assert_eq!(v.update(&w), 8.0);
        assert_eq!(v.rtt_noload_ns(), 5 * MS);
        assert_eq!(v.metrics().drop_windows, 2);
    }

    #[test]
    fn probe_resets_baseline_within_jittered_bounds_and_replays() {
        let probe_at = |seed: u64, multiplier: u32| -> Option<usize> {
            let mut v = Vegas::new(VegasConfig {
                initial_limit: 10.0,
                max_limit: 10.0,
                probe_multiplier: multiplier,
                seed,
                ..VegasConfig::netflix()
            })
            .unwrap();
            v.update(&s(10 * MS, 10));
            for i in 2..=400 {
                // q = ceil(10 × (1 − 10/12)) = 2 < alpha: would grow, clamped at max 10.
                assert_eq!(v.update(&s(12 * MS, 10)), 10.0);
                if v.rtt_noload_ns() == 12 * MS {
                    return Some(i);
                }
            }
            None
        };
        for seed in 0..20 {
            let at = probe_at(seed, 30).unwrap();
            // Probe when jitter × 30 × 10 ≤ count, jitter in [0.5, 1): window 150..=300.
            assert!((150..=300).contains(&at), "seed {seed}: {at}");
            assert_eq!(probe_at(seed, 30), Some(at), "same seed, same probe");
        }
        assert_eq!(probe_at(1, 0), None, "probe_multiplier 0 disables probing");
    }

    #[test]
    fn slow_start_doubles_until_queue_builds() {
        let mut v = Vegas::new(VegasConfig {
            initial_limit: 10.0,
            slow_start: true,
            probe_multiplier: 0,
            ..VegasConfig::netflix()
        })
        .unwrap();
        v.update(&win(10 * MS, 10, 10));
        assert_eq!(v.update(&win(10 * MS, 10, 10)), 20.0, "max(10 + 6, 10 × 2)");
        assert_eq!(v.update(&win(10 * MS, 20, 20)), 40.0);
        // q = ceil(40 × 0.5) = 20 > beta 6: decrease 40 − 1, slow start over.
        assert_eq!(v.update(&win(20 * MS, 40, 40)), 39.0);
        assert!(!v.metrics().slow_start);
        assert_eq!(v.update(&win(10 * MS, 39, 39)), 45.0, "back to + beta");
    }

    #[test]
    fn fractional_floor_and_ceiling() {
        let mut v = Vegas::new(VegasConfig {
            initial_limit: 2.0,
            min_limit: 0.1,
            max_limit: 5.0,
            decrease_ratio: Some(0.5),
            ..VegasConfig::netflix()
        })
        .unwrap();
        let mut prev = v.limit();
        for _ in 0..10 {
            let l = v.update(&Window::single(0, MS, 1, true));
            assert!(l >= 0.1 && l <= prev);
            prev = l;
        }
        assert_eq!(v.limit(), 0.1);
        v.update(&s(MS, 1));
        for _ in 0..10 {
            v.update(&s(MS, 100));
        }
        assert_eq!(v.limit(), 5.0);
    }

    #[test]
    fn smoothing_never_rounds_below_the_floor() {
        // 0.99 × 1.5 + 0.01 × 1.5 = 1.4999999999999998 in f64: clamped back to 1.5.
        let mut v = Vegas::new(VegasConfig {
            initial_limit: 1.5,
            min_limit: 1.5,
            smoothing: 0.01,
            ..VegasConfig::netflix()
        })
        .unwrap();
        v.update(&Window::single(0, MS, 1, true));
        assert!(v.estimate() >= 1.5, "{}", v.estimate());
        assert_eq!(v.limit(), 1.5);
    }

    #[test]
    fn empty_window_and_zero_rtt() {
        let mut v = create();
        assert_eq!(v.update(&Window { max_inflight: 9, ..Window::default() }), 10.0);
        assert_eq!(v.metrics().windows, 0);
        assert_eq!(v.update(&s(0, 10)), 10.0);
        assert_eq!(v.rtt_noload_ns(), 1);
        assert!(v.update(&s(0, 10)).is_finite());
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = VegasConfig::netflix();
        let bad = [
            VegasConfig { smoothing: 0.0, ..base },
            VegasConfig { smoothing: 1.5, ..base },
            VegasConfig { smoothing: f64::NAN, ..base },
            VegasConfig { alpha: Some(7), beta: Some(6), ..base },
            VegasConfig { beta: Some(u32::MAX), ..base },
            VegasConfig { decrease_ratio: Some(1.0), ..base },
            VegasConfig { decrease_ratio: Some(0.0), ..base },
            VegasConfig { decrease_ratio: Some(f64::INFINITY), ..base },
            VegasConfig { probe_multiplier: u32::MAX, ..base },
            VegasConfig { app_limited_fraction: 2.0, ..base },
            VegasConfig { initial_limit: 0.0, ..base },
        ];
        for c in bad {
            assert!(Vegas::new(c).is_err(), "{c:?}");
        }
        assert_eq!(Vegas::new(VegasConfig::default()).unwrap().name(), "vegas");
    }
}
