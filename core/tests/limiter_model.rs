//! quickcheck model test: the Limiter against a sequential reference model of the
//! demand-aware reservation rule (DESIGN.md §3, reservations bounded by recent demand),
//! plus the properties the rule promises.
#![cfg(not(loom))]

use quickcheck::{quickcheck, Arbitrary, Gen, TestResult};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, Reason};

const MS: u64 = 1_000_000;
const LEVELS: usize = 3;
const WEIGHTS: [f64; LEVELS] = [0.7, 0.25, 0.05];
const ACTIVE_NS: u64 = 1_000 * MS;

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8),
    Release(usize, u8),
    Advance(u64),
    Pin(Option<u8>),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 10 {
            0..=4 => Op::Acquire(u8::arbitrary(g) % LEVELS as u8),
            5..=6 => Op::Release(usize::arbitrary(g), u8::arbitrary(g) % 3),
            7..=8 => Op::Advance(u64::from(u16::arbitrary(g) % 1_500) * MS),
            _ => Op::Pin(if bool::arbitrary(g) { Some(1 + u8::arbitrary(g) % 16) } else { None }),
        }
    }
}

/// A held permit in the model, with what the property checks need to know about it.
struct Held {
    raw: RawPermit,
    level: usize,
    epoch: u64,
}

struct Model {
    base_limit: f64,
    pin: Option<f64>,
    epoch: u64,
    seen: [Option<u64>; LEVELS],
    n: [u64; LEVELS],
    demand: [u32; LEVELS],
    /// For each level p: was the latest admission of a level less important than p made
    /// while every level <= p was active, and have the shares and the demand-bounded caps
    /// of the levels <= p not grown since?
    lower_admission_legit: [bool; LEVELS],
}

impl Model {
    fn limit(&self) -> f64 {
        self.pin.unwrap_or(self.base_limit)
    }
    fn slots(&self) -> u64 {
        (self.limit().floor() as u64).max(1)
    }
    fn share(&self, l: usize) -> u64 {
        (self.limit() * WEIGHTS[l]).floor() as u64
    }
    fn active(&self, l: usize, now: u64) -> bool {
        self.seen[l].is_some_and(|s| now - s <= ACTIVE_NS)
    }
    fn total(&self) -> u64 {
        self.n.iter().sum()
    }
    /// What level `l` may hold back: its share, bounded by its recent demand.
    fn cap(&self, l: usize) -> u64 {
        let d = u64::from(self.demand[l]);
        self.share(l).min(d + d / 4 + 1)
    }
    fn reserved_above(&self, p: usize, now: u64) -> u64 {
        (0..p).filter(|&q| self.active(q, now)).map(|q| self.cap(q).saturating_sub(self.n[q])).sum()
    }
    fn raise_demand(&mut self, l: usize, to: u64) {
        let to = to as u32;
        if to > self.demand[l] {
            self.demand[l] = to;
            // A grown cap at level l voids the bound for every p >= l.
            for p in l..LEVELS {
                self.lower_admission_legit[p] = false;
            }
        }
    }
    /// The limiter's per-window decay: a quarter of the demand, never below what is held.
    fn decay(&mut self) {
        for l in 0..LEVELS {
            let d = self.demand[l];
            self.demand[l] = (d - d.div_ceil(4)).max(self.n[l] as u32);
        }
    }
}

