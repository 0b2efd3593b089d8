//! `sg_gate`: limiter + bounded priority admission queue + shed switch, driven as an
//! event pump: `sg_gate_arrive` admits, queues or refuses; `sg_gate_poll` reports queued
//! tickets granted or expired; `sg_gate_next_wakeup` says when to poll again.

use core::ffi::c_void;

use surgeguard_core::codel::{CodelConfig, CodelMetrics, CodelMode};
use surgeguard_core::gate::{
    Aging, Arrival, Event, Gate, GateConfig, GateMetrics, GateState, LifoTrigger,
};
use surgeguard_core::queue::Ticket;
use surgeguard_core::{Priority, RawPermit};

use crate::field;
use crate::handle::release_with;
use crate::handle::Out;
use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object_in_place, input,
    new_object_in_place, object, out, rejected, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::limiter::{sg_limiter_config, sg_limiter_metrics};
use crate::permit::{issue, live_permit, restore, sg_permit, take, SG_PERMIT_KIND_GATE};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::time::SG_NEVER;
use crate::vocab::level;

/// The largest `sg_gate_config.queue_capacity`.
pub const SG_GATE_MAX_QUEUE: u32 = 4096;
/// `sg_gate_arrive`'s `deadline` for "no deadline" (`UINT64_MAX`).
pub const SG_NO_DEADLINE: u64 = u64::MAX;
/// "No level": `sg_gate_shed_level` when nothing is shed (`UINT32_MAX`).
pub const SG_NO_LEVEL: u32 = u32::MAX;

/// `sg_gate_config.codel_mode`: folly's CoDel (overloaded iff the minimum delay over an
/// interval exceeded the target; slough waiters older than 2 × target).
pub const SG_CODEL_FOLLY: u32 = 0;
/// `sg_gate_config.codel_mode`: RFC 8289's `interval / sqrt(count)` drop schedule.
pub const SG_CODEL_RFC8289: u32 = 1;

/// `sg_gate_config.lifo`: always FIFO.
pub const SG_LIFO_NEVER: u32 = 0;
/// `sg_gate_config.lifo`: LIFO while the level's CoDel says the queue stands (default).
pub const SG_LIFO_CODEL_OVERLOADED: u32 = 1;
/// `sg_gate_config.lifo`: LIFO while the queue holds more than `lifo_occupancy` of its
/// capacity (HBase: 0.8).
pub const SG_LIFO_OCCUPANCY: u32 = 2;

/// `sg_gate_state`: serving without a standing queue.
pub const SG_GATE_HEALTHY: u32 = 0;
/// `sg_gate_state`: shedding, queue full, or a queue standing above the CoDel target.
/// Overloaded is not broken: keep the instance in rotation.
pub const SG_GATE_OVERLOADED: u32 = 1;

/// `sg_gate_event.kind`: the waiter may go ahead; `permit` is its (live) permit.
pub const SG_EVENT_GRANTED: u32 = 1;
/// `sg_gate_event.kind`: the waiter was dropped; `rejection` says why (`SG_REASON_EXPIRED`,
/// `SG_REASON_CODEL_SLOUGH`, `SG_REASON_EVICTED`, `SG_REASON_SHED`).
pub const SG_EVENT_EXPIRED: u32 = 2;

