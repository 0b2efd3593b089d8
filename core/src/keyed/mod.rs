//! Per-key isolation: per-tenant / per-agent concurrency caps in a fixed table addressed
//! by a key hash, shuffle sharding (as AWS Route 53 and App Mesh use it), heavy-hitter
//! reporting and actionable rejections (429 per key vs 503 global, with `Retry-After`).
//!
//! Limits per agent or tenant identity at the gateway keep one caller from taking the
//! whole service: without them, one tenant's backlog stalls a shared queue for everyone.
//! The fix is per-tenant (or shuffle-sharded) capacity and per-tenant concurrency caps,
//! with rejections the caller can act on.
//!
//! - [`KeyedLimits`]: the table. A key maps to `k` of its `N` shards ([`ShardSet`]); it
//!   is admitted if any of them has room (a concurrency slot and, optionally, GCRA rate),
//!   so one noisy key fills at most its own `k`.
//! - [`isolation`]: how many other keys one noisy key can hurt, for given `N` and `k`.
//! - [`TopKeys`]: which keys are refused most (space-saving heavy hitters).
//! - [`actionable`]: 429 vs 503, `Retry-After` and the JSON body, identical in every binding.
//! - [`hash_key`]: the seeded hash bindings apply to tenant ids, API keys, agent ids.

mod actionable;
mod shuffle;
mod top;

pub use actionable::{
    actionable, is_per_key, retry_after_secs, Actionable, BufferTooSmall, MAX_BODY_LEN,
    STATUS_SERVICE_UNAVAILABLE, STATUS_TOO_MANY_REQUESTS,
};
pub use shuffle::{isolation, Isolation, ShardSet, MAX_SHARDS_PER_KEY};
pub use top::{KeyCount, TopKeys, TopKeysMetrics};

use crate::rate::gcra_decide;
use crate::rng::mix;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::time::{AtomicMonotonic, SEC};
use crate::types::check_range;
use crate::{ConfigError, Reason, Rejected, UsageError};

/// The golden-ratio increment of SplitMix64, reused to spread lengths and chain words.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Hashes a key (tenant id, API key, agent id) to the 64-bit key hash the table takes.
///
/// Seeded and deterministic on every platform (bytes are read as little-endian words), so
/// every binding and every process with the same seed maps a key to the same shards. Built
/// on [`crate::rng::mix`] (the SplitMix64 finalizer): the length and each 8-byte word are
/// folded in with one mix each.
///
/// Not cryptographic. Choose the seed at random at startup and keep it private: then
/// collisions cannot be aimed at casually, but an adversary who can probe the service may
/// still find keys that share shards. Per-key limits are a fairness tool, not a security
/// boundary. Two distinct keys collide on all 64 bits with probability about `2⁻⁶⁴`.
///
/// ```
/// use surgeguard_core::keyed::hash_key;
///
/// assert_eq!(hash_key(1, b"tenant-a"), hash_key(1, b"tenant-a"));
/// assert_ne!(hash_key(1, b"tenant-a"), hash_key(1, b"tenant-b"));
/// assert_ne!(hash_key(1, b"tenant-a"), hash_key(2, b"tenant-a"));
/// ```
///
/// Cost: `len / 8 + 2` mixes (about 1 ns per 8 bytes).
pub fn hash_key(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = mix(seed ^ (bytes.len() as u64).wrapping_mul(GOLDEN));
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        h = mix((h ^ u64::from_le_bytes(a)).wrapping_add(GOLDEN));
    }
    let rest = words.remainder();
    let mut a = [0u8; 8];
    a[..rest.len()].copy_from_slice(rest);
    mix((h ^ u64::from_le_bytes(a)).wrapping_add(GOLDEN))
}

/// How many heavy hitters a [`KeyedLimits`] tracks unless told otherwise.
pub const DEFAULT_TOP_KEYS: usize = 16;

/// Configuration of a [`KeyedLimits`] table.
///
/// ```
/// use surgeguard_core::keyed::KeyedConfig;
///
/// let c = KeyedConfig { shards_per_key: 3, ..KeyedConfig::new(8) };
/// assert_eq!(c.shard_limit, 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct KeyedConfig {
    /// `k`: shards each key maps to, `1..=min(N, 8)`. 1 is plain hashing (a colliding key
    /// shares the whole cap); 2 or more is shuffle sharding. Default 2, the smallest `k`
    /// that isolates (see [`isolation`]).
    pub shards_per_key: u32,
    /// Concurrency cap of one shard, `1..=2³⁰`. A key alone can hold up to
    /// `shards_per_key × shard_limit` permits ([`KeyedLimits::key_limit`]).
    pub shard_limit: u32,
    /// `retry_after` (ns) of a [`Reason::KeyLimit`] refusal: a concurrency slot frees when
    /// some permit returns, which the table cannot foresee. Default 1 s (`Retry-After: 1`,
    /// the smallest whole-second HTTP hint); at most one hour.
    pub limit_retry_after: u64,
    /// Seed of the key-to-shards mapping (and of nothing else). Default 0.
    pub seed: u64,
    /// Rate limit of each shard (GCRA), or `None` (the default) for concurrency caps only.
    /// A key alone can use up to `shards_per_key` times this rate.
    pub shard_rate: Option<ShardRate>,
}

