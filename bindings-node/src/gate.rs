//! `Gate`: limiter + admission queue + shed switch, pumped by the facade's one timer.
//!
//! The core gate is an event pump (it never blocks or wakes anyone); this binding owns the
//! waiters' side:
//! `arrive` returns a permit, a ticket or a refusal; after a release (or a queued arrival,
//! or when `nextWakeupMs` comes) the facade calls `poll`, which returns grants and expiries
//! keyed by ticket, and resolves or rejects the matching Promises.

use std::cell::Cell;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use surgeguard_core::codel::{CodelConfig, CodelMode};
use surgeguard_core::gate::{Aging, Arrival, Event, Gate, GateConfig, GateState, LifoTrigger};
use surgeguard_core::queue::Ticket;
use surgeguard_core::{Outcome, Priority, RawPermit, Reason, Rejected};

use crate::clock::resolve_now;
use crate::convert::{config_err, finite, int_in, level_of, ms_to_ns, ns_to_ms, range, usage_err};
use crate::handle::{new_handle, tags, Tagged};
use crate::limiter::{
    limiter_config, limiter_metrics, set_static, LimiterMetricsJs, LimiterOptions,
};
use crate::raw::{
    args, bad_number, handle_arg, handle_id_outcome_now, level, now, number, refuse, ret, Callback,
};
use crate::slab::Slab;

/// Most waiters a gate can hold (the core's queue capacity is a compile-time constant);
/// `queueCapacity` picks any bound up to it.
pub const CAP: usize = 4096;
/// Default `queueCapacity`.
const DEFAULT_CAPACITY: usize = 1024;
/// Offset of queued tickets in `gateArrive`'s result (above every reason code).
pub const QUEUED_BASE: f64 = 16.0;
/// Events read per core `poll` call.
const POLL_BATCH: usize = 64;
/// Tickets travel to JS as their low 48 bits (slot and generation); the queue id in the
/// top 16 bits is the same for every ticket of one gate and is kept in `GateInner::owner`.
/// Only `ticket_to_js` and `ticket_from_js` know this layout.
const TICKET_BITS: u32 = 48;
const TICKET_MASK: u64 = (1 << TICKET_BITS) - 1;

/// A core ticket as `(owner, id)`: the gate's queue id and the number JS sees (exact in an
/// f64, below 2^48).
fn ticket_to_js(t: Ticket) -> (u64, f64) {
    let bits = t.to_bits();
    (bits >> TICKET_BITS, (bits & TICKET_MASK) as f64)
}

/// The core ticket of JS id `t` in the gate whose queue id is `owner`, if `t` is a
/// possible id (a whole number below 2^48).
fn ticket_from_js(owner: u64, t: f64) -> Option<Ticket> {
    if !(0.0..=TICKET_MASK as f64).contains(&t) || t.fract() != 0.0 {
        return None;
    }
    Some(Ticket::from_bits(owner << TICKET_BITS | t as u64))
}

/// What a `Gate` handle points at.
pub struct GateInner {
    core: Box<Gate<CAP>>,
    permits: Slab<RawPermit>,
    /// Levels in use.
    pub levels: u8,
    /// The queue id of this gate's tickets (bits 48..64), learned from the first ticket.
    owner: Cell<Option<u64>>,
    fallback_retry_ns: u64,
}

impl Tagged for GateInner {
    const TAG: u64 = tags::GATE;
}

impl GateInner {
    fn permit_id(&self, p: RawPermit, now: u64) -> f64 {
        self.permits.insert(p).unwrap_or_else(|p| {
            let _ = self.core.release(p, now, Outcome::Ignored);
            refuse(Rejected::new(Reason::LimitReached, self.fallback_retry_ns))
        })
    }

    /// A permit now or a refusal; never queues: the core's `Gate::try_arrive`, which
    /// makes exactly `arrive`'s decisions (clock clamp, shed switch, deadline, no
    /// overtaking, the limiter) and refuses `LimitReached` where `arrive` would queue.
    pub fn try_acquire(&self, now: u64, level: Priority, deadline: Option<u64>) -> f64 {
        match self.core.try_arrive(now, level, deadline) {
            Ok(p) => self.permit_id(p, now),
            Err(r) => refuse(r),
        }
    }

