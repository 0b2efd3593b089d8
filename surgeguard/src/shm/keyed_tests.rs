//! A shared keyed table makes exactly the in-process table's decisions.

use quickcheck::{Arbitrary, Gen, QuickCheck};
use surgeguard_core::keyed::{KeyedConfig, KeyedLimits, ShardRate};
use surgeguard_core::time::MS;

use super::{SharedKeyedLimits, ShmError};

#[derive(Clone, Debug)]
enum Op {
    /// Key `k` (of 12) asks with cost `c`.
    Acquire(u8, u8),
    /// The `i`-th held permit is released.
    Release(u8),
    /// Time moves on (0.1 ms steps).
    Advance(u16),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 5 {
            0..=2 => Op::Acquire(u8::arbitrary(g) % 12, u8::arbitrary(g) % 3),
            3 => Op::Release(u8::arbitrary(g)),
            _ => Op::Advance(u16::arbitrary(g) % 200),
        }
    }
}

fn same_decisions(ops: Vec<Op>, rate: bool, k: u8, seed: u64) -> bool {
    let config = KeyedConfig {
        shards_per_key: 1 + u32::from(k % 3),
        seed,
        shard_rate: rate.then_some(ShardRate { emission_ns: 5 * MS, burst: 3 }),
        ..KeyedConfig::new(2)
    };
    let local = KeyedLimits::<8, 4>::new(config).unwrap();
    let shared = SharedKeyedLimits::<8, 4>::anonymous(config).unwrap();
    let (mut now, mut a, mut b) = (1_000_000_000u64, Vec::new(), Vec::new());
    for op in ops {
        match op {
            Op::Acquire(key, cost) => {
                let key_hash = surgeguard_core::keyed::hash_key(7, &[key]);
                let x = local.try_acquire(key_hash, now, cost.into());
                let y = shared.try_acquire(key_hash, now, cost.into());
                match (x, y) {
                    (Ok(p), Ok(q)) if p.shard() == q.shard() => {
                        a.push(p);
                        b.push(q);
                    }
                    (Err(r), Err(ShmError::Rejected(s))) if r == s => {}
                    _ => return false,
                }
            }
            Op::Release(i) if !a.is_empty() => {
                let i = i as usize % a.len();
                local.release(a.swap_remove(i)).unwrap();
                shared.release(b.swap_remove(i)).unwrap();
            }
            Op::Release(_) => {}
            Op::Advance(d) => now += u64::from(d) * 100_000,
        }
    }
    let same = local.metrics() == shared.limits().metrics()
        && shared.held_by_this_process() == a.len() as u64;
    for (p, q) in a.into_iter().zip(b) {
        local.release(p).unwrap();
        shared.release(q).unwrap();
    }
    same && shared.limits().metrics().in_flight == 0 && shared.held_by_this_process() == 0
}

#[test]
fn shared_keyed_makes_the_in_process_decisions() {
    QuickCheck::new().tests(400).quickcheck(same_decisions as fn(Vec<Op>, bool, u8, u64) -> bool);
}

#[test]
fn foreign_permits_other_sizes_and_configs_are_refused() {
    let config = KeyedConfig::new(2);
    let a = SharedKeyedLimits::<8>::anonymous(config).unwrap();
    let b = SharedKeyedLimits::<8>::anonymous(config).unwrap();
    let p = a.try_acquire(1, 0, 1).unwrap();
    assert_eq!(
        b.release(p).unwrap_err(),
        ShmError::Usage(surgeguard_core::UsageError::ForeignHandle)
    );
    assert_eq!(a.limits().metrics().in_flight, 1, "the foreign release changed nothing");
    assert_eq!(b.limits().metrics().in_flight, 0);
    assert_eq!(a.held_by_this_process(), 1);
    // Another N is another layout: refused by name.
    let name = format!("test-keyed-n-{}-{}", std::process::id(), crate::clock::monotonic_ns());
    let _x = SharedKeyedLimits::<8>::open(&name, config).unwrap();
    assert_eq!(SharedKeyedLimits::<16>::open(&name, config).unwrap_err(), ShmError::LayoutMismatch);
    assert_eq!(
        SharedKeyedLimits::<8>::open(&name, KeyedConfig::new(3)).unwrap_err(),
        ShmError::ConfigMismatch
    );
    assert!(matches!(
        SharedKeyedLimits::<8>::open(&name, KeyedConfig::new(0)).unwrap_err(),
        ShmError::Config(_)
    ));
    SharedKeyedLimits::<8>::unlink(&name).unwrap();
}

/// Liveness that calls every process dead (this one too): the reclaimer's view of a
/// process that died holding key permits.
struct AllGone;

impl super::table::Liveness for AllGone {
    fn seen(&self, _pid: u32) -> super::liveness::Seen {
        super::liveness::Seen::Gone
    }
}

#[test]
fn a_reclaimed_processes_key_permits_come_back_once() {
    let t = SharedKeyedLimits::<8>::anonymous(KeyedConfig::new(2)).unwrap();
    let held: Vec<_> = (0..3u64).map(|k| t.try_acquire(k, 0, 1).unwrap()).collect();
    assert_eq!(t.held_by_this_process(), 3);
    assert_eq!(t.limits().metrics().in_flight, 3);
    assert_eq!(t.reclaim_with(&AllGone), 3, "every counted permit, once");
    assert_eq!(t.limits().metrics().in_flight, 0);
    assert_eq!(t.reclaim_with(&AllGone), 0, "nothing twice");
    for p in held {
        // The owner's late release finds nothing to take: refused, nothing released twice.
        assert_eq!(t.release(p).unwrap_err(), ShmError::Reclaimed);
    }
    assert_eq!(t.limits().metrics().in_flight, 0);
}
