//! Raw N-API callbacks for the hot paths (`exports.fast.*`).
//!
//! Why raw: a napi-rs class method costs ~250 ns here, a raw free function ~30 ns
//! (measured on the development machine; `bench/bench.js` reports the raw-call floor). Each callback here reads its handle with
//! `napi_get_value_external` (no `napi_unwrap`), its numbers with `napi_get_value_double`,
//! reads the clock natively unless a `nowNs` BigInt is passed last, calls the core once and
//! returns one number.
//!
//! Return conventions (all plain numbers):
//! - acquire-like calls return a permit id (`≥ 0`) or `-reason` (the core's `Reason` wire
//!   value, 1..=15) on refusal; the refusal's `retry_after` is then read with
//!   `lastRetryAfterMs()` (a per-thread cell, valid until the next refusal);
//! - `limiterAcquire` on a shared limiter returns `-64` when its process table is full;
//! - `gateArrive` also returns `-(QUEUED_BASE + ticket)` when the arrival waits;
//! - release-like calls return `≥ 0` on success and `-1` (not a live permit: already
//!   released or never issued) or `-2` (another object's permit) otherwise; the facade
//!   turns those into `OverloadError`s;
//! - bad argument types throw a `TypeError`, out-of-range values (a `nowNs` above 2^62
//!   included) a `RangeError`, both with code `SG_INVALID_ARG` like the facade's own
//!   argument errors, before any state changes.

use std::cell::Cell;
use std::ffi::{c_char, c_void, CString};
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;
use surgeguard_core::{Outcome, Priority, Rejected};

use crate::keyed::KeyedInner;
use crate::limiter::LimiterInner;
use crate::resilience::{AdaptiveThrottleInner, BreakerInner, BudgetInner, RateInner};
use crate::shared::{AcquireError, ReleaseError};

/// `limiterAcquire`'s result when a shared limiter's process table is full of live
/// processes (below every `-reason`).
pub const SHM_TABLE_FULL: f64 = -64.0;

/// Offset of queued tickets in `gateArrive`'s result (above every reason code).
pub const QUEUED_BASE: f64 = 16.0;

thread_local! {
    /// `retry_after` (ns) of the last refusal on this thread.
    static LAST_RETRY_NS: Cell<u64> = const { Cell::new(0) };
}

/// Remembers a refusal and returns its wire value (`-reason`).
#[inline]
pub fn refuse(r: Rejected) -> f64 {
    LAST_RETRY_NS.with(|c| c.set(r.retry_after));
    -(r.reason as u8 as f64)
}

pub(crate) type Args<const N: usize> = ([sys::napi_value; N], usize);

/// Reads up to `N` arguments; returns them and how many were passed (which may exceed
/// `N`). N-API fills the slots of arguments not passed with `undefined`; if the call fails
/// the slots stay NULL, which every N-API getter refuses with a status (no dereference).
///
/// # Safety
/// `env` and `info` must be the arguments N-API passed to the [`Callback`] now running.
#[inline]
pub(crate) unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Args<N> {
    let mut argv = [ptr::null_mut(); N];
    let mut argc = N;
    // SAFETY: env/info are the running callback's (this fn's contract); `argv` has room for
    // `argc` = N values and N-API writes at most that many; `this` and `data` are not wanted
    // (NULL out-pointers are allowed for them).
    unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    (argv, argc)
}

/// `v` as a double, or NaN if it is not a number (or NULL).
///
/// # Safety
/// `env` must be the running callback's env and `v` NULL or a value of that callback
/// (one of its arguments).
#[inline]
pub(crate) unsafe fn number(env: sys::napi_env, v: sys::napi_value) -> f64 {
    let mut out = 0.0;
    let mut status = sys::Status::napi_number_expected;
    if !v.is_null() {
        // SAFETY: env and `v` (non-NULL, checked) are the running callback's (this fn's
        // contract); a non-number returns `napi_number_expected` and leaves `out` alone.
        status = unsafe { sys::napi_get_value_double(env, v, &mut out) };
    }
    if status == sys::Status::napi_ok {
        out
    } else {
        f64::NAN
    }
}

/// `x` as a JS number, to return from the callback (NULL, i.e. `undefined`, if N-API
/// fails).
///
/// # Safety
/// `env` must be the running callback's env.
#[inline]
pub(crate) unsafe fn ret(env: sys::napi_env, x: f64) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: env is the running callback's (this fn's contract); `out` is a valid
    // out-pointer, left NULL on failure.
    unsafe { sys::napi_create_double(env, x, &mut out) };
    out
}