/// Settings of an `sg_gate`. Start from `sg_gate_config_default`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_gate_config {
    /// The limiter (its `levels` are the gate's levels).
    pub limiter: sg_limiter_config,
    /// Waiters held at most, `1 ..= SG_GATE_MAX_QUEUE` (default 256). Size it by time
    /// : drain rate × acceptable wait (Little's law: N
    /// waiters at drain rate R hold N / R of latency).
    pub queue_capacity: u32,
    /// CoDel per level on (default true).
    pub codel_enabled: bool,
    /// CoDel's acceptable standing delay, ns (default 5 ms, folly); a floor: the gate raises
    /// it to half the dependency's uncongested call time, and the interval to 10 × it.
    pub codel_target_ns: u64,
    /// CoDel's interval, ns, above the target, ≤ 1 h (default 100 ms).
    pub codel_interval_ns: u64,
    /// `SG_CODEL_*` (default folly).
    pub codel_mode: u32,
    /// `SG_LIFO_*` (default `SG_LIFO_CODEL_OVERLOADED`).
    pub lifo: u32,
    /// With `SG_LIFO_OCCUPANCY`: the fraction of capacity, in `(0, 1]` (default 0.8).
    pub lifo_occupancy: f64,
    /// A waiter queued longer than this expires, ns; 0 = no maximum (default).
    pub max_wait_ns: u64,
    /// Aging on (with the defaults, a `normal` waiter older than 500 ms becomes
    /// `background`).
    /// Default false.
    pub aging_enabled: bool,
    /// The level that ages (default 1).
    pub aging_from: u32,
    /// The less important level it moves to (default 2).
    pub aging_to: u32,
    /// How long it may wait first, ns (default 500 ms).
    pub aging_after_ns: u64,
    /// Expected service time before any sample, ns; 0 = learn it (default).
    /// Default 0.
    pub initial_service_ns: u64,
    /// EWMA weight of each success latency in the service time, in `(0, 1]` (0.1).
    /// Default 0.1.
    pub service_alpha: f64,
    /// `retry_after_ns` when nothing better is known (default 1 s).
    pub fallback_retry_after_ns: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

fn default_config() -> sg_gate_config {
    let c = GateConfig::default();
    let codel = c.codel.unwrap_or_default();
    let aging = Aging::NORMAL_TO_BACKGROUND_AFTER_500_MS;
    sg_gate_config {
        reserved: [0; 4],
        limiter: (&c.limiter).into(),
        queue_capacity: 256,
        codel_enabled: c.codel.is_some(),
        codel_target_ns: codel.target_ns,
        codel_interval_ns: codel.interval_ns,
        codel_mode: SG_CODEL_FOLLY,
        lifo: SG_LIFO_CODEL_OVERLOADED,
        lifo_occupancy: surgeguard_core::gate::HBASE_LIFO_THRESHOLD,
        max_wait_ns: 0,
        aging_enabled: false,
        aging_from: aging.from.index() as u32,
        aging_to: aging.to.index() as u32,
        aging_after_ns: aging.after_ns,
        initial_service_ns: c.initial_service_ns,
        service_alpha: c.service_alpha,
        fallback_retry_after_ns: c.fallback_retry_after_ns,
    }
}

impl sg_gate_config {
    /// The core config. Every field is checked, used or not (as in `sg_limiter_config`):
    /// the CoDel settings with CoDel off, `lifo_occupancy` under another `lifo`, the
    /// aging settings with aging off — each against its own range and its own group,
    /// not against the settings in force.
    pub(crate) fn to_core(self) -> Res<GateConfig> {
        field::reserved(&self.reserved)?;
        let limiter = field::under("limiter.", self.limiter.to_core())?;
        let codel_mode = match self.codel_mode {
            SG_CODEL_FOLLY => CodelMode::Folly,
            SG_CODEL_RFC8289 => CodelMode::Rfc8289,
            _ => return Err(field::out_of_range("codel_mode")),
        };
        let codel = CodelConfig {
            target_ns: self.codel_target_ns,
            interval_ns: self.codel_interval_ns,
            mode: codel_mode,
        };
        codel.validate()?;
        let lifo = match self.lifo {
            SG_LIFO_NEVER => LifoTrigger::Never,
            SG_LIFO_CODEL_OVERLOADED => LifoTrigger::CodelOverloaded,
            SG_LIFO_OCCUPANCY => LifoTrigger::Occupancy(self.lifo_occupancy),
            _ => return Err(field::out_of_range("lifo")),
        };
        // An unused `lifo_occupancy` is checked by the core's own rule, on a default
        // config that uses it.
        let probe = GateConfig {
            lifo: LifoTrigger::Occupancy(self.lifo_occupancy),
            ..GateConfig::default()
        };
        probe.validate(256)?;
        if self.queue_capacity == 0 || self.queue_capacity > SG_GATE_MAX_QUEUE {
            return Err(field::out_of_range("queue_capacity"));
        }
        let level = |v: u32, name: &str| {
            u8::try_from(v).ok().and_then(Priority::new).ok_or_else(|| field::out_of_range(name))
        };
        let aging = Aging {
            from: level(self.aging_from, "aging_from")?,
            to: level(self.aging_to, "aging_to")?,
            after_ns: self.aging_after_ns,
        };
        // The same for unused aging settings: checked on their own (against all 8 levels,
        // not the configured ones, which only matter once aging is on).
        let mut probe = GateConfig { aging: Some(aging), ..GateConfig::default() };
        probe.limiter.levels = 8;
        probe.validate(256)?;
        Ok(GateConfig {
            limiter,
            queue_capacity: Some(self.queue_capacity as usize),
            codel: self.codel_enabled.then_some(codel),
            lifo,
            max_wait_ns: (self.max_wait_ns != 0).then_some(self.max_wait_ns),
            aging: self.aging_enabled.then_some(aging),
            initial_service_ns: self.initial_service_ns,
            service_alpha: self.service_alpha,
            fallback_retry_after_ns: self.fallback_retry_after_ns,
        })
    }
}

