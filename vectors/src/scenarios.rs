//! The scenarios: configs and operation sequences, built by seeded random walks (the
//! generator's own `SplitMix64`, so the output is the same on every run) and a few
//! hand-written edge cases. Each step is run through the core as it is built and its
//! answer recorded.

use serde_json::{json, Map, Value};
use surgeguard_core::rng::SplitMix64;

use crate::Runner;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// Scenario clocks start here (an arbitrary non-zero origin).
const T0: u64 = 1_000 * SEC;

/// A scenario being built: every step runs at once and its answer is kept.
struct Sc {
    name: String,
    kind: &'static str,
    config: Value,
    runner: Runner,
    steps: Vec<Value>,
}

impl Sc {
    fn new(name: &str, kind: &'static str, config: Value) -> Self {
        let runner = Runner::new(kind, config.as_object().expect("config object"))
            .unwrap_or_else(|e| panic!("scenario {name}: {e}"));
        Self { name: name.into(), kind, config, runner, steps: Vec::new() }
    }

    /// Runs one step (`args` holds `op` and its arguments); returns its index and answer.
    fn op(&mut self, args: Value) -> (u64, Value) {
        let mut m: Map<String, Value> = args.as_object().expect("args object").clone();
        let idx = self.steps.len() as u64;
        let exp = self
            .runner
            .step(idx, &m)
            .unwrap_or_else(|e| panic!("scenario {} step {idx}: {e}", self.name));
        m.insert("expect".into(), exp.clone());
        self.steps.push(Value::Object(m));
        (idx, exp)
    }

    fn done(self) -> Value {
        json!({"name": self.name, "kind": self.kind, "config": self.config, "steps": self.steps})
    }
}

fn limiter_cfg(algorithm: &str, algo: Value, levels: u64) -> Value {
    let weights: Vec<f64> = match levels {
        1 => vec![1.0],
        2 => vec![0.75, 0.25],
        _ => vec![0.7, 0.25, 0.05],
    };
    json!({
        "algorithm": algorithm, "algo": algo, "levels": levels, "weights": weights,
        "min_window_ns": 20 * MS, "max_window_ns": 500 * MS, "min_samples": 5,
        "active_ns": SEC,
    })
}

fn algos() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("fixed", "fixed", json!({"initial_limit": 8.0, "min_limit": 1.0, "max_limit": 100.0})),
        (
            "aimd",
            "aimd",
            json!({"initial_limit": 10.0, "min_limit": 2.0, "max_limit": 60.0,
                   "target_latency_ns": 30 * MS, "backoff_ratio": 0.9, "timeout_ns": 200 * MS,
                   "slow_start": false, "netflix_parity": false}),
        ),
        (
            "aimd_netflix",
            "aimd",
            json!({"initial_limit": 20.0, "min_limit": 1.0, "max_limit": 200.0,
                   "target_latency_ns": 30 * MS, "backoff_ratio": 0.9, "timeout_ns": 100 * MS,
                   "slow_start": false, "netflix_parity": true}),
        ),
        (
            "aimd_slow_start",
            "aimd",
            json!({"initial_limit": 4.0, "min_limit": 1.0, "max_limit": 80.0,
                   "target_latency_ns": 40 * MS, "backoff_ratio": 0.7, "timeout_ns": 300 * MS,
                   "slow_start": true, "netflix_parity": false}),
        ),
        (
            "hysteresis",
            "hysteresis",
            json!({"initial_limit": 12.0, "min_limit": 2.0, "max_limit": 80.0,
                   "target_latency_ns": 40 * MS, "slow_start": false}),
        ),
        (
            "gradient",
            "gradient",
            json!({"initial_limit": 16.0, "min_limit": 2.0, "max_limit": 100.0,
                   "smoothing": 1.0, "buffer": 0.25, "slow_start": false}),
        ),
        (
            "gradient_smoothed",
            "gradient",
            json!({"initial_limit": 8.0, "min_limit": 0.5, "max_limit": 64.0,
                   "smoothing": 0.3, "buffer": 0.1, "slow_start": true}),
        ),
        (
            "gradient2",
            "gradient2",
            json!({"initial_limit": 20.0, "min_limit": 4.0, "max_limit": 120.0,
                   "smoothing": 0.2, "queue_size": 4.0, "long_window": 60, "fixed": false,
                   "slow_start": false}),
        ),
        (
            "gradient2_fixed",
            "gradient2",
            json!({"initial_limit": 10.0, "min_limit": 2.0, "max_limit": 120.0,
                   "smoothing": 0.5, "queue_size": 2.0, "long_window": 30, "fixed": true,
                   "slow_start": true}),
        ),
        (
            "vegas",
            "vegas",
            json!({"initial_limit": 20.0, "min_limit": 1.0, "max_limit": 200.0,
                   "smoothing": 1.0, "probe_multiplier": 30, "seed": 7, "slow_start": false}),
        ),
        (
            "vegas_probe",
            "vegas",
            json!({"initial_limit": 6.0, "min_limit": 1.0, "max_limit": 100.0,
                   "smoothing": 0.5, "probe_multiplier": 2, "seed": 99, "slow_start": true}),
        ),
    ]
}

