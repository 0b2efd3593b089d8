//! The [`Gate`] in shared memory: one limit, one queue and one set of waiters across
//! worker processes, with grants routed to the process that queued each ticket.
//!
//! **The segment.** After the header and the process table: the core's `Gate<CAP>` by
//! value, a lock word, a route record per queue slot, and one mailbox per process slot.
//! A mailbox is a 32-bit futex word (a sequence number; bit 31 set by sleepers) and
//! [`MAILBOX_ENTRIES`] ticket entries. An entry's state word is the truth about its
//! ticket: `RESERVED` (an arrival of this process is on its way into the queue),
//! `QUEUED`, `GRANTED` (with the permit's level and start time), `EXPIRED` (with the
//! reason and `retry_after`), back to `FREE` when its owner takes the outcome.
//!
//! **Grant routing.** Arrivals, dispatch (the gate's `poll`) and cancels run under one
//! lock in the segment. Inside it, an arrival that queues records `(its process slot,
//! generation, entry)` against the ticket's queue slot before anyone can dispatch again,
//! and a dispatch hands each event to the owner recorded for its ticket: a grant is
//! counted to the owner's process slot (so that the owner's death gives it back), its
//! level and start time written into the entry, and the entry moved `QUEUED → GRANTED` by
//! the one thread holding the lock — exactly once, since the gate reports each ticket
//! once and the route record is cleared as it is used. Then the owner's futex word is
//! bumped and, if a sleeper set bit 31, `FUTEX_WAKE` (shared, no `FUTEX_PRIVATE_FLAG`)
//! wakes the threads of that process waiting in [`SharedGate::wait`]. A grant whose owner
//! withdrew or died is released as `Ignored` by the dispatcher.
//!
//! **Waiting.** The waiting thread itself blocks in `FUTEX_WAIT` on its process's word,
//! with a timeout at the gate's `next_wakeup` (deadlines, maximum wait, a partition
//! reservation lapsing) and at most [`SWEEP_INTERVAL_NS`] apart; on a timeout it polls the
//! gate, and once per interval across processes it sweeps dead processes and polls (so a
//! slot freed by a process that died between its release and the dispatch after it is
//! handed out within the interval). No
//! helper thread is needed in Rust or C; a binding that owns its waiters (an event loop)
//! runs one thread per process in [`SharedGate::wait_mailbox`] and takes outcomes with
//! [`SharedGate::outcome`].
//!
//! **A worker that dies.** A sweep ([`SharedGate::reclaim`]: on attach, from a waiter at
//! most every 100 ms, or called) first withdraws the dead process's queued tickets
//! (under the lock: `cancel`, its entries cleared), then drains its permits, granted ones
//! included, as `Ignored`, exactly once each (the process table's held counts), then
//! dispatches the freed slots to the other processes' waiters.
//!
//! **The lock, and a holder killed inside it.** Arrivals, dispatch and cancels are
//! *blocking*: they take one lock (held for one gate operation, about a microsecond;
//! releases are not under it). Its word names the holder's process slot and generation;
//! a locker that finds it held spins briefly, then sleeps on it (`FUTEX_WAIT`,
//! [`LOCK_TAKEOVER_NS`] = 10 ms at a time) and, if the holder is then proven dead (pid
//! gone or reused, the table's rule), takes the lock over with one CAS from the dead
//! holder's word — so exactly one locker takes over and a live holder never is. The
//! taker-over then recovers what the holder was doing, whatever the instruction it died
//! at: the core queue is rebuilt from its slots' state words (each changes by one CAS,
//! so they are the truth): the dispatch flag, the arrivals and cancels it had taken,
//! half-linked lists, an arrival claimed and never published; the events of its last
//! dispatch (recorded in a journal in the segment with the gate's count of grants, in one
//! store, before any is routed) are routed as if it had lived; the owners of tickets it
//! had taken out of the queue and not delivered are told `Expired`; and the grants it
//! held inside the gate's round (the gate's grant counts by level past the journal's) are
//! released, each once at its level. What is left (each a window of a few instructions) errs on the safe side, as the
//! process table does: a slot is lost (the limit errs low by one), never released twice
//! — the permit the round took before choosing its waiter, an arrival admitted but not
//! yet counted, an event marked routed but not yet delivered. A queued ticket whose
//! arrival was killed before its route was written has no owner: granted in turn, it is
//! released as `Ignored` at once. **Bound:** the next locker (any arrival, cancel,
//! release or poll, and every waiter's sweep at most every 100 ms) recovers within one
//! 10 ms wait of the kill, and the same sweep drains the dead process's permits: while
//! anyone waits, within 100 ms + 10 ms + one sweep. A process with no table slot (a full
//! table) sweeping as it attaches is never taken over (it cannot be proven dead).
//!
//! **Caveats.** A process holds at most [`MAILBOX_ENTRIES`] tickets at once; an arrival
//! beyond that never queues (it is decided as the gate's `try_arrive`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::layout::{Placeable, fingerprint};
use surgeguard_core::queue::Ticket;
use surgeguard_core::{Outcome, Priority, RawPermit, Reason, Rejected, UsageError};

use super::liveness::Seen;
use super::segment::{self, Mapping, Shape};
use super::table::{self, Claim, Liveness, ProcSlot};
use super::{Attachment, MAX_PROCESSES, SWEEP_INTERVAL_NS, ShmError, config_hash, resolve};

/// Tickets one process may hold at once (queued, or decided and not yet taken).
pub const MAILBOX_ENTRIES: usize = 64;

/// The object kind of a gate segment.
const KIND_GATE: u64 = 4;

// ---- entry states ------------------------------------------------------------------------
const FREE: u64 = 0;
const RESERVED: u64 = 1;
const QUEUED: u64 = 2;
const GRANTED: u64 = 3;
const EXPIRED: u64 = 4;

/// A mailbox entry: one ticket of its process.
#[repr(C)]
#[derive(Debug, Default)]
struct Entry {
    /// `FREE`, `RESERVED`, `QUEUED`, `GRANTED` or `EXPIRED`.
    state: AtomicU64,
    /// The ticket's bits (valid from `QUEUED` on).
    ticket: AtomicU64,
    /// `GRANTED`: the permit's start time; `EXPIRED`: `retry_after`.
    a: AtomicU64,
    /// `GRANTED`: the permit's level; `EXPIRED`: the reason code.
    b: AtomicU64,
}

/// Bit 31 of a mailbox word: a thread sleeps on it (set before `FUTEX_WAIT`).
const SLEEPERS: u32 = 1 << 31;
const SEQ_MASK: u32 = SLEEPERS - 1;

