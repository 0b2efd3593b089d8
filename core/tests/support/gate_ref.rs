//! A sequential reference model of the `Gate`, written from the rules the `gate` module
//! documents (order, no overtaking, deadlines, folly CoDel and the slough timeout of a
//! standing queue, full queue and eviction, aging, the shed switch, the maximum wait),
//! with the limiter's partition rule taken from the limiter's own reference model
//! (`limiter_ref.rs`: an active level holds back what it does not use of its target — its
//! recent peak demand plus one slot, at most its share — and an idle level holds back
//! nothing).
//!
//! [`run`] drives random sequences of arrive / release / poll / cancel / advance-time /
//! shed-level / static-limit on a real `Gate` (fixed limit, three levels, capacity 4; zero
//! weights, the default 0.7 / 0.25 / 0.05 or random weights in eighths; FIFO or LIFO by
//! occupancy or by CoDel; folly CoDel or none; aging or none; a maximum wait or none) and
//! on the model. Background permits are often held for long while critical work arrives.
//! Bad input is mixed in: a `now` above `MAX_NOW` (the call must act at the latest time
//! the gate has seen, or be refused with `TimeOutOfRange`), forged and foreign tickets,
//! foreign permits, bad static limits; the model takes each call as the rules say and
//! nothing else changes. After every step the two must agree on each decision (admitted
//! / queued / rejected and why), on the events a poll reports, on queue depth per level
//! and on in-flight; and the invariants must hold: nothing admitted or granted above the
//! limit, queue ≤ capacity, no lost wake-up after a poll (a waiter is left only while
//! every slot is taken, or while the limiter holds the free slots back for more important
//! active levels — and then a wake-up is set), each ticket reported at most once (never
//! both granted and expired), a cancelled ticket never reported.
//!
//! Activity times: the limiter refreshes a level's activity stamp at most once per ms.
//! Here every time is a whole number of ms plus a few ns (one per arrival), and the
//! activity window is a whole number of ms plus half a ms, so whether a level is active
//! never depends on that granularity.

#![allow(dead_code)]

use crate::limiter_ref::{self, Reference};
use quickcheck::{Arbitrary, Gen};
use std::collections::{HashMap, HashSet};
use surgeguard_core::codel::{CodelConfig, CodelMode};
use surgeguard_core::gate::{Aging, Arrival, Event, Gate, GateConfig, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::queue::Ticket;
use surgeguard_core::time::{MAX_NOW, MS, SEC};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, Reason, UsageError};

pub const CAP: usize = 4;
const LEVELS: usize = 3;
/// The default weights of the limiter.
const DEFAULT_WEIGHTS: [f64; 3] = [0.7, 0.25, 0.05];

#[derive(Clone, Debug)]
pub enum Op {
    /// Arrive at `level` with a deadline `ms` from now (if any).
    Arrive {
        level: u8,
        deadline_ms: Option<u8>,
    },
    /// Release the `idx`-th held permit (mod count) with an outcome; with `spare_background`
    /// only among critical and normal permits, so background permits stay held for long.
    Release {
        idx: u8,
        outcome: u8,
        spare_background: bool,
    },
    Poll,
    /// Cancel the `idx`-th ticket ever issued (mod count): live, granted, expired or stale.
    Cancel {
        idx: u8,
    },
    Advance {
        ms: u8,
    },
    Shed {
        level: Option<u8>,
    },
    /// A whole second passes (activity windows lapse).
    Lapse,
    /// An arrival with a `now` above `MAX_NOW`: it acts at the latest time the gate saw.
    BadArrive {
        level: u8,
        deadline_ms: Option<u8>,
        bad_now: u64,
    },
    /// A poll with a `now` above `MAX_NOW`: it acts at the latest time the gate saw.
    BadPoll {
        bad_now: u64,
    },
    /// A release with a `now` above `MAX_NOW`: refused with `TimeOutOfRange`; the slot
    /// comes back as `Ignored` (no service sample).
    BadRelease {
        idx: u8,
        bad_now: u64,
    },
    /// A release of a permit of another limiter: refused, nothing changes.
    ForeignRelease,
    /// A cancel of a ticket of another gate, or of a forged ticket.
    ForeignCancel {
        flip: Option<u64>,
    },
    /// The kill switch: pin the limit to a whole 1..=10, hand it back (`None`), or a bad
    /// value (NaN, ±inf, 0, negative: refused, nothing changes).
    Pin(Option<u8>),
}