/// Service time of one request in a load phase: calm, congested, calm again.
fn service(rng: &mut SplitMix64, phase: usize) -> u64 {
    let base = [10 * MS, 60 * MS, 15 * MS][phase % 3];
    base / 2 + rng.below(base)
}

/// A discrete-event run of a limiter: arrivals at random levels, completions at their
/// due time (dropped when very slow, sometimes ignored), checkpoints, the kill switch.
fn limiter_walk(
    name: &str,
    algorithm: &str,
    algo: Value,
    levels: u64,
    seed: u64,
    n: usize,
) -> Value {
    let mut sc = Sc::new(name, "limiter", limiter_cfg(algorithm, algo, levels));
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    let mut held: Vec<(u64, u64)> = Vec::new(); // (step, due)
    let per_phase = n / 3 + 1;
    let mut count = 0;
    while count < n {
        let phase = count / per_phase;
        let next_arrival = now + rng.below(4 * MS);
        let (i, due) = held
            .iter()
            .enumerate()
            .min_by_key(|(_, h)| h.1)
            .map(|(i, h)| (i, h.1))
            .unwrap_or((0, u64::MAX));
        if due <= next_arrival {
            let (step, _) = held.swap_remove(i);
            now = now.max(due);
            let r = rng.below(100);
            let outcome = if r < 4 {
                "ignored"
            } else if r < 10 {
                "dropped"
            } else {
                "success"
            };
            sc.op(json!({"op": "release", "now": now, "permit": step, "outcome": outcome}));
        } else {
            now = next_arrival;
            let lv = rng.below(levels);
            let (step, exp) = sc.op(json!({"op": "acquire", "now": now, "level": lv}));
            if exp["ok"] == true {
                held.push((step, now + service(&mut rng, phase)));
            }
        }
        count += 1;
        if count % 10 == 0 {
            sc.op(json!({"op": "check"}));
            count += 1;
        }
        if count % 400 == 200 {
            sc.op(json!({"op": "static", "limit": 3.5}));
            sc.op(json!({"op": "check"}));
        }
        if count % 400 == 260 {
            sc.op(json!({"op": "static", "limit": null}));
            sc.op(json!({"op": "check"}));
        }
    }
    sc.done()
}

