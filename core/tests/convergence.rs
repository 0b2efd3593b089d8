#![cfg(not(loom))]
//! Closed-loop convergence of the limit algorithms, through the real [`Limiter`].
//!
//! The model (`support/`): Poisson arrivals; a dependency with 16 slots, ~10 ms log-normal
//! service time (σ 0.25, which reproduces the unloaded p99 of 17.2 ms in
//! the peers' measurement set-up) and an unbounded FIFO queue; clients give up after 100 ms and
//! report a drop while the dependency still serves the request. Capacity 1,600 req/s, so
//! Little's law puts the optimum in flight at capacity × base latency = 16. Everything is
//! virtual time and seeded: runs replay exactly. Assertions are ranges, over several seeds.
//!
//! The four scenarios the peers were measured on, and the best peer's figure in each,
//! which the default algorithm has to reach:
//!
//! | scenario | best peer | target here |
//! |---|---|---|
//! | overload 150% | Envoy: 100% goodput, p99 21.9 ms (≈1.3× unloaded) | ≥ 99% and p99 ≤ 22.5 ms |
//! | capacity halved 30 s | Gradient2: 99.8%, p99 < 2× base after 13 s | ≥ 98%, p99 ≤ 2.1× base, within 2 s |
//! | slots 16 → 32 | all adaptive: "finds the room" | ≥ 97% of the offered load |
//! | heavy-tailed latency | static 64: 79.7% | ≥ 79% (of the nominal capacity) |
//!
//! A fifth scenario is ours (`slow_tail`, the simulator's `retry-storm` database alone): 32
//! slots of Erlang-2 work that becomes 10× slower for 10 s behind a 150 ms client timeout, so
//! ~20% of the calls time out on service time alone, whatever the concurrency. Targets: at
//! least 75% (150% load) and 60% (500 req/s) of what the slowed dependency can deliver within
//! the timeout, and the limit back at its pre-slowdown level within 2 s after. Before the
//! episode test (`core/src/limit/gradient/episode.rs`, step 2) the default delivered 16–24%
//! and 8–15% (the limit collapsed to 1), and took up to 8 s, or never, to come back.
//!
//! The halved target is relaxed (98% instead of 99%, 2.1× base instead of 2×) on purpose.
//! In this model the two halves of the target conflict. A *static* limit of 20 gets 99.2% with
//! p99 38.3 ms (1.92× base); 21 gets 99.6% with 39.7 ms (1.99×). So only a limit held at
//! 20–21 with no transient meets both, and detecting the slowdown without a probe costs a
//! short dip. The default averages 99.1% [98.4, 99.4] with p99 40.1 ms [38.2, 40.8] over five
//! seeds: under 2× base on two of them, under 2.05× on all, settled within 0.5 s. The
//! `table` test (ignored; `cargo test --release --test convergence -- --ignored --nocapture`)
//! prints the full comparison.

mod support;

use support::scenarios::{self, SLOTS};
use support::*;
use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, FixedConfig, Gradient, Gradient2Config, GradientConfig,
    HysteresisConfig, VegasConfig,
};
use surgeguard_core::time::{MS, SEC};

/// The default algorithm of the crate, through the real limiter.
fn default_limiter() -> Box<dyn Control> {
    Box::new(Real::named(AlgorithmConfig::default(), "default (gradient, probe-free)"))
}

/// Envoy parity. Envoy's filter samples a timed-out request at its latency (the 504 is a
/// response), so timeouts reach it as samples; its required interval is set to 10 s.
fn envoy() -> Box<dyn Control> {
    let mut r = Real::named(AlgorithmConfig::Gradient(GradientConfig::envoy(10 * SEC)), "envoy");
    r.timeouts_as_samples = true;
    Box::new(r)
}

const SEEDS: [u64; 3] = [1, 2, 3];
/// Unloaded p99 of the base dependency: exp(ln 9.69 + 2.326·0.25) ms.
const UNLOADED_P99_MS: f64 = 17.3;

#[test]
fn the_default_algorithm_is_the_probe_free_gradient() {
    assert_eq!(AlgorithmConfig::default(), AlgorithmConfig::Gradient(GradientConfig::default()));
    let d = GradientConfig::default();
    assert_eq!((d.probe_interval_ns, d.pinned_baseline_ns), (0, 0));
}