fn bad_now(g: &mut Gen) -> u64 {
    match u8::arbitrary(g) % 3 {
        0 => u64::MAX,
        1 => MAX_NOW + 1,
        _ => MAX_NOW + 1 + u64::arbitrary(g) % (u64::MAX - MAX_NOW - 1),
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 25 {
            0..=5 => Op::Arrive {
                level: u8::arbitrary(g) % 4, // 3 is beyond the levels: counts as the last
                deadline_ms: if bool::arbitrary(g) { Some(u8::arbitrary(g) % 40) } else { None },
            },
            6..=9 => Op::Release {
                idx: u8::arbitrary(g),
                outcome: u8::arbitrary(g) % 3,
                spare_background: bool::arbitrary(g),
            },
            10..=12 => Op::Poll,
            13 => Op::Cancel { idx: u8::arbitrary(g) },
            14..=16 => Op::Advance { ms: u8::arbitrary(g) % 20 },
            17 => Op::Shed {
                level: if u8::arbitrary(g) % 3 == 0 { Some(u8::arbitrary(g) % 3) } else { None },
            },
            18 => Op::Lapse,
            19 => Op::BadArrive {
                level: u8::arbitrary(g) % 4,
                deadline_ms: if bool::arbitrary(g) { Some(u8::arbitrary(g) % 40) } else { None },
                bad_now: bad_now(g),
            },
            20 => Op::BadPoll { bad_now: bad_now(g) },
            21 => Op::BadRelease { idx: u8::arbitrary(g), bad_now: bad_now(g) },
            22 => Op::ForeignRelease,
            23 => Op::Pin(bool::arbitrary(g).then(|| u8::arbitrary(g) % 14)),
            _ => {
                Op::ForeignCancel { flip: bool::arbitrary(g).then(|| 1 + u64::arbitrary(g) % 255) }
            }
        }
    }
}

/// The limiter's weights.
#[derive(Clone, Copy, Debug)]
pub enum Weights {
    /// No partitions.
    Zero,
    /// 0.7 / 0.25 / 0.05.
    Default,
    /// Random shares in eighths (exact in binary), summing to at most 1.
    Eighths([u8; 3]),
}

