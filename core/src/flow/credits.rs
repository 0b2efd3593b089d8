//! Credit-based (demand-driven) flow control: Reactive Streams rule 1.1 (a publisher
//! never signals more `onNext` than requested) and Flink network credits.

use crate::sync::{AtomicU64, Ordering};
use crate::{ConfigError, Reason, Rejected, UsageError};

/// Settings of one credit channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CreditsConfig {
    /// High water: the most credit that may be outstanding at once — granted and not yet
    /// completed, so it bounds items in transit plus items waiting in the consumer's buffer.
    /// It is the consumer's buffer size; [`Credits::replenish`] tops back up to it.
    pub capacity: u32,
    /// Low water: [`Credits::replenish`] grants only once outstanding credit has fallen to
    /// this or below, so credit goes out in batches of at least `capacity − low_water`
    /// instead of one item at a time.
    pub low_water: u32,
}

impl Default for CreditsConfig {
    fn default() -> Self {
        // A bounded subscriber's buffer of 256, topped up when 64 remain (a quarter).
        Self { capacity: 256, low_water: 64 }
    }
}

impl CreditsConfig {
    /// Checks the settings: `capacity ≥ 1` and `low_water < capacity`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.capacity == 0 {
            return Err(ConfigError::out_of_range("credits.capacity"));
        }
        if self.low_water >= self.capacity {
            return Err(ConfigError::inconsistent(
                "credits.low_water",
                "must be below",
                "credits.capacity",
            ));
        }
        Ok(())
    }
}

/// A snapshot of a channel's (or a table's) counters and gauges.
///
/// Each counter is exact; read while other threads are mid-call, two counters can be
/// apart by the calls in progress (e.g. `taken` may briefly lead `granted` by a grant whose
/// counter is not bumped yet). [`Credits::available`] and [`Credits::buffered`] are read
/// from one word and are always consistent with each other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CreditsMetrics {
    /// Credit granted by the consumer, in total.
    pub granted: u64,
    /// Items taken (sent) by the producer against credit, in total. Never above `granted`.
    pub taken: u64,
    /// Items the consumer reported done, in total. Never above `taken`.
    pub completed: u64,
    /// Take calls refused for lack of credit.
    pub refused: u64,
    /// Gauge: credit the producer may still use.
    pub available: u64,
    /// Gauge: items taken and not yet completed (in transit or in the consumer's buffer).
    pub buffered: u64,
    /// Gauge: channels whose producer has no credit at all (0 or 1 for one channel).
    pub stalled: u64,
    /// Configured high water (summed over a table's channels).
    pub capacity: u64,
}

// One word of state: `available` in the low half, `buffered` in the high half. Both are
// bounded by `capacity ≤ u32::MAX`, so neither half can overflow.
const AVAILABLE_MASK: u64 = 0xFFFF_FFFF;
const BUFFERED_SHIFT: u32 = 32;

const fn unpack(word: u64) -> (u32, u32) {
    ((word & AVAILABLE_MASK) as u32, (word >> BUFFERED_SHIFT) as u32)
}

const fn pack(available: u32, buffered: u32) -> u64 {
    ((buffered as u64) << BUFFERED_SHIFT) | available as u64
}

