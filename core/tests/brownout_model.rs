#![cfg(not(loom))]
//! The brownout dimmer (`Gate::brownout`) against a reference written from its documented
//! rule (`surgeguard_core::dimmer`), fed only with what the Gate publishes (`metrics()`):
//!
//! - target = max(ramp(waiting / capacity, 0.2, 0.8), ramp(CoDel minimum delay of the
//!   levels with waiters, T/2, 2T), ramp(refused fraction of the last closed 1 s window,
//!   0, 0.1)), or 1 while the shed switch is on;
//! - the value rises to the target at once and falls by at most elapsed / 2 s.
//!
//! And properties over random operation sequences: the value is always finite and in
//! [0, 1]; it is 0 on a gate that has seen no load, and back to 0 once the gate has been
//! idle for a window and the fall time; in an overload ramp it is above 0 before the gate
//! refuses anything; and calling it never changes the gate's decisions.

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{LimiterConfig, Outcome, Priority, RawPermit};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const CAP: usize = 32;
const TARGET: u64 = 5 * MS; // CoDel's default target

fn gate(limit: f64, capacity: usize) -> Gate<CAP> {
    Gate::new(GateConfig {
        limiter: LimiterConfig {
            levels: 3,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: 1.0,
                max_limit: limit.max(1.0),
            }))
        },
        queue_capacity: Some(capacity),
        ..GateConfig::default()
    })
    .unwrap()
}

/// The documented rule, kept by the test from the gate's published metrics.
struct Reference {
    value: f64,
    at: u64,
    window_start: u64,
    base: (u64, u64),
    fraction: f64,
}

fn ramp(x: f64, lo: f64, hi: f64) -> f64 {
    ((x - lo) / (hi - lo)).clamp(0.0, 1.0)
}

impl Reference {
    fn new() -> Self {
        Self { value: 0.0, at: 0, window_start: 0, base: (0, 0), fraction: 0.0 }
    }

    fn brownout(&mut self, g: &Gate<CAP>, now: u64, gate_latest: u64) -> f64 {
        let now = now.max(gate_latest).max(self.at);
        let m = g.metrics();
        if now - self.window_start >= SEC {
            let refused =
                m.queue_full + m.deadline_unmeetable + m.shed + m.expired + m.sloughed + m.evicted;
            let admitted = m.limiter.admitted;
            let (dr, da) = (refused - self.base.0, admitted - self.base.1);
            self.fraction = if dr + da == 0 { 0.0 } else { dr as f64 / (dr + da) as f64 };
            self.base = (refused, admitted);
            self.window_start = now;
        }
        let target = if m.shed_level.is_some() {
            1.0
        } else {
            let occupancy = ramp(m.waiting as f64 / m.capacity as f64, 0.2, 0.8);
            let delay = (0..3)
                .filter(|&l| m.waiting_by_level[l] > 0)
                .map(|l| m.codel[l].min_delay_ns)
                .max();
            let sojourn =
                delay.map_or(0.0, |d| ramp(d as f64, TARGET as f64 / 2.0, 2.0 * TARGET as f64));
            occupancy.max(sojourn).max(ramp(self.fraction, 0.0, 0.1))
        };
        let fallen = self.value - (now - self.at) as f64 / (2 * SEC) as f64;
        self.value = target.max(fallen).clamp(0.0, 1.0);
        self.at = now;
        self.value
    }
}

#[derive(Clone, Debug)]
enum Op {
    Arrive(u8),
    /// Release the i-th held permit (mod the number held).
    Release(usize, bool),
    Advance(u64),
    Shed(Option<u8>),
    Brownout,
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 12 {
            0..=3 => Op::Arrive(u8::arbitrary(g) % 3),
            4..=5 => Op::Release(usize::arbitrary(g), bool::arbitrary(g)),
            6..=7 => Op::Advance(match u8::arbitrary(g) % 4 {
                0 => u64::arbitrary(g) % MS,
                1 => u64::arbitrary(g) % (20 * MS),
                2 => u64::arbitrary(g) % (300 * MS),
                _ => u64::arbitrary(g) % (3 * SEC),
            }),
            8 => Op::Shed(if bool::arbitrary(g) { Some(u8::arbitrary(g) % 3) } else { None }),
            _ => Op::Brownout,
        }
    }
}

#[derive(Clone, Debug)]
struct Params {
    limit: u8,
    capacity: u8,
}

