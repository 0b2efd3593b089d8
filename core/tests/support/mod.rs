//! A deterministic closed-loop simulation of a client protecting a dependency with a limiter.
//!
//! Model (the set-up on which Netflix's and Envoy's limiters were measured): Poisson arrivals; the protected client admits an
//! arrival iff in-flight < limit (otherwise it is rejected at once and counted); an admitted
//! request joins an unbounded FIFO queue in front of a dependency with `slots` servers and a
//! random service time; the client gives up after `timeout` and reports `Dropped`, while the
//! dependency still serves the request (wasted work). A completion before the timeout is a
//! `Success` with latency = queueing + service.
//!
//! Service times are log-normal (the base σ 0.25 reproduces the peers' measured unloaded
//! p99 of 17.2 ms; σ 0.7 is the heavy tail) or exponential. Scenario phases change the offered
//! rate, the slot count or a service-time multiplier at given times.
//!
//! Virtual time in ns, a binary heap of events, a seeded [`SplitMix64`]: every run replays
//! bit for bit. The limiter under test is anything implementing [`Control`]: [`Real`] drives
//! the crate's lock-free `Limiter` (its own windows, histogram quantiles, `⌊limit⌋` slots);
//! [`Windowed`] feeds an algorithm windows aggregated here (exact quantiles); [`Static`] is a
//! fixed limit.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use surgeguard_core::limit::{Algorithm, Window};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::Outcome;

/// Random variates over the crate's seeded PRNG.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        1.0 - self.0.next_f64()
    }
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
    pub fn normal(&mut self) -> f64 {
        // Box-Muller (one of the pair).
        let (u, v) = (self.unit(), self.0.next_f64());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// The dependency's service-time distribution (before any slowdown factor).
#[derive(Clone, Copy, Debug)]
pub enum Service {
    /// Exponential with this mean (ms).
    Exponential { mean_ms: f64 },
    /// Lognormal with this median (ms) and shape σ.
    LogNormal { median_ms: f64, sigma: f64 },
    /// Erlang (gamma with an integer shape `k`) with this mean (ms): the simulator's
    /// `cost_shape` work, whose tail above 1.5× the mean is `e^{-1.5k}·Σ_{i<k}(1.5k)^i/i!`.
    Erlang { mean_ms: f64, shape: u32 },
}

impl Service {
    /// ~10 ms; σ = 0.25 reproduces its unloaded p99 (17.2 ms).
    pub const BASE: Service = Service::LogNormal { median_ms: 9.69, sigma: 0.25 };
    /// Heavy tail: the same median, σ = 0.7 (mean 12.4 ms, so the real capacity is ~81% of
    /// the nominal one, matching the ~80% ceiling the peers hit there).
    pub const HEAVY: Service = Service::LogNormal { median_ms: 9.69, sigma: 0.7 };
    /// A longer tail: p50 6.1 ms, p99 61.3 ms (σ = ln(61.3/6.1)/2.326 = 0.992; mean 10 ms).
    pub const LONG_TAIL: Service = Service::LogNormal { median_ms: 6.1, sigma: 0.992 };

    pub fn sample_ns(&self, rng: &mut Rng) -> f64 {
        match *self {
            Service::Exponential { mean_ms } => rng.exp(mean_ms * MS as f64),
            Service::LogNormal { median_ms, sigma } => {
                median_ms * MS as f64 * (sigma * rng.normal()).exp()
            }
            Service::Erlang { mean_ms, shape } => {
                let sum: f64 = (0..shape).map(|_| -rng.unit().ln()).sum();
                mean_ms * MS as f64 * sum / shape as f64
            }
        }
    }
    /// `P(service ≤ t_ns)` at slowdown factor `slow` (Erlang only; `None` for the others).
    pub fn cdf(&self, t_ns: f64, slow: f64) -> Option<f64> {
        match *self {
            Service::Erlang { mean_ms, shape } => {
                let x = t_ns * shape as f64 / (mean_ms * MS as f64 * slow);
                let (mut term, mut tail) = (1.0, 0.0);
                for i in 0..shape {
                    if i > 0 {
                        term *= x / i as f64;
                    }
                    tail += term;
                }
                Some(1.0 - (-x).exp() * tail)
            }
            _ => None,
        }
    }
    pub fn mean_ns(&self) -> f64 {
        match *self {
            Service::Exponential { mean_ms } => mean_ms * MS as f64,
            Service::LogNormal { median_ms, sigma } => {
                median_ms * MS as f64 * (sigma * sigma / 2.0).exp()
            }
            Service::Erlang { mean_ms, .. } => mean_ms * MS as f64,
        }
    }
}

/// One phase of a scenario: from `at` on, these conditions hold.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub at: u64,
    /// Offered load, requests per second.
    pub rate: f64,
    pub slots: usize,
    /// Service time multiplier (2 = the dependency is twice as slow).
    pub slow: f64,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub service: Service,
    pub phases: Vec<Phase>,
    pub duration: u64,
    pub timeout: u64,
    pub seed: u64,
}

