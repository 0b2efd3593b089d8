//! The process table: one slot per attached process, counting the permits it holds, so
//! that a process that dies holding permits (`kill -9`, the OOM killer) gives them back.
//!
//! A slot's `word` packs `state | generation | pid` in one `AtomicU64`, so every change of
//! owner is one compare-and-swap:
//!
//! ```text
//!   FREE(g) --claim by pid--> CLAIMED(g, pid) --start time written--> LIVE(g, pid)
//!   LIVE(g, pid) or CLAIMED(g, pid), pid proven dead --CAS by one reclaimer--> RECLAIMING(g, pid)
//!   RECLAIMING(g, pid) --held counts drained--> FREE(g + 1)
//!   RECLAIMING(g, pid), its reclaimer proven dead --CAS on `reclaimer`--> drained by another
//!   LIVE(g, pid) --the process detaches--> FREE(g + 1)
//! ```
//!
//! **Exactly once.** The held count of a level is the one record of who still owes a
//! release: the owner's release and the reclaimer each take one unit by a CAS from `n > 0`
//! to `n − 1` before they release one permit to the limiter, so no unit is released twice.
//! Only the reclaimer that won the `→ RECLAIMING` CAS drains a slot, so two reclaimers never
//! both do it.
//!
//! **A live process is never reclaimed.** A slot is reclaimed only when `/proc/<pid>/stat`
//! says the pid is gone (or a zombie), or shows another start time (the pid was reused).
//! A process that cannot be proven dead (unreadable `/proc`) is left alone.
//!
//! **The safe side.** The owner counts a permit *after* the limiter admitted it and
//! uncounts it *before* releasing it, so a process killed between the two steps (a few
//! instructions) loses that one slot for good rather than letting it be released twice:
//! the limit errs low by one, never high.
//!
//! Progress: claim, count and uncount are lock-free (CAS loops that retry only when
//! another process changed the word); a sweep is bounded (one pass over the table, one
//! `/proc` read per occupied slot, one CAS per reclaimed permit).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use surgeguard_core::Priority;

use super::liveness::Seen;

/// Levels counted per slot (the core's `Priority::MAX_LEVELS`).
pub(crate) const LEVELS: usize = Priority::MAX_LEVELS;

/// `word` state: unused.
pub(crate) const FREE: u64 = 0;
/// `word` state: taken by `pid`, start time being written.
pub(crate) const CLAIMED: u64 = 1;
/// `word` state: attached process `pid` (start time in `start`).
pub(crate) const LIVE: u64 = 2;
/// `word` state: `pid` died; one reclaimer is releasing its permits.
pub(crate) const RECLAIMING: u64 = 3;

const STATE_SHIFT: u32 = 62;
const GEN_SHIFT: u32 = 32;
const GEN_MASK: u64 = (1 << 30) - 1;
const PID_MASK: u64 = (1 << 32) - 1;

/// Packs a slot word.
pub(crate) const fn pack(state: u64, generation: u64, pid: u32) -> u64 {
    state << STATE_SHIFT | (generation & GEN_MASK) << GEN_SHIFT | pid as u64
}
/// The state of a slot word.
pub(crate) const fn state_of(word: u64) -> u64 {
    word >> STATE_SHIFT
}
/// The generation of a slot word.
pub(crate) const fn gen_of(word: u64) -> u64 {
    (word >> GEN_SHIFT) & GEN_MASK
}
/// The pid of a slot word.
pub(crate) const fn pid_of(word: u64) -> u32 {
    (word & PID_MASK) as u32
}

/// One process's record (64 bytes: one cache line, so processes do not share lines).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct ProcSlot {
    /// `state << 62 | generation << 32 | pid`.
    pub(crate) word: AtomicU64,
    /// The owner's start time (clock ticks since boot, `/proc/<pid>/stat` field 22).
    pub(crate) start: AtomicU64,
    /// Permits the owner holds, per level.
    pub(crate) held: [AtomicU32; LEVELS],
    /// While RECLAIMING: who drains it (`start_low32 << 32 | pid`); 0 (set when the slot is
    /// claimed) until the reclaimer records itself. A reclaimer that dies mid-drain is
    /// taken over by the next sweep.
    pub(crate) reclaimer: AtomicU64,
}

const _: () = assert!(size_of::<ProcSlot>() == 64 && align_of::<ProcSlot>() == 64);

