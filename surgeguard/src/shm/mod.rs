//! One limit across worker processes: the core's [`Limiter`], [`RateLimiter`],
//! [`RetryBudget`], [`KeyedLimits`](surgeguard_core::keyed::KeyedLimits) and
//! [`Gate`](surgeguard_core::gate::Gate) placed in shared memory (feature `shm`, Linux).
//! The gate ([`SharedGate`]) adds a queue whose waiters may be in any process: see its
//! module docs for how grants reach them.
//!
//! Python and Node services run as several processes (gunicorn, `uvicorn --workers`,
//! Node `cluster`, pre-fork C servers); an in-process limit of 4 then means 4 per worker.
//! A shared object is *the core's own structure* living in a shared mapping, so it makes
//! exactly the decisions an in-process one makes for the same operations, and every
//! worker sees the same in-flight count, limit, budget and rate.
//!
//! ```no_run
//! use surgeguard::shm::SharedLimiter;
//! use surgeguard::core::limit::{AlgorithmConfig, FixedConfig};
//! use surgeguard::{LimiterConfig, Outcome, Priority};
//! use surgeguard::clock::monotonic_ns;
//!
//! // Every worker runs this; the first creates the segment, the others attach to it.
//! let cfg = LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig { initial_limit: 4.0, ..Default::default() }));
//! let shared = SharedLimiter::open("myservice-db", cfg).unwrap();
//! if let Ok(permit) = shared.try_acquire(monotonic_ns(), Priority::NORMAL) {
//!     // ... call the dependency: at most 4 calls at once across all workers ...
//!     permit.release(monotonic_ns(), Outcome::Success).unwrap();
//! }
//! ```
//!
//! **Where.** [`SharedLimiter::open`] takes a name (a file in `/dev/shm`) or a path (any
//! file system, e.g. a `tmpfs`), and creates-or-attaches race-free (see `segment`).
//! [`SharedLimiter::anonymous`] maps anonymous `MAP_SHARED` memory that children forked
//! afterwards share (create it in the pre-fork master). All processes must pass `now`
//! from raw `CLOCK_MONOTONIC` ([`crate::clock::monotonic_ns`]; every surgeguard binding's
//! native clock reads it), since stored times (windows, idle periods, the rate limiter's
//! arrival time, the budget's slots) are compared across processes.
//!
//! **Refused attaches.** The header holds a magic number, the segment version, a hash of
//! the crate version, the object's kind, its layout fingerprint
//! ([`Placeable::LAYOUT`](surgeguard_core::layout::Placeable)), a hash of its config, the
//! boot and the pid namespace. A process that differs in any of them gets a clear
//! [`ShmError`] instead of a segment it would misread.
//!
//! **A worker that dies.** Each attached process has a slot in a table in the segment
//! (pid, start time, generation, permits held per level). A permit taken through
//! [`SharedLimiter::try_acquire`] is counted to its process. The permits of a process
//! proven dead (its pid gone, a zombie, or reused by a process with another start time)
//! are released as [`Outcome::Ignored`] (no latency sample) exactly once, by whichever
//! process wins a compare-and-swap on the slot. **When**: on every attach; whenever an
//! acquire is refused for want of a slot, at most once per
//! [`SWEEP_INTERVAL_NS`](SWEEP_INTERVAL_NS) across all processes (the refused acquire is
//! then retried once); and whenever [`SharedLimiter::reclaim`] is called (e.g. from
//! gunicorn's `child_exit` hook or a timer). So while a dead worker's permits are the only
//! thing standing in the way, arrivals are refused for at most 100 ms. A sweep is one pass
//! over the table with one `/proc/<pid>/stat` read per attached process. A process killed
//! in the few instructions between the limiter's admission and the count (or between the
//! uncount and the release) loses that one slot for good: the limit errs low, never high.
//!
//! **A worker killed inside a fold.** The one-at-a-time cells of a placed object (the
//! limiter's window fold, the budget's slot ring) record the holder's process; a cell
//! whose holder is proven dead is freed on attach, on `reclaim()`, and by the first
//! operation that finds it taken (see `fold`), so a shared limiter keeps adapting and a
//! shared budget keeps allowing retries after a worker dies mid-fold.
//!
//! **Caveats.** A permit held across `fork` exists in both processes: release it in one
//! only.
//!
//! **Progress.** The object's own guarantees (lock-free acquire, wait-free release...) plus
//! one atomic increment on acquire and one CAS on release (the process's held count). A
//! process's first use claims its slot (a CAS per slot tried, under a process-local
//! mutex on that one-time path). Sweeps are bounded.

