#![cfg(not(loom))]
//! Differential fuzzing of the `Gate`: random op sequences (arrive, try_arrive, release,
//! poll, cancel, shed level, static limit, time steps and jumps) over random configs
//! (levels, partitions, CoDel in both modes, LIFO, aging, maximum wait, queue capacity),
//! with bad input mixed in: a `now` above `time::MAX_NOW`, forged and foreign tickets,
//! foreign permits, bad static limits.
//!
//! Two gates with the same config run side by side: `x` gets every op as generated, `y`
//! the same ops with the bad input taken out (a bad `now` replaced by the time the gates
//! have recorded, which is what the rule says the call acts at; a refused call
//! left out). After every step the two must agree on each decision, on every event, and
//! on the state, the waiters and the permits in flight; after every step with bad input
//! in it, and at the end, on the whole metrics snapshot — so bad input changes nothing
//! and never moves the clock. On `x` the invariants are checked: no panic, the exact
//! in-flight bound at every admission, the queue bound, every ticket ends exactly once
//! (granted, expired or cancelled; never two of them), and after a final drain (as a
//! binding's pump: while anyone waits, while a poll fills its buffer, at each wake-up)
//! nothing waits, nothing is in flight, and every place of the queue can be taken again
//! (no slot leaked).
//!
//! The same kind of hostile sequences also run against the sequential reference model of
//! the Gate's documented rules (`support/gate_ref.rs`, partitions from the limiter's
//! reference model `support/limiter_ref.rs`), on the configs it covers (three levels,
//! capacity 4, a fixed limit; zero, default or random weights; CoDel, LIFO, aging,
//! maximum wait): longer sequences than the model test's, decision for decision, with a
//! bad `now`, foreign permits and forged or foreign tickets mixed in.
//!
//! A bounded slice runs in `cargo test` (`SG_FUZZ_CASES` unset: 10,000 cases for the twin
//! and 5,000 against the model, about 13 s of CPU in a debug build); `make fuzz` runs a
//! million of each in release mode. The slice is sized by a real case: an eviction, then
//! the waiter that evicted cancelled before any poll (its victim never got an event). It
//! turned up about once in 4,500 twin cases, so the slice finds one in about nine runs
//! of ten, and `make fuzz` in every run.

#[path = "support/gate_ref.rs"]
mod gate_ref;
#[path = "support/limiter_ref.rs"]
#[allow(dead_code)]
mod limiter_ref;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use std::collections::HashMap;
use surgeguard_core::codel::{CodelConfig, CodelMode};
use surgeguard_core::gate::{Aging, Arrival, Event, Gate, GateConfig, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::queue::Ticket;
use surgeguard_core::time::{MAX_NOW, MS, SEC};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, Reason, UsageError};

const CAP: usize = 4;

/// A `now` no caller may use: above `MAX_NOW`.
#[derive(Clone, Copy, Debug)]
struct BadNow(u64);

impl Arbitrary for BadNow {
    fn arbitrary(g: &mut Gen) -> Self {
        BadNow(match u8::arbitrary(g) % 3 {
            0 => u64::MAX,
            1 => MAX_NOW + 1,
            _ => MAX_NOW + 1 + u64::arbitrary(g) % (u64::MAX - MAX_NOW - 1),
        })
    }
}

