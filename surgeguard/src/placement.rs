//! One object, several placements: [`Placed<T>`] is a core object owned by this process
//! ([`Placement::Local`]) or the same core object in a segment every worker on the host
//! maps (`Placement::Shared`, `Placement::Anonymous`; feature `shm`, Linux). Either way
//! it makes the same decisions for the same operations: a shared object *is* the core's
//! structure, placed in shared memory (see the `shm` module).
//!
//! The bindings hold a `Placed<T>` in each family's one handle type (C's `sg_rate_limiter`,
//! Python's `RateLimiter`, ...), so a family has one API whatever its placement:
//!
//! | family | `Placed<…>` | how it is used |
//! |---|---|---|
//! | rate limiter, retry budget | [`Placed<RateLimiter>`], [`Placed<RetryBudget>`] | `Deref`s to the core type: call it as the in-process one |
//! | limiter | [`Placed<Limiter>`] | [`try_acquire_raw`](Placed::try_acquire_raw) / [`release_raw`](Placed::release_raw): a shared permit is counted to its process, so a dead worker's come back |
//! | keyed limits | [`Placed<KeyedLimits<N, K>>`](Placed) | [`try_acquire_key`](Placed::try_acquire_key) / [`release_key`](Placed::release_key): counted the same way |
//!
//! ```
//! use surgeguard::core::rate::{RateLimiter, RateLimiterConfig};
//! use surgeguard::placement::{Placed, Placement};
//!
//! let cfg = RateLimiterConfig { per_second: 10.0, burst: 2 };
//! let rate = Placed::<RateLimiter>::open(Placement::Local, cfg).unwrap();
//! assert!(rate.check(0, 1).is_ok()); // the core's own method, through `Deref`
//! assert!(!rate.is_shared());
//! ```
//!
//! The Gate is not a `Placed<T>`: a shared gate's queue holds waiters of any process and
//! hands grants to them through per-process mailboxes and futexes, which an in-process
//! gate has no use for, so `shm::SharedGate` is its own type.
//!
//! **Cost.** The local placement is the core object inline (no box, no indirection); each
//! call is one `match` on the placement before the core's own code. A shared object's
//! calls add what the `shm` module documents (a check of the one-at-a-time cells; for
//! the limiter and keyed limits, the per-process count).
//!
//! **Where a fleet placement goes.** A third variant, `Fleet`, would hold the same core
//! object fed by a lease pool: capacity leased from a central store (a limit's slots, a
//! rate's tokens, a budget's retries), spent by the core's local decisions, refilled off
//! the request path by a refiller the binding runs. It extends [`Place`] with the fleet
//! object type and [`Placement`] with the store's name; the families' handle types and
//! their methods stay as they are, and the per-call `match` gains one arm.
//! The `fleet` module's `FleetRateLimiter` (feature `fleet`: a core `TokenLease` refilled
//! from Redis by a tokio task) is the first such object; as the rate limiter's third arm
//! it maps its `try_take` decisions onto `check`.

use surgeguard_core::keyed::{KeyPermit, KeyedConfig, KeyedLimits};
use surgeguard_core::rate::{RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::{ConfigError, Limiter, LimiterConfig, Outcome, Priority, RawPermit};

#[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
use crate::shm::{
    SharedKeyPermit, SharedKeyedLimits, SharedLimiter, SharedRateLimiter, SharedRawPermit,
    SharedRetryBudget,
};

/// Why an object could not be placed or used: with shared memory built in, a
/// `shm::ShmError` (a config error is its `Config` variant).
#[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
pub type PlaceError = crate::shm::ShmError;

/// Why an object could not be placed or used: without shared memory (another OS, or the
/// `shm` feature off) only the local placement exists; the variants are those of
/// `ShmError` that it can meet.
#[cfg(not(all(feature = "shm", target_os = "linux", target_has_atomic = "64")))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlaceError {
    /// The config is invalid.
    Config(ConfigError),
    /// The call was refused (bad `now`, foreign permit).
    Usage(surgeguard_core::UsageError),
    /// Admission refused: why, and when to retry.
    Rejected(surgeguard_core::Rejected),
}

#[cfg(not(all(feature = "shm", target_os = "linux", target_has_atomic = "64")))]
impl From<ConfigError> for PlaceError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

