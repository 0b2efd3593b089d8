//! One description of each config's fields: path, unit, range, default and a line of
//! docs, as static data (`const FIELDS: &[FieldSpec]` on each config). Described so far:
//! the Limiter and its limit algorithms (gradient, fixed, AIMD, hysteresis, Gradient2,
//! Vegas), the Gate, the retry budget and token
//! throttle, the backoff, the circuit breaker, the adaptive throttle and the flow
//! controls ([`CONFIGS`]).
//!
//! The path is the one a [`ConfigError`](crate::ConfigError) names: the family, then the
//! field as the Rust struct spells it, nested settings as further segments
//! (`limiter.gradient.buffer`, `gate.codel.target_ns`). The bindings spell each path their
//! own way (a table per binding) and document the same defaults; the workspace's tests
//! check them against this description, and this description against each config's
//! `Default`.
//!
//! ```
//! use surgeguard_core::fields::{Unit, Value};
//! use surgeguard_core::limit::GradientConfig;
//! let f = GradientConfig::FIELDS.iter().find(|f| f.path == "limiter.gradient.buffer").unwrap();
//! assert_eq!((f.unit, f.default, f.min, f.max), (Unit::Number, Value::Float(0.1), 0.0, 10.0));
//! ```

use core::fmt;

use crate::backoff::BackoffConfig;
use crate::breaker::{CircuitBreakerConfig, MAX_COUNT_WINDOW, MAX_PROBES};
use crate::codel::MAX_INTERVAL_NS;
use crate::flow::{CreditsConfig, LagMeterConfig, WatermarksConfig};
use crate::gate::GateConfig;
use crate::limit::{
    AimdConfig, FixedConfig, Gradient2Config, GradientConfig, HysteresisConfig, VegasConfig,
};
use crate::limiter::LimiterConfig;
use crate::retry::{RetryBudgetConfig, TokenThrottleConfig};
use crate::throttle::AdaptiveThrottleConfig;
use crate::time::{MS, SEC};

/// The unit of a field's value (what a binding converts: C and Rust take ns, Python
/// seconds, Node milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unit {
    /// A duration in nanoseconds.
    Nanos,
    /// A whole number of things (levels, samples, waiters).
    Count,
    /// A fraction (a share, a probability).
    Ratio,
    /// Any other real number (a multiplier, a percentile, a limit).
    Number,
    /// On or off.
    Flag,
    /// A seed: any 64-bit value.
    Seed,
    /// One of a few names (an enum).
    Choice,
}

/// A field's default.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A real number.
    Float(f64),
    /// A whole number (in the field's unit: ns for [`Unit::Nanos`]).
    Int(u64),
    /// A flag, or an optional group that is on (`true`) or off by default.
    Bool(bool),
    /// An optional setting that is unset by default (no maximum wait, no aging).
    Off,
    /// An enum setting, by the name the bindings accept (`"gradient"`, `"folly"`).
    Name(&'static str),
    /// One real number per priority level, the levels in use first (the rest are 0).
    Floats(&'static [f64]),
}

/// The description of one config field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldSpec {
    /// The canonical path (`"limiter.gradient.buffer"`).
    pub path: &'static str,
    /// What the number counts.
    pub unit: Unit,
    /// The smallest accepted value (in the unit; `0` where none applies).
    pub min: f64,
    /// The largest accepted value (in the unit; `f64::INFINITY` where none applies).
    pub max: f64,
    /// The value in the config's `Default`.
    pub default: Value,
    /// One line of docs.
    pub doc: &'static str,
}

impl FieldSpec {
    /// The default as docs write it: durations in the largest whole unit (`"100 ms"`,
    /// `"1 s"`, `"0"`), flags `true`/`false`, unset options `"none"`, per-level values
    /// joined by `" / "`.
    pub fn default_text(&self) -> impl fmt::Display + '_ {
        DefaultText(self)
    }

    /// The part of the field's path after its family and nested groups (`"buffer"`).
    pub fn leaf(&self) -> &'static str {
        match self.path.rfind('.') {
            Some(i) => &self.path[i + 1..],
            None => self.path,
        }
    }
}

struct DefaultText<'a>(&'a FieldSpec);

impl fmt::Display for DefaultText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.unit, self.0.default) {
            (Unit::Nanos, Value::Int(ns)) => write_duration(f, ns),
            (_, Value::Float(x)) => write!(f, "{x}"),
            (Unit::Seed, Value::Int(n)) if n > 0 => write!(f, "{n:#X}"),
            (_, Value::Int(n)) => write!(f, "{n}"),
            (_, Value::Bool(b)) => write!(f, "{b}"),
            (_, Value::Off) => f.write_str("none"),
            (_, Value::Name(n)) => f.write_str(n),
            (_, Value::Floats(xs)) => {
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" / ")?;
                    }
                    write!(f, "{x}")?;
                }
                Ok(())
            }
        }
    }
}

fn write_duration(f: &mut fmt::Formatter<'_>, ns: u64) -> fmt::Result {
    for (unit, name) in [(SEC, "s"), (MS, "ms"), (1_000, "µs")] {
        if ns >= unit && ns % unit == 0 {
            return write!(f, "{} {name}", ns / unit);
        }
    }
    if ns == 0 {
        f.write_str("0")
    } else {
        write!(f, "{ns} ns")
    }
}

const fn spec(
    path: &'static str,
    unit: Unit,
    min: f64,
    max: f64,
    default: Value,
    doc: &'static str,
) -> FieldSpec {
    FieldSpec { path, unit, min, max, default, doc }
}

const INF: f64 = f64::INFINITY;
const HOUR_NS: f64 = 3600.0 * SEC as f64;
const DAY_NS: f64 = 86_400.0 * SEC as f64;
/// The largest value below 1 (the top of a range open at 1, such as `[0.5, 1)`).
const BELOW_1: f64 = 1.0 - f64::EPSILON / 2.0;
/// The smallest positive value (the bottom of a range open at 0, such as `(0, 1]`).
const ABOVE_0: f64 = f64::MIN_POSITIVE;
use Unit::*;
use Value::*;

