#![cfg(not(loom))]
//! Closed-loop convergence of the limit algorithms (see tests/support for the model).

mod support;

use support::*;
use surgeguard_core::limit::{Gradient, GradientConfig};
use surgeguard_core::time::SEC;

fn gradient(cfg: GradientConfig) -> Box<dyn Control> {
    Box::new(Windowed::new(Gradient::new(&cfg).unwrap(), "gradient"))
}

#[test]
#[ignore]
fn explore() {
    let seed: u64 = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    println!("static 16  {}", figures(seed, &mut || Box::new(Static::new(16.0))));
    println!("static 64  {}", figures(seed, &mut || Box::new(Static::new(64.0))));
    println!("envoy 10s  {}", figures(seed, &mut || gradient(GradientConfig::envoy(10 * SEC))));
    let env = |k: &str, d: &str| -> Vec<f64> {
        std::env::var(k).unwrap_or(d.into()).split(',').map(|x| x.parse().unwrap()).collect()
    };
    for smoothing in env("SM", "1,0.5") {
        for buffer in env("BS", "0,0.1,0.2") {
            for headroom in env("HS", "0.5,0.75,1") {
                let cfg = GradientConfig { buffer, headroom, smoothing, ..Default::default() };
                println!(
                    "s {smoothing:4} b {buffer:4} h {headroom:4} {}",
                    figures(seed, &mut || gradient(cfg))
                );
            }
        }
    }
}

