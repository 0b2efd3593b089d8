//! A closed-loop, virtual-time harness for the limit algorithms alone: one client protecting
//! one dependency with the real [`Limiter`](surgeguard_core::Limiter), the robustness sweep's
//! engine (`cargo run --release -p surgeguard-sim --bin sweep`, `make sweep`).
//!
//! The one plant the algorithms are both tuned and checked on: the core's convergence tests
//! include this file (`core/tests/support/mod.rs`, `#[path]`), so the sweep and those tests
//! cannot drift apart. It depends on nothing of the simulator, only on `surgeguard-core` and
//! std.
//!
//! Model: Poisson arrivals; the client admits an arrival iff the limiter grants a permit
//! (otherwise it is refused at once and counted); an admitted request joins an unbounded
//! FIFO queue in front of a dependency with `slots` servers and a random service time; the
//! client gives up after `timeout` and reports `Dropped` while the dependency still serves
//! the request (wasted work). A completion before the timeout is a `Success` whose latency is
//! queueing plus service. Phases change the offered rate, the slot count or a service-time
//! multiplier at given times.
//!
//! Virtual time in ns, a binary heap of events, seeded SplitMix64 streams: a run is a pure
//! function of (scenario, algorithm, seed). Every 100 ms the harness records the limit and
//! the dependency's busy slots, so a run can be checked for a limit sitting at its floor
//! while the dependency idles; it also records the limit after every change.
//!
//! The control under test is anything implementing [`Control`]: [`Real`] drives the core's
//! lock-free `Limiter` (its own windows, histogram quantiles, `⌊limit⌋` slots);
//! [`Windowed`] feeds an algorithm windows aggregated here (exact quantiles); [`Static`] is a
//! fixed limit.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use surgeguard_core::limit::{Algorithm, AlgorithmConfig, Window};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit};

/// Random variates over the core's seeded PRNG.
pub struct Rng(SplitMix64);

impl Rng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }
    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        1.0 - self.0.next_f64()
    }
    /// Exponential with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
    /// Standard normal (Box-Muller, one of the pair).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.0.next_f64());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// The dependency's service-time distribution (before any slowdown factor).
#[derive(Clone, Copy, Debug)]
pub enum Service {
    /// Exponential with this mean (ms).
    Exponential {
        /// Mean, ms.
        mean_ms: f64,
    },
    /// Log-normal with this median (ms) and shape σ.
    LogNormal {
        /// Median, ms.
        median_ms: f64,
        /// Shape.
        sigma: f64,
    },
    /// `fast_ms` with probability `1 − slow_share`, else `slow_ms` (each ±10% uniform).
    Bimodal {
        /// The common latency, ms.
        fast_ms: f64,
        /// The rare latency, ms.
        slow_ms: f64,
        /// Share of the rare latency.
        slow_share: f64,
    },
    /// Erlang (gamma with an integer shape `k`) with this mean (ms): the simulator's
    /// `cost_shape` work, whose tail above 1.5× the mean is `e^{-1.5k}·Σ_{i<k}(1.5k)^i/i!`.
    Erlang {
        /// Mean, ms.
        mean_ms: f64,
        /// Shape `k`.
        shape: u32,
    },
}

impl Service {
    /// ~10 ms; σ 0.25 gives an unloaded p99 of 17.3 ms (the peers' measurement set-up).
    pub const BASE: Service = Service::LogNormal { median_ms: 9.69, sigma: 0.25 };
    /// Heavy tail: p50 6.1 ms, p99 61.3 ms (σ = ln(61.3/6.1)/2.326 = 0.992; mean 10.0 ms).
    pub const HEAVY: Service = Service::LogNormal { median_ms: 6.1, sigma: 0.992 };
    /// Bimodal: 90% at 5 ms, 10% at 80 ms (mean 12.5 ms).
    pub const BIMODAL: Service = Service::Bimodal { fast_ms: 5.0, slow_ms: 80.0, slow_share: 0.1 };
    /// A wide log-normal: the base median, σ 0.7 (mean 12.4 ms, so the real capacity is ~81%
    /// of the nominal one, matching the ~80% ceiling the peers hit in their heavy-tail run).
    pub const WIDE: Service = Service::LogNormal { median_ms: 9.69, sigma: 0.7 };