impl LimiterConfig {
    /// The description of each field (the algorithm's own: [`GradientConfig::FIELDS`]).
    pub const FIELDS: &'static [FieldSpec] = &[
        spec("limiter.algorithm", Choice, 0.0, 0.0, Name("gradient"), "The limit algorithm."),
        spec("limiter.levels", Count, 1.0, 8.0, Int(3), "Priority levels in use."),
        spec(
            "limiter.weights",
            Ratio,
            0.0,
            1.0,
            Floats(&[0.7, 0.25, 0.05]),
            "Each level's share (the most it may hold back while active); sum at most 1.",
        ),
        spec(
            "limiter.min_window_ns",
            Nanos,
            0.0,
            HOUR_NS,
            Int(100 * MS),
            "A window is at least this long (at most max_window_ns).",
        ),
        spec(
            "limiter.max_window_ns",
            Nanos,
            1.0,
            HOUR_NS,
            Int(SEC),
            "A window is at most this long.",
        ),
        spec(
            "limiter.window_rtt_multiple",
            Number,
            0.0,
            1e6,
            Float(2.0),
            "Window length = this × the previous window's smallest latency.",
        ),
        spec(
            "limiter.min_samples",
            Count,
            0.0,
            1e6,
            Int(10),
            "A window closes only with this many samples, or any drop.",
        ),
        spec(
            "limiter.active_ns",
            Nanos,
            1.0,
            INF,
            Int(SEC),
            "A level is active while it saw an arrival within this long.",
        ),
    ];
}

impl GradientConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "limiter.gradient.initial_limit",
            Number,
            1e-6,
            1e9,
            Float(20.0),
            "The limit before any window.",
        ),
        spec(
            "limiter.gradient.min_limit",
            Number,
            1e-6,
            1e9,
            Float(1.0),
            "Floor (may be below 1).",
        ),
        spec("limiter.gradient.max_limit", Number, 1e-6, 1e9, Float(1000.0), "Ceiling."),
        spec(
            "limiter.gradient.buffer",
            Number,
            0.0,
            10.0,
            Float(0.1),
            "Latency allowance over the baseline.",
        ),
        spec(
            "limiter.gradient.headroom",
            Number,
            0.0,
            10.0,
            Float(0.8),
            "Multiplier of the sqrt(limit · gradient) headroom.",
        ),
        spec(
            "limiter.gradient.smoothing",
            Ratio,
            0.01,
            1.0,
            Float(0.3),
            "Fraction of each step applied.",
        ),
        spec(
            "limiter.gradient.sample_percentile",
            Number,
            50.0,
            99.0,
            Float(50.0),
            "The window latency percentile used as the sample.",
        ),
        spec(
            "limiter.gradient.probe_interval_ns",
            Nanos,
            0.0,
            DAY_NS,
            Int(0),
            "Min-RTT re-measurement interval (at least 1 ms); 0 = probe-free baseline.",
        ),
        spec("limiter.gradient.probe_jitter", Ratio, 0.0, 1.0, Float(0.15), "Probe start jitter."),
        spec(
            "limiter.gradient.probe_limit",
            Number,
            1e-6,
            1e9,
            Float(3.0),
            "The limit pinned during a probe.",
        ),
        spec(
            "limiter.gradient.probe_samples",
            Count,
            1.0,
            1e6,
            Int(50),
            "Samples that end a probe.",
        ),
        spec(
            "limiter.gradient.pinned_baseline_ns",
            Nanos,
            0.0,
            HOUR_NS,
            Int(0),
            "A fixed baseline; 0 = off.",
        ),
        spec(
            "limiter.gradient.backoff",
            Ratio,
            0.1,
            1.0,
            Float(0.9),
            "Back-off on a window whose drops exceed drop_tolerance; 1 = ignore drops.",
        ),
        spec(
            "limiter.gradient.drop_tolerance",
            Ratio,
            0.0,
            0.999,
            Float(0.01),
            "Share of a window's outcomes that may be drops without a back-off.",
        ),
        spec(
            "limiter.gradient.slow_start",
            Flag,
            0.0,
            1.0,
            Bool(true),
            "Double the limit per uncongested window until the first congestion signal.",
        ),
        spec(
            "limiter.gradient.app_limited_ratio",
            Ratio,
            0.0,
            1.0,
            Float(0.6),
            "No growth while the window's most in flight is below this × limit; 0 = off.",
        ),
        spec(
            "limiter.gradient.seed",
            Seed,
            0.0,
            u64::MAX as f64,
            Int(0x5EED_5EED_5EED_5EED),
            "Seed of the probe jitter.",
        ),
    ];
}

/// The floor, ceiling and initial limit every algorithm takes, in `[1e-6, 1e9]` with
/// `min <= initial <= max` (the defaults differ per algorithm).
macro_rules! bounds {
    ($algo:literal, $initial:expr, $min:expr, $max:expr) => {
        [
            spec(
                concat!("limiter.", $algo, ".initial_limit"),
                Number,
                1e-6,
                1e9,
                Float($initial),
                "The limit before any window (between min_limit and max_limit).",
            ),
            spec(
                concat!("limiter.", $algo, ".min_limit"),
                Number,
                1e-6,
                1e9,
                Float($min),
                "Floor (may be below 1).",
            ),
            spec(
                concat!("limiter.", $algo, ".max_limit"),
                Number,
                1e-6,
                1e9,
                Float($max),
                "Ceiling.",
            ),
        ]
    };
}

const fn app_limited(path: &'static str) -> FieldSpec {
    spec(
        path,
        Ratio,
        0.0,
        1.0,
        Float(0.5),
        "No growth while the window's most in flight is below this × limit; 0 = off.",
    )
}

const fn no_slow_start(path: &'static str) -> FieldSpec {
    spec(
        path,
        Flag,
        0.0,
        1.0,
        Bool(false),
        "Grow by min(samples, limit) per window until the first congestion signal.",
    )
}

impl FixedConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &bounds!("fixed", 20.0, 1.0, 1000.0);
}

const AIMD_BOUNDS: [FieldSpec; 3] = bounds!("aimd", 10.0, 1.0, 200.0);

impl AimdConfig {
    /// The description of each field (the latency-target mode; [`AimdConfig::netflix`]
    /// is NCL's `AIMDLimit`).
    pub const FIELDS: &'static [FieldSpec] = &[
        AIMD_BOUNDS[0],
        AIMD_BOUNDS[1],
        AIMD_BOUNDS[2],
        spec(
            "limiter.aimd.target_latency_ns",
            Nanos,
            1.0,
            DAY_NS,
            Int(50 * MS),
            "A window below this latency grows the limit by 1, one above it backs off.",
        ),
        spec(
            "limiter.aimd.latency_percentile",
            Number,
            0.0,
            0.99,
            Float(0.0),
            "The latency compared with the target: 0 = the mean, or exactly 0.5, 0.9 or 0.99.",
        ),
        spec(
            "limiter.aimd.backoff_ratio",
            Ratio,
            0.5,
            BELOW_1,
            Float(0.9),
            "The factor applied on overload, in [0.5, 1).",
        ),
        spec(
            "limiter.aimd.timeout_ns",
            Nanos,
            1.0,
            DAY_NS,
            Int(5 * SEC),
            "A window whose latency exceeds this counts as a drop.",
        ),
        app_limited("limiter.aimd.app_limited_fraction"),
        no_slow_start("limiter.aimd.slow_start"),
        spec(
            "limiter.aimd.netflix_parity",
            Flag,
            0.0,
            1.0,
            Bool(false),
            "Reproduce NCL AIMDLimit exactly (whole-number limits).",
        ),
    ];
}

