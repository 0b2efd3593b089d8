//! `Permit`: one admission, as a context manager (`with`, `async with`) or held explicitly.
//!
//! Ends exactly once: `success()`, `dropped()`, `ignore()` (the listener shape of Netflix
//! concurrency-limits: `onSuccess`, `onDropped`, `onIgnore`) or on leaving the block,
//! where the outcome comes from the exception: none → success; a configured overload
//! exception (default `TimeoutError` and `surgeguard.OverloadError`) → dropped; anything
//! else (including `CancelledError`) → ignored. A permit that is garbage-collected while
//! held is released as ignored, so nothing leaks.
//!
//! Shared across threads: the permit is a frozen pyclass (no borrow flag). Its life is one
//! atomic state word; every transition is a compare-and-swap, so of two threads ending it
//! exactly one wins and the other gets `UsageError`; readers (`held`, `outcome`) only load
//! the word (wait-free). The admitted slot is touched only by the thread that won the
//! state transition that owns it (see `SlotCell`), so it needs no lock of its own (safe
//! under free-threaded CPython as well).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::exceptions::{PyStopIteration, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use surgeguard::placement::PlacedRawPermit;
use surgeguard_core::{Outcome, Priority};

use crate::common::*;
use crate::gate::{Gate, Waiter};
use crate::limiter::Limiter;
#[cfg(target_os = "linux")]
use crate::shared_gate::SharedGate;

/// Who issued a permit.
pub enum Owner {
    Limiter(Py<Limiter>),
    Gate(Py<Gate>),
    /// A gate in shared memory: its queue's waiters are in every process (see
    /// `shared_gate.rs`), so admission and waiting are its own; the permit is this one.
    #[cfg(target_os = "linux")]
    SharedGate(Py<SharedGate>),
}

/// What an admitted permit holds: a limiter's (either placement) or a gate's slot, or a
/// shared gate's.
pub enum Slot {
    Placed(PlacedRawPermit),
    #[cfg(target_os = "linux")]
    SharedGate(surgeguard::shm::SharedGatePermit),
}

impl Slot {
    fn started_at(&self) -> u64 {
        match self {
            Slot::Placed(p) => p.started_at(),
            #[cfg(target_os = "linux")]
            Slot::SharedGate(p) => p.started_at(),
        }
    }
}

impl From<PlacedRawPermit> for Slot {
    fn from(p: PlacedRawPermit) -> Self {
        Slot::Placed(p)
    }
}

#[cfg(target_os = "linux")]
impl From<surgeguard::shm::SharedGatePermit> for Slot {
    fn from(p: surgeguard::shm::SharedGatePermit) -> Self {
        Slot::SharedGate(p)
    }
}

impl From<surgeguard_core::RawPermit> for Slot {
    fn from(p: surgeguard_core::RawPermit) -> Self {
        Slot::Placed(p.into())
    }
}

