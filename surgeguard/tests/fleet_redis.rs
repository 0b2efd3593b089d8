//! The fleet leases' Lua scripts (`surgeguard/lua/`) on a real `redis-server`, started here
//! on a free loopback port and stopped by pid: the token script's decisions against a
//! reference GCRA, the fleet bound with several instances leasing at once, the slot cap
//! under concurrent leases and a crashed holder, and bad arguments.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use surgeguard::clock::monotonic_ns;
use surgeguard_core::fleet::{
    Fallback, Mode, SlotLease, SlotLeaseConfig, TokenLease, TokenLeaseConfig,
};
use surgeguard_core::rate::gcra_decide;
use surgeguard_core::time::{MS, SEC};

const TOKEN_LUA: &str = include_str!("../lua/token_lease.lua");
const SLOT_LUA: &str = include_str!("../lua/slot_lease.lua");

/// A `redis-server` of our own: no persistence, loopback, a free port; killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Server {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Self::start_on(port)
    }

    fn start_on(port: u16) -> Server {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--protected-mode", "yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (make setup installs Debian's redis-server)");
        let s = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = s.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return s;
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not answer on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One token request: `(granted, ttl_ms, fleet, server time in µs)`.
fn ask_tokens(
    con: &mut redis::Connection,
    limit: &str,
    who: &str,
    want: u32,
    emission_us: u64,
    burst: u32,
) -> (u32, u64, u32, u64) {
    let v: Vec<i64> = redis::Script::new(TOKEN_LUA)
        .key(format!("sg:{{{limit}}}:tat"))
        .key(format!("sg:{{{limit}}}:members"))
        .key(format!("sg:{{{limit}}}:log"))
        .arg(who)
        .arg(want)
        .arg(emission_us)
        .arg(burst)
        .arg(3000)
        .arg(10_000)
        .arg("1")
        .invoke(con)
        .unwrap();
    (v[0] as u32, v[1] as u64, v[2] as u32, v[3] as u64)
}

/// With batches of 1 the script is a GCRA: each answer matches the reference rule
/// (governor's, `gcra_decide`) at the server's own time, over random gaps and settings.
#[test]
fn batches_of_one_decide_as_a_reference_gcra() {
    let server = Server::start();
    let mut con = server.client().get_connection().unwrap();
    let mut seed = 0x5eed_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for case in 0..12 {
        let emission_us = 200 + next() % 3000;
        let burst = 1 + (next() % 5) as u32;
        let tau = emission_us * u64::from(burst - 1);
        let limit = format!("ref{case}");
        let mut tat = 0u64;
        let (mut admitted, mut refused) = (0, 0);
        for _ in 0..40 {
            std::thread::sleep(Duration::from_micros(next() % 1500));
            let (g, _, _, now) = ask_tokens(&mut con, &limit, "a", 1, emission_us, burst);
            let want = gcra_decide(tat, now, emission_us, tau, 1);
            match want {
                Ok(new) => {
                    assert_eq!(g, 1, "case {case}: the reference admits at {now} (tat {tat})");
                    tat = new;
                    admitted += 1;
                }
                Err(_) => {
                    assert_eq!(g, 0, "case {case}: the reference refuses at {now} (tat {tat})");
                    refused += 1;
                }
            }
        }
        assert!(admitted > 0, "case {case}: nothing admitted");
        let _ = refused;
    }
}

/// Four instances, each a `TokenLease` refilled through the script by its own thread,
/// spend as fast as they can for 2 s against a fleet limit of 400/s with burst 40: the
/// tokens spent stay within `R·W + B + N·b_max`, every grant is in the log, the grants in
/// every window of the log within `R·W + B` on the server's clock, and the fleet uses at
/// least 95% of `R·W`.
#[test]
fn the_fleet_bound_holds_with_four_instances() {
    let server = Server::start();
    let (rate, burst, max_batch) = (400.0, 40u32, 10u32);
    let cfg = TokenLeaseConfig {
        rate_per_sec: rate,
        burst,
        max_batch,
        batch_period_ns: 20 * MS,
        fallback: Fallback::Pessimistic,
    };
    let emission_us = (1e6 / rate) as u64;
    let run = Duration::from_secs(2);
    let spent = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let client = server.client();
            let spent = spent.clone();
            std::thread::spawn(move || {
                let mut con = client.get_connection().unwrap();
                let lease = TokenLease::new(cfg).unwrap();
                let who = format!("instance-{i}");
                while start.elapsed() < run {
                    let now = monotonic_ns();
                    if let Some(want) = lease.want(now) {
                        let (g, ttl_ms, fleet, _) =
                            ask_tokens(&mut con, "bound", &who, want, emission_us, burst);
                        lease.grant(now, g, ttl_ms * MS, fleet);
                    }
                    // A burst of demand between refills.
                    for _ in 0..5 {
                        let _ = lease.try_take(monotonic_ns(), 1);
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
                let m = lease.metrics(monotonic_ns());
                assert_eq!(m.leased + m.held + m.dropped, m.granted, "{who}: {m:?}");
                assert_eq!(m.fleet_size, 4, "{who}: every instance counted");
                spent.fetch_add(m.leased, Ordering::Relaxed);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let w = start.elapsed().as_secs_f64();
    let spent = spent.load(Ordering::Relaxed) as f64;
    let bound = rate * w + f64::from(burst) + 4.0 * f64::from(max_batch);
    assert!(spent <= bound, "spent {spent} > bound {bound} over {w:.3} s");
    // The log: every window [a, b] of grants within R·(b − a) + B.
    let mut con = server.client().get_connection().unwrap();
    let log: Vec<String> =
        redis::cmd("LRANGE").arg("sg:{bound}:log").arg(0).arg(-1).query(&mut con).unwrap();
    let grants: Vec<(u64, u64)> = log
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    for a in 0..grants.len() {
        let mut total = 0;
        for b in &grants[a..] {
            total += b.1;
            let win = (b.0 - grants[a].0) as f64 / 1e6;
            assert!(
                total as f64 <= rate * win + f64::from(burst) + 1.0,
                "{total} granted in {win:.4} s"
            );
        }
    }
    let granted: u64 = grants.iter().map(|g| g.1).sum();
    assert!(spent <= granted as f64);
    assert!(spent >= 0.95 * rate * w, "utilisation: {spent} of {:.0}", rate * w);
}

fn ask_slots(
    con: &mut redis::Connection,
    who: &str,
    want: u32,
    cap: u32,
    ttl_ms: u64,
) -> (u32, u64, u32) {
    let v: Vec<i64> = redis::Script::new(SLOT_LUA)
        .key("sg:{cap}:slots")
        .key("sg:{cap}:log")
        .arg(who)
        .arg(want)
        .arg(cap)
        .arg(ttl_ms)
        .arg("0")
        .invoke(con)
        .unwrap();
    (v[0] as u32, v[1] as u64, v[2] as u32)
}

/// Four instances, each with three workers, lease slots of a fleet cap of 6 (12 could be
/// in flight) and run requests on them; a counter standing for the dependency never sees
/// more than 6 at once. An instance that stops renewing (crashed) gets its 4 slots back to
/// the others once its lease has run out.
#[test]
fn the_slot_cap_holds_and_a_crashed_holders_slots_come_back() {
    let server = Server::start();
    let cap = 6;
    let cfg = SlotLeaseConfig { cap, longest_request_ns: 5 * MS, fallback: Fallback::Pessimistic };
    let at_dependency = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let mut con = server.client().get_connection().unwrap();
    assert_eq!(ask_slots(&mut con, "crashed", 4, cap, 300).0, 4);
    let start = Instant::now();
    let run = Duration::from_millis(1200);
    let mut late = Vec::new();
    let mut threads = Vec::new();
    for i in 0..4 {
        let lease = Arc::new(SlotLease::new(cfg).unwrap());
        // The refiller: asks for what the workers want (at least what is in flight).
        let client = server.client();
        let l = lease.clone();
        late.push(std::thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let mut late_slots = 0;
            while start.elapsed() < run {
                let now = monotonic_ns();
                if let Some(want) = l.want(now) {
                    let (g, ttl, fleet) = ask_slots(&mut con, &format!("i{i}"), want, cap, 150);
                    l.grant(now, g, ttl * MS, fleet);
                    if start.elapsed() > Duration::from_millis(500) {
                        late_slots = late_slots.max(g);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            late_slots
        }));
        for _ in 0..3 {
            let (l, dep, peak) = (lease.clone(), at_dependency.clone(), peak.clone());
            threads.push(std::thread::spawn(move || {
                while start.elapsed() < run {
                    match l.try_acquire(monotonic_ns()) {
                        Ok(p) => {
                            assert_eq!(p.mode(), Mode::Leased);
                            let n = dep.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(n, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(2));
                            dep.fetch_sub(1, Ordering::SeqCst);
                            l.release(p).unwrap();
                        }
                        Err(_) => std::thread::sleep(Duration::from_micros(300)),
                    }
                }
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    let late: Vec<u32> = late.into_iter().map(|t| t.join().unwrap()).collect();
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= cap, "the dependency saw {peak} at once, cap {cap}");
    assert!(peak >= 5, "the cap was used: {peak}");
    // After 300 ms the crashed instance's 4 slots were free: the others leased them.
    assert!(late.iter().sum::<u32>() > 2, "slots leased after the crash expired: {late:?}");
}

/// Bad arguments are script errors and write nothing; a lease whose store answers with an
/// error simply is not refilled (it falls back when it expires).
#[test]
fn bad_arguments_are_errors_and_write_nothing() {
    let server = Server::start();
    let mut con = server.client().get_connection().unwrap();
    for (want, emission, burst) in [
        ("0", "100", "1"),
        ("-1", "100", "1"),
        ("abc", "100", "1"),
        ("1", "0", "1"),
        ("1", "100", "0"),
        ("1.5", "100", "1"),
    ] {
        let r: redis::RedisResult<Vec<i64>> = redis::Script::new(TOKEN_LUA)
            .key("sg:{bad}:tat")
            .key("sg:{bad}:members")
            .key("sg:{bad}:log")
            .arg("x")
            .arg(want)
            .arg(emission)
            .arg(burst)
            .arg(1000)
            .arg(1000)
            .arg("1")
            .invoke(&mut con);
        let e = r.expect_err("a script error");
        assert!(e.to_string().contains("surgeguard:"), "{e}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("sg:{bad}:*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "nothing written: {keys:?}");
    // Keys of any bytes work (the hash tag keeps one limit's keys in one Cluster slot).
    let odd = "t\u{0}en ant/\u{7f}{}";
    let (g, _, fleet, _) = ask_tokens(&mut con, odd, "\u{0}who", 1, 1000, 2);
    assert_eq!((g, fleet), (1, 1));
    let r: redis::RedisResult<Vec<i64>> = redis::Script::new(SLOT_LUA)
        .key("sg:{c}:slots")
        .key("sg:{c}:log")
        .arg("x")
        .arg(1)
        .arg(0)
        .arg(1000)
        .arg("0")
        .invoke(&mut con);
    assert!(r.is_err(), "cap 0");
    // A lease that never gets an answer decides by its fallback once expired.
    let lease =
        TokenLease::new(TokenLeaseConfig { fallback: Fallback::Pessimistic, ..Default::default() })
            .unwrap();
    assert!(lease.try_take(SEC, 1).is_err());
}

/// A fleet limiter over a runtime of its own, with its decision latencies sampled.
fn decide_for(limit: &surgeguard::fleet::FleetRateLimiter, d: Duration) -> (u64, u64, Vec<u64>) {
    let (mut ok, mut no) = (0, 0);
    let mut lat = Vec::new();
    let end = Instant::now() + d;
    while Instant::now() < end {
        let t = Instant::now();
        let r = limit.try_take(1);
        lat.push(t.elapsed().as_nanos() as u64);
        if r.is_ok() {
            ok += 1;
        } else {
            no += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    lat.sort_unstable();
    (ok, no, lat)
}

fn p99(v: &[u64]) -> u64 {
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// Redis stalled (`SIGSTOP`) past the lease's TTL: decisions stay local (their p99 does not
/// grow), the safe fallback engages and is counted, refills fail by timeout, and after
/// `SIGCONT` the limiter is back on leased tokens within a second.
#[test]
fn a_stalled_redis_changes_no_decision_latency_and_the_safe_mode_engages() {
    use surgeguard::fleet::{FleetRateConfig, FleetRateLimiter};
    let server = Server::start();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = server.client();
    let con = rt.block_on(client.get_multiplexed_async_connection()).unwrap();
    let mut cfg = FleetRateConfig::default();
    cfg.lease.rate_per_sec = 2000.0;
    cfg.lease.burst = 100;
    cfg.lease.max_batch = 20;
    cfg.lease.batch_period_ns = 20 * MS;
    cfg.ttl = Duration::from_millis(300);
    let limit = rt.block_on(async { FleetRateLimiter::new(con, "stall", cfg.clone()) }).unwrap();
    let (ok, _, before) = decide_for(&limit, Duration::from_millis(400));
    assert!(ok > 100, "leased tokens spent before the stall: {ok}");
    let m0 = limit.metrics();
    // (Decisions before the first grant are the fallback's: the lease starts empty.)
    assert!(m0.lease.leased > 0 && m0.refill_failures == 0, "{m0:?}");
    server.signal("-STOP");
    let (_, _, during) = decide_for(&limit, Duration::from_millis(800));
    server.signal("-CONT");
    let m1 = limit.metrics();
    assert!(m1.lease.safe_admitted > m0.lease.safe_admitted, "the safe mode engaged: {m1:?}");
    assert!(m1.refill_failures > 0, "refills timed out: {m1:?}");
    let (b, d) = (p99(&before), p99(&during));
    assert!(d <= (3 * b).max(50_000), "decision p99 {b} ns before, {d} ns during the stall");
    // Back: leased again within a second (the breaker's open period at most).
    let leased_before = limit.metrics().lease.leased;
    let (_, _, _) = decide_for(&limit, Duration::from_millis(1500));
    let m2 = limit.metrics();
    assert!(m2.lease.leased > leased_before, "leased again after SIGCONT: {m2:?}");
    drop(limit);
    drop(rt);
}

/// Redis killed (`kill -9`) and restarted empty on the same port: the limiter falls back
/// while it is down and leases again once it is back.
#[test]
fn a_restarted_redis_is_rejoined() {
    use surgeguard::fleet::{FleetRateConfig, FleetRateLimiter};
    let server = Server::start();
    let port = server.port;
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = server.client();
    let con = rt.block_on(client.get_connection_manager()).unwrap();
    let mut cfg = FleetRateConfig::default();
    cfg.lease.rate_per_sec = 1000.0;
    cfg.lease.batch_period_ns = 20 * MS;
    cfg.ttl = Duration::from_millis(200);
    let limit = rt.block_on(async { FleetRateLimiter::new(con, "restart", cfg.clone()) }).unwrap();
    let (ok, _, _) = decide_for(&limit, Duration::from_millis(300));
    assert!(ok > 50, "{ok}");
    let up_before = limit.metrics();
    server.signal("-KILL");
    drop(server);
    let (_, _, _) = decide_for(&limit, Duration::from_millis(500));
    let down = limit.metrics();
    assert!(down.refill_failures > 0, "{down:?}");
    assert!(
        down.lease.safe_admitted > up_before.lease.safe_admitted,
        "the safe mode engaged: {down:?}"
    );
    let _again = Server::start_on(port);
    let leased = limit.metrics().lease.leased;
    let (_, _, _) = decide_for(&limit, Duration::from_millis(2000));
    let up = limit.metrics();
    assert!(up.lease.leased > leased, "leased again after the restart: {up:?}");
    drop(limit);
    drop(rt);
}

/// Bad settings of a fleet limiter are refused, naming the setting, and start nothing.
#[test]
fn bad_fleet_settings_are_refused() {
    use surgeguard::fleet::{FleetRateConfig, FleetRateLimiter};
    let server = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let con = rt.block_on(server.client().get_multiplexed_async_connection()).unwrap();
    let ok = FleetRateConfig::default();
    let long = "n".repeat(201);
    let cases: Vec<(&str, FleetRateConfig, &str)> = vec![
        ("", ok.clone(), "fleet_rate.name"),
        ("a{b", ok.clone(), "fleet_rate.name"),
        (&long, ok.clone(), "fleet_rate.name"),
        ("x", FleetRateConfig { ttl: Duration::from_millis(1), ..ok.clone() }, "fleet_rate.ttl"),
        (
            "x",
            FleetRateConfig { refill_timeout: Duration::from_secs(10), ..ok.clone() },
            "fleet_rate.refill_timeout",
        ),
        (
            "x",
            FleetRateConfig {
                lease: TokenLeaseConfig { rate_per_sec: f64::NAN, ..ok.lease },
                ..ok.clone()
            },
            "token_lease.rate_per_sec",
        ),
    ];
    for (name, cfg, field) in cases {
        let e = rt.block_on(async { FleetRateLimiter::new(con.clone(), name, cfg) }).unwrap_err();
        assert_eq!(e.field, field, "{e}");
    }
}

const RETRY_LUA: &str = include_str!("../lua/retry_lease.lua");

/// One instance's part of a retry storm: `rate` requests a second for `run`, each failing
/// at the dependency and retried up to 3 times while the budget allows. With `fleet`, the
/// retry lease (refilled every 20 ms through the script) decides beside the local budget.
/// Returns (requests, retries).
fn storm(
    client: redis::Client,
    rate: u64,
    run: Duration,
    local: surgeguard_core::retry::RetryBudgetConfig,
    fleet: Option<surgeguard_core::fleet::RetryLeaseConfig>,
) -> (u64, u64) {
    use surgeguard_core::fleet::RetryLease;
    use surgeguard_core::retry::RetryBudget;
    let mut con = client.get_connection().unwrap();
    let budget = RetryBudget::new(local).unwrap();
    let lease = fleet.map(|c| RetryLease::new(c).unwrap());
    let start = Instant::now();
    let (mut requests, mut retries) = (0u64, 0u64);
    let mut last_refill = Instant::now() - Duration::from_secs(1);
    while start.elapsed() < run {
        let now = monotonic_ns();
        if let Some(l) = &lease {
            if last_refill.elapsed() >= Duration::from_millis(20) {
                last_refill = Instant::now();
                let pending = l.take_pending();
                let want = l.tokens().want(now).unwrap_or(0);
                let c = l.config();
                let v: Vec<i64> = redis::Script::new(RETRY_LUA)
                    .key("sg:{storm}:req")
                    .key("sg:{storm}:ret")
                    .arg(pending)
                    .arg(want)
                    .arg(c.ratio)
                    .arg(c.min_per_sec)
                    .arg(c.window_ns / MS)
                    .arg(3000)
                    .invoke(&mut con)
                    .unwrap();
                l.tokens().grant(now, v[0] as u32, v[1] as u64 * MS, 1);
            }
        }
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while requests < due {
            requests += 1;
            budget.deposit(now);
            if let Some(l) = &lease {
                l.deposit();
            }
            // The dependency fails every attempt: retry while allowed, at most 3 times.
            for _ in 0..3 {
                let ok = match &lease {
                    Some(l) => l.try_retry(now, &budget).is_ok(),
                    None => budget.try_withdraw(now).is_ok(),
                };
                if !ok {
                    break;
                }
                retries += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    (requests, retries)
}

/// The fleet retry budget's bound with the dependency failing every call: four instances
/// retry at most `ρ·Req + m·W + N·b_r` in total. Per-process budgets with the same ratio
/// and reserve allow each instance its own reserve, so the fleet retries grow with N.
#[test]
fn the_fleet_retry_budget_bounds_a_storm_across_instances() {
    use surgeguard_core::fleet::RetryLeaseConfig;
    use surgeguard_core::retry::RetryBudgetConfig;
    let server = Server::start();
    let n = 4u64;
    let run = Duration::from_millis(1500);
    let fleet = RetryLeaseConfig {
        ratio: 0.1,
        min_per_sec: 10.0,
        window_ns: 2 * SEC,
        max_batch: 5,
        batch_period_ns: 20 * MS,
    };
    // Per process: the same ratio and reserve (10/s over a 2 s TTL).
    let per_process =
        RetryBudgetConfig { ttl: 2 * SEC, min_retries_per_sec: 10, percent_can_retry: 0.1 };
    // With the fleet lease the local budget is only the floor: roomy.
    let roomy =
        RetryBudgetConfig { ttl: 2 * SEC, min_retries_per_sec: 1000, percent_can_retry: 10.0 };
    let go = |fleet: Option<RetryLeaseConfig>, local: RetryBudgetConfig| {
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let client = server.client();
                std::thread::spawn(move || storm(client, 50, run, local, fleet))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let (req, ret) = go(Some(fleet), roomy);
    let bound = fleet.ratio * req as f64
        + fleet.min_per_sec * 2.0
        + (n * u64::from(fleet.max_batch)) as f64;
    assert!(ret as f64 <= bound, "fleet: {ret} retries for {req} requests, bound {bound:.0}");
    assert!(ret as f64 >= 0.5 * fleet.ratio * req as f64, "fleet: the budget was used: {ret}");
    let (req_p, ret_p) = go(None, per_process);
    eprintln!(
        "retries with the dependency down, {n} instances at 50 req/s for 1.5 s: fleet budget \
         {ret} for {req} requests (bound {bound:.0}); per-process budgets {ret_p} for {req_p}"
    );
    assert!(ret_p > ret, "per-process budgets allow each instance its reserve: {ret_p} vs {ret}");
}

/// Bad arguments to the retry script are errors and write nothing.
#[test]
fn the_retry_script_refuses_bad_arguments() {
    let server = Server::start();
    let mut con = server.client().get_connection().unwrap();
    for (req, want, ratio, min, window) in [
        ("-1", "1", "0.1", "1", "2000"),
        ("1", "x", "0.1", "1", "2000"),
        ("1", "1", "11", "1", "2000"),
        ("1", "1", "nan", "1", "2000"),
        ("1", "1", "0.1", "-1", "2000"),
        ("1", "1", "0.1", "1", "10"),
    ] {
        let r: redis::RedisResult<Vec<i64>> = redis::Script::new(RETRY_LUA)
            .key("sg:{rbad}:req")
            .key("sg:{rbad}:ret")
            .arg(req)
            .arg(want)
            .arg(ratio)
            .arg(min)
            .arg(window)
            .arg(1000)
            .invoke(&mut con);
        assert!(r.is_err(), "{req} {want} {ratio} {min} {window}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("sg:{rbad}:*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}
