//! Small `Copy` vocabulary shared by every structure: outcomes, priorities, reasons and
//! errors. Bindings map each one to one (C status code, Python exception, JS `err.code`).

use core::fmt;

/// How an admitted unit of work ended. Every permit ends exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Outcome {
    /// Completed; its latency is a sample for the limit algorithm.
    Success = 0,
    /// An overload signal: a timeout, a 429/503 from below, our own rejection downstream.
    /// Every limit algorithm backs off on drops.
    Dropped = 1,
    /// Not a capacity signal (caller cancelled, a 4xx): the permit returns, no sample.
    Ignored = 2,
}

impl Outcome {
    /// Decodes the wire value used by the bindings (0, 1, 2).
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Success),
            1 => Some(Self::Dropped),
            2 => Some(Self::Ignored),
            _ => None,
        }
    }
}

/// A priority level: 0 is the most important. At most [`Priority::MAX_LEVELS`] levels.
///
/// The default three are the `X-Request-Priority` header's values: `critical` (0),
/// `normal` (1, the default) and `background` (2). A more important level is never
/// dropped to serve a less important one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Priority(u8);

impl Priority {
    /// Most important of the default levels (P0).
    pub const CRITICAL: Self = Self(0);
    /// The default level (P1).
    pub const NORMAL: Self = Self(1);
    /// Sheddable work (P2).
    pub const BACKGROUND: Self = Self(2);
    /// The most levels any structure supports.
    pub const MAX_LEVELS: usize = 8;

    /// The level `level`, if it is below [`Priority::MAX_LEVELS`].
    pub const fn new(level: u8) -> Option<Self> {
        if (level as usize) < Self::MAX_LEVELS {
            Some(Self(level))
        } else {
            None
        }
    }

    /// The level as an index (0 = most important).
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Parses the default level names of the `X-Request-Priority` header.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "critical" => Some(Self::CRITICAL),
            "normal" => Some(Self::NORMAL),
            "background" => Some(Self::BACKGROUND),
            _ => None,
        }
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self::NORMAL
    }
}

/// Why something was refused. Every rejection carries one, plus a `retry_after` hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum Reason {
    /// In-flight work is at the concurrency limit (or the level's share of it).
    LimitReached = 1,
    /// The admission queue is full and the arrival is not more important than any waiter.
    QueueFull = 2,
    /// A more important arrival took this waiter's place in a full queue.
    Evicted = 3,
    /// The deadline cannot be met at the current drain rate.
    DeadlineUnmeetable = 4,
    /// The waiter's deadline (or remaining time vs expected service time) ran out.
    Expired = 5,
    /// CoDel: the queue stood above target for a whole interval and this waiter waited
    /// longer than the slough timeout.
    CodelSlough = 6,
    /// The on-call switch sheds this level.
    Shed = 7,
    /// The circuit breaker is open (or half-open with no probe slot free).
    BreakerOpen = 8,
    /// The retry budget has no tokens for another retry.
    BudgetExhausted = 9,
    /// Client-side adaptive throttling refused the request locally.
    Throttled = 10,
    /// The rate limiter has no capacity before the hint.
    RateLimited = 11,
    /// A per-key concurrency cap refused it.
    KeyLimit = 12,
    /// A per-key rate limit refused it.
    KeyRate = 13,
    /// The waiter was cancelled by its owner.
    Cancelled = 14,
    /// The consumer has granted no credit for another item (pipeline backpressure).
    NoCredit = 15,
}

