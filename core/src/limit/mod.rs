//! Limit algorithms: pure, deterministic `&mut self` state machines.
//!
//! Each algorithm is fed one [`Window`] — a summary of the samples that closed together
//! (one sample when used unwindowed, as the Netflix golden tests do) — and returns the
//! new concurrency limit. Limits are `f64`: a limit below 1 means "admit that fraction"
//! (the [`Limiter`](crate::Limiter) keeps one request in flight and idles between them).
//!
//! Every algorithm honours drops (an overload [`Outcome`](crate::Outcome) backs it off),
//! clamps to its floor and ceiling, and has an app-limited guard (no growth while in-flight
//! is far below the limit). Each is tested alone, deterministically.

mod aimd;
mod common;
mod fixed;
mod gradient;
mod gradient2;
mod hysteresis;
mod vegas;

pub use aimd::{Aimd, AimdConfig};
pub use common::AlgorithmMetrics;
pub use fixed::{Fixed, FixedConfig};
pub use gradient::{Gradient, GradientConfig, GradientMetrics};
pub use gradient2::{Gradient2, Gradient2Config};
pub use hysteresis::{HysteresisAimd, HysteresisConfig};
pub use vegas::{Vegas, VegasConfig};

use crate::ConfigError;

/// The summary of one closed window of samples: the input of every limit algorithm.
///
/// Latencies are nanoseconds. `samples` counts successful completions (latency samples);
/// `drops` counts overload outcomes, which carry no latency.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// When the window closed (ns, monotonic).
    pub now: u64,
    /// Latency samples in the window (successful completions).
    pub samples: u32,
    /// Overload outcomes in the window (timeouts, 429/503 from below, ...).
    pub drops: u32,
    /// Mean latency of the samples.
    pub avg_ns: u64,
    /// Smallest latency seen.
    pub min_ns: u64,
    /// Median latency.
    pub p50_ns: u64,
    /// 90th percentile latency.
    pub p90_ns: u64,
    /// 99th percentile latency.
    pub p99_ns: u64,
    /// The most requests in flight at once during the window.
    pub max_inflight: u32,
    /// Requests in flight when the window closed.
    pub inflight: u32,
}

impl Window {
    /// A window of exactly one completion, as Netflix's `onSample(start, rtt, inflight,
    /// didDrop)` sees it: every latency field is `rtt_ns`.
    pub const fn single(now: u64, rtt_ns: u64, inflight: u32, dropped: bool) -> Self {
        Self {
            now,
            samples: if dropped { 0 } else { 1 },
            drops: if dropped { 1 } else { 0 },
            avg_ns: rtt_ns,
            min_ns: rtt_ns,
            p50_ns: rtt_ns,
            p90_ns: rtt_ns,
            p99_ns: rtt_ns,
            max_inflight: inflight,
            inflight,
        }
    }

    /// Whether the window saw any overload outcome.
    pub const fn dropped(&self) -> bool {
        self.drops > 0
    }
}

/// A limit algorithm: fed windows, returns the new limit.
pub trait Algorithm {
    /// The current limit.
    fn limit(&self) -> f64;
    /// Folds one window into the state and returns the new limit.
    fn update(&mut self, window: &Window) -> f64;
    /// A short stable name (`"aimd"`, `"gradient"`, ...).
    fn name(&self) -> &'static str;
}

/// The configuration of any algorithm: what bindings and the limiter construct from.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum AlgorithmConfig {
    /// [`Fixed`].
    Fixed(FixedConfig),
    /// [`Aimd`].
    Aimd(AimdConfig),
    /// [`HysteresisAimd`].
    Hysteresis(HysteresisConfig),
    /// [`Gradient`].
    Gradient(GradientConfig),
    /// [`Gradient2`].
    Gradient2(Gradient2Config),
    /// [`Vegas`].
    Vegas(VegasConfig),
}

impl Default for AlgorithmConfig {
    /// The default algorithm (see the crate README for why).
    fn default() -> Self {
        Self::Gradient(GradientConfig::default())
    }
}

/// The algorithms' names by code (the order of [`AnyAlgorithm`]'s variants), so that a
/// limiter keeps a small code rather than a `&'static str` (a pointer into one binary,
/// meaningless to another process sharing the limiter).
pub const ALGORITHM_NAMES: [&str; 6] =
    ["fixed", "aimd", "hysteresis_aimd", "gradient", "gradient2", "vegas"];

/// The name of algorithm `code` ([`ALGORITHM_NAMES`]), or `"unknown"`.
pub fn algorithm_name(code: u8) -> &'static str {
    ALGORITHM_NAMES.get(code as usize).copied().unwrap_or("unknown")
}