/// Where an object lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement<'a> {
    /// In this process only.
    Local,
    /// In the segment `name`: a bare name is the file `/dev/shm/surgeguard.NAME`, a name
    /// with a `/` is a path. Created by the first process, attached by the others
    /// (race-free); another config is refused.
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    Shared(&'a str),
    /// In anonymous `MAP_SHARED` memory, shared with the processes this one forks
    /// afterwards (make it in a pre-fork master).
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    Anonymous,
    #[doc(hidden)]
    #[cfg(not(all(feature = "shm", target_os = "linux", target_has_atomic = "64")))]
    _Name(core::marker::PhantomData<&'a str>),
}

/// A core type that can be placed: how to build it locally and, with `shm`, in a segment.
pub trait Place: Sized {
    /// Its config.
    type Config: Copy;
    /// Its shared form (the core object in a segment, with what the segment adds).
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    type Shared: SharedSide;
    /// Builds it in this process.
    fn local(config: Self::Config) -> Result<Self, ConfigError>;
    /// Creates or attaches the segment `name`.
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn open_shared(name: &str, config: Self::Config) -> Result<Self::Shared, PlaceError>;
    /// Creates it in anonymous shared memory.
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn anonymous(config: Self::Config) -> Result<Self::Shared, PlaceError>;
    /// Removes the name of a segment (attached processes keep it).
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn unlink(name: &str) -> Result<(), PlaceError>;
}

/// What every shared form answers.
#[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
pub trait SharedSide {
    /// Whether this process created the segment (rather than attached to it).
    fn created(&self) -> bool;
    /// Gives back what processes proven dead held; how many (permits, or freed cells).
    fn reclaim(&self) -> u64;
    /// The file backing it, if any.
    fn path(&self) -> Option<&std::path::Path>;
}

/// A core object and its placement (see the [module](self) docs).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the local object is inline on purpose: no box on its path
pub enum Placed<T: Place> {
    /// Owned by this process.
    Local(T),
    /// In a shared segment.
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    Shared(T::Shared),
}

impl<T: Place> Placed<T> {
    /// Builds it where `placement` says (a bad config is refused in every placement,
    /// also when attaching).
    pub fn open(placement: Placement<'_>, config: T::Config) -> Result<Self, PlaceError> {
        match placement {
            Placement::Local => Ok(Self::Local(T::local(config)?)),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Placement::Shared(name) => T::open_shared(name, config).map(Self::Shared),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Placement::Anonymous => T::anonymous(config).map(Self::Shared),
            #[cfg(not(all(feature = "shm", target_os = "linux", target_has_atomic = "64")))]
            Placement::_Name(_) => unreachable!("not a placement"),
        }
    }

    /// Removes the name of a shared segment (processes attached keep it).
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    pub fn unlink(name: &str) -> Result<(), PlaceError> {
        T::unlink(name)
    }

    /// Whether it lives in shared memory.
    pub fn is_shared(&self) -> bool {
        !matches!(self, Self::Local(_))
    }

    /// Whether this call made the object (a local one always; a shared one unless it
    /// attached to another process's segment).
    pub fn created(&self) -> bool {
        match self {
            Self::Local(_) => true,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.created(),
        }
    }

    /// Gives back what processes proven dead held (a shared object's; a local one has
    /// nothing to give back: 0). Operations do it by themselves when they meet it.
    pub fn reclaim(&self) -> u64 {
        match self {
            Self::Local(_) => 0,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.reclaim(),
        }
    }

    /// The file backing a shared object, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Local(_) => None,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.path(),
        }
    }
}

// ---- the families with no permits: the core object itself, through `Deref` -------------

macro_rules! plain {
    ($t:ty, $config:ty, $shared:ty, $new:expr) => {
        impl Place for $t {
            type Config = $config;
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            type Shared = $shared;
            fn local(config: $config) -> Result<Self, ConfigError> {
                $new(config)
            }
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            fn open_shared(name: &str, config: $config) -> Result<$shared, PlaceError> {
                <$shared>::open(name, config)
            }
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            fn anonymous(config: $config) -> Result<$shared, PlaceError> {
                <$shared>::anonymous(config)
            }
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            fn unlink(name: &str) -> Result<(), PlaceError> {
                <$shared>::unlink(name)
            }
        }

        #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
        impl SharedSide for $shared {
            fn created(&self) -> bool {
                <$shared>::created(self)
            }
            fn reclaim(&self) -> u64 {
                u64::from(<$shared>::reclaim(self))
            }
            fn path(&self) -> Option<&std::path::Path> {
                <$shared>::path(self)
            }
        }

        impl core::ops::Deref for Placed<$t> {
            type Target = $t;
            #[inline]
            fn deref(&self) -> &$t {
                match self {
                    Self::Local(t) => t,
                    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
                    Self::Shared(s) => s.get(),
                }
            }
        }
    };
}

