//! `Gate`: limiter + priority queue + shed switch, with the binding's waiters.
//!
//! The core is an event pump: `arrive` admits, queues or refuses; `poll`
//! reports `Granted`/`Expired` per ticket; the binding owns the waiters. Any thread may
//! poll (after a release, or when a waiter's timer fires), and the core puts the events
//! of a concurrent poll in the holder's buffer — so events are routed here by ticket to
//! whichever waiter owns it: a blocked thread (condvar, GIL released) or an asyncio future
//! (woken on its loop through `call_soon_threadsafe`, see `surgeguard/_aio.py`).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};
use surgeguard_core::codel::{CodelConfig, CodelMode};
use surgeguard_core::gate::{
    Aging, Arrival, Event, Gate as CoreGate, GateConfig, GateState, LifoTrigger,
};
use surgeguard_core::{ConfigError, Outcome, Priority, RawPermit, Reason, Rejected};

use crate::common::*;
use crate::limiter::{limiter_config, limiter_metrics};
use crate::permit::{Owner, Permit};

/// The queue capacities compiled in; a gate uses the smallest that holds `queue_capacity`.
macro_rules! any_gate {
    ($($variant:ident = $cap:literal),* $(,)?) => {
        /// A core gate of one of the compiled capacities.
        // Always boxed (one allocation per object), so variant sizes do not matter.
        #[allow(clippy::large_enum_variant)]
        pub enum AnyGate {
            $($variant(CoreGate<$cap>),)*
        }

        /// The largest queue capacity available.
        pub const MAX_QUEUE: usize = { let mut m = 0; $(if $cap > m { m = $cap; })* m };

        impl AnyGate {
            fn new(cfg: &GateConfig, capacity: usize) -> Result<Box<Self>, ConfigError> {
                $(if capacity <= $cap {
                    return Ok(Box::new(AnyGate::$variant(CoreGate::<$cap>::new(*cfg)?)));
                })*
                Err(ConfigError::out_of_range("gate.queue_capacity"))
            }
        }

        macro_rules! on {
            ($g:expr, $x:ident => $body:expr) => {
                match $g { $(AnyGate::$variant($x) => $body,)* }
            };
        }
    };
}

any_gate!(G64 = 64, G256 = 256, G1024 = 1024, G4096 = 4096);

/// How a queued waiter learns its fate.
pub struct WaitSlot {
    pub ticket: u64,
    /// Absolute deadline (ns) given to the core, if any.
    pub deadline: Option<u64>,
    /// The arrival's `now` and timeout.
    arrived: u64,
    timeout: Option<u64>,
    state: Mutex<SlotState>,
    cv: Condvar,
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<RawPermit, Rejected>>,
    /// The owner gave up (async cancellation) while the event was in flight: whoever
    /// delivers it returns a granted permit as ignored.
    abandoned: bool,
    /// An asyncio waiter's wake-up callable (called with the GIL).
    waker: Option<Py<PyAny>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waiters by ticket, and events that arrived before their waiter registered.
#[derive(Default)]
struct Routes {
    waiters: HashMap<u64, Arc<WaitSlot>>,
    orphans: HashMap<u64, Result<RawPermit, Rejected>>,
}

/// What `arrive` gave the permit.
pub enum Waiter {
    Admitted(RawPermit),
    Queued(Arc<WaitSlot>),
}

/// A queued ticket as the asyncio helper sees it.
#[pyclass(frozen, module = "surgeguard._native", name = "_Ticket")]
pub struct Ticket {
    slot: Arc<WaitSlot>,
}

#[pymethods]
impl Ticket {
    /// Registers the wake-up callable; returns True if the outcome is already known (the
    /// callable is then not stored: the caller proceeds at once).
    fn set_waker(&self, waker: Py<PyAny>) -> bool {
        let mut st = lock(&self.slot.state);
        if st.result.is_some() {
            return true;
        }
        st.waker = Some(waker);
        false
    }

    /// Whether the outcome is known.
    #[getter]
    fn done(&self) -> bool {
        lock(&self.slot.state).result.is_some()
    }