#[test]
fn default_reaches_the_best_peer_in_every_scenario() {
    for seed in SEEDS {
        let f = figures(seed, &mut default_limiter);
        // Overload 150%: all the capacity, p99 near 1.3× the unloaded p99 (Envoy's figure).
        assert!(f.overload_goodput >= 99.0, "seed {seed}: {f:?}");
        assert!(f.overload_p99_ms <= 1.3 * UNLOADED_P99_MS, "seed {seed}: {f:?}");
        // Little's law: 16 in flight is the optimum; a small standing queue covers the gaps
        // between Poisson arrivals.
        assert!((16.0..=24.0).contains(&f.overload_mean_limit), "seed {seed}: {f:?}");
        // Capacity halved: keeps the degraded capacity busy and the tail near 2× base soon.
        assert!(f.halved_goodput >= 98.0, "seed {seed}: {f:?}");
        assert!(f.halved_p99_ms <= 2.1 * f.halved_base_ms, "seed {seed}: {f:?}");
        assert!(f.halved_settle_21_s.is_some_and(|t| t <= 2.0), "seed {seed}: {f:?}");
        assert!((16.0..=24.0).contains(&f.halved_mean_limit), "seed {seed}: {f:?}");
        // Slots 16 → 32: finds the room (static 16 serves 61% of the offered load).
        assert!(f.step_goodput_of_offered >= 97.0, "seed {seed}: {f:?}");
        // Heavy tail: no collapse; the real capacity is ~81% of the nominal one.
        assert!(f.heavy_goodput >= 79.0, "seed {seed}: {f:?}");
    }
}

#[test]
fn envoy_parity_goes_stale_after_a_slowdown() {
    // The comparison the default is measured against: Envoy keeps plain overload at full
    // capacity, but after a slowdown its stale minRTT sheds until the next probe.
    let f = figures(1, &mut envoy);
    assert!(f.overload_goodput >= 99.0, "{f:?}");
    assert!(f.overload_p99_ms > 1.25 * UNLOADED_P99_MS, "{f:?}");
    assert!(f.halved_goodput < 97.0, "{f:?}");
    assert!(f.halved_settle_s.is_none(), "{f:?}");
}

#[test]
fn the_limit_settles_around_littles_law_at_any_scale() {
    // The optimum in flight is slots × base latency × capacity per slot = slots. The default
    // keeps a standing queue of about 0.1·C + 0.8·sqrt(C) on top.
    // Goodput floors by scale: Poisson gaps leave about 2 requests of slack whatever the
    // scale (1/(ρ − 1) at ρ = 1.5), which a small dependency only covers with a relatively
    // large queue; the latency-relative controller trades a few percent there instead.
    for (slots, seed, min_goodput) in [(4usize, 1u64, 92.0), (64, 2, 98.0), (256, 3, 99.0)] {
        let s = scenarios::overload_at(seed, slots);
        let mut c = Real::named(AlgorithmConfig::default(), "default");
        let r = run(&s, &mut c);
        let (a, b) = (2 * SEC, s.duration);
        let c_f = slots as f64;
        let mean = r.mean_limit(a, b);
        let goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
        let p99 = r.quantile_between(0.99, a, b) as f64 / MS as f64;
        assert!(mean >= c_f && mean <= 1.25 * c_f + 1.5 * c_f.sqrt() + 2.0, "{slots}: {mean}");
        assert!(goodput >= min_goodput, "{slots}: goodput {goodput}");
        assert!(p99 <= 2.0 * UNLOADED_P99_MS, "{slots}: p99 {p99}");
    }
}

#[test]
fn the_limit_backs_off_when_capacity_is_removed() {
    for seed in SEEDS {
        let s = scenarios::slots_removed(seed);
        let mut c = Real::named(AlgorithmConfig::default(), "default");
        let r = run(&s, &mut c);
        let at = scenarios::REMOVE_AT;
        let before = r.mean_limit(at - 2 * SEC, at);
        let after = r.mean_limit(at + 3 * SEC, s.duration);
        let half = (SLOTS / 2) as f64;
        assert!((16.0..=24.0).contains(&before), "seed {seed}: {before}");
        // Little's law: 8 slots × the same latency → about half the limit.
        assert!((half..=1.5 * half + 2.0).contains(&after), "seed {seed}: {after}");
        let goodput = 100.0 * r.good_between(at + 3 * SEC, s.duration) as f64
            / s.capacity_between(at + 3 * SEC, s.duration);
        assert!(goodput >= 97.0, "seed {seed}: {goodput}");
        let p99 = r.quantile_between(0.99, at + 3 * SEC, s.duration) as f64 / MS as f64;
        assert!(p99 <= 1.5 * UNLOADED_P99_MS, "seed {seed}: p99 {p99}");
    }
}