    /// A permit id, `-reason`, or `-(QUEUED_BASE + ticket)`.
    pub fn arrive(&self, now: u64, level: Priority, deadline: Option<u64>) -> f64 {
        match self.core.arrive(now, level, deadline) {
            Arrival::Admitted(p) => self.permit_id(p, now),
            Arrival::Rejected(r) => refuse(r),
            Arrival::Queued(t) => {
                let (owner, id) = ticket_to_js(t);
                if self.owner.get().is_none() {
                    self.owner.set(Some(owner));
                }
                -(QUEUED_BASE + id)
            }
        }
    }

    /// Waiters left (≥ 0, the facade polls if any), or `-1` / `-2` for a bad id.
    pub fn release(&self, id: f64, now: u64, outcome: Outcome) -> f64 {
        match self.permits.take(id) {
            Some(p) => match self.core.release(p, now, outcome) {
                Ok(()) => f64::from(self.core.waiting_total()),
                Err(_) => -2.0,
            },
            None => -1.0,
        }
    }

    fn ticket(&self, t: f64) -> Option<Ticket> {
        ticket_from_js(self.owner.get()?, t)
    }

    /// Every event due: `[kind, ticket, a, b]` quadruples. `kind` 0 = granted (`a` = permit
    /// id), 1 = expired (`a` = reason code, `b` = retryAfterMs).
    pub fn poll(&self, now: u64) -> Vec<f64> {
        let mut out = Vec::new();
        let mut buf: [Option<Event>; POLL_BATCH] = std::array::from_fn(|_| None);
        loop {
            let n = self.core.poll(now, &mut buf);
            for ev in buf.iter_mut().take(n) {
                match ev.take() {
                    Some(Event::Granted(t, p)) => {
                        let id = self.permit_id(p, now);
                        push_granted(&mut out, ticket_to_js(t).1, id, self.fallback_retry_ns);
                    }
                    Some(Event::Expired(t, r)) => push_expired(&mut out, ticket_to_js(t).1, r),
                    None => {}
                }
            }
            if n < POLL_BATCH {
                return out;
            }
        }
    }
}

/// Appends a grant to a poll's `[kind, ticket, a, b]` quadruples: kind 0 with `a` = the
/// permit id `pid`; or, if the permit could not be stored (`pid < 0`), an expiry
/// `limit_reached` with `retry_after_ns`.
pub(crate) fn push_granted(out: &mut Vec<f64>, ticket: f64, pid: f64, retry_after_ns: u64) {
    if pid >= 0.0 {
        out.extend([0.0, ticket, pid, 0.0]);
    } else {
        push_expired(out, ticket, Rejected::new(Reason::LimitReached, retry_after_ns));
    }
}

/// Appends an expiry to a poll's quadruples: kind 1 with `a` = the reason code and `b` =
/// retryAfterMs.
pub(crate) fn push_expired(out: &mut Vec<f64>, ticket: f64, r: Rejected) {
    out.extend([1.0, ticket, f64::from(r.reason as u8), ns_to_ms(r.retry_after)]);
}

#[napi(object)]
#[derive(Default)]
pub struct GateOptions {
    /// The limiter part.
    pub limiter: Option<LimiterOptions>,
    /// Waiters held at most (1..=4096, default 1024).
    pub queue_capacity: Option<f64>,
    /// CoDel per level (default on, folly's 5 ms / 100 ms); `false` turns it off.
    pub codel: Option<bool>,
    pub codel_target_ms: Option<f64>,
    pub codel_interval_ms: Option<f64>,
    /// `folly` (default) or `rfc8289`.
    pub codel_mode: Option<String>,
    /// `codel` (default: LIFO while CoDel says overloaded), `never`, or an occupancy
    /// fraction in (0, 1] as a number.
    pub lifo: Option<Either<String, f64>>,
    /// A waiter queued longer than this is expired, ms.
    pub max_wait_ms: Option<f64>,
    /// Aging: waiters of `agingFrom` older than `agingAfterMs` move to `agingTo`.
    pub aging_from: Option<f64>,
    pub aging_to: Option<f64>,
    pub aging_after_ms: Option<f64>,
    pub initial_service_ms: Option<f64>,
    pub service_alpha: Option<f64>,
    pub fallback_retry_after_ms: Option<f64>,
}

