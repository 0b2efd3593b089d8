//! Probe: one healthy condition over a few seeds, with the refusal reasons and the limit.
//! `cargo run --release -p surgeguard-sim --example healthy_probe -- LOAD MIX ARR SVC SEEDS`
use surgeguard_sim::healthy::{run, Arrivals, Mix, Setup, SERVICES};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let load: f64 = a.first().map_or(0.5, |s| s.parse().unwrap());
    let mix = Mix::ALL[a.get(1).map_or(1, |s| s.parse().unwrap())].1;
    let arr = if a.get(2).map_or("b", |s| s.as_str()) == "p" {
        Arrivals::Poisson
    } else {
        Arrivals::Bursty
    };
    let svc = SERVICES[a.get(3).map_or(0, |s| s.parse().unwrap())].1;
    let seeds: u64 = a.get(4).map_or(3, |s| s.parse().unwrap());
    let quiet = std::env::var("SG_SUMMARY").is_ok();
    let (mut worst, mut sum) = (0.0f64, 0.0f64);
    for seed in 1..=seeds {
        let mut setup = Setup::healthy(seed, load, mix, arr, svc);
        if let Ok(c) = std::env::var("SG_CODEL") {
            if c == "off" {
                setup.gate.codel = None;
            } else {
                let v: Vec<u64> = c.split(',').map(|x| x.parse().unwrap()).collect();
                let cd = setup.gate.codel.as_mut().unwrap();
                cd.target_ns = v[0] * 1_000_000;
                cd.interval_ns = v[1] * 1_000_000;
            }
        }
        if std::env::var("SG_RFC").is_ok() {
            setup.gate.codel.as_mut().unwrap().mode = surgeguard_core::codel::CodelMode::Rfc8289;
        }
        let o = run(&setup);
        let lim = &o.limits;
        if std::env::var("SG_TRACE").is_ok() {
            for (i, l) in lim.iter().enumerate() {
                let t0 = i as u64 * 100_000_000;
                let f = o.failures.iter().filter(|f| f.0 >= t0 && f.0 < t0 + 100_000_000).count();
                println!("{:.1}\t{l:.1}\t{f}", i as f64 / 10.0);
            }
        }
        let mean = lim.iter().sum::<f64>() / lim.len() as f64;
        let min = lim.iter().cloned().fold(f64::MAX, f64::min);
        let max = lim.iter().cloned().fold(0.0, f64::max);
        let reasons: Vec<String> = o
            .reasons
            .iter()
            .enumerate()
            .filter(|r| *r.1 > 0)
            .map(|(i, n)| format!("r{i}={n}"))
            .collect();
        worst = worst.max(o.refused_share());
        sum += o.refused_share();
        if quiet {
            continue;
        }
        println!(
            "seed {seed}: req {} refused {} dropped {} ({:.3}%) queued {} over5ms {} maxwait {:.1}ms limit mean {mean:.1} min {min:.1} max {max:.1} {}",
            o.requests,
            o.refused,
            o.dropped,
            100.0 * o.refused_share(),
            o.queued,
            o.waits_over_target,
            o.max_wait_ns as f64 / 1e6,
            reasons.join(" ")
        );
    }
    if quiet {
        println!("worst {:.3}% mean {:.3}%", 100.0 * worst, 100.0 * sum / seeds as f64);
    }
}