#[test]
fn harness_windows_and_limiter_windows_agree() {
    // The algorithm alone, fed windows the harness aggregates (exact quantiles, in-flight <
    // limit): the same band as through the Limiter (histogram quantiles, floor(limit) slots).
    let s = scenarios::overload(4);
    let mut w = Windowed::new(Gradient::new(GradientConfig::default()).unwrap(), "gradient");
    let r = run(&s, &mut w);
    let mean = r.mean_limit(2 * SEC, s.duration);
    assert!((16.0..=24.0).contains(&mean), "{mean}");
    let goodput = 100.0 * r.good_between(2 * SEC, s.duration) as f64
        / s.capacity_between(2 * SEC, s.duration);
    assert!(goodput >= 99.0, "{goodput}");
    assert!(w.windows > 50 && w.algo.metrics().windows == w.windows);
}

/// What an algorithm's own rule predicts for the settled limit over a dependency with `c`
/// slots and 10 ms base latency at 150% load, as `[low, high]` (Little's law: the dependency
/// holds `c` without queueing; each rule then adds the queue it tolerates).
fn band(name: &str, c: f64) -> (f64, f64) {
    let base_ms = 10.0;
    match name {
        "fixed 16" => (16.0, 16.0),
        // Target AIMD: +1 while the mean latency is under its 50 ms target, so it settles where
        // the queue makes the mean latency ~50 ms: c × 50/10 (minus its ×0.9 saw-tooth).
        "aimd (target)" => (0.6 * c * 50.0 / base_ms, 1.1 * c * 50.0 / base_ms),
        // NCL AIMD: loss-based, it grows until client timeouts (100 ms): at most c × 100/10.
        "aimd (netflix)" => (2.0 * c, c * 100.0 / base_ms),
        // Hysteresis: grows while the p99 is under 0.8 × 50 ms and holds in the dead band up
        // to 1.5 × 50 ms: a queue of up to (75 − 17.3) ms / (10/c).
        "hysteresis" => (c, c + (75.0 - 17.3) * c / base_ms),
        // Vegas: a queue between alpha = 3 and beta = 6 requests (for limits below 100).
        "vegas (netflix)" => (c + 3.0, c + 6.0 + 2.0),
        // Gradient2: long RTT × 1.5 tolerance + a queue of 4, smoothed: ~2.5× the optimum
        // (measured on the peers' set-up: about 2.4× the optimal in-flight).
        "gradient2 (netflix)" | "gradient2 (fixed)" => (2.0 * c, 3.2 * c),
        // Ours: a standing queue of about 0.1·c + 0.8·sqrt(c).
        "gradient (default)" => (c, 1.25 * c + 1.5 * c.sqrt() + 2.0),
        other => panic!("no band for {other}"),
    }
}

/// Every algorithm of the crate in its default and its parity configuration.
fn algorithms() -> Vec<(&'static str, AlgorithmConfig)> {
    use AlgorithmConfig as A;
    let fixed = FixedConfig { initial_limit: 16.0, ..FixedConfig::default() };
    vec![
        ("fixed 16", A::Fixed(fixed)),
        ("aimd (target)", A::Aimd(AimdConfig::default())),
        ("aimd (netflix)", A::Aimd(AimdConfig::netflix())),
        ("hysteresis", A::Hysteresis(HysteresisConfig::default())),
        ("vegas (netflix)", A::Vegas(VegasConfig::netflix())),
        ("gradient2 (netflix)", A::Gradient2(Gradient2Config::netflix())),
        ("gradient2 (fixed)", A::Gradient2(Gradient2Config::default())),
        ("gradient (default)", A::Gradient(GradientConfig::default())),
    ]
}

type Make = Box<dyn Fn() -> Box<dyn Control>>;

