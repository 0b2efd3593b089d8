//! The scenarios: configs and operation sequences, built by seeded random walks (the
//! generator's own `SplitMix64`, so the output is the same on every run) and a few
//! hand-written edge cases. Each step is run through the core as it is built and its
//! answer recorded.

use serde_json::{json, Map, Value};
use surgeguard_core::rng::SplitMix64;

use crate::Runner;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const US: u64 = 1_000;
/// Scenario clocks start here (an arbitrary non-zero origin).
const T0: u64 = 1_000 * SEC;
/// The largest `now` any structure accepts (2^62 ns); larger values are bad input, which
/// every binding refuses before the core sees them, so no scenario uses one.
const MAX_NOW: u64 = surgeguard_core::time::MAX_NOW;
/// Huge but accepted times: ten seconds before [`MAX_NOW`].
const NEAR_END: u64 = MAX_NOW - 10 * SEC;

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
            .unwrap_or_else(|e| panic!("scenario {} step {idx} {args}: {e}", self.name));
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
/// The held permit due first: `(index, due time)`, or `(0, u64::MAX)` when none is held.
fn next_due(held: &[(u64, u64)]) -> (usize, u64) {
    held.iter().enumerate().min_by_key(|(_, h)| h.1).map(|(i, h)| (i, h.1)).unwrap_or((0, u64::MAX))
}

/// One draw of `rng.below(100)`: below `ignored` → "ignored", below `dropped` → "dropped",
/// else "success".
fn random_outcome(rng: &mut SplitMix64, ignored: u64, dropped: u64) -> &'static str {
    let r = rng.below(100);
    if r < ignored {
        "ignored"
    } else if r < dropped {
        "dropped"
    } else {
        "success"
    }
}

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
        let (i, due) = next_due(&held);
        if due <= next_arrival {
            let (step, _) = held.swap_remove(i);
            now = now.max(due);
            let outcome = random_outcome(&mut rng, 4, 10);
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
    for (now, lv) in [(0, 0), (0, 1), (0, 2), (0, 0), (5, 1), (3, 1), (NEAR_END, 0)] {
        let (i, e) = sc.op(json!({"op": "acquire", "now": now, "level": lv}));
        if e["ok"] == true {
            held.push(i);
        }
        sc.op(json!({"op": "check"}));
    }
    for (k, p) in held.drain(..).enumerate() {
        let now = if k % 2 == 0 { 1 } else { NEAR_END };
        sc.op(json!({"op": "release", "now": now, "permit": p, "outcome": "success"}));
        sc.op(json!({"op": "check"}));
    }
    sc.op(json!({"op": "static", "limit": 0.000001}));
    for lv in 0..3 {
        sc.op(json!({"op": "acquire", "now": NEAR_END, "level": lv}));
    }
    sc.op(json!({"op": "static", "limit": 2147483647.0}));
    for lv in 0..3 {
        let (i, e) = sc.op(json!({"op": "acquire", "now": NEAR_END, "level": lv}));
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
    gate_walk_dimmed(name, cfg, seed, n, levels, false)
}

/// [`gate_walk`], reading the brownout dimmer (`brownout` steps, not counted in `n`)
/// after every third step when `dimmer` is set.
fn gate_walk_dimmed(
    name: &str,
    cfg: Value,
    seed: u64,
    n: usize,
    levels: u64,
    dimmer: bool,
) -> Value {
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
        let (i, due) = next_due(&held);
        if due <= next_arrival {
            let (step, _) = held.swap_remove(i);
            now = now.max(due);
            let outcome = random_outcome(&mut rng, 5, 12);
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
        if dimmer && count % 3 == 0 {
            sc.op(json!({"op": "brownout", "now": now}));
        }
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
    for now in [T0 - SEC, T0 + 100 * MS, 0, T0 + 200 * MS, NEAR_END] {
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
        let (i, e) = sc.op(json!({"op": "release", "now": NEAR_END, "permit": p,
                                  "outcome": "ignored"}));
        note(&mut held, i, &e);
    }
    let e = sc.op(json!({"op": "check"})).1;
    if e["waiting"] == 0 {
        sc.op(json!({"op": "shed", "level": 0}));
        sc.op(json!({"op": "arrive", "now": NEAR_END, "level": 0, "timeout": null}));
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
                sc.op(json!({"op": "ceiling", "attempt": 1 + rng.below(79)}));
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
            let outcome = random_outcome(&mut rng, 3, fail_pct);
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
    v.extend(flow());
    v.extend(brownout());
    v.extend(deadlines());
    v
}

// ---- the brownout dimmer and deadline headers ----

/// The dimmer on random gate walks (the shed switch flips in them: full dimming), and on
/// an overload ramp: requests of a fixed service time arrive faster and faster, the
/// dimmer read after every step, until the gate has refused a few; then the load stops
/// and the dimmer falls back to 0.
fn brownout() -> Vec<Value> {
    let fixed =
        limiter_cfg("fixed", json!({"initial_limit": 4.0, "min_limit": 1.0, "max_limit": 8.0}), 3);
    let mut v = vec![
        gate_walk_dimmed(
            "gate_brownout_walk",
            gate_cfg(fixed.clone(), json!({})),
            131,
            700,
            3,
            true,
        ),
        gate_walk_dimmed(
            "gate_brownout_no_codel",
            gate_cfg(fixed.clone(), json!({"codel": false, "lifo": "never", "queue_capacity": 10})),
            132,
            500,
            2,
            true,
        ),
    ];
    let mut sc =
        Sc::new("gate_brownout_ramp", "gate", gate_cfg(fixed, json!({"queue_capacity": 20})));
    let service = 8 * MS;
    let mut now = T0;
    let mut gap = 6 * MS;
    let mut running: Vec<(u64, u64)> = Vec::new(); // (end, permit step)
    let mut refusals = 0;
    let mut first_refusal_dimmed = None;
    let mut dimmed = false;
    let grant = |exp: &Value, at: u64, running: &mut Vec<(u64, u64)>, refusals: &mut u32| {
        for e in exp["events"].as_array().into_iter().flatten() {
            if e["granted"] == true {
                running.push((at + service, e["ticket"].as_u64().expect("ticket")));
            } else {
                *refusals += 1;
            }
        }
    };
    while refusals < 6 {
        now += gap;
        gap = (gap * 97 / 100).max(MS / 2);
        running.sort_unstable();
        while running.first().is_some_and(|r| r.0 <= now) {
            let (end, step) = running.remove(0);
            let (_, exp) =
                sc.op(json!({"op": "release", "now": end, "permit": step, "outcome": "success"}));
            grant(&exp, end, &mut running, &mut refusals);
            let (_, d) = sc.op(json!({"op": "brownout", "now": end}));
            dimmed |= d["dimmer"].as_f64().expect("dimmer") > 0.0;
        }
        let (step, exp) = sc.op(json!({"op": "arrive", "now": now, "level": 1, "timeout": null}));
        match exp["result"].as_str() {
            Some("admitted") => running.push((now + service, step)),
            Some("queued") => grant(&exp, now, &mut running, &mut refusals),
            _ => refusals += 1,
        }
        if refusals > 0 && first_refusal_dimmed.is_none() {
            first_refusal_dimmed = Some(dimmed);
        }
        let (_, d) = sc.op(json!({"op": "brownout", "now": now}));
        dimmed |= d["dimmer"].as_f64().expect("dimmer") > 0.0;
    }
    assert_eq!(first_refusal_dimmed, Some(true), "the dimmer rose before the first refusal");
    sc.op(json!({"op": "check"}));
    // The load stops: everything completes, then the dimmer falls back.
    running.sort_unstable();
    while !running.is_empty() {
        let (end, step) = running.remove(0);
        let (_, exp) =
            sc.op(json!({"op": "release", "now": end, "permit": step, "outcome": "success"}));
        grant(&exp, end, &mut running, &mut refusals);
        running.sort_unstable();
    }
    for k in 0..12 {
        sc.op(json!({"op": "brownout", "now": now + k * 500 * MS}));
    }
    sc.op(json!({"op": "check"}));
    v.push(sc.done());
    v
}

/// Header values a parser meets: valid ones of every unit, every kind of bad one, random
/// bytes near the grammar, and lists (a header sent twice, its lines joined by commas).
fn deadline_values(rng: &mut SplitMix64) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "250m",
        "1S",
        "1H",
        "60M",
        "3601S",
        "2H",
        "99999999n",
        "99999999u",
        "123456789n",
        "0n",
        "0",
        "00000001S",
        " 7u\t",
        "1.5S",
        "1s",
        "+1S",
        "-1S",
        "-5",
        "",
        " ",
        "1e3",
        "3600000",
        "3600001",
        "18446744073709551616",
        "250",
        "1 S",
        "S",
        "-",
        "0x10",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.push(vec![0xff, 0xfe, b'S']);
    v.push("1\u{e9}S".as_bytes().to_vec());
    const ALPHABET: &[u8] = b"0123456789HMSmun -+.\t";
    for _ in 0..120 {
        let len = rng.below(11) as usize;
        let mut b: Vec<u8> =
            (0..len).map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize]).collect();
        if rng.below(2) == 0 {
            b = rng.below(10_000_000).to_string().into_bytes();
            if rng.below(2) == 0 {
                b.push(b"HMSmun"[rng.below(6) as usize]);
            }
        }
        v.push(b);
    }
    // A header sent twice and joined by a comma (RFC 9110 section 5.3; Node's http does
    // it): a list whose smallest valid item wins, else the first item's reason.
    for list in [
        "250, 100",
        "100,250",
        "2S, 250m",
        " 7u ,\t9m\t",
        "oops, 100",
        "1.5S,1S",
        "3600001,5",
        "100,",
        ",100",
        "0,100",
        "-5, oops",
        "oops,-5",
        "3600001, 3600002",
        "2H,3H",
        ",",
        " , ",
        "1,2,3",
    ] {
        v.push(list.as_bytes().to_vec());
    }
    v
}