    /// The ticket number.
    #[getter]
    fn id(&self) -> u64 {
        self.slot.ticket
    }
}

/// Limiter + bounded priority queue + shed switch: admits, queues or
/// refuses each arrival, hands freed slots to waiters in priority order (CoDel, adaptive
/// LIFO, deadlines, eviction of less important waiters), and says whether it is
/// overloaded — which is not broken.
#[pyclass(frozen, weakref, module = "surgeguard._native")]
pub struct Gate {
    core: Box<AnyGate>,
    /// The checked config and queue capacity it was made with (`SharedGate` places the
    /// same in shared memory).
    pub(crate) settings: (GateConfig, usize),
    levels: u8,
    pub overload: Py<PyTuple>,
    routes: Mutex<Routes>,
    /// One callable per asyncio timer (`_aio`): re-arms it; returns False once its loop
    /// is gone (then it is dropped from the list).
    timer_hooks: Mutex<Vec<Py<PyAny>>>,
    /// `clock=`: read instead of the native clock.
    pub clock: Option<Py<PyAny>>,
}

/// How many events one poll takes at most.
const POLL_BATCH: usize = 16;
/// A sync waiter whose deadline passed without an event gives up after this much more.
const GRACE_NS: u64 = 2_000_000;
/// A blocked thread wakes at least this often to check for signals (Ctrl-C) and for a
/// re-check the core scheduled meanwhile.
const SLICE_NS: u64 = 20_000_000;
/// How many times one pump polls again while a re-check is due at once.
const PUMP_ROUNDS: u32 = 4;

static AIO_WAIT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

impl Gate {
    pub fn levels(&self) -> u8 {
        self.levels
    }

    /// The limiter's rule for a permit admitted at `started_at` whose caller went away.
    pub(crate) fn abandoned_outcome_at(&self, started_at: u64, now: u64) -> Outcome {
        on!(&*self.core, g => g.limiter().abandoned_outcome_at(started_at, now))
    }

    /// One arrival. `timeout_ns`: `None` waits until granted or dropped; `Some(0)` never
    /// waits (a queued arrival is withdrawn at once).
    pub fn arrive(
        &self,
        py: Python<'_>,
        now: u64,
        priority: Priority,
        timeout_ns: Option<u64>,
    ) -> PyResult<Waiter> {
        let deadline = match timeout_ns {
            None | Some(0) => None,
            Some(t) => Some(now.saturating_add(t)),
        };
        match on!(&*self.core, g => g.arrive(now, priority, deadline)) {
            Arrival::Admitted(raw) => Ok(Waiter::Admitted(raw)),
            Arrival::Rejected(r) => Err(rejected_err(py, r)),
            Arrival::Queued(ticket) => {
                let slot = Arc::new(WaitSlot {
                    ticket: ticket.to_bits(),
                    deadline,
                    arrived: now,
                    timeout: timeout_ns,
                    state: Mutex::new(SlotState::default()),
                    cv: Condvar::new(),
                });
                {
                    let mut routes = lock(&self.routes);
                    match routes.orphans.remove(&slot.ticket) {
                        Some(r) => lock(&slot.state).result = Some(r),
                        None => {
                            routes.waiters.insert(slot.ticket, slot.clone());
                        }
                    }
                }
                if timeout_ns == Some(0) {
                    // Never wait: withdraw it unless an event already left the core.
                    if self.try_cancel(&slot) {
                        let hint = self.retry_hint();
                        return Err(rejected_err(py, Rejected::new(Reason::LimitReached, hint)));
                    }
                }
                // A slot may have freed while it was being queued (the core's contract).
                self.pump(Some(py), now);
                Ok(Waiter::Queued(slot))
            }
        }
    }

    fn retry_hint(&self) -> u64 {
        let s = on!(&*self.core, g => g.service_ns());
        if s == 0 {
            1_000_000_000
        } else {
            s.max(1_000_000)
        }
    }

    /// Withdraws a queued ticket; true if it was withdrawn (no event will come).
    fn try_cancel(&self, slot: &WaitSlot) -> bool {
        let mut routes = lock(&self.routes);
        let ticket = surgeguard_core::queue::Ticket::from_bits(slot.ticket);
        if on!(&*self.core, g => g.cancel(ticket)).is_ok() {
            routes.waiters.remove(&slot.ticket);
            true
        } else {
            false
        }
    }

    /// Gives up on a ticket (async cancellation). Returns its outcome if it already came;
    /// an outcome still in flight is released by whoever delivers it.
    fn abandon(&self, slot: &WaitSlot) -> Option<Result<RawPermit, Rejected>> {
        let mut routes = lock(&self.routes);
        let ticket = surgeguard_core::queue::Ticket::from_bits(slot.ticket);
        if on!(&*self.core, g => g.cancel(ticket)).is_ok() {
            routes.waiters.remove(&slot.ticket);
            return None;
        }
        if let Some(r) = routes.orphans.remove(&slot.ticket) {
            return Some(r);
        }
        let mut st = lock(&slot.state);
        if routes.waiters.contains_key(&slot.ticket) {
            st.abandoned = true;
            st.waker = None;
            None
        } else {
            st.result.take()
        }
    }

