//! Rate limits: `sg_rate_limiter` (GCRA on one atomic word, weighted cost, the wait
//! returned instead of slept) and `sg_paced_drain` (drain a backlog after an outage with
//! headroom).

use core::ffi::c_void;

use surgeguard_core::rate::{
    PacedDrain, PacedDrainConfig, PacedDrainMetrics, RateLimiter, RateLimiterConfig,
};

use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object, input, new_object, object,
    out, rejected, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::time::SG_NEVER;
use surgeguard_std::placement::Placed;

/// Settings of an `sg_rate_limiter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_rate_limiter_config {
    /// Sustained rate, units per second, in `[1e-6, 1e9]` (default 100). Ignored when
    /// `emission_ns` is set.
    pub per_second: f64,
    /// Largest burst, units (also the largest single cost), in `[1, 1e9]` (default 10).
    pub burst: u32,
    /// If not 0: one unit per this many ns instead of `per_second` (≤ 10^6 s).
    pub emission_ns: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// A GCRA rate limiter: at most `burst + rate × T` units in any span `T`; a refusal
/// returns the wait. Thread-safe, lock-free.
pub struct sg_rate_limiter {
    _opaque: [u8; 0],
}
object!(sg_rate_limiter, Placed<RateLimiter>, 0x5347_5241_5445_4C00);

mod rate_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_rate_limiter_config` for the duration of
    /// the call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_rate_limiter_config) -> Res<Placed<RateLimiter>> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_rate_limiter_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        Ok(Placed::Local(if c.emission_ns != 0 {
            RateLimiter::with_interval(c.emission_ns, c.burst)?
        } else {
            RateLimiter::new(RateLimiterConfig { per_second: c.per_second, burst: c.burst })?
        }))
    }
}

/// Fills `cfg` with the defaults: 100 per second, bursts of 10.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_config_default(
    cfg: *mut sg_rate_limiter_config,
) -> sg_status {
    ffi(|| {
        out(cfg).map(|o| {
            o.write(sg_rate_limiter_config {
                reserved: [0; 4],
                per_second: 100.0,
                burst: 10,
                emission_ns: 0,
            })
        })
    })
}

/// Creates a rate limiter on the heap; free it with `sg_rate_limiter_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_new(
    cfg: *const sg_rate_limiter_config,
    rate_limiter_out: *mut *mut sg_rate_limiter,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `rate_limiter_out`.
    unsafe { new_object(rate_limiter_out, || rate_make::make(cfg)) }
}

/// Frees a rate limiter made by `sg_rate_limiter_new`. NULL is fine; a handle made by `sg_rate_limiter_init` is
/// left alone (use `sg_rate_limiter_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_free(rate_limiter: *mut sg_rate_limiter) {
    // SAFETY: the crate's contract for `rate_limiter`.
    unsafe { free_object(rate_limiter) }
}

/// Bytes of caller storage `sg_rate_limiter_init` needs.
#[no_mangle]
pub extern "C" fn sg_rate_limiter_size() -> usize {
    ffi_value(0, obj_size::<sg_rate_limiter>)
}

/// Alignment the storage given to `sg_rate_limiter_init` needs.
#[no_mangle]
pub extern "C" fn sg_rate_limiter_align() -> usize {
    ffi_value(0, obj_align::<sg_rate_limiter>)
}

/// Creates a rate limiter in caller storage (`len` bytes at `mem`, aligned to
/// `sg_rate_limiter_align()`); on `SG_OK`, `(sg_rate_limiter *)mem` is the handle. End it with
/// `sg_rate_limiter_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_rate_limiter_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_rate_limiter>(mem, len, || rate_make::make(cfg)) }
}

/// Ends a rate limiter made by `sg_rate_limiter_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_deinit(rate_limiter: *mut sg_rate_limiter) -> sg_status {
    // SAFETY: the crate's contract for `rate_limiter`.
    unsafe { deinit_object(rate_limiter) }
}

/// Admits `cost` units at `now`: `SG_OK`, or `SG_REJECTED` with `SG_REASON_RATE_LIMITED`
/// and the wait until they would conform (`SG_NEVER` if `cost` exceeds the burst).
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_check(
    rate_limiter: *mut sg_rate_limiter,
    now: u64,
    cost: u32,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `rate_limiter`.
        unsafe {
            with(rate_limiter, |o| {
                Ok(match o.inner.check(now, cost) {
                    Ok(_) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// Admits as many units as conform now, up to `max`; `*take_up_to_out` is how many.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_take_up_to(
    rate_limiter: *mut sg_rate_limiter,
    now: u64,
    max: u32,
    take_up_to_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let take_up_to_out = out(take_up_to_out)?;
        // SAFETY: the crate's contract for `rate_limiter`.
        let v = unsafe { with(rate_limiter, |o| Ok(o.inner.take_up_to(now, max)))? };
        take_up_to_out.write(v);
        Ok(())
    })
}

/// Units that would conform now, without taking them.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_available(
    rate_limiter: *const sg_rate_limiter,
    now: u64,
    available_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let available_out = out(available_out)?;
        // SAFETY: the crate's contract for `rate_limiter`.
        let v = unsafe { with(rate_limiter, |o| Ok(o.inner.available(now)))? };
        available_out.write(v);
        Ok(())
    })
}

