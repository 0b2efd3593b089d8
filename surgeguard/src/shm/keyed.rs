//! [`SharedKeyedLimits`]: per-key concurrency (and rate) caps across worker processes, with
//! the key permits of a dead worker given back exactly once.
//!
//! The segment holds the core's [`KeyedLimits`] by value and, after it, one row of per-shard
//! counts per process slot: `held[slot][shard]`, the key permits that process holds on that
//! shard. The protocol is the process table's (see `table`): a permit is counted after the
//! table admitted it and uncounted before it is released, each unit taken by one
//! compare-and-swap from `n > 0` to `n − 1`; the reclaimer that wins a dead slot drains its
//! row, releasing one shard slot per unit, before the slot is freed. So a dead worker's key
//! permits come back once, a live worker's never, and a worker killed between the two steps
//! loses that one shard slot for good (the cap errs low, never high).

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use surgeguard_core::keyed::{DEFAULT_TOP_KEYS, KeyPermit, KeyedConfig, KeyedLimits};
use surgeguard_core::layout::{FoldCell, Placeable, fingerprint};
use surgeguard_core::{Reason, UsageError};

use super::segment::{self, Mapping};
use super::table::{self, Claim, LIVE};
use super::{
    Attachment, MAX_PROCESSES, SWEEP_INTERVAL_NS, ShmError, config_hash, fold, liveness, resolve,
    shape_of,
};

/// Object kind in the header.
const KIND_KEYED: u64 = 4;

/// What the segment holds: the table, then each process slot's per-shard counts.
#[repr(C)]
struct KeyedSegment<const N: usize, const K: usize> {
    limits: KeyedLimits<N, K>,
    held: [[AtomicU32; N]; MAX_PROCESSES],
}

// SAFETY: `#[repr(C)]`; the table is `Placeable` (its own promise) and the counts are
// atomics holding integers (zero in a fresh mapping, which is their initial value). LAYOUT
// covers the table's fingerprint, the row count and where the rows start.
#[allow(unsafe_code)]
unsafe impl<const N: usize, const K: usize> Placeable for KeyedSegment<N, K> {
    const LAYOUT: u64 = fingerprint(
        "surgeguard::shm::KeyedSegment/1",
        &[
            KeyedLimits::<N, K>::LAYOUT,
            MAX_PROCESSES as u64,
            N as u64,
            std::mem::offset_of!(Self, held) as u64,
            size_of::<Self>() as u64,
        ],
    );

    fn fold_cells<'a>(&'a self, f: &mut dyn FnMut(FoldCell<'a>)) {
        self.limits.fold_cells(f);
    }
}

/// A [`KeyedLimits`] in shared memory: one set of per-key caps across processes, with a
/// dead process's key permits given back (see the [module](super) docs for where it
/// lives, what is refused, and when dead processes are swept).
///
/// Progress: as [`KeyedLimits`] (lock-free acquire, wait-free release), plus one atomic
/// increment per acquire and one CAS per release on this process's count for the shard.
///
/// Size: the table plus `4 · N · 256` bytes of per-process counts (64 KiB for `N = 64`).
#[derive(Debug)]
pub struct SharedKeyedLimits<const N: usize, const K: usize = DEFAULT_TOP_KEYS> {
    map: Mapping,
    me: Attachment,
    created: bool,
}

/// A key permit of a [`SharedKeyedLimits`]: give it back once with
/// [`SharedKeyedLimits::release`] (dropping it leaks its slot until this process exits and
/// is reclaimed).
#[must_use = "a permit holds a slot until it is released"]
#[derive(Debug)]
pub struct SharedKeyPermit {
    raw: KeyPermit,
    claim: Claim,
    nonce: u64,
}

impl SharedKeyPermit {
    /// The shard whose slot it holds.
    pub fn shard(&self) -> usize {
        self.raw.shard()
    }

    /// The key hash it was admitted for.
    pub fn key_hash(&self) -> u64 {
        self.raw.key_hash()
    }
}

impl<const N: usize, const K: usize> SharedKeyedLimits<N, K> {
    fn shape(config: &KeyedConfig) -> segment::Shape {
        shape_of::<KeyedSegment<N, K>>(KIND_KEYED, config_hash(config), MAX_PROCESSES)
    }

    /// Creates the table named `name` (a file `/dev/shm/surgeguard.NAME`, or `name` itself
    /// if it contains a `/`) or attaches to it: race-free when many processes call this at
    /// once. Another config, `N` or `K` is refused ([`ShmError::ConfigMismatch`],
    /// [`ShmError::LayoutMismatch`]). Dead processes' permits are reclaimed on attach.
    pub fn open(name: &str, config: KeyedConfig) -> Result<Self, ShmError> {
        // Validates the config, also when attaching.
        let _ = KeyedLimits::<N, K>::new(config)?;
        fold::ensure_token();
        let path = resolve(name)?;
        let (map, created) = Mapping::open_or_create(&path, &Self::shape(&config), || {
            Ok(KeyedLimits::<N, K>::new(config)?)
        })?;
        let this = Self { map, me: Attachment::new(), created };
        this.reclaim();
        Ok(this)
    }

