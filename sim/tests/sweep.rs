//! A slice of the robustness sweep (`make sweep` runs 200 seeds of ten scenarios): 10 seeds
//! of two scenarios, the default algorithm against the peers' parity configurations.

use surgeguard_sim::closed_loop::scenarios::{self, Named};
use surgeguard_sim::sweep::{algorithms, sweep, DEFAULT};

#[test]
fn the_default_holds_its_own_on_a_slice_of_the_sweep() {
    let which: Vec<Named> = scenarios::ALL
        .iter()
        .copied()
        .filter(|(n, _)| ["overload", "heavy-tail"].contains(n))
        .collect();
    let algos: Vec<_> = algorithms().into_iter().filter(|a| a.peer || a.name == DEFAULT).collect();
    let r = sweep(&which, &algos, 10, 2);
    let d = r.default_index().expect("the default is swept");
    for (s, name) in r.scenarios.iter().enumerate() {
        let worst = r.cells[s][d].goodput().0;
        let best = r.best_peer_median(s);
        // The default's worst seed within 3 points of the best peer's median.
        assert!(worst >= best - 3.0, "{name}: worst {worst:.1} vs best peer median {best:.1}");
        // No seed sits at its floor while the dependency idles.
        assert_eq!(r.cells[s][d].stuck_seeds(), 0, "{name}");
    }
}

/// The scenarios the default was not tuned on, where the previous rules fell short of the
/// goal at 200 seeds: a slow leak of capacity (the limit drifted below the slots between
/// downward probes: worst 89.1 against 96.2), bimodal latency and a heavy tail (bursts met
/// a limit held ~1.25× above the usual peak: 76.5 and 76.4 against 79.7 and 79.6), plus
/// latency ×3 and a slowdown (a downward probe's transition windows were read by the flat
/// test; the first probe waited for the limit to bind). A 10-seed slice of each (the
/// default's worst seed within 3 points of the best peer's median), and the seeds that were
/// the previous rules' worst, each against the best peer on the same seed (within 2 points:
/// the previous rules were 2.1 and 2.6 points under on the heavy tail's, 6.4 and 7.0 on the
/// leak's).
#[test]
fn the_default_holds_its_own_where_it_was_not_tuned() {
    use surgeguard_sim::sweep::run_one;

    let names = ["slowdown", "heavy-tail", "bimodal", "leak", "triple"];
    let which: Vec<Named> =
        scenarios::ALL.iter().copied().filter(|(n, _)| names.contains(n)).collect();
    let algos: Vec<_> = algorithms().into_iter().filter(|a| a.peer || a.name == DEFAULT).collect();
    let r = sweep(&which, &algos, 10, 2);
    let d = r.default_index().expect("the default is swept");
    // The previous rules' worst seeds (200-seed sweep), per scenario.
    let previous_worst: [(&str, &[u64]); 3] =
        [("heavy-tail", &[114, 16]), ("bimodal", &[134, 135]), ("leak", &[40, 161])];
    for (s, (name, make)) in which.iter().enumerate() {
        let best = r.best_peer_median(s);
        let worst = r.cells[s][d].goodput().0;
        assert!(worst >= best - 3.0, "{name}: worst {worst:.1} vs best peer median {best:.1}");
        assert_eq!(r.cells[s][d].stuck_seeds(), 0, "{name}");
        let seeds = previous_worst.iter().find(|(n, _)| n == name).map_or(&[][..], |p| p.1);
        for &seed in seeds {
            let sc = make(seed);
            let g = run_one(&algos[d], &sc).goodput;
            let peer = algos
                .iter()
                .filter(|a| a.peer)
                .map(|a| run_one(a, &sc).goodput)
                .fold(f64::MIN, f64::max);
            assert!(g >= peer - 2.0, "{name} seed {seed}: {g:.1} vs the best peer's {peer:.1}");
        }
    }
}

/// Capacity drops to 25% (16 slots to 4, latency unchanged) under 75% of the old load: the
/// limit (40 after slow start at 75%) must come down to the new knee fast, or nearly
/// everything admitted times out. A back-off of 10% per window took ~3 s and kept 84-86%
/// of the degraded capacity; one that deepens with the drop share (a halving when every
/// outcome dropped) keeps 94% or more.
#[test]
fn a_capacity_loss_is_followed_quickly() {
    use surgeguard_sim::closed_loop::{run, score, Real};

    let algo = algorithms().into_iter().find(|a| a.name == DEFAULT).expect("the default");
    for seed in 1..=10 {
        let s = scenarios::capacity_quarter(seed);
        let r = run(&s, &mut Real::new(algo.config.expect("adaptive")));
        let sc = score(&s, &r, algo.floor);
        assert!(sc.goodput >= 93.0, "seed {seed}: {:.1}% of the degraded capacity", sc.goodput);
    }
}

