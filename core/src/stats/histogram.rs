//! A fixed log-linear histogram: exact below 16, then 16 linear sub-buckets per power of
//! two (HdrHistogram's layout with 4 sub-bucket bits). Reporting a bucket's midpoint bounds
//! the relative error of any quantile by 1/32 ≈ 3.1% (≤ 5% promised). No sorting, no
//! allocation; values at or above 2^40 (about 18 minutes in ns) land in the last bucket.

use crate::sync::{AtomicU64, Ordering};

#[cfg(not(loom))]
const SUB_BITS: u32 = 4;
#[cfg(not(loom))]
const MAX_BITS: u32 = 40;
// Under loom the histogram is tiny so models stay small; the layout logic is the same.
#[cfg(loom)]
const SUB_BITS: u32 = 1;
#[cfg(loom)]
const MAX_BITS: u32 = 4;

const SUB_COUNT: usize = 1 << SUB_BITS;

/// Number of buckets.
pub const BUCKETS: usize = (MAX_BITS - SUB_BITS + 1) as usize * SUB_COUNT;

/// The bucket a value falls in.
#[inline]
pub const fn bucket_index(v: u64) -> usize {
    let v = if v >> MAX_BITS != 0 { (1u64 << MAX_BITS) - 1 } else { v };
    if v < SUB_COUNT as u64 {
        return v as usize;
    }
    let octave = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (octave - SUB_BITS)) as usize & (SUB_COUNT - 1);
    (octave - SUB_BITS + 1) as usize * SUB_COUNT + sub
}

/// The lowest value of bucket `i`.
pub fn bucket_low(i: usize) -> u64 {
    if i < SUB_COUNT {
        return i as u64;
    }
    let octave = (i / SUB_COUNT) as u32 + SUB_BITS - 1;
    let sub = (i % SUB_COUNT) as u64;
    (1u64 << octave) + (sub << (octave - SUB_BITS))
}

/// The representative (midpoint) value of bucket `i`.
pub fn bucket_value(i: usize) -> u64 {
    if i < SUB_COUNT {
        return i as u64;
    }
    let octave = (i / SUB_COUNT) as u32 + SUB_BITS - 1;
    let width = 1u64 << (octave - SUB_BITS);
    bucket_low(i) + width / 2
}

/// The value at quantile `q` (0..=1) of `counts` holding `total` samples: the midpoint of
/// the bucket holding the `ceil(q·total)`-th smallest sample. 0 when empty.
pub(crate) fn quantile_of(counts: impl Iterator<Item = u64>, total: u64, q: f64) -> u64 {
    if total == 0 {
        return 0;
    }
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    let rank = libm::ceil(q * total as f64).max(1.0) as u64;
    let mut seen = 0u64;
    let mut last = 0;
    for (i, c) in counts.enumerate() {
        if c == 0 {
            continue;
        }
        last = i;
        seen += c;
        if seen >= rank {
            return bucket_value(i);
        }
    }
    bucket_value(last)
}

