#![cfg(not(loom))]
//! Model test: the `Gate` against a sequential reference model of its documented rules
//! (`support/gate_ref.rs`), partitions included (the limiter's reference model,
//! `support/limiter_ref.rs`), bad input mixed in.

#[path = "support/gate_ref.rs"]
mod gate_ref;
#[path = "support/limiter_ref.rs"]
#[allow(dead_code)]
mod limiter_ref;

use quickcheck::{Gen, QuickCheck};

#[test]
fn gate_matches_the_reference_model() {
    QuickCheck::new()
        .rng(Gen::new(60))
        .tests(2000)
        .quickcheck(gate_ref::run as fn(gate_ref::Params, Vec<gate_ref::Op>) -> bool);
}

/// The partition rule at the very start of the clock: a critical arrival makes critical
/// active from its `now` on, whatever that `now` is, so with a limit of 10 and the default
/// weights critical (holding 1, a peak of 1: target 2) holds back 1 slot and background
/// work may take only the other 8 of the 9 it sends. (It failed once: the limiter refreshed a level's
/// activity stamp only once `now` was at least 1 ms past the stamp, and the stamp starts
/// at 0, so an arrival before 1 ms never made its level active: 9 background arrivals
/// admitted.)
#[test]
fn an_arrival_before_1_ms_makes_its_level_active() {
    use surgeguard_core::gate::{Arrival, Gate, GateConfig};
    use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
    use surgeguard_core::{LimiterConfig, Priority};
    let fixed = AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: 10.0,
        min_limit: 1.0,
        max_limit: 10.0,
    });
    let gate: Gate<16> = Gate::new(GateConfig {
        limiter: LimiterConfig::with_algorithm(fixed),
        ..GateConfig::default()
    })
    .unwrap();
    assert!(matches!(gate.arrive(3, Priority::CRITICAL, None), Arrival::Admitted(_)));
    let admitted = (0..9)
        .filter(|i| matches!(gate.arrive(4 + i, Priority::BACKGROUND, None), Arrival::Admitted(_)))
        .count();
    assert_eq!(admitted, 8, "background admitted beside critical's reservation");
}
