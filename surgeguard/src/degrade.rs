//! Graceful degradation: answer something useful when a dependency refuses, is cut off by
//! its breaker, or runs out of time — and only then.
//!
//! - [`with_fallback`]: runs a fallback (a precomputed default, a cached value, a cheaper
//!   path) when the primary call fails with an error that [`Degrade`] says is a refusal,
//!   an open breaker, a deadline or a failed dependency; any other error (a usage error, a
//!   bug) is returned as is, never hidden behind a default.
//! - [`StaleIfError`]: a bounded cache of the last good value per key, served — marked
//!   stale — when the origin fails that way (RFC 5861's `stale-if-error`, as a library).
//!
//! Both are the "degrade gracefully" advice of the Google SRE book ("Addressing Cascading
//! Failures") and Netflix Hystrix's fallbacks; the brownout dimmer
//! ([`Gate::brownout`](crate::Gate::brownout), [`Gate::serve_optional`](crate::Gate::serve_optional))
//! says *when* to switch optional work off, before the gate has to refuse requests.
//!
//! ```
//! use surgeguard::degrade::with_fallback;
//! use surgeguard::{Reason, Rejected};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let refused = async { Err::<Vec<&str>, _>(Rejected::new(Reason::BreakerOpen, 1_000)) };
//! let recs = with_fallback(refused, |_e| async { Ok(vec!["bestsellers"]) }).await;
//! assert_eq!(recs.unwrap(), ["bestsellers"]);
//! # }
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use surgeguard_core::{ConfigError, Rejected, UsageError};

use crate::clock::{Clock, MonotonicClock};

/// Which errors a fallback may answer for: refusals (overload, an open breaker, a retry
/// budget, a rate limit), deadlines, and a dependency that failed — the cases whose
/// outcome is `Dropped` or that were refused before any work. Never usage or configuration
/// errors: those are bugs, and a default would hide them.
///
/// Implement it for your own error type to use it with [`with_fallback`] and
/// [`StaleIfError`].
///
/// ```
/// use surgeguard::degrade::Degrade;
/// use surgeguard::{Reason, Rejected, UsageError};
/// assert!(Rejected::new(Reason::DeadlineUnmeetable, 0).should_degrade());
/// assert!(!UsageError::TimeOutOfRange.should_degrade());
/// ```
pub trait Degrade {
    /// Whether a fallback (or a stale value) may answer instead of this error.
    fn should_degrade(&self) -> bool;
}

impl Degrade for Rejected {
    /// Every refusal: its reason is overload, a breaker, a budget, a limit or a deadline.
    fn should_degrade(&self) -> bool {
        true
    }
}

impl Degrade for UsageError {
    fn should_degrade(&self) -> bool {
        false
    }
}

impl Degrade for ConfigError {
    fn should_degrade(&self) -> bool {
        false
    }
}

#[cfg(feature = "tokio")]
impl Degrade for crate::deadline::DeadlineExceeded {
    fn should_degrade(&self) -> bool {
        true
    }
}

#[cfg(feature = "tokio")]
impl Degrade for tokio::time::error::Elapsed {
    /// A timeout is a deadline.
    fn should_degrade(&self) -> bool {
        true
    }
}

#[cfg(feature = "tower")]
impl<E> Degrade for crate::tower::ClientError<E> {
    /// A local refusal (breaker, throttle, limit, deadline) or the dependency failing
    /// (a transport error: the call's outcome is `Dropped`).
    fn should_degrade(&self) -> bool {
        true
    }
}

/// Awaits `primary`; if it fails with an error that [`Degrade`] accepts, returns
/// `fallback(error)` instead (which may itself give the error back, e.g. on a cache miss).
/// Other errors and successes pass through untouched; `fallback` is not called.
///
/// ```
/// use surgeguard::degrade::with_fallback;
/// use surgeguard::UsageError;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // A usage error is a bug: no fallback.
/// let bug = async { Err::<u32, _>(UsageError::TimeOutOfRange) };
/// let r = with_fallback(bug, |_| async { Ok(0) }).await;
/// assert_eq!(r, Err(UsageError::TimeOutOfRange));
/// # }
/// ```
pub async fn with_fallback<T, E, F, G, GF>(primary: F, fallback: G) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: Degrade,
    G: FnOnce(E) -> GF,
    GF: Future<Output = Result<T, E>>,
{
    match primary.await {
        Err(e) if e.should_degrade() => fallback(e).await,
        other => other,
    }
}