/// How long until `cost` units would conform, ns (0 = now, `SG_NEVER` = never).
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_wait_time(
    rate_limiter: *const sg_rate_limiter,
    now: u64,
    cost: u32,
    wait_time_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let wait_time_out = out(wait_time_out)?;
        // SAFETY: the crate's contract for `rate_limiter`.
        let v = unsafe { with(rate_limiter, |o| Ok(o.inner.wait_time(now, cost)))? };
        wait_time_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_rate_limiter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_rate_limiter_metrics {
    /// Units admitted, ever.
    pub allowed: u64,
    /// Calls refused, ever.
    pub denied: u64,
    /// The emission interval, ns per unit.
    pub emission_ns: u64,
    /// The tolerance `emission × (burst − 1)`, ns.
    pub tolerance_ns: u64,
    /// The burst, units.
    pub burst: u32,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

/// A snapshot of the counters.
#[no_mangle]
pub unsafe extern "C" fn sg_rate_limiter_metrics_get(
    rate_limiter: *const sg_rate_limiter,
    metrics_out: *mut sg_rate_limiter_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `rate_limiter`.
        let v = unsafe {
            with(rate_limiter, |o| {
                Ok({
                    let m = o.inner.metrics();
                    sg_rate_limiter_metrics {
                        reserved: [0; 4],
                        allowed: m.allowed,
                        denied: m.denied,
                        emission_ns: m.emission_ns,
                        tolerance_ns: o.inner.tolerance_ns(),
                        burst: m.burst,
                    }
                })
            })?
        };
        metrics_out.write(v);
        Ok(())
    })
}

// ---- paced drain ---------------------------------------------------------------------

/// Settings of an `sg_paced_drain`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_paced_drain_config {
    /// What the dependency sustains, items per second, in `[1e-6, 1e9]`.
    pub target_per_sec: f64,
    /// Fraction of the target kept free while draining, in `[0, 1)` (default 0.2).
    pub headroom: f64,
    /// Largest number started at once, in `[1, 1e9]` (default: 100 ms of the drain rate).
    pub burst: u32,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<PacedDrainConfig> for sg_paced_drain_config {
    fn from(c: PacedDrainConfig) -> Self {
        Self {
            reserved: [0; 4],
            target_per_sec: c.target_per_sec,
            headroom: c.headroom,
            burst: c.burst,
        }
    }
}

/// Paces the drain of a backlog after an outage: never more than
/// `target × (1 − headroom)` per second (plus the burst). Thread-safe, lock-free.
pub struct sg_paced_drain {
    _opaque: [u8; 0],
}
object!(sg_paced_drain, PacedDrain, 0x5347_5041_4345_4400);

mod drain_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_paced_drain_config` for the duration of the
    /// call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_paced_drain_config) -> Res<PacedDrain> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_paced_drain_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        Ok(PacedDrain::new(PacedDrainConfig {
            target_per_sec: c.target_per_sec,
            headroom: c.headroom,
            burst: c.burst,
        })?)
    }
}

/// Fills `cfg` with the defaults: a 1000/s target, 20 % headroom, bursts of 100 ms (
/// use `sg_paced_drain_config_for` for your target).
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_config_default(
    cfg: *mut sg_paced_drain_config,
) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(PacedDrainConfig::new(1000.0).into())))
}

/// Creates a paced drain on the heap; free it with `sg_paced_drain_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_new(
    cfg: *const sg_paced_drain_config,
    paced_drain_out: *mut *mut sg_paced_drain,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `paced_drain_out`.
    unsafe { new_object(paced_drain_out, || drain_make::make(cfg)) }
}

/// Frees a paced drain made by `sg_paced_drain_new`. NULL is fine; a handle made by `sg_paced_drain_init` is
/// left alone (use `sg_paced_drain_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_free(paced_drain: *mut sg_paced_drain) {
    // SAFETY: the crate's contract for `paced_drain`.
    unsafe { free_object(paced_drain) }
}

/// Bytes of caller storage `sg_paced_drain_init` needs.
#[no_mangle]
pub extern "C" fn sg_paced_drain_size() -> usize {
    ffi_value(0, obj_size::<sg_paced_drain>)
}

/// Alignment the storage given to `sg_paced_drain_init` needs.
#[no_mangle]
pub extern "C" fn sg_paced_drain_align() -> usize {
    ffi_value(0, obj_align::<sg_paced_drain>)
}

