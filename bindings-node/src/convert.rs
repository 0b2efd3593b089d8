//! Conversions at the boundary: milliseconds to nanoseconds, counts, priorities, core
//! errors to JS errors. Every conversion refuses NaN, infinities, negatives, fractions
//! where an integer is required, and values too large for the field; the object is left
//! unchanged (a refused call changes nothing).
//!
//! Error statuses: `InvalidArg` for a value of the right type but out of range (the facade
//! throws a `RangeError`), `GenericFailure` with a `SG_*` code prefix for usage errors.

use napi::{Error, Result, Status};
use surgeguard_core::{ConfigError, Outcome, Priority, Reason, UsageError};

/// Nanoseconds per millisecond.
pub const MS: f64 = 1e6;

/// A range error naming the option.
pub fn range(what: &str, msg: &str) -> Error {
    Error::new(Status::InvalidArg, format!("{what} {msg}"))
}

/// A core `ConfigError`, as a range error prefixed with the structure's name, its fields
/// spelled as the JS options are (the table in `fields.rs`: `dropTolerance`,
/// `codelTargetMs`).
pub fn config_err(ty: &str, e: ConfigError) -> Error {
    let name = |p: &'static str| crate::fields::js_name(p).unwrap_or(p);
    Error::new(Status::InvalidArg, format!("{ty}: {}", e.display_with(name)))
}

/// A core `UsageError` as an error whose message starts with its stable `SG_*` code.
pub fn usage_err(e: UsageError) -> Error {
    if e == UsageError::TimeOutOfRange {
        // Bad input, not misuse: a RangeError like every other out-of-range argument.
        return Error::new(Status::InvalidArg, "nowNs must be in [0, 2^62]");
    }
    Error::new(Status::GenericFailure, format!("{}: {e}", usage_code(e)))
}

/// The stable code of a usage error (the same names as `err.code` in the facade).
pub fn usage_code(e: UsageError) -> &'static str {
    match e {
        UsageError::AlreadyReleased => "SG_ALREADY_RELEASED",
        UsageError::ForeignHandle => "SG_FOREIGN_HANDLE",
        UsageError::UnknownTicket => "SG_UNKNOWN_TICKET",
        UsageError::BadLevel => "SG_BAD_LEVEL",
        _ => "SG_USAGE",
    }
}

/// Milliseconds (finite, ≥ 0, below ~584 years) to nanoseconds, rounded to the nearest.
pub fn ms_to_ns(what: &str, ms: f64) -> Result<u64> {
    if !ms.is_finite() {
        return Err(range(what, "must be a finite number of milliseconds"));
    }
    if ms < 0.0 {
        return Err(range(what, "must not be negative"));
    }
    let ns = (ms * MS).round();
    if ns >= u64::MAX as f64 {
        return Err(range(what, "is too large"));
    }
    Ok(ns as u64)
}

/// Nanoseconds to milliseconds (a JS number; exact below ~104 days).
#[inline]
pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / MS
}

/// A whole number in `[lo, hi]`.
pub fn int_in(what: &str, x: f64, lo: u64, hi: u64) -> Result<u64> {
    if !x.is_finite() || x.fract() != 0.0 {
        return Err(range(what, "must be a whole number"));
    }
    if x < lo as f64 || x > hi as f64 {
        return Err(range(what, &format!("must be in [{lo}, {hi}]")));
    }
    Ok(x as u64)
}

/// A whole number fitting a `u32`.
pub fn u32_of(what: &str, x: f64) -> Result<u32> {
    int_in(what, x, 0, u32::MAX as u64).map(|v| v as u32)
}

/// A finite float.
pub fn finite(what: &str, x: f64) -> Result<f64> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(range(what, "must be a finite number"))
    }
}

/// A priority level index below `levels`.
pub fn level_of(x: f64, levels: u8) -> Result<Priority> {
    let l = int_in("priority", x, 0, levels as u64 - 1)?;
    Ok(Priority::new(l as u8).expect("levels ≤ 8"))
}

/// The wire value of an outcome (0 success, 1 dropped, 2 ignored).
pub fn outcome_of(x: f64) -> Result<Outcome> {
    let v = int_in("outcome", x, 0, 2)?;
    Ok(Outcome::from_u32(v as u32).expect("checked range"))
}

/// A reason from its wire value.
pub fn reason_of(code: u32) -> Option<Reason> {
    Reason::ALL.iter().copied().find(|r| *r as u32 == code)
}