/// How a sweep learns whether a pid is alive (the real one reads `/proc`; the model test
/// injects its own).
pub(crate) trait Liveness {
    /// What is known about `pid`.
    fn seen(&self, pid: u32) -> Seen;
}

/// `/proc`.
pub(crate) struct Proc;

impl Liveness for Proc {
    fn seen(&self, pid: u32) -> Seen {
        super::liveness::seen(pid)
    }
}

/// A claimed slot: its index and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// Claims a free slot for `pid` (start time `start`), or `None` if every slot is taken.
pub(crate) fn claim(table: &[ProcSlot], pid: u32, start: u64) -> Option<Claim> {
    for (index, slot) in table.iter().enumerate() {
        // Relaxed: the CAS below decides; a stale value only fails it.
        let mut word = slot.word.load(Ordering::Relaxed);
        while state_of(word) == FREE {
            let generation = gen_of(word);
            // Acquire: pairs with the Release store that freed the slot, so the drained
            // (zero) held counts are seen before this owner counts on them.
            match slot.word.compare_exchange(
                word,
                pack(CLAIMED, generation, pid),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    slot.start.store(start, Ordering::Relaxed);
                    // No reclaimer yet: a sweep that finds this slot RECLAIMING with 0
                    // knows its reclaimer died before recording itself.
                    slot.reclaimer.store(0, Ordering::Relaxed);
                    // Release: publishes `start` to sweeps that Acquire-load LIVE.
                    slot.word.store(pack(LIVE, generation, pid), Ordering::Release);
                    return Some(Claim { index: index as u32, generation: generation as u32 });
                }
                Err(now) => word = now,
            }
        }
    }
    None
}

