//! `Permit`: one admission, as a context manager (`with`, `async with`) or held explicitly.
//!
//! Ends exactly once: `success()`, `dropped()`, `ignore()` (Netflix concurrency-limits'
//! listener shape, research/bindings.md §4.0) or on leaving the block, where the outcome
//! comes from the exception: none → success; a configured overload exception (default
//! `TimeoutError` and `surgeguard.OverloadError`) → dropped; anything else (including
//! `CancelledError`) → ignored. A permit that is garbage-collected while held is released
//! as ignored, so nothing leaks.

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use surgeguard_core::{Outcome, Priority, RawPermit};

use crate::common::*;
use crate::gate::{Gate, Waiter};
use crate::limiter::Limiter;

/// Who issued a permit.
pub enum Owner {
    Limiter(Py<Limiter>),
    Gate(Py<Gate>),
}

impl Owner {
    fn overload<'py>(&self, py: Python<'py>) -> &Bound<'py, PyTuple> {
        match self {
            Owner::Limiter(l) => l.get().overload.bind(py),
            Owner::Gate(g) => g.get().overload.bind(py),
        }
    }

    fn levels(&self) -> u8 {
        match self {
            Owner::Limiter(l) => l.get().core.levels(),
            Owner::Gate(g) => g.get().levels(),
        }
    }

    pub fn same(&self, other: &Owner) -> bool {
        match (self, other) {
            (Owner::Limiter(a), Owner::Limiter(b)) => a.is(b),
            (Owner::Gate(a), Owner::Gate(b)) => a.is(b),
            _ => false,
        }
    }

    /// Returns the slot (and for a gate, hands freed slots to waiters).
    fn release(&self, py: Option<Python<'_>>, raw: RawPermit, now: u64, outcome: Outcome) {
        match self {
            // Cannot fail: the permit came from this limiter.
            Owner::Limiter(l) => {
                let _ = l.get().core.release_raw(raw, now, outcome);
            }
            Owner::Gate(g) => g.get().release_raw(py, raw, now, outcome),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Created by `acquire()`: admission happens on entering the block.
    Pending,
    /// Queued in a gate (only while a wait is in progress).
    Waiting,
    /// Admitted; holds a slot.
    Held,
    /// Ended with this outcome.
    Released(Outcome),
    /// Admission failed (the exception was raised).
    Failed,
}

/// What `__next__` answers when the permit is awaited (the `async with` fast path).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Await {
    Nothing,
    /// `__aenter__` admitted at once: the awaitable finishes with the permit.
    Entered,
    /// `__aexit__` released: the awaitable finishes with `None`.
    Exited,
}

/// One admission: use it as `with ... as permit:` / `async with ... as permit:`, or end it
/// explicitly with `success()`, `dropped()` or `ignore()`.
#[pyclass(module = "surgeguard._native")]
pub struct Permit {
    owner: Owner,
    priority: Priority,
    /// Gate only: how long to wait when queued (`None` = until granted or dropped).
    timeout_ns: Option<u64>,
    /// `now_ns=` given at acquire: the time of the admission (and of the release, unless
    /// a release gives its own).
    now: Option<u64>,
    raw: Option<RawPermit>,
    state: State,
    /// Made by `acquire_async()`: only `async with` may enter it.
    is_async: bool,
    awaiting: Await,
}

impl Permit {
    /// A permit admitted on entry.
    pub fn pending(
        owner: Owner,
        priority: Priority,
        timeout_ns: Option<u64>,
        now: Option<u64>,
        is_async: bool,
    ) -> Self {
        Self {
            owner,
            priority,
            timeout_ns,
            now,
            raw: None,
            state: State::Pending,
            is_async,
            awaiting: Await::Nothing,
        }
    }