pub(crate) fn gate_config(o: &GateOptions) -> Result<GateConfig> {
    let limiter = limiter_config(o.limiter.as_ref().unwrap_or(&LimiterOptions::default()))?;
    let mut c = GateConfig { limiter, ..GateConfig::default() };
    c.queue_capacity = Some(match o.queue_capacity {
        Some(x) => int_in("queueCapacity", x, 1, CAP as u64)? as usize,
        None => DEFAULT_CAPACITY,
    });
    let mut codel = CodelConfig::default();
    if let Some(x) = o.codel_target_ms {
        codel.target_ns = ms_to_ns("codelTargetMs", x)?;
    }
    if let Some(x) = o.codel_interval_ms {
        codel.interval_ns = ms_to_ns("codelIntervalMs", x)?;
    }
    codel.mode = match o.codel_mode.as_deref() {
        None | Some("folly") => CodelMode::Folly,
        Some("rfc8289") => CodelMode::Rfc8289,
        Some(m) => {
            return Err(range("codelMode", &format!("must be folly or rfc8289 (got {m:?})")))
        }
    };
    c.codel = if o.codel == Some(false) { None } else { Some(codel) };
    c.lifo = match &o.lifo {
        None => LifoTrigger::CodelOverloaded,
        Some(Either::A(s)) if s == "codel" => LifoTrigger::CodelOverloaded,
        Some(Either::A(s)) if s == "never" => LifoTrigger::Never,
        Some(Either::A(s)) => {
            return Err(range(
                "lifo",
                &format!("must be 'codel', 'never' or a fraction (got {s:?})"),
            ))
        }
        Some(Either::B(f)) => LifoTrigger::Occupancy(finite("lifo", *f)?),
    };
    if let Some(x) = o.max_wait_ms {
        c.max_wait_ns = Some(ms_to_ns("maxWaitMs", x)?);
    }
    match (o.aging_from, o.aging_to, o.aging_after_ms) {
        (None, None, None) => {}
        (Some(from), Some(to), Some(after)) => {
            let lvl = |w, x| -> Result<Priority> {
                Ok(Priority::new(int_in(w, x, 0, 7)? as u8).expect("≤ 7"))
            };
            c.aging = Some(Aging {
                from: lvl("agingFrom", from)?,
                to: lvl("agingTo", to)?,
                after_ns: ms_to_ns("agingAfterMs", after)?,
            });
        }
        _ => return Err(range("aging", "needs agingFrom, agingTo and agingAfterMs together")),
    }
    if let Some(x) = o.initial_service_ms {
        c.initial_service_ns = ms_to_ns("initialServiceMs", x)?;
    }
    if let Some(x) = o.service_alpha {
        c.service_alpha = finite("serviceAlpha", x)?;
    }
    if let Some(x) = o.fallback_retry_after_ms {
        c.fallback_retry_after_ns = ms_to_ns("fallbackRetryAfterMs", x)?;
    }
    Ok(c)
}

#[napi(object)]
pub struct CodelMetricsJs {
    pub min_delay_ms: f64,
    pub overloaded: bool,
    pub load: f64,
    pub drops: f64,
    pub intervals: f64,
}

#[napi(object)]
pub struct GateMetricsJs {
    /// `healthy` or `overloaded`.
    pub state: String,
    pub waiting_by_level: Vec<f64>,
    pub waiting: f64,
    pub capacity: f64,
    pub oldest_age_ms: f64,
    pub queued: f64,
    pub granted: f64,
    pub expired: f64,
    pub sloughed: f64,
    pub evicted: f64,
    pub cancelled: f64,
    pub shed: f64,
    pub queue_full: f64,
    pub deadline_unmeetable: f64,
    pub aged: f64,
    pub lifo_switches: f64,
    pub lifo_levels: f64,
    pub shed_level: Option<f64>,
    pub service_ms: f64,
    pub codel: Vec<CodelMetricsJs>,
    pub limiter: LimiterMetricsJs,
}

pub(crate) fn state_name(s: GateState) -> &'static str {
    match s {
        GateState::Healthy => "healthy",
        GateState::Overloaded => "overloaded",
    }
}

#[napi(js_name = "NativeGate")]
pub struct NativeGate {
    inner: Rc<GateInner>,
}