/// A plain histogram for `&mut self` users.
///
/// ```
/// use surgeguard_core::stats::Histogram;
/// let mut h = Histogram::new();
/// for v in 1..=100u64 { h.record(v * 1_000); }
/// let p99 = h.quantile(0.99) as f64;
/// assert!((p99 - 99_000.0).abs() / 99_000.0 <= 0.05);
/// ```
///
/// Progress: not shared. Cost: one bucket increment per sample; a quantile scans the
/// buckets (`BUCKETS` = 592).
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub const fn new() -> Self {
        Self { counts: [0; BUCKETS], total: 0 }
    }

    /// Records one value.
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_index(v)] += 1;
        self.total += 1;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` in `[0, 1]` (0 when empty).
    pub fn quantile(&self, q: f64) -> u64 {
        quantile_of(self.counts.iter().copied(), self.total, q)
    }

    /// The smallest recorded value's bucket low bound (0 when empty).
    pub fn min(&self) -> u64 {
        self.counts.iter().position(|&c| c > 0).map_or(0, bucket_low)
    }

    /// Samples in bucket `i`.
    pub fn bucket(&self, i: usize) -> u64 {
        self.counts[i]
    }

    /// Forgets every sample.
    pub fn clear(&mut self) {
        self.counts = [0; BUCKETS];
        self.total = 0;
    }
}

/// A histogram recorded concurrently: cumulative `u64` bucket counters that are never
/// reset, so a reader folds a window by diffing two snapshots and no sample is lost or
/// counted twice across a window roll-over, whatever the interleaving.
///
/// Progress: wait-free record (one `fetch_add`); a snapshot is `BUCKETS` loads.
#[derive(Debug)]
pub struct AtomicHistogram {
    counts: [AtomicU64; BUCKETS],
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self { counts: core::array::from_fn(|_| AtomicU64::new(0)) }
    }

    /// Records one value.
    #[inline]
    pub fn record(&self, v: u64) {
        // Relaxed: a cumulative counter; readers diff snapshots and need no other order.
        self.counts[bucket_index(v)].fetch_add(1, Ordering::Relaxed);
    }

    /// Copies the cumulative counts into `out`.
    pub fn snapshot(&self, out: &mut [u64; BUCKETS]) {
        for (o, c) in out.iter_mut().zip(self.counts.iter()) {
            *o = c.load(Ordering::Relaxed);
        }
    }

    /// Total samples ever recorded.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Adds `n` samples to bucket `i` at once.
    fn add(&self, i: usize, n: u64) {
        // Relaxed: as `record`.
        self.counts[i].fetch_add(n, Ordering::Relaxed);
    }
}

// Packed words: a bucket's count and the sum of its values' offsets in one `u64`.
//
// Values below `1 << PACKED_BITS` are recorded by one `fetch_add` of
// `(1 << OFFSET_BITS) + (v - bucket_low(i))` on their bucket's word: the high bits count
// the samples, the low bits sum their offsets within the bucket, so `count × bucket_low +
// offsets` is their exact sum. Neither field may overflow, so a word is moved out before
// it gets near full: the adder whose result has the top bit of either field set swaps the
// word to 0 and adds what it took to the plain cumulative counters ("spill"). Once one
// result has such a bit set, every later result has it too until the swap, so the word
// only grows past that point by the adds of threads that have added and not yet swapped:
// one add per thread. With a 24-bit count (half: 2^23) and a 40-bit offset sum (half:
// 2^39, at most 2^16 − 1 per add since the widest packed bucket is 2^16 wide), neither
// field can overflow unless more than 2^23 threads stand between their add and their swap
// at once (more threads than Linux allows a whole system: PID_MAX_LIMIT is 2^22).
// Larger values (≥ ~2.1 ms, where one more atomic step is noise) go straight to the spill.
#[cfg(not(loom))]
const PACKED_BITS: u32 = 21;
#[cfg(not(loom))]
const OFFSET_BITS: u32 = 40;
// Under loom: packed values below 8 and a 2-bit count, so a model reaches the spill
// hand-off with two samples in one bucket.
#[cfg(loom)]
const PACKED_BITS: u32 = 3;
#[cfg(loom)]
const OFFSET_BITS: u32 = 62;

const COUNT_ONE: u64 = 1 << OFFSET_BITS;
const OFFSET_MASK: u64 = COUNT_ONE - 1;
/// The top bit of each field: an add whose result has one set moves the word out.
const SPILL_MASK: u64 = (1 << 63) | (1 << (OFFSET_BITS - 1));
/// Buckets recorded through packed words: every value below `1 << PACKED_BITS`.
const PACKED_BUCKETS: usize = bucket_index((1 << PACKED_BITS) - 1) + 1;
/// The widest packed bucket's largest offset.
#[cfg(not(loom))]
const MAX_PACKED_OFFSET: u64 = (1 << (PACKED_BITS - 1 - SUB_BITS)) - 1;

#[cfg(not(loom))]
const _: () = {
    // The overflow argument above, checked: 2^23 in-between adders fit in either field.
    let adders = 1u64 << 23;
    assert!((1u64 << (63 - OFFSET_BITS)) >= adders);
    assert!((1u64 << (OFFSET_BITS - 1)) / MAX_PACKED_OFFSET >= adders);
    assert!(PACKED_BUCKETS <= BUCKETS);
};

/// The packed bucket of `v < 1 << PACKED_BITS` and `v`'s offset in it.
#[inline]
fn packed_slot(v: u64) -> (usize, u64) {
    if v < SUB_COUNT as u64 {
        return (v as usize, 0);
    }
    let shift = 63 - v.leading_zeros() - SUB_BITS; // octave - SUB_BITS
    let sub = (v >> shift) as usize & (SUB_COUNT - 1);
    ((shift + 1) as usize * SUB_COUNT + sub, v & ((1 << shift) - 1))
}