/// One process slot's mailbox.
#[repr(C, align(64))]
#[derive(Debug)]
struct Mailbox {
    /// Sequence number of deliveries (bits 0..=30), sleepers bit 31.
    futex: AtomicU32,
    _pad: [AtomicU32; 15],
    entries: [Entry; MAILBOX_ENTRIES],
}

/// The gate and its lock and routes (placed by value; the mailboxes follow it, zeroed).
#[repr(C)]
#[derive(Debug)]
struct Head<const CAP: usize> {
    gate: Gate<CAP>,
    /// The lock: 0 free, else `HELD | generation << 9 | process slot` (`CLAIMLESS`: a
    /// process with no slot), plus `SLEEPERS`.
    lock: AtomicU32,
    _pad: AtomicU32,
    /// The ticket bits each queue slot's route record is for.
    route_ticket: [AtomicU64; CAP],
    /// `ROUTED | entry << 40 | generation << 9 | process slot` (0: none).
    route_owner: [AtomicU64; CAP],
    /// `records | granted << 8`: how many records of `journal` the lock holder is routing
    /// (0: none), and the gate's grant counts by level when they were recorded, modulo
    /// 128 each (level `l` in bits `7l..7l+7` of `granted`; see `granted_by_level`; one
    /// word: both are stored in one step).
    journal_len: AtomicU64,
    /// The events of the dispatch being routed: `[ticket, kind | code << 8, time]`, kind
    /// `J_GRANTED` (code: the level; time: the start) or `J_EXPIRED` (code: the reason;
    /// time: `retry_after`), 0 once routed. A holder taking the lock over from a dead one
    /// routes what is left.
    journal: [[AtomicU64; 3]; JOURNAL],
}

/// Events one dispatch call takes from the gate (and records in the journal) at a time.
const JOURNAL: usize = 16;
const J_GRANTED: u64 = 1;
/// Bits of one level's grant count in the journal word (one poll grants at most
/// `JOURNAL` < 128 at a level, so the difference modulo 128 is exact).
const LEVEL_BITS: u32 = 7;
const LEVEL_MASK: u64 = (1 << LEVEL_BITS) - 1;
const _: () = assert!(JOURNAL as u64 <= LEVEL_MASK);

/// The gate's grant counts by level, modulo 128 each, packed as the journal word records
/// them (level `l` in bits `7l..7l+7`).
fn granted_by_level<const CAP: usize>(gate: &Gate<CAP>) -> u64 {
    let w = gate.granted_by_level();
    (0..Priority::MAX_LEVELS)
        .fold(0, |acc, l| acc | ((w >> (8 * l)) & LEVEL_MASK) << (LEVEL_BITS as usize * l))
}
const J_EXPIRED: u64 = 2;

const HELD: u32 = 1 << 30;
const LOCK_GEN_MASK: u32 = (1 << 21) - 1;
const LOCK_GEN_SHIFT: u32 = 9;
const INDEX_MASK: u32 = 0x1FF;
/// The lock holder (and claim) of a process with no slot: one sweeping as it attaches,
/// before its first arrival. Such a holder is never taken over (it cannot be proven
/// dead); it holds the lock only for a sweep.
const CLAIMLESS: Claim = Claim { index: INDEX_MASK, generation: 0 };
const ROUTED: u64 = 1 << 63;
/// How long a locker waits on a held lock before it checks whether the holder is dead.
pub const LOCK_TAKEOVER_NS: u64 = 10_000_000;

// SAFETY: `#[repr(C)]`; the gate is Placeable; the rest are atomics holding integers;
// no pointers, no Drop. LAYOUT covers the gate's fingerprint and every offset.
#[allow(unsafe_code)]
unsafe impl<const CAP: usize> Placeable for Head<CAP> {
    const LAYOUT: u64 = {
        use core::mem::{offset_of, size_of};
        fingerprint(
            "surgeguard::shm::SharedGate/2",
            &[
                <Gate<CAP> as Placeable>::LAYOUT,
                size_of::<Self>() as u64,
                offset_of!(Self, lock) as u64,
                offset_of!(Self, route_ticket) as u64,
                offset_of!(Self, route_owner) as u64,
                offset_of!(Self, journal_len) as u64,
                offset_of!(Self, journal) as u64,
                JOURNAL as u64,
                size_of::<Mailbox>() as u64,
                size_of::<Entry>() as u64,
                MAILBOX_ENTRIES as u64,
                MAX_PROCESSES as u64,
            ],
        )
    };
}

const _: () = assert!(size_of::<Entry>() == 32 && size_of::<Mailbox>() % 64 == 0);

fn reason_of(code: u64) -> Reason {
    match code {
        2 => Reason::QueueFull,
        3 => Reason::Evicted,
        4 => Reason::DeadlineUnmeetable,
        5 => Reason::Expired,
        6 => Reason::CodelSlough,
        7 => Reason::Shed,
        14 => Reason::Cancelled,
        _ => Reason::LimitReached,
    }
}

// ---- futex ---------------------------------------------------------------------------

/// `FUTEX_WAIT` (shared: no private flag) while `*word == expected`, at most `timeout_ns`.
fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic (in the mapping); the kernel only
    // reads it. Errors (EAGAIN: the word changed; EINTR; ETIMEDOUT) all mean "look again".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// `FUTEX_WAKE` (shared) of up to `n` waiters.
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: as `futex_wait`; FUTEX_WAKE does not touch the word.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
}

// ---- public types ------------------------------------------------------------------------

/// A queued waiter of a [`SharedGate`], owned by the process that queued it. Take its
/// outcome with [`SharedGate::wait`] or [`SharedGate::outcome`], or withdraw it with
/// [`SharedGate::cancel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedTicket {
    ticket: Ticket,
    entry: u16,
    claim: Claim,
    nonce: u64,
}

impl SharedTicket {
    /// The gate's ticket inside.
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// As four words (for the C ABI and bindings); [`from_words`](Self::from_words) gives
    /// it back. Any words at all are accepted back: the gate refuses what is not a live
    /// ticket of this process.
    pub fn to_words(&self) -> [u64; 3] {
        [
            self.ticket.to_bits(),
            u64::from(self.entry)
                | u64::from(self.claim.index) << 16
                | u64::from(self.claim.generation) << 32,
            self.nonce,
        ]
    }