fn deadlines() -> Vec<Value> {
    let names = [
        "grpc-timeout",
        "GRPC-Timeout",
        "x-envoy-expected-rq-timeout-ms",
        "surgeguard-timeout-ms",
        "x-my-deadline",
    ];
    let mut rng = SplitMix64::new(141);
    let mut sc = Sc::new("deadline_parse", "deadline", json!({}));
    for (i, value) in deadline_values(&mut rng).iter().enumerate() {
        let name = names[i % names.len()];
        sc.op(json!({"op": "parse", "name": name, "value_hex": crate::hex(value)}));
        // The same value under the other format.
        let other = if name.eq_ignore_ascii_case("grpc-timeout") { names[3] } else { names[0] };
        sc.op(json!({"op": "parse", "name": other, "value_hex": crate::hex(value)}));
    }
    let parse = sc.done();

    let mut sc = Sc::new("deadline_at_and_format", "deadline", json!({}));
    let mut rng = SplitMix64::new(142);
    for budget in [0, 1, MS, 250 * MS, 3_600 * SEC] {
        sc.op(json!({"op": "at", "now": T0, "budget": crosses(budget)}));
    }
    sc.op(json!({"op": "at", "now": NEAR_END, "budget": crosses(3_600 * SEC)}));
    sc.op(json!({"op": "at", "now": MAX_NOW, "budget": crosses(MS)}));
    // Edges: nothing left, less than a unit, exactly a unit, the cap, the end of time.
    for (deadline, now, margin) in [
        (T0, T0, 0),
        (T0, T0 + SEC, 0),
        (T0 + MS, T0, MS),
        (T0 + MS, T0, 0),
        (T0 + MS - 1, T0, 0),
        (T0 + 1, T0, 0),
        (T0 + 100 * MS, T0, 0),
        (T0 + 100 * SEC, T0, 0),
        (T0 + 2 * 3_600 * SEC, T0, 0),
        (MAX_NOW, 0, 0),
        (MAX_NOW, T0, 10 * MS),
    ] {
        for name in ["grpc-timeout", "surgeguard-timeout-ms"] {
            sc.op(json!({"op": "format", "name": name, "deadline": deadline, "now": now,
                         "margin": crosses(margin)}));
        }
    }
    for _ in 0..150 {
        let scale = [US, MS, SEC, 60 * SEC, 3_600 * SEC][rng.below(5) as usize];
        let budget = rng.below(3 * scale);
        let now = T0 + rng.below(1_000 * SEC);
        let margin = crosses([0, MS, 5 * MS, 20 * US][rng.below(4) as usize]);
        let name = names[rng.below(names.len() as u64) as usize];
        sc.op(json!({"op": "format", "name": name, "deadline": now + budget, "now": now,
                     "margin": margin}));
        sc.op(json!({"op": "at", "now": now, "budget": crosses(budget / US * US)}));
    }
    vec![parse, sc.done()]
}