const HYSTERESIS_BOUNDS: [FieldSpec; 3] = bounds!("hysteresis", 20.0, 1.0, 1000.0);

impl HysteresisConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &[
        HYSTERESIS_BOUNDS[0],
        HYSTERESIS_BOUNDS[1],
        HYSTERESIS_BOUNDS[2],
        spec(
            "limiter.hysteresis.target_latency_ns",
            Nanos,
            1.0,
            DAY_NS,
            Int(50 * MS),
            "The latency the zones are measured against.",
        ),
        spec(
            "limiter.hysteresis.healthy_below",
            Number,
            ABOVE_0,
            1000.0,
            Float(0.8),
            "Healthy while the rolling p99 is below this × target (at most critical_above).",
        ),
        spec(
            "limiter.hysteresis.critical_above",
            Number,
            ABOVE_0,
            1000.0,
            Float(1.5),
            "Critical once the rolling p99 is above this × target.",
        ),
        spec(
            "limiter.hysteresis.critical_factor",
            Ratio,
            ABOVE_0,
            BELOW_1,
            Float(0.5),
            "The factor of a critical event, in (0, 1).",
        ),
        spec(
            "limiter.hysteresis.jump_rise",
            Number,
            ABOVE_0,
            100.0,
            Float(0.2),
            "A jump: the average latency rises by more than this fraction within jump_window_ns.",
        ),
        spec(
            "limiter.hysteresis.jump_window_ns",
            Nanos,
            1.0,
            DAY_NS,
            Int(2 * SEC),
            "The look-back of jump detection.",
        ),
        spec(
            "limiter.hysteresis.jump_factor",
            Ratio,
            ABOVE_0,
            BELOW_1,
            Float(0.8),
            "The factor applied on a jump, in (0, 1).",
        ),
        spec(
            "limiter.hysteresis.avg_alpha",
            Ratio,
            ABOVE_0,
            1.0,
            Float(0.1),
            "EWMA weight of each completion in the average latency.",
        ),
        spec(
            "limiter.hysteresis.cool_off_ns",
            Nanos,
            1.0,
            DAY_NS,
            Int(5 * SEC),
            "No additive increase for this long after a critical event.",
        ),
        spec(
            "limiter.hysteresis.p99_window_ns",
            Nanos,
            1.0,
            DAY_NS,
            Int(10 * SEC),
            "The horizon of the rolling p99.",
        ),
        app_limited("limiter.hysteresis.app_limited_fraction"),
        no_slow_start("limiter.hysteresis.slow_start"),
    ];
}

const GRADIENT2_BOUNDS: [FieldSpec; 3] = bounds!("gradient2", 20.0, 1.0, 1000.0);

impl Gradient2Config {
    /// The description of each field (the fixed mode; [`Gradient2Config::netflix`] is
    /// NCL's `Gradient2Limit`).
    pub const FIELDS: &'static [FieldSpec] = &[
        GRADIENT2_BOUNDS[0],
        GRADIENT2_BOUNDS[1],
        GRADIENT2_BOUNDS[2],
        spec(
            "limiter.gradient2.smoothing",
            Ratio,
            ABOVE_0,
            1.0,
            Float(0.2),
            "Weight of the new value: L = (1 - s)·L + s·new.",
        ),
        spec(
            "limiter.gradient2.queue_size",
            Number,
            0.0,
            1e6,
            Float(4.0),
            "The queue allowance added each window.",
        ),
        spec(
            "limiter.gradient2.long_window",
            Count,
            1.0,
            1e6,
            Int(600),
            "Windows in the long-term RTT average.",
        ),
        spec(
            "limiter.gradient2.rtt_tolerance",
            Number,
            1.0,
            1000.0,
            Float(1.5),
            "How far the short RTT may exceed the long one before the limit shrinks.",
        ),
        spec(
            "limiter.gradient2.fixed",
            Flag,
            0.0,
            1.0,
            Bool(true),
            "Drops back off and the allowance needs a gradient of 0.9; false = NCL parity.",
        ),
        spec(
            "limiter.gradient2.backoff_ratio",
            Ratio,
            0.5,
            BELOW_1,
            Float(0.9),
            "The factor applied on a drop in the fixed mode, in [0.5, 1).",
        ),
        app_limited("limiter.gradient2.app_limited_fraction"),
        no_slow_start("limiter.gradient2.slow_start"),
    ];
}

const VEGAS_BOUNDS: [FieldSpec; 3] = bounds!("vegas", 20.0, 1.0, 1000.0);

impl VegasConfig {
    /// The description of each field (NCL `VegasLimit`'s defaults).
    pub const FIELDS: &'static [FieldSpec] = &[
        VEGAS_BOUNDS[0],
        VEGAS_BOUNDS[1],
        VEGAS_BOUNDS[2],
        spec(
            "limiter.vegas.smoothing",
            Ratio,
            ABOVE_0,
            1.0,
            Float(1.0),
            "Weight of the new value: L = (1 - s)·L + s·new; 1 = no smoothing.",
        ),
        spec(
            "limiter.vegas.alpha",
            Count,
            0.0,
            1e6,
            Off,
            "Queue size under which the limit grows (at most beta); none = NCL's 3·log10(L).",
        ),
        spec(
            "limiter.vegas.beta",
            Count,
            0.0,
            1e6,
            Off,
            "Queue size above which the limit shrinks; none = NCL's 6·log10(L).",
        ),
        spec(
            "limiter.vegas.threshold",
            Count,
            0.0,
            1e6,
            Off,
            "Queue size at or under which the limit grows by beta at once; none = log10(L).",
        ),
        spec(
            "limiter.vegas.decrease_ratio",
            Ratio,
            ABOVE_0,
            BELOW_1,
            Off,
            "The decrease L × this, in (0, 1); none = NCL's L - log10(L).",
        ),
        spec(
            "limiter.vegas.probe_multiplier",
            Count,
            0.0,
            1e6,
            Int(30),
            "Re-measure the no-load RTT every jitter × this × L windows; 0 = never.",
        ),
        spec("limiter.vegas.seed", Seed, 0.0, u64::MAX as f64, Int(0), "Seed of the probe jitter."),
        app_limited("limiter.vegas.app_limited_fraction"),
        no_slow_start("limiter.vegas.slow_start"),
    ];
}