    /// A permit already admitted.
    pub fn admitted(owner: Owner, priority: Priority, raw: RawPermit, injected: bool) -> Self {
        let now = injected.then(|| raw.started_at());
        Self {
            owner,
            priority,
            timeout_ns: None,
            now,
            raw: Some(raw),
            state: State::Held,
            is_async: false,
            awaiting: Await::Nothing,
        }
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Admission on entering the block: sync (may block, GIL released) or async (returns a
    /// coroutine to await when queued, `None` when admitted at once).
    fn admit(slf: &Bound<'_, Self>, asynchronous: bool) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let mut this = slf.borrow_mut();
        if this.is_async != asynchronous && matches!(this.owner, Owner::Gate(_)) {
            return Err(PyTypeError::new_err(if asynchronous {
                "Gate.acquire() blocks the thread while queued: use `async with \
                 gate.acquire_async(...)` in async code"
            } else {
                "acquire_async() returns an async context manager: use `async with`"
            }));
        }
        match this.state {
            State::Pending => {}
            State::Held => return Ok(None),
            State::Released(_) => {
                return Err(PyRuntimeError::new_err("this permit was already released"))
            }
            _ => return Err(PyRuntimeError::new_err("a permit can be entered only once")),
        }
        let now = match this.now {
            Some(n) => n,
            None => clock_ns(),
        };
        match &this.owner {
            Owner::Limiter(l) => match l.get().core.try_acquire_raw(now, this.priority) {
                Ok(raw) => {
                    this.raw = Some(raw);
                    this.state = State::Held;
                    Ok(None)
                }
                Err(r) => {
                    this.state = State::Failed;
                    Err(rejected_err(py, r))
                }
            },
            Owner::Gate(g) => {
                let (priority, timeout) = (this.priority, this.timeout_ns);
                let injected = this.now.is_some();
                let arrival = g.get().arrive(py, now, priority, timeout);
                match arrival {
                    Ok(Waiter::Admitted(raw)) => {
                        this.raw = Some(raw);
                        this.state = State::Held;
                        Ok(None)
                    }
                    Ok(Waiter::Queued(wait)) => {
                        let gate = match &this.owner {
                            Owner::Gate(g) => g.clone_ref(py),
                            Owner::Limiter(_) => unreachable!("matched a gate above"),
                        };
                        this.state = State::Waiting;
                        drop(this);
                        if asynchronous {
                            Gate::wait_async(&gate, py, slf, wait).map(Some)
                        } else {
                            let result = gate.get().wait_sync(py, &wait, injected);
                            let mut this = slf.borrow_mut();
                            match result {
                                Ok(raw) => {
                                    this.raw = Some(raw);
                                    this.state = State::Held;
                                    Ok(None)
                                }
                                Err(e) => {
                                    this.state = State::Failed;
                                    Err(e)
                                }
                            }
                        }
                    }
                    Err(e) => {
                        this.state = State::Failed;
                        Err(e)
                    }
                }
            }
        }
    }

    /// Called by the async wait when the ticket was granted (`Some`) or dropped (`None`).
    pub fn finish_wait(&mut self, raw: Option<RawPermit>) {
        match raw {
            Some(raw) => {
                self.raw = Some(raw);
                self.state = State::Held;
            }
            None => self.state = State::Failed,
        }
    }

    fn end(
        &mut self,
        py: Python<'_>,
        outcome: Outcome,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        match self.state {
            State::Held => {}
            State::Released(_) => {
                return Err(usage_err(py, surgeguard_core::UsageError::AlreadyReleased))
            }
            _ => {
                return Err(PyRuntimeError::new_err(
                    "this permit holds no slot (not admitted yet, or admission failed)",
                ))
            }
        }
        let now = match now_ns {
            Some(v) if !v.is_none() => now_arg(v)?,
            _ => self.now.unwrap_or_else(clock_ns),
        };
        self.release_now(Some(py), outcome, now);
        Ok(())
    }

    fn release_now(&mut self, py: Option<Python<'_>>, outcome: Outcome, now: u64) {
        if let Some(raw) = self.raw.take() {
            self.state = State::Released(outcome);
            self.owner.release(py, raw, now, outcome);
        }
    }

    /// The outcome of leaving a block with `exc_type`.
    #[inline]
    fn outcome_of(&self, exc_type: &Bound<'_, PyAny>) -> PyResult<Outcome> {
        if exc_type.is_none() {
            return Ok(Outcome::Success);
        }
        let py = exc_type.py();
        Ok(if is_overload(exc_type, self.owner.overload(py))? {
            Outcome::Dropped
        } else {
            Outcome::Ignored
        })
    }

    #[inline]
    fn exit(&mut self, exc_type: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.state == State::Held {
            let outcome = self.outcome_of(exc_type)?;
            let now = self.now.unwrap_or_else(clock_ns);
            self.release_now(Some(exc_type.py()), outcome, now);
        }
        Ok(())
    }
}

#[pymethods]
impl Permit {
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        Self::admit(&slf, false)?;
        Ok(slf)
    }

    fn __exit__(
        &mut self,
        exc_type: &Bound<'_, PyAny>,
        _exc_value: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.exit(exc_type)?;
        Ok(false)
    }

    fn __aenter__(slf: Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        match Self::admit(&slf, true)? {
            Some(coroutine) => Ok(coroutine),
            None => {
                slf.borrow_mut().awaiting = Await::Entered;
                Ok(slf.into_any().unbind())
            }
        }
    }

    fn __aexit__<'py>(
        slf: Bound<'py, Self>,
        exc_type: &Bound<'py, PyAny>,
        _exc_value: &Bound<'py, PyAny>,
        _traceback: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        {
            let mut this = slf.borrow_mut();
            this.exit(exc_type)?;
            this.awaiting = Await::Exited;
        }
        Ok(slf)
    }

