#![cfg(not(loom))]
//! One event buffer shared by two gates: a poll never overwrites an event the caller has
//! not taken, so no grant (and no slot) is lost. And an event owed with nothing waiting
//! (an eviction whose evictor was cancelled) still reaches a caller that polls only while
//! anyone waits or its wake-up comes.

use surgeguard_core::codel::{CodelConfig, CodelMode};
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::time::MS;
use surgeguard_core::{LimiterConfig, Outcome, Priority, Reason};

const P: Priority = Priority::CRITICAL;

fn gate() -> Gate<4> {
    Gate::new(GateConfig {
        limiter: LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: 1.0,
            min_limit: 1.0,
            max_limit: 1.0,
        })),
        codel: None,
        ..GateConfig::default()
    })
    .unwrap()
}

/// A gate with one waiter whose grant is due at the next poll.
fn one_grant_due(g: &Gate<4>) {
    let Arrival::Admitted(p) = g.arrive(0, P, None) else { panic!("admitted") };
    let Arrival::Queued(_) = g.arrive(0, P, None) else { panic!("queued") };
    g.release(p, 1, Outcome::Success).unwrap();
}

#[test]
fn a_second_gate_never_overwrites_the_first_gates_grant() {
    let (a, b) = (gate(), gate());
    one_grant_due(&a);
    one_grant_due(&b);
    let mut out: [Option<Event>; 1] = Default::default();
    assert_eq!(a.poll(2, &mut out), 1);
    // Before, b's poll replaced a's grant with its own and handed a's permit to b's
    // limiter, which refused it: a's slot leaked for good.
    assert_eq!(b.poll(2, &mut out), 0, "the buffer holds an event: nothing written");
    let Some(Event::Granted(_, pa)) = out[0].take() else { panic!("a's grant is still there") };
    a.release(pa, 3, Outcome::Success).unwrap();
    assert_eq!(a.limiter().inflight(), 0, "a's slot came back");
    assert_eq!(b.poll(3, &mut out), 1);
    let Some(Event::Granted(_, pb)) = out[0].take() else { panic!("b's grant") };
    b.release(pb, 4, Outcome::Success).unwrap();
    assert_eq!(b.limiter().inflight(), 0);
}

#[test]
fn a_poll_writes_only_the_leading_free_entries() {
    let (a, b) = (gate(), gate());
    one_grant_due(&a);
    one_grant_due(&b);
    let mut out: [Option<Event>; 3] = Default::default();
    assert_eq!(a.poll(2, &mut out[1..2]), 1); // an event in the middle of the buffer
    assert_eq!(b.poll(2, &mut out), 1, "room before the occupied entry");
    let Some(Event::Granted(_, pb)) = out[0].take() else { panic!("b's grant first") };
    let Some(Event::Granted(_, pa)) = out[1].take() else { panic!("a's grant untouched") };
    assert!(out[2].is_none());
    a.release(pa, 3, Outcome::Success).unwrap();
    b.release(pb, 3, Outcome::Success).unwrap();
}

