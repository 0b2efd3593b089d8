//! `SharedLimiter`: one concurrency limit across worker processes (gunicorn, `uvicorn
//! --workers`, multiprocessing), the `surgeguard` crate's shared-memory limiter.
//!
//! Created by name (a file in `/dev/shm`, race-free create-or-attach, refused with
//! `ValueError` if another process made it with another config) or anonymously before
//! `os.fork()` (children forked afterwards share it). Permits of a worker that dies
//! (`kill -9`, OOM) come back: see the crate's `shm` module for when and how fast.

use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use surgeguard::shm::{SharedLimiter as CoreShared, SharedRawPermit, ShmError};
use surgeguard_core::{Outcome, UsageError};

use crate::common::*;
use crate::limiter::{limiter_config, limiter_metrics};

fn shm_err(py: Python<'_>, e: ShmError) -> PyErr {
    match e {
        ShmError::Rejected(r) => rejected_err(py, r),
        ShmError::Config(c) => config_err(py, "SharedLimiter", c),
        ShmError::Usage(u) => usage_err(py, u),
        ShmError::Reclaimed => usage_err(py, UsageError::AlreadyReleased),
        ShmError::Os { .. } => PyOSError::new_err(e.to_string()),
        ShmError::TableFull => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// A concurrency limiter in memory shared between processes: the same limit, in-flight
/// count and learned limit in every worker. `SharedLimiter("name", limit=4)` creates or
/// attaches to `/dev/shm/surgeguard.name`; `SharedLimiter(None, limit=4)` makes an anonymous
/// one that processes forked afterwards share. Every process must use the native clock
/// (raw `CLOCK_MONOTONIC`), or pass `now_ns=` from it.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct SharedLimiter {
    core: CoreShared,
}

#[pymethods]
impl SharedLimiter {
    #[new]
    #[pyo3(signature = (name=None, algorithm=None, *, limit=None, levels=None, weights=None,
        min_window=None, max_window=None, window_rtt_multiple=None, min_samples=None,
        active=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: Option<&str>,
        algorithm: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        levels: Option<&Bound<'_, PyAny>>,
        weights: Option<&Bound<'_, PyAny>>,
        min_window: Option<&Bound<'_, PyAny>>,
        max_window: Option<&Bound<'_, PyAny>>,
        window_rtt_multiple: Option<&Bound<'_, PyAny>>,
        min_samples: Option<&Bound<'_, PyAny>>,
        active: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let cfg = limiter_config(
            algorithm,
            limit,
            levels,
            weights,
            min_window,
            max_window,
            window_rtt_multiple,
            min_samples,
            active,
        )?;
        let core = match name {
            Some(n) => py.detach(|| CoreShared::open(n, cfg)),
            None => CoreShared::anonymous(cfg),
        }
        .map_err(|e| shm_err(py, e))?;
        Ok(Self { core })
    }

    /// Removes the name (attached processes keep their segment).
    #[staticmethod]
    fn unlink(py: Python<'_>, name: &str) -> PyResult<()> {
        CoreShared::unlink(name).map_err(|e| shm_err(py, e))
    }

    /// Admits now (counted to this process) or raises `Rejected`.
    #[pyo3(signature = (priority=None, *, now_ns=None))]
    fn try_acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SharedPermit> {
        let py = slf.py();
        let lim = &slf.get().core;
        let p = priority_arg(py, priority, lim.limiter().levels())?;
        let now = now_from(py, None, now_ns)?;
        let raw = lim.try_acquire_raw(now, p).map_err(|e| shm_err(py, e))?;
        Ok(SharedPermit { owner: slf.clone().unbind(), raw: Mutex::new(Some(raw)) })
    }

    /// Releases the permits of dead processes (exactly once each); returns how many.
    fn reclaim(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.core.reclaim())
    }

    /// Whether this object created the segment.
    #[getter]
    fn created(&self) -> bool {
        self.core.created()
    }

    /// Processes attached now.
    #[getter]
    fn attached_processes(&self) -> u32 {
        self.core.attached_processes()
    }

    /// The limit in force.
    #[getter]
    fn limit(&self) -> f64 {
        self.core.limiter().limit()
    }

    /// Requests in flight, across all processes.
    #[getter]
    fn inflight(&self) -> u32 {
        self.core.limiter().inflight()
    }

    /// A snapshot of counters and gauges as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        limiter_metrics(py, &self.core.limiter().metrics())
    }

    fn __repr__(&self) -> String {
        let l = self.core.limiter();
        format!("SharedLimiter(limit={}, inflight={})", l.limit(), l.inflight())
    }
}

/// A permit of a `SharedLimiter`: release it once with `success()`, `dropped()`,
/// `ignore()` or `release(outcome)`, or use it in `with` (success on a normal exit,
/// ignored on an exception).
#[pyclass(frozen, module = "surgeguard._native")]
pub struct SharedPermit {
    owner: Py<SharedLimiter>,
    raw: Mutex<Option<SharedRawPermit>>,
}

impl SharedPermit {
    fn end(
        &self,
        py: Python<'_>,
        outcome: Outcome,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let now = now_from(py, None, now_ns)?;
        let raw = self.raw.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(raw) = raw else {
            return Err(usage_err(py, UsageError::AlreadyReleased));
        };
        self.owner.get().core.release_raw(raw, now, outcome).map_err(|e| shm_err(py, e))
    }
}

#[pymethods]
impl SharedPermit {
    /// Ends the work with `outcome` (`"success"`, `"dropped"`, `"ignored"`).
    #[pyo3(signature = (outcome, *, now_ns=None))]
    fn release(
        &self,
        py: Python<'_>,
        outcome: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.end(py, outcome_arg(outcome)?, now_ns)
    }
    /// Ends the work as a success (its latency is a sample).
    #[pyo3(signature = (*, now_ns=None))]
    fn success(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Success, now_ns)
    }
    /// Ends the work as dropped (an overload signal).
    #[pyo3(signature = (*, now_ns=None))]
    fn dropped(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Dropped, now_ns)
    }
    /// Ends the work without a signal.
    #[pyo3(signature = (*, now_ns=None))]
    fn ignore(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Ignored, now_ns)
    }
    /// Whether it is still held.
    #[getter]
    fn held(&self) -> bool {
        self.raw.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.held() {
            let outcome = if exc_type.is_some_and(|t| !t.is_none()) {
                Outcome::Ignored
            } else {
                Outcome::Success
            };
            self.end(py, outcome, None)?;
        }
        Ok(false)
    }
}

impl Drop for SharedPermit {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(raw) = raw {
            let core = &self.owner.get().core;
            let now = core.limiter().latest_time();
            let _ = core.release_raw(raw, now, Outcome::Ignored);
        }
    }
}
