#![cfg(loom)]
//! loom models of the Gate: concurrent arrive / release / poll / cancel in tiny configs.
//!
//! Invariants: admitted ≤ limit; queue ≤ capacity; no lost wake-up at quiescence (after
//! every thread did its own pump step — poll after a release or a `Queued` — nobody waits
//! beside a free slot, *without* an extra poll); a ticket is granted at most once and never
//! both granted and expired; a cancelled ticket is never granted (nor reported), and its
//! slot is reused at once, also while a dispatch round settles it; an eviction is reported
//! by a poll, or owed and shown by `next_wakeup` (also once its evictor was cancelled).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom
//!       cargo test -p surgeguard-core --release --test loom_gate`

use loom::sync::Arc;
use loom::thread;
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::queue::Ticket;
use surgeguard_core::{LimiterConfig, Outcome, Priority, RawPermit, Reason};

const P0: Priority = Priority::CRITICAL;
const P1: Priority = Priority::NORMAL;

/// `loom::model`, with the body on a loom thread of a larger stack: a Gate built on the stack
/// (loom's atomics are far larger than the real ones) no longer fits the 32 KiB stack loom
/// gives the model's own thread. The spawned threads only share it through an `Arc`.
fn model<F: Fn() + Send + Sync + 'static>(f: F) {
    let f = std::sync::Arc::new(f);
    loom::model(move || {
        let f = f.clone();
        thread::Builder::new().stack_size(1 << 20).spawn(move || f()).unwrap().join().unwrap();
    });
}

fn gate<const C: usize>(limit: f64, levels: u8) -> Gate<C> {
    Gate::new(GateConfig {
        limiter: LimiterConfig {
            levels,
            weights: [0.0; 8],
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: 1.0,
                max_limit: limit,
            }))
        },
        codel: None,
        lifo: LifoTrigger::Never,
        ..GateConfig::default()
    })
    .unwrap()
}

/// What one thread saw.
#[derive(Default)]
struct Seen {
    granted: Vec<(Ticket, RawPermit)>,
    expired: Vec<(Ticket, Reason)>,
}

fn poll_into<const C: usize>(g: &Gate<C>, now: u64, seen: &mut Seen) {
    let mut out: [Option<Event>; 4] = Default::default();
    let n = g.poll(now, &mut out);
    for e in out.iter_mut().take(n) {
        match e.take().unwrap() {
            Event::Granted(t, p) => seen.granted.push((t, p)),
            Event::Expired(t, r) => seen.expired.push((t, r.reason)),
        }
    }
}

