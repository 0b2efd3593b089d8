//! The fold-cell rescue against a reference model: a cell is freed exactly when its holder
//! is proven dead, once, and never while its holder lives.

use std::collections::HashMap;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use surgeguard_core::layout::{FoldCell, Placeable};
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};

use super::fold::{free_dead_with, token, token_dead};
use super::liveness::Seen;

#[derive(Clone, Debug)]
enum Op {
    /// Process `p` (of 4) takes the cell (a fold starts).
    Enter(u8),
    /// Process `p` gives the cell back, if it holds it (the fold ends).
    Leave(u8),
    /// Process `p` is killed (its pid gone, or a zombie).
    Kill(u8),
    /// `p`'s pid is reused by a new process (another start time).
    Reuse(u8),
    /// A survivor sweeps (with `/proc` unreadable if the flag is set).
    Sweep(bool),
    /// Process `p` forks: the child has a pid-only token (start time unknown).
    Fork(u8),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let p = u8::arbitrary(g) % 4;
        match u8::arbitrary(g) % 10 {
            0..=2 => Op::Enter(p),
            3 => Op::Leave(p),
            4 => Op::Kill(p),
            5 => Op::Reuse(p),
            6 => Op::Fork(p),
            _ => Op::Sweep(u8::arbitrary(g) % 8 == 0),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Proc {
    pid: u32,
    start: u64,
    /// Whether its token carries its start time (false: a forked child's pid-only token).
    knows_start: bool,
}

impl Proc {
    fn token(&self) -> u64 {
        token(self.pid, if self.knows_start { self.start } else { 0 })
    }
}

fn cell(budget: &RetryBudget) -> FoldCell<'_> {
    let mut found = None;
    budget.fold_cells(&mut |c| found = Some(c));
    found.expect("a retry budget has one fold cell")
}

fn run(ops: Vec<Op>) -> bool {
    let budget = RetryBudget::new(RetryBudgetConfig::default()).unwrap();
    let cell = cell(&budget);
    // The system: pid -> start time of the process now running under it.
    let mut system: HashMap<u32, u64> = HashMap::new();
    // The model's processes (slot p), alive or not.
    let mut procs: Vec<Proc> =
        (0..4).map(|p| Proc { pid: 100 + p, start: 1000 + p as u64, knows_start: true }).collect();
    for p in &procs {
        system.insert(p.pid, p.start);
    }
    let mut next_start = 5000;
    let mut next_pid = 200;
    // Reference: which process holds the cell.
    let mut holder: Option<Proc> = None;
    let alive = |system: &HashMap<u32, u64>, p: &Proc| system.get(&p.pid) == Some(&p.start);
    for op in ops {
        match op {
            Op::Enter(p) => {
                let me = procs[p as usize];
                if !alive(&system, &me) {
                    continue;
                }
                let took = cell.park_as(me.token());
                if took != holder.is_none() {
                    return false;
                }
                if took {
                    holder = Some(me);
                }
            }
            Op::Leave(p) => {
                let me = procs[p as usize];
                if holder.is_some_and(|h| h.token() == me.token()) && alive(&system, &me) {
                    // The holder's own release (the same CAS a leave amounts to here).
                    // SAFETY: models the holder leaving; nobody runs inside the cell.
                    #[allow(unsafe_code)]
                    let ok = unsafe { cell.break_stale(me.token()) };
                    if !ok {
                        return false;
                    }
                    holder = None;
                }
            }
            Op::Kill(p) => {
                let me = procs[p as usize];
                if alive(&system, &me) {
                    system.remove(&me.pid);
                }
            }
            Op::Reuse(p) => {
                let me = procs[p as usize];
                if let std::collections::hash_map::Entry::Vacant(e) = system.entry(me.pid) {
                    next_start += 1;
                    e.insert(next_start);
                    procs[p as usize] = Proc { pid: me.pid, start: next_start, knows_start: true };
                }
            }
            Op::Fork(p) => {
                let parent = procs[p as usize];
                if alive(&system, &parent) {
                    // The child replaces slot p in the model (the parent lives on, unmodelled).
                    next_start += 1;
                    next_pid += 1;
                    system.insert(next_pid, next_start);
                    procs[p as usize] =
                        Proc { pid: next_pid, start: next_start, knows_start: false };
                }
            }
            Op::Sweep(unreadable) => {
                let seen = |pid: u32| {
                    if unreadable {
                        Seen::Unknown
                    } else {
                        system.get(&pid).map_or(Seen::Gone, |&s| Seen::Alive(s))
                    }
                };
                // The rule, from the reference: freed iff held by a process proven dead.
                let expect_free = !unreadable
                    && holder.is_some_and(|h| match system.get(&h.pid) {
                        None => true,
                        Some(&s) => h.knows_start && s != h.start,
                    });
                let freed = free_dead_with(&budget, seen);
                if freed != expect_free as u32 {
                    return false;
                }
                if expect_free {
                    holder = None;
                }
                // A second sweep frees nothing more.
                if free_dead_with(&budget, seen) != 0 {
                    return false;
                }
            }
        }
        if cell.holder() != holder.map_or(0, |h| h.token()) {
            return false;
        }
    }
    // Whatever happened, once every holder is gone the cell is usable again.
    system.clear();
    free_dead_with(&budget, |_| Seen::Gone);
    cell.holder() == 0
}

#[test]
fn fold_cell_rescue_model() {
    QuickCheck::new().tests(3000).quickcheck(run as fn(Vec<Op>) -> bool);
}

#[test]
fn tokens_name_one_process() {
    let t = token(42, 7);
    assert!(!token_dead(t, |_| Seen::Alive(7)));
    assert!(token_dead(t, |_| Seen::Alive(8)), "pid reused");
    assert!(token_dead(t, |_| Seen::Gone));
    assert!(!token_dead(t, |_| Seen::Unknown));
    let pid_only = token(42, 0);
    assert!(!token_dead(pid_only, |_| Seen::Alive(99)), "start unknown: alive while the pid is");
    assert!(token_dead(pid_only, |_| Seen::Gone));
    assert!(!token_dead(1, |_| Seen::Gone), "1 names no process");
    assert!(!token_dead(0, |_| Seen::Gone));
}

#[test]
fn a_budget_whose_folder_died_allows_retries_again() {
    use surgeguard_core::time::SEC;
    let budget = RetryBudget::new(RetryBudgetConfig::default()).unwrap();
    let dead = token(999_999, 5);
    assert!(cell(&budget).park_as(dead), "a process takes the ring and is killed");
    // Deposits in later slots cannot be folded while the ring is held.
    for i in 0..100 {
        budget.deposit(SEC + i * 1000);
    }
    let stuck = budget.try_withdraw(2 * SEC);
    assert!(stuck.is_err(), "the ring is held: no fold, no retry");
    assert_eq!(free_dead_with(&budget, |_| Seen::Gone), 1);
    for i in 0..100 {
        budget.deposit(3 * SEC + i * 1000);
    }
    assert!(budget.try_withdraw(3 * SEC + 200_000).is_ok(), "folds and allows a retry again");
}

/// Threads of live processes take and leave the cell while sweepers race to free it from a
/// dead holder: the dead holder's cell is freed exactly once, and no live holder is ever
/// freed (two holders inside at once would show as an overlap).
#[test]
fn racing_sweepers_free_a_dead_holder_once_and_never_a_live_one() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    let budget = Arc::new(RetryBudget::new(RetryBudgetConfig::default()).unwrap());
    let dead = token(900_000, 1);
    assert!(cell(&budget).park_as(dead));
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let freed = Arc::new(AtomicU64::new(0));
    // Pids 1..=4 are alive (start time 7); the dead holder's pid is gone.
    let seen = |pid: u32| if (1..=4).contains(&pid) { Seen::Alive(7) } else { Seen::Gone };
    let mut threads = Vec::new();
    for pid in 1..=4u32 {
        let (b, inside, overlaps) = (budget.clone(), inside.clone(), overlaps.clone());
        threads.push(std::thread::spawn(move || {
            let c = cell(&b);
            let me = token(pid, 7);
            let (mut entered, mut tries) = (0, 0u64);
            while entered < 2_000 {
                tries += 1;
                assert!(tries < 500_000_000, "the cell never came free");
                if c.park_as(me) {
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    // SAFETY: this thread holds the cell with `me` (its own leave).
                    #[allow(unsafe_code)]
                    let left = unsafe { c.break_stale(me) };
                    assert!(left, "a live holder's cell was taken from it");
                    entered += 1;
                }
                std::hint::spin_loop();
            }
        }));
    }
    for _ in 0..2 {
        let (b, freed) = (budget.clone(), freed.clone());
        threads.push(std::thread::spawn(move || {
            for _ in 0..5_000 {
                freed.fetch_add(u64::from(free_dead_with(&*b, seen)), Ordering::SeqCst);
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(freed.load(Ordering::SeqCst), 1, "the dead holder's cell, once");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(cell(&budget).holder(), 0);
}