impl Owner {
    fn overload<'py>(&self, py: Python<'py>) -> &Bound<'py, PyTuple> {
        match self {
            Owner::Limiter(l) => l.get().overload.bind(py),
            Owner::Gate(g) => g.get().overload.bind(py),
            #[cfg(target_os = "linux")]
            Owner::SharedGate(g) => g.get().overload.bind(py),
        }
    }

    /// The owner's `clock=`, if any.
    fn clock(&self) -> Option<&Py<PyAny>> {
        match self {
            Owner::Limiter(l) => l.get().clock.as_ref(),
            Owner::Gate(g) => g.get().clock.as_ref(),
            #[cfg(target_os = "linux")]
            Owner::SharedGate(_) => None,
        }
    }

    /// What an abandoned permit admitted at `started_at` reports at `now`: `Dropped` if it
    /// was held longer than the owner's last window's p99 (a client that timed out),
    /// `Ignored` otherwise (the core's `Limiter::abandoned_outcome`).
    fn abandoned(&self, started_at: u64, now: u64) -> Outcome {
        match self {
            Owner::Limiter(l) => l.get().core.limiter().abandoned_outcome_at(started_at, now),
            Owner::Gate(g) => g.get().abandoned_outcome_at(started_at, now),
            #[cfg(target_os = "linux")]
            Owner::SharedGate(g) => g.get().abandoned_outcome_at(started_at, now),
        }
    }

    /// The owner's time now.
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        read_clock(py, self.clock())
    }

    pub fn same(&self, other: &Owner) -> bool {
        match (self, other) {
            (Owner::Limiter(a), Owner::Limiter(b)) => a.is(b),
            (Owner::Gate(a), Owner::Gate(b)) => a.is(b),
            #[cfg(target_os = "linux")]
            (Owner::SharedGate(a), Owner::SharedGate(b)) => a.is(b),
            _ => false,
        }
    }

    /// Returns the slot (and for a gate, hands freed slots to waiters).
    fn release(&self, py: Option<Python<'_>>, slot: Slot, now: u64, outcome: Outcome) {
        match (self, slot) {
            // Cannot fail: the permit came from this limiter (a shared one's may have been
            // given back already, by a reclaim in a process that forked this one).
            (Owner::Limiter(l), Slot::Placed(raw)) => {
                let _ = l.get().core.release_raw(raw, now, outcome);
            }
            (Owner::Gate(g), Slot::Placed(PlacedRawPermit::Local(raw))) => {
                g.get().release_raw(py, raw, now, outcome)
            }
            #[cfg(target_os = "linux")]
            (Owner::SharedGate(g), Slot::SharedGate(p)) => {
                g.get().release_slot(py, p, now, outcome)
            }
            // Each owner's permits hold its own kind of slot (`hold`): nothing else
            // reaches here.
            #[allow(unreachable_patterns)]
            (_, other) => std::mem::forget(other),
        }
    }
}

/// `gate.release(permit, outcome, now_ns=...)` of the gates: `permit` must be a `Permit`
/// of `owner`; then as `permit.release(outcome, now_ns=...)`.
pub(crate) fn release_to(
    py: Python<'_>,
    owner: Owner,
    permit: &Bound<'_, PyAny>,
    outcome: Option<&Bound<'_, PyAny>>,
    now_ns: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let permit = permit.cast::<Permit>().map_err(|_| {
        PyTypeError::new_err(format!("permit must be a Permit, got {}", type_name(permit)))
    })?;
    if !permit.get().owner().same(&owner) {
        return Err(usage_err(py, surgeguard_core::UsageError::ForeignHandle));
    }
    let kwargs = match now_ns {
        Some(v) => {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("now_ns", v)?;
            Some(d)
        }
        None => None,
    };
    permit.call_method("release", (outcome,), kwargs.as_ref())?;
    Ok(())
}

/// `gate._finish(permit, ticket)` of the gates' asyncio wait: the ticket's outcome, a slot
/// (the permit now holds it) or a refusal (raised); `None`: not decided yet.
pub(crate) fn finish_async<P: Into<Slot>>(
    py: Python<'_>,
    permit: &Bound<'_, Permit>,
    outcome: Option<Result<P, surgeguard_core::Rejected>>,
) -> PyResult<()> {
    match outcome {
        Some(Ok(slot)) => permit.get().hold(py, slot),
        Some(Err(r)) => {
            permit.get().refused();
            Err(rejected_err(py, r))
        }
        None => Err(pyo3::exceptions::PyValueError::new_err("the ticket has no outcome yet")),
    }
}

/// `gate._abandon(permit, ticket, keep)` of the gates' asyncio wait, once the ticket is
/// withdrawn: a slot granted meanwhile is kept (`keep`: the permit holds it, `True`) or
/// handed to `give_back`; the permit is refused otherwise.
pub(crate) fn abandon_async<P: Into<Slot>>(
    py: Python<'_>,
    permit: &Bound<'_, Permit>,
    granted: Option<P>,
    keep: bool,
    give_back: impl FnOnce(P) -> PyResult<()>,
) -> PyResult<bool> {
    match granted {
        Some(slot) if keep => permit.get().hold(py, slot).map(|()| true),
        Some(slot) => {
            permit.get().refused();
            give_back(slot).map(|()| false)
        }
        None => {
            permit.get().refused();
            Ok(false)
        }
    }
}