/// Separates `Gradient2`'s own behaviour from the simulator's integration in its
/// busy-but-useless result (44% of the degraded capacity there): the same server (64
/// workers, 2,500 req/s, capacity halved by a 2x slower service for 20 s, 1,500 req/s
/// offered, 1 s client timeout) in the closed-loop harness, with the limiter directly in
/// front of it and no retries, tiers or priorities. Alone, `Gradient2` still keeps only
/// 55-60% (NCL parity 74-76%) while the default Gradient keeps 97-98% on the same server:
/// the cause is the algorithm (its 600-window long average lags a slower server, so with
/// the 1.5 tolerance every window reads congested and the limit sinks to ~40 of 64
/// workers), documented on `Gradient2`; the integration adds the rest.
#[test]
fn gradient2_alone_on_the_busy_but_useless_server() {
    use surgeguard_core::limit::{AlgorithmConfig, Gradient2Config};
    use surgeguard_core::time::SEC;
    use surgeguard_sim::closed_loop::{run, score, Denominator, Phase, Real, Scenario, Service};

    for seed in 1..=5 {
        let p0 = Phase { at: 0, rate: 1500.0, slots: 64, slow: 1.0 };
        let s = Scenario {
            name: "busy-but-useless server",
            service: Service::LogNormal { median_ms: 24.8, sigma: 0.25 },
            phases: vec![p0, Phase { at: 10 * SEC, slow: 2.0, ..p0 }, Phase { at: 30 * SEC, ..p0 }],
            duration: 35 * SEC,
            timeout: SEC,
            seed,
            span: (10 * SEC, 30 * SEC),
            denominator: Denominator::Capacity,
        };
        let goodput = |c| score(&s, &run(&s, &mut Real::new(c)), 1.0);
        let g2 = goodput(AlgorithmConfig::Gradient2(Gradient2Config::default()));
        let default = goodput(AlgorithmConfig::default());
        // The harness serves the degraded capacity (the default keeps it busy)...
        assert!(default.goodput >= 95.0, "seed {seed}: default {default:?}");
        // ...and Gradient2 alone, with no retry or tier in the way, does not.
        assert!(g2.goodput < 70.0, "seed {seed}: gradient2 {g2:?}");
        assert!(g2.mean_limit < 0.8 * 64.0, "seed {seed}: gradient2 {g2:?}");
    }
}

/// A slow leak: the dependency's service time grows by 1/30 of the base every second for a
/// minute (3x, capacity to 33%), its 16 slots stay. Each slower second read as congestion
/// against a stale baseline, and the limit sank below the slots (87.8-90.0% of the
/// capacity on seeds 1-4); a downward probe (does latency fall when in-flight does?)
/// re-learns the baseline when it does not, 92.6% or more on the same seeds.
#[test]
fn a_slow_leak_keeps_the_slots_busy() {
    use surgeguard_sim::closed_loop::{run, score, Real};

    let algo = algorithms().into_iter().find(|a| a.name == DEFAULT).expect("the default");
    for seed in 1..=4 {
        let s = scenarios::slow_leak(seed);
        let r = run(&s, &mut Real::new(algo.config.expect("adaptive")));
        let sc = score(&s, &r, algo.floor);
        assert!(sc.goodput >= 91.5, "seed {seed}: {:.1}% of the capacity", sc.goodput);
    }
}

/// A long tail at 80% load (log-normal, median 6.1 ms, p99 61 ms, 16 slots): Poisson bursts
/// reach the limit in most windows although in-flight averages ~13. When such windows
/// counted as a standing queue of ours, the baseline could not be refined after it was
/// learned a little low, every window read as congested, and the limit sank to 9-14, below
/// the slots, refusing work an unlimited server would serve (75.5-76.7% on these seeds).
/// A window whose mean in-flight stayed below 85% of the permits refines it (78-80%).
#[test]
fn bursts_on_a_long_tail_do_not_sink_the_limit() {
    use surgeguard_sim::closed_loop::{run, score, Real};

    let algo = algorithms().into_iter().find(|a| a.name == DEFAULT).expect("the default");
    for seed in [40, 75, 87] {
        let s = scenarios::heavy_tail(seed);
        let r = run(&s, &mut Real::new(algo.config.expect("adaptive")));
        let sc = score(&s, &r, algo.floor);
        assert!(sc.goodput >= 77.5, "seed {seed}: {:.1}% of the capacity", sc.goodput);
    }
}