mod fold;
mod gate;
mod keyed;
mod liveness;
mod segment;
mod table;

pub use fold::FOLD_CHECK_INTERVAL_NS;
#[doc(hidden)]
pub use gate::KillPoint;
pub use gate::{
    LOCK_TAKEOVER_NS, MAILBOX_ENTRIES, SharedArrival, SharedGate, SharedGatePermit, SharedOutcome,
    SharedTicket,
};
pub use keyed::{SharedKeyPermit, SharedKeyedLimits};

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use surgeguard_core::layout::Placeable;
use surgeguard_core::rate::{RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::{
    ConfigError, Limiter, LimiterConfig, Outcome, Priority, RawPermit, Reason, Rejected, UsageError,
};

use segment::{Mapping, Shape};
use table::Claim;

/// Process table slots in a segment holding a limiter: at most this many processes
/// attached at once.
pub const MAX_PROCESSES: usize = 256;

/// Refusal-triggered reclaim sweeps run at most this often (ns) across all processes.
pub const SWEEP_INTERVAL_NS: u64 = 100_000_000;

/// Why a shared object could not be created, attached or used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShmError {
    /// The name is empty, too long, or not `[A-Za-z0-9._-]` (paths: contains a NUL).
    BadName,
    /// A system call failed (`errno`).
    Os {
        /// Which call.
        what: &'static str,
        /// Its `errno`.
        errno: i32,
    },
    /// The file is not a surgeguard segment (or was never completed).
    NotASegment,
    /// Built by another surgeguard version or segment format.
    VersionMismatch,
    /// It holds another kind of object (e.g. a rate limiter, not a limiter).
    KindMismatch,
    /// The object's layout differs (another build of the core).
    LayoutMismatch,
    /// The object was created with another config.
    ConfigMismatch,
    /// Created before the last reboot (its clock and start times mean nothing now).
    OtherBoot,
    /// Created in another pid namespace (its pids mean nothing here).
    OtherPidNamespace,
    /// Every process slot is taken by a live process.
    TableFull,
    /// The config is invalid.
    Config(ConfigError),
    /// The call was refused (bad `now`, foreign permit).
    Usage(UsageError),
    /// The permit was already given back (its process was reclaimed).
    Reclaimed,
    /// Admission refused: why, and when to retry.
    Rejected(Rejected),
}

impl std::fmt::Display for ShmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadName => f.write_str("bad shared segment name: use [A-Za-z0-9._-] (at most 200) or a path"),
            Self::Os { what, errno } => {
                write!(f, "{what} failed: {}", std::io::Error::from_raw_os_error(*errno))
            }
            Self::NotASegment => f.write_str("not a surgeguard shared segment"),
            Self::VersionMismatch => f.write_str("the segment was made by another surgeguard version: unlink it or use another name"),
            Self::KindMismatch => f.write_str("the segment holds another kind of object"),
            Self::LayoutMismatch => f.write_str("the segment's layout differs from this build's: unlink it or use another name"),
            Self::ConfigMismatch => f.write_str("the segment was created with another config: use the same config in every process, or another name"),
            Self::OtherBoot => f.write_str("the segment is from before the last reboot: unlink it"),
            Self::OtherPidNamespace => f.write_str("the segment was created in another pid namespace"),
            Self::TableFull => f.write_str("every process slot of the segment is taken by a live process"),
            Self::Config(e) => write!(f, "invalid config: {e}"),
            Self::Usage(e) => write!(f, "{e}"),
            Self::Reclaimed => f.write_str("the permit was already given back when its process was reclaimed"),
            Self::Rejected(r) => write!(f, "rejected: {}", r.reason.as_str()),
        }
    }
}