impl AnyAlgorithm {
    /// This algorithm's code: its index in [`ALGORITHM_NAMES`].
    pub fn code(&self) -> u8 {
        match self {
            Self::Fixed(_) => 0,
            Self::Aimd(_) => 1,
            Self::Hysteresis(_) => 2,
            Self::Gradient(_) => 3,
            Self::Gradient2(_) => 4,
            Self::Vegas(_) => 5,
        }
    }
}

/// Any algorithm, by value: the limiter stores one of these (no `dyn`, no allocation).
// Boxing the large variants would allocate; the limiter holds exactly one of these.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyAlgorithm {
    /// [`Fixed`].
    Fixed(Fixed),
    /// [`Aimd`].
    Aimd(Aimd),
    /// [`HysteresisAimd`].
    Hysteresis(HysteresisAimd),
    /// [`Gradient`].
    Gradient(Gradient),
    /// [`Gradient2`].
    Gradient2(Gradient2),
    /// [`Vegas`].
    Vegas(Vegas),
}

impl AnyAlgorithm {
    /// Builds the algorithm `config` describes, validating every number.
    pub fn new(config: AlgorithmConfig) -> Result<Self, ConfigError> {
        Ok(match config {
            AlgorithmConfig::Fixed(c) => Self::Fixed(Fixed::new(c)?),
            AlgorithmConfig::Aimd(c) => Self::Aimd(Aimd::new(c)?),
            AlgorithmConfig::Hysteresis(c) => Self::Hysteresis(HysteresisAimd::new(c)?),
            AlgorithmConfig::Gradient(c) => Self::Gradient(Gradient::new(c)?),
            AlgorithmConfig::Gradient2(c) => Self::Gradient2(Gradient2::new(c)?),
            AlgorithmConfig::Vegas(c) => Self::Vegas(Vegas::new(c)?),
        })
    }

    /// The algorithm's counters in the common shape (Gradient's own richer snapshot is
    /// [`Gradient::metrics`]).
    pub fn metrics(&self) -> AlgorithmMetrics {
        match self {
            Self::Fixed(a) => a.metrics(),
            Self::Aimd(a) => a.metrics(),
            Self::Hysteresis(a) => a.metrics(),
            Self::Gradient(a) => a.metrics().into(),
            Self::Gradient2(a) => a.metrics(),
            Self::Vegas(a) => a.metrics(),
        }
    }

    fn inner(&self) -> &dyn Algorithm {
        match self {
            Self::Fixed(a) => a,
            Self::Aimd(a) => a,
            Self::Hysteresis(a) => a,
            Self::Gradient(a) => a,
            Self::Gradient2(a) => a,
            Self::Vegas(a) => a,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn Algorithm {
        match self {
            Self::Fixed(a) => a,
            Self::Aimd(a) => a,
            Self::Hysteresis(a) => a,
            Self::Gradient(a) => a,
            Self::Gradient2(a) => a,
            Self::Vegas(a) => a,
        }
    }
}

impl Algorithm for AnyAlgorithm {
    fn limit(&self) -> f64 {
        self.inner().limit()
    }
    fn update(&mut self, window: &Window) -> f64 {
        self.inner_mut().update(window)
    }
    fn name(&self) -> &'static str {
        self.inner().name()
    }
}

/// The canonical paths of one algorithm's floor, initial limit and ceiling.
pub(crate) struct BoundPaths {
    pub(crate) min: &'static str,
    pub(crate) initial: &'static str,
    pub(crate) max: &'static str,
}

/// The [`BoundPaths`] of the algorithm named `$alg` (`"gradient"`).
macro_rules! bound_paths {
    ($alg:literal) => {
        $crate::limit::BoundPaths {
            min: concat!("limiter.", $alg, ".min_limit"),
            initial: concat!("limiter.", $alg, ".initial_limit"),
            max: concat!("limiter.", $alg, ".max_limit"),
        }
    };
}
pub(crate) use bound_paths;

/// Validates a floor/initial/ceiling triple shared by every algorithm's config.
pub(crate) fn check_bounds(
    min: f64,
    initial: f64,
    max: f64,
    p: BoundPaths,
) -> Result<(), ConfigError> {
    crate::types::check_range(min, 1e-6, 1e9, p.min)?;
    crate::types::check_range(max, 1e-6, 1e9, p.max)?;
    crate::types::check_range(initial, 1e-6, 1e9, p.initial)?;
    if min > max {
        return Err(ConfigError::inconsistent(p.min, "must not be above", p.max));
    }
    if initial < min {
        return Err(ConfigError::inconsistent(p.initial, "must not be below", p.min));
    }
    if initial > max {
        return Err(ConfigError::inconsistent(p.initial, "must not be above", p.max));
    }
    Ok(())
}
