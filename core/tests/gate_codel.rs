#![cfg(not(loom))]
//! The Gate's CoDel against folly's rule, where every request passes through the queue:
//! a request admitted at once is a dequeue with zero delay, and the waiter judged is the
//! one being dequeued (the newest in LIFO); while the queue stands, no waiter waits longer
//! than the slough timeout. Also: permits the gate takes for waiters that then leave are
//! not shown to callers as admissions.
//!
//! Releases here are `Ignored` (no latency sample), so the gate knows no service time and
//! CoDel keeps folly's 5 ms / 100 ms; the last tests check how they follow a slower
//! dependency.

use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig, GateState, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::queue::Ticket;
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::{LimiterConfig, Outcome, Priority, RawPermit, Reason};

const P: Priority = Priority::CRITICAL;

/// Limit 1, one level, folly CoDel (5 ms target, 100 ms interval), LIFO while overloaded.
fn gate() -> Gate<64> {
    gate_of(1.0)
}

fn gate_of(limit: f64) -> Gate<64> {
    Gate::new(GateConfig {
        limiter: LimiterConfig {
            levels: 1,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: 1.0,
                max_limit: limit,
            }))
        },
        lifo: LifoTrigger::CodelOverloaded,
        ..GateConfig::default()
    })
    .unwrap()
}

fn queued(a: Arrival) -> Ticket {
    match a {
        Arrival::Queued(t) => t,
        other => panic!("expected Queued, got {other:?}"),
    }
}

fn admitted(a: Arrival) -> RawPermit {
    match a {
        Arrival::Admitted(p) => p,
        other => panic!("expected Admitted, got {other:?}"),
    }
}

type Grants = Vec<(Ticket, RawPermit)>;

/// Polls; returns the grants and the expiries.
fn poll(g: &Gate<64>, now: u64) -> (Grants, Vec<(Ticket, Reason)>) {
    let mut out: [Option<Event>; 8] = Default::default();
    let n = g.poll(now, &mut out);
    let (mut granted, mut expired) = (Vec::new(), Vec::new());
    for e in out.iter_mut().take(n) {
        match e.take().unwrap() {
            Event::Granted(t, p) => granted.push((t, p)),
            Event::Expired(t, r) => expired.push((t, r.reason)),
        }
    }
    (granted, expired)
}

/// Releases `held` at `now` and polls: the permit granted, or (all sloughed) one taken
/// from the limiter directly, not through the gate (so CoDel sees no pass). Counts the
/// grants and the sloughs.
fn step(g: &Gate<64>, now: u64, held: RawPermit, tally: &mut (u64, u64)) -> RawPermit {
    g.release(held, now, Outcome::Ignored).unwrap();
    let (mut granted, expired) = poll(g, now);
    tally.1 += expired.iter().filter(|e| e.1 == Reason::CodelSlough).count() as u64;
    tally.0 += 1;
    match granted.pop() {
        Some((_, p)) => p,
        None => g.limiter().try_acquire_raw(now, P).unwrap(),
    }
}

/// A standing queue for 300 ms (every waiter waits 20 ms or more), then drained: CoDel is
/// overloaded. Returns the time it ends at, with no permit held.
fn standing_queue(g: &Gate<64>) -> u64 {
    let mut held = g.limiter().try_acquire_raw(0, P).unwrap(); // not through the gate
    queued(g.arrive(MS, P, None));
    queued(g.arrive(MS, P, None));
    let mut now = MS;
    while now < 300 * MS {
        now += 20 * MS;
        held = step(g, now, held, &mut (0, 0));
        queued(g.arrive(now, P, None));
    }
    // Drain what waits.
    while g.waiting_total() > 0 {
        now += MS;
        held = step(g, now, held, &mut (0, 0));
    }
    now += MS;
    g.release(held, now, Outcome::Ignored).unwrap();
    assert!(g.metrics().codel[0].overloaded, "the standing queue made CoDel overloaded");
    now
}