impl std::error::Error for ShmError {}

impl From<ConfigError> for ShmError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

/// FNV-1a of some bytes.
pub(crate) fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Hash of the build's version: segments are shared only between equal versions.
pub(crate) fn build_hash() -> u64 {
    hash_bytes(concat!("surgeguard ", env!("CARGO_PKG_VERSION")).as_bytes())
}

/// A random 64-bit number (getrandom; time and pid if that fails).
pub(crate) fn random_nonce() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is writable for 8 bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        return u64::from_ne_bytes(buf);
    }
    surgeguard_core::rng::mix(crate::clock::monotonic_ns() ^ (std::process::id() as u64) << 32)
}

/// Object kinds in the header.
const KIND_LIMITER: u64 = 1;
const KIND_RATE: u64 = 2;
const KIND_RETRY: u64 = 3;

/// `/dev/shm/NAME` for a bare name, else the path as given.
fn resolve(name: &str) -> Result<PathBuf, ShmError> {
    if name.contains('/') {
        if name.contains('\0') {
            return Err(ShmError::BadName);
        }
        return Ok(PathBuf::from(name));
    }
    let ok = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(ShmError::BadName);
    }
    Ok(Path::new("/dev/shm").join(format!("surgeguard.{name}")))
}

// ---- fork detection: a forked child claims its own slot -----------------------------

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    // Relaxed: read by the same (only) thread of the child afterwards.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    fold::after_fork_in_child();
}

fn fork_generation() -> u64 {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// This process's claim on a segment's table, cached per process.
#[derive(Debug)]
struct Attachment {
    /// `VALID | fork_generation << 42 | index << 30 | generation`, 0 = none.
    cached: AtomicU64,
    slow: Mutex<()>,
}

const VALID: u64 = 1 << 63;
const FORK_BITS: u64 = (1 << 21) - 1;

impl Attachment {
    fn new() -> Self {
        Self { cached: AtomicU64::new(0), slow: Mutex::new(()) }
    }

    fn unpack(word: u64, fork: u64) -> Option<Claim> {
        (word & VALID != 0 && (word >> 42) & FORK_BITS == fork & FORK_BITS).then_some(Claim {
            index: ((word >> 30) & 0xFFF) as u32,
            generation: (word & ((1 << 30) - 1)) as u32,
        })
    }

    /// This process's claim, claiming a slot on first use (and after a fork).
    fn claim(&self, map: &Mapping, sweep: impl Fn() -> u64) -> Result<Claim, ShmError> {
        let fork = fork_generation();
        // Relaxed: process-local cache, written under `slow`; a stale read takes the lock.
        if let Some(c) = Self::unpack(self.cached.load(Ordering::Relaxed), fork) {
            return Ok(c);
        }
        let _guard = self.slow.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = Self::unpack(self.cached.load(Ordering::Relaxed), fork) {
            return Ok(c);
        }
        fold::ensure_token();
        let pid = std::process::id();
        let start = liveness::my_start_time();
        let claim = match table::claim(map.table(), pid, start) {
            Some(c) => c,
            None => {
                sweep();
                table::claim(map.table(), pid, start).ok_or(ShmError::TableFull)?
            }
        };
        let word =
            VALID | (fork & FORK_BITS) << 42 | (claim.index as u64) << 30 | claim.generation as u64;
        self.cached.store(word, Ordering::Relaxed);
        Ok(claim)
    }

    fn current(&self) -> Option<Claim> {
        Self::unpack(self.cached.load(Ordering::Relaxed), fork_generation())
    }
}

fn shape_of<T: Placeable>(kind: u64, config_hash: u64, table_len: usize) -> Shape {
    Shape {
        kind,
        layout: T::LAYOUT,
        config: config_hash,
        table_len,
        object_size: size_of::<T>(),
        object_align: align_of::<T>(),
    }
}

fn config_hash(debug: &impl std::fmt::Debug) -> u64 {
    hash_bytes(format!("{debug:?}").as_bytes())
}

// ---- the shared limiter ----------------------------------------------------------------

/// A [`Limiter`] in shared memory: one concurrency limit across processes, with the
/// permits of a dead process given back (see the [module](self) docs).
///
/// Progress: as [`Limiter`] (lock-free acquire, wait-free release), plus one atomic
/// increment per acquire and one CAS per release on the process's held count.
#[derive(Debug)]
pub struct SharedLimiter {
    map: Mapping,
    me: Attachment,
    created: bool,
}

/// A permit of a [`SharedLimiter`], released exactly once ([`release`](Self::release), or
/// as [`Outcome::Ignored`] on drop).
#[must_use = "a permit holds a slot until released"]
#[derive(Debug)]
pub struct SharedPermit<'a> {
    limiter: &'a SharedLimiter,
    raw: Option<SharedRawPermit>,
}

