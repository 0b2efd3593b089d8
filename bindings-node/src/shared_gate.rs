//! `Gate.shared(name)`: the core's gate (limiter, priority queue, CoDel, shed switch) in
//! shared memory, one limit and one queue across `cluster` workers and worker threads,
//! through the `surgeguard` crate's `shm::SharedGate`.
//!
//! A release in one process grants a waiter of another: the grant is written into the
//! queuing process's mailbox in the segment and its futex word is bumped. Each JS object
//! that has waiters runs one native *pump thread* blocked on that word
//! (`SharedGate::wait_mailbox`); when it moves, the thread calls a threadsafe function
//! (unref'd: it never keeps the event loop alive by itself) and the facade takes the
//! outcomes on the JS thread (`collect`). The pump thread also runs the gate's timers
//! (waiters' deadlines and maximum wait: a `poll` at the gate's `next_wakeup`) and sweeps
//! dead processes every 100 ms, so a killed worker's permits and queued tickets come back
//! and the other workers' waiters are granted. It exits within 100 ms of `stopPump` (the
//! facade stops it when nothing waits).
//!
//! Errors as the other shared objects (`shared.rs`): a bad name or config is a
//! `RangeError`, a segment of another config `SG_SHM_REFUSED`, a failed system call or a
//! full process table `SG_SHM_UNAVAILABLE`.
// Elsewhere than Linux every method refuses: most of the machinery is unused there.
#![cfg_attr(not(target_os = "linux"), allow(unused_imports, unused_variables, dead_code))]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use surgeguard_core::{Outcome, Priority, Reason, Rejected};

use crate::clock::resolve_now;
use crate::convert::{level_of, outcome_of};
use crate::gate::{
    deadline_of, gate_config, gate_metrics, handle_level_timeout_now, push_expired, push_granted,
    state_name, wakeup_ms, GateMetricsJs, GateOptions, Timeout, QUEUED_BASE,
};
use crate::handle::{new_handle, tags, Tagged};
use crate::limiter::set_static;
use crate::raw::{handle_id_outcome_now, refuse, Callback, SHM_TABLE_FULL};
use crate::slab::Slab;

#[cfg(target_os = "linux")]
use surgeguard::shm::{
    SharedArrival, SharedGate, SharedGatePermit, SharedOutcome, SharedTicket, ShmError,
};

/// Queue slots of a shared gate: the C ABI's size, so Node and C processes can open the
/// same segment (`queueCapacity` is at most this).
pub const SHARED_CAP: usize = 256;
/// How often the pump thread sweeps dead processes (and at most how long it sleeps).
const SWEEP_NS: u64 = 100_000_000;
/// The shortest timer wait of the pump thread.
const MIN_WAIT_NS: u64 = 1_000_000;

type Pump = ThreadsafeFunction<(), (), (), Status, false, true, 0>;

/// A shared gate, its permits and this object's queued tickets (what a handle points at).
pub struct SharedGateInner {
    #[cfg(target_os = "linux")]
    gate: Arc<SharedGate<SHARED_CAP>>,
    #[cfg(target_os = "linux")]
    permits: Slab<SharedGatePermit>,
    #[cfg(target_os = "linux")]
    tickets: RefCell<HashMap<u32, SharedTicket>>,
    next_ticket: Cell<u32>,
    levels: u8,
    fallback_retry_ns: u64,
    /// The running pump thread's stop flag.
    pump: RefCell<Option<Arc<AtomicBool>>>,
}

impl Tagged for SharedGateInner {
    const TAG: u64 = tags::SHARED_GATE;
}

/// The JS class over a [`SharedGateInner`].
#[napi(js_name = "NativeSharedGate")]
pub struct NativeSharedGate {
    inner: Rc<SharedGateInner>,
}

#[cfg(not(target_os = "linux"))]
fn nolinux<T>() -> Result<T> {
    Err(crate::shared::unsupported("Gate.shared"))
}

fn timeout_deadline(timeout_ms: f64, now: u64) -> Result<Option<u64>> {
    deadline_of(timeout_ms, now)
        .map_err(|()| Error::new(Status::InvalidArg, "timeoutMs must be -1 or a finite number ≥ 0"))
}