#[napi]
impl NativeGate {
    #[napi(constructor)]
    pub fn new(options: Option<GateOptions>) -> Result<Self> {
        let cfg = gate_config(&options.unwrap_or_default())?;
        let core = Gate::<CAP>::new(cfg).map_err(|e| config_err("Gate", e))?;
        Ok(Self {
            inner: Rc::new(GateInner {
                core: Box::new(core),
                permits: Slab::default(),
                levels: cfg.limiter.levels,
                owner: Cell::new(None),
                fallback_retry_ns: cfg.fallback_retry_after_ns,
            }),
        })
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// Every event due, as `[kind, ticket, a, b]` quadruples (see `GateInner::poll`).
    #[napi]
    pub fn poll(&self, now_ns: Option<BigInt>) -> Result<Vec<f64>> {
        Ok(self.inner.poll(resolve_now(now_ns)?))
    }

    /// Withdraws a waiting ticket: true if it was still waiting.
    #[napi]
    pub fn cancel(&self, ticket: f64) -> Result<bool> {
        let Some(t) = self.inner.ticket(ticket) else { return Ok(false) };
        match self.inner.core.cancel(t) {
            Ok(()) => Ok(true),
            Err(surgeguard_core::UsageError::UnknownTicket) => Ok(false),
            Err(e) => Err(usage_err(e)),
        }
    }

    /// When the one timer should next poll, in ms from now; -1 when nothing waits.
    #[napi]
    pub fn next_wakeup_ms(&self, now_ns: Option<BigInt>) -> Result<f64> {
        let now = resolve_now(now_ns)?;
        Ok(wakeup_ms(&self.inner.core, now))
    }

    /// The brownout dimmer in [0, 1] (serve optional content with probability `1 − d`).
    #[napi]
    pub fn brownout(&self, now_ns: Option<BigInt>) -> Result<f64> {
        let now = resolve_now(now_ns)?;
        Ok(self.inner.core.brownout(now))
    }

    /// The on-call switch: shed every level ≥ `level`; `null` turns it off.
    #[napi]
    pub fn set_shed_level(&self, level: Option<f64>) -> Result<()> {
        let p = level.map(|x| level_of(x, self.inner.levels)).transpose()?;
        self.inner.core.set_shed_level(p);
        Ok(())
    }

    #[napi]
    pub fn shed_level(&self) -> Option<f64> {
        self.inner.core.shed_level().map(|p| p.index() as f64)
    }

    /// `healthy` or `overloaded` (overloaded is not broken: keep the instance in
    /// rotation).
    #[napi]
    pub fn state(&self) -> &'static str {
        state_name(self.inner.core.state())
    }

    #[napi]
    pub fn waiting(&self) -> f64 {
        f64::from(self.inner.core.waiting_total())
    }

    #[napi]
    pub fn limit(&self) -> f64 {
        self.inner.core.limiter().limit()
    }

    #[napi]
    pub fn inflight(&self) -> f64 {
        f64::from(self.inner.core.limiter().inflight())
    }

    #[napi]
    pub fn live_permits(&self) -> f64 {
        self.inner.permits.live() as f64
    }

    #[napi]
    pub fn set_static_limit(&self, limit: Option<f64>) -> Result<()> {
        set_static(self.inner.core.limiter(), limit)
    }

    #[napi]
    pub fn metrics(&self) -> GateMetricsJs {
        gate_metrics(&self.inner.core, self.inner.levels)
    }
}

/// When a gate's one timer should next poll, in ms from `now`; -1 when nothing waits.
pub(crate) fn wakeup_ms<const C: usize>(g: &Gate<C>, now: u64) -> f64 {
    match g.next_wakeup(now) {
        Some(t) => ns_to_ms(t.saturating_sub(now)),
        None => -1.0,
    }
}

/// A core gate's metrics for JS (the first `levels` levels).
pub(crate) fn gate_metrics<const C: usize>(g: &Gate<C>, levels: u8) -> GateMetricsJs {
    let m = g.metrics();
    let n = levels as usize;
    GateMetricsJs {
        state: state_name(m.state).to_string(),
        waiting_by_level: m.waiting_by_level[..n].iter().map(|&x| f64::from(x)).collect(),
        waiting: f64::from(m.waiting),
        capacity: f64::from(m.capacity),
        oldest_age_ms: ns_to_ms(m.oldest_age_ns),
        queued: m.queued as f64,
        granted: m.granted as f64,
        expired: m.expired as f64,
        sloughed: m.sloughed as f64,
        evicted: m.evicted as f64,
        cancelled: m.cancelled as f64,
        shed: m.shed as f64,
        queue_full: m.queue_full as f64,
        deadline_unmeetable: m.deadline_unmeetable as f64,
        aged: m.aged as f64,
        lifo_switches: m.lifo_switches as f64,
        lifo_levels: f64::from(m.lifo_levels),
        shed_level: m.shed_level.map(|p| p.index() as f64),
        service_ms: ns_to_ms(m.service_ns),
        codel: m.codel[..n]
            .iter()
            .map(|c| CodelMetricsJs {
                min_delay_ms: ns_to_ms(c.min_delay_ns),
                overloaded: c.overloaded,
                load: f64::from(c.load),
                drops: c.drops as f64,
                intervals: c.intervals as f64,
            })
            .collect(),
        limiter: limiter_metrics(&m.limiter),
    }
}