impl Scenario {
    fn phase(&self, t: u64) -> Phase {
        let mut p = self.phases[0];
        for q in &self.phases {
            if q.at <= t {
                p = *q;
            }
        }
        p
    }

    /// Completions per second the dependency can deliver at `t` (slots / mean service time).
    pub fn capacity(&self, t: u64) -> f64 {
        let p = self.phase(t);
        p.slots as f64 * SEC as f64 / (self.service.mean_ns() * p.slow)
    }

    /// The dependency's unloaded mean latency at `t` (ns).
    pub fn base_latency(&self, t: u64) -> f64 {
        self.service.mean_ns() * self.phase(t).slow
    }

    /// Capacity integrated over `[from, to)` (requests).
    pub fn capacity_between(&self, from: u64, to: u64) -> f64 {
        let step = 10 * MS;
        let mut t = from;
        let mut total = 0.0;
        while t < to {
            let dt = step.min(to - t);
            total += self.capacity(t) * dt as f64 / SEC as f64;
            t += dt;
        }
        total
    }

    /// Offered requests over `[from, to)`.
    pub fn offered_between(&self, from: u64, to: u64) -> f64 {
        let step = 10 * MS;
        let mut t = from;
        let mut total = 0.0;
        while t < to {
            let dt = step.min(to - t);
            total += self.phase(t).rate * dt as f64 / SEC as f64;
            t += dt;
        }
        total
    }
}

/// The limiter under test, seen from the client.
pub trait Control {
    fn name(&self) -> String;
    /// Admit one request at `now`: a token, or `None` when rejected.
    fn try_acquire(&mut self, now: u64) -> Option<u64>;
    /// The request of `token` ended at `now`.
    fn release(&mut self, now: u64, token: u64, outcome: Outcome);
    fn limit(&self) -> f64;
}

/// An algorithm driven directly: the harness aggregates samples into [`Window`]s (closed after
/// `max(100 ms, 2 × the last window's min latency)` once it holds ≥ 10 outcomes, as NCL's
/// WindowedLimit does), feeds them to the algorithm and enforces `in-flight < limit`.
pub struct Windowed<A: Algorithm> {
    pub algo: A,
    label: String,
    limit: f64,
    inflight: u32,
    next_token: u64,
    started: std::collections::HashMap<u64, u64>,
    win_start: u64,
    win_len: u64,
    lat: Vec<u64>,
    drops: u32,
    max_inflight: u32,
    pub windows: u64,
    /// Report a client timeout as a latency sample of the timeout instead of a drop (what
    /// Envoy's filter sees: the 504 after the timeout is a response with that latency).
    pub timeouts_as_samples: bool,
}

impl<A: Algorithm> Windowed<A> {
    pub fn new(algo: A, label: &str) -> Self {
        let limit = algo.limit();
        Self {
            algo,
            label: label.to_string(),
            limit,
            inflight: 0,
            next_token: 0,
            started: Default::default(),
            win_start: 0,
            win_len: 100 * MS,
            lat: Vec::new(),
            drops: 0,
            max_inflight: 0,
            windows: 0,
            timeouts_as_samples: false,
        }
    }