    /// One service time, ns.
    pub fn sample_ns(&self, rng: &mut Rng) -> f64 {
        match *self {
            Service::Exponential { mean_ms } => rng.exp(mean_ms * MS as f64),
            Service::LogNormal { median_ms, sigma } => {
                median_ms * MS as f64 * (sigma * rng.normal()).exp()
            }
            Service::Bimodal { fast_ms, slow_ms, slow_share } => {
                let base = if rng.unit() <= slow_share { slow_ms } else { fast_ms };
                base * MS as f64 * (0.9 + 0.2 * rng.unit())
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

    /// Mean service time, ns.
    pub fn mean_ns(&self) -> f64 {
        match *self {
            Service::Exponential { mean_ms } => mean_ms * MS as f64,
            Service::LogNormal { median_ms, sigma } => {
                median_ms * MS as f64 * (sigma * sigma / 2.0).exp()
            }
            Service::Bimodal { fast_ms, slow_ms, slow_share } => {
                (fast_ms * (1.0 - slow_share) + slow_ms * slow_share) * MS as f64
            }
            Service::Erlang { mean_ms, .. } => mean_ms * MS as f64,
        }
    }
}

/// From `at` on, these conditions hold.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    /// Start, ns.
    pub at: u64,
    /// Offered load, requests per second.
    pub rate: f64,
    /// Servers of the dependency.
    pub slots: usize,
    /// Service-time multiplier (2 = twice as slow).
    pub slow: f64,
}

/// What a scenario's goodput is a percentage of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denominator {
    /// The dependency's capacity over the span (slots / mean service time).
    Capacity,
    /// The offered requests over the span.
    Offered,
}

/// One closed-loop scenario and how it is scored.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Short name (the sweep's row key).
    pub name: &'static str,
    /// Service-time distribution.
    pub service: Service,
    /// Phases, sorted by `at`; the first at 0.
    pub phases: Vec<Phase>,
    /// Run length, ns.
    pub duration: u64,
    /// Client timeout, ns.
    pub timeout: u64,
    /// Seed of the arrival and service streams.
    pub seed: u64,
    /// The scored span `[from, to)`, ns.
    pub span: (u64, u64),
    /// Goodput is a percentage of this.
    pub denominator: Denominator,
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

    /// Completions per second the dependency can deliver at `t`.
    pub fn capacity(&self, t: u64) -> f64 {
        let p = self.phase(t);
        p.slots as f64 * SEC as f64 / (self.service.mean_ns() * p.slow)
    }

    /// The dependency's unloaded mean latency at `t` (ns).
    pub fn base_latency(&self, t: u64) -> f64 {
        self.service.mean_ns() * self.phase(t).slow
    }

    fn integrate(&self, from: u64, to: u64, f: impl Fn(u64) -> f64) -> f64 {
        let step = 10 * MS;
        let (mut t, mut total) = (from, 0.0);
        while t < to {
            let dt = step.min(to - t);
            total += f(t) * dt as f64 / SEC as f64;
            t += dt;
        }
        total
    }

    /// Capacity integrated over `[from, to)` (requests).
    pub fn capacity_between(&self, from: u64, to: u64) -> f64 {
        self.integrate(from, to, |t| self.capacity(t))
    }

    /// Offered requests over `[from, to)`.
    pub fn offered_between(&self, from: u64, to: u64) -> f64 {
        self.integrate(from, to, |t| self.phase(t).rate)
    }
}

