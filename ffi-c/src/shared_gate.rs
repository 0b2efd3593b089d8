//! `sg_shared_gate`: one gate (limiter, priority queue, CoDel, shed switch) across
//! processes (Linux). Created by name (a file in `/dev/shm`) or anonymously before
//! `fork()`, like `sg_limiter_open_shared`. A release in one process grants a waiter queued by
//! another: each process has a mailbox in the segment (a futex word and its tickets'
//! states), and `sg_shared_gate_wait` sleeps on it (`FUTEX_WAIT`, shared) until the grant,
//! an expiry or the timeout. The permits and queued tickets of a process that dies
//! (`kill -9`) are reclaimed: its tickets withdrawn, its permits (granted ones too)
//! released once each; waiters sweep at most every 100 ms, and
//! `sg_shared_gate_reclaim` does it at once. Every process passes `now` from
//! `CLOCK_MONOTONIC` (`sg_clock_now_ns()`).
//!
//! It is a type of its own (not an `sg_gate` placed in shared memory, as
//! `sg_limiter_open_shared` places an `sg_limiter`) because its waiting differs: an
//! `sg_gate`'s caller owns its waiters and polls, while here the queue holds waiters of
//! every process and the library delivers grants to them and sleeps on them.
//!
//! Progress: arrivals, dispatch and cancels take a lock in the segment for one gate
//! operation (a dead holder is taken over after 10 ms); releases are the gate's, then a
//! dispatch under the lock. A process holds at most 64 tickets at once (an arrival beyond
//! that is decided without queueing).

use core::cell::UnsafeCell;
use core::ffi::c_char;
use core::mem::MaybeUninit;

use surgeguard_std::shm::{
    SharedArrival, SharedGate, SharedGatePermit, SharedOutcome, SharedTicket,
};

use crate::gate::sg_gate_config;
use crate::handle::release_with;
use crate::handle::{ffi, ffi_status, free_object, input, new_object, object, out, rejected, with};
use crate::placed::{name_arg, status_of};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::storage::{self, Marks};

/// The largest `sg_gate_config.queue_capacity` of a shared gate.
pub const SG_SHARED_GATE_MAX_QUEUE: u32 = 256;

/// A gate in memory shared between processes (opaque; heap only).
pub struct sg_shared_gate {
    _opaque: [u8; 0],
}
object!(sg_shared_gate, SharedGate<256>, 0x5347_5348_4741_5445);

/// Caller storage for one admission of an `sg_shared_gate` (from `sg_shared_gate_arrive`
/// or a grant). Opaque: fill it only through the library. Released once (a second release
/// says `SG_ALREADY_RELEASED`, a release to another shared gate `SG_FOREIGN_HANDLE`,
/// zeroed or garbage storage `SG_INVALID_HANDLE`); do not copy a live one.
#[repr(C)]
#[derive(Debug)]
pub struct sg_shared_gate_permit {
    /// Opaque.
    pub opaque: [UnsafeCell<MaybeUninit<u64>>; 6],
}

/// A queued waiter of an `sg_shared_gate`, owned by the process that queued it. Plain
/// words, copyable; any contents are accepted by the functions that take one (what is not
/// a live ticket of this process is refused with `SG_UNKNOWN_TICKET` or
/// `SG_FOREIGN_HANDLE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sg_shared_ticket {
    /// Opaque.
    pub opaque: [u64; 4],
}

/// The state words of an `sg_shared_gate_permit` ("SGSGPLIV", "SGSGPREL"): see `storage`.
const MARKS: Marks = Marks { live: 0x5347_5347_504C_4956, released: 0x5347_5347_5052_454C };

fn ticket_of(t: &sg_shared_ticket) -> SharedTicket {
    SharedTicket::from_words([t.opaque[0], t.opaque[1], t.opaque[2]])
}