    fn maybe_close(&mut self, now: u64) {
        let n = self.lat.len() as u32 + self.drops;
        if now < self.win_start + self.win_len || n < 10 {
            return;
        }
        self.lat.sort_unstable();
        let pick = |q: f64| -> u64 {
            if self.lat.is_empty() {
                return 0;
            }
            let i = ((self.lat.len() as f64 * q).ceil() as usize).clamp(1, self.lat.len()) - 1;
            self.lat[i]
        };
        let sum: u64 = self.lat.iter().sum();
        let w = Window {
            now,
            samples: self.lat.len() as u32,
            drops: self.drops,
            avg_ns: if self.lat.is_empty() { 0 } else { sum / self.lat.len() as u64 },
            min_ns: self.lat.first().copied().unwrap_or(0),
            p50_ns: pick(0.5),
            p90_ns: pick(0.9),
            p99_ns: pick(0.99),
            max_inflight: self.max_inflight,
            inflight: self.inflight,
        };
        self.limit = self.algo.update(&w);
        self.windows += 1;
        self.win_len = (2 * w.min_ns).clamp(100 * MS, SEC);
        self.win_start = now;
        self.lat.clear();
        self.drops = 0;
        self.max_inflight = self.inflight;
    }
}

impl<A: Algorithm> Control for Windowed<A> {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn try_acquire(&mut self, now: u64) -> Option<u64> {
        // A limit below 1 still lets one request through (the harness has no idling).
        if (self.inflight as f64) < self.limit.max(1.0) {
            self.inflight += 1;
            self.max_inflight = self.max_inflight.max(self.inflight);
            self.next_token += 1;
            self.started.insert(self.next_token, now);
            Some(self.next_token)
        } else {
            None
        }
    }
    fn release(&mut self, now: u64, token: u64, outcome: Outcome) {
        let start = self.started.remove(&token).expect("released once");
        self.inflight -= 1;
        match outcome {
            Outcome::Success => self.lat.push(now - start),
            Outcome::Dropped if self.timeouts_as_samples => self.lat.push(now - start),
            Outcome::Dropped => self.drops += 1,
            Outcome::Ignored => {}
        }
        self.maybe_close(now);
    }
    fn limit(&self) -> f64 {
        self.limit
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A phase starts: new slots may take queued work.
    Phase,
    Arrival,
    Done(usize),
    Timeout(usize),
}

struct Req {
    token: u64,
    admitted: u64,
    client_done: bool,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub name: String,
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
    /// Completions within the timeout (goodput), by completion time.
    pub good: Vec<u64>,
    /// Client-observed latency of every admitted request (timeouts count as the timeout), with
    /// the time it was resolved.
    pub lat: Vec<(u64, u64)>,
    pub timeouts: u64,
    /// (time, limit) after every change.
    pub limits: Vec<(u64, f64)>,
}

impl Report {
    pub fn good_between(&self, from: u64, to: u64) -> usize {
        self.good.iter().filter(|&&t| t >= from && t < to).count()
    }
    /// The `q` quantile (0..1) of client latency resolved in `[from, to)`, ns.
    pub fn quantile_between(&self, q: f64, from: u64, to: u64) -> u64 {
        let mut v: Vec<u64> =
            self.lat.iter().filter(|(t, _)| *t >= from && *t < to).map(|x| x.1).collect();
        if v.is_empty() {
            return 0;
        }
        v.sort_unstable();
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    }
    /// Time-weighted mean limit over `[from, to)`.
    pub fn mean_limit(&self, from: u64, to: u64) -> f64 {
        let mut cur = self.limits.first().map(|x| x.1).unwrap_or(0.0);
        let mut acc = 0.0;
        let mut t = from;
        for &(at, l) in &self.limits {
            if at <= from {
                cur = l;
                continue;
            }
            if at >= to {
                break;
            }
            acc += cur * (at - t) as f64;
            t = at;
            cur = l;
        }
        acc += cur * (to - t) as f64;
        acc / (to - from) as f64
    }
    /// The first `t` (in steps of 250 ms from `from`, up to `to − 5 s`) such that the p99 of
    /// everything resolved in `[t, to)` is below `bound`, as time since `from`; `None` if none.
    pub fn settle_time(&self, bound: f64, from: u64, to: u64) -> Option<u64> {
        let mut v: Vec<(u64, u64)> =
            self.lat.iter().copied().filter(|(t, _)| *t >= from && *t < to).collect();
        v.sort_unstable();
        let step = SEC / 4;
        let mut t = from;
        while t + 5 * SEC <= to {
            let i = v.partition_point(|x| x.0 < t);
            let mut rest: Vec<u64> = v[i..].iter().map(|x| x.1).collect();
            rest.sort_unstable();
            if !rest.is_empty() {
                let k = ((rest.len() as f64 * 0.99).ceil() as usize).clamp(1, rest.len()) - 1;
                if (rest[k] as f64) < bound {
                    return Some(t - from);
                }
            }
            t += step;
        }
        None
    }
}

/// Runs `scenario` against `control`.
pub fn run(scenario: &Scenario, control: &mut dyn Control) -> Report {
    let mut rng = Rng::new(scenario.seed);
    let mut svc_rng = Rng::new(scenario.seed ^ 0x5e41_1ce5);
    let mut heap: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<_>, t: u64, e: Ev| {
        seq += 1;
        heap.push(Reverse((t, seq, e)));
    };
    let mut reqs: Vec<Req> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut busy = 0usize;
    let mut rep = Report { name: control.name(), ..Default::default() };
    let mut last_limit = f64::NAN;

    let first = rng.exp(SEC as f64 / scenario.phase(0).rate) as u64;
    push(&mut heap, first, Ev::Arrival);
    for p in &scenario.phases {
        push(&mut heap, p.at, Ev::Phase);
    }

    while let Some(Reverse((now, _, ev))) = heap.pop() {
        if now >= scenario.duration {
            break;
        }
        let phase = scenario.phase(now);
        match ev {
            Ev::Arrival => {
                let next = now + rng.exp(SEC as f64 / phase.rate).max(1.0) as u64;
                push(&mut heap, next, Ev::Arrival);
                rep.offered += 1;
                match control.try_acquire(now) {
                    None => rep.rejected += 1,
                    Some(token) => {
                        rep.admitted += 1;
                        let id = reqs.len();
                        reqs.push(Req { token, admitted: now, client_done: false });
                        push(&mut heap, now + scenario.timeout, Ev::Timeout(id));
                        queue.push_back(id);
                    }
                }
            }
            Ev::Phase => {}
            Ev::Done(id) => {
                busy -= 1;
                let r = &mut reqs[id];
                if !r.client_done {
                    r.client_done = true;
                    let lat = now - r.admitted;
                    rep.good.push(now);
                    rep.lat.push((now, lat));
                    control.release(now, r.token, Outcome::Success);
                }
            }
            Ev::Timeout(id) => {
                let r = &mut reqs[id];
                if !r.client_done {
                    r.client_done = true;
                    rep.timeouts += 1;
                    rep.lat.push((now, scenario.timeout));
                    control.release(now, r.token, Outcome::Dropped);
                }
            }
        }
        // Start service on every free slot (the queue holds abandoned requests too).
        while busy < phase.slots {
            let Some(id) = queue.pop_front() else { break };
            busy += 1;
            let s = scenario.service.sample_ns(&mut svc_rng) * phase.slow;
            push(&mut heap, now + s.max(1.0) as u64, Ev::Done(id));
        }
        let l = control.limit();
        if l != last_limit {
            rep.limits.push((now, l));
            last_limit = l;
        }
    }
    rep
}

/// The four scenarios the peers were measured on, shortened where the result does not
/// depend on length. Capacity 1,600 req/s (16 slots × ~10 ms).
pub mod scenarios {
    use super::*;

