//! The one module that names atomics and cells.
//!
//! Under `cfg(loom)` everything comes from `loom`, so the model checker sees every
//! atomic access and every access to the exclusive cell; otherwise from `core`, or, on a
//! target without native 64-bit atomics, from `portable-atomic` (built with its
//! `critical-section` implementation: the crate's `critical-section` feature).
//! Nothing else in the crate imports `core::sync::atomic` directly.
#![allow(unsafe_code)]

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
    AtomicUsize, Ordering,
};

#[cfg(all(not(loom), target_has_atomic = "64"))]
#[allow(unused_imports)]
pub(crate) use core::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
    AtomicUsize, Ordering,
};

// No native 64-bit atomics: portable-atomic, with interrupts disabled around each
// operation (or a critical section): interrupt-free, not lock-free.
#[cfg(all(
    not(loom),
    not(target_has_atomic = "64"),
    any(feature = "unsafe-assume-single-core", feature = "critical-section")
))]
#[allow(unused_imports)]
pub(crate) use portable_atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
    AtomicUsize, Ordering,
};

#[cfg(all(
    not(loom),
    not(target_has_atomic = "64"),
    not(any(feature = "unsafe-assume-single-core", feature = "critical-section"))
))]
compile_error!(
    "surgeguard-core: this target has no native 64-bit atomics. On a single-core MCU with \
     32-bit CAS (Cortex-M3/M4/M7) enable the `unsafe-assume-single-core` feature; without \
     any CAS (Cortex-M0/M0+) enable `critical-section` and link a critical-section \
     implementation. Either way the guarantee is interrupt-free, not lock-free."
);

#[cfg(all(not(target_has_atomic = "64"), target_has_atomic = "ptr", feature = "critical-section"))]
compile_error!(
    "surgeguard-core: on a target with compare-and-swap, `critical-section` would fall back \
     to spin locks for 64-bit atomics; use `unsafe-assume-single-core` on a single-core MCU"
);

/// A process-wide id for each new structure, so a permit or ticket of one structure is
/// recognised as foreign by another. Not part of any structure's shared state, so it is a
/// plain `core` atomic even under loom.
pub(crate) fn next_instance_id() -> u32 {
    #[cfg(loom)]
    use core::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The ids of wait queues, kept apart from [`next_instance_id`] so that no other
/// structure uses them up. Not shared state of any structure: a plain `core` atomic even
/// under loom.
static NEXT_QUEUE_ID: IdCounter = IdCounter::new(1);

#[cfg(loom)]
type IdCounter = core::sync::atomic::AtomicU32;
#[cfg(not(loom))]
type IdCounter = AtomicU32;

/// A wait queue id never handed out before in this process, or `None` once all
/// `2^32 − 1` are taken (ids never wrap, so two queues never share one).
///
/// Progress: lock-free (a CAS loop that fails only when another constructor took an id).
pub(crate) fn next_queue_id() -> Option<u32> {
    take_id(&NEXT_QUEUE_ID)
}

fn take_id(counter: &IdCounter) -> Option<u32> {
    // Relaxed: only uniqueness matters, which the read-modify-write gives.
    counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1)).ok()
}

#[cfg(loom)]
use loom::cell::UnsafeCell;

#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A value that one thread at a time may update, and that nobody ever waits for.
///
/// `try_with` runs the closure only if no other thread is inside it; otherwise it returns
/// `None` at once. This is how a window is folded: whichever thread wins the
/// compare-and-swap folds, everyone else records their sample and moves on. It is not a
/// lock in the blocking sense — no thread ever spins or sleeps on it — so structures
/// built on it keep their lock-free hot paths; the cost is that a fold is skipped (and
/// done by a later caller) while another thread is mid-fold.
///
/// Progress: wait-free (one CAS, one store).
///
/// `#[repr(C)]` and an integer flag (not a `bool`) so that a cell may live in memory shared
/// between processes (see `layout`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Exclusive<T> {
    /// [`FREE`] or [`BUSY`].
    busy: AtomicU8,
    value: UnsafeCell<T>,
}

/// `Exclusive::busy`: nobody inside.
const FREE: u8 = 0;
/// `Exclusive::busy`: one thread inside `try_with`.
const BUSY: u8 = 1;

// SAFETY: the value is only ever reached through `try_with`, which hands out `&mut T`
// to exactly one thread at a time (guarded by `busy`), so sharing the cell between
// threads is sound whenever moving a `T` between threads is.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { busy: AtomicU8::new(FREE), value: UnsafeCell::new(value) }
    }

    /// Runs `f` with exclusive access, or returns `None` if another thread is inside.
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        // Acquire: pairs with the Release store in `Release::drop`, so this thread sees
        // every write the previous holder made to the value.
        if self.busy.compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        struct Release<'a>(&'a AtomicU8);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                // Release: publishes this holder's writes to the next Acquire above.
                self.0.store(FREE, Ordering::Release);
            }
        }
        let _release = Release(&self.busy);
        // SAFETY: `busy` was FREE and we set it to BUSY, so no other thread is inside
        // `try_with`; the `&mut T` does not outlive this call (the closure cannot return it
        // because `R` does not borrow from the cell's lifetime).
        Some(self.value.with_mut(|ptr| f(unsafe { &mut *ptr })))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn second_entry_is_refused_not_blocked() {
        let cell = Exclusive::new(1u32);
        let inner = cell.try_with(|v| {
            *v += 1;
            cell.try_with(|_| ()).is_none()
        });
        assert_eq!(inner, Some(true));
        assert_eq!(cell.try_with(|v| *v), Some(2));
    }

    #[test]
    fn queue_ids_never_wrap() {
        let counter = IdCounter::new(u32::MAX - 2);
        assert_eq!(take_id(&counter), Some(u32::MAX - 2));
        assert_eq!(take_id(&counter), Some(u32::MAX - 1));
        assert_eq!(take_id(&counter), None, "u32::MAX would wrap next: refused");
        assert_eq!(take_id(&counter), None, "and stays refused");
        assert!(next_queue_id().is_some_and(|a| next_queue_id().is_some_and(|b| b > a)));
    }
}