/// The GCRA rate limit of one shard: one unit of cost per `emission_ns`, bursts of up to
/// `burst` units (the tolerance is `emission_ns × (burst − 1)`, the governor crate's
/// formulas; the decision is [`crate::rate::gcra_decide`]).
///
/// ```
/// use surgeguard_core::keyed::ShardRate;
/// use surgeguard_core::time::MS;
///
/// let r = ShardRate::per_second(10.0, 5).unwrap();
/// assert_eq!((r.emission_ns, r.burst), (100 * MS, 5));
/// assert!(ShardRate::per_second(f64::NAN, 5).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct ShardRate {
    /// Nanoseconds per unit of cost, `1..=10⁶ s` (as [`crate::rate::RateLimiter`]).
    pub emission_ns: u64,
    /// Largest burst in units, also the largest single cost, `1..=10⁹`.
    pub burst: u32,
}

impl ShardRate {
    /// `per_second` units per second (`1e-6..=1e9`, as [`crate::rate::RateLimiter`]), bursts
    /// of `burst`.
    pub fn per_second(per_second: f64, burst: u32) -> Result<Self, ConfigError> {
        let rate = check_range(per_second, 1e-6, 1e9, "keyed.shard_rate.per_second")?;
        let rate = Self { emission_ns: libm::round(SEC as f64 / rate).max(1.0) as u64, burst };
        rate.tolerance_ns()?;
        Ok(rate)
    }

    /// The GCRA tolerance `τ = emission_ns × (burst − 1)`, or why the pair is unusable.
    fn tolerance_ns(&self) -> Result<u64, ConfigError> {
        if self.emission_ns == 0 || self.emission_ns > MAX_EMISSION {
            return Err(ConfigError::out_of_range("keyed.shard_rate.emission_ns"));
        }
        if self.burst == 0 || self.burst > MAX_BURST {
            return Err(ConfigError::out_of_range("keyed.shard_rate.burst"));
        }
        self.emission_ns.checked_mul(u64::from(self.burst) - 1).ok_or(ConfigError::inconsistent(
            "keyed.shard_rate.burst",
            "is too large for",
            "keyed.shard_rate.emission_ns",
        ))
    }
}

/// Largest emission interval: 10⁶ s per unit, as `rate::RateLimiter`.
const MAX_EMISSION: u64 = 1_000_000 * SEC;
/// Largest burst, as `rate::RateLimiter`.
const MAX_BURST: u32 = 1_000_000_000;

impl KeyedConfig {
    /// `shard_limit` per shard, two shards per key, 1 s hint, seed 0, no rate limit.
    pub const fn new(shard_limit: u32) -> Self {
        Self { shards_per_key: 2, shard_limit, limit_retry_after: SEC, seed: 0, shard_rate: None }
    }

    /// Checks the config for a table of `shards` shards; returns the GCRA tolerance.
    fn validate(&self, shards: usize) -> Result<u64, ConfigError> {
        if shards == 0 || shards > u32::MAX as usize {
            return Err(ConfigError::out_of_range("keyed.shards"));
        }
        let k = self.shards_per_key as usize;
        if k == 0 || k > MAX_SHARDS_PER_KEY {
            return Err(ConfigError::out_of_range("keyed.shards_per_key"));
        }
        if k > shards {
            return Err(ConfigError::inconsistent(
                "keyed.shards_per_key",
                "must not be above",
                "keyed.shards",
            ));
        }
        if self.shard_limit == 0 || self.shard_limit > MAX_SHARD_LIMIT {
            return Err(ConfigError::out_of_range("keyed.shard_limit"));
        }
        if self.limit_retry_after > MAX_RETRY_AFTER {
            return Err(ConfigError::out_of_range("keyed.limit_retry_after"));
        }
        match self.shard_rate {
            Some(rate) => rate.tolerance_ns(),
            None => Ok(0),
        }
    }
}

/// The shard rate as plain words: `on == 1` with the rate and its GCRA tolerance, or
/// `on == 0` (no rate; the other words 0).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct RateRule {
    emission_ns: u64,
    tolerance: u64,
    burst: u32,
    on: u32,
}

impl RateRule {
    const fn new(rate: Option<(ShardRate, u64)>) -> Self {
        match rate {
            Some((r, tolerance)) => {
                Self { emission_ns: r.emission_ns, tolerance, burst: r.burst, on: 1 }
            }
            None => Self { emission_ns: 0, tolerance: 0, burst: 0, on: 0 },
        }
    }

    #[inline]
    const fn get(&self) -> Option<(ShardRate, u64)> {
        if self.on == 1 {
            Some((ShardRate { emission_ns: self.emission_ns, burst: self.burst }, self.tolerance))
        } else {
            None
        }
    }
}

/// Largest `shard_limit`: leaves headroom below `u32::MAX` in the counters.
const MAX_SHARD_LIMIT: u32 = 1 << 30;
/// Largest `limit_retry_after`: one hour; a longer hint is a misconfiguration.
const MAX_RETRY_AFTER: u64 = 3600 * SEC;

/// Proof that one request holds a slot of one shard of one [`KeyedLimits`].
///
/// Move-only (not `Clone`), so it can be released once only; [`KeyedLimits::release`]
/// refuses a permit from another table with [`UsageError::ForeignHandle`]. Dropping a
/// permit without releasing it leaks its slot.
#[must_use = "a permit holds a slot until it is released"]
#[derive(Debug, PartialEq, Eq)]
pub struct KeyPermit {
    owner: u32,
    shard: u32,
    key_hash: u64,
}