/// Throws a `RangeError` (`range`) or `TypeError` with `code` and `surgeguard: msg`;
/// returns NULL for the callback to return.
///
/// # Safety
/// `env` must be the running callback's env.
#[cold]
pub(crate) unsafe fn throw(
    env: sys::napi_env,
    range: bool,
    code: &str,
    msg: &str,
) -> sys::napi_value {
    let code = CString::new(code).unwrap_or_default();
    let msg = CString::new(format!("surgeguard: {msg}")).unwrap_or_default();
    // SAFETY: env is the running callback's (this fn's contract); `code` and `msg` are
    // NUL-terminated and live until the end of this fn, and N-API copies them. If an
    // exception is already pending, N-API returns a status and throws nothing.
    unsafe {
        if range {
            sys::napi_throw_range_error(env, code.as_ptr(), msg.as_ptr());
        } else {
            sys::napi_throw_type_error(env, code.as_ptr(), msg.as_ptr());
        }
    }
    ptr::null_mut()
}

/// The code of every argument error (the facade's `SG_INVALID_ARG`).
pub(crate) const INVALID: &str = "SG_INVALID_ARG";

/// Throws the error of a bad numeric argument `v`: a `RangeError` if it is a number
/// (NaN, out of range, fractional), else a `TypeError`; returns NULL for the callback.
///
/// # Safety
/// `env` must be the running callback's env and `v` NULL or a value of that callback.
#[cold]
pub(crate) unsafe fn bad_number(
    env: sys::napi_env,
    v: sys::napi_value,
    msg: &str,
) -> sys::napi_value {
    let mut t = sys::ValueType::napi_undefined;
    // SAFETY: env and `v` are the running callback's (this fn's contract); `t` is a valid
    // out-pointer (a NULL `v` returns a status and leaves it `undefined`).
    unsafe { sys::napi_typeof(env, v, &mut t) };
    let is_number = t == sys::ValueType::napi_number;
    let msg = if is_number { msg.to_owned() } else { format!("{msg} (not a number)") };
    // SAFETY: env is the running callback's.
    unsafe { throw(env, is_number, INVALID, &msg) }
}

/// Throws the `TypeError` of a wrong handle; returns NULL for the callback to return.
///
/// # Safety
/// `env` must be the running callback's env.
#[cold]
pub(crate) unsafe fn bad_handle(env: sys::napi_env) -> sys::napi_value {
    // SAFETY: env is the running callback's (this fn's contract), as `throw` requires.
    unsafe { throw(env, false, INVALID, "not a handle of this kind") }
}

/// The object behind argument 0, or a thrown TypeError.
macro_rules! handle_arg {
    ($env:expr, $argv:expr, $t:ty) => {
        // SAFETY: env and argv[0] are the running callback's (argv[0] is `undefined` if not
        // passed, which `get` refuses); the `&$t` is used only until the callback returns,
        // while the argument list keeps the external alive. `get`'s last condition (no
        // external of other native code) rests on the facade, which passes only handles:
        // see `handle::get`.
        match unsafe { $crate::handle::get::<$t>($env, $argv[0]) } {
            Some(h) => h,
            // SAFETY: env is the running callback's.
            None => return unsafe { $crate::fast::bad_handle($env) },
        }
    };
}

/// `now` from an optional trailing `nowNs` BigInt at `i`, else the clock.
macro_rules! now {
    ($env:expr, $argv:expr, $argc:expr, $i:expr) => {
        if $argc > $i {
            // SAFETY: env and argv[$i] are the running callback's ($i < N, so the slot was
            // filled by `args`).
            match unsafe { bigint_now($env, $argv[$i]) } {
                Ok(Some(t)) => t,
                Ok(None) => $crate::clock::now_ns(),
                Err(range) => {
                    // SAFETY: env is the running callback's.
                    return unsafe {
                        throw(
                            $env,
                            range,
                            $crate::fast::INVALID,
                            if range {
                                "nowNs must be in [0, 2^62]"
                            } else {
                                "nowNs must be a bigint"
                            },
                        )
                    };
                }
            }
        } else {
            $crate::clock::now_ns()
        }
    };
}

