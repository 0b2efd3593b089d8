//! `SharedLimiter`: one concurrency limit across worker processes (gunicorn, `uvicorn
//! --workers`, multiprocessing), the `surgeguard` crate's shared-memory limiter.
//!
//! Created by name (a file in `/dev/shm`, race-free create-or-attach, refused with
//! `ValueError` if another process made it with another config) or anonymously before
//! `os.fork()` (children forked afterwards share it). Permits of a worker that dies
//! (`kill -9`, OOM) come back: see the crate's `shm` module for when and how fast.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use surgeguard::shm::{SharedLimiter as CoreShared, SharedRawPermit, ShmError};
use surgeguard_core::{Outcome, Priority, UsageError};

use crate::common::*;
use crate::limiter::{limiter_config, limiter_metrics};
use crate::placed::Placed;

pub(crate) fn shm_err(py: Python<'_>, e: ShmError) -> PyErr {
    match e {
        ShmError::Rejected(r) => rejected_err(py, r),
        ShmError::Config(c) => config_err(py, "SharedLimiter", c),
        ShmError::Usage(u) => usage_err(py, u),
        ShmError::Reclaimed => usage_err(py, UsageError::AlreadyReleased),
        // Shared memory could not be used (Node's `SG_SHM_UNAVAILABLE`): a system call
        // failed (`/dev/shm` missing or full, a path in a directory that does not exist),
        // or every process slot is taken by a live process.
        ShmError::Os { .. } | ShmError::TableFull => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// `unlink(name)` of the shared classes: whether the name existed (a missing name is
/// `False`, as Node's `unlinkShared`). Names only, as in Node: a path could be any file,
/// so one is a `ValueError` (remove a segment placed at a path with `os.unlink`).
pub(crate) fn unlink_name(
    py: Python<'_>,
    name: &str,
    unlink: fn(&str) -> Result<(), ShmError>,
) -> PyResult<bool> {
    if name.contains('/') {
        return Err(PyValueError::new_err(
            "unlink takes a name, not a path (remove a segment at a path with os.unlink)",
        ));
    }
    match unlink(name) {
        Ok(()) => Ok(true),
        Err(ShmError::Os { errno, .. }) if errno == libc::ENOENT => Ok(false),
        Err(e) => Err(shm_err(py, e)),
    }
}

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

/// A shared object by name (created or attached) or anonymous (`None`), for the
/// `shared` constructors of the in-process classes.
pub fn place<C, S, T>(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    cfg: C,
    open: fn(&str, C) -> Result<S, ShmError>,
    anonymous: fn(C) -> Result<S, ShmError>,
) -> PyResult<Placed<T>>
where
    C: Send,
    S: std::ops::Deref<Target = T> + Send + Sync + 'static,
    T: 'static,
{
    let shared = match name_arg(name)? {
        Some(n) => py.detach(|| open(&n, cfg)),
        None => anonymous(cfg),
    }
    .map_err(|e| shm_err(py, e))?;
    Ok(Placed::Shared(Box::new(shared)))
}

/// `Limiter.shared(name, ...)`: a `SharedLimiter` by name (a `str`) or anonymous (`None`).
pub fn shared_limiter<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    name_arg(name)?;
    let mut all = vec![name.clone()];
    all.extend(args.iter());
    py.get_type::<SharedLimiter>().call(PyTuple::new(py, all)?, kwargs)
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

    /// Removes the name (attached processes keep their segment); whether it existed.
    /// A path is a `ValueError` (names only: remove a segment at a path with `os.unlink`).
    #[staticmethod]
    fn unlink(py: Python<'_>, name: &str) -> PyResult<bool> {
        unlink_name(py, name, CoreShared::unlink)
    }

    /// A context manager, as `Limiter.acquire`: `with shared.acquire("normal") as permit:`
    /// admits on entry (raising `Rejected` if refused; the limiter has no queue) and
    /// releases on exit (success, or ignored on an exception).
    #[pyo3(signature = (priority=None, *, now_ns=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SharedPermit> {
        let py = slf.py();
        let p = priority_arg(py, priority, slf.get().core.limiter().levels())?;
        let now = match now_ns {
            Some(v) if !v.is_none() => Some(now_arg(v)?),
            _ => None,
        };
        Ok(SharedPermit {
            owner: slf.clone().unbind(),
            state: Mutex::new(State::Pending(p, now)),
            entered: AtomicBool::new(false),
        })
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
        Ok(SharedPermit {
            owner: slf.clone().unbind(),
            state: Mutex::new(State::Held(raw)),
            entered: AtomicBool::new(false),
        })
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

    /// Priority levels in use.
    #[getter]
    fn levels(&self) -> u8 {
        self.core.limiter().levels()
    }

    /// Requests in flight at `priority`, across all processes.
    fn inflight_of(&self, py: Python<'_>, priority: &Bound<'_, PyAny>) -> PyResult<u32> {
        let l = self.core.limiter();
        Ok(l.inflight_of(priority_arg(py, Some(priority), l.levels())?))
    }

    /// Permits held by this process.
    #[getter]
    fn held_by_this_process(&self) -> u32 {
        self.core.held_by_this_process()
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
/// ignored on an exception). From `acquire()` it is pending: entering `with` admits it.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct SharedPermit {
    owner: Py<SharedLimiter>,
    state: Mutex<State>,
    /// Set by `__aenter__`: awaiting the permit then finishes with it (`async with ... as`).
    entered: AtomicBool,
}

enum State {
    /// From `acquire()`: admitted on `__enter__` (priority, injected time).
    Pending(Priority, Option<u64>),
    Held(SharedRawPermit),
    Done,
}

impl SharedPermit {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.lock();
        match *st {
            State::Held(_) => Ok(()),
            State::Done => Err(usage_err(py, UsageError::AlreadyReleased)),
            State::Pending(p, now) => {
                let now = match now {
                    Some(n) => n,
                    None => now_from(py, None, None)?,
                };
                let raw =
                    self.owner.get().core.try_acquire_raw(now, p).map_err(|e| shm_err(py, e))?;
                *st = State::Held(raw);
                Ok(())
            }
        }
    }

    /// Success on a normal exit, ignored on an exception; nothing if already released.
    fn exit(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        if self.held() {
            let outcome = if exc_type.is_some_and(|t| !t.is_none()) {
                Outcome::Ignored
            } else {
                Outcome::Success
            };
            self.end(py, outcome, None)?;
        }
        Ok(())
    }

    fn end(
        &self,
        py: Python<'_>,
        outcome: Outcome,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let now = now_from(py, None, now_ns)?;
        let mut st = self.lock();
        match std::mem::replace(&mut *st, State::Done) {
            State::Held(raw) => {
                drop(st);
                self.owner.get().core.release_raw(raw, now, outcome).map_err(|e| shm_err(py, e))
            }
            other => {
                // Pending (never admitted) or already released: nothing to release.
                *st = other;
                Err(usage_err(py, UsageError::AlreadyReleased))
            }
        }
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
        matches!(*self.lock(), State::Held(_))
    }
    /// Admits a pending permit (from `acquire()`, raising `Rejected` if refused); a held
    /// one is returned as is; a released one cannot be entered again.
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        slf.get().enter(slf.py())?;
        Ok(slf.clone().unbind())
    }
    /// `async with`: admits at once (the limiter has no queue, so there is no wait); the
    /// awaitable finishes with the permit.
    fn __aenter__(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        slf.get().enter(slf.py())?;
        slf.get().entered.store(true, Ordering::Release);
        Ok(slf.clone().unbind())
    }
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        slf: &Bound<'_, Self>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Self>> {
        slf.get().exit(slf.py(), exc_type)?;
        slf.get().entered.store(false, Ordering::Release);
        Ok(slf.clone().unbind())
    }
    /// Awaiting the permit finishes at once.
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        if slf.get().entered.swap(false, Ordering::AcqRel) {
            // StopIteration(permit): the value of `await` (and of `async with ... as`).
            Err(PyStopIteration::new_err(slf.clone().into_any().unbind()))
        } else {
            Ok(None)
        }
    }
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.exit(py, exc_type)?;
        Ok(false)
    }
}

impl Drop for SharedPermit {
    fn drop(&mut self) {
        let st =
            std::mem::replace(self.state.get_mut().unwrap_or_else(|e| e.into_inner()), State::Done);
        if let State::Held(raw) = st {
            let core = &self.owner.get().core;
            let now = core.limiter().latest_time();
            let _ = core.release_raw(raw, now, Outcome::Ignored);
        }
    }
}