// ---- pipeline backpressure: credits, lag meter, watermarks, paced drain ----

/// Asserts that a duration given *to* the bindings crosses them exactly: Python takes
/// seconds (`round(s · 1e9)`), Node milliseconds (`round(ms · 1e6)`), both from the ns
/// divided as a float. Scenario durations are chosen so that these give `ns` back.
fn crosses(ns: u64) -> u64 {
    let via_s = (ns as f64 / 1e9 * 1e9).round() as u64;
    let via_ms = (ns as f64 / 1e6 * 1e6).round() as u64;
    assert!(via_s == ns && via_ms == ns, "{ns} ns does not cross the bindings exactly");
    assert!(ns as f64 / 1e9 <= 1e9, "{ns} ns is beyond Python's 1e9 s bound on limits");
    ns
}

/// Largest integer every binding takes as a count (Node: `Number.MAX_SAFE_INTEGER`).
const MAX_SAFE: u64 = (1 << 53) - 1;

/// A producer and a consumer over a credit channel: the consumer replenishes at the
/// low-water mark, sometimes grants explicitly, completes buffered items (slowly in the
/// middle third, so the producer stalls), and now and then completes more than is
/// buffered (a usage error that must change nothing, shown by the `check` after it).
fn credits_walk(name: &str, capacity: u32, low_water: u32, seed: u64, n: usize) -> Value {
    let cfg = json!({"capacity": capacity, "low_water": low_water});
    let mut sc = Sc::new(name, "credits", cfg);
    let mut rng = SplitMix64::new(seed);
    let kmax = u64::from(capacity.min(8));
    // The model: the core's gauges, followed from the answers and checked at each `check`.
    let (mut avail, mut buffered, mut granted, mut taken) = (0u64, 0u64, 0u64, 0u64);
    let g = sc.op(json!({"op": "replenish"})).1["n"].as_u64().expect("n");
    avail += g;
    granted += g;
    while sc.steps.len() < n {
        let slow = sc.steps.len() * 3 / n == 1;
        match rng.below(20) {
            0..=6 => {
                let k = 1 + rng.below(kmax);
                if sc.op(json!({"op": "try_take", "k": k})).1["ok"] == true {
                    avail -= k;
                    buffered += k;
                    taken += k;
                }
            }
            7..=8 => {
                let k = rng.below(2 * kmax + 1);
                let got = sc.op(json!({"op": "take_up_to", "k": k})).1["n"].as_u64().expect("n");
                assert_eq!(got, k.min(avail));
                avail -= got;
                buffered += got;
                taken += got;
            }
            9..=12 if !slow || rng.below(4) == 0 => {
                let k = if buffered == 0 { 0 } else { 1 + rng.below(buffered) };
                assert_eq!(sc.op(json!({"op": "complete", "k": k})).1["ok"], true);
                buffered -= k;
            }
            13 => {
                let k = buffered + 1 + rng.below(3);
                let e = sc.op(json!({"op": "complete", "k": k})).1;
                assert_eq!(e["error"], "already_released");
                sc.op(json!({"op": "check"}));
            }
            14..=15 => {
                let g = sc.op(json!({"op": "replenish"})).1["n"].as_u64().expect("n");
                avail += g;
                granted += g;
            }
            16 => {
                let ask = rng.below(2 * u64::from(capacity));
                let g = sc.op(json!({"op": "grant", "n": ask})).1["n"].as_u64().expect("n");
                assert!(g <= ask);
                avail += g;
                granted += g;
            }
            17 => {
                sc.op(json!({"op": "grant_due"}));
            }
            18 => {
                let e = sc.op(json!({"op": "check"})).1;
                assert_eq!(
                    (e["available"].as_u64(), e["buffered"].as_u64()),
                    (Some(avail), Some(buffered))
                );
            }
            _ => {
                let e = sc.op(json!({"op": "metrics"})).1;
                assert_eq!(
                    (e["granted"].as_u64(), e["taken"].as_u64()),
                    (Some(granted), Some(taken))
                );
            }
        }
        // Credits never exceed the grant: nothing taken beyond what was granted, and
        // outstanding credit never above capacity.
        assert!(taken <= granted && avail + buffered <= u64::from(capacity), "{name}");
    }
    sc.op(json!({"op": "metrics"}));
    sc.done()
}

