//! `cargo run --release -p surgeguard-sim --bin sweep [-- SEEDS [THREADS] [SCENARIO,...]]`
//! (= `make sweep`): every limit algorithm on every closed-loop scenario, SEEDS seeds each
//! (default 200) on THREADS threads (default 2). Prints the min / median table and the goals;
//! exits non-zero when a goal fails. `SWEEP_ALGOS=gradient,netflix` keeps only the rows whose
//! names start with one of those prefixes; `SWEEP_WORST=n` also lists each row's n worst
//! seeds (seed:goodput), to trace them; `SWEEP_GRADIENT=headroom=1,buffer=0.2` sweeps the
//! default Gradient's row with those fields changed (a tuning tried on every scenario).
//!
//! Then the healthy-service suite (`surgeguard_sim::healthy`): the default Gate at 30% to
//! 90% of a dependency's capacity over every priority mix, arrival pattern and service-time
//! shape, the two overload cases and the recovery case, `HEALTHY_SEEDS` seeds each
//! (default 50; `HEALTHY_SEEDS=0` skips it). Its recovery goal counts in the exit status;
//! the healthy goal and the overload cases are reported (not met everywhere yet).
//!
//! `sweep trace SCENARIO ALGORITHM SEED [EVERY_MS]` prints one run's 100 ms samples instead
//! (the limit against the dependency's slots, its busy slots and queue, completions within
//! the timeout and refusals since the previous line): how a worst seed is traced.

use std::process::ExitCode;
use std::time::Instant;

use surgeguard_core::time::MS;
use surgeguard_sim::closed_loop::{run, score, Real, Static};
use surgeguard_sim::sweep::{algorithms, all_scenarios, sweep};

fn trace(args: &[String]) -> ExitCode {
    let (Some(scn), Some(alg), Some(seed)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: sweep trace SCENARIO ALGORITHM SEED [EVERY_MS]");
        return ExitCode::FAILURE;
    };
    let every: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(500);
    let Some(&(_, make)) = all_scenarios().iter().find(|(n, _)| n == scn) else {
        eprintln!("no scenario {scn}");
        return ExitCode::FAILURE;
    };
    let Some(algo) = algorithms().into_iter().find(|a| a.name.starts_with(alg.as_str())) else {
        eprintln!("no algorithm {alg}");
        return ExitCode::FAILURE;
    };
    let s = make(seed.parse().unwrap_or(1));
    let r = match algo.config {
        Some(c) => run(&s, &mut Real::new(c)),
        None => run(&s, &mut Static::new(algo.floor)),
    };
    println!("{} / {} / seed {seed}", s.name, algo.name);
    println!("t_s\tlimit\tslots\tbusy\tqueued\tgood\trefused");
    let mut last = 0u64;
    for k in r.ticks.iter().filter(|k| k.at % (every * MS) == 0) {
        println!(
            "{:.1}\t{:.2}\t{}\t{}\t{}\t{}\t{}",
            k.at as f64 / 1e9,
            k.limit,
            k.slots,
            k.busy,
            k.queued,
            r.good_between(last, k.at),
            r.refused_between(last, k.at)
        );
        last = k.at;
    }
    let sc = score(&s, &r, if algo.config.is_some() { algo.floor } else { 0.0 });
    println!("{sc:?}");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("trace") {
        return trace(&args[1..]);
    }
    let seeds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(200);
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let mut which = all_scenarios();
    if let Some(filter) = args.get(2) {
        let names: Vec<&str> = filter.split(',').collect();
        which.retain(|(n, _)| names.contains(n));
    }
    // SWEEP_ALGOS=name,name (prefixes) runs only those rows (and the goals only see them).
    let mut algos = algorithms();
    if let Ok(filter) = std::env::var("SWEEP_ALGOS") {
        let names: Vec<&str> = filter.split(',').collect();
        algos.retain(|a| names.iter().any(|n| a.name.starts_with(n)));
    }
    let started = Instant::now();
    let result = sweep(&which, &algos, seeds, threads);
    println!("{}", result.table());
    // SWEEP_WORST=n prints each row's n worst seeds (goodput), to trace them.
    if let Some(n) = std::env::var("SWEEP_WORST").ok().and_then(|v| v.parse::<usize>().ok()) {
        for (s, name) in result.scenarios.iter().enumerate() {
            for (a, algo) in result.algos.iter().enumerate() {
                let mut by: Vec<(u64, f64)> = result.cells[s][a]
                    .scores
                    .iter()
                    .enumerate()
                    .map(|(i, sc)| (i as u64 + 1, sc.goodput))
                    .collect();
                by.sort_by(|x, y| x.1.total_cmp(&y.1));
                let worst: Vec<String> =
                    by.iter().take(n).map(|(k, g)| format!("{k}:{g:.1}")).collect();
                println!("worst {name} / {}: {}", algo.name, worst.join(" "));
            }
        }
    }
    let (goals, mut ok) = result.goals();
    println!("{goals}");
    eprintln!(
        "{seeds} seeds x {} scenarios in {:.1} s",
        which.len(),
        started.elapsed().as_secs_f64()
    );
    let healthy_seeds: u64 =
        std::env::var("HEALTHY_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    if healthy_seeds > 0 {
        let started = Instant::now();
        let report = surgeguard_sim::healthy::suite(healthy_seeds, threads);
        println!("\n## The healthy-service suite (the default Gate), {healthy_seeds} seeds\n");
        println!("{}", report.table);
        println!("{}", report.summary);
        eprintln!(
            "healthy suite: {healthy_seeds} seeds in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        ok &= report.enforced_ok;
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
