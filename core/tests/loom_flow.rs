#![cfg(loom)]
//! loom models for `flow::Credits`: a consumer granting and a producer taking from two
//! threads. Tiny configs (capacity 2, two or three operations a thread).

use loom::sync::Arc;
use loom::thread;
use surgeguard_core::flow::{Credits, CreditsConfig};

fn credits(capacity: u32, low_water: u32) -> Arc<Credits> {
    Arc::new(Credits::new(CreditsConfig { capacity, low_water }).unwrap())
}

/// The consumer replenishes, completes what it sees buffered and replenishes again while
/// the producer takes; in every interleaving the producer takes no more than was granted,
/// outstanding credit stays within capacity, and the counters agree with the state word.
#[test]
fn grant_and_take_never_deliver_more_than_granted() {
    loom::model(|| {
        let c = credits(2, 0);
        let consumer = {
            let c = c.clone();
            thread::spawn(move || {
                let mut granted = u64::from(c.replenish());
                let b = c.buffered();
                c.complete(b).unwrap(); // only this thread completes: `b` stays buffered
                granted += u64::from(c.replenish());
                assert!(c.outstanding() <= 2);
                granted
            })
        };
        let producer = {
            let c = c.clone();
            thread::spawn(move || {
                let mut sent = u64::from(c.take_up_to(2));
                sent += u64::from(c.try_take(1).is_ok());
                sent
            })
        };
        let granted = consumer.join().unwrap();
        let sent = producer.join().unwrap();
        let m = c.metrics();
        assert!(sent <= granted, "sent {sent} of {granted} granted");
        assert_eq!((m.granted, m.taken), (granted, sent));
        assert_eq!(m.granted - m.taken, m.available);
        assert_eq!(m.taken - m.completed, m.buffered);
        assert!(m.available + m.buffered <= 2);
    });
}

/// Two producers race for one credit: exactly one gets it, the other is refused.
#[test]
fn two_producers_never_share_one_credit() {
    loom::model(|| {
        let c = credits(1, 0);
        assert_eq!(c.grant(1), 1);
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                thread::spawn(move || c.try_take(1).is_ok())
            })
            .collect();
        let wins = racers.into_iter().map(|t| t.join().unwrap()).filter(|&ok| ok).count();
        assert_eq!(wins, 1);
        let m = c.metrics();
        assert_eq!((m.taken, m.refused, m.available), (1, 1, 0));
    });
}
