//! `sg_breaker`: a circuit breaker with count or time windows, failure-rate and
//! slow-call thresholds, a jittered open period, leased half-open probes and a traffic ramp.

use core::ffi::c_void;

use surgeguard_core::breaker::{
    BreakerMetrics, BreakerPermit, BreakerState, BreakerWindow, CircuitBreaker,
    CircuitBreakerConfig,
};

use crate::field;
use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object, input, new_object, object,
    out, rejected, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::permit::{issue, sg_permit, take, SG_PERMIT_KIND_BREAKER};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};

/// `sg_breaker_config.window_kind`: the last `window_count` calls.
pub const SG_BREAKER_WINDOW_COUNT: u32 = 0;
/// `sg_breaker_config.window_kind`: the calls of the last `window_ns`, in 10 buckets.
pub const SG_BREAKER_WINDOW_TIME: u32 = 1;

/// Breaker state: calls flow.
pub const SG_BREAKER_CLOSED: u32 = 0;
/// Closed, and traffic ramps back up (10 % → 25 % → 50 %; a fraction is shed).
pub const SG_BREAKER_RAMPING: u32 = 1;
/// Calls are refused until the open period ends.
pub const SG_BREAKER_OPEN: u32 = 2;
/// A few probe calls test the dependency.
pub const SG_BREAKER_HALF_OPEN: u32 = 3;
const _: () = assert!(BreakerState::Closed as u32 == SG_BREAKER_CLOSED);
const _: () = assert!(BreakerState::Ramping as u32 == SG_BREAKER_RAMPING);
const _: () = assert!(BreakerState::Open as u32 == SG_BREAKER_OPEN);
const _: () = assert!(BreakerState::HalfOpen as u32 == SG_BREAKER_HALF_OPEN);

/// Settings of an `sg_breaker` (resilience4j's defaults plus jitter, lease and ramp).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_breaker_config {
    /// `SG_BREAKER_WINDOW_*` (default count).
    pub window_kind: u32,
    /// Count window: calls, `1 ..= 512` (default 100).
    pub window_count: u32,
    /// Time window: ns, in `[10 ms, 1 day]` (default 60 s; used with `SG_BREAKER_WINDOW_TIME`).
    pub window_ns: u64,
    /// Open when failures / calls ≥ this, in `(0, 1]` (default 0.5).
    pub failure_rate_threshold: f64,
    /// Open when slow calls / calls ≥ this, in `(0, 1]` (default 1.0).
    pub slow_call_rate_threshold: f64,
    /// A call at least this long is slow, ns, ≥ 1 (default 60 s).
    pub slow_call_duration_ns: u64,
    /// No rate is judged on fewer calls; ≥ 1 and, for a count window, ≤ its size (default 100).
    pub minimum_calls: u32,
    /// Open period before probing, ns, in `[1 ms, 1 day]` (default 60 s).
    pub open_duration_ns: u64,
    /// Up to this fraction of the open period is added at random, in `[0, 1]` (default 0.2).
    pub open_jitter: f64,
    /// Probes admitted half-open, `1 ..= 32` (default 10).
    pub half_open_probes: u32,
    /// A probe silent this long frees its slot, ns, in `[1 ms, 1 day]` (default 60 s).
    pub probe_lease_ns: u64,
    /// Ramp after closing, ns, each of 3 steps a third; 0 = none; ≤ 1 day (default 30 s).
    pub ramp_duration_ns: u64,
    /// Seed of the jitter generator (default 0).
    pub seed: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<CircuitBreakerConfig> for sg_breaker_config {
    fn from(c: CircuitBreakerConfig) -> Self {
        let (window_kind, window_count, window_ns) = match c.window {
            BreakerWindow::Count(n) => {
                (SG_BREAKER_WINDOW_COUNT, n, 60 * surgeguard_core::time::SEC)
            }
            BreakerWindow::Time(d) => (SG_BREAKER_WINDOW_TIME, 100, d),
        };
        Self {
            reserved: [0; 4],
            window_kind,
            window_count,
            window_ns,
            failure_rate_threshold: c.failure_rate_threshold,
            slow_call_rate_threshold: c.slow_call_rate_threshold,
            slow_call_duration_ns: c.slow_call_duration,
            minimum_calls: c.minimum_calls,
            open_duration_ns: c.open_duration,
            open_jitter: c.open_jitter,
            half_open_probes: c.half_open_probes,
            probe_lease_ns: c.probe_lease,
            ramp_duration_ns: c.ramp_duration,
            seed: c.seed,
        }
    }
}

