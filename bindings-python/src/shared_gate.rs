//! `SharedGate`: the `Gate` (limit, priority queue, CoDel, deadlines, shed switch) in
//! memory shared between worker processes, the `surgeguard` crate's `shm::SharedGate`.
//!
//! A release in one process grants a waiter queued by another: the crate routes each grant
//! to the process that queued the ticket and wakes it through a futex word in the segment.
//! Here:
//!
//! - a **sync** waiter blocks in the crate's `wait` with the GIL released, in slices of at
//!   most 20 ms between which it checks for signals (Ctrl-C withdraws the ticket; a grant
//!   that raced in is released as ignored);
//! - **async** waiters are served by one pump thread per process and gate, started on the
//!   first async wait (and again in a forked child: the pid is checked), blocked on the
//!   process's mailbox (`wait_mailbox`); it takes each decided ticket's outcome and wakes
//!   its future through `loop.call_soon_threadsafe` (see `surgeguard/_aio.py`). It also
//!   polls the gate when its `next_wakeup` comes (deadlines, CoDel, maximum wait; it
//!   looks at least every 20 ms) and sweeps dead processes every 100 ms while anything
//!   waits; it exits after 0.5 s with nothing to wait for. A cancelled task withdraws its
//!   ticket; a grant that raced with the cancel is released as ignored.
//!
//! A permit belongs to the process that was admitted: a forked child's copy cannot release
//! it (`UsageError`, and dropping the copy releases nothing). Fork while this process has
//! async waiters in flight only if the child will not wait asynchronously on the same gate
//! object (the pump's registry lock could be held across the fork).

use std::collections::HashMap;

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};
use surgeguard::shm::{
    SharedArrival, SharedGate as CoreShared, SharedGatePermit as CorePermit, SharedOutcome,
    SharedTicket, ShmError, SWEEP_INTERVAL_NS,
};
use surgeguard_core::gate::{GateConfig, GateState};
use surgeguard_core::{Outcome, Priority, Reason, Rejected};

use crate::common::*;
use crate::gate::{gate_metrics, Gate};
use crate::permit::{Owner, Permit, Slot};
use crate::placed::place_err;

fn shm_err(py: Python<'_>, e: ShmError) -> PyErr {
    place_err(py, "SharedGate", e)
}

/// The queue capacities compiled in; a shared gate uses the smallest that holds
/// `queue_capacity` (every process must pass the same, or attaching is refused).
macro_rules! any_shared {
    ($($variant:ident = $cap:literal),* $(,)?) => {
        enum AnyShared {
            $($variant(CoreShared<$cap>),)*
        }

        impl AnyShared {
            fn open(name: Option<&str>, cfg: GateConfig, capacity: usize) -> Result<Self, ShmError> {
                $(if capacity <= $cap {
                    return Ok(AnyShared::$variant(match name {
                        Some(n) => CoreShared::<$cap>::open(n, cfg)?,
                        None => CoreShared::<$cap>::anonymous(cfg)?,
                    }));
                })*
                Err(ShmError::Config(surgeguard_core::ConfigError::out_of_range("gate.queue_capacity")))
            }
        }

        macro_rules! on {
            ($g:expr, $x:ident => $body:expr) => {
                match $g { $(AnyShared::$variant($x) => $body,)* }
            };
        }
    };
}

any_shared!(S64 = 64, S256 = 256, S1024 = 1024, S4096 = 4096);

/// A blocked thread wakes at least this often to check for signals.
const SLICE_NS: u64 = 20_000_000;
/// A waiter whose timeout passed without an outcome gives up after this much more.
const GRACE_NS: u64 = 2_000_000;
/// The pump thread exits after this long with nothing to wait for.
const PUMP_IDLE: Duration = Duration::from_millis(500);

static AIO_WAIT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An async waiter: its ticket, and the outcome once the pump took it.
struct AsyncSlot {
    ticket: SharedTicket,
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    result: Option<SharedOutcome>,
    /// The asyncio future's wake-up callable (called with the GIL).
    waker: Option<Py<PyAny>>,
    /// The wait ended (`_finish` or `_abandon`): nothing left to withdraw on drop.
    finished: bool,
}

