//! One limit across processes (`cluster`, PM2) and worker threads: the core's `Limiter`,
//! `RateLimiter` and `RetryBudget` placed in shared memory by the `surgeguard` crate's
//! `shm` module (Linux), behind the same handles and fast paths as the in-process ones.
//!
//! A shared object is opened by name (`/dev/shm/surgeguard.<name>`, or a path if the name
//! has a `/`): the first opener creates it, the others attach, race-free. Node has no
//! `fork()` without `exec` (`cluster` spawns new processes), so there is no anonymous form.
//! Each worker thread's addon instance maps the segment on its own and claims its own
//! process-table slot, so threads of one process share a name exactly as processes do.
//!
//! Errors, as the facade maps them (`err.code`): a bad name is a `RangeError`
//! `SG_INVALID_ARG`; a segment of another config, kind, layout or version (or not a
//! segment) is `SG_SHM_REFUSED`; a failed system call or a full process table is
//! `SG_SHM_UNAVAILABLE`. A refused open creates nothing and changes nothing.

use std::ops::Deref;

use napi::{Error, Result, Status};
use surgeguard_core::{Limiter, Outcome, Priority, RawPermit, Rejected};

#[cfg(target_os = "linux")]
use surgeguard::shm::{SharedLimiter, SharedRawPermit, ShmError};

/// A core object owned by its JS object, or one in shared memory; either way the methods
/// reach the same core type through `Deref`.
pub enum Placed<T: 'static> {
    /// In this thread's heap.
    Local(T),
    /// In a shared segment (the box owns the mapping).
    #[cfg(target_os = "linux")]
    Shared(Box<dyn Deref<Target = T>>),
}

impl<T> Deref for Placed<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            Placed::Local(t) => t,
            #[cfg(target_os = "linux")]
            Placed::Shared(s) => s,
        }
    }
}

impl<T> Placed<T> {
    /// Whether it lives in shared memory.
    pub fn is_shared(&self) -> bool {
        !matches!(self, Placed::Local(_))
    }
}

/// The limiter behind a `Limiter` handle: in-process, or shared (permits counted to this
/// process so a dead process's come back).
// The in-process limiter is large (about 22 KB) and stays inline: the enum already lives in
// the handle's one `Rc` allocation, and a box would add a pointer chase to every acquire.
#[allow(clippy::large_enum_variant)]
pub enum LimiterCore {
    /// In this thread's heap.
    Local(Limiter),
    /// In a shared segment.
    #[cfg(target_os = "linux")]
    Shared(SharedLimiter),
}

/// A permit of a [`LimiterCore`].
pub enum CorePermit {
    /// Of an in-process limiter.
    Local(RawPermit),
    /// Of a shared limiter.
    #[cfg(target_os = "linux")]
    Shared(SharedRawPermit),
}

/// Why a limiter acquire did not admit.
pub enum AcquireError {
    /// Refused (why, when to retry).
    Rejected(Rejected),
    /// The shared segment's process table is full of live processes.
    TableFull,
}

/// Why a release was refused: not a live permit of this object.
pub enum ReleaseError {
    /// Already given back (a reclaim released it).
    AlreadyReleased,
    /// Another object's permit (or a bad time).
    Foreign,
}

impl Deref for LimiterCore {
    type Target = Limiter;
    #[inline]
    fn deref(&self) -> &Limiter {
        match self {
            LimiterCore::Local(l) => l,
            #[cfg(target_os = "linux")]
            LimiterCore::Shared(s) => s.limiter(),
        }
    }
}

impl LimiterCore {
    /// Admits one unit at `level` (counted to this process when shared).
    #[inline]
    pub fn acquire(
        &self,
        now: u64,
        level: Priority,
    ) -> std::result::Result<CorePermit, AcquireError> {
        match self {
            LimiterCore::Local(l) => {
                l.try_acquire_raw(now, level).map(CorePermit::Local).map_err(AcquireError::Rejected)
            }
            #[cfg(target_os = "linux")]
            LimiterCore::Shared(s) => match s.try_acquire_raw(now, level) {
                Ok(p) => Ok(CorePermit::Shared(p)),
                Err(ShmError::Rejected(r)) => Err(AcquireError::Rejected(r)),
                Err(_) => Err(AcquireError::TableFull),
            },
        }
    }

    /// Ends a permit of this limiter.
    #[inline]
    pub fn release(
        &self,
        permit: CorePermit,
        now: u64,
        outcome: Outcome,
    ) -> std::result::Result<(), ReleaseError> {
        match (self, permit) {
            (LimiterCore::Local(l), CorePermit::Local(p)) => {
                l.release_raw(p, now, outcome).map_err(|_| ReleaseError::Foreign)
            }
            #[cfg(target_os = "linux")]
            (LimiterCore::Shared(s), CorePermit::Shared(p)) => match s.release_raw(p, now, outcome)
            {
                Ok(()) => Ok(()),
                Err(ShmError::Reclaimed) => Err(ReleaseError::AlreadyReleased),
                Err(_) => Err(ReleaseError::Foreign),
            },
            // A permit of the other kind cannot reach here (the slab is per object); it is
            // consumed without touching either limiter.
            #[cfg(target_os = "linux")]
            (_, p) => {
                std::mem::forget(p);
                Err(ReleaseError::Foreign)
            }
        }
    }

    /// Whether it lives in shared memory.
    pub fn is_shared(&self) -> bool {
        !matches!(self, LimiterCore::Local(_))
    }
}

/// A shared-memory error as a N-API error the facade maps (`SG_*` prefix, or `InvalidArg`
/// for a bad name).
#[cfg(target_os = "linux")]
pub fn shm_err(what: &str, e: ShmError) -> Error {
    match e {
        ShmError::BadName => Error::new(
            Status::InvalidArg,
            "name must be 1 to 200 characters of [A-Za-z0-9._-], or a path containing '/'",
        ),
        ShmError::Config(c) => crate::convert::config_err(what, c),
        ShmError::Os { .. } | ShmError::TableFull => {
            Error::new(Status::GenericFailure, format!("SG_SHM_UNAVAILABLE: {what}: {e}"))
        }
        ShmError::Usage(u) => crate::convert::usage_err(u),
        _ => Error::new(Status::GenericFailure, format!("SG_SHM_REFUSED: {what}: {e}")),
    }
}

/// Shared memory is Linux-only: elsewhere every shared constructor refuses.
#[cfg(not(target_os = "linux"))]
pub fn unsupported(what: &str) -> Error {
    Error::new(
        Status::GenericFailure,
        format!("SG_SHM_UNAVAILABLE: {what}: shared memory objects need Linux"),
    )
}

/// Removes the name of a shared object (processes attached keep their segment); whether
/// it existed. Bare names only (`/dev/shm/surgeguard.<name>`): a path could name any file,
/// so path-named segments are removed with `fs.unlinkSync` by whoever chose the path.
#[napi_derive::napi]
pub fn unlink_shared(name: String) -> Result<bool> {
    if name.contains('/') {
        return Err(Error::new(
            Status::InvalidArg,
            "unlinkShared takes a name, not a path (remove a segment at a path with fs.unlinkSync)",
        ));
    }
    #[cfg(target_os = "linux")]
    {
        match SharedLimiter::unlink(&name) {
            Ok(()) => Ok(true),
            Err(ShmError::Os { errno, .. }) if errno == libc::ENOENT => Ok(false),
            Err(e) => Err(shm_err("unlinkShared", e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        Err(unsupported("unlinkShared"))
    }
}