/// Every ticket at most once across all threads' events; returns the granted tickets.
fn check_once(seen: &[&Seen]) -> Vec<Ticket> {
    let mut all: Vec<Ticket> = Vec::new();
    for s in seen {
        all.extend(s.granted.iter().map(|(t, _)| *t));
        all.extend(s.expired.iter().map(|(t, _)| *t));
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a ticket was reported twice");
    seen.iter().flat_map(|s| s.granted.iter().map(|(t, _)| *t)).collect()
}

#[test]
fn a_release_racing_an_arrival_loses_no_wakeup() {
    model(|| {
        let g = Arc::new(gate::<2>(1.0, 1));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let g1 = g.clone();
        let releaser = thread::spawn(move || {
            let mut seen = Seen::default();
            g1.release(a, 1, Outcome::Success).unwrap();
            poll_into(&g1, 1, &mut seen);
            seen
        });
        let g2 = g.clone();
        let arriver = thread::spawn(move || {
            let mut seen = Seen::default();
            let queued = match g2.arrive(1, P0, None) {
                Arrival::Admitted(p) => {
                    seen.granted.push((Ticket::from_bits(0), p));
                    None
                }
                Arrival::Queued(t) => {
                    poll_into(&g2, 1, &mut seen);
                    Some(t)
                }
                Arrival::Rejected(r) => panic!("refused: {r}"),
            };
            (seen, queued)
        });
        let s1 = releaser.join().unwrap();
        let (s2, queued) = arriver.join().unwrap();
        let granted = check_once(&[&s1, &s2]);
        assert!(g.limiter().inflight() <= 1, "admitted above the limit");
        // Quiescence, no extra poll: the arrival got the freed slot one way or the other.
        assert_eq!(g.waiting_total(), 0, "a waiter was left beside a free slot");
        assert_eq!(g.limiter().inflight(), 1);
        if let Some(t) = queued {
            assert_eq!(granted, [t]);
        }
    });
}

#[test]
fn a_cancel_racing_a_grant_has_exactly_one_winner() {
    model(|| {
        let g = Arc::new(gate::<2>(1.0, 1));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(t) = g.arrive(0, P0, None) else { panic!() };
        let g1 = g.clone();
        let releaser = thread::spawn(move || {
            let mut seen = Seen::default();
            g1.release(a, 1, Outcome::Success).unwrap();
            poll_into(&g1, 1, &mut seen);
            seen
        });
        let g2 = g.clone();
        let canceller = thread::spawn(move || g2.cancel(t).is_ok());
        let seen = releaser.join().unwrap();
        let cancelled = canceller.join().unwrap();
        let granted = check_once(&[&seen]);
        assert!(seen.expired.is_empty());
        assert_eq!(cancelled, granted.is_empty(), "cancel and grant must not both win");
        assert_eq!(g.limiter().inflight() as usize, granted.len());
        assert_eq!(g.waiting_total(), 0);
    });
}

#[test]
fn two_pollers_grant_a_waiter_once() {
    model(|| {
        let g = Arc::new(gate::<2>(1.0, 1));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(t) = g.arrive(0, P0, None) else { panic!() };
        let g1 = g.clone();
        let first = thread::spawn(move || {
            let mut seen = Seen::default();
            g1.release(a, 1, Outcome::Success).unwrap();
            poll_into(&g1, 1, &mut seen);
            seen
        });
        let g2 = g.clone();
        let second = thread::spawn(move || {
            let mut seen = Seen::default();
            poll_into(&g2, 1, &mut seen);
            seen
        });
        let s1 = first.join().unwrap();
        let s2 = second.join().unwrap();
        assert_eq!(check_once(&[&s1, &s2]), [t], "granted exactly once, no lost wake-up");
        assert_eq!(g.limiter().inflight(), 1);
    });
}

#[test]
fn concurrent_arrivals_into_a_full_queue_stay_bounded() {
    model(|| {
        // Limit 1 (taken), capacity 1 (taken by a normal waiter); a critical and a normal
        // arrival race: the critical one may evict, the normal one is refused or queued.
        let g = Arc::new(gate::<1>(1.0, 2));
        let Arrival::Admitted(_a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(n0) = g.arrive(0, P1, None) else { panic!() };
        let spawn_arrival = |level| {
            let g = g.clone();
            thread::spawn(move || {
                let r = g.arrive(1, level, None);
                let mut seen = Seen::default();
                if matches!(r, Arrival::Queued(_)) {
                    poll_into(&g, 1, &mut seen);
                }
                (r, seen)
            })
        };
        let crit = spawn_arrival(P0);
        let norm = spawn_arrival(P1);
        let (rc, s1) = crit.join().unwrap();
        let (rn, s2) = norm.join().unwrap();
        assert!(matches!(rc, Arrival::Queued(_)), "critical always finds a place");
        assert!(matches!(rn, Arrival::Rejected(_)), "normal never fits beside critical");
        assert!(g.waiting_total() <= 1, "queue above capacity");
        assert_eq!(g.waiting(P0), 1);
        let mut main = Seen::default();
        poll_into(&g, 2, &mut main);
        check_once(&[&s1, &s2, &main]);
        let evicted: Vec<_> = [&s1, &s2, &main]
            .iter()
            .flat_map(|s| s.expired.iter())
            .filter(|(_, r)| *r == Reason::Evicted)
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(evicted, [n0], "the normal waiter was evicted exactly once");
        assert!(g.limiter().inflight() <= 1);
    });
}

#[test]
fn a_cancel_racing_an_eviction_has_exactly_one_winner() {
    model(|| {
        // Limit 1 (taken), capacity 1 (a normal waiter): its owner cancels while a
        // critical arrival wants its place.
        let g = Arc::new(gate::<1>(1.0, 2));
        let Arrival::Admitted(_a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(n0) = g.arrive(0, P1, None) else { panic!() };
        let g1 = g.clone();
        let canceller = thread::spawn(move || g1.cancel(n0).is_ok());
        let g2 = g.clone();
        let arriver = thread::spawn(move || {
            let r = g2.arrive(1, P0, None);
            let mut seen = Seen::default();
            if matches!(r, Arrival::Queued(_)) {
                poll_into(&g2, 1, &mut seen);
            }
            (r, seen)
        });
        let cancelled = canceller.join().unwrap();
        let (r, s2) = arriver.join().unwrap();
        let mut main = Seen::default();
        poll_into(&g, 2, &mut main);
        check_once(&[&s2, &main]);
        let evicted = [&s2, &main].iter().flat_map(|s| s.expired.iter()).count();
        assert_eq!(cancelled, evicted == 0, "cancelled and evicted must not both happen");
        // The critical arrival always finds a place: n0's, by eviction or (cancelled) reuse.
        assert!(matches!(r, Arrival::Queued(_)), "critical refused: {r:?}");
        assert_eq!(g.waiting(P1), 0);
        assert_eq!(g.waiting(P0), 1);
        assert!(g.waiting_total() <= 1);
    });
}

#[test]
fn an_eviction_racing_a_dispatch_round_is_reported_once() {
    model(|| {
        let g = Arc::new(gate::<1>(1.0, 2));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(n0) = g.arrive(0, P1, None) else { panic!() };
        let g1 = g.clone();
        let arriver = thread::spawn(move || {
            let r = g1.arrive(1, P0, None);
            let mut seen = Seen::default();
            poll_into(&g1, 1, &mut seen);
            (r, seen)
        });
        let g2 = g.clone();
        let releaser = thread::spawn(move || {
            let mut seen = Seen::default();
            g2.release(a, 1, Outcome::Success).unwrap();
            poll_into(&g2, 1, &mut seen);
            seen
        });
        let (r, s1) = arriver.join().unwrap();
        let s2 = releaser.join().unwrap();
        let granted = check_once(&[&s1, &s2]);
        let evicted: Vec<_> =
            [&s1, &s2].iter().flat_map(|s| s.expired.iter()).map(|(t, _)| *t).collect();
        let admitted = u32::from(matches!(r, Arrival::Admitted(_)));
        assert_eq!(g.limiter().inflight(), granted.len() as u32 + admitted);
        assert!(g.limiter().inflight() <= 1, "admitted above the limit");
        // Quiescence without an extra poll: whoever waits, waits because the slot is taken.
        if g.waiting_total() > 0 {
            assert_eq!(g.limiter().inflight(), 1, "a waiter was left beside a free slot");
        }
        assert!(g.waiting_total() <= 1, "queue above capacity");
        match r {
            // Took n0's place: n0 reported evicted exactly once, never granted.
            Arrival::Queued(c) if evicted == [n0] => {
                assert!(!granted.contains(&n0));
                assert_eq!(granted, [c]);
            }
            // n0 was granted first; the critical arrival queued behind the taken slot.
            Arrival::Queued(_) => {
                assert!(evicted.is_empty());
                assert_eq!(granted, [n0]);
                assert_eq!(g.waiting(P0), 1);
            }
            // The slot was free when it arrived: n0 waits behind it.
            Arrival::Admitted(_) => {
                assert!(evicted.is_empty() && granted.is_empty());
                assert_eq!(g.waiting(P1), 1);
            }
            Arrival::Rejected(rj) => panic!("critical refused: {rj}"),
        }
    });
}

#[test]
fn an_eviction_whose_evictor_is_cancelled_at_once_is_reported_or_owed() {
    model(|| {
        // Limit 1 (taken), capacity 1 (n0). A critical arrival evicts n0 and is withdrawn
        // before its own poll, while another thread polls: at quiescence nothing waits,
        // and n0's report was made by that poll or is owed (`next_wakeup` says now).
        let g = Arc::new(gate::<1>(1.0, 2));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(n0) = g.arrive(0, P1, None) else { panic!() };
        let g1 = g.clone();
        let owner = thread::spawn(move || match g1.arrive(1, P0, None) {
            Arrival::Queued(c) => assert_eq!(g1.cancel(c), Ok(())),
            other => panic!("the critical arrival evicts: {other:?}"),
        });
        let g2 = g.clone();
        let poller = thread::spawn(move || {
            let mut seen = Seen::default();
            poll_into(&g2, 1, &mut seen);
            seen
        });
        owner.join().unwrap();
        let s1 = poller.join().unwrap();
        assert_eq!(g.waiting_total(), 0);
        let mut main = Seen::default();
        if s1.expired.is_empty() {
            assert_eq!(g.next_wakeup(1), Some(1), "n0's report is owed and nothing says so");
            poll_into(&g, 1, &mut main);
        }
        check_once(&[&s1, &main]);
        let evicted: Vec<_> = [&s1, &main].iter().flat_map(|s| s.expired.iter()).copied().collect();
        assert_eq!(evicted, [(n0, Reason::Evicted)]);
        assert_eq!(g.next_wakeup(1), None, "nothing owed once reported");
        g.release(a, 2, Outcome::Success).unwrap();
    });
}

#[test]
fn a_cancelled_slot_is_reused_while_a_round_settles_it() {
    model(|| {
        // Limit 1 (taken), capacity 1 (n0). One thread cancels n0 and arrives again at
        // once; the other polls, settling the cancel meanwhile.
        let g = Arc::new(gate::<1>(1.0, 1));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(n0) = g.arrive(0, P0, None) else { panic!() };
        let g1 = g.clone();
        let owner = thread::spawn(move || {
            assert_eq!(g1.cancel(n0), Ok(()));
            match g1.arrive(1, P0, None) {
                Arrival::Queued(t) => t,
                other => panic!("the cancelled slot was not reused: {other:?}"),
            }
        });
        let g2 = g.clone();
        let poller = thread::spawn(move || {
            let mut seen = Seen::default();
            poll_into(&g2, 1, &mut seen);
            seen
        });
        let t = owner.join().unwrap();
        let s1 = poller.join().unwrap();
        assert_ne!(t, n0);
        assert_eq!(g.waiting_total(), 1);
        // The holder leaves: the new waiter, and only it, is granted, once.
        g.release(a, 2, Outcome::Success).unwrap();
        let mut main = Seen::default();
        poll_into(&g, 2, &mut main);
        let granted = check_once(&[&s1, &main]);
        assert_eq!(granted, [t]);
        assert!(s1.expired.is_empty() && main.expired.is_empty(), "n0 reported");
        assert_eq!(g.waiting_total(), 0);
        assert_eq!(g.metrics().cancelled, 1);
    });
}

#[test]
fn two_arrivals_race_for_one_cancelled_slot() {
    model(|| {
        let g = Arc::new(gate::<1>(1.0, 1));
        let Arrival::Admitted(a) = g.arrive(0, P0, None) else { panic!() };
        let Arrival::Queued(n0) = g.arrive(0, P0, None) else { panic!() };
        g.cancel(n0).unwrap();
        let spawn_arrival = || {
            let g = g.clone();
            thread::spawn(move || g.arrive(1, P0, None))
        };
        let (x, y) = (spawn_arrival(), spawn_arrival());
        let results = [x.join().unwrap(), y.join().unwrap()];
        let queued: Vec<_> = results
            .iter()
            .filter_map(|r| match r {
                Arrival::Queued(t) => Some(*t),
                _ => None,
            })
            .collect();
        assert_eq!(queued.len(), 1, "exactly one takes the slot: {results:?}");
        assert!(results
            .iter()
            .any(|r| matches!(r, Arrival::Rejected(rj) if rj.reason == Reason::QueueFull)));
        g.release(a, 2, Outcome::Success).unwrap();
        let mut main = Seen::default();
        poll_into(&g, 2, &mut main);
        assert_eq!(check_once(&[&main]), queued);
        assert!(main.expired.is_empty());
    });
}

/// A gate whose levels have guaranteed shares (non-zero weights: the limiter's partition
/// rule decides, and may keep a slot back for a level).
fn weighted<const C: usize>(limit: f64, weights: [f64; 2]) -> Gate<C> {
    let mut w = [0.0; 8];
    w[..2].copy_from_slice(&weights);
    Gate::new(GateConfig {
        limiter: LimiterConfig {
            levels: 2,
            weights: w,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: 1.0,
                max_limit: limit,
            }))
        },
        codel: None,
        lifo: LifoTrigger::Never,
        ..GateConfig::default()
    })
    .unwrap()
}

