//! Shuffle sharding: each key owns `k` of the table's `n` shards, chosen from its hash.
//!
//! A key is admitted if *any* of its shards has room, so one saturating key fills at most
//! its own `k` shards. Another key is shut out only if all `k` of its shards are among the
//! noisy key's `k` — the same set — which happens for a fraction `1 / C(n, k)` of keys
//! (Amazon Builders' Library, "Workload isolation using shuffle-sharding"). See
//! [`isolation`].

use crate::rng::{mix, SplitMix64};

/// The most shards one key may map to. Eight already makes `C(n, k)` astronomically large
/// for any useful `n`, and keeps a key's shard set a small fixed array.
pub const MAX_SHARDS_PER_KEY: usize = 8;

/// The shards one key maps to: `k` distinct indices below `n`, in draw order.
///
/// ```
/// use surgeguard_core::keyed::{KeyedConfig, KeyedLimits};
///
/// let table = KeyedLimits::<16>::new(KeyedConfig::new(4)).unwrap();
/// let set = table.shards_of(42);
/// assert_eq!(set.len(), 2); // the default k
/// assert!(set.as_slice().iter().all(|&s| s < 16));
/// assert_eq!(set, table.shards_of(42)); // deterministic
/// ```
///
/// Progress: not shared (a plain value).
#[derive(Clone, Copy, Debug)]
pub struct ShardSet {
    idx: [u32; MAX_SHARDS_PER_KEY],
    len: u8,
}

impl ShardSet {
    /// The shard indices, in draw order.
    pub fn as_slice(&self) -> &[u32] {
        &self.idx[..self.len as usize]
    }

    /// How many shards (`k`).
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// True if the set is empty (never, for a set made by a table).
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if `shard` is one of these.
    pub fn contains(&self, shard: u32) -> bool {
        self.as_slice().contains(&shard)
    }

    /// Reorders the shards by ascending `load[i]` (the load of `as_slice()[i]`), keeping
    /// draw order among ties. Insertion sort: `k ≤ 8`.
    pub(crate) fn sort_by_key(&mut self, load: &mut [u32; MAX_SHARDS_PER_KEY]) {
        for i in 1..self.len() {
            let mut j = i;
            while j > 0 && load[j - 1] > load[j] {
                load.swap(j - 1, j);
                self.idx.swap(j - 1, j);
                j -= 1;
            }
        }
    }

    /// How many shards the two sets have in common.
    pub fn overlap(&self, other: &ShardSet) -> usize {
        self.as_slice().iter().filter(|&&s| other.contains(s)).count()
    }
}

/// Two sets are equal when they hold the same shards, whatever the draw order.
impl PartialEq for ShardSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.overlap(other) == self.len()
    }
}

impl Eq for ShardSet {}

/// Draws `k` distinct shards below `n`, uniformly among the `C(n, k)` subsets, from
/// `key_hash` and the table's seed. Cost: `k` draws and `O(k²)` compares.
///
/// Each draw `r` is uniform below `n − j`; walking the already chosen shards in ascending
/// order and stepping `r` past each one maps it onto the `r`-th unchosen shard, so every
/// ordered draw of distinct shards is equally likely.
pub(crate) fn pick(key_hash: u64, seed: u64, n: u32, k: usize) -> ShardSet {
    debug_assert!((1..=MAX_SHARDS_PER_KEY).contains(&k) && k as u64 <= u64::from(n));
    let mut rng = SplitMix64::new(mix(key_hash ^ mix(seed)));
    let mut set = ShardSet { idx: [0; MAX_SHARDS_PER_KEY], len: k as u8 };
    let mut sorted = [0u32; MAX_SHARDS_PER_KEY];
    for j in 0..k {
        let mut r = rng.below(u64::from(n) - j as u64) as u32;
        let mut pos = 0;
        while pos < j && sorted[pos] <= r {
            r += 1;
            pos += 1;
        }
        // Keep `sorted` ascending: insert `r` at `pos`.
        let mut i = j;
        while i > pos {
            sorted[i] = sorted[i - 1];
            i -= 1;
        }
        sorted[pos] = r;
        set.idx[j] = r;
    }
    set
}

