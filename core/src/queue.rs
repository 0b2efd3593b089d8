//! The admission queue's storage: a bounded, lock-free set of waiters kept in per-level
//! arrival order, drained by one dispatcher at a time.
//!
//! Arrivals ([`WaitQueue::push`]) and cancellations ([`WaitQueue::cancel`]) never wait for
//! another thread; the dispatcher ([`WaitQueue::try_dispatch`]) is single-consumer — a
//! second thread that tries to dispatch while one is inside returns at once, and the
//! thread inside runs one more round on its behalf — the same "whoever wins the CAS does
//! the work, everyone else moves on" rule the limiter uses to fold windows (DESIGN.md §2).
//!
//! Layout (DESIGN.md §2 "fixed layout"): a const-generic array of slots, addressed by
//! index, never by pointer. Each slot has one atomic state word
//! (`generation | flags | level | status`) and the waiter's times. Four intrusive lists
//! thread through the slots:
//!
//! - the **free list** — a Treiber stack with a tag against ABA; arrivals pop, the
//!   dispatcher pushes;
//! - the **incoming stack** — arrivals push, the dispatcher takes it whole and links the
//!   new waiters, oldest first, at the tail of their level;
//! - the **attention stack** — a cancel, or an eviction that took a slot over, pushes the
//!   slot here so the dispatcher unlinks it (and reports the evicted ticket);
//! - per-level **doubly linked lists** in arrival order, touched only by the dispatcher —
//!   O(1) at both ends, so FIFO, LIFO and oldest-end expiry all cost the same.
//!
//! A waiter leaves exactly once, by one compare-and-swap on its state word: granted or
//! expired by the dispatcher, cancelled by its owner, or taken over by a more important
//! arrival. Whoever wins the CAS owns the outcome; the others see a changed word.

use crate::sync::{next_instance_id, AtomicU32, AtomicU64, AtomicU8, Ordering};
use crate::time::SEC;
use crate::{ConfigError, Priority, UsageError};

const LEVELS: usize = Priority::MAX_LEVELS;

/// `deadline` value meaning "no deadline".
pub const NO_DEADLINE: u64 = u64::MAX;
/// The largest capacity a queue can have (slot indices are 16 bits in a [`Ticket`]).
pub const MAX_CAPACITY: usize = 0xFFFF;

/// Sizes a queue by time, not count (seed 004: "max_queue_len = drain_rate ×
/// max_acceptable_wait"): `ceil(drain_per_sec × wait_budget_ns / 1 s)`, at most
/// [`MAX_CAPACITY`]. Usable in a const generic.
///
/// ```
/// use surgeguard_core::queue::capacity_for;
/// use surgeguard_core::time::MS;
/// // Seed 004: 2,000 req/s and a 100 ms wait budget is 200 slots, not 10,000.
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
/// Not in use; in the free list (or being moved to it by the dispatcher).
const FREE: u64 = 0;
/// Taken by an arrival that is still writing it; not yet cancellable or dispatchable.
const CLAIMED: u64 = 1;
/// Waiting: may be granted, expired, cancelled or evicted (first CAS wins).
const WAITING: u64 = 2;
/// Cancelled by its owner; the dispatcher frees it.
const CANCELLED: u64 = 3;
/// Bit 3: the slot is on the attention stack (set by whoever pushed it).
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

/// End of an intrusive list.
const NIL: u32 = u32::MAX;
/// Free-list head: low 32 bits the slot index, high 32 bits an ABA tag.
const FREE_INDEX_MASK: u64 = 0xFFFF_FFFF;
const FREE_TAG_ONE: u64 = 1 << 32;

/// Dispatch word: a thread is dispatching.
const BUSY: u32 = 1;
/// Dispatch word: someone asked for a dispatch round since the holder's last round began
/// (or, without `BUSY`, since the last holder stopped early).
const PENDING: u32 = 2;

/// How many times an arrival retries taking over a victim that changed under it.
const EVICT_ATTEMPTS: usize = 3;

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
fn priority(level: usize) -> Priority {
    Priority::new(level as u8).unwrap_or_default()
}

