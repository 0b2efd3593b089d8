//! How many Redis calls a fleet rate limit makes per instance, at 1k, 10k and 100k
//! decisions per second (a `redis-server` on a free loopback port, started and stopped
//! here). `cargo run --release -p surgeguard --features fleet --example fleet_calls`
//!
//! One instance; the fleet limit is set above the decision rate, so every decision is
//! admitted on leased tokens and the refills are what demand alone causes.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use surgeguard::fleet::{FleetRateConfig, FleetRateLimiter};
use surgeguard_core::time::MS;

fn main() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (make setup installs it)");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let con = loop {
        if let Ok(c) = rt.block_on(client.get_multiplexed_async_connection()) {
            break c;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("| decisions/s | b_max | Redis calls/s | decisions per call | leased | fallback |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (rate, b_max) in [(1_000u64, 100u32), (10_000, 1_000), (100_000, 10_000)] {
        let mut cfg = FleetRateConfig::default();
        cfg.lease.rate_per_sec = rate as f64 * 2.0;
        cfg.lease.burst = b_max * 2;
        cfg.lease.max_batch = b_max;
        cfg.lease.batch_period_ns = 100 * MS;
        let name = format!("calls{rate}");
        let limit = rt.block_on(async { FleetRateLimiter::new(con.clone(), &name, cfg) }).unwrap();
        // Let the first grant arrive, then pace the decisions for 3 s.
        std::thread::sleep(Duration::from_millis(100));
        let before = limit.metrics();
        let start = Instant::now();
        let run = Duration::from_secs(3);
        let mut n = 0u64;
        while start.elapsed() < run {
            let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
            while n < due {
                let _ = limit.try_take(1);
                n += 1;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let m = limit.metrics();
        let secs = start.elapsed().as_secs_f64();
        let calls = (m.refills - before.refills) as f64 / secs;
        let fallback = m.lease.safe_admitted - before.lease.safe_admitted;
        println!(
            "| {rate} | {b_max} | {calls:.1} | {:.0} | {} | {fallback} |",
            n as f64 / (calls * secs).max(1.0),
            m.lease.leased - before.lease.leased
        );
    }
    drop(rt);
    let _ = server.kill();
    let _ = server.wait();
}
