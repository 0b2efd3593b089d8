#![cfg(loom)]
//! loom models for `surgeguard_core::keyed`: concurrent acquire/release on colliding keys
//! never over-admits, never loses a permit, and the top-keys summary never loses count of
//! an update (recorded or skipped). Tiny configs: two threads, a few operations each.

use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use surgeguard_core::keyed::{KeyedConfig, KeyedLimits, ShardRate, TopKeys};
use surgeguard_core::Reason;

/// Both threads use keys that share every shard (`N = k`), so they compete for the same
/// slots. Each takes up to `per_thread` permits, holds them, then releases them.
/// With `rate`, everything happens at one instant, so only the bursts can be admitted.
/// Returns nothing; asserts no shard over its cap, no lost permit, every refusal counted.
fn contend<const N: usize>(
    k: u32,
    limit: u32,
    keys: [u64; 2],
    per_thread: usize,
    rate: Option<ShardRate>,
) {
    loom::model(move || {
        let cfg = KeyedConfig { shards_per_key: k, shard_rate: rate, ..KeyedConfig::new(limit) };
        let table = Arc::new(KeyedLimits::<N, 2>::new(cfg).unwrap());
        // Witness occupancy per shard, raised after admission and lowered before release.
        let witness: Arc<[AtomicU32; N]> = Arc::new(core::array::from_fn(|_| AtomicU32::new(0)));
        let handles: Vec<_> = keys
            .iter()
            .map(|&key| {
                let (table, witness) = (table.clone(), witness.clone());
                thread::spawn(move || {
                    let mut held = Vec::new();
                    let mut refused = 0u64;
                    for _ in 0..per_thread {
                        match table.try_acquire(key, 0, 1) {
                            Ok(p) => {
                                let before = witness[p.shard()].fetch_add(1, Ordering::SeqCst);
                                assert!(before < limit, "shard {} over its cap", p.shard());
                                held.push(p);
                            }
                            Err(r) => {
                                let why =
                                    if rate.is_some() { Reason::KeyRate } else { Reason::KeyLimit };
                                assert_eq!(r.reason, why);
                                refused += 1;
                            }
                        }
                    }
                    let admitted = held.len() as u64;
                    for p in held {
                        witness[p.shard()].fetch_sub(1, Ordering::SeqCst);
                        table.release(p).unwrap();
                    }
                    (admitted, refused)
                })
            })
            .collect();
        let (mut admitted, mut refused) = (0, 0);
        for h in handles {
            let (a, r) = h.join().unwrap();
            admitted += a;
            refused += r;
        }
        let m = table.metrics();
        assert_eq!(m.in_flight, 0, "a permit was lost");
        let refusals = m.rejected(Reason::KeyLimit) + m.rejected(Reason::KeyRate);
        assert_eq!((m.admitted, refusals), (admitted, refused));
        if let Some(r) = rate {
            // One instant: each shard admits exactly its burst, whoever wins the race.
            assert_eq!(admitted, u64::from(r.burst) * N as u64);
        }
        assert_eq!(m.top_keys.recorded + m.top_keys.skipped, refused);
        // Someone always gets in: the first acquirer finds every slot free.
        assert!(admitted >= 1);
    });
}

#[test]
fn same_key_one_slot() {
    contend::<1>(1, 1, [7, 7], 1, None);
}

#[test]
fn colliding_keys_one_slot_two_tries_each() {
    contend::<1>(1, 1, [7, 8], 2, None);
}

#[test]
fn shuffle_sharded_keys_on_two_shared_shards() {
    contend::<2>(2, 1, [7, 8], 2, None);
}

/// Two slots but a burst of one: both callers may take a slot, one loses the GCRA race and
/// must give its slot back.
#[test]
fn rate_race_gives_the_losers_slot_back() {
    contend::<1>(1, 2, [7, 8], 1, Some(ShardRate { emission_ns: 1_000, burst: 1 }));
}

#[test]
fn top_keys_counts_every_update_once() {
    loom::model(|| {
        let top = Arc::new(TopKeys::<1>::new());
        let handles: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|key| {
                let top = top.clone();
                thread::spawn(move || top.record(key, 1))
            })
            .collect();
        let recorded = handles.into_iter().map(|h| h.join().unwrap()).filter(|&r| r).count();
        let m = top.metrics();
        assert_eq!(m.recorded as usize, recorded);
        assert_eq!((m.recorded + m.skipped, m.weight), (2, recorded as u64));
        assert!(recorded >= 1);
        // Space-saving with one counter: the count is the whole recorded weight.
        assert_eq!(m.top[0].count, recorded as u64);
    });
}