/// Edge values of a limiter: equal timestamps, time going backwards, time 0, a huge
/// `now`, a tiny static limit, release of everything.
fn limiter_edges() -> Value {
    let algo = json!({"initial_limit": 3.0, "min_limit": 1.0, "max_limit": 10.0});
    let mut sc = Sc::new("limiter_edges", "limiter", limiter_cfg("fixed", algo, 3));
    let mut held = Vec::new();
    for (now, lv) in [(0, 0), (0, 1), (0, 2), (0, 0), (5, 1), (3, 1), (u64::MAX / 2, 0)] {
        let (i, e) = sc.op(json!({"op": "acquire", "now": now, "level": lv}));
        if e["ok"] == true {
            held.push(i);
        }
        sc.op(json!({"op": "check"}));
    }
    for (k, p) in held.drain(..).enumerate() {
        let now = if k % 2 == 0 { 1 } else { u64::MAX / 2 };
        sc.op(json!({"op": "release", "now": now, "permit": p, "outcome": "success"}));
        sc.op(json!({"op": "check"}));
    }
    sc.op(json!({"op": "static", "limit": 0.000001}));
    for lv in 0..3 {
        sc.op(json!({"op": "acquire", "now": u64::MAX / 2, "level": lv}));
    }
    sc.op(json!({"op": "static", "limit": 2147483647.0}));
    for lv in 0..3 {
        let (i, e) = sc.op(json!({"op": "acquire", "now": u64::MAX / 2, "level": lv}));
        if e["ok"] == true {
            held.push(i);
        }
    }
    sc.op(json!({"op": "check"}));
    for p in held {
        sc.op(json!({"op": "release", "now": 0, "permit": p, "outcome": "dropped"}));
    }
    sc.op(json!({"op": "static", "limit": null}));
    sc.op(json!({"op": "check"}));
    sc.done()
}

fn gate_cfg(limiter: Value, extra: Value) -> Value {
    let mut c = json!({
        "limiter": limiter, "queue_capacity": 32, "codel": true,
        "codel_target_ns": 5 * MS, "codel_interval_ns": 100 * MS, "codel_mode": "folly",
        "lifo": "codel", "max_wait_ns": 0, "aging": null, "initial_service_ns": 0,
        "service_alpha": 0.1, "fallback_retry_after_ns": SEC,
    });
    for (k, v) in extra.as_object().expect("extra") {
        c[k] = v.clone();
    }
    c
}

/// A discrete-event run of a gate: bursts of arrivals (some with timeouts) overload a
/// small limit; completions release permits (their implicit poll grants or drops
/// waiters); some waiters are cancelled; the shed switch and kill switch flip while the
/// queue is empty.
fn gate_walk(name: &str, cfg: Value, seed: u64, n: usize, levels: u64) -> Value {
    let mut sc = Sc::new(name, "gate", cfg);
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    let mut held: Vec<(u64, u64)> = Vec::new();
    let mut waiting: Vec<u64> = Vec::new();
    let mut count = 0;
    let per_phase = n / 3 + 1;
    let mut shed_on = false;
    // A cancelled ticket holds its queue slot until the next poll; the shed and kill
    // switches are flipped only when no such slot exists, because Python's setters poll
    // (and Node's do not, with nobody waiting).
    let mut cancelled_since_poll = false;
    let settle = |exp: &Value,
                  now: u64,
                  rng: &mut SplitMix64,
                  held: &mut Vec<(u64, u64)>,
                  waiting: &mut Vec<u64>,
                  phase: usize| {
        if let Some(evs) = exp["events"].as_array() {
            for e in evs {
                let t = e["ticket"].as_u64().expect("ticket");
                waiting.retain(|&w| w != t);
                if e["granted"] == true {
                    held.push((t, now + service(rng, phase)));
                }
            }
        }
    };
    while count < n {
        let phase = count / per_phase;
        let gap = if phase == 1 { rng.below(MS) } else { rng.below(6 * MS) };
        let next_arrival = now + gap;
        let (i, due) = held
            .iter()
            .enumerate()
            .min_by_key(|(_, h)| h.1)
            .map(|(i, h)| (i, h.1))
            .unwrap_or((0, u64::MAX));
        if due <= next_arrival {
            let (step, _) = held.swap_remove(i);
            now = now.max(due);
            let r = rng.below(100);
            let outcome = if r < 5 {
                "ignored"
            } else if r < 12 {
                "dropped"
            } else {
                "success"
            };
            let (_, exp) =
                sc.op(json!({"op": "release", "now": now, "permit": step, "outcome": outcome}));
            settle(&exp, now, &mut rng, &mut held, &mut waiting, phase);
        } else if !waiting.is_empty() && rng.below(100) < 3 {
            let k = rng.below(waiting.len() as u64) as usize;
            let t = waiting.swap_remove(k);
            sc.op(json!({"op": "cancel", "ticket": t}));
            cancelled_since_poll = true;
        } else {
            now = next_arrival;
            let lv = rng.below(levels);
            let r = rng.below(10);
            // Timeouts of a second or more (see the README: Python's and Node's waits).
            let timeout = if r < 3 { json!(SEC + rng.below(2 * SEC)) } else { Value::Null };
            let (step, exp) =
                sc.op(json!({"op": "arrive", "now": now, "level": lv, "timeout": timeout}));
            match exp["result"].as_str() {
                Some("admitted") => held.push((step, now + service(&mut rng, phase))),
                Some("queued") => {
                    cancelled_since_poll = false;
                    waiting.push(step);
                    settle(&exp, now, &mut rng, &mut held, &mut waiting, phase);
                }
                _ => {}
            }
        }
        count += 1;
        if count % 10 == 0 {
            let (_, exp) = sc.op(json!({"op": "check"}));
            count += 1;
            if exp["waiting"] == 0 && !cancelled_since_poll && rng.below(4) == 0 {
                shed_on = !shed_on;
                let lv = if shed_on { json!(levels - 1) } else { Value::Null };
                sc.op(json!({"op": "shed", "level": lv}));
                sc.op(json!({"op": "check"}));
                count += 2;
            }
        }
    }
    sc.done()
}