/// The (samples, exact value sum) a packed word of bucket `i` holds.
fn unpack(i: usize, word: u64) -> (u64, u64) {
    let n = word >> OFFSET_BITS;
    (n, n.wrapping_mul(bucket_low(i)).wrapping_add(word & OFFSET_MASK))
}

/// Latencies recorded concurrently into a histogram **and** their exact sum, usually with
/// one atomic step per sample: below `2^21` (about 2.1 ms in ns) a sample is one
/// `fetch_add` on a word holding its bucket's count and the sum of the values' offsets in
/// the bucket; larger values take a bucket counter plus a sum counter. A reader holding a
/// [`LatencyCursor`] collects everything recorded since its last
/// [`commit`](LatencyCursor::commit): each sample exactly once, with the same counts and
/// the same sum (mod 2^64) as recording into a [`Histogram`] plus a `u64` sum.
///
/// ```
/// use surgeguard_core::stats::{AtomicLatencyHistogram, LatencyCursor, BUCKETS};
/// let h = AtomicLatencyHistogram::new();
/// let mut cursor = LatencyCursor::new();
/// for v in [500, 700, 5_000_000] { h.record(v); }
/// let mut counts = [0u64; BUCKETS];
/// assert_eq!(h.collect(&mut cursor, &mut counts), (3, 5_001_200));
/// cursor.commit();
/// h.record(900);
/// assert_eq!(h.collect(&mut cursor, &mut counts), (1, 900));
/// assert_eq!(h.total(), 4);
/// ```
///
/// Progress: `record` is wait-free (one `fetch_add`; once per 2^23 samples of a bucket
/// between collections, or for values ≥ 2^21, two or three more). `collect` is wait-free:
/// a load per packed word (a swap for each non-empty one) plus `BUCKETS` loads. A
/// histogram has one collector, with one cursor (collections take packed words out, so a
/// second cursor would see only what the first left; the [`Limiter`](crate::Limiter)
/// collects inside its fold cell). Concurrently with `record`, a collection sees each sample either now or
/// at a later collection, never twice and never lost; the count and the value of a sample
/// that took two steps (large values, or a word moved out) may be seen by two adjacent
/// collections.
#[derive(Debug)]
pub struct AtomicLatencyHistogram {
    packed: [AtomicU64; PACKED_BUCKETS],
    spill: AtomicHistogram,
    spill_sum: AtomicU64,
    /// Samples collectors have taken out of packed words (for `total`).
    taken: AtomicU64,
}