    /// Awaiting a permit finishes at once (the `async with` fast path).
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(slf: Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        let state = {
            let mut this = slf.borrow_mut();
            std::mem::replace(&mut this.awaiting, Await::Nothing)
        };
        match state {
            // StopIteration(permit): the value of `await` (and of `async with ... as`).
            Await::Entered => Err(PyStopIteration::new_err(slf.into_any().unbind())),
            Await::Exited | Await::Nothing => Ok(None),
        }
    }

    /// Ends the work as a success: its latency is a sample for the limit.
    #[pyo3(signature = (*, now_ns=None))]
    fn success(&mut self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Success, now_ns)
    }

    /// Ends the work as an overload signal (timeout, 429/503 from below): the limit backs off.
    #[pyo3(signature = (*, now_ns=None))]
    fn dropped(&mut self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Dropped, now_ns)
    }

    /// Ends the work without a capacity signal (cancelled, a 4xx): the slot just returns.
    #[pyo3(signature = (*, now_ns=None))]
    fn ignore(&mut self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Ignored, now_ns)
    }

    /// Ends the work with `outcome` (`"success"`, `"dropped"` or `"ignored"`).
    #[pyo3(signature = (outcome="success", *, now_ns=None))]
    fn release(
        &mut self,
        py: Python<'_>,
        outcome: &str,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let o = outcome_arg(&pyo3::types::PyString::new(py, outcome).into_any())?;
        self.end(py, o, now_ns)
    }

    /// The priority level (0 = most important).
    #[getter]
    fn priority(&self) -> u8 {
        self.priority.index() as u8
    }

    /// Whether the permit holds a slot now.
    #[getter]
    fn held(&self) -> bool {
        self.state == State::Held
    }

    /// How it ended (`"success"`, `"dropped"`, `"ignored"`), or `None` while not released.
    #[getter]
    fn outcome(&self) -> Option<&'static str> {
        match self.state {
            State::Released(o) => Some(outcome_name(o)),
            _ => None,
        }
    }

    /// When it was admitted (the clock's nanoseconds), or `None` if not admitted.
    #[getter]
    fn started_at_ns(&self) -> Option<u64> {
        self.raw.as_ref().map(|r| r.started_at())
    }

    fn __repr__(&self) -> String {
        let state = match self.state {
            State::Pending => "pending".to_string(),
            State::Waiting => "waiting".to_string(),
            State::Held => "held".to_string(),
            State::Released(o) => format!("released ({})", outcome_name(o)),
            State::Failed => "refused".to_string(),
        };
        let _ = self.owner.levels();
        format!("<surgeguard.Permit priority={} {state}>", self.priority.index())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.raw.is_some() {
            // Garbage-collected while held: return the slot, no capacity signal.
            let now = self.now.unwrap_or_else(clock_ns);
            self.release_now(None, Outcome::Ignored, now);
        }
    }
}
