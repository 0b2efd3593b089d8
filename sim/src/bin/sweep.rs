//! `cargo run --release -p surgeguard-sim --bin sweep [-- SEEDS [THREADS] [SCENARIO,...]]`
//! (= `make sweep`): every limit algorithm on every closed-loop scenario, SEEDS seeds each
//! (default 200) on THREADS threads (default 2). Prints the min / median table and the goals;
//! exits non-zero when a goal fails.

use std::process::ExitCode;
use std::time::Instant;

use surgeguard_sim::sweep::{algorithms, all_scenarios, sweep};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(200);
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let mut which = all_scenarios();
    if let Some(filter) = args.get(2) {
        let names: Vec<&str> = filter.split(',').collect();
        which.retain(|(n, _)| names.contains(n));
    }
    let started = Instant::now();
    let result = sweep(&which, &algorithms(), seeds, threads);
    println!("{}", result.table());
    let (goals, ok) = result.goals();
    println!("{goals}");
    eprintln!(
        "{seeds} seeds x {} scenarios in {:.1} s",
        which.len(),
        started.elapsed().as_secs_f64()
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