    /// Releases a permit and hands freed slots to waiters.
    pub fn release_raw(&self, py: Option<Python<'_>>, raw: RawPermit, now: u64, outcome: Outcome) {
        // Cannot fail: the permit came from this gate.
        let _ = on!(&*self.core, g => g.release(raw, now, outcome));
        if on!(&*self.core, g => g.waiting_total()) > 0 {
            self.pump(py, now);
        }
    }

    /// Polls the core and routes every event to its waiter; polls again while the core
    /// says a re-check is due now (a fractional limit's idle slot, a lapsed refusal), and
    /// then tells the asyncio timers (`_aio`) when the next one is due, so no waiter is
    /// left queued with nothing scheduled to look at it again.
    fn pump(&self, py: Option<Python<'_>>, now: u64) {
        let mut rounds = 0;
        loop {
            self.poll_once(py, now);
            rounds += 1;
            if on!(&*self.core, g => g.waiting_total()) == 0 {
                return;
            }
            match on!(&*self.core, g => g.next_wakeup(now)) {
                Some(w) if w <= now && rounds < PUMP_ROUNDS => continue,
                Some(_) => break,
                None => return,
            }
        }
        self.kick_timers(py);
    }

    /// Asks every asyncio timer of this gate to re-arm from `next_wakeup()`.
    fn kick_timers(&self, py: Option<Python<'_>>) {
        let call = |py: Python<'_>| {
            let hooks: Vec<Py<PyAny>> =
                lock(&self.timer_hooks).iter().map(|h| h.clone_ref(py)).collect();
            if hooks.is_empty() {
                return;
            }
            let mut dead = Vec::new();
            for (i, h) in hooks.iter().enumerate() {
                match h.call0(py) {
                    Ok(v) if v.is_truthy(py).unwrap_or(true) => {}
                    Ok(_) => dead.push(i),
                    Err(e) => e.write_unraisable(py, None),
                }
            }
            if !dead.is_empty() {
                lock(&self.timer_hooks).retain(|h| !dead.iter().any(|&i| hooks[i].is(h)));
            }
        };
        if lock(&self.timer_hooks).is_empty() {
            return;
        }
        match py {
            Some(py) => call(py),
            None => Python::attach(call),
        }
    }