/// Creates a paced drain in caller storage (`len` bytes at `mem`, aligned to
/// `sg_paced_drain_align()`); on `SG_OK`, `(sg_paced_drain *)mem` is the handle. End it with
/// `sg_paced_drain_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_paced_drain_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_paced_drain>(mem, len, || drain_make::make(cfg)) }
}

/// Ends a paced drain made by `sg_paced_drain_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_deinit(paced_drain: *mut sg_paced_drain) -> sg_status {
    // SAFETY: the crate's contract for `paced_drain`.
    unsafe { deinit_object(paced_drain) }
}

/// Fills `cfg` for `target_per_sec` (finite, > 0; else `SG_INVALID_ARGUMENT`): 20 %
/// headroom and a burst of 100 ms of the drain rate.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_config_for(
    target_per_sec: f64,
    cfg: *mut sg_paced_drain_config,
) -> sg_status {
    ffi(|| {
        let cfg = out(cfg)?;
        if !(target_per_sec.is_finite() && target_per_sec > 0.0) {
            return Err(SG_INVALID_ARGUMENT);
        }
        cfg.write(PacedDrainConfig::new(target_per_sec).into());
        Ok(())
    })
}

/// How many of `backlog` waiting items may start now (they count as started).
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_permits(
    paced_drain: *mut sg_paced_drain,
    now: u64,
    backlog: u64,
    permits_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let permits_out = out(permits_out)?;
        // SAFETY: the crate's contract for `paced_drain`.
        let v = unsafe { with(paced_drain, |o| Ok(o.inner.permits(now, backlog)))? };
        permits_out.write(v);
        Ok(())
    })
}

/// How long until the next item may start, ns (0 = now): when to set the timer.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_next_permit_in(
    paced_drain: *const sg_paced_drain,
    now: u64,
    next_permit_in_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let next_permit_in_out = out(next_permit_in_out)?;
        // SAFETY: the crate's contract for `paced_drain`.
        let v = unsafe { with(paced_drain, |o| Ok(o.inner.next_permit_in(now)))? };
        next_permit_in_out.write(v);
        Ok(())
    })
}

/// Time to drain `backlog` at this drain's rate while work arrives at `produce_per_sec`
/// (finite, ≥ 0; else `SG_INVALID_ARGUMENT`), ns; `SG_NEVER` if it never drains.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_time_to_drain(
    paced_drain: *const sg_paced_drain,
    backlog: u64,
    produce_per_sec: f64,
    time_to_drain_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let time_to_drain_out = out(time_to_drain_out)?;
        check_rate(produce_per_sec)?;
        // SAFETY: the crate's contract for `paced_drain`.
        let t =
            unsafe { with(paced_drain, |o| Ok(o.inner.time_to_drain(backlog, produce_per_sec)))? };
        time_to_drain_out.write(t.unwrap_or(SG_NEVER));
        Ok(())
    })
}

fn check_rate(r: f64) -> Res {
    if r.is_finite() && r >= 0.0 {
        Ok(())
    } else {
        Err(SG_INVALID_ARGUMENT)
    }
}

/// The drain time, `backlog / (consume − produce)`, ns; `SG_NEVER` when it never
/// drains. Rates must be finite and ≥ 0 (else `SG_INVALID_ARGUMENT`).
#[no_mangle]
pub unsafe extern "C" fn sg_time_to_drain(
    backlog: u64,
    consume_per_sec: f64,
    produce_per_sec: f64,
    time_to_drain_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let time_to_drain_out = out(time_to_drain_out)?;
        check_rate(consume_per_sec)?;
        check_rate(produce_per_sec)?;
        let t = surgeguard_core::rate::time_to_drain(backlog, consume_per_sec, produce_per_sec);
        time_to_drain_out.write(t.unwrap_or(SG_NEVER));
        Ok(())
    })
}

/// A snapshot of an `sg_paced_drain`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct sg_paced_drain_metrics {
    /// Items started, ever.
    pub started: u64,
    /// `sg_paced_drain_permits` calls, ever.
    pub calls: u64,
    /// The drain rate, items per second.
    pub drain_per_sec: f64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<PacedDrainMetrics> for sg_paced_drain_metrics {
    fn from(m: PacedDrainMetrics) -> Self {
        Self {
            reserved: [0; 4],
            started: m.started,
            calls: m.calls,
            drain_per_sec: m.drain_per_sec,
        }
    }
}

/// A snapshot of the counters.
#[no_mangle]
pub unsafe extern "C" fn sg_paced_drain_metrics_get(
    paced_drain: *const sg_paced_drain,
    metrics_out: *mut sg_paced_drain_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `paced_drain`.
        let v = unsafe { with(paced_drain, |o| Ok(o.inner.metrics().into()))? };
        metrics_out.write(v);
        Ok(())
    })
}