/// `Ok(None)` for undefined, `Ok(Some(ns))` for a BigInt in `[0, MAX_NOW]`, `Err(true)`
/// for another BigInt (out of range), `Err(false)` for anything else (wrong type).
///
/// # Safety
/// `env` must be the running callback's env and `v` NULL or a value of that callback.
#[inline]
pub(crate) unsafe fn bigint_now(
    env: sys::napi_env,
    v: sys::napi_value,
) -> std::result::Result<Option<u64>, bool> {
    let mut t = sys::ValueType::napi_undefined;
    // SAFETY: env and `v` are the running callback's (this fn's contract); `t` is a valid
    // out-pointer (a NULL `v` returns `napi_invalid_arg` and leaves it `undefined`).
    unsafe { sys::napi_typeof(env, v, &mut t) };
    if t == sys::ValueType::napi_undefined {
        return Ok(None);
    }
    if t != sys::ValueType::napi_bigint {
        return Err(false);
    }
    let mut out = 0u64;
    let mut lossless = false;
    // SAFETY: env and `v` as above, `v` checked to be a BigInt; both out-pointers are valid.
    let status = unsafe { sys::napi_get_value_bigint_uint64(env, v, &mut out, &mut lossless) };
    if status != sys::Status::napi_ok || !lossless || out > surgeguard_core::time::MAX_NOW {
        return Err(true);
    }
    Ok(Some(out))
}

/// A level argument: a whole number below `levels`.
macro_rules! level {
    ($env:expr, $v:expr, $levels:expr) => {{
        // SAFETY: env and the value are the running callback's (an argument from `args`).
        let x = unsafe { number($env, $v) };
        if x >= 0.0 && x < f64::from($levels) && x.fract() == 0.0 {
            Priority::new(x as u8).expect("below levels ≤ 8")
        } else {
            // SAFETY: env is the running callback's.
            return unsafe { $crate::fast::bad_number($env, $v, "priority out of range") };
        }
    }};
}

/// An outcome argument: 0, 1 or 2.
macro_rules! outcome {
    ($env:expr, $v:expr) => {{
        // SAFETY: env and the value are the running callback's (an argument from `args`).
        let x = unsafe { number($env, $v) };
        match x {
            0.0 => Outcome::Success,
            1.0 => Outcome::Dropped,
            2.0 => Outcome::Ignored,
            _ => {
                // SAFETY: env is the running callback's.
                return unsafe { $crate::fast::bad_number($env, $v, "outcome must be 0, 1 or 2") };
            }
        }
    }};
}

/// A whole-number argument in `[0, max]`.
macro_rules! count {
    ($env:expr, $v:expr, $max:expr, $what:expr) => {{
        // SAFETY: env and the value are the running callback's (an argument from `args`).
        let x = unsafe { number($env, $v) };
        if x >= 0.0 && x <= $max as f64 && x.fract() == 0.0 {
            x
        } else {
            // SAFETY: env is the running callback's.
            return unsafe { $crate::fast::bad_number($env, $v, $what) };
        }
    }};
}

#[allow(unused_imports)]
pub(crate) use {count, handle_arg, level, now, outcome};

// ---------------------------------------------------------------------------------------
// Shared

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn last_retry_after_ms(
    env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    let ns = LAST_RETRY_NS.with(Cell::get);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, crate::convert::ns_to_ms(ns)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn now_ms(env: sys::napi_env, _info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, crate::convert::ns_to_ms(crate::clock::now_ns())) }
}

/// The floor of the benchmarks: a raw callback that reads its arguments (a handle-shaped
/// value and a number) and returns the number, doing nothing else.
///
/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn floor(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, _argc) = unsafe { args::<2>(env, info) };
    // SAFETY: env is this callback's; argv[1] one of its arguments (`undefined` if absent).
    let x = unsafe { number(env, argv[1]) };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, x) }
}

// ---------------------------------------------------------------------------------------
// Limiter: limiterAcquire(h, level[, nowNs]) / limiterRelease(h, id, outcome[, nowNs])

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn limiter_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<3>(env, info) };
    let h = handle_arg!(env, argv, LimiterInner);
    let level = level!(env, argv[1], h.levels);
    let now = now!(env, argv, argc, 2);
    let r = match h.core.acquire(now, level) {
        Ok(p) => h.permits.insert(p).unwrap_or_else(|p| {
            let _ = h.core.release(p, now, Outcome::Ignored);
            -1.0
        }),
        Err(AcquireError::Rejected(r)) => refuse(r),
        Err(AcquireError::TableFull) => SHM_TABLE_FULL,
    };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, r) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn limiter_release(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<4>(env, info) };
    let h = handle_arg!(env, argv, LimiterInner);
    // SAFETY: env is this callback's; argv[1] one of its arguments (`undefined` if absent).
    let id = unsafe { number(env, argv[1]) };
    let outcome = outcome!(env, argv[2]);
    let now = now!(env, argv, argc, 3);
    let r = match h.permits.take(id) {
        Some(p) => match h.core.release(p, now, outcome) {
            Ok(()) => 0.0,
            Err(ReleaseError::AlreadyReleased) => -1.0,
            Err(ReleaseError::Foreign) => -2.0,
        },
        None => -1.0,
    };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, r) }
}

