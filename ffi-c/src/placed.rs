//! Placement: one handle type per family, in this process or shared between processes.
//!
//! `sg_limiter`, `sg_rate_limiter`, `sg_retry_budget` and `sg_keyed` are made in this
//! process by `_new` / `_init`, or in memory shared by every process on the host by
//! `sg_<type>_open_shared` (Linux): the same handle type, which every `sg_<type>_*`
//! function takes, making the same decisions. A shared object is the core's own structure
//! in a segment created by name (a file in `/dev/shm`, race-free create-or-attach) or,
//! with a NULL name, anonymously before `fork()` (children forked afterwards share it).
//! Every process must pass `now` from `CLOCK_MONOTONIC` (`sg_clock_now_ns()`): the segment
//! stores times compared across processes.
//!
//! The permits of a shared limiter or keyed table are counted to their process, so the
//! permits of a process that dies (`kill -9`, OOM) come back exactly once: a refused
//! acquire sweeps dead processes' permits back (at most once per 100 ms across processes)
//! and `sg_<type>_reclaim` does it at once. A one-at-a-time cell (the limiter's window
//! fold, the budget's slot ring, the keyed table's top keys) that a dying process held is
//! freed once that process is proven dead.
//!
//! Progress: as the in-process objects (lock-free), plus for a shared limiter or keyed
//! table one atomic add per acquire and one CAS per release on the process's count; a
//! process's first acquire claims its slot (a bounded scan); a sweep is one bounded pass.
//! A local object pays one `match` on its placement per call.
//!
//! The gate is the exception: `sg_shared_gate` is its own type, because its queue holds
//! waiters of every process and hands them grants through per-process mailboxes that
//! `sg_shared_gate_wait` sleeps on, where `sg_gate`'s caller owns its waiters and polls.

use core::ffi::{c_char, CStr};

use surgeguard_core::rate::{RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::RetryBudget;
use surgeguard_core::Limiter;
use surgeguard_std::placement::{Place, PlaceError, Placed};

use crate::handle::{ffi, input, new_object, out, rejected, with, Object, Out, Res};
use crate::limiter::{sg_limiter, sg_limiter_config};
use crate::permit::{issue, restore, sg_permit, CorePermit};
use crate::rate::{sg_rate_limiter, sg_rate_limiter_config};
use crate::retry::budget_make::budget_config;
use crate::retry::{sg_retry_budget, sg_retry_budget_config};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};

/// The status of a placement's error.
pub(crate) fn status_of(e: PlaceError) -> sg_status {
    match e {
        PlaceError::Config(c) => c.into(),
        PlaceError::Usage(u) => u.into(),
        PlaceError::Rejected(_) => SG_REJECTED,
        #[cfg(target_os = "linux")]
        PlaceError::BadName => SG_INVALID_ARGUMENT,
        #[cfg(target_os = "linux")]
        PlaceError::Os { .. } | PlaceError::TableFull => SG_SHM_UNAVAILABLE,
        #[cfg(target_os = "linux")]
        PlaceError::Reclaimed => SG_ALREADY_RELEASED,
        // Not a segment, another version, layout, kind, config, boot or pid namespace.
        #[allow(unreachable_patterns)]
        _ => SG_SHM_REFUSED,
    }
}

/// An acquire's result written for C: the permit into `permit_out` (`SG_OK`), or the
/// refusal into the optional `rejection_out` (`SG_REJECTED`), or an error status.
#[inline]
pub(crate) fn admitted<P: CorePermit>(
    res: Result<P, PlaceError>,
    permit_out: Out<sg_permit>,
    owner: u64,
    kind: u32,
    rejection_out: *mut sg_rejection,
) -> Res<sg_status> {
    match res {
        Ok(p) => {
            issue(permit_out, owner, kind, p);
            Ok(SG_OK)
        }
        Err(PlaceError::Rejected(r)) => Ok(rejected(rejection_out, r)),
        Err(e) => Err(status_of(e)),
    }
}