/// A circuit breaker: closed / open / half-open. Thread-safe, wait-free.
pub struct sg_breaker {
    _opaque: [u8; 0],
}
object!(sg_breaker, CircuitBreaker, 0x5347_4252_4B52_0000);

mod breaker_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_breaker_config` for the duration of the
    /// call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_breaker_config) -> Res<CircuitBreaker> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_breaker_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        let count = BreakerWindow::Count(c.window_count);
        let time = BreakerWindow::Time(c.window_ns);
        let (window, unused) = match c.window_kind {
            SG_BREAKER_WINDOW_COUNT => (count, time),
            SG_BREAKER_WINDOW_TIME => (time, count),
            _ => return Err(field::out_of_range("window_kind")),
        };
        // The unused window is checked too (on its own: minimum_calls 1 keeps the
        // count window's cross-check out of it), as every unused setting is.
        let probe = CircuitBreakerConfig {
            window: unused,
            minimum_calls: 1,
            ..CircuitBreakerConfig::default()
        };
        CircuitBreaker::new(probe).map(drop)?;
        CircuitBreaker::new(CircuitBreakerConfig {
            window,
            failure_rate_threshold: c.failure_rate_threshold,
            slow_call_rate_threshold: c.slow_call_rate_threshold,
            slow_call_duration: c.slow_call_duration_ns,
            minimum_calls: c.minimum_calls,
            open_duration: c.open_duration_ns,
            open_jitter: c.open_jitter,
            half_open_probes: c.half_open_probes,
            probe_lease: c.probe_lease_ns,
            ramp_duration: c.ramp_duration_ns,
            seed: c.seed,
        })
        .map_err(sg_status::from)
    }
}

/// Fills `cfg` with the defaults: resilience4j's (count window 100, 50 % failures, 100 minimum calls, 60 s
/// open, 10 probes) plus 20 % jitter, a 60 s probe lease and a 30 s ramp.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_config_default(cfg: *mut sg_breaker_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(CircuitBreakerConfig::default().into())))
}

/// Creates a circuit breaker on the heap; free it with `sg_breaker_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_new(
    cfg: *const sg_breaker_config,
    breaker_out: *mut *mut sg_breaker,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `breaker_out`.
    unsafe { new_object(breaker_out, || breaker_make::make(cfg)) }
}

/// Frees a circuit breaker made by `sg_breaker_new`. NULL is fine; a handle made by `sg_breaker_init` is
/// left alone (use `sg_breaker_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_free(breaker: *mut sg_breaker) {
    // SAFETY: the crate's contract for `breaker`.
    unsafe { free_object(breaker) }
}

/// Bytes of caller storage `sg_breaker_init` needs.
#[no_mangle]
pub extern "C" fn sg_breaker_size() -> usize {
    ffi_value(0, obj_size::<sg_breaker>)
}

/// Alignment the storage given to `sg_breaker_init` needs.
#[no_mangle]
pub extern "C" fn sg_breaker_align() -> usize {
    ffi_value(0, obj_align::<sg_breaker>)
}

/// Creates a circuit breaker in caller storage (`len` bytes at `mem`, aligned to
/// `sg_breaker_align()`); on `SG_OK`, `(sg_breaker *)mem` is the handle. End it with
/// `sg_breaker_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_breaker_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_breaker>(mem, len, || breaker_make::make(cfg)) }
}

/// Ends a circuit breaker made by `sg_breaker_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_deinit(breaker: *mut sg_breaker) -> sg_status {
    // SAFETY: the crate's contract for `breaker`.
    unsafe { deinit_object(breaker) }
}

/// Asks to make a call at `now`: `SG_OK` fills `*permit_out` (report the call with
/// `sg_breaker_record`); `SG_REJECTED` says `SG_REASON_BREAKER_OPEN` with the time left.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_try_acquire(
    breaker: *mut sg_breaker,
    now: u64,
    permit_out: *mut sg_permit,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        let permit_out = out(permit_out)?;
        // SAFETY: the crate's contract for `breaker`.
        unsafe {
            with(breaker, |b| match b.inner.try_acquire(now) {
                Ok(p) => {
                    issue(permit_out, b.head.id, SG_PERMIT_KIND_BREAKER, p);
                    Ok(SG_OK)
                }
                Err(r) => Ok(rejected(rejection_out, r)),
            })
        }
    })
}

