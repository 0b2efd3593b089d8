//! What every binding function shares: the native clock, seconds ↔ nanoseconds, priorities,
//! outcomes, and the one-to-one mapping of core errors to Python exceptions
//! (`surgeguard.errors`).

use std::sync::OnceLock;
use std::time::Instant;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple, PyType};
use surgeguard_core::{ConfigError, Outcome, Priority, Reason, Rejected, UsageError};

/// Nanoseconds per second, as a float.
pub const SEC_F: f64 = 1e9;

/// The native clock: raw `CLOCK_MONOTONIC` in nanoseconds (time since boot), the same
/// origin in every process and in every surgeguard binding, so a timestamp stored in memory
/// shared between worker processes means the same to each of them. At least 1 (so "0 =
/// never" sentinels in the core stay meaningful) and at most `MAX_NOW`. One `clock_gettime`
/// through the vDSO.
#[cfg(unix)]
#[inline]
pub fn clock_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the whole call; CLOCK_MONOTONIC is
    // supported on every unix target Rust supports (std's `Instant` reads it too), and the
    // call writes nothing else.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return fallback_ns();
    }
    let ns = (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64);
    ns.clamp(1, surgeguard_core::time::MAX_NOW)
}

/// The native clock where there is no raw `CLOCK_MONOTONIC`: an origin fixed at the first
/// call in this process (so not comparable across processes there).
#[cfg(not(unix))]
#[inline]
pub fn clock_ns() -> u64 {
    fallback_ns()
}

/// An `Instant` origin fixed at the first call in this process.
#[cold]
fn fallback_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    (origin.elapsed().as_nanos().min(u128::from(surgeguard_core::time::MAX_NOW - 1)) as u64) + 1
}

/// `now_ns=` if given (an int in `[0, 2**62]`), else the native clock.
#[inline]
pub fn now_or_clock(now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    match now_ns {
        None => Ok(clock_ns()),
        Some(v) if v.is_none() => Ok(clock_ns()),
        Some(v) => now_arg(v),
    }
}

/// Extracts an explicit `now_ns` with a clear message.
#[cold]
pub fn now_arg(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    ns_arg("now_ns", v)
}

/// `clock=`: a callable returning the time as int nanoseconds (like `time.monotonic_ns`),
/// read by the object wherever it would read the native clock; `None`: the native clock.
pub fn clock_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(c) if c.is_callable() => Ok(Some(c.clone().unbind())),
        Some(c) => Err(PyTypeError::new_err(format!(
            "clock must be a callable returning int nanoseconds (like time.monotonic_ns), got {}",
            type_name(c)
        ))),
    }
}

/// The time from an object's `clock=` (or the native clock).
pub fn read_clock(py: Python<'_>, clock: Option<&Py<PyAny>>) -> PyResult<u64> {
    match clock {
        None => Ok(clock_ns()),
        Some(c) => ns_arg("the value of clock()", &c.bind(py).call0()?),
    }
}

/// `now_ns=` if given, else the object's clock.
pub fn now_from(
    py: Python<'_>,
    clock: Option<&Py<PyAny>>,
    now_ns: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    match now_ns {
        Some(v) if !v.is_none() => now_arg(v),
        _ => read_clock(py, clock),
    }
}

/// A time in nanoseconds: an int in `[0, 2**62]`.
fn ns_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int (nanoseconds), got {}",
            type_name(v)
        )));
    }
    // The project's accepted range of time: a `now` above 2**62 ns (about 146 years) is
    // bad input, refused here before the core sees it.
    v.extract::<u64>().ok().and_then(|n| surgeguard_core::time::check_now(n).ok()).ok_or_else(
        || {
            PyValueError::new_err(format!(
                "{name} must be an int in [0, 2**62] (nanoseconds), got {}",
                short_repr(v)
            ))
        },
    )
}