/// A release's result: on a refusal the storage is live again (nothing changed), unless
/// a reclaim already gave the permit back (then it stays released).
#[inline]
pub(crate) fn released(permit: &sg_permit, res: Result<(), PlaceError>) -> Res {
    res.map_err(|e| {
        #[cfg(target_os = "linux")]
        let gone = matches!(e, PlaceError::Reclaimed);
        #[cfg(not(target_os = "linux"))]
        let gone = false;
        if !gone {
            restore(permit);
        }
        status_of(e)
    })
}

/// `name` as UTF-8, or `None` for NULL.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string readable for `'a`.
pub(crate) unsafe fn name_arg<'a>(name: *const c_char) -> Res<Option<&'a str>> {
    if name.is_null() {
        return Ok(None);
    }
    // SAFETY: this fn's contract: a non-NULL `name` is a NUL-terminated string readable
    // for `'a`.
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str().map(Some).map_err(|_| SG_INVALID_ARGUMENT)
}

/// Opens `T` where `name` says: the segment `name` (a name or a path), or anonymous
/// shared memory for NULL.
///
/// # Safety
/// As [`name_arg`].
#[cfg(target_os = "linux")]
pub(crate) unsafe fn open<T: Place>(name: *const c_char, config: T::Config) -> Res<Placed<T>> {
    use surgeguard_std::placement::Placement;
    // SAFETY: this fn's contract.
    let placement = match unsafe { name_arg(name)? } {
        Some(n) => Placement::Shared(n),
        None => Placement::Anonymous,
    };
    Placed::open(placement, config).map_err(status_of)
}

/// Removes a segment's name (`sg_<type>_unlink_shared`).
///
/// # Safety
/// As [`name_arg`].
#[cfg(target_os = "linux")]
pub(crate) unsafe fn unlink<T: Place>(name: *const c_char) -> Res {
    // SAFETY: this fn's contract.
    let name = unsafe { name_arg(name)? }.ok_or(SG_NULL_ARGUMENT)?;
    Placed::<T>::unlink(name).map_err(status_of)
}

/// `sg_<type>_created` of a placed object.
///
/// # Safety
/// The crate's contract for `handle` and `created_out`.
unsafe fn created<T, P>(handle: *const T, created_out: *mut bool) -> sg_status
where
    T: Object<Inner = Placed<P>>,
    P: Place,
{
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: this fn's contract for `handle`.
        let v = unsafe { with(handle, |o| Ok(o.inner.created()))? };
        created_out.write(v);
        Ok(())
    })
}

/// `sg_<type>_reclaim` of a placed object.
///
/// # Safety
/// The crate's contract for `handle` and `reclaimed_out`.
unsafe fn reclaim<T, P>(handle: *const T, reclaimed_out: *mut u64) -> sg_status
where
    T: Object<Inner = Placed<P>>,
    P: Place,
{
    ffi(|| {
        let reclaimed_out = out(reclaimed_out)?;
        // SAFETY: this fn's contract for `handle`.
        let v = unsafe { with(handle, |o| Ok(o.inner.reclaim()))? };
        reclaimed_out.write(v);
        Ok(())
    })
}

// ---- sg_limiter -------------------------------------------------------------------------

/// Creates the shared limiter `name` (the file `/dev/shm/surgeguard.<name>`; a name with a
/// `/` is a path) or attaches to it; NULL `name` makes an anonymous one, shared with the
/// processes this one forks afterwards. The handle is an `sg_limiter` like any other
/// (heap only: free it with `sg_limiter_free`, after releasing its permits: a permit still
/// held stays counted until the process exits and is reclaimed). `SG_SHM_REFUSED` if the
/// name holds a segment of another config, kind, layout or version (or is not one);
/// `SG_INVALID_ARGUMENT` for a bad name (empty, over 200 bytes, not `[A-Za-z0-9._-]`);
/// `SG_SHM_UNAVAILABLE` if a system call failed or every process slot (256) is taken.
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_open_shared(
    name: *const c_char,
    cfg: *const sg_limiter_config,
    limiter_out: *mut *mut sg_limiter,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `limiter_out`.
    unsafe { new_object(limiter_out, || open(name, input(cfg)?.to_core()?)) }
}

/// Removes the name of a shared limiter (processes that have it mapped keep it; a later
/// `sg_limiter_open_shared` of the name creates a new one).
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_unlink_shared(name: *const c_char) -> sg_status {
    // SAFETY: the crate's contract for `name`.
    ffi(|| unsafe { unlink::<Limiter>(name) })
}