fn run(base_limit: u8, ops: Vec<Op>) -> TestResult {
    let base_limit = f64::from(1 + base_limit % 24);
    let cfg = LimiterConfig {
        levels: LEVELS as u8,
        active_ns: ACTIVE_NS,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: base_limit,
            min_limit: 1.0,
            max_limit: base_limit,
        }))
    };
    let limiter = Limiter::new(cfg).unwrap();
    let mut m = Model {
        base_limit,
        pin: None,
        epoch: 0,
        seen: [None; LEVELS],
        n: [0; LEVELS],
        demand: [0; LEVELS],
        lower_admission_legit: [false; LEVELS],
    };
    let mut held: Vec<Held> = Vec::new();
    let mut now = MS; // whole milliseconds: the limiter refreshes activity stamps per ms
    let mut admitted = 0u64;
    for op in ops {
        match op {
            Op::Acquire(level) => {
                let p = level as usize;
                m.seen[p] = Some(now);
                let expected = m.total() + m.reserved_above(p, now) < m.slots();
                let got = limiter.try_acquire_raw(now, Priority::new(level).unwrap());
                if got.is_ok() != expected {
                    return TestResult::error(format!(
                        "level {p} at {now}: limiter {} model {expected} (n={:?} limit={})",
                        got.is_ok(),
                        m.n,
                        m.limit()
                    ));
                }
                match got {
                    Ok(raw) => {
                        // Exactness: the admission kept the total within the limit.
                        assert!(m.total() < m.slots());
                        for q in 0..p {
                            m.lower_admission_legit[q] = (0..=q).all(|r| m.active(r, now));
                        }
                        m.n[p] += 1;
                        m.raise_demand(p, m.n[p]);
                        admitted += 1;
                        held.push(Held { raw, level: p, epoch: m.epoch });
                    }
                    Err(rej) => {
                        assert_eq!(rej.reason, Reason::LimitReached);
                        // Work-conserving: refused only at the limit or to keep what an
                        // active more important level may still want of its share.
                        let keeps_share = (0..p).any(|q| m.active(q, now) && m.n[q] < m.cap(q));
                        assert!(m.total() >= m.slots() || keeps_share, "refused with room");
                        // Priority: an active level under its share and its recent demand
                        // is refused only if a more important level holds more than its
                        // cap, or the less important levels got slots while p's share
                        // was not reserved (or before the caps grew).
                        let lower: u64 = m.n[p + 1..].iter().sum();
                        if m.n[p] < m.cap(p) && (lower == 0 || m.lower_admission_legit[p]) {
                            let over = (0..p).any(|r| m.n[r] > m.cap(r));
                            assert!(over, "level {p} under its cap refused: n={:?}", m.n);
                        }
                        m.raise_demand(p, m.n[p] + 1);
                    }
                }
            }
            Op::Release(i, outcome) if !held.is_empty() => {
                let h = held.swap_remove(i % held.len());
                let _ = h.epoch;
                m.n[h.level] -= 1;
                let outcome = Outcome::from_u32(u32::from(outcome)).unwrap();
                let windows = limiter.metrics().windows;
                limiter.release_raw(h.raw, now + MS, outcome).unwrap();
                if limiter.metrics().windows > windows {
                    m.decay();
                }
            }
            Op::Release(..) => {}
            Op::Advance(dt) => now += dt,
            Op::Pin(p) => {
                m.pin = p.map(f64::from);
                m.epoch += 1;
                m.lower_admission_legit = [false; LEVELS];
                limiter.set_static_limit(m.pin).unwrap();
            }
        }
        assert_eq!(u64::from(limiter.inflight()), m.total());
        for l in 0..LEVELS {
            assert_eq!(u64::from(limiter.inflight_of(Priority::new(l as u8).unwrap())), m.n[l]);
        }
        assert_eq!(limiter.limit(), m.limit());
        assert_eq!(&limiter.metrics().demand_by_level[..LEVELS], &m.demand[..]);
    }
    for h in held.drain(..) {
        limiter.release_raw(h.raw, now, Outcome::Ignored).unwrap();
    }
    let metrics = limiter.metrics();
    assert_eq!(limiter.inflight(), 0, "every permit returned");
    assert_eq!(metrics.admitted, admitted, "no permit lost");
    assert_eq!(metrics.successes + metrics.drops + metrics.ignored, admitted);
    TestResult::passed()
}

#[test]
fn limiter_matches_the_reservation_model() {
    quickcheck(run as fn(u8, Vec<Op>) -> TestResult);
}

#[test]
fn a_long_saturating_sequence() {
    // Deterministic stress of the same model: all levels hammering a small limit.
    let mut ops = Vec::new();
    for i in 0..2_000u32 {
        ops.push(Op::Acquire((i % 3) as u8));
        if i % 3 == 0 {
            ops.push(Op::Release(i as usize, (i % 3) as u8));
        }
        if i % 97 == 0 {
            ops.push(Op::Advance(u64::from(i % 1_300) * MS));
        }
    }
    assert!(!run(9, ops).is_failure());
}

/// Operations on a limiter driven by an adaptive algorithm.
#[derive(Clone, Debug)]
enum AdaptiveOp {
    Acquire,
    Release { index: usize, latency_ms: u16, outcome: u8 },
    Advance(u16),
}

