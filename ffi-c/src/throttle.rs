//! `sg_adaptive_throttle`: SRE client-side adaptive throttling.

use core::ffi::c_void;

use surgeguard_core::throttle::{
    AdaptiveThrottle, AdaptiveThrottleConfig, AdaptiveThrottleMetrics, ThrottleForm,
};

use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object, input, new_object, object,
    out, rejected, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};

/// `sg_adaptive_throttle_config.form`: exact counts over the window in 120 buckets (SRE).
pub const SG_THROTTLE_FORM_RING: u32 = 0;
/// `sg_adaptive_throttle_config.form`: O(1) exponentially decayed counts.
pub const SG_THROTTLE_FORM_EMA: u32 = 1;

/// Settings of an `sg_adaptive_throttle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_adaptive_throttle_config {
    /// `K`: requests per accept before throttling, in `[1, 1000]` (default 2, SRE).
    pub k: f64,
    /// The window, ns, in `[1 s, 1 h]` (default 120 s).
    pub window_ns: u64,
    /// Cap on the local drop probability, in `[0, 1]` (default 0.75, Finagle).
    pub max_drop_probability: f64,
    /// `SG_THROTTLE_FORM_*` (default ring).
    pub form: u32,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<AdaptiveThrottleConfig> for sg_adaptive_throttle_config {
    fn from(c: AdaptiveThrottleConfig) -> Self {
        Self {
            reserved: [0; 4],
            k: c.k,
            window_ns: c.window,
            max_drop_probability: c.max_drop_probability,
            form: match c.form {
                ThrottleForm::Ema => SG_THROTTLE_FORM_EMA,
                _ => SG_THROTTLE_FORM_RING,
            },
        }
    }
}

/// SRE client-side adaptive throttling: refuses locally with probability
/// `max(0, (requests − K·accepts) / (requests + 1))`, capped. Thread-safe, wait-free.
pub struct sg_adaptive_throttle {
    _opaque: [u8; 0],
}
object!(sg_adaptive_throttle, AdaptiveThrottle, 0x5347_4144_5448_5200);

mod throttle_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_adaptive_throttle_config` for the duration
    /// of the call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_adaptive_throttle_config) -> Res<AdaptiveThrottle> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_adaptive_throttle_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        let form = match c.form {
            SG_THROTTLE_FORM_RING => ThrottleForm::Ring,
            SG_THROTTLE_FORM_EMA => ThrottleForm::Ema,
            _ => return Err(crate::field::out_of_range("form")),
        };
        AdaptiveThrottle::new(AdaptiveThrottleConfig {
            k: c.k,
            window: c.window_ns,
            max_drop_probability: c.max_drop_probability,
            form,
        })
        .map_err(sg_status::from)
    }
}

/// Fills `cfg` with the defaults: K = 2, 2 min window, drop cap 0.75, exact ring.
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_config_default(
    cfg: *mut sg_adaptive_throttle_config,
) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(AdaptiveThrottleConfig::default().into())))
}

/// Creates an adaptive throttle on the heap; free it with `sg_adaptive_throttle_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_new(
    cfg: *const sg_adaptive_throttle_config,
    adaptive_throttle_out: *mut *mut sg_adaptive_throttle,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `adaptive_throttle_out`.
    unsafe { new_object(adaptive_throttle_out, || throttle_make::make(cfg)) }
}

/// Frees an adaptive throttle made by `sg_adaptive_throttle_new`. NULL is fine; a handle made by `sg_adaptive_throttle_init` is
/// left alone (use `sg_adaptive_throttle_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_free(adaptive_throttle: *mut sg_adaptive_throttle) {
    // SAFETY: the crate's contract for `adaptive_throttle`.
    unsafe { free_object(adaptive_throttle) }
}

/// Bytes of caller storage `sg_adaptive_throttle_init` needs.
#[no_mangle]
pub extern "C" fn sg_adaptive_throttle_size() -> usize {
    ffi_value(0, obj_size::<sg_adaptive_throttle>)
}

/// Alignment the storage given to `sg_adaptive_throttle_init` needs.
#[no_mangle]
pub extern "C" fn sg_adaptive_throttle_align() -> usize {
    ffi_value(0, obj_align::<sg_adaptive_throttle>)
}

/// Creates an adaptive throttle in caller storage (`len` bytes at `mem`, aligned to
/// `sg_adaptive_throttle_align()`); on `SG_OK`, `(sg_adaptive_throttle *)mem` is the handle. End it with
/// `sg_adaptive_throttle_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_adaptive_throttle_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_adaptive_throttle>(mem, len, || throttle_make::make(cfg)) }
}

/// Ends an adaptive throttle made by `sg_adaptive_throttle_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_deinit(
    adaptive_throttle: *mut sg_adaptive_throttle,
) -> sg_status {
    // SAFETY: the crate's contract for `adaptive_throttle`.
    unsafe { deinit_object(adaptive_throttle) }
}

/// Records a request that was sent: `accepted` is whether the backend took it (a
/// 429/503 or \"overloaded\" is not an accept).
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_record(
    adaptive_throttle: *mut sg_adaptive_throttle,
    now: u64,
    accepted: bool,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `adaptive_throttle`.
        unsafe {
            with(adaptive_throttle, |o| {
                o.inner.record(now, accepted);
                Ok(())
            })
        }
    })
}

/// Decides whether to refuse a request locally; `rand` is a uniformly random 64-bit
/// word from the caller. `SG_OK`: send it. `SG_REJECTED` (`SG_REASON_THROTTLED`): fail it
/// locally.
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_should_throttle(
    adaptive_throttle: *mut sg_adaptive_throttle,
    now: u64,
    rand: u64,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `adaptive_throttle`.
        unsafe {
            with(adaptive_throttle, |o| {
                Ok(match o.inner.should_throttle(now, rand) {
                    Ok(_) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// The current local drop probability.
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_drop_probability(
    adaptive_throttle: *const sg_adaptive_throttle,
    now: u64,
    drop_probability_out: *mut f64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let drop_probability_out = out(drop_probability_out)?;
        // SAFETY: the crate's contract for `adaptive_throttle`.
        let v = unsafe { with(adaptive_throttle, |o| Ok(o.inner.drop_probability(now)))? };
        drop_probability_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_adaptive_throttle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct sg_adaptive_throttle_metrics {
    /// Requests in the window (decayed in the EMA form), local refusals included.
    pub requests: f64,
    /// Accepted requests in the window.
    pub accepts: f64,
    /// The current local drop probability.
    pub drop_probability: f64,
    /// Requests refused locally, ever.
    pub throttled: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<AdaptiveThrottleMetrics> for sg_adaptive_throttle_metrics {
    fn from(m: AdaptiveThrottleMetrics) -> Self {
        Self {
            reserved: [0; 4],
            requests: m.requests,
            accepts: m.accepts,
            drop_probability: m.drop_probability,
            throttled: m.throttled,
        }
    }
}

/// A snapshot (as of the last call's time).
#[no_mangle]
pub unsafe extern "C" fn sg_adaptive_throttle_metrics_get(
    adaptive_throttle: *const sg_adaptive_throttle,
    metrics_out: *mut sg_adaptive_throttle_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `adaptive_throttle`.
        let v = unsafe { with(adaptive_throttle, |o| Ok(o.inner.metrics().into()))? };
        metrics_out.write(v);
        Ok(())
    })
}