    pub const SLOTS: usize = 16;
    pub const OVERLOAD_RATE: f64 = 2400.0; // 150% of 1,600 req/s

    fn base(
        name: &'static str,
        service: Service,
        phases: Vec<Phase>,
        dur: u64,
        seed: u64,
    ) -> Scenario {
        Scenario { name, service, phases, duration: dur, timeout: 100 * MS, seed }
    }

    /// 150% of capacity, steady. Measure from 2 s to the end.
    pub fn overload(seed: u64) -> Scenario {
        let p = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        base("overload 150%", Service::BASE, vec![p], 10 * SEC, seed)
    }

    pub const SLOW_AT: u64 = 10 * SEC;
    pub const QUIET_RATE: f64 = 1200.0; // 75% of 1,600 req/s
    pub const SLOW_FOR: u64 = 30 * SEC;

    /// A quiet 75% load (1,200 req/s); at 10 s the dependency becomes twice as slow for 30 s,
    /// which makes the same load 150% of the degraded capacity.
    pub fn halved(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: QUIET_RATE, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: SLOW_AT, slow: 2.0, ..p0 };
        let p2 = Phase { at: SLOW_AT + SLOW_FOR, ..p0 };
        base(
            "capacity halved 30 s",
            Service::BASE,
            vec![p0, p1, p2],
            SLOW_AT + SLOW_FOR + 5 * SEC,
            seed,
        )
    }