/// The name of `v`'s type, for messages.
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A duration argument in seconds (int or float): refuses bools and non-numbers
/// (`TypeError`), NaN, infinities, negatives and values beyond `max_secs` (`ValueError`).
pub fn secs_arg(name: &str, v: &Bound<'_, PyAny>, max_secs: f64) -> PyResult<u64> {
    let x = real_arg(name, v)?;
    if x.is_nan() {
        return Err(PyValueError::new_err(format!("{name} must be a number of seconds, got nan")));
    }
    if x.is_infinite() {
        return Err(PyValueError::new_err(format!("{name} must be finite, got {}", bound_text(x))));
    }
    if x < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be >= 0 seconds, got {}",
            bound_text(x)
        )));
    }
    if x > max_secs {
        return Err(PyValueError::new_err(format!(
            "{name} must be at most {} seconds, got {}",
            bound_text(max_secs),
            bound_text(x)
        )));
    }
    Ok((x * SEC_F).round() as u64)
}

/// An optional duration: `None` stays `None`.
pub fn opt_secs_arg(
    name: &str,
    v: Option<&Bound<'_, PyAny>>,
    max_secs: f64,
) -> PyResult<Option<u64>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => secs_arg(name, v, max_secs).map(Some),
    }
}

/// A real number (int or float, not bool); NaN and infinities pass (the caller decides).
pub fn real_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<f64> {
    if v.is_instance_of::<PyBool>()
        || !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int or a float, got {}",
            type_name(v)
        )));
    }
    v.extract::<f64>().map_err(|_| {
        PyValueError::new_err(format!("{name} is out of range for a float: {}", short_repr(v)))
    })
}

/// A finite real number in `[lo, hi]`.
pub fn ranged_arg(name: &str, v: &Bound<'_, PyAny>, lo: f64, hi: f64) -> PyResult<f64> {
    let x = real_arg(name, v)?;
    if !x.is_finite() || x < lo || x > hi {
        let low =
            if lo == f64::MIN_POSITIVE { "(0".to_string() } else { format!("[{}", bound_text(lo)) };
        return Err(PyValueError::new_err(format!(
            "{name} must be in {low}, {}], got {}",
            bound_text(hi),
            bound_text(x)
        )));
    }
    Ok(x)
}

/// A non-negative integer of at most `max` (not bool).
pub fn uint_arg(name: &str, v: &Bound<'_, PyAny>, max: u64) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("{name} must be an int, got {}", type_name(v))));
    }
    match v.extract::<u64>() {
        Ok(x) if x <= max => Ok(x),
        _ => Err(PyValueError::new_err(format!(
            "{name} must be an int in [0, {}], got {}",
            bound_text(max as f64),
            short_repr(v)
        ))),
    }
}

/// An optional non-negative integer of at most `max`: `None` stays `None`.
pub fn opt_uint_arg(name: &str, v: Option<&Bound<'_, PyAny>>, max: u64) -> PyResult<Option<u64>> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => uint_arg(name, v, max).map(Some),
    }
}

/// A rate (per second): a finite number `>= 0`.
pub fn rate_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<f64> {
    let x = real_arg(name, v)?;
    if !x.is_finite() || x < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be a finite number >= 0 per second, got {}",
            bound_text(x)
        )));
    }
    Ok(x)
}

/// A bool argument (strictly `True`/`False`).
pub fn bool_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    v.cast::<PyBool>()
        .map(|b| b.is_true())
        .map_err(|_| PyTypeError::new_err(format!("{name} must be a bool, got {}", type_name(v))))
}

/// Interned priority names, compared by identity first (string literals are interned).
struct Names {
    critical: Py<PyString>,
    normal: Py<PyString>,
    background: Py<PyString>,
}

static NAMES: PyOnceLock<Names> = PyOnceLock::new();