/// A queued waiter's handle: which queue, which slot, which occupancy of the slot.
///
/// Copyable and 64 bits wide, so bindings can key their waiters by it (`to_bits`). A
/// ticket whose waiter already left (granted, expired, cancelled, evicted) or that comes
/// from another queue is detected and refused with a [`UsageError`]. Generations are 32
/// bits per slot and queue ids 16 bits, so a ticket held across four billion reuses of
/// its slot, or presented to a queue created 65,536 queues later, is not told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

impl Ticket {
    const fn new(owner: u16, slot: usize, gen: u32) -> Self {
        Self(((owner as u64) << 48) | ((slot as u64) << 32) | gen as u64)
    }
    /// The ticket as one number (for maps and the C ABI).
    pub const fn to_bits(self) -> u64 {
        self.0
    }
    /// A ticket from [`to_bits`](Self::to_bits). Any number is accepted; a number that
    /// is not a live ticket is refused by the queue that is given it.
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }
    const fn owner(self) -> u16 {
        (self.0 >> 48) as u16
    }
    const fn slot(self) -> usize {
        ((self.0 >> 32) & 0xFFFF) as usize
    }
    const fn gen(self) -> u32 {
        self.0 as u32
    }
}

/// A waiter as the dispatcher sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// Its handle.
    pub ticket: Ticket,
    /// Its level (after any aging).
    pub level: Priority,
    /// The `now` it arrived at.
    pub enqueued_at: u64,
    /// Its deadline, or [`NO_DEADLINE`].
    pub deadline: u64,
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
struct Slot {
    state: AtomicU64,
    enqueued_at: AtomicU64,
    deadline: AtomicU64,
    /// Free list or incoming stack (a slot is in at most one of them).
    link: AtomicU32,
    /// Attention stack.
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
            link: AtomicU32::new(NIL),
            attn_link: AtomicU32::new(NIL),
            prev: AtomicU32::new(NIL),
            next: AtomicU32::new(NIL),
            linked: AtomicU8::new(0),
        }
    }
}

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
///     order = [Some(oldest.ticket), Some(newest.ticket)];
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
/// always made progress); nobody waits for the dispatcher. A push into a full queue that
/// evicts scans the slots once per attempt (at most three attempts). The dispatcher is
/// single-consumer: [`try_dispatch`](Self::try_dispatch) runs rounds while it holds a
/// flag, and a concurrent call returns `false` at once after asking the holder for one
/// more round, so no request for dispatch is lost; the holder keeps serving such requests
/// while they arrive (lock-free, not wait-free, for the holder).
///
/// **Bound.** Never more than `capacity` waiters, structurally: a waiter needs a slot. A
/// cancelled waiter's slot is reused after the next dispatch round.
///
/// **Cost.** Push: one CAS to pop a slot, one to publish, one store; cancel: two CAS;
/// a dispatch round: two swaps plus O(1) per waiter it links, inspects or removes.
/// Memory: about 48 bytes per slot.
///
/// **Source.** Bounded per-level rings of DESIGN.md §3; Treiber stack with ABA tag; the
/// HHVM `JobQueue` idea of priority deques scanned most important first
/// (`research/queues_retries.md` §1.4).
#[derive(Debug)]
pub struct WaitQueue<const CAP: usize> {
    slots: [Slot; CAP],
    free: AtomicU64,
    incoming: AtomicU32,
    attention: AtomicU32,
    dispatch: AtomicU32,
    waiting: [AtomicU32; LEVELS],
    // Dispatcher-private list ends (Relaxed, like the private slot fields).
    head: [AtomicU32; LEVELS],
    tail: [AtomicU32; LEVELS],
    levels: u8,
    owner: u16,
    capacity: u32,
    evictions: AtomicU64,
    cancels: AtomicU64,
}

impl<const CAP: usize> WaitQueue<CAP> {
    const CAP_FITS: () = assert!(CAP <= MAX_CAPACITY, "WaitQueue capacity above MAX_CAPACITY");