fn gate_edges() -> Value {
    let lim =
        limiter_cfg("fixed", json!({"initial_limit": 1.0, "min_limit": 1.0, "max_limit": 4.0}), 3);
    let cfg = gate_cfg(lim, json!({"queue_capacity": 2, "max_wait_ns": 50 * MS}));
    let mut sc = Sc::new("gate_edges", "gate", cfg);
    let mut held: Vec<u64> = Vec::new();
    let note = |held: &mut Vec<u64>, i: u64, e: &Value| {
        if e["result"] == "admitted" {
            held.push(i);
        }
        if let Some(evs) = e["events"].as_array() {
            for ev in evs {
                if ev["granted"] == true {
                    held.push(ev["ticket"].as_u64().expect("ticket"));
                }
            }
        }
    };
    // Equal timestamps: one admitted, two waiters, then a critical arrival evicts one.
    for (lv, timeout) in
        [(1, json!(null)), (2, json!(null)), (1, json!(SEC)), (0, json!(null)), (2, json!(null))]
    {
        let (i, e) = sc.op(json!({"op": "arrive", "now": T0, "level": lv, "timeout": timeout}));
        note(&mut held, i, &e);
    }
    sc.op(json!({"op": "check"}));
    // Time going backwards on a release, then forwards past max_wait.
    let mut k = 0;
    for now in [T0 - SEC, T0 + 100 * MS, 0, T0 + 200 * MS, u64::MAX / 2] {
        if let Some(p) = held.pop() {
            let outcome = if k % 2 == 0 { "success" } else { "dropped" };
            let (i, e) =
                sc.op(json!({"op": "release", "now": now, "permit": p, "outcome": outcome}));
            note(&mut held, i, &e);
            k += 1;
        }
        let (i, e) = sc.op(json!({"op": "arrive", "now": now, "level": k % 3, "timeout": 1}));
        note(&mut held, i, &e);
        sc.op(json!({"op": "check"}));
    }
    while let Some(p) = held.pop() {
        let (i, e) = sc.op(json!({"op": "release", "now": u64::MAX / 2, "permit": p,
                                  "outcome": "ignored"}));
        note(&mut held, i, &e);
    }
    let e = sc.op(json!({"op": "check"})).1;
    if e["waiting"] == 0 {
        sc.op(json!({"op": "shed", "level": 0}));
        sc.op(json!({"op": "arrive", "now": u64::MAX / 2, "level": 0, "timeout": null}));
        sc.op(json!({"op": "check"}));
        sc.op(json!({"op": "shed", "level": null}));
        sc.op(json!({"op": "static", "limit": 2.0}));
        sc.op(json!({"op": "check"}));
    }
    sc.done()
}