/// One 100 ms sample of the run's state.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    /// When, ns.
    pub at: u64,
    /// The limiter's limit.
    pub limit: f64,
    /// Requests in the dependency's slots.
    pub busy: usize,
    /// Requests waiting in front of them.
    pub queued: usize,
    /// The dependency's slots.
    pub slots: usize,
    /// Offered rate, req/s.
    pub rate: f64,
    /// Capacity, req/s.
    pub capacity: f64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The control's name.
    pub name: String,
    /// Arrivals.
    pub offered: u64,
    /// Arrivals admitted.
    pub admitted: u64,
    /// Arrivals refused (as a count; by time in `refused`).
    pub rejected: u64,
    /// (time, limit) after every change.
    pub limits: Vec<(u64, f64)>,
    /// Completions within the timeout, by completion time.
    pub good: Vec<u64>,
    /// (resolved at, client latency) of every admitted request (a timeout counts as the
    /// timeout).
    pub lat: Vec<(u64, u64)>,
    /// Arrivals refused by the limiter, by time.
    pub refused: Vec<u64>,
    /// Client timeouts.
    pub timeouts: u64,
    /// The 100 ms samples.
    pub ticks: Vec<Tick>,
}

impl Report {
    /// Completions within the timeout in `[from, to)`.
    pub fn good_between(&self, from: u64, to: u64) -> usize {
        self.good.iter().filter(|&&t| t >= from && t < to).count()
    }
    /// Refusals in `[from, to)`.
    pub fn refused_between(&self, from: u64, to: u64) -> usize {
        self.refused.iter().filter(|&&t| t >= from && t < to).count()
    }
    /// The `q` quantile of client latency resolved in `[from, to)`, ns.
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
    /// Time-weighted mean limit over `[from, to)` (from every change of the limit).
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
    /// Mean of the limit sampled every 100 ms over `[from, to)`.
    pub fn sampled_mean_limit(&self, from: u64, to: u64) -> f64 {
        let v: Vec<f64> =
            self.ticks.iter().filter(|k| k.at >= from && k.at < to).map(|k| k.limit).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
    /// The time (ns) in `[from, to)` during which the sampled limit was below `level`.
    pub fn time_below(&self, level: f64, from: u64, to: u64) -> u64 {
        let n = self.ticks.iter().filter(|k| k.at >= from && k.at < to && k.limit < level).count();
        n as u64 * 100 * MS
    }
    /// The lowest sampled limit in `[from, to)`.
    pub fn min_limit(&self, from: u64, to: u64) -> f64 {
        self.ticks
            .iter()
            .filter(|k| k.at >= from && k.at < to)
            .map(|k| k.limit)
            .fold(f64::INFINITY, f64::min)
    }
    /// The longest stretch (ns) in which the limit stayed at or below `floor` while the
    /// dependency had idle slots and an empty queue and the offered load was at least half
    /// its capacity: a limiter sitting at its floor with idle capacity.
    pub fn stuck_at_floor_ns(&self, floor: f64) -> u64 {
        let (mut best, mut run_from) = (0u64, None::<u64>);
        for k in &self.ticks {
            let stuck =
                k.limit <= floor && k.busy < k.slots && k.queued == 0 && k.rate >= 0.5 * k.capacity;
            match (stuck, run_from) {
                (true, None) => run_from = Some(k.at),
                (true, Some(f)) => best = best.max(k.at - f),
                (false, _) => run_from = None,
            }
        }
        best
    }
}

/// The client's admission control under test.
pub trait Control {
    /// A label for reports.
    fn name(&self) -> String;
    /// Admit one request at `now`: a token, or `None` when refused.
    fn try_acquire(&mut self, now: u64) -> Option<u64>;
    /// The request of `token` ended at `now`.
    fn release(&mut self, now: u64, token: u64, outcome: Outcome);
    /// The current limit.
    fn limit(&self) -> f64;
}

/// The real lock-free [`Limiter`] with one priority level, so its own windowing (histogram
/// quantiles, window length, minimum samples, `⌊limit⌋` slots) is what gets tested.
pub struct Real {
    /// The limiter under test.
    pub limiter: Limiter,
    label: String,
    permits: HashMap<u64, RawPermit>,
    next: u64,
    /// Report a client timeout as a `Success` of the timeout's latency (Envoy's view).
    pub timeouts_as_samples: bool,
}

impl Real {
    /// A limiter running `algorithm`.
    pub fn new(algorithm: AlgorithmConfig) -> Self {
        Self::named(algorithm, "")
    }