/// A priority given by name (`"critical"`, `"normal"`, `"background"`) or as an int level
/// `0..levels` (0 most important). `None` is `normal` (clamped to the configured levels).
#[inline]
pub fn priority_arg(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
    levels: u8,
) -> PyResult<Priority> {
    let Some(v) = v else {
        return Ok(default_priority(levels));
    };
    let names = NAMES.get_or_init(py, || Names {
        critical: PyString::intern(py, "critical").unbind(),
        normal: PyString::intern(py, "normal").unbind(),
        background: PyString::intern(py, "background").unbind(),
    });
    let p = if v.is(&names.normal) {
        Priority::NORMAL
    } else if v.is(&names.critical) {
        Priority::CRITICAL
    } else if v.is(&names.background) {
        Priority::BACKGROUND
    } else if v.is_none() {
        return Ok(default_priority(levels));
    } else {
        priority_slow(v)?
    };
    if p.index() >= levels as usize {
        return Err(PyValueError::new_err(format!(
            "priority {} is out of range: this object has {levels} level(s) (0..{})",
            p.index(),
            levels - 1
        )));
    }
    Ok(p)
}

/// `normal`, or the least important level when fewer levels are configured.
#[inline]
pub fn default_priority(levels: u8) -> Priority {
    Priority::new(1.min(levels.saturating_sub(1))).unwrap_or_default()
}

#[cold]
fn priority_slow(v: &Bound<'_, PyAny>) -> PyResult<Priority> {
    if let Ok(s) = v.cast::<PyString>() {
        let s = s.to_cow()?;
        let name = s.trim().to_ascii_lowercase();
        return Priority::from_name(&name)
            .or_else(|| name.parse::<u8>().ok().and_then(Priority::new))
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown priority {s:?}: use 'critical', 'normal', 'background' or an int \
                     level 0..{}",
                    Priority::MAX_LEVELS - 1
                ))
            });
    }
    if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() {
        return v.extract::<u8>().ok().and_then(Priority::new).ok_or_else(|| {
            PyValueError::new_err(format!(
                "priority must be in 0..{}, got {v}",
                Priority::MAX_LEVELS - 1
            ))
        });
    }
    Err(PyTypeError::new_err(format!(
        "priority must be a name ('critical', 'normal', 'background') or an int, got {}",
        type_name(v)
    )))
}

/// An outcome by name: `"success"`, `"dropped"`, `"ignored"` (or `"ignore"`).
pub fn outcome_arg(v: &Bound<'_, PyAny>) -> PyResult<Outcome> {
    let s = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "outcome must be 'success', 'dropped' or 'ignored', got {}",
            type_name(v)
        ))
    })?;
    match &*s.to_cow()? {
        "success" => Ok(Outcome::Success),
        "dropped" | "drop" => Ok(Outcome::Dropped),
        "ignored" | "ignore" => Ok(Outcome::Ignored),
        other => Err(PyValueError::new_err(format!(
            "outcome must be 'success', 'dropped' or 'ignored', got {other:?}"
        ))),
    }
}

/// The stable name of an outcome.
pub fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Success => "success",
        Outcome::Dropped => "dropped",
        Outcome::Ignored => "ignored",
    }
}

/// Nanoseconds as float seconds.
#[inline]
pub fn secs(ns: u64) -> f64 {
    ns as f64 / SEC_F
}

/// The exception classes of `surgeguard.errors`, by reason code, plus the others.
struct Errors {
    by_reason: Vec<Option<Py<PyType>>>,
    rejected: Py<PyType>,
    config: Py<PyType>,
    usage: Py<PyType>,
}

static ERRORS: PyOnceLock<Errors> = PyOnceLock::new();

fn errors(py: Python<'_>) -> PyResult<&Errors> {
    ERRORS.get_or_try_init(py, || {
        let m = py.import("surgeguard.errors")?;
        let table = m.getattr("BY_REASON")?;
        let mut by_reason: Vec<Option<Py<PyType>>> = (0..32).map(|_| None).collect();
        for r in Reason::ALL {
            if let Ok(cls) = table.get_item(r.as_str()) {
                by_reason[r as usize] = Some(cls.cast_into::<PyType>()?.unbind());
            }
        }
        Ok(Errors {
            by_reason,
            rejected: m.getattr("Rejected")?.cast_into::<PyType>()?.unbind(),
            config: m.getattr("ConfigError")?.cast_into::<PyType>()?.unbind(),
            usage: m.getattr("UsageError")?.cast_into::<PyType>()?.unbind(),
        })
    })
}