// ---------------------------------------------------------------------------------------
// Gate: gateTryAcquire(h, level[, timeoutMs[, nowNs]]), gateArrive(h, level, timeoutMs[,
// nowNs]), gateRelease(h, id, outcome[, nowNs]) -> waiters left. `timeoutMs` -1 means none.

/// The deadline for `timeout` ms from `now`: `Ok(None)` for -1 (no timeout), `Err` for
/// anything but -1 or a finite number ≥ 0.
pub(crate) fn deadline_of(timeout: f64, now: u64) -> std::result::Result<Option<u64>, ()> {
    if timeout == -1.0 {
        Ok(None)
    } else if (0.0..1e15).contains(&timeout) {
        Ok(Some(now.saturating_add((timeout * crate::convert::MS).round() as u64)))
    } else {
        Err(())
    }
}

/// Whether a gate callback's `timeoutMs` may be left out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timeout {
    /// Absent means none (as -1): `*TryAcquire`.
    Optional,
    /// Always read (absent is refused): `gateArrive`.
    Required,
}

/// The body of the gate callbacks `(h, level[, timeoutMs[, nowNs]])` (`timeoutMs` required
/// by [`Timeout::Required`]): reads the handle, a level below `levels(h)`, the timeout (-1
/// for none, else a non-negative number: a core deadline) and the time, returns
/// `call(h, now, level, deadline)`. `inline(always)`, as the shapes in `raw`.
///
/// # Safety
/// `env` and `info` must be the arguments N-API passed to the [`Callback`] now running.
#[inline(always)]
pub(crate) unsafe fn handle_level_timeout_now<T: Tagged>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    timeout: Timeout,
    levels: impl FnOnce(&T) -> u8,
    call: impl FnOnce(&T, u64, Priority, Option<u64>) -> f64,
) -> sys::napi_value {
    // SAFETY: env and info are the running callback's (this fn's contract).
    let (argv, argc) = unsafe { args::<4>(env, info) };
    let h = handle_arg!(env, argv, T);
    let level = level!(env, argv[1], levels(h));
    let timeout_ms = if timeout == Timeout::Required || argc > 2 {
        // SAFETY: env is the running callback's; argv[2] one of its arguments (`undefined`
        // if absent).
        unsafe { number(env, argv[2]) }
    } else {
        -1.0
    };
    let now = now!(env, argv, argc, 3);
    let Ok(deadline) = deadline_of(timeout_ms, now) else {
        let msg = match timeout {
            Timeout::Optional => "timeoutMs must be -1 or a finite number ≥ 0",
            Timeout::Required => "timeoutMs must be a finite number ≥ 0",
        };
        // SAFETY: env is the running callback's.
        return unsafe { bad_number(env, argv[2], msg) };
    };
    // SAFETY: env is the running callback's, open until it returns.
    unsafe { ret(env, call(h, now, level, deadline)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn gate_try_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    let levels = |h: &GateInner| h.levels;
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe {
        handle_level_timeout_now(env, info, Timeout::Optional, levels, GateInner::try_acquire)
    }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn gate_arrive(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    let levels = |h: &GateInner| h.levels;
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_level_timeout_now(env, info, Timeout::Required, levels, GateInner::arrive) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn gate_release(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_id_outcome_now(env, info, GateInner::release) }
}

/// The gate's raw callbacks (registered by `fast`).
pub const FAST: &[(&str, Callback)] = &[
    ("gateTryAcquire", gate_try_acquire),
    ("gateArrive", gate_arrive),
    ("gateRelease", gate_release),
];