fn bad(g: &mut Gen) -> Option<BadNow> {
    (u8::arbitrary(g) % 5 == 0).then(|| BadNow::arbitrary(g))
}

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        level: u8,
        deadline_ms: Option<u8>,
        bad: Option<BadNow>,
    },
    TryArrive {
        level: u8,
        bad: Option<BadNow>,
    },
    Release {
        idx: u8,
        outcome: u8,
        bad: Option<BadNow>,
    },
    ReleaseForeign,
    Poll {
        buf: u8,
        bad: Option<BadNow>,
    },
    Cancel {
        idx: u8,
        forge: Option<u64>,
    },
    CancelForeign,
    Advance {
        ms: u16,
    },
    Jump,
    Shed {
        level: Option<u8>,
    },
    /// `None`: unpin; `Some(Ok(x))`: pin to x/2; `Some(Err(k))`: a bad value.
    Static {
        limit: Option<Result<u8, u8>>,
    },
    Wakeup {
        bad: Option<BadNow>,
    },
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 24 {
            0..=5 => Op::Arrive {
                level: u8::arbitrary(g) % 4,
                deadline_ms: bool::arbitrary(g).then(|| u8::arbitrary(g) % 60),
                bad: bad(g),
            },
            6 => Op::TryArrive { level: u8::arbitrary(g) % 4, bad: bad(g) },
            7..=10 => {
                Op::Release { idx: u8::arbitrary(g), outcome: u8::arbitrary(g) % 3, bad: bad(g) }
            }
            11 => Op::ReleaseForeign,
            12..=15 => Op::Poll { buf: 1 + u8::arbitrary(g) % 6, bad: bad(g) },
            16 => Op::Cancel {
                idx: u8::arbitrary(g),
                forge: bool::arbitrary(g).then(|| u64::arbitrary(g).max(1)),
            },
            17 => Op::CancelForeign,
            18 | 19 => Op::Advance { ms: u16::arbitrary(g) % 120 },
            20 => Op::Jump,
            21 => Op::Shed { level: (u8::arbitrary(g) % 3 == 0).then(|| u8::arbitrary(g) % 3) },
            22 => Op::Static {
                limit: match u8::arbitrary(g) % 4 {
                    0 => None,
                    1 => Some(Err(u8::arbitrary(g) % 4)),
                    _ => Some(Ok(1 + u8::arbitrary(g) % 7)),
                },
            },
            _ => Op::Wakeup { bad: bad(g) },
        }
    }
}

#[derive(Clone, Debug)]
struct Params {
    levels: u8,
    partitions: bool,
    limit: u8,
    codel: u8,
    lifo: u8,
    max_wait_ms: Option<u8>,
    aging: bool,
    capacity: u8,
    initial_service_ms: u8,
}

impl Arbitrary for Params {
    fn arbitrary(g: &mut Gen) -> Self {
        Params {
            levels: 1 + u8::arbitrary(g) % 3,
            partitions: bool::arbitrary(g),
            limit: 1 + u8::arbitrary(g) % 3,
            codel: u8::arbitrary(g) % 3,
            lifo: u8::arbitrary(g) % 3,
            max_wait_ms: bool::arbitrary(g).then(|| 1 + u8::arbitrary(g) % 80),
            aging: bool::arbitrary(g),
            capacity: 1 + u8::arbitrary(g) % CAP as u8,
            initial_service_ms: u8::arbitrary(g) % 2 * 5,
        }
    }
}

impl Params {
    fn config(&self) -> GateConfig {
        let mut weights = [0.0; 8];
        if self.partitions {
            weights[..3].copy_from_slice(&[0.5, 0.3, 0.2]);
        }
        let limit = f64::from(self.limit);
        GateConfig {
            limiter: LimiterConfig {
                levels: self.levels,
                weights,
                ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                    initial_limit: limit,
                    min_limit: 1.0,
                    max_limit: limit,
                }))
            },
            queue_capacity: Some(usize::from(self.capacity)),
            codel: match self.codel {
                0 => None,
                k => Some(CodelConfig {
                    target_ns: 5 * MS,
                    interval_ns: 50 * MS,
                    mode: if k == 1 { CodelMode::Folly } else { CodelMode::Rfc8289 },
                }),
            },
            lifo: match self.lifo {
                0 => LifoTrigger::Never,
                1 => LifoTrigger::CodelOverloaded,
                _ => LifoTrigger::Occupancy(0.5),
            },
            max_wait_ns: self.max_wait_ms.map(|m| u64::from(m) * MS),
            aging: (self.aging && self.levels >= 2).then(|| Aging {
                from: Priority::CRITICAL,
                to: Priority::new(self.levels - 1).unwrap(),
                after_ns: 20 * MS,
            }),
            initial_service_ns: u64::from(self.initial_service_ms) * MS,
            ..GateConfig::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fate {
    Live,
    Granted,
    Expired,
    Cancelled,
}