/// Edge values of credits: a capacity of 1, zero-sized takes and completes, the largest
/// capacity with `u32::MAX` requests, refusals while stalled.
fn credits_edges() -> Vec<Value> {
    let mut sc = Sc::new("credits_edges_one", "credits", json!({"capacity": 1, "low_water": 0}));
    for op in [
        json!({"op": "check"}),
        json!({"op": "try_take", "k": 1}),
        json!({"op": "take_up_to", "k": 1}),
        json!({"op": "try_take", "k": 0}),
        json!({"op": "take_up_to", "k": 0}),
        json!({"op": "complete", "k": 0}),
        json!({"op": "complete", "k": 1}),
        json!({"op": "grant_due"}),
        json!({"op": "replenish"}),
        json!({"op": "replenish"}),
        json!({"op": "grant", "n": 5}),
        json!({"op": "check"}),
        json!({"op": "try_take", "k": 2}),
        json!({"op": "try_take", "k": 1}),
        json!({"op": "try_take", "k": 1}),
        json!({"op": "grant_due"}),
        json!({"op": "check"}),
        json!({"op": "complete", "k": 2}),
        json!({"op": "check"}),
        json!({"op": "complete", "k": 1}),
        json!({"op": "complete", "k": 1}),
        json!({"op": "grant_due"}),
        json!({"op": "replenish"}),
        json!({"op": "metrics"}),
    ] {
        sc.op(op);
    }
    let one = sc.done();
    let max = u32::MAX;
    let cfg = json!({"capacity": max, "low_water": max - 1});
    let mut sc = Sc::new("credits_edges_max", "credits", cfg);
    for op in [
        json!({"op": "grant_due"}),
        json!({"op": "grant", "n": max}),
        json!({"op": "grant", "n": max}),
        json!({"op": "take_up_to", "k": max}),
        json!({"op": "check"}),
        json!({"op": "try_take", "k": 1}),
        json!({"op": "complete", "k": max}),
        json!({"op": "check"}),
        json!({"op": "complete", "k": 1}),
        json!({"op": "grant_due"}),
        json!({"op": "replenish"}),
        json!({"op": "try_take", "k": max}),
        json!({"op": "complete", "k": max - 1}),
        json!({"op": "grant", "n": 1}),
        json!({"op": "grant", "n": 2}),
        json!({"op": "check"}),
        json!({"op": "metrics"}),
    ] {
        sc.op(op);
    }
    vec![one, sc.done()]
}

/// How a lag-meter walk feeds the meter.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// `record_produced` / `record_consumed`.
    Increments,
    /// `observe_totals` (offsets), now and then a stale smaller pair (ignored).
    Totals,
}

/// The queries of a lag meter, one picked at random.
fn lag_query(sc: &mut Sc, rng: &mut SplitMix64, now: u64, limits: &[u64]) {
    match rng.below(9) {
        0 => sc.op(json!({"op": "lag", "now": now})),
        1 => sc.op(json!({"op": "produce_rate", "now": now})),
        2 => sc.op(json!({"op": "consume_rate", "now": now})),
        3 => sc.op(json!({"op": "lag_time", "now": now})),
        4 => sc.op(json!({"op": "time_to_drain", "now": now})),
        5 | 6 => {
            let limit = limits[rng.below(limits.len() as u64) as usize];
            sc.op(json!({"op": "time_to_drain_exceeds", "now": now, "limit": limit}))
        }
        7 => sc.op(json!({"op": "oldest_age", "now": now})),
        _ => sc.op(json!({"op": "metrics", "now": now})),
    };
}

/// A producer and a consumer measured by a lag meter: steady, an outage (nothing
/// consumed), a recovery with headroom, steady again; time mostly forward in sub-bucket
/// steps, sometimes standing, going back (clamped) or jumping past the whole window; the
/// oldest item's enqueue time reported from a FIFO of batches.
fn lag_walk(name: &str, bucket: u64, feed: Feed, per_bucket: u64, seed: u64, n: usize) -> Value {
    let cfg = json!({"bucket_ns": crosses(bucket), "snapshots": crate::LAG_SNAPSHOTS});
    let mut sc = Sc::new(name, "lag_meter", cfg);
    let mut rng = SplitMix64::new(seed);
    let limits: Vec<u64> =
        [0, bucket, 10 * bucket, 100 * bucket, 10_000 * bucket].into_iter().map(crosses).collect();
    let mut now = T0;
    let (mut produced, mut consumed) = (0u64, 0u64);
    let mut fifo: std::collections::VecDeque<(u64, u64)> = Default::default();
    while sc.steps.len() < n {
        let phase = sc.steps.len() * 4 / n;
        now = match rng.below(100) {
            0 => now.saturating_sub(bucket),
            1 => now + 70 * bucket,
            2..=9 => now,
            _ => now + rng.below(bucket),
        };
        let p = rng.below(per_bucket + 1);
        let capacity = match phase {
            1 => 0,
            2 => rng.below(per_bucket * 6 / 5 + 1) + per_bucket / 5,
            _ => rng.below(per_bucket + 1) + per_bucket / 20,
        };
        let c = capacity.min(produced + p - consumed);
        produced += p;
        consumed += c;
        if p > 0 {
            fifo.push_back((now, p));
        }
        let mut left = c;
        while left > 0 {
            let front = fifo.front_mut().expect("consumed no more than produced");
            let k = left.min(front.1);
            front.1 -= k;
            left -= k;
            if front.1 == 0 {
                fifo.pop_front();
            }
        }
        match feed {
            Feed::Increments => {
                sc.op(json!({"op": "record_produced", "now": now, "n": p}));
                if c > 0 || rng.below(4) == 0 {
                    sc.op(json!({"op": "record_consumed", "now": now, "n": c}));
                }
            }
            Feed::Totals => {
                if rng.below(30) == 0 {
                    let (sp, sc_) = (produced.saturating_sub(5), consumed.saturating_sub(3));
                    sc.op(json!({"op": "observe_totals", "now": now, "produced": sp,
                                 "consumed": sc_}));
                }
                sc.op(json!({"op": "observe_totals", "now": now, "produced": produced,
                             "consumed": consumed}));
            }
        }
        if rng.below(5) == 0 {
            let at = fifo.front().map(|f| f.0);
            sc.op(json!({"op": "report_oldest", "now": now, "enqueued_at": at}));
        }
        if rng.below(2) == 0 {
            lag_query(&mut sc, &mut rng, now, &limits);
        }
    }
    sc.op(json!({"op": "metrics", "now": now}));
    sc.done()
}

