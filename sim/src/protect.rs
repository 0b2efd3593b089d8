//! Protections as pluggable policies.
//!
//! - Server side, [`Admission`]: what a host does with an arriving request before a worker
//!   takes it. Baselines (`none`: unbounded FIFO; `static`: a fixed limit and a bounded FIFO)
//!   are written here; every surgeguard policy is a thin adapter over the real core type
//!   (`Limiter`, `Gate`) — the simulator never re-implements an algorithm.
//! - Client side, [`ClientPolicy`]: what a caller does before an attempt and before a
//!   retry (retry budget, breaker, backoff), again adapters over the core types.
//!
//! - Per tenant, [`KeyedAdmission`]: the core's `KeyedLimits` (per-key concurrency caps
//!   over shuffle-sharded shards) in front of any server policy (`keyed+gate`).
//!
//! A protection is named on the command line as `[keyed+]server[+client...]`, e.g.
//! `gate+budget`, `keyed+gate`.

// Configs are built as `default()` then the few fields the simulator sets, so they keep
// compiling as the core adds fields.
#![allow(clippy::field_reassign_with_default)]

use surgeguard_core::backoff::{Backoff, BackoffConfig};
use surgeguard_core::breaker::{BreakerPermit, CircuitBreaker, CircuitBreakerConfig};
use surgeguard_core::codel::CodelConfig;
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig, LifoTrigger};
use surgeguard_core::keyed::{KeyPermit, KeyedConfig, KeyedLimits};
use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, FixedConfig, Gradient2Config, GradientConfig, HysteresisConfig,
    VegasConfig,
};
use surgeguard_core::queue::Ticket;
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, Reason, Rejected};

use crate::engine::Key;
use std::collections::{HashMap, VecDeque};

/// What an admission decided about one arrival.
pub enum Admit {
    /// Take a worker now.
    Go(Permit),
    /// Held by the policy; a later [`Admission::poll`] says `Go` or `Drop`.
    Wait,
    /// Refused at once (a fast 503 with a hint).
    Reject(Rejected),
}

/// The token an admitted request carries until it ends.
pub enum Permit {
    /// Nothing to give back.
    Free,
    /// A slot of a counting baseline.
    Slot,
    /// A surgeguard permit.
    Raw(RawPermit),
    /// A per-key permit in front of the inner policy's permit.
    Keyed(KeyPermit, Box<Permit>),
}

/// What a poll hands out.
pub enum Dispatch {
    /// A held request may take a worker.
    Go(Key, Permit),
    /// A held request was dropped (expired, sloughed, evicted, shed).
    Drop(Key, Rejected),
}

/// Server-side admission on one host. Requests are named by the simulator's job key.
pub trait Admission {
    /// A request arrives at `now` at `level`; `deadline` is its caller's (absolute, ns);
    /// `key` is the hash of its tenant (`keyed::hash_key`), if it has one.
    fn arrive(
        &mut self,
        now: u64,
        job: Key,
        level: Priority,
        deadline: Option<u64>,
        key: Option<u64>,
    ) -> Admit;
    /// An admitted request ended.
    fn release(&mut self, now: u64, permit: Permit, outcome: Outcome);
    /// Hands out what became possible (grants and drops).
    fn poll(&mut self, now: u64, out: &mut Vec<Dispatch>);
    /// When `poll` should run again even if nothing else happens.
    fn next_wakeup(&self, _now: u64) -> Option<u64> {
        None
    }
    /// The concurrency limit in force, if the policy has one.
    fn limit(&self) -> Option<f64>;
    /// Requests held by the policy (its own queue, not the worker pool's).
    fn waiting(&self) -> usize {
        0
    }
    /// The brownout dimmer at `now` (`Gate::brownout`), if the policy has one: skip
    /// optional work with this probability.
    fn brownout(&self, _now: u64) -> Option<f64> {
        None
    }
}

/// `none`: every request goes to the host's worker pool and its unbounded FIFO queue
/// (the common default: a fixed thread pool in front of an unbounded request queue).
pub struct Unbounded;

impl Admission for Unbounded {
    fn arrive(&mut self, _: u64, _: Key, _: Priority, _: Option<u64>, _: Option<u64>) -> Admit {
        Admit::Go(Permit::Free)
    }
    fn release(&mut self, _: u64, _: Permit, _: Outcome) {}
    fn poll(&mut self, _: u64, _: &mut Vec<Dispatch>) {}
    fn limit(&self) -> Option<f64> {
        None
    }
}

/// `static`: a fixed concurrency limit (the worker count) and a bounded FIFO queue sized in
/// time (`queue_capacity = drain_rate × wait_budget`, 100 ms: Little's law), full → 503. No
/// deadlines, no priorities: the classic static baseline.
pub struct StaticFifo {
    limit: u32,
    capacity: usize,
    inflight: u32,
    queue: VecDeque<Key>,
}

