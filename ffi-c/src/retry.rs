//! Retry budgets: `sg_retry_budget` (Finagle/SRE, windowed) and `sg_token_throttle`
//! (gRPC A6 `retryThrottling`).

use core::ffi::c_void;

use surgeguard_core::retry::{
    RetryBudget, RetryBudgetConfig, RetryBudgetMetrics, TokenRetryThrottle, TokenThrottleConfig,
    TokenThrottleMetrics,
};

use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object, input, new_object, object,
    out, rejected, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use surgeguard_std::placement::Placed;

/// Settings of an `sg_retry_budget`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_retry_budget_config {
    /// How long a deposit funds retries, ns, in `[1 s, 60 s]` (default 10 s).
    pub ttl_ns: u64,
    /// Retries per second allowed even with no traffic, at most 1 000 000 (default 10).
    pub min_retries_per_sec: u32,
    /// Retries as a fraction of requests: 0, or in `[0.001, 1000]` (default 0.1).
    pub percent_can_retry: f64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<RetryBudgetConfig> for sg_retry_budget_config {
    fn from(c: RetryBudgetConfig) -> Self {
        Self {
            reserved: [0; 4],
            ttl_ns: c.ttl,
            min_retries_per_sec: c.min_retries_per_sec,
            percent_can_retry: c.percent_can_retry,
        }
    }
}

/// A retry budget: every request deposits, every retry withdraws, deposits expire after
/// `ttl`, and `min_retries_per_sec × ttl` retries are always available, so retries stay a
/// bounded share of traffic (Finagle's `RetryBudget`, gRPC's retry throttling). Thread-safe, lock-free.
pub struct sg_retry_budget {
    _opaque: [u8; 0],
}
object!(sg_retry_budget, Placed<RetryBudget>, 0x5347_5254_5242_4400);

pub(crate) mod budget_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_retry_budget_config` for the duration of
    /// the call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_retry_budget_config) -> Res<Placed<RetryBudget>> {
        // SAFETY: this fn's contract (the borrow does not outlive the call).
        let config = unsafe { budget_config(cfg)? };
        Ok(Placed::Local(RetryBudget::new(config)?))
    }

    /// The core config of a C config.
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_retry_budget_config` for the
    /// duration of the call (the crate's contract).
    pub(crate) unsafe fn budget_config(
        cfg: *const sg_retry_budget_config,
    ) -> Res<RetryBudgetConfig> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_retry_budget_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        Ok(RetryBudgetConfig {
            ttl: c.ttl_ns,
            min_retries_per_sec: c.min_retries_per_sec,
            percent_can_retry: c.percent_can_retry,
        })
    }
}

/// Fills `cfg` with the defaults: ttl 10 s, 10 retries/s, 10 % (SRE).
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_config_default(
    cfg: *mut sg_retry_budget_config,
) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(RetryBudgetConfig::default().into())))
}

/// Creates a retry budget on the heap; free it with `sg_retry_budget_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_new(
    cfg: *const sg_retry_budget_config,
    retry_budget_out: *mut *mut sg_retry_budget,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `retry_budget_out`.
    unsafe { new_object(retry_budget_out, || budget_make::make(cfg)) }
}

/// Frees a retry budget made by `sg_retry_budget_new`. NULL is fine; a handle made by `sg_retry_budget_init` is
/// left alone (use `sg_retry_budget_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_free(retry_budget: *mut sg_retry_budget) {
    // SAFETY: the crate's contract for `retry_budget`.
    unsafe { free_object(retry_budget) }
}

/// Bytes of caller storage `sg_retry_budget_init` needs.
#[no_mangle]
pub extern "C" fn sg_retry_budget_size() -> usize {
    ffi_value(0, obj_size::<sg_retry_budget>)
}

/// Alignment the storage given to `sg_retry_budget_init` needs.
#[no_mangle]
pub extern "C" fn sg_retry_budget_align() -> usize {
    ffi_value(0, obj_align::<sg_retry_budget>)
}

/// Creates a retry budget in caller storage (`len` bytes at `mem`, aligned to
/// `sg_retry_budget_align()`); on `SG_OK`, `(sg_retry_budget *)mem` is the handle. End it with
/// `sg_retry_budget_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_retry_budget_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_retry_budget>(mem, len, || budget_make::make(cfg)) }
}