/// What [`StaleIfError::get`] served: a fresh value from the origin, or the last good one
/// (`stale`, `age` old) because the origin failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served<V> {
    /// The value.
    pub value: V,
    /// Whether it is a stored value served because the origin failed.
    pub stale: bool,
    /// How long ago it was fetched (zero for a fresh value).
    pub age: Duration,
}

/// Counters of a [`StaleIfError`] cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StaleMetrics {
    /// Fresh values served (and stored).
    pub fresh: u64,
    /// Stale values served in place of a failure.
    pub stale: u64,
    /// Failures with no stored value young enough: the error was returned.
    pub misses: u64,
    /// Entries evicted to stay within `max_entries`.
    pub evicted: u64,
}

struct Slot<V> {
    value: V,
    stored_at: u64,
    seq: u64,
}

struct Store<K, V> {
    map: HashMap<K, Slot<V>>,
    /// Keys in the order they were stored, with the store's sequence number; an entry
    /// whose seq no longer matches the map's is stale and skipped.
    order: VecDeque<(u64, K)>,
    next_seq: u64,
}

/// A bounded cache of the last good value per key, served — marked stale — when the
/// origin fails with an error [`Degrade`] accepts (RFC 5861 `stale-if-error`).
///
/// - **Bounds.** At most `max_entries` values; storing one more evicts the least recently
///   stored. A value older than `max_age` is never served (and is dropped when seen).
///   Memory: at most `max_entries` hash-map entries of `K`, `V` and 16 bytes (plus the
///   map's slack: up to 8/7 as many buckets and one control byte each), an order queue of
///   at most `2 × max_entries` (`u64`, `K`) pairs, and whatever heap your `K` and `V` own.
/// - **Cost and progress.** One `Mutex` held for a map operation (no await, no user code
///   inside): *blocking*, not lock-free. Storing is O(1) amortised.
///
/// ```
/// use std::time::Duration;
/// use surgeguard::degrade::StaleIfError;
/// use surgeguard::{Reason, Rejected};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let cache = StaleIfError::new(1_000, Duration::from_secs(300)).unwrap();
/// let fresh = cache.get("eur", async { Ok::<_, Rejected>(1.08) }).await.unwrap();
/// assert!(!fresh.stale);
/// let served = cache
///     .get("eur", async { Err(Rejected::new(Reason::BreakerOpen, 1_000)) })
///     .await
///     .unwrap();
/// assert!(served.stale);
/// assert_eq!(served.value, 1.08);
/// # }
/// ```
pub struct StaleIfError<K, V, C: Clock = MonotonicClock> {
    store: Mutex<Store<K, V>>,
    max_entries: usize,
    max_age: u64,
    clock: C,
    fresh: AtomicU64,
    stale: AtomicU64,
    misses: AtomicU64,
    evicted: AtomicU64,
}

impl<K, V, C: Clock> fmt::Debug for StaleIfError<K, V, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaleIfError")
            .field("max_entries", &self.max_entries)
            .field("max_age_ns", &self.max_age)
            .field("metrics", &self.metrics())
            .finish()
    }
}

impl<K: Hash + Eq + Clone, V: Clone> StaleIfError<K, V> {
    /// A cache of at most `max_entries` (≥ 1) values, each served at most `max_age` after
    /// it was fetched (more than zero), on the monotonic clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use surgeguard::degrade::StaleIfError;
    /// assert!(StaleIfError::<u32, u32>::new(0, Duration::from_secs(1)).is_err());
    /// assert!(StaleIfError::<u32, u32>::new(10, Duration::ZERO).is_err());
    /// ```
    pub fn new(max_entries: usize, max_age: Duration) -> Result<Self, ConfigError> {
        Self::with_clock(max_entries, max_age, MonotonicClock)
    }
}