/// The queue sizes C can pick: the core's queue is sized at compile time. A capacity up
/// to 256 uses the small one.
#[allow(clippy::large_enum_variant)] // one gate per object, inline so it can live in caller storage
pub enum Gates {
    /// Up to 256 waiters.
    Small(Gate<256>),
    /// Up to 4096 waiters.
    Large(Gate<4096>),
}

macro_rules! each {
    ($gates:expr, $g:ident => $e:expr) => {
        match $gates {
            Gates::Small($g) => $e,
            Gates::Large($g) => $e,
        }
    };
}

/// Limiter + bounded priority admission queue + shed switch. Thread-safe: `arrive`,
/// `release`, `cancel`, `next_wakeup`, `state` are lock-free; `poll` is single-consumer
/// (a concurrent poll returns 0 events at once and the thread inside does its work, so
/// route events by ticket: any thread may receive any waiter's grant).
pub struct sg_gate {
    _opaque: [u8; 0],
}
object!(sg_gate, Gates, 0x5347_4741_5445_0000);

mod gate_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`) and
    /// writes it into `p`, or fails having written nothing. A gate is large: writing it in
    /// place keeps copies of it off the stack, as far as the core's by-value constructor
    /// allows.
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_gate_config` for the duration of the
    /// call (the crate's contract); `p` must be writable for one `Gates`.
    pub(super) unsafe fn make_into(cfg: *const sg_gate_config, p: *mut Gates) -> Res {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_gate_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        let core = c.to_core()?;
        if c.queue_capacity <= 256 {
            let g = Gate::<256>::new(core)?;
            // SAFETY: this fn's contract: `p` is writable for one `Gates`.
            unsafe { p.write(Gates::Small(g)) };
        } else {
            let g = Gate::<4096>::new(core)?;
            // SAFETY: as above.
            unsafe { p.write(Gates::Large(g)) };
        }
        Ok(())
    }
}

/// Fills `cfg` with the defaults: the default limiter, a queue of 256, folly CoDel, LIFO while
/// CoDel says overloaded, no maximum wait, no aging, 1 s fallback hint.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_config_default(cfg: *mut sg_gate_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(default_config())))
}

/// Creates a gate on the heap; free it with `sg_gate_free`. Stack: the core builds a gate
/// by value, which needs about 1.5 MiB of stack (1 MiB with `queue_capacity` ≤ 256;
/// measured): create gates on the main thread or on a thread with 4 MiB of stack.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_new(
    cfg: *const sg_gate_config,
    gate_out: *mut *mut sg_gate,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `gate_out`.
    unsafe { new_object_in_place(gate_out, |p| gate_make::make_into(cfg, p)) }
}

/// Frees a gate made by `sg_gate_new`. NULL is fine; a handle made by `sg_gate_init` is
/// left alone (use `sg_gate_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_gate_free(gate: *mut sg_gate) {
    // SAFETY: the crate's contract for `gate`.
    unsafe { free_object(gate) }
}

/// Bytes of caller storage `sg_gate_init` needs.
#[no_mangle]
pub extern "C" fn sg_gate_size() -> usize {
    ffi_value(0, obj_size::<sg_gate>)
}

/// Alignment the storage given to `sg_gate_init` needs.
#[no_mangle]
pub extern "C" fn sg_gate_align() -> usize {
    ffi_value(0, obj_align::<sg_gate>)
}

/// Creates a gate in caller storage (the stack need of `sg_gate_new` applies) (`len` bytes at `mem`, aligned to
/// `sg_gate_align()`); on `SG_OK`, `(sg_gate *)mem` is the handle. End it with
/// `sg_gate_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_gate_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object_in_place::<sg_gate>(mem, len, |p| gate_make::make_into(cfg, p)) }
}