/// The async waiters of this process, and its pump thread.
#[derive(Default)]
struct Pump {
    /// The process these waiters (and the thread) belong to: a forked child starts afresh.
    pid: u32,
    running: bool,
    waiters: HashMap<u64, Arc<AsyncSlot>>,
}

struct Inner {
    core: AnyShared,
    pump: Mutex<Pump>,
    cv: Condvar,
}

impl Inner {
    /// Registers an async waiter (starting the pump if needed); `true` if its outcome is
    /// already known (then it is in the slot and nothing is registered).
    fn register(self: &Arc<Self>, slot: &Arc<AsyncSlot>) -> bool {
        let me = std::process::id();
        let mut p = lock(&self.pump);
        if p.pid != me {
            // Forked: the parent's waiters and thread are not ours.
            let old = std::mem::take(&mut p.waiters);
            std::mem::forget(old); // Python objects of the parent's loop: never touched here
            p.pid = me;
            p.running = false;
        }
        if let Ok(Some(o)) = on!(&self.core, g => g.outcome(&slot.ticket)) {
            lock(&slot.state).result = Some(o);
            return true;
        }
        p.waiters.insert(slot.ticket.ticket().to_bits(), slot.clone());
        if !p.running {
            p.running = true;
            let inner = self.clone();
            let spawned = std::thread::Builder::new()
                .name("surgeguard-shared-gate".into())
                .spawn(move || inner.pump_loop(me));
            if spawned.is_err() {
                p.running = false;
            }
        } else {
            self.cv.notify_all();
        }
        false
    }

    /// The pump thread: takes decided outcomes and wakes their futures; polls the gate on
    /// its timers; sweeps dead processes.
    fn pump_loop(self: Arc<Self>, pid: u32) {
        let mut next_sweep = 0u64;
        loop {
            let seq = on!(&self.core, g => g.mailbox_seq());
            let mut wakers = Vec::new();
            {
                let mut p = lock(&self.pump);
                if p.pid != pid {
                    return;
                }
                if p.waiters.is_empty() {
                    let (mut p, _) =
                        self.cv.wait_timeout(p, PUMP_IDLE).unwrap_or_else(|e| e.into_inner());
                    if p.waiters.is_empty() {
                        p.running = false;
                        return;
                    }
                    continue;
                }
                p.waiters.retain(|_, slot| {
                    let decided = match on!(&self.core, g => g.outcome(&slot.ticket)) {
                        Ok(None) => return true,
                        Ok(Some(o)) => o,
                        // Not a live ticket any more (cannot happen for a registered one):
                        // tell its waiter rather than leave it waiting.
                        Err(_) => SharedOutcome::Expired(Rejected::new(Reason::Cancelled, 0)),
                    };
                    let mut st = lock(&slot.state);
                    st.result = Some(decided);
                    if let Some(w) = st.waker.take() {
                        wakers.push(w);
                    }
                    false
                });
            }
            if !wakers.is_empty() && !call_wakers(wakers) {
                // The interpreter is shutting down: never touch Python again.
                lock(&self.pump).running = false;
                return;
            }
            let now = clock_ns();
            if now >= next_sweep {
                next_sweep = now.saturating_add(SWEEP_INTERVAL_NS);
                on!(&self.core, g => {
                    g.reclaim();
                    let _ = g.poll(now);
                });
            }
            let mut next = on!(&self.core, g => g.gate().next_wakeup(now));
            if next.is_some_and(|t| t <= now) {
                let _ = on!(&self.core, g => g.poll(now));
                next = on!(&self.core, g => g.gate().next_wakeup(now));
            }
            // At most a slice apart: a waiter registered meanwhile may have an earlier
            // timer than the one this sleep was computed from.
            let until = next
                .map_or(next_sweep, |t| t.max(now + 1).min(next_sweep))
                .min(now.saturating_add(SLICE_NS));
            on!(&self.core, g => g.wait_mailbox(seq, until.saturating_sub(now).max(1_000)));
        }
    }
}