/// The recovery arithmetic of an outage through a lag meter fed with offsets once a minute:
/// 10 min steady at 1000/s, a 1 h outage (nothing consumed: 3.6 M items), then a consumer
/// with 20 % headroom (1200/s). Once the 1 h window holds only recovery minutes, the time
/// to drain is exactly `lag / 200/s`, and the backlog is gone exactly 5 h after recovery.
fn lag_outage_recovery() -> Value {
    let cfg = json!({"bucket_ns": crosses(SEC), "snapshots": crate::LAG_SNAPSHOTS});
    let mut sc = Sc::new("lag_meter_outage_recovery", "lag_meter", cfg);
    let four_hours = crosses(4 * 3600 * SEC);
    let (mut produced, mut consumed) = (0u64, 0u64);
    let recovery = 70; // minute the consumer comes back
    let mut drained_at = None;
    for minute in 1..=(recovery + 5 * 60 + 10) {
        let now = T0 + minute * 60 * SEC;
        produced += 60_000;
        consumed = match minute {
            m if m <= 10 => produced,
            m if m <= recovery => consumed,
            _ => (consumed + 72_000).min(produced),
        };
        sc.op(json!({"op": "observe_totals", "now": now, "produced": produced,
                     "consumed": consumed}));
        let lag = sc.op(json!({"op": "lag", "now": now})).1["lag"].as_u64().expect("lag");
        let ttd = sc.op(json!({"op": "time_to_drain", "now": now})).1["time_to_drain"].clone();
        // Each call's snapshot holds the totals of the call before it: the window is pure
        // recovery from 61 minutes after the consumer came back.
        if minute >= recovery + 61 && lag > 0 {
            assert_eq!(ttd, json!(lag / 200 * SEC), "minute {minute}");
        }
        if lag == 0 && minute > recovery && drained_at.is_none() {
            drained_at = Some(minute - recovery);
        }
        if minute % 5 == 0 {
            sc.op(json!({"op": "lag_time", "now": now}));
            sc.op(json!({"op": "time_to_drain_exceeds", "now": now, "limit": four_hours}));
        }
        if minute % 20 == 0 {
            sc.op(json!({"op": "metrics", "now": now}));
        }
    }
    assert_eq!(drained_at, Some(5 * 60), "20 % headroom: a 1 h backlog drains in 5 h");
    sc.done()
}

/// Edge values of a lag meter: time 0, the shortest bucket, rates not known yet, zero
/// counts, time going backwards, more consumed than produced, stale totals, an oldest item
/// enqueued in the future or at `MAX_NOW`, counts at 2^53 − 1, and huge `now` values up to
/// `MAX_NOW`.
fn lag_edges() -> Vec<Value> {
    let cfg = json!({"bucket_ns": crosses(US), "snapshots": crate::LAG_SNAPSHOTS});
    let mut sc = Sc::new("lag_meter_edges", "lag_meter", cfg);
    // After a jump to a huge `now`, the rates are tiny and `lag_time` / `time_to_drain`
    // saturate at u64::MAX ns, which C cannot tell from "none" (SG_NEVER): those two are
    // asked only at ordinary times (the metrics' float seconds still cover the huge ones).
    let queries = |sc: &mut Sc, now: u64| {
        for op in ["lag", "produce_rate", "consume_rate", "lag_time", "time_to_drain", "oldest_age"]
        {
            if now > MAX_NOW / 2 && (op == "lag_time" || op == "time_to_drain") {
                continue;
            }
            sc.op(json!({"op": op, "now": now}));
        }
        sc.op(json!({"op": "time_to_drain_exceeds", "now": now, "limit": 0}));
        sc.op(json!({"op": "time_to_drain_exceeds", "now": now, "limit": crosses(SEC)}));
        sc.op(json!({"op": "metrics", "now": now}));
    };
    queries(&mut sc, 0);
    sc.op(json!({"op": "record_produced", "now": 0, "n": 5}));
    queries(&mut sc, 0);
    sc.op(json!({"op": "record_consumed", "now": 500, "n": 0}));
    sc.op(json!({"op": "record_consumed", "now": 1000, "n": 2}));
    queries(&mut sc, 1000);
    sc.op(json!({"op": "record_consumed", "now": 10, "n": 1}));
    sc.op(json!({"op": "report_oldest", "now": 10, "enqueued_at": 400}));
    queries(&mut sc, 2000);
    sc.op(json!({"op": "report_oldest", "now": 2500, "enqueued_at": MAX_NOW}));
    sc.op(json!({"op": "oldest_age", "now": 2600}));
    sc.op(json!({"op": "report_oldest", "now": 2700, "enqueued_at": 2700}));
    sc.op(json!({"op": "oldest_age", "now": 2700}));
    sc.op(json!({"op": "report_oldest", "now": 2800, "enqueued_at": null}));
    sc.op(json!({"op": "oldest_age", "now": 2900}));
    sc.op(json!({"op": "record_consumed", "now": 3000, "n": 10}));
    queries(&mut sc, 3000);
    sc.op(json!({"op": "observe_totals", "now": 4000, "produced": 1, "consumed": 1}));
    queries(&mut sc, 5000);
    sc.op(json!({"op": "observe_totals", "now": 6000, "produced": MAX_SAFE,
                 "consumed": MAX_SAFE - 12_345}));
    queries(&mut sc, 7000);
    sc.op(json!({"op": "record_consumed", "now": 8000, "n": u64::from(u32::MAX)}));
    queries(&mut sc, 9000);
    for now in [NEAR_END, NEAR_END + 1000, 0, NEAR_END + 2000] {
        sc.op(json!({"op": "record_consumed", "now": now, "n": 1000}));
        queries(&mut sc, now);
    }
    sc.op(json!({"op": "report_oldest", "now": NEAR_END, "enqueued_at": 1000}));
    queries(&mut sc, NEAR_END + 3000);
    // Counts beyond u32 (every binding takes u64 counts up to 2^53).
    sc.op(json!({"op": "record_produced", "now": NEAR_END + 4000, "n": 1u64 << 40}));
    sc.op(json!({"op": "record_consumed", "now": NEAR_END + 4000, "n": 1u64 << 40}));
    queries(&mut sc, NEAR_END + 4000);
    // The largest `now`, more times than there are snapshots: the window must keep
    // spanning time (no second snapshot is taken at one instant), so the rates stay
    // finite.
    let snaps = crate::LAG_SNAPSHOTS as u64;
    for i in 0..snaps + 9 {
        sc.op(json!({"op": "record_produced", "now": MAX_NOW, "n": 1}));
        if i % 10 == 0 || i + 2 >= snaps {
            queries(&mut sc, MAX_NOW);
        }
    }
    let first = sc.done();

    // The longest bucket (1 day): rates over 60 days, folds only at day boundaries.
    let day = 86_400 * SEC;
    let cfg = json!({"bucket_ns": crosses(day), "snapshots": crate::LAG_SNAPSHOTS});
    let mut sc = Sc::new("lag_meter_day_buckets", "lag_meter", cfg);
    let mut now = T0;
    for i in 0..40u64 {
        sc.op(json!({"op": "record_produced", "now": now, "n": 1000 + i}));
        sc.op(json!({"op": "record_consumed", "now": now, "n": 900 + 2 * i}));
        if i % 3 == 0 {
            queries(&mut sc, now);
        }
        now += day / 2 + i * 3600 * SEC;
    }
    vec![first, sc.done()]
}