#[test]
fn direct_admissions_clear_a_stale_verdict() {
    // The reproduction: a standing queue, 10 s of healthy traffic all admitted
    // directly, then one waiter. Before, the gate still said Overloaded (the verdict of
    // 10 s earlier), LIFO served the newest waiter, and a 22 ms waiter was sloughed.
    let g = gate();
    let mut now = standing_queue(&g);
    let before = g.metrics();
    let end = now + 10 * SEC;
    while now < end {
        let p = admitted(g.arrive(now, P, None));
        now += MS;
        g.release(p, now, Outcome::Ignored).unwrap();
    }
    assert_eq!(g.state(), GateState::Healthy);
    let h = admitted(g.arrive(now, P, None));
    let a = queued(g.arrive(now, P, None));
    let b = queued(g.arrive(now + MS, P, None));
    assert_eq!(g.state(), GateState::Healthy, "healthy traffic, one waiter: no standing queue");
    g.release(h, now + 22 * MS, Outcome::Ignored).unwrap();
    let (granted, expired) = poll(&g, now + 22 * MS);
    assert!(expired.is_empty(), "nothing sloughed: {expired:?}");
    assert_eq!(granted.iter().map(|x| x.0).collect::<Vec<_>>(), [a], "FIFO: the oldest first");
    for (_, p) in granted {
        g.release(p, now + 23 * MS, Outcome::Ignored).unwrap();
    }
    let (granted, expired) = poll(&g, now + 23 * MS);
    assert!(expired.is_empty(), "a 23 ms waiter is not sloughed by a stale verdict");
    assert_eq!(granted.iter().map(|x| x.0).collect::<Vec<_>>(), [b]);
    let after = g.metrics();
    assert_eq!(after.sloughed, before.sloughed);
    assert_eq!(after.lifo_switches, before.lifo_switches, "no LIFO once healthy");
}

#[test]
fn in_lifo_codel_judges_the_newest_and_a_standing_queue_sloughs_the_stale() {
    // Overloaded and LIFO: the newest waiter (1 ms) is dequeued, so it is the one CoDel
    // judges, and it is served; the waiters older than the slough timeout (10 ms) are
    // sloughed from the oldest end, so none waits out its caller's timeout.
    let g = gate();
    let mut held = g.limiter().try_acquire_raw(0, P).unwrap();
    let mut now = 0;
    // A standing queue that stays: one waiter granted every 20 ms, each after 20+ ms.
    queued(g.arrive(0, P, None));
    queued(g.arrive(0, P, None));
    for _ in 0..15 {
        now += 20 * MS;
        held = step(&g, now, held, &mut (0, 0));
        queued(g.arrive(now, P, None));
    }
    assert!(g.metrics().codel[0].overloaded);
    // Whatever still waits is older than 10 ms; add an old and a fresh waiter.
    let old = queued(g.arrive(now + MS, P, None));
    let fresh = queued(g.arrive(now + 25 * MS, P, None));
    now += 26 * MS;
    g.release(held, now, Outcome::Ignored).unwrap();
    let (granted, expired) = poll(&g, now);
    assert_eq!(granted.iter().map(|x| x.0).collect::<Vec<_>>(), [fresh], "LIFO");
    assert!(expired.iter().all(|e| e.1 == Reason::CodelSlough), "{expired:?}");
    assert!(expired.iter().any(|e| e.0 == old), "the 25 ms waiter is sloughed: {expired:?}");
    assert_eq!(g.waiting_total(), 0, "nothing older than 10 ms is left waiting");
    for (_, p) in granted {
        g.release(p, now + MS, Outcome::Ignored).unwrap();
    }
}

#[test]
fn a_permit_for_a_waiter_that_left_is_not_an_admission_callers_saw() {
    // CoDel sloughs a waiter after the gate took a permit for it: the first dequeue after
    // an interval whose every waiter waited closes that interval as overloaded (and is
    // spared), and the second of the same round, 99 ms old, is sloughed with a permit
    // already taken. The limiter counts that permit as admitted and ignored, the gate's
    // metrics do not.
    let g = gate_of(2.0);
    // Both slots taken from the limiter directly (no zero-delay pass for CoDel).
    let p1 = g.limiter().try_acquire_raw(0, P).unwrap();
    let p2 = g.limiter().try_acquire_raw(0, P).unwrap();
    // The first interval (20 ms to 120 ms) sees one dequeue, after 19 ms.
    let a = queued(g.arrive(MS, P, None));
    g.release(p1, 20 * MS, Outcome::Ignored).unwrap();
    let (mut granted, expired) = poll(&g, 20 * MS);
    assert_eq!((granted.iter().map(|x| x.0).collect::<Vec<_>>(), expired.len()), (vec![a], 0));
    let pa = granted.pop().unwrap().1;
    let b = queued(g.arrive(31 * MS, P, None));
    let c = queued(g.arrive(31 * MS, P, None));
    assert!(!g.metrics().codel[0].overloaded, "the verdict changes only at a dequeue");
    g.release(pa, 130 * MS, Outcome::Ignored).unwrap();
    g.release(p2, 130 * MS, Outcome::Ignored).unwrap();
    let (granted, expired) = poll(&g, 130 * MS);
    assert_eq!(
        granted.iter().map(|x| x.0).collect::<Vec<_>>(),
        [b],
        "spared: first of its interval"
    );
    assert_eq!(expired, [(c, Reason::CodelSlough)]);
    for (_, p) in granted {
        g.release(p, 131 * MS, Outcome::Ignored).unwrap();
    }
    let m = g.metrics();
    assert_eq!(m.limiter.inflight, 0);
    assert_eq!(m.limiter.ignored, 4, "the callers' own four releases, not c's permit");
    assert_eq!(g.limiter().metrics().ignored, 5, "the limiter counts c's as ignored too");
    assert_eq!(m.limiter.admitted, 4, "admissions callers saw: p1, p2, a, b");
    assert_eq!(g.limiter().metrics().admitted, 5, "the limiter itself counts c's too");
}

