//! Deadline headers (`surgeguard_core::deadline`): parse the caller's budget, make the
//! arrival deadline, format the outgoing value. Thin: the middlewares and the client
//! transport that use them live in the Python package.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use surgeguard_core::deadline::{self, Budgets, FormatError, HeaderError, HeaderValue};
use surgeguard_core::time::MAX_NOW;

use crate::common::{now_or_clock, type_name, uint_arg};

/// A header name: a `str`.
fn name_arg<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<&'a Bound<'a, PyString>> {
    v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("header name must be a str, got {}", type_name(v)))
    })
}

/// Parses one (name, value) pair; a str value with non-ASCII characters is malformed.
fn parse_pair(
    name: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<Result<u64, HeaderError>> {
    let name = name_arg(name)?.to_cow()?;
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(deadline::parse_header(name.as_bytes(), b.as_bytes()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        // A str that is not valid UTF-8 (lone surrogates) cannot be a header value.
        return Ok(match s.to_str() {
            Ok(s) => deadline::parse_header(name.as_bytes(), s.as_bytes()),
            Err(_) => Err(HeaderError::Malformed),
        });
    }
    Err(PyTypeError::new_err(format!(
        "header value must be str or bytes, got {}",
        type_name(value)
    )))
}

/// `(budget_ns, None)` if the deadline header `name: value` is valid, else
/// `(None, reason)` with reason `"malformed"`, `"negative"` or `"too_large"`. A header
/// named `grpc-timeout` is read in gRPC's format, any other as whole milliseconds.
#[pyfunction]
pub fn parse_deadline_header(
    name: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<(Option<u64>, Option<&'static str>)> {
    Ok(match parse_pair(name, value)? {
        Ok(b) => (Some(b), None),
        Err(e) => (None, Some(e.as_str())),
    })
}

/// The smallest valid budget among `(name, value)` pairs (`None` if none), and
/// `(name, reason)` for each ignored one, in order.
#[pyfunction]
pub fn parse_deadline_headers<'py>(
    py: Python<'py>,
    headers: &Bound<'py, PyAny>,
) -> PyResult<(Option<u64>, Bound<'py, PyList>)> {
    let mut budgets = Budgets::new();
    let ignored = PyList::empty(py);
    for item in headers.try_iter()? {
        let item = item?;
        let (name, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) =
            item.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "headers must be (name, value) pairs, got {}",
                    type_name(&item)
                ))
            })?;
        if let Some(e) = budgets.add(parse_pair(&name, &value)?) {
            ignored.append((name, e.as_str()))?;
        }
    }
    Ok((budgets.budget(), ignored))
}

/// `now + budget_ns` on the native clock (or `now_ns`), saturating at 2**62.
#[pyfunction]
#[pyo3(signature = (budget_ns, now_ns=None))]
pub fn deadline_at(
    budget_ns: &Bound<'_, PyAny>,
    now_ns: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let budget = uint_arg("budget_ns", budget_ns, u64::MAX)?;
    let now = now_or_clock(now_ns)?;
    deadline::deadline_at(now, budget).map_err(|e| PyValueError::new_err(format!("now_ns: {e}")))
}

/// The outgoing value of header `name` for `deadline_ns − now − margin_ns`, rounded down;
/// `None` when exhausted (fail fast: send nothing).
#[pyfunction]
#[pyo3(signature = (name, deadline_ns, margin_ns=None, now_ns=None))]
pub fn format_deadline_header(
    name: &Bound<'_, PyAny>,
    deadline_ns: &Bound<'_, PyAny>,
    margin_ns: Option<&Bound<'_, PyAny>>,
    now_ns: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<String>> {
    let name = name_arg(name)?.to_cow()?;
    let deadline = uint_arg("deadline_ns", deadline_ns, u64::MAX)?;
    if deadline > MAX_NOW {
        return Err(PyValueError::new_err(format!(
            "deadline_ns must be at most 2**62, got {deadline} (no deadline: send no header)"
        )));
    }
    let margin = match margin_ns.filter(|v| !v.is_none()) {
        Some(v) => uint_arg("margin_ns", v, u64::MAX)?,
        None => 0,
    };
    let now = now_or_clock(now_ns)?;
    let format = deadline::HeaderFormat::for_name(name.as_bytes());
    match HeaderValue::of_deadline(format, deadline, now, margin) {
        Ok(v) => Ok(Some(v.as_str().to_owned())),
        Err(FormatError::Exhausted) => Ok(None),
        Err(e) => Err(PyValueError::new_err(e.to_string())),
    }
}