// ---------------------------------------------------------------------------------------
// CircuitBreaker: breakerAcquire(h[, nowNs]) / breakerRecord(h, id, outcome[, nowNs])

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn breaker_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, BreakerInner);
    let now = now!(env, argv, argc, 1);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.acquire(now)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn breaker_record(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<4>(env, info) };
    let h = handle_arg!(env, argv, BreakerInner);
    // SAFETY: env is this callback's; argv[1] one of its arguments (`undefined` if absent).
    let id = unsafe { number(env, argv[1]) };
    let outcome = outcome!(env, argv[2]);
    let now = now!(env, argv, argc, 3);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.record(id, now, outcome)) }
}

// ---------------------------------------------------------------------------------------
// RetryBudget: budgetDeposit(h[, nowNs]) / budgetTryWithdraw(h[, nowNs]) -> 0 | -reason

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn budget_deposit(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, BudgetInner);
    let now = now!(env, argv, argc, 1);
    h.core.deposit(now);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, 0.0) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn budget_try_withdraw(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, BudgetInner);
    let now = now!(env, argv, argc, 1);
    let r = match h.core.try_withdraw(now) {
        Ok(()) => 0.0,
        Err(r) => refuse(r),
    };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, r) }
}

// ---------------------------------------------------------------------------------------
// AdaptiveThrottle: throttleCheck(h[, nowNs]) -> 0 | -reason; throttleRecord(h, accepted[, nowNs])

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn throttle_check(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, AdaptiveThrottleInner);
    let now = now!(env, argv, argc, 1);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.check(now)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn throttle_record(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<3>(env, info) };
    let h = handle_arg!(env, argv, AdaptiveThrottleInner);
    let mut accepted = false;
    // SAFETY: env is this callback's and argv[1] one of its arguments (`undefined` if not
    // passed: `napi_boolean_expected`, `accepted` untouched); `accepted` is a valid out-pointer.
    if unsafe { sys::napi_get_value_bool(env, argv[1], &mut accepted) } != sys::Status::napi_ok {
        // SAFETY: env is this callback's.
        return unsafe { throw(env, false, INVALID, "accepted must be a boolean") };
    }
    let now = now!(env, argv, argc, 2);
    h.core.record(now, accepted);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, 0.0) }
}

// ---------------------------------------------------------------------------------------
// RateLimiter: rateCheck(h, cost[, nowNs]) -> 0 | -reason

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn rate_check(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<3>(env, info) };
    let h = handle_arg!(env, argv, RateInner);
    let cost = count!(env, argv[1], u32::MAX, "cost must be a whole number in [0, 2^32)");
    let now = now!(env, argv, argc, 2);
    let r = match h.core.check(now, cost as u32) {
        Ok(()) => 0.0,
        Err(r) => refuse(r),
    };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, r) }
}

// ---------------------------------------------------------------------------------------
// KeyedLimits: keyedAcquire(h, key, cost[, nowNs]) -> id | -reason; keyedRelease(h, id)

/// Keys shorter than this many UTF-8 bytes are hashed from a stack buffer (their bytes and
/// N-API's NUL fit); longer ones allocate.
const KEY_STACK: usize = 256;

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn keyed_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<4>(env, info) };
    let h = handle_arg!(env, argv, KeyedInner);
    // SAFETY: env is this callback's and argv[1] one of its arguments.
    let Some(hash) = (unsafe { hash_string_arg(env, argv[1], h.seed()) }) else {
        // SAFETY: env is this callback's.
        return unsafe { throw(env, false, INVALID, "key must be a string") };
    };
    let cost = count!(env, argv[2], u32::MAX, "cost must be a whole number in [0, 2^32)");
    let now = now!(env, argv, argc, 3);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.acquire(hash, now, cost as u32)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn keyed_release(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, _argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, KeyedInner);
    // SAFETY: env is this callback's; argv[1] one of its arguments (`undefined` if absent).
    let id = unsafe { number(env, argv[1]) };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.release(id)) }
}