#[test]
fn every_algorithm_settles_in_its_band_and_follows_a_capacity_loss() {
    let c = SLOTS as f64;
    for (name, cfg) in algorithms() {
        let s = scenarios::overload(5);
        let r = run(&s, &mut Real::named(cfg, name));
        let settled = r.mean_limit(2 * SEC, s.duration);
        let (lo, hi) = band(name, c);
        assert!((lo..=hi).contains(&settled), "{name}: {settled} not in [{lo}, {hi}]");

        // Half the slots vanish: the band halves with them.
        let s = scenarios::slots_removed(5);
        let r = run(&s, &mut Real::named(cfg, name));
        let at = scenarios::REMOVE_AT;
        let before = r.mean_limit(at - 2 * SEC, at);
        let after = r.mean_limit(at + 3 * SEC, s.duration);
        let (lo, hi) = band(name, c / 2.0);
        let lo = if name == "fixed 16" { 16.0 } else { lo };
        assert!((lo..=hi).contains(&after), "{name}: {after} not in [{lo}, {hi}] after the loss");
        // Latency-driven rules back off; the loss-based NCL AIMD is still climbing towards its
        // timeout-bound ceiling, and a fixed limit stays put.
        match name {
            "fixed 16" => assert_eq!(after, before),
            "aimd (netflix)" => {}
            "hysteresis" => assert!(after <= before, "{name}: {before} -> {after}"),
            _ => assert!(after < 0.8 * before, "{name}: {before} -> {after}"),
        }
    }
}

/// Prints the algorithm × scenario table (mean [min, max] over five seeds).
#[test]
#[ignore]
fn table() {
    let mut rows: Vec<(&str, Make)> = vec![
        ("static 16", Box::new(|| Box::new(Static::new(16.0)))),
        ("static 64", Box::new(|| Box::new(Static::new(64.0)))),
        ("envoy (probe 10 s)", Box::new(envoy)),
    ];
    for (name, cfg) in algorithms() {
        rows.push((name, Box::new(move || Box::new(Real::named(cfg, name)))));
    }
    println!(
        "| algorithm | overload: goodput % / p99 ms / mean L | halved: goodput % / settle 2x (2.1x) / p99 ms | step: % of offered | heavy: goodput % |"
    );
    println!("|---|---|---|---|---|");
    for (name, make) in rows {
        let all: Vec<Figures> = (1..=5).map(|seed| figures(seed, &mut || make())).collect();
        let fmt = |p: (f64, f64, f64)| format!("{:.1} [{:.1}, {:.1}]", p.0, p.1, p.2);
        let settle = |pick: fn(&Figures) -> Option<f64>| {
            let v: Vec<String> = all
                .iter()
                .map(|f| pick(f).map_or("never".to_string(), |t| format!("{t:.1}")))
                .collect();
            v.join(",")
        };
        println!(
            "| {name} | {} / {} / {} | {} / {} ({}) / {} | {} | {} |",
            fmt(spread(&all, |f| f.overload_goodput)),
            fmt(spread(&all, |f| f.overload_p99_ms)),
            fmt(spread(&all, |f| f.overload_mean_limit)),
            fmt(spread(&all, |f| f.halved_goodput)),
            settle(|f| f.halved_settle_s),
            settle(|f| f.halved_settle_21_s),
            fmt(spread(&all, |f| f.halved_p99_ms)),
            fmt(spread(&all, |f| f.step_goodput_of_offered)),
            fmt(spread(&all, |f| f.heavy_goodput)),
        );
    }
}

/// The tail scenario's figures for one run of the default algorithm.
#[derive(Debug)]
struct TailFigures {
    /// Goodput during the slowdown, as % of what the slowed dependency can deliver within
    /// the timeout: all slots busy × the share of service times under the timeout.
    goodput: f64,
    /// Seconds from the slowdown's end until the limit is back at 90% of its mean over the
    /// 2 s before the slowdown (`None`: not within the 10 s after).
    recovery_s: Option<f64>,
    /// Goodput from 1 s to 3 s after the slowdown, as % of the offered load.
    after: f64,
    /// Mean limit over the 2 s before the slowdown and over its second half.
    before: f64,
    during: f64,
}

fn tail_figures(seed: u64, rate: f64) -> TailFigures {
    use scenarios::{TAIL_SERVICE, TAIL_SLOW, TAIL_SLOW_AT, TAIL_SLOW_FOR, TAIL_TIMEOUT};
    let s = scenarios::slow_tail(seed, rate);
    let r = run(&s, &mut Real::named(AlgorithmConfig::default(), "default"));
    let (a, b) = (TAIL_SLOW_AT, TAIL_SLOW_AT + TAIL_SLOW_FOR);
    let within = TAIL_SERVICE.cdf(TAIL_TIMEOUT as f64, TAIL_SLOW).expect("Erlang");
    let before = r.mean_limit(a - 2 * SEC, a);
    TailFigures {
        goodput: 100.0 * r.good_between(a, b) as f64 / (s.capacity_between(a, b) * within),
        recovery_s: r
            .limits
            .iter()
            .find(|&&(t, l)| t >= b && l >= 0.9 * before)
            .map(|&(t, _)| (t - b) as f64 / SEC as f64),
        after: 100.0 * r.good_between(b + SEC, b + 3 * SEC) as f64
            / s.offered_between(b + SEC, b + 3 * SEC),
        before,
        during: r.mean_limit(a + TAIL_SLOW_FOR / 2, b),
    }
}