#[cfg(target_os = "linux")]
impl SharedGateInner {
    /// A permit id or `-reason` (never queues), or `SHM_TABLE_FULL`.
    pub fn try_acquire(&self, now: u64, level: Priority, deadline: Option<u64>) -> f64 {
        match self.gate.try_arrive(now, level, deadline) {
            Ok(p) => self.permit_id(p, now),
            Err(ShmError::Rejected(r)) => refuse(r),
            Err(_) => SHM_TABLE_FULL,
        }
    }

    /// `0`, `-1` (not live: released twice, or reclaimed) or `-2` (another object's).
    pub fn release(&self, id: f64, now: u64, outcome: Outcome) -> f64 {
        let Some(p) = self.permits.take(id) else { return -1.0 };
        match self.gate.release(p, now, outcome) {
            Ok(()) => 0.0,
            Err(ShmError::Reclaimed) => -1.0,
            Err(_) => -2.0,
        }
    }

    fn permit_id(&self, p: SharedGatePermit, now: u64) -> f64 {
        self.permits.insert(p).unwrap_or_else(|p| {
            let _ = self.gate.release(p, now, Outcome::Ignored);
            refuse(Rejected::new(Reason::LimitReached, self.fallback_retry_ns))
        })
    }

    fn table_full() -> Error {
        Error::new(
            Status::GenericFailure,
            "SG_SHM_UNAVAILABLE: Gate: every process slot of the shared gate is taken",
        )
    }
}

