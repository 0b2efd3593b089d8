//! `Fixed`: a constant limit, settable at runtime (NCL `FixedLimit` / `SettableLimit`).

use super::common::{check_f64, AlgorithmMetrics, Counters};
use super::{bound_paths, check_bounds, Algorithm, Window};
use crate::ConfigError;

/// Configuration of [`Fixed`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FixedConfig {
    /// The limit. May be fractional; below 1 it means "admit that fraction".
    pub initial_limit: f64,
    /// The lowest value [`Fixed::set_limit`] accepts.
    pub min_limit: f64,
    /// The highest value [`Fixed::set_limit`] accepts.
    pub max_limit: f64,
}

impl Default for FixedConfig {
    fn default() -> Self {
        Self { initial_limit: 20.0, min_limit: 1.0, max_limit: 1000.0 }
    }
}

/// A constant concurrency limit: every window leaves it unchanged.
///
/// This is the static limit of classic bulkheads (and the kill switch that pins an
/// adaptive limiter to a known value when its controller misbehaves). It deliberately ignores latency *and* drops — it is
/// the one algorithm that does not back off. [`Fixed::set_limit`] changes it by hand
/// (NCL `SettableLimit`), within `[min_limit, max_limit]`.
///
/// ```
/// use surgeguard_core::limit::{Algorithm, Fixed, FixedConfig, Window};
///
/// let cfg = FixedConfig { initial_limit: 0.5, min_limit: 0.1, max_limit: 100.0 };
/// let mut fixed = Fixed::new(cfg)?;
/// // A drop does not move it: half a request in flight on average, whatever happens.
/// assert_eq!(fixed.update(&Window::single(0, 1_000_000, 1, true)), 0.5);
/// # Ok::<(), surgeguard_core::ConfigError>(())
/// ```
///
/// Progress: not shared (`&mut self`). Cost: O(1), no floating-point work per window.
#[derive(Clone, Debug)]
pub struct Fixed {
    limit: f64,
    min: f64,
    max: f64,
    counters: Counters,
}

impl Fixed {
    /// Builds it, validating the config (finite, `0 < min ≤ initial ≤ max ≤ 1e9`).
    pub fn new(config: FixedConfig) -> Result<Self, ConfigError> {
        check_bounds(
            config.min_limit,
            config.initial_limit,
            config.max_limit,
            bound_paths!("fixed"),
        )?;
        Ok(Self {
            limit: config.initial_limit,
            min: config.min_limit,
            max: config.max_limit,
            counters: Counters::default(),
        })
    }

    /// Sets the limit by hand. A value that is not finite or lies outside
    /// `[min_limit, max_limit]` is refused and the limit stays as it was.
    pub fn set_limit(&mut self, limit: f64) -> Result<f64, ConfigError> {
        check_f64(limit, self.min, self.max, "limiter.fixed.limit")?;
        self.limit = limit;
        Ok(limit)
    }

    /// A snapshot of its counters and gauges.
    pub fn metrics(&self) -> AlgorithmMetrics {
        self.counters.snapshot(self.limit, false, 0, 0)
    }
}

impl Algorithm for Fixed {
    fn limit(&self) -> f64 {
        self.limit
    }

    fn update(&mut self, window: &Window) -> f64 {
        if window.samples == 0 && window.drops == 0 {
            return self.limit;
        }
        if window.dropped() {
            self.counters.count_drop();
        }
        self.counters.record(self.limit, self.limit);
        self.limit
    }

    fn name(&self) -> &'static str {
        "fixed"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    #[test]
    fn constant_under_any_window_and_settable_within_bounds() {
        let mut f =
            Fixed::new(FixedConfig { initial_limit: 7.0, min_limit: 2.0, max_limit: 9.0 }).unwrap();
        for (i, dropped) in [false, true, false].into_iter().enumerate() {
            assert_eq!(f.update(&Window::single(i as u64 * MS, 900 * MS, 100, dropped)), 7.0);
        }
        assert_eq!(f.metrics().windows, 3);
        assert_eq!(f.metrics().drop_windows, 1);
        assert_eq!(f.set_limit(3.5), Ok(3.5));
        assert_eq!(f.limit(), 3.5);
        assert!(f.set_limit(1.0).is_err());
        assert!(f.set_limit(f64::NAN).is_err());
        assert!(f.set_limit(10.0).is_err());
        assert_eq!(f.limit(), 3.5, "a refused set changes nothing");
        assert_eq!(f.name(), "fixed");
    }

    #[test]
    fn bad_configs_are_refused() {
        for (i, mi, ma) in
            [(f64::NAN, 1.0, 2.0), (1.0, -1.0, 2.0), (3.0, 1.0, 2.0), (1.0, 1.0, f64::INFINITY)]
        {
            assert!(
                Fixed::new(FixedConfig { initial_limit: i, min_limit: mi, max_limit: ma }).is_err()
            );
        }
        assert!(
            Fixed::new(FixedConfig { initial_limit: 0.1, min_limit: 0.1, max_limit: 1.0 }).is_ok()
        );
    }

    #[test]
    fn empty_window_is_ignored() {
        let mut f = Fixed::new(FixedConfig::default()).unwrap();
        f.update(&Window::default());
        assert_eq!(f.metrics().windows, 0);
    }
}
