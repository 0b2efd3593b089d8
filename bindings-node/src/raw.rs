//! The raw N-API toolkit of the hot-path callbacks: argument reading, handle checks,
//! number conversion, the optional trailing `nowNs`, return values, argument errors and the
//! per-thread `retry_after` of the last refusal.
//!
//! Nothing here knows a family: each family's callbacks sit beside its class (`limiter.rs`,
//! `gate.rs`, `resilience.rs`, `keyed.rs`, `shared_gate.rs`) and build on these helpers;
//! `fast` registers them all on `exports.fast`. The helpers call N-API directly (no
//! napi-rs wrapper), allocate only to throw, and the hot ones are `#[inline]`.

use std::cell::Cell;
use std::ffi::CString;
use std::ptr;

use napi::sys;
use surgeguard_core::{Outcome, Rejected};

use crate::handle::Tagged;

/// A raw hot-path callback, as registered on `exports.fast` by `fast`.
///
/// # Safety
/// Only N-API calls these: `env` is the env of the JS thread making the call and `info`
/// that call's callback info, both valid until the callback returns, and no JS runs while
/// it does. Every `unsafe` block in a callback relies on this; reading the handle also
/// relies on the facade passing only handles (see [`crate::handle::get`]). A panic inside
/// one aborts the process (it cannot unwind out of an `extern "C"` fn).
pub(crate) type Callback =
    unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// A callback's result when a shared object's process table is full of live processes
/// (below every `-reason`).
pub const SHM_TABLE_FULL: f64 = -64.0;

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

/// `retry_after` (ns) of the last refusal on this thread (0 before the first).
#[inline]
pub fn last_retry_ns() -> u64 {
    LAST_RETRY_NS.with(Cell::get)
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

/// Throws the `TypeError` (`SG_INVALID_ARG`) of an argument of the wrong type; returns
/// NULL for the callback to return.
///
/// # Safety
/// `env` must be the running callback's env.
#[cold]
pub(crate) unsafe fn bad_type(env: sys::napi_env, msg: &str) -> sys::napi_value {
    // SAFETY: env is the running callback's (this fn's contract), as `throw` requires.
    unsafe { throw(env, false, INVALID, msg) }
}

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
    // SAFETY: env is the running callback's (this fn's contract), as `bad_type` requires.
    unsafe { bad_type(env, "not a handle of this kind") }
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

// ---------------------------------------------------------------------------------------
// Argument macros: each reads one argument of the running callback or returns the thrown
// error from it (so they are macros, not functions).

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
            None => return unsafe { $crate::raw::bad_handle($env) },
        }
    };
}

/// `now` from an optional trailing `nowNs` BigInt at `i`, else the clock.
macro_rules! now {
    ($env:expr, $argv:expr, $argc:expr, $i:expr) => {
        if $argc > $i {
            // SAFETY: env and argv[$i] are the running callback's ($i < N, so the slot was
            // filled by `args`).
            match unsafe { $crate::raw::bigint_now($env, $argv[$i]) } {
                Ok(Some(t)) => t,
                Ok(None) => $crate::clock::now_ns(),
                Err(range) => {
                    // SAFETY: env is the running callback's.
                    return unsafe {
                        $crate::raw::throw(
                            $env,
                            range,
                            $crate::raw::INVALID,
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

/// A level argument: a whole number below `levels`.
macro_rules! level {
    ($env:expr, $v:expr, $levels:expr) => {{
        // SAFETY: env and the value are the running callback's (an argument from `args`).
        let x = unsafe { $crate::raw::number($env, $v) };
        if x >= 0.0 && x < f64::from($levels) && x.fract() == 0.0 {
            ::surgeguard_core::Priority::new(x as u8).expect("below levels ≤ 8")
        } else {
            // SAFETY: env is the running callback's.
            return unsafe { $crate::raw::bad_number($env, $v, "priority out of range") };
        }
    }};
}

/// An outcome argument: 0, 1 or 2 (used by the shapes below).
macro_rules! outcome {
    ($env:expr, $v:expr) => {{
        // SAFETY: env and the value are the running callback's (an argument from `args`).
        let x = unsafe { $crate::raw::number($env, $v) };
        match x {
            0.0 => ::surgeguard_core::Outcome::Success,
            1.0 => ::surgeguard_core::Outcome::Dropped,
            2.0 => ::surgeguard_core::Outcome::Ignored,
            _ => {
                // SAFETY: env is the running callback's.
                return unsafe { $crate::raw::bad_number($env, $v, "outcome must be 0, 1 or 2") };
            }
        }
    }};
}

/// A whole-number argument in `[0, max]`.
macro_rules! count {
    ($env:expr, $v:expr, $max:expr, $what:expr) => {{
        // SAFETY: env and the value are the running callback's (an argument from `args`).
        let x = unsafe { $crate::raw::number($env, $v) };
        if x >= 0.0 && x <= $max as f64 && x.fract() == 0.0 {
            x
        } else {
            // SAFETY: env is the running callback's.
            return unsafe { $crate::raw::bad_number($env, $v, $what) };
        }
    }};
}

pub(crate) use {count, handle_arg, level, now};

// ---------------------------------------------------------------------------------------
// Callback shapes shared by several families. `inline(always)`: each callback built on one
// compiles to the code it would be written out by hand (the closure is a static call).

/// The body of a callback `(h[, nowNs])`: reads the handle and the time, returns
/// `f(h, now)`.
///
/// # Safety
/// `env` and `info` must be the arguments N-API passed to the [`Callback`] now running.
#[inline(always)]
pub(crate) unsafe fn handle_now<T: Tagged>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    f: impl FnOnce(&T, u64) -> f64,
) -> sys::napi_value {
    // SAFETY: env and info are the running callback's (this fn's contract).
    let (argv, argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, T);
    let now = now!(env, argv, argc, 1);
    // SAFETY: env is the running callback's, open until it returns.
    unsafe { ret(env, f(h, now)) }
}

/// The body of a callback `(h, id, outcome[, nowNs])` that ends a permit: reads the
/// handle, the permit id, the outcome and the time, returns `f(h, id, now, outcome)`.
///
/// # Safety
/// `env` and `info` must be the arguments N-API passed to the [`Callback`] now running.
#[inline(always)]
pub(crate) unsafe fn handle_id_outcome_now<T: Tagged>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    f: impl FnOnce(&T, f64, u64, Outcome) -> f64,
) -> sys::napi_value {
    // SAFETY: env and info are the running callback's (this fn's contract).
    let (argv, argc) = unsafe { args::<4>(env, info) };
    let h = handle_arg!(env, argv, T);
    // SAFETY: env is the running callback's; argv[1] one of its arguments (`undefined` if
    // absent).
    let id = unsafe { number(env, argv[1]) };
    let outcome = outcome!(env, argv[2]);
    let now = now!(env, argv, argc, 3);
    // SAFETY: env is the running callback's, open until it returns.
    unsafe { ret(env, f(h, id, now, outcome)) }
}