impl StaticFifo {
    /// A limit of `limit` in flight and at most `capacity` waiting.
    pub fn new(limit: u32, capacity: usize) -> Self {
        Self { limit, capacity, inflight: 0, queue: VecDeque::new() }
    }
}

impl Admission for StaticFifo {
    fn arrive(&mut self, _: u64, job: Key, _: Priority, _: Option<u64>, _: Option<u64>) -> Admit {
        if self.inflight < self.limit && self.queue.is_empty() {
            self.inflight += 1;
            Admit::Go(Permit::Slot)
        } else if self.queue.len() < self.capacity {
            self.queue.push_back(job);
            Admit::Wait
        } else {
            // 503 with `Retry-After: 1` (RFC 9110 §15.6.4, §10.2.3)
            Admit::Reject(Rejected::new(Reason::QueueFull, 1_000_000_000))
        }
    }
    fn release(&mut self, _: u64, _: Permit, _: Outcome) {
        self.inflight -= 1;
    }
    fn poll(&mut self, _: u64, out: &mut Vec<Dispatch>) {
        while self.inflight < self.limit {
            let Some(job) = self.queue.pop_front() else { break };
            self.inflight += 1;
            out.push(Dispatch::Go(job, Permit::Slot));
        }
    }
    fn limit(&self) -> Option<f64> {
        Some(self.limit as f64)
    }
    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// surgeguard [`Limiter`] alone: admit below the adaptive limit (with the limiter's priority
/// partitions), otherwise a fast rejection. No queue.
pub struct LimiterOnly {
    limiter: Limiter,
}

impl LimiterOnly {
    /// A limiter built from `config`.
    pub fn new(config: &LimiterConfig) -> Self {
        Self { limiter: Limiter::new(*config).expect("the simulator's limiter configs are valid") }
    }
}

impl Admission for LimiterOnly {
    fn arrive(
        &mut self,
        now: u64,
        _: Key,
        level: Priority,
        _: Option<u64>,
        _: Option<u64>,
    ) -> Admit {
        match self.limiter.try_acquire_raw(now, level) {
            Ok(p) => Admit::Go(Permit::Raw(p)),
            Err(r) => Admit::Reject(r),
        }
    }
    fn release(&mut self, now: u64, permit: Permit, outcome: Outcome) {
        if let Permit::Raw(p) = permit {
            self.limiter.release_raw(p, now, outcome).expect("own permit");
        }
    }
    fn poll(&mut self, _: u64, _: &mut Vec<Dispatch>) {}
    fn limit(&self) -> Option<f64> {
        Some(self.limiter.limit())
    }
}

/// Compile-time capacity of the Gate's queue; the configured bound is below it.
pub const GATE_CAP: usize = 1024;

/// surgeguard [`Gate`]: the limiter plus a bounded priority queue with CoDel, adaptive LIFO
/// and deadline checks, driven as the event pump the bindings use (arrive / poll /
/// release / next_wakeup).
pub struct GateAdmission {
    gate: Box<Gate<GATE_CAP>>,
    tickets: HashMap<Ticket, Key>,
    buf: Vec<Option<Event>>,
}

impl GateAdmission {
    /// A gate built from `config`.
    pub fn new(config: &GateConfig) -> Self {
        Self {
            gate: Box::new(Gate::new(*config).expect("the simulator's gate configs are valid")),
            tickets: HashMap::new(),
            buf: (0..64).map(|_| None).collect(),
        }
    }
}

impl Admission for GateAdmission {
    fn arrive(
        &mut self,
        now: u64,
        job: Key,
        level: Priority,
        deadline: Option<u64>,
        _: Option<u64>,
    ) -> Admit {
        match self.gate.arrive(now, level, deadline) {
            Arrival::Admitted(p) => Admit::Go(Permit::Raw(p)),
            Arrival::Queued(t) => {
                self.tickets.insert(t, job);
                Admit::Wait
            }
            Arrival::Rejected(r) => Admit::Reject(r),
        }
    }
    fn release(&mut self, now: u64, permit: Permit, outcome: Outcome) {
        if let Permit::Raw(p) = permit {
            self.gate.release(p, now, outcome).expect("own permit");
        }
    }
    fn poll(&mut self, now: u64, out: &mut Vec<Dispatch>) {
        loop {
            let n = self.gate.poll(now, &mut self.buf);
            for e in self.buf[..n].iter_mut() {
                match e.take() {
                    Some(Event::Granted(t, p)) => match self.tickets.remove(&t) {
                        Some(job) => out.push(Dispatch::Go(job, Permit::Raw(p))),
                        None => {
                            let _ = self.gate.release(p, now, Outcome::Ignored);
                        }
                    },
                    Some(Event::Expired(t, r)) => {
                        if let Some(job) = self.tickets.remove(&t) {
                            out.push(Dispatch::Drop(job, r));
                        }
                    }
                    None => {}
                }
            }
            if n < self.buf.len() {
                break;
            }
        }
    }
    fn next_wakeup(&self, now: u64) -> Option<u64> {
        self.gate.next_wakeup(now)
    }
    fn limit(&self) -> Option<f64> {
        Some(self.gate.limiter().limit())
    }
    fn waiting(&self) -> usize {
        self.gate.waiting_total() as usize
    }
    fn brownout(&self, now: u64) -> Option<f64> {
        Some(self.gate.brownout(now))
    }
}

/// Shards of the per-tenant table (`KeyedLimits<KEY_SHARDS>`): with the core's default of
/// 2 shards per key, a key shares both its shards with a given noisy key with probability
/// 1 / C(16, 2) = 1/120 (`keyed::isolation`).
pub const KEY_SHARDS: usize = 16;

/// The share of a host's workers one tenant may hold (queued or served): a per-tenant
/// concurrency cap, at a quarter so that one tenant can never take more than
/// a quarter of the service whatever it sends.
pub const KEY_SHARE: f64 = 0.25;

/// surgeguard [`KeyedLimits`] in front of another policy: a request first takes a slot of
/// its tenant's shards (shuffle sharded, `KeyedLimits::try_acquire_then`), then goes to the
/// inner policy; refused per key → `Reason::KeyLimit` (a 429), refused by the inner policy
/// → its own reason (a 503). The key permit is held while the inner policy queues the
/// request and until the request ends, so one tenant cannot fill the queue either.
/// Requests without a tenant go straight to the inner policy.
pub struct KeyedAdmission {
    keyed: Box<KeyedLimits<KEY_SHARDS>>,
    inner: Box<dyn Admission>,
    /// Key permits of the requests the inner policy holds.
    held: HashMap<Key, KeyPermit>,
}

impl KeyedAdmission {
    /// Per-key limits for a host of `workers` workers (a key holds at most
    /// [`KEY_SHARE`] of them, split over its shards) in front of `inner`.
    pub fn new(workers: u32, seed: u64, inner: Box<dyn Admission>) -> Self {
        let mut cfg = KeyedConfig::new(1);
        let cap = (workers as f64 * KEY_SHARE).ceil().max(1.0);
        cfg.shard_limit = (cap / cfg.shards_per_key as f64).ceil() as u32;
        cfg.seed = seed;
        let keyed = KeyedLimits::new(cfg).expect("the simulator's keyed configs are valid");
        Self { keyed: Box::new(keyed), inner, held: HashMap::new() }
    }