/// A shared permit detached from the limiter's lifetime (for bindings): release it with
/// [`SharedLimiter::release_raw`] exactly once.
#[must_use = "a permit holds a slot until released"]
#[derive(Debug)]
pub struct SharedRawPermit {
    raw: RawPermit,
    claim: Claim,
    nonce: u64,
}

impl SharedRawPermit {
    /// The level it was admitted at.
    pub fn level(&self) -> Priority {
        self.raw.level()
    }

    /// The `now` it was admitted at.
    pub fn started_at(&self) -> u64 {
        self.raw.started_at()
    }
}

impl SharedPermit<'_> {
    /// Ends the work (see [`surgeguard_core::Permit::release`]).
    pub fn release(mut self, now: u64, outcome: Outcome) -> Result<(), ShmError> {
        match self.raw.take() {
            Some(raw) => self.limiter.release_raw(raw, now, outcome),
            None => Ok(()),
        }
    }

    /// Detaches the permit from the limiter's lifetime.
    pub fn into_raw(mut self) -> SharedRawPermit {
        self.raw.take().expect("a live permit holds its raw part")
    }
}

impl Drop for SharedPermit<'_> {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            let now = self.limiter.limiter().latest_time();
            let _ = self.limiter.release_raw(raw, now, Outcome::Ignored);
        }
    }
}

impl SharedLimiter {
    /// Creates the limiter named `name` (a file `/dev/shm/surgeguard.NAME`, or `name` itself
    /// if it contains a `/`) or attaches to it if it exists: race-free when many processes
    /// call this at once. Attaching with another config is [`ShmError::ConfigMismatch`].
    /// Dead processes' permits are reclaimed on attach.
    pub fn open(name: &str, config: LimiterConfig) -> Result<Self, ShmError> {
        // Validates the whole config (the algorithm's too), also when attaching.
        let _ = Limiter::new(config)?;
        fold::ensure_token();
        let path = resolve(name)?;
        let shape = shape_of::<Limiter>(KIND_LIMITER, config_hash(&config), MAX_PROCESSES);
        let (map, created) = Mapping::open_or_create(&path, &shape, || Ok(Limiter::new(config)?))?;
        let this = Self { map, me: Attachment::new(), created };
        this.reclaim();
        Ok(this)
    }

    /// A limiter in anonymous shared memory: processes forked after this call share it.
    pub fn anonymous(config: LimiterConfig) -> Result<Self, ShmError> {
        fold::ensure_token();
        let shape = shape_of::<Limiter>(KIND_LIMITER, config_hash(&config), MAX_PROCESSES);
        let map = Mapping::anonymous(&shape, Limiter::new(config)?)?;
        Ok(Self { map, me: Attachment::new(), created: true })
    }

    /// Removes the name `name` (processes attached keep their segment).
    pub fn unlink(name: &str) -> Result<(), ShmError> {
        segment::unlink(&resolve(name)?)
    }

    /// Whether this call created the segment (rather than attached to it).
    pub fn created(&self) -> bool {
        self.created
    }