/// The pump threads' way into Python, closed at interpreter exit: a thread that is inside
/// Python (waking a future) when the interpreter finalizes would be made to exit through
/// the Rust frames of its stack (`pthread_exit` when it asks for the GIL back), which
/// aborts the process. An `atexit` hook closes the gate and waits for such calls to end.
struct ExitGuard {
    /// `(closed, pump threads inside Python now)`.
    state: Mutex<(bool, u32)>,
    cv: Condvar,
}

static EXIT_GUARD: ExitGuard = ExitGuard { state: Mutex::new((false, 0)), cv: Condvar::new() };
static ATEXIT: std::sync::Once = std::sync::Once::new();

/// Calls the wakers with the GIL; `false` (without calling them) once the interpreter is
/// exiting.
fn call_wakers(wakers: Vec<Py<PyAny>>) -> bool {
    {
        let mut st = lock(&EXIT_GUARD.state);
        if st.0 {
            // Dropping them would need the GIL: leave them to the process's exit.
            std::mem::forget(wakers);
            return false;
        }
        st.1 += 1;
    }
    Python::attach(|py| {
        for w in &wakers {
            if let Err(e) = w.call0(py) {
                e.write_unraisable(py, None);
            }
        }
        drop(wakers);
    });
    let mut st = lock(&EXIT_GUARD.state);
    st.1 -= 1;
    if st.1 == 0 {
        EXIT_GUARD.cv.notify_all();
    }
    true
}