/// Ends a gate made by `sg_gate_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_deinit(gate: *mut sg_gate) -> sg_status {
    // SAFETY: the crate's contract for `gate`.
    unsafe { deinit_object(gate) }
}

/// An arrival's arguments, checked in this order (`sg_gate_arrive`, `sg_shared_gate_arrive`):
/// `now`, the permit and ticket outputs (NULL: `SG_NULL_ARGUMENT`), the level, and the
/// deadline (`SG_NO_DEADLINE`: none).
pub(crate) type ArriveArgs<P, T> = (u64, Out<P>, Out<T>, Priority, Option<u64>);

/// Checks an arrival's arguments (see [`ArriveArgs`]).
pub(crate) fn arrive_args<P, T>(
    now: u64,
    permit_out: *mut P,
    ticket_out: *mut T,
    level: u32,
    deadline: u64,
) -> Res<ArriveArgs<P, T>> {
    let now = crate::time::check_now(now)?;
    let (permit_out, ticket_out) = (out(permit_out)?, out(ticket_out)?);
    let level = self::level(level)?;
    Ok((now, permit_out, ticket_out, level, (deadline != SG_NO_DEADLINE).then_some(deadline)))
}

/// One arrival at `level` (`SG_LEVEL_*`) at `now`, with an absolute `deadline` (ns, same
/// clock; `SG_NO_DEADLINE` for none):
/// - `SG_OK`: admitted; `*permit_out` is filled (release it with `sg_gate_release`);
/// - `SG_QUEUED`: waiting; `*ticket_out` is filled. Call `sg_gate_poll` now and after
///   every release or wakeup; it reports the ticket granted (with a permit) or expired;
/// - `SG_REJECTED`: refused at once (`*rejection_out`, optional: `SG_REASON_SHED`,
///   `SG_REASON_QUEUE_FULL`, `SG_REASON_DEADLINE_UNMEETABLE`, with a hint).
#[no_mangle]
pub unsafe extern "C" fn sg_gate_arrive(
    gate: *mut sg_gate,
    now: u64,
    level: u32,
    deadline: u64,
    permit_out: *mut sg_permit,
    ticket_out: *mut u64,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let (now, permit_out, ticket_out, level, deadline) =
            arrive_args(now, permit_out, ticket_out, level, deadline)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| match each!(&g.inner, q => q.arrive(now, level, deadline)) {
                Arrival::Admitted(p) => {
                    issue(permit_out, g.head.id, SG_PERMIT_KIND_GATE, p);
                    Ok(SG_OK)
                }
                Arrival::Queued(t) => {
                    ticket_out.write(t.to_bits());
                    Ok(SG_QUEUED)
                }
                Arrival::Rejected(r) => Ok(rejected(rejection_out, r)),
            })
        }
    })
}

/// Ends admitted work (a permit from `sg_gate_arrive` or a grant) at `now` with `outcome`
/// (`SG_OUTCOME_*`); then poll if anyone waits. Twice is `SG_ALREADY_RELEASED`, another
/// object's permit `SG_FOREIGN_HANDLE`; neither changes anything.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_release(
    gate: *mut sg_gate,
    permit: *mut sg_permit,
    now: u64,
    outcome: u32,
) -> sg_status {
    // SAFETY: the crate's contract for `gate` and `permit` (`take`/`restore` write the
    // permit's state word through the shared borrow, which its `UnsafeCell`s allow).
    unsafe {
        release_with(gate, permit, now, outcome, |g, permit, now, outcome| {
            let raw: RawPermit = take(permit, g.head.id, SG_PERMIT_KIND_GATE)?;
            each!(&g.inner, q => q.release(raw, now, outcome)).inspect_err(|_| restore(permit))?;
            Ok(())
        })
    }
}

/// What `sg_gate_poll` reports about one queued ticket. Each ticket gets exactly one
/// event (unless cancelled): granted or expired.
#[repr(C)]
#[derive(Debug)]
pub struct sg_gate_event {
    /// `SG_EVENT_GRANTED` or `SG_EVENT_EXPIRED`.
    pub kind: u32,
    /// The ticket `sg_gate_arrive` gave.
    pub ticket: u64,
    /// `SG_EVENT_GRANTED`: the waiter's live permit (move it with `sg_permit_move` or
    /// release it from here). Otherwise zeroed.
    pub permit: sg_permit,
    /// `SG_EVENT_EXPIRED`: why the waiter was dropped. Otherwise zeroed.
    pub rejection: sg_rejection,
}