    /// A limiter running `algorithm`, labelled `label` in reports.
    pub fn named(algorithm: AlgorithmConfig, label: &str) -> Self {
        let mut weights = [0.0; 8];
        weights[0] = 1.0;
        let cfg = LimiterConfig { levels: 1, weights, ..LimiterConfig::with_algorithm(algorithm) };
        Self {
            limiter: Limiter::new(cfg).expect("valid limiter config"),
            label: label.to_string(),
            permits: HashMap::new(),
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
        let permit = self.limiter.try_acquire_raw(now, Priority::CRITICAL).ok()?;
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
            let _ = self.limiter.release_raw(permit, now, Outcome::Ignored);
        }
    }
}

/// A fixed limit (the "static" reference rows).
pub struct Static {
    /// The limit.
    pub limit: f64,
    inflight: u32,
    next: u64,
}

impl Static {
    /// Admits while in-flight is below `limit`.
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

/// An algorithm driven directly: the harness aggregates samples into [`Window`]s (closed after
/// `max(100 ms, 2 × the last window's min latency)` once it holds ≥ 10 outcomes, as NCL's
/// WindowedLimit does), feeds them to the algorithm and enforces `in-flight < limit`.
pub struct Windowed<A: Algorithm> {
    /// The algorithm under test.
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
    /// Windows closed.
    pub windows: u64,
    /// Report a client timeout as a latency sample of the timeout instead of a drop (what
    /// Envoy's filter sees: the 504 after the timeout is a response with that latency).
    pub timeouts_as_samples: bool,
}

impl<A: Algorithm> Windowed<A> {
    /// Drives `algo`, labelled `label` in reports.
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
    Tick,
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
    push(&mut heap, 0, Ev::Tick);