plain!(RateLimiter, RateLimiterConfig, SharedRateLimiter, RateLimiter::new);
plain!(RetryBudget, RetryBudgetConfig, SharedRetryBudget, RetryBudget::new);

// ---- the limiter: permits counted to their process when shared ---------------------------

impl Place for Limiter {
    type Config = LimiterConfig;
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    type Shared = SharedLimiter;
    fn local(config: LimiterConfig) -> Result<Self, ConfigError> {
        Limiter::new(config)
    }
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn open_shared(name: &str, config: LimiterConfig) -> Result<SharedLimiter, PlaceError> {
        SharedLimiter::open(name, config)
    }
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn anonymous(config: LimiterConfig) -> Result<SharedLimiter, PlaceError> {
        SharedLimiter::anonymous(config)
    }
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn unlink(name: &str) -> Result<(), PlaceError> {
        SharedLimiter::unlink(name)
    }
}

#[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
impl SharedSide for SharedLimiter {
    fn created(&self) -> bool {
        SharedLimiter::created(self)
    }
    fn reclaim(&self) -> u64 {
        SharedLimiter::reclaim(self)
    }
    fn path(&self) -> Option<&std::path::Path> {
        SharedLimiter::path(self)
    }
}

/// A permit of a [`Placed<Limiter>`], detached from its lifetime: release it with
/// [`Placed::release_raw`] exactly once.
#[must_use = "a permit holds a slot until released"]
#[derive(Debug)]
pub enum PlacedRawPermit {
    /// Of a local limiter.
    Local(RawPermit),
    /// Of a shared limiter (counted to its process).
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    Shared(SharedRawPermit),
}

impl PlacedRawPermit {
    /// The level it was admitted at.
    pub fn level(&self) -> Priority {
        match self {
            Self::Local(p) => p.level(),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(p) => p.level(),
        }
    }

    /// The `now` it was admitted at.
    pub fn started_at(&self) -> u64 {
        match self {
            Self::Local(p) => p.started_at(),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(p) => p.started_at(),
        }
    }
}

impl From<RawPermit> for PlacedRawPermit {
    fn from(p: RawPermit) -> Self {
        Self::Local(p)
    }
}

/// A rejection of the local limiter in [`PlaceError`]'s terms.
fn rejected(r: surgeguard_core::Rejected) -> PlaceError {
    PlaceError::Rejected(r)
}

impl Placed<Limiter> {
    /// The limiter itself (metrics, limit, kill switch...): acquire through
    /// [`try_acquire_raw`](Self::try_acquire_raw), not through it, so a shared limiter's
    /// permits are counted to their process.
    #[inline]
    pub fn limiter(&self) -> &Limiter {
        match self {
            Self::Local(l) => l,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.limiter(),
        }
    }

    /// Processes using it: 1 for a local limiter; for a shared one, the processes
    /// attached now.
    pub fn attached_processes(&self) -> u32 {
        match self {
            Self::Local(_) => 1,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.attached_processes(),
        }
    }

    /// Permits this process holds: all of a local limiter's; for a shared one, those
    /// counted to this process.
    pub fn held_by_this_process(&self) -> u32 {
        match self {
            Self::Local(l) => l.inflight(),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.held_by_this_process(),
        }
    }

    /// Admits one unit of work at `level` (as [`Limiter::try_acquire_raw`]); a shared
    /// limiter counts it to this process (see `SharedLimiter::try_acquire_raw`).
    #[inline]
    pub fn try_acquire_raw(
        &self,
        now: u64,
        level: Priority,
    ) -> Result<PlacedRawPermit, PlaceError> {
        match self {
            Self::Local(l) => {
                l.try_acquire_raw(now, level).map(PlacedRawPermit::Local).map_err(rejected)
            }
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.try_acquire_raw(now, level).map(PlacedRawPermit::Shared),
        }
    }

    /// Ends a permit of this limiter (as [`Limiter::release_raw`]). A permit of another
    /// limiter, or of another placement, is `UsageError::ForeignHandle`; the permit is
    /// consumed either way.
    #[inline]
    pub fn release_raw(
        &self,
        permit: PlacedRawPermit,
        now: u64,
        outcome: Outcome,
    ) -> Result<(), PlaceError> {
        match (self, permit) {
            (Self::Local(l), PlacedRawPermit::Local(p)) => {
                l.release_raw(p, now, outcome).map_err(usage)
            }
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            (Self::Shared(s), PlacedRawPermit::Shared(p)) => s.release_raw(p, now, outcome),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            (_, foreign) => {
                // Counted by another object: consumed without touching anything.
                std::mem::forget(foreign);
                Err(usage(surgeguard_core::UsageError::ForeignHandle))
            }
        }
    }
}

