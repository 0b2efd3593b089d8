//! Time: `uint64_t` nanoseconds everywhere, on a monotonic clock the caller chooses.

use std::sync::OnceLock;
use std::time::Instant;

use crate::handle::{ffi, ffi_value, out};
use crate::status::sg_status::{self, *};

/// A duration or time that never comes: "infinite", "not draining", "never conforms"
/// (`UINT64_MAX`).
pub const SG_NEVER: u64 = u64::MAX;

/// The largest `now` any function accepts (2^62 ns, about 146 years from the clock's
/// origin). A larger `now` is a clock bug or a corrupted value: it is refused with
/// `SG_TIME_OUT_OF_RANGE` and changes nothing (it would otherwise move a structure's clock
/// beyond any later real time).
pub const SG_MAX_NOW: u64 = 4_611_686_018_427_387_904u64;
const _: () = assert!(SG_MAX_NOW == surgeguard_core::time::MAX_NOW);

/// Checks a `now` argument: above [`SG_MAX_NOW`] is `SG_TIME_OUT_OF_RANGE`.
pub(crate) fn check_now(now: u64) -> Result<u64, sg_status> {
    surgeguard_core::time::check_now(now).map_err(Into::into)
}

/// Nanoseconds per millisecond.
pub const SG_MS: u64 = 1_000_000u64;
/// Nanoseconds per second.
pub const SG_SEC: u64 = 1_000_000_000u64;

/// A monotonic clock for the `now` arguments, if the program has none of its own: raw
/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds (time since boot), so the same origin in
/// every process and every surgeguard binding (a timestamp stored in memory shared between
/// processes means the same to each). Never 0, never above `SG_MAX_NOW`, never decreasing.
/// Where there is no `CLOCK_MONOTONIC` (not unix), an origin fixed at the first call in the
/// process. Do not mix two clocks on one object.
#[no_mangle]
pub extern "C" fn sg_clock_now_ns() -> u64 {
    ffi_value(1, monotonic_ns)
}

/// Raw `CLOCK_MONOTONIC` ns, clamped to `[1, SG_MAX_NOW]`.
#[cfg(unix)]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the whole call; CLOCK_MONOTONIC is
    // supported on every unix target Rust supports (std's `Instant` reads it too), and the
    // call writes nothing else.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return fallback_ns();
    }
    let ns = (ts.tv_sec as u64).saturating_mul(SG_SEC).saturating_add(ts.tv_nsec as u64);
    ns.clamp(1, SG_MAX_NOW)
}

#[cfg(not(unix))]
fn monotonic_ns() -> u64 {
    fallback_ns()
}

/// An `Instant` origin fixed at the first call in this process (only where
/// `CLOCK_MONOTONIC` cannot be read).
#[cold]
fn fallback_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    (origin.elapsed().as_nanos().min(u128::from(SG_MAX_NOW - 1)) as u64) + 1
}

/// Converts seconds (e.g. from a config file) to nanoseconds, refusing NaN, infinite,
/// negative and out-of-range values with `SG_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn sg_secs_to_ns(secs: f64, ns_out: *mut u64) -> sg_status {
    ffi(|| {
        let ns_out = out(ns_out)?;
        let ns = surgeguard_core::time::secs_to_nanos(secs).ok_or(SG_INVALID_ARGUMENT)?;
        ns_out.write(ns);
        Ok(())
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Raw `CLOCK_MONOTONIC`, read directly.
    fn raw() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid, writable timespec for the whole call.
        assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }, 0);
        ts.tv_sec as u64 * SG_SEC + ts.tv_nsec as u64
    }

    #[test]
    fn the_clock_is_raw_clock_monotonic_not_a_per_process_origin() {
        for _ in 0..100 {
            let before = raw();
            let ours = sg_clock_now_ns();
            let after = raw();
            assert!(before <= ours && ours <= after, "{before} <= {ours} <= {after}");
        }
    }
}
