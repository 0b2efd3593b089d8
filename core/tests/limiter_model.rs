//! quickcheck model test: the Limiter against a sequential reference model written from
//! its documented rules (`support/limiter_ref.rs`: slots, fractional idle time, the
//! partition rule, the static limit, windows and demand), plus the properties the rules
//! promise, checked on ground truth before the limiter's answer is compared with the
//! model's: exactness, no admission inside an idle period, and the partition bound (a
//! level is refused below its reservation target only because of more important levels
//! over their targets, or less important work admitted before its target, or a more
//! important level's, last rose).
#![cfg(not(loom))]

#[path = "support/limiter_ref.rs"]
mod limiter_ref;

use limiter_ref::{Decision, Reference, MS};
use quickcheck::{quickcheck, Arbitrary, Gen, TestResult};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, Reason};

const WEIGHTS: [f64; 3] = [0.7, 0.25, 0.05];
const ACTIVE_NS: u64 = 1_000 * MS;
const WINDOW_NS: u64 = 100 * MS;
/// Limits below 1 whose `1/L − 1` is a whole number, so the model's idle time is exact.
const FRACTIONS: [f64; 3] = [0.5, 0.25, 0.125];

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8),
    /// Release the held permit at this index (mod held); `true`: only among the permits of
    /// critical and normal work, so background permits stay held for long.
    Release(usize, u8, bool),
    Advance(u16),
    Pin(Option<u8>),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 12 {
            0..=4 => Op::Acquire(u8::arbitrary(g) % 3),
            5..=7 => Op::Release(usize::arbitrary(g), u8::arbitrary(g) % 3, bool::arbitrary(g)),
            8..=9 => Op::Advance(u16::arbitrary(g) % 1_500),
            10 => Op::Advance(u16::arbitrary(g) % 8),
            _ => Op::Pin(if bool::arbitrary(g) { Some(u8::arbitrary(g)) } else { None }),
        }
    }
}

/// A pin from a byte: whole limits 1..=16 and the fractions.
fn pin_value(b: u8) -> f64 {
    match b % 20 {
        x @ 0..=15 => f64::from(x + 1),
        x => FRACTIONS[(x as usize - 16) % FRACTIONS.len()],
    }
}

/// A limit from a byte: mostly whole 1..=24, a quarter of the time a fraction.
fn base_value(b: u8) -> f64 {
    if b % 8 >= 6 {
        FRACTIONS[(b as usize / 8) % FRACTIONS.len()]
    } else {
        f64::from(1 + b % 24)
    }
}

struct Held {
    raw: RawPermit,
    level: usize,
    started: u64,
    /// The step at which it was admitted.
    step: u64,
}

fn limiter(base: f64, levels: usize) -> Limiter {
    Limiter::new(LimiterConfig {
        levels: levels as u8,
        weights: {
            let mut w = [0.0; 8];
            w[..levels].copy_from_slice(&WEIGHTS[..levels]);
            if levels == 1 {
                w[0] = 1.0;
            }
            w
        },
        active_ns: ACTIVE_NS,
        min_samples: 1,
        min_window_ns: WINDOW_NS,
        max_window_ns: WINDOW_NS,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: base,
            min_limit: base.min(1.0),
            max_limit: base.max(1.0),
        }))
    })
    .unwrap()
}