/// How well shuffle sharding with `k` of `n` shards isolates keys from one noisy key.
///
/// When one key saturates its `k` shards:
/// - a fraction [`share_all`](Self::share_all) `= 1 / C(n, k)` of the other keys map to
///   exactly the same shards and are shut out (their cap is fully shared with the noisy
///   key — the collision case);
/// - a fraction [`share_any`](Self::share_any) `= 1 − C(n−k, k) / C(n, k)` share at least
///   one shard and lose that shard's room, but are still admitted through the others;
/// - everyone else is untouched.
///
/// | n | k | C(n,k) | shut out | share ≥ 1 shard |
/// |---|---|---|---|---|
/// | 8 | 1 | 8 | 12.5 % | 12.5 % |
/// | 8 | 2 | 28 | 3.57 % | 46.4 % |
/// | 64 | 1 | 64 | 1.56 % | 1.56 % |
/// | 64 | 2 | 2 016 | 0.0496 % | 6.20 % |
/// | 64 | 3 | 41 664 | 0.0024 % | 13.6 % |
/// | 256 | 4 | 1.75 × 10⁸ | 5.7 × 10⁻⁷ % | 6.1 % |
///
/// `k = 1` is plain hashing: a colliding key shares its only slot and is shut out.
/// With `m` noisy keys the shut-out fraction is at most `C(u, k) / C(n, k)` where `u ≤ m·k`
/// is the number of shards they cover.
///
/// ```
/// use surgeguard_core::keyed::isolation;
///
/// let iso = isolation(64, 2).unwrap();
/// assert!((iso.share_all - 1.0 / 2016.0).abs() < 1e-12);
/// assert!(iso.unaffected() > 0.999);
/// assert!(isolation(4, 5).is_none());
/// ```
///
/// Progress: not shared (a plain value). Cost: `O(k)` float operations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Isolation {
    /// `n`, the table's shards.
    pub shards: u32,
    /// `k`, the shards per key.
    pub shards_per_key: u32,
    /// `C(n, k)`, the number of distinct shard sets.
    pub combinations: f64,
    /// Fraction of other keys sharing all `k` shards with a noisy key: `1 / C(n, k)`.
    pub share_all: f64,
    /// Fraction of other keys sharing at least one shard: `1 − C(n−k, k) / C(n, k)`.
    pub share_any: f64,
}

impl Isolation {
    /// Fraction of other keys a single saturating key leaves admissible: `1 − share_all`.
    pub fn unaffected(&self) -> f64 {
        1.0 - self.share_all
    }

    /// Expected number of keys, among `other_keys`, shut out by one saturating key.
    pub fn expected_shut_out(&self, other_keys: u64) -> f64 {
        other_keys as f64 * self.share_all
    }
}