/// Registers (once per process) the `atexit` hook that closes [`EXIT_GUARD`].
fn register_atexit(py: Python<'_>) -> PyResult<()> {
    let mut result = Ok(());
    ATEXIT.call_once(|| {
        result = (|| {
            let hook = pyo3::types::PyCFunction::new_closure(
                py,
                None,
                None,
                |args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| {
                    args.py().detach(|| {
                        let mut st = lock(&EXIT_GUARD.state);
                        st.0 = true;
                        let end = std::time::Instant::now() + Duration::from_secs(2);
                        while st.1 > 0 && std::time::Instant::now() < end {
                            st = EXIT_GUARD
                                .cv
                                .wait_timeout(st, Duration::from_millis(50))
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                    });
                },
            )?;
            py.import("atexit")?.call_method1("register", (hook,))?;
            Ok(())
        })();
    });
    result
}

/// A `Gate` in memory shared between processes: one limit, one priority queue and one set
/// of waiters across worker processes (gunicorn, `uvicorn --workers`, multiprocessing). A
/// release in one process grants a waiter queued in another. Make it with
/// `Gate.shared("name", ...)` (created or attached by name) or `Gate.shared(None, ...)`
/// before `os.fork()`; every process must pass the same config. Every process must use
/// the native clock (or pass `now_ns=` from it). Permits and queued tickets of a process
/// that dies (`kill -9`) are given back by the next sweep (a waiter sweeps at most every
/// 100 ms).
#[pyclass(frozen, weakref, module = "surgeguard._native")]
pub struct SharedGate {
    inner: Arc<Inner>,
    levels: u8,
    pub(crate) overload: Py<PyTuple>,
}

impl SharedGate {
    fn core(&self) -> &AnyShared {
        &self.inner.core
    }

    /// The limiter's rule for a permit admitted at `started_at` whose caller went away.
    pub(crate) fn abandoned_outcome_at(&self, started_at: u64, now: u64) -> Outcome {
        on!(self.core(), g => g.gate().limiter().abandoned_outcome_at(started_at, now))
    }

    fn retry_hint(&self) -> u64 {
        let s = on!(self.core(), g => g.gate().service_ns());
        if s == 0 {
            1_000_000_000
        } else {
            s.max(1_000_000)
        }
    }

    fn arrive(
        &self,
        py: Python<'_>,
        now: u64,
        p: Priority,
        deadline: Option<u64>,
    ) -> PyResult<SharedArrival> {
        py.detach(|| on!(self.core(), g => g.arrive(now, p, deadline))).map_err(|e| shm_err(py, e))
    }

    fn release_words(
        &self,
        py: Python<'_>,
        w: [u64; 3],
        now: u64,
        outcome: Outcome,
    ) -> PyResult<()> {
        py.detach(|| on!(self.core(), g => g.release(CorePermit::from_words(w), now, outcome)))
            .map_err(|e| shm_err(py, e))
    }

    /// Withdraws a ticket that must not wait; a grant that came first is kept.
    fn no_wait(&self, py: Python<'_>, t: &SharedTicket) -> PyResult<CorePermit> {
        match py.detach(|| on!(self.core(), g => g.cancel(t))).map_err(|e| shm_err(py, e))? {
            None => Err(rejected_err(py, Rejected::new(Reason::LimitReached, self.retry_hint()))),
            Some(SharedOutcome::Granted(p)) => Ok(p),
            Some(SharedOutcome::Expired(r)) => Err(rejected_err(py, r)),
        }
    }

    /// Blocks (GIL released, in slices; signals checked between them) until the ticket
    /// is decided. `real_deadline`: on the native clock, when to give up (plus a grace).
    fn wait_sync(
        &self,
        py: Python<'_>,
        t: &SharedTicket,
        real_deadline: Option<u64>,
    ) -> PyResult<CorePermit> {
        let mut withdrawn_failed = false;
        loop {
            let now = clock_ns();
            let slice = match real_deadline {
                Some(d) if !withdrawn_failed => {
                    d.saturating_add(GRACE_NS).saturating_sub(now).clamp(1_000, SLICE_NS)
                }
                _ => SLICE_NS,
            };
            match py.detach(|| on!(self.core(), g => g.wait(t, slice))) {
                Ok(Some(SharedOutcome::Granted(p))) => return Ok(p),
                Ok(Some(SharedOutcome::Expired(r))) => return Err(rejected_err(py, r)),
                Err(e) => return Err(shm_err(py, e)),
                Ok(None) => {}
            }
            if let Err(e) = py.check_signals() {
                if let Ok(Some(SharedOutcome::Granted(p))) =
                    py.detach(|| on!(self.core(), g => g.cancel(t)))
                {
                    let _ = self.release_words(py, p.into_words(), clock_ns(), Outcome::Ignored);
                }
                return Err(e);
            }
            if let Some(d) = real_deadline {
                if !withdrawn_failed && clock_ns() >= d.saturating_add(GRACE_NS) {
                    match py.detach(|| on!(self.core(), g => g.cancel_if_waiting(t))) {
                        Ok(()) => {
                            return Err(rejected_err(
                                py,
                                Rejected::new(Reason::Expired, self.retry_hint()),
                            ))
                        }
                        // Decided meanwhile: the next wait returns it at once.
                        Err(_) => withdrawn_failed = true,
                    }
                }
            }
        }
    }

    fn pending(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let (level, timeout_ns, now) =
            acquire_args(slf.py(), slf.get().levels, priority, timeout, now_ns)?;
        Ok(Permit::pending(Owner::SharedGate(slf.clone().unbind()), level, timeout_ns, now, false))
    }

    /// Returns a permit's slot (errors ignored: the permit came from this gate; a copy in
    /// a forked child never gets here, see `Permit::foreign_copy`).
    pub(crate) fn release_slot(
        &self,
        py: Option<Python<'_>>,
        p: CorePermit,
        now: u64,
        outcome: Outcome,
    ) {
        let release = || {
            let _ = on!(self.core(), g => g.release(p, now, outcome));
        };
        match py {
            Some(py) => py.detach(release),
            None => release(),
        }
    }

    /// Entering a pending permit (`with` / `async with`): the arrival, then for a queued
    /// ticket the wait (sync: here, GIL released; async: the coroutine `async with`
    /// awaits, woken by this process's pump thread). The permit is the in-process gate's
    /// `Permit`; what differs is how a queued ticket learns its grant.
    pub(crate) fn enter(
        gate: &Py<SharedGate>,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        now: u64,
        asynchronous: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        let g = gate.get();
        let this = permit.get();
        let (level, timeout_ns, injected) = this.request();
        let deadline = match timeout_ns {
            None | Some(0) => None,
            Some(t) => Some(now.saturating_add(t)),
        };
        let granted = match g.arrive(py, now, level, deadline) {
            Ok(SharedArrival::Admitted(p)) => Ok(p),
            Ok(SharedArrival::Rejected(r)) => Err(rejected_err(py, r)),
            Ok(SharedArrival::Queued(t)) if timeout_ns == Some(0) => g.no_wait(py, &t),
            Ok(SharedArrival::Queued(t)) => {
                // With injected time the deadline is in the caller's clock: give up after
                // the timeout in real time.
                let real = timeout_ns.map(|t| {
                    if injected {
                        clock_ns().saturating_add(t)
                    } else {
                        now.saturating_add(t)
                    }
                });
                if asynchronous {
                    return Self::wait_async(gate, py, permit, t, real).map(Some);
                }
                g.wait_sync(py, &t, real)
            }
            Err(e) => Err(e),
        };
        match granted {
            Ok(p) => this.hold(py, Slot::SharedGate(p)).map(|()| None),
            Err(e) => {
                this.refused();
                Err(e)
            }
        }
    }

    /// Starts the asyncio wait of a queued ticket: the coroutine `async with` awaits.
    fn wait_async(
        gate: &Py<SharedGate>,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        t: SharedTicket,
        real: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let ticket = Py::new(
            py,
            SharedGateTicket {
                slot: Arc::new(AsyncSlot { ticket: t, state: Mutex::default() }),
                inner: gate.get().inner.clone(),
            },
        )?;
        let timeout = real.map(|d| secs(d.saturating_sub(clock_ns())));
        let wait = AIO_WAIT.get_or_try_init(py, || {
            py.import("surgeguard._aio")?.getattr("wait_ticket").map(Bound::unbind)
        })?;
        // No loop timer: the pump thread runs the gate's timers.
        wait.call1(py, (gate.clone_ref(py), permit.clone(), ticket, timeout, false))
    }
}

#[pymethods]
impl SharedGate {
    /// `SharedGate(name, ...)` takes the `Gate`'s arguments (checked by the `Gate` itself,
    /// so the two never disagree) except `clock`: every process reads the native clock.
    #[new]
    #[pyo3(signature = (name=None, *args, **kwargs))]
    fn new(
        py: Python<'_>,
        name: Option<&Bound<'_, PyAny>>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let name = match name {
            Some(n) => crate::placed::name_arg(n)?,
            None => None,
        };
        if let Some(k) = kwargs {
            if k.contains("clock")? {
                return Err(PyTypeError::new_err(
                    "SharedGate takes no clock=: every process reads the native clock",
                ));
            }
        }
        // The arguments checked as a Gate's (a local gate, dropped at once).
        let local = py.get_type::<Gate>().call(args, kwargs)?;
        let local = local.cast::<Gate>()?.get();
        let (cfg, capacity) = local.settings;
        let overload = local.overload.clone_ref(py);
        let core =
            py.detach(|| AnyShared::open(name.as_deref(), cfg, capacity)).map_err(|e| match e {
                ShmError::Config(c) => config_err(py, "SharedGate", c),
                e => shm_err(py, e),
            })?;
        Ok(Self {
            inner: Arc::new(Inner { core, pump: Mutex::new(Pump::default()), cv: Condvar::new() }),
            levels: cfg.limiter.levels,
            overload,
        })
    }

    /// Removes the name (attached processes keep their segment); whether it existed.
    /// A path is a `ValueError` (names only: remove a segment at a path with `os.unlink`).
    #[staticmethod]
    fn unlink(py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Some(name) = crate::placed::name_arg(name)? else {
            return Err(PyTypeError::new_err("name must be a str, got None"));
        };
        crate::placed::unlink_name(py, "SharedGate", &name, CoreShared::<64>::unlink)
    }

    /// `with gate.acquire(priority="normal", timeout=0.2) as permit:` — admits on entry,
    /// waiting (GIL released, Ctrl-C interrupts) while queued, for a release in any
    /// process; raises a `Rejected` subclass when refused. Releases on exit. `timeout` as
    /// `Gate.acquire` (a deadline for the wait and the expected service; `0`: never wait).
    #[pyo3(signature = (priority=None, timeout=None, *, now_ns=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        Self::pending(slf, priority, timeout, now_ns)
    }

    /// `async with gate.acquire_async(priority="normal", timeout=0.2) as permit:` — as
    /// `acquire`, waiting on the running event loop while queued (woken by this process's
    /// pump thread). Cancelling the task withdraws the ticket (a permit granted meanwhile
    /// is released as ignored, not leaked).
    #[pyo3(signature = (priority=None, timeout=None, *, now_ns=None))]
    fn acquire_async(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        Self::pending(slf, priority, timeout, now_ns)
    }

    /// Admits now or raises (never waits); returns a held permit.
    #[pyo3(signature = (priority=None, *, now_ns=None))]
    fn try_acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let py = slf.py();
        let g = slf.get();
        let level = priority_arg(py, priority, g.levels)?;
        let injected = now_ns.is_some_and(|v| !v.is_none());
        let now = now_from(py, None, now_ns)?;
        let p = match g.arrive(py, now, level, None)? {
            SharedArrival::Admitted(p) => p,
            SharedArrival::Rejected(r) => return Err(rejected_err(py, r)),
            SharedArrival::Queued(t) => g.no_wait(py, &t)?,
        };
        let owner = Owner::SharedGate(slf.clone().unbind());
        Ok(Permit::admitted(owner, level, Slot::SharedGate(p), injected))
    }

    /// Releases `permit` (which must come from this gate) with `outcome`.
    #[pyo3(signature = (permit, outcome=None, *, now_ns=None))]
    fn release(
        slf: &Bound<'_, Self>,
        permit: &Bound<'_, PyAny>,
        outcome: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        crate::permit::release_to(
            slf.py(),
            Owner::SharedGate(slf.clone().unbind()),
            permit,
            outcome,
            now_ns,
        )
    }

    /// Releases the permits and withdraws the queued tickets of dead processes (exactly
    /// once each), then hands the freed slots to waiters; returns the permits released.
    fn reclaim(&self, py: Python<'_>) -> u64 {
        py.detach(|| on!(self.core(), g => g.reclaim()))
    }

    /// Whether this object created the segment.
    #[getter]
    fn created(&self) -> bool {
        on!(self.core(), g => g.created())
    }

    /// Processes attached now.
    #[getter]
    fn attached_processes(&self) -> u32 {
        on!(self.core(), g => g.attached_processes())
    }

    /// Permits held by this process.
    #[getter]
    fn held_by_this_process(&self) -> u32 {
        on!(self.core(), g => g.held_by_this_process())
    }

    /// The on-call switch: refuse every arrival at `priority` or less important at once
    /// (`Shed`) and drop such waiters, in every process; `None` turns it off.
    #[pyo3(signature = (priority))]
    fn set_shed_level(&self, py: Python<'_>, priority: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let level = match priority.filter(|v| !v.is_none()) {
            Some(v) => Some(priority_arg(py, Some(v), self.levels)?),
            None => None,
        };
        on!(self.core(), g => g.gate().set_shed_level(level));
        let now = clock_ns();
        py.detach(|| on!(self.core(), g => g.poll(now))).map_err(|e| shm_err(py, e))?;
        Ok(())
    }

    /// The shed level in force (an int), or `None`.
    #[getter]
    fn shed_level(&self) -> Option<u8> {
        on!(self.core(), g => g.gate().shed_level()).map(|p| p.index() as u8)
    }

    /// `"healthy"`, or `"overloaded"` while shedding, full, or with a standing queue.
    #[getter]
    fn state(&self) -> &'static str {
        match on!(self.core(), g => g.gate().state()) {
            GateState::Healthy => "healthy",
            _ => "overloaded",
        }
    }

    /// Whether the gate is overloaded now.
    #[getter]
    fn overloaded(&self) -> bool {
        !matches!(on!(self.core(), g => g.gate().state()), GateState::Healthy)
    }

    /// Waiters of all processes, all levels or at `priority`.
    #[pyo3(signature = (priority=None))]
    fn waiting(&self, py: Python<'_>, priority: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
        Ok(match priority.filter(|v| !v.is_none()) {
            None => on!(self.core(), g => g.gate().waiting_total()),
            Some(p) => {
                let p = priority_arg(py, Some(p), self.levels)?;
                on!(self.core(), g => g.gate().waiting(p))
            }
        })
    }

    /// Requests admitted and not released, across all processes.
    #[getter]
    fn inflight(&self) -> u32 {
        on!(self.core(), g => g.gate().limiter().inflight())
    }

    /// The concurrency limit in force.
    #[getter]
    fn limit(&self) -> f64 {
        on!(self.core(), g => g.gate().limiter().limit())
    }

    /// Priority levels in use.
    #[getter]
    fn levels(&self) -> u8 {
        self.levels
    }

    /// The kill switch: pin the limit (`None`: back to the algorithm), for every process.
    fn set_static_limit(&self, py: Python<'_>, limit: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        on!(self.core(), g => set_static_limit_arg(py, g.gate().limiter(), limit))?;
        let now = clock_ns();
        py.detach(|| on!(self.core(), g => g.poll(now))).map_err(|e| shm_err(py, e))?;
        Ok(())
    }

    /// The brownout dimmer (see `Gate.brownout`), from the shared gate's state.
    #[pyo3(signature = (*, now_ns=None))]
    fn brownout(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let now = now_from(py, None, now_ns)?;
        Ok(on!(self.core(), g => g.gate().brownout(now)))
    }

    /// Seconds until the gate's timer should fire (`poll`), or `None` when nothing waits.
    #[pyo3(signature = (*, now_ns=None))]
    fn next_wakeup(
        &self,
        py: Python<'_>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<f64>> {
        let now = now_from(py, None, now_ns)?;
        Ok(on!(self.core(), g => g.gate().next_wakeup(now)).map(|t| secs(t.saturating_sub(now))))
    }

    /// Hands freed slots to waiters (of any process) and drops expired ones now (waiters
    /// do it on their own; safe to call any time). Returns `next_wakeup()`.
    #[pyo3(signature = (*, now_ns=None))]
    fn poll(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        let now = now_from(py, None, now_ns)?;
        py.detach(|| on!(self.core(), g => g.poll(now))).map_err(|e| shm_err(py, e))?;
        Ok(on!(self.core(), g => g.gate().next_wakeup(now)).map(|t| secs(t.saturating_sub(now))))
    }

    /// Expected service time in seconds (0 until the first success).
    #[getter]
    fn service_time(&self) -> f64 {
        secs(on!(self.core(), g => g.gate().service_ns()))
    }

    /// A snapshot of counters and gauges as a dict, as `Gate.metrics()` (shared by every
    /// process), plus `attached_processes`, `held_by_this_process` and `binding_waiters`
    /// (this process's async waiters).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = gate_metrics(py, &on!(self.core(), g => g.gate().metrics()), self.levels)?;
        d.set_item("attached_processes", self.attached_processes())?;
        d.set_item("held_by_this_process", self.held_by_this_process())?;
        let waiters = {
            let p = lock(&self.inner.pump);
            if p.pid == std::process::id() {
                p.waiters.len()
            } else {
                0
            }
        };
        d.set_item("binding_waiters", waiters)?;
        Ok(d)
    }

    /// Used by `surgeguard._aio`: completes an async wait (the permit, or the refusal).
    fn _finish(
        &self,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        ticket: &Bound<'_, SharedGateTicket>,
    ) -> PyResult<()> {
        let result = {
            let mut st = lock(&ticket.get().slot.state);
            st.finished = st.result.is_some();
            st.result.take()
        };
        let result = result.map(|o| match o {
            SharedOutcome::Granted(p) => Ok(Slot::SharedGate(p)),
            SharedOutcome::Expired(r) => Err(r),
        });
        crate::permit::finish_async(py, permit, result)
    }

    /// Used by `surgeguard._aio`: the waiting task was cancelled or timed out: withdraws
    /// the ticket. Returns True if it had been granted meanwhile and `keep` asked to keep
    /// the grant (the permit holds it); otherwise a grant is released as ignored.
    #[pyo3(signature = (permit, ticket, keep=false))]
    fn _abandon(
        &self,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        ticket: &Bound<'_, SharedGateTicket>,
        keep: bool,
    ) -> PyResult<bool> {
        let slot = &ticket.get().slot;
        let key = slot.ticket.ticket().to_bits();
        let outcome = py.detach(|| {
            // Under the pump's lock: the pump cannot take the outcome meanwhile.
            let mut p = lock(&self.inner.pump);
            if p.pid == std::process::id() {
                p.waiters.remove(&key);
            }
            let taken = {
                let mut st = lock(&slot.state);
                st.finished = true;
                st.result.take()
            };
            match taken {
                Some(o) => Some(o),
                None => on!(self.core(), g => g.cancel(&slot.ticket)).ok().flatten(),
            }
        });
        let granted = match outcome {
            Some(SharedOutcome::Granted(p)) => Some(p),
            _ => None,
        };
        crate::permit::abandon_async(py, permit, granted, keep, |p| {
            self.release_words(py, p.into_words(), clock_ns(), Outcome::Ignored)
        })
    }

    /// Used by `surgeguard._aio`: the refusal for an async wait that timed out.
    fn _expired(&self, py: Python<'_>) -> PyErr {
        rejected_err(py, Rejected::new(Reason::Expired, self.retry_hint()))
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedGate(limit={}, inflight={}, waiting={}, state={:?})",
            self.limit(),
            self.inflight(),
            on!(self.core(), g => g.gate().waiting_total()),
            self.state()
        )
    }
}