/// Ends a retry budget made by `sg_retry_budget_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_deinit(retry_budget: *mut sg_retry_budget) -> sg_status {
    // SAFETY: the crate's contract for `retry_budget`.
    unsafe { deinit_object(retry_budget) }
}

/// Fills `cfg` with Finagle's `RetryBudget()` defaults exactly: ttl 10 s, 10 retries/s, 20 %.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_config_finagle(
    cfg: *mut sg_retry_budget_config,
) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(RetryBudgetConfig::finagle().into())))
}

/// Records one request (a first attempt, not a retry) at `now`.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_deposit(
    retry_budget: *mut sg_retry_budget,
    now: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `retry_budget`.
        unsafe {
            with(retry_budget, |o| {
                o.inner.deposit(now);
                Ok(())
            })
        }
    })
}

/// Takes one retry from the budget: `SG_OK` (retry), or `SG_REJECTED` with
/// `SG_REASON_BUDGET_EXHAUSTED` and a hint of when expiring retries free room.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_try_withdraw(
    retry_budget: *mut sg_retry_budget,
    now: u64,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `retry_budget`.
        unsafe {
            with(retry_budget, |o| {
                Ok(match o.inner.try_withdraw(now) {
                    Ok(_) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// Retries that would be allowed now (reserve included), without taking any.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_available(
    retry_budget: *const sg_retry_budget,
    now: u64,
    available_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let available_out = out(available_out)?;
        // SAFETY: the crate's contract for `retry_budget`.
        let v = unsafe { with(retry_budget, |o| Ok(o.inner.available(now)))? };
        available_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_retry_budget`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_retry_budget_metrics {
    /// Requests deposited, ever.
    pub requests: u64,
    /// Retries allowed, ever.
    pub retries_allowed: u64,
    /// Retries refused, ever.
    pub retries_denied: u64,
    /// Retries that would be allowed now (as of the last call's time).
    pub available: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<RetryBudgetMetrics> for sg_retry_budget_metrics {
    fn from(m: RetryBudgetMetrics) -> Self {
        Self {
            reserved: [0; 4],
            requests: m.requests,
            retries_allowed: m.retries_allowed,
            retries_denied: m.retries_denied,
            available: m.available,
        }
    }
}

/// A snapshot of the counters.
#[no_mangle]
pub unsafe extern "C" fn sg_retry_budget_metrics_get(
    retry_budget: *const sg_retry_budget,
    metrics_out: *mut sg_retry_budget_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `retry_budget`.
        let v = unsafe { with(retry_budget, |o| Ok(o.inner.metrics().into()))? };
        metrics_out.write(v);
        Ok(())
    })
}

// ---- gRPC A6 token throttle ----------------------------------------------------------

/// Settings of an `sg_token_throttle` (gRPC `retryThrottling`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_token_throttle_config {
    /// `maxTokens`, in `(0, 1000]` (default 10).
    pub max_tokens: f64,
    /// `tokenRatio`: tokens a success adds, in `[0.001, max_tokens]` (default 0.1).
    pub token_ratio: f64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<TokenThrottleConfig> for sg_token_throttle_config {
    fn from(c: TokenThrottleConfig) -> Self {
        Self { reserved: [0; 4], max_tokens: c.max_tokens, token_ratio: c.token_ratio }
    }
}

/// The gRPC A6 retry throttle: tokens start full, a failure takes one, a success adds
/// `token_ratio`; retries only while above half. Thread-safe, lock-free.
pub struct sg_token_throttle {
    _opaque: [u8; 0],
}
object!(sg_token_throttle, TokenRetryThrottle, 0x5347_544B_5448_5200);

mod token_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_token_throttle_config` for the duration of
    /// the call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_token_throttle_config) -> Res<TokenRetryThrottle> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_token_throttle_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        Ok(TokenRetryThrottle::new(TokenThrottleConfig {
            max_tokens: c.max_tokens,
            token_ratio: c.token_ratio,
        })?)
    }
}

/// Fills `cfg` with the defaults: max 10 tokens, ratio 0.1 (gRPC A6).
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_config_default(
    cfg: *mut sg_token_throttle_config,
) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(TokenThrottleConfig::default().into())))
}

/// Creates a token throttle on the heap; free it with `sg_token_throttle_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_new(
    cfg: *const sg_token_throttle_config,
    token_throttle_out: *mut *mut sg_token_throttle,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `token_throttle_out`.
    unsafe { new_object(token_throttle_out, || token_make::make(cfg)) }
}