/// The case `gate_fuzz` found (`SG_FUZZ_CASES=300000`: "ticket 0 never ended"), replayed.
#[test]
fn an_eviction_whose_evictor_was_cancelled_is_still_reported() {
    let g: Gate<4> = Gate::new(GateConfig {
        limiter: LimiterConfig {
            levels: 2,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: 3.0,
                min_limit: 1.0,
                max_limit: 3.0,
            }))
        },
        queue_capacity: Some(1),
        codel: Some(CodelConfig {
            target_ns: 5 * MS,
            interval_ns: 50 * MS,
            mode: CodelMode::Rfc8289,
        }),
        lifo: LifoTrigger::CodelOverloaded,
        ..GateConfig::default()
    })
    .unwrap();
    let Arrival::Admitted(p) = g.arrive(1, Priority::NORMAL, None) else { panic!("admitted") };
    g.limiter().set_static_limit(Some(1.5)).unwrap();
    let Arrival::Queued(a) = g.arrive(2, Priority::NORMAL, Some(2 + 32 * MS)) else {
        panic!("a queued")
    };
    // b takes a's one place; then b is withdrawn before any poll.
    let Arrival::Queued(b) = g.arrive(3, Priority::CRITICAL, None) else { panic!("b queued") };
    assert_eq!(g.cancel(b), Ok(()));
    assert_eq!(g.waiting_total(), 0, "nobody waits");
    // Before, the wake-up was `None` too, so the pump below never polled and a was left
    // without an event: its report stayed in the queue with nothing to say it was owed.
    assert_eq!(g.next_wakeup(3), Some(3), "a's report is owed: poll now");
    // A binding's pump: after the release, poll if anyone waits; then at each wake-up.
    let mut events = Vec::new();
    let mut poll = |now| {
        let mut out: [Option<Event>; 4] = Default::default();
        let n = g.poll(now, &mut out);
        events.extend(out.iter_mut().take(n).map(|e| e.take().unwrap()));
    };
    let mut now = 3;
    g.release(p, now, Outcome::Ignored).unwrap();
    if g.waiting_total() > 0 {
        poll(now);
    }
    for _ in 0..10 {
        let Some(w) = g.next_wakeup(now) else { break };
        now = now.max(w);
        poll(now);
    }
    match events.as_slice() {
        [Event::Expired(t, r)] => assert_eq!((*t, r.reason), (a, Reason::Evicted)),
        other => panic!("a needs exactly one event, got {other:?}"),
    }
    assert_eq!(g.next_wakeup(now), None, "nothing owed once reported");
    assert_eq!(g.limiter().inflight(), 0);
}

/// The case `gate_fuzz` found next (`SG_FUZZ_CASES=200000`: "ticket 1 never ended"),
/// without its bad `now`s (acted at the time recorded, they changed nothing): two
/// evictions from the one place, the evictor cancelled, then a poll with room for one event.
#[test]
fn an_eviction_report_a_full_poll_left_is_still_owed() {
    let g: Gate<4> = Gate::new(GateConfig {
        limiter: LimiterConfig {
            levels: 3,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: 1.0,
                min_limit: 1.0,
                max_limit: 1.0,
            }))
        },
        queue_capacity: Some(1),
        codel: None,
        ..GateConfig::default()
    })
    .unwrap();
    let Arrival::Admitted(p) = g.arrive(2, Priority::CRITICAL, None) else { panic!("admitted") };
    let Arrival::Queued(a) = g.arrive(3, Priority::BACKGROUND, None) else { panic!("a queued") };
    let Arrival::Queued(b) = g.arrive(3, Priority::NORMAL, None) else { panic!("b queued") };
    let Arrival::Queued(c) = g.arrive(5, Priority::CRITICAL, None) else { panic!("c queued") };
    assert_eq!(g.cancel(c), Ok(()));
    let mut events = Vec::new();
    let mut one: [Option<Event>; 1] = Default::default();
    assert_eq!(g.poll(5, &mut one), 1);
    events.push(one[0].take().unwrap());
    assert_eq!(g.waiting_total(), 0, "nobody waits");
    // Before, the wake-up was `None`: the poll that had no room for b's report had cleared
    // the only sign that it was owed.
    assert_eq!(g.next_wakeup(5), Some(5), "b's report is owed: poll now");
    // A binding's pump: after the release, poll if anyone waits; then at each wake-up.
    let mut now = 5;
    g.release(p, now, Outcome::Ignored).unwrap();
    let mut poll = |now| {
        let mut out: [Option<Event>; 4] = Default::default();
        let n = g.poll(now, &mut out);
        events.extend(out.iter_mut().take(n).map(|e| e.take().unwrap()));
    };
    if g.waiting_total() > 0 {
        poll(now);
    }
    for _ in 0..10 {
        let Some(w) = g.next_wakeup(now) else { break };
        now = now.max(w);
        poll(now);
    }
    match events.as_slice() {
        [Event::Expired(ta, ra), Event::Expired(tb, rb)] => {
            assert_eq!((*ta, ra.reason), (a, Reason::Evicted));
            assert_eq!((*tb, rb.reason), (b, Reason::Evicted));
        }
        other => panic!("a and b need exactly one event each, got {other:?}"),
    }
    assert_eq!(g.next_wakeup(now), None, "nothing owed once reported");
    assert_eq!(g.limiter().inflight(), 0);
}