impl Weights {
    fn values(self) -> [f64; 3] {
        match self {
            Weights::Zero => [0.0; 3],
            Weights::Default => DEFAULT_WEIGHTS,
            Weights::Eighths(e) => e.map(|x| f64::from(x) / 8.0),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Params {
    /// 1..=3 without partitions, 1..=10 with.
    limit: u8,
    weights: Weights,
    /// A level is active for this many ms and a half after its last arrival.
    active_ms: u16,
    initial_service_ms: u8,
    /// LIFO while occupancy is above this many quarters of the capacity.
    lifo_quarters: Option<u8>,
    max_wait_ms: Option<u8>,
    /// folly CoDel (target 5 ms, interval 50 ms) on every level.
    codel: bool,
    /// LIFO while CoDel says overloaded (instead of by occupancy).
    lifo_codel: bool,
    /// Critical waiters age to background after 20 ms.
    aging: bool,
}

impl Arbitrary for Params {
    fn arbitrary(g: &mut Gen) -> Self {
        let weights = match u8::arbitrary(g) % 3 {
            0 => Weights::Zero,
            1 => Weights::Default,
            _ => {
                let a = u8::arbitrary(g) % 9;
                let b = u8::arbitrary(g) % (9 - a);
                let c = u8::arbitrary(g) % (9 - a - b);
                Weights::Eighths([a, b, c])
            }
        };
        let partitioned = !matches!(weights, Weights::Zero);
        Params {
            limit: 1 + u8::arbitrary(g) % if partitioned { 10 } else { 3 },
            weights,
            active_ms: [5, 30, 1000][usize::from(u8::arbitrary(g) % 3)],
            initial_service_ms: u8::arbitrary(g) % 2 * 5,
            lifo_quarters: bool::arbitrary(g).then(|| 1 + u8::arbitrary(g) % 3),
            max_wait_ms: bool::arbitrary(g).then(|| 1 + u8::arbitrary(g) % 30),
            codel: bool::arbitrary(g),
            lifo_codel: bool::arbitrary(g),
            aging: bool::arbitrary(g),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct MWaiter {
    ticket: Ticket,
    enqueued_at: u64,
    deadline: u64,
    /// It took its slot from an evicted waiter, and no poll has reported that eviction
    /// yet: if cancelled now, its slot stays taken until the next poll.
    evicted_unreported: bool,
}

const TARGET: u64 = 5 * MS;
const INTERVAL: u64 = 50 * MS;
const AGE_AFTER: u64 = 20 * MS;

/// folly's CoDel as documented: over each interval the smallest delay seen at dequeue;
/// at the first dequeue after the interval ends (if the interval saw a dequeue) the
/// queue is overloaded iff that minimum exceeded the target; the first dequeue of an
/// interval re-seeds the minimum and is never dropped; otherwise drop iff overloaded and
/// delay > 2 × target. A request admitted without queueing is a zero-delay dequeue,
/// noted (the first, and the latest if more than interval/64 after the one noted) and
/// folded in at the next dequeue, before it.
#[derive(Clone, Debug, Default)]
struct MCodel {
    /// The target and interval in force: the configured ones, raised to follow the
    /// uncongested service time at the start of each poll (see `follow`).
    target: u64,
    interval: u64,
    end: Option<u64>,
    min: u64,
    /// The next dequeue starts a new minimum.
    fresh: bool,
    overloaded: bool,
    latest: u64,
    passes: Option<(u64, u64)>,
}

impl MCodel {
    fn new() -> Self {
        MCodel { fresh: true, target: TARGET, interval: INTERVAL, ..Default::default() }
    }

    /// The documented rule: target `max(configured, service / 2)`, interval
    /// `max(configured, 10 × target)` (at most an hour, the target at most half of it).
    fn follow(&mut self, service: u64) {
        let t = TARGET.max(service / 2);
        let i = INTERVAL.max(t.saturating_mul(10)).min(3_600 * SEC);
        self.target = t.min(i / 2);
        self.interval = i;
    }

    fn folly(&mut self, now: u64, delay: u64) -> bool {
        match self.end {
            None => self.end = Some(now + self.interval),
            Some(end) if now > end && !self.fresh => {
                self.overloaded = self.min > self.target;
                self.end = Some(now + self.interval);
                self.fresh = true;
            }
            Some(_) => {}
        }
        if self.fresh {
            self.fresh = false;
            self.min = delay;
            return false;
        }
        self.min = self.min.min(delay);
        self.overloaded && delay > 2 * self.target
    }

    fn fold_passes(&mut self) {
        if let Some((first, last)) = self.passes.take() {
            self.latest = self.latest.max(first);
            let a = self.latest;
            self.folly(a, 0);
            if last > a {
                self.latest = last;
                self.folly(last, 0);
            }
        }
    }

    fn pass(&mut self, now: u64) {
        self.passes = Some(match self.passes {
            None => (now, now),
            Some((f, l)) if now > l + self.interval / 64 => (f, now),
            Some(p) => p,
        });
    }

    fn dequeue(&mut self, now: u64, delay: u64) -> bool {
        self.fold_passes();
        self.latest = self.latest.max(now);
        let now = self.latest;
        self.folly(now, delay)
    }

    /// The verdict the next dequeue starts from (pending passes counted).
    fn is_overloaded(&self) -> bool {
        let mut c = self.clone();
        c.fold_passes();
        c.overloaded
    }
}

/// The sequential reference model.
struct Model {
    now: u64,
    /// The limiter: slots, per-level in-flight, activity and the partition rule.
    lim: Reference,
    /// The level each granted ticket's permit belongs to.
    granted_level: HashMap<Ticket, usize>,
    /// Expected service time in 1/65536 ns (the gate keeps it in integers).
    service: u64,
    /// The uncongested service time, ns, and when it last moved.
    floor: u64,
    floor_at: u64,
    shed: Option<usize>,
    levels: [Vec<MWaiter>; LEVELS],
    /// Cancelled waiters whose slots the next poll reclaims (only those whose slot still
    /// owes an eviction report; any other cancelled slot is reused at once).
    unreclaimed: usize,
    /// Evicted tickets the next poll reports.
    evicted: Vec<Ticket>,
    lifo_threshold: Option<f64>,
    /// Levels that dispatched LIFO at their last dispatch.
    lifo: [bool; LEVELS],
    max_wait: Option<u64>,
    codel: Option<[MCodel; LEVELS]>,
    lifo_codel: bool,
    aging: bool,
}

#[derive(Debug, PartialEq)]
enum Decision {
    Admitted,
    Queued { evicts: Option<(usize, usize)> },
    Rejected(Reason),
}

impl Model {
    fn waiting(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    fn service_ns(&self) -> u64 {
        (self.service + (1 << 15)) >> 16
    }

    fn drain_time(&self, ahead: usize) -> u64 {
        let t = (ahead as f64 + 1.0) * self.service_ns() as f64 / self.lim.limit();
        t.min(3600e9) as u64
    }

    /// Whether the limiter admits an arrival at `lvl` now. The gate asks it only while
    /// some slot is free (a limit of at least 1 whose slots are all taken is not asked);
    /// a refusal it is asked for is booked there (a level's demand is the most it held
    /// or was refused at), an admission is booked by the caller.
    fn limiter_admits(&mut self, lvl: usize) -> bool {
        if self.lim.limit() >= 1.0 && self.lim.total() >= self.lim.slots() {
            return false;
        }
        let d = self.lim.decide(lvl, self.now);
        if d != limiter_ref::Decision::Admit {
            self.lim.book(lvl, d);
        }
        d == limiter_ref::Decision::Admit
    }

    fn decide(&mut self, lvl: usize, deadline: u64) -> Decision {
        if self.shed.is_some_and(|s| lvl >= s) {
            return Decision::Rejected(Reason::Shed);
        }
        if deadline <= self.now {
            return Decision::Rejected(Reason::DeadlineUnmeetable);
        }
        let through: usize = self.levels[..=lvl].iter().map(Vec::len).sum();
        // From here on the arrival makes its level active, whether the limiter admits it,
        // refuses it, or the queue holds or refuses it.
        let admit = through == 0 && self.limiter_admits(lvl);
        self.lim.seen[lvl] = Some(self.now);
        if admit {
            return Decision::Admitted;
        }
        if deadline != u64::MAX {
            let ahead = if self.lifo[lvl] { through - self.levels[lvl].len() } else { through };
            let wait = self.drain_time(ahead);
            if self.now + wait + self.service_ns() > deadline {
                return Decision::Rejected(Reason::DeadlineUnmeetable);
            }
        }
        if self.waiting() + self.unreclaimed < CAP {
            return Decision::Queued { evicts: None };
        }
        // Full: evict the oldest waiter of the least important level below `lvl`.
        for q in (lvl + 1..LEVELS).rev() {
            if let Some((i, _)) =
                self.levels[q].iter().enumerate().min_by_key(|(_, w)| w.enqueued_at)
            {
                return Decision::Queued { evicts: Some((q, i)) };
            }
        }
        Decision::Rejected(Reason::QueueFull)
    }

    fn record_success(&mut self, latency: u64) {
        // EWMA, alpha = 0.1 as the nearest multiple of 2^-32, in 1/65536 ns, rounded down.
        let x = i128::from(latency.min((1 << 47) - 1)) << 16;
        let alpha = ((0.1 * 2f64.powi(32)) + 0.5) as i128;
        let old = i128::from(self.service);
        self.service = if old == 0 { x } else { old + (((x - old) * alpha) >> 32) } as u64;
        // The floor, at most once per ms: down to the estimate at once, up by at most
        // its own value per 30 s of elapsed time.
        let (est, elapsed) = (self.service_ns(), self.now - self.floor_at);
        if self.floor == 0 || elapsed >= MS {
            let risen = if self.floor == 0 {
                u64::MAX
            } else {
                self.floor
                    + (u128::from(self.floor) * u128::from(elapsed) / (30 * SEC as u128)) as u64
            };
            self.floor = est.min(risen);
            self.floor_at = self.now;
        }
    }

    /// A poll: the events it must report, as (ticket, Some(reason)) or (ticket, None) for
    /// a grant.
    fn poll(&mut self) -> Vec<(Ticket, Option<Reason>)> {
        if let Some(c) = self.codel.as_mut() {
            for codel in c.iter_mut() {
                codel.follow(self.floor);
            }
        }
        let mut events: Vec<(Ticket, Option<Reason>)> =
            self.evicted.drain(..).map(|t| (t, Some(Reason::Evicted))).collect();
        self.unreclaimed = 0;
        for w in self.levels.iter_mut().flatten() {
            w.evicted_unreported = false;
        }
        // Aging: critical waiters that waited 20 ms, oldest first, join background in
        // arrival order.
        if self.aging {
            while self.levels[0].first().is_some_and(|w| self.now - w.enqueued_at >= AGE_AFTER) {
                let w = self.levels[0].remove(0);
                let to = &mut self.levels[LEVELS - 1];
                let at =
                    to.iter().rposition(|x| x.enqueued_at <= w.enqueued_at).map_or(0, |i| i + 1);
                to.insert(at, w);
            }
        }
        if let Some(s) = self.shed {
            for l in s..LEVELS {
                events.extend(self.levels[l].drain(..).map(|w| (w.ticket, Some(Reason::Shed))));
            }
        }
        let (now, service) = (self.now, self.service_ns());
        for l in 0..LEVELS {
            self.levels[l].retain(|w| {
                let expired = self.max_wait.is_some_and(|m| now - w.enqueued_at > m)
                    || (w.deadline != u64::MAX && now + service > w.deadline);
                if expired {
                    events.push((w.ticket, Some(Reason::Expired)));
                }
                !expired
            });
        }
        // A standing queue limits the wait: while a level's CoDel says overloaded, its
        // waiters older than the slough timeout (2 × target) are sloughed, oldest first.
        self.slough_standing(&mut events);
        'levels: for l in 0..LEVELS {
            // Each non-empty level decides FIFO or LIFO when dispatch reaches it.
            if self.levels[l].is_empty() {
                continue;
            }
            self.lifo[l] = if self.lifo_codel {
                self.codel.as_ref().is_some_and(|c| c[l].is_overloaded())
            } else {
                self.lifo_threshold.is_some_and(|f| self.waiting() as f64 > f * CAP as f64)
            };
            // A permit taken for a waiter CoDel then sloughed serves the next waiter of the
            // level; one left over at the level's end goes back unused (`Ignored`).
            let mut held = false;
            while !self.levels[l].is_empty() {
                if !held {
                    // Dispatch stops at the first level the limiter refuses (every slot
                    // taken, or the free ones reserved for more important active levels).
                    if !self.limiter_admits(l) {
                        break 'levels;
                    }
                    self.lim.book(l, limiter_ref::Decision::Admit);
                    held = true;
                }
                let w = if self.lifo[l] {
                    self.levels[l].pop().unwrap()
                } else {
                    self.levels[l].remove(0)
                };
                // CoDel judges the waiter being dequeued.
                if let Some(c) = self.codel.as_mut() {
                    if c[l].dequeue(now, now - w.enqueued_at) {
                        events.push((w.ticket, Some(Reason::CodelSlough)));
                        continue;
                    }
                }
                held = false;
                self.granted_level.insert(w.ticket, l);
                events.push((w.ticket, None));
            }
            if held {
                self.lim.release(l, now, now, 2);
            }
        }
        // Again after dispatch (which may have closed an interval as overloaded).
        self.slough_standing(&mut events);
        events
    }

    fn slough_standing(&mut self, events: &mut Vec<(Ticket, Option<Reason>)>) {
        let now = self.now;
        if let Some(c) = self.codel.as_ref() {
            for (waiters, codel) in self.levels.iter_mut().zip(c) {
                if waiters.is_empty() || !codel.is_overloaded() {
                    continue;
                }
                let timeout = 2 * codel.target;
                while waiters.first().is_some_and(|w| now - w.enqueued_at > timeout) {
                    let w = waiters.remove(0);
                    events.push((w.ticket, Some(Reason::CodelSlough)));
                }
            }
        }
    }
}

/// Runs `ops` on a gate built from `params` and on the model; panics on any disagreement
/// or broken invariant.
pub fn run(params: Params, ops: Vec<Op>) -> bool {
    let limit = f64::from(params.limit);
    let weights = params.weights.values();
    let active_ns = u64::from(params.active_ms) * MS + MS / 2;
    let mut limiter_weights = [0.0; 8];
    limiter_weights[..LEVELS].copy_from_slice(&weights);
    let cfg = GateConfig {
        limiter: LimiterConfig {
            levels: LEVELS as u8,
            weights: limiter_weights,
            active_ns,
            // The reference model's windows (each level's demand decays at each window):
            // one closes at the first completion 100 ms or more past the last one.
            min_samples: 1,
            min_window_ns: 100 * MS,
            max_window_ns: 100 * MS,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: 1.0,
                max_limit: limit,
            }))
        },
        codel: params.codel.then_some(CodelConfig {
            target_ns: TARGET,
            interval_ns: INTERVAL,
            mode: CodelMode::Folly,
        }),
        lifo: if params.lifo_codel {
            LifoTrigger::CodelOverloaded
        } else {
            params
                .lifo_quarters
                .map_or(LifoTrigger::Never, |q| LifoTrigger::Occupancy(f64::from(q) / 4.0))
        },
        aging: params.aging.then_some(Aging {
            from: Priority::CRITICAL,
            to: Priority::BACKGROUND,
            after_ns: AGE_AFTER,
        }),
        max_wait_ns: params.max_wait_ms.map(|m| u64::from(m) * MS),
        initial_service_ns: u64::from(params.initial_service_ms) * MS,
        ..GateConfig::default()
    };
    let gate: Gate<CAP> = Gate::new(cfg).unwrap();
    // Another gate (for a foreign ticket) and a limiter (for foreign permits).
    let other: Gate<CAP> = Gate::new(cfg).unwrap();
    let mut foreign_ticket = None;
    for _ in 0..(CAP + 10) {
        if let Arrival::Queued(t) = other.arrive(1, Priority::CRITICAL, None) {
            foreign_ticket = Some(t);
        }
    }
    let foreign =
        Limiter::new(LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: 1e6,
            min_limit: 1.0,
            max_limit: 1e6,
        })))
        .unwrap();
    let mut m = Model {
        // Times start past 1 ms: the limiter takes a level's activity stamp only once the
        // clock has reached 1 ms (an arrival before that leaves the level inactive).
        now: MS,
        lim: Reference::new(limit, &weights, active_ns, 100 * MS),
        granted_level: HashMap::new(),
        service: (u64::from(params.initial_service_ms) * MS) << 16,
        floor: u64::from(params.initial_service_ms) * MS,
        floor_at: 0,
        shed: None,
        levels: Default::default(),
        unreclaimed: 0,
        evicted: Vec::new(),
        lifo_threshold: params.lifo_quarters.map(|q| f64::from(q) / 4.0),
        lifo: [false; LEVELS],
        max_wait: params.max_wait_ms.map(|m| u64::from(m) * MS),
        codel: params.codel.then(|| core::array::from_fn(|_| MCodel::new())),
        lifo_codel: params.lifo_codel,
        aging: params.aging,
    };
    // Held permits with the level the model booked them at.
    let mut permits: Vec<(RawPermit, usize)> = Vec::new();
    let mut tickets: Vec<Ticket> = Vec::new();
    let mut reported: HashSet<Ticket> = HashSet::new();
    let mut cancelled: HashSet<Ticket> = HashSet::new();
    for op in ops {
        match op {
            Op::Arrive { level, deadline_ms } | Op::BadArrive { level, deadline_ms, .. } => {
                m.now += 1; // distinct arrival times make "oldest" unambiguous
                let now = match op {
                    Op::BadArrive { bad_now, .. } => {
                        // The gate records a time at most once per millisecond (it trails
                        // the latest `now` by less than 1 ms): after a millisecond passes,
                        // a call that only reads the clock makes `m.now` its recorded
                        // time, and the bad `now` must then act at it.
                        m.now += MS;
                        gate.next_wakeup(m.now);
                        bad_now
                    }
                    _ => m.now,
                };
                let lvl = usize::from(level).min(LEVELS - 1);
                let deadline = deadline_ms.map_or(u64::MAX, |d| m.now + u64::from(d) * MS);
                let want = m.decide(lvl, deadline);
                let got =
                    gate.arrive(now, Priority::new(level).unwrap(), deadline_ms.map(|_| deadline));
                match (&want, got) {
                    (Decision::Admitted, Arrival::Admitted(p)) => {
                        m.lim.book(lvl, limiter_ref::Decision::Admit);
                        let inflight = u64::from(gate.limiter().inflight());
                        assert!(inflight <= m.lim.slots(), "admitted above the limit");
                        if let Some(c) = m.codel.as_mut() {
                            c[lvl].pass(m.now);
                        }
                        assert_eq!(p.started_at(), m.now, "a permit starts at the gate's time");
                        permits.push((p, lvl));
                    }
                    (Decision::Queued { evicts }, Arrival::Queued(t)) => {
                        if let Some((q, i)) = *evicts {
                            let victim = m.levels[q].remove(i);
                            m.evicted.push(victim.ticket);
                        }
                        m.levels[lvl].push(MWaiter {
                            ticket: t,
                            enqueued_at: m.now,
                            deadline,
                            evicted_unreported: evicts.is_some(),
                        });
                        tickets.push(t);
                    }
                    (Decision::Rejected(r), Arrival::Rejected(rej)) => {
                        assert_eq!(*r, rej.reason, "rejection reason");
                        assert!(rej.retry_after > 0, "retry_after on every rejection");
                    }
                    (want, got) => panic!("model {want:?}, gate {got:?} at {}", m.now),
                }
            }
            Op::Release { idx, outcome, spare_background } => {
                let pick: Vec<usize> = (0..permits.len())
                    .filter(|&i| !spare_background || permits[i].1 < LEVELS - 1)
                    .collect();
                if pick.is_empty() {
                    continue;
                }
                let (p, lvl) = permits.swap_remove(pick[usize::from(idx) % pick.len()]);
                let outcome = Outcome::from_u32(u32::from(outcome)).unwrap();
                let latency = m.now.saturating_sub(p.started_at());
                gate.release(p, m.now, outcome).unwrap();
                m.lim.release(lvl, m.now - latency, m.now, outcome as u8);
                if outcome == Outcome::Success {
                    m.record_success(latency);
                }
            }
            Op::BadRelease { idx, bad_now } => {
                if permits.is_empty() {
                    continue;
                }
                let (p, lvl) = permits.swap_remove(usize::from(idx) % permits.len());
                assert_eq!(
                    gate.release(p, bad_now, Outcome::Success),
                    Err(UsageError::TimeOutOfRange)
                );
                // The slot comes back as `Ignored`: no service sample.
                m.lim.release(lvl, m.now, m.now, 2);
            }
            Op::ForeignRelease => {
                let p = foreign.try_acquire_raw(1, Priority::CRITICAL).unwrap();
                assert_eq!(
                    gate.release(p, m.now, Outcome::Success),
                    Err(UsageError::ForeignHandle)
                );
            }
            Op::ForeignCancel { flip } => match (flip, foreign_ticket) {
                (None, Some(t)) => assert_eq!(gate.cancel(t), Err(UsageError::ForeignHandle)),
                (Some(flip), _) if !tickets.is_empty() => {
                    let t = tickets[flip as usize % tickets.len()];
                    let forged = Ticket::from_bits(t.to_bits() ^ flip);
                    if tickets.contains(&forged) {
                        continue;
                    }
                    assert!(matches!(
                        gate.cancel(forged),
                        Err(UsageError::UnknownTicket | UsageError::ForeignHandle)
                    ));
                }
                _ => {}
            },
            Op::Poll | Op::BadPoll { .. } => {
                let now = match op {
                    Op::BadPoll { bad_now } => {
                        // As for `BadArrive`: a millisecond passes and the gate records
                        // `m.now`; the bad `now` acts at it.
                        m.now += MS;
                        gate.next_wakeup(m.now);
                        bad_now
                    }
                    _ => m.now,
                };
                let want = m.poll();
                let mut out: Vec<Option<Event>> = (0..3 * CAP).map(|_| None).collect();
                let n = gate.poll(now, &mut out);
                assert_eq!(n, want.len(), "events at {}: model {want:?}, gate {out:?}", m.now);
                let mut got = HashMap::new();
                for e in out.into_iter().take(n) {
                    let (t, r) = match e.unwrap() {
                        Event::Granted(t, p) => {
                            let lvl = *m.granted_level.get(&t).expect("granted by the model");
                            assert_eq!(p.started_at(), m.now);
                            permits.push((p, lvl));
                            (t, None)
                        }
                        Event::Expired(t, rej) => {
                            assert!(rej.retry_after > 0);
                            (t, Some(rej.reason))
                        }
                    };
                    assert!(reported.insert(t), "ticket {t:?} reported twice");
                    assert!(!cancelled.contains(&t), "cancelled ticket {t:?} reported");
                    got.insert(t, r);
                }
                let want: HashMap<_, _> = want.into_iter().collect();
                assert_eq!(got, want, "poll at {}", m.now);
                if got.values().any(Option::is_none) {
                    let inflight = u64::from(gate.limiter().inflight());
                    assert!(inflight <= m.lim.slots(), "granted above the limit");
                }
                // No lost wake-up: whoever still waits, waits because every slot is taken,
                // or because the free ones are reserved for more important active levels
                // (which lapses with time: a wake-up is set).
                if gate.waiting_total() > 0 && u64::from(gate.limiter().inflight()) < m.lim.slots()
                {
                    let first = (0..LEVELS).find(|&l| !m.levels[l].is_empty()).unwrap();
                    assert!(
                        m.lim.total() + m.lim.reserved_above(first, m.now) >= m.lim.slots(),
                        "a waiter beside a free slot"
                    );
                    assert!(gate.next_wakeup(m.now).is_some(), "no wake-up for a reservation");
                }
            }
            Op::Cancel { idx } => {
                if tickets.is_empty() {
                    continue;
                }
                let t = tickets[usize::from(idx) % tickets.len()];
                let pos = m
                    .levels
                    .iter()
                    .enumerate()
                    .find_map(|(l, ws)| ws.iter().position(|w| w.ticket == t).map(|i| (l, i)));
                let got = gate.cancel(t);
                match pos {
                    Some((l, i)) => {
                        assert_eq!(got, Ok(()));
                        let w = m.levels[l].remove(i);
                        m.unreclaimed += usize::from(w.evicted_unreported);
                        cancelled.insert(t);
                    }
                    None => assert_eq!(got, Err(UsageError::UnknownTicket)),
                }
            }
            Op::Advance { ms } => m.now += u64::from(ms) * MS,
            Op::Lapse => m.now += 1000 * MS,
            Op::Pin(v) => {
                let value = v.map(|b| match b {
                    10 => f64::NAN,
                    11 => f64::INFINITY,
                    12 => 0.0,
                    13 => -1.0,
                    b => f64::from(b + 1),
                });
                let got = gate.limiter().set_static_limit(value);
                if v.is_some_and(|b| b >= 10) {
                    assert!(got.is_err(), "bad static limit {value:?} accepted");
                } else {
                    assert_eq!(got, Ok(()));
                    m.lim.pin = value;
                }
            }
            Op::Shed { level } => {
                m.shed = level.map(usize::from);
                gate.set_shed_level(level.and_then(Priority::new));
            }
        }
        // Agreement and bounds after every step.
        for l in 0..LEVELS {
            assert_eq!(
                gate.waiting(Priority::new(l as u8).unwrap()) as usize,
                m.levels[l].len(),
                "depth of level {l} at {}",
                m.now
            );
        }
        assert_eq!(u64::from(gate.limiter().inflight()), m.lim.total(), "in-flight");
        assert!(m.waiting() + m.unreclaimed <= CAP, "queue above capacity");
        assert!(gate.metrics().waiting as usize <= CAP);
        // The timer: never in the past, and no later than the first waiter's expiry.
        let first_expiry = m
            .levels
            .iter()
            .flatten()
            .flat_map(|w| {
                let by_deadline = (w.deadline != u64::MAX)
                    .then(|| (w.deadline + 1).saturating_sub(m.service_ns()));
                let by_wait = m.max_wait.map(|mw| w.enqueued_at + mw + 1);
                by_deadline.into_iter().chain(by_wait)
            })
            .min();
        match (gate.next_wakeup(m.now), first_expiry) {
            (Some(t), Some(e)) => assert!(m.now <= t && t <= e.max(m.now), "wakeup {t} > {e}"),
            (Some(t), None) => assert!(t >= m.now),
            (None, Some(e)) => panic!("no wakeup but a waiter expires at {e}"),
            (None, None) => {}
        }
    }
    // Drain: release everything and poll until quiet (each round after every activity
    // window lapsed, so no reservation holds a waiter back); every live waiter is granted
    // or expired, nothing stays queued beside free slots.
    m.shed = None;
    gate.set_shed_level(None);
    for _ in 0..(2 * CAP + 2) {
        m.now += active_ns + MS;
        for (p, _) in permits.drain(..) {
            gate.release(p, m.now, Outcome::Ignored).unwrap();
        }
        let mut out: Vec<Option<Event>> = (0..3 * CAP).map(|_| None).collect();
        let n = gate.poll(m.now, &mut out);
        for e in out.into_iter().take(n) {
            match e.unwrap() {
                Event::Granted(t, p) => {
                    assert!(reported.insert(t));
                    permits.push((p, 0));
                }
                Event::Expired(t, _) => assert!(reported.insert(t)),
            }
        }
    }
    assert_eq!(gate.waiting_total(), 0, "waiters left after draining");
    true
}
