#![cfg(not(loom))]
//! Ticket ownership across many constructions, alone in its process so that the count of
//! structures built before each gate is exact.

use surgeguard_core::gate::{Arrival, Gate, GateConfig};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::queue::WaitQueue;
use surgeguard_core::{LimiterConfig, Priority, UsageError};

const P0: Priority = Priority::CRITICAL;

#[test]
fn gates_refuse_each_others_tickets_after_many_constructions() {
    let cfg = GateConfig {
        limiter: LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: 1.0,
            min_limit: 1.0,
            max_limit: 1.0,
        })),
        codel: None,
        ..GateConfig::default()
    };
    let a: Gate<1> = Gate::new(cfg).unwrap();
    let _held = a.arrive(0, P0, None);
    let Arrival::Queued(ta) = a.arrive(0, P0, None) else { panic!("queued") };
    // 65,530 queues later (ids were 16 bits of one counter shared with limiters), then
    // gates in the same state as `a`.
    for _ in 0..65_530 {
        let _ = WaitQueue::<1>::new(1, 1).unwrap();
    }
    for k in 0..200 {
        let b: Gate<1> = Gate::new(cfg).unwrap();
        let _held_b = b.arrive(0, P0, None);
        let Arrival::Queued(tb) = b.arrive(0, P0, None) else { panic!("queued") };
        assert_ne!(ta, tb, "gate {k}");
        assert_eq!(b.cancel(ta), Err(UsageError::ForeignHandle), "gate {k}");
        assert_eq!(b.waiting_total(), 1);
        assert_eq!(a.cancel(tb), Err(UsageError::ForeignHandle));
    }
    assert_eq!(a.waiting_total(), 1);
}
