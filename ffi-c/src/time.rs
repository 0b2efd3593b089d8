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

/// A monotonic clock for the `now` arguments, if the program has none of its own:
/// nanoseconds since an arbitrary origin fixed at the first call in this process (so
/// never 0 and never decreasing). Any monotonic nanosecond clock works as well
/// (`clock_gettime(CLOCK_MONOTONIC)`); do not mix two clocks on one object.
#[no_mangle]
pub extern "C" fn sg_clock_now_ns() -> u64 {
    ffi_value(1, || {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        let ns = origin.elapsed().as_nanos();
        (ns.min(u128::from(u64::MAX - 1)) as u64).saturating_add(1)
    })
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