/// Hands freed slots to waiters and reports waiters dropped: writes up to `cap` events to
/// `events[0 .. n]` and `n` to `*n_out`. Call it after `SG_QUEUED`, after every release,
/// and when `sg_gate_next_wakeup` comes; call again while it fills `events`. Returns 0
/// events at once if another thread is polling (that thread does this call's work, and
/// gets its events). `events` may be NULL only when `cap` is 0.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_poll(
    gate: *mut sg_gate,
    now: u64,
    events: *mut sg_gate_event,
    cap: usize,
    n_out: *mut usize,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let n_out = out(n_out)?;
        if events.is_null() && cap > 0 {
            return Err(SG_NULL_ARGUMENT);
        }
        // SAFETY: the crate's contract for `gate`.
        let n = unsafe {
            with(gate, |g| {
                const CHUNK: usize = 32;
                let mut buf: [Option<Event>; CHUNK] = core::array::from_fn(|_| None);
                let mut n = 0;
                while n < cap {
                    let want = CHUNK.min(cap - n);
                    let k = each!(&g.inner, q => q.poll(now, &mut buf[..want]));
                    for e in buf[..k].iter_mut() {
                        let event = match e.take() {
                            Some(Event::Granted(t, p)) => sg_gate_event {
                                kind: SG_EVENT_GRANTED,
                                ticket: t.to_bits(),
                                permit: live_permit(g.head.id, SG_PERMIT_KIND_GATE, p),
                                rejection: sg_rejection::default(),
                            },
                            Some(Event::Expired(t, r)) => sg_gate_event {
                                kind: SG_EVENT_EXPIRED,
                                ticket: t.to_bits(),
                                permit: sg_permit::zeroed(),
                                rejection: r.into(),
                            },
                            None => continue,
                        };
                        // SAFETY: `events` is non-NULL (cap > 0) and, by the crate's
                        // contract, writable for `cap` events; `n < cap`. Old contents
                        // are not read.
                        events.add(n).write(event);
                        n += 1;
                    }
                    if k < want {
                        break;
                    }
                }
                Ok(n)
            })?
        };
        n_out.write(n);
        Ok(())
    })
}

/// Withdraws a queued ticket (its owner gave up). `SG_UNKNOWN_TICKET` if it already left
/// (granted, expired, evicted, cancelled), or carries this gate's id but was never
/// issued; `SG_FOREIGN_HANDLE` if it carries another id: another gate's ticket, or a
/// number no gate issued (a ticket is a plain number, so a forged one cannot be told from
/// another gate's). Neither changes anything.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_cancel(gate: *mut sg_gate, ticket: u64) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `gate`.
        unsafe { with(gate, |g| Ok(each!(&g.inner, q => q.cancel(Ticket::from_bits(ticket)))?)) }
    })
}

/// When the caller's one timer should next call `sg_gate_poll`, ns on the same clock
/// (never earlier than `now`); `SG_NEVER` when nothing waits.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_next_wakeup(
    gate: *const sg_gate,
    now: u64,
    next_wakeup_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let next_wakeup_out = out(next_wakeup_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe {
            with(gate, |o| Ok(each!(&o.inner, q => q.next_wakeup(now)).unwrap_or(SG_NEVER)))?
        };
        next_wakeup_out.write(v);
        Ok(())
    })
}

/// The brownout dimmer at `now`: `*dimmer_out` in `[0, 1]`; serve optional content
/// (recommendations, previews, ...) with probability `1 − d` — 0 serves everything, 1
/// none. It rises before the gate refuses anything (from queue occupancy and CoDel's
/// queueing delay), follows the refusals of the last second, and falls back by at most
/// 1/2 per second. Degradation order: optional features (this), then background work,
/// then normal work (the gate's own shedding). Reads the gate and changes none of its
/// decisions; wait-free. `SG_TIME_OUT_OF_RANGE` for a `now` above `SG_MAX_NOW`.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_brownout(
    gate: *const sg_gate,
    now: u64,
    dimmer_out: *mut f64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let dimmer_out = out(dimmer_out)?;
        // SAFETY: the crate's contract for `gate`.
        let d = unsafe { with(gate, |o| Ok(each!(&o.inner, q => q.brownout(now))))? };
        dimmer_out.write(d);
        Ok(())
    })
}