/// A queue of one in front of a 40 ms dependency (limit 1): each waiter waits 15 ms, the
/// next call arrives 25 ms after a grant. Returns whether CoDel ever said overloaded, the
/// gate's sloughs and CoDel's target after `rounds` calls, the releases reported as
/// `outcome`.
fn pipeline(outcome: Outcome, rounds: u64) -> (bool, u64, u64) {
    let g = gate();
    let mut now = MS;
    let mut ever = false;
    let mut held = admitted(g.arrive(now, P, None));
    let mut waiter = queued(g.arrive(now + 25 * MS, P, None));
    for _ in 0..rounds {
        now += 40 * MS;
        g.release(held, now, outcome).unwrap();
        let (mut granted, expired) = poll(&g, now);
        if let Some((t, p)) = granted.pop() {
            assert_eq!(t, waiter);
            held = p;
        } else {
            assert_eq!(expired.len(), 1, "the waiter left one way or the other");
            held = admitted(g.arrive(now, P, None));
        }
        ever |= g.metrics().codel[0].overloaded;
        waiter = queued(g.arrive(now + 25 * MS, P, None));
    }
    let m = g.metrics();
    (ever, m.sloughed, m.codel[0].target_ns)
}

/// CoDel judges a queue in the time its work takes downstream: 15 ms waits in front of a
/// 40 ms dependency are under half a call, not a standing queue. With folly's 5 ms / 100 ms
/// (no service time known: every release `Ignored`) the same queue is overloaded and its
/// waiters are sloughed.
#[test]
fn codel_follows_the_dependencys_service_time() {
    let (overloaded, sloughed, target) = pipeline(Outcome::Success, 40);
    assert_eq!((overloaded, sloughed), (false, 0));
    assert_eq!(target, 20 * MS, "the target is half a service time");
    let (overloaded, sloughed, target) = pipeline(Outcome::Ignored, 40);
    assert!(overloaded && sloughed > 0, "folly's constants: {sloughed} sloughed");
    assert_eq!(target, 5 * MS);
}

/// The service time CoDel follows is a floor under the estimate: a dependency that slows
/// 3× raises the estimate within a few answers, the floor by at most 1/30 of itself per
/// second (compounded: `e^(t / 30 s)`); when the dependency is fast again the floor comes down with the estimate.
#[test]
fn a_slowdown_barely_moves_the_service_time_codel_follows() {
    let g = gate();
    let (mut now, call) = (MS, |g: &Gate<64>, at: u64, latency: u64| {
        let p = admitted(g.arrive(at, P, None));
        g.release(p, at + latency, Outcome::Success).unwrap();
        at + latency
    });
    now = call(&g, now, 40 * MS);
    assert_eq!(g.service_floor_ns(), 40 * MS);
    poll(&g, now);
    let c = g.metrics().codel[0];
    assert_eq!((c.target_ns, c.interval_ns), (20 * MS, 200 * MS));
    // 3 s at 120 ms a call.
    let start = now;
    while now < start + 3 * SEC {
        now = call(&g, now, 120 * MS);
    }
    let (est, floor) = (g.service_ns(), g.service_floor_ns());
    assert!(est > 110 * MS, "the estimate follows at once: {est}");
    let bound = 40e6 * ((now - start) as f64 / 30e9).exp();
    assert!(floor > 40 * MS && (floor as f64) <= bound, "floor {floor}, bound {bound}");
    poll(&g, now);
    assert_eq!(g.metrics().codel[0].target_ns, floor / 2, "the target follows the floor");
    // Fast again: once the estimate is below the floor, the floor is the estimate.
    for _ in 0..40 {
        now = call(&g, now, 20 * MS);
    }
    assert!(g.service_ns() < 25 * MS);
    assert_eq!(g.service_floor_ns(), g.service_ns());
}