    /// One round of polling: routes every event to its waiter.
    fn poll_once(&self, py: Option<Python<'_>>, now: u64) {
        let mut buf: [Option<Event>; POLL_BATCH] = Default::default();
        loop {
            let n = on!(&*self.core, g => g.poll(now, &mut buf));
            if n == 0 {
                return;
            }
            let mut wakers: Vec<Py<PyAny>> = Vec::new();
            let mut to_release: Vec<RawPermit> = Vec::new();
            {
                let mut routes = lock(&self.routes);
                for ev in buf[..n].iter_mut() {
                    let (ticket, result) = match ev.take() {
                        Some(Event::Granted(t, raw)) => (t.to_bits(), Ok(raw)),
                        Some(Event::Expired(t, r)) => (t.to_bits(), Err(r)),
                        None => continue,
                    };
                    match routes.waiters.remove(&ticket) {
                        Some(slot) => {
                            let mut st = lock(&slot.state);
                            if st.abandoned {
                                if let Ok(raw) = result {
                                    to_release.push(raw);
                                }
                            } else {
                                st.result = Some(result);
                                slot.cv.notify_all();
                                if let Some(w) = st.waker.take() {
                                    wakers.push(w);
                                }
                            }
                        }
                        None => {
                            routes.orphans.insert(ticket, result);
                        }
                    }
                }
            }
            for raw in to_release {
                let _ = on!(&*self.core, g => g.release(raw, now, Outcome::Ignored));
            }
            if !wakers.is_empty() {
                let call = |py: Python<'_>| {
                    for w in &wakers {
                        if let Err(e) = w.call0(py) {
                            e.write_unraisable(py, None);
                        }
                    }
                };
                match py {
                    Some(py) => call(py),
                    None => Python::attach(call),
                }
            }
            if n < POLL_BATCH {
                return;
            }
        }
    }

    /// Blocks (GIL released) until the ticket is granted or dropped.
    ///
    /// Waits in slices of at most 20 ms and checks for signals between them (as
    /// `threading.Lock.acquire` does): a `KeyboardInterrupt` (or any exception a signal
    /// handler raises) withdraws the ticket — a slot granted meanwhile is returned as
    /// ignored — and propagates, leaving nothing behind.
    pub fn wait_sync(
        &self,
        py: Python<'_>,
        slot: &Arc<WaitSlot>,
        injected: bool,
    ) -> PyResult<RawPermit> {
        let start = clock_ns();
        let real_deadline =
            if injected { slot.timeout.map(|t| start.saturating_add(t)) } else { slot.deadline };
        let mut cancelled = false;
        loop {
            let step = py.detach(|| self.block(slot, injected, real_deadline, &mut cancelled));
            match step {
                Some(result) => return result.map_err(|r| rejected_err(py, r)),
                None => {
                    if let Err(e) = py.check_signals() {
                        self.give_up(py, slot, injected);
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Withdraws a sync waiter's ticket after an interrupt; a grant that raced in goes
    /// back as ignored, and a refusal is dropped.
    fn give_up(&self, py: Python<'_>, slot: &WaitSlot, injected: bool) {
        if let Some(Ok(raw)) = self.abandon(slot) {
            let now = if injected { slot.arrived } else { clock_ns() };
            self.release_raw(Some(py), raw, now, Outcome::Ignored);
        }
    }

    /// Waits one slice: `Some(outcome)` when known, `None` when the slice ran out.
    fn block(
        &self,
        slot: &WaitSlot,
        injected: bool,
        real_deadline: Option<u64>,
        cancelled: &mut bool,
    ) -> Option<Result<RawPermit, Rejected>> {
        // With injected time the deadline is in the caller's clock: wait the timeout in
        // real time, and poll at the arrival's time (the core clamps it to the latest).
        let slice_end = clock_ns().saturating_add(SLICE_NS);
        loop {
            if let Some(r) = lock(&slot.state).result.take() {
                return Some(r);
            }
            let now = clock_ns();
            if let Some(d) = real_deadline {
                if !*cancelled && now >= d.saturating_add(GRACE_NS) {
                    if self.try_cancel(slot) {
                        return Some(Err(Rejected::new(Reason::Expired, self.retry_hint())));
                    }
                    // An event is on its way: wait for it.
                    *cancelled = true;
                }
            }
            if now >= slice_end {
                return None;
            }
            let wake = if injected { None } else { on!(&*self.core, g => g.next_wakeup(now)) };
            if wake.is_some_and(|w| w <= now) {
                // A re-check is due: act on it now rather than after a sleep.
                self.pump(None, now);
                if lock(&slot.state).result.is_some() {
                    continue;
                }
            }
            let until = match (real_deadline.map(|d| d.saturating_add(GRACE_NS)), wake) {
                (Some(d), Some(w)) => d.min(w),
                (d, w) => d.or(w).unwrap_or(u64::MAX),
            }
            .min(slice_end);
            let wait = if *cancelled {
                Duration::from_millis(1)
            } else {
                Duration::from_nanos(until.saturating_sub(now).max(1_000))
            };
            let st = lock(&slot.state);
            if st.result.is_some() {
                continue;
            }
            let (st, timeout) = slot.cv.wait_timeout(st, wait).unwrap_or_else(|p| p.into_inner());
            let ready = st.result.is_some();
            drop(st);
            if !ready && timeout.timed_out() {
                self.pump(None, if injected { slot.arrived } else { clock_ns() });
            }
        }
    }

    /// Starts the asyncio wait: returns the coroutine `async with` awaits.
    pub fn wait_async(
        gate: &Py<Gate>,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        slot: Arc<WaitSlot>,
    ) -> PyResult<Py<PyAny>> {
        let wait = AIO_WAIT.get_or_try_init(py, || {
            py.import("surgeguard._aio")?.getattr("wait_ticket").map(Bound::unbind)
        })?;
        let timeout = slot.timeout.map(secs);
        let ticket = Py::new(py, Ticket { slot })?;
        wait.call1(py, (gate.clone_ref(py), permit.clone(), ticket, timeout))
    }
}

#[pymethods]
impl Gate {
    #[new]
    #[pyo3(signature = (algorithm=None, *, limit=None, levels=None, weights=None,
        min_window=None, max_window=None, window_rtt_multiple=None, min_samples=None,
        active=None, queue_capacity=None, codel=None, lifo=None, max_wait=None, aging=None,
        initial_service=None, service_alpha=None, fallback_retry_after=None,
        overload_exceptions=None, clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        levels: Option<&Bound<'_, PyAny>>,
        weights: Option<&Bound<'_, PyAny>>,
        min_window: Option<&Bound<'_, PyAny>>,
        max_window: Option<&Bound<'_, PyAny>>,
        window_rtt_multiple: Option<&Bound<'_, PyAny>>,
        min_samples: Option<&Bound<'_, PyAny>>,
        active: Option<&Bound<'_, PyAny>>,
        queue_capacity: Option<&Bound<'_, PyAny>>,
        codel: Option<&Bound<'_, PyAny>>,
        lifo: Option<&Bound<'_, PyAny>>,
        max_wait: Option<&Bound<'_, PyAny>>,
        aging: Option<&Bound<'_, PyAny>>,
        initial_service: Option<&Bound<'_, PyAny>>,
        service_alpha: Option<&Bound<'_, PyAny>>,
        fallback_retry_after: Option<&Bound<'_, PyAny>>,
        overload_exceptions: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let clock = clock_arg(clock)?;
        let (cfg, capacity) = gate_config(
            py,
            algorithm,
            limit,
            levels,
            weights,
            min_window,
            max_window,
            window_rtt_multiple,
            min_samples,
            active,
            queue_capacity,
            codel,
            lifo,
            max_wait,
            aging,
            initial_service,
            service_alpha,
            fallback_retry_after,
        )?;
        let core = AnyGate::new(&cfg, capacity).map_err(|e| config_err(py, "Gate", e))?;
        Ok(Self {
            core,
            settings: (cfg, capacity),
            levels: cfg.limiter.levels,
            overload: overload_arg(py, overload_exceptions)?,
            routes: Mutex::new(Routes::default()),
            timer_hooks: Mutex::new(Vec::new()),
            clock,
        })
    }

    /// `Gate.shared("name", limit=..., ...)` (Linux): a `SharedGate`, one gate (limit,
    /// queue, waiters) across worker processes, created or attached by name, or anonymous
    /// (`None`) before `os.fork()`. Takes the Gate's keyword arguments except `clock`.
    #[cfg(target_os = "linux")]
    #[staticmethod]
    #[pyo3(signature = (name, *args, **kwargs))]
    fn shared<'py>(
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::placed::name_arg(name)?;
        let mut all = vec![name.clone()];
        all.extend(args.iter());
        py.get_type::<crate::shared_gate::SharedGate>().call(PyTuple::new(py, all)?, kwargs)
    }

    /// `with gate.acquire(priority="normal", timeout=0.2) as permit:` — admits on entry,
    /// waiting (GIL released, Ctrl-C interrupts) while queued; raises a `Rejected`
    /// subclass when refused. Releases on exit. `timeout` is a deadline covering the wait
    /// and the expected service time (a request that cannot finish in time is refused at
    /// once); `None` (default): no deadline, wait until granted or dropped by CoDel,
    /// eviction or shedding; `0`: never wait.
    #[pyo3(signature = (priority=None, timeout=None, *, now_ns=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        Self::make_permit(slf, priority, timeout, now_ns, false)
    }

    /// `async with gate.acquire_async(priority="normal", timeout=0.2) as permit:` — as
    /// `acquire`, waiting on the running event loop while queued. Cancelling the task
    /// withdraws the ticket (a permit granted meanwhile is returned, not leaked).
    #[pyo3(signature = (priority=None, timeout=None, *, now_ns=None))]
    fn acquire_async(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        Self::make_permit(slf, priority, timeout, now_ns, true)
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
        let p = priority_arg(py, priority, g.levels)?;
        let injected = now_ns.is_some_and(|v| !v.is_none());
        let now = now_from(py, g.clock.as_ref(), now_ns)?;
        let raw = match g.arrive(py, now, p, Some(0))? {
            Waiter::Admitted(raw) => raw,
            Waiter::Queued(slot) => g.wait_sync(py, &slot, injected || g.clock.is_some())?,
        };
        Ok(Permit::admitted(Owner::Gate(slf.clone().unbind()), p, raw, injected))
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
            Owner::Gate(slf.clone().unbind()),
            permit,
            outcome,
            now_ns,
        )
    }

    /// The on-call switch: refuse every arrival at `priority` or less important
    /// at once (`Shed`) and drop such waiters; `None` turns it off.
    #[pyo3(signature = (priority))]
    fn set_shed_level(&self, py: Python<'_>, priority: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let level = match priority.filter(|v| !v.is_none()) {
            Some(v) => Some(priority_arg(py, Some(v), self.levels)?),
            None => None,
        };
        on!(&*self.core, g => g.set_shed_level(level));
        self.pump(Some(py), 0);
        Ok(())
    }

    /// The shed level in force (an int), or `None`.
    #[getter]
    fn shed_level(&self) -> Option<u8> {
        on!(&*self.core, g => g.shed_level()).map(|p| p.index() as u8)
    }

    /// `"healthy"`, or `"overloaded"` while shedding, full, or with a standing queue.
    /// Overloaded is not broken: keep the instance, send it less.
    #[getter]
    fn state(&self) -> &'static str {
        match on!(&*self.core, g => g.state()) {
            GateState::Healthy => "healthy",
            _ => "overloaded",
        }
    }

    /// Whether the gate is overloaded now.
    #[getter]
    fn overloaded(&self) -> bool {
        !matches!(on!(&*self.core, g => g.state()), GateState::Healthy)
    }

    /// Waiters, all levels or at `priority`.
    #[pyo3(signature = (priority=None))]
    fn waiting(&self, py: Python<'_>, priority: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
        Ok(match priority.filter(|v| !v.is_none()) {
            None => on!(&*self.core, g => g.waiting_total()),
            Some(p) => {
                let p = priority_arg(py, Some(p), self.levels)?;
                on!(&*self.core, g => g.waiting(p))
            }
        })
    }

    /// Requests admitted and not released.
    #[getter]
    fn inflight(&self) -> u32 {
        on!(&*self.core, g => g.limiter().inflight())
    }

    /// The concurrency limit in force.
    #[getter]
    fn limit(&self) -> f64 {
        on!(&*self.core, g => g.limiter().limit())
    }

    /// Priority levels in use.
    #[getter(levels)]
    fn levels_py(&self) -> u8 {
        self.levels
    }

    /// The kill switch: pin the limit (`None`: back to the algorithm).
    fn set_static_limit(&self, py: Python<'_>, limit: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        on!(&*self.core, g => set_static_limit_arg(py, g.limiter(), limit))?;
        self.pump(Some(py), 0);
        Ok(())
    }

    /// The brownout dimmer, a float in [0, 1]: serve optional content (recommendations,
    /// previews, ...) with probability `1 - d`; 0 serves everything, 1 none. It rises
    /// before the gate refuses anything (queue occupancy, CoDel's queueing delay), follows
    /// the refusals of the last second, and falls back by at most 1/2 per second.
    /// Degradation order: optional features (this), then background, then normal work
    /// (the gate's own shedding). Reads the gate's clock (or `now_ns`); changes none of
    /// its decisions.
    #[pyo3(signature = (*, now_ns=None))]
    fn brownout(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let now = now_from(py, self.clock.as_ref(), now_ns)?;
        Ok(on!(&*self.core, g => g.brownout(now)))
    }

    /// Seconds until the gate's timer should fire (`poll`), or `None` when nothing waits.
    #[pyo3(signature = (*, now_ns=None))]
    fn next_wakeup(
        &self,
        py: Python<'_>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<f64>> {
        let now = now_from(py, self.clock.as_ref(), now_ns)?;
        Ok(on!(&*self.core, g => g.next_wakeup(now)).map(|t| secs(t.saturating_sub(now))))
    }

    /// Hands freed slots to waiters and drops expired ones now (the timer's job; safe to
    /// call any time). Returns `next_wakeup()`.
    #[pyo3(signature = (*, now_ns=None))]
    fn poll(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        let now = now_from(py, self.clock.as_ref(), now_ns)?;
        self.pump(Some(py), now);
        Ok(on!(&*self.core, g => g.next_wakeup(now)).map(|t| secs(t.saturating_sub(now))))
    }

    /// Expected service time in seconds (0 until the first success).
    #[getter]
    fn service_time(&self) -> f64 {
        secs(on!(&*self.core, g => g.service_ns()))
    }

    /// A snapshot of counters and gauges as a dict (`limiter` holds the limiter's).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = gate_metrics(py, &on!(&*self.core, g => g.metrics()), self.levels)?;
        let routes = lock(&self.routes);
        d.set_item("binding_waiters", routes.waiters.len())?;
        d.set_item("binding_orphans", routes.orphans.len())?;
        Ok(d)
    }

    /// Used by `surgeguard._aio`: completes an async wait (returns the permit or raises).
    fn _finish(
        &self,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        ticket: &Bound<'_, Ticket>,
    ) -> PyResult<()> {
        let result = lock(&ticket.get().slot.state).result.take();
        crate::permit::finish_async(py, permit, result)
    }

    /// Used by `surgeguard._aio`: the waiting task was cancelled or timed out. Returns
    /// True if a grant arrived meanwhile and `keep` asked to keep it (the permit holds
    /// it); otherwise any grant is returned as ignored.
    #[pyo3(signature = (permit, ticket, keep=false))]
    fn _abandon(
        &self,
        py: Python<'_>,
        permit: &Bound<'_, Permit>,
        ticket: &Bound<'_, Ticket>,
        keep: bool,
    ) -> PyResult<bool> {
        let granted = self.abandon(&ticket.get().slot).and_then(Result::ok);
        crate::permit::abandon_async(py, permit, granted, keep, |raw| {
            self.release_raw(Some(py), raw, 0, Outcome::Ignored);
            Ok(())
        })
    }

    /// Used by `surgeguard._aio`: registers an asyncio timer's re-arm callable, called
    /// after every pump that leaves waiters with a re-check scheduled.
    fn _add_timer_hook(&self, hook: Py<PyAny>) {
        lock(&self.timer_hooks).push(hook);
    }

    /// Used by `surgeguard._aio`: the refusal for an async wait that timed out.
    fn _expired(&self, py: Python<'_>) -> PyErr {
        rejected_err(py, Rejected::new(Reason::Expired, self.retry_hint()))
    }

    fn __repr__(&self) -> String {
        format!(
            "Gate(limit={}, inflight={}, waiting={}, state={:?})",
            self.limit(),
            self.inflight(),
            on!(&*self.core, g => g.waiting_total()),
            self.state()
        )
    }
}