impl GateConfig {
    /// The description of each field (its limiter's: [`LimiterConfig::FIELDS`]).
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "gate.queue_capacity",
            Count,
            1.0,
            INF,
            Off,
            "Waiters held at most; none = the queue's compile-time capacity.",
        ),
        spec("gate.codel", Flag, 0.0, 1.0, Bool(true), "CoDel per level (folly's 5 ms / 100 ms)."),
        spec(
            "gate.codel.target_ns",
            Nanos,
            1.0,
            MAX_INTERVAL_NS as f64,
            Int(5 * MS),
            "Acceptable standing queueing delay (below interval_ns).",
        ),
        spec(
            "gate.codel.interval_ns",
            Nanos,
            1.0,
            MAX_INTERVAL_NS as f64,
            Int(100 * MS),
            "Window over which the minimum delay is judged.",
        ),
        spec(
            "gate.codel.mode",
            Choice,
            0.0,
            0.0,
            Name("folly"),
            "The drop rule: folly or rfc8289.",
        ),
        spec(
            "gate.lifo",
            Choice,
            0.0,
            0.0,
            Name("codel"),
            "Newest-first while CoDel says overloaded (codel), never, or above an occupancy.",
        ),
        spec(
            "gate.lifo.occupancy",
            Ratio,
            f64::MIN_POSITIVE,
            1.0,
            Float(crate::gate::HBASE_LIFO_THRESHOLD),
            "The occupancy fraction of the occupancy trigger (HBase's threshold).",
        ),
        spec(
            "gate.max_wait_ns",
            Nanos,
            1.0,
            HOUR_NS,
            Off,
            "A waiter queued longer than this is expired; none = deadlines and CoDel only.",
        ),
        spec(
            "gate.aging",
            Flag,
            0.0,
            1.0,
            Bool(false),
            "Aging: waiters of `from` queued longer than `after_ns` move to `to`.",
        ),
        spec("gate.aging.from", Count, 0.0, 7.0, Int(1), "The level that ages."),
        spec("gate.aging.to", Count, 1.0, 7.0, Int(2), "The less important level it moves to."),
        spec(
            "gate.aging.after_ns",
            Nanos,
            1.0,
            HOUR_NS,
            Int(500 * MS),
            "How long it may wait first.",
        ),
        spec(
            "gate.initial_service_ns",
            Nanos,
            0.0,
            HOUR_NS,
            Int(0),
            "Expected service time before any sample; 0 = unknown until the first success.",
        ),
        spec(
            "gate.service_alpha",
            Ratio,
            f64::MIN_POSITIVE,
            1.0,
            Float(0.1),
            "EWMA weight of each success latency in the service-time estimate.",
        ),
        spec(
            "gate.fallback_retry_after_ns",
            Nanos,
            1.0,
            HOUR_NS,
            Int(SEC),
            "retry_after when nothing better is known.",
        ),
    ];
}

impl RetryBudgetConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "retry_budget.ttl",
            Nanos,
            SEC as f64,
            60.0 * SEC as f64,
            Int(10 * SEC),
            "How long a deposit can fund retries.",
        ),
        spec(
            "retry_budget.min_retries_per_sec",
            Count,
            0.0,
            1e6,
            Int(10),
            "Retries per second allowed even with no traffic.",
        ),
        spec(
            "retry_budget.percent_can_retry",
            Ratio,
            0.0,
            1000.0,
            Float(0.1),
            "Retries as a fraction of requests (0, or at least 0.001).",
        ),
    ];
}

impl TokenThrottleConfig {
    /// The description of each field (gRPC A6 `retryThrottling`).
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "token_throttle.max_tokens",
            Number,
            f64::MIN_POSITIVE,
            1000.0,
            Float(10.0),
            "maxTokens: retries are allowed while the tokens are above half of it.",
        ),
        spec(
            "token_throttle.token_ratio",
            Number,
            0.001,
            1000.0,
            Float(0.1),
            "tokenRatio: tokens a success adds (at most max_tokens).",
        ),
    ];
}

impl BackoffConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &[
        spec("backoff.base", Nanos, 1_000.0, DAY_NS, Int(100 * MS), "First delay ceiling."),
        spec("backoff.multiplier", Number, 1.0, 100.0, Float(2.0), "Growth per attempt."),
        spec(
            "backoff.cap",
            Nanos,
            1_000.0,
            DAY_NS,
            Int(SEC),
            "Largest delay chosen by the backoff itself (at least base).",
        ),
        spec(
            "backoff.jitter",
            Choice,
            0.0,
            0.0,
            Name("full"),
            "The randomisation: none, full, equal or decorrelated.",
        ),
    ];
}

impl CircuitBreakerConfig {
    /// The description of each field. The window is a count of calls unless a time
    /// window is given.
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "breaker.window.count",
            Count,
            1.0,
            MAX_COUNT_WINDOW as f64,
            Int(100),
            "A window of the last this many calls.",
        ),
        spec(
            "breaker.window.time",
            Nanos,
            10.0 * MS as f64,
            DAY_NS,
            Off,
            "A window of the calls in the last this long, instead of a count.",
        ),
        spec(
            "breaker.failure_rate_threshold",
            Ratio,
            f64::MIN_POSITIVE,
            1.0,
            Float(0.5),
            "Open when failures / calls reach this.",
        ),
        spec(
            "breaker.slow_call_rate_threshold",
            Ratio,
            f64::MIN_POSITIVE,
            1.0,
            Float(1.0),
            "Open when slow calls / calls reach this.",
        ),
        spec(
            "breaker.slow_call_duration",
            Nanos,
            1.0,
            INF,
            Int(60 * SEC),
            "A call at least this long is slow.",
        ),
        spec(
            "breaker.minimum_calls",
            Count,
            1.0,
            u32::MAX as f64,
            Int(100),
            "No rate is judged on fewer calls (for a count window, at most its size).",
        ),
        spec(
            "breaker.open_duration",
            Nanos,
            MS as f64,
            DAY_NS,
            Int(60 * SEC),
            "How long the breaker stays open before probing.",
        ),
        spec(
            "breaker.open_jitter",
            Ratio,
            0.0,
            1.0,
            Float(0.2),
            "Up to this fraction of open_duration is added at random to each open period.",
        ),
        spec(
            "breaker.half_open_probes",
            Count,
            1.0,
            MAX_PROBES as f64,
            Int(10),
            "Probes admitted in half-open.",
        ),
        spec(
            "breaker.probe_lease",
            Nanos,
            MS as f64,
            DAY_NS,
            Int(60 * SEC),
            "A probe silent this long gives its slot to the next caller.",
        ),
        spec(
            "breaker.ramp_duration",
            Nanos,
            0.0,
            DAY_NS,
            Int(30 * SEC),
            "After closing, traffic ramps up over this long; 0 = no ramp.",
        ),
        spec("breaker.seed", Seed, 0.0, u64::MAX as f64, Int(0), "Seed of the jitter."),
    ];
}