fn budget(name: &str, ttl: u64, min_rps: u64, pct: f64, seed: u64, n: usize) -> Value {
    let cfg = json!({"ttl_ns": ttl, "min_retries_per_sec": min_rps, "percent_can_retry": pct});
    let mut sc = Sc::new(name, "retry_budget", cfg);
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    for i in 0..n {
        // Mostly forward; bursts at one instant; a pause longer than the ttl; a step back.
        now = match rng.below(50) {
            0 => now + ttl + SEC,
            1 => now.saturating_sub(SEC),
            2..=10 => now,
            _ => now + rng.below(20 * MS),
        };
        let r = rng.below(100);
        let phase_retry = if (i / 150) % 2 == 1 { 60 } else { 20 };
        if r < phase_retry {
            sc.op(json!({"op": "withdraw", "now": now}));
        } else if r < 95 {
            sc.op(json!({"op": "deposit", "now": now}));
        } else {
            sc.op(json!({"op": "available", "now": now}));
        }
        if i % 25 == 24 {
            sc.op(json!({"op": "check"}));
        }
    }
    sc.done()
}

fn token(name: &str, max: f64, ratio: f64, seed: u64, n: usize) -> Value {
    let mut sc = Sc::new(name, "token_throttle", json!({"max_tokens": max, "token_ratio": ratio}));
    let mut rng = SplitMix64::new(seed);
    for i in 0..n {
        let fail_pct = if (i / 100) % 2 == 1 { 80 } else { 15 };
        match rng.below(10) {
            0..=5 => {
                sc.op(json!({"op": "record", "success": rng.below(100) >= fail_pct}));
            }
            6..=8 => {
                sc.op(json!({"op": "retry"}));
            }
            _ => {
                sc.op(json!({"op": "check"}));
            }
        }
    }
    sc.done()
}

fn adaptive(name: &str, k: f64, window: u64, cap: f64, form: &str, seed: u64, n: usize) -> Value {
    let cfg = json!({"k": k, "window_ns": window, "max_drop_probability": cap, "form": form,
                     "seed": seed});
    let mut sc = Sc::new(name, "adaptive_throttle", cfg);
    let mut rng = SplitMix64::new(seed ^ 0xA5A5);
    // The throttle's own random stream: the bindings draw from SplitMix64(seed), one word
    // per decision; C gets the word in `rand`.
    let mut draws = SplitMix64::new(seed);
    let mut now = T0;
    for i in 0..n {
        now += rng.below(window / 100);
        let accept_pct = match (i * 3 / n).min(2) {
            1 => 10,
            _ => 95,
        };
        match rng.below(10) {
            0..=5 => {
                sc.op(json!({"op": "record", "now": now, "accepted": rng.below(100) < accept_pct}));
            }
            6..=8 => {
                sc.op(json!({"op": "throttle", "now": now, "rand": draws.next_u64()}));
            }
            _ => {
                sc.op(json!({"op": "probability", "now": now}));
                sc.op(json!({"op": "check"}));
            }
        }
    }
    sc.done()
}

fn backoff(name: &str, base: u64, mult: f64, cap: u64, jitter: &str, seed: u64, n: usize) -> Value {
    let cfg = json!({"base_ns": base, "multiplier": mult, "cap_ns": cap, "jitter": jitter,
                     "seed": seed});
    let mut sc = Sc::new(name, "backoff", cfg);
    let mut rng = SplitMix64::new(seed ^ 0x5A5A);
    let mut attempt = 1u64;
    for _ in 0..n {
        match rng.below(20) {
            0 => {
                sc.op(json!({"op": "reset"}));
                attempt = 1;
            }
            1 => {
                sc.op(json!({"op": "ceiling", "attempt": rng.below(80)}));
            }
            2..=4 => {
                let hint = rng.below(3 * cap / 1000) * 1000;
                sc.op(json!({"op": "delay", "attempt": attempt, "hint": hint}));
                attempt += 1;
            }
            _ => {
                sc.op(json!({"op": "delay", "attempt": attempt, "hint": null}));
                attempt += 1;
            }
        }
        if attempt > 40 {
            attempt = 1;
            sc.op(json!({"op": "reset"}));
        }
    }
    sc.done()
}