impl KeyPermit {
    /// The shard whose slot this permit holds.
    pub const fn shard(&self) -> usize {
        self.shard as usize
    }

    /// The key hash it was admitted for.
    pub const fn key_hash(&self) -> u64 {
        self.key_hash
    }
}

/// One shard: a concurrency counter, a GCRA word, and their statistics.
#[derive(Debug)]
#[repr(C)]
struct Shard {
    in_flight: AtomicU32,
    /// GCRA theoretical arrival time (ns; 0 = never used).
    tat: AtomicU64,
    /// The latest `now` this shard has seen: time never runs backwards for its `tat`.
    clock: AtomicMonotonic,
    admitted: AtomicU64,
    /// Refusals of keys whose first shard this is (spreads the counting).
    rejected_limit: AtomicU64,
    rejected_rate: AtomicU64,
}

impl Shard {
    fn new() -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            tat: AtomicU64::new(0),
            clock: AtomicMonotonic::new(),
            admitted: AtomicU64::new(0),
            rejected_limit: AtomicU64::new(0),
            rejected_rate: AtomicU64::new(0),
        }
    }

    /// Takes a slot if one is free. Never admits at or above `limit`, even in a race.
    fn try_enter(&self, limit: u32) -> bool {
        // Relaxed: the counter is the whole state; a permit is a capacity token and orders
        // no other memory. The CAS still never lets the count pass `limit`.
        self.in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| (c < limit).then_some(c + 1))
            .is_ok()
    }

    /// Gives back a slot taken by `try_enter`.
    fn exit(&self) {
        // Relaxed: see `try_enter`.
        let before = self.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a slot is held");
    }

    /// Takes a slot and `cost` units of rate, or says why not: `Err(Some(wait))` for the
    /// rate (wait in ns from `now`), `Err(None)` for a full shard.
    ///
    /// The rate is checked first without taking it, so a rate-limited shard never touches
    /// its slot count; if the rate runs out between that check and the commit (another
    /// thread took it), the slot just taken is given back. In that short window the slot
    /// looks taken and a concurrent caller may be refused: conservative, never over.
    fn try_take(
        &self,
        limit: u32,
        rate: Option<(ShardRate, u64)>,
        now: u64,
        cost: u32,
    ) -> Result<(), Option<u64>> {
        let Some((rate, tolerance)) = rate else {
            return if self.try_enter(limit) { Ok(()) } else { Err(None) };
        };
        let now = self.clock.observe(now);
        let decide = |tat| gcra_decide(tat, now, rate.emission_ns, tolerance, cost);
        // Relaxed: the GCRA word orders nothing but itself; the CAS makes updates atomic.
        let mut tat = self.tat.load(Ordering::Relaxed);
        decide(tat).map_err(Some)?;
        if !self.try_enter(limit) {
            return Err(None);
        }
        loop {
            match decide(tat) {
                Ok(new) => match self.tat.compare_exchange_weak(
                    tat,
                    new,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(()),
                    Err(current) => tat = current,
                },
                Err(wait) => {
                    self.exit();
                    return Err(Some(wait));
                }
            }
        }
    }
}

/// A snapshot of a [`KeyedLimits`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedMetrics<const N: usize, const K: usize> {
    /// Permits granted.
    pub admitted: u64,
    /// Refusals with [`Reason::KeyLimit`].
    pub rejected_key_limit: u64,
    /// Refusals with [`Reason::KeyRate`].
    pub rejected_key_rate: u64,
    /// Releases refused as [`UsageError::ForeignHandle`].
    pub foreign_releases: u64,
    /// Permits currently held, over all shards.
    pub in_flight: u64,
    /// Shards at their cap.
    pub full_shards: u32,
    /// Occupancy of each shard.
    pub shard_in_flight: [u32; N],
    /// The keys refused most (by this table, and by the global admission when composed
    /// through [`KeyedLimits::try_acquire_then`]).
    pub top_keys: TopKeysMetrics<K>,
}

impl<const N: usize, const K: usize> KeyedMetrics<N, K> {
    /// Refusals by `reason` (0 for reasons this table never gives).
    pub const fn rejected(&self, reason: Reason) -> u64 {
        match reason {
            Reason::KeyLimit => self.rejected_key_limit,
            Reason::KeyRate => self.rejected_key_rate,
            _ => 0,
        }
    }
}

