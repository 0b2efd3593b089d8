#![cfg(not(loom))]
//! One event buffer shared by two gates: a poll never overwrites an event the caller has
//! not taken, so no grant (and no slot) is lost.

use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{LimiterConfig, Outcome, Priority};

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