#[napi]
impl NativeSharedGate {
    /// The gate named `name` in shared memory: created, or attached to if it exists (then
    /// `options` must describe the same config).
    #[napi(factory)]
    pub fn open(name: String, options: Option<GateOptions>) -> Result<Self> {
        let mut o = options.unwrap_or_default();
        if o.queue_capacity.is_none() {
            o.queue_capacity = Some(SHARED_CAP as f64);
        }
        let cfg = gate_config(&o)?;
        #[cfg(target_os = "linux")]
        {
            let gate = SharedGate::<SHARED_CAP>::open(&name, cfg)
                .map_err(|e| crate::shared::place_err("Gate", e))?;
            Ok(Self {
                inner: Rc::new(SharedGateInner {
                    gate: Arc::new(gate),
                    permits: Slab::default(),
                    tickets: RefCell::new(HashMap::new()),
                    next_ticket: Cell::new(0),
                    levels: cfg.limiter.levels,
                    fallback_retry_ns: cfg.fallback_retry_after_ns,
                    pump: RefCell::new(None),
                }),
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (name, cfg);
            nolinux()
        }
    }

    /// The handle the `fast.sharedGate*` functions take.
    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// A permit id, or `-reason` (never queues).
    #[napi]
    pub fn try_acquire(&self, level: f64, timeout_ms: f64, now_ns: Option<BigInt>) -> Result<f64> {
        let level = level_of(level, self.inner.levels)?;
        let now = resolve_now(now_ns)?;
        let deadline = timeout_deadline(timeout_ms, now)?;
        #[cfg(target_os = "linux")]
        {
            match self.inner.gate.try_arrive(now, level, deadline) {
                Ok(p) => Ok(self.inner.permit_id(p, now)),
                Err(ShmError::Rejected(r)) => Ok(refuse(r)),
                Err(_) => Err(SharedGateInner::table_full()),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (level, deadline);
            nolinux()
        }
    }

    /// A permit id, `-reason`, or `-(QUEUED_BASE + ticket)`.
    #[napi]
    pub fn arrive(&self, level: f64, timeout_ms: f64, now_ns: Option<BigInt>) -> Result<f64> {
        let level = level_of(level, self.inner.levels)?;
        let now = resolve_now(now_ns)?;
        let deadline = timeout_deadline(timeout_ms, now)?;
        #[cfg(target_os = "linux")]
        {
            match self.inner.gate.arrive(now, level, deadline) {
                Ok(SharedArrival::Admitted(p)) => Ok(self.inner.permit_id(p, now)),
                Ok(SharedArrival::Rejected(r)) => Ok(refuse(r)),
                Ok(SharedArrival::Queued(t)) => {
                    let id = self.inner.next_ticket.get();
                    self.inner.next_ticket.set(id.wrapping_add(1) & 0x7fff_ffff);
                    self.inner.tickets.borrow_mut().insert(id, t);
                    Ok(-(QUEUED_BASE + f64::from(id)))
                }
                Err(_) => Err(SharedGateInner::table_full()),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (level, deadline);
            nolinux()
        }
    }

    /// Ends a permit: `0`, `-1` (not live: released twice, or reclaimed) or `-2` (another
    /// object's).
    #[napi]
    pub fn release(&self, id: f64, outcome: f64, now_ns: Option<BigInt>) -> Result<f64> {
        let outcome = outcome_of(outcome)?;
        let now = resolve_now(now_ns)?;
        #[cfg(target_os = "linux")]
        {
            Ok(self.inner.release(id, now, outcome))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (id, outcome, now);
            nolinux()
        }
    }

    /// The decided tickets of this object, taken: `[kind, ticket, a, b]` quadruples,
    /// `kind` 0 = granted (`a` = permit id), 1 = expired (`a` = reason code, `b` =
    /// retryAfterMs).
    #[napi]
    pub fn collect(&self) -> Vec<f64> {
        let mut out = Vec::new();
        #[cfg(target_os = "linux")]
        {
            let now = crate::clock::now_ns();
            let mut tickets = self.inner.tickets.borrow_mut();
            tickets.retain(|&id, t| {
                let id = f64::from(id);
                match self.inner.gate.outcome(t) {
                    Ok(None) => return true,
                    Ok(Some(SharedOutcome::Granted(p))) => {
                        let pid = self.inner.permit_id(p, now);
                        push_granted(&mut out, id, pid, self.inner.fallback_retry_ns);
                    }
                    Ok(Some(SharedOutcome::Expired(r))) => push_expired(&mut out, id, r),
                    // Its entry was cleared (this process was taken for dead): refused.
                    Err(_) => {
                        let r = Rejected::new(Reason::LimitReached, self.inner.fallback_retry_ns);
                        push_expired(&mut out, id, r);
                    }
                }
                false
            });
        }
        out
    }

    /// Withdraws a queued ticket: true if it was still waiting. A grant that raced with
    /// the withdrawal is released as ignored (the caller has given up).
    #[napi]
    pub fn cancel(&self, ticket: f64) -> Result<bool> {
        #[cfg(target_os = "linux")]
        {
            if !(0.0..=f64::from(u32::MAX)).contains(&ticket) || ticket.fract() != 0.0 {
                return Ok(false);
            }
            let Some(t) = self.inner.tickets.borrow_mut().remove(&(ticket as u32)) else {
                return Ok(false);
            };
            Ok(match self.inner.gate.cancel(&t) {
                Ok(None) => true,
                Ok(Some(SharedOutcome::Granted(p))) => {
                    let _ = self.inner.gate.release(p, crate::clock::now_ns(), Outcome::Ignored);
                    false
                }
                Ok(Some(SharedOutcome::Expired(_))) | Err(_) => false,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = ticket;
            nolinux()
        }
    }

    /// Tickets of this object still waiting.
    #[napi]
    pub fn pending(&self) -> f64 {
        #[cfg(target_os = "linux")]
        {
            self.inner.tickets.borrow().len() as f64
        }
        #[cfg(not(target_os = "linux"))]
        0.0
    }

    /// Starts the pump thread (if not running): it calls `cb` whenever this process's
    /// mailbox moves, polls the gate at its next wakeup and sweeps dead processes.
    #[napi]
    pub fn start_pump(&self, cb: Function<(), ()>) -> Result<()> {
        if self.inner.pump.borrow().is_some() {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            let tsfn: Pump = cb
                .build_threadsafe_function::<()>()
                .callee_handled::<false>()
                .weak::<true>()
                .build()?;
            let stop = Arc::new(AtomicBool::new(false));
            let gate = Arc::clone(&self.inner.gate);
            let flag = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("surgeguard-pump".into())
                .spawn(move || pump(&gate, &tsfn, &flag))
                .map_err(|e| {
                    Error::new(Status::GenericFailure, format!("SG_SHM_UNAVAILABLE: pump: {e}"))
                })?;
            *self.inner.pump.borrow_mut() = Some(stop);
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = cb;
            nolinux()
        }
    }

    /// Stops the pump thread (it exits within 100 ms).
    #[napi]
    pub fn stop_pump(&self) {
        self.inner.stop_pump();
    }

    /// Runs the gate's dispatch now (grants and expiries of every process).
    #[napi]
    pub fn poll(&self, now_ns: Option<BigInt>) -> Result<f64> {
        let now = resolve_now(now_ns)?;
        #[cfg(target_os = "linux")]
        {
            self.inner.gate.poll(now).map(|n| n as f64).map_err(|_| SharedGateInner::table_full())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = now;
            nolinux()
        }
    }

    /// Releases the permits and withdraws the tickets of dead processes; the permits
    /// released.
    #[napi]
    pub fn reclaim(&self) -> f64 {
        #[cfg(target_os = "linux")]
        {
            self.inner.gate.reclaim() as f64
        }
        #[cfg(not(target_os = "linux"))]
        0.0
    }

    /// Whether this call created the segment (false: attached).
    #[napi]
    pub fn created(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.inner.gate.created()
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Process-table slots in use.
    #[napi]
    pub fn attached(&self) -> f64 {
        #[cfg(target_os = "linux")]
        {
            f64::from(self.inner.gate.attached_processes())
        }
        #[cfg(not(target_os = "linux"))]
        0.0
    }

    /// Permits counted to this object's process slot.
    #[napi]
    pub fn held_here(&self) -> f64 {
        #[cfg(target_os = "linux")]
        {
            f64::from(self.inner.gate.held_by_this_process())
        }
        #[cfg(not(target_os = "linux"))]
        0.0
    }

    #[napi]
    pub fn next_wakeup_ms(&self, now_ns: Option<BigInt>) -> Result<f64> {
        let now = resolve_now(now_ns)?;
        Ok(wakeup_ms(self.core()?, now))
    }

    #[napi]
    pub fn brownout(&self, now_ns: Option<BigInt>) -> Result<f64> {
        let now = resolve_now(now_ns)?;
        Ok(self.core()?.brownout(now))
    }

    #[napi]
    pub fn set_shed_level(&self, level: Option<f64>) -> Result<()> {
        let p = level.map(|x| level_of(x, self.inner.levels)).transpose()?;
        self.core()?.set_shed_level(p);
        Ok(())
    }

    #[napi]
    pub fn shed_level(&self) -> Result<Option<f64>> {
        Ok(self.core()?.shed_level().map(|p| p.index() as f64))
    }

    #[napi]
    pub fn state(&self) -> Result<&'static str> {
        Ok(state_name(self.core()?.state()))
    }

    #[napi]
    pub fn waiting(&self) -> Result<f64> {
        Ok(f64::from(self.core()?.waiting_total()))
    }

    #[napi]
    pub fn limit(&self) -> Result<f64> {
        Ok(self.core()?.limiter().limit())
    }

    #[napi]
    pub fn inflight(&self) -> Result<f64> {
        Ok(f64::from(self.core()?.limiter().inflight()))
    }

    #[napi]
    pub fn live_permits(&self) -> f64 {
        #[cfg(target_os = "linux")]
        {
            self.inner.permits.live() as f64
        }
        #[cfg(not(target_os = "linux"))]
        0.0
    }

    #[napi]
    pub fn set_static_limit(&self, limit: Option<f64>) -> Result<()> {
        set_static(self.core()?.limiter(), limit)
    }

    #[napi]
    pub fn metrics(&self) -> Result<GateMetricsJs> {
        Ok(gate_metrics(self.core()?, self.inner.levels))
    }
}

impl NativeSharedGate {
    #[cfg(target_os = "linux")]
    fn core(&self) -> Result<&surgeguard_core::gate::Gate<SHARED_CAP>> {
        Ok(self.inner.gate.gate())
    }

    #[cfg(not(target_os = "linux"))]
    fn core(&self) -> Result<&surgeguard_core::gate::Gate<SHARED_CAP>> {
        nolinux()
    }
}

impl SharedGateInner {
    fn stop_pump(&self) {
        if let Some(stop) = self.pump.borrow_mut().take() {
            stop.store(true, Ordering::Release);
        }
    }
}

impl Drop for SharedGateInner {
    /// Collected (or its thread or process ending): its tickets are withdrawn and its
    /// permits given back, as ignored, so that an ended worker thread holds nothing.
    fn drop(&mut self) {
        self.stop_pump();
        #[cfg(target_os = "linux")]
        {
            let now = self.gate.gate().limiter().latest_time();
            for (_, t) in self.tickets.get_mut().drain() {
                if let Ok(Some(SharedOutcome::Granted(p))) = self.gate.cancel(&t) {
                    let _ = self.gate.release(p, now, Outcome::Ignored);
                }
            }
            for p in self.permits.drain() {
                let _ = self.gate.release(p, now, Outcome::Ignored);
            }
        }
    }
}

/// The pump thread: tells JS when the mailbox moved, runs the gate's timers, sweeps.
#[cfg(target_os = "linux")]
fn pump(gate: &SharedGate<SHARED_CAP>, tsfn: &Pump, stop: &AtomicBool) {
    // None: the first round always tells (a grant may have landed between the facade's
    // own collect after queueing and this thread's start).
    let mut told = None;
    let mut next_sweep = 0;
    while !stop.load(Ordering::Acquire) {
        let now = crate::clock::now_ns();
        if now >= next_sweep {
            gate.reclaim();
            let _ = gate.poll(now);
            next_sweep = now.saturating_add(SWEEP_NS);
        }
        let mut next = gate.gate().next_wakeup(now);
        if next.is_some_and(|t| t <= now) {
            let _ = gate.poll(now);
            next = gate.gate().next_wakeup(now);
        }
        // Read the sequence before telling JS: whatever lands after this read moves it
        // again and ends the wait below at once.
        let seq = gate.mailbox_seq();
        if told != Some(seq) {
            told = Some(seq);
            if tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking) == Status::Closing {
                return; // the environment is going away
            }
        }
        // At least 1 ms between timer rounds (a wakeup that stays due, e.g. while another
        // process dispatches, must not spin); the mailbox still wakes it at once.
        let until = next.map_or(next_sweep, |t| t.min(next_sweep));
        gate.wait_mailbox(seq, until.saturating_sub(now).max(MIN_WAIT_NS));
    }
}

// ---------------------------------------------------------------------------------------
// The hot path, as raw callbacks (see `fast`): sharedGateTryAcquire(h, level[, timeoutMs[,
// nowNs]]) -> permit id | -reason | SHM_TABLE_FULL; sharedGateRelease(h, id, outcome[,
// nowNs]) -> 0 | -1 | -2.

/// # Safety
/// Called only by N-API, as a [`Callback`].
#[cfg(target_os = "linux")]
unsafe extern "C" fn shared_gate_try_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe {
        handle_level_timeout_now(
            env,
            info,
            Timeout::Optional,
            |h: &SharedGateInner| h.levels,
            SharedGateInner::try_acquire,
        )
    }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
#[cfg(target_os = "linux")]
unsafe extern "C" fn shared_gate_release(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_id_outcome_now(env, info, SharedGateInner::release) }
}

/// The shared gate's raw callbacks (registered by `fast`; none where
/// shared memory is not built: the facade cannot make a shared gate there).
#[cfg(target_os = "linux")]
pub const FAST: &[(&str, Callback)] = &[
    ("sharedGateTryAcquire", shared_gate_try_acquire),
    ("sharedGateRelease", shared_gate_release),
];
#[cfg(not(target_os = "linux"))]
pub const FAST: &[(&str, Callback)] = &[];