impl Gate {
    fn make_permit(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
        is_async: bool,
    ) -> PyResult<Permit> {
        let (p, timeout_ns, now) =
            acquire_args(slf.py(), slf.get().levels, priority, timeout, now_ns)?;
        Ok(Permit::pending(Owner::Gate(slf.clone().unbind()), p, timeout_ns, now, is_async))
    }
}

/// A gate's metrics snapshot as the dict `Gate.metrics()` returns.
pub fn gate_metrics<'py>(
    py: Python<'py>,
    m: &surgeguard_core::gate::GateMetrics,
    levels: u8,
) -> PyResult<Bound<'py, PyDict>> {
    let n = levels as usize;
    let d = PyDict::new(py);
    d.set_item(
        "state",
        match m.state {
            GateState::Healthy => "healthy",
            _ => "overloaded",
        },
    )?;
    d.set_item("waiting", m.waiting)?;
    d.set_item("waiting_by_level", m.waiting_by_level[..n].to_vec())?;
    d.set_item("capacity", m.capacity)?;
    d.set_item("oldest_age", secs(m.oldest_age_ns))?;
    d.set_item("queued", m.queued)?;
    d.set_item("granted", m.granted)?;
    d.set_item("expired", m.expired)?;
    d.set_item("sloughed", m.sloughed)?;
    d.set_item("evicted", m.evicted)?;
    d.set_item("cancelled", m.cancelled)?;
    d.set_item("shed", m.shed)?;
    d.set_item("queue_full", m.queue_full)?;
    d.set_item("deadline_unmeetable", m.deadline_unmeetable)?;
    d.set_item("aged", m.aged)?;
    d.set_item("lifo_switches", m.lifo_switches)?;
    d.set_item("shed_level", m.shed_level.map(|p| p.index()))?;
    d.set_item("service_time", secs(m.service_ns))?;
    d.set_item("codel_overloaded", m.codel[..n].iter().map(|c| c.overloaded).collect::<Vec<_>>())?;
    d.set_item("codel_drops", m.codel[..n].iter().map(|c| c.drops).collect::<Vec<_>>())?;
    d.set_item("limiter", limiter_metrics(py, &m.limiter)?)?;
    Ok(d)
}