    /// The file backing it, if any.
    pub fn path(&self) -> Option<&Path> {
        self.map.path.as_deref()
    }

    /// The shared limiter itself (metrics, limit, kill switch...). Acquire through
    /// [`try_acquire`](Self::try_acquire), not through it, so permits are counted to
    /// their process.
    pub fn limiter(&self) -> &Limiter {
        // SAFETY: attach checked kind and layout: the object is a `Limiter`.
        unsafe { self.map.object::<Limiter>() }
    }

    fn nonce(&self) -> u64 {
        self.map.header().nonce.load(Ordering::Relaxed)
    }

    /// Admits one unit of work at `level` (as [`Limiter::try_acquire`]), counted to this
    /// process. A refusal for want of a slot may first reclaim dead processes' permits
    /// (at most once per [`SWEEP_INTERVAL_NS`] across processes) and retry once.
    pub fn try_acquire(&self, now: u64, level: Priority) -> Result<SharedPermit<'_>, ShmError> {
        self.try_acquire_raw(now, level).map(|raw| SharedPermit { limiter: self, raw: Some(raw) })
    }

    /// [`try_acquire`](Self::try_acquire), detached from the lifetime.
    pub fn try_acquire_raw(&self, now: u64, level: Priority) -> Result<SharedRawPermit, ShmError> {
        let claim = self.me.claim(&self.map, || self.reclaim())?;
        let limiter = self.limiter();
        fold::check(limiter);
        let raw = match limiter.try_acquire_raw(now, level) {
            Ok(raw) => raw,
            Err(rejected) => {
                if rejected.reason == Reason::LimitReached
                    && self.due_sweep(now)
                    && self.reclaim() > 0
                {
                    limiter.try_acquire_raw(now, level).map_err(ShmError::Rejected)?
                } else {
                    return Err(ShmError::Rejected(rejected));
                }
            }
        };
        // Counted after the admission (the safe side, see `table`).
        table::count(self.map.table(), claim, raw.level().index());
        Ok(SharedRawPermit { raw, claim, nonce: self.nonce() })
    }

    /// Ends a permit of this limiter (see [`Limiter::release_raw`]). A permit of another
    /// segment is [`UsageError::ForeignHandle`] (and still consumed); one already given
    /// back by a reclaim is [`ShmError::Reclaimed`].
    pub fn release_raw(
        &self,
        permit: SharedRawPermit,
        now: u64,
        outcome: Outcome,
    ) -> Result<(), ShmError> {
        let SharedRawPermit { raw, claim, nonce } = permit;
        let limiter = self.limiter();
        if nonce != self.nonce() || !limiter.owns(&raw) {
            // Not ours: consume it without touching anything (it is counted elsewhere).
            std::mem::forget(raw);
            return Err(ShmError::Usage(UsageError::ForeignHandle));
        }
        // Uncounted before the release (the safe side, see `table`).
        if !table::uncount(self.map.table(), claim, raw.level().index()) {
            std::mem::forget(raw);
            return Err(ShmError::Reclaimed);
        }
        limiter.release_raw(raw, now, outcome).map_err(ShmError::Usage)
    }

    fn due_sweep(&self, now: u64) -> bool {
        let next = &self.map.header().next_sweep;
        // Relaxed: a rate limit on sweeps; the CAS elects one sweeper per interval.
        let due = next.load(Ordering::Relaxed);
        now >= due
            && next
                .compare_exchange(
                    due,
                    now.saturating_add(SWEEP_INTERVAL_NS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Releases the permits of every attached process proven dead (as `Ignored`, no
    /// sample), exactly once each, and frees the window fold if a dead process held it;
    /// returns how many permits. Bounded: one pass over the table.
    pub fn reclaim(&self) -> u64 {
        let limiter = self.limiter();
        fold::free_dead(limiter);
        let me = table::reclaimer_word(std::process::id(), liveness::my_start_time());
        table::sweep(self.map.table(), &table::Proc, me, |level| {
            let level = Priority::new(level as u8).unwrap_or_default();
            let permit = limiter.reissue_permit(level);
            let _ = limiter.release_raw(permit, limiter.latest_time(), Outcome::Ignored);
        })
    }

    /// Processes attached now (slots in use).
    pub fn attached_processes(&self) -> u32 {
        table::attached(self.map.table())
    }

    /// Permits this process holds, counted in its slot.
    pub fn held_by_this_process(&self) -> u32 {
        self.me.current().map_or(0, |c| {
            self.map.table()[c.index as usize].held.iter().map(|h| h.load(Ordering::Relaxed)).sum()
        })
    }
}

impl Drop for SharedLimiter {
    fn drop(&mut self) {
        if let Some(claim) = self.me.current() {
            table::detach(self.map.table(), claim, std::process::id());
        }
    }
}

// ---- rate limiter and retry budget: no permits, no table --------------------------------

macro_rules! shared_plain {
    ($(#[$doc:meta])* $name:ident, $inner:ty, $config:ty, $kind:expr, $new:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            map: Mapping,
            created: bool,
        }

        impl $name {
            /// Creates it under `name` (as [`SharedLimiter::open`]) or attaches to it;
            /// another config is [`ShmError::ConfigMismatch`].
            pub fn open(name: &str, config: $config) -> Result<Self, ShmError> {
                let make = $new;
                // Validates the config even when attaching.
                let _ = make(config)?;
                let shape = shape_of::<$inner>($kind, config_hash(&config), 0);
                let path = resolve(name)?;
                fold::ensure_token();
                let (map, created) =
                    Mapping::open_or_create(&path, &shape, || Ok(make(config)?))?;
                let this = Self { map, created };
                this.reclaim();
                Ok(this)
            }

            /// In anonymous shared memory: processes forked after this call share it.
            pub fn anonymous(config: $config) -> Result<Self, ShmError> {
                let make = $new;
                let shape = shape_of::<$inner>($kind, config_hash(&config), 0);
                fold::ensure_token();
                Ok(Self { map: Mapping::anonymous(&shape, make(config)?)?, created: true })
            }

            /// Removes the name (attached processes keep their segment).
            pub fn unlink(name: &str) -> Result<(), ShmError> {
                segment::unlink(&resolve(name)?)
            }

            /// Whether this call created the segment.
            pub fn created(&self) -> bool {
                self.created
            }

            /// The shared object: call it as the in-process one. (Each call also frees a
            /// one-at-a-time cell a dead process held: see the [module](self) docs.)
            #[inline]
            pub fn get(&self) -> &$inner {
                // SAFETY: attach checked kind and layout.
                let object = unsafe { self.map.object::<$inner>() };
                fold::check(object);
                object
            }

            /// Frees the object's one-at-a-time cells held by processes proven dead
            /// (done on attach and, rate-limited, by operations that meet one); returns
            /// how many.
            pub fn reclaim(&self) -> u32 {
                // SAFETY: attach checked kind and layout.
                fold::free_dead(unsafe { self.map.object::<$inner>() })
            }

            /// The file backing it, if any.
            pub fn path(&self) -> Option<&Path> {
                self.map.path.as_deref()
            }
        }

        impl std::ops::Deref for $name {
            type Target = $inner;
            fn deref(&self) -> &$inner {
                self.get()
            }
        }
    };
}

shared_plain!(
    /// A [`RateLimiter`] (GCRA) in shared memory: one rate across processes.
    ///
    /// Progress: as [`RateLimiter`] (lock-free).
    SharedRateLimiter,
    RateLimiter,
    RateLimiterConfig,
    KIND_RATE,
    |c: RateLimiterConfig| RateLimiter::new(c)
);

shared_plain!(
    /// A [`RetryBudget`] in shared memory: one retry budget across processes.
    ///
    /// Progress: as [`RetryBudget`] (lock-free).
    SharedRetryBudget,
    RetryBudget,
    RetryBudgetConfig,
    KIND_RETRY,
    |c: RetryBudgetConfig| RetryBudget::new(c)
);

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fold_tests;

#[cfg(test)]
mod keyed_tests;