/// Counts one permit of `level` to the claim (after the limiter admitted it).
pub(crate) fn count(table: &[ProcSlot], claim: Claim, level: usize) {
    if let Some(slot) = table.get(claim.index as usize) {
        slot.held[level.min(LEVELS - 1)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Takes one permit of `level` off the claim's count, before it is released to the
/// limiter. `false` if there is none to take (the slot was reclaimed or reused: the permit
/// was already given back, so the caller must not release it again).
pub(crate) fn uncount(table: &[ProcSlot], claim: Claim, level: usize) -> bool {
    let Some(slot) = table.get(claim.index as usize) else { return false };
    // Relaxed: the generation only has to match; the held count's CAS is what decides.
    let word = slot.word.load(Ordering::Relaxed);
    if gen_of(word) != claim.generation as u64 || state_of(word) != LIVE {
        return false;
    }
    take_one(&slot.held[level.min(LEVELS - 1)])
}

/// Counts one permit of `level` to `claim` if its slot still belongs to that claim (a
/// gate's grant routed to the process that queued the ticket). `false`: the slot was
/// reclaimed or reused and the unit was taken back: the caller releases the permit itself.
/// `true`: the count stands, or a reclaimer already drained it (and released the permit).
pub(crate) fn count_checked(table: &[ProcSlot], claim: Claim, level: usize) -> bool {
    let Some(slot) = table.get(claim.index as usize) else { return false };
    let held = &slot.held[level.min(LEVELS - 1)];
    // SeqCst (with the load below and the sweep's SeqCst CAS and fence): either this load
    // sees the slot leave LIVE, or the sweep's drain sees this unit.
    held.fetch_add(1, Ordering::SeqCst);
    let word = slot.word.load(Ordering::SeqCst);
    if gen_of(word) == claim.generation as u64 && matches!(state_of(word), LIVE | CLAIMED) {
        return true;
    }
    !take_one(held)
}

/// A CAS from `n > 0` to `n − 1`: `true` if this caller took one.
pub(crate) fn take_one(held: &AtomicU32) -> bool {
    // Relaxed: each unit is taken by exactly one RMW; what the taker then does (one
    // release to the limiter) is ordered by the limiter's own atomics.
    held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
}

/// Gives the slot back when its live owner detaches (nothing held is released: the owner
/// released its permits first, or they stay counted and are lost with it).
pub(crate) fn detach(table: &[ProcSlot], claim: Claim, pid: u32) {
    if let Some(slot) = table.get(claim.index as usize) {
        let g = claim.generation as u64;
        if slot.held.iter().all(|h| h.load(Ordering::Relaxed) == 0) {
            // Release: the next claimer's Acquire sees the zero counts.
            let _ = slot.word.compare_exchange(
                pack(LIVE, g, pid),
                pack(FREE, g + 1, 0),
                Ordering::Release,
                Ordering::Relaxed,
            );
        }
    }
}

/// Whether the slot's owner is proven dead.
pub(crate) fn is_dead(live: &impl Liveness, word: u64, start: u64) -> bool {
    match (state_of(word), live.seen(pid_of(word))) {
        (_, Seen::Gone) => true,
        // A different start time: the pid was reused, its old owner is dead.
        (LIVE, Seen::Alive(s)) => s != start,
        _ => false,
    }
}

/// `start_low32 << 32 | pid`: who reclaims.
pub(crate) const fn reclaimer_word(pid: u32, start: u64) -> u64 {
    (start & PID_MASK) << 32 | pid as u64
}

/// Whether the reclaimer recorded in `word` is proven dead (0: it died before recording).
fn reclaimer_dead(live: &impl Liveness, word: u64) -> bool {
    match live.seen(pid_of(word)) {
        Seen::Gone => true,
        Seen::Alive(s) => s & PID_MASK != word >> 32,
        Seen::Unknown => false,
    }
}

/// One pass over the table: every slot whose owner is proven dead is drained, its
/// permits released through `release(level)` exactly once. `me` is the sweeper
/// ([`reclaimer_word`]). Returns how many permits were released.
pub(crate) fn sweep(
    table: &[ProcSlot],
    live: &impl Liveness,
    me: u64,
    release: impl FnMut(usize),
) -> u64 {
    sweep_with(table, live, me, release, |_| 0)
}

/// [`sweep`], and for each slot drained, `extra(index)` drains counts kept outside the
/// slot (a keyed table's per-shard counts) before the slot is freed; returns the total.
pub(crate) fn sweep_with(
    table: &[ProcSlot],
    live: &impl Liveness,
    me: u64,
    mut release: impl FnMut(usize),
    mut extra: impl FnMut(usize) -> u64,
) -> u64 {
    let mut released = 0;
    for (index, slot) in table.iter().enumerate() {
        // Acquire: pairs with the Release store of LIVE in `claim`, so `start` is current.
        let word = slot.word.load(Ordering::Acquire);
        let state = state_of(word);
        let generation = gen_of(word);
        if state == RECLAIMING {
            // Its reclaimer died mid-drain: take over by one CAS on `reclaimer`.
            let r = slot.reclaimer.load(Ordering::Acquire);
            if r == me || !reclaimer_dead(live, r) {
                continue;
            }
            // AcqRel: one taker wins; it sees the counts the dead reclaimer left.
            if slot.reclaimer.compare_exchange(r, me, Ordering::AcqRel, Ordering::Relaxed).is_err()
            {
                continue;
            }
            // Still the same reclaim? (The slot may have been freed and claimed again
            // since the load above: then it is not ours to drain.) The previous reclaimer
            // is dead, so nobody else frees it while this taker drains.
            if slot.word.load(Ordering::Acquire) != word {
                let _ =
                    slot.reclaimer.compare_exchange(me, 0, Ordering::Relaxed, Ordering::Relaxed);
                continue;
            }
        } else if state == LIVE || state == CLAIMED {
            let start = slot.start.load(Ordering::Relaxed);
            if !is_dead(live, word, start) {
                continue;
            }
            // AcqRel: Acquire takes the dead owner's counts; only one reclaimer wins.
            // SeqCst, and the fence: a unit counted by `count_checked` is either seen by
            // the drain below or taken back by its counter (which then sees this CAS).
            if slot
                .word
                .compare_exchange(
                    word,
                    pack(RECLAIMING, generation, pid_of(word)),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            // Release: a taker that reads it also sees the RECLAIMING word.
            slot.reclaimer.store(me, Ordering::Release);
        } else {
            continue;
        }
        for (level, held) in slot.held.iter().enumerate() {
            while take_one(held) {
                release(level);
                released += 1;
            }
        }
        released += extra(index);
        // Release: the next claimer's Acquire sees the drained counts.
        slot.word.store(pack(FREE, generation + 1, 0), Ordering::Release);
    }
    released
}

/// Slots in use (LIVE or CLAIMED), for metrics.
pub(crate) fn attached(table: &[ProcSlot]) -> u32 {
    table
        .iter()
        .filter(|s| matches!(state_of(s.word.load(Ordering::Relaxed)), LIVE | CLAIMED))
        .count() as u32
}
