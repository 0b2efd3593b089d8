//! The reclaim protocol against a reference model, and racing reclaimers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use quickcheck::{Arbitrary, Gen, QuickCheck};

use super::liveness::Seen;
use super::table::{self, Claim, Liveness, ProcSlot};
use super::*;

/// Liveness by a table the test controls: pid → start time (absent = gone).
#[derive(Default)]
struct Fake(HashMap<u32, u64>);

impl Liveness for Fake {
    fn seen(&self, pid: u32) -> Seen {
        self.0.get(&pid).map_or(Seen::Gone, |&s| Seen::Alive(s))
    }
}

fn new_table(n: usize) -> Vec<ProcSlot> {
    (0..n).map(|_| ProcSlot::default()).collect()
}

#[derive(Clone, Debug)]
enum Op {
    /// Process `p` (one of 4 pids) starts (if not running) and claims a slot.
    Start(u8),
    /// A running process acquires a permit at `level`.
    Acquire(u8, u8),
    /// A running process releases its `i`-th held permit.
    Release(u8, u8),
    /// A process dies (kill -9: nothing released).
    Die(u8),
    /// A running process (or an outsider, 255) sweeps.
    Sweep(u8),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let p = u8::arbitrary(g) % 4;
        match u8::arbitrary(g) % 10 {
            0 | 1 => Op::Start(p),
            2..=4 => Op::Acquire(p, u8::arbitrary(g) % 3),
            5 | 6 => Op::Release(p, u8::arbitrary(g)),
            7 => Op::Die(p),
            _ => Op::Sweep(if bool::arbitrary(g) { 255 } else { p }),
        }
    }
}

/// A process in the reference model: the permits it holds (levels).
struct Running {
    start: u64,
    claim: Claim,
    held: Vec<usize>,
}

