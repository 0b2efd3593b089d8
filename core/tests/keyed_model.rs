#![cfg(not(loom))]
//! Model tests for `surgeguard_core::keyed`: random operation sequences against a simple
//! sequential reference model, plus the isolation (shuffle sharding) and heavy-hitter
//! properties.

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use surgeguard_core::keyed::{
    hash_key, isolation, KeyPermit, KeyedConfig, KeyedLimits, ShardRate, TopKeys,
};
use surgeguard_core::rate::gcra_decide;
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::{Reason, Rejected, UsageError};

const N: usize = 8;
const TOP: usize = 4;
const KEYS: usize = 10;

#[derive(Clone, Debug)]
enum Op {
    /// Try to admit key `0..KEYS` with a cost `0..=3`, at `now − late` (time may appear to
    /// run backwards for a caller whose clock read is late).
    Acquire { key: u8, cost: u8, late: u8 },
    /// Release the held permit at this index (modulo the number held).
    Release(u8),
    /// Release a permit of another table here.
    ReleaseForeign,
    /// Let time pass (ns).
    Advance(u8),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 12 {
            0..=5 => Op::Acquire {
                key: u8::arbitrary(g) % KEYS as u8,
                cost: u8::arbitrary(g) % 4,
                late: if bool::arbitrary(g) { 0 } else { u8::arbitrary(g) },
            },
            6..=8 => Op::Release(u8::arbitrary(g)),
            9 => Op::ReleaseForeign,
            _ => Op::Advance(u8::arbitrary(g)),
        }
    }
}

#[derive(Clone, Debug)]
struct Setup {
    k: u32,
    limit: u32,
    seed: u64,
    rate: Option<ShardRate>,
}

impl Arbitrary for Setup {
    fn arbitrary(g: &mut Gen) -> Self {
        let rate = bool::arbitrary(g).then(|| ShardRate {
            emission_ns: 1 + u64::arbitrary(g) % 60,
            burst: 1 + u32::arbitrary(g) % 3,
        });
        Setup {
            k: 1 + u32::arbitrary(g) % 4,
            limit: 1 + u32::arbitrary(g) % 3,
            seed: u64::arbitrary(g),
            rate,
        }
    }
}

/// The reference shard: slot count, GCRA word and latest time seen.
#[derive(Clone, Copy, Default)]
struct ModelShard {
    count: u32,
    tat: u64,
    clock: u64,
}