/// Drives the limiter and the model with `ops`. `strict`: the limiter must make the
/// model's every decision and report the model's metrics. Not strict: the model books
/// what the limiter decided, and only the promised properties are checked (so a limiter
/// that departs from the rule in a way the properties allow still passes, and one that
/// breaks a property fails on that property).
fn run_with(base: u8, three_levels: bool, ops: Vec<Op>, strict: bool) -> TestResult {
    let levels = if three_levels { 3 } else { 1 };
    let base = base_value(base);
    let weights: Vec<f64> = if levels == 1 { vec![1.0] } else { WEIGHTS.to_vec() };
    let l = limiter(base, levels);
    let mut m = Reference::new(base, &weights, ACTIVE_NS, WINDOW_NS);
    let mut held: Vec<Held> = Vec::new();
    let mut now = MS;
    // For the bound: per level, the step its current run of activity began; the step of
    // the last limit change.
    let mut active_from = vec![0u64; levels];
    let mut limit_changed = 0u64;
    // Per level: the step its reservation target (0 while inactive) last rose, and its
    // value after the previous step.
    let mut target_rose = vec![0u64; levels];
    let mut held_back = vec![0u64; levels];
    for (step, op) in ops.into_iter().enumerate() {
        let step = step as u64 + 1;
        match op {
            Op::Acquire(level) => {
                let p = level as usize % levels;
                if !m.active(p, now) {
                    active_from[p] = step;
                }
                let got = l.try_acquire_raw(now, Priority::new(p as u8).unwrap());
                // Ground truth before the arrival (the permits the limiter really holds,
                // the idle time its real completions started).
                let total = m.total();
                let idle_until = m.idle_until;
                let target = m.target(p);
                let above_over = (0..p).any(|q| m.n[q] > m.target(q));
                let expected = m.decide(p, now);
                let actual = match (&got, expected) {
                    (Ok(_), _) => Decision::Admit,
                    (Err(_), Decision::Idle(left)) => Decision::Idle(left),
                    (Err(_), _) => Decision::NoSlot,
                };
                m.book(p, if strict { expected } else { actual });
                match &got {
                    Ok(_) => {
                        assert!(
                            total < m.slots(),
                            "admitted at {total} in flight, {} slots",
                            m.slots()
                        );
                        assert!(
                            m.limit() >= 1.0 || now >= idle_until,
                            "admitted at {now} inside an idle period until {idle_until}"
                        );
                    }
                    Err(rej) => {
                        assert_eq!(rej.reason, Reason::LimitReached);
                        let below_target = m.n[p] < target;
                        if below_target && !above_over {
                            // No reservation of p or a more important level rose since t0
                            // (none woke, no demand grew, the limit has not changed):
                            // only work lent before t0 may stand in its way.
                            let t0 = (0..=p)
                                .map(|q| active_from[q].max(target_rose[q]))
                                .max()
                                .unwrap()
                                .max(limit_changed);
                            let lent = held.iter().any(|h| h.level > p && h.step < t0);
                            assert!(lent, "level {p} refused below its target {target} (holds {:?}) with no slot lent before step {t0}", m.n);
                        }
                    }
                }
                match (got, expected) {
                    (Ok(raw), Decision::Admit) => {
                        assert_eq!(raw.level().index(), p);
                        assert_eq!(raw.started_at(), now);
                        held.push(Held { raw, level: p, started: now, step });
                    }
                    (Ok(raw), _) if !strict => {
                        held.push(Held { raw, level: p, started: now, step })
                    }
                    (Err(_), _) if !strict => {}
                    (Err(rej), Decision::Idle(left)) => assert_eq!(rej.retry_after, left),
                    (Err(rej), Decision::NoSlot) => assert!(rej.retry_after >= MS),
                    (got, expected) => {
                        return TestResult::error(format!(
                        "level {p} at {now}: limiter {:?}, model {expected:?} (n={:?} limit={})",
                        got.map(|_| ()),
                        m.n,
                        m.limit()
                    ))
                    }
                }
            }
            Op::Release(i, outcome, important_only) => {
                let candidates: Vec<usize> = (0..held.len())
                    .filter(|&k| !important_only || levels == 1 || held[k].level < 2)
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                let h = held.swap_remove(candidates[i % candidates.len()]);
                m.release(h.level, h.started, now, outcome);
                let outcome = Outcome::from_u32(u32::from(outcome)).unwrap();
                l.release_raw(h.raw, now, outcome).unwrap();
            }
            Op::Advance(ms) => now += u64::from(ms) * MS,
            Op::Pin(v) => {
                m.pin = v.map(pin_value);
                limit_changed = step;
                l.set_static_limit(m.pin).unwrap();
            }
        }
        for q in 0..levels {
            let now_held_back = if m.active(q, now) { m.target(q) } else { 0 };
            if now_held_back > held_back[q] {
                target_rose[q] = step;
            }
            held_back[q] = now_held_back;
        }
        assert_eq!(l.limit(), m.limit());
        let mt = l.metrics();
        if !strict {
            assert_eq!(u64::from(mt.inflight), m.total());
            continue;
        }
        assert_eq!(u64::from(mt.inflight), m.total());
        assert_eq!(
            mt.inflight_by_level[..levels].iter().map(|&x| u64::from(x)).collect::<Vec<_>>(),
            m.n
        );
        for (q, &n) in m.n.iter().enumerate() {
            assert_eq!(u64::from(l.inflight_of(Priority::new(q as u8).unwrap())), n);
        }
        assert_eq!(mt.static_limit, m.pin);
        if levels > 1 {
            let shares: Vec<u64> = (0..levels).map(|q| m.share(q)).collect();
            assert_eq!(
                mt.share_by_level[..levels].iter().map(|&x| u64::from(x)).collect::<Vec<_>>(),
                shares
            );
            assert_eq!(&mt.demand_by_level[..levels], &m.demand[..]);
        }
        assert_eq!(mt.windows, m.windows, "windows");
        assert_eq!(mt.rejected_by_level[..levels], m.rejected[..]);
        assert_eq!(
            (mt.admitted, mt.successes, mt.drops, mt.ignored),
            (m.admitted, m.successes, m.drops, m.ignored)
        );
    }
    for h in held.drain(..) {
        l.release_raw(h.raw, now, Outcome::Ignored).unwrap();
    }
    assert_eq!(l.inflight(), 0, "every permit returned");
    TestResult::passed()
}

