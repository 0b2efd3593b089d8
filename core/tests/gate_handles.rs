#![cfg(not(loom))]
//! Handles given back by a caller: tickets and waiters of another queue, forged ticket
//! numbers, and the uniqueness of queue ids. No public method may panic on any of them,
//! and none may act on a waiter it does not own.

use quickcheck::{QuickCheck, TestResult};
use std::collections::HashMap;
use surgeguard_core::queue::{Ticket, WaitQueue, Waiter, NO_DEADLINE};
use surgeguard_core::{Priority, UsageError};

const P0: Priority = Priority::CRITICAL;

/// The newest waiter at `level`, as `q`'s dispatcher hands it out.
fn waiter_of<const C: usize>(q: &WaitQueue<C>, level: Priority) -> Waiter {
    let mut got = None;
    assert!(q.try_dispatch(|d| {
        d.refresh(|_| true);
        got = d.newest(level);
        true
    }));
    got.expect("a waiter")
}

#[test]
fn a_waiter_of_another_queue_is_refused_by_the_dispatcher() {
    // A waiter in slot 7 of a big queue, shown to a queue with 2 slots: before, indexing
    // slot 7 panicked.
    let big = WaitQueue::<8>::new(1, 8).unwrap();
    for k in 0..8 {
        big.push(P0, k, NO_DEADLINE, false).unwrap();
    }
    let far = waiter_of(&big, P0);
    // A waiter in slot 0 of queue A, shown to queue B whose slot 0 holds a waiter of the
    // same generation: before, B removed its own waiter.
    let a = WaitQueue::<2>::new(1, 2).unwrap();
    let b = WaitQueue::<2>::new(1, 2).unwrap();
    a.push(P0, 0, NO_DEADLINE, false).unwrap();
    let tb = b.push(P0, 0, NO_DEADLINE, false).unwrap();
    let near = waiter_of(&a, P0);
    assert!(b.try_dispatch(|d| {
        d.refresh(|_| true);
        for w in [far, near] {
            assert!(!d.remove(&w), "another queue's waiter is not removed");
            assert!(!d.demote(&w, P0), "nor moved");
            assert_eq!(d.newer(&w), None, "nor walked from");
        }
        true
    }));
    assert_eq!(b.len(), 1, "b's own waiter is still there");
    assert_eq!(b.cancel(tb), Ok(P0));
    assert_eq!(big.len(), 8);
    assert_eq!(a.len(), 1);
}

#[test]
fn tickets_of_different_queues_never_collide() {
    // Queue ids were 16 bits of a counter shared by every structure: after 65,536 more
    // queues, a new queue's first ticket was bit-identical to an old one's, and the new
    // queue accepted the old ticket as its own. Ids are now 32 bits and never reused.
    let a = WaitQueue::<1>::new(1, 1).unwrap();
    let ta = a.push(P0, 0, NO_DEADLINE, false).unwrap();
    let mut seen: HashMap<u64, usize> = HashMap::new();
    seen.insert(ta.to_bits(), 0);
    for k in 1..=140_000 {
        let q = WaitQueue::<1>::new(1, 1).unwrap();
        let t = q.push(P0, 0, NO_DEADLINE, false).unwrap();
        if let Some(first) = seen.insert(t.to_bits(), k) {
            panic!("queue {k} issued queue {first}'s ticket {t:?}");
        }
        assert_eq!(q.cancel(ta), Err(UsageError::ForeignHandle), "queue {k}");
        assert_eq!(q.len(), 1);
    }
}

#[test]
fn any_ticket_number_is_refused_cleanly() {
    fn prop(bits: u64, flip: u64) -> TestResult {
        let q = WaitQueue::<64>::new(3, 48).unwrap();
        let live: Vec<Ticket> =
            (0..5).map(|k| q.push(P0, k, NO_DEADLINE, false).unwrap()).collect();
        // Arbitrary numbers, and live tickets with arbitrary bits flipped.
        let forged = [bits, live[(bits % 5) as usize].to_bits() ^ flip.max(1)];
        for f in forged {
            let t = Ticket::from_bits(f);
            if live.contains(&t) {
                continue;
            }
            match q.cancel(t) {
                Err(UsageError::ForeignHandle | UsageError::UnknownTicket) => {}
                other => return TestResult::error(format!("{f:#x}: {other:?}")),
            }
        }
        TestResult::from_bool(q.len() == 5)
    }
    QuickCheck::new().tests(3000).quickcheck(prop as fn(u64, u64) -> TestResult);
}