/// A usage error in [`PlaceError`]'s terms.
fn usage(e: surgeguard_core::UsageError) -> PlaceError {
    PlaceError::Usage(e)
}

// ---- keyed limits: key permits counted to their process when shared ----------------------

impl<const N: usize, const K: usize> Place for KeyedLimits<N, K> {
    type Config = KeyedConfig;
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    type Shared = SharedKeyedLimits<N, K>;
    fn local(config: KeyedConfig) -> Result<Self, ConfigError> {
        KeyedLimits::new(config)
    }
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn open_shared(name: &str, config: KeyedConfig) -> Result<Self::Shared, PlaceError> {
        SharedKeyedLimits::open(name, config)
    }
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn anonymous(config: KeyedConfig) -> Result<Self::Shared, PlaceError> {
        SharedKeyedLimits::anonymous(config)
    }
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    fn unlink(name: &str) -> Result<(), PlaceError> {
        SharedKeyedLimits::<N, K>::unlink(name)
    }
}

#[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
impl<const N: usize, const K: usize> SharedSide for SharedKeyedLimits<N, K> {
    fn created(&self) -> bool {
        SharedKeyedLimits::created(self)
    }
    fn reclaim(&self) -> u64 {
        SharedKeyedLimits::reclaim(self)
    }
    fn path(&self) -> Option<&std::path::Path> {
        SharedKeyedLimits::path(self)
    }
}

/// A key permit of a [`Placed<KeyedLimits>`](Placed): release it with
/// [`Placed::release_key`] exactly once.
#[must_use = "a key permit holds a slot until released"]
#[derive(Debug)]
pub enum PlacedKeyPermit {
    /// Of a local table.
    Local(KeyPermit),
    /// Of a shared table (counted to its process).
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    Shared(SharedKeyPermit),
}

impl PlacedKeyPermit {
    /// The shard that holds its slot.
    pub fn shard(&self) -> usize {
        match self {
            Self::Local(p) => p.shard(),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(p) => p.shard(),
        }
    }

    /// The key hash it was admitted for.
    pub fn key_hash(&self) -> u64 {
        match self {
            Self::Local(p) => p.key_hash(),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(p) => p.key_hash(),
        }
    }
}

impl<const N: usize, const K: usize> Placed<KeyedLimits<N, K>> {
    /// The table itself (metrics, shards of a key, isolation...): acquire through
    /// [`try_acquire_key`](Self::try_acquire_key), not through it, so a shared table's
    /// permits are counted to their process.
    #[inline]
    pub fn limits(&self) -> &KeyedLimits<N, K> {
        match self {
            Self::Local(t) => t,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.limits(),
        }
    }

    /// A shared table's key seed, drawn when its segment was created and the same in
    /// every process attached (see `SharedKeyedLimits::key_seed`); `None` for a local
    /// table, whose caller chooses its seed.
    pub fn shared_key_seed(&self) -> Option<u64> {
        match self {
            Self::Local(_) => None,
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => Some(s.key_seed()),
        }
    }

    /// Takes a slot for `key_hash` and `cost` units of its rate (as
    /// [`KeyedLimits::try_acquire`]); a shared table counts it to this process (see
    /// `SharedKeyedLimits::try_acquire`).
    #[inline]
    pub fn try_acquire_key(
        &self,
        key_hash: u64,
        now: u64,
        cost: u32,
    ) -> Result<PlacedKeyPermit, PlaceError> {
        match self {
            Self::Local(t) => {
                t.try_acquire(key_hash, now, cost).map(PlacedKeyPermit::Local).map_err(rejected)
            }
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            Self::Shared(s) => s.try_acquire(key_hash, now, cost).map(PlacedKeyPermit::Shared),
        }
    }

    /// Gives a key permit's slot back (as [`KeyedLimits::release`]). A permit of another
    /// table, or of another placement, is `UsageError::ForeignHandle`.
    #[inline]
    pub fn release_key(&self, permit: PlacedKeyPermit) -> Result<(), PlaceError> {
        match (self, permit) {
            (Self::Local(t), PlacedKeyPermit::Local(p)) => t.release(p).map_err(usage),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            (Self::Shared(s), PlacedKeyPermit::Shared(p)) => s.release(p),
            #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
            _ => Err(usage(surgeguard_core::UsageError::ForeignHandle)),
        }
    }
}

#[cfg(test)]
mod tests;