/// The Gate's config from its keyword arguments, and the queue capacity asked for (for
/// `Gate(...)` and `Gate.shared(...)`).
#[allow(clippy::too_many_arguments)]
pub fn gate_config(
    py: Python<'_>,
    algorithm: Option<&Bound<'_, PyAny>>,
    limit: Option<&Bound<'_, PyAny>>,
    levels: Option<&Bound<'_, PyAny>>,
    weights: Option<&Bound<'_, PyAny>>,
    min_window: Option<&Bound<'_, PyAny>>,
    max_window: Option<&Bound<'_, PyAny>>,
    window_rtt_multiple: Option<&Bound<'_, PyAny>>,
    min_samples: Option<&Bound<'_, PyAny>>,
    active: Option<&Bound<'_, PyAny>>,
    queue_capacity: Option<&Bound<'_, PyAny>>,
    codel: Option<&Bound<'_, PyAny>>,
    lifo: Option<&Bound<'_, PyAny>>,
    max_wait: Option<&Bound<'_, PyAny>>,
    aging: Option<&Bound<'_, PyAny>>,
    initial_service: Option<&Bound<'_, PyAny>>,
    service_alpha: Option<&Bound<'_, PyAny>>,
    fallback_retry_after: Option<&Bound<'_, PyAny>>,
) -> PyResult<(GateConfig, usize)> {
    let limiter = limiter_config(
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
    let mut cfg = GateConfig { limiter, ..GateConfig::default() };
    let capacity = match queue_capacity.filter(|v| !v.is_none()) {
        Some(v) => uint_arg("queue_capacity", v, MAX_QUEUE as u64)? as usize,
        None => 1024,
    };
    if capacity == 0 {
        return Err(PyValueError::new_err("queue_capacity must be at least 1"));
    }
    cfg.queue_capacity = Some(capacity);
    cfg.codel = codel_arg(codel)?;
    if let Some(v) = lifo.filter(|v| !v.is_none()) {
        cfg.lifo = lifo_arg(v)?;
    }
    cfg.max_wait_ns = opt_secs_arg("max_wait", max_wait, 3600.0)?;
    if let Some(v) = aging.filter(|v| !v.is_none()) {
        cfg.aging = aging_arg(py, v, cfg.limiter.levels)?;
    }
    if let Some(v) = opt_secs_arg("initial_service", initial_service, 3600.0)? {
        cfg.initial_service_ns = v;
    }
    if let Some(v) = service_alpha.filter(|v| !v.is_none()) {
        cfg.service_alpha = ranged_arg("service_alpha", v, f64::MIN_POSITIVE, 1.0)?;
    }
    if let Some(v) = opt_secs_arg("fallback_retry_after", fallback_retry_after, 3600.0)? {
        cfg.fallback_retry_after_ns = v;
    }
    Ok((cfg, capacity))
}

/// `codel=`: `True`/`None` (folly defaults), `False` (off), or a dict
/// `{"target": s, "interval": s, "mode": "folly" | "rfc8289"}`.
fn codel_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<CodelConfig>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Some(CodelConfig::default()));
    };
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(b.is_true().then(CodelConfig::default));
    }
    let d = v.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(
            "codel must be True, False or a dict {'target': s, 'interval': s, 'mode': ...}",
        )
    })?;
    let mut c = CodelConfig::default();
    for (k, val) in d.iter() {
        let key = k.cast::<PyString>()?.to_cow()?.into_owned();
        match key.as_str() {
            "target" => c.target_ns = secs_arg("codel target", &val, 3600.0)?,
            "interval" => c.interval_ns = secs_arg("codel interval", &val, 3600.0)?,
            "mode" => {
                c.mode = match &*val.cast::<PyString>()?.to_cow()? {
                    "folly" => CodelMode::Folly,
                    "rfc8289" => CodelMode::Rfc8289,
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "codel mode must be 'folly' or 'rfc8289', got {other:?}"
                        )))
                    }
                }
            }
            other => {
                return Err(PyTypeError::new_err(format!(
                    "unknown codel setting {other:?} (target, interval, mode)"
                )))
            }
        }
    }
    Ok(Some(c))
}