/// Per-key concurrency caps and GCRA rate limits in a fixed table of `N` shards,
/// shuffle-sharded, with a heavy-hitters summary of the `K` most refused keys.
///
/// A key (its 64-bit hash, see [`hash_key`]) maps to `k` distinct shards
/// ([`shards_of`](Self::shards_of)); [`try_acquire`](Self::try_acquire) takes a slot in
/// the least occupied of them that has room (and rate, if [`KeyedConfig::shard_rate`] is
/// set), or refuses with [`Reason::KeyLimit`] / [`Reason::KeyRate`]. So:
/// - a shard never holds more than `shard_limit` permits, even in a race, and never
///   admits more than its GCRA allows (`burst + T / emission` units in any span `T`);
/// - a key never holds more than `k × shard_limit` ([`key_limit`](Self::key_limit)) nor
///   gets more than `k` shards' rate;
/// - keys whose shard sets overlap share those shards' room (fixed memory makes this
///   unavoidable): a key sharing all `k` shards with a saturating key is shut out, a key
///   sharing some keeps the rest. One saturating key shuts out a fraction `1/C(N, k)` of
///   the other keys and touches `1 − C(N−k, k)/C(N, k)` of them; see [`isolation`] for the
///   table. With `k = 1` (plain hashing) a colliding key is shut out — a fraction `1/N`.
///
/// Check the key first, then the global admission (the Gate), so a noisy key's surplus
/// never reaches the global queue — [`try_acquire_then`](Self::try_acquire_then):
///
/// ```
/// use std::cell::Cell;
/// use surgeguard_core::keyed::{actionable, hash_key, KeyedConfig, KeyedLimits};
/// use surgeguard_core::{Reason, Rejected};
///
/// // 64 shards, one slot each, two shards per key: a key holds at most 2.
/// let keyed = KeyedLimits::<64>::new(KeyedConfig::new(1)).unwrap();
/// // A stand-in for the Gate's admission: 3 global slots.
/// let global_in_flight = Cell::new(0);
/// let global = || {
///     if global_in_flight.get() < 3 {
///         global_in_flight.set(global_in_flight.get() + 1);
///         Ok(())
///     } else {
///         Err(Rejected::new(Reason::LimitReached, 0))
///     }
/// };
/// let (a, b) = (hash_key(7, b"tenant-a"), hash_key(7, b"tenant-b"));
/// assert!(keyed.shards_of(a) != keyed.shards_of(b)); // with these seeds
///
/// let a1 = keyed.try_acquire_then(a, 0, 1, global).unwrap();
/// let a2 = keyed.try_acquire_then(a, 0, 1, global).unwrap();
/// for _ in 0..2 {
///     let refused = keyed.try_acquire_then(a, 0, 1, global).unwrap_err();
///     assert_eq!(refused.reason, Reason::KeyLimit); // tenant a is at its own cap
///     assert_eq!(actionable(&refused).status, 429);
/// }
///
/// let b1 = keyed.try_acquire_then(b, 0, 1, global).unwrap(); // b is unaffected
/// let refused = keyed.try_acquire_then(b, 0, 1, global).unwrap_err();
/// assert_eq!(refused.reason, Reason::LimitReached); // the global admission refused
/// assert_eq!(actionable(&refused).status, 503);
///
/// // Release both: the key's permit here, the global one where it came from.
/// for (permit, ()) in [a1, a2, b1] {
///     keyed.release(permit).unwrap();
///     global_in_flight.set(global_in_flight.get() - 1);
/// }
/// assert_eq!(keyed.metrics().in_flight, 0);
/// let top = keyed.metrics().top_keys;
/// assert_eq!((top.top[0].key_hash, top.top[0].count), (a, 2)); // refused most
/// assert_eq!((top.top[1].key_hash, top.top[1].count), (b, 1));
/// ```
///
/// Progress: lock-free. `try_acquire` does `k` relaxed loads and, per shard tried, one
/// compare-and-swap loop on the slot count (and with a rate, one `fetch_max` and one
/// compare-and-swap loop on the GCRA word), each retrying only when another thread changed
/// that word in between; a refusal adds one wait-free [`TopKeys`] update. `release` is
/// wait-free (one `fetch_sub`). No call waits for another thread.
///
/// Cost: `N` shards of 48 bytes plus `24·K + 32` bytes of summary; `try_acquire` about
/// `k` mixes, `O(k²)` compares and `k + 2` atomic operations when admitted at the first
/// shard (`k + 5` with a rate: the table's clock clamp too).
#[derive(Debug)]
#[repr(C)]
pub struct KeyedLimits<const N: usize, const K: usize = DEFAULT_TOP_KEYS> {
    config: KeyedConfig,
    /// The rate and its GCRA tolerance, if rate-limited (plain integers, so the table can
    /// live in memory shared between processes).
    rate: RateRule,
    id: u32,
    /// The latest `now` the table has seen (read only with a rate): an out-of-range `now`
    /// acts at it.
    clock: AtomicMonotonic,
    shards: [Shard; N],
    top: TopKeys<K>,
    foreign_releases: AtomicU64,
}

impl<const N: usize, const K: usize> KeyedLimits<N, K> {
    /// A table with every shard empty, or the [`ConfigError`] of a bad config.
    pub fn new(config: KeyedConfig) -> Result<Self, ConfigError> {
        let tolerance = config.validate(N)?;
        Ok(Self {
            config,
            rate: RateRule::new(config.shard_rate.map(|r| (r, tolerance))),
            id: crate::sync::next_instance_id(),
            clock: AtomicMonotonic::new(),
            shards: core::array::from_fn(|_| Shard::new()),
            top: TopKeys::new(),
            foreign_releases: AtomicU64::new(0),
        })
    }

    /// The configuration.
    pub const fn config(&self) -> &KeyedConfig {
        &self.config
    }

    /// The most permits one key can hold: `shards_per_key × shard_limit`.
    pub const fn key_limit(&self) -> u64 {
        self.config.shards_per_key as u64 * self.config.shard_limit as u64
    }

    /// The isolation math for this table's `N` and `k`.
    pub fn isolation(&self) -> Isolation {
        match isolation(N as u32, self.config.shards_per_key) {
            Some(iso) => iso,
            None => unreachable!("validated: 1 <= k <= N"),
        }
    }

    /// The `k` shards `key_hash` maps to (deterministic from the hash and the seed).
    pub fn shards_of(&self, key_hash: u64) -> ShardSet {
        shuffle::pick(key_hash, self.config.seed, N as u32, self.config.shards_per_key as usize)
    }