impl Arbitrary for Params {
    fn arbitrary(g: &mut Gen) -> Self {
        Params { limit: 1 + u8::arbitrary(g) % 6, capacity: 1 + u8::arbitrary(g) % CAP as u8 }
    }
}

/// Runs `ops` on a gate; calls `on_brownout(gate, reference value, gate value)` at each
/// brownout. Returns the sequence of gate decisions (for the no-side-effect check).
fn drive(
    p: &Params,
    ops: &[Op],
    with_brownout: bool,
    mut check: impl FnMut(f64, f64) -> bool,
) -> Option<Vec<String>> {
    let g = gate(f64::from(p.limit), usize::from(p.capacity));
    let mut reference = Reference::new();
    let mut now = SEC;
    let mut held: Vec<RawPermit> = Vec::new();
    let mut log = Vec::new();
    let mut events: [Option<Event>; 16] = Default::default();
    let mut poll = |g: &Gate<CAP>, now: u64, held: &mut Vec<RawPermit>, log: &mut Vec<String>| {
        let n = g.poll(now, &mut events);
        for e in events[..n].iter_mut() {
            match e.take() {
                Some(Event::Granted(_, permit)) => {
                    held.push(permit);
                    log.push("granted".into());
                }
                Some(Event::Expired(_, r)) => log.push(format!("expired {}", r.reason)),
                None => {}
            }
        }
    };
    for op in ops {
        match op {
            Op::Arrive(level) => match g.arrive(now, Priority::new(*level).unwrap(), None) {
                Arrival::Admitted(permit) => {
                    held.push(permit);
                    log.push("admitted".into());
                }
                Arrival::Queued(_) => {
                    log.push("queued".into());
                    poll(&g, now, &mut held, &mut log);
                }
                Arrival::Rejected(r) => log.push(format!("rejected {}", r.reason)),
            },
            Op::Release(i, ok) if !held.is_empty() => {
                let permit = held.swap_remove(i % held.len());
                let outcome = if *ok { Outcome::Success } else { Outcome::Dropped };
                g.release(permit, now, outcome).unwrap();
                poll(&g, now, &mut held, &mut log);
            }
            Op::Release(..) => {}
            Op::Advance(dt) => {
                now += dt;
                poll(&g, now, &mut held, &mut log);
            }
            Op::Shed(level) => {
                g.set_shed_level(level.map(|l| Priority::new(l).unwrap()));
                poll(&g, now, &mut held, &mut log);
            }
            Op::Brownout if with_brownout => {
                // Sometimes an older `now`: the Gate acts at its limiter's record of the
                // latest time (written at most once per millisecond), never earlier.
                let asked = if now % 3 == 0 { now.saturating_sub(MS) } else { now };
                let d = g.brownout(asked);
                let r = reference.brownout(&g, asked, g.limiter().latest_time());
                if !check(r, d) {
                    return None;
                }
            }
            Op::Brownout => {}
        }
    }
    Some(log)
}

#[test]
fn brownout_matches_the_documented_rule() {
    fn prop(p: Params, ops: Vec<Op>) -> bool {
        drive(&p, &ops, true, |r, d| {
            let ok = d.is_finite() && (0.0..=1.0).contains(&d) && (r - d).abs() < 1e-9;
            if !ok {
                eprintln!("reference {r} vs gate {d}");
            }
            ok
        })
        .is_some()
    }
    QuickCheck::new().rng(Gen::new(80)).tests(1500).quickcheck(prop as fn(Params, Vec<Op>) -> bool);
}

#[test]
fn brownout_never_changes_the_gates_decisions() {
    fn prop(p: Params, ops: Vec<Op>) -> bool {
        drive(&p, &ops, true, |_, _| true) == drive(&p, &ops, false, |_, _| true)
    }
    QuickCheck::new().rng(Gen::new(80)).tests(500).quickcheck(prop as fn(Params, Vec<Op>) -> bool);
}

