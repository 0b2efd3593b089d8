//! One limit across processes (`cluster`, PM2) and worker threads: each family's one
//! native type (`NativeLimiter`, `NativeRateLimiter`, `NativeRetryBudget`,
//! `NativeKeyedLimits`) holds the `surgeguard` crate's `placement::Placed<T>`, the core
//! object in this thread's heap or the same object in shared memory (Linux), behind the
//! same handle and fast path either way.
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

use napi::{Error, Result, Status};
use surgeguard::placement::{Place, PlaceError, Placed, Placement};

/// A placement error as a N-API error the facade maps (`SG_*` prefix, or `InvalidArg`
/// for a bad name; `what` names the class in config errors).
pub fn place_err(what: &str, e: PlaceError) -> Error {
    match e {
        PlaceError::Config(c) => crate::convert::config_err(what, c),
        PlaceError::Usage(u) => crate::convert::usage_err(u),
        #[cfg(target_os = "linux")]
        PlaceError::BadName => Error::new(
            Status::InvalidArg,
            "name must be 1 to 200 characters of [A-Za-z0-9._-], or a path containing '/'",
        ),
        #[cfg(target_os = "linux")]
        PlaceError::Os { .. } | PlaceError::TableFull => {
            Error::new(Status::GenericFailure, format!("SG_SHM_UNAVAILABLE: {what}: {e}"))
        }
        // Not a segment, another version, layout, kind or config (or, never from an
        // open, a refusal).
        #[cfg(target_os = "linux")]
        _ => Error::new(Status::GenericFailure, format!("SG_SHM_REFUSED: {what}: {e}")),
        #[cfg(not(target_os = "linux"))]
        _ => Error::new(Status::GenericFailure, format!("SG_SHM_REFUSED: {what}: {e:?}")),
    }
}

/// Builds a `T` in this thread's heap (`name` `None`) or in the shared segment `name`
/// (created, or attached to if it exists with the same config); `what` names the class
/// in errors. Every family's constructor and `openShared` factory come here.
pub fn open<T: Place>(what: &str, name: Option<&str>, config: T::Config) -> Result<Placed<T>> {
    let placement = match name {
        None => Placement::Local,
        #[cfg(target_os = "linux")]
        Some(n) => Placement::Shared(n),
        #[cfg(not(target_os = "linux"))]
        Some(_) => return Err(unsupported(&format!("{what}.shared"))),
    };
    Placed::open(placement, config).map_err(|e| place_err(what, e))
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
        match Placed::<surgeguard_core::Limiter>::unlink(&name) {
            Ok(()) => Ok(true),
            Err(PlaceError::Os { errno, .. }) if errno == libc::ENOENT => Ok(false),
            Err(e) => Err(place_err("unlinkShared", e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        Err(unsupported("unlinkShared"))
    }
}
