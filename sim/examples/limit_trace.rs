//! `cargo run --release -p surgeguard-sim --example limit_trace -- SCENARIO PROTECTION [SEED]`:
//! the watched tier's limit, waiting requests and goodput per 100 ms bucket of one preset run.
use surgeguard_sim::scenario::presets;
use surgeguard_sim::{run, Protection};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("retry-storm");
    let prot = args.get(1).map(String::as_str).unwrap_or("gradient+budget");
    let mut sc = presets().into_iter().find(|s| s.name == name).expect("preset");
    if let Some(seed) = args.get(2).and_then(|s| s.parse().ok()) {
        sc.seed = seed;
    }
    let p = Protection::parse(prot).expect("protection");
    let r = run(&sc, &p);
    println!("t_s\tlimit\twaiting\tgood");
    for i in 0..r.rec.limit.len() {
        println!(
            "{:.1}\t{:.1}\t{}\t{}",
            i as f64 * 0.1,
            r.rec.limit[i],
            r.rec.waiting[i],
            r.rec.good[i]
        );
    }
}