/// The exception for a refusal: the `surgeguard.errors` class of its reason, with
/// `reason` (the stable snake-case name) and `retry_after` (seconds).
#[cold]
pub fn rejected_err(py: Python<'_>, r: Rejected) -> PyErr {
    let retry_after = if r.retry_after == u64::MAX { f64::INFINITY } else { secs(r.retry_after) };
    let msg = if retry_after.is_finite() {
        format!("{} (retry after {retry_after:.3} s)", describe(r.reason))
    } else {
        format!("{} (never: the cost exceeds the burst)", describe(r.reason))
    };
    match errors(py) {
        Ok(e) => {
            let cls = e.by_reason[r.reason as usize].as_ref().unwrap_or(&e.rejected);
            PyErr::from_type(cls.bind(py).clone(), (msg, r.reason.as_str(), retry_after))
        }
        Err(err) => err,
    }
}

/// A human sentence for a reason.
fn describe(r: Reason) -> &'static str {
    match r {
        Reason::LimitReached => "rejected: the concurrency limit is reached",
        Reason::QueueFull => "rejected: the admission queue is full",
        Reason::Evicted => "rejected: evicted from the queue by a more important request",
        Reason::DeadlineUnmeetable => "rejected: the deadline cannot be met",
        Reason::Expired => "rejected: waited past the deadline",
        Reason::CodelSlough => "rejected: the queue stood too long (CoDel)",
        Reason::Shed => "rejected: this priority is being shed",
        Reason::BreakerOpen => "the circuit breaker is open",
        Reason::BudgetExhausted => "the retry budget is exhausted",
        Reason::Throttled => "throttled locally: the backend is refusing requests",
        Reason::RateLimited => "rejected: rate limited",
        Reason::KeyLimit => "rejected: this key is at its concurrency cap",
        Reason::KeyRate => "rejected: this key is over its rate",
        Reason::Cancelled => "cancelled",
        Reason::NoCredit => "rejected: no credit granted by the consumer",
        _ => "rejected",
    }
}

/// `surgeguard.ConfigError` (a `ValueError`) naming the object and the field, both as
/// the Python caller spells them (the table in `fields.rs`: `buffer`, `min_window`,
/// `codel.target`).
#[cold]
pub fn config_err(py: Python<'_>, what: &str, e: ConfigError) -> PyErr {
    let name = |p: &'static str| crate::fields::py_name(p).unwrap_or(p);
    let msg = format!("invalid {what} configuration: {}", e.display_with(name));
    let field = name(e.field);
    match errors(py) {
        Ok(errs) => PyErr::from_type(errs.config.bind(py).clone(), (msg, field)),
        Err(err) => err,
    }
}

/// `surgeguard.UsageError` (a `RuntimeError`) with a stable `kind`.
#[cold]
pub fn usage_err(py: Python<'_>, e: UsageError) -> PyErr {
    let (kind, msg) = match e {
        UsageError::AlreadyReleased => ("already_released", "permit already released"),
        UsageError::ForeignHandle => {
            ("foreign_handle", "this permit or ticket belongs to another object")
        }
        UsageError::UnknownTicket => ("unknown_ticket", "unknown ticket"),
        UsageError::BadLevel => ("bad_level", "priority level out of range"),
        _ => ("usage", "invalid use"),
    };
    match errors(py) {
        Ok(errs) => PyErr::from_type(errs.usage.bind(py).clone(), (msg, kind)),
        Err(err) => err,
    }
}

/// `surgeguard.UsageError` with a binding-level `kind` and message (misuse the core never
/// sees: entering a permit twice, ending one that holds no slot).
#[cold]
pub fn usage_msg(py: Python<'_>, kind: &str, msg: &str) -> PyErr {
    match errors(py) {
        Ok(errs) => {
            PyErr::from_type(errs.usage.bind(py).clone(), (msg.to_string(), kind.to_string()))
        }
        Err(err) => err,
    }
}

