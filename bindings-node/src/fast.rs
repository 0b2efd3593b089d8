//! `exports.fast`: the raw N-API callbacks of the hot paths, registered as plain functions.
//!
//! Why raw: a napi-rs class method costs ~250 ns here, a raw free function ~30 ns
//! (measured on the development machine; `bench/bench.js` reports the raw-call floor). Each
//! callback reads its handle with `napi_get_value_external` (no `napi_unwrap`), its numbers
//! with `napi_get_value_double`, reads the clock natively unless a `nowNs` BigInt is passed
//! last, calls the core once and returns one number. The helpers they share are in
//! [`crate::raw`]; each family's callbacks sit beside its class (`limiter.rs`, `gate.rs`,
//! `resilience.rs`, `keyed.rs`, `shared_gate.rs`), and this module only lists them.
//!
//! Return conventions (all plain numbers):
//! - acquire-like calls return a permit id (`≥ 0`) or `-reason` (the core's `Reason` wire
//!   value, 1..=15) on refusal; the refusal's `retry_after` is then read with
//!   `lastRetryAfterMs()` (a per-thread cell, valid until the next refusal);
//! - `limiterAcquire` on a shared limiter returns `-64` ([`SHM_TABLE_FULL`]) when its
//!   process table is full;
//! - `gateArrive` also returns `-(QUEUED_BASE + ticket)` when the arrival waits
//!   ([`crate::gate::QUEUED_BASE`]);
//! - release-like calls return `≥ 0` on success and `-1` (not a live permit: already
//!   released or never issued) or `-2` (another object's permit) otherwise; the facade
//!   turns those into `OverloadError`s;
//! - bad argument types throw a `TypeError`, out-of-range values (a `nowNs` above 2^62
//!   included) a `RangeError`, both with code `SG_INVALID_ARG` like the facade's own
//!   argument errors, before any state changes.
//!
//! [`SHM_TABLE_FULL`]: crate::raw::SHM_TABLE_FULL

use std::ffi::{c_char, c_void};
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;

use crate::raw::{args, last_retry_ns, number, ret, Callback};

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn last_retry_after_ms(
    env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    let ns = last_retry_ns();
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

/// The callbacks that belong to no family.
const GENERAL: &[(&str, Callback)] =
    &[("lastRetryAfterMs", last_retry_after_ms), ("nowMs", now_ms), ("floor", floor)];

/// Every family's callbacks, in registration order.
const FAMILIES: &[&[(&str, Callback)]] = &[
    GENERAL,
    crate::limiter::FAST,
    crate::resilience::FAST,
    crate::keyed::FAST,
    crate::gate::FAST,
    crate::shared_gate::FAST,
];

/// The `fast` object: every raw callback above as a plain function.
pub fn create_fast_object(env: &Env) -> Result<Object<'_>> {
    let mut obj = Object::new(env)?;
    for (name, cb) in FAMILIES.iter().copied().flatten() {
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