/// The states of a permit (one `AtomicU8`).
mod st {
    /// Made by `acquire()`: admission happens on entering the block.
    pub const PENDING: u8 = 0;
    /// Entering: admission (or the wait in a gate's queue) is in progress.
    pub const WAITING: u8 = 1;
    /// Admitted by `try_acquire()`; not inside a `with` block.
    pub const HELD: u8 = 2;
    /// Admitted and inside its `with` block.
    pub const IN_BLOCK: u8 = 3;
    /// Being released by the thread that won the transition.
    pub const RELEASING: u8 = 4;
    /// Admission failed (the refusal was raised), or the wait was abandoned.
    pub const FAILED: u8 = 5;
    /// Admitted: the thread that moved `WAITING` here is storing the slot.
    pub const FILLING: u8 = 6;
    /// Released: `RELEASED + outcome index` (success, dropped, ignored).
    pub const RELEASED: u8 = 8;
}

fn outcome_code(o: Outcome) -> u8 {
    match o {
        Outcome::Success => 0,
        Outcome::Dropped => 1,
        Outcome::Ignored => 2,
    }
}

fn outcome_of_code(c: u8) -> Outcome {
    match c {
        0 => Outcome::Success,
        1 => Outcome::Dropped,
        _ => Outcome::Ignored,
    }
}

/// What `__next__` answers when the permit is awaited (the `async with` fast path).
mod aw {
    pub const NOTHING: u8 = 0;
    /// `__aenter__` admitted at once: the awaitable finishes with the permit.
    pub const ENTERED: u8 = 1;
}

/// The admitted slot of a permit, owned through the permit's state word instead of a lock.
///
/// The rule: the slot is written only by the thread whose compare-and-swap moved the state
/// from `WAITING` to `FILLING` (exactly one thread wins it), before it publishes
/// `IN_BLOCK` with a Release store; or before the permit is shared at all (`HELD` at
/// creation). It
/// is taken only by the thread whose compare-and-swap moved the state from `HELD` or
/// `IN_BLOCK` to `RELEASING` (AcqRel: its Acquire pairs with that Release), and exactly
/// one thread wins that transition; or by `Drop`, which has the permit to itself. So at
/// most one thread touches the cell at a time, and each access happens after the previous
/// one. Before, a mutex held the slot: two uncontended lock/unlock pairs per `with` block.
struct SlotCell(UnsafeCell<Option<Slot>>);

// SAFETY: every access follows the ownership rule above (one thread at a time, ordered by
// the state word's Release/Acquire pairs), and the permit is plain data that may move
// between threads.
unsafe impl Sync for SlotCell {}

impl SlotCell {
    /// Stores the slot.
    ///
    /// # Safety
    /// The caller owns the cell by the rule above (it won `WAITING` → `FILLING`), and
    /// publishes the store with a Release store of the state afterwards.
    unsafe fn put(&self, raw: Slot) {
        // SAFETY: exclusive by the caller's contract.
        unsafe { *self.0.get() = Some(raw) };
    }

    /// Takes the slot.
    ///
    /// # Safety
    /// The caller won the transition to `RELEASING` (AcqRel compare-and-swap).
    unsafe fn take(&self) -> Option<Slot> {
        // SAFETY: exclusive by the caller's contract.
        unsafe { (*self.0.get()).take() }
    }
}