/// A level under watermarks: it fills, saws, drains (phases), with time mostly forward
/// and sometimes back (clamped).
fn watermarks_walk(
    name: &str,
    capacity: u64,
    pause: u64,
    resume: u64,
    seed: u64,
    n: usize,
) -> Value {
    let cfg = json!({"capacity": capacity, "pause_below": pause, "resume_above": resume});
    let mut sc = Sc::new(name, "watermarks", cfg);
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    let mut level: u64 = 0;
    let step = (capacity / 20).max(1);
    while sc.steps.len() < n {
        let phase = (sc.steps.len() * 15 / n) % 3;
        now = match rng.below(50) {
            0 => now.saturating_sub(SEC),
            1 => now,
            _ => now + rng.below(50 * MS),
        };
        let up = rng.below(2 * step + 1);
        let down = rng.below(2 * step + 1);
        level = match phase {
            0 => (level + up + step / 2).saturating_sub(down),
            1 => (level + up).saturating_sub(down),
            _ => (level + up).saturating_sub(down + step / 2),
        }
        .min(capacity + capacity / 10);
        match rng.below(10) {
            0 => {
                sc.op(json!({"op": "is_paused"}));
            }
            1 => {
                sc.op(json!({"op": "metrics", "now": now}));
            }
            _ => {
                sc.op(json!({"op": "observe", "now": now, "level": level}));
            }
        }
    }
    sc.op(json!({"op": "metrics", "now": now}));
    sc.done()
}

/// The hysteresis band: a level sawing inside it never flaps, paused or running; the
/// marks themselves do not trigger; a level above capacity; time going back during a
/// pause; huge `now` values up to `MAX_NOW`.
fn watermarks_edges() -> Vec<Value> {
    // A Kafka consumer: 400 in flight, pause below 100 free, resume above 200 free.
    let cfg = json!({"capacity": 400, "pause_below": 100, "resume_above": 200});
    let mut sc = Sc::new("watermarks_sawtooth", "watermarks", cfg);
    let mut now = T0;
    let observe = |sc: &mut Sc, now: u64, level: u64| -> Value {
        sc.op(json!({"op": "observe", "now": now, "level": level})).1["transition"].clone()
    };
    for level in (0..=300).step_by(10) {
        now += 10 * MS;
        assert_eq!(observe(&mut sc, now, level), Value::Null); // free ≥ 100: running
    }
    now += 10 * MS;
    assert_eq!(observe(&mut sc, now, 301), json!("pause"));
    sc.op(json!({"op": "metrics", "now": now}));
    // Paused, the level saws between 200 and 300 (free 100..=200): never resumes.
    for i in 0..150u64 {
        now += 7 * MS;
        let level = 200 + (i * 37) % 101;
        assert_eq!(observe(&mut sc, now, level), Value::Null, "paused sawtooth {level}");
        if i % 25 == 0 {
            sc.op(json!({"op": "is_paused"}));
            sc.op(json!({"op": "metrics", "now": now}));
        }
    }
    now += 7 * MS;
    assert_eq!(observe(&mut sc, now, 199), json!("resume"));
    // Running, the same sawtooth: never pauses.
    for i in 0..150u64 {
        now += 7 * MS;
        let level = 200 + (i * 53) % 101;
        assert_eq!(observe(&mut sc, now, level), Value::Null, "running sawtooth {level}");
        if i % 25 == 0 {
            sc.op(json!({"op": "metrics", "now": now}));
        }
    }
    // Above capacity (free saturates at 0), time going back while paused, the metrics at
    // an earlier `now` (clamped).
    now += MS;
    assert_eq!(observe(&mut sc, now, 1_000), json!("pause"));
    observe(&mut sc, now - SEC, 5_000);
    sc.op(json!({"op": "metrics", "now": now - 2 * SEC}));
    sc.op(json!({"op": "metrics", "now": now + SEC}));
    observe(&mut sc, 0, 0);
    sc.op(json!({"op": "metrics", "now": now + 2 * SEC}));
    // Huge times: a pause at NEAR_END, metrics and a resume at MAX_NOW.
    observe(&mut sc, NEAR_END, 400);
    sc.op(json!({"op": "metrics", "now": NEAR_END + SEC}));
    sc.op(json!({"op": "metrics", "now": MAX_NOW}));
    observe(&mut sc, MAX_NOW, 0);
    sc.op(json!({"op": "is_paused"}));
    sc.op(json!({"op": "metrics", "now": MAX_NOW}));
    observe(&mut sc, MAX_NOW, 400);
    sc.op(json!({"op": "metrics", "now": MAX_NOW}));
    let saw = sc.done();

    // The largest capacity every binding takes (2^53 − 1), levels around the marks.
    let (cap, pause, resume) = (MAX_SAFE, 1u64 << 50, 1u64 << 52);
    let cfg = json!({"capacity": cap, "pause_below": pause, "resume_above": resume});
    let mut sc = Sc::new("watermarks_edges_big", "watermarks", cfg);
    let mut now = T0;
    for level in [0, cap - pause, cap - pause + 1, cap, cap - resume, cap - resume - 1, MAX_SAFE, 0]
    {
        now += SEC;
        sc.op(json!({"op": "observe", "now": now, "level": level}));
        sc.op(json!({"op": "metrics", "now": now}));
    }
    vec![saw, sc.done()]
}