/// The reference: per-shard state, per-key holdings and refusals, checked after each op.
/// The rate decision itself is `rate::gcra_decide` (tested on its own in `client_model`);
/// this model checks how the table composes it with slots, shards and time.
fn model_run(setup: Setup, ops: Vec<Op>) -> TestResult {
    let cfg = KeyedConfig {
        shards_per_key: setup.k,
        seed: setup.seed,
        shard_rate: setup.rate,
        ..KeyedConfig::new(setup.limit)
    };
    let table = KeyedLimits::<N, TOP>::new(cfg).unwrap();
    let other = KeyedLimits::<N, TOP>::new(cfg).unwrap();
    let keys: Vec<u64> = (0..KEYS).map(|i| hash_key(setup.seed, &[i as u8])).collect();
    let mut shard = [ModelShard::default(); N];
    let mut held_by_key = [0u64; KEYS];
    let mut refused_by_key = [0u64; KEYS];
    let mut held: Vec<(usize, KeyPermit)> = Vec::new();
    let (mut admitted, mut by_limit, mut by_rate) = (0u64, 0u64, 0u64);
    let mut now = 1_000u64;

    for op in ops {
        match op {
            Op::Acquire { key, cost, late } => {
                let (i, cost) = (key as usize, u32::from(cost));
                let at = now - u64::from(late);
                let set = table.shards_of(keys[i]);
                assert_eq!(set.len(), setup.k as usize);
                // Least occupied first, ties in draw order; the first shard with a slot
                // (and the rate) wins. Each shard tried sees the time.
                let mut order: Vec<u32> = set.as_slice().to_vec();
                order.sort_by_key(|&s| shard[s as usize].count);
                let mut expect = Err(None);
                for &s in &order {
                    let m = &mut shard[s as usize];
                    match setup.rate {
                        None if m.count < setup.limit => expect = Ok((s, m.tat)),
                        None => continue,
                        Some(r) => {
                            m.clock = m.clock.max(at);
                            let tol = r.emission_ns * (u64::from(r.burst) - 1);
                            match gcra_decide(m.tat, m.clock, r.emission_ns, tol, cost) {
                                Err(wait) => {
                                    expect = Err(Some(match expect {
                                        Err(Some(w)) => wait.min(w),
                                        _ => wait,
                                    }));
                                    continue;
                                }
                                Ok(_) if m.count == setup.limit => continue,
                                Ok(tat) => expect = Ok((s, tat)),
                            }
                        }
                    }
                    break;
                }
                match (table.try_acquire(keys[i], at, cost), expect) {
                    (Ok(p), Ok((s, tat))) => {
                        assert_eq!(p.shard(), s as usize);
                        assert!(shard[p.shard()].count < setup.limit);
                        shard[p.shard()].count += 1;
                        shard[p.shard()].tat = tat;
                        held_by_key[i] += 1;
                        admitted += 1;
                        held.push((i, p));
                    }
                    (Err(r), Err(None)) => {
                        assert_eq!(r, Rejected::new(Reason::KeyLimit, cfg.limit_retry_after));
                        assert!(set
                            .as_slice()
                            .iter()
                            .all(|&s| shard[s as usize].count == setup.limit));
                        refused_by_key[i] += 1;
                        by_limit += 1;
                    }
                    (Err(r), Err(Some(wait))) => {
                        assert_eq!(r, Rejected::new(Reason::KeyRate, wait));
                        refused_by_key[i] += 1;
                        by_rate += 1;
                    }
                    (got, want) => panic!("table {got:?}, model {want:?}"),
                }
            }
            Op::Release(j) => {
                if held.is_empty() {
                    continue;
                }
                let (i, p) = held.swap_remove(j as usize % held.len());
                shard[p.shard()].count -= 1;
                held_by_key[i] -= 1;
                assert_eq!(table.release(p), Ok(()));
            }
            Op::ReleaseForeign => {
                if let Ok(p) = other.try_acquire(keys[0], now, 1) {
                    assert_eq!(table.release(p), Err(UsageError::ForeignHandle));
                }
            }
            Op::Advance(dt) => now += u64::from(dt),
        }
        let m = table.metrics();
        let count: Vec<u32> = shard.iter().map(|s| s.count).collect();
        assert_eq!(m.shard_in_flight[..], count[..]);
        assert_eq!(m.in_flight, count.iter().map(|&c| u64::from(c)).sum::<u64>());
        assert_eq!(m.full_shards as usize, count.iter().filter(|&&c| c == setup.limit).count());
        assert_eq!(m.admitted, admitted);
        assert_eq!(
            (m.rejected(Reason::KeyLimit), m.rejected(Reason::KeyRate)),
            (by_limit, by_rate)
        );
        assert!(count.iter().all(|&c| c <= setup.limit));
        assert!(held_by_key.iter().all(|&h| h <= table.key_limit()), "a key above its cap");
        let top = m.top_keys;
        let refused = by_limit + by_rate;
        assert_eq!((top.weight, top.recorded, top.skipped), (refused, refused, 0));
        for (i, &r) in refused_by_key.iter().enumerate() {
            if r > top.threshold() {
                let e = top.entries().iter().find(|e| e.key_hash == keys[i]);
                let e = e
                    .unwrap_or_else(|| panic!("heavy key {i} ({r} > {}) missing", top.threshold()));
                assert!(e.guaranteed() <= r && r <= e.count);
            }
        }
    }
    for (_, p) in held {
        table.release(p).unwrap();
    }
    assert_eq!(table.metrics().in_flight, 0);
    TestResult::passed()
}

#[test]
fn keyed_limits_match_the_model() {
    QuickCheck::new().tests(500).quickcheck(model_run as fn(Setup, Vec<Op>) -> TestResult);
}