/// `lifo=`: `"codel"` (default), `"never"`, or an occupancy fraction in (0, 1].
fn lifo_arg(v: &Bound<'_, PyAny>) -> PyResult<LifoTrigger> {
    if let Ok(s) = v.cast::<PyString>() {
        return match &*s.to_cow()? {
            "codel" => Ok(LifoTrigger::CodelOverloaded),
            "never" => Ok(LifoTrigger::Never),
            other => Err(PyValueError::new_err(format!(
                "lifo must be 'codel', 'never' or an occupancy fraction, got {other:?}"
            ))),
        };
    }
    Ok(LifoTrigger::Occupancy(ranged_arg("lifo", v, f64::MIN_POSITIVE, 1.0)?))
}

/// `aging=`: `True` (normal → background after 0.5 s in the queue) or
/// `(from_priority, to_priority, after_seconds)`.
fn aging_arg(py: Python<'_>, v: &Bound<'_, PyAny>, levels: u8) -> PyResult<Option<Aging>> {
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(b.is_true().then_some(Aging::NORMAL_TO_BACKGROUND_AFTER_500_MS));
    }
    let t = v.cast::<PyTuple>().map_err(|_| {
        PyTypeError::new_err("aging must be True or a tuple (from_priority, to_priority, seconds)")
    })?;
    if t.len() != 3 {
        return Err(PyValueError::new_err("aging must be (from_priority, to_priority, seconds)"));
    }
    Ok(Some(Aging {
        from: priority_arg(py, Some(&t.get_item(0)?), levels)?,
        to: priority_arg(py, Some(&t.get_item(1)?), levels)?,
        after_ns: secs_arg("aging seconds", &t.get_item(2)?, 3600.0)?,
    }))
}
