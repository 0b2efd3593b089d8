//! loom model of the brownout dimmer: concurrent updates never publish a value outside
//! [0, 1], never lose the update flag (a later update always computes), and a caller
//! that loses the race gets a published value at once (wait-free).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use surgeguard_core::dimmer::{Dimmer, Reading, Tally};

const SEC: u64 = 1_000_000_000;

fn reading(waiting: u32) -> Reading {
    Reading { waiting, capacity: 10, ..Reading::default() }
}

#[test]
fn concurrent_updates_publish_a_value_and_release_the_flag() {
    loom::model(|| {
        let d = Arc::new(Dimmer::new());
        let handles: Vec<_> = [(2 * SEC, 8u32), (3 * SEC, 5)]
            .into_iter()
            .map(|(now, waiting)| {
                let d = d.clone();
                thread::spawn(move || {
                    let v =
                        d.update(now, || reading(waiting), || Tally { refused: 0, admitted: 1 });
                    assert!((0.0..=1.0).contains(&v));
                    v
                })
            })
            .collect();
        let seen: Vec<f64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // Every answer is a value some update published (0 before any, 1 for 8 of 10,
        // about 0.5 for 5 of 10, or 1 fallen by 1/2).
        for v in seen {
            assert!([0.0, 1.0, 0.5].iter().any(|x| (x - v).abs() < 1e-9), "{v}");
        }
        // The flag is free: a later update computes (a full queue dims fully).
        assert_eq!(d.update(4 * SEC, || reading(10), Tally::default), 1.0);
    });
}