    /// The ticket from [`to_words`](Self::to_words).
    pub fn from_words(w: [u64; 3]) -> Self {
        Self {
            ticket: Ticket::from_bits(w[0]),
            entry: w[1] as u16,
            claim: Claim { index: (w[1] >> 16) as u16 as u32, generation: (w[1] >> 32) as u32 },
            nonce: w[2],
        }
    }
}

/// A permit of a [`SharedGate`]: release it with [`SharedGate::release`] exactly once.
/// Counted to the process that holds it, so that its death gives it back.
#[must_use = "a permit holds a slot until released"]
#[derive(Debug, PartialEq, Eq)]
pub struct SharedGatePermit {
    level: u8,
    started_at: u64,
    claim: Claim,
    nonce: u64,
}

impl SharedGatePermit {
    /// The level it was admitted at.
    pub fn level(&self) -> Priority {
        Priority::new(self.level).unwrap_or_default()
    }

    /// When it was admitted (the `now` of the admission or grant).
    pub fn started_at(&self) -> u64 {
        self.started_at
    }

    /// As three words (for the C ABI and bindings).
    pub fn into_words(self) -> [u64; 3] {
        [
            u64::from(self.level)
                | u64::from(self.claim.index) << 16
                | u64::from(self.claim.generation) << 32,
            self.started_at,
            self.nonce,
        ]
    }

    /// A permit from [`into_words`](Self::into_words). Words that are not a live permit
    /// are refused by [`SharedGate::release`] (a foreign nonce) or release nothing (a
    /// process holding no permit of that level).
    pub fn from_words(w: [u64; 3]) -> Self {
        Self {
            level: w[0] as u8,
            claim: Claim { index: (w[0] >> 16) as u16 as u32, generation: (w[0] >> 32) as u32 },
            started_at: w[1],
            nonce: w[2],
        }
    }
}

/// What [`SharedGate::arrive`] decided.
#[must_use = "an admitted permit must be released; a queued ticket waits"]
#[derive(Debug, PartialEq, Eq)]
pub enum SharedArrival {
    /// Go ahead.
    Admitted(SharedGatePermit),
    /// Wait: [`SharedGate::wait`] gives the outcome.
    Queued(SharedTicket),
    /// Refused at once.
    Rejected(Rejected),
}

/// The outcome of a queued ticket.
#[must_use = "a granted permit must be released"]
#[derive(Debug, PartialEq, Eq)]
pub enum SharedOutcome {
    /// Go ahead with this permit.
    Granted(SharedGatePermit),
    /// Dropped from the queue (expired, sloughed, evicted, shed).
    Expired(Rejected),
}

/// Where [`SharedGate::stop_inside`] (a test hook) stops a process for good.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillPoint {
    /// A dispatch: the gate polled and its events recorded, none routed yet.
    Journaled,
    /// Inside the gate's dispatch round: the queue's dispatch flag held, the oldest waiter
    /// taken out of the queue, neither granted nor reported.
    InRound,
    /// As `InRound`, but the waiter taken out only if a permit is free, and granted: its
    /// permit taken and the grant counted, the event not handed out yet.
    InRoundGranted,
    /// An arrival (level `NORMAL`, no deadline): decided by the gate, a queued ticket not
    /// routed to this process yet (an admission is counted to it).
    InArrival,
}

// ---- the shared gate ---------------------------------------------------------------------

/// A [`Gate`] (limiter, priority queue, CoDel, shed switch) in shared memory: one limit
/// and one queue across processes; a release in one process grants a waiter of another
/// (see the [module](self) docs for the routing, the wake-up and the reclaim of dead
/// workers).
///
/// Progress: `release` is the gate's (wait-free) plus one CAS on the process's count,
/// then a dispatch under the segment's lock; `arrive`, `poll` and `cancel` take the lock
/// (blocking: a holder that stops inside it stops them; a dead holder is taken over and
/// its work recovered within one 10 ms wait: `docs/shared-memory.md`, stage C).
#[derive(Debug)]
pub struct SharedGate<const CAP: usize = 256> {
    map: Mapping,
    me: Attachment,
    created: bool,
}

fn gate_shape<const CAP: usize>(config: &GateConfig) -> Shape {
    let mailboxes = MAX_PROCESSES * size_of::<Mailbox>();
    Shape {
        kind: KIND_GATE,
        layout: <Head<CAP> as Placeable>::LAYOUT,
        config: config_hash(&(config, CAP)),
        table_len: MAX_PROCESSES,
        object_size: mailbox_offset::<CAP>() + mailboxes,
        object_align: align_of::<Head<CAP>>(),
    }
}

const fn mailbox_offset<const CAP: usize>() -> usize {
    size_of::<Head<CAP>>().next_multiple_of(64)
}

fn new_head<const CAP: usize>(config: GateConfig) -> Result<Head<CAP>, ShmError> {
    Ok(Head {
        gate: Gate::new(config)?,
        lock: AtomicU32::new(0),
        _pad: AtomicU32::new(0),
        route_ticket: core::array::from_fn(|_| AtomicU64::new(0)),
        route_owner: core::array::from_fn(|_| AtomicU64::new(0)),
        journal_len: AtomicU64::new(0),
        journal: core::array::from_fn(|_| core::array::from_fn(|_| AtomicU64::new(0))),
    })
}

/// The lock, held while alive.
struct Held<'a> {
    word: &'a AtomicU32,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Release: the next holder sees everything done under the lock.
        if self.word.swap(0, Ordering::Release) & SLEEPERS != 0 {
            futex_wake(self.word, 1);
        }
    }
}

impl<const CAP: usize> SharedGate<CAP> {
    /// Creates the gate named `name` (as [`SharedLimiter::open`](super::SharedLimiter::open):
    /// `/dev/shm/surgeguard.NAME`, or a path) or attaches to it, race-free. Another config
    /// or `CAP` is [`ShmError::ConfigMismatch`]; dead processes are reclaimed on attach.
    pub fn open(name: &str, config: GateConfig) -> Result<Self, ShmError> {
        config.validate(CAP)?;
        let path = resolve(name)?;
        let shape = gate_shape::<CAP>(&config);
        let (map, created) = Mapping::open_or_create(&path, &shape, || new_head::<CAP>(config))?;
        let this = Self { map, me: Attachment::new(), created };
        // Claim a slot first, so that the sweep's lock names a process slot.
        let _ = this.claim();
        this.reclaim();
        Ok(this)
    }

    /// A gate in anonymous shared memory: processes forked after this call share it.
    pub fn anonymous(config: GateConfig) -> Result<Self, ShmError> {
        config.validate(CAP)?;
        let shape = gate_shape::<CAP>(&config);
        let map = Mapping::anonymous(&shape, new_head::<CAP>(config)?)?;
        Ok(Self { map, me: Attachment::new(), created: true })
    }