    /// The per-key table (for its metrics).
    pub fn keyed(&self) -> &KeyedLimits<KEY_SHARDS> {
        &self.keyed
    }
}

impl Admission for KeyedAdmission {
    fn arrive(
        &mut self,
        now: u64,
        job: Key,
        level: Priority,
        deadline: Option<u64>,
        key: Option<u64>,
    ) -> Admit {
        let Some(key) = key else { return self.inner.arrive(now, job, level, deadline, None) };
        let inner = &mut self.inner;
        let global = || match inner.arrive(now, job, level, deadline, None) {
            Admit::Go(p) => Ok(Some(p)),
            Admit::Wait => Ok(None),
            Admit::Reject(r) => Err(r),
        };
        match self.keyed.try_acquire_then(key, now, 1, global) {
            Ok((kp, Some(p))) => Admit::Go(Permit::Keyed(kp, Box::new(p))),
            Ok((kp, None)) => {
                self.held.insert(job, kp);
                Admit::Wait
            }
            Err(r) => Admit::Reject(r),
        }
    }
    fn release(&mut self, now: u64, permit: Permit, outcome: Outcome) {
        match permit {
            Permit::Keyed(kp, inner) => {
                self.keyed.release(kp).expect("own permit");
                self.inner.release(now, *inner, outcome);
            }
            other => self.inner.release(now, other, outcome),
        }
    }
    fn poll(&mut self, now: u64, out: &mut Vec<Dispatch>) {
        let start = out.len();
        self.inner.poll(now, out);
        for d in &mut out[start..] {
            match d {
                Dispatch::Go(job, p) => {
                    if let Some(kp) = self.held.remove(job) {
                        let inner = std::mem::replace(p, Permit::Free);
                        *p = Permit::Keyed(kp, Box::new(inner));
                    }
                }
                Dispatch::Drop(job, _) => {
                    if let Some(kp) = self.held.remove(job) {
                        self.keyed.release(kp).expect("own permit");
                    }
                }
            }
        }
    }
    fn next_wakeup(&self, now: u64) -> Option<u64> {
        self.inner.next_wakeup(now)
    }
    fn limit(&self) -> Option<f64> {
        self.inner.limit()
    }
    fn waiting(&self) -> usize {
        self.inner.waiting()
    }
    fn brownout(&self, now: u64) -> Option<f64> {
        self.inner.brownout(now)
    }
}

/// A surgeguard limit algorithm, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// `limit::Fixed`.
    Fixed,
    /// `limit::Aimd` (TCP-style additive increase, multiplicative decrease; Netflix `AIMDLimit`).
    Aimd,
    /// `limit::HysteresisAimd` (AIMD with a dead band on the windowed p99).
    Hysteresis,
    /// `limit::Gradient` (Envoy).
    Gradient,
    /// `limit::Gradient2` (Netflix).
    Gradient2,
    /// `limit::Vegas` (Netflix).
    Vegas,
}