/// Whether this handle made its limiter: true for a local one; for a shared one, false if
/// it attached to another process's segment.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_created(
    limiter: *const sg_limiter,
    created_out: *mut bool,
) -> sg_status {
    // SAFETY: the crate's contract for `limiter` and `created_out`.
    unsafe { created(limiter, created_out) }
}

/// A shared limiter: releases the permits of every attached process proven dead (exactly
/// once each) and writes how many; a local one writes 0. Call it from a pre-fork master's
/// `SIGCHLD` handling loop (not the signal handler) or a timer.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_reclaim(
    limiter: *mut sg_limiter,
    reclaimed_out: *mut u64,
) -> sg_status {
    // SAFETY: the crate's contract for `limiter` and `reclaimed_out`.
    unsafe { reclaim(limiter, reclaimed_out) }
}

// ---- sg_rate_limiter --------------------------------------------------------------------

/// Creates the shared rate limiter `name` or attaches to it; NULL `name` makes an anonymous
/// one (as `sg_limiter_open_shared`). The config is `sg_rate_limiter_config`'s with the
/// rate in `per_second` (`emission_ns` must be 0 here: `SG_CONFIG_OUT_OF_RANGE`, field
/// `emission_ns`). Free the handle with `sg_rate_limiter_free`.
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_open_shared(
    name: *const c_char,
    cfg: *const sg_rate_limiter_config,
    rate_limiter_out: *mut *mut sg_rate_limiter,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `rate_limiter_out`.
    unsafe {
        new_object(rate_limiter_out, || {
            let c = input(cfg)?;
            crate::field::reserved(&c.reserved)?;
            if c.emission_ns != 0 {
                return Err(crate::field::out_of_range("emission_ns"));
            }
            open(name, RateLimiterConfig { per_second: c.per_second, burst: c.burst })
        })
    }
}

/// Removes the name of a shared rate limiter (as `sg_limiter_unlink_shared`).
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_unlink_shared(name: *const c_char) -> sg_status {
    // SAFETY: the crate's contract for `name`.
    ffi(|| unsafe { unlink::<RateLimiter>(name) })
}

/// Whether this handle made its rate limiter (as `sg_limiter_created`).
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_created(
    rate_limiter: *const sg_rate_limiter,
    created_out: *mut bool,
) -> sg_status {
    // SAFETY: the crate's contract for `rate_limiter` and `created_out`.
    unsafe { created(rate_limiter, created_out) }
}

// ---- sg_retry_budget --------------------------------------------------------------------

/// Creates the shared retry budget `name` or attaches to it; NULL `name` makes an
/// anonymous one (as `sg_limiter_open_shared`). Free the handle with
/// `sg_retry_budget_free`.
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_open_shared(
    name: *const c_char,
    cfg: *const sg_retry_budget_config,
    retry_budget_out: *mut *mut sg_retry_budget,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `retry_budget_out`.
    unsafe { new_object(retry_budget_out, || open(name, budget_config(cfg)?)) }
}

/// Removes the name of a shared retry budget (as `sg_limiter_unlink_shared`).
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_unlink_shared(name: *const c_char) -> sg_status {
    // SAFETY: the crate's contract for `name`.
    ffi(|| unsafe { unlink::<RetryBudget>(name) })
}

/// Whether this handle made its retry budget (as `sg_limiter_created`).
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_created(
    retry_budget: *const sg_retry_budget,
    created_out: *mut bool,
) -> sg_status {
    // SAFETY: the crate's contract for `retry_budget` and `created_out`.
    unsafe { created(retry_budget, created_out) }
}

/// A shared budget: frees its slot ring if a process proven dead held it (killed in the
/// middle of a fold) and writes how many cells were freed (0 or 1); a local one writes 0.
/// Operations do this by themselves when they meet such a cell (at most every 10 ms per
/// process); this does it at once.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_reclaim(
    retry_budget: *mut sg_retry_budget,
    freed_out: *mut u64,
) -> sg_status {
    // SAFETY: the crate's contract for `retry_budget` and `freed_out`.
    unsafe { reclaim(retry_budget, freed_out) }
}
