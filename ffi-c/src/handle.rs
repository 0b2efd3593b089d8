//! The boundary: panic catching, pointer checks, and the life cycle shared by every
//! object type (heap handles and init-in-place).

use core::ffi::c_void;
use core::ptr::{self, NonNull};
use std::alloc::{alloc, Layout};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::status::sg_status::{self, *};

/// A body's result: `Err` carries the status to return (nothing was written).
pub(crate) type Res<T = ()> = Result<T, sg_status>;

/// Runs an exported function's body: `Ok` → `SG_OK`, `Err(s)` → `s`, a panic → `SG_PANIC`.
/// No panic ever unwinds into C.
pub(crate) fn ffi(body: impl FnOnce() -> Res) -> sg_status {
    ffi_status(|| body().map(|()| SG_OK))
}

/// As [`ffi`] for bodies that choose their success status (`SG_QUEUED`, `SG_REJECTED`).
pub(crate) fn ffi_status(body: impl FnOnce() -> Res<sg_status>) -> sg_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(s)) | Ok(Err(s)) => s,
        Err(_) => SG_PANIC,
    }
}

/// As [`ffi`] for functions that return a plain value: a panic returns `fallback`.
pub(crate) fn ffi_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// An output pointer checked for NULL: [`Out::write`] stores the result once the call
/// has succeeded.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// Where the output goes.
    #[allow(dead_code)]
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.0.as_ptr()
    }

    pub(crate) fn write(self, value: T) {
        // SAFETY: `out` checked the pointer for NULL, and the crate's contract (lib.rs,
        // "Safety") makes the caller promise it is writable (and aligned) for one `T`.
        // `write` does not read or drop the old contents, which may be uninitialised.
        // (`out`/`out_opt` are safe fns, so this rests on every caller passing them only
        // pointer arguments of an exported function, which is the case in this crate.)
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// Checks an output pointer: NULL → `SG_NULL_ARGUMENT`.
pub(crate) fn out<T>(p: *mut T) -> Res<Out<T>> {
    NonNull::new(p).map(Out).ok_or(SG_NULL_ARGUMENT)
}

/// An optional output pointer (documented as such): NULL means "not wanted".
pub(crate) fn out_opt<T>(p: *mut T) -> Option<Out<T>> {
    NonNull::new(p).map(Out)
}

/// Checks an input pointer and borrows it.
///
/// # Safety
/// `p` must be NULL or valid for reads of one `T` for `'a` (the crate's contract).
pub(crate) unsafe fn input<'a, T>(p: *const T) -> Res<&'a T> {
    // SAFETY: this fn's contract: `p` is NULL (`as_ref` gives `None`) or aligned and valid
    // for reads of one `T` for `'a`, and nothing writes it meanwhile.
    unsafe { p.as_ref() }.ok_or(SG_NULL_ARGUMENT)
}

/// The body of every `sg_<type>_release(handle, permit, now, outcome)`: checks, in this
/// order, `now` (`SG_TIME_OUT_OF_RANGE`), the permit storage (NULL: `SG_NULL_ARGUMENT`),
/// the outcome (`SG_OUTCOME_*`, else `SG_INVALID_ARGUMENT`) and the handle, then runs
/// `release` on the object under the panic boundary.
///
/// # Safety
/// `handle` as in [`with`]; `permit` must be NULL or storage readable for one `P` for the
/// call (the crate's contract). The permit types keep their words in `UnsafeCell`s, so
/// `release` may update the state word through the shared borrow.
pub(crate) unsafe fn release_with<T: Object, P>(
    handle: *mut T,
    permit: *mut P,
    now: u64,
    outcome: u32,
    release: impl FnOnce(&Obj<T::Inner>, &P, u64, surgeguard_core::Outcome) -> Res,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: this fn's contract for `permit`.
        let permit = unsafe { input(permit.cast_const())? };
        let outcome = crate::vocab::outcome(outcome)?;
        // SAFETY: this fn's contract for `handle`.
        unsafe { with(handle, |o| release(o, permit, now, outcome)) }
    })
}

/// Reports a refusal: writes the optional `sg_rejection` output and says `SG_REJECTED`.
pub(crate) fn rejected(
    rejection_out: *mut crate::status::sg_rejection,
    r: surgeguard_core::Rejected,
) -> sg_status {
    if let Some(o) = out_opt(rejection_out) {
        o.write(r.into());
    }
    SG_REJECTED
}