/// A worker draining a backlog after an outage: it polls when its timer (`next_permit_in`)
/// fires or at random, new work keeps arriving at half the drain rate, and now and then a
/// new outage piles up more; time sometimes stands or goes back.
fn drain_walk(name: &str, target: f64, headroom: f64, burst: u64, seed: u64, n: usize) -> Value {
    let cfg = json!({"target_per_sec": target, "headroom": headroom, "burst": burst});
    let mut sc = Sc::new(name, "paced_drain", cfg);
    let mut rng = SplitMix64::new(seed);
    let drain = sc.op(json!({"op": "metrics"})).1["drain_per_sec"].as_f64().expect("rate");
    let emission = (1e9 / drain).round() as u64;
    let arrivals = drain / 2.0;
    let mut now = T0;
    let mut backlog: u64 = 50 * burst + 17;
    while sc.steps.len() < n {
        let before = now;
        now = match rng.below(20) {
            0 => now.saturating_sub(emission * 3),
            1..=3 => now,
            4..=11 => {
                let w = sc.op(json!({"op": "next_permit_in", "now": now})).1["wait"]
                    .as_u64()
                    .expect("wait");
                now + w.max(1)
            }
            _ => now + rng.below(emission * burst + 1),
        };
        let dt = now.saturating_sub(before) as f64 / 1e9;
        backlog += (dt * arrivals * (rng.below(200) as f64 / 100.0)) as u64;
        if rng.below(300) == 0 {
            backlog += 20 * burst; // another outage
        }
        let got = sc.op(json!({"op": "permits", "now": now, "backlog": backlog})).1["n"]
            .as_u64()
            .expect("n");
        assert!(got <= backlog.min(burst));
        backlog -= got;
        match rng.below(12) {
            0 => {
                let produce = [0.0, arrivals, drain, drain * 1.5][rng.below(4) as usize];
                sc.op(json!({"op": "time_to_drain", "backlog": backlog,
                             "produce_per_sec": produce}));
            }
            1 => {
                sc.op(json!({"op": "metrics"}));
            }
            _ => {}
        }
    }
    sc.op(json!({"op": "metrics"}));
    sc.done()
}

/// A paced drain keeps its rate: polled every 10 ms for 5 s with a backlog it never
/// empties, it starts exactly its burst plus 800/s (1000/s less 20 % headroom).
fn drain_at_rate() -> Value {
    let cfg = json!({"target_per_sec": 1000.0, "headroom": 0.2, "burst": 80});
    let mut sc = Sc::new("paced_drain_at_rate", "paced_drain", cfg);
    let mut started = 0;
    for i in 0..=500u64 {
        let now = T0 + i * 10 * MS;
        let n = sc.op(json!({"op": "permits", "now": now, "backlog": 1_000_000}));
        started += n.1["n"].as_u64().expect("n");
        // GCRA: the burst at once, then one per 1.25 ms.
        assert_eq!(started, 80 + i * 10 * MS / 1_250_000, "after {i} polls");
        if i % 50 == 0 {
            sc.op(json!({"op": "next_permit_in", "now": now}));
            sc.op(json!({"op": "metrics"}));
        }
    }
    sc.done()
}

/// Edge values of a paced drain: a zero backlog, the largest backlog (2^53 − 1), time
/// going back, huge `now`, the smallest and largest rates, drain times that never end.
fn drain_edges() -> Vec<Value> {
    let mut out = Vec::new();
    for (name, target, headroom, burst) in [
        ("paced_drain_edges", 1000.0, 0.2, 80u64),
        ("paced_drain_edges_slowest", 1e-6, 0.0, 1),
        ("paced_drain_edges_fastest", 1e9, 0.5, 1_000_000_000),
    ] {
        let cfg = json!({"target_per_sec": target, "headroom": headroom, "burst": burst});
        let mut sc = Sc::new(name, "paced_drain", cfg);
        let drain = sc.op(json!({"op": "metrics"})).1["drain_per_sec"].as_f64().expect("rate");
        for (now, backlog) in [
            (0, 0),
            (0, 1),
            (0, MAX_SAFE),
            (T0, 0),
            (T0, 3),
            (T0, MAX_SAFE),
            (T0 - SEC, MAX_SAFE),
            (T0 + SEC, MAX_SAFE),
            (T0 + 2 * SEC, 1),
            (NEAR_END, MAX_SAFE),
            (NEAR_END, MAX_SAFE),
            (NEAR_END - 1, 5),
            (MAX_NOW, MAX_SAFE),
            (MAX_NOW, 0),
        ] {
            sc.op(json!({"op": "permits", "now": now, "backlog": backlog}));
            sc.op(json!({"op": "next_permit_in", "now": now}));
        }
        for backlog in [0, 1, 3_600_000, MAX_SAFE] {
            for produce in [0.0, drain / 4.0, drain * 0.999, drain, drain * 2.0] {
                sc.op(json!({"op": "time_to_drain", "backlog": backlog,
                             "produce_per_sec": produce}));
            }
        }
        sc.op(json!({"op": "metrics"}));
        out.push(sc.done());
    }
    out
}

/// Keys of the keyed scenarios: plain tenants, one noisy key, a non-ASCII key (its UTF-8
/// bytes are hashed), keys of 0, 8 and more than 16 bytes.
const TENANTS: [&str; 6] =
    ["tenant-0", "tenant-1", "tenant-2", "tenant-3", "agent-é", "api-key-0123456789abcdef"];

fn keyed_cfg(
    shards: u64,
    per_key: u64,
    limit: u64,
    retry: u64,
    seed: u64,
    rate: Value,
    burst: u64,
) -> Value {
    json!({"shards": shards, "shards_per_key": per_key, "shard_limit": limit,
           "limit_retry_after_ns": crosses(retry), "seed": seed, "rate_per_second": rate,
           "rate_burst": burst})
}