    /// A table in anonymous shared memory: processes forked after this call share it.
    pub fn anonymous(config: KeyedConfig) -> Result<Self, ShmError> {
        fold::ensure_token();
        let map = Mapping::anonymous(&Self::shape(&config), KeyedLimits::<N, K>::new(config)?)?;
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

    fn segment(&self) -> &KeyedSegment<N, K> {
        // SAFETY: attach checked kind and layout (the fingerprint covers `N`, `K` and the
        // rows), and creation wrote the table at the object's offset (offset 0 of the
        // segment struct) over zeroed rows.
        unsafe { self.map.object::<KeyedSegment<N, K>>() }
    }

    /// The shared table itself (metrics, shards of a key, config...). Acquire through
    /// [`try_acquire`](Self::try_acquire), not through it, so permits are counted to
    /// their process.
    pub fn limits(&self) -> &KeyedLimits<N, K> {
        &self.segment().limits
    }

    fn nonce(&self) -> u64 {
        self.map.header().nonce.load(Ordering::Relaxed)
    }

    /// A seed drawn at random when the segment was created, the same in every process
    /// attached to it: hash keys with it ([`hash_key`](surgeguard_core::keyed::hash_key)) so
    /// that every process maps a key to the same shards, without choosing a seed by hand.
    pub fn key_seed(&self) -> u64 {
        surgeguard_core::rng::mix(self.nonce() ^ 0x6b65_795f_7365_6564)
    }

    /// Takes a slot for `key_hash` (as [`KeyedLimits::try_acquire`]), counted to this
    /// process. A [`Reason::KeyLimit`] refusal may first reclaim dead processes' permits
    /// (at most once per [`SWEEP_INTERVAL_NS`] across processes) and retry once.
    pub fn try_acquire(
        &self,
        key_hash: u64,
        now: u64,
        cost: u32,
    ) -> Result<SharedKeyPermit, ShmError> {
        let claim = self.me.claim(&self.map, || self.reclaim())?;
        let limits = self.limits();
        fold::check(limits);
        let raw = match limits.try_acquire(key_hash, now, cost) {
            Ok(raw) => raw,
            Err(rejected) => {
                if rejected.reason == Reason::KeyLimit && self.due_sweep(now) && self.reclaim() > 0
                {
                    limits.try_acquire(key_hash, now, cost).map_err(ShmError::Rejected)?
                } else {
                    return Err(ShmError::Rejected(rejected));
                }
            }
        };
        // Counted after the admission (the safe side, see the module docs).
        if let Some(n) =
            self.segment().held.get(claim.index as usize).and_then(|r| r.get(raw.shard()))
        {
            // Relaxed: each unit is taken back by one RMW (see `table`).
            n.fetch_add(1, Ordering::Relaxed);
        }
        Ok(SharedKeyPermit { raw, claim, nonce: self.nonce() })
    }

    /// Gives a permit's slot back. A permit of another table is
    /// [`UsageError::ForeignHandle`] (consumed, nothing changed); one already given back by
    /// a reclaim is [`ShmError::Reclaimed`].
    pub fn release(&self, permit: SharedKeyPermit) -> Result<(), ShmError> {
        let SharedKeyPermit { raw, claim, nonce } = permit;
        let limits = self.limits();
        if nonce != self.nonce() || !limits.owns(&raw) {
            return Err(ShmError::Usage(UsageError::ForeignHandle));
        }
        // Uncounted before the release (the safe side).
        if !self.uncount(claim, raw.shard()) {
            return Err(ShmError::Reclaimed);
        }
        limits.release(raw).map_err(ShmError::Usage)
    }

    fn uncount(&self, claim: Claim, shard: usize) -> bool {
        let Some(slot) = self.map.table().get(claim.index as usize) else { return false };
        // Relaxed: the generation only has to match; the count's CAS decides.
        let word = slot.word.load(Ordering::Relaxed);
        if table::gen_of(word) != claim.generation as u64 || table::state_of(word) != LIVE {
            return false;
        }
        self.segment()
            .held
            .get(claim.index as usize)
            .and_then(|r| r.get(shard))
            .is_some_and(table::take_one)
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

    /// Gives back the key permits of every attached process proven dead, exactly once
    /// each, and frees the top-keys flag if a dead process held it; returns how many
    /// permits. Bounded: one pass over the table and `N` counts per dead process.
    pub fn reclaim(&self) -> u64 {
        self.reclaim_with(&table::Proc)
    }

    pub(crate) fn reclaim_with(&self, live: &impl table::Liveness) -> u64 {
        let seg = self.segment();
        fold::free_dead(&seg.limits);
        let me = table::reclaimer_word(std::process::id(), liveness::my_start_time());
        table::sweep_with(
            self.map.table(),
            live,
            me,
            |_level| {},
            |index| {
                let mut released = 0;
                let Some(row) = seg.held.get(index) else { return 0 };
                for (shard, n) in row.iter().enumerate() {
                    while table::take_one(n) {
                        if let Some(p) = seg.limits.reissue_permit(shard) {
                            let _ = seg.limits.release(p);
                        }
                        released += 1;
                    }
                }
                released
            },
        )
    }

    /// Processes attached now (slots in use).
    pub fn attached_processes(&self) -> u32 {
        table::attached(self.map.table())
    }

    /// Key permits this process holds, counted in its row.
    pub fn held_by_this_process(&self) -> u64 {
        self.me.current().map_or(0, |c| {
            self.segment().held[c.index as usize]
                .iter()
                .map(|h| u64::from(h.load(Ordering::Relaxed)))
                .sum()
        })
    }
}

impl<const N: usize, const K: usize> Drop for SharedKeyedLimits<N, K> {
    fn drop(&mut self) {
        if let Some(claim) = self.me.current() {
            // A row still counting permits stays claimed (reclaimed when this process
            // exits), so the next claimer never inherits counts.
            if self.held_by_this_process() == 0 {
                table::detach(self.map.table(), claim, std::process::id());
            }
        }
    }
}