    /// Takes a slot for `key_hash` — and `cost` units of its rate, if rate-limited — in
    /// the least occupied of its shards that has both, or refuses: [`Reason::KeyRate`]
    /// with the shortest wait until one of the shards has the rate (if any shard was
    /// refused for rate), else [`Reason::KeyLimit`] with `limit_retry_after` (all `k` are
    /// full). A refusal is recorded in the top-keys summary.
    ///
    /// `now` is nanoseconds on the caller's monotonic clock; each shard treats a `now`
    /// older than one it has seen as the latest it has seen. `cost` weighs the rate only
    /// (a permit is one concurrency slot whatever the cost); `cost == 0` takes no rate, and
    /// a cost above the burst never conforms (`retry_after == u64::MAX`). Without a rate
    /// limit, `now` and `cost` are ignored. A `now` above [`MAX_NOW`](crate::time::MAX_NOW)
    /// is bad input: it acts at the latest time the table has seen.
    pub fn try_acquire(&self, key_hash: u64, now: u64, cost: u32) -> Result<KeyPermit, Rejected> {
        let rate = self.rate.get();
        let now = if rate.is_some() { self.clock.in_range_or_latest(now) } else { now };
        let set = self.shards_of(key_hash);
        let mut rate_wait: Option<u64> = None;
        for &shard in self.least_occupied_first(&set).as_slice() {
            let s = &self.shards[shard as usize];
            match s.try_take(self.config.shard_limit, rate, now, cost) {
                Ok(()) => {
                    // Relaxed: a statistic.
                    s.admitted.fetch_add(1, Ordering::Relaxed);
                    return Ok(KeyPermit { owner: self.id, shard, key_hash });
                }
                Err(Some(wait)) => rate_wait = Some(rate_wait.map_or(wait, |w| w.min(wait))),
                Err(None) => {}
            }
        }
        // Counted on the key's first shard to spread contention. Relaxed: statistics.
        let first = &self.shards[set.as_slice()[0] as usize];
        let rejected = match rate_wait {
            Some(wait) => {
                first.rejected_rate.fetch_add(1, Ordering::Relaxed);
                Rejected::new(Reason::KeyRate, wait)
            }
            None => {
                first.rejected_limit.fetch_add(1, Ordering::Relaxed);
                Rejected::new(Reason::KeyLimit, self.config.limit_retry_after)
            }
        };
        self.top.record(key_hash, 1);
        Err(rejected)
    }

    /// Checks the key first, then `global` (the Gate's admission, or any other), and
    /// returns both permits; on a global refusal the key's permit is released and the
    /// global [`Rejected`] is returned unchanged, so its reason names who refused
    /// ([`Reason::KeyLimit`] / [`Reason::KeyRate`] here, the Gate's reasons there). A
    /// global refusal is also recorded against the key in the top-keys summary. The key's
    /// rate (if any) stays spent: GCRA meters attempts that reached the key's check.
    ///
    /// `global` runs only if the key was admitted. A waiter the Gate queues should keep its
    /// key permit while it waits (map `Queued` into `Ok`), so one key cannot fill the
    /// global queue either. Release both when the work ends: the key permit with
    /// [`release`](Self::release), the global one where it came from.
    pub fn try_acquire_then<P>(
        &self,
        key_hash: u64,
        now: u64,
        cost: u32,
        global: impl FnOnce() -> Result<P, Rejected>,
    ) -> Result<(KeyPermit, P), Rejected> {
        let permit = self.try_acquire(key_hash, now, cost)?;
        match global() {
            Ok(p) => Ok((permit, p)),
            Err(rejected) => {
                let _ = self.release(permit);
                self.top.record(key_hash, 1);
                Err(rejected)
            }
        }
    }

    /// Returns a permit's slot. A permit from another table is refused with
    /// [`UsageError::ForeignHandle`] and changes nothing here.
    pub fn release(&self, permit: KeyPermit) -> Result<(), UsageError> {
        if permit.owner != self.id || permit.shard as usize >= N {
            // Relaxed: a statistic.
            self.foreign_releases.fetch_add(1, Ordering::Relaxed);
            return Err(UsageError::ForeignHandle);
        }
        // The permit is move-only and made only by `try_acquire` of this table, so its slot
        // is held. The rate is not refunded: GCRA meters arrivals.
        self.shards[permit.shard as usize].exit();
        Ok(())
    }

    /// Records a refusal of `key_hash` made elsewhere (say, by the Gate, when not composed
    /// through [`try_acquire_then`](Self::try_acquire_then)) in the top-keys summary.
    /// Returns false if the update was skipped because another thread was updating.
    pub fn record_rejection(&self, key_hash: u64) -> bool {
        self.top.record(key_hash, 1)
    }

    /// The key's shards, least occupied first (ties in draw order): `k` relaxed loads.
    fn least_occupied_first(&self, set: &ShardSet) -> ShardSet {
        let mut sorted = *set;
        let mut load = [0u32; MAX_SHARDS_PER_KEY];
        for (l, s) in load.iter_mut().zip(set.as_slice()) {
            // Relaxed: a hint for the order only; `try_enter` decides.
            *l = self.shards[*s as usize].in_flight.load(Ordering::Relaxed);
        }
        sorted.sort_by_key(&mut load);
        sorted
    }