/// Creates the shared gate `name` (the file `/dev/shm/surgeguard.<name>`; a name with a
/// `/` is a path) or attaches to it; NULL `name` makes an anonymous one, shared with the
/// processes this one forks afterwards. `cfg.queue_capacity` is at most
/// `SG_SHARED_GATE_MAX_QUEUE`. `SG_SHM_REFUSED` if the name holds a segment of another
/// config, kind, layout or version (or is not one); `SG_INVALID_ARGUMENT` for a bad name;
/// `SG_SHM_UNAVAILABLE` if a system call failed. The segment is about 560 KB (mailboxes
/// for 256 processes).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_open(
    name: *const c_char,
    cfg: *const sg_gate_config,
    gate_out: *mut *mut sg_shared_gate,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `gate_out`.
    unsafe {
        new_object(gate_out, || {
            let c = input(cfg)?;
            if c.queue_capacity > SG_SHARED_GATE_MAX_QUEUE {
                return Err(crate::field::out_of_range("queue_capacity"));
            }
            let cfg = c.to_core()?;
            match name_arg(name)? {
                Some(n) => SharedGate::<256>::open(n, cfg),
                None => SharedGate::<256>::anonymous(cfg),
            }
            .map_err(status_of)
        })
    }
}

/// Detaches this process and frees the handle (release its permits and take or cancel
/// its tickets first: otherwise its slot stays taken until the process exits and is
/// reclaimed). NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_free(gate: *mut sg_shared_gate) {
    // SAFETY: the crate's contract for `gate`.
    unsafe { free_object(gate) }
}

/// Removes the name (processes that have it mapped keep their segment).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_unlink(name: *const c_char) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `name`.
        let name = unsafe { name_arg(name)? }.ok_or(SG_NULL_ARGUMENT)?;
        SharedGate::<256>::unlink(name).map_err(status_of)
    })
}

/// Whether this handle created the segment (false: it attached to another process's).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_created(
    gate: *const sg_shared_gate,
    created_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                created_out.write(g.inner.created());
                Ok(())
            })
        }
    })
}

/// One arrival at `level` at `now` with an absolute `deadline` (`SG_NO_DEADLINE`: none),
/// as `sg_gate_arrive`: `SG_OK` admitted (`*permit_out`), `SG_QUEUED` (`*ticket_out`:
/// wait for it with `sg_shared_gate_wait`), `SG_REJECTED` (`*rejection_out`, optional).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_arrive(
    gate: *mut sg_shared_gate,
    now: u64,
    level: u32,
    deadline: u64,
    permit_out: *mut sg_shared_gate_permit,
    ticket_out: *mut sg_shared_ticket,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let (now, permit_out, ticket_out, level, deadline) =
            crate::gate::arrive_args(now, permit_out, ticket_out, level, deadline)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| match g.inner.arrive(now, level, deadline).map_err(status_of)? {
                SharedArrival::Admitted(p) => {
                    storage::issue(permit_out, &MARKS, g.head.id, p.into_words());
                    Ok(SG_OK)
                }
                SharedArrival::Queued(t) => {
                    let w = t.to_words();
                    ticket_out.write(sg_shared_ticket { opaque: [w[0], w[1], w[2], 0] });
                    Ok(SG_QUEUED)
                }
                SharedArrival::Rejected(r) => Ok(rejected(rejection_out, r)),
            })
        }
    })
}