/// The on-call shed switch: refuse every arrival at `level` or less important at
/// once (`SG_REASON_SHED`), and expire such waiters at the next poll.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_set_shed_level(gate: *mut sg_gate, level: u32) -> sg_status {
    ffi(|| {
        let level = self::level(level)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                each!(&g.inner, q => q.set_shed_level(Some(level)));
                Ok(())
            })
        }
    })
}

/// Turns the shed switch off.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_clear_shed_level(gate: *mut sg_gate) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                each!(&g.inner, q => q.set_shed_level(None));
                Ok(())
            })
        }
    })
}

/// The shed level in force, or `SG_NO_LEVEL`.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_shed_level(
    gate: *const sg_gate,
    shed_level_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let shed_level_out = out(shed_level_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe {
            with(gate, |o| {
                Ok(each!(&o.inner, q => q.shed_level()).map_or(SG_NO_LEVEL, |p| p.index() as u32))
            })?
        };
        shed_level_out.write(v);
        Ok(())
    })
}

/// Readiness (`SG_GATE_HEALTHY` / `SG_GATE_OVERLOADED`): overloaded is not broken.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_state(gate: *const sg_gate, state_out: *mut u32) -> sg_status {
    ffi(|| {
        let state_out = out(state_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe {
            with(gate, |o| {
                Ok(match each!(&o.inner, q => q.state()) {
                    GateState::Healthy => SG_GATE_HEALTHY,
                    _ => SG_GATE_OVERLOADED,
                })
            })?
        };
        state_out.write(v);
        Ok(())
    })
}

/// Waiters at `level`.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_waiting(
    gate: *const sg_gate,
    level: u32,
    waiting_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let waiting_out = out(waiting_out)?;
        let level = self::level(level)?;
        // SAFETY: the crate's contract for `gate`.
        let n = unsafe { with(gate, |g| Ok(each!(&g.inner, q => q.waiting(level))))? };
        waiting_out.write(n);
        Ok(())
    })
}

/// All waiters.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_waiting_total(
    gate: *const sg_gate,
    waiting_total_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let waiting_total_out = out(waiting_total_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe { with(gate, |o| Ok(each!(&o.inner, q => q.waiting_total())))? };
        waiting_total_out.write(v);
        Ok(())
    })
}

/// The expected service time, ns (0 = not known yet).
#[no_mangle]
pub unsafe extern "C" fn sg_gate_service_ns(
    gate: *const sg_gate,
    service_ns_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let service_ns_out = out(service_ns_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe { with(gate, |o| Ok(each!(&o.inner, q => q.service_ns())))? };
        service_ns_out.write(v);
        Ok(())
    })
}

/// The limit in force (the gate's limiter).
#[no_mangle]
pub unsafe extern "C" fn sg_gate_limit(gate: *const sg_gate, limit_out: *mut f64) -> sg_status {
    ffi(|| {
        let limit_out = out(limit_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe { with(gate, |o| Ok(each!(&o.inner, q => q.limiter().limit())))? };
        limit_out.write(v);
        Ok(())
    })
}

/// The kill switch of the gate's limiter (an operator's override of the adaptive
/// limit): pins the limit to `limit` (finite, in
/// `[1e-6, 2^31)`; else `SG_INVALID_ARGUMENT`).
#[no_mangle]
pub unsafe extern "C" fn sg_gate_set_static_limit(gate: *mut sg_gate, limit: f64) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                each!(&g.inner, q => q.limiter().set_static_limit(Some(limit)))
                    .map_err(|_| SG_INVALID_ARGUMENT)
            })
        }
    })
}

/// Hands the gate's limit back to its algorithm.
#[no_mangle]
pub unsafe extern "C" fn sg_gate_clear_static_limit(gate: *mut sg_gate) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                each!(&g.inner, q => q.limiter().set_static_limit(None))
                    .map_err(|_| SG_INVALID_ARGUMENT)
            })
        }
    })
}

