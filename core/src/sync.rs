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

/// The token a [`FoldFlag`] holder writes: this process's, as set by
/// [`set_fold_token`] (1 until then). Not shared state of any structure: a plain `core`
/// atomic even under loom.
static FOLD_TOKEN: TokenCell = TokenCell::new(1);

#[cfg(loom)]
type TokenCell = core::sync::atomic::AtomicU64;
#[cfg(not(loom))]
type TokenCell = AtomicU64;

/// The token this process writes into a fold flag it takes (never 0).
#[inline]
pub(crate) fn fold_token() -> u64 {
    // Relaxed: a per-process constant, changed only by `set_fold_token` (at attach or in a
    // forked child, before any fold of that process).
    FOLD_TOKEN.load(Ordering::Relaxed)
}

/// Sets the token this process writes into the fold flags it takes (0 is read as 1).
pub(crate) fn set_fold_token(token: u64) {
    FOLD_TOKEN.store(token.max(1), Ordering::Relaxed);
}

/// A flag that one thread at a time holds, recording *who* holds it: `0` when free, else
/// the holder's process token ([`fold_token`]). Inside one process any nonzero value just
/// means "taken"; in memory shared between processes the token lets a survivor prove the
/// holder's process dead and free a flag that process was killed holding
/// ([`break_stale`](Self::break_stale)), so a fold cell never stays taken for good.
///
/// Progress: wait-free (one CAS to enter, one store to leave).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct FoldFlag {
    holder: AtomicU64,
}

impl FoldFlag {
    pub(crate) fn new() -> Self {
        Self { holder: AtomicU64::new(0) }
    }

    /// Takes the flag with this process's token; `false` if someone holds it.
    #[inline]
    pub(crate) fn try_enter(&self) -> bool {
        self.try_enter_as(fold_token())
    }

    /// [`try_enter`](Self::try_enter) with a given token (tests model other processes).
    #[inline]
    pub(crate) fn try_enter_as(&self, token: u64) -> bool {
        // Acquire: pairs with the Release store in `leave` (and the AcqRel CAS of
        // `break_stale`), so the new holder sees every write the previous one made.
        token != 0
            && self.holder.compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Gives the flag back (only its holder calls this).
    #[inline]
    pub(crate) fn leave(&self) {
        // Release: publishes this holder's writes to the next Acquire in `try_enter`.
        self.holder.store(0, Ordering::Release);
    }

    /// The holder's token, 0 if free (a snapshot).
    #[inline]
    pub(crate) fn holder(&self) -> u64 {
        // Relaxed: a snapshot; `break_stale`'s CAS decides.
        self.holder.load(Ordering::Relaxed)
    }

    /// Frees the flag if `token` still holds it; `true` if this call freed it.
    ///
    /// # Safety
    /// The thread that took the flag with `token` will never run again (its process is
    /// proven dead), so nobody is inside the guarded value.
    pub(crate) unsafe fn break_stale(&self, token: u64) -> bool {
        // AcqRel: takes the dead holder's writes (as a `try_enter` would) and publishes
        // the free flag to the next holder's Acquire.
        token != 0
            && self.holder.compare_exchange(token, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
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
/// `#[repr(C)]` and an integer flag holding the holder's process token (see
/// [`FoldFlag`]) so that a cell may live in memory shared between processes (see
/// `layout`), and a cell whose holder was killed mid-fold can be freed by a survivor.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Exclusive<T> {
    busy: FoldFlag,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only ever reached through `try_with`, which hands out `&mut T`
// to exactly one thread at a time (guarded by `busy`), so sharing the cell between
// threads is sound whenever moving a `T` between threads is.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { busy: FoldFlag::new(), value: UnsafeCell::new(value) }
    }

    /// Runs `f` with exclusive access, or returns `None` if another thread is inside.
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if !self.busy.try_enter() {
            return None;
        }
        struct Release<'a>(&'a FoldFlag);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.leave();
            }
        }
        let _release = Release(&self.busy);
        // SAFETY: `busy` was free and this thread took it, so no other thread is inside
        // `try_with`; the `&mut T` does not outlive this call (the closure cannot return it
        // because `R` does not borrow from the cell's lifetime).
        Some(self.value.with_mut(|ptr| f(unsafe { &mut *ptr })))
    }

    /// The flag guarding the value (for freeing it after its holder's process died).
    #[inline]
    #[cfg_attr(any(loom, not(target_has_atomic = "64")), allow(dead_code))]
    pub(crate) fn flag(&self) -> &FoldFlag {
        &self.busy
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
    fn a_stale_flag_is_freed_only_for_its_holder() {
        let cell = Exclusive::new(0u32);
        assert!(cell.flag().try_enter(), "parks as if its holder died inside");
        let holder = cell.flag().holder();
        assert_ne!(holder, 0);
        assert_eq!(cell.try_with(|_| ()), None, "taken");
        // SAFETY: no thread is inside (the flag was parked, nobody runs the closure).
        assert!(!unsafe { cell.flag().break_stale(holder ^ 2) }, "another token frees nothing");
        assert!(!unsafe { cell.flag().break_stale(0) });
        assert_eq!(cell.try_with(|_| ()), None, "still taken");
        // SAFETY: as above.
        assert!(unsafe { cell.flag().break_stale(holder) });
        // SAFETY: as above.
        assert!(!unsafe { cell.flag().break_stale(holder) }, "freed once");
        assert_eq!(
            cell.try_with(|v| {
                *v += 1;
                *v
            }),
            Some(1),
            "usable again"
        );
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