fn run(base: u8, three_levels: bool, ops: Vec<Op>) -> TestResult {
    run_with(base, three_levels, ops, true)
}

fn run_properties(base: u8, three_levels: bool, ops: Vec<Op>) -> TestResult {
    run_with(base, three_levels, ops, false)
}

#[test]
fn limiter_matches_the_reference_model() {
    quickcheck(run as fn(u8, bool, Vec<Op>) -> TestResult);
}

#[test]
fn long_held_background_never_starves_active_critical_work() {
    // Default weights, limit 10 (shares 7 / 2 / 0): background takes what it can and keeps
    // it for the whole run, while critical and normal come and go.
    // Critical is active (it holds one) before background arrives.
    let mut ops = vec![Op::Acquire(0)];
    for _ in 0..12 {
        ops.push(Op::Acquire(2));
    }
    for i in 0..3_000u32 {
        ops.push(Op::Acquire((i % 2) as u8));
        if i % 3 == 2 {
            ops.push(Op::Release(i as usize, (i % 3) as u8, true));
        }
        if i % 50 == 0 {
            ops.push(Op::Advance((i % 900) as u16));
        }
    }
    assert!(!run_properties(9, true, ops.clone()).is_failure());
    assert!(!run(9, true, ops).is_failure());
}

#[test]
fn limiter_keeps_the_promised_properties() {
    quickcheck(run_properties as fn(u8, bool, Vec<Op>) -> TestResult);
}

#[test]
fn fractional_limits_idle_between_requests() {
    // A limit of 1/4 (and pins of 1/2 and 1/8): one request at a time, each completion of
    // latency r followed by 3r (or r, or 7r) of idle time, probed every few ms.
    let mut ops = Vec::new();
    for i in 0..600u32 {
        ops.push(Op::Acquire((i % 3) as u8));
        ops.push(Op::Advance((i % 7) as u16));
        if i % 4 == 1 {
            ops.push(Op::Release(0, (i % 3) as u8, false));
        }
        if i % 150 == 100 {
            ops.push(Op::Pin(Some(16 + (i / 150) as u8)));
        }
    }
    assert!(!run(7 + 8, true, ops.clone()).is_failure());
    assert!(!run(7 + 8, false, ops).is_failure());
}

#[test]
fn a_long_saturating_sequence() {
    // All levels hammering a small limit, with pins and a fractional stretch.
    let mut ops = Vec::new();
    for i in 0..3_000u32 {
        ops.push(Op::Acquire((i % 3) as u8));
        if i % 3 == 0 {
            ops.push(Op::Release(i as usize, (i % 3) as u8, false));
        }
        if i % 97 == 0 {
            ops.push(Op::Advance((i % 1_300) as u16));
        }
        if i % 500 == 250 {
            ops.push(Op::Pin(Some((i / 500) as u8 + 15)));
        }
        if i % 500 == 400 {
            ops.push(Op::Pin(None));
        }
    }
    assert!(!run(8, true, ops).is_failure());
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