impl<K: Hash + Eq + Clone, V: Clone, C: Clock> StaleIfError<K, V, C> {
    /// The same on `clock`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use surgeguard::{clock::ManualClock, degrade::StaleIfError};
    /// let c = StaleIfError::<u32, u32, _>::with_clock(8, Duration::from_secs(1), ManualClock::new(1));
    /// assert!(c.is_ok());
    /// ```
    pub fn with_clock(
        max_entries: usize,
        max_age: Duration,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if max_entries == 0 {
            return Err(ConfigError::out_of_range("stale_if_error.max_entries"));
        }
        let max_age = u64::try_from(max_age.as_nanos()).unwrap_or(u64::MAX);
        if max_age == 0 {
            return Err(ConfigError::out_of_range("stale_if_error.max_age"));
        }
        Ok(Self {
            store: Mutex::new(Store { map: HashMap::new(), order: VecDeque::new(), next_seq: 0 }),
            max_entries,
            max_age,
            clock,
            fresh: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store<K, V>> {
        // Every update leaves the store consistent: a poisoned lock is used as is.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Awaits `fetch`: on success stores and returns the value (fresh); on an error
    /// [`Degrade`] accepts, returns the last good value for `key` if it is younger than
    /// `max_age` (stale), else the error; any other error is returned as is.
    pub async fn get<E, F>(&self, key: K, fetch: F) -> Result<Served<V>, E>
    where
        F: Future<Output = Result<V, E>>,
        E: Degrade,
    {
        match fetch.await {
            Ok(value) => {
                self.put(key, value.clone());
                self.fresh.fetch_add(1, Ordering::Relaxed);
                Ok(Served { value, stale: false, age: Duration::ZERO })
            }
            Err(e) if e.should_degrade() => match self.last_good(&key) {
                Some((value, age)) => {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                    Ok(Served { value, stale: true, age })
                }
                None => {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    Err(e)
                }
            },
            Err(e) => Err(e),
        }
    }

    /// Stores `value` as the last good one for `key` (evicting the least recently stored
    /// entry if the cache is full).
    ///
    /// ```
    /// # let c = surgeguard::degrade::StaleIfError::new(1, std::time::Duration::from_secs(9)).unwrap();
    /// c.put("a", 1);
    /// c.put("b", 2); // evicts "a"
    /// assert_eq!(c.len(), 1);
    /// assert!(c.last_good(&"a").is_none());
    /// ```
    pub fn put(&self, key: K, value: V) {
        let now = self.clock.now_ns();
        let mut evicted = 0;
        let mut s = self.lock();
        let s = &mut *s;
        let seq = s.next_seq;
        s.next_seq += 1;
        let new_key = s.map.insert(key.clone(), Slot { value, stored_at: now, seq }).is_none();
        s.order.push_back((seq, key));
        if new_key {
            // Evict the least recently stored live entries until within bounds.
            while s.map.len() > self.max_entries {
                let Some((seq, k)) = s.order.pop_front() else { break };
                if s.map.get(&k).is_some_and(|slot| slot.seq == seq) {
                    s.map.remove(&k);
                    evicted += 1;
                }
            }
        }
        if s.order.len() > 2 * self.max_entries {
            // Drop the superseded order entries (one per re-store of a key).
            let map = &s.map;
            s.order.retain(|(seq, k)| map.get(k).is_some_and(|slot| slot.seq == *seq));
        }
        if evicted > 0 {
            self.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// The last good value for `key` and its age, if younger than `max_age` (an older one
    /// is removed).
    ///
    /// ```
    /// # let c = surgeguard::degrade::StaleIfError::new(4, std::time::Duration::from_secs(9)).unwrap();
    /// c.put(7, "seven");
    /// assert_eq!(c.last_good(&7).unwrap().0, "seven");
    /// assert!(c.last_good(&8).is_none());
    /// ```
    pub fn last_good(&self, key: &K) -> Option<(V, Duration)> {
        let now = self.clock.now_ns();
        let mut s = self.lock();
        let slot = s.map.get(key)?;
        let age = now.saturating_sub(slot.stored_at);
        if age >= self.max_age {
            s.map.remove(key);
            return None;
        }
        Some((slot.value.clone(), Duration::from_nanos(age)))
    }

    /// Values stored (some may be too old to serve until looked up).
    ///
    /// ```
    /// # let c = surgeguard::degrade::StaleIfError::<u8, u8>::new(4, std::time::Duration::from_secs(9)).unwrap();
    /// assert!(c.is_empty());
    /// ```
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries in the order queue (bounded by `2 × max_entries + 1`): for tests.
    #[doc(hidden)]
    pub fn order_len(&self) -> usize {
        self.lock().order.len()
    }
}

impl<K, V, C: Clock> StaleIfError<K, V, C> {
    /// The counters.
    ///
    /// ```
    /// # let c = surgeguard::degrade::StaleIfError::<u8, u8>::new(4, std::time::Duration::from_secs(9)).unwrap();
    /// assert_eq!(c.metrics().stale, 0);
    /// ```
    pub fn metrics(&self) -> StaleMetrics {
        StaleMetrics {
            fresh: self.fresh.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }
}