/// One key saturates its shards; every other key is refused exactly when it maps to the
/// same `k` shards, and the refused fraction stays within sampling error of `1/C(n, k)`.
fn isolation_holds(seed: u64, k: u8, limit: u8) -> TestResult {
    const SHARDS: usize = 16;
    const OTHERS: u32 = 3000;
    let k = 2 + u32::from(k % 3); // 2..=4: shuffle sharding
    let cfg = KeyedConfig { shards_per_key: k, seed, ..KeyedConfig::new(1 + u32::from(limit % 4)) };
    let table = KeyedLimits::<SHARDS>::new(cfg).unwrap();
    let mut rng = SplitMix64::new(seed);
    let noisy = rng.next_u64();
    let mut held = Vec::new();
    while let Ok(p) = table.try_acquire(noisy, 0, 1) {
        held.push(p);
    }
    assert_eq!(held.len() as u64, table.key_limit());
    let noisy_set = table.shards_of(noisy);
    let mut refused = 0u32;
    for _ in 0..OTHERS {
        let key = rng.next_u64();
        let same = table.shards_of(key) == noisy_set;
        match table.try_acquire(key, 0, 1) {
            Ok(p) => {
                assert!(!same, "a key on the noisy key's full shards was admitted");
                table.release(p).unwrap();
            }
            Err(_) => {
                assert!(same, "a key with a free shard was refused");
                refused += 1;
            }
        }
    }
    // At least the computed fraction 1 − 1/C(n, k) is unaffected, up to sampling error
    // (6 standard deviations of the binomial count, plus one key).
    let iso = isolation(SHARDS as u32, k).unwrap();
    let others = f64::from(OTHERS);
    let sd = (others * iso.share_all * (1.0 - iso.share_all)).sqrt();
    let unaffected = f64::from(OTHERS - refused) / others;
    let floor = iso.unaffected() - (6.0 * sd + 1.0) / others;
    assert!(unaffected >= floor, "k={k}: {unaffected} unaffected, the math says >= {floor}");
    for p in held {
        table.release(p).unwrap();
    }
    TestResult::passed()
}

#[test]
fn one_saturating_key_leaves_the_computed_fraction_unaffected() {
    QuickCheck::new().tests(100).quickcheck(isolation_holds as fn(u64, u8, u8) -> TestResult);
}

/// A key sending more than 1/K of the traffic is always in the summary, whatever the
/// order and whatever the other keys do.
fn heavy_hitter_found(background: Vec<(u16, u8)>, heavy: u64, positions: Vec<u16>) -> TestResult {
    const K: usize = 8;
    let top = TopKeys::<K>::new();
    let background_weight: u64 = background.iter().map(|&(_, w)| u64::from(w % 4 + 1)).sum();
    // The heavy key's share: strictly more than 1/K of the whole stream (with unit weights,
    // h > (h + B) / K  ⇔  h > B / (K − 1)).
    let h = background_weight / (K as u64 - 1) + 1;
    let mut plan: Vec<Option<(u64, u64)>> =
        background.iter().map(|&(key, w)| Some((u64::from(key), u64::from(w % 4 + 1)))).collect();
    for (j, pos) in (0..h).zip(positions.iter().cycle().chain(std::iter::repeat(&0))) {
        let at = (usize::from(*pos) + j as usize) % (plan.len() + 1);
        plan.insert(at, None);
    }
    let heavy = heavy | 1 << 63; // never one of the background keys
    for step in &plan {
        let (key, w) = step.unwrap_or((heavy, 1));
        assert!(top.record(key, w));
    }
    let m = top.metrics();
    assert_eq!(m.weight, background_weight + h);
    assert!(h * K as u64 > m.weight);
    let e = m.entries().iter().find(|e| e.key_hash == heavy).expect("heavy key found");
    assert!(e.guaranteed() <= h && h <= e.count);
    TestResult::passed()
}

#[test]
fn heavy_hitters_summary_finds_a_key_above_one_kth() {
    QuickCheck::new()
        .tests(300)
        .quickcheck(heavy_hitter_found as fn(Vec<(u16, u8)>, u64, Vec<u16>) -> TestResult);
}
