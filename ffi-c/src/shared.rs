//! `sg_shared_limiter`: one concurrency limit across processes (Linux): the core's
//! `Limiter` in a shared memory segment, created by name (a file in `/dev/shm`, race-free
//! create-or-attach) or anonymously before `fork()` (children forked afterwards share
//! it). Permits of a process that dies (`kill -9`, OOM) are reclaimed: a refused acquire
//! sweeps the dead processes' permits back (at most once per 100 ms across processes),
//! and `sg_shared_limiter_reclaim` does it at once. Every process must pass `now` from
//! `CLOCK_MONOTONIC` (`sg_clock_now_ns()`): the segment stores times compared across
//! processes.
//!
//! Progress: acquire and release are lock-free (the core limiter's CAS loops, plus one
//! atomic add and one CAS on the process's slot); a process's first acquire claims its
//! slot (a bounded scan); a sweep is one bounded pass over the process table.

use core::cell::UnsafeCell;
use core::ffi::{c_char, CStr};
use core::mem::MaybeUninit;

use surgeguard_std::shm::{SharedLimiter, SharedRawPermit, ShmError};

use crate::handle::{
    ffi, ffi_status, free_object, input, new_object, object, out, rejected, with, Res,
};
use crate::limiter::sg_limiter_config;
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::storage::{self, Marks};
use crate::vocab::{level, outcome};

/// A limiter in memory shared between processes (opaque; heap only).
pub struct sg_shared_limiter {
    _opaque: [u8; 0],
}
object!(sg_shared_limiter, SharedLimiter, 0x5347_5348_4C49_4D00);

/// Caller storage for one admission of an `sg_shared_limiter`. Opaque: fill it only
/// through the library. As `sg_permit`: released once (a second release says
/// `SG_ALREADY_RELEASED`, a release to another shared limiter `SG_FOREIGN_HANDLE`, zeroed
/// or garbage storage `SG_INVALID_HANDLE`); do not copy a live one.
// (Not in the doc comment, which cbindgen copies into the header.) C sees
// `uint64_t opaque[6]`, as for `sg_permit`; the words are a state word, the issuing
// handle's id and the shared permit (32 bytes) by value.
#[repr(C)]
#[derive(Debug)]
pub struct sg_shared_permit {
    /// Opaque.
    pub opaque: [UnsafeCell<MaybeUninit<u64>>; 6],
}

/// The state words of an `sg_shared_permit` ("SGSHPLIV", "SGSHPREL"): see `storage`.
const MARKS: Marks = Marks { live: 0x5347_5348_504C_4956, released: 0x5347_5348_5052_454C };

pub(crate) fn status_of(e: ShmError) -> sg_status {
    match e {
        ShmError::BadName => SG_INVALID_ARGUMENT,
        ShmError::Os { .. } | ShmError::TableFull => SG_SHM_UNAVAILABLE,
        ShmError::Config(c) => c.into(),
        ShmError::Usage(u) => u.into(),
        ShmError::Reclaimed => SG_ALREADY_RELEASED,
        ShmError::Rejected(_) => SG_REJECTED,
        // Not a segment, another version, layout, kind, config, boot or pid namespace.
        _ => SG_SHM_REFUSED,
    }
}

/// `name` as UTF-8, or `None` for NULL.
pub(crate) unsafe fn name_arg<'a>(name: *const c_char) -> Res<Option<&'a str>> {
    if name.is_null() {
        return Ok(None);
    }
    // SAFETY: the crate's contract: a non-NULL `name` is a NUL-terminated string readable
    // for the call.
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str().map(Some).map_err(|_| SG_INVALID_ARGUMENT)
}