    pub const STEP_AT: u64 = 5 * SEC;

    /// 150% of the original capacity; the dependency gains 16 slots (now 75% of capacity).
    pub fn step_up(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: STEP_AT, slots: 2 * SLOTS, ..p0 };
        base("slots 16 -> 32", Service::BASE, vec![p0, p1], STEP_AT + 10 * SEC, seed)
    }

    /// `overload` scaled up: `slots` slots at 150% load.
    pub fn overload_at(seed: u64, slots: usize) -> Scenario {
        let rate = 1.5 * slots as f64 * 100.0;
        let p = Phase { at: 0, rate, slots, slow: 1.0 };
        base("overload 150% (scaled)", Service::BASE, vec![p], 6 * SEC, seed)
    }

    pub const REMOVE_AT: u64 = 5 * SEC;

    /// 150% load; at 5 s half the slots disappear (capacity halved, latency unchanged), so
    /// Little's law's optimum in flight halves too.
    pub fn slots_removed(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: REMOVE_AT, slots: SLOTS / 2, ..p0 };
        base("slots 16 -> 8", Service::BASE, vec![p0, p1], REMOVE_AT + 8 * SEC, seed)
    }

    /// 150% of nominal load, heavy-tailed service time.
    pub fn heavy_tail(seed: u64) -> Scenario {
        let p = Phase { at: 0, rate: OVERLOAD_RATE, slots: SLOTS, slow: 1.0 };
        base("heavy tail", Service::HEAVY, vec![p], 10 * SEC, seed)
    }

    /// 8 slots; from 5 s the service time triples for 10 s, no errors (a 1 s timeout);
    /// 400 req/s: half the capacity before, 150% of it during.
    pub fn tripled(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 400.0, slots: 8, slow: 1.0 };
        let p1 = Phase { at: 5 * SEC, slow: 3.0, ..p0 };
        let p2 = Phase { at: 15 * SEC, ..p0 };
        Scenario {
            timeout: SEC,
            ..base("latency x3", Service::BASE, vec![p0, p1, p2], 20 * SEC, seed)
        }
    }

    /// 80% of capacity, [`Service::LONG_TAIL`] service time.
    pub fn long_tail(seed: u64) -> Scenario {
        let p = Phase { at: 0, rate: 1280.0, slots: SLOTS, slow: 1.0 };
        base("long tail 80%", Service::LONG_TAIL, vec![p], 10 * SEC, seed)
    }

    /// The simulator's `retry-storm` database, alone: 32 slots of Erlang-2 work (10 ms mean).
    pub const TAIL_SLOTS: usize = 32;
    pub const TAIL_SERVICE: Service = Service::Erlang { mean_ms: 10.0, shape: 2 };
    pub const TAIL_SLOW_AT: u64 = 10 * SEC;
    pub const TAIL_SLOW_FOR: u64 = 10 * SEC;
    /// The slowdown factor and the client timeout: 10 × 10 ms with a 150 ms timeout times
    /// out ~20% of the calls on service time alone (Erlang-2: `P(X > 1.5·mean) = 4e^{-3}`),
    /// whatever the concurrency.
    pub const TAIL_SLOW: f64 = 10.0;
    pub const TAIL_TIMEOUT: u64 = 150 * MS;

    /// `rate` req/s; from 10 s to 20 s the dependency is 10× slower *uniformly* (same slots),
    /// so by Little's law it needs the same concurrency, and the client's 150 ms timeout cuts
    /// its tail: some drops are intrinsic, not caused by our concurrency. 10 s after.
    pub fn slow_tail(seed: u64, rate: f64) -> Scenario {
        let p0 = Phase { at: 0, rate, slots: TAIL_SLOTS, slow: 1.0 };
        let p1 = Phase { at: TAIL_SLOW_AT, slow: TAIL_SLOW, ..p0 };
        let p2 = Phase { at: TAIL_SLOW_AT + TAIL_SLOW_FOR, ..p0 };
        Scenario {
            name: "10x slower, timeout in the tail",
            service: TAIL_SERVICE,
            phases: vec![p0, p1, p2],
            duration: TAIL_SLOW_AT + TAIL_SLOW_FOR + 10 * SEC,
            timeout: TAIL_TIMEOUT,
            seed,
        }
    }
}

