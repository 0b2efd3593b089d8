//! The admission queue's storage: a bounded, lock-free set of waiters kept in per-level
//! arrival order, drained by one dispatcher at a time.
//!
//! Arrivals ([`WaitQueue::push`]) and cancellations ([`WaitQueue::cancel`]) never wait for
//! another thread; the dispatcher ([`WaitQueue::try_dispatch`]) is single-consumer — a
//! second thread that tries to dispatch while one is inside returns at once, and the
//! thread inside runs one more round on its behalf — the same "whoever wins the CAS does
//! the work, everyone else moves on" rule the limiter uses to fold windows.
//!
//! Layout (fixed, no allocation): a const-generic array of slots, addressed by
//! index, never by pointer. Each slot has one atomic state word
//! (`generation | evictions | level | flags | status`) and the waiter's times. A slot is
//! claimed by one CAS on its state (starting at the slot freed last), and three intrusive
//! lists thread through the slots:
//!
//! - the **incoming stack** — arrivals push, the dispatcher takes it whole and links the
//!   new waiters, oldest first, at the tail of their level;
//! - the **attention stack** — a cancel, or an eviction that took a slot over, pushes the
//!   slot here so the dispatcher unlinks it (and reports the evicted tickets); an arrival
//!   that finds no free slot may take a cancelled slot over at once, leaving it on this
//!   stack for the dispatcher to re-link;
//! - per-level **doubly linked lists** in arrival order, touched only by the dispatcher —
//!   O(1) at both ends, so FIFO, LIFO and oldest-end expiry all cost the same.
//!
//! Both stack heads and the dispatch flags share one atomic word, so the dispatcher
//! enters and takes all pending work in one compare-and-swap, and leaves with another
//! that fails if anything arrived meanwhile.
//!
//! A waiter leaves exactly once, by one compare-and-swap on its state word: granted or
//! expired by the dispatcher, cancelled by its owner, or taken over by a more important
//! arrival. Whoever wins the CAS owns the outcome; the others see a changed word.

use crate::sync::{next_queue_id, AtomicU32, AtomicU64, AtomicU8, Ordering};
use crate::time::SEC;
use crate::{ConfigError, Priority, UsageError};

const LEVELS: usize = Priority::MAX_LEVELS;

/// `deadline` value meaning "no deadline".
pub const NO_DEADLINE: u64 = u64::MAX;
/// The largest capacity a queue can have (slot indices are 16 bits, `0xFFFF` ends a list).
pub const MAX_CAPACITY: usize = 0xFFFF;

/// Sizes a queue by time, not count (Little's law: the queue a server drains in the
/// longest acceptable wait is `drain_rate × max_acceptable_wait`): `ceil(drain_per_sec × wait_budget_ns / 1 s)`, at most
/// [`MAX_CAPACITY`]. Usable in a const generic.
///
/// ```
/// use surgeguard_core::queue::capacity_for;
/// use surgeguard_core::time::MS;
/// // 2,000 req/s and a 100 ms wait budget is 200 slots, not 10,000.
/// assert_eq!(capacity_for(2_000, 100 * MS), 200);
/// const CAP: usize = capacity_for(500, 30 * MS);
/// assert_eq!(CAP, 15);
/// ```
pub const fn capacity_for(drain_per_sec: u64, wait_budget_ns: u64) -> usize {
    let sec = SEC as u128;
    let slots = (drain_per_sec as u128 * wait_budget_ns as u128).div_ceil(sec);
    if slots > MAX_CAPACITY as u128 {
        MAX_CAPACITY
    } else {
        slots as usize
    }
}

// ---- the slot state word ------------------------------------------------------------
/// Bits 0..=2: the occupancy status.
const STATUS_MASK: u64 = 0b111;
/// Not in use: any arrival may claim it.
const FREE: u64 = 0;
/// Taken by an arrival that is still writing it; not yet cancellable or dispatchable.
const CLAIMED: u64 = 1;
/// Waiting: may be granted, expired, cancelled or evicted (first CAS wins).
const WAITING: u64 = 2;
/// Cancelled by its owner; the dispatcher frees it.
const CANCELLED: u64 = 3;
/// Bit 3: the slot is on the attention stack or the dispatcher's deferred list (set by
/// whoever pushed it).
const ATTN: u64 = 1 << 3;
/// Bits 8..=11: the level.
const LEVEL_SHIFT: u32 = 8;
const LEVEL_MASK: u64 = 0xF << LEVEL_SHIFT;
/// Bits 16..=31: how many previous occupants were evicted and not yet reported. Each
/// take-over bumps the generation by one, so they are the generations
/// `gen − count .. gen`.
const EVICTED_SHIFT: u32 = 16;
const EVICTED_MASK: u64 = 0xFFFF << EVICTED_SHIFT;
const EVICTED_ONE: u64 = 1 << EVICTED_SHIFT;
/// Bits 32..=63: the generation, bumped each time the slot changes hands.
const GEN_SHIFT: u32 = 32;

// ---- the control word: both stack heads and the dispatch flags ------------------------
/// End of an intrusive list (slot indices are below it).
const END: u32 = 0xFFFF;
/// Bits 0..=15: head of the incoming stack.
const INCOMING_SHIFT: u32 = 0;
/// Bits 16..=31: head of the attention stack.
const ATTENTION_SHIFT: u32 = 16;
/// Both stacks empty.
const STACKS_EMPTY: u64 = (END as u64) << INCOMING_SHIFT | (END as u64) << ATTENTION_SHIFT;
/// Bit 32: a thread is dispatching.
const BUSY: u64 = 1 << 32;
/// Bit 33: someone asked for a dispatch round since the holder's last round began (or,
/// without `BUSY`, since the last holder stopped early): a caller that found `BUSY`, or
/// an eviction whose report is owed.
const PENDING: u64 = 1 << 33;

/// The most dispatch rounds one `try_dispatch` runs (the first, plus re-runs for work
/// that came in meanwhile) before it leaves the rest to the next caller.
pub const MAX_ROUNDS: u32 = 8;

/// How many times an arrival into a full queue looks for a free slot or a victim again
/// after the one it found changed under it.
const PUSH_ATTEMPTS: usize = 3;

const fn pack(gen: u32, status: u64, level: usize) -> u64 {
    ((gen as u64) << GEN_SHIFT) | ((level as u64) << LEVEL_SHIFT) | status
}
const fn gen_of(s: u64) -> u32 {
    (s >> GEN_SHIFT) as u32
}
const fn status_of(s: u64) -> u64 {
    s & STATUS_MASK
}
const fn level_of(s: u64) -> usize {
    ((s & LEVEL_MASK) >> LEVEL_SHIFT) as usize
}
const fn evicted_of(s: u64) -> u32 {
    ((s & EVICTED_MASK) >> EVICTED_SHIFT) as u32
}
const fn head_of(w: u64, shift: u32) -> u32 {
    ((w >> shift) & END as u64) as u32
}
fn priority(level: usize) -> Priority {
    Priority::new(level as u8).unwrap_or_default()
}

/// A queued waiter's handle: which queue, which slot, which occupancy of the slot.
///
/// Copyable and 64 bits wide, so bindings can key their waiters by it (`to_bits`). The
/// high 32 bits are the queue's id; the low 32 bits hold the slot index (the fewest bits
/// that index `CAP` slots) above the low bits of the slot's generation. A ticket whose
/// waiter already left (granted, expired, cancelled, evicted) or that comes from another
/// queue is refused with a [`UsageError`]; any number at all may be given back through
/// [`from_bits`](Self::from_bits), and none makes a queue panic.
///
/// **Exact guarantee.** Queue ids are never reused within a process: each new queue takes
/// the next of `2^32 − 1` ids, and a constructor that would need one more fails with a
/// [`ConfigError`] instead of wrapping. So a ticket of one queue is never taken for a
/// ticket of another. Within one queue, a stale ticket is refused unless its slot changed
/// hands a multiple of `2^(32 − slot bits)` times while the ticket was held: `2^26`
/// (67 million) reuses of that one slot for `CAP = 64`, `2^20` for `CAP = 4096`, `2^16`
/// for the largest queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

impl Ticket {
    /// The ticket as one number (for maps and the C ABI).
    pub const fn to_bits(self) -> u64 {
        self.0
    }
    /// A ticket from [`to_bits`](Self::to_bits). Any number is accepted; a number that
    /// is not a live ticket is refused by the queue that is given it.
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }
    const fn owner(self) -> u32 {
        (self.0 >> 32) as u32
    }
    const fn local(self) -> u64 {
        self.0 & 0xFFFF_FFFF
    }
}

/// A waiter as the dispatcher sees it. Only a [`Dispatcher`] makes one; giving it to the
/// dispatcher of another queue, or after the waiter left, does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    ticket: Ticket,
    slot: u32,
    gen: u32,
    level: Priority,
    enqueued_at: u64,
    deadline: u64,
}

impl Waiter {
    /// Its handle.
    pub const fn ticket(&self) -> Ticket {
        self.ticket
    }
    /// Its level (after any aging).
    pub const fn level(&self) -> Priority {
        self.level
    }
    /// The `now` it arrived at.
    pub const fn enqueued_at(&self) -> u64 {
        self.enqueued_at
    }
    /// Its deadline, or [`NO_DEADLINE`].
    pub const fn deadline(&self) -> u64 {
        self.deadline
    }
}

/// A snapshot of a [`WaitQueue`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitQueueMetrics {
    /// Waiters per level.
    pub waiting_by_level: [u32; LEVELS],
    /// All waiters.
    pub waiting: u32,
    /// Slots in use (waiters, arrivals being written, cancelled ones not yet reclaimed).
    pub occupied: u32,
    /// The bound.
    pub capacity: u32,
    /// Arrival time of the oldest waiter, if any.
    pub oldest_enqueued_at: Option<u64>,
    /// Waiters evicted by more important arrivals.
    pub evictions: u64,
    /// Waiters cancelled by their owners.
    pub cancels: u64,
}

