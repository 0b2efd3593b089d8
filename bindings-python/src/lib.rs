//! `surgeguard._native`: the Python bindings of surgeguard-core (pyo3, abi3).
//!
//! Thin by design: each function converts types (seconds ↔ nanoseconds, priority names,
//! outcomes), reads the clock natively unless `now_ns=` (or the object's `clock=`) is
//! given, calls the core and maps its error to one exception class. Idioms that need
//! Python — asyncio waiting, ASGI/WSGI middleware, retries, Prometheus text — live in the
//! pure-Python package `surgeguard` beside this module.
//!
//! Every class is `#[pyclass(frozen)]`: no borrow flag, so sharing an object between
//! threads never raises pyo3's borrow errors, and it is safe under free-threaded Python.
//! Per-use objects (permits, breaker calls, key permits) keep their state in atomics
//! (a permit's life is one compare-and-swap state word) or in an uncontended mutex.

mod breaker;
mod client;
mod common;
mod deadline;
mod fields;
mod flow;
mod gate;
mod keyed;
mod limiter;
mod permit;
mod placed;
mod rate;
#[cfg(target_os = "linux")]
mod shared_gate;

use pyo3::prelude::*;

/// The native half of the `surgeguard` package (import `surgeguard`, not this).
#[pymodule(gil_used = false)]
mod _native {
    #[pymodule_export]
    use super::breaker::{BreakerCall, BreakerFunction, CircuitBreaker};
    #[pymodule_export]
    use super::client::{AdaptiveThrottle, Backoff, RetryBudget, TokenRetryThrottle};
    #[pymodule_export]
    use super::deadline::{
        deadline_at, format_deadline_header, parse_deadline_header, parse_deadline_headers,
    };
    #[pymodule_export]
    use super::flow::{Credits, LagMeter, Watermarks};
    #[pymodule_export]
    use super::gate::{Gate, Ticket};
    #[pymodule_export]
    use super::keyed::{actionable, hash_key, KeyPermit, KeyedLimits};
    #[pymodule_export]
    use super::limiter::{
        AimdLimit, FixedLimit, Gradient2Limit, GradientLimit, HysteresisLimit, Limiter, VegasLimit,
    };
    #[pymodule_export]
    use super::permit::Permit;
    #[pymodule_export]
    use super::rate::{time_to_drain, PacedDrain, RateLimiter};
    #[cfg(target_os = "linux")]
    #[pymodule_export]
    use super::shared_gate::{SharedGate, SharedGateTicket};

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("clock_ns", pyo3::wrap_pyfunction!(super::native_clock_ns, m)?)?;
        m.add("_config_fields", pyo3::wrap_pyfunction!(super::config_fields, m)?)?;
        {
            use surgeguard_core::deadline as d;
            m.add("DEADLINE_MAX_BUDGET_NS", d::MAX_BUDGET)?;
            m.add(
                "DEADLINE_HEADERS",
                (d::GRPC_TIMEOUT, d::ENVOY_EXPECTED_RQ_TIMEOUT_MS, d::SURGEGUARD_TIMEOUT_MS),
            )?;
        }
        Ok(())
    }
}

/// The native monotonic clock (nanoseconds) every object reads unless `now_ns=` is given.
#[pyfunction]
#[pyo3(name = "clock_ns")]
fn native_clock_ns() -> u64 {
    common::clock_ns()
}

/// One described field: `(path, keyword, default)`.
type FieldRow = (&'static str, Option<&'static str>, Py<PyAny>);

/// The core's description of each config field, as the tests read it: a list of
/// `(path, keyword or None, default)`, durations in seconds (as the keywords take them),
/// unset options `None`, enum settings their name.
#[pyfunction]
#[pyo3(name = "_config_fields")]
fn config_fields(py: Python<'_>) -> PyResult<Vec<FieldRow>> {
    use surgeguard_core::fields::{Unit, Value, CONFIGS};
    let mut out = Vec::new();
    for (_, specs) in CONFIGS {
        for f in *specs {
            let default = match (f.unit, f.default) {
                (Unit::Nanos, Value::Int(ns)) => (ns as f64 / 1e9).into_pyobject(py)?.into_any(),
                (_, Value::Int(n)) => n.into_pyobject(py)?.into_any(),
                (_, Value::Float(x)) => x.into_pyobject(py)?.into_any(),
                (_, Value::Bool(b)) => pyo3::types::PyBool::new(py, b).to_owned().into_any(),
                (_, Value::Name(n)) => n.into_pyobject(py)?.into_any(),
                (_, Value::Floats(xs)) => xs.into_pyobject(py)?.into_any(),
                _ => py.None().into_bound(py),
            };
            out.push((f.path, fields::py_name(f.path), default.unbind()));
        }
    }
    Ok(out)
}
