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