/// Frees a token throttle made by `sg_token_throttle_new`. NULL is fine; a handle made by `sg_token_throttle_init` is
/// left alone (use `sg_token_throttle_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_free(token_throttle: *mut sg_token_throttle) {
    // SAFETY: the crate's contract for `token_throttle`.
    unsafe { free_object(token_throttle) }
}

/// Bytes of caller storage `sg_token_throttle_init` needs.
#[no_mangle]
pub extern "C" fn sg_token_throttle_size() -> usize {
    ffi_value(0, obj_size::<sg_token_throttle>)
}

/// Alignment the storage given to `sg_token_throttle_init` needs.
#[no_mangle]
pub extern "C" fn sg_token_throttle_align() -> usize {
    ffi_value(0, obj_align::<sg_token_throttle>)
}

/// Creates a token throttle in caller storage (`len` bytes at `mem`, aligned to
/// `sg_token_throttle_align()`); on `SG_OK`, `(sg_token_throttle *)mem` is the handle. End it with
/// `sg_token_throttle_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_token_throttle_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_token_throttle>(mem, len, || token_make::make(cfg)) }
}

/// Ends a token throttle made by `sg_token_throttle_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_deinit(
    token_throttle: *mut sg_token_throttle,
) -> sg_status {
    // SAFETY: the crate's contract for `token_throttle`.
    unsafe { deinit_object(token_throttle) }
}

/// Records an RPC's result: `success` adds `token_ratio`, a failure takes one token.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_record(
    token_throttle: *mut sg_token_throttle,
    success: bool,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `token_throttle`.
        unsafe {
            with(token_throttle, |o| {
                o.inner.record(success);
                Ok(())
            })
        }
    })
}

/// Whether a retry may be sent now: `SG_OK`, or `SG_REJECTED` with
/// `SG_REASON_BUDGET_EXHAUSTED` (retry_after 0: only traffic refills tokens).
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_try_retry(
    token_throttle: *mut sg_token_throttle,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        // SAFETY: the crate's contract for `token_throttle`.
        unsafe {
            with(token_throttle, |o| {
                Ok(match o.inner.try_retry() {
                    Ok(_) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// Whether retries are allowed now, without counting one.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_is_retry_allowed(
    token_throttle: *const sg_token_throttle,
    is_retry_allowed_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let is_retry_allowed_out = out(is_retry_allowed_out)?;
        // SAFETY: the crate's contract for `token_throttle`.
        let v = unsafe { with(token_throttle, |o| Ok(o.inner.is_retry_allowed()))? };
        is_retry_allowed_out.write(v);
        Ok(())
    })
}

/// The current token count.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_tokens(
    token_throttle: *const sg_token_throttle,
    tokens_out: *mut f64,
) -> sg_status {
    ffi(|| {
        let tokens_out = out(tokens_out)?;
        // SAFETY: the crate's contract for `token_throttle`.
        let v = unsafe { with(token_throttle, |o| Ok(o.inner.tokens()))? };
        tokens_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_token_throttle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct sg_token_throttle_metrics {
    /// The current token count.
    pub tokens: f64,
    /// Whether retries are refused now.
    pub throttled: bool,
    /// Retries allowed, ever.
    pub retries_allowed: u64,
    /// Retries refused, ever.
    pub retries_denied: u64,
    /// Successes recorded, ever.
    pub successes: u64,
    /// Failures recorded, ever.
    pub failures: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<TokenThrottleMetrics> for sg_token_throttle_metrics {
    fn from(m: TokenThrottleMetrics) -> Self {
        Self {
            reserved: [0; 4],
            tokens: m.tokens,
            throttled: m.throttled,
            retries_allowed: m.retries_allowed,
            retries_denied: m.retries_denied,
            successes: m.successes,
            failures: m.failures,
        }
    }
}

/// A snapshot of the counters.
#[no_mangle]
pub unsafe extern "C" fn sg_token_throttle_metrics_get(
    token_throttle: *const sg_token_throttle,
    metrics_out: *mut sg_token_throttle_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `token_throttle`.
        let v = unsafe { with(token_throttle, |o| Ok(o.inner.metrics().into()))? };
        metrics_out.write(v);
        Ok(())
    })
}