fn breaker(name: &str, cfg: Value, seed: u64, n: usize) -> Value {
    let mut sc = Sc::new(name, "breaker", cfg);
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    let mut held: Vec<(u64, u64)> = Vec::new();
    for i in 0..n {
        now += rng.below(40 * MS);
        if rng.below(300) == 0 {
            now += 30 * SEC; // past the open period
        }
        // Health of the dependency: good, failing, recovering.
        let fail_pct = match (i / 200) % 3 {
            1 => 70,
            _ => 5,
        };
        if !held.is_empty() && rng.below(2) == 0 {
            let k = rng.below(held.len() as u64) as usize;
            let (p, at) = held.swap_remove(k);
            let latency = now.saturating_sub(at);
            let r = rng.below(100);
            let outcome = if r < 3 {
                "ignored"
            } else if r < fail_pct {
                "dropped"
            } else {
                "success"
            };
            sc.op(json!({"op": "record", "now": now, "permit": p, "outcome": outcome,
                         "latency": latency}));
        } else {
            let (s, e) = sc.op(json!({"op": "acquire", "now": now}));
            if e["ok"] == true {
                held.push((s, now));
            }
        }
        if i % 15 == 14 {
            sc.op(json!({"op": "state", "now": now}));
            sc.op(json!({"op": "check", "now": now}));
        }
    }
    sc.done()
}

fn breaker_cfg(extra: Value) -> Value {
    let mut c = json!({
        "window": "count", "window_calls": 20, "window_ns": 60 * SEC,
        "failure_rate_threshold": 0.5, "slow_call_rate_threshold": 1.0,
        "slow_call_ns": 60 * SEC, "minimum_calls": 10, "open_ns": 2 * SEC, "open_jitter": 0.2,
        "half_open_probes": 3, "probe_lease_ns": 10 * SEC, "ramp_ns": 3 * SEC, "seed": 11,
    });
    for (k, v) in extra.as_object().expect("extra") {
        c[k] = v.clone();
    }
    c
}

fn rate(name: &str, per_second: f64, burst: u64, seed: u64, n: usize) -> Value {
    let mut sc = Sc::new(name, "rate_limiter", json!({"per_second": per_second, "burst": burst}));
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    let emission = (1e9 / per_second) as u64;
    for _ in 0..n {
        now = match rng.below(40) {
            0 => now.saturating_sub(emission * 3),
            1..=8 => now,
            _ => now + rng.below(emission * 2),
        };
        match rng.below(10) {
            0..=5 => {
                sc.op(json!({"op": "check", "now": now, "cost": 1 + rng.below(burst.min(4))}));
            }
            6 => {
                sc.op(json!({"op": "check", "now": now, "cost": burst + 1}));
            }
            7 => {
                sc.op(json!({"op": "take_up_to", "now": now, "max": rng.below(burst + 2)}));
            }
            8 => {
                sc.op(json!({"op": "available", "now": now}));
                sc.op(json!({"op": "wait", "now": now, "cost": 1 + rng.below(burst)}));
            }
            _ => {
                sc.op(json!({"op": "metrics"}));
            }
        }
    }
    sc.done()
}

