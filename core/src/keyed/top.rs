//! Heavy hitters: a fixed-size space-saving summary of keys by weight (rejections).
//!
//! Space-saving (Metwally, Agrawal, El Abbadi, 2005): `K` counters. A tracked key adds its
//! weight; an untracked key replaces the smallest counter `c_min` and starts at
//! `c_min + weight`, remembering `c_min` as its error. Over a stream of total weight `M`:
//! `c_min ≤ M / K`, every count overestimates by at most its error, and every key whose
//! true weight exceeds `M / K` is in the summary.

use crate::sync::{AtomicU64, FoldFlag, Ordering};

/// One entry of a [`TopKeys`] summary.
///
/// The key's true weight lies in `[count − error, count]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyCount {
    /// The key hash.
    pub key_hash: u64,
    /// Estimated weight (an overestimate).
    pub count: u64,
    /// Most by which `count` overestimates.
    pub error: u64,
}

impl KeyCount {
    /// The weight this key certainly has: `count − error`.
    pub const fn guaranteed(&self) -> u64 {
        self.count - self.error
    }
}

/// A snapshot of a [`TopKeys`] summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopKeysMetrics<const K: usize> {
    /// Entries, heaviest first; unused entries have `count == 0` and sort last.
    pub top: [KeyCount; K],
    /// Total weight of the recorded updates (`M`).
    pub weight: u64,
    /// Updates recorded.
    pub recorded: u64,
    /// Updates skipped because another thread was updating at the same instant.
    pub skipped: u64,
}

impl<const K: usize> TopKeysMetrics<K> {
    /// `M / K`: every key with more recorded weight than this is in [`top`](Self::top).
    pub const fn threshold(&self) -> u64 {
        if K == 0 {
            0
        } else {
            self.weight / K as u64
        }
    }

    /// The entries in use, heaviest first.
    pub fn entries(&self) -> &[KeyCount] {
        let used = self.top.iter().take_while(|e| e.count > 0).count();
        &self.top[..used]
    }
}

/// A fixed-size heavy-hitters summary: which keys carry the most weight (for
/// [`KeyedLimits`](super::KeyedLimits), the most rejections).
///
/// ```
/// use surgeguard_core::keyed::TopKeys;
///
/// let top = TopKeys::<4>::new();
/// for i in 0..100u64 {
///     // Key 7 sends a third of the traffic; 32 other keys share the rest.
///     let key = if i % 3 == 0 { 7 } else { 1000 + i % 32 };
///     assert!(top.record(key, 1));
/// }
/// let m = top.metrics();
/// assert_eq!(m.top[0].key_hash, 7); // more than M / K = 25: always found
/// assert!(m.top[0].guaranteed() <= 34 && 34 <= m.top[0].count);
/// ```
///
/// Progress: `record` is wait-free but *single-writer-at-a-time*: it takes a busy flag with
/// one compare-and-swap and, if another thread holds it, skips the update at once and
/// counts it in [`TopKeysMetrics::skipped`]. The space-saving guarantee holds for the
/// recorded updates; a skipped update is lost, so under heavy contention the summary is a
/// timing-driven sample of the stream (a key sending more than `1/K` of the traffic stays
/// above `1/K` of a sample unless skips correlate with the key). `metrics` is wait-free and
/// never delays a writer; a snapshot taken while a writer is mid-update may pair one
/// entry's new key with its old count.
///
/// Cost: `O(K)` relaxed loads and up to three stores per update; `3·K + 4` words.
#[derive(Debug)]
#[repr(C)]
pub struct TopKeys<const K: usize> {
    /// Who is updating (a process token, 0 when nobody): see `layout::FoldCell`.
    busy: FoldFlag,
    keys: [AtomicU64; K],
    counts: [AtomicU64; K],
    errors: [AtomicU64; K],
    weight: AtomicU64,
    recorded: AtomicU64,
    skipped: AtomicU64,
}