impl Default for AtomicLatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicLatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            packed: core::array::from_fn(|_| AtomicU64::new(0)),
            spill: AtomicHistogram::new(),
            spill_sum: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&self, v: u64) {
        if v < 1 << PACKED_BITS {
            let (i, offset) = packed_slot(v);
            let add = COUNT_ONE + offset;
            // Relaxed: a counter; collectors take words by swap and need no other order.
            let word = self.packed[i].fetch_add(add, Ordering::Relaxed).wrapping_add(add);
            if word & SPILL_MASK != 0 {
                self.spill_packed(i);
            }
        } else {
            self.record_spill(v);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_spill(&self, v: u64) {
        self.spill.record(v);
        // Relaxed: a cumulative counter, diffed by collectors.
        self.spill_sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Moves packed word `i` (getting full) to the cumulative counters.
    #[cold]
    #[inline(never)]
    fn spill_packed(&self, i: usize) {
        // Relaxed: the swap takes a set of adds no other swap takes; nothing else is ordered.
        let word = self.packed[i].swap(0, Ordering::Relaxed);
        if word != 0 {
            let (n, sum) = unpack(i, word);
            self.spill.add(i, n);
            self.spill_sum.fetch_add(sum, Ordering::Relaxed);
        }
    }

    /// Fills `counts` with the samples per bucket recorded since `cursor`'s last commit
    /// and returns (samples, sum of their values mod 2^64). Calling it again before a
    /// commit returns the same samples plus any newer ones.
    pub fn collect(&self, cursor: &mut LatencyCursor, counts: &mut [u64; BUCKETS]) -> (u64, u64) {
        let mut taken = 0u64;
        for (i, (w, held)) in self.packed.iter().zip(cursor.held.iter_mut()).enumerate() {
            // Relaxed: a 0 means nothing to take now; later adds belong to later windows.
            if w.load(Ordering::Relaxed) != 0 {
                let (n, sum) = unpack(i, w.swap(0, Ordering::Relaxed));
                *held += n;
                cursor.held_sum = cursor.held_sum.wrapping_add(sum);
                taken += n;
            }
        }
        if taken != 0 {
            self.taken.fetch_add(taken, Ordering::Relaxed);
        }
        self.spill.snapshot(&mut cursor.cur);
        cursor.cur_sum = self.spill_sum.load(Ordering::Relaxed);
        let mut samples = 0u64;
        for (i, c) in counts.iter_mut().enumerate() {
            let held = cursor.held.get(i).copied().unwrap_or(0);
            *c = held.wrapping_add(cursor.cur[i].wrapping_sub(cursor.prev[i]));
            samples = samples.wrapping_add(*c);
        }
        (samples, cursor.held_sum.wrapping_add(cursor.cur_sum.wrapping_sub(cursor.prev_sum)))
    }

    /// Total samples ever recorded.
    pub fn total(&self) -> u64 {
        let packed: u64 =
            self.packed.iter().map(|w| w.load(Ordering::Relaxed) >> OFFSET_BITS).sum();
        self.spill.total() + self.taken.load(Ordering::Relaxed) + packed
    }
}

/// What the collector of an [`AtomicLatencyHistogram`] keeps between collections: the
/// samples taken out but not yet committed, and the counters' values at the last commit.
///
/// Progress: not shared (`&mut self`).
#[derive(Clone, Debug)]
pub struct LatencyCursor {
    held: [u64; PACKED_BUCKETS],
    held_sum: u64,
    prev: [u64; BUCKETS],
    cur: [u64; BUCKETS],
    prev_sum: u64,
    cur_sum: u64,
}

impl Default for LatencyCursor {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyCursor {
    /// A cursor at the start of a histogram.
    pub const fn new() -> Self {
        Self {
            held: [0; PACKED_BUCKETS],
            held_sum: 0,
            prev: [0; BUCKETS],
            cur: [0; BUCKETS],
            prev_sum: 0,
            cur_sum: 0,
        }
    }

    /// Ends the window: the next collection starts after what the last one returned.
    pub fn commit(&mut self) {
        self.held = [0; PACKED_BUCKETS];
        self.held_sum = 0;
        self.prev = self.cur;
        self.prev_sum = self.cur_sum;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn layout_is_monotone_and_covers_every_value() {
        let mut prev = 0;
        for i in 1..BUCKETS {
            assert!(bucket_low(i) > bucket_low(i - 1), "bucket {i}");
            assert!(bucket_value(i) >= bucket_low(i));
            prev = i;
        }
        assert_eq!(prev, BUCKETS - 1);
        for v in [0u64, 1, 15, 16, 17, 31, 32, 1000, 123_456_789, (1 << 40) - 1, 1 << 40, u64::MAX]
        {
            let i = bucket_index(v);
            assert!(i < BUCKETS);
            if v < 1 << 40 {
                assert!(bucket_low(i) <= v, "v={v}");
                if i + 1 < BUCKETS {
                    assert!(bucket_low(i + 1) > v, "v={v}");
                }
            }
        }
    }

    #[test]
    fn relative_error_is_bounded_by_five_percent() {
        let mut worst: f64 = 0.0;
        let mut v = 16u64;
        while v < 1 << 40 {
            let rep = bucket_value(bucket_index(v)) as f64;
            worst = worst.max((rep - v as f64).abs() / v as f64);
            v = v + v / 7 + 1;
        }
        assert!(worst <= 1.0 / 32.0 + 1e-12, "worst relative error {worst}");
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn quantiles_of_a_uniform_spread() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 100);
        }
        for (q, exact) in [(0.5, 500_000.0), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - exact).abs() / exact <= 0.05, "q={q} got {got}");
        }
        assert_eq!(Histogram::new().quantile(0.5), 0);
        assert!(h.min() <= 100);
    }

    #[test]
    fn atomic_snapshots_diff_to_the_window() {
        let h = AtomicHistogram::new();
        let mut a = [0u64; BUCKETS];
        let mut b = [0u64; BUCKETS];
        h.record(5);
        h.snapshot(&mut a);
        h.record(5);
        h.record(1_000_000);
        h.snapshot(&mut b);
        let delta: u64 = a.iter().zip(b.iter()).map(|(x, y)| y - x).sum();
        assert_eq!(delta, 2);
        assert_eq!(h.total(), 3);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // 2^21 values: minutes under Miri
    fn packed_slots_are_the_buckets_and_offsets() {
        for v in 0..1u64 << PACKED_BITS {
            let (i, offset) = packed_slot(v);
            assert_eq!(i, bucket_index(v), "v={v}");
            assert_eq!(offset, v - bucket_low(i), "v={v}");
            assert!(offset <= MAX_PACKED_OFFSET);
        }
        assert_eq!(bucket_index((1 << PACKED_BITS) - 1), PACKED_BUCKETS - 1);
    }

    /// Plain reference: a `Histogram` and a wrapping `u64` sum per window.
    struct Reference {
        counts: [u64; BUCKETS],
        sum: u64,
    }

    impl Reference {
        fn new() -> Self {
            Self { counts: [0; BUCKETS], sum: 0 }
        }
        fn record(&mut self, v: u64) {
            self.counts[bucket_index(v)] += 1;
            self.sum = self.sum.wrapping_add(v);
        }
        fn check(&self, h: &AtomicLatencyHistogram, cursor: &mut LatencyCursor) {
            let mut counts = [0u64; BUCKETS];
            let (n, sum) = h.collect(cursor, &mut counts);
            assert_eq!(counts, self.counts);
            assert_eq!(n, self.counts.iter().sum::<u64>());
            assert_eq!(sum, self.sum);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Record(u64),
        Collect,
        Commit,
    }

    impl quickcheck::Arbitrary for Op {
        fn arbitrary(g: &mut quickcheck::Gen) -> Self {
            let x = u64::arbitrary(g);
            match u8::arbitrary(g) % 16 {
                0 => Op::Collect,
                1 => Op::Commit,
                // Every size: tiny, packed, just below and above the packed limit, huge.
                2..=5 => Op::Record(x % 16),
                6..=11 => Op::Record(x % (1 << PACKED_BITS)),
                12 => Op::Record((1 << PACKED_BITS) - 1 - x % 64),
                13 => Op::Record((1 << PACKED_BITS) + x % 64),
                14 => Op::Record(x % (1 << 44)),
                _ => Op::Record(x),
            }
        }
    }

    /// Whatever the interleaving of records, collections and commits, each collection
    /// returns exactly the counts and the wrapping sum a plain histogram and a `u64` sum of
    /// the same window hold.
    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn latency_histogram_matches_a_plain_histogram_and_sum() {
        fn prop(ops: std::vec::Vec<Op>) -> bool {
            let h = AtomicLatencyHistogram::new();
            let mut cursor = LatencyCursor::new();
            let mut window = Reference::new();
            let mut recorded = 0;
            for op in ops {
                match op {
                    Op::Record(v) => {
                        h.record(v);
                        window.record(v);
                        recorded += 1;
                    }
                    Op::Collect => window.check(&h, &mut cursor),
                    Op::Commit => {
                        window.check(&h, &mut cursor);
                        cursor.commit();
                        window = Reference::new();
                    }
                }
                assert_eq!(h.total(), recorded);
            }
            window.check(&h, &mut cursor);
            true
        }
        // A few short cases under Miri (each collection is a pass over every bucket).
        let (tests, size) = if cfg!(miri) { (2, 12) } else { (100, 100) };
        quickcheck::QuickCheck::new()
            .tests(tests)
            .rng(quickcheck::Gen::new(size))
            .quickcheck(prop as fn(_) -> bool);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // 2^24 records and more
    fn full_packed_words_move_out_without_changing_the_window() {
        // Over 2^24 samples in two buckets of one window: the count field of the first and the
        // offset field of the second fill up past half and are moved to the spill.
        let h = AtomicLatencyHistogram::new();
        let mut cursor = LatencyCursor::new();
        let mut reference = Reference::new();
        let widest_top = (1 << PACKED_BITS) - 1;
        for k in 0..(1u64 << 24) + (1 << 21) {
            let v = if k % 2 == 0 { 5 } else { widest_top - k % 7 };
            h.record(v);
            reference.record(v);
            if k == 1 << 10 {
                reference.check(&h, &mut cursor); // mid-window collection, no commit
            }
        }
        assert!(h.spill.counts[5].load(Ordering::Relaxed) > 0, "count field moved out");
        let top = bucket_index(widest_top);
        assert!(h.spill.counts[top].load(Ordering::Relaxed) > 0, "offset field moved out");
        assert_eq!(h.total(), (1 << 24) + (1 << 21));
        reference.check(&h, &mut cursor);
        cursor.commit();
        h.record(7);
        let mut next = Reference::new();
        next.record(7);
        next.check(&h, &mut cursor);
    }
}