/// Process-wide object ids: a permit records its issuer's id, so a permit of another
/// object is recognised (ids are never reused, unlike addresses).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Magic of a deinitialised or freed object.
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;
/// XORed into a type's magic when a panic poisons the object.
const POISON: u64 = 0xFF;

/// The first field of every object: what it is, whether it is alive, who it is.
#[derive(Debug)]
pub(crate) struct Head {
    /// The type's magic while alive; `magic ^ POISON` once poisoned; `DEAD` after.
    magic: AtomicU64,
    /// Never reused in this process.
    pub(crate) id: u64,
    /// Made by `_new` (free with `_free`) or by `_init` (end with `_deinit`).
    heap: bool,
}

/// An exported object type: an opaque marker (`pub struct sg_limiter { _opaque: [u8; 0] }`,
/// which cbindgen turns into `typedef struct sg_limiter sg_limiter;`) whose handles point
/// at an [`Obj`] holding the core structure.
pub(crate) trait Object: Sized {
    /// The core structure inside.
    type Inner;
    /// This type's magic: identifies the handle's type and life.
    const MAGIC: u64;
}

/// What a handle points at. `repr(C)` puts the head first, so checking the magic of a
/// wrong or dead handle reads only its first words.
#[repr(C)]
pub(crate) struct Obj<I> {
    pub(crate) head: Head,
    pub(crate) inner: I,
}

impl<I> Obj<I> {
    fn head(&self) -> &Head {
        &self.head
    }
}

/// `sg_<type>_size()`.
pub(crate) fn obj_size<T: Object>() -> usize {
    size_of::<Obj<T::Inner>>()
}

/// `sg_<type>_align()`.
pub(crate) fn obj_align<T: Object>() -> usize {
    align_of::<Obj<T::Inner>>()
}

/// Declares `$t` (an opaque marker) an [`Object`] holding `$inner`.
macro_rules! object {
    ($t:ty, $inner:ty, $magic:expr) => {
        impl crate::handle::Object for $t {
            type Inner = $inner;
            const MAGIC: u64 = $magic;
        }
    };
}
pub(crate) use object;

impl Head {
    fn new<T: Object>(heap: bool) -> Self {
        Self {
            magic: AtomicU64::new(T::MAGIC),
            // Relaxed: a unique number is all that is needed.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            heap,
        }
    }

    /// `Ok` if alive, `SG_PANIC` if poisoned, `SG_INVALID_HANDLE` otherwise.
    fn check<T: Object>(&self) -> Res {
        // Relaxed: the magic guards against misuse by one thread (a stale or wrong handle);
        // ending an object while others use it is outside the contract.
        match self.magic.load(Ordering::Relaxed) {
            m if m == T::MAGIC => Ok(()),
            m if m == T::MAGIC ^ POISON => Err(SG_PANIC),
            _ => Err(SG_INVALID_HANDLE),
        }
    }