    /// A snapshot. Wait-free; `O(N + K log K)`. Counters are read one by one, so a
    /// snapshot taken under traffic is not one instant.
    pub fn metrics(&self) -> KeyedMetrics<N, K> {
        let r = Ordering::Relaxed;
        let shard_in_flight: [u32; N] = core::array::from_fn(|i| self.shards[i].in_flight.load(r));
        let limit = self.config.shard_limit;
        KeyedMetrics {
            admitted: self.shards.iter().map(|s| s.admitted.load(r)).sum(),
            rejected_key_limit: self.shards.iter().map(|s| s.rejected_limit.load(r)).sum(),
            rejected_key_rate: self.shards.iter().map(|s| s.rejected_rate.load(r)).sum(),
            foreign_releases: self.foreign_releases.load(r),
            in_flight: shard_in_flight.iter().map(|&c| u64::from(c)).sum(),
            full_shards: shard_in_flight.iter().filter(|&&c| c >= limit).count() as u32,
            shard_in_flight,
            top_keys: self.top.metrics(),
        }
    }
}

impl<const N: usize, const K: usize> KeyedLimits<N, K> {
    /// A permit standing for one admitted on `shard` by a holder that can no longer
    /// release it (a worker process that died holding it, found by the `surgeguard`
    /// crate's shared-memory reclaimer). The caller must own exactly one admission on that
    /// shard that was never released: releasing a permit made here for nothing frees a
    /// slot someone else holds. `None` if `shard >= N`.
    #[doc(hidden)]
    pub fn reissue_permit(&self, shard: usize) -> Option<KeyPermit> {
        (shard < N).then_some(KeyPermit { owner: self.id, shard: shard as u32, key_hash: 0 })
    }

    /// Whether `permit` was issued by this table.
    pub fn owns(&self, permit: &KeyPermit) -> bool {
        permit.owner == self.id && (permit.shard as usize) < N
    }
}

// SAFETY: `#[repr(C)]` down to the atomics (the shards, the top-keys summary, the rate
// rule and the config too), no pointers and no `Drop`. The config, rate rule and id are
// written once, before publication; afterwards only atomics holding integers change, and
// the top-keys entries only under its one-at-a-time flag (a process token). LAYOUT covers
// `N`, `K` and every field's offset and size. What it cannot see is the encoding of the
// config's `Option<ShardRate>` (read by `config()` only; decisions read the rate rule).
#[cfg(all(not(loom), target_has_atomic = "64"))]
#[allow(unsafe_code)]
unsafe impl<const N: usize, const K: usize> crate::layout::Placeable for KeyedLimits<N, K> {
    const LAYOUT: u64 = {
        use core::mem::{align_of, offset_of, size_of};
        crate::layout::fingerprint(
            "surgeguard_core::keyed::KeyedLimits/1",
            &[
                N as u64,
                K as u64,
                size_of::<Self>() as u64,
                align_of::<Self>() as u64,
                size_of::<KeyedConfig>() as u64,
                offset_of!(KeyedConfig, shards_per_key) as u64,
                offset_of!(KeyedConfig, shard_limit) as u64,
                offset_of!(KeyedConfig, limit_retry_after) as u64,
                offset_of!(KeyedConfig, seed) as u64,
                offset_of!(KeyedConfig, shard_rate) as u64,
                size_of::<RateRule>() as u64,
                offset_of!(RateRule, emission_ns) as u64,
                offset_of!(RateRule, tolerance) as u64,
                offset_of!(RateRule, burst) as u64,
                offset_of!(RateRule, on) as u64,
                size_of::<Shard>() as u64,
                offset_of!(Shard, in_flight) as u64,
                offset_of!(Shard, tat) as u64,
                offset_of!(Shard, clock) as u64,
                offset_of!(Shard, admitted) as u64,
                offset_of!(Shard, rejected_limit) as u64,
                offset_of!(Shard, rejected_rate) as u64,
                size_of::<TopKeys<K>>() as u64,
                offset_of!(Self, config) as u64,
                offset_of!(Self, rate) as u64,
                offset_of!(Self, id) as u64,
                offset_of!(Self, clock) as u64,
                offset_of!(Self, shards) as u64,
                offset_of!(Self, top) as u64,
                offset_of!(Self, foreign_releases) as u64,
            ],
        )
    };

    #[inline]
    fn fold_cells<'a>(&'a self, f: &mut dyn FnMut(crate::layout::FoldCell<'a>)) {
        f(crate::layout::FoldCell(self.top.flag()));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::vec::Vec;

    #[test]
    fn bad_configs_are_refused() {
        let ok = KeyedConfig::new(4);
        assert!(KeyedLimits::<8>::new(ok).is_ok());
        assert_eq!(
            KeyedLimits::<0>::new(ok).unwrap_err(),
            ConfigError::out_of_range("keyed.shards")
        );
        for bad in [
            KeyedConfig { shards_per_key: 0, ..ok },
            KeyedConfig { shards_per_key: 9, ..ok },
            KeyedConfig { shard_limit: 0, ..ok },
            KeyedConfig { shard_limit: MAX_SHARD_LIMIT + 1, ..ok },
            KeyedConfig { limit_retry_after: MAX_RETRY_AFTER + 1, ..ok },
        ] {
            assert!(KeyedLimits::<8>::new(bad)
                .is_err_and(|e| e.kind == crate::ConfigErrorKind::OutOfRange));
        }
        let k3 = KeyedConfig { shards_per_key: 3, ..ok };
        assert!(KeyedLimits::<2>::new(k3)
            .is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent));
        assert!(KeyedLimits::<3>::new(k3).is_ok());
    }