/// One channel of demand-driven flow control: the consumer grants credit, the producer
/// takes one credit per item and can never send more than was granted (Reactive Streams
/// rule 1.1: `onNext` signals never exceed the total requested).
///
/// Credit moves through three states, all held in one atomic word:
/// `available` (granted, not yet used by the producer) → `buffered` (an item was sent
/// against it and is in transit or in the consumer's buffer) → gone (the consumer called
/// [`complete`](Self::complete)). *Outstanding* credit is `available + buffered`; it never
/// exceeds `capacity`, so the consumer's buffer can never overflow. Replenishment is in
/// batches: [`replenish`](Self::replenish) grants nothing until outstanding credit falls to
/// `low_water`, then tops it up to `capacity` in one grant (batched `request(n)`, as
/// Reactive Streams subscribers do).
///
/// A refusal is `Rejected { reason: Reason::NoCredit, retry_after: 0 }`: credit arrives
/// with the consumer's next grant, not with time, so there is no time hint — wait for the
/// consumer's grant signal instead of retrying on a timer.
///
/// For a producer in another process, keep this structure on the consumer side and send
/// the value returned by `replenish` upstream as `request(n)`; the producer's own mirror
/// can be a `Credits` on which it calls `grant(n)` per request, then `try_take(1)` and
/// `complete(1)` per item sent.
///
/// ```
/// use surgeguard_core::flow::{Credits, CreditsConfig};
///
/// let credits = Credits::new(CreditsConfig { capacity: 4, low_water: 1 }).unwrap();
/// assert_eq!(credits.replenish(), 4); // consumer: initial request(4)
/// for _ in 0..4 {
///     credits.try_take(1).unwrap(); // producer: one credit per item sent
/// }
/// assert!(credits.try_take(1).is_err()); // a fifth item would exceed what was granted
/// credits.complete(2).unwrap(); // consumer processed 2: outstanding 2, above low water
/// assert_eq!(credits.replenish(), 0); // no trickle of single credits
/// credits.complete(1).unwrap(); // outstanding 1 = low water
/// assert_eq!(credits.replenish(), 3); // one batch, back up to 4
/// ```
///
/// Progress: lock-free. Every call is one load plus a compare-and-swap loop on the state
/// word that retries only when another call's CAS succeeded, plus one relaxed counter
/// increment; queries are one load. Cost: a handful of atomic operations, 48 bytes.
#[derive(Debug)]
pub struct Credits {
    /// `available | buffered << 32` — the only authority; counters below are metrics.
    state: AtomicU64,
    granted: AtomicU64,
    taken: AtomicU64,
    completed: AtomicU64,
    refused: AtomicU64,
    config: CreditsConfig,
}