    fn poison<T: Object>(&self) {
        // Relaxed: see `check`.
        let _ = self.magic.compare_exchange(
            T::MAGIC,
            T::MAGIC ^ POISON,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Marks the object dead if it is alive or poisoned and was made the `heap` way.
    fn end<T: Object>(&self, heap: bool) -> Res {
        match self.check::<T>() {
            Ok(()) | Err(SG_PANIC) if self.heap == heap => {
                // Relaxed: see `check`.
                self.magic.store(DEAD, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(SG_INVALID_HANDLE),
        }
    }
}

/// Borrows a live object and runs `f` on it; a panic inside poisons the object.
///
/// # Safety
/// `p` must be NULL or a pointer the crate's contract allows for a `T` handle.
pub(crate) unsafe fn with<T: Object, R>(
    p: *const T,
    f: impl FnOnce(&Obj<T::Inner>) -> Res<R>,
) -> Res<R> {
    // SAFETY: this fn's contract: `p` is NULL (`as_ref` gives `None`) or a `T` handle, i.e.
    // the address of an `Obj<T::Inner>` that `_new` allocated or `_init` wrote, not freed
    // (storage that `_deinit` ended still holds the `Obj`'s bytes, so the reference stays in
    // bounds; only the head is read, and `check` then refuses it). The magic check is a
    // best-effort guard against misuse, not what makes this sound: a handle of another type
    // or a freed one is outside the contract. The `&Obj` may be shared by several threads at
    // once: every `Inner` used with `with` is `Sync` (not enforced by a bound today).
    let obj = unsafe { p.cast::<Obj<T::Inner>>().as_ref() }.ok_or(SG_NULL_ARGUMENT)?;
    obj.head().check::<T>()?;
    match catch_unwind(AssertUnwindSafe(|| f(obj))) {
        Ok(r) => r,
        Err(_) => {
            obj.head().poison::<T>();
            Err(SG_PANIC)
        }
    }
}

/// As [`with`], with exclusive access (for the types that are not thread-safe).
///
/// # Safety
/// As [`with`], and no other thread may use the object during the call.
pub(crate) unsafe fn with_mut<T: Object, R>(
    p: *mut T,
    f: impl FnOnce(&mut Obj<T::Inner>) -> Res<R>,
) -> Res<R> {
    if p.is_null() {
        return Err(SG_NULL_ARGUMENT);
    }
    let p = p.cast::<Obj<T::Inner>>();
    // Taken from `p` itself, not from the `&mut` below: that one is handed to `f`, which
    // (under Stacked Borrows) invalidates pointers derived from it.
    // SAFETY: `p` is non-NULL and (this fn's contract, as in `with`) points at an `Obj`, so
    // the projection to its `head` field stays in bounds; no reference is made.
    let head: *const Head = unsafe { &raw const (*p).head };
    // SAFETY: this fn's contract, as in `with`; in addition no other thread (and no other
    // reference) uses the object during the call (the documented condition of the types
    // that are not thread-safe), so the `&mut` is unique.
    let obj = unsafe { &mut *p };
    obj.head().check::<T>()?;
    match catch_unwind(AssertUnwindSafe(|| f(obj))) {
        Ok(r) => r,
        Err(_) => {
            // SAFETY: `head` points into the object, which is still alive (only `_free`
            // and `_deinit` end it), and the `&mut` given to `f` is dead (the closure has
            // returned); `head` comes from `p`, not from that `&mut`.
            unsafe { &*head }.poison::<T>();
            Err(SG_PANIC)
        }
    }
}

/// `sg_<type>_new`: validates, builds, allocates, and writes the handle to `out`.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
pub(crate) unsafe fn new_object<T: Object>(
    out_handle: *mut *mut T,
    make: impl FnOnce() -> Res<T::Inner>,
) -> sg_status {
    ffi(|| {
        crate::field::clear();
        let out_handle = out(out_handle)?;
        let inner = make()?;
        let layout = Layout::new::<Obj<T::Inner>>();
        // SAFETY: `alloc` requires a non-zero-sized layout: an `Obj` holds at least the
        // `Head` (two `u64`s and a `bool`).
        let mem = unsafe { alloc(layout) }.cast::<Obj<T::Inner>>();
        if mem.is_null() {
            return Err(SG_OUT_OF_MEMORY);
        }
        // SAFETY: `mem` is a fresh allocation with `Obj`'s layout; `_free` gives it back with
        // `Box::from_raw`, which uses the same global allocator and layout.
        unsafe { mem.write(Obj { head: Head::new::<T>(true), inner }) };
        out_handle.write(mem.cast::<T>());
        Ok(())
    })
}

/// As [`new_object`], for large objects: `build` writes the core structure straight into
/// the allocation (no copy of it on the stack), or fails having written nothing.
///
/// # Safety
/// `out` must be NULL or writable for one pointer. `build` must either write a valid
/// `T::Inner` to the pointer it gets and return `Ok`, or return `Err` without writing.
pub(crate) unsafe fn new_object_in_place<T: Object>(
    out_handle: *mut *mut T,
    build: impl FnOnce(*mut T::Inner) -> Res,
) -> sg_status {
    ffi(|| {
        crate::field::clear();
        let out_handle = out(out_handle)?;
        let layout = Layout::new::<Obj<T::Inner>>();
        // SAFETY: as in `new_object` (a non-zero-sized layout).
        let mem = unsafe { alloc(layout) }.cast::<Obj<T::Inner>>();
        if mem.is_null() {
            return Err(SG_OUT_OF_MEMORY);
        }
        // SAFETY: `mem` is a fresh allocation with `Obj`'s layout; the field projection
        // stays in bounds and makes no reference.
        if let Err(e) = build(unsafe { &raw mut (*mem).inner }) {
            // SAFETY: allocated just above with this layout; nothing in it needs dropping
            // (`build` wrote nothing when it failed).
            unsafe { std::alloc::dealloc(mem.cast(), layout) };
            return Err(e);
        }
        // SAFETY: as above; the head is written once, after the inner structure.
        unsafe { (&raw mut (*mem).head).write(Head::new::<T>(true)) };
        out_handle.write(mem.cast::<T>());
        Ok(())
    })
}

/// As [`init_object`], for large objects: `build` writes the core structure straight into
/// the caller's storage.
///
/// # Safety
/// `mem` must be NULL or writable for `len` bytes; `build` as in [`new_object_in_place`].
pub(crate) unsafe fn init_object_in_place<T: Object>(
    mem: *mut c_void,
    len: usize,
    build: impl FnOnce(*mut T::Inner) -> Res,
) -> sg_status {
    ffi(|| {
        crate::field::clear();
        if mem.is_null() {
            return Err(SG_NULL_ARGUMENT);
        }
        if len < obj_size::<T>() {
            return Err(SG_BUFFER_TOO_SMALL);
        }
        if (mem as usize) % obj_align::<T>() != 0 {
            return Err(SG_MISALIGNED);
        }
        let p = mem.cast::<Obj<T::Inner>>();
        // SAFETY: `mem` is non-NULL, aligned for `Obj` and (the caller's contract) writable
        // for `len ≥ size_of::<Obj>()` bytes; the projection makes no reference.
        build(unsafe { &raw mut (*p).inner })?;
        // SAFETY: as above.
        unsafe { (&raw mut (*p).head).write(Head::new::<T>(false)) };
        Ok(())
    })
}

/// `sg_<type>_free`: NULL-safe; a handle that is not a live heap object is left alone.
///
/// # Safety
/// `p` must be NULL or a pointer returned by `sg_<type>_new` and not yet freed.
pub(crate) unsafe fn free_object<T: Object>(p: *mut T) {
    let _ = ffi(|| {
        if p.is_null() {
            return Ok(());
        }
        let p = p.cast::<Obj<T::Inner>>();
        // SAFETY: this fn's contract: `p` (non-NULL, checked) came from `_new` and is not yet
        // freed, so it points at an allocated `Obj`; only its head is read. (A handle from
        // `_init` is also readable; `end` refuses it because `heap` is false.)
        unsafe { &*p }.head().end::<T>(true)?;
        // SAFETY: `end` confirmed a live heap object, allocated by `new_object` with `Obj`'s
        // layout by the global allocator; it is dropped once (its magic is now DEAD).
        drop(unsafe { Box::from_raw(p) });
        Ok(())
    });
}

/// `sg_<type>_init`: validates, builds, and writes the object into the caller's storage.
///
/// # Safety
/// `mem` must be NULL or writable for `len` bytes.
pub(crate) unsafe fn init_object<T: Object>(
    mem: *mut c_void,
    len: usize,
    make: impl FnOnce() -> Res<T::Inner>,
) -> sg_status {
    ffi(|| {
        crate::field::clear();
        if mem.is_null() {
            return Err(SG_NULL_ARGUMENT);
        }
        if len < obj_size::<T>() {
            return Err(SG_BUFFER_TOO_SMALL);
        }
        if (mem as usize) % obj_align::<T>() != 0 {
            return Err(SG_MISALIGNED);
        }
        let inner = make()?;
        let obj = Obj { head: Head::new::<T>(false), inner };
        // SAFETY: `mem` is non-NULL, aligned for `Obj` and (the caller's contract) writable for
        // `len ≥ size_of::<Obj>()` bytes; its old contents are not read.
        unsafe { ptr::write(mem.cast::<Obj<T::Inner>>(), obj) };
        Ok(())
    })
}

/// `sg_<type>_deinit`: ends an object made by `_init` (NULL: nothing to do). The storage
/// keeps a dead marker, so a later call with it says `SG_INVALID_HANDLE`.
///
/// # Safety
/// `p` must be NULL or storage initialised by `sg_<type>_init` (or holding the dead marker).
pub(crate) unsafe fn deinit_object<T: Object>(p: *mut T) -> sg_status {
    ffi(|| {
        if p.is_null() {
            return Ok(());
        }
        let p = p.cast::<Obj<T::Inner>>();
        // SAFETY: this fn's contract: `p` (non-NULL, checked) is storage `_init` wrote, so it
        // holds an `Obj`'s bytes (live, or ended with `DEAD` in the head); only the head is
        // read, and `end` checks it is live and made by `_init`.
        unsafe { &*p }.head().end::<T>(false)?;
        // SAFETY: a live object, now marked dead, dropped exactly once; the storage stays
        // the caller's (its head still reads DEAD: the `Head` has no drop glue).
        unsafe { ptr::drop_in_place(p) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dummy {
        _opaque: [u8; 0],
    }
    object!(Dummy, u32, 0x5347_5445_5354_0001);

    #[test]
    fn a_panic_poisons_the_object_and_free_still_works() {
        let mut h: *mut Dummy = ptr::null_mut();
        // SAFETY: `h` is a valid output slot.
        assert_eq!(unsafe { new_object::<Dummy>(&mut h, || Ok(7)) }, SG_OK);
        // SAFETY: `h` is a live handle from `new_object`.
        let got = unsafe { with(h, |d| Ok(d.inner)) };
        assert_eq!(got, Ok(7));
        let st = ffi(|| {
            // SAFETY: as above.
            unsafe { with(h, |_: &Obj<u32>| -> Res { panic!("boom") }) }
        });
        assert_eq!(st, SG_PANIC);
        // SAFETY: as above (poisoned, not freed).
        assert_eq!(unsafe { with(h, |d| Ok(d.inner)) }, Err(SG_PANIC));
        // SAFETY: a heap handle; freed once.
        unsafe { free_object(h) };
    }

    #[test]
    fn a_panic_under_with_mut_poisons_the_object() {
        let mut h: *mut Dummy = ptr::null_mut();
        // SAFETY: `h` is a valid output slot.
        assert_eq!(unsafe { new_object::<Dummy>(&mut h, || Ok(7)) }, SG_OK);
        // SAFETY: `h` is a live heap handle, used by this thread only.
        let got = unsafe {
            with_mut(h, |d| {
                d.inner += 1;
                Ok(d.inner)
            })
        };
        assert_eq!(got, Ok(8));
        let st = ffi(|| {
            // SAFETY: as above.
            unsafe {
                with_mut(h, |d: &mut Obj<u32>| -> Res {
                    d.inner = 9;
                    panic!("boom")
                })
            }
        });
        assert_eq!(st, SG_PANIC);
        // SAFETY: as above (poisoned, not freed).
        assert_eq!(unsafe { with_mut(h, |d| Ok(d.inner)) }, Err(SG_PANIC));
        // SAFETY: NULL is refused before anything is read.
        assert_eq!(
            unsafe { with_mut(ptr::null_mut::<Dummy>(), |d| Ok(d.inner)) },
            Err(SG_NULL_ARGUMENT)
        );
        // SAFETY: a heap handle; freed once.
        unsafe { free_object(h) };
    }

    #[test]
    fn init_checks_size_alignment_and_life() {
        #[repr(align(8))]
        struct Storage([u8; 64]);
        let mut s = Storage([0; 64]);
        assert!(obj_size::<Dummy>() <= 64 && obj_align::<Dummy>() <= 8);
        let mem = s.0.as_mut_ptr().cast::<c_void>();
        // SAFETY: `mem` is writable for 64 bytes.
        unsafe {
            assert_eq!(init_object::<Dummy>(mem, 1, || Ok(1)), SG_BUFFER_TOO_SMALL);
            assert_eq!(init_object::<Dummy>(mem.byte_add(1), 63, || Ok(1)), SG_MISALIGNED);
            assert_eq!(
                init_object::<Dummy>(mem, 64, || Err(SG_CONFIG_OUT_OF_RANGE)),
                SG_CONFIG_OUT_OF_RANGE
            );
            assert_eq!(init_object::<Dummy>(mem, 64, || Ok(3)), SG_OK);
            let d = mem.cast::<Dummy>();
            assert_eq!(with(d, |d| Ok(d.inner)), Ok(3));
            free_object(d); // not a heap object: left alone
            assert_eq!(with(d, |d| Ok(d.inner)), Ok(3));
            assert_eq!(deinit_object(d), SG_OK);
            assert_eq!(with(d, |d| Ok(d.inner)), Err(SG_INVALID_HANDLE));
            assert_eq!(deinit_object(d), SG_INVALID_HANDLE);
            assert_eq!(deinit_object::<Dummy>(ptr::null_mut()), SG_OK);
        }
    }
}