#[test]
#[ignore]
fn trace() {
    use surgeguard_core::limit::Algorithm;
    let b: f64 = std::env::var("B").ok().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let h: f64 = std::env::var("H").ok().and_then(|s| s.parse().ok()).unwrap_or(0.5);
    let sc = std::env::var("SC").unwrap_or("halved".into());
    let seed: u64 = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let s = match sc.as_str() {
        "overload" => scenarios::overload(seed),
        "step" => scenarios::step_up(seed),
        "heavy" => scenarios::heavy_tail(seed),
        _ => scenarios::halved(seed),
    };
    let sm: f64 = std::env::var("SMOOTH").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let cfg = GradientConfig { buffer: b, headroom: h, smoothing: sm, ..Default::default() };
    let mut w = Windowed::new(Gradient::new(&cfg).unwrap(), "g");
    w.trace = true;
    w.note = Some(Box::new(|g: &Gradient| format!("B {:5.2}", g.baseline_ns() as f64 / 1e6)));
    let r = run(&s, &mut w);
    let m = w.algo.metrics();
    println!("{m:?} {}", w.algo.limit());
    let from: u64 = std::env::var("FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(9);
    let mut t = from * SEC;
    while t < (from + 4) * SEC {
        let l = r.limits.iter().take_while(|x| x.0 <= t).last().map(|x| x.1).unwrap_or(0.0);
        println!(
            "{:6.2} L {:6.2} p50 {:6.2} p99 {:6.2} good {}",
            t as f64 / 1e9,
            l,
            r.quantile_between(0.5, t, t + SEC / 10) as f64 / 1e6,
            r.quantile_between(0.99, t, t + SEC / 10) as f64 / 1e6,
            r.good_between(t, t + SEC / 10)
        );
        t += SEC / 10;
    }
}

#[test]
#[ignore]
fn seeds() {
    let d = GradientConfig::default();
    let env =
        |k: &str, d: f64| -> f64 { std::env::var(k).ok().map(|v| v.parse().unwrap()).unwrap_or(d) };
    let envoy = std::env::var("ENVOY").ok().and_then(|s| s.parse::<u64>().ok());
    let cfg = GradientConfig {
        buffer: env("B", d.buffer),
        headroom: env("H", d.headroom),
        smoothing: env("SMOOTH", d.smoothing),
        sample_percentile: env("SP", d.sample_percentile),
        app_limited_ratio: env("AL", d.app_limited_ratio),
        initial_limit: env("INIT", d.initial_limit),
        ..d
    };
    let mut all = Vec::new();
    for seed in 1..=8 {
        let f = match envoy {
            Some(i) if std::env::var("REAL").is_ok() => figures(seed, &mut || {
                let a = surgeguard_core::limit::AlgorithmConfig::Gradient(GradientConfig::envoy(
                    i * SEC,
                ));
                let mut r = Real::new(a, "envoy");
                r.timeouts_as_samples = true;
                Box::new(r)
            }),
            Some(i) => figures(seed, &mut || {
                let mut w =
                    Windowed::new(Gradient::new(&GradientConfig::envoy(i * SEC)).unwrap(), "envoy");
                w.timeouts_as_samples = true;
                Box::new(w)
            }),
            None if std::env::var("REAL").is_ok() => figures(seed, &mut || {
                Box::new(Real::new(surgeguard_core::limit::AlgorithmConfig::Gradient(cfg), "g"))
            }),
            None => figures(seed, &mut || gradient(cfg)),
        };
        if std::env::var("V").is_ok() {
            println!("seed {seed} {f}");
        }
        all.push(f);
    }
    let pick = |g: &dyn Fn(&Figures) -> f64| {
        let v: Vec<f64> = all.iter().map(g).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        format!("{mean:5.1} [{min:5.1},{max:5.1}]")
    };
    println!(
        "ovl {} p99 {} | hal {} steady {} p99 {} settle {} | step {} | heavy {}",
        pick(&|f| f.overload_goodput),
        pick(&|f| f.overload_p99_ms),
        pick(&|f| f.halved_goodput),
        pick(&|f| f.halved_steady_goodput),
        pick(&|f| f.halved_p99_ms),
        pick(&|f| f.halved_settle_s.unwrap_or(99.0)),
        pick(&|f| f.step_goodput_of_offered),
        pick(&|f| f.heavy_goodput),
    );
}

#[test]
#[ignore]
fn static_band() {
    for l in [16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 24.0] {
        println!("static {l:4} {}", figures(1, &mut || Box::new(Static::new(l))));
    }
}

#[test]
#[ignore]
fn trace_real() {
    let env = |k: &str, d: &str| -> f64 { std::env::var(k).unwrap_or(d.into()).parse().unwrap() };
    let cfg = GradientConfig {
        buffer: env("B", "0.1"),
        headroom: env("H", "0.5"),
        smoothing: env("SMOOTH", "0.3"),
        ..Default::default()
    };
    let sc = std::env::var("SC").unwrap_or("heavy".into());
    let from = env("FROM", "0") as u64 * SEC;
    for seed in 1..=8u64 {
        let s = if sc == "halved" { scenarios::halved(seed) } else { scenarios::heavy_tail(seed) };
        let mut c = Real::new(surgeguard_core::limit::AlgorithmConfig::Gradient(cfg), "g");
        let r = run(&s, &mut c);
        let m = c.limiter.metrics();
        println!(
            "seed {seed} good {} timeouts {} {:?}",
            r.good_between(2 * SEC, 10 * SEC),
            r.timeouts,
            m
        );
        if seed == env("SEED", "0") as u64 {
            let mut t = from;
            while t < from + 4 * SEC {
                let l = r.limits.iter().take_while(|x| x.0 <= t).last().map(|x| x.1).unwrap_or(0.0);
                println!(
                    "{:5.2} L {:6.2} p50 {:6.2} good {}",
                    t as f64 / 1e9,
                    l,
                    r.quantile_between(0.5, t, t + SEC / 10) as f64 / 1e6,
                    r.good_between(t, t + SEC / 10)
                );
                t += SEC / 10;
            }
        }
    }
}

#[test]
#[ignore]
fn scale() {
    let env = |k: &str, d: &str| -> f64 { std::env::var(k).unwrap_or(d.into()).parse().unwrap() };
    let cfg = GradientConfig {
        buffer: env("B", "0.1"),
        headroom: env("H", "0.5"),
        smoothing: env("SMOOTH", "0.3"),
        ..Default::default()
    };
    for slots in [4usize, 128, 512] {
        for seed in 1..=2 {
            let s = scenarios::overload_at(seed, slots);
            let mut c = Real::new(surgeguard_core::limit::AlgorithmConfig::Gradient(cfg), "g");
            let r = run(&s, &mut c);
            let (a, b) = (2 * SEC, s.duration);
            println!(
                "slots {slots:4} seed {seed}: goodput {:5.1}% p99 {:5.1} ms mean L {:6.1}",
                100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b),
                r.quantile_between(0.99, a, b) as f64 / 1e6,
                r.mean_limit(a, b)
            );
        }
    }
}