/// The simulator's `retry-storm` database alone: 32 slots whose work goes 10 ms → 100 ms for
/// 10 s (Erlang-2), behind a 150 ms client timeout that cuts ~20% of the slowed calls
/// whatever the concurrency. Before the episode test the default collapsed to a limit of 1
/// within 3 s (every window had >1% drops, and windows with >10% drops never moved the
/// baseline) and delivered 16–24% (150% load) and 8–15% (500 req/s) of this, seeds 1–10;
/// now 83–96% and 63–92%, and the limit is back within 0.7 s.
#[test]
fn a_uniform_slowdown_with_timeouts_in_its_tail_keeps_the_concurrency() {
    for seed in SEEDS {
        // 150% of the normal capacity: the limit binds before, during and after.
        let f = tail_figures(seed, 4800.0);
        assert!(f.goodput >= 75.0, "seed {seed}: {f:?}");
        // Little's law: the same 32 slots need the same concurrency, not a collapse.
        assert!((0.6 * 32.0..=48.0).contains(&f.during), "seed {seed}: {f:?}");
        assert!(f.recovery_s.is_some_and(|t| t <= 2.0), "seed {seed}: {f:?}");
        // After: the capacity is 3,200 of the 4,800 req/s offered.
        assert!(f.after >= 60.0, "seed {seed}: {f:?}");
        // 500 req/s, as in the simulator: app-limited before (~5 in flight), 156% of the
        // slowed capacity during.
        let f = tail_figures(seed, 500.0);
        assert!(f.goodput >= 60.0, "seed {seed}: {f:?}");
        assert!(f.after >= 90.0, "seed {seed}: {f:?}");
    }
}

/// Prints the tail scenario's figures for more seeds.
#[test]
#[ignore]
fn tail_table() {
    for rate in [4800.0, 500.0] {
        for seed in 1..=10 {
            let f = tail_figures(seed, rate);
            println!(
                "rate {rate} seed {seed}: goodput {:.1}% recovery {} after {:.1}% \
                 limit {:.1} -> {:.1}",
                f.goodput,
                f.recovery_s.map_or("never".to_string(), |t| format!("{t:.2} s")),
                f.after,
                f.before,
                f.during
            );
        }
    }
}

/// A long-tailed dependency (log-normal, p50 6.1 ms, p99 61.3 ms) at 80% load, from a cold
/// start. The baseline learned from the first small window can be far below the true median;
/// before the fix, 2 of these 20 seeds stayed far below the load (seed 9: a limit of ~7 with
/// 16 slots, 46% goodput; seed 7: 72%): a limit that binds without drops and without latency
/// rising with in-flight must probe upward.
#[test]
fn a_long_tail_never_locks_the_limit_low() {
    for seed in 1..=20 {
        let s = scenarios::long_tail(seed);
        let r = run(&s, &mut Real::named(AlgorithmConfig::default(), "default"));
        let (a, b) = (2 * SEC, s.duration);
        let goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
        // 80% offered: everything but the Poisson noise of the offered load.
        assert!(goodput >= 75.0, "seed {seed}: goodput {goodput}");
        // Little's law: 0.8 × 16 slots in flight on average; the limit must allow that.
        assert!(r.mean_limit(a, b) >= 12.8, "seed {seed}: {}", r.mean_limit(a, b));
    }
}