impl Reason {
    /// A stable, machine-readable name (snake case), the same in every binding.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LimitReached => "limit_reached",
            Self::QueueFull => "queue_full",
            Self::Evicted => "evicted",
            Self::DeadlineUnmeetable => "deadline_unmeetable",
            Self::Expired => "expired",
            Self::CodelSlough => "codel_slough",
            Self::Shed => "shed",
            Self::BreakerOpen => "breaker_open",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Throttled => "throttled",
            Self::RateLimited => "rate_limited",
            Self::KeyLimit => "key_limit",
            Self::KeyRate => "key_rate",
            Self::Cancelled => "cancelled",
            Self::NoCredit => "no_credit",
        }
    }

    /// Every reason, in wire order.
    pub const ALL: [Reason; 15] = [
        Self::LimitReached,
        Self::QueueFull,
        Self::Evicted,
        Self::DeadlineUnmeetable,
        Self::Expired,
        Self::CodelSlough,
        Self::Shed,
        Self::BreakerOpen,
        Self::BudgetExhausted,
        Self::Throttled,
        Self::RateLimited,
        Self::KeyLimit,
        Self::KeyRate,
        Self::Cancelled,
        Self::NoCredit,
    ];
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: why, and when trying again could succeed (nanoseconds from `now`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rejected {
    /// Why.
    pub reason: Reason,
    /// Do not try again sooner than this many nanoseconds from the call's `now`.
    pub retry_after: u64,
}

impl Rejected {
    /// A rejection for `reason` with a `retry_after` hint in nanoseconds.
    pub const fn new(reason: Reason, retry_after: u64) -> Self {
        Self { reason, retry_after }
    }
}

impl core::error::Error for Rejected {}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rejected: {} (retry after {} ns)", self.reason, self.retry_after)
    }
}

/// What is wrong with a config field (the `kind` of a [`ConfigError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// A number was NaN or infinite.
    NotFinite,
    /// A value was outside its allowed range (on its own, whatever the other settings).
    OutOfRange,
    /// The value is allowed on its own but contradicts another setting (`other`), e.g. a
    /// minimum above its maximum.
    Inconsistent,
}

impl ConfigErrorKind {
    /// What the kind says of a field, as a phrase after its name (`"is out of range"`).
    pub const fn phrase(self) -> &'static str {
        match self {
            Self::NotFinite => "must be a finite number",
            Self::OutOfRange => "is out of range",
            Self::Inconsistent => "is inconsistent",
        }
    }
}

/// A configuration that cannot be used. Returned by every constructor and setter; the
/// structure is left unchanged.
///
/// `field` is the canonical path of the offending setting: the family, then the field
/// as the Rust config struct spells it, with nested configs as segments
/// (`"limiter.gradient.buffer"`, `"gate.codel.target_ns"`, `"retry_budget.ttl"`). A
/// Gate's limiter is named as a limiter's (`"limiter.levels"`). Bindings map the path to
/// their own spelling with a table; the path never changes with the wording. `other`
/// names the setting an `Inconsistent` field contradicts, the same way; `detail` is an
/// optional short rule with no field names in it (`"must be below"`).
///
/// ```
/// use surgeguard_core::limit::{AlgorithmConfig, GradientConfig};
/// use surgeguard_core::{ConfigErrorKind, Limiter, LimiterConfig};
/// let g = GradientConfig { buffer: f64::NAN, ..GradientConfig::default() };
/// let cfg = LimiterConfig { algorithm: AlgorithmConfig::Gradient(g), ..LimiterConfig::default() };
/// let e = Limiter::new(cfg).unwrap_err();
/// assert_eq!((e.kind, e.field), (ConfigErrorKind::NotFinite, "limiter.gradient.buffer"));
/// assert_eq!(e.to_string(), "limiter.gradient.buffer must be a finite number");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ConfigError {
    /// What is wrong.
    pub kind: ConfigErrorKind,
    /// The canonical path of the field (see the type's docs).
    pub field: &'static str,
    /// For `Inconsistent`: the canonical path of the setting it contradicts.
    pub other: Option<&'static str>,
    /// A short rule with no field names (`"must be below"`, `"above the queue's CAP"`).
    pub detail: Option<&'static str>,
}

impl ConfigError {
    /// `field` is NaN or infinite.
    pub const fn not_finite(field: &'static str) -> Self {
        Self { kind: ConfigErrorKind::NotFinite, field, other: None, detail: None }
    }

    /// `field` is outside its allowed range.
    pub const fn out_of_range(field: &'static str) -> Self {
        Self { kind: ConfigErrorKind::OutOfRange, field, other: None, detail: None }
    }

    /// `field` contradicts `other`; `rule` says how they must relate, read as
    /// "`field` `rule` `other`" (`"must be below"`).
    pub const fn inconsistent(
        field: &'static str,
        rule: &'static str,
        other: &'static str,
    ) -> Self {
        Self { kind: ConfigErrorKind::Inconsistent, field, other: Some(other), detail: Some(rule) }
    }