impl Arbitrary for AdaptiveOp {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 8 {
            0..=3 => AdaptiveOp::Acquire,
            4..=6 => AdaptiveOp::Release {
                index: usize::arbitrary(g),
                latency_ms: u16::arbitrary(g) % 400,
                outcome: u8::arbitrary(g) % 3,
            },
            _ => AdaptiveOp::Advance(u16::arbitrary(g) % 2_000),
        }
    }
}

fn adaptive_configs() -> Vec<(AlgorithmConfig, f64, f64)> {
    use surgeguard_core::limit::{
        AimdConfig, Gradient2Config, GradientConfig, HysteresisConfig, VegasConfig,
    };
    let bounds = |c: &AlgorithmConfig| -> (f64, f64) {
        match c {
            AlgorithmConfig::Aimd(c) => (c.min_limit, c.max_limit),
            AlgorithmConfig::Hysteresis(c) => (c.min_limit, c.max_limit),
            AlgorithmConfig::Gradient(c) => (c.min_limit, c.max_limit),
            AlgorithmConfig::Gradient2(c) => (c.min_limit, c.max_limit),
            AlgorithmConfig::Vegas(c) => (c.min_limit, c.max_limit),
            _ => (0.0, f64::MAX),
        }
    };
    [
        AlgorithmConfig::Aimd(AimdConfig::default()),
        AlgorithmConfig::Aimd(AimdConfig::netflix()),
        AlgorithmConfig::Hysteresis(HysteresisConfig::default()),
        AlgorithmConfig::Gradient(GradientConfig::default()),
        AlgorithmConfig::Gradient2(Gradient2Config::default()),
        AlgorithmConfig::Vegas(VegasConfig::default()),
    ]
    .into_iter()
    .map(|c| {
        let (lo, hi) = bounds(&c);
        (c, lo, hi)
    })
    .collect()
}

fn run_adaptive(which: u8, ops: Vec<AdaptiveOp>) -> TestResult {
    let configs = adaptive_configs();
    let (algorithm, min, max) = configs[which as usize % configs.len()];
    let cfg = LimiterConfig {
        levels: 1,
        min_samples: 3,
        min_window_ns: 10 * MS,
        ..LimiterConfig::with_algorithm(algorithm)
    };
    let limiter = Limiter::new(cfg).unwrap();
    let mut held: Vec<RawPermit> = Vec::new();
    let mut now = 0u64;
    let mut admitted = 0u64;
    for op in ops {
        match op {
            AdaptiveOp::Acquire => {
                let slots = (limiter.limit().floor() as u64).max(1);
                let before = held.len() as u64;
                match limiter.try_acquire_raw(now, Priority::NORMAL) {
                    Ok(p) => {
                        assert!(before < slots, "admitted at {before} in flight, limit {slots}");
                        held.push(p);
                        admitted += 1;
                    }
                    Err(r) => {
                        assert_eq!(r.reason, Reason::LimitReached);
                        // Refused with room only by a fractional limit's idle time.
                        assert!(before >= slots || limiter.limit() < 1.0, "refused with room");
                    }
                }
            }
            AdaptiveOp::Release { index, latency_ms, outcome } if !held.is_empty() => {
                let p = held.swap_remove(index % held.len());
                let outcome = Outcome::from_u32(u32::from(outcome)).unwrap();
                let end = p.started_at() + u64::from(latency_ms) * MS;
                now = now.max(end);
                limiter.release_raw(p, end, outcome).unwrap();
            }
            AdaptiveOp::Release { .. } => {}
            AdaptiveOp::Advance(ms) => now += u64::from(ms) * MS,
        }
        let limit = limiter.limit();
        assert!(
            limit.is_finite() && limit >= min && limit <= max,
            "limit {limit} outside [{min}, {max}]"
        );
        assert_eq!(u64::from(limiter.inflight()), held.len() as u64);
    }
    for p in held.drain(..) {
        limiter.release_raw(p, now, Outcome::Ignored).unwrap();
    }
    let m = limiter.metrics();
    assert_eq!(m.inflight, 0, "in-flight returns to 0");
    assert_eq!(m.admitted, admitted, "no permit lost");
    TestResult::passed()
}

#[test]
fn adaptive_limiters_stay_exact_and_within_bounds() {
    quickcheck(run_adaptive as fn(u8, Vec<AdaptiveOp>) -> TestResult);
}