/// An event with the ticket replaced by its index (the two gates' tickets differ).
#[derive(Debug, PartialEq)]
enum Ev {
    Granted(usize),
    Expired(usize, Reason, u64),
}

/// Both gates and what the harness knows of them.
struct Pair {
    x: Gate<CAP>,
    y: Gate<CAP>,
    /// Tickets issued, by index: (x's, y's).
    tickets: Vec<(Ticket, Ticket)>,
    index_x: HashMap<Ticket, usize>,
    index_y: HashMap<Ticket, usize>,
    fate: Vec<Fate>,
    /// Permits held, in the same order for both gates.
    permits: Vec<(RawPermit, RawPermit)>,
    /// The harness clock, and the time the gates have recorded: the gate records an
    /// accepted `now` at most once per millisecond (when it is at least 1 ms past the
    /// time recorded), so this trails the latest `now` given by less than 1 ms.
    now: u64,
    latest: u64,
}

impl Pair {
    fn at(&mut self, bad: Option<BadNow>) -> (u64, u64) {
        match bad {
            Some(BadNow(b)) => (b, self.latest),
            None => {
                self.record();
                (self.now, self.now)
            }
        }
    }

    /// The rule of the gate's clock for an accepted `now` (`self.now`).
    fn record(&mut self) {
        if self.now >= self.latest + MS {
            self.latest = self.now;
        }
    }

    /// Records one admission check: the exact bound holds after it.
    fn check_bound(&self) {
        let limit = self.x.limiter().limit();
        let allowed = (limit.floor() as u32).max(1);
        assert!(
            self.x.limiter().inflight() <= allowed,
            "in flight {} above the limit {limit}",
            self.x.limiter().inflight()
        );
    }

    fn arrival(&mut self, ax: Arrival, ay: Arrival, level: usize) {
        match (ax, ay) {
            (Arrival::Admitted(px), Arrival::Admitted(py)) => {
                self.permits.push((px, py));
                self.check_bound();
            }
            (Arrival::Queued(tx), Arrival::Queued(ty)) => {
                let i = self.tickets.len();
                assert!(self.index_x.insert(tx, i).is_none(), "x issued a ticket twice");
                assert!(self.index_y.insert(ty, i).is_none(), "y issued a ticket twice");
                self.tickets.push((tx, ty));
                self.fate.push(Fate::Live);
            }
            (Arrival::Rejected(rx), Arrival::Rejected(ry)) => {
                assert_eq!(rx, ry);
                assert!(rx.retry_after > 0);
            }
            (ax, ay) => panic!("level {level}: x {ax:?}, y {ay:?}"),
        }
    }

    fn poll(&mut self, nx: u64, ny: u64, buf: usize) -> usize {
        let mut ox: Vec<Option<Event>> = (0..buf).map(|_| None).collect();
        let mut oy: Vec<Option<Event>> = (0..buf).map(|_| None).collect();
        let kx = self.x.poll(nx, &mut ox);
        let ky = self.y.poll(ny, &mut oy);
        let mut evx = Vec::new();
        let mut evy = Vec::new();
        let mut granted = 0;
        for (ex, ey) in ox.iter_mut().zip(oy.iter_mut()).take(kx.max(ky)) {
            match (ex.take(), ey.take()) {
                (Some(Event::Granted(tx, px)), Some(Event::Granted(ty, py))) => {
                    let i = self.index_x[&tx];
                    evx.push(Ev::Granted(i));
                    evy.push(Ev::Granted(self.index_y[&ty]));
                    assert_eq!(self.fate[i], Fate::Live, "ticket {i} ended twice");
                    self.fate[i] = Fate::Granted;
                    self.permits.push((px, py));
                    granted += 1;
                }
                (Some(Event::Expired(tx, rx)), Some(Event::Expired(ty, ry))) => {
                    let i = self.index_x[&tx];
                    evx.push(Ev::Expired(i, rx.reason, rx.retry_after));
                    evy.push(Ev::Expired(self.index_y[&ty], ry.reason, ry.retry_after));
                    assert_eq!(self.fate[i], Fate::Live, "ticket {i} ended twice");
                    assert!(rx.retry_after > 0);
                    self.fate[i] = Fate::Expired;
                }
                (ex, ey) => panic!("poll: x {ex:?}, y {ey:?}"),
            }
        }
        assert_eq!(kx, ky, "event counts");
        assert_eq!(evx, evy);
        assert!(ox.iter().chain(&oy).all(Option::is_none), "nothing written beyond n");
        if granted > 0 {
            self.check_bound();
        }
        kx
    }