#[derive(Debug)]
#[repr(C)]
struct Slot {
    state: AtomicU64,
    enqueued_at: AtomicU64,
    deadline: AtomicU64,
    /// Incoming stack.
    link: AtomicU32,
    /// Attention stack, or the dispatcher's deferred list.
    attn_link: AtomicU32,
    // Dispatcher-private: only the thread holding the dispatch flag touches these, so
    // every access is Relaxed; the flag's Acquire/Release hands them from holder to holder.
    prev: AtomicU32,
    next: AtomicU32,
    /// Level + 1 of the list the slot is linked into, 0 when unlinked.
    linked: AtomicU8,
}

impl Slot {
    fn new() -> Self {
        Self {
            state: AtomicU64::new(pack(0, FREE, 0)),
            enqueued_at: AtomicU64::new(0),
            deadline: AtomicU64::new(NO_DEADLINE),
            link: AtomicU32::new(END),
            attn_link: AtomicU32::new(END),
            prev: AtomicU32::new(END),
            next: AtomicU32::new(END),
            linked: AtomicU8::new(0),
        }
    }
}

/// Per-level counts whose difference is the number of waiters. Each has one kind of
/// writer, so the dispatcher's departures need no read-modify-write.
#[derive(Debug)]
#[repr(C)]
struct Counts {
    /// Arrivals (and aged-in waiters): read-modify-write by arrivals.
    arrived: [AtomicU64; LEVELS],
    /// Granted, expired or aged-out: written by the dispatcher only.
    departed: [AtomicU64; LEVELS],
    /// Cancelled: read-modify-write by cancellers.
    cancelled: [AtomicU64; LEVELS],
    /// Evicted: read-modify-write by evicting arrivals.
    evicted: [AtomicU64; LEVELS],
}