impl AdaptiveThrottleConfig {
    /// The description of each field (the SRE book's client-side throttling).
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "adaptive_throttle.k",
            Number,
            1.0,
            1000.0,
            Float(2.0),
            "K: requests per accept the client may send before it throttles.",
        ),
        spec(
            "adaptive_throttle.window",
            Nanos,
            SEC as f64,
            HOUR_NS,
            Int(120 * SEC),
            "The window the requests and accepts are counted over.",
        ),
        spec(
            "adaptive_throttle.max_drop_probability",
            Ratio,
            0.0,
            1.0,
            Float(0.75),
            "Cap on the local drop probability.",
        ),
        spec(
            "adaptive_throttle.form",
            Choice,
            0.0,
            0.0,
            Name("ring"),
            "The exact ring of buckets, or O(1) decayed counts (ema).",
        ),
    ];
}

impl CreditsConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &[
        spec(
            "credits.capacity",
            Count,
            1.0,
            u32::MAX as f64,
            Int(256),
            "High water: the most credit outstanding at once (the consumer's buffer).",
        ),
        spec(
            "credits.low_water",
            Count,
            0.0,
            u32::MAX as f64,
            Int(64),
            "Low water: replenish only once outstanding credit falls to this (below capacity).",
        ),
    ];
}

impl LagMeterConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] =
        &[spec("lag_meter.bucket", Nanos, 1_000.0, DAY_NS, Int(SEC), "Width of one rate bucket.")];
}

impl WatermarksConfig {
    /// The description of each field.
    pub const FIELDS: &'static [FieldSpec] = &[
        spec("watermarks.capacity", Count, 1.0, u64::MAX as f64, Int(400), "Total capacity."),
        spec(
            "watermarks.pause_below",
            Count,
            1.0,
            u64::MAX as f64,
            Int(100),
            "Pause when free capacity falls below this.",
        ),
        spec(
            "watermarks.resume_above",
            Count,
            1.0,
            u64::MAX as f64,
            Int(200),
            "Resume when free capacity rises above this (above pause_below, below capacity).",
        ),
    ];
}