impl Algo {
    /// Every algorithm with its command-line name.
    pub const ALL: [(&'static str, Algo); 6] = [
        ("fixed", Algo::Fixed),
        ("aimd", Algo::Aimd),
        ("hysteresis", Algo::Hysteresis),
        ("gradient", Algo::Gradient),
        ("gradient2", Algo::Gradient2),
        ("vegas", Algo::Vegas),
    ];

    /// The algorithm's config for a host with `workers` workers whose normal request takes
    /// `service_ns` (mean, downstream calls included). Starts at the worker count (what an
    /// operator would configure) and may range from 1 to 4× workers; latency targets where
    /// an algorithm needs one (below); everything else is the core's default.
    pub fn config(self, workers: u32, service_ns: u64) -> AlgorithmConfig {
        let initial = workers as f64;
        let max = 4.0 * workers as f64;
        macro_rules! bounds {
            ($cfg:expr) => {{
                let mut c = $cfg;
                c.initial_limit = initial;
                c.min_limit = 1.0;
                c.max_limit = max;
                c
            }};
        }
        match self {
            Algo::Fixed => AlgorithmConfig::Fixed(bounds!(FixedConfig::default())),
            Algo::Aimd => {
                let mut c = bounds!(AimdConfig::default());
                // The AIMD rule leaves the target to the caller. On the window mean: 3× the normal
                // mean, so a service that merely got slower (2× in busy-but-useless) is not
                // mistaken for queueing and the limit does not collapse to the floor.
                c.target_latency_ns = 3 * service_ns;
                AlgorithmConfig::Aimd(c)
            }
            Algo::Hysteresis => {
                let mut c = bounds!(HysteresisConfig::default());
                // A conservative target: twice the normal p99 (a target below the dependency's own
                // p99 keeps the zones critical); the presets' Erlang-2 work has p99 ≈ 3.3 × mean.
                c.target_latency_ns = (2.0 * P99_OVER_MEAN * service_ns as f64) as u64;
                AlgorithmConfig::Hysteresis(c)
            }
            Algo::Gradient => AlgorithmConfig::Gradient(bounds!(GradientConfig::default())),
            Algo::Gradient2 => AlgorithmConfig::Gradient2(bounds!(Gradient2Config::default())),
            Algo::Vegas => AlgorithmConfig::Vegas(bounds!(VegasConfig::default())),
        }
    }
}

/// p99 / mean of Erlang-2 work (the presets' `cost_shape`): the root of
/// `e^{-2x}(1 + 2x) = 0.01`.
pub const P99_OVER_MEAN: f64 = 3.32;

/// The server half of a protection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// Unbounded FIFO.
    None,
    /// Fixed limit + bounded FIFO.
    Static,
    /// surgeguard `Limiter` with an algorithm.
    Limiter(Algo),
    /// surgeguard `Gate` (limiter with an algorithm + CoDel / LIFO / deadline queue).
    Gate(Algo),
}

impl Server {
    /// Whether the host answers health probes from the policy's own state ("overloaded is
    /// not broken"; health checks on a separate, unqueued path) rather
    /// than through the request queue.
    pub fn probes_bypass_queue(self) -> bool {
        !matches!(self, Server::None | Server::Static)
    }
}

/// The client half of a protection: what every caller (users and tiers) adds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Client {
    /// surgeguard `RetryBudget` (Finagle defaults: 10 % of requests, 10 retries/s floor).
    pub budget: bool,
    /// surgeguard `Backoff` (exponential, full jitter) instead of the scenario's delay.
    pub backoff: bool,
    /// surgeguard `CircuitBreaker` per caller.
    pub breaker: bool,
    /// surgeguard `AdaptiveThrottle` (SRE client-side throttling) per caller.
    pub throttle: bool,
    /// Deadline propagation (Google SRE book, "Addressing Cascading Failures"): every
    /// caller sends its remaining budget minus a margin (`deadline::HeaderValue`, the
    /// `grpc-timeout` format) and fails fast when the budget left is below the
    /// dependency's expected latency; every server turns the header into an absolute
    /// deadline at arrival (`deadline::deadline_at`), gives it to its admission and stops
    /// work whose deadline passes. Below the origin, the propagated deadline replaces each
    /// hop's own per-attempt timeout (the SRE book: servers should not invent deadlines).
    pub deadlines: bool,
    /// With `deadlines`, every hop also keeps its own per-attempt timeout (whichever passes
    /// first ends the attempt): `deadlines-and-timeouts`.
    pub keep_timeouts: bool,
}