/// Creates the shared limiter `name` (the file `/dev/shm/surgeguard.<name>`; a name with
/// a `/` is a path) or attaches to it; NULL `name` makes an anonymous one, shared with
/// the processes this one forks afterwards. `SG_SHM_REFUSED` if the name holds a segment
/// of another config, kind, layout or version (or is not one); `SG_INVALID_ARGUMENT` for
/// a bad name (empty, over 200 bytes, not `[A-Za-z0-9._-]`); `SG_SHM_UNAVAILABLE` if a
/// system call failed. Free the handle with `sg_shared_limiter_free` (the segment stays
/// while any process maps it, and a named one until `sg_shared_limiter_unlink`).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_open(
    name: *const c_char,
    cfg: *const sg_limiter_config,
    limiter_out: *mut *mut sg_shared_limiter,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `limiter_out`.
    unsafe {
        new_object(limiter_out, || {
            let cfg = input(cfg)?.to_core()?;
            match name_arg(name)? {
                Some(n) => SharedLimiter::open(n, cfg),
                None => SharedLimiter::anonymous(cfg),
            }
            .map_err(status_of)
        })
    }
}

/// Detaches this process and frees the handle (its permits must be released first: a
/// permit still held stays counted until the process exits and is reclaimed). NULL is a
/// no-op.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_free(limiter: *mut sg_shared_limiter) {
    // SAFETY: the crate's contract for `limiter`.
    unsafe { free_object(limiter) }
}

/// Removes the name (processes that have it mapped keep their segment).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_unlink(name: *const c_char) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `name`.
        let name = unsafe { name_arg(name)? }.ok_or(SG_NULL_ARGUMENT)?;
        SharedLimiter::unlink(name).map_err(status_of)
    })
}

/// Whether this handle created the segment (false: it attached to another process's).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_created(
    limiter: *const sg_shared_limiter,
    created_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                created_out.write(l.inner.created());
                Ok(())
            })
        }
    })
}

/// Admits one unit of work at `level` now, counted to this process, into `permit_out`;
/// or `SG_REJECTED` (with the reason and retry-after in `rejection_out`, if not NULL).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_try_acquire(
    limiter: *mut sg_shared_limiter,
    now: u64,
    level: u32,
    permit_out: *mut sg_shared_permit,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        let permit_out = out(permit_out)?;
        let level = self::level(level)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| match l.inner.try_acquire_raw(now, level) {
                Ok(p) => {
                    storage::issue(permit_out, &MARKS, l.head.id, p);
                    Ok(SG_OK)
                }
                Err(ShmError::Rejected(r)) => Ok(rejected(rejection_out, r)),
                Err(e) => Err(status_of(e)),
            })
        }
    })
}

/// Ends a permit of this limiter with `outcome` (`SG_OUTCOME_*`).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_release(
    limiter: *mut sg_shared_limiter,
    permit: *mut sg_shared_permit,
    now: u64,
    outcome: u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `permit` (the state word is updated through
        // this shared borrow, which the `UnsafeCell`s allow).
        let permit = unsafe { input(permit.cast_const())? };
        let outcome = self::outcome(outcome)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                let raw = storage::take::<SharedRawPermit>(&permit.opaque, &MARKS, l.head.id)?;
                l.inner.release_raw(raw, now, outcome).map_err(status_of)
            })
        }
    })
}

/// Releases the permits of every attached process proven dead (exactly once each);
/// writes how many. Call it from a pre-fork master's `SIGCHLD` handling loop (not the
/// signal handler) or a timer.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_reclaim(
    limiter: *mut sg_shared_limiter,
    reclaimed_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let reclaimed_out = out(reclaimed_out)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                reclaimed_out.write(l.inner.reclaim());
                Ok(())
            })
        }
    })
}

/// Requests in flight across all processes, and the limit in force.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_limiter_inflight(
    limiter: *const sg_shared_limiter,
    inflight_out: *mut u32,
    limit_out: *mut f64,
) -> sg_status {
    ffi(|| {
        let inflight_out = out(inflight_out)?;
        let limit_out = out(limit_out)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                let lim = l.inner.limiter();
                inflight_out.write(lim.inflight());
                limit_out.write(lim.limit());
                Ok(())
            })
        }
    })
}