/// A queued ticket of a `SharedGate` as the asyncio helper sees it.
#[pyclass(frozen, module = "surgeguard._native", name = "_SharedTicket")]
pub struct SharedGateTicket {
    slot: Arc<AsyncSlot>,
    inner: Arc<Inner>,
}

#[pymethods]
impl SharedGateTicket {
    /// Registers the wake-up callable with this process's pump; returns True if the
    /// outcome is already known (the callable is then not stored).
    fn set_waker(&self, py: Python<'_>, waker: Py<PyAny>) -> PyResult<bool> {
        register_atexit(py)?;
        lock(&self.slot.state).waker = Some(waker);
        if self.inner.register(&self.slot) {
            lock(&self.slot.state).waker = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether the outcome is known.
    #[getter]
    fn done(&self) -> bool {
        lock(&self.slot.state).result.is_some()
    }
}

impl Drop for SharedGateTicket {
    /// A wait that never finished (its coroutine dropped unawaited): withdraw the ticket,
    /// and release a grant that came meanwhile, so the slot is not held until the process
    /// dies.
    fn drop(&mut self) {
        let slot = &self.slot;
        if lock(&slot.state).finished {
            return;
        }
        let outcome = {
            let mut p = lock(&self.inner.pump);
            if p.pid == std::process::id() {
                p.waiters.remove(&slot.ticket.ticket().to_bits());
            }
            let taken = lock(&slot.state).result.take();
            // A ticket of another process (a forked child's copy) is refused here.
            taken.or_else(|| on!(&self.inner.core, g => g.cancel(&slot.ticket)).ok().flatten())
        };
        if let Some(SharedOutcome::Granted(p)) = outcome {
            let now = clock_ns();
            let _ = on!(&self.inner.core, g => g.release(p, now, Outcome::Ignored));
        }
    }
}
