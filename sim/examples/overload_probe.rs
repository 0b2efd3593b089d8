//! Probe: the healthy suite's overload and recovery cases over a few seeds.
//! `SG_CODEL=target_ms,interval_ms cargo run --release -p surgeguard-sim --example overload_probe -- SEEDS`
use surgeguard_sim::healthy::{overload_cases, recovery_setup, run, Setup};

fn tweak(s: &mut Setup) {
    if let Ok(c) = std::env::var("SG_CODEL") {
        if c == "off" {
            s.gate.codel = None;
        } else {
            let v: Vec<u64> = c.split(',').map(|x| x.parse().unwrap()).collect();
            let cd = s.gate.codel.as_mut().unwrap();
            cd.target_ns = v[0] * 1_000_000;
            cd.interval_ns = v[1] * 1_000_000;
        }
    }
}

fn main() {
    let seeds: u64 = std::env::args().nth(1).map_or(5, |s| s.parse().unwrap());
    for case in overload_cases() {
        let mut worst = 1.0f64;
        for seed in 1..=seeds {
            let mut s = (case.setup)(seed);
            tweak(&mut s);
            worst = worst.min(run(&s).level_success(0));
        }
        println!("{}: critical worst {:.2}%", case.name, 100.0 * worst);
    }
    let mut worst = 0u64;
    let mut never = 0;
    let mut succ = 1.0f64;
    for seed in 1..=seeds {
        let mut s = recovery_setup(seed);
        tweak(&mut s);
        let o = run(&s);
        succ = succ.min(o.success());
        let r = o.recovery_after(20 * 1_000_000_000, 0.99);
        if std::env::var("SG_TRACE_SEED").ok().and_then(|v| v.parse::<u64>().ok()) == Some(seed) {
            for i in 180..240u64 {
                let t0 = i * 100_000_000;
                let mut k = [0; 4];
                for f in o.failures.iter().filter(|f| f.0 >= t0 && f.0 < t0 + 100_000_000) {
                    k[f.1 as usize] += 1;
                }
                let (lo, hi) = (
                    o.per_request.partition_point(|r| r.0 < t0),
                    o.per_request.partition_point(|r| r.0 < t0 + 100_000_000),
                );
                let ok = o.per_request[lo..hi].iter().filter(|r| r.1).count();
                println!(
                    "{:.1}\tlimit {:.1}\tfail r/d/tq/ta {:?}\tok {ok}/{}",
                    i as f64 / 10.0,
                    o.limits[i as usize],
                    k,
                    hi - lo
                );
            }
        }
        if std::env::var("SG_EACH").is_ok() {
            println!("seed {seed}: recovery {:?} ms", r.map(|t| t / 1_000_000));
        }
        match r {
            Some(t) => worst = worst.max(t),
            None => never += 1,
        }
    }
    println!(
        "recovery: worst {:.2} s, never {never}, success worst {:.2}%",
        worst as f64 / 1e9,
        100.0 * succ
    );
}