/// A protection: a server policy on every protected tier, a client policy on every caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protection {
    /// As given on the command line.
    pub name: String,
    /// Server side.
    pub server: Server,
    /// Client side.
    pub client: Client,
    /// Per-tenant `KeyedLimits` in front of the server policy.
    pub keyed: bool,
    /// The application skips optional work with the Gate's brownout dimmer
    /// (`Gate::brownout`) as the probability.
    pub dimmer: bool,
}

/// Guaranteed shares of the limit per level used by the `Limiter`-only policies here.
///
/// The limiter's partition rule makes a share a guarantee: an active level holds back the
/// part of its share it does not use, from every less important level. The core's default
/// (0.7 / 0.25 / 0.05) reserves 70 % of the limit for `critical`
/// whenever it is active, which with the presets' 10–20 % critical traffic keeps most of
/// that share idle (measured: goodput 43 % of capacity in `busy-but-useless`). A limiter
/// without a queue refuses a critical arrival that finds its share used, so its shares are
/// sized to the presets' mix with room for critical to double (its bursts).
pub const SIM_WEIGHTS: [f64; 3] = [0.2, 0.5, 0.3];

/// Guaranteed shares for the `Gate` policies: critical's share is its share of the presets'
/// traffic (10 %), no more. The Gate queues a critical arrival that finds its share used and
/// hands it the next freed slot before any less important waiter, so critical needs no
/// headroom, and every point of share above its use is held idle while less important work
/// queues: with `SIM_WEIGHTS` the Gate lost 4–5 points of goodput in `priority-flood`
/// (95 % of capacity instead of 99 %, over 6 seeds) and 5 in `retry-storm` (56 % instead of
/// 61 %, over 12 seeds).
pub const GATE_WEIGHTS: [f64; 3] = [0.1, 0.5, 0.4];

/// Server policy names and what they are.
pub const SERVER_NAMES: &[(&str, &str)] = &[
    ("none", "unbounded FIFO queue in front of the worker pool"),
    ("static", "fixed limit = workers, bounded FIFO of 100 ms of drain, full -> 503"),
    ("fixed", "surgeguard Limiter, limit::Fixed (= workers), priority partitions, no queue"),
    ("aimd", "surgeguard Limiter, limit::Aimd (additive increase, multiplicative decrease)"),
    ("hysteresis", "surgeguard Limiter, limit::HysteresisAimd (AIMD with p99 zones)"),
    ("gradient", "surgeguard Limiter, limit::Gradient (Envoy)"),
    ("gradient2", "surgeguard Limiter, limit::Gradient2 (Netflix)"),
    ("vegas", "surgeguard Limiter, limit::Vegas (Netflix)"),
    (
        "gate",
        "surgeguard Gate: Limiter (limit::Gradient) + priority queue of 100 ms of drain, \
              folly CoDel, adaptive LIFO, deadline checks; gate-<algorithm> for another",
    ),
    (
        "dimmer",
        "with gate: the application skips each request's optional work with probability = \
              Gate::brownout (Klein et al., Brownout); without it optional work is always served",
    ),
    (
        "keyed+SERVER",
        "surgeguard KeyedLimits per tenant in front of SERVER: 16 shards, 2 per tenant \
              (shuffle sharding), a tenant holds at most 1/4 of the workers; 429 vs 503",
    ),
];

/// Client policy names and what they are.
pub const CLIENT_NAMES: &[(&str, &str)] = &[
    ("budget", "surgeguard RetryBudget at every caller (10% of requests)"),
    ("backoff", "surgeguard Backoff: exponential, full jitter, honours Retry-After"),
    ("breaker", "surgeguard CircuitBreaker at every caller (50% failures, 2 s open, ramp)"),
    ("throttle", "surgeguard AdaptiveThrottle at every caller (SRE K = 2)"),
    (
        "deadlines",
        "deadline propagation: callers send their remaining budget (grpc-timeout, 1 ms \
              margin), which replaces each hop's per-attempt timeout, and fail fast below \
              the dependency's expected latency; servers admit against it, start no work \
              the deadline leaves no time for and stop work whose caller gave up",
    ),
    (
        "deadlines-and-timeouts",
        "deadlines, with every hop keeping its own per-attempt timeout as well",
    ),
];

