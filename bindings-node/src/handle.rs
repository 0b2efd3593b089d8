//! Handles: how the raw hot-path callbacks find their Rust object without `napi_unwrap`.
//!
//! A handle is an N-API external pointing at a boxed `{ tag, Rc<T> }`. The facade keeps it
//! next to the class instance and passes it as the first argument of the `fast.*`
//! functions; reading it back is one `napi_get_value_external` plus a tag compare, where a
//! class method pays `napi_unwrap` (~80 ns, `research/ffi-costs.md`). The box holds its
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

unsafe extern "C" fn finalize<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<HandleBox<T>>` leaked by `new_handle::<T>`; N-API calls the
    // finalizer exactly once, when the external is collected.
    drop(unsafe { Box::from_raw(data.cast::<HandleBox<T>>()) });
}

/// A new handle to `inner`.
pub fn new_handle<'env, T: Tagged>(env: &'env Env, inner: &Rc<T>) -> Result<Unknown<'env>> {
    let data = Box::into_raw(Box::new(HandleBox { tag: T::TAG, inner: Rc::clone(inner) }));
    let mut value = ptr::null_mut();
    // SAFETY: a valid env from napi-rs; `data` stays valid until `finalize::<T>` frees it.
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
        // SAFETY: N-API did not take ownership; reclaim the box.
        drop(unsafe { Box::from_raw(data) });
        return Err(Error::new(Status::GenericFailure, "could not create a handle"));
    }
    // SAFETY: `value` was just created in `env`.
    Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), value) })
}

/// The object behind `value`, if it is a handle of type `T`.
///
/// # Safety
/// `env` and `value` must come from the current callback; the returned reference must not
/// outlive it (the external is kept alive by the argument list for that long).
#[inline]
pub unsafe fn get<'a, T: Tagged>(env: sys::napi_env, value: sys::napi_value) -> Option<&'a T> {
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: per the caller's contract; a non-external value returns an error status.
    let status = unsafe { sys::napi_get_value_external(env, value, &mut data) };
    if status != sys::Status::napi_ok || data.is_null() {
        return None;
    }
    // Externals made by other code could point anywhere; ours are boxes whose first word
    // is a tag. Reading one aligned word of another module's external is the accepted risk
    // of a private handle API (the facade never passes foreign externals).
    let boxed = data.cast::<HandleBox<T>>();
    // SAFETY: `data` is non-null and, for our externals, a live `HandleBox`.
    unsafe {
        if (*boxed).tag != T::TAG {
            return None;
        }
        Some(&*Rc::as_ptr(&(*boxed).inner))
    }
}
