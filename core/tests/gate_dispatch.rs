#![cfg(not(loom))]
//! The dispatcher of a wait queue: a panic inside a round never wedges the queue, and one
//! `try_dispatch` runs a bounded number of rounds however much work other threads add.

use std::panic::{catch_unwind, AssertUnwindSafe};
use surgeguard_core::queue::{Ticket, WaitQueue, MAX_ROUNDS, NO_DEADLINE};
use surgeguard_core::Priority;

const P0: Priority = Priority::CRITICAL;
const P1: Priority = Priority::NORMAL;

/// Refreshes (reporting evictions into `reports`) and takes every waiter, most important
/// level first.
fn drain<const C: usize>(q: &WaitQueue<C>, reports: &mut Vec<Ticket>) -> Option<Vec<Ticket>> {
    let mut out = Vec::new();
    q.try_dispatch(|d| {
        d.refresh(|t| {
            reports.push(t);
            true
        });
        for l in 0..d.levels() {
            let p = Priority::new(l).unwrap();
            while let Some(w) = d.oldest(p) {
                assert!(d.remove(&w));
                out.push(w.ticket());
            }
        }
        true
    })
    .then_some(out)
}

#[test]
fn a_panic_in_a_round_does_not_wedge_the_queue() {
    let q = WaitQueue::<4>::new(1, 4).unwrap();
    let a = q.push(P0, 0, NO_DEADLINE, false).unwrap();
    let b = q.push(P0, 1, NO_DEADLINE, false).unwrap();
    // The round panics before it links anything (the arrivals are taken already).
    let r = catch_unwind(AssertUnwindSafe(|| q.try_dispatch(|_| panic!("user code"))));
    assert!(r.is_err());
    assert!(q.needs_dispatch(), "the next caller is asked to continue");
    let c = q.push(P0, 2, NO_DEADLINE, false).unwrap();
    // Before the fix the busy flag stayed set: every later dispatch returned false.
    assert_eq!(drain(&q, &mut Vec::new()), Some(vec![a, b, c]));
    assert!(q.is_empty());
    assert!(!q.needs_dispatch());
}

#[test]
fn a_panic_while_reporting_an_eviction_loses_and_repeats_no_report() {
    let q = WaitQueue::<2>::new(2, 2).unwrap();
    let n1 = q.push(P1, 0, NO_DEADLINE, true).unwrap();
    let n2 = q.push(P1, 1, NO_DEADLINE, true).unwrap();
    let c1 = q.push(P0, 2, NO_DEADLINE, true).unwrap(); // evicts n1
    let c2 = q.push(P0, 3, NO_DEADLINE, true).unwrap(); // evicts n2
    let mut reports = Vec::new();
    let r = catch_unwind(AssertUnwindSafe(|| {
        q.try_dispatch(|d| {
            d.refresh(|t| {
                if reports.len() == 1 {
                    panic!("report panics on its second call");
                }
                reports.push(t);
                true
            });
            true
        })
    }));
    assert!(r.is_err());
    assert_eq!(reports, [n1]);
    let granted = drain(&q, &mut reports).expect("not wedged");
    assert_eq!(reports, [n1, n2], "each eviction reported exactly once");
    assert_eq!(granted, [c1, c2]);
    assert!(q.push(P0, 4, NO_DEADLINE, false).is_some() && q.metrics().occupied == 1);
}

#[test]
fn one_dispatch_runs_a_bounded_number_of_rounds() {
    // Each round sees new work come in (as concurrent arrivals would): before, the holder
    // served them for as long as they came.
    let q = WaitQueue::<64>::new(1, 64).unwrap();
    let mut rounds = 0u32;
    let mut pushed = Vec::new();
    assert!(q.try_dispatch(|d| {
        rounds += 1;
        d.refresh(|_| true);
        if rounds < 40 {
            pushed.push(q.push(P0, u64::from(rounds), NO_DEADLINE, false).unwrap());
        }
        true
    }));
    assert_eq!(rounds, MAX_ROUNDS);
    assert!(q.needs_dispatch(), "the work left over is flagged for the next caller");
    let got = drain(&q, &mut Vec::new()).unwrap();
    assert_eq!(got, pushed, "nothing lost, order kept");
    assert!(!q.needs_dispatch());
}