impl Protection {
    /// Parses `[keyed+]server[+client...]`, e.g. `none`, `static`, `aimd`, `budget`,
    /// `aimd+budget`, `keyed+gate`.
    pub fn parse(name: &str) -> Result<Self, String> {
        let mut server = None;
        let mut client = Client::default();
        let mut keyed = false;
        let mut dimmer = false;
        for part in name.split('+') {
            let part = part.trim();
            let s = match part {
                "none" => Some(Server::None),
                "static" => Some(Server::Static),
                "gate" => Some(Server::Gate(Algo::Gradient)),
                _ => match part.strip_prefix("gate-") {
                    Some(a) => {
                        Algo::ALL.iter().find(|(n, _)| *n == a).map(|(_, a)| Server::Gate(*a))
                    }
                    None => {
                        Algo::ALL.iter().find(|(n, _)| *n == part).map(|(_, a)| Server::Limiter(*a))
                    }
                },
            };
            if let Some(s) = s {
                if server.replace(s).is_some() {
                    return Err(format!("{name}: more than one server policy"));
                }
                continue;
            }
            match part {
                "budget" => client.budget = true,
                "backoff" => client.backoff = true,
                "breaker" => client.breaker = true,
                "throttle" => client.throttle = true,
                "deadlines" => client.deadlines = true,
                "deadlines-and-timeouts" => {
                    client.deadlines = true;
                    client.keep_timeouts = true;
                }
                "keyed" => keyed = true,
                "dimmer" => dimmer = true,
                _ => return Err(format!("{name}: unknown policy `{part}` (see --help)")),
            }
        }
        let server = server.unwrap_or(Server::None);
        if dimmer && !matches!(server, Server::Gate(_)) {
            return Err(format!("{name}: the dimmer is the Gate's (use gate+dimmer)"));
        }
        Ok(Self { name: name.to_string(), server, client, keyed, dimmer })
    }

    /// The admission policy for one host of a protected tier; `seed` seeds the tenant to
    /// shards mapping of a keyed policy.
    pub fn admission(
        &self,
        workers: u32,
        service_ns: u64,
        levels: u8,
        seed: u64,
    ) -> Box<dyn Admission> {
        let inner = self.server_admission(workers, service_ns, levels);
        if self.keyed {
            Box::new(KeyedAdmission::new(workers, seed, inner))
        } else {
            inner
        }
    }

    fn server_admission(&self, workers: u32, service_ns: u64, levels: u8) -> Box<dyn Admission> {
        match self.server {
            Server::None => Box::new(Unbounded),
            Server::Static => {
                // Little's law: max_queue_len = drain_rate × max_acceptable_wait (100 ms)
                let drain_per_s = workers as f64 * 1e9 / service_ns as f64;
                Box::new(StaticFifo::new(workers, (drain_per_s * 0.1).ceil() as usize))
            }
            Server::Limiter(algo) => {
                let mut cfg = LimiterConfig::with_algorithm(algo.config(workers, service_ns));
                cfg.levels = levels;
                cfg.weights[..3].copy_from_slice(&SIM_WEIGHTS);
                Box::new(LimiterOnly::new(&cfg))
            }
            Server::Gate(algo) => {
                let mut limiter = LimiterConfig::with_algorithm(algo.config(workers, service_ns));
                limiter.levels = levels;
                limiter.weights[..3].copy_from_slice(&GATE_WEIGHTS);
                let drain_per_s = workers as f64 * 1e9 / service_ns as f64;
                let mut cfg = GateConfig::default();
                cfg.limiter = limiter;
                // Little's law: queue_capacity = drain_rate × wait budget (100 ms)
                cfg.queue_capacity = Some(((drain_per_s * 0.1).ceil() as usize).clamp(1, GATE_CAP));
                cfg.codel = Some(CodelConfig::default()); // folly: 5 ms target, 100 ms interval
                cfg.lifo = LifoTrigger::CodelOverloaded; // "Fail at Scale" adaptive LIFO
                cfg.initial_service_ns = service_ns;
                Box::new(GateAdmission::new(&cfg))
            }
        }
    }
}

/// How an attempt ended, as a caller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    /// A success response in time.
    Success,
    /// A rejection or error response (503 / overload).
    Rejected,
    /// No response before the timeout.
    TimedOut,
}

/// Client-side policy of one caller process: consulted before each attempt and retry.
pub trait ClientPolicy {
    /// A new call (not a retry) starts.
    fn on_call(&mut self, _now: u64) {}
    /// May an attempt go out now? `Err` fails the call locally (breaker open).
    fn before_attempt(&mut self, _now: u64) -> Result<u64, Rejected> {
        Ok(0)
    }
    /// An attempt ended (`token` from `before_attempt`).
    fn after_attempt(&mut self, _now: u64, _token: u64, _result: AttemptResult, _latency: u64) {}
    /// May the call retry? `Err` ends it (budget exhausted).
    fn allow_retry(&mut self, _now: u64) -> Result<(), Rejected> {
        Ok(())
    }
    /// Delay before retry number `retry` (1 = first), given the server's hint.
    fn retry_delay(&mut self, retry: u32, hint: Option<u64>) -> u64;
}

/// The scenario's own retry behaviour: a fixed delay (0 = immediate), hints ignored
/// (many clients retry at once, with no backoff).
pub struct NaiveClient {
    /// Delay before every retry, ns.
    pub delay_ns: u64,
}

impl ClientPolicy for NaiveClient {
    fn retry_delay(&mut self, _: u32, _: Option<u64>) -> u64 {
        self.delay_ns
    }
}