/// Reports how a permitted call went: `outcome` (`SG_OUTCOME_*`; a drop is a failure,
/// ignored records nothing) and its `latency_ns` (≥ the slow-call duration makes it slow).
/// A permit reports once: again is `SG_ALREADY_RELEASED`, another object's is
/// `SG_FOREIGN_HANDLE`; neither changes anything.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_record(
    breaker: *mut sg_breaker,
    permit: *mut sg_permit,
    now: u64,
    outcome: u32,
    latency_ns: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `permit`: NULL or an `sg_permit` readable for the
        // call. `take`/`restore` then write its state word through this shared borrow, which
        // `sg_permit`'s `UnsafeCell`s allow (see `sg_permit::cell` in permit.rs).
        let permit = unsafe { input(permit.cast_const())? };
        let outcome = crate::vocab::outcome(outcome)?;
        // SAFETY: the crate's contract for `breaker`.
        unsafe {
            with(breaker, |b| {
                let p: BreakerPermit = take(permit, b.head.id, SG_PERMIT_KIND_BREAKER)?;
                b.inner.record(p, now, outcome, latency_ns);
                Ok(())
            })
        }
    })
}

/// The state the next call would see at `now` (`SG_BREAKER_*`).
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_state(
    breaker: *const sg_breaker,
    now: u64,
    state_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let state_out = out(state_out)?;
        // SAFETY: the crate's contract for `breaker`.
        let v = unsafe { with(breaker, |o| Ok(o.inner.state(now) as u32))? };
        state_out.write(v);
        Ok(())
    })
}

/// Whether calls are refused outright at `now`.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_is_open(
    breaker: *const sg_breaker,
    now: u64,
    is_open_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let is_open_out = out(is_open_out)?;
        // SAFETY: the crate's contract for `breaker`.
        let v = unsafe { with(breaker, |o| Ok(o.inner.is_open(now)))? };
        is_open_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_breaker`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_breaker_metrics {
    /// `SG_BREAKER_*`: the state the next call would see.
    pub state: u32,
    /// Traffic admitted now, per mille.
    pub admit_permille: u32,
    /// Time left in the open period, ns.
    pub open_remaining_ns: u64,
    /// Calls in the window.
    pub window_calls: u64,
    /// Failed calls in the window.
    pub window_failures: u64,
    /// Slow calls in the window.
    pub window_slow: u64,
    /// Transitions to open, ever.
    pub opened: u64,
    /// Transitions to half-open, ever.
    pub half_opened: u64,
    /// Transitions to closed, ever.
    pub closed: u64,
    /// Calls refused, ever.
    pub rejected: u64,
    /// Calls shed by the ramp, ever.
    pub ramp_shed: u64,
    /// Half-open probes admitted, ever.
    pub probes: u64,
    /// Reports for permits of an earlier phase (ignored), ever.
    pub stale_records: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<BreakerMetrics> for sg_breaker_metrics {
    fn from(m: BreakerMetrics) -> Self {
        Self {
            reserved: [0; 4],
            state: m.state as u32,
            admit_permille: m.admit_permille,
            open_remaining_ns: m.open_remaining,
            window_calls: m.window_calls,
            window_failures: m.window_failures,
            window_slow: m.window_slow,
            opened: m.opened,
            half_opened: m.half_opened,
            closed: m.closed,
            rejected: m.rejected,
            ramp_shed: m.ramp_shed,
            probes: m.probes,
            stale_records: m.stale_records,
        }
    }
}

/// A snapshot at `now`.
#[no_mangle]
pub unsafe extern "C" fn sg_breaker_metrics_get(
    breaker: *const sg_breaker,
    now: u64,
    metrics_out: *mut sg_breaker_metrics,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `breaker`.
        let v = unsafe { with(breaker, |o| Ok(o.inner.metrics(now).into()))? };
        metrics_out.write(v);
        Ok(())
    })
}