/// A snapshot of one level's CoDel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_codel_metrics {
    /// Smallest delay seen in the current interval, ns.
    pub min_delay_ns: u64,
    /// The standing-queue verdict.
    pub overloaded: bool,
    /// 0–100 load estimate.
    pub load: u32,
    /// Dequeues answered "drop".
    pub drops: u64,
    /// Intervals closed.
    pub intervals: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<CodelMetrics> for sg_codel_metrics {
    fn from(m: CodelMetrics) -> Self {
        Self {
            reserved: [0; 4],
            min_delay_ns: m.min_delay_ns,
            overloaded: m.overloaded,
            load: u32::from(m.load),
            drops: m.drops,
            intervals: m.intervals,
        }
    }
}

/// A snapshot of an `sg_gate`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_gate_metrics {
    /// `SG_GATE_HEALTHY` or `SG_GATE_OVERLOADED`.
    pub state: u32,
    /// Waiters per level.
    pub waiting_by_level: [u32; 8],
    /// All waiters.
    pub waiting: u32,
    /// The queue's bound.
    pub capacity: u32,
    /// Age of the oldest waiter, ns (0 when empty).
    pub oldest_age_ns: u64,
    /// Arrivals queued, ever.
    pub queued: u64,
    /// Waiters granted, ever.
    pub granted: u64,
    /// Waiters expired (deadline or maximum wait), ever.
    pub expired: u64,
    /// Waiters sloughed by CoDel, ever.
    pub sloughed: u64,
    /// Waiters evicted by more important arrivals, ever.
    pub evicted: u64,
    /// Waiters cancelled, ever.
    pub cancelled: u64,
    /// Arrivals and waiters refused by the shed switch, ever.
    pub shed: u64,
    /// Arrivals refused because the queue was full, ever.
    pub queue_full: u64,
    /// Arrivals refused because their deadline could not be met, ever.
    pub deadline_unmeetable: u64,
    /// Waiters moved to a less important level by aging, ever.
    pub aged: u64,
    /// FIFO→LIFO switches, ever.
    pub lifo_switches: u64,
    /// Levels dispatching LIFO now (bit `p` for level `p`).
    pub lifo_levels: u32,
    /// The shed level in force, or `SG_NO_LEVEL`.
    pub shed_level: u32,
    /// Expected service time, ns (0 = unknown).
    pub service_ns: u64,
    /// CoDel of each level.
    pub codel: [sg_codel_metrics; 8],
    /// The limiter.
    pub limiter: sg_limiter_metrics,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<&GateMetrics> for sg_gate_metrics {
    fn from(m: &GateMetrics) -> Self {
        Self {
            reserved: [0; 4],
            state: match m.state {
                GateState::Healthy => SG_GATE_HEALTHY,
                _ => SG_GATE_OVERLOADED,
            },
            waiting_by_level: m.waiting_by_level,
            waiting: m.waiting,
            capacity: m.capacity,
            oldest_age_ns: m.oldest_age_ns,
            queued: m.queued,
            granted: m.granted,
            expired: m.expired,
            sloughed: m.sloughed,
            evicted: m.evicted,
            cancelled: m.cancelled,
            shed: m.shed,
            queue_full: m.queue_full,
            deadline_unmeetable: m.deadline_unmeetable,
            aged: m.aged,
            lifo_switches: m.lifo_switches,
            lifo_levels: u32::from(m.lifo_levels),
            shed_level: m.shed_level.map_or(SG_NO_LEVEL, |p| p.index() as u32),
            service_ns: m.service_ns,
            codel: m.codel.map(Into::into),
            limiter: (&m.limiter).into(),
        }
    }
}

/// A snapshot of the gate's counters and gauges (scans the queue: O(capacity)).
#[no_mangle]
pub unsafe extern "C" fn sg_gate_metrics_get(
    gate: *const sg_gate,
    metrics_out: *mut sg_gate_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `gate`.
        let v = unsafe { with(gate, |o| Ok((&each!(&o.inner, q => q.metrics())).into()))? };
        metrics_out.write(v);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_the_core_default_with_a_256_queue() {
        let core = default_config().to_core().unwrap();
        assert_eq!(core, GateConfig { queue_capacity: Some(256), ..GateConfig::default() });
        let aged = sg_gate_config { aging_enabled: true, ..default_config() };
        assert_eq!(aged.to_core().unwrap().aging, Some(Aging::NORMAL_TO_BACKGROUND_AFTER_500_MS));
    }
}