/// `hash_key(seed, utf8(v))`, or `None` if `v` is not a string (or N-API fails).
///
/// The exact UTF-8 length is asked first: N-API copies only whole characters, so a copy
/// into a buffer that is too small can come back a few bytes short without any sign of
/// truncation. The bytes are then read into a buffer of exactly that length plus the NUL.
///
/// # Safety
/// `env` must be the running callback's env and `v` NULL or a value of that callback.
pub(crate) unsafe fn hash_string_arg(
    env: sys::napi_env,
    v: sys::napi_value,
    seed: u64,
) -> Option<u64> {
    let mut len = 0usize;
    // SAFETY: env and `v` are the running callback's (this fn's contract; a non-string
    // returns `napi_string_expected`, a NULL `v` `napi_invalid_arg`); with a NULL buffer
    // N-API writes only the length in bytes, without the NUL, to `len`.
    let status = unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) };
    if status != sys::Status::napi_ok {
        return None;
    }
    let size = len.checked_add(1)?;
    let mut stack = [0u8; KEY_STACK];
    let mut heap = Vec::new();
    let buf: &mut [u8] = if size <= KEY_STACK {
        &mut stack[..size]
    } else {
        heap.resize(size, 0u8);
        &mut heap[..]
    };
    let mut copied = 0usize;
    // SAFETY: env and `v` as above (`v` is a string); `buf` is writable for the `buf.len()`
    // bytes passed as its size, and N-API writes at most `buf.len() - 1` of them plus a NUL.
    let status = unsafe {
        sys::napi_get_value_string_utf8(
            env,
            v,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut copied,
        )
    };
    // The whole string fits, so anything but all `len` bytes is a failure, not a key.
    if status != sys::Status::napi_ok || copied != len {
        return None;
    }
    Some(surgeguard_core::keyed::hash_key(seed, &buf[..len]))
}

// ---------------------------------------------------------------------------------------
// Registration

/// A raw hot-path callback, as registered by [`create_fast_object`].
///
/// # Safety
/// Only N-API calls these: `env` is the env of the JS thread making the call and `info`
/// that call's callback info, both valid until the callback returns, and no JS runs while
/// it does. Every `unsafe` block in a callback relies on this; reading the handle also
/// relies on the facade passing only handles (see [`crate::handle::get`]). A panic inside
/// one aborts the process (it cannot unwind out of an `extern "C"` fn).
pub(crate) type Callback =
    unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

const FAST: &[(&str, Callback)] = &[
    ("lastRetryAfterMs", last_retry_after_ms),
    ("nowMs", now_ms),
    ("floor", floor),
    ("limiterAcquire", limiter_acquire),
    ("limiterRelease", limiter_release),
    ("breakerAcquire", breaker_acquire),
    ("breakerRecord", breaker_record),
    ("budgetDeposit", budget_deposit),
    ("budgetTryWithdraw", budget_try_withdraw),
    ("throttleCheck", throttle_check),
    ("throttleRecord", throttle_record),
    ("rateCheck", rate_check),
    ("keyedAcquire", keyed_acquire),
    ("keyedRelease", keyed_release),
];

/// The `fast` object: every raw callback above as a plain function.
pub fn create_fast_object(env: &Env) -> Result<Object<'_>> {
    let mut obj = Object::new(env)?;
    for (name, cb) in FAST.iter().chain(crate::gate::FAST).chain(crate::shared_gate::FAST) {
        let mut f = ptr::null_mut();
        // SAFETY: `env` is the live env napi-rs gave `init`; `name` is valid for its
        // `len` bytes (N-API copies it); `cb` is a `Callback` (N-API passes it a valid
        // env/info on every call); no data pointer; `f` is a valid out-pointer.
        let status = unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr().cast::<c_char>(),
                name.len() as isize,
                Some(*cb),
                ptr::null_mut::<c_void>(),
                &mut f,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(Error::new(Status::GenericFailure, format!("could not create {name}")));
        }
        // SAFETY: `f` is a function value N-API just created in `env` (status checked), and
        // it is used while `env`'s handle scope is open.
        obj.set(name, unsafe { Unknown::from_raw_unchecked(env.raw(), f) })?;
    }
    Ok(obj)
}

/// Tags of the handle types (ASCII "SG" + a kind number), checked on every fast call.
pub mod tags {
    /// `Limiter`.
    pub const LIMITER: u64 = 0x5347_0000_0000_0001;
    /// `Gate`.
    pub const GATE: u64 = 0x5347_0000_0000_0002;
    /// `CircuitBreaker`.
    pub const BREAKER: u64 = 0x5347_0000_0000_0003;
    /// `RetryBudget`.
    pub const BUDGET: u64 = 0x5347_0000_0000_0004;
    /// `RateLimiter`.
    pub const RATE: u64 = 0x5347_0000_0000_0005;
    /// `KeyedLimits`.
    pub const KEYED: u64 = 0x5347_0000_0000_0006;
    /// `AdaptiveThrottle`.
    pub const THROTTLE: u64 = 0x5347_0000_0000_0007;
    /// `Gate.shared`.
    pub const SHARED_GATE: u64 = 0x5347_0000_0000_0008;
}