/// The figures of the peers' comparison table for one algorithm and seed.
///
/// Definitions (the peers' comparison gives the columns, not their exact measurement):
/// - overload: goodput = completions within the timeout from 2 s to the end, as % of the
///   dependency's capacity; p99 of client latency over the same span (a timeout counts as
///   the timeout);
/// - halved: goodput over the 30 s slowdown as % of the degraded capacity (the transient
///   included); `base` = the slowed dependency's unloaded mean latency (20 ms); settle = the
///   first time after the slowdown (250 ms steps) from which the p99 of everything until the
///   slowdown ends is below 2× base (`None`: never); p99 = from 5 s after the slowdown on;
/// - step-up: goodput from 2 s after the step to the end, as % of what was offered;
/// - heavy tail: goodput as % of the nominal capacity (16 slots / 10 ms), as the note does.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    pub overload_goodput: f64,
    pub overload_p99_ms: f64,
    pub overload_mean_limit: f64,
    pub halved_goodput: f64,
    pub halved_base_ms: f64,
    /// Until p99 < 2× base.
    pub halved_settle_s: Option<f64>,
    /// Until p99 < 2.1× base.
    pub halved_settle_21_s: Option<f64>,
    pub halved_p99_ms: f64,
    pub halved_mean_limit: f64,
    pub step_goodput_of_offered: f64,
    pub step_mean_limit: f64,
    pub heavy_goodput: f64,
    pub heavy_p99_ms: f64,
}