impl Credits {
    /// A channel with no credit granted yet (the producer is stalled until the consumer's
    /// first [`grant`](Self::grant) or [`replenish`](Self::replenish)).
    pub fn new(config: CreditsConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self::with_valid(config))
    }

    fn with_valid(config: CreditsConfig) -> Self {
        Self {
            state: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            config,
        }
    }

    /// The settings.
    pub const fn config(&self) -> CreditsConfig {
        self.config
    }

    fn refuse(&self) -> Rejected {
        self.refused.fetch_add(1, Ordering::Relaxed);
        // Credit comes with a grant, not with time: no time hint (see the type's docs).
        Rejected::new(Reason::NoCredit, 0)
    }

    /// Producer: takes `k` credits for `k` items, all or nothing. Refused (and nothing
    /// taken) when fewer than `k` credits are available. `k = 0` always succeeds.
    pub fn try_take(&self, k: u32) -> Result<(), Rejected> {
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            let (available, buffered) = unpack(cur);
            if available < k {
                return Err(self.refuse());
            }
            // `buffered + k ≤ available + buffered ≤ capacity`: no overflow.
            let next = pack(available - k, buffered + k);
            // Acquire: pairs with the Release in `grant`/`replenish`/`complete`, so whatever
            // the consumer did before granting (freeing buffer space) happens-before the
            // producer's use of that credit.
            match self.state.compare_exchange_weak(cur, next, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.taken.fetch_add(u64::from(k), Ordering::Relaxed);
                    return Ok(());
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Producer: takes as many of `k` credits as are available and returns how many it
    /// took (0 when stalled; a call with `k > 0` that takes nothing counts as refused).
    pub fn take_up_to(&self, k: u32) -> u32 {
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            let (available, buffered) = unpack(cur);
            let n = k.min(available);
            if n == 0 {
                if k > 0 {
                    self.refuse();
                }
                return 0;
            }
            let next = pack(available - n, buffered + n);
            // Acquire: pairs with the Release in `grant`/`replenish`/`complete` (as in
            // `try_take`).
            match self.state.compare_exchange_weak(cur, next, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.taken.fetch_add(u64::from(n), Ordering::Relaxed);
                    return n;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Consumer: `k` taken items are done and their buffer space is free again. Completing
    /// more items than are buffered is an error (`AlreadyReleased`) and changes nothing.
    pub fn complete(&self, k: u32) -> Result<(), UsageError> {
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            let (available, buffered) = unpack(cur);
            if buffered < k {
                return Err(UsageError::AlreadyReleased);
            }
            let next = pack(available, buffered - k);
            // Release: pairs with the Acquire in `try_take`/`take_up_to`; the space freed
            // here is what later grants promise to the producer.
            match self.state.compare_exchange_weak(cur, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.completed.fetch_add(u64::from(k), Ordering::Relaxed);
                    return Ok(());
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Consumer: grants up to `n` more credits (Reactive Streams `request(n)`), clipped so
    /// that outstanding credit never exceeds `capacity`. Returns the credit actually granted.
    pub fn grant(&self, n: u32) -> u32 {
        self.grant_with(|available, buffered| n.min(self.config.capacity - available - buffered))
    }

    /// Consumer: the credit [`replenish`](Self::replenish) would grant now —
    /// `capacity − outstanding` once outstanding has fallen to `low_water` or below,
    /// otherwise 0. A query; changes nothing.
    pub fn grant_due(&self) -> u32 {
        let (available, buffered) = unpack(self.state.load(Ordering::Relaxed));
        self.due(available, buffered)
    }

    fn due(&self, available: u32, buffered: u32) -> u32 {
        let outstanding = available + buffered;
        if outstanding <= self.config.low_water {
            self.config.capacity - outstanding
        } else {
            0
        }
    }

    /// Consumer: grants what is due (see [`grant_due`](Self::grant_due)) in one atomic
    /// step and returns it — the `n` to send upstream as `request(n)`, or 0.
    pub fn replenish(&self) -> u32 {
        self.grant_with(|available, buffered| self.due(available, buffered))
    }

    fn grant_with(&self, amount: impl Fn(u32, u32) -> u32) -> u32 {
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            let (available, buffered) = unpack(cur);
            let g = amount(available, buffered);
            if g == 0 {
                return 0;
            }
            // `available + g ≤ capacity − buffered`: no overflow.
            let next = pack(available + g, buffered);
            // Release: pairs with the Acquire in `try_take`/`take_up_to` (see there).
            match self.state.compare_exchange_weak(cur, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.granted.fetch_add(u64::from(g), Ordering::Relaxed);
                    return g;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Credit the producer may still use.
    pub fn available(&self) -> u32 {
        unpack(self.state.load(Ordering::Relaxed)).0
    }

    /// Items taken and not yet completed.
    pub fn buffered(&self) -> u32 {
        unpack(self.state.load(Ordering::Relaxed)).1
    }

    /// Outstanding credit: `available + buffered`, never above `capacity`.
    pub fn outstanding(&self) -> u32 {
        let (available, buffered) = unpack(self.state.load(Ordering::Relaxed));
        available + buffered
    }

    /// True when the producer has no credit: it must stop until the consumer grants.
    pub fn is_stalled(&self) -> bool {
        self.available() == 0
    }

    /// A snapshot of the counters and gauges.
    pub fn metrics(&self) -> CreditsMetrics {
        let (available, buffered) = unpack(self.state.load(Ordering::Relaxed));
        CreditsMetrics {
            granted: self.granted.load(Ordering::Relaxed),
            taken: self.taken.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            available: u64::from(available),
            buffered: u64::from(buffered),
            stalled: u64::from(available == 0),
            capacity: u64::from(self.config.capacity),
        }
    }
}

/// `N` independent credit channels with the same settings, so one slow channel stops
/// alone while the others keep flowing: flow control works at the granularity of the
/// thing that can be slow (Flink per-channel credits, HTTP/2 per-stream windows).
///
/// ```
/// use surgeguard_core::flow::{CreditTable, CreditsConfig};
///
/// let table = CreditTable::<2>::new(CreditsConfig { capacity: 2, low_water: 0 }).unwrap();
/// assert_eq!(table.replenish_all(), [2, 2]);
/// let (slow, fast) = (table.channel(0).unwrap(), table.channel(1).unwrap());
/// slow.try_take(2).unwrap(); // the slow consumer never completes
/// assert!(slow.try_take(1).is_err());
/// for _ in 0..10 {
///     fast.try_take(1).unwrap(); // the fast channel keeps flowing
///     fast.complete(1).unwrap();
///     fast.replenish();
/// }
/// assert_eq!(table.stalled(), 1);
/// ```
///
/// Progress: as [`Credits`], per channel; table-wide calls visit each channel once.
/// Cost: `N × size_of::<Credits>()`.
#[derive(Debug)]
pub struct CreditTable<const N: usize> {
    channels: [Credits; N],
}

impl<const N: usize> CreditTable<N> {
    /// `N` channels (at least 1), each with `config` and no credit granted yet.
    pub fn new(config: CreditsConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        if N == 0 {
            return Err(ConfigError::out_of_range("credits.channels"));
        }
        Ok(Self { channels: core::array::from_fn(|_| Credits::with_valid(config)) })
    }

    /// Channel `i`, or `None` when `i ≥ N`.
    pub fn channel(&self, i: usize) -> Option<&Credits> {
        self.channels.get(i)
    }

    /// All channels.
    pub fn channels(&self) -> &[Credits; N] {
        &self.channels
    }

    /// The number of channels, `N`.
    pub const fn len(&self) -> usize {
        N
    }

    /// Always false: a table has at least one channel.
    pub const fn is_empty(&self) -> bool {
        N == 0
    }

    /// Replenishes every channel; element `i` is the credit granted to channel `i`.
    pub fn replenish_all(&self) -> [u32; N] {
        core::array::from_fn(|i| self.channels[i].replenish())
    }

    /// How many channels are stalled (no credit available).
    pub fn stalled(&self) -> usize {
        self.channels.iter().filter(|c| c.is_stalled()).count()
    }

    /// Counters and gauges summed over all channels (`stalled` counts stalled channels).
    pub fn metrics(&self) -> CreditsMetrics {
        self.channels.iter().map(Credits::metrics).fold(CreditsMetrics::default(), |a, m| {
            CreditsMetrics {
                granted: a.granted + m.granted,
                taken: a.taken + m.taken,
                completed: a.completed + m.completed,
                refused: a.refused + m.refused,
                available: a.available + m.available,
                buffered: a.buffered + m.buffered,
                stalled: a.stalled + m.stalled,
                capacity: a.capacity + m.capacity,
            }
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn cfg(capacity: u32, low_water: u32) -> CreditsConfig {
        CreditsConfig { capacity, low_water }
    }

    #[test]
    fn bad_configs_are_refused() {
        assert_eq!(
            Credits::new(cfg(0, 0)).unwrap_err(),
            ConfigError::out_of_range("credits.capacity")
        );
        assert!(
            Credits::new(cfg(4, 4)).is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent)
        );
        assert!(
            Credits::new(cfg(4, 9)).is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent)
        );
        assert_eq!(
            CreditTable::<0>::new(cfg(4, 1)).unwrap_err(),
            ConfigError::out_of_range("credits.channels")
        );
        assert!(Credits::new(cfg(u32::MAX, u32::MAX - 1)).is_ok());
        assert!(CreditsConfig::default().validate().is_ok());
    }

    #[test]
    fn a_fresh_channel_is_stalled_until_granted() {
        let c = Credits::new(cfg(8, 2)).unwrap();
        assert!(c.is_stalled());
        let err = c.try_take(1).unwrap_err();
        assert_eq!(err, Rejected::new(Reason::NoCredit, 0));
        assert_eq!(c.take_up_to(3), 0);
        assert_eq!(c.metrics().refused, 2);
        assert_eq!(c.grant_due(), 8);
    }

    #[test]
    fn taking_never_exceeds_what_was_granted() {
        let c = Credits::new(cfg(8, 2)).unwrap();
        assert_eq!(c.grant(5), 5);
        assert!(c.try_take(6).is_err(), "all or nothing");
        assert_eq!(c.available(), 5);
        c.try_take(2).unwrap();
        assert_eq!(c.take_up_to(10), 3);
        assert_eq!(c.take_up_to(1), 0);
        let m = c.metrics();
        assert_eq!((m.granted, m.taken, m.refused), (5, 5, 2));
        assert_eq!((m.available, m.buffered, m.stalled), (0, 5, 1));
    }

    #[test]
    fn grants_are_clipped_to_capacity_minus_outstanding() {
        let c = Credits::new(cfg(8, 2)).unwrap();
        assert_eq!(c.grant(6), 6);
        c.try_take(4).unwrap(); // available 2, buffered 4
        assert_eq!(c.grant(100), 2, "outstanding may not pass capacity");
        assert_eq!(c.grant(1), 0);
        assert_eq!(c.outstanding(), 8);
        c.complete(3).unwrap();
        assert_eq!(c.grant(100), 3);
        assert_eq!(c.metrics().granted, 11);
    }

    #[test]
    fn replenishment_waits_for_low_water_then_tops_up_in_one_batch() {
        // Buffer 256, low water 64 → first batch 256, later batches ≥ 192.
        let c = Credits::new(CreditsConfig::default()).unwrap();
        assert_eq!(c.replenish(), 256);
        c.try_take(256).unwrap();
        c.complete(191).unwrap(); // outstanding 65
        assert_eq!(c.grant_due(), 0);
        assert_eq!(c.replenish(), 0);
        c.complete(1).unwrap(); // outstanding 64 = low water
        assert_eq!(c.grant_due(), 192);
        assert_eq!(c.replenish(), 192);
        assert_eq!(c.replenish(), 0, "already topped up");
        assert_eq!(c.outstanding(), 256);
    }

    #[test]
    fn completing_more_than_was_taken_is_an_error_and_changes_nothing() {
        let c = Credits::new(cfg(4, 0)).unwrap();
        c.grant(4);
        c.try_take(2).unwrap();
        assert_eq!(c.complete(3), Err(UsageError::AlreadyReleased));
        assert_eq!((c.available(), c.buffered(), c.metrics().completed), (2, 2, 0));
        c.complete(2).unwrap();
        assert_eq!(c.complete(1), Err(UsageError::AlreadyReleased));
    }

    #[test]
    fn zero_sized_calls_are_no_ops() {
        let c = Credits::new(cfg(4, 0)).unwrap();
        assert!(c.try_take(0).is_ok());
        assert_eq!(c.take_up_to(0), 0);
        assert_eq!(c.grant(0), 0);
        assert!(c.complete(0).is_ok());
        assert_eq!(c.metrics(), Credits::new(cfg(4, 0)).unwrap().metrics());
    }

    #[test]
    fn full_u32_capacity_does_not_overflow() {
        let c = Credits::new(cfg(u32::MAX, 0)).unwrap();
        assert_eq!(c.replenish(), u32::MAX);
        c.try_take(u32::MAX).unwrap();
        assert_eq!((c.available(), c.buffered()), (0, u32::MAX));
        assert_eq!(c.grant(u32::MAX), 0);
        c.complete(u32::MAX).unwrap();
        assert_eq!(c.grant(u32::MAX), u32::MAX);
    }

    #[test]
    fn one_slow_channel_stops_alone() {
        let t = CreditTable::<3>::new(cfg(4, 1)).unwrap();
        assert_eq!(t.len(), 3);
        assert!(!t.is_empty());
        assert_eq!(t.replenish_all(), [4, 4, 4]);
        t.channel(1).unwrap().try_take(4).unwrap(); // channel 1's consumer is slow
        for ch in [0, 2] {
            let c = t.channel(ch).unwrap();
            for _ in 0..20 {
                c.try_take(1).unwrap();
                c.complete(1).unwrap();
                c.replenish();
            }
        }
        assert!(t.channel(1).unwrap().try_take(1).is_err());
        assert!(t.channel(0).unwrap().try_take(1).is_ok());
        assert!(t.channel(3).is_none());
        assert_eq!(t.stalled(), 1);
        let m = t.metrics();
        assert_eq!(m.taken, 4 + 20 + 20 + 1);
        assert_eq!(m.refused, 1);
        assert_eq!(m.capacity, 12);
        assert_eq!(m.stalled, 1);
        assert_eq!(t.replenish_all(), [0, 0, 0]);
    }

    #[test]
    fn threads_never_take_more_than_was_granted() {
        use std::sync::atomic::{AtomicBool, Ordering as O};
        let c = Credits::new(cfg(16, 4)).unwrap();
        let done = AtomicBool::new(false);
        let sent = std::thread::scope(|s| {
            let producers: std::vec::Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut sent = 0u64;
                        while sent < 5_000 {
                            if c.try_take(1).is_ok() {
                                sent += 1;
                            } else {
                                std::thread::yield_now();
                            }
                        }
                        sent
                    })
                })
                .collect();
            s.spawn(|| {
                c.replenish();
                while !done.load(O::Relaxed) {
                    let b = c.buffered();
                    if b > 0 {
                        c.complete(b).unwrap();
                    }
                    c.replenish();
                    assert!(c.outstanding() <= 16);
                    std::thread::yield_now();
                }
            });
            let total = producers.into_iter().map(|p| p.join().unwrap()).sum::<u64>();
            done.store(true, O::Relaxed);
            total
        });
        let m = c.metrics();
        assert_eq!(m.taken, sent);
        assert!(m.taken <= m.granted);
        assert_eq!(m.granted - m.taken, m.available);
        assert_eq!(m.taken - m.completed, m.buffered);
    }
}