    /// A queue for `levels` levels (1..=8) holding at most `capacity` (≤ `CAP`) waiters.
    pub fn new(levels: u8, capacity: usize) -> Result<Self, ConfigError> {
        #[allow(clippy::let_unit_value)]
        let () = Self::CAP_FITS;
        if levels == 0 || levels as usize > LEVELS {
            return Err(ConfigError::OutOfRange("levels"));
        }
        if capacity > CAP {
            return Err(ConfigError::OutOfRange("queue capacity above CAP"));
        }
        let q = Self {
            slots: core::array::from_fn(|_| Slot::new()),
            free: AtomicU64::new(if capacity == 0 { NIL as u64 } else { 0 }),
            incoming: AtomicU32::new(NIL),
            attention: AtomicU32::new(NIL),
            dispatch: AtomicU32::new(0),
            waiting: core::array::from_fn(|_| AtomicU32::new(0)),
            head: core::array::from_fn(|_| AtomicU32::new(NIL)),
            tail: core::array::from_fn(|_| AtomicU32::new(NIL)),
            levels,
            owner: next_instance_id() as u16,
            capacity: capacity as u32,
            evictions: AtomicU64::new(0),
            cancels: AtomicU64::new(0),
        };
        for i in 0..capacity {
            let next = if i + 1 < capacity { (i + 1) as u32 } else { NIL };
            q.slots[i].link.store(next, Ordering::Relaxed);
        }
        Ok(q)
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

    /// Waiters at `level` (levels beyond the configured ones count as the last).
    pub fn waiting(&self, level: Priority) -> u32 {
        self.waiting[self.clamp(level)].load(Ordering::Relaxed)
    }

    /// Waiters at `level` or more important.
    pub fn waiting_through(&self, level: Priority) -> u32 {
        let lvl = self.clamp(level);
        self.waiting[..=lvl].iter().map(|w| w.load(Ordering::Relaxed)).sum()
    }

    /// All waiters.
    pub fn len(&self) -> u32 {
        self.waiting[..self.levels as usize].iter().map(|w| w.load(Ordering::Relaxed)).sum()
    }

    /// Whether no waiter is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a waiter at `level` arriving at `enqueued_at` with `deadline`
    /// ([`NO_DEADLINE`] for none). If the queue is full and `evict` is set, the oldest
    /// waiter of the least important level *strictly less important* than `level` gives
    /// up its slot; the dispatcher reports its ticket (see [`Dispatcher::refresh`]).
    /// Returns `None` if there is no room.
    pub fn push(
        &self,
        level: Priority,
        enqueued_at: u64,
        deadline: u64,
        evict: bool,
    ) -> Option<Ticket> {
        let lvl = self.clamp(level);
        if let Some(i) = self.pop_free() {
            let slot = &self.slots[i];
            // The slot is ours alone until published: nobody CASes a FREE or CLAIMED word
            // (cancel, evict and dispatch all require WAITING).
            let gen = gen_of(slot.state.load(Ordering::Relaxed));
            slot.enqueued_at.store(enqueued_at, Ordering::Relaxed);
            slot.deadline.store(deadline, Ordering::Relaxed);
            slot.state.store(pack(gen, CLAIMED, lvl), Ordering::Relaxed);
            self.waiting[lvl].fetch_add(1, Ordering::Relaxed);
            self.push_incoming(i);
            // Release: pairs with the Acquire of the CAS in `cancel` and `take_over`, so a
            // thread that sees WAITING also sees the push above, and the attention push it
            // then makes reaches the dispatcher after this slot's incoming push.
            slot.state.store(pack(gen, WAITING, lvl), Ordering::Release);
            return Some(Ticket::new(self.owner, i, gen));
        }
        if evict {
            self.take_over(lvl, enqueued_at, deadline)
        } else {
            None
        }
    }

    /// Full queue: take the slot of the oldest waiter at the least important level below
    /// `lvl`.
    fn take_over(&self, lvl: usize, enqueued_at: u64, deadline: u64) -> Option<Ticket> {
        for _ in 0..EVICT_ATTEMPTS {
            let victim_level = (lvl + 1..self.levels as usize)
                .rev()
                .find(|&q| self.waiting[q].load(Ordering::Relaxed) > 0)?;
            let mut best: Option<(usize, u64, u64)> = None;
            for (i, slot) in self.slots[..self.capacity()].iter().enumerate() {
                let s = slot.state.load(Ordering::Relaxed);
                // A waiter that itself took a slot over is a fair victim too; only a slot
                // with 65,535 unreported evictions is skipped.
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
            let Some((i, s, _)) = best else { continue };
            let slot = &self.slots[i];
            let gen = gen_of(s).wrapping_add(1);
            let new = pack(gen, CLAIMED, lvl) | ATTN | ((s & EVICTED_MASK) + EVICTED_ONE);
            // AcqRel: Acquire pairs with the victim's Release publish (its incoming push
            // happens before our attention push); Release is unused (the attention push
            // below publishes our writes).
            if slot.state.compare_exchange(s, new, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                slot.enqueued_at.store(enqueued_at, Ordering::Relaxed);
                slot.deadline.store(deadline, Ordering::Relaxed);
                self.waiting[victim_level].fetch_sub(1, Ordering::Relaxed);
                self.waiting[lvl].fetch_add(1, Ordering::Relaxed);
                self.evictions.fetch_add(1, Ordering::Relaxed);
                if s & ATTN == 0 {
                    // Otherwise the slot is on the stack, or in the dispatcher's batch
                    // whose settling CAS will fail and see the new count.
                    self.push_attention(i);
                }
                // Release: pairs with the Acquire CAS in `cancel`/`take_over` (as in `push`).
                // An xor, not a store: the dispatcher may be clearing the flags meanwhile.
                slot.state.fetch_xor(CLAIMED ^ WAITING, Ordering::Release);
                return Some(Ticket::new(self.owner, i, gen));
            }
        }
        None
    }

    /// Withdraws a waiting ticket. Returns its level, or why not: another queue's ticket
    /// ([`UsageError::ForeignHandle`]); a ticket that already left — granted, expired,
    /// cancelled, evicted — ([`UsageError::UnknownTicket`]). Racing a grant, exactly one
    /// of them wins.
    pub fn cancel(&self, ticket: Ticket) -> Result<Priority, UsageError> {
        if ticket.owner() != self.owner {
            return Err(UsageError::ForeignHandle);
        }
        let i = ticket.slot();
        if i >= self.capacity() {
            return Err(UsageError::UnknownTicket);
        }
        let slot = &self.slots[i];
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if gen_of(s) != ticket.gen() || status_of(s) != WAITING {
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
        self.waiting[lvl].fetch_sub(1, Ordering::Relaxed);
        self.cancels.fetch_add(1, Ordering::Relaxed);
        if s & ATTN == 0 {
            self.push_attention(i);
        }
        Ok(priority(lvl))
    }

    /// Runs dispatch rounds if no other thread is dispatching; returns whether it did.
    ///
    /// `round` returns `true` when it finished its work, `false` when it stopped early
    /// (its output is full). If another thread asked for a round meanwhile, `round` runs
    /// again (after a `true`). A call that finds the dispatcher busy returns `false` at
    /// once and leaves a request the holder honours before it leaves.
    pub fn try_dispatch(&self, mut round: impl FnMut(&mut Dispatcher<'_, CAP>) -> bool) -> bool {
        loop {
            // Acquire: pairs with the previous holder's Release exit, so a new holder sees
            // the private lists as it left them.
            if self.dispatch.fetch_or(BUSY, Ordering::Acquire) & BUSY == 0 {
                break;
            }
            // Busy: leave a request. Release: publishes this caller's earlier writes (a
            // waiter it queued, a permit it returned) to the holder's Acquire swap below.
            if self.dispatch.fetch_or(PENDING, Ordering::Release) & BUSY != 0 {
                return false;
            }
            // The holder left between our two steps: try to become the holder.
        }
        let mut d = Dispatcher { q: self };
        loop {
            if !round(&mut d) {
                // Release: pairs with the next holder's Acquire fetch_or. PENDING, if set,
                // stays set for that holder.
                self.dispatch.fetch_and(!BUSY, Ordering::Release);
                return true;
            }
            // Release: as above. Fails only if PENDING was set meanwhile: go again.
            if self.dispatch.compare_exchange(BUSY, 0, Ordering::Release, Ordering::Relaxed).is_ok()
            {
                return true;
            }
            // Acquire: pairs with the Release fetch_or of each request since.
            self.dispatch.swap(BUSY, Ordering::Acquire);
        }
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
        let waiting_by_level = core::array::from_fn(|l| self.waiting[l].load(Ordering::Relaxed));
        let occupied = self.slots[..self.capacity()]
            .iter()
            .filter(|s| status_of(s.state.load(Ordering::Relaxed)) != FREE)
            .count() as u32;
        WaitQueueMetrics {
            waiting_by_level,
            waiting: waiting_by_level.iter().sum(),
            occupied,
            capacity: self.capacity,
            oldest_enqueued_at: self.oldest_enqueued_at(),
            evictions: self.evictions.load(Ordering::Relaxed),
            cancels: self.cancels.load(Ordering::Relaxed),
        }
    }

    // ---- lock-free stacks ----------------------------------------------------------

    fn pop_free(&self) -> Option<usize> {
        // Acquire: pairs with the Release CAS in `push_free`, so the slot's freed state
        // (its new generation) and link are visible.
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let i = (head & FREE_INDEX_MASK) as u32;
            if i == NIL {
                return None;
            }
            let next = self.slots[i as usize].link.load(Ordering::Relaxed);
            // The tag makes the CAS fail if `i` was popped and pushed back meanwhile (its
            // link may have changed). Acquire: as above, on the value we replace.
            let new = (head & !FREE_INDEX_MASK).wrapping_add(FREE_TAG_ONE) | next as u64;
            match self.free.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some(i as usize),
                Err(actual) => head = actual,
            }
        }
    }

    fn push_free(&self, i: usize) {
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            self.slots[i].link.store((head & FREE_INDEX_MASK) as u32, Ordering::Relaxed);
            let new = (head & !FREE_INDEX_MASK).wrapping_add(FREE_TAG_ONE) | i as u64;
            // Release: pairs with the Acquire in `pop_free` (state and link of slot `i`).
            match self.free.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Push-only stack taken whole by the dispatcher: ABA-safe without a tag (the CAS
    /// succeeds only if the head is still the node we linked to).
    fn push_incoming(&self, i: usize) {
        let mut head = self.incoming.load(Ordering::Relaxed);
        loop {
            self.slots[i].link.store(head, Ordering::Relaxed);
            // Release: pairs with the dispatcher's Acquire swap in `refresh`, publishing
            // the slot's fields, state and link.
            match self.incoming.compare_exchange_weak(
                head,
                i as u32,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    fn push_attention(&self, i: usize) {
        let mut head = self.attention.load(Ordering::Relaxed);
        loop {
            self.slots[i].attn_link.store(head, Ordering::Relaxed);
            // Release: pairs with the dispatcher's Acquire swap in `refresh`.
            match self.attention.compare_exchange_weak(
                head,
                i as u32,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => head = actual,
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
}

/// Takes a whole intrusive stack (Acquire: pairs with the pushers' Release CAS).
fn take_all(head: &AtomicU32) -> u32 {
    if head.load(Ordering::Relaxed) == NIL {
        NIL
    } else {
        head.swap(NIL, Ordering::Acquire)
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

impl<const CAP: usize> Dispatcher<'_, CAP> {
    /// Levels in use.
    pub fn levels(&self) -> u8 {
        self.q.levels
    }

    /// Waiters at `level`.
    pub fn waiting(&self, level: Priority) -> u32 {
        self.q.waiting(level)
    }

    /// Brings the lists up to date: settles cancelled and taken-over slots and links new
    /// arrivals at the tail of their level, oldest first. Each evicted waiter's ticket is
    /// passed to `report`; if it returns `false` (no room for the event), the evictions not
    /// yet reported are kept for a later round.
    pub fn refresh(&mut self, mut report: impl FnMut(Ticket) -> bool) {
        let q = self.q;
        // The attention batch first, then the arrivals: every slot in the batch was pushed
        // to `incoming` before it was flagged, so after both swaps it is linked.
        // A load first spares the read-modify-write when a stack is empty; a push that
        // happens before this round is seen by the load (coherence).
        // Acquire: pairs with the Release CAS in `push_attention`.
        let attention = take_all(&q.attention);
        // Acquire: pairs with the Release CAS in `push_incoming`.
        let incoming = take_all(&q.incoming);
        // The stack is newest first: reverse it in place (the nodes are ours now).
        let mut reversed = NIL;
        let mut cur = incoming;
        while cur != NIL {
            let next = q.slots[cur as usize].link.load(Ordering::Relaxed);
            q.slots[cur as usize].link.store(reversed, Ordering::Relaxed);
            reversed = cur;
            cur = next;
        }
        cur = reversed;
        while cur != NIL {
            let i = cur as usize;
            cur = q.slots[i].link.load(Ordering::Relaxed);
            let lvl = level_of(q.slots[i].state.load(Ordering::Relaxed));
            self.link_tail(lvl, i);
        }
        // Settle the batch oldest first too, so evictions are reported in order.
        reversed = NIL;
        cur = attention;
        while cur != NIL {
            let next = q.slots[cur as usize].attn_link.load(Ordering::Relaxed);
            q.slots[cur as usize].attn_link.store(reversed, Ordering::Relaxed);
            reversed = cur;
            cur = next;
        }
        cur = reversed;
        while cur != NIL {
            let i = cur as usize;
            cur = q.slots[i].attn_link.load(Ordering::Relaxed);
            self.settle(i, &mut report);
        }
    }

    /// Settles a slot taken from the attention stack.
    fn settle(&mut self, i: usize, report: &mut impl FnMut(Ticket) -> bool) {
        let q = self.q;
        let slot = &q.slots[i];
        // Acquire: pairs with the Release of the CAS that flagged it (cancel/take-over).
        let mut s = slot.state.load(Ordering::Acquire);
        // The first evicted generation not yet reported.
        let mut next = gen_of(s).wrapping_sub(evicted_of(s));
        loop {
            while next != gen_of(s) {
                if !report(Ticket::new(q.owner, i, next)) {
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
                    q.push_attention(i);
                    return;
                }
                next = next.wrapping_add(1);
            }
            if status_of(s) == CANCELLED {
                // Nobody else writes a cancelled slot: free it.
                self.unlink(i);
                slot.state.store(pack(gen_of(s).wrapping_add(1), FREE, 0), Ordering::Relaxed);
                q.push_free(i);
                return;
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
        // acquired by `refresh`. If the slot changes hands after the load above, the
        // commit CAS in `remove` fails, so a mixed read is never acted on.
        Found::Waiter(Waiter {
            ticket: Ticket::new(self.q.owner, i, gen_of(s)),
            level: priority(level_of(s)),
            enqueued_at: slot.enqueued_at.load(Ordering::Relaxed),
            deadline: slot.deadline.load(Ordering::Relaxed),
        })
    }

    fn first_from(&mut self, mut i: u32, forward: bool) -> Option<Waiter> {
        while i != NIL {
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

    /// The oldest waiter at `level` (FIFO end), skipping arrivals still being written.
    pub fn oldest(&mut self, level: Priority) -> Option<Waiter> {
        let head = self.q.head[self.q.clamp(level)].load(Ordering::Relaxed);
        self.first_from(head, true)
    }

    /// The newest waiter at `level` (LIFO end).
    pub fn newest(&mut self, level: Priority) -> Option<Waiter> {
        let tail = self.q.tail[self.q.clamp(level)].load(Ordering::Relaxed);
        self.first_from(tail, false)
    }

    /// The next waiter after `w` at its level (towards the newest), for scans. `w` must
    /// still be queued (call this before removing `w`).
    pub fn newer(&mut self, w: &Waiter) -> Option<Waiter> {
        let slot = &self.q.slots[w.ticket.slot()];
        if slot.linked.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let next = slot.next.load(Ordering::Relaxed);
        self.first_from(next, true)
    }

    /// Takes `w` out of the queue (to grant or expire it). `false` if it already left
    /// (cancelled or evicted meanwhile) — then nothing changed.
    pub fn remove(&mut self, w: &Waiter) -> bool {
        let q = self.q;
        let i = w.ticket.slot();
        let lvl = w.level.index();
        let expected = pack(w.ticket.gen(), WAITING, lvl);
        let freed = pack(w.ticket.gen().wrapping_add(1), FREE, 0);
        // Relaxed: exactly one of this CAS, `cancel` and `take_over` succeeds on the
        // waiting word; the freed slot is published to the next arrival by `push_free`.
        if q.slots[i]
            .state
            .compare_exchange(expected, freed, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.unlink(i);
        q.waiting[lvl].fetch_sub(1, Ordering::Relaxed);
        q.push_free(i);
        true
    }

    /// Moves `w` to level `to`, keeping arrival order there (aging). `false` if it left.
    pub fn demote(&mut self, w: &Waiter, to: Priority) -> bool {
        let q = self.q;
        let i = w.ticket.slot();
        let from = w.level.index();
        let to = q.clamp(to);
        let expected = pack(w.ticket.gen(), WAITING, from);
        let moved = pack(w.ticket.gen(), WAITING, to);
        // Relaxed: as in `remove`; the fields do not change.
        if q.slots[i]
            .state
            .compare_exchange(expected, moved, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        q.waiting[to].fetch_add(1, Ordering::Relaxed);
        q.waiting[from].fetch_sub(1, Ordering::Relaxed);
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
        while after != NIL && q.slots[after as usize].enqueued_at.load(Ordering::Relaxed) > at {
            after = q.slots[after as usize].prev.load(Ordering::Relaxed);
        }
        self.link_after(lvl, after, i);
    }

    fn link_after(&mut self, lvl: usize, after: u32, i: usize) {
        let q = self.q;
        let slot = &q.slots[i];
        let next = if after == NIL {
            q.head[lvl].load(Ordering::Relaxed)
        } else {
            q.slots[after as usize].next.load(Ordering::Relaxed)
        };
        slot.prev.store(after, Ordering::Relaxed);
        slot.next.store(next, Ordering::Relaxed);
        if after == NIL {
            q.head[lvl].store(i as u32, Ordering::Relaxed);
        } else {
            q.slots[after as usize].next.store(i as u32, Ordering::Relaxed);
        }
        if next == NIL {
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
        if prev == NIL {
            q.head[lvl].store(next, Ordering::Relaxed);
        } else {
            q.slots[prev as usize].next.store(next, Ordering::Relaxed);
        }
        if next == NIL {
            q.tail[lvl].store(prev, Ordering::Relaxed);
        } else {
            q.slots[next as usize].prev.store(prev, Ordering::Relaxed);
        }
        slot.linked.store(0, Ordering::Relaxed);
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
                    out.push(w.ticket);
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
        let bogus = Ticket::from_bits(t.to_bits() | (0xFF << 32));
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
    fn a_cancelled_slot_is_reclaimed_by_the_next_round() {
        let q = WaitQueue::<2>::new(1, 2).unwrap();
        let a = q.push(P0, 0, NO_DEADLINE, false).unwrap();
        let b = q.push(P0, 1, NO_DEADLINE, false).unwrap();
        q.cancel(a).unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q.push(P0, 2, NO_DEADLINE, false), None, "not reclaimed yet");
        assert!(q.try_dispatch(|d| {
            d.refresh(|_| true);
            true
        }));
        let c = q.push(P0, 2, NO_DEADLINE, false).unwrap();
        assert_eq!(drain(&q, false), [b, c]);
        assert_eq!(q.metrics().cancels, 1);
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
                    order.push(w.ticket);
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
            assert_eq!(d.oldest(P0).map(|w| w.ticket), Some(c));
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
        q.try_dispatch(|d| {
            d.refresh(|_| true);
            let a = d.oldest(P0).unwrap();
            let b = d.newer(&a).unwrap();
            assert_eq!(b.ticket, t[1]);
            q.cancel(t[1]).unwrap();
            assert!(!d.remove(&b), "cancelled meanwhile");
            assert_eq!(d.newer(&a).map(|w| w.ticket), Some(t[2]), "skips the cancelled one");
            true
        });
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