/// Every described config: its family path and its fields. A binding that exposes the
/// family exposes each of these fields (the workspace's config check).
pub const CONFIGS: &[(&str, &[FieldSpec])] = &[
    ("limiter", LimiterConfig::FIELDS),
    ("limiter.gradient", GradientConfig::FIELDS),
    ("limiter.fixed", FixedConfig::FIELDS),
    ("limiter.aimd", AimdConfig::FIELDS),
    ("limiter.hysteresis", HysteresisConfig::FIELDS),
    ("limiter.gradient2", Gradient2Config::FIELDS),
    ("limiter.vegas", VegasConfig::FIELDS),
    ("gate", GateConfig::FIELDS),
    ("retry_budget", RetryBudgetConfig::FIELDS),
    ("token_throttle", TokenThrottleConfig::FIELDS),
    ("backoff", BackoffConfig::FIELDS),
    ("breaker", CircuitBreakerConfig::FIELDS),
    ("adaptive_throttle", AdaptiveThrottleConfig::FIELDS),
    ("credits", CreditsConfig::FIELDS),
    ("lag_meter", LagMeterConfig::FIELDS),
    ("watermarks", WatermarksConfig::FIELDS),
];

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use std::string::ToString;
    use std::vec::Vec;

    use super::*;
    use crate::codel::{CodelConfig, CodelMode};
    use crate::gate::{Aging, LifoTrigger};
    use crate::limit::AlgorithmConfig;

    /// `(path, value)` of every field of `c`, read by destructuring without `..`: a field
    /// added to the struct does not compile here until it is listed (and described).
    fn limiter_values(c: &LimiterConfig) -> Vec<(&'static str, Value)> {
        let LimiterConfig {
            algorithm,
            levels,
            weights,
            min_window_ns,
            max_window_ns,
            window_rtt_multiple,
            min_samples,
            active_ns,
        } = *c;
        let algorithm = match algorithm {
            AlgorithmConfig::Gradient(g) if g == GradientConfig::default() => Name("gradient"),
            _ => Name("another algorithm or settings"),
        };
        let used = weights.iter().rposition(|&w| w != 0.0).map_or(0, |i| i + 1);
        let weights = match &weights[..used] {
            [0.7, 0.25, 0.05] => Floats(&[0.7, 0.25, 0.05]),
            _ => Name("other weights"),
        };
        std::vec![
            ("limiter.algorithm", algorithm),
            ("limiter.levels", Int(levels.into())),
            ("limiter.weights", weights),
            ("limiter.min_window_ns", Int(min_window_ns)),
            ("limiter.max_window_ns", Int(max_window_ns)),
            ("limiter.window_rtt_multiple", Float(window_rtt_multiple)),
            ("limiter.min_samples", Int(min_samples.into())),
            ("limiter.active_ns", Int(active_ns)),
        ]
    }

    fn gradient_values(c: &GradientConfig) -> Vec<(&'static str, Value)> {
        let GradientConfig {
            initial_limit,
            min_limit,
            max_limit,
            buffer,
            headroom,
            smoothing,
            sample_percentile,
            probe_interval_ns,
            probe_jitter,
            probe_limit,
            probe_samples,
            pinned_baseline_ns,
            backoff,
            drop_tolerance,
            slow_start,
            app_limited_ratio,
            seed,
        } = *c;
        std::vec![
            ("limiter.gradient.initial_limit", Float(initial_limit)),
            ("limiter.gradient.min_limit", Float(min_limit)),
            ("limiter.gradient.max_limit", Float(max_limit)),
            ("limiter.gradient.buffer", Float(buffer)),
            ("limiter.gradient.headroom", Float(headroom)),
            ("limiter.gradient.smoothing", Float(smoothing)),
            ("limiter.gradient.sample_percentile", Float(sample_percentile)),
            ("limiter.gradient.probe_interval_ns", Int(probe_interval_ns)),
            ("limiter.gradient.probe_jitter", Float(probe_jitter)),
            ("limiter.gradient.probe_limit", Float(probe_limit)),
            ("limiter.gradient.probe_samples", Int(probe_samples.into())),
            ("limiter.gradient.pinned_baseline_ns", Int(pinned_baseline_ns)),
            ("limiter.gradient.backoff", Float(backoff)),
            ("limiter.gradient.drop_tolerance", Float(drop_tolerance)),
            ("limiter.gradient.slow_start", Bool(slow_start)),
            ("limiter.gradient.app_limited_ratio", Float(app_limited_ratio)),
            ("limiter.gradient.seed", Int(seed)),
        ]
    }

    fn fixed_values(c: &FixedConfig) -> Vec<(&'static str, Value)> {
        let FixedConfig { initial_limit, min_limit, max_limit } = *c;
        std::vec![
            ("limiter.fixed.initial_limit", Float(initial_limit)),
            ("limiter.fixed.min_limit", Float(min_limit)),
            ("limiter.fixed.max_limit", Float(max_limit)),
        ]
    }

    fn aimd_values(c: &AimdConfig) -> Vec<(&'static str, Value)> {
        let AimdConfig {
            initial_limit,
            min_limit,
            max_limit,
            target_latency_ns,
            latency_percentile,
            backoff_ratio,
            timeout_ns,
            app_limited_fraction,
            slow_start,
            netflix_parity,
        } = *c;
        std::vec![
            ("limiter.aimd.initial_limit", Float(initial_limit)),
            ("limiter.aimd.min_limit", Float(min_limit)),
            ("limiter.aimd.max_limit", Float(max_limit)),
            ("limiter.aimd.target_latency_ns", Int(target_latency_ns)),
            ("limiter.aimd.latency_percentile", Float(latency_percentile)),
            ("limiter.aimd.backoff_ratio", Float(backoff_ratio)),
            ("limiter.aimd.timeout_ns", Int(timeout_ns)),
            ("limiter.aimd.app_limited_fraction", Float(app_limited_fraction)),
            ("limiter.aimd.slow_start", Bool(slow_start)),
            ("limiter.aimd.netflix_parity", Bool(netflix_parity)),
        ]
    }

    fn hysteresis_values(c: &HysteresisConfig) -> Vec<(&'static str, Value)> {
        let HysteresisConfig {
            initial_limit,
            min_limit,
            max_limit,
            target_latency_ns,
            healthy_below,
            critical_above,
            critical_factor,
            jump_rise,
            jump_window_ns,
            jump_factor,
            avg_alpha,
            cool_off_ns,
            p99_window_ns,
            app_limited_fraction,
            slow_start,
        } = *c;
        std::vec![
            ("limiter.hysteresis.initial_limit", Float(initial_limit)),
            ("limiter.hysteresis.min_limit", Float(min_limit)),
            ("limiter.hysteresis.max_limit", Float(max_limit)),
            ("limiter.hysteresis.target_latency_ns", Int(target_latency_ns)),
            ("limiter.hysteresis.healthy_below", Float(healthy_below)),
            ("limiter.hysteresis.critical_above", Float(critical_above)),
            ("limiter.hysteresis.critical_factor", Float(critical_factor)),
            ("limiter.hysteresis.jump_rise", Float(jump_rise)),
            ("limiter.hysteresis.jump_window_ns", Int(jump_window_ns)),
            ("limiter.hysteresis.jump_factor", Float(jump_factor)),
            ("limiter.hysteresis.avg_alpha", Float(avg_alpha)),
            ("limiter.hysteresis.cool_off_ns", Int(cool_off_ns)),
            ("limiter.hysteresis.p99_window_ns", Int(p99_window_ns)),
            ("limiter.hysteresis.app_limited_fraction", Float(app_limited_fraction)),
            ("limiter.hysteresis.slow_start", Bool(slow_start)),
        ]
    }

    fn gradient2_values(c: &Gradient2Config) -> Vec<(&'static str, Value)> {
        let Gradient2Config {
            initial_limit,
            min_limit,
            max_limit,
            smoothing,
            queue_size,
            long_window,
            rtt_tolerance,
            fixed,
            backoff_ratio,
            app_limited_fraction,
            slow_start,
        } = *c;
        std::vec![
            ("limiter.gradient2.initial_limit", Float(initial_limit)),
            ("limiter.gradient2.min_limit", Float(min_limit)),
            ("limiter.gradient2.max_limit", Float(max_limit)),
            ("limiter.gradient2.smoothing", Float(smoothing)),
            ("limiter.gradient2.queue_size", Float(queue_size)),
            ("limiter.gradient2.long_window", Int(long_window.into())),
            ("limiter.gradient2.rtt_tolerance", Float(rtt_tolerance)),
            ("limiter.gradient2.fixed", Bool(fixed)),
            ("limiter.gradient2.backoff_ratio", Float(backoff_ratio)),
            ("limiter.gradient2.app_limited_fraction", Float(app_limited_fraction)),
            ("limiter.gradient2.slow_start", Bool(slow_start)),
        ]
    }

    fn vegas_values(c: &VegasConfig) -> Vec<(&'static str, Value)> {
        let VegasConfig {
            initial_limit,
            min_limit,
            max_limit,
            smoothing,
            alpha,
            beta,
            threshold,
            decrease_ratio,
            probe_multiplier,
            seed,
            app_limited_fraction,
            slow_start,
        } = *c;
        let opt = |v: Option<u32>| v.map_or(Off, |v| Int(v.into()));
        std::vec![
            ("limiter.vegas.initial_limit", Float(initial_limit)),
            ("limiter.vegas.min_limit", Float(min_limit)),
            ("limiter.vegas.max_limit", Float(max_limit)),
            ("limiter.vegas.smoothing", Float(smoothing)),
            ("limiter.vegas.alpha", opt(alpha)),
            ("limiter.vegas.beta", opt(beta)),
            ("limiter.vegas.threshold", opt(threshold)),
            ("limiter.vegas.decrease_ratio", decrease_ratio.map_or(Off, Float)),
            ("limiter.vegas.probe_multiplier", Int(probe_multiplier.into())),
            ("limiter.vegas.seed", Int(seed)),
            ("limiter.vegas.app_limited_fraction", Float(app_limited_fraction)),
            ("limiter.vegas.slow_start", Bool(slow_start)),
        ]
    }

    fn gate_values(c: &GateConfig) -> Vec<(&'static str, Value)> {
        let GateConfig {
            limiter,
            queue_capacity,
            codel,
            lifo,
            max_wait_ns,
            aging,
            initial_service_ns,
            service_alpha,
            fallback_retry_after_ns,
        } = *c;
        assert_eq!(
            limiter,
            LimiterConfig::default(),
            "a Gate's limiter is described as a Limiter's"
        );
        // The groups' settings when the group is off are the ones a binding turns on (the
        // C struct's flattened fields, the Python `aging=True`).
        let CodelConfig { target_ns, interval_ns, mode } = codel.unwrap_or_default();
        let Aging { from, to, after_ns } =
            aging.unwrap_or(Aging::NORMAL_TO_BACKGROUND_AFTER_500_MS);
        let opt = |v: Option<u64>| v.map_or(Off, Int);
        std::vec![
            ("gate.queue_capacity", opt(queue_capacity.map(|c| c as u64))),
            ("gate.codel", Bool(codel.is_some())),
            ("gate.codel.target_ns", Int(target_ns)),
            ("gate.codel.interval_ns", Int(interval_ns)),
            (
                "gate.codel.mode",
                Name(match mode {
                    CodelMode::Folly => "folly",
                    CodelMode::Rfc8289 => "rfc8289",
                }),
            ),
            (
                "gate.lifo",
                Name(match lifo {
                    LifoTrigger::CodelOverloaded => "codel",
                    LifoTrigger::Never => "never",
                    LifoTrigger::Occupancy(_) => "occupancy",
                }),
            ),
            (
                "gate.lifo.occupancy",
                Float(match lifo {
                    LifoTrigger::Occupancy(f) => f,
                    _ => crate::gate::HBASE_LIFO_THRESHOLD,
                }),
            ),
            ("gate.max_wait_ns", opt(max_wait_ns)),
            ("gate.aging", Bool(aging.is_some())),
            ("gate.aging.from", Int(from.index() as u64)),
            ("gate.aging.to", Int(to.index() as u64)),
            ("gate.aging.after_ns", Int(after_ns)),
            ("gate.initial_service_ns", Int(initial_service_ns)),
            ("gate.service_alpha", Float(service_alpha)),
            ("gate.fallback_retry_after_ns", Int(fallback_retry_after_ns)),
        ]
    }

    fn retry_budget_values(c: &RetryBudgetConfig) -> Vec<(&'static str, Value)> {
        let RetryBudgetConfig { ttl, min_retries_per_sec, percent_can_retry } = *c;
        std::vec![
            ("retry_budget.ttl", Int(ttl)),
            ("retry_budget.min_retries_per_sec", Int(min_retries_per_sec.into())),
            ("retry_budget.percent_can_retry", Float(percent_can_retry)),
        ]
    }

    fn token_throttle_values(c: &TokenThrottleConfig) -> Vec<(&'static str, Value)> {
        let TokenThrottleConfig { max_tokens, token_ratio } = *c;
        std::vec![
            ("token_throttle.max_tokens", Float(max_tokens)),
            ("token_throttle.token_ratio", Float(token_ratio)),
        ]
    }

    fn backoff_values(c: &BackoffConfig) -> Vec<(&'static str, Value)> {
        use crate::backoff::Jitter;
        let BackoffConfig { base, multiplier, cap, jitter } = *c;
        let jitter = match jitter {
            Jitter::None => "none",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
        };
        std::vec![
            ("backoff.base", Int(base)),
            ("backoff.multiplier", Float(multiplier)),
            ("backoff.cap", Int(cap)),
            ("backoff.jitter", Name(jitter)),
        ]
    }

    fn breaker_values(c: &CircuitBreakerConfig) -> Vec<(&'static str, Value)> {
        use crate::breaker::BreakerWindow;
        let CircuitBreakerConfig {
            window,
            failure_rate_threshold,
            slow_call_rate_threshold,
            slow_call_duration,
            minimum_calls,
            open_duration,
            open_jitter,
            half_open_probes,
            probe_lease,
            ramp_duration,
            seed,
        } = *c;
        let (count, time) = match window {
            BreakerWindow::Count(n) => (Int(n.into()), Off),
            BreakerWindow::Time(d) => (Off, Int(d)),
        };
        std::vec![
            ("breaker.window.count", count),
            ("breaker.window.time", time),
            ("breaker.failure_rate_threshold", Float(failure_rate_threshold)),
            ("breaker.slow_call_rate_threshold", Float(slow_call_rate_threshold)),
            ("breaker.slow_call_duration", Int(slow_call_duration)),
            ("breaker.minimum_calls", Int(minimum_calls.into())),
            ("breaker.open_duration", Int(open_duration)),
            ("breaker.open_jitter", Float(open_jitter)),
            ("breaker.half_open_probes", Int(half_open_probes.into())),
            ("breaker.probe_lease", Int(probe_lease)),
            ("breaker.ramp_duration", Int(ramp_duration)),
            ("breaker.seed", Int(seed)),
        ]
    }

    fn adaptive_throttle_values(c: &AdaptiveThrottleConfig) -> Vec<(&'static str, Value)> {
        use crate::throttle::ThrottleForm;
        let AdaptiveThrottleConfig { k, window, max_drop_probability, form } = *c;
        let form = match form {
            ThrottleForm::Ring => "ring",
            ThrottleForm::Ema => "ema",
        };
        std::vec![
            ("adaptive_throttle.k", Float(k)),
            ("adaptive_throttle.window", Int(window)),
            ("adaptive_throttle.max_drop_probability", Float(max_drop_probability)),
            ("adaptive_throttle.form", Name(form)),
        ]
    }

    fn flow_values() -> Vec<(&'static str, Value)> {
        let CreditsConfig { capacity, low_water } = CreditsConfig::default();
        let LagMeterConfig { bucket } = LagMeterConfig::default();
        let WatermarksConfig { capacity: total, pause_below, resume_above } =
            WatermarksConfig::default();
        std::vec![
            ("credits.capacity", Int(capacity.into())),
            ("credits.low_water", Int(low_water.into())),
            ("lag_meter.bucket", Int(bucket)),
            ("watermarks.capacity", Int(total)),
            ("watermarks.pause_below", Int(pause_below)),
            ("watermarks.resume_above", Int(resume_above)),
        ]
    }

    /// Every field of the default config is described, in order, with its default.
    fn check(fields: &[FieldSpec], values: Vec<(&'static str, Value)>) {
        let described: Vec<_> = fields.iter().map(|f| (f.path, f.default)).collect();
        assert_eq!(described, values);
    }

    #[test]
    fn every_field_is_described_with_its_default() {
        check(LimiterConfig::FIELDS, limiter_values(&LimiterConfig::default()));
        check(GradientConfig::FIELDS, gradient_values(&GradientConfig::default()));
        check(FixedConfig::FIELDS, fixed_values(&FixedConfig::default()));
        check(AimdConfig::FIELDS, aimd_values(&AimdConfig::default()));
        check(HysteresisConfig::FIELDS, hysteresis_values(&HysteresisConfig::default()));
        check(Gradient2Config::FIELDS, gradient2_values(&Gradient2Config::default()));
        check(VegasConfig::FIELDS, vegas_values(&VegasConfig::default()));
        check(GateConfig::FIELDS, gate_values(&GateConfig::default()));
        check(RetryBudgetConfig::FIELDS, retry_budget_values(&RetryBudgetConfig::default()));
        check(TokenThrottleConfig::FIELDS, token_throttle_values(&TokenThrottleConfig::default()));
        check(BackoffConfig::FIELDS, backoff_values(&BackoffConfig::default()));
        check(CircuitBreakerConfig::FIELDS, breaker_values(&CircuitBreakerConfig::default()));
        check(
            AdaptiveThrottleConfig::FIELDS,
            adaptive_throttle_values(&AdaptiveThrottleConfig::default()),
        );
        let flow: Vec<FieldSpec> =
            [CreditsConfig::FIELDS, LagMeterConfig::FIELDS, WatermarksConfig::FIELDS].concat();
        check(&flow, flow_values());
    }

    #[test]
    fn a_changed_default_is_found() {
        let c = GradientConfig { drop_tolerance: 0.02, ..GradientConfig::default() };
        let values = gradient_values(&c);
        let described: Vec<_> =
            GradientConfig::FIELDS.iter().map(|f| (f.path, f.default)).collect();
        assert_ne!(described, values);
    }

    #[test]
    fn paths_are_canonical_and_unique() {
        let mut all: Vec<&str> = Vec::new();
        for (family, fields) in CONFIGS {
            for f in *fields {
                assert!(f.path.starts_with(family), "{} outside {family}", f.path);
                let rest = &f.path[family.len()..];
                assert!(rest.starts_with('.') && rest.len() > 1, "{}", f.path);
                assert!(
                    f.path.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'_'
                        || b == b'.'),
                    "{}",
                    f.path
                );
                assert!(f.min <= f.max, "{}", f.path);
                assert!(!f.doc.is_empty());
                all.push(f.path);
            }
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a path is described twice");
    }

    /// The ranges are the validators': the ends are accepted, just past them refused,
    /// with the field's path (the real-valued fields of the gradient controller).
    #[test]
    fn gradient_ranges_are_the_validators() {
        let set = |path: &str, x: f64| {
            let mut c = GradientConfig::default();
            let slot = match path {
                "limiter.gradient.buffer" => &mut c.buffer,
                "limiter.gradient.headroom" => &mut c.headroom,
                "limiter.gradient.smoothing" => &mut c.smoothing,
                "limiter.gradient.sample_percentile" => &mut c.sample_percentile,
                "limiter.gradient.probe_jitter" => &mut c.probe_jitter,
                "limiter.gradient.backoff" => &mut c.backoff,
                "limiter.gradient.drop_tolerance" => &mut c.drop_tolerance,
                "limiter.gradient.app_limited_ratio" => &mut c.app_limited_ratio,
                _ => return None,
            };
            *slot = x;
            Some(crate::limit::Gradient::new(c).err())
        };
        let mut checked = 0;
        for f in GradientConfig::FIELDS {
            let Some(ok) = set(f.path, f.min) else { continue };
            assert_eq!(ok, None, "{} at its min", f.path);
            assert_eq!(set(f.path, f.max).unwrap(), None, "{} at its max", f.path);
            for bad in [f.min - 1e-3, f.max + 1e-3] {
                let e = set(f.path, bad).unwrap().expect("refused");
                assert_eq!(e.field, f.path, "{bad}");
            }
            checked += 1;
        }
        assert_eq!(checked, 8);
    }

    /// `Some(result of building the algorithm with `path` set to `x`)` for the real-valued
    /// settings of the other algorithms (`None`: not one of them).
    fn build_with(path: &str, x: f64) -> Option<Result<(), crate::ConfigError>> {
        use crate::limit::{Aimd, Gradient2, HysteresisAimd, Vegas};
        let (algo, leaf) = path.strip_prefix("limiter.")?.split_once('.')?;
        Some(match algo {
            "aimd" => {
                let mut c = AimdConfig::default();
                *match leaf {
                    "backoff_ratio" => &mut c.backoff_ratio,
                    "app_limited_fraction" => &mut c.app_limited_fraction,
                    _ => return None,
                } = x;
                Aimd::new(c).map(drop)
            }
            "hysteresis" => {
                let mut c = HysteresisConfig::default();
                *match leaf {
                    // healthy_below may not exceed critical_above: test it below 1.5.
                    "critical_factor" => &mut c.critical_factor,
                    "jump_rise" => &mut c.jump_rise,
                    "jump_factor" => &mut c.jump_factor,
                    "avg_alpha" => &mut c.avg_alpha,
                    "app_limited_fraction" => &mut c.app_limited_fraction,
                    _ => return None,
                } = x;
                HysteresisAimd::new(c).map(drop)
            }
            "gradient2" => {
                let mut c = Gradient2Config::default();
                *match leaf {
                    "smoothing" => &mut c.smoothing,
                    "queue_size" => &mut c.queue_size,
                    "rtt_tolerance" => &mut c.rtt_tolerance,
                    "backoff_ratio" => &mut c.backoff_ratio,
                    "app_limited_fraction" => &mut c.app_limited_fraction,
                    _ => return None,
                } = x;
                Gradient2::new(c).map(drop)
            }
            "vegas" => {
                let mut c = VegasConfig::default();
                match leaf {
                    "smoothing" => c.smoothing = x,
                    "decrease_ratio" => c.decrease_ratio = Some(x),
                    "app_limited_fraction" => c.app_limited_fraction = x,
                    _ => return None,
                }
                Vegas::new(c).map(drop)
            }
            _ => return None,
        })
    }

    /// The described ranges of the algorithms' real-valued settings are their validators':
    /// both ends accepted, just past them (and the open end itself) refused, naming the path.
    #[test]
    fn algorithm_ranges_are_the_validators() {
        let mut checked = 0;
        for fields in [
            AimdConfig::FIELDS,
            HysteresisConfig::FIELDS,
            Gradient2Config::FIELDS,
            VegasConfig::FIELDS,
        ] {
            for f in fields {
                let Some(at_min) = build_with(f.path, f.min) else { continue };
                assert_eq!(at_min, Ok(()), "{} at its min", f.path);
                assert_eq!(build_with(f.path, f.max).unwrap(), Ok(()), "{} at its max", f.path);
                let mut bad = std::vec![f.min - 1e-3, f.max + 1e-3];
                if f.min == ABOVE_0 {
                    bad.push(0.0);
                }
                if f.max == BELOW_1 {
                    bad.push(1.0);
                }
                for x in bad {
                    let e = build_with(f.path, x).unwrap().expect_err("refused");
                    assert_eq!(e.field, f.path, "{x}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 15);
    }

    #[test]
    fn defaults_read_as_docs_write_them() {
        let text = |path: &str| {
            let f = CONFIGS.iter().flat_map(|(_, f)| f.iter()).find(|f| f.path == path).unwrap();
            f.default_text().to_string()
        };
        assert_eq!(text("limiter.min_window_ns"), "100 ms");
        assert_eq!(text("retry_budget.ttl"), "10 s");
        assert_eq!(text("gate.initial_service_ns"), "0");
        assert_eq!(text("limiter.weights"), "0.7 / 0.25 / 0.05");
        assert_eq!(text("gate.max_wait_ns"), "none");
        assert_eq!(text("limiter.gradient.slow_start"), "true");
        assert_eq!(text("limiter.gradient.buffer"), "0.1");
    }
}