/// The isolation math for `k` of `n` shards; `None` unless `1 ≤ k ≤ n`.
///
/// Computed as products of ratios, `1/C(n,k) = Π (k−i)/(n−i)` and
/// `C(n−k,k)/C(n,k) = Π (n−k−i)/(n−i)` for `i < k`, so nothing overflows.
pub fn isolation(n: u32, k: u32) -> Option<Isolation> {
    if k == 0 || k > n {
        return None;
    }
    let (nf, kf) = (f64::from(n), f64::from(k));
    let mut share_all = 1.0;
    let mut disjoint = 1.0;
    for i in 0..k {
        let i = f64::from(i);
        share_all *= (kf - i) / (nf - i);
        disjoint *= if nf - kf - i > 0.0 { (nf - kf - i) / (nf - i) } else { 0.0 };
    }
    Some(Isolation {
        shards: n,
        shards_per_key: k,
        combinations: 1.0 / share_all,
        share_all,
        share_any: 1.0 - disjoint,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn binom(n: u128, k: u128) -> u128 {
        if k > n {
            return 0;
        }
        let mut c = 1u128;
        for i in 0..k {
            c = c * (n - i) / (i + 1);
        }
        c
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn picks_are_distinct_in_range_and_deterministic() {
        let keys = if cfg!(miri) { 4 } else { 200 }; // Miri: the same checks, fewer keys
        for n in 1..=20u32 {
            for k in 1..=MAX_SHARDS_PER_KEY.min(n as usize) {
                for key in 0..keys {
                    let s = pick(key, 9, n, k);
                    assert_eq!(s.len(), k);
                    for (i, &a) in s.as_slice().iter().enumerate() {
                        assert!(a < n);
                        assert!(!s.as_slice()[..i].contains(&a), "{n} {k} {:?}", s);
                    }
                    assert_eq!(s, pick(key, 9, n, k));
                }
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn every_subset_is_about_equally_likely() {
        // n = 6, k = 2: 15 subsets. 150 000 keys: each subset expects 10 000, sd ≈ 97.
        let (n, k, keys) = (6u32, 2usize, 150_000u64);
        let mut counts = [[0u32; 6]; 6];
        for key in 0..keys {
            let s = pick(key, 1, n, k);
            let (a, b) =
                (s.as_slice()[0].min(s.as_slice()[1]), s.as_slice()[0].max(s.as_slice()[1]));
            counts[a as usize][b as usize] += 1;
        }
        let expect = keys as f64 / binom(6, 2) as f64;
        for (a, row) in counts.iter().enumerate() {
            for (b, &c) in row.iter().enumerate().skip(a + 1) {
                let c = f64::from(c);
                assert!((c - expect).abs() < 6.0 * expect.sqrt(), "{a},{b}: {c} vs {expect}");
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn isolation_matches_exact_binomials() {
        for n in 1..=40u32 {
            for k in 1..=n.min(8) {
                let iso = isolation(n, k).unwrap();
                let c = binom(n.into(), k.into()) as f64;
                let d = binom((n - k).into(), k.into()) as f64;
                assert!((iso.combinations - c).abs() <= c * 1e-9, "{n} {k}");
                assert!((iso.share_all - 1.0 / c).abs() <= 1e-12);
                assert!((iso.share_any - (1.0 - d / c)).abs() <= 1e-12, "{n} {k}");
                assert!(iso.share_all <= iso.share_any + 1e-12);
            }
        }
        assert!(isolation(3, 0).is_none());
        assert!(isolation(3, 4).is_none());
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn doc_table_rows_hold() {
        let row = |n, k| isolation(n, k).unwrap();
        assert!((row(8, 2).share_all * 100.0 - 3.57).abs() < 0.01);
        assert!((row(8, 2).share_any * 100.0 - 46.4).abs() < 0.1);
        assert!((row(64, 2).share_any * 100.0 - 6.20).abs() < 0.01);
        assert!((row(64, 3).share_any * 100.0 - 13.6).abs() < 0.1);
        assert!((row(64, 3).combinations - 41_664.0).abs() < 0.5);
        assert!((row(256, 4).share_any * 100.0 - 6.1).abs() < 0.1);
        assert!((row(256, 4).share_all * 100.0 / 5.7e-7 - 1.0).abs() < 0.01);
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn measured_overlap_matches_the_math() {
        let (n, k) = (16u32, 3usize);
        let iso = isolation(n, k as u32).unwrap();
        let noisy = pick(u64::MAX, 5, n, k);
        let (mut all, mut any, keys) = (0u32, 0u32, 200_000u64);
        for key in 0..keys {
            let o = pick(key, 5, n, k).overlap(&noisy);
            all += u32::from(o == k);
            any += u32::from(o > 0);
        }
        for (seen, p) in [(all, iso.share_all), (any, iso.share_any)] {
            let expect = p * keys as f64;
            let sd = (keys as f64 * p * (1.0 - p)).sqrt();
            assert!((f64::from(seen) - expect).abs() < 6.0 * sd + 1.0, "{seen} vs {expect}");
        }
    }
}