/// Every scenario, in a fixed order.
pub fn all() -> Vec<Value> {
    let mut v = Vec::new();
    for (i, (name, algorithm, algo)) in algos().into_iter().enumerate() {
        let levels = if i % 3 == 2 { 1 } else { 3 };
        v.push(limiter_walk(
            &format!("limiter_{name}"),
            algorithm,
            algo,
            levels,
            100 + i as u64,
            700,
        ));
    }
    v.push(limiter_edges());
    let fixed2 =
        limiter_cfg("fixed", json!({"initial_limit": 4.0, "min_limit": 1.0, "max_limit": 8.0}), 3);
    let aimd = limiter_cfg(
        "aimd",
        json!({"initial_limit": 6.0, "min_limit": 2.0, "max_limit": 30.0,
               "target_latency_ns": 20 * MS, "backoff_ratio": 0.8, "timeout_ns": 200 * MS,
               "slow_start": false, "netflix_parity": false}),
        3,
    );
    let grad = limiter_cfg(
        "gradient",
        json!({"initial_limit": 6.0, "min_limit": 2.0, "max_limit": 30.0,
               "smoothing": 1.0, "buffer": 0.25, "slow_start": false}),
        2,
    );
    v.push(gate_walk("gate_codel_lifo", gate_cfg(fixed2.clone(), json!({})), 1, 900, 3));
    v.push(gate_walk(
        "gate_fifo_deadlines",
        gate_cfg(fixed2.clone(), json!({"lifo": "never", "codel": false, "queue_capacity": 8})),
        2,
        700,
        3,
    ));
    v.push(gate_walk(
        "gate_rfc8289_occupancy",
        gate_cfg(
            aimd.clone(),
            json!({"codel_mode": "rfc8289", "lifo": 0.5, "queue_capacity": 16,
                                      "codel_target_ns": 10 * MS, "codel_interval_ns": 50 * MS}),
        ),
        3,
        700,
        3,
    ));
    v.push(gate_walk(
        "gate_aging_max_wait",
        gate_cfg(
            grad,
            json!({"aging": {"from": 0, "to": 1, "after_ns": 30 * MS},
                              "max_wait_ns": 80 * MS, "initial_service_ns": 10 * MS,
                              "queue_capacity": 12}),
        ),
        4,
        700,
        2,
    ));
    v.push(gate_walk(
        "gate_eviction_small_queue",
        gate_cfg(
            fixed2,
            json!({"queue_capacity": 3, "service_alpha": 0.5,
                                "fallback_retry_after_ns": 250 * MS}),
        ),
        5,
        600,
        3,
    ));
    v.push(gate_edges());
    v.push(budget("retry_budget_default", 10 * SEC, 10, 0.1, 21, 600));
    v.push(budget("retry_budget_finagle", 10 * SEC, 10, 0.2, 22, 500));
    v.push(budget("retry_budget_no_reserve", SEC, 0, 0.5, 23, 400));
    v.push(budget("retry_budget_edges", 60 * SEC, 1_000_000, 1000.0, 24, 300));
    v.push(token("token_throttle_default", 10.0, 0.1, 31, 500));
    v.push(token("token_throttle_small", 1.5, 0.5, 32, 300));
    v.push(token("token_throttle_ratio_max", 1000.0, 1000.0, 33, 200));
    v.push(adaptive("adaptive_ring", 2.0, 10 * SEC, 0.75, "ring", 41, 700));
    v.push(adaptive("adaptive_ema", 1.5, 5 * SEC, 1.0, "ema", 42, 600));
    v.push(adaptive("adaptive_k1_cap0", 1.0, SEC, 0.0, "ring", 43, 200));
    v.push(backoff("backoff_full", 100 * MS, 2.0, SEC, "full", 51, 300));
    v.push(backoff("backoff_equal", 10 * MS, 1.5, 2 * SEC, "equal", 52, 300));
    v.push(backoff("backoff_decorrelated", 50 * MS, 3.0, 5 * SEC, "decorrelated", 53, 300));
    v.push(backoff("backoff_none_edges", 1_000, 100.0, 86_400 * SEC, "none", 54, 200));
    v.push(breaker("breaker_count", breaker_cfg(json!({})), 61, 1000));
    v.push(breaker(
        "breaker_time_slow",
        breaker_cfg(json!({"window": "time", "window_ns": 5 * SEC, "slow_call_ns": 30 * MS,
                           "slow_call_rate_threshold": 0.6, "ramp_ns": 0, "open_jitter": 0.0})),
        62,
        800,
    ));
    v.push(breaker(
        "breaker_one_probe_lease",
        breaker_cfg(json!({"half_open_probes": 1, "probe_lease_ns": MS, "minimum_calls": 1,
                           "window_calls": 1, "open_ns": MS, "open_jitter": 1.0})),
        63,
        500,
    ));
    v.push(rate("rate_100_10", 100.0, 10, 71, 600));
    v.push(rate("rate_fractional", 0.5, 1, 72, 200));
    v.push(rate("rate_fast_burst", 1e6, 1000, 73, 400));
    v
}