#[test]
fn brownout_is_zero_when_idle() {
    fn prop(p: Params, ops: Vec<Op>) -> TestResult {
        let fresh = gate(f64::from(p.limit), usize::from(p.capacity));
        if fresh.brownout(0) != 0.0 || fresh.brownout(5 * SEC) != 0.0 {
            return TestResult::failed();
        }
        let g = gate(f64::from(p.limit), usize::from(p.capacity));
        // After any history: release everything, drain the queue, switch shedding off,
        // then stay idle for a window plus the fall time.
        let mut now = SEC;
        let mut held = Vec::new();
        let mut events: [Option<Event>; 16] = Default::default();
        for op in &ops {
            match op {
                Op::Arrive(level) => {
                    if let Arrival::Admitted(permit) =
                        g.arrive(now, Priority::new(*level).unwrap(), None)
                    {
                        held.push(permit);
                    }
                }
                Op::Advance(dt) => now += dt,
                Op::Shed(level) => g.set_shed_level(level.map(|l| Priority::new(l).unwrap())),
                _ => {
                    let _ = g.brownout(now);
                }
            }
        }
        g.set_shed_level(None);
        loop {
            for permit in held.drain(..) {
                g.release(permit, now, Outcome::Success).unwrap();
            }
            let n = g.poll(now, &mut events);
            for e in events[..n].iter_mut() {
                if let Some(Event::Granted(_, permit)) = e.take() {
                    held.push(permit);
                }
            }
            if held.is_empty() && g.waiting_total() == 0 {
                break;
            }
        }
        // Idle from `now` on: the window holding the last refusals closes at the first
        // call, the next one closes empty, and the value has fallen to 0 one fall time
        // (2 s) later.
        let t1 = now + 1;
        let d = g.brownout(t1);
        let _ = g.brownout(t1 + SEC);
        let _ = g.brownout(t1 + 2 * SEC);
        let d2 = g.brownout(t1 + 4 * SEC);
        TestResult::from_bool(d2 == 0.0 && d <= 1.0)
    }
    QuickCheck::new()
        .rng(Gen::new(60))
        .tests(500)
        .quickcheck(prop as fn(Params, Vec<Op>) -> TestResult);
}

/// Overload ramps: requests of a fixed service time arrive faster and faster; the dimmer,
/// read after every step, is above 0 before the gate's first refusal of any kind.
#[test]
fn brownout_rises_before_the_first_refusal() {
    fn prop(limit: u8, capacity: u8, service_ms: u8, slope: u8) -> TestResult {
        let limit = 1 + limit % 8;
        let capacity = 2 + usize::from(capacity) % (CAP - 1);
        let service = (1 + u64::from(service_ms % 50)) * MS;
        let g = gate(f64::from(limit), capacity);
        let mut now = SEC;
        // Gap between arrivals: from 4 service times down, shrinking a little each time.
        let mut gap = 4 * service;
        let shrink = 1 + u64::from(slope % 20);
        let mut running: Vec<(u64, RawPermit)> = Vec::new();
        let mut events: [Option<Event>; 16] = Default::default();
        let mut dimmed = false;
        for _ in 0..5_000 {
            now += gap;
            gap = (gap - gap * shrink / 1000).max(service / 50).max(1);
            // Releases due by now, in order, each followed by a poll.
            running.sort_by_key(|(end, _)| *end);
            while let Some(&(end, _)) = running.first() {
                if end > now {
                    break;
                }
                let (end, permit) = running.remove(0);
                g.release(permit, end, Outcome::Success).unwrap();
                let n = g.poll(end, &mut events);
                for e in events[..n].iter_mut() {
                    match e.take() {
                        Some(Event::Granted(_, p)) => running.push((end + service, p)),
                        Some(Event::Expired(..)) => return TestResult::from_bool(dimmed),
                        None => {}
                    }
                }
                dimmed |= g.brownout(end) > 0.0;
            }
            match g.arrive(now, Priority::NORMAL, None) {
                Arrival::Admitted(p) => running.push((now + service, p)),
                Arrival::Queued(_) => {
                    let n = g.poll(now, &mut events);
                    for e in events[..n].iter_mut() {
                        match e.take() {
                            Some(Event::Granted(_, p)) => running.push((now + service, p)),
                            Some(Event::Expired(..)) => return TestResult::from_bool(dimmed),
                            None => {}
                        }
                    }
                }
                Arrival::Rejected(_) => return TestResult::from_bool(dimmed),
            }
            dimmed |= g.brownout(now) > 0.0;
        }
        // The ramp never overloaded the gate: nothing to check.
        TestResult::discard()
    }
    QuickCheck::new()
        .rng(Gen::new(100))
        .tests(300)
        .max_tests(3000)
        .quickcheck(prop as fn(u8, u8, u8, u8) -> TestResult);
}
