//! Fold cells held by dead processes: found and freed.
//!
//! A few fields of a placed object are updated by one thread at a time, under a flag taken
//! by one compare-and-swap (the limiter's window fold, the retry budget's slot ring, the
//! top-keys summary of keyed limits; see `surgeguard_core::layout`). A process killed
//! between taking such a flag and giving it back would leave it taken for good: the shared
//! limiter would keep its last limit and stop adapting, a shared retry budget would refuse
//! every retry. So the flag holds the holder's *process token* (pid and start time), and a
//! survivor that proves that process dead frees it with one compare-and-swap (so of many
//! survivors exactly one frees it, and a flag taken again meanwhile is left alone).
//!
//! **When.** On every attach and every explicit `reclaim()`; and on every operation of a
//! shared object that finds a cell held by another process — one relaxed load per cell, the
//! `/proc` read only then, and at most once per [`FOLD_CHECK_INTERVAL_NS`] in each process
//! (a live holder keeps a cell for a few hundred nanoseconds, so the check is rare). So a
//! cell whose holder was killed is freed by the first operation that meets it, or within
//! 10 ms of operations after a recent check.
//!
//! **Never a live holder.** A token names a pid and the low 31 bits of its start time; it
//! is freed only when `/proc/<pid>/stat` is gone (or a zombie) or shows another start
//! time. A forked child holds a pid-only token until it next attaches or claims (its start
//! time is unknown in the `fork` handler): a pid-only token is freed only when the pid is
//! gone. An unreadable `/proc` means alive. Tokens `0`/`1` (a process that never set one)
//! name nobody and are never freed.

use std::sync::atomic::{AtomicU64, Ordering};

use surgeguard_core::layout::{FoldCell, Placeable, set_process_token};

use super::liveness::{self, Seen};

/// Each process checks a foreign-held fold cell at most this often (ns).
pub const FOLD_CHECK_INTERVAL_NS: u64 = 10_000_000;

/// Set in every token this layer makes (tokens 0 and 1 name no process).
const TOKEN_TAG: u64 = 1 << 63;
const START_MASK: u64 = (1 << 31) - 1;

/// The token of `pid` started at `start` (clock ticks; 0 = unknown).
pub(crate) const fn token(pid: u32, start: u64) -> u64 {
    TOKEN_TAG | (start & START_MASK) << 32 | pid as u64
}

/// `fork_generation + 1` when this process last set its token; 0 = never.
static TOKEN_SET_AT: AtomicU64 = AtomicU64::new(0);

/// Sets this process's token (pid and start time) unless already set since the last fork.
pub(crate) fn ensure_token() {
    let generation = super::fork_generation() + 1;
    // Relaxed: a per-process cache; setting the token twice is harmless.
    if TOKEN_SET_AT.load(Ordering::Relaxed) == generation {
        return;
    }
    set_process_token(token(std::process::id(), liveness::my_start_time()));
    TOKEN_SET_AT.store(generation, Ordering::Relaxed);
}

/// In a forked child (async-signal-safe: `getpid` and atomic stores): a pid-only token,
/// so no fold cell this child takes carries its parent's token.
pub(crate) fn after_fork_in_child() {
    // SAFETY: getpid has no preconditions and is async-signal-safe.
    let pid = unsafe { libc::getpid() } as u32;
    set_process_token(token(pid, 0));
}

/// Whether the process `token` names is proven dead.
pub(crate) fn token_dead(token: u64, seen: impl Fn(u32) -> Seen) -> bool {
    if token & TOKEN_TAG == 0 {
        return false;
    }
    let start = (token >> 32) & START_MASK;
    match seen(token as u32) {
        Seen::Gone => true,
        Seen::Alive(s) => start != 0 && s & START_MASK != start,
        Seen::Unknown => false,
    }
}

/// Frees every fold cell of `object` held by a process proven dead; returns how many.
pub(crate) fn free_dead<T: Placeable>(object: &T) -> u32 {
    free_dead_with(object, liveness::seen)
}

pub(crate) fn free_dead_with<T: Placeable>(object: &T, seen: impl Fn(u32) -> Seen) -> u32 {
    let mine = surgeguard_core::layout::process_token();
    let mut freed = 0;
    object.fold_cells(&mut |cell: FoldCell<'_>| {
        let holder = cell.holder();
        if holder != 0 && holder != mine && token_dead(holder, &seen) {
            // SAFETY: `token_dead` proved the process `holder` names dead, and a token
            // names one process (pid and start time): no thread will run in the cell
            // with it again.
            #[allow(unsafe_code)]
            if unsafe { cell.break_stale(holder) } {
                freed += 1;
            }
        }
    });
    freed
}

/// The cheap check every operation makes: if a cell is held by another process and this
/// process has not checked for [`FOLD_CHECK_INTERVAL_NS`], check (and free) now.
#[inline]
pub(crate) fn check<T: Placeable>(object: &T) {
    let mine = surgeguard_core::layout::process_token();
    let mut foreign = false;
    object.fold_cells(&mut |cell: FoldCell<'_>| {
        let h = cell.holder();
        foreign |= h != 0 && h != mine;
    });
    if foreign {
        check_slow(object);
    }
}

#[cold]
fn check_slow<T: Placeable>(object: &T) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = crate::clock::monotonic_ns();
    // Relaxed: a per-process rate limit; the CAS elects one checker per interval.
    let due = NEXT.load(Ordering::Relaxed);
    if now < due
        || NEXT
            .compare_exchange(
                due,
                now.saturating_add(FOLD_CHECK_INTERVAL_NS),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    free_dead(object);
}
