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
pub fn bucket_index(v: u64) -> usize {
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
}