/// Whether `exc_type` (an exception class, or None) is one of `classes` (a tuple).
#[inline]
pub fn is_overload(exc_type: &Bound<'_, PyAny>, classes: &Bound<'_, PyTuple>) -> PyResult<bool> {
    match exc_type.cast::<PyType>() {
        Ok(t) => t.is_subclass(classes),
        Err(_) => Ok(false),
    }
}

/// Default overload exceptions: `TimeoutError`, `asyncio.TimeoutError` (distinct before
/// 3.11) and `surgeguard.OverloadError`.
pub fn default_overload(py: Python<'_>) -> PyResult<Py<PyTuple>> {
    let builtins = py.import("builtins")?;
    let asyncio = py.import("asyncio")?;
    let errors = py.import("surgeguard.errors")?;
    let t = PyTuple::new(
        py,
        [
            builtins.getattr("TimeoutError")?,
            asyncio.getattr("TimeoutError")?,
            errors.getattr("OverloadError")?,
        ],
    )?;
    Ok(t.unbind())
}

/// Checks an `overload_exceptions=` argument: an exception class or a tuple of them.
pub fn overload_arg(py: Python<'_>, v: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyTuple>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return default_overload(py);
    };
    let items: Vec<Bound<'_, PyAny>> =
        if let Ok(t) = v.cast::<PyTuple>() { t.iter().collect() } else { vec![v.clone()] };
    let base = py.get_type::<pyo3::exceptions::PyBaseException>();
    for it in &items {
        let ok = it.cast::<PyType>().map(|t| t.is_subclass(&base).unwrap_or(false));
        if !matches!(ok, Ok(true)) {
            return Err(PyTypeError::new_err(
                "overload_exceptions must be an exception class or a tuple of them",
            ));
        }
    }
    Ok(PyTuple::new(py, items)?.unbind())
}

/// A bound for a message: exact when short, else as a power of two or in `e` notation
/// (never a 300-digit number).
pub fn bound_text(x: f64) -> String {
    if x == u64::MAX as f64 {
        return "2**64 - 1".into();
    }
    if x == u32::MAX as f64 {
        return "2**32 - 1".into();
    }
    if x != 0.0 && (x.abs() >= 1e9 || x.abs() < 1e-6) {
        return format!("{x:e}");
    }
    format!("{x}")
}

/// `repr(v)`, shortened to 40 characters (a 300-digit int stays readable).
pub fn short_repr(v: &Bound<'_, PyAny>) -> String {
    let s = v.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into());
    if s.chars().count() > 40 {
        let head: String = s.chars().take(20).collect();
        let tail: String = s.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
        format!("{head}...{tail} ({} chars)", s.chars().count())
    } else {
        s
    }
}

/// `set_static_limit(limit)` of the limiter and the gates: pins the limit of `limiter` to
/// `limit` (a real number), or hands it back to the algorithm (`None`).
pub fn set_static_limit_arg(
    py: Python<'_>,
    limiter: &surgeguard_core::Limiter,
    limit: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let v = match limit.filter(|v| !v.is_none()) {
        Some(v) => Some(real_arg("limit", v)?),
        None => None,
    };
    limiter.set_static_limit(v).map_err(|e| config_err(py, "static limit", e))
}

/// The arguments of the gates' `acquire(priority, timeout, *, now_ns)`, checked: the level,
/// the timeout (`None`: none) and the injected time (`None`: the clock).
pub fn acquire_args(
    py: Python<'_>,
    levels: u8,
    priority: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    now_ns: Option<&Bound<'_, PyAny>>,
) -> PyResult<(surgeguard_core::Priority, Option<u64>, Option<u64>)> {
    let p = priority_arg(py, priority, levels)?;
    let timeout_ns = match timeout.filter(|t| !t.is_none()) {
        Some(t) => Some(secs_arg("timeout", t, 86_400.0)?),
        None => None,
    };
    let now = match now_ns.filter(|v| !v.is_none()) {
        Some(v) => Some(now_arg(v)?),
        None => None,
    };
    Ok((p, timeout_ns, now))
}