/// One admission: use it as `with ... as permit:` / `async with ... as permit:`, or end it
/// explicitly with `success()`, `dropped()` or `ignore()`. Safe to share between threads.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct Permit {
    owner: Owner,
    priority: Priority,
    /// Gate only: how long to wait when queued (`None` = until granted or dropped).
    timeout_ns: Option<u64>,
    /// `now_ns=` given at acquire: the time of the admission (and of the release, unless
    /// a release gives its own).
    now: Option<u64>,
    /// Made by `acquire_async()`: only `async with` may enter it.
    is_async: bool,
    state: AtomicU8,
    /// The slot; taken only by the thread that won the transition out of `HELD`/`IN_BLOCK`
    /// (or put in by the one that won `WAITING`), so never contended.
    raw: SlotCell,
    /// Set once admitted (0 before): `started_at_ns`.
    started: std::sync::atomic::AtomicU64,
    awaiting: AtomicU8,
    /// The process that made it (see `foreign_copy`).
    pid: u32,
}

impl Permit {
    fn new(
        owner: Owner,
        priority: Priority,
        timeout_ns: Option<u64>,
        now: Option<u64>,
        is_async: bool,
        state: u8,
        raw: Option<Slot>,
    ) -> Self {
        let started = raw.as_ref().map_or(0, |r| r.started_at());
        Self {
            owner,
            priority,
            timeout_ns,
            now,
            is_async,
            state: AtomicU8::new(state),
            raw: SlotCell(UnsafeCell::new(raw)),
            started: std::sync::atomic::AtomicU64::new(started),
            awaiting: AtomicU8::new(aw::NOTHING),
            pid: std::process::id(),
        }
    }

    /// A permit admitted on entry.
    pub fn pending(
        owner: Owner,
        priority: Priority,
        timeout_ns: Option<u64>,
        now: Option<u64>,
        is_async: bool,
    ) -> Self {
        Self::new(owner, priority, timeout_ns, now, is_async, st::PENDING, None)
    }

    /// A permit already admitted.
    pub fn admitted(
        owner: Owner,
        priority: Priority,
        raw: impl Into<Slot>,
        injected: bool,
    ) -> Self {
        let raw = raw.into();
        let now = injected.then(|| raw.started_at());
        Self::new(owner, priority, None, now, false, st::HELD, Some(raw))
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    fn cas(&self, from: u8, to: u8) -> Result<(), u8> {
        // AcqRel: the winner of a transition sees the slot stored by the previous one.
        self.state.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).map(|_| ())
    }

    /// Stores the slot of an admission and moves `WAITING` → `IN_BLOCK`. A permit that is
    /// not waiting (an async wait finished twice, or for another permit) refuses the slot:
    /// it goes back to its owner unused and the call raises `UsageError`.
    pub(crate) fn hold(&self, py: Python<'_>, raw: impl Into<Slot>) -> PyResult<()> {
        let raw = raw.into();
        if self.cas(st::WAITING, st::FILLING).is_err() {
            let now = raw.started_at();
            self.owner.release(Some(py), raw, now, Outcome::Ignored);
            return Err(usage_msg(py, "not_waiting", "this permit is not waiting for a slot"));
        }
        self.started.store(raw.started_at(), Ordering::Relaxed);
        // SAFETY: this thread won `WAITING` → `FILLING` just above, which makes it the
        // cell's only user; the Release store below publishes the slot to the thread that
        // later wins `IN_BLOCK` → `RELEASING`.
        unsafe { self.raw.put(raw) };
        self.state.store(st::IN_BLOCK, Ordering::Release);
        Ok(())
    }

    /// The error for entering a permit in state `s`.
    fn enter_error(py: Python<'_>, s: u8) -> PyErr {
        match s {
            st::IN_BLOCK | st::WAITING | st::FILLING => usage_msg(
                py,
                "already_entered",
                "this permit is already inside a `with` block (a permit is entered once)",
            ),
            st::FAILED => {
                usage_msg(py, "not_admitted", "this permit was refused; acquire a new one")
            }
            _ => usage_msg(py, "already_released", "permit already released"),
        }
    }