    /// Removes the name (attached processes keep their segment).
    pub fn unlink(name: &str) -> Result<(), ShmError> {
        segment::unlink(&resolve(name)?)
    }

    /// Whether this call created the segment.
    pub fn created(&self) -> bool {
        self.created
    }

    fn head(&self) -> &Head<CAP> {
        // SAFETY: attach checked kind, layout and size: the object is a `Head<CAP>`.
        unsafe { self.map.object::<Head<CAP>>() }
    }

    /// The shared gate itself, for reading (metrics, state, `next_wakeup`, the shed
    /// switch). Arrive, release, poll and cancel through `SharedGate`, so that tickets and
    /// permits are routed and counted to their process.
    pub fn gate(&self) -> &Gate<CAP> {
        &self.head().gate
    }

    fn table(&self) -> &[ProcSlot] {
        self.map.table()
    }

    fn mailbox(&self, index: u32) -> &Mailbox {
        let i = (index as usize).min(MAX_PROCESSES - 1);
        // SAFETY: the mailboxes follow the head inside the object (its size in the shape,
        // checked on attach); zeroed memory is a valid `Mailbox` (atomics only).
        unsafe {
            let base = (self.head() as *const Head<CAP>).cast::<u8>().add(mailbox_offset::<CAP>());
            &*base.cast::<Mailbox>().add(i)
        }
    }

    fn nonce(&self) -> u64 {
        self.map.header().nonce.load(Ordering::Relaxed)
    }

    fn claim(&self) -> Result<Claim, ShmError> {
        self.me.claim(&self.map, || self.reclaim())
    }

    // ---- the lock --------------------------------------------------------------------