/// The surgeguard client controls a caller adds, each optional; what is absent behaves as
/// [`NaiveClient`]. All decisions are the core's: `RetryBudget::try_withdraw`,
/// `Backoff::next_delay`, `CircuitBreaker::try_acquire`/`record`,
/// `AdaptiveThrottle::should_throttle`/`record`.
pub struct ClientStack {
    delay_ns: u64,
    budget: Option<RetryBudget>,
    backoff: Option<Backoff>,
    breaker: Option<CircuitBreaker>,
    throttle: Option<AdaptiveThrottle>,
    permits: HashMap<u64, BreakerPermit>,
    next_token: u64,
    rng: SplitMix64,
}

/// The breaker settings the simulator uses: resilience4j's thresholds (50 % failures, a
/// count window of 100) with its 60 s open period scaled to the compressed time of the
/// scenarios (2 s, 20 % jitter), 5 probes, a 3 s traffic ramp (10 → 25 → 50 →
/// 100 %, so a half-open breaker does not hand a recovering dependency all its traffic at once). A call slower than 1 s (the client timeout of the presets) is slow.
pub fn sim_breaker_config(seed: u64) -> CircuitBreakerConfig {
    let mut c = CircuitBreakerConfig::default();
    c.minimum_calls = 20;
    c.open_duration = 2 * SEC;
    c.probe_lease = SEC;
    c.half_open_probes = 5;
    c.ramp_duration = 3 * SEC;
    c.slow_call_duration = SEC;
    c.seed = seed;
    c
}

/// The throttle settings: SRE K = 2, its 2-minute window scaled to 10 s.
pub fn sim_throttle_config() -> AdaptiveThrottleConfig {
    let mut c = AdaptiveThrottleConfig::default();
    c.window = 10 * SEC;
    c
}

const SEC: u64 = 1_000_000_000;

impl ClientPolicy for ClientStack {
    fn on_call(&mut self, now: u64) {
        if let Some(b) = &self.budget {
            b.deposit(now);
        }
    }

    fn before_attempt(&mut self, now: u64) -> Result<u64, Rejected> {
        if let Some(t) = &self.throttle {
            t.should_throttle(now, self.rng.next_u64())?;
        }
        self.next_token += 1;
        if let Some(b) = &self.breaker {
            let permit = b.try_acquire(now)?;
            self.permits.insert(self.next_token, permit);
        }
        Ok(self.next_token)
    }

    fn after_attempt(&mut self, now: u64, token: u64, result: AttemptResult, latency: u64) {
        let outcome =
            if result == AttemptResult::Success { Outcome::Success } else { Outcome::Dropped };
        if let (Some(b), Some(p)) = (&self.breaker, self.permits.remove(&token)) {
            b.record(p, now, outcome, latency);
        }
        if let Some(t) = &self.throttle {
            t.record(now, result == AttemptResult::Success);
        }
    }

    fn allow_retry(&mut self, now: u64) -> Result<(), Rejected> {
        match &self.budget {
            Some(b) => b.try_withdraw(now),
            None => Ok(()),
        }
    }

    fn retry_delay(&mut self, retry: u32, hint: Option<u64>) -> u64 {
        match &mut self.backoff {
            Some(b) => b.next_delay(retry, hint, &mut self.rng),
            None => self.delay_ns,
        }
    }
}