    fn same(&self, what: &Op) {
        assert_eq!(self.x.metrics(), self.y.metrics(), "metrics after {what:?}");
        self.same_gauges(what);
    }

    /// The cheap part of `same` (the snapshot sums the limiter's latency histograms, most
    /// of a case's time in a debug build), for the ops that give both gates the same
    /// input.
    fn same_gauges(&self, what: &Op) {
        assert_eq!(self.x.state(), self.y.state(), "state after {what:?}");
        assert_eq!(self.x.waiting_total(), self.y.waiting_total(), "waiting after {what:?}");
        assert_eq!(self.x.limiter().inflight(), self.y.limiter().inflight());
        assert!(self.x.waiting_total() as usize <= CAP, "queue above capacity");
    }
}

impl Op {
    /// Whether `x` gets something `y` does not (a bad `now`, a foreign or forged handle, a
    /// bad static limit): the ops after which the two gates could first differ, so the
    /// whole snapshot is compared after them (and at the end; the counters it holds only
    /// grow, so a difference that started elsewhere would still show there).
    fn hostile(&self) -> bool {
        match *self {
            Op::Arrive { bad, .. }
            | Op::TryArrive { bad, .. }
            | Op::Release { bad, .. }
            | Op::Poll { bad, .. }
            | Op::Wakeup { bad } => bad.is_some(),
            Op::ReleaseForeign | Op::CancelForeign => true,
            Op::Cancel { forge, .. } => forge.is_some(),
            Op::Static { limit } => matches!(limit, Some(Err(_))),
            Op::Advance { .. } | Op::Jump | Op::Shed { .. } => false,
        }
    }
}

