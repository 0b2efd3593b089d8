//! Handles: how the raw hot-path callbacks find their Rust object without `napi_unwrap`.
//!
//! A handle is an N-API external pointing at a boxed `{ tag, Rc<T> }`. The facade keeps it
//! next to the class instance and passes it as the first argument of the `fast.*`
//! functions; reading it back is one `napi_get_value_external` plus a tag compare, where a
//! class method pays `napi_unwrap` (~80 ns, measured on the development machine). The box holds its
//! own `Rc`, so the object lives as long as either the class instance or any handle.

use std::ffi::c_void;
use std::ptr;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;

/// A type reachable through a handle. Each has its own tag, so a handle of one kind given
/// to another kind's function is refused instead of misread.
pub trait Tagged {
    /// A constant unique to the type.
    const TAG: u64;
}

/// What the external points at. `repr(C)` so the tag is the first word.
#[repr(C)]
struct HandleBox<T> {
    tag: u64,
    inner: Rc<T>,
}

/// Frees a handle's box when its external is collected.
///
/// # Safety
/// Only as the finalizer of an external made by `new_handle::<T>` (same `T`), with that
/// external's `data`: N-API calls it once, on the JS thread that owns the `Rc`.
unsafe extern "C" fn finalize<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: per this fn's contract, `data` is the `Box<HandleBox<T>>` that
    // `new_handle::<T>` leaked with `Box::into_raw`, reclaimed here exactly once; the `Rc`
    // inside is dropped on its own thread.
    drop(unsafe { Box::from_raw(data.cast::<HandleBox<T>>()) });
}

/// A new handle to `inner`.
pub fn new_handle<'env, T: Tagged>(env: &'env Env, inner: &Rc<T>) -> Result<Unknown<'env>> {
    let data = Box::into_raw(Box::new(HandleBox { tag: T::TAG, inner: Rc::clone(inner) }));
    let mut value = ptr::null_mut();
    // SAFETY: `env` is a live env from napi-rs (this runs inside a napi-rs call on its
    // thread); `data` is a leaked `Box<HandleBox<T>>`, valid until `finalize::<T>` (the
    // matching finalizer) frees it; `value` is a valid out-pointer.
    let status = unsafe {
        sys::napi_create_external(
            env.raw(),
            data.cast(),
            Some(finalize::<T>),
            ptr::null_mut(),
            &mut value,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: the call failed, so N-API did not take `data` and will never call the
        // finalizer; `data` came from `Box::into_raw` above and is reclaimed once.
        drop(unsafe { Box::from_raw(data) });
        return Err(Error::new(Status::GenericFailure, "could not create a handle"));
    }
    // SAFETY: `value` is an external N-API just created in `env` (status checked); the
    // `Unknown` is tied to `env`'s lifetime.
    Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), value) })
}

/// The object behind `value`, if it is a handle of type `T`.
///
/// # Safety
/// `env` and `value` must come from the current callback; the returned reference must not
/// outlive it (the external is kept alive by the argument list for that long). `value`
/// must not be an external made by other native code (another addon, or napi-rs): such an
/// external's data is read as a `HandleBox` tag, which is undefined behaviour unless it
/// points at 8 readable, aligned bytes. Nothing here can check that; the facade never
/// passes such values, but JS calling `fast.*` directly could.
#[inline]
pub unsafe fn get<'a, T: Tagged>(env: sys::napi_env, value: sys::napi_value) -> Option<&'a T> {
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: env and `value` are the current callback's (this fn's contract; a NULL or
    // non-external `value` returns an error status and leaves `data` NULL); `data` is a valid
    // out-pointer.
    let status = unsafe { sys::napi_get_value_external(env, value, &mut data) };
    if status != sys::Status::napi_ok || data.is_null() {
        return None;
    }
    // Externals made by other code could point anywhere; ours are boxes whose first word
    // is a tag. Reading one aligned word of another module's external is the accepted risk
    // of a private handle API (the facade never passes foreign externals).
    let boxed = data.cast::<HandleBox<T>>();
    // SAFETY: `data` is non-NULL and, by this fn's contract, the data of an external made by
    // `new_handle::<U>` for some `U`: a live `Box<HandleBox<U>>` (the external is alive, so
    // its finalizer has not run). `repr(C)` puts `tag` first at every `U`, so reading it
    // as `HandleBox<T>` is in bounds; equal tags mean `U == T` (tags are unique per type),
    // so `inner` is an `Rc<T>`, which keeps the `T` alive as long as the external.
    unsafe {
        if (*boxed).tag != T::TAG {
            return None;
        }
        Some(&*Rc::as_ptr(&(*boxed).inner))
    }
}

/// Tags of the handle types (ASCII "SG" + a kind number), checked on every fast call. One
/// list, so no two types share a tag.
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