#[test]
fn partitions_a_release_racing_a_critical_arrival() {
    model(|| {
        // Limit 2 split 50/50; both slots taken (one per level). The normal holder
        // releases while a critical arrival comes in: the partition rule decides whether
        // the critical one may take the normal share.
        let g = Arc::new(weighted::<2>(2.0, [0.5, 0.5]));
        let Arrival::Admitted(a) = g.arrive(0, P1, None) else { panic!() };
        let Arrival::Admitted(_b) = g.arrive(0, P0, None) else { panic!() };
        let g1 = g.clone();
        let releaser = thread::spawn(move || {
            let mut seen = Seen::default();
            g1.release(a, 1, Outcome::Success).unwrap();
            poll_into(&g1, 1, &mut seen);
            seen
        });
        let g2 = g.clone();
        let arriver = thread::spawn(move || {
            let mut seen = Seen::default();
            let r = g2.arrive(1, P0, None);
            if matches!(r, Arrival::Queued(_)) {
                poll_into(&g2, 1, &mut seen);
            }
            (r, seen)
        });
        let s1 = releaser.join().unwrap();
        let (r, s2) = arriver.join().unwrap();
        let granted = check_once(&[&s1, &s2]);
        let admitted = usize::from(matches!(r, Arrival::Admitted(_)));
        assert!(!matches!(r, Arrival::Rejected(_)), "refused: {r:?}");
        assert!(g.limiter().inflight() <= 2, "admitted above the limit");
        assert_eq!(g.limiter().inflight() as usize, 1 + admitted + granted.len());
        assert!(g.waiting_total() <= 1);
        // No lost wake-up: a waiter beside a free slot has a timer to come back.
        if g.waiting_total() > 0 && g.limiter().inflight() < 2 {
            assert!(g.next_wakeup(1).is_some(), "a waiter beside a free slot and no wake-up");
        }
    });
}