    /// Admission on entering the block: sync (may block, GIL released) or async (returns a
    /// coroutine to await when queued, `None` when admitted at once).
    /// The admission failed (its refusal is raised) or the wait was abandoned.
    pub(crate) fn refused(&self) {
        self.state.store(st::FAILED, Ordering::Release);
    }

    /// The priority level it was asked at, its timeout (`None`: none), and whether its
    /// time was injected (`now_ns=`).
    pub(crate) fn request(&self) -> (Priority, Option<u64>, bool) {
        (self.priority, self.timeout_ns, self.now.is_some())
    }

    /// A copy of a shared gate's permit in a process forked after the admission: the slot
    /// is the parent's to release (a shared limiter's or an in-process object's is this
    /// process's own copy).
    fn foreign_copy(&self) -> bool {
        #[cfg(target_os = "linux")]
        if matches!(self.owner, Owner::SharedGate(_)) {
            return self.pid != std::process::id();
        }
        false
    }

    fn admit(slf: &Bound<'_, Self>, asynchronous: bool) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        if this.is_async != asynchronous && matches!(this.owner, Owner::Gate(_)) {
            return Err(PyTypeError::new_err(if asynchronous {
                "Gate.acquire() blocks the thread while queued: use `async with \
                 gate.acquire_async(...)` in async code"
            } else {
                "acquire_async() returns an async context manager: use `async with`"
            }));
        }
        // A permit from try_acquire(): entering it just opens the block. One load picks
        // the transition to try, so the common case (a permit from acquire(), PENDING)
        // pays one compare-and-swap, not a failed one first; each CAS re-checks the state.
        if this.state.load(Ordering::Acquire) == st::HELD
            && this.cas(st::HELD, st::IN_BLOCK).is_ok()
        {
            return Ok(None);
        }
        if let Err(s) = this.cas(st::PENDING, st::WAITING) {
            return Err(Self::enter_error(py, s));
        }
        let now = match this.now {
            Some(n) => n,
            None => match this.owner.now(py) {
                Ok(n) => n,
                Err(e) => {
                    this.state.store(st::PENDING, Ordering::Release);
                    return Err(e);
                }
            },
        };
        match &this.owner {
            Owner::Limiter(l) => match l.get().core.try_acquire_raw(now, this.priority) {
                Ok(raw) => {
                    this.hold(py, raw)?;
                    Ok(None)
                }
                Err(e) => {
                    this.state.store(st::FAILED, Ordering::Release);
                    Err(crate::placed::place_err(py, "Limiter", e))
                }
            },
            Owner::Gate(g) => {
                let injected = this.now.is_some() || this.owner.clock().is_some();
                match g.get().arrive(py, now, this.priority, this.timeout_ns) {
                    Ok(Waiter::Admitted(raw)) => {
                        this.hold(py, raw)?;
                        Ok(None)
                    }
                    Ok(Waiter::Queued(wait)) => {
                        if asynchronous {
                            Gate::wait_async(g, py, slf, wait).map(Some)
                        } else {
                            match g.get().wait_sync(py, &wait, injected) {
                                Ok(raw) => {
                                    this.hold(py, raw)?;
                                    Ok(None)
                                }
                                Err(e) => {
                                    this.state.store(st::FAILED, Ordering::Release);
                                    Err(e)
                                }
                            }
                        }
                    }
                    Err(e) => {
                        this.state.store(st::FAILED, Ordering::Release);
                        Err(e)
                    }
                }
            }
            #[cfg(target_os = "linux")]
            Owner::SharedGate(g) => SharedGate::enter(g, py, slf, now, asynchronous),
        }
    }

    /// Called by the async wait when the ticket was granted (`Some`) or dropped (`None`).
    pub fn finish_wait(
        &self,
        py: Python<'_>,
        raw: Option<surgeguard_core::RawPermit>,
    ) -> PyResult<()> {
        match raw {
            Some(raw) => self.hold(py, raw),
            None => {
                self.state.store(st::FAILED, Ordering::Release);
                Ok(())
            }
        }
    }

    /// Wins the transition out of `HELD`/`IN_BLOCK` (or reports why not).
    fn claim(&self, py: Python<'_>) -> PyResult<()> {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            match s {
                st::HELD | st::IN_BLOCK => match self.cas(s, st::RELEASING) {
                    Ok(()) => return Ok(()),
                    Err(actual) => s = actual,
                },
                st::RELEASING => {
                    return Err(usage_err(py, surgeguard_core::UsageError::AlreadyReleased))
                }
                s if s >= st::RELEASED => {
                    return Err(usage_err(py, surgeguard_core::UsageError::AlreadyReleased))
                }
                st::FAILED => {
                    return Err(usage_msg(
                        py,
                        "not_admitted",
                        "this permit holds no slot: its admission was refused",
                    ))
                }
                _ => {
                    return Err(usage_msg(
                        py,
                        "not_admitted",
                        "this permit holds no slot yet: enter it (`with permit:`) first",
                    ))
                }
            }
        }
    }

    fn end(
        &self,
        py: Python<'_>,
        outcome: Outcome,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // Validate every argument before touching the state.
        let now = match now_ns {
            Some(v) if !v.is_none() => Some(now_arg(v)?),
            _ => None,
        };
        let now = match now.or(self.now) {
            Some(n) => n,
            None => self.owner.now(py)?,
        };
        if self.foreign_copy() && self.held() {
            return Err(usage_err(py, surgeguard_core::UsageError::ForeignHandle));
        }
        self.claim(py)?;
        self.finish_release(Some(py), outcome, now);
        Ok(())
    }

    /// After `claim`: returns the slot and records the outcome.
    fn finish_release(&self, py: Option<Python<'_>>, outcome: Outcome, now: u64) {
        // SAFETY: called only after `claim` or `exit` won the transition to `RELEASING`
        // (AcqRel), which no other thread can win.
        let raw = unsafe { self.raw.take() };
        self.state.store(st::RELEASED + outcome_code(outcome), Ordering::Release);
        if let Some(raw) = raw {
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

    /// Leaving the block: releases the slot unless the body already ended the permit.
    #[inline]
    fn exit(&self, exc_type: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = exc_type.py();
        match self.state.load(Ordering::Acquire) {
            st::IN_BLOCK if self.foreign_copy() => {
                Err(usage_err(py, surgeguard_core::UsageError::ForeignHandle))
            }
            st::IN_BLOCK => {
                let outcome = self.outcome_of(exc_type)?;
                let now = match self.now {
                    Some(n) => n,
                    None => self.owner.now(py)?,
                };
                if self.cas(st::IN_BLOCK, st::RELEASING).is_ok() {
                    self.finish_release(Some(py), outcome, now);
                }
                // Lost to an explicit end on another thread: it is ended either way.
                Ok(())
            }
            // Ended inside the block (`permit.dropped()` ...): nothing left to do.
            s if s == st::RELEASING || s >= st::RELEASED => Ok(()),
            _ => Err(usage_msg(
                py,
                "not_entered",
                "__exit__ without a matching __enter__: this permit is not inside a block",
            )),
        }
    }
}

#[pymethods]
impl Permit {
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        Self::admit(&slf, false)?;
        Ok(slf)
    }

    fn __exit__(
        &self,
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
                slf.get().awaiting.store(aw::ENTERED, Ordering::Release);
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
        slf.get().exit(exc_type)?;
        slf.get().awaiting.store(aw::NOTHING, Ordering::Release);
        Ok(slf)
    }

    /// Awaiting a permit finishes at once (the `async with` fast path).
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(slf: Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        match slf.get().awaiting.swap(aw::NOTHING, Ordering::AcqRel) {
            // StopIteration(permit): the value of `await` (and of `async with ... as`).
            aw::ENTERED => Err(PyStopIteration::new_err(slf.into_any().unbind())),
            _ => Ok(None),
        }
    }

    /// Ends the work as a success: its latency is a sample for the limit.
    #[pyo3(signature = (*, now_ns=None))]
    fn success(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Success, now_ns)
    }

    /// Ends the work as an overload signal (timeout, 429/503 from below): the limit backs off.
    #[pyo3(signature = (*, now_ns=None))]
    fn dropped(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Dropped, now_ns)
    }

    /// Ends the work without a capacity signal (cancelled, a 4xx): the slot just returns.
    #[pyo3(signature = (*, now_ns=None))]
    fn ignore(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.end(py, Outcome::Ignored, now_ns)
    }

    /// Ends work whose caller went away (a cancelled task, a client that disconnected):
    /// an overload signal (`"dropped"`) if it was held longer than the last window's p99
    /// latency, which is what a client timeout looks like; otherwise `"ignored"`.
    #[pyo3(signature = (*, now_ns=None))]
    fn abandon(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let now = match now_ns {
            Some(v) if !v.is_none() => Some(now_arg(v)?),
            _ => None,
        };
        let now = match now.or(self.now) {
            Some(n) => n,
            None => self.owner.now(py)?,
        };
        let started = self.started.load(Ordering::Relaxed);
        let o = self.owner.abandoned(started, now);
        let now_obj = now.into_pyobject(py)?.into_any();
        self.end(py, o, Some(&now_obj))
    }

    /// Ends the work with `outcome` (`"success"`, `"dropped"`, `"ignored"` or
    /// `"abandoned"`, as [`abandon`](Self::abandon)).
    #[pyo3(signature = (outcome=None, *, now_ns=None))]
    fn release(
        &self,
        py: Python<'_>,
        outcome: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let o = match outcome.filter(|v| !v.is_none()) {
            Some(v) if v.extract::<&str>().is_ok_and(|s| s == "abandoned") => {
                return self.abandon(py, now_ns);
            }
            Some(v) => outcome_arg(v)?,
            None => Outcome::Success,
        };
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
        matches!(self.state.load(Ordering::Acquire), st::HELD | st::IN_BLOCK)
    }

    /// How it ended (`"success"`, `"dropped"`, `"ignored"`), or `None` while not released.
    #[getter]
    fn outcome(&self) -> Option<&'static str> {
        let s = self.state.load(Ordering::Acquire);
        (s >= st::RELEASED).then(|| outcome_name(outcome_of_code(s - st::RELEASED)))
    }

    /// When it was admitted (the clock's nanoseconds), or `None` if not admitted.
    #[getter]
    fn started_at_ns(&self) -> Option<u64> {
        match self.started.load(Ordering::Relaxed) {
            0 if !matches!(self.state.load(Ordering::Acquire), st::HELD | st::IN_BLOCK) => None,
            t => Some(t),
        }
    }

    fn __repr__(&self) -> String {
        let s = self.state.load(Ordering::Acquire);
        let state = match s {
            st::PENDING => "pending".to_string(),
            st::WAITING | st::FILLING => "waiting".to_string(),
            st::HELD | st::IN_BLOCK => "held".to_string(),
            st::RELEASING => "releasing".to_string(),
            st::FAILED => "refused".to_string(),
            s => format!("released ({})", outcome_name(outcome_of_code(s - st::RELEASED))),
        };
        format!("<surgeguard.Permit priority={} {state}>", self.priority.index())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.foreign_copy() {
            return; // the parent's slot
        }
        if let Some(raw) = self.raw.0.get_mut().take() {
            // Garbage-collected while held: return the slot, no capacity signal (with a
            // `clock=`, at the admission's time: no Python call from a destructor).
            let now = match (self.now, self.owner.clock()) {
                (Some(n), _) => n,
                (None, Some(_)) => raw.started_at(),
                (None, None) => clock_ns(),
            };
            self.owner.release(None, raw, now, Outcome::Ignored);
        }
    }
}