/// The rule: every permit is released exactly once — by its owner while it lives, or by
/// one sweep after it died; a live process's permits are never released by a sweep;
/// in-flight is always the permits of live processes plus those of dead, unswept ones.
fn run_model(ops: Vec<Op>) -> bool {
    let slots = new_table(3);
    let inflight = AtomicU64::new(0);
    let mut live = Fake::default();
    let mut running: HashMap<u8, Running> = HashMap::new();
    // Permits of dead processes not yet swept (the model's count).
    let mut orphaned = 0u64;
    let mut next_start = 1u64;
    for op in ops {
        match op {
            Op::Start(p) => {
                if running.contains_key(&p) {
                    continue;
                }
                // pid reuse: the same pid, a new start time.
                let pid = 100 + p as u32;
                next_start += 1;
                live.0.insert(pid, next_start);
                match table::claim(&slots, pid, next_start) {
                    Some(claim) => {
                        running.insert(p, Running { start: next_start, claim, held: vec![] });
                    }
                    None => {
                        live.0.remove(&pid); // could not attach: exits at once
                    }
                }
            }
            Op::Acquire(p, level) => {
                if let Some(r) = running.get_mut(&p) {
                    inflight.fetch_add(1, Ordering::Relaxed);
                    table::count(&slots, r.claim, level as usize);
                    r.held.push(level as usize);
                }
            }
            Op::Release(p, i) => {
                if let Some(r) = running.get_mut(&p) {
                    if r.held.is_empty() {
                        continue;
                    }
                    let level = r.held.remove(i as usize % r.held.len());
                    // A live process's permit is never taken by a sweep: uncount succeeds.
                    if !table::uncount(&slots, r.claim, level) {
                        return false;
                    }
                    inflight.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Op::Die(p) => {
                if let Some(r) = running.remove(&p) {
                    live.0.remove(&(100 + p as u32));
                    orphaned += r.held.len() as u64;
                    let _ = r.start;
                }
            }
            Op::Sweep(by) => {
                let me = match running.get(&by) {
                    Some(r) => table::reclaimer_word(100 + by as u32, r.start),
                    None => table::reclaimer_word(7, 7),
                };
                let released = table::sweep(&slots, &live, me, |_| {
                    inflight.fetch_sub(1, Ordering::Relaxed);
                });
                if released != orphaned {
                    return false; // a sweep frees exactly the dead processes' permits
                }
                orphaned = 0;
            }
        }
        let held_live: u64 = running.values().map(|r| r.held.len() as u64).sum();
        if inflight.load(Ordering::Relaxed) != held_live + orphaned {
            return false;
        }
        // The table agrees with the model for every live process.
        for r in running.values() {
            let slot = &slots[r.claim.index as usize];
            let counted: u32 = slot.held.iter().map(|h| h.load(Ordering::Relaxed)).sum();
            if counted as usize != r.held.len()
                || table::state_of(slot.word.load(Ordering::Relaxed)) != table::LIVE
            {
                return false;
            }
        }
    }
    // Everyone dies; one sweep brings in-flight back to 0.
    live.0.clear();
    table::sweep(&slots, &live, table::reclaimer_word(7, 7), |_| {
        inflight.fetch_sub(1, Ordering::Relaxed);
    });
    inflight.load(Ordering::Relaxed) == 0
        && slots.iter().all(|s| table::state_of(s.word.load(Ordering::Relaxed)) == table::FREE)
}

#[test]
fn reclaim_model_exactly_once_never_live_back_to_zero() {
    QuickCheck::new().tests(2000).quickcheck(run_model as fn(Vec<Op>) -> bool);
}

#[test]
fn racing_reclaimers_release_each_permit_once() {
    for round in 0..200 {
        let slots = Arc::new(new_table(4));
        // Two dead processes holding 5 and 7 permits, one live one holding 3.
        let mut expected = 0;
        for (pid, n, dead) in [(11u32, 5u32, true), (12, 7, true), (13, 3, false)] {
            let c = table::claim(&slots, pid, 1).unwrap();
            for i in 0..n {
                table::count(&slots, c, (i % 3) as usize);
            }
            if dead {
                expected += n as u64;
            }
        }
        let live = Arc::new(Fake([(13u32, 1u64)].into_iter().collect()));
        let released = Arc::new(AtomicU64::new(0));
        let barrier = Arc::new(Barrier::new(3));
        let handles: Vec<_> = (0..3)
            .map(|t| {
                let (slots, live, released, barrier) =
                    (slots.clone(), live.clone(), released.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    table::sweep(&slots, &*live, table::reclaimer_word(900 + t, 1), |_| {
                        released.fetch_add(1, Ordering::Relaxed);
                    })
                })
            })
            .collect();
        let by_thread: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(released.load(Ordering::Relaxed), expected, "round {round}");
        assert_eq!(by_thread, expected);
        let live_slot =
            slots.iter().find(|s| table::pid_of(s.word.load(Ordering::Relaxed)) == 13).unwrap();
        assert_eq!(live_slot.held.iter().map(|h| h.load(Ordering::Relaxed)).sum::<u32>(), 3);
    }
}

#[test]
fn a_reclaimer_that_died_mid_drain_is_taken_over() {
    let slots = new_table(2);
    let c = table::claim(&slots, 21, 5).unwrap();
    for _ in 0..4 {
        table::count(&slots, c, 1);
    }
    // Process 21 died; reclaimer 22 won the slot, released 1 permit, then died too.
    let w = slots[0].word.load(Ordering::Relaxed);
    slots[0].word.store(table::pack(table::RECLAIMING, table::gen_of(w), 21), Ordering::Relaxed);
    slots[0].reclaimer.store(table::reclaimer_word(22, 9), Ordering::Relaxed);
    slots[0].held[1].store(3, Ordering::Relaxed);
    // 22 alive: nobody takes over.
    let alive = Fake([(22u32, 9u64)].into_iter().collect());
    assert_eq!(table::sweep(&slots, &alive, table::reclaimer_word(23, 1), |_| ()), 0);
    // 22 gone (or its pid reused: another start time): the next sweep drains the rest.
    let reused = Fake([(22u32, 10u64)].into_iter().collect());
    let mut levels = vec![];
    assert_eq!(table::sweep(&slots, &reused, table::reclaimer_word(23, 1), |l| levels.push(l)), 3);
    assert_eq!(levels, vec![1, 1, 1]);
    assert_eq!(table::state_of(slots[0].word.load(Ordering::Relaxed)), table::FREE);
    assert_eq!(table::gen_of(slots[0].word.load(Ordering::Relaxed)), 1);
}

#[test]
fn a_claimed_slot_is_reclaimed_only_once_its_pid_is_gone() {
    let slots = new_table(1);
    // Died between claiming and publishing its start time.
    slots[0].word.store(table::pack(table::CLAIMED, 0, 31), Ordering::Relaxed);
    let alive = Fake([(31u32, 4u64)].into_iter().collect());
    assert_eq!(table::sweep(&slots, &alive, 1, |_| ()), 0);
    assert_eq!(table::state_of(slots[0].word.load(Ordering::Relaxed)), table::CLAIMED);
    assert_eq!(table::sweep(&slots, &Fake::default(), 1, |_| ()), 0);
    assert_eq!(table::state_of(slots[0].word.load(Ordering::Relaxed)), table::FREE);
}

#[test]
fn names_are_checked() {
    assert!(resolve("db-pool.v1").is_ok());
    assert_eq!(resolve("db-pool.v1").unwrap(), Path::new("/dev/shm/surgeguard.db-pool.v1"));
    for bad in ["", ".", "..", "a b", "a\\b", &"x".repeat(201)] {
        assert_eq!(resolve(bad), Err(ShmError::BadName), "{bad:?}");
    }
    assert_eq!(resolve("/tmp/x\0y"), Err(ShmError::BadName));
    assert_eq!(resolve("/tmp/seg").unwrap(), Path::new("/tmp/seg"));
}