impl<const K: usize> Default for TopKeys<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const K: usize> TopKeys<K> {
    /// An empty summary.
    pub fn new() -> Self {
        Self {
            busy: FoldFlag::new(),
            keys: core::array::from_fn(|_| AtomicU64::new(0)),
            counts: core::array::from_fn(|_| AtomicU64::new(0)),
            errors: core::array::from_fn(|_| AtomicU64::new(0)),
            weight: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Adds `weight` to `key_hash`. Returns false if the update was skipped because
    /// another thread was updating (counted in the metrics). A zero weight records nothing.
    pub fn record(&self, key_hash: u64, weight: u64) -> bool {
        if K == 0 || weight == 0 {
            return true;
        }
        // Acquire (in `try_enter`): pairs with the Release store that ends the previous
        // writer's update, so this writer reads the counters as that writer left them.
        if !self.busy.try_enter() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.update(key_hash, weight);
        self.recorded.fetch_add(1, Ordering::Relaxed);
        // Release (in `leave`): publishes this update to the next writer's Acquire above.
        self.busy.leave();
        true
    }

    /// The busy flag (for freeing it after its holder's process died).
    #[cfg(all(not(loom), target_has_atomic = "64"))]
    #[inline]
    pub(crate) fn flag(&self) -> &FoldFlag {
        &self.busy
    }

    /// The space-saving step. Only the busy-flag holder runs it.
    fn update(&self, key_hash: u64, weight: u64) {
        // Relaxed throughout: the busy flag orders writers; readers accept a torn entry.
        let r = Ordering::Relaxed;
        self.weight.store(self.weight.load(r).saturating_add(weight), r);
        let mut min_at = 0;
        let mut min = u64::MAX;
        for i in 0..K {
            let c = self.counts[i].load(r);
            if c > 0 && self.keys[i].load(r) == key_hash {
                self.counts[i].store(c.saturating_add(weight), r);
                return;
            }
            if c < min {
                min = c;
                min_at = i;
            }
        }
        self.keys[min_at].store(key_hash, r);
        self.errors[min_at].store(min, r);
        self.counts[min_at].store(min.saturating_add(weight), r);
    }

    /// The entry for `key_hash`, if tracked.
    pub fn estimate(&self, key_hash: u64) -> Option<KeyCount> {
        self.metrics().top.into_iter().find(|e| e.count > 0 && e.key_hash == key_hash)
    }

    /// A snapshot, heaviest first. Wait-free; `O(K log K)`.
    pub fn metrics(&self) -> TopKeysMetrics<K> {
        let r = Ordering::Relaxed;
        let mut top: [KeyCount; K] = core::array::from_fn(|i| KeyCount {
            key_hash: self.keys[i].load(r),
            count: self.counts[i].load(r),
            error: 0,
        });
        for (i, e) in top.iter_mut().enumerate() {
            // A torn read could see an error above the count; keep `guaranteed` sane.
            e.error = self.errors[i].load(r).min(e.count);
        }
        top.sort_unstable_by(|a, b| b.count.cmp(&a.count).then(a.key_hash.cmp(&b.key_hash)));
        TopKeysMetrics {
            top,
            weight: self.weight.load(r),
            recorded: self.recorded.load(r),
            skipped: self.skipped.load(r),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use std::collections::HashMap;

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn counts_bound_true_weights_and_heavy_keys_are_found() {
        let mut rng = SplitMix64::new(3);
        for round in 0..50 {
            let top = TopKeys::<8>::new();
            let mut truth: HashMap<u64, u64> = HashMap::new();
            let heavy = rng.next_u64();
            let n = 500 + rng.below(2000);
            for _ in 0..n {
                // ~20 % heavy (> 1/8), the rest spread over up to 64 keys, weights 1..4.
                let spread = 1 + rng.below(64);
                let key = if rng.below(5) == 0 { heavy } else { rng.below(spread) };
                let w = 1 + rng.below(4);
                assert!(top.record(key, w));
                *truth.entry(key).or_default() += w;
            }
            let m = top.metrics();
            let total: u64 = truth.values().sum();
            assert!(truth[&heavy] > total / 8, "round {round}: the heavy key is heavy");
            assert_eq!(m.weight, total);
            assert_eq!(m.recorded, n);
            assert_eq!(m.skipped, 0);
            for e in m.entries() {
                let t = truth[&e.key_hash];
                assert!(e.guaranteed() <= t && t <= e.count, "round {round}: {e:?} true {t}");
            }
            for (&k, &t) in &truth {
                if t > m.threshold() {
                    assert!(m.entries().iter().any(|e| e.key_hash == k), "round {round}: {k}");
                }
            }
            assert!(m.top.windows(2).all(|w| w[0].count >= w[1].count));
        }
    }

    #[test]
    fn a_busy_summary_skips_and_counts() {
        let top = TopKeys::<2>::new();
        assert!(top.busy.try_enter());
        assert!(!top.record(1, 1));
        top.busy.leave();
        assert!(top.record(1, 1));
        assert!(top.record(1, 0));
        let m = top.metrics();
        assert_eq!((m.recorded, m.skipped, m.weight), (1, 1, 1));
        assert_eq!(top.estimate(1), Some(KeyCount { key_hash: 1, count: 1, error: 0 }));
        assert_eq!(top.estimate(2), None);
        assert_eq!(TopKeys::<0>::new().metrics().threshold(), 0);
    }
}