/// Runs the four scenarios with a fresh controller from `make` each time.
pub fn figures(seed: u64, make: &mut dyn FnMut() -> Box<dyn Control>) -> Figures {
    use scenarios::*;
    let mut f = Figures::default();
    let ms = MS as f64;

    let s = overload(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (2 * SEC, s.duration);
    f.overload_goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
    f.overload_p99_ms = r.quantile_between(0.99, a, b) as f64 / ms;
    f.overload_mean_limit = r.mean_limit(a, b);

    let s = halved(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (SLOW_AT, SLOW_AT + SLOW_FOR);
    f.halved_goodput = 100.0 * r.good_between(a, b) as f64 / s.capacity_between(a, b);
    let base = s.base_latency(a);
    f.halved_base_ms = base / ms;
    let secs = |t: Option<u64>| t.map(|t| t as f64 / SEC as f64);
    f.halved_settle_s = secs(r.settle_time(2.0 * base, a, b));
    f.halved_settle_21_s = secs(r.settle_time(2.1 * base, a, b));
    f.halved_p99_ms = r.quantile_between(0.99, a + 5 * SEC, b) as f64 / ms;
    f.halved_mean_limit = r.mean_limit(a + 5 * SEC, b);

    let s = step_up(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (STEP_AT + 2 * SEC, s.duration);
    f.step_goodput_of_offered = 100.0 * r.good_between(a, b) as f64 / s.offered_between(a, b);
    f.step_mean_limit = r.mean_limit(a, b);

    let s = heavy_tail(seed);
    let r = run(&s, make().as_mut());
    let (a, b) = (2 * SEC, s.duration);
    let nominal = s.capacity_between(a, b) * s.service.mean_ns() / Service::BASE.mean_ns();
    f.heavy_goodput = 100.0 * r.good_between(a, b) as f64 / nominal;
    f.heavy_p99_ms = r.quantile_between(0.99, a, b) as f64 / ms;
    f
}

/// Mean and range of one figure over several seeds.
pub fn spread(all: &[Figures], pick: impl Fn(&Figures) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = all.iter().map(pick).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}

/// A static limit (the "static limit 16 / 64" rows).
pub struct Static {
    pub limit: f64,
    inflight: u32,
    next: u64,
}

impl Static {
    pub fn new(limit: f64) -> Self {
        Self { limit, inflight: 0, next: 0 }
    }
}

impl Control for Static {
    fn name(&self) -> String {
        format!("static {}", self.limit)
    }
    fn try_acquire(&mut self, _now: u64) -> Option<u64> {
        if (self.inflight as f64) < self.limit {
            self.inflight += 1;
            self.next += 1;
            Some(self.next)
        } else {
            None
        }
    }
    fn release(&mut self, _now: u64, _token: u64, _outcome: Outcome) {
        self.inflight -= 1;
    }
    fn limit(&self) -> f64 {
        self.limit
    }
}

/// The real lock-free [`Limiter`](surgeguard_core::Limiter) (one priority level), so its own
/// windowing (histogram quantiles, window length, minimum samples) is what gets tested.
pub struct Real {
    pub limiter: surgeguard_core::Limiter,
    label: String,
    permits: std::collections::HashMap<u64, surgeguard_core::RawPermit>,
    next: u64,
    /// Report a client timeout as a `Success` of the timeout's latency (Envoy's view).
    pub timeouts_as_samples: bool,
}

impl Real {
    pub fn new(algorithm: surgeguard_core::limit::AlgorithmConfig, label: &str) -> Self {
        let mut weights = [0.0; 8];
        weights[0] = 1.0;
        let cfg = surgeguard_core::LimiterConfig {
            levels: 1,
            weights,
            ..surgeguard_core::LimiterConfig::with_algorithm(algorithm)
        };
        Self {
            limiter: surgeguard_core::Limiter::new(cfg).expect("valid limiter config"),
            label: label.to_string(),
            permits: Default::default(),
            next: 0,
            timeouts_as_samples: false,
        }
    }
}

impl Control for Real {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn try_acquire(&mut self, now: u64) -> Option<u64> {
        let permit = self.limiter.try_acquire_raw(now, surgeguard_core::Priority::CRITICAL).ok()?;
        self.next += 1;
        self.permits.insert(self.next, permit);
        Some(self.next)
    }
    fn release(&mut self, now: u64, token: u64, outcome: Outcome) {
        let permit = self.permits.remove(&token).expect("released once");
        let outcome = match outcome {
            Outcome::Dropped if self.timeouts_as_samples => Outcome::Success,
            o => o,
        };
        self.limiter.release_raw(permit, now, outcome).expect("own permit");
    }
    fn limit(&self) -> f64 {
        self.limiter.limit()
    }
}

impl Drop for Real {
    /// A run ends with work still in flight: its permits end as `Ignored`, never dropped
    /// unreleased (which the core counts as leaked).
    fn drop(&mut self) {
        let now = self.limiter.latest_time();
        for (_, permit) in self.permits.drain() {
            let _ = self.limiter.release_raw(permit, now, surgeguard_core::Outcome::Ignored);
        }
    }
}