/// Builds the client policy of one caller process: the scenario's naive retries plus the
/// protection's client controls.
pub fn client_policy(protection: &Protection, delay_ns: u64, seed: u64) -> Box<dyn ClientPolicy> {
    let c = protection.client;
    // Deadlines are the world's business (headers, fail fast); no control of their own here.
    if (Client { deadlines: false, keep_timeouts: false, ..c }) == Client::default() {
        return Box::new(NaiveClient { delay_ns });
    }
    Box::new(ClientStack {
        delay_ns,
        budget: c.budget.then(|| {
            RetryBudget::new(RetryBudgetConfig::default()).expect("default budget is valid")
        }),
        backoff: c
            .backoff
            .then(|| Backoff::new(BackoffConfig::default()).expect("default backoff is valid")),
        breaker: c.breaker.then(|| {
            CircuitBreaker::new(sim_breaker_config(seed)).expect("sim breaker config is valid")
        }),
        throttle: c.throttle.then(|| {
            AdaptiveThrottle::new(sim_throttle_config()).expect("sim throttle config is valid")
        }),
        permits: HashMap::new(),
        next_token: 0,
        rng: SplitMix64::new(seed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protections_parse() {
        let p = Protection::parse("aimd+budget").unwrap();
        assert_eq!(p.server, Server::Limiter(Algo::Aimd));
        assert!(p.client.budget && !p.client.breaker);
        assert_eq!(Protection::parse("budget").unwrap().server, Server::None);
        assert!(Protection::parse("aimd+static").is_err());
        assert!(Protection::parse("quantum").is_err());
        let k = Protection::parse("keyed+gate").unwrap();
        assert!(k.keyed && k.server == Server::Gate(Algo::Gradient));
        assert!(!Protection::parse("gate").unwrap().keyed);
        let d = Protection::parse("gate+budget+deadlines").unwrap();
        assert!(d.client.deadlines && d.client.budget && !d.client.keep_timeouts);
        let t = Protection::parse("gate+deadlines-and-timeouts").unwrap();
        assert!(t.client.deadlines && t.client.keep_timeouts);
        assert!(Protection::parse("gate+dimmer").unwrap().dimmer);
        assert!(!Protection::parse("gate").unwrap().dimmer);
        assert!(Protection::parse("static+dimmer").is_err(), "the dimmer is the Gate's");
    }

    #[test]
    fn keyed_caps_one_key_and_releases_its_permits() {
        use surgeguard_core::keyed::hash_key;
        use surgeguard_core::Reason;
        let mut slab = crate::engine::Slab::default();
        // 8 workers: a key holds at most 2 (a quarter), one slot in each of its 2 shards;
        // behind it a static FIFO of 8 + 8 waiting.
        let mut a = KeyedAdmission::new(8, 7, Box::new(StaticFifo::new(8, 8)));
        assert_eq!(a.keyed().key_limit(), 2);
        let (noisy, quiet) = (hash_key(1, b"noisy"), hash_key(1, b"quiet"));
        let mut permits = Vec::new();
        for _ in 0..2 {
            match a.arrive(0, slab.insert(0), Priority::NORMAL, None, Some(noisy)) {
                Admit::Go(p) => permits.push(p),
                _ => panic!("under the key's cap"),
            }
        }
        match a.arrive(0, slab.insert(0), Priority::NORMAL, None, Some(noisy)) {
            Admit::Reject(r) => assert_eq!(r.reason, Reason::KeyLimit),
            _ => panic!("over the key's cap"),
        }
        // Another key, or no key, still gets in unless the shards collide completely.
        let quiet_shares_all = a.keyed().shards_of(quiet) == a.keyed().shards_of(noisy);
        let q = a.arrive(0, slab.insert(0), Priority::NORMAL, None, Some(quiet));
        assert_eq!(matches!(q, Admit::Go(_)), !quiet_shares_all);
        assert!(matches!(a.arrive(0, slab.insert(0), Priority::NORMAL, None, None), Admit::Go(_)));
        for p in permits {
            a.release(1, p, Outcome::Success);
        }
        assert_eq!(a.keyed().metrics().in_flight, u64::from(!quiet_shares_all));
        assert!(matches!(
            a.arrive(1, slab.insert(0), Priority::NORMAL, None, Some(noisy)),
            Admit::Go(_)
        ));
    }

    #[test]
    fn keyed_holds_the_key_while_the_inner_policy_queues() {
        use surgeguard_core::keyed::hash_key;
        let mut slab = crate::engine::Slab::default();
        let mut a = KeyedAdmission::new(4, 7, Box::new(StaticFifo::new(1, 4)));
        let k = hash_key(1, b"t");
        let first = match a.arrive(0, slab.insert(0), Priority::NORMAL, None, Some(k)) {
            Admit::Go(p) => p,
            _ => panic!("a free worker"),
        };
        let queued = slab.insert(0);
        assert!(matches!(a.arrive(0, queued, Priority::NORMAL, None, Some(k)), Admit::Wait));
        assert_eq!(a.keyed().metrics().in_flight, 2, "the queued request holds its key slot");
        a.release(1, first, Outcome::Success);
        let mut out = Vec::new();
        a.poll(1, &mut out);
        let Some(Dispatch::Go(job, p)) = out.pop() else { panic!("the queued one goes") };
        assert_eq!(job, queued);
        assert!(matches!(p, Permit::Keyed(..)));
        a.release(2, p, Outcome::Success);
        assert_eq!(a.keyed().metrics().in_flight, 0);
    }

    #[test]
    fn static_fifo_is_bounded_and_fifo() {
        let mut slab = crate::engine::Slab::default();
        let keys: Vec<Key> = (0..4).map(|i| slab.insert(i)).collect();
        let mut s = StaticFifo::new(1, 2);
        assert!(matches!(s.arrive(0, keys[0], Priority::NORMAL, None, None), Admit::Go(_)));
        assert!(matches!(s.arrive(0, keys[1], Priority::NORMAL, None, None), Admit::Wait));
        assert!(matches!(s.arrive(0, keys[2], Priority::NORMAL, None, None), Admit::Wait));
        assert!(matches!(s.arrive(0, keys[3], Priority::NORMAL, None, None), Admit::Reject(_)));
        s.release(1, Permit::Slot, Outcome::Success);
        let mut out = Vec::new();
        s.poll(1, &mut out);
        assert!(matches!(out.as_slice(), [Dispatch::Go(k, _)] if *k == keys[1]));
        assert_eq!(s.waiting(), 1);
    }
}