fn run(params: Params, ops: Vec<Op>) -> bool {
    let cfg = params.config();
    let mut p = Pair {
        x: Gate::new(cfg).unwrap(),
        y: Gate::new(cfg).unwrap(),
        tickets: Vec::new(),
        index_x: HashMap::new(),
        index_y: HashMap::new(),
        fate: Vec::new(),
        permits: Vec::new(),
        now: 1,
        latest: 0,
    };
    // A third gate, for foreign tickets; a limiter, for foreign permits.
    let z: Gate<CAP> = Gate::new(cfg).unwrap();
    let mut foreign_ticket = None;
    let mut zheld = Vec::new();
    for _ in 0..8 {
        match z.arrive(0, Priority::CRITICAL, None) {
            Arrival::Queued(t) => foreign_ticket = Some(t),
            Arrival::Admitted(permit) => zheld.push(permit),
            Arrival::Rejected(_) => {}
        }
    }
    let foreign_limiter = Limiter::new(cfg.limiter).unwrap();
    let levels = usize::from(params.levels);
    for op in &ops {
        match *op {
            Op::Arrive { level, deadline_ms, bad } => {
                p.now += 1;
                let (nx, ny) = p.at(bad);
                let deadline = deadline_ms.map(|d| p.latest.max(p.now) + u64::from(d) * MS);
                let l = Priority::new(level).unwrap();
                let ax = p.x.arrive(nx, l, deadline);
                let ay = p.y.arrive(ny, l, deadline);
                p.arrival(ax, ay, usize::from(level).min(levels - 1));
            }
            Op::TryArrive { level, bad } => {
                let (nx, ny) = p.at(bad);
                let l = Priority::new(level).unwrap();
                match (p.x.try_arrive(nx, l, None), p.y.try_arrive(ny, l, None)) {
                    (Ok(px), Ok(py)) => {
                        p.permits.push((px, py));
                        p.check_bound();
                    }
                    (Err(rx), Err(ry)) => assert_eq!(rx, ry),
                    (rx, ry) => panic!("try_arrive: x {rx:?}, y {ry:?}"),
                }
            }
            Op::Release { idx, outcome, bad } => {
                if p.permits.is_empty() {
                    continue;
                }
                let (px, py) = p.permits.swap_remove(usize::from(idx) % p.permits.len());
                let outcome = Outcome::from_u32(u32::from(outcome)).unwrap();
                let (nx, ny) = p.at(bad);
                if bad.is_some() {
                    assert_eq!(p.x.release(px, nx, outcome), Err(UsageError::TimeOutOfRange));
                    // The rule: the slot returns, as an ignored permit, at the latest time.
                    p.y.release(py, ny, Outcome::Ignored).unwrap();
                } else {
                    p.x.release(px, nx, outcome).unwrap();
                    p.y.release(py, ny, outcome).unwrap();
                }
            }
            Op::ReleaseForeign => {
                if let Ok(permit) = foreign_limiter.try_acquire_raw(0, Priority::CRITICAL) {
                    assert_eq!(
                        p.x.release(permit, p.now, Outcome::Success),
                        Err(UsageError::ForeignHandle)
                    );
                }
            }
            Op::Poll { buf, bad } => {
                let (nx, ny) = p.at(bad);
                p.poll(nx, ny, usize::from(buf));
            }
            Op::Cancel { idx, forge } => {
                if p.tickets.is_empty() {
                    continue;
                }
                let i = usize::from(idx) % p.tickets.len();
                let (tx, ty) = p.tickets[i];
                match forge {
                    Some(flip) => {
                        let f = Ticket::from_bits(tx.to_bits() ^ flip);
                        if p.index_x.contains_key(&f) {
                            continue;
                        }
                        assert!(matches!(
                            p.x.cancel(f),
                            Err(UsageError::UnknownTicket | UsageError::ForeignHandle)
                        ));
                    }
                    None => {
                        let (rx, ry) = (p.x.cancel(tx), p.y.cancel(ty));
                        assert_eq!(rx, ry);
                        if rx.is_ok() {
                            assert_eq!(p.fate[i], Fate::Live, "ticket {i} ended twice");
                            p.fate[i] = Fate::Cancelled;
                        } else {
                            assert_eq!(rx, Err(UsageError::UnknownTicket));
                        }
                    }
                }
            }
            Op::CancelForeign => {
                if let Some(t) = foreign_ticket {
                    assert_eq!(p.x.cancel(t), Err(UsageError::ForeignHandle));
                }
            }
            Op::Advance { ms } => p.now += u64::from(ms) * MS,
            Op::Jump => p.now += 10 * SEC,
            Op::Shed { level } => {
                let l = level.and_then(Priority::new);
                p.x.set_shed_level(l);
                p.y.set_shed_level(l);
            }
            Op::Static { limit } => match limit {
                None => {
                    p.x.limiter().set_static_limit(None).unwrap();
                    p.y.limiter().set_static_limit(None).unwrap();
                }
                Some(Ok(half)) => {
                    let v = f64::from(half) / 2.0;
                    assert_eq!(
                        p.x.limiter().set_static_limit(Some(v)).is_ok(),
                        p.y.limiter().set_static_limit(Some(v)).is_ok()
                    );
                }
                Some(Err(k)) => {
                    let v = [f64::NAN, -1.0, f64::INFINITY, f64::NEG_INFINITY][usize::from(k)];
                    assert!(p.x.limiter().set_static_limit(Some(v)).is_err(), "{v} accepted");
                }
            },
            Op::Wakeup { bad } => {
                let (nx, ny) = p.at(bad);
                let (wx, wy) = (p.x.next_wakeup(nx), p.y.next_wakeup(ny));
                assert_eq!(wx, wy);
                if let Some(w) = wx {
                    assert!(w >= p.latest, "a wake-up in the past");
                }
            }
        }
        if op.hostile() {
            p.same(op);
        } else {
            p.same_gauges(op);
        }
    }
    if let Some(last) = ops.last() {
        p.same(last);
    }
    // Drain as a binding's pump does: nothing shed, every permit back, poll while anyone
    // waits, while a poll fills its buffer, and at each wake-up, until nothing waits and
    // no wake-up is set (an event may be owed with nothing waiting: an eviction whose
    // evictor was cancelled before any poll).
    p.x.set_shed_level(None);
    p.y.set_shed_level(None);
    let mut full = false;
    for _ in 0..400 {
        for (px, py) in p.permits.drain(..) {
            p.x.release(px, p.now, Outcome::Ignored).unwrap();
            p.y.release(py, p.now, Outcome::Ignored).unwrap();
        }
        p.record();
        if p.x.waiting_total() == 0 && !full {
            let (wx, wy) = (p.x.next_wakeup(p.now), p.y.next_wakeup(p.now));
            assert_eq!(wx, wy);
            if wx.is_none() {
                break;
            }
        }
        let (n, n2) = (p.now, p.now);
        full = p.poll(n, n2, 8) == 8;
        p.same(&Op::Poll { buf: 8, bad: None });
        if p.permits.is_empty() && !full {
            match p.x.next_wakeup(p.now) {
                Some(w) => p.now = w.max(p.now + 1),
                None => p.now += MS,
            }
        }
    }
    for (px, py) in p.permits.drain(..) {
        p.x.release(px, p.now, Outcome::Ignored).unwrap();
        p.y.release(py, p.now, Outcome::Ignored).unwrap();
    }
    assert_eq!(p.x.waiting_total(), 0, "waiters left after draining");
    assert_eq!(p.x.limiter().inflight(), 0, "a slot leaked in the limiter");
    if let Some(i) = p.fate.iter().position(|f| *f == Fate::Live) {
        panic!("ticket {i} never ended");
    }
    // Every place of the queue can be taken again: one permit held, `capacity` waiters.
    p.x.limiter().set_static_limit(Some(1.0)).unwrap();
    let now = p.now + SEC;
    let _ = p.poll(now, now, 8);
    let Arrival::Admitted(held) = p.x.arrive(now, Priority::CRITICAL, None) else {
        panic!("the only slot is free")
    };
    for k in 0..params.capacity {
        assert!(
            matches!(p.x.arrive(now, Priority::CRITICAL, None), Arrival::Queued(_)),
            "place {k} of {} leaked",
            params.capacity
        );
    }
    p.x.release(held, now, Outcome::Ignored).unwrap();
    for permit in zheld {
        z.release(permit, now, Outcome::Ignored).unwrap();
    }
    true
}

#[test]
fn gate_survives_hostile_op_sequences_like_its_twin() {
    let cases = std::env::var("SG_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    QuickCheck::new()
        .rng(Gen::new(120))
        .tests(cases)
        .max_tests(cases * 2)
        .quickcheck(run as fn(Params, Vec<Op>) -> bool);
}

#[test]
fn gate_matches_the_reference_model_under_hostile_op_sequences() {
    let cases = std::env::var("SG_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000);
    QuickCheck::new()
        .rng(Gen::new(300))
        .tests(cases)
        .max_tests(cases * 2)
        .quickcheck(gate_ref::run as fn(gate_ref::Params, Vec<gate_ref::Op>) -> bool);
}