    /// `field` contradicts itself (no other setting is involved); `rule` says how.
    pub const fn inconsistent_alone(field: &'static str, rule: &'static str) -> Self {
        Self { kind: ConfigErrorKind::Inconsistent, field, other: None, detail: Some(rule) }
    }

    /// The same error with a short rule (no field names) attached.
    pub const fn with_detail(self, detail: &'static str) -> Self {
        Self { detail: Some(detail), ..self }
    }

    /// The message with each path spelled by `name` (a binding's table), e.g.
    /// `e.display_with(|p| c_name(p))`; `Display` is `display_with(|p| p)`.
    pub fn display_with<'a, F: Fn(&'static str) -> &'a str>(
        &self,
        name: F,
    ) -> impl fmt::Display + use<'a, F> {
        Spelled { e: *self, name }
    }
}

/// A [`ConfigError`]'s message with its paths spelled by a binding.
struct Spelled<F> {
    e: ConfigError,
    name: F,
}

impl<'a, F: Fn(&'static str) -> &'a str> fmt::Display for Spelled<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.e;
        let field = (self.name)(e.field);
        match (e.kind, e.other, e.detail) {
            (ConfigErrorKind::Inconsistent, Some(other), rule) => {
                let other = (self.name)(other);
                write!(f, "{field} {} {other}", rule.unwrap_or("contradicts"))
            }
            (kind, _, Some(detail)) => write!(f, "{field} {}: {detail}", kind.phrase()),
            (kind, _, None) => write!(f, "{field} {}", kind.phrase()),
        }
    }
}

impl core::error::Error for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.display_with(|p| p), f)
    }
}

/// A call that misuses a handle. The structure is left unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UsageError {
    /// The permit was already released.
    AlreadyReleased,
    /// The permit or ticket belongs to another structure.
    ForeignHandle,
    /// The ticket is unknown (never issued, already granted, expired or cancelled).
    UnknownTicket,
    /// A priority level outside the configured levels.
    BadLevel,
    /// A `now` above [`crate::time::MAX_NOW`]: bad input, not a time.
    TimeOutOfRange,
}

impl core::error::Error for UsageError {}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AlreadyReleased => "permit already released",
            Self::ForeignHandle => "handle belongs to another object",
            Self::UnknownTicket => "unknown ticket",
            Self::BadLevel => "priority level out of range",
            Self::TimeOutOfRange => "now is out of range (above time::MAX_NOW = 2^62 ns)",
        })
    }
}

/// Checks that `x` is finite and within `[lo, hi]`.
pub(crate) fn check_range(
    x: f64,
    lo: f64,
    hi: f64,
    what: &'static str,
) -> Result<f64, ConfigError> {
    if !x.is_finite() {
        return Err(ConfigError::not_finite(what));
    }
    if x < lo || x > hi {
        return Err(ConfigError::out_of_range(what));
    }
    Ok(x)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn config_errors_read_from_kind_and_paths() {
        let e = ConfigError::not_finite("limiter.gradient.buffer");
        assert_eq!(e.to_string(), "limiter.gradient.buffer must be a finite number");
        let e = ConfigError::out_of_range("gate.queue_capacity").with_detail("above CAP");
        assert_eq!(e.to_string(), "gate.queue_capacity is out of range: above CAP");
        let e = ConfigError::inconsistent("backoff.cap", "must not be below", "backoff.base");
        assert_eq!(e.to_string(), "backoff.cap must not be below backoff.base");
        let e = ConfigError::inconsistent_alone("limiter.weights", "the levels sum above 1");
        assert_eq!(e.to_string(), "limiter.weights is inconsistent: the levels sum above 1");
        // A binding spells every path its own way; the wording stays the core's.
        let name = |p: &'static str| if p == "backoff.cap" { "capMs" } else { "baseMs" };
        let e = ConfigError::inconsistent("backoff.cap", "must not be below", "backoff.base");
        assert_eq!(e.display_with(name).to_string(), "capMs must not be below baseMs");
    }
}
