//! The one clock of the binding: monotonic nanoseconds since the module first asked.
//!
//! The core never reads a clock (DESIGN.md §2); the binding does, so that the common path
//! needs no time argument and no BigInt crossing. Callers can inject `nowNs` instead.

use std::sync::OnceLock;
use std::time::Instant;

use napi::bindgen_prelude::*;
use napi_derive::napi;

static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Offset added to the elapsed time so the clock never reads 0 (some structures keep 0 as
/// "never") and injected test times near 0 stay distinguishable from real ones.
const OFFSET_NS: u64 = 1_000_000_000;

/// Nanoseconds on the process-wide monotonic clock (`std::time::Instant`).
#[inline]
pub fn now_ns() -> u64 {
    let origin = ORIGIN.get_or_init(Instant::now);
    origin.elapsed().as_nanos() as u64 + OFFSET_NS
}

/// The binding's clock as a BigInt of nanoseconds: what every call uses when no `nowNs`
/// is given.
#[napi(js_name = "nowNs")]
pub fn now_ns_js() -> BigInt {
    BigInt::from(now_ns())
}

/// `nowNs` if given (a non-negative BigInt below 2^64), else the clock.
pub fn resolve_now(now_ns: Option<BigInt>) -> Result<u64> {
    match now_ns {
        None => Ok(self::now_ns()),
        Some(b) => {
            let (signed, value, lossless) = b.get_u64();
            if signed || !lossless {
                return Err(Error::new(
                    Status::InvalidArg,
                    "nowNs must be a non-negative BigInt below 2^64",
                ));
            }
            Ok(value)
        }
    }
}