    fn lock(&self, claim: Claim, live: &impl Liveness) -> Held<'_> {
        let word = &self.head().lock;
        let me = HELD
            | (claim.generation & LOCK_GEN_MASK) << LOCK_GEN_SHIFT
            | (claim.index & INDEX_MASK);
        for _ in 0..64 {
            // Acquire: pairs with the Release in `Held::drop`.
            if word.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Held { word };
            }
            std::hint::spin_loop();
        }
        loop {
            let cur = word.load(Ordering::Relaxed);
            if cur == 0 {
                // Others may sleep: keep the sleepers bit so our unlock wakes one.
                if word
                    .compare_exchange(0, me | SLEEPERS, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Held { word };
                }
                continue;
            }
            if cur & SLEEPERS == 0
                && word
                    .compare_exchange(cur, cur | SLEEPERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            futex_wait(word, cur | SLEEPERS, LOCK_TAKEOVER_NS);
            let now = word.load(Ordering::Relaxed);
            if now != 0 && now & !SLEEPERS == cur & !SLEEPERS && self.holder_dead(now, live) {
                // Take over from a dead holder: one CAS from its word, so exactly one
                // locker wins and recovers what it left. Acquire: as above.
                if word
                    .compare_exchange(now, me | SLEEPERS, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    let held = Held { word };
                    self.recover_locked();
                    return held;
                }
            }
        }
    }

    /// Whether the process slot named by a lock word is proven dead (or was reclaimed).
    fn holder_dead(&self, word: u32, live: &impl Liveness) -> bool {
        if word & INDEX_MASK == INDEX_MASK {
            return false;
        }
        let Some(slot) = self.table().get((word & INDEX_MASK) as usize) else { return true };
        let w = slot.word.load(Ordering::Acquire);
        let state = table::state_of(w);
        if (state != table::LIVE && state != table::CLAIMED)
            || table::gen_of(w) as u32 & LOCK_GEN_MASK != (word >> LOCK_GEN_SHIFT) & LOCK_GEN_MASK
        {
            return true;
        }
        match live.seen(table::pid_of(w)) {
            Seen::Gone => true,
            Seen::Alive(s) => state == table::LIVE && s != slot.start.load(Ordering::Relaxed),
            Seen::Unknown => false,
        }
    }

    // ---- operations --------------------------------------------------------------------

    /// One arrival (as [`Gate::arrive`]), its ticket routed to this process.
    pub fn arrive(
        &self,
        now: u64,
        level: Priority,
        deadline: Option<u64>,
    ) -> Result<SharedArrival, ShmError> {
        let claim = self.claim()?;
        Ok(self.arrive_as(claim, &table::Proc, now, level, deadline))
    }

    /// A permit now or a refusal, never queued (as [`Gate::try_arrive`]: `arrive`'s
    /// decisions, refusing `LimitReached` where `arrive` would queue); counted to this
    /// process. Takes no lock.
    pub fn try_arrive(
        &self,
        now: u64,
        level: Priority,
        deadline: Option<u64>,
    ) -> Result<SharedGatePermit, ShmError> {
        let claim = self.claim()?;
        match self.gate().try_arrive(now, level, deadline) {
            Ok(p) => Ok(self.hold(claim, p)),
            Err(r) => Err(ShmError::Rejected(r)),
        }
    }

    fn hold(&self, claim: Claim, permit: RawPermit) -> SharedGatePermit {
        let level = permit.level().index();
        let started_at = permit.started_at();
        // Counted after the admission (the safe side, see `table`).
        table::count(self.table(), claim, level);
        std::mem::forget(permit);
        SharedGatePermit { level: level as u8, started_at, claim, nonce: self.nonce() }
    }

    pub(crate) fn arrive_as(
        &self,
        claim: Claim,
        live: &impl Liveness,
        now: u64,
        level: Priority,
        deadline: Option<u64>,
    ) -> SharedArrival {
        let gate = self.gate();
        let mb = self.mailbox(claim.index);
        let reserved = mb.entries.iter().position(|e| {
            // Relaxed: the entry is this process's; the CAS only elects one thread.
            e.state.compare_exchange(FREE, RESERVED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        });
        let Some(e) = reserved else {
            // No room to be told the outcome: decided as an arrival that never waits.
            return match gate.try_arrive(now, level, deadline) {
                Ok(p) => SharedArrival::Admitted(self.hold(claim, p)),
                Err(r) => SharedArrival::Rejected(r),
            };
        };
        let entry = &mb.entries[e];
        let held = self.lock(claim, live);
        let result = match gate.arrive(now, level, deadline) {
            Arrival::Admitted(p) => SharedArrival::Admitted(self.hold(claim, p)),
            Arrival::Rejected(r) => SharedArrival::Rejected(r),
            Arrival::Queued(t) => {
                let i = gate.ticket_slot(t).expect("a ticket of this gate");
                let head = self.head();
                // A route still set for another ticket of this queue slot is the waiter
                // this arrival evicted (it took the slot over): its report comes in the
                // dispatch below, so keep its route for it.
                let evicted =
                    (head.route_owner[i].load(Ordering::Relaxed) & ROUTED != 0).then(|| {
                        (
                            head.route_ticket[i].load(Ordering::Relaxed),
                            head.route_owner[i].load(Ordering::Relaxed),
                        )
                    });
                entry.ticket.store(t.to_bits(), Ordering::Relaxed);
                // Release: a reader of QUEUED sees the ticket.
                entry.state.store(QUEUED, Ordering::Release);
                head.route_ticket[i].store(t.to_bits(), Ordering::Relaxed);
                head.route_owner[i].store(
                    ROUTED
                        | (e as u64) << 40
                        | u64::from(claim.generation & LOCK_GEN_MASK) << LOCK_GEN_SHIFT
                        | u64::from(claim.index),
                    Ordering::Relaxed,
                );
                // A slot may have freed while it was being queued.
                self.dispatch_with(now, evicted);
                drop(held);
                return SharedArrival::Queued(SharedTicket {
                    ticket: t,
                    entry: e as u16,
                    claim,
                    nonce: self.nonce(),
                });
            }
        };
        drop(held);
        entry.state.store(FREE, Ordering::Relaxed);
        result
    }

    /// Runs the gate's dispatch (`poll`) and routes every event to its owner; returns how
    /// many events it routed. Called by releases and arrivals already; call it when
    /// `gate().next_wakeup(now)` comes if no thread waits in [`wait`](Self::wait).
    pub fn poll(&self, now: u64) -> Result<usize, ShmError> {
        let claim = self.claim()?;
        let live = table::Proc;
        let _held = self.lock(claim, &live);
        Ok(self.dispatch_locked(now))
    }

    fn dispatch_locked(&self, now: u64) -> usize {
        self.dispatch_with(now, None)
    }

    /// [`dispatch_locked`](Self::dispatch_locked), with the route of an evicted waiter
    /// whose queue slot's record was overwritten by the arrival that evicted it.
    fn dispatch_with(&self, now: u64, mut evicted: Option<(u64, u64)>) -> usize {
        let mut total = 0;
        loop {
            let n = self.poll_into_journal(now);
            // A grant released here (its owner gone) freed a slot: poll again for it.
            let freed = self.route_journal(&mut evicted);
            total += n;
            if n < JOURNAL && !freed {
                return total;
            }
        }
    }

    /// One `poll` of the gate, its events recorded in the journal (under the lock). A
    /// process killed inside the poll, or before the journal's length is stored, loses
    /// the events it had in hand (see the module docs).
    fn poll_into_journal(&self, now: u64) -> usize {
        let head = self.head();
        let mut out: [Option<Event>; JOURNAL] = Default::default();
        let n = self.gate().poll(now, &mut out);
        for (ev, rec) in out[..n].iter_mut().zip(&head.journal) {
            let (t, meta, time) = match ev.take() {
                Some(Event::Granted(t, p)) => {
                    let r = (t, J_GRANTED | (p.level().index() as u64) << 8, p.started_at());
                    // Held by the journal record now (rebuilt from it when routed).
                    std::mem::forget(p);
                    r
                }
                Some(Event::Expired(t, r)) => {
                    (t, J_EXPIRED | (r.reason as u64) << 8, r.retry_after)
                }
                None => continue,
            };
            rec[0].store(t.to_bits(), Ordering::Relaxed);
            rec[2].store(time, Ordering::Relaxed);
            rec[1].store(meta, Ordering::Relaxed);
        }
        // The records and the grants they account for, in one store. Relaxed: read by
        // this holder, or by the next one after its Acquire on the lock.
        let granted = granted_by_level(self.gate());
        head.journal_len.store(n as u64 | granted << 8, Ordering::Relaxed);
        n
    }

    /// Routes the journal's records not routed yet, then empties it (under the lock). Each
    /// record is marked routed before it is acted on: a holder killed in between loses
    /// that one event (a grant's slot errs low, never released twice).
    fn route_journal(&self, evicted: &mut Option<(u64, u64)>) -> bool {
        let mut freed = false;
        let head = self.head();
        let word = head.journal_len.load(Ordering::Relaxed);
        let n = ((word & 0xFF) as usize).min(JOURNAL);
        for rec in &head.journal[..n] {
            let meta = rec[1].swap(0, Ordering::Relaxed);
            let t = Ticket::from_bits(rec[0].load(Ordering::Relaxed));
            let time = rec[2].load(Ordering::Relaxed);
            let ev = match meta & 0xFF {
                J_GRANTED => {
                    let level = Priority::new((meta >> 8) as u8).unwrap_or_default();
                    // The journal held it: exactly one counted, unreleased admission.
                    Event::Granted(t, self.gate().limiter().reissue_permit_at(level, time))
                }
                J_EXPIRED => Event::Expired(t, Rejected::new(reason_of(meta >> 8), time)),
                _ => continue,
            };
            freed |= self.route(ev, evicted);
        }
        head.journal_len.store(word & !0xFF, Ordering::Relaxed);
        freed
    }

    /// After taking the lock over from a dead holder: rebuilds the gate's queue (the holder
    /// may have died inside an arrival, a cancel or a dispatch round, the queue's dispatch
    /// flag held), routes the events it had recorded and not routed, tells the owners of
    /// tickets it had taken out of the queue and not delivered (`Expired`). The
    /// next dispatch (a release, a queued arrival, a poll, a waiter's timer or sweep, the
    /// end of a reclaim) hands out what it freed.
    fn recover_locked(&self) {
        let gate = self.gate();
        let head = self.head();
        // SAFETY: every operation on the gate's queue (arrive, cancel, poll) runs under
        // this lock, which is ours, and its dead holder never runs again.
        #[allow(unsafe_code)]
        unsafe {
            gate.rebuild_after_lost_thread()
        };
        // Grants counted by the gate since the last recorded poll, by level: the dead
        // dispatcher had their permits in hand. Marked as accounted for first (a recoverer
        // killed next loses them, never releases them twice).
        let word = head.journal_len.load(Ordering::Relaxed);
        let granted = granted_by_level(gate);
        let mut in_hand = [0u64; Priority::MAX_LEVELS];
        for (l, n) in in_hand.iter_mut().enumerate() {
            let shift = LEVEL_BITS as usize * l;
            *n = ((granted >> shift).wrapping_sub(word >> 8 >> shift)) & LEVEL_MASK;
        }
        head.journal_len.store(word & 0xFF | granted << 8, Ordering::Relaxed);
        let mut none = None;
        self.route_journal(&mut none);
        for i in 0..CAP {
            if head.route_owner[i].load(Ordering::Relaxed) & ROUTED == 0 {
                continue;
            }
            let t = Ticket::from_bits(head.route_ticket[i].load(Ordering::Relaxed));
            if !gate.is_waiting(t) {
                // Taken out by the dead dispatcher and lost with it (a grant's permit
                // included: the safe side).
                self.route(Event::Expired(t, Rejected::new(Reason::Expired, 0)), &mut none);
            }
        }
        // And tickets it had taken out whose route it had already used (killed between
        // using the route and writing the outcome): still `QUEUED`, no longer waiting.
        for index in 0..MAX_PROCESSES as u32 {
            let mut told = false;
            for entry in &self.mailbox(index).entries {
                // Relaxed: a QUEUED entry is written only under the lock, which is ours.
                if entry.state.load(Ordering::Relaxed) != QUEUED {
                    continue;
                }
                let t = Ticket::from_bits(entry.ticket.load(Ordering::Relaxed));
                if !gate.is_waiting(t) {
                    entry.a.store(0, Ordering::Relaxed);
                    entry.b.store(Reason::Expired as u64, Ordering::Relaxed);
                    // Release: the owner's Acquire load of EXPIRED sees `a` and `b`.
                    entry.state.store(EXPIRED, Ordering::Release);
                    told = true;
                }
            }
            if told {
                self.wake(index);
            }
        }
        // Their permits (the waiters were told `Expired` above), each given back once at
        // the level it was granted at.
        for (l, &n) in in_hand.iter().enumerate() {
            let level = Priority::new(l as u8).unwrap_or_default();
            for _ in 0..n {
                let permit = gate.limiter().reissue_permit(level);
                let _ = gate.release(permit, gate.limiter().latest_time(), Outcome::Ignored);
            }
        }
    }

    /// Hands one event to the owner of its ticket (under the lock); `true` if it released
    /// a grant instead (its owner withdrew or died).
    fn route(&self, ev: Event, evicted: &mut Option<(u64, u64)>) -> bool {
        let gate = self.gate();
        let head = self.head();
        let ticket = match &ev {
            Event::Granted(t, _) | Event::Expired(t, _) => *t,
        };
        let owner = match *evicted {
            Some((bits, owner)) if bits == ticket.to_bits() => {
                *evicted = None;
                Some(owner)
            }
            _ => gate.ticket_slot(ticket).and_then(|i| {
                let routed = head.route_ticket[i].load(Ordering::Relaxed) == ticket.to_bits()
                    && head.route_owner[i].load(Ordering::Relaxed) & ROUTED != 0;
                routed.then(|| head.route_owner[i].swap(0, Ordering::Relaxed))
            }),
        };
        let target = owner.and_then(|o| {
            let index = (o as u32) & INDEX_MASK;
            let entry = &self.mailbox(index).entries[((o >> 40) as usize) % MAILBOX_ENTRIES];
            let queued = entry.state.load(Ordering::Acquire) == QUEUED
                && entry.ticket.load(Ordering::Relaxed) == ticket.to_bits();
            queued.then_some((index, ((o >> LOCK_GEN_SHIFT) as u32) & LOCK_GEN_MASK, entry))
        });
        let Some((index, generation, entry)) = target else {
            // Withdrawn, or queued by a process that died before its ticket was routed.
            if let Event::Granted(_, p) = ev {
                let _ = gate.release(p, gate.limiter().latest_time(), Outcome::Ignored);
                return true;
            }
            return false;
        };
        match ev {
            Event::Granted(_, p) => {
                let level = p.level().index();
                let started_at = p.started_at();
                let slot = &self.table()[index as usize];
                let full_gen = table::gen_of(slot.word.load(Ordering::Acquire)) as u32;
                if full_gen & LOCK_GEN_MASK != generation
                    || !table::count_checked(
                        self.table(),
                        Claim { index, generation: full_gen },
                        level,
                    )
                {
                    // Its process was reclaimed meanwhile: the grant raced with the death.
                    let _ = gate.release(p, gate.limiter().latest_time(), Outcome::Ignored);
                    entry.state.store(FREE, Ordering::Release);
                    return true;
                }
                std::mem::forget(p);
                entry.a.store(started_at, Ordering::Relaxed);
                entry.b.store(level as u64, Ordering::Relaxed);
                // Release: the owner's Acquire load of GRANTED sees `a` and `b`.
                entry.state.store(GRANTED, Ordering::Release);
            }
            Event::Expired(_, r) => {
                entry.a.store(r.retry_after, Ordering::Relaxed);
                entry.b.store(r.reason as u64, Ordering::Relaxed);
                entry.state.store(EXPIRED, Ordering::Release);
            }
        }
        self.wake(index);
        false
    }

    /// Bumps a mailbox's sequence and wakes its sleepers, if any.
    fn wake(&self, index: u32) {
        let word = &self.mailbox(index).futex;
        // AcqRel: the sleeper's fetch_or and this bump are ordered on the word.
        let old = word
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |w| {
                Some(w.wrapping_add(1) & SEQ_MASK)
            })
            .unwrap_or(0);
        if old & SLEEPERS != 0 {
            futex_wake(word, i32::MAX);
        }
    }

    fn check_ticket(&self, claim: Claim, t: &SharedTicket) -> Result<&Entry, ShmError> {
        if t.nonce != self.nonce() || t.claim != claim {
            return Err(ShmError::Usage(UsageError::ForeignHandle));
        }
        let entry = self
            .mailbox(claim.index)
            .entries
            .get(t.entry as usize)
            .ok_or(ShmError::Usage(UsageError::UnknownTicket))?;
        if entry.ticket.load(Ordering::Relaxed) != t.ticket.to_bits() {
            return Err(ShmError::Usage(UsageError::UnknownTicket));
        }
        Ok(entry)
    }

    /// The ticket's outcome if it is decided (taken: it is reported once), `None` while
    /// it waits. A ticket of another process or gate is `ForeignHandle`; one already
    /// taken or cancelled is `UnknownTicket`.
    pub fn outcome(&self, t: &SharedTicket) -> Result<Option<SharedOutcome>, ShmError> {
        let claim = self.me.current().ok_or(ShmError::Usage(UsageError::ForeignHandle))?;
        self.outcome_as(claim, t)
    }

    pub(crate) fn outcome_as(
        &self,
        claim: Claim,
        t: &SharedTicket,
    ) -> Result<Option<SharedOutcome>, ShmError> {
        let entry = self.check_ticket(claim, t)?;
        // Acquire: pairs with the Release store of the outcome.
        let state = entry.state.load(Ordering::Acquire);
        let (a, b) = (entry.a.load(Ordering::Relaxed), entry.b.load(Ordering::Relaxed));
        let outcome = match state {
            QUEUED => return Ok(None),
            GRANTED => SharedOutcome::Granted(SharedGatePermit {
                level: b as u8,
                started_at: a,
                claim,
                nonce: self.nonce(),
            }),
            EXPIRED => SharedOutcome::Expired(Rejected::new(reason_of(b), a)),
            _ => return Err(ShmError::Usage(UsageError::UnknownTicket)),
        };
        // Taken once: only this process's threads race here.
        entry
            .state
            .compare_exchange(state, FREE, Ordering::Relaxed, Ordering::Relaxed)
            .map_err(|_| ShmError::Usage(UsageError::UnknownTicket))?;
        Ok(Some(outcome))
    }

    /// Blocks until the ticket is decided or `timeout_ns` passes (`None`). While it
    /// waits it polls the gate when its `next_wakeup` comes and sweeps dead processes at
    /// most every [`SWEEP_INTERVAL_NS`] (across processes).
    pub fn wait(
        &self,
        t: &SharedTicket,
        timeout_ns: u64,
    ) -> Result<Option<SharedOutcome>, ShmError> {
        let start = crate::clock::monotonic_ns();
        let end = start.saturating_add(timeout_ns);
        loop {
            let seq = self.mailbox_seq();
            if let Some(o) = self.outcome(t)? {
                return Ok(Some(o));
            }
            let now = crate::clock::monotonic_ns();
            if now >= end {
                return Ok(None);
            }
            let until = self.housekeep(now).min(end);
            self.wait_mailbox(seq, until.saturating_sub(now));
        }
    }

    /// Timers and sweeps for a waiter: polls when `next_wakeup` has come, sweeps (and
    /// polls) when due; returns when to look again.
    fn housekeep(&self, now: u64) -> u64 {
        if self.due_sweep(now) {
            self.reclaim();
            // And a dispatch, once per interval across processes: a slot freed by a
            // process that died between its release and the dispatch after it is handed
            // out here at the latest.
            let _ = self.poll(now);
        }
        let mut next = self.gate().next_wakeup(now);
        if next.is_some_and(|t| t <= now) {
            let _ = self.poll(now);
            next = self.gate().next_wakeup(now);
        }
        let sweep = now.saturating_add(SWEEP_INTERVAL_NS);
        next.map_or(sweep, |t| t.max(now + 1).min(sweep))
    }

    /// This process's mailbox sequence number (read it before checking outcomes, then
    /// pass it to [`wait_mailbox`](Self::wait_mailbox)).
    pub fn mailbox_seq(&self) -> u32 {
        self.me
            .current()
            .map_or(0, |c| self.mailbox(c.index).futex.load(Ordering::Acquire) & SEQ_MASK)
    }

    /// Blocks (`FUTEX_WAIT`) until this process's mailbox moves past `seq` or
    /// `timeout_ns` passes. For a binding's pump thread: after it returns, take the
    /// outcomes of the process's tickets with [`outcome`](Self::outcome).
    pub fn wait_mailbox(&self, seq: u32, timeout_ns: u64) {
        let Some(c) = self.me.current() else {
            std::thread::sleep(std::time::Duration::from_nanos(timeout_ns.min(SWEEP_INTERVAL_NS)));
            return;
        };
        let word = &self.mailbox(c.index).futex;
        // AcqRel: see `wake`.
        let old = word.fetch_or(SLEEPERS, Ordering::AcqRel);
        if old & SEQ_MASK != seq & SEQ_MASK || timeout_ns == 0 {
            return;
        }
        futex_wait(word, (seq & SEQ_MASK) | SLEEPERS, timeout_ns);
    }

    /// Withdraws a queued ticket: `Ok(None)` if it was still waiting (it never will be
    /// granted now), `Ok(Some(outcome))` if it had been decided first (release a granted
    /// permit). `ForeignHandle` / `UnknownTicket` as [`outcome`](Self::outcome).
    pub fn cancel(&self, t: &SharedTicket) -> Result<Option<SharedOutcome>, ShmError> {
        let claim = self.me.current().ok_or(ShmError::Usage(UsageError::ForeignHandle))?;
        self.cancel_as(claim, &table::Proc, t)
    }

    /// Withdraws a ticket only if it still waits: `Ok(())` withdrawn; `UnknownTicket` if
    /// it was decided first (its outcome stays, for [`outcome`](Self::outcome) or
    /// [`wait`](Self::wait)), taken already, or never existed; `ForeignHandle` as there.
    pub fn cancel_if_waiting(&self, t: &SharedTicket) -> Result<(), ShmError> {
        let claim = self.me.current().ok_or(ShmError::Usage(UsageError::ForeignHandle))?;
        let entry = self.check_ticket(claim, t)?;
        let _held = self.lock(claim, &table::Proc);
        if entry.state.load(Ordering::Acquire) != QUEUED {
            return Err(ShmError::Usage(UsageError::UnknownTicket));
        }
        self.withdraw_entry(entry, t.ticket);
        Ok(())
    }

    /// Withdraws a queued entry's ticket (under the lock).
    fn withdraw_entry(&self, entry: &Entry, ticket: Ticket) {
        let _ = self.gate().cancel(ticket);
        if let Some(i) = self.gate().ticket_slot(ticket) {
            if self.head().route_ticket[i].load(Ordering::Relaxed) == ticket.to_bits() {
                self.head().route_owner[i].store(0, Ordering::Relaxed);
            }
        }
        entry.state.store(FREE, Ordering::Release);
    }

    pub(crate) fn cancel_as(
        &self,
        claim: Claim,
        live: &impl Liveness,
        t: &SharedTicket,
    ) -> Result<Option<SharedOutcome>, ShmError> {
        let entry = self.check_ticket(claim, t)?;
        let _held = self.lock(claim, live);
        if entry.state.load(Ordering::Acquire) != QUEUED {
            drop(_held);
            return self.outcome_as(claim, t);
        }
        self.withdraw_entry(entry, t.ticket);
        Ok(None)
    }

    /// Ends a permit (as [`Gate::release`]), then dispatches the freed slot to a waiter,
    /// of any process. A permit of another segment is `ForeignHandle`; one already given
    /// back (twice released, or its process reclaimed) is [`ShmError::Reclaimed`].
    pub fn release(
        &self,
        permit: SharedGatePermit,
        now: u64,
        outcome: Outcome,
    ) -> Result<(), ShmError> {
        self.release_as(&table::Proc, permit, now, outcome)
    }

    pub(crate) fn release_as(
        &self,
        live: &impl Liveness,
        permit: SharedGatePermit,
        now: u64,
        outcome: Outcome,
    ) -> Result<(), ShmError> {
        if permit.nonce != self.nonce() {
            return Err(ShmError::Usage(UsageError::ForeignHandle));
        }
        let gate = self.gate();
        // Uncounted before the release (the safe side, see `table`).
        if !table::uncount(self.table(), permit.claim, permit.level as usize) {
            return Err(ShmError::Reclaimed);
        }
        let raw = gate.limiter().reissue_permit_at(permit.level(), permit.started_at);
        let result = gate.release(raw, now, outcome).map_err(ShmError::Usage);
        let claim = self.me.current().unwrap_or(CLAIMLESS);
        let latest = gate.limiter().latest_time();
        let _held = self.lock(claim, live);
        self.dispatch_locked(if result.is_ok() { now } else { latest });
        result
    }

    fn due_sweep(&self, now: u64) -> bool {
        let next = &self.map.header().next_sweep;
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

    /// Reclaims every attached process proven dead: withdraws its queued tickets, then
    /// releases its permits (granted ones included) as `Ignored`, exactly once each, then
    /// dispatches. Returns the permits released.
    pub fn reclaim(&self) -> u64 {
        let me = table::reclaimer_word(std::process::id(), super::liveness::my_start_time());
        let claim = self.me.current().unwrap_or(CLAIMLESS);
        self.reclaim_as(claim, &table::Proc, me)
    }

    pub(crate) fn reclaim_as(&self, claim: Claim, live: &impl Liveness, me: u64) -> u64 {
        let gate = self.gate();
        let withdrawn = {
            let _held = self.lock(claim, live);
            let mut n = 0;
            for (index, slot) in self.table().iter().enumerate() {
                let word = slot.word.load(Ordering::Acquire);
                let state = table::state_of(word);
                let dead = match state {
                    table::LIVE | table::CLAIMED => {
                        table::is_dead(live, word, slot.start.load(Ordering::Relaxed))
                    }
                    table::RECLAIMING => true,
                    _ => false,
                };
                if dead {
                    n += self.withdraw(index as u32);
                }
            }
            n
        };
        let released = table::sweep(self.table(), live, me, |level| {
            let level = Priority::new(level as u8).unwrap_or_default();
            let permit = gate.limiter().reissue_permit(level);
            let _ = gate.release(permit, gate.limiter().latest_time(), Outcome::Ignored);
        });
        // Always: a lock taken over from a dead holder above may have freed slots too.
        let _ = withdrawn;
        let _held = self.lock(claim, live);
        self.dispatch_locked(gate.limiter().latest_time());
        released
    }

    /// Clears a dead process's mailbox, cancelling its queued tickets (under the lock).
    fn withdraw(&self, index: u32) -> u64 {
        let mut n = 0;
        for entry in &self.mailbox(index).entries {
            let state = entry.state.load(Ordering::Acquire);
            if state == QUEUED {
                let t = Ticket::from_bits(entry.ticket.load(Ordering::Relaxed));
                n += 1;
                self.withdraw_entry(entry, t);
            } else if state != FREE {
                entry.state.store(FREE, Ordering::Release);
            }
        }
        n
    }

    /// Test hook: stops this process for good at `point`, holding the segment's lock (the
    /// guard is forgotten), after releasing `permit` first if given (its counted release,
    /// without the dispatch after it). Returns the ticket `point` left behind, if any. A
    /// test then kills the process (or, in-process, declares it dead); whoever takes the
    /// lock over recovers.
    #[doc(hidden)]
    pub fn stop_inside(
        &self,
        point: KillPoint,
        permit: Option<SharedGatePermit>,
        now: u64,
    ) -> Result<Option<Ticket>, ShmError> {
        let claim = self.claim()?;
        Ok(self.stop_inside_as(claim, &table::Proc, point, permit, now))
    }

    pub(crate) fn stop_inside_as(
        &self,
        claim: Claim,
        live: &impl Liveness,
        point: KillPoint,
        permit: Option<SharedGatePermit>,
        now: u64,
    ) -> Option<Ticket> {
        let gate = self.gate();
        if let Some(permit) = permit {
            if table::uncount(self.table(), permit.claim, permit.level as usize) {
                let raw = gate.limiter().reissue_permit_at(permit.level(), permit.started_at);
                let _ = gate.release(raw, now, Outcome::Success);
            }
        }
        let entry = (point == KillPoint::InArrival).then(|| {
            self.mailbox(claim.index).entries.iter().find(|e| {
                e.state
                    .compare_exchange(FREE, RESERVED, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            })
        });
        std::mem::forget(self.lock(claim, live));
        match point {
            KillPoint::Journaled => {
                self.poll_into_journal(now);
                None
            }
            KillPoint::InRound => gate.abandon_dispatch_round(now, false),
            KillPoint::InRoundGranted => gate.abandon_dispatch_round(now, true),
            KillPoint::InArrival => {
                entry.flatten()?;
                match gate.arrive(now, Priority::NORMAL, None) {
                    Arrival::Queued(t) => Some(t),
                    Arrival::Admitted(p) => {
                        let _ = self.hold(claim, p);
                        None
                    }
                    Arrival::Rejected(_) => None,
                }
            }
        }
    }

    /// Processes attached now.
    pub fn attached_processes(&self) -> u32 {
        table::attached(self.table())
    }

    /// Permits this process holds (counted in its slot).
    pub fn held_by_this_process(&self) -> u32 {
        self.me.current().map_or(0, |c| {
            self.table()[c.index as usize].held.iter().map(|h| h.load(Ordering::Relaxed)).sum()
        })
    }

    #[cfg(test)]
    pub(crate) fn test_table(&self) -> &[ProcSlot] {
        self.table()
    }
}

impl<const CAP: usize> Drop for SharedGate<CAP> {
    fn drop(&mut self) {
        if let Some(claim) = self.me.current() {
            let clean = self
                .mailbox(claim.index)
                .entries
                .iter()
                .all(|e| e.state.load(Ordering::Acquire) == FREE);
            if clean {
                table::detach(self.table(), claim, std::process::id());
            }
        }
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