/// Waits up to `timeout_ns` (0: only looks) for a ticket this process queued: `SG_OK`
/// granted (`*permit_out`), `SG_REJECTED` dropped from the queue (`*rejection_out`,
/// optional: expired, sloughed, evicted, shed), `SG_QUEUED` still waiting (nothing
/// written). An outcome is given once: then the ticket is `SG_UNKNOWN_TICKET`. While it
/// waits it polls the gate at its wakeups and reclaims dead processes (at most every
/// 100 ms across processes).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_wait(
    gate: *mut sg_shared_gate,
    ticket: *const sg_shared_ticket,
    timeout_ns: u64,
    permit_out: *mut sg_shared_gate_permit,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        // SAFETY: the crate's contract for `ticket`.
        let t = ticket_of(unsafe { input(ticket)? });
        let permit_out = out(permit_out)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                let o = if timeout_ns == 0 {
                    g.inner.outcome(&t)
                } else {
                    g.inner.wait(&t, timeout_ns)
                };
                match o.map_err(status_of)? {
                    None => Ok(SG_QUEUED),
                    Some(SharedOutcome::Granted(p)) => {
                        storage::issue(permit_out, &MARKS, g.head.id, p.into_words());
                        Ok(SG_OK)
                    }
                    Some(SharedOutcome::Expired(r)) => Ok(rejected(rejection_out, r)),
                }
            })
        }
    })
}

/// Withdraws a ticket that still waits (`SG_OK`). `SG_UNKNOWN_TICKET` if it was decided
/// first (take its outcome with `sg_shared_gate_wait`, timeout 0), was taken already or
/// is not a ticket; `SG_FOREIGN_HANDLE` for another process's or gate's ticket.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_cancel(
    gate: *mut sg_shared_gate,
    ticket: *const sg_shared_ticket,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `ticket`.
        let t = ticket_of(unsafe { input(ticket)? });
        // SAFETY: the crate's contract for `gate`.
        unsafe { with(gate, |g| g.inner.cancel_if_waiting(&t).map_err(status_of)) }
    })
}

/// Ends a permit of this gate with `outcome` (`SG_OUTCOME_*`), then hands the freed slot
/// to a waiter of any process.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_release(
    gate: *mut sg_shared_gate,
    permit: *mut sg_shared_gate_permit,
    now: u64,
    outcome: u32,
) -> sg_status {
    // SAFETY: the crate's contract for `gate` and `permit` (its state word changes through
    // the `UnsafeCell`s).
    unsafe {
        release_with(gate, permit, now, outcome, |g, permit, now, outcome| {
            let words = storage::take(&permit.opaque, &MARKS, g.head.id)?;
            g.inner.release(SharedGatePermit::from_words(words), now, outcome).map_err(status_of)
        })
    }
}

/// Runs the gate's dispatch at `now` (grants, expiries) and delivers each outcome to the
/// process that queued it; writes how many. Releases and arrivals do it already; a
/// process with no thread in `sg_shared_gate_wait` calls it at the gate's wakeups.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_poll(
    gate: *mut sg_shared_gate,
    now: u64,
    routed_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let routed_out = out(routed_out)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                let n = g.inner.poll(now).map_err(status_of)?;
                routed_out.write(n as u64);
                Ok(())
            })
        }
    })
}

/// Reclaims every attached process proven dead (its tickets withdrawn, its permits
/// released once each); writes how many permits. Call it from a pre-fork master after
/// `waitpid` (not in the signal handler) or a timer.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_reclaim(
    gate: *mut sg_shared_gate,
    reclaimed_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let reclaimed_out = out(reclaimed_out)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                reclaimed_out.write(g.inner.reclaim());
                Ok(())
            })
        }
    })
}

/// Requests in flight and waiting across all processes, and the limit in force.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_gate_inflight(
    gate: *const sg_shared_gate,
    inflight_out: *mut u32,
    waiting_out: *mut u32,
    limit_out: *mut f64,
) -> sg_status {
    ffi(|| {
        let inflight_out = out(inflight_out)?;
        let waiting_out = out(waiting_out)?;
        let limit_out = out(limit_out)?;
        // SAFETY: the crate's contract for `gate`.
        unsafe {
            with(gate, |g| {
                let gate = g.inner.gate();
                inflight_out.write(gate.limiter().inflight());
                waiting_out.write(gate.waiting_total());
                limit_out.write(gate.limiter().limit());
                Ok(())
            })
        }
    })
}