/// Tenants sharing a shuffle-sharded table with a noisy key: arrivals with random cost
/// (sometimes above the rate's burst), completions at their due time (the noisy key's
/// are slow), hashes, shard sets, refusals recorded from elsewhere, snapshots.
fn keyed_walk(name: &str, cfg: Value, seed: u64, n: usize) -> Value {
    let burst = cfg["rate_burst"].as_u64().expect("burst");
    let mut sc = Sc::new(name, "keyed", cfg);
    let mut rng = SplitMix64::new(seed);
    let mut now = T0;
    let mut held: Vec<(u64, u64)> = Vec::new();
    for key in TENANTS.iter().chain(&["noisy", ""]) {
        sc.op(json!({"op": "hash", "key": key}));
        sc.op(json!({"op": "shards_of", "key": key}));
    }
    while sc.steps.len() < n {
        now = match rng.below(50) {
            0 => now.saturating_sub(100 * MS),
            1..=5 => now,
            _ => now + rng.below(5 * MS),
        };
        if let Some(i) = held.iter().position(|h| h.1 <= now) {
            let (p, _) = held.swap_remove(i);
            sc.op(json!({"op": "release", "permit": p}));
        }
        let noisy = rng.below(10) < 4;
        let key = if noisy { "noisy" } else { TENANTS[rng.below(TENANTS.len() as u64) as usize] };
        let cost = match rng.below(20) {
            0 => burst + 1,
            1 => 0,
            _ => 1 + rng.below(burst.min(2)),
        };
        let (i, e) = sc.op(json!({"op": "acquire", "now": now, "key": key, "cost": cost}));
        if e["ok"] == true {
            let service = if noisy { 200 * MS } else { 5 * MS + rng.below(20 * MS) };
            held.push((i, now + service));
        }
        match rng.below(30) {
            0 => {
                sc.op(json!({"op": "record_rejection", "key": key}));
            }
            1 | 2 => {
                sc.op(json!({"op": "metrics"}));
            }
            3 => {
                sc.op(json!({"op": "shards_of", "key": key}));
            }
            _ => {}
        }
    }
    for (p, _) in held {
        sc.op(json!({"op": "release", "permit": p}));
    }
    sc.op(json!({"op": "metrics"}));
    sc.done()
}

/// Edge values of a keyed table: the largest seed every binding takes (2^53 − 1), a key
/// filling all its shards, time 0, going back and huge, cost 0 and above the burst.
fn keyed_edges() -> Value {
    let cfg = keyed_cfg(16, 8, 1, 3600 * SEC, MAX_SAFE, json!(1e-6), 1);
    let mut sc = Sc::new("keyed_edges", "keyed", cfg);
    let mut held = Vec::new();
    for key in ["", "x", "12345678", "123456789", "agent-é", "noisy"] {
        sc.op(json!({"op": "hash", "key": key}));
        sc.op(json!({"op": "shards_of", "key": key}));
    }
    for (now, key, cost) in [
        (0, "noisy", 1),
        (0, "noisy", 0),
        (0, "noisy", 2),
        (T0, "noisy", 1),
        (T0 - SEC, "noisy", 1),
        (NEAR_END, "noisy", 1),
        (NEAR_END, "noisy", 1),
        (MAX_NOW, "noisy", 1),
        (MAX_NOW, "x", 1),
        (1, "x", 0),
    ] {
        let (i, e) = sc.op(json!({"op": "acquire", "now": now, "key": key, "cost": cost}));
        if e["ok"] == true {
            held.push(i);
        }
    }
    sc.op(json!({"op": "metrics"}));
    sc.op(json!({"op": "record_rejection", "key": "x"}));
    for p in held {
        sc.op(json!({"op": "release", "permit": p}));
    }
    sc.op(json!({"op": "acquire", "now": MAX_NOW, "key": "noisy", "cost": 0}));
    sc.op(json!({"op": "metrics"}));
    sc.done()
}

/// The pipeline-backpressure and keyed scenarios, in a fixed order.
pub fn flow() -> Vec<Value> {
    let mut v = Vec::new();
    v.push(credits_walk("credits_default", 256, 64, 81, 700));
    v.push(credits_walk("credits_small", 8, 2, 82, 500));
    v.push(credits_walk("credits_low_water_high", 100, 99, 83, 400));
    v.extend(credits_edges());
    v.push(lag_walk("lag_meter_increments", 100 * MS, Feed::Increments, 50, 91, 900));
    v.push(lag_walk("lag_meter_offsets", SEC, Feed::Totals, 5_000, 92, 900));
    v.push(lag_walk("lag_meter_fast_buckets", MS, Feed::Increments, 3, 93, 600));
    v.push(lag_outage_recovery());
    v.extend(lag_edges());
    v.push(watermarks_walk("watermarks_default", 400, 100, 200, 101, 700));
    v.push(watermarks_walk("watermarks_narrow_band", 10, 2, 3, 102, 500));
    v.push(watermarks_walk("watermarks_large", 1_000_000, 1, 999_999, 103, 400));
    v.extend(watermarks_edges());
    v.push(drain_walk("paced_drain_default", 1000.0, 0.2, 80, 111, 700));
    v.push(drain_walk("paced_drain_slow_no_headroom", 3.0, 0.0, 1, 112, 400));
    v.push(drain_walk("paced_drain_fast_half", 250_000.0, 0.5, 5_000, 113, 500));
    v.push(drain_at_rate());
    v.extend(drain_edges());
    v.push(keyed_walk("keyed_16_pairs", keyed_cfg(16, 2, 3, SEC, 7, Value::Null, 10), 121, 800));
    v.push(keyed_walk(
        "keyed_64_triples_rate",
        keyed_cfg(64, 3, 4, 250 * MS, (1 << 40) + 3, json!(200.0), 5),
        122,
        800,
    ));
    v.push(keyed_walk(
        "keyed_16_single_slow_rate",
        keyed_cfg(16, 1, 2, 30 * SEC, 0, json!(50.0), 1),
        123,
        500,
    ));
    v.push(keyed_edges());
    v
}
