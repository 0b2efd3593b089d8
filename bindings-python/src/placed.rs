//! Placement: each family is one class (`Limiter`, `RateLimiter`, `RetryBudget`,
//! `KeyedLimits`) holding the `surgeguard` crate's `Placed<T>`: the core object in this
//! process, or the same object in memory shared by worker processes (Linux), with the same
//! methods either way.
//!
//! A class takes its placement as the keyword `shared=` of its constructor (a segment
//! name, or `True` for anonymous memory that processes forked afterwards share) or through
//! `Class.shared(name_or_None, ...)`, which passes the constructor's other arguments on.
//! Named segments are created or attached race-free (another config is a `ValueError`);
//! every process must use the native clock (raw `CLOCK_MONOTONIC`) or pass `now_ns=` from
//! it, so a shared object takes no `clock=`.

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyTuple};
use surgeguard::placement::{Place, PlaceError, Placed, Placement};

use crate::common::*;

/// A placement error as a Python exception (`what` names the class in config errors).
pub(crate) fn place_err(py: Python<'_>, what: &str, e: PlaceError) -> PyErr {
    match e {
        PlaceError::Rejected(r) => rejected_err(py, r),
        PlaceError::Config(c) => config_err(py, what, c),
        PlaceError::Usage(u) => usage_err(py, u),
        #[cfg(target_os = "linux")]
        PlaceError::Reclaimed => usage_err(py, surgeguard_core::UsageError::AlreadyReleased),
        // Shared memory could not be used (Node's `SG_SHM_UNAVAILABLE`): a system call
        // failed (`/dev/shm` missing or full, a path in a directory that does not exist),
        // or every process slot is taken by a live process.
        #[cfg(target_os = "linux")]
        PlaceError::Os { .. } | PlaceError::TableFull => PyOSError::new_err(e.to_string()),
        #[allow(unreachable_patterns)]
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Where the constructor's `shared=` says to place the object.
pub(crate) enum Where {
    Local,
    #[cfg(target_os = "linux")]
    Named(String),
    #[cfg(target_os = "linux")]
    Anonymous,
}

/// Reads `shared=`: absent, `None` or `False` → local; a `str` → that segment; `True` →
/// anonymous shared memory. A `clock=` is refused with a shared placement.
pub(crate) fn where_arg(
    shared: Option<&Bound<'_, PyAny>>,
    clock: Option<&Bound<'_, PyAny>>,
) -> PyResult<Where> {
    let Some(v) = shared.filter(|v| !v.is_none()) else { return Ok(Where::Local) };
    if let Ok(b) = v.cast::<PyBool>() {
        if !b.is_true() {
            return Ok(Where::Local);
        }
    } else if v.cast::<PyString>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "name must be a str or None, got {}",
            v.get_type().name()?
        )));
    }
    if clock.is_some_and(|c| !c.is_none()) {
        return Err(PyTypeError::new_err(
            "a shared object takes no clock=: every process reads the native clock",
        ));
    }
    #[cfg(target_os = "linux")]
    return Ok(match v.cast::<PyString>() {
        Ok(s) => Where::Named(s.to_str()?.to_owned()),
        Err(_) => Where::Anonymous,
    });
    #[cfg(not(target_os = "linux"))]
    Err(pyo3::exceptions::PyNotImplementedError::new_err("shared memory is Linux-only"))
}

/// Builds `T` where `place` says (a named segment is opened with the GIL released).
pub(crate) fn open<T>(
    py: Python<'_>,
    what: &str,
    place: Where,
    cfg: T::Config,
) -> PyResult<Placed<T>>
where
    T: Place,
    T::Config: Send,
    Placed<T>: Send,
{
    let r = match place {
        Where::Local => Placed::open(Placement::Local, cfg),
        #[cfg(target_os = "linux")]
        Where::Named(n) => py.detach(move || Placed::open(Placement::Shared(&n), cfg)),
        #[cfg(target_os = "linux")]
        Where::Anonymous => Placed::open(Placement::Anonymous, cfg),
    };
    r.map_err(|e| place_err(py, what, e))
}

/// `Class.shared(name, *args, **kwargs)`: the class's constructor with `shared=name`
/// (`None`: anonymous).
pub(crate) fn shared_call<'py, T: pyo3::PyTypeInfo>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    if !name.is_none() && name.cast::<PyString>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "name must be a str or None, got {}",
            name.get_type().name()?
        )));
    }
    let kw = match kwargs {
        Some(k) => k.copy()?,
        None => PyDict::new(py),
    };
    if kw.contains("shared")? {
        return Err(PyTypeError::new_err("shared() takes the name first, not shared="));
    }
    let place =
        if name.is_none() { PyBool::new(py, true).to_owned().into_any() } else { name.clone() };
    kw.set_item("shared", place)?;
    py.get_type::<T>().call(args, Some(&kw))
}

/// `name` of a shared constructor: a `str`, or `None` (anonymous).
pub(crate) fn name_arg(name: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if name.is_none() {
        return Ok(None);
    }
    match name.cast::<PyString>() {
        Ok(s) => Ok(Some(s.to_str()?.to_owned())),
        Err(_) => Err(PyTypeError::new_err(format!(
            "name must be a str or None, got {}",
            name.get_type().name()?
        ))),
    }
}

/// `Class.unlink(name)` of the placed classes and the shared gate: whether the name existed
/// (a missing name is `False`, as Node's `unlinkShared`). Names only, as in Node: a path
/// could be any file, so one is a `ValueError` (remove a segment placed at a path with
/// `os.unlink`).
#[cfg(target_os = "linux")]
pub(crate) fn unlink_name(
    py: Python<'_>,
    what: &str,
    name: &str,
    unlink: fn(&str) -> Result<(), PlaceError>,
) -> PyResult<bool> {
    if name.contains('/') {
        return Err(PyValueError::new_err(
            "unlink takes a name, not a path (remove a segment at a path with os.unlink)",
        ));
    }
    match unlink(name) {
        Ok(()) => Ok(true),
        Err(PlaceError::Os { errno, .. }) if errno == libc::ENOENT => Ok(false),
        Err(e) => Err(place_err(py, what, e)),
    }
}