    #[test]
    fn a_lone_key_fills_exactly_its_own_shards() {
        for k in 1..=4u32 {
            let cfg = KeyedConfig { shards_per_key: k, seed: u64::from(k), ..KeyedConfig::new(3) };
            let t = KeyedLimits::<8>::new(cfg).unwrap();
            let key = hash_key(5, b"noisy");
            let set = t.shards_of(key);
            let mut held = Vec::new();
            while let Ok(p) = t.try_acquire(key, 0, 1) {
                assert!(set.contains(p.shard() as u32));
                assert_eq!(p.key_hash(), key);
                held.push(p);
            }
            assert_eq!(held.len() as u64, t.key_limit());
            let m = t.metrics();
            assert_eq!(m.full_shards, k);
            for (i, &c) in m.shard_in_flight.iter().enumerate() {
                assert_eq!(c, if set.contains(i as u32) { 3 } else { 0 });
            }
            let r = t.try_acquire(key, 0, 1).unwrap_err();
            assert_eq!(r, Rejected::new(Reason::KeyLimit, SEC));
            assert_eq!(t.metrics().rejected(Reason::KeyLimit), 2);
            assert_eq!(t.metrics().top_keys.top[0], KeyCount { key_hash: key, count: 2, error: 0 });
            for p in held.drain(..) {
                t.release(p).unwrap();
            }
            let m = t.metrics();
            assert_eq!((m.in_flight, m.admitted, m.full_shards), (0, t.key_limit(), 0));
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn load_spreads_over_a_keys_shards() {
        let t = KeyedLimits::<16>::new(KeyedConfig { shards_per_key: 4, ..KeyedConfig::new(10) })
            .unwrap();
        let held: Vec<_> = (0..8).map(|_| t.try_acquire(99, 0, 1).unwrap()).collect();
        for s in t.shards_of(99).as_slice() {
            assert_eq!(t.metrics().shard_in_flight[*s as usize], 2);
        }
        for p in held {
            t.release(p).unwrap();
        }
    }

    #[test]
    fn foreign_permits_are_refused_and_change_nothing() {
        let a = KeyedLimits::<4>::new(KeyedConfig::new(1)).unwrap();
        let b = KeyedLimits::<4>::new(KeyedConfig::new(1)).unwrap();
        let pa = a.try_acquire(1, 0, 1).unwrap();
        let pb = b.try_acquire(1, 0, 1).unwrap();
        let before = (a.metrics(), b.metrics());
        assert_eq!(a.release(pb), Err(UsageError::ForeignHandle));
        assert_eq!(a.metrics().foreign_releases, 1);
        assert_eq!(a.metrics().shard_in_flight, before.0.shard_in_flight);
        assert_eq!(b.metrics(), before.1);
        assert_eq!(a.release(pa), Ok(()));
        assert_eq!(a.metrics().in_flight, 0);
    }

    #[test]
    fn a_global_refusal_returns_the_key_slot() {
        let t = KeyedLimits::<4>::new(KeyedConfig::new(1)).unwrap();
        let r = t.try_acquire_then(3, 0, 1, || Err::<(), _>(Rejected::new(Reason::Shed, 7)));
        assert_eq!(r.unwrap_err(), Rejected::new(Reason::Shed, 7));
        let m = t.metrics();
        assert_eq!((m.in_flight, m.admitted, m.rejected_key_limit), (0, 1, 0));
        assert_eq!(m.top_keys.top[0].key_hash, 3);
        let mut ran = false;
        let held: Vec<_> = (0..2).map(|_| t.try_acquire(3, 0, 1).unwrap()).collect();
        let r = t.try_acquire_then(3, 0, 1, || {
            ran = true;
            Ok(())
        });
        assert_eq!(r.unwrap_err().reason, Reason::KeyLimit);
        assert!(!ran, "the global admission is not asked when the key is refused");
        assert!(t.record_rejection(3));
        assert_eq!(t.metrics().top_keys.top[0].count, 3);
        for p in held {
            t.release(p).unwrap();
        }
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn hash_key_separates_keys_seeds_and_lengths() {
        let mut seen = HashSet::new();
        let keys = if cfg!(miri) { 200 } else { 20_000 }; // Miri: the same checks, fewer keys
        for i in 0..keys {
            let s = std::format!("tenant-{i}");
            assert!(seen.insert(hash_key(0, s.as_bytes())), "{s}");
        }
        let mut lens = HashSet::new();
        for n in 0..40 {
            assert!(lens.insert(hash_key(0, &[0u8; 40][..n])), "length {n}");
        }
        assert_ne!(hash_key(0, b"a"), hash_key(0, b"a\0"));
        assert_ne!(hash_key(1, b""), hash_key(2, b""));
        // Avalanche: flipping one input bit flips about half of the output bits.
        let base = *b"agent-0123456789";
        let (mut flips, mut trials) = (0u32, 0u32);
        for bit in 0..base.len() * 8 {
            let mut x = base;
            x[bit / 8] ^= 1 << (bit % 8);
            flips += (hash_key(9, &x) ^ hash_key(9, &base)).count_ones();
            trials += 1;
        }
        let mean = f64::from(flips) / f64::from(trials);
        assert!((mean - 32.0).abs() < 3.0, "mean flipped bits {mean}");
    }

    #[test]
    fn bad_rates_are_refused() {
        let rated = |rate| KeyedConfig { shard_rate: Some(rate), ..KeyedConfig::new(4) };
        for (rate, err) in [
            (ShardRate { emission_ns: 0, burst: 1 }, "keyed.shard_rate.emission_ns"),
            (ShardRate { emission_ns: MAX_EMISSION + 1, burst: 1 }, "keyed.shard_rate.emission_ns"),
            (ShardRate { emission_ns: 1, burst: 0 }, "keyed.shard_rate.burst"),
            (ShardRate { emission_ns: 1, burst: MAX_BURST + 1 }, "keyed.shard_rate.burst"),
        ] {
            assert_eq!(
                KeyedLimits::<4>::new(rated(rate)).unwrap_err(),
                ConfigError::out_of_range(err)
            );
        }
        let overflow = ShardRate { emission_ns: MAX_EMISSION, burst: MAX_BURST };
        assert_eq!(
            std::string::ToString::to_string(&KeyedLimits::<4>::new(rated(overflow)).unwrap_err()),
            "keyed.shard_rate.burst is too large for keyed.shard_rate.emission_ns"
        );
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0, 2e9] {
            assert!(ShardRate::per_second(bad, 1).is_err(), "{bad}");
        }
        assert!(ShardRate::per_second(1.0, 0).is_err());
        assert_eq!(ShardRate::per_second(1e9, 1), Ok(ShardRate { emission_ns: 1, burst: 1 }));
    }

    #[test]
    fn a_key_over_its_rate_is_told_when_to_come_back() {
        let rate = ShardRate { emission_ns: 100, burst: 2 };
        let (emission, tolerance) = (rate.emission_ns, rate.emission_ns);
        for k in 1..=3u32 {
            let cfg =
                KeyedConfig { shards_per_key: k, shard_rate: Some(rate), ..KeyedConfig::new(50) };
            let t = KeyedLimits::<4>::new(cfg).unwrap();
            let now = 10_000;
            // Each of the key's k shards admits a burst of 2 at one instant.
            let held: Vec<_> = (0..2 * k).map(|_| t.try_acquire(5, now, 1).unwrap()).collect();
            let r = t.try_acquire(5, now, 1).unwrap_err();
            // Every shard's tat is now + 2·emission: the wait is what GCRA says for that.
            let expect = gcra_decide(now + 2 * emission, now, emission, tolerance, 1).unwrap_err();
            assert_eq!(r, Rejected::new(Reason::KeyRate, expect));
            assert_eq!(t.metrics().in_flight, u64::from(2 * k), "a refusal holds no slot");
            // Time running backwards changes nothing: the shards clamp to the latest now.
            assert_eq!(t.try_acquire(5, 0, 1).unwrap_err(), r);
            // After the wait one more unit conforms on each shard.
            let later = now + expect;
            let more: Vec<_> = (0..k).map(|_| t.try_acquire(5, later, 1).unwrap()).collect();
            assert_eq!(t.try_acquire(5, later, 1).unwrap_err().reason, Reason::KeyRate);
            assert_eq!(t.try_acquire(5, later, 3).unwrap_err().retry_after, u64::MAX);
            // Cost 0 takes no rate.
            let free = t.try_acquire(5, later, 0).unwrap();
            let m = t.metrics();
            assert_eq!((m.rejected(Reason::KeyRate), m.rejected(Reason::KeyLimit)), (4, 0));
            assert_eq!(m.admitted, u64::from(3 * k + 1));
            for p in held.into_iter().chain(more).chain([free]) {
                t.release(p).unwrap();
            }
            assert_eq!(t.metrics().in_flight, 0);
        }
    }

    #[test]
    fn full_shards_say_key_limit_rate_limited_ones_say_key_rate() {
        // k = 2, one slot per shard, a burst of 1 per shard.
        let rate = ShardRate { emission_ns: SEC, burst: 1 };
        let cfg = KeyedConfig { shard_rate: Some(rate), ..KeyedConfig::new(1) };
        let t = KeyedLimits::<2>::new(cfg).unwrap();
        let a = t.try_acquire(1, 0, 1).unwrap();
        let b = t.try_acquire(1, 0, 1).unwrap();
        t.release(a).unwrap();
        // One shard has a slot but no rate, the other neither: the rate is the answer.
        let r = t.try_acquire(1, SEC / 2, 1).unwrap_err();
        assert_eq!(r, Rejected::new(Reason::KeyRate, SEC / 2));
        // Rate back on both, a slot on one only: admitted there.
        let c = t.try_acquire(1, SEC, 1).unwrap();
        assert_ne!(c.shard(), b.shard());
        // Both full, both with rate again: the limit is the answer.
        let r = t.try_acquire(1, 3 * SEC, 1).unwrap_err();
        assert_eq!(r, Rejected::new(Reason::KeyLimit, cfg.limit_retry_after));
        t.release(b).unwrap();
        t.release(c).unwrap();
    }

    #[test]
    fn a_shard_is_48_bytes() {
        assert_eq!(core::mem::size_of::<Shard>(), 48);
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn table_isolation_matches_the_free_function() {
        let t = KeyedLimits::<64, 4>::new(KeyedConfig { shards_per_key: 3, ..KeyedConfig::new(1) })
            .unwrap();
        assert_eq!(t.isolation(), isolation(64, 3).unwrap());
        assert_eq!(t.config().shards_per_key, 3);
        assert_eq!(t.key_limit(), 3);
    }
}