impl Counts {
    fn new() -> Self {
        Self {
            arrived: core::array::from_fn(|_| AtomicU64::new(0)),
            departed: core::array::from_fn(|_| AtomicU64::new(0)),
            cancelled: core::array::from_fn(|_| AtomicU64::new(0)),
            evicted: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Waiters at `lvl`, never below the true count at the moment of the first load.
    #[inline]
    fn waiting(&self, lvl: usize) -> u32 {
        // Acquire (each of the three): pairs with the Release write of the departure, so
        // the arrival it undoes — which happened before it — is counted by the load of
        // `arrived` that follows; the difference cannot go below zero.
        let gone = self.departed[lvl].load(Ordering::Acquire)
            + self.cancelled[lvl].load(Ordering::Acquire)
            + self.evicted[lvl].load(Ordering::Acquire);
        self.arrived[lvl].load(Ordering::Relaxed).saturating_sub(gone) as u32
    }

    /// One departure at `lvl`, by the dispatcher (single writer: load and store).
    #[inline]
    fn depart(&self, lvl: usize) {
        let d = &self.departed[lvl];
        // Release: pairs with the Acquire load in `waiting`.
        d.store(d.load(Ordering::Relaxed) + 1, Ordering::Release);
    }
}

/// Layout words of the queue's slot and count types, for the gate's fingerprint.
#[cfg(all(not(loom), target_has_atomic = "64"))]
pub(crate) const LAYOUT_WORDS: [u64; 3] = [
    core::mem::size_of::<Slot>() as u64,
    core::mem::size_of::<Counts>() as u64,
    core::mem::offset_of!(Slot, linked) as u64,
];

/// Bounded storage of waiters `{ticket, level, enqueued_at, deadline}` for up to `CAP`
/// waiters in up to eight priority levels, in arrival order per level.
///
/// ```
/// use surgeguard_core::queue::{WaitQueue, NO_DEADLINE};
/// use surgeguard_core::Priority;
///
/// let q: WaitQueue<4> = WaitQueue::new(3, 4).unwrap();
/// let a = q.push(Priority::NORMAL, 10, NO_DEADLINE, false).unwrap();
/// let b = q.push(Priority::NORMAL, 20, NO_DEADLINE, false).unwrap();
/// let mut order = [None; 2];
/// q.try_dispatch(|d| {
///     d.refresh(|_| true);
///     let oldest = d.oldest(Priority::NORMAL).unwrap();
///     let newest = d.newest(Priority::NORMAL).unwrap();
///     order = [Some(oldest.ticket()), Some(newest.ticket())];
///     assert!(d.remove(&oldest));
///     true
/// });
/// assert_eq!(order, [Some(a), Some(b)]);
/// assert_eq!(q.waiting(Priority::NORMAL), 1);
/// assert!(q.cancel(a).is_err(), "a already left");
/// assert_eq!(q.cancel(b), Ok(Priority::NORMAL));
/// ```
///
/// **Progress.** [`push`](Self::push) and [`cancel`](Self::cancel) are lock-free: a few
/// atomic steps, retried only when another thread changed the same word (so some thread
/// always made progress); nobody waits for the dispatcher. Finding a free slot starts at
/// the slot freed last (usually one CAS) and scans the slots in the worst case (free ones,
/// then cancelled ones to reuse); a push into
/// a full queue that evicts scans the slots once per attempt (at most three attempts; an
/// arrival racing departures from a full queue may be refused after them).
/// The dispatcher is single-consumer: [`try_dispatch`](Self::try_dispatch) runs rounds
/// while it holds a flag, and a concurrent call returns `false` at once after asking the
/// holder for one more round, so no request for dispatch is lost. The holder runs at most
/// [`MAX_ROUNDS`] rounds per call; work that keeps coming after that is left, flagged, for
/// the next caller ([`needs_dispatch`](Self::needs_dispatch)), so a call is wait-free
/// given a bound on the work of one round (which is O(capacity) plus the closure's own).
/// If a round panics, the flag is released and everything taken is kept for the next
/// round (no waiter, cancel or eviction report is lost; a report whose callback panicked
/// is made again).
///
/// **Bound.** Never more than `capacity` waiters, structurally: a waiter needs a slot. A
/// cancelled waiter's slot is reused at once by an arrival that finds no free slot (it
/// takes the slot over with one CAS; the dispatcher then re-links it in arrival order),
/// unless an eviction from that slot is still unreported — then after the next dispatch
/// round.
///
/// **Cost.** Push: three atomic read-modify-writes (claim, count, publish); the count of
/// waiters is read only when the slot freed last is taken. A dispatch round: one CAS to
/// enter and take all pending arrivals and cancels, one to leave, plus one CAS per waiter
/// removed and O(1) work per waiter linked, inspected or removed; everything else the
/// dispatcher writes (lists, counts of departures, deferred reports) is private to it, so
/// loads and stores. Memory: about 48 bytes per slot.
///
/// **Source.** Bounded per-level queues scanned most important first, as in HHVM's
/// `JobQueue` (priority deques); Treiber stacks (R. K. Treiber, 1986) taken whole.
#[derive(Debug)]
#[repr(C)]
pub struct WaitQueue<const CAP: usize> {
    slots: [Slot; CAP],
    /// Stack heads and dispatch flags (see `INCOMING_SHIFT`, `BUSY`).
    ctl: AtomicU64,
    /// Where the next free-slot search starts (a hint, written without ordering).
    hint: AtomicU32,
    counts: Counts,
    // Dispatcher-private (Relaxed, like the private slot fields): list ends, and the
    // slots whose eviction reports did not fit in a round's output yet.
    head: [AtomicU32; LEVELS],
    tail: [AtomicU32; LEVELS],
    deferred: AtomicU32,
    levels: u8,
    owner: u32,
    capacity: u32,
}

impl<const CAP: usize> WaitQueue<CAP> {
    const CAP_FITS: () = assert!(CAP <= MAX_CAPACITY, "WaitQueue capacity above MAX_CAPACITY");

    /// A queue for `levels` levels (1..=8) holding at most `capacity` (≤ `CAP`) waiters.
    pub fn new(levels: u8, capacity: usize) -> Result<Self, ConfigError> {
        #[allow(clippy::let_unit_value)]
        let () = Self::CAP_FITS;
        if levels == 0 || levels as usize > LEVELS {
            return Err(ConfigError::out_of_range("limiter.levels"));
        }
        if capacity > CAP {
            return Err(ConfigError::out_of_range("gate.queue_capacity")
                .with_detail("above the queue's compile-time capacity"));
        }
        let owner = next_queue_id()
            .ok_or(ConfigError::out_of_range("queue.id").with_detail(
                "2^32 - 1 queues were built in this process (ids are never reused)",
            ))?;
        Ok(Self {
            slots: core::array::from_fn(|_| Slot::new()),
            ctl: AtomicU64::new(STACKS_EMPTY),
            hint: AtomicU32::new(0),
            counts: Counts::new(),
            head: core::array::from_fn(|_| AtomicU32::new(END)),
            tail: core::array::from_fn(|_| AtomicU32::new(END)),
            deferred: AtomicU32::new(END),
            levels,
            owner,
            capacity: capacity as u32,
        })
    }

    /// Bits of a ticket's low half that hold the slot index.
    const SLOT_BITS: u32 = if CAP <= 1 { 0 } else { usize::BITS - (CAP - 1).leading_zeros() };
    /// Bits of a ticket's low half that hold the slot's generation.
    const GEN_BITS: u32 = 32 - Self::SLOT_BITS;
    const GEN_MASK: u64 = (1 << Self::GEN_BITS) - 1;

    /// The ticket of generation `gen` of slot `i`.
    fn ticket(&self, i: usize, gen: u32) -> Ticket {
        let local = ((i as u64) << Self::GEN_BITS) | (u64::from(gen) & Self::GEN_MASK);
        Ticket((u64::from(self.owner) << 32) | local)
    }

    /// The slot and (truncated) generation a ticket names, if it is one of this queue's
    /// and its slot exists.
    fn decode(&self, t: Ticket) -> Result<(usize, u64), UsageError> {
        if t.owner() != self.owner {
            return Err(UsageError::ForeignHandle);
        }
        let i = (t.local() >> Self::GEN_BITS) as usize;
        if i >= self.capacity() {
            return Err(UsageError::UnknownTicket);
        }
        Ok((i, t.local() & Self::GEN_MASK))
    }

    /// Whether `gen` (a slot's full generation) matches a ticket's truncated one.
    fn same_gen(gen: u32, truncated: u64) -> bool {
        u64::from(gen) & Self::GEN_MASK == truncated
    }

    /// The slot a ticket of this queue names (any occupancy), or `None` for another
    /// queue's ticket or a slot beyond the capacity.
    pub fn slot_of(&self, ticket: Ticket) -> Option<usize> {
        self.decode(ticket).ok().map(|(i, _)| i)
    }

    /// The bound on waiters.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Levels in use.
    pub fn levels(&self) -> u8 {
        self.levels
    }

    fn clamp(&self, level: Priority) -> usize {
        level.index().min(self.levels as usize - 1)
    }

    /// Waiters at `level` (levels beyond the configured ones count as the last). Under
    /// concurrent changes it may count a waiter that just left, never miss one that was
    /// queued before the call.
    #[inline]
    pub fn waiting(&self, level: Priority) -> u32 {
        self.counts.waiting(self.clamp(level))
    }

    /// Waiters at `level` or more important.
    #[inline]
    pub fn waiting_through(&self, level: Priority) -> u32 {
        (0..=self.clamp(level)).map(|l| self.counts.waiting(l)).sum()
    }

    /// All waiters.
    #[inline]
    pub fn len(&self) -> u32 {
        (0..self.levels as usize).map(|l| self.counts.waiting(l)).sum()
    }

    /// Whether no waiter is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a waiter at `level` arriving at `enqueued_at` with `deadline`
    /// ([`NO_DEADLINE`] for none). If the queue is full and `evict` is set, the oldest
    /// waiter of the least important level *strictly less important* than `level` gives
    /// up its slot; the dispatcher reports its ticket (see [`Dispatcher::refresh`]).
    /// Returns `None` if there is no room. An arrival racing the departure of the last
    /// occupant of a full queue looks again (at most three times), so it is refused only
    /// if the queue stayed full through its attempts.
    pub fn push(
        &self,
        level: Priority,
        enqueued_at: u64,
        deadline: u64,
        evict: bool,
    ) -> Option<Ticket> {
        let lvl = self.clamp(level);
        // Whether to look beyond the hinted slot: decided only if that slot is taken (the
        // count costs a load per level and counter).
        let mut scan = None;
        for _ in 0..PUSH_ATTEMPTS {
            let room = || (self.len() as usize) < self.capacity();
            if let Some((i, gen, reclaimed)) = self.claim(lvl, || *scan.get_or_insert_with(room)) {
                let slot = &self.slots[i];
                // The slot is ours alone until published: nobody else CASes a CLAIMED word
                // (cancel, evict and dispatch all require WAITING or CANCELLED).
                slot.enqueued_at.store(enqueued_at, Ordering::Relaxed);
                slot.deadline.store(deadline, Ordering::Relaxed);
                self.counts.arrived[lvl].fetch_add(1, Ordering::Relaxed);
                if reclaimed {
                    // A cancelled waiter's slot, still flagged: it is on the attention stack
                    // (or in the dispatcher's hands), and settling it re-links it in
                    // arrival order. Release: as in `take_over`; an xor, not a store, for
                    // the same reason.
                    slot.state.fetch_xor(CLAIMED ^ WAITING, Ordering::Release);
                } else {
                    self.push_stack(&slot.link, INCOMING_SHIFT, i, 0);
                    // Release: pairs with the Acquire of the CAS in `cancel` and
                    // `take_over`, so a thread that sees WAITING also sees the push above,
                    // and the attention push it then makes reaches the dispatcher after
                    // this slot's incoming push.
                    slot.state.store(pack(gen, WAITING, lvl), Ordering::Release);
                }
                return Some(self.ticket(i, gen));
            }
            if !evict {
                return None;
            }
            if let Some(ticket) = self.take_over(lvl, enqueued_at, deadline) {
                return Some(ticket);
            }
            // No victim, or it left meanwhile (its slot may be free now): look everywhere.
            scan = Some(true);
        }
        None
    }

    /// Claims a slot for `lvl` with one CAS: the slot freed last first, then (if `scan()`)
    /// every free slot, then every cancelled slot not yet reclaimed by the dispatcher (the
    /// third value is `true` for those; the generation returned is the new occupant's).
    fn claim(&self, lvl: usize, scan: impl FnOnce() -> bool) -> Option<(usize, u32, bool)> {
        let cap = self.capacity();
        if cap == 0 {
            return None;
        }
        let start = self.hint.load(Ordering::Relaxed) as usize;
        let start = if start < cap { start } else { 0 };
        if let Some(gen) = self.claim_free(start, lvl) {
            return Some((start, gen, false));
        }
        if !scan() {
            return None;
        }
        for k in 1..cap {
            let i = if start + k < cap { start + k } else { start + k - cap };
            if let Some(gen) = self.claim_free(i, lvl) {
                return Some((i, gen, false));
            }
        }
        // No free slot: take over a cancelled one, unless an eviction from it is still to
        // be reported (the report names the generations before the current one, so the
        // cancelled generation cannot be skipped; such a slot waits for the dispatcher).
        for k in 0..cap {
            let i = if start + k < cap { start + k } else { start + k - cap };
            let slot = &self.slots[i];
            let s = slot.state.load(Ordering::Relaxed);
            if status_of(s) != CANCELLED || s & EVICTED_MASK != 0 {
                continue;
            }
            let gen = gen_of(s).wrapping_add(1);
            // The flag stays: the slot is on the attention stack already (set by cancel).
            // Acquire: pairs with the Release of the cancel's CAS, ordering the cancelled
            // occupant's writes before ours. Fails if the dispatcher freed it meanwhile.
            let new = pack(gen, CLAIMED, lvl) | ATTN;
            if slot.state.compare_exchange(s, new, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Some((i, gen, true));
            }
        }
        None
    }

    /// One CAS on slot `i` if it is free; the generation claimed.
    fn claim_free(&self, i: usize, lvl: usize) -> Option<u32> {
        let slot = &self.slots[i];
        let s = slot.state.load(Ordering::Relaxed);
        if status_of(s) != FREE {
            return None;
        }
        let gen = gen_of(s);
        // Acquire: pairs with the dispatcher's Release when it freed the slot.
        slot.state
            .compare_exchange(s, pack(gen, CLAIMED, lvl), Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // Relaxed: a hint.
        self.hint.store((i + 1) as u32, Ordering::Relaxed);
        Some(gen)
    }

    /// Full queue: take the slot of the oldest waiter at the least important level below
    /// `lvl` (one attempt; `None` if there is none or it changed meanwhile).
    fn take_over(&self, lvl: usize, enqueued_at: u64, deadline: u64) -> Option<Ticket> {
        let victim_level =
            (lvl + 1..self.levels as usize).rev().find(|&q| self.counts.waiting(q) > 0)?;
        let mut best: Option<(usize, u64, u64)> = None;
        for (i, slot) in self.slots[..self.capacity()].iter().enumerate() {
            let s = slot.state.load(Ordering::Relaxed);
            // A waiter that itself took a slot over is a fair victim too; only a slot with
            // 65,535 unreported evictions is skipped.
            if status_of(s) == WAITING
                && s & EVICTED_MASK != EVICTED_MASK
                && level_of(s) == victim_level
            {
                let at = slot.enqueued_at.load(Ordering::Relaxed);
                if best.is_none_or(|(_, _, b)| at < b) {
                    best = Some((i, s, at));
                }
            }
        }
        let (i, s, _) = best?;
        let slot = &self.slots[i];
        let gen = gen_of(s).wrapping_add(1);
        let new = pack(gen, CLAIMED, lvl) | ATTN | ((s & EVICTED_MASK) + EVICTED_ONE);
        // AcqRel: Acquire pairs with the victim's Release publish (its incoming push
        // happens before our attention push); Release orders our count below after it.
        slot.state.compare_exchange(s, new, Ordering::AcqRel, Ordering::Relaxed).ok()?;
        slot.enqueued_at.store(enqueued_at, Ordering::Relaxed);
        slot.deadline.store(deadline, Ordering::Relaxed);
        self.counts.arrived[lvl].fetch_add(1, Ordering::Relaxed);
        // Release: pairs with the Acquire loads in `Counts::waiting`.
        self.counts.evicted[victim_level].fetch_add(1, Ordering::Release);
        // The report is owed from here on, and a request for a round goes with it
        // (`needs_dispatch`): nothing else may show it, since this arrival may be
        // cancelled before any poll, leaving the queue without a waiter.
        if s & ATTN == 0 {
            // The request in the push's own CAS, so the round that takes the slot clears it.
            self.push_stack(&slot.attn_link, ATTENTION_SHIFT, i, PENDING);
        } else {
            // The slot is on the stack or the deferred list already, and whoever settles
            // it sees the new count. Release: pairs with the Acquire entry of the round
            // the request asks for, which then sees the count in the state word.
            self.ctl.fetch_or(PENDING, Ordering::Release);
        }
        // Release: pairs with the Acquire CAS in `cancel`/`take_over` (as in `push`). An
        // xor, not a store: the dispatcher may be clearing the flags meanwhile.
        slot.state.fetch_xor(CLAIMED ^ WAITING, Ordering::Release);
        Some(self.ticket(i, gen))
    }

    /// Withdraws a waiting ticket. Returns its level, or why not: another queue's ticket
    /// ([`UsageError::ForeignHandle`]); a ticket that already left — granted, expired,
    /// cancelled, evicted — ([`UsageError::UnknownTicket`]). Racing a grant, exactly one
    /// of them wins.
    pub fn cancel(&self, ticket: Ticket) -> Result<Priority, UsageError> {
        let (i, tgen) = self.decode(ticket)?;
        let slot = &self.slots[i];
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if !Self::same_gen(gen_of(s), tgen) || status_of(s) != WAITING {
                return Err(UsageError::UnknownTicket);
            }
            let new = (s & !STATUS_MASK) | CANCELLED | ATTN;
            // AcqRel: Acquire pairs with the waiter's Release publish (as in `take_over`).
            match slot.state.compare_exchange(s, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        let lvl = level_of(s);
        // Release: pairs with the Acquire loads in `Counts::waiting`.
        self.counts.cancelled[lvl].fetch_add(1, Ordering::Release);
        if s & ATTN == 0 {
            self.push_stack(&slot.attn_link, ATTENTION_SHIFT, i, 0);
        }
        Ok(priority(lvl))
    }

    /// Runs dispatch rounds if no other thread is dispatching; returns whether it did.
    ///
    /// `round` returns `true` when it finished its work, `false` when it stopped early
    /// (its output is full). If another thread asked for a round, or arrivals or cancels
    /// came in meanwhile, `round` runs again (after a `true`), up to [`MAX_ROUNDS`] rounds
    /// in all; then the rest is left for the next caller and
    /// [`needs_dispatch`](Self::needs_dispatch) is `true`, as it is after a call that
    /// left eviction reports for later (no room for them). A call that finds the
    /// dispatcher busy returns `false` at once and leaves a request the holder honours
    /// (in a round, or by leaving it flagged). A panic in `round` propagates after the
    /// queue is made whole (see the type's progress note). Arrivals and cancels taken in a round are always linked and
    /// settled, even if `round` does not call [`Dispatcher::refresh`].
    pub fn try_dispatch(&self, mut round: impl FnMut(&mut Dispatcher<'_, CAP>) -> bool) -> bool {
        let mut w = self.ctl.load(Ordering::Relaxed);
        loop {
            if w & BUSY != 0 {
                // Leave a request. Release: publishes this caller's earlier writes (a
                // permit it returned, say) to the holder's Acquire swap below.
                let prev = self.ctl.fetch_or(PENDING, Ordering::Release);
                if prev & BUSY != 0 {
                    return false;
                }
                // The holder left meanwhile: try to become the holder.
                w = prev | PENDING;
                continue;
            }
            // Enter and take both stacks in one step. Acquire: pairs with the pushers'
            // Release CAS and the previous holder's Release exit.
            match self.ctl.compare_exchange_weak(
                w,
                BUSY | STACKS_EMPTY,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        let mut hold = Hold {
            d: Dispatcher {
                q: self,
                incoming: head_of(w, INCOMING_SHIFT),
                attention: head_of(w, ATTENTION_SHIFT),
                rest: [END; 2],
                current: END,
                current_next: 0,
            },
            done: false,
        };
        let d = &mut hold.d;
        let mut rounds = 0;
        loop {
            let finished = round(d);
            rounds += 1;
            // Whatever the round did not take in is linked and settled now (reports wait).
            d.refresh(|_| false);
            // Eviction reports that did not fit (the output was full) stay owed: leave a
            // request, so `needs_dispatch` shows them although nothing may wait. Entering
            // cleared the request their eviction made. Dispatcher-private: a load.
            let owed = if self.deferred.load(Ordering::Relaxed) != END { PENDING } else { 0 };
            if !finished {
                hold.done = true;
                if owed != 0 {
                    self.ctl.fetch_or(PENDING, Ordering::Relaxed);
                }
                // Release: pairs with the next holder's Acquire. Stacks and PENDING stay
                // for that holder.
                self.ctl.fetch_and(!BUSY, Ordering::Release);
                return true;
            }
            // Release: as above. Fails if something was pushed or requested: go again.
            if self
                .ctl
                .compare_exchange(
                    BUSY | STACKS_EMPTY,
                    STACKS_EMPTY | owed,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                hold.done = true;
                return true;
            }
            if rounds >= MAX_ROUNDS {
                // Bounded: leave the new work and a request for the next caller
                // (`needs_dispatch` says so), instead of serving other threads for ever.
                hold.done = true;
                self.ctl.fetch_or(PENDING, Ordering::Relaxed);
                // Release: as above.
                self.ctl.fetch_and(!BUSY, Ordering::Release);
                return true;
            }
            // Acquire: pairs with the Release of each push or request since.
            let w = self.ctl.swap(BUSY | STACKS_EMPTY, Ordering::Acquire);
            d.incoming = head_of(w, INCOMING_SHIFT);
            d.attention = head_of(w, ATTENTION_SHIFT);
        }
    }

    /// Whether a dispatch round is owed although nobody is dispatching: a holder stopped
    /// at its bound of rounds, stopped early with a request pending, or panicked; or an
    /// arrival evicted a waiter and no round has reported it yet (none started since, or
    /// the last one had no room for the report): the only sign of that report once the
    /// arrival that evicted is cancelled, since then nothing waits. A hint (the word can
    /// change at once).
    pub fn needs_dispatch(&self) -> bool {
        let w = self.ctl.load(Ordering::Relaxed);
        w & (BUSY | PENDING) == PENDING
    }

    /// Arrival time of the oldest waiter (a scan of the slots: O(capacity)).
    pub fn oldest_enqueued_at(&self) -> Option<u64> {
        self.slots[..self.capacity()]
            .iter()
            .filter(|s| status_of(s.state.load(Ordering::Relaxed)) == WAITING)
            .map(|s| s.enqueued_at.load(Ordering::Relaxed))
            .min()
    }

    /// A snapshot (scans the slots: O(capacity)).
    pub fn metrics(&self) -> WaitQueueMetrics {
        let waiting_by_level = core::array::from_fn(|l| self.counts.waiting(l));
        let occupied = self.slots[..self.capacity()]
            .iter()
            .filter(|s| status_of(s.state.load(Ordering::Relaxed)) != FREE)
            .count() as u32;
        let sum = |a: &[AtomicU64; LEVELS]| a.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        WaitQueueMetrics {
            waiting_by_level,
            waiting: waiting_by_level.iter().sum(),
            occupied,
            capacity: self.capacity,
            oldest_enqueued_at: self.oldest_enqueued_at(),
            evictions: sum(&self.counts.evicted),
            cancels: sum(&self.counts.cancelled),
        }
    }

    /// Pushes slot `i` onto the stack at `shift` in the control word, linking through
    /// `link`, and sets `flags` (`PENDING` or none) in the same CAS. Push-only stacks
    /// taken whole need no ABA tag: the CAS succeeds only if the head is still the node
    /// we linked to.
    fn push_stack(&self, link: &AtomicU32, shift: u32, i: usize, flags: u64) {
        let mut w = self.ctl.load(Ordering::Relaxed);
        loop {
            link.store(head_of(w, shift), Ordering::Relaxed);
            let new = (w & !((END as u64) << shift)) | ((i as u64) << shift) | flags;
            // Release: pairs with the dispatcher's Acquire when it takes the stack,
            // publishing the slot's fields, state and link.
            match self.ctl.compare_exchange_weak(w, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => w = actual,
            }
        }
    }
}

/// The dispatcher's view of a [`WaitQueue`], lent to one thread at a time by
/// [`WaitQueue::try_dispatch`]. Navigation never returns a waiter that is being written,
/// cancelled or taken over; removal is one CAS that fails if the waiter left meanwhile.
#[derive(Debug)]
pub struct Dispatcher<'a, const CAP: usize> {
    q: &'a WaitQueue<CAP>,
    /// Taken, not yet linked: newest first.
    incoming: u32,
    /// Taken, not yet settled: newest first.
    attention: u32,
    /// The rest of the two lists `refresh` is settling (deferred, then this batch).
    rest: [u32; 2],
    /// The slot `settle` is working on, and the generation it is reporting.
    current: u32,
    current_next: u32,
}

/// Owns the dispatcher while a thread holds the dispatch flag. If a round panics, its drop
/// keeps everything taken for a later round and releases the flag, leaving a request for
/// the next caller, so a panic never wedges the queue.
struct Hold<'a, const CAP: usize> {
    d: Dispatcher<'a, CAP>,
    done: bool,
}

impl<const CAP: usize> Drop for Hold<'_, CAP> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.d.recover();
        let ctl = &self.d.q.ctl;
        ctl.fetch_or(PENDING, Ordering::Relaxed);
        // Release: publishes the recovered lists to the next holder's Acquire.
        ctl.fetch_and(!BUSY, Ordering::Release);
    }
}

/// What the dispatcher found in a linked slot.
enum Found {
    Waiter(Waiter),
    /// Being written by its arrival: leave it linked, look further.
    Busy,
    /// Flagged for attention: unlinked now, settled by `refresh`.
    Gone,
}

/// Reverses an intrusive list in place (the nodes belong to the dispatcher).
fn reverse<const CAP: usize>(
    slots: &[Slot; CAP],
    link: fn(&Slot) -> &AtomicU32,
    mut cur: u32,
) -> u32 {
    let mut reversed = END;
    while cur != END {
        let l = link(&slots[cur as usize]);
        let next = l.load(Ordering::Relaxed);
        l.store(reversed, Ordering::Relaxed);
        reversed = cur;
        cur = next;
    }
    reversed
}

impl<const CAP: usize> Dispatcher<'_, CAP> {
    /// Levels in use.
    pub fn levels(&self) -> u8 {
        self.q.levels
    }

    /// Waiters at `level`.
    pub fn waiting(&self, level: Priority) -> u32 {
        self.q.waiting(level)
    }

    /// Brings the lists up to date: links new arrivals at the tail of their level, oldest
    /// first, and settles cancelled and taken-over slots. Each evicted waiter's ticket is
    /// passed to `report`, oldest first; if it returns `false` (no room for the event), the
    /// evictions not yet reported are kept for a later round.
    pub fn refresh(&mut self, mut report: impl FnMut(Ticket) -> bool) {
        let q = self.q;
        // Link first: every slot flagged for attention was pushed to `incoming` before it
        // was flagged, and both stacks were taken together, so it is linked now.
        self.link_incoming();
        // Earlier rounds' deferred reports, then this batch, oldest first.
        // Dispatcher-private: a load and a store, no read-modify-write.
        let deferred = q.deferred.load(Ordering::Relaxed);
        if deferred == END && self.attention == END {
            // Nothing to settle (the common case: a round that only links arrivals).
            return;
        }
        if deferred != END {
            q.deferred.store(END, Ordering::Relaxed);
        }
        // The lists being settled live in `self`, so that if `report` panics the unwind
        // guard of `try_dispatch` can keep what is left for a later round.
        self.rest = [deferred, reverse(&q.slots, |s| &s.attn_link, self.attention)];
        self.attention = END;
        for k in 0..2 {
            while self.rest[k] != END {
                let i = self.rest[k] as usize;
                self.rest[k] = q.slots[i].attn_link.load(Ordering::Relaxed);
                self.current = i as u32;
                self.settle(i, &mut report);
                self.current = END;
            }
        }
    }

    /// Links the arrivals taken from the incoming stack at the tail of their levels.
    fn link_incoming(&mut self) {
        let q = self.q;
        let mut cur = reverse(&q.slots, |s| &s.link, self.incoming);
        self.incoming = END;
        while cur != END {
            let i = cur as usize;
            cur = q.slots[i].link.load(Ordering::Relaxed);
            let lvl = level_of(q.slots[i].state.load(Ordering::Relaxed));
            self.link_tail(lvl, i);
        }
    }

    /// After a panic in a round (or in `report`): links what was taken and keeps every
    /// slot not settled yet for a later round, so nothing taken from the stacks is lost.
    /// A report that was being made when the panic hit counts as not made.
    fn recover(&mut self) {
        let q = self.q;
        self.link_incoming();
        if self.current != END {
            let i = self.current as usize;
            self.current = END;
            let slot = &q.slots[i];
            let mut s = slot.state.load(Ordering::Acquire);
            while evicted_of(s) != 0 {
                let left = u64::from(gen_of(s).wrapping_sub(self.current_next)) << EVICTED_SHIFT;
                let new = (s & !EVICTED_MASK) | left;
                match slot.state.compare_exchange(s, new, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(actual) => s = actual,
                }
            }
            self.unlink(i);
            self.defer(i);
        }
        let batch = reverse(&q.slots, |s| &s.attn_link, self.attention);
        self.attention = END;
        for first in [self.rest[0], self.rest[1], batch] {
            let mut cur = first;
            while cur != END {
                let i = cur as usize;
                cur = q.slots[i].attn_link.load(Ordering::Relaxed);
                self.defer(i);
            }
        }
        self.rest = [END; 2];
    }

    /// Keeps slot `i` (still flagged) for a later round's reports, in order.
    fn defer(&mut self, i: usize) {
        let q = self.q;
        q.slots[i].attn_link.store(END, Ordering::Relaxed);
        let mut cur = q.deferred.load(Ordering::Relaxed);
        if cur == END {
            q.deferred.store(i as u32, Ordering::Relaxed);
            return;
        }
        loop {
            let next = q.slots[cur as usize].attn_link.load(Ordering::Relaxed);
            if next == END {
                q.slots[cur as usize].attn_link.store(i as u32, Ordering::Relaxed);
                return;
            }
            cur = next;
        }
    }

    /// Settles a flagged slot.
    fn settle(&mut self, i: usize, report: &mut impl FnMut(Ticket) -> bool) {
        let q = self.q;
        let slot = &q.slots[i];
        // Acquire: pairs with the Release of the CAS that flagged it (cancel/take-over).
        let mut s = slot.state.load(Ordering::Acquire);
        // The first evicted generation not yet reported.
        let mut next = gen_of(s).wrapping_sub(evicted_of(s));
        loop {
            while next != gen_of(s) {
                self.current_next = next;
                if !report(q.ticket(i, next)) {
                    // Out of room: keep the unreported ones (and the flag) for later.
                    loop {
                        let left = u64::from(gen_of(s).wrapping_sub(next)) << EVICTED_SHIFT;
                        let new = (s & !EVICTED_MASK) | left;
                        match slot.state.compare_exchange(
                            s,
                            new,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        ) {
                            Ok(_) => break,
                            Err(actual) => s = actual,
                        }
                    }
                    self.unlink(i);
                    self.defer(i);
                    return;
                }
                next = next.wrapping_add(1);
            }
            if status_of(s) == CANCELLED {
                self.unlink(i);
                // Release: pairs with the Acquire CAS in `claim`. Fails if an arrival took
                // the slot over meanwhile (only possible with no eviction pending, so every
                // generation before the new occupant's is settled). Acquire on failure: as
                // for the first load.
                let freed = pack(gen_of(s).wrapping_add(1), FREE, 0);
                match slot.state.compare_exchange(s, freed, Ordering::Release, Ordering::Acquire) {
                    Ok(_) => {
                        // Relaxed: a hint; the next arrival starts its search here.
                        q.hint.store(i as u32, Ordering::Relaxed);
                        return;
                    }
                    Err(actual) => {
                        s = actual;
                        next = gen_of(s).wrapping_sub(evicted_of(s));
                        continue;
                    }
                }
            }
            // CLAIMED or WAITING after a take-over: clear the flags, re-link at its level in
            // arrival order (it may have arrived before waiters linked since).
            let new = s & !(ATTN | EVICTED_MASK);
            match slot.state.compare_exchange(s, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.unlink(i);
                    let at = slot.enqueued_at.load(Ordering::Relaxed);
                    self.link_sorted(level_of(new), i, at);
                    return;
                }
                // A cancel, another take-over or the arrival publishing WAITING changed the
                // word: look again (reporting any new eviction).
                Err(actual) => s = actual,
            }
        }
    }

    fn inspect(&mut self, i: usize) -> Found {
        let slot = &self.q.slots[i];
        let s = slot.state.load(Ordering::Relaxed);
        if s & ATTN != 0 {
            self.unlink(i);
            return Found::Gone;
        }
        if status_of(s) != WAITING {
            return Found::Busy;
        }
        // Fields were published with the slot (incoming or attention push, Release) and
        // acquired when the stack was taken. If the slot changes hands after the load
        // above, the commit CAS in `remove` fails, so a mixed read is never acted on.
        Found::Waiter(Waiter {
            ticket: self.q.ticket(i, gen_of(s)),
            slot: i as u32,
            gen: gen_of(s),
            level: priority(level_of(s)),
            enqueued_at: slot.enqueued_at.load(Ordering::Relaxed),
            deadline: slot.deadline.load(Ordering::Relaxed),
        })
    }

    fn first_from(&mut self, mut i: u32, forward: bool) -> Option<Waiter> {
        while i != END {
            let slot = &self.q.slots[i as usize];
            let next = if forward {
                slot.next.load(Ordering::Relaxed)
            } else {
                slot.prev.load(Ordering::Relaxed)
            };
            if let Found::Waiter(w) = self.inspect(i as usize) {
                return Some(w);
            }
            i = next;
        }
        None
    }

    /// Whether anything is linked at `level` (a waiter, or an arrival still being
    /// written): O(1), a quick test before looking.
    pub fn has_linked(&self, level: Priority) -> bool {
        self.q.head[self.q.clamp(level)].load(Ordering::Relaxed) != END
    }

    /// The oldest waiter at `level` (FIFO end), skipping arrivals still being written.
    #[inline]
    pub fn oldest(&mut self, level: Priority) -> Option<Waiter> {
        let head = self.q.head[self.q.clamp(level)].load(Ordering::Relaxed);
        self.first_from(head, true)
    }

    /// The newest waiter at `level` (LIFO end).
    #[inline]
    pub fn newest(&mut self, level: Priority) -> Option<Waiter> {
        let tail = self.q.tail[self.q.clamp(level)].load(Ordering::Relaxed);
        self.first_from(tail, false)
    }

    /// The next waiter after `w` at its level (towards the newest), for scans. `w` must
    /// still be queued (call this before removing `w`).
    #[inline]
    pub fn newer(&mut self, w: &Waiter) -> Option<Waiter> {
        let i = self.own(w)?;
        let slot = &self.q.slots[i];
        if slot.linked.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let next = slot.next.load(Ordering::Relaxed);
        self.first_from(next, true)
    }

    /// `w`'s slot, if `w` was made by this queue's dispatcher (a waiter of another queue,
    /// however it was obtained, is refused here, so no index is ever out of bounds).
    fn own(&self, w: &Waiter) -> Option<usize> {
        let i = w.slot as usize;
        (w.ticket.owner() == self.q.owner && i < self.q.capacity()).then_some(i)
    }

    /// Takes `w` out of the queue (to grant or expire it). `false` if it already left
    /// (cancelled or evicted meanwhile) — then nothing changed.
    pub fn remove(&mut self, w: &Waiter) -> bool {
        let q = self.q;
        let Some(i) = self.own(w) else { return false };
        let lvl = w.level.index();
        let expected = pack(w.gen, WAITING, lvl);
        // Exactly one of this CAS, `cancel` and `take_over` succeeds on the waiting word.
        // Release: the slot is claimable from here on (pairs with the CAS in `claim`).
        let freed = pack(w.gen.wrapping_add(1), FREE, 0);
        if q.slots[i]
            .state
            .compare_exchange(expected, freed, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: a hint; the next arrival starts its search here.
        q.hint.store(i as u32, Ordering::Relaxed);
        self.unlink(i);
        q.counts.depart(lvl);
        true
    }

    /// Moves `w` to level `to`, keeping arrival order there (aging). `false` if it left.
    pub fn demote(&mut self, w: &Waiter, to: Priority) -> bool {
        let q = self.q;
        let Some(i) = self.own(w) else { return false };
        let from = w.level.index();
        let to = q.clamp(to);
        let expected = pack(w.gen, WAITING, from);
        let moved = pack(w.gen, WAITING, to);
        // Relaxed: as in `remove`; the fields do not change.
        if q.slots[i]
            .state
            .compare_exchange(expected, moved, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Count the arrival at `to` before the departure from `from`.
        q.counts.arrived[to].fetch_add(1, Ordering::Relaxed);
        q.counts.depart(from);
        self.unlink(i);
        self.link_sorted(to, i, w.enqueued_at);
        true
    }

    // ---- private doubly linked lists (Relaxed: only the holder touches them) ---------

    fn link_tail(&mut self, lvl: usize, i: usize) {
        let q = self.q;
        let tail = q.tail[lvl].load(Ordering::Relaxed);
        self.link_after(lvl, tail, i);
    }

    /// Links `i` into `lvl` after the last waiter that arrived no later than `at`.
    fn link_sorted(&mut self, lvl: usize, i: usize, at: u64) {
        let q = self.q;
        let mut after = q.tail[lvl].load(Ordering::Relaxed);
        while after != END && q.slots[after as usize].enqueued_at.load(Ordering::Relaxed) > at {
            after = q.slots[after as usize].prev.load(Ordering::Relaxed);
        }
        self.link_after(lvl, after, i);
    }

    fn link_after(&mut self, lvl: usize, after: u32, i: usize) {
        let q = self.q;
        let slot = &q.slots[i];
        let next = if after == END {
            q.head[lvl].load(Ordering::Relaxed)
        } else {
            q.slots[after as usize].next.load(Ordering::Relaxed)
        };
        slot.prev.store(after, Ordering::Relaxed);
        slot.next.store(next, Ordering::Relaxed);
        if after == END {
            q.head[lvl].store(i as u32, Ordering::Relaxed);
        } else {
            q.slots[after as usize].next.store(i as u32, Ordering::Relaxed);
        }
        if next == END {
            q.tail[lvl].store(i as u32, Ordering::Relaxed);
        } else {
            q.slots[next as usize].prev.store(i as u32, Ordering::Relaxed);
        }
        slot.linked.store(lvl as u8 + 1, Ordering::Relaxed);
    }

    fn unlink(&mut self, i: usize) {
        let q = self.q;
        let slot = &q.slots[i];
        let linked = slot.linked.load(Ordering::Relaxed);
        if linked == 0 {
            return;
        }
        let lvl = linked as usize - 1;
        let prev = slot.prev.load(Ordering::Relaxed);
        let next = slot.next.load(Ordering::Relaxed);
        if prev == END {
            q.head[lvl].store(next, Ordering::Relaxed);
        } else {
            q.slots[prev as usize].next.store(next, Ordering::Relaxed);
        }
        if next == END {
            q.tail[lvl].store(prev, Ordering::Relaxed);
        } else {
            q.slots[next as usize].prev.store(prev, Ordering::Relaxed);
        }
        slot.linked.store(0, Ordering::Relaxed);
    }
}

// ---- recovery after a thread lost inside the queue (shared memory) ----------------------

impl<const CAP: usize> WaitQueue<CAP> {
    /// Whether `ticket` still waits in this queue (neither granted, expired, cancelled nor
    /// evicted).
    #[doc(hidden)]
    pub fn is_waiting(&self, ticket: Ticket) -> bool {
        self.decode(ticket).is_ok_and(|(i, tgen)| {
            // Relaxed: a snapshot of one word; nothing else is read on its strength.
            let s = self.slots[i].state.load(Ordering::Relaxed);
            status_of(s) == WAITING && Self::same_gen(gen_of(s), tgen)
        })
    }

    /// Rebuilds everything a thread that stopped for good inside the queue may have left
    /// half done — the dispatch flag held, the stacks it had taken, half-linked lists, an
    /// arrival claimed but not published, the counts — from the slots' state words, which
    /// are the truth (each changes by one CAS). Waiting slots are re-linked at their level
    /// in arrival order; cancelled, taken-over and unfinished arrivals' slots are kept for
    /// the next round to settle (evictions are still reported); an unpublished fresh
    /// arrival's slot is freed (its ticket was never handed out). Leaves a dispatch
    /// request. For a shared-memory gate whose dispatching process was killed.
    ///
    /// # Safety
    ///
    /// No other thread uses the queue during the call (a lock around every operation on
    /// it), and no thread that was inside it before the call ever runs again. Not
    /// memory-unsafe otherwise, but it would corrupt the lists.
    #[doc(hidden)]
    #[allow(unsafe_code)]
    pub unsafe fn rebuild_after_lost_thread(&self) {
        let cap = self.capacity();
        for l in 0..LEVELS {
            self.head[l].store(END, Ordering::Relaxed);
            self.tail[l].store(END, Ordering::Relaxed);
        }
        self.deferred.store(END, Ordering::Relaxed);
        for slot in &self.slots[..cap] {
            slot.link.store(END, Ordering::Relaxed);
            slot.attn_link.store(END, Ordering::Relaxed);
            slot.prev.store(END, Ordering::Relaxed);
            slot.next.store(END, Ordering::Relaxed);
            slot.linked.store(0, Ordering::Relaxed);
        }
        let mut d = Dispatcher {
            q: self,
            incoming: END,
            attention: END,
            rest: [END; 2],
            current: END,
            current_next: 0,
        };
        let mut waiting = [0u64; LEVELS];
        for (i, slot) in self.slots[..cap].iter().enumerate() {
            // Acquire: pairs with the Release of whichever CAS or store wrote the word
            // (publish, cancel, take-over, free), so the slot's fields are seen with it.
            let s = slot.state.load(Ordering::Acquire);
            match status_of(s) {
                WAITING if s & ATTN == 0 => {
                    waiting[level_of(s)] += 1;
                    let at = slot.enqueued_at.load(Ordering::Relaxed);
                    d.link_sorted(level_of(s), i, at);
                }
                WAITING => {
                    waiting[level_of(s)] += 1;
                    d.defer(i);
                }
                CLAIMED if s & (ATTN | EVICTED_MASK) == 0 => {
                    // A fresh arrival never published: its ticket was never returned.
                    // Release: pairs with the Acquire CAS in `claim`, as a free by the
                    // dispatcher does.
                    slot.state.store(pack(gen_of(s), FREE, 0), Ordering::Release);
                }
                CLAIMED | CANCELLED => {
                    // An unfinished take-over or reuse (its evictions still to report), or
                    // a cancel: settled (freed) by the next round.
                    let new = (s & !STATUS_MASK) | CANCELLED | ATTN;
                    // Release: pairs with the Acquire load in `settle`.
                    slot.state.store(new, Ordering::Release);
                    d.defer(i);
                }
                _ => {}
            }
        }
        // Departures are the arrivals not cancelled, evicted or still waiting.
        for (l, w) in waiting.iter().enumerate() {
            let c = &self.counts;
            let gone =
                c.cancelled[l].load(Ordering::Relaxed) + c.evicted[l].load(Ordering::Relaxed) + w;
            let departed = c.arrived[l].load(Ordering::Relaxed).saturating_sub(gone);
            // Release: pairs with the Acquire load in `Counts::waiting`.
            c.departed[l].store(departed, Ordering::Release);
        }
        // Release: the next holder's Acquire entry sees the rebuilt lists.
        self.ctl.store(STACKS_EMPTY | PENDING, Ordering::Release);
    }

    /// Test hook: enters a dispatch round as `try_dispatch` does, links the arrivals,
    /// takes the oldest waiter of the most important level out of the queue if `take`
    /// says so, and stops there for good, the dispatch flag held — what a dispatcher
    /// killed inside a round leaves. Returns the ticket taken out. `None` (and nothing
    /// done) if another thread is dispatching.
    #[doc(hidden)]
    pub fn abandon_dispatch_round(&self, take: impl FnOnce(&Waiter) -> bool) -> Option<Ticket> {
        let mut w = self.ctl.load(Ordering::Relaxed);
        loop {
            if w & BUSY != 0 {
                return None;
            }
            match self.ctl.compare_exchange_weak(
                w,
                BUSY | STACKS_EMPTY,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        let mut d = Dispatcher {
            q: self,
            incoming: head_of(w, INCOMING_SHIFT),
            attention: head_of(w, ATTENTION_SHIFT),
            rest: [END; 2],
            current: END,
            current_next: 0,
        };
        d.link_incoming();
        let oldest = (0..self.levels as usize).find_map(|l| d.oldest(priority(l)))?;
        (take(&oldest) && d.remove(&oldest)).then(|| oldest.ticket())
    }
}

/// The rebuild after an arrival killed half way (the states `push` and `take_over` leave
/// between their steps, made by hand).
#[cfg(all(test, not(loom)))]
mod rebuild_tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// Refreshes (collecting evictions), then takes every waiter, most important first.
    fn drain<const C: usize>(q: &WaitQueue<C>) -> (Vec<Ticket>, Vec<Ticket>) {
        let (mut evicted, mut taken) = (Vec::new(), Vec::new());
        assert!(q.try_dispatch(|d| {
            d.refresh(|t| {
                evicted.push(t);
                true
            });
            for l in 0..d.levels() as usize {
                while let Some(w) = d.oldest(priority(l)) {
                    assert!(d.remove(&w));
                    taken.push(w.ticket());
                }
            }
            true
        }));
        (evicted, taken)
    }

    #[test]
    fn an_arrival_killed_after_its_claim_leaves_a_free_slot() {
        for counted in [false, true] {
            let q = WaitQueue::<4>::new(2, 4).unwrap();
            let a = q.push(priority(0), 1, NO_DEADLINE, false).unwrap();
            let b = q.push(priority(0), 2, NO_DEADLINE, false).unwrap();
            // Killed after its CAS (and perhaps its count), before publishing.
            let (i, _, reclaimed) = q.claim(1, || true).unwrap();
            assert!(!reclaimed);
            if counted {
                q.counts.arrived[1].fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: this thread alone uses the queue.
            #[allow(unsafe_code)]
            unsafe {
                q.rebuild_after_lost_thread()
            };
            assert_eq!(status_of(q.slots[i].state.load(Ordering::Relaxed)), FREE);
            assert_eq!(q.len(), 2);
            assert!(q.needs_dispatch());
            assert_eq!(drain(&q), (vec![], vec![a, b]));
            assert_eq!(q.len(), 0);
            // Every slot can be taken again.
            for k in 0..4 {
                assert!(q.push(priority(1), 10 + k, NO_DEADLINE, false).is_some());
            }
            assert_eq!(q.len(), 4);
        }
    }

    #[test]
    fn an_arrival_killed_inside_its_take_over_still_reports_the_eviction() {
        let q = WaitQueue::<2>::new(2, 2).unwrap();
        let v1 = q.push(priority(1), 1, NO_DEADLINE, false).unwrap();
        let v2 = q.push(priority(1), 2, NO_DEADLINE, false).unwrap();
        // A more important arrival's take-over CAS on the oldest, then killed (no count,
        // no attention push, never published).
        let (i, _) = q.decode(v1).unwrap();
        let s = q.slots[i].state.load(Ordering::Relaxed);
        let new = pack(gen_of(s).wrapping_add(1), CLAIMED, 0) | ATTN | EVICTED_ONE;
        q.slots[i].state.store(new, Ordering::Relaxed);
        // SAFETY: this thread alone uses the queue.
        #[allow(unsafe_code)]
        unsafe {
            q.rebuild_after_lost_thread()
        };
        assert_eq!(q.waiting(priority(0)), 0);
        assert_eq!(q.waiting(priority(1)), 1);
        // The victim is reported once, the slot freed, the other waiter served.
        assert_eq!(drain(&q), (vec![v1], vec![v2]));
        assert_eq!(drain(&q), (vec![], vec![]));
        assert_eq!(q.len(), 0);
        assert!(q.push(priority(0), 5, NO_DEADLINE, false).is_some());
        assert!(q.push(priority(0), 6, NO_DEADLINE, false).is_some());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::vec::Vec;

    const P0: Priority = Priority::CRITICAL;
    const P1: Priority = Priority::NORMAL;
    const P2: Priority = Priority::BACKGROUND;

    /// Refreshes, then drains every level in `order` (FIFO or LIFO), returning tickets.
    fn drain<const C: usize>(q: &WaitQueue<C>, lifo: bool) -> Vec<Ticket> {
        let mut out = Vec::new();
        assert!(q.try_dispatch(|d| {
            d.refresh(|_| true);
            for l in 0..d.levels() {
                let p = Priority::new(l).unwrap();
                while let Some(w) = if lifo { d.newest(p) } else { d.oldest(p) } {
                    assert!(d.remove(&w));
                    out.push(w.ticket());
                }
            }
            true
        }));
        out
    }

    #[test]
    fn capacity_is_drain_rate_times_wait_budget() {
        assert_eq!(capacity_for(2_000, 100 * crate::time::MS), 200);
        assert_eq!(capacity_for(1, 1), 1, "rounds up");
        assert_eq!(capacity_for(0, SEC), 0);
        assert_eq!(capacity_for(u64::MAX, u64::MAX), MAX_CAPACITY);
    }

    #[test]
    fn config_is_checked() {
        assert!(WaitQueue::<4>::new(0, 4).is_err());
        assert!(WaitQueue::<4>::new(9, 4).is_err());
        assert!(WaitQueue::<4>::new(3, 5).is_err());
        let q = WaitQueue::<4>::new(3, 0).unwrap();
        assert_eq!(q.push(P0, 0, NO_DEADLINE, true), None, "capacity 0 holds nothing");
    }

    #[test]
    fn fifo_within_a_level_and_most_important_level_first() {
        let q = WaitQueue::<8>::new(3, 8).unwrap();
        let b1 = q.push(P2, 1, NO_DEADLINE, false).unwrap();
        let n1 = q.push(P1, 2, NO_DEADLINE, false).unwrap();
        let b2 = q.push(P2, 3, NO_DEADLINE, false).unwrap();
        let c1 = q.push(P0, 4, NO_DEADLINE, false).unwrap();
        let n2 = q.push(P1, 5, NO_DEADLINE, false).unwrap();
        assert_eq!((q.waiting(P0), q.waiting(P1), q.waiting(P2)), (1, 2, 2));
        assert_eq!(q.waiting_through(P1), 3);
        assert_eq!(drain(&q, false), [c1, n1, n2, b1, b2]);
        assert!(q.is_empty());
    }

    #[test]
    fn lifo_takes_the_newest_first() {
        let q = WaitQueue::<8>::new(1, 8).unwrap();
        let t: Vec<_> = (0..4).map(|k| q.push(P0, k, NO_DEADLINE, false).unwrap()).collect();
        assert_eq!(drain(&q, true), [t[3], t[2], t[1], t[0]]);
    }

    #[test]
    fn never_holds_more_than_capacity_and_reuses_slots() {
        let q = WaitQueue::<3>::new(1, 3).unwrap();
        let t: Vec<_> = (0..3).map(|k| q.push(P0, k, NO_DEADLINE, true).unwrap()).collect();
        assert_eq!(q.push(P0, 9, NO_DEADLINE, true), None, "same level never evicts");
        assert_eq!(q.metrics().occupied, 3);
        assert_eq!(drain(&q, false), t);
        let again: Vec<_> = (0..3).map(|k| q.push(P0, k, NO_DEADLINE, false).unwrap()).collect();
        for (a, b) in again.iter().zip(&t) {
            assert_ne!(a, b, "a reused slot has a new generation");
        }
    }

    #[test]
    fn stale_foreign_and_bogus_tickets_are_refused() {
        let q = WaitQueue::<2>::new(1, 2).unwrap();
        let other = WaitQueue::<2>::new(1, 2).unwrap();
        let t = q.push(P0, 0, NO_DEADLINE, false).unwrap();
        assert_eq!(other.cancel(t), Err(UsageError::ForeignHandle));
        let bogus = Ticket::from_bits(t.to_bits() | 0xFF00_0000);
        assert_eq!(q.cancel(bogus), Err(UsageError::UnknownTicket));
        assert_eq!(q.cancel(Ticket::from_bits(t.to_bits() + 1)), Err(UsageError::UnknownTicket));
        assert_eq!(q.cancel(t), Ok(P0));
        assert_eq!(q.cancel(t), Err(UsageError::UnknownTicket), "cancel twice");
        assert_eq!(drain(&q, false), []);
        let u = q.push(P0, 0, NO_DEADLINE, false).unwrap();
        assert_eq!(q.cancel(t), Err(UsageError::UnknownTicket), "stale after reuse");
        assert_eq!(drain(&q, false), [u]);
        assert_eq!(q.cancel(u), Err(UsageError::UnknownTicket), "granted");
    }

    #[test]
    fn a_cancelled_slot_is_reused_at_once() {
        let q = WaitQueue::<2>::new(1, 2).unwrap();
        let a = q.push(P0, 0, NO_DEADLINE, false).unwrap();
        let b = q.push(P0, 1, NO_DEADLINE, false).unwrap();
        q.cancel(a).unwrap();
        assert_eq!(q.len(), 1);
        let c = q.push(P0, 2, NO_DEADLINE, false).expect("the cancelled slot is taken over");
        assert_ne!(c, a, "a new generation");
        assert_eq!(q.cancel(a), Err(UsageError::UnknownTicket), "the old ticket stays dead");
        assert_eq!(q.metrics().occupied, 2);
        assert_eq!(q.push(P0, 3, NO_DEADLINE, false), None, "now really full");
        // The round settles the reused slot in arrival order and reports nothing for `a`.
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert!(reports.is_empty());
        assert_eq!(drain(&q, false), [b, c]);
        assert_eq!(q.metrics().cancels, 1);
    }

    #[test]
    fn a_cancelled_slot_that_owes_an_eviction_report_waits_for_the_round() {
        let q = WaitQueue::<1>::new(2, 1).unwrap();
        let b = q.push(P1, 0, NO_DEADLINE, true).unwrap();
        let c = q.push(P0, 1, NO_DEADLINE, true).unwrap(); // evicts b: report pending
        q.cancel(c).unwrap();
        assert_eq!(q.push(P0, 2, NO_DEADLINE, true), None, "the slot still owes b's report");
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert_eq!(reports, [b], "b reported once, the cancelled c never");
        let e = q.push(P0, 3, NO_DEADLINE, true).unwrap();
        assert_eq!(drain(&q, false), [e]);
    }

    #[test]
    fn a_reused_slot_can_be_evicted_and_cancelled_again() {
        let q = WaitQueue::<2>::new(3, 2).unwrap();
        let a = q.push(P2, 0, NO_DEADLINE, true).unwrap();
        let b = q.push(P1, 1, NO_DEADLINE, true).unwrap();
        q.cancel(a).unwrap();
        let c = q.push(P2, 2, NO_DEADLINE, true).unwrap(); // reuses a's slot
        let d0 = q.push(P0, 3, NO_DEADLINE, true).unwrap(); // full: evicts c (background)
        assert_eq!(q.cancel(c), Err(UsageError::UnknownTicket), "evicted");
        q.cancel(b).unwrap();
        let e = q.push(P1, 4, NO_DEADLINE, true).unwrap(); // reuses b's slot
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert_eq!(reports, [c], "only the evicted c; never a or b");
        assert_eq!(drain(&q, false), [d0, e]);
        let m = q.metrics();
        assert_eq!((m.cancels, m.evictions, m.occupied), (2, 1, 0));
    }

    #[test]
    fn full_queue_evicts_the_oldest_least_important_waiter() {
        let q = WaitQueue::<3>::new(3, 3).unwrap();
        let n = q.push(P1, 1, NO_DEADLINE, true).unwrap();
        let b_old = q.push(P2, 2, NO_DEADLINE, true).unwrap();
        let b_new = q.push(P2, 3, NO_DEADLINE, true).unwrap();
        assert_eq!(q.push(P2, 4, NO_DEADLINE, true), None, "equal level is refused");
        assert_eq!(q.push(P1, 4, NO_DEADLINE, false), None, "no eviction unless asked");
        let c = q.push(P0, 5, NO_DEADLINE, true).unwrap();
        assert_eq!((q.waiting(P0), q.waiting(P1), q.waiting(P2)), (1, 1, 1));
        assert_eq!(q.cancel(b_old), Err(UsageError::UnknownTicket), "evicted");
        let mut reports = Vec::new();
        let mut order = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push((t, P2));
                true
            });
            for l in 0..3 {
                while let Some(w) = d.oldest(Priority::new(l).unwrap()) {
                    assert!(d.remove(&w));
                    order.push(w.ticket());
                }
            }
            true
        });
        assert_eq!(reports, [(b_old, P2)]);
        assert_eq!(order, [c, n, b_new]);
        assert_eq!(q.metrics().evictions, 1);
    }

    #[test]
    fn an_eviction_report_waits_for_room() {
        let q = WaitQueue::<1>::new(2, 1).unwrap();
        let b = q.push(P1, 0, NO_DEADLINE, true).unwrap();
        let c = q.push(P0, 1, NO_DEADLINE, true).unwrap();
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|_| false);
            assert_eq!(d.oldest(P0), None, "not dispatchable before its eviction is reported");
            true
        });
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            assert_eq!(d.oldest(P0).map(|w| w.ticket()), Some(c));
            true
        });
        assert_eq!(reports, [b]);
    }

    #[test]
    fn a_waiter_that_evicted_can_be_evicted_before_the_next_round() {
        let q = WaitQueue::<1>::new(3, 1).unwrap();
        let b = q.push(P2, 0, NO_DEADLINE, true).unwrap();
        let n = q.push(P1, 1, NO_DEADLINE, true).unwrap();
        let c = q.push(P0, 2, NO_DEADLINE, true).unwrap();
        assert_eq!((q.waiting(P0), q.waiting(P1), q.waiting(P2)), (1, 0, 0));
        // Room for one report per round: both come out, oldest first, then c is linked.
        let mut reports = Vec::new();
        for _ in 0..2 {
            q.try_dispatch(|d| {
                let mut room = 1;
                d.refresh(|t| {
                    if room == 0 {
                        return false;
                    }
                    room -= 1;
                    reports.push(t);
                    true
                });
                true
            });
        }
        assert_eq!(reports, [b, n]);
        assert_eq!(drain(&q, false), [c]);
        assert_eq!(q.metrics().evictions, 2);
    }

    #[test]
    fn cancel_after_eviction_reports_and_frees() {
        let q = WaitQueue::<1>::new(2, 1).unwrap();
        let b = q.push(P1, 0, NO_DEADLINE, true).unwrap();
        let c = q.push(P0, 1, NO_DEADLINE, true).unwrap();
        assert_eq!(q.cancel(c), Ok(P0));
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert_eq!(reports, [b]);
        assert!(q.is_empty());
        assert!(q.push(P1, 2, NO_DEADLINE, false).is_some(), "slot freed");
    }

    #[test]
    fn an_unreported_eviction_asks_for_a_round_after_its_evictor_is_cancelled() {
        // Before, once c was cancelled nothing showed that b's report was still owed: no
        // waiter and no round asked for, so a caller that polls while anyone waits (or at
        // its wake-up) never polled again and b never got an event.
        let q = WaitQueue::<1>::new(2, 1).unwrap();
        let b = q.push(P1, 0, NO_DEADLINE, true).unwrap();
        assert!(!q.needs_dispatch(), "a plain arrival asks for no round");
        let c = q.push(P0, 1, NO_DEADLINE, true).unwrap(); // evicts b
        q.cancel(c).unwrap();
        assert!(q.is_empty());
        assert!(q.needs_dispatch(), "b's report is owed");
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert_eq!(reports, [b]);
        assert!(!q.needs_dispatch(), "reported: nothing owed");
        // A second eviction from a slot whose first is still unreported (no push: the
        // slot is on the deferred list already) asks again, and both are reported.
        let q = WaitQueue::<1>::new(3, 1).unwrap();
        let bg = q.push(P2, 0, NO_DEADLINE, true).unwrap();
        let n = q.push(P1, 1, NO_DEADLINE, true).unwrap(); // evicts bg
        assert!(q.try_dispatch(|d| {
            d.refresh(|_| false); // no room: bg's report is deferred
            false
        }));
        let c = q.push(P0, 2, NO_DEADLINE, true).unwrap(); // evicts n, slot still flagged
        q.cancel(c).unwrap();
        assert!(q.needs_dispatch(), "n's report is owed");
        let mut reports = Vec::new();
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert_eq!(reports, [bg, n]);
        assert!(!q.needs_dispatch() && q.is_empty());
    }

    #[test]
    fn an_eviction_report_left_for_lack_of_room_still_asks_for_a_round() {
        // Before, the round that had room for only one of two reports cleared the request
        // the evictions made and left none: with the evictor cancelled nothing waited, so
        // `needs_dispatch` was false and a caller that polls while anyone waits or at its
        // wake-up never polled again (gate_fuzz at 200,000 cases: "ticket 1 never ended").
        let q = WaitQueue::<1>::new(3, 1).unwrap();
        let a = q.push(P2, 0, NO_DEADLINE, true).unwrap();
        let b = q.push(P1, 1, NO_DEADLINE, true).unwrap(); // evicts a
        let c = q.push(P0, 2, NO_DEADLINE, true).unwrap(); // evicts b
        q.cancel(c).unwrap();
        let mut reports = Vec::new();
        assert!(q.try_dispatch(|d| {
            d.refresh(|t| {
                let room = reports.is_empty();
                if room {
                    reports.push(t);
                }
                room
            });
            false // the output is full
        }));
        assert_eq!(reports, [a]);
        assert!(q.is_empty());
        assert!(q.needs_dispatch(), "b's report is still owed");
        // A round that finishes without settling (the reports wait) leaves the request too.
        assert!(q.try_dispatch(|_| true));
        assert!(q.needs_dispatch(), "b's report is still owed after a round without room");
        q.try_dispatch(|d| {
            d.refresh(|t| {
                reports.push(t);
                true
            });
            true
        });
        assert_eq!(reports, [a, b]);
        assert!(!q.needs_dispatch(), "reported: nothing owed");
        assert!(q.push(P0, 3, NO_DEADLINE, true).is_some(), "the place is free again");
    }

    #[test]
    fn demote_keeps_arrival_order_in_the_new_level() {
        let q = WaitQueue::<4>::new(3, 4).unwrap();
        let b1 = q.push(P2, 10, NO_DEADLINE, false).unwrap();
        let n = q.push(P1, 20, NO_DEADLINE, false).unwrap();
        let b2 = q.push(P2, 30, NO_DEADLINE, false).unwrap();
        q.try_dispatch(|d| {
            d.refresh(|_| true);
            let w = d.oldest(P1).unwrap();
            assert!(d.demote(&w, P2));
            true
        });
        assert_eq!((q.waiting(P1), q.waiting(P2)), (0, 3));
        assert_eq!(drain(&q, false), [b1, n, b2]);
    }

    #[test]
    fn newer_walks_and_remove_of_a_cancelled_waiter_fails() {
        let q = WaitQueue::<4>::new(1, 4).unwrap();
        let t: Vec<_> = (0..3).map(|k| q.push(P0, k, NO_DEADLINE, false).unwrap()).collect();
        let mut rounds = 0;
        q.try_dispatch(|d| {
            rounds += 1;
            if rounds > 1 {
                return true; // the cancel below asks for another round
            }
            d.refresh(|_| true);
            let a = d.oldest(P0).unwrap();
            let b = d.newer(&a).unwrap();
            assert_eq!(b.ticket(), t[1]);
            q.cancel(t[1]).unwrap();
            assert!(!d.remove(&b), "cancelled meanwhile");
            assert_eq!(d.newer(&a).map(|w| w.ticket()), Some(t[2]), "skips the cancelled one");
            true
        });
        assert_eq!(rounds, 2);
        assert_eq!(drain(&q, false), [t[0], t[2]]);
    }

    #[test]
    fn a_nested_dispatch_returns_at_once_and_gets_another_round() {
        let q = WaitQueue::<2>::new(1, 2).unwrap();
        let mut rounds = 0;
        let ran = q.try_dispatch(|_| {
            rounds += 1;
            if rounds == 1 {
                assert!(!q.try_dispatch(|_| unreachable!()), "busy: returns at once");
            }
            true
        });
        assert!(ran);
        assert_eq!(rounds, 2, "the refused request got its round");
        // A round that stops early leaves the dispatcher free.
        assert!(q.try_dispatch(|_| false));
        assert!(q.try_dispatch(|_| true));
    }
}