    while let Some(Reverse((now, _, ev))) = heap.pop() {
        if now >= scenario.duration {
            break;
        }
        let phase = scenario.phase(now);
        match ev {
            Ev::Tick => {
                rep.ticks.push(Tick {
                    at: now,
                    limit: control.limit(),
                    busy,
                    queued: queue.len(),
                    slots: phase.slots,
                    rate: phase.rate,
                    capacity: scenario.capacity(now),
                });
                push(&mut heap, now + 100 * MS, Ev::Tick);
            }
            Ev::Arrival => {
                let next = now + rng.exp(SEC as f64 / phase.rate).max(1.0) as u64;
                push(&mut heap, next, Ev::Arrival);
                rep.offered += 1;
                match control.try_acquire(now) {
                    None => {
                        rep.rejected += 1;
                        rep.refused.push(now);
                    }
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
                    rep.good.push(now);
                    rep.lat.push((now, now - r.admitted));
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

/// The figures the sweep keeps of one run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Score {
    /// Completions within the timeout over the span, % of the scenario's denominator.
    pub goodput: f64,
    /// p99 of client latency over the span, ms.
    pub p99_ms: f64,
    /// The longest stretch at the floor with idle capacity, s (see
    /// [`Report::stuck_at_floor_ns`]).
    pub stuck_s: f64,
    /// Mean limit over the span.
    pub mean_limit: f64,
}

/// Scores a finished run of `s`. `floor` is the algorithm's floor (its `min_limit`); "at the
/// floor" means at most `floor + 1`, the smallest limit that admits a second request.
pub fn score(s: &Scenario, r: &Report, floor: f64) -> Score {
    let (a, b) = s.span;
    let denom = match s.denominator {
        Denominator::Capacity => s.capacity_between(a, b),
        Denominator::Offered => s.offered_between(a, b),
    };
    Score {
        goodput: 100.0 * r.good_between(a, b) as f64 / denom,
        p99_ms: r.quantile_between(0.99, a, b) as f64 / MS as f64,
        stuck_s: r.stuck_at_floor_ns(floor + 1.0) as f64 / SEC as f64,
        mean_limit: r.sampled_mean_limit(a, b),
    }
}

/// The sweep's scenarios: c = 16 slots, ~10 ms mean service time (capacity 1,600 req/s),
/// Poisson arrivals, 100 ms client timeout, unless a scenario says otherwise.
pub mod scenarios {
    use super::*;

    /// Slots of the dependency.
    pub const SLOTS: usize = 16;
    /// Its capacity with [`Service::BASE`], req/s.
    pub const CAPACITY: f64 = 1600.0;

    fn make(
        name: &'static str,
        service: Service,
        phases: Vec<Phase>,
        duration: u64,
        seed: u64,
        span: (u64, u64),
        denominator: Denominator,
    ) -> Scenario {
        Scenario { name, service, phases, duration, timeout: 100 * MS, seed, span, denominator }
    }

    fn steady_at(rate: f64) -> Vec<Phase> {
        vec![Phase { at: 0, rate, slots: SLOTS, slow: 1.0 }]
    }

    /// 80% load for 10 s; scored from 2 s (% of capacity).
    pub fn steady(seed: u64) -> Scenario {
        let p = steady_at(0.8 * CAPACITY);
        make(
            "steady 80%",
            Service::BASE,
            p,
            10 * SEC,
            seed,
            (2 * SEC, 10 * SEC),
            Denominator::Capacity,
        )
    }

    /// 150% load for 10 s; scored from 2 s (% of capacity).
    pub fn overload(seed: u64) -> Scenario {
        let p = steady_at(1.5 * CAPACITY);
        make(
            "overload 150%",
            Service::BASE,
            p,
            10 * SEC,
            seed,
            (2 * SEC, 10 * SEC),
            Denominator::Capacity,
        )
    }

    /// 75% load; from 10 s the dependency is twice as slow for 30 s (150% of the degraded
    /// capacity); scored over the 30 s (% of the degraded capacity).
    pub fn slowdown(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 0.75 * CAPACITY, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: 10 * SEC, slow: 2.0, ..p0 };
        let p2 = Phase { at: 40 * SEC, ..p0 };
        make(
            "slowdown (capacity halved 30 s)",
            Service::BASE,
            vec![p0, p1, p2],
            42 * SEC,
            seed,
            (10 * SEC, 40 * SEC),
            Denominator::Capacity,
        )
    }

    /// 150% of the original capacity; at 5 s the dependency gains 16 slots (75% then);
    /// scored from 7 s (% of offered).
    pub fn step_up(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 1.5 * CAPACITY, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: 5 * SEC, slots: 2 * SLOTS, ..p0 };
        make(
            "step-up 16 -> 32",
            Service::BASE,
            vec![p0, p1],
            15 * SEC,
            seed,
            (7 * SEC, 15 * SEC),
            Denominator::Offered,
        )
    }

    /// Log-normal latency, p50 6.1 ms and p99 61.3 ms, 80% load; scored from 2 s (% of
    /// capacity: at most ~80).
    pub fn heavy_tail(seed: u64) -> Scenario {
        let p = steady_at(0.8 * CAPACITY);
        make(
            "heavy tail (log-normal)",
            Service::HEAVY,
            p,
            10 * SEC,
            seed,
            (2 * SEC, 10 * SEC),
            Denominator::Capacity,
        )
    }

    /// 90% of requests at 5 ms, 10% at 80 ms (capacity 1,280 req/s), 80% load; scored from
    /// 2 s (% of capacity: at most ~80).
    pub fn bimodal(seed: u64) -> Scenario {
        let cap = SLOTS as f64 * SEC as f64 / Service::BIMODAL.mean_ns();
        let p = steady_at(0.8 * cap);
        make(
            "bimodal 5/80 ms",
            Service::BIMODAL,
            p,
            10 * SEC,
            seed,
            (2 * SEC, 10 * SEC),
            Denominator::Capacity,
        )
    }

    /// 10% load for 20 s, then 150% for 10 s; scored over the burst (% of capacity).
    pub fn quiet_then_burst(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 0.1 * CAPACITY, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: 20 * SEC, rate: 1.5 * CAPACITY, ..p0 };
        make(
            "quiet, then burst 150%",
            Service::BASE,
            vec![p0, p1],
            30 * SEC,
            seed,
            (20 * SEC, 30 * SEC),
            Denominator::Capacity,
        )
    }

    /// 75% load; at 5 s three quarters of the slots vanish (capacity 25%, latency unchanged)
    /// for 15 s; scored from 5 s to 20 s (% of the degraded capacity).
    pub fn capacity_quarter(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 0.75 * CAPACITY, slots: SLOTS, slow: 1.0 };
        let p1 = Phase { at: 5 * SEC, slots: SLOTS / 4, ..p0 };
        make(
            "capacity drops to 25%",
            Service::BASE,
            vec![p0, p1],
            20 * SEC,
            seed,
            (5 * SEC, 20 * SEC),
            Denominator::Capacity,
        )
    }