/// Refusals and sloughed waiters of critical work in the first second after a cold start of
/// a [`Gate`](surgeguard_core::gate::Gate) with its default configuration (the default
/// algorithm, CoDel on), at 75% of a 16-slot dependency's capacity. Poisson arrivals, ~10 ms
/// log-normal service, a FIFO in front of the slots; every request is critical.
fn cold_start_losses(seed: u64) -> (u32, u32) {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, VecDeque};
    use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
    use surgeguard_core::{Outcome, Priority, RawPermit};

    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Ev {
        Arrival,
        Done(usize),
        Wake,
    }
    let gate: Gate<256> = Gate::new(GateConfig::default()).expect("default config");
    let mut rng = Rng::new(seed);
    let mut svc = Rng::new(seed ^ 0x5e41_1ce5);
    let mut heap: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut permits: Vec<Option<RawPermit>> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let (mut busy, mut seq) = (0usize, 0u64);
    let (mut refused, mut sloughed) = (0u32, 0u32);
    let rate = 0.75 * 1600.0;
    heap.push(Reverse((rng.exp(SEC as f64 / rate) as u64, 0, Ev::Arrival)));
    let mut out: [Option<Event>; 64] = std::array::from_fn(|_| None);
    while let Some(Reverse((now, _, ev))) = heap.pop() {
        if now >= SEC {
            break;
        }
        let mut admitted: Vec<RawPermit> = Vec::new();
        match ev {
            Ev::Arrival => {
                seq += 1;
                heap.push(Reverse((now + rng.exp(SEC as f64 / rate) as u64, seq, Ev::Arrival)));
                match gate.arrive(now, Priority::CRITICAL, None) {
                    Arrival::Admitted(p) => admitted.push(p),
                    Arrival::Queued(_) => {}
                    Arrival::Rejected(_) => refused += 1,
                }
            }
            Ev::Done(i) => {
                busy -= 1;
                let p = permits[i].take().expect("released once");
                gate.release(p, now, Outcome::Success).expect("own permit");
            }
            Ev::Wake => {}
        }
        loop {
            let n = gate.poll(now, &mut out);
            for e in out[..n].iter_mut() {
                match e.take() {
                    Some(Event::Granted(_, p)) => admitted.push(p),
                    Some(Event::Expired(..)) => sloughed += 1,
                    None => {}
                }
            }
            if n < out.len() {
                break;
            }
        }
        for p in admitted {
            permits.push(Some(p));
            queue.push_back(permits.len() - 1);
        }
        while busy < SLOTS {
            let Some(i) = queue.pop_front() else { break };
            busy += 1;
            seq += 1;
            let s = Service::BASE.sample_ns(&mut svc).max(1.0) as u64;
            heap.push(Reverse((now + s, seq, Ev::Done(i))));
        }
        if let Some(t) = gate.next_wakeup(now) {
            seq += 1;
            heap.push(Reverse((t.max(now + 1), seq, Ev::Wake)));
        }
    }
    (refused, sloughed)
}

/// A service restarted under a modest load must not refuse or slough its critical work
/// while the limit warms up. Before the default started at 20, the limit of 1 (doubling per
/// 100 ms window) refused or CoDel-sloughed hundreds of the first second's ~1,200 requests.
#[test]
fn a_cold_gate_serves_a_modest_load_from_its_first_second() {
    for seed in 1..=5 {
        let (refused, sloughed) = cold_start_losses(seed);
        assert_eq!((refused, sloughed), (0, 0), "seed {seed}");
    }
}

/// A dependency with 8 slots whose latency triples for 10 s, without errors: by Little's law
/// a uniformly slower dependency needs the same concurrency, not less. The limit must not
/// cut below the 8 slots (which would leave the dependency partly idle). A real two-server
/// testbed showed cuts to 4.6–7.5 in 4 of 9 runs. Here, from 2 s after the onset on, the
/// limit stays at 8 or more in every seed; in the first 2 s a short cut to ~7.6 remains
/// (seed 1), the cost of telling a slowdown from our own queue without a probe.
#[test]
fn a_uniformly_slower_dependency_keeps_its_concurrency() {
    for seed in 1..=9 {
        let s = scenarios::tripled(seed);
        let r = run(&s, &mut Real::named(AlgorithmConfig::default(), "default"));
        let (a, b) = (7 * SEC, 15 * SEC);
        let goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
        let lowest = r
            .limits
            .iter()
            .filter(|(t, _)| *t >= a && *t < b)
            .map(|x| x.1)
            .fold(f64::MAX, f64::min);
        // A small dependency under Poisson load: the standing queue keeps ~96% of it busy.
        assert!(goodput >= 95.0, "seed {seed}: goodput {goodput:.1}, lowest limit {lowest:.1}");
        assert!(lowest >= 8.0, "seed {seed}: lowest limit {lowest:.1}, goodput {goodput:.1}");
    }
}