    /// 75% load; from 5 s the service time grows by 1/30 of the base each second, to 3× at
    /// 65 s (capacity 33%), held 5 s; scored from 5 s to 70 s (% of capacity).
    pub fn slow_leak(seed: u64) -> Scenario {
        let mut phases = vec![Phase { at: 0, rate: 0.75 * CAPACITY, slots: SLOTS, slow: 1.0 }];
        for k in 1..=60u64 {
            phases.push(Phase {
                at: (5 + k) * SEC,
                slow: 1.0 + 2.0 * k as f64 / 60.0,
                ..phases[0]
            });
        }
        make(
            "slow leak to 33% over 60 s",
            Service::BASE,
            phases,
            70 * SEC,
            seed,
            (5 * SEC, 70 * SEC),
            Denominator::Capacity,
        )
    }

    /// A dependency of 8 slots at 75% load; from 5 s its latency triples for 10 s, with no
    /// errors (225% of the degraded capacity is offered); scored over the 10 s (% of the
    /// degraded capacity). By Little's law it still serves 8 at once: a limit below 8
    /// leaves slots idle.
    pub fn latency_triples(seed: u64) -> Scenario {
        let p0 = Phase { at: 0, rate: 0.75 * CAPACITY / 2.0, slots: SLOTS / 2, slow: 1.0 };
        let p1 = Phase { at: 5 * SEC, slow: 3.0, ..p0 };
        let p2 = Phase { at: 15 * SEC, ..p0 };
        make(
            "latency triples 10 s (8 slots)",
            Service::BASE,
            vec![p0, p1, p2],
            17 * SEC,
            seed,
            (5 * SEC, 15 * SEC),
            Denominator::Capacity,
        )
    }

    /// A named scenario constructor (seed → scenario).
    pub type Named = (&'static str, fn(u64) -> Scenario);

    /// Every sweep scenario, by constructor.
    pub const ALL: [Named; 10] = [
        ("steady", steady),
        ("overload", overload),
        ("slowdown", slowdown),
        ("step-up", step_up),
        ("heavy-tail", heavy_tail),
        ("bimodal", bimodal),
        ("quiet-burst", quiet_then_burst),
        ("quarter", capacity_quarter),
        ("leak", slow_leak),
        ("triple", latency_triples),
    ];
}
