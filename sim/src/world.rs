//! The simulated world: users, tiers of hosts with worker pools, callers with timeouts and
//! retries, a load balancer with health checks, all in virtual time, driving the real core
//! through the policies of [`crate::protect`].

use std::collections::VecDeque;

use surgeguard_core::deadline::{deadline_at, parse_grpc_timeout, HeaderFormat, HeaderValue};
use surgeguard_core::keyed::{hash_key, is_per_key};
use surgeguard_core::rng::{mix, SplitMix64};
use surgeguard_core::{Outcome, Priority, Rejected};

use crate::engine::{EventQueue, Key, Slab};
use crate::metrics::{Recorder, Summary, UserOutcome, BUCKET_NS};
use crate::protect::{
    client_policy, Admission, Admit, AttemptResult, ClientPolicy, Dispatch, Permit, Protection,
    Unbounded,
};
use crate::scenario::Scenario;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// One-way network delay between any two parties.
const NET_NS: u64 = 250_000;
/// With deadline propagation, what a caller keeps back from its remaining budget when it
/// writes the next hop's header: the response's way back and some slack (gRPC leaves the
/// margin to the application; 1 ms covers the simulated network four times over).
pub const DEADLINE_MARGIN_NS: u64 = MS;
/// Weight of a new sample in a caller's estimate of its dependency's latency (an EWMA of
/// the latencies of successful attempts).
const LATENCY_EWMA: f64 = 0.05;

fn ns(ms: f64) -> u64 {
    (ms * MS as f64).round() as u64
}

fn secs(s: f64) -> u64 {
    (s * SEC as f64).round() as u64
}

enum Ev {
    /// The next original of a load class (`generation` names the draw it came from).
    Arrival { class: usize, generation: u32 },
    /// A load class's rate changes: redraw its next arrival.
    RateEdge { class: usize },
    /// Send the next attempt of a call.
    Send { call: Key },
    /// An attempt reaches its host.
    Deliver { attempt: Key },
    /// An attempt's timeout fires at its caller.
    Timeout { attempt: Key },
    /// A response reaches the caller.
    Respond { attempt: Key, ok: bool, hint: Option<u64> },
    /// A job's local work is done.
    LocalDone { job: Key },
    /// An admission policy asked to be polled.
    Wake { tier: usize, host: usize, epoch: u32 },
    /// A health probe of a host.
    Probe { host: usize, epoch: u32 },
    /// A restarted host rejoins.
    HostUp { host: usize, epoch: u32 },
    /// A job's caller deadline passes while its local work runs: stop it (deadlines).
    Stop { job: Key },
    /// Gauges for the plots.
    Sample,
}

#[derive(Clone, Copy)]
enum Parent {
    User { created: u64 },
    Job(Key),
    Probe { host: usize, epoch: u32 },
}

#[derive(Clone, Copy)]
enum CallerRef {
    User(usize),
    Host(usize, usize),
    Probe,
}

struct Call {
    parent: Parent,
    caller: CallerRef,
    tier: usize,
    level: Priority,
    attempts: u32,
    max_attempts: u32,
    timeout: u64,
    pin: Option<usize>,
    tenant: Option<u16>,
    /// The deadline the whole call must meet (the parent job's), with deadline propagation.
    deadline: Option<u64>,
}

struct Attempt {
    call: Key,
    sent: u64,
    /// When the caller gives up on this attempt.
    deadline: u64,
    settled: bool,
    token: u64,
    /// The remaining budget as sent on the wire (`grpc-timeout`), with deadline propagation.
    header: Option<HeaderValue>,
}

struct Job {
    tier: usize,
    host: usize,
    epoch: u32,
    attempt: Key,
    level: Priority,
    deadline: u64,
    permit: Option<Permit>,
    probe: bool,
    tenant: Option<u16>,
    /// When the caller gives up (the attempt's timeout): judges whether work was useful.
    caller_deadline: u64,
    /// When a worker took it (0: not yet).
    started: u64,
    /// When its local work ends, once started.
    local_done: u64,
}

struct Host {
    up: bool,
    epoch: u32,
    busy: u32,
    fifo: VecDeque<Key>,
    admission: Box<dyn Admission>,
    client: Box<dyn ClientPolicy>,
    failures: u32,
    restarted_at: Option<u64>,
    wake_at: Option<u64>,
    /// This host's estimate of its dependency's latency, ns (deadline propagation's
    /// fail-fast test): an EWMA of successful attempts, from the nominal latency.
    dep_latency_ns: f64,
    /// This host's estimate of its own local work, ns (an EWMA of finished local work):
    /// with deadlines, a worker does not start a job whose deadline is nearer.
    work_ns: f64,
}

struct Tier {
    hosts: Vec<Host>,
    rr: usize,
    rng: SplitMix64,
    /// The application's coin for skipping optional work (its own stream, so the work
    /// draws are the same with and without the dimmer).
    dim_rng: SplitMix64,
    /// Optional work as a fraction of the local work.
    optional: f64,
    protected: bool,
    workers: u32,
    cost_ns: f64,
    shape: u32,
    /// `(start, end, factor)` slow-downs.
    slow: Vec<(u64, u64, f64)>,
    /// `(start, end)` pauses.
    pauses: Vec<(u64, u64)>,
}

/// The outcome of one run.
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Protection name.
    pub protection: String,
    /// Time series and outcomes.
    pub rec: Recorder,
    /// The table's numbers.
    pub summary: Summary,
    /// Events processed (the run's cost).
    pub events: u64,
    /// The scenario's tier names, outermost first (`rec.work` is indexed alike).
    pub tiers: Vec<String>,
    /// The tier the plots and the dimmer series watch (the protected bottleneck).
    pub watched: usize,
    /// The trigger `[start, end)`, ns.
    pub trigger: (u64, u64),
}

/// One simulation run: a scenario under a protection.
pub struct World<'a> {
    sc: &'a Scenario,
    prot: &'a Protection,
    q: EventQueue<Ev>,
    tiers: Vec<Tier>,
    users: Vec<Box<dyn ClientPolicy>>,
    next_user: usize,
    arrivals: Vec<SplitMix64>,
    arrival_gen: Vec<u32>,
    calls: Slab<Call>,
    attempts: Slab<Attempt>,
    jobs: Slab<Job>,
    rec: Recorder,
    end: u64,
    dispatch: Vec<Dispatch>,
    seed: u64,
    /// The tier whose limit and queue the plots show.
    watched: usize,
    /// The tenant of each load class.
    class_tenant: Vec<Option<u16>>,
    /// Each tenant's key hash (`keyed::hash_key` of its name).
    tenant_keys: Vec<u64>,
    /// Whether each tenant floods (for the summary).
    flooding: Vec<bool>,
    /// Deadline propagation is on.
    deadlines: bool,
    /// With deadlines, a hop keeps its own per-attempt timeout too.
    keep_timeouts: bool,
    /// The trigger, ns (work is accounted for the jobs started in it).
    trigger: (u64, u64),
}

/// Seed of the tenant-name hash (a binding picks one at random at startup; here it derives
/// from the scenario's seed so runs replay).
fn key_seed(seed: u64) -> u64 {
    mix(seed ^ 0x007e_4a47)
}

/// Seed of a host's tenant-to-shards mapping.
fn shard_seed(seed: u64, tier: usize, host: usize) -> u64 {
    mix(seed ^ 0x0005_4a4d ^ ((tier as u64) << 40) ^ host as u64)
}

fn stream(seed: u64, a: u64, b: u64) -> SplitMix64 {
    SplitMix64::new(mix(seed ^ mix(a.wrapping_mul(0x9E37_79B9) ^ (b << 32))))
}

impl<'a> World<'a> {
    /// Builds the world at time 0.
    pub fn new(sc: &'a Scenario, prot: &'a Protection) -> Self {
        let seed = sc.seed;
        let levels = 3;
        let tiers: Vec<Tier> = sc
            .tiers
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let cost_ns = t.cost_ms * MS as f64;
                let delay = t.call.as_ref().map_or(0, |c| ns(c.retry_delay_ms));
                Tier {
                    hosts: (0..t.hosts as usize)
                        .map(|h| Host {
                            up: true,
                            epoch: 0,
                            busy: 0,
                            fifo: VecDeque::new(),
                            admission: Self::admission_for(
                                prot,
                                t.protect,
                                t.workers,
                                nominal_ns(sc, i),
                                levels,
                                shard_seed(seed, i, h),
                            ),
                            client: client_policy(
                                prot,
                                delay,
                                mix(seed ^ (i as u64 * 1000 + h as u64 + 17)),
                            ),
                            failures: 0,
                            restarted_at: None,
                            wake_at: None,
                            dep_latency_ns: if i + 1 < sc.tiers.len() {
                                nominal_ns(sc, i + 1) + 2.0 * NET_NS as f64
                            } else {
                                0.0
                            },
                            work_ns: cost_ns,
                        })
                        .collect(),
                    rr: 0,
                    rng: stream(seed, 2, i as u64),
                    dim_rng: stream(seed, 3, i as u64),
                    optional: t.optional_cost,
                    protected: t.protect,
                    workers: t.workers,
                    cost_ns,
                    shape: t.cost_shape,
                    slow: t
                        .changes
                        .iter()
                        .filter(|c| !c.pause)
                        .map(|c| (secs(c.span.start_s), secs(c.span.end_s), c.cost_factor))
                        .collect(),
                    pauses: t
                        .changes
                        .iter()
                        .filter(|c| c.pause)
                        .map(|c| (secs(c.span.start_s), secs(c.span.end_s)))
                        .collect(),
                }
            })
            .collect();
        let delay = ns(sc.client.retry_delay_ms);
        let users = (0..sc.client_processes as u64)
            .map(|p| client_policy(prot, delay, mix(seed ^ (0xC11E << 16) ^ p)))
            .collect();
        let end = secs(sc.duration_s);
        // Plots show the protected tier with the least capacity (the bottleneck).
        let watched = (0..sc.tiers.len())
            .filter(|&i| sc.tiers[i].protect)
            .min_by(|&a, &b| {
                let cap = |i: usize| {
                    let t = &sc.tiers[i];
                    (t.hosts * t.workers) as f64 / t.cost_ms
                };
                cap(a).total_cmp(&cap(b))
            })
            .unwrap_or(0);
        let mut w = World {
            sc,
            prot,
            q: EventQueue::default(),
            tiers,
            users,
            next_user: 0,
            arrivals: (0..sc.load.len()).map(|c| stream(seed, 1, c as u64)).collect(),
            arrival_gen: vec![0; sc.load.len()],
            calls: Slab::default(),
            attempts: Slab::default(),
            jobs: Slab::default(),
            rec: Recorder::new(end, sc.tiers.len()),
            end,
            dispatch: Vec::new(),
            seed,
            watched,
            class_tenant: sc.class_tenants(),
            tenant_keys: sc
                .tenants()
                .iter()
                .map(|t| hash_key(key_seed(seed), t.as_bytes()))
                .collect(),
            flooding: sc.flooding_tenants(),
            deadlines: prot.client.deadlines,
            keep_timeouts: prot.client.keep_timeouts,
            trigger: (secs(sc.trigger.start_s), secs(sc.trigger.end_s)),
        };
        for class in 0..sc.load.len() {
            w.schedule_arrival(class);
            let mut edges: Vec<u64> = sc.load[class]
                .changes
                .iter()
                .flat_map(|c| [secs(c.span.start_s), secs(c.span.end_s)])
                .collect();
            edges.sort_unstable();
            edges.dedup();
            for e in edges {
                w.q.schedule(e, Ev::RateEdge { class });
            }
        }
        if let Some(h) = &sc.health {
            let n = w.tiers[h.tier].hosts.len() as u64;
            for host in 0..n as usize {
                let offset = ns(h.interval_ms) * (host as u64 + 1) / n;
                w.q.schedule(offset, Ev::Probe { host, epoch: 0 });
            }
        }
        w.q.schedule(BUCKET_NS - 1, Ev::Sample);
        w
    }

    fn admission_for(
        prot: &Protection,
        protect: bool,
        workers: u32,
        nominal_ns: f64,
        levels: u8,
        seed: u64,
    ) -> Box<dyn Admission> {
        if protect {
            prot.admission(workers, nominal_ns as u64, levels, seed)
        } else {
            Box::new(Unbounded)
        }
    }

    /// Runs to the end and summarizes.
    pub fn run(mut self) -> RunResult {
        while let Some(ev) = self.q.pop_until(self.end) {
            self.handle(ev);
        }
        let sc = self.sc;
        let trigger = (secs(sc.trigger.start_s), secs(sc.trigger.end_s));
        let summary =
            Summary::of(&self.rec, trigger, self.end, sc.degraded_capacity(), &self.flooding);
        RunResult {
            scenario: sc.name.clone(),
            protection: self.prot.name.clone(),
            events: self.q.processed(),
            tiers: sc.tiers.iter().map(|t| t.name.clone()).collect(),
            watched: self.watched,
            trigger,
            rec: self.rec,
            summary,
        }
    }

    fn now(&self) -> u64 {
        self.q.now()
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival { class, generation } => {
                if generation == self.arrival_gen[class] {
                    self.on_arrival(class);
                }
            }
            Ev::RateEdge { class } => {
                // Poisson arrivals are memoryless: dropping the pending draw and drawing
                // afresh at the new rate is exact.
                self.arrival_gen[class] += 1;
                self.schedule_arrival(class);
            }
            Ev::Send { call } => self.send_attempt(call),
            Ev::Deliver { attempt } => self.deliver(attempt),
            Ev::Timeout { attempt } => self.on_timeout(attempt),
            Ev::Respond { attempt, ok, hint } => self.on_response(attempt, ok, hint),
            Ev::LocalDone { job } => self.on_local_done(job),
            Ev::Wake { tier, host, epoch } => {
                if self.tiers[tier].hosts[host].epoch == epoch {
                    self.tiers[tier].hosts[host].wake_at = None;
                    self.pump(tier, host);
                }
            }
            Ev::Probe { host, epoch } => self.on_probe(host, epoch),
            Ev::HostUp { host, epoch } => self.on_host_up(host, epoch),
            Ev::Stop { job } => self.stop_job(job),
            Ev::Sample => self.on_sample(),
        }
    }

    // ---- load ----

    fn schedule_arrival(&mut self, class: usize) {
        let now = self.now();
        let rate = self.sc.rate_at(class, now as f64 / 1e9);
        if rate <= 0.0 {
            return; // the next RateEdge restarts it
        }
        let u = self.arrivals[class].next_f64();
        let gap = -(1.0 - u).ln() / rate;
        let generation = self.arrival_gen[class];
        self.q.schedule(now + (gap * 1e9) as u64, Ev::Arrival { class, generation });
    }
}

impl World<'_> {
    fn on_arrival(&mut self, class: usize) {
        let now = self.now();
        self.schedule_arrival(class);
        self.rec.original(now, self.class_tenant[class]);
        let level = Priority::new(self.sc.load[class].priority).unwrap_or_default();
        let process = self.next_user;
        self.next_user = (self.next_user + 1) % self.users.len();
        self.users[process].on_call(now);
        let c = &self.sc.client;
        let call = self.calls.insert(Call {
            parent: Parent::User { created: now },
            caller: CallerRef::User(process),
            tier: 0,
            level,
            attempts: 0,
            max_attempts: c.max_attempts,
            timeout: ns(c.timeout_ms),
            pin: None,
            tenant: self.class_tenant[class],
            deadline: None,
        });
        self.send_attempt(call);
    }

    /// The caller's estimate of the latency of the tier it calls (0: it has none, i.e. a
    /// user or a probe: they carry no deadline of their own).
    fn expected_latency(&self, caller: CallerRef) -> f64 {
        match caller {
            CallerRef::Host(t, h) => self.tiers[t].hosts[h].dep_latency_ns,
            _ => 0.0,
        }
    }

    fn policy(&mut self, caller: CallerRef) -> Option<&mut Box<dyn ClientPolicy>> {
        match caller {
            CallerRef::User(p) => Some(&mut self.users[p]),
            CallerRef::Host(t, h) => Some(&mut self.tiers[t].hosts[h].client),
            CallerRef::Probe => None,
        }
    }

    // ---- callers ----

    fn send_attempt(&mut self, call_key: Key) {
        let now = self.now();
        let Some(call) = self.calls.get(call_key) else { return };
        let (caller, tier, call_deadline) = (call.caller, call.tier, call.deadline);
        let mut give_up = now + call.timeout;
        let mut header = None;
        if self.deadlines {
            // The next hop gets what is left of the attempt's time minus the margin,
            // formatted and parsed as on the wire (rounded down).
            if let Some(d) = call_deadline {
                // Google SRE book, "Addressing Cascading Failures": "rather than inventing a
                // deadline when sending RPCs to backends, servers should employ deadline
                // propagation" -- the call's deadline replaces the hop's own per-attempt
                // timeout, unless the protection keeps both (the first to pass wins).
                give_up = if self.keep_timeouts { give_up.min(d) } else { d };
                let left = d.saturating_sub(now).saturating_sub(DEADLINE_MARGIN_NS);
                if (left as f64) < self.expected_latency(caller) {
                    // Fail fast: the budget left cannot cover the dependency's latency.
                    if self.in_trigger(now) {
                        self.rec.work[tier].failed_fast += 1;
                    }
                    self.complete_call(call_key, false);
                    return;
                }
            }
            match HeaderValue::of_deadline(
                HeaderFormat::GrpcTimeout,
                give_up,
                now,
                DEADLINE_MARGIN_NS,
            ) {
                Ok(h) => header = Some(h),
                Err(_) => {
                    if self.in_trigger(now) {
                        self.rec.work[tier].failed_fast += 1;
                    }
                    self.complete_call(call_key, false);
                    return;
                }
            }
        }
        let token = match self.policy(caller).map(|p| p.before_attempt(now)) {
            Some(Err(_)) => {
                // The breaker refused locally: the call fails at once, no retry.
                self.complete_call(call_key, false);
                return;
            }
            Some(Ok(t)) => t,
            None => 0,
        };
        let call = self.calls.get_mut(call_key).expect("checked above");
        call.attempts += 1;
        let attempt = self.attempts.insert(Attempt {
            call: call_key,
            sent: now,
            deadline: give_up,
            settled: false,
            token,
            header,
        });
        self.rec.attempt(now, tier);
        self.q.schedule(give_up, Ev::Timeout { attempt });
        self.q.schedule(now + NET_NS, Ev::Deliver { attempt });
    }

    fn on_timeout(&mut self, key: Key) {
        let Some(a) = self.attempts.get_mut(key) else { return };
        if a.settled {
            self.attempts.remove(key);
            return;
        }
        a.settled = true;
        self.attempt_failed(key, AttemptResult::TimedOut, None);
    }

    fn on_response(&mut self, key: Key, ok: bool, hint: Option<u64>) {
        let now = self.now();
        let Some(a) = self.attempts.get_mut(key) else { return };
        if a.settled {
            return; // too late: the caller gave up (the timeout event frees it)
        }
        a.settled = true;
        if ok {
            let (call, token, sent) = (a.call, a.token, a.sent);
            let caller = self.calls.get(call).map(|c| c.caller);
            if let Some(CallerRef::Host(t, h)) = caller {
                let e = &mut self.tiers[t].hosts[h].dep_latency_ns;
                *e += LATENCY_EWMA * ((now - sent) as f64 - *e);
            }
            if let Some(p) = caller.and_then(|c| self.policy(c)) {
                p.after_attempt(now, token, AttemptResult::Success, now - sent);
            }
            self.complete_call(call, true);
        } else {
            self.attempt_failed(key, AttemptResult::Rejected, hint);
        }
    }

    fn attempt_failed(&mut self, key: Key, result: AttemptResult, hint: Option<u64>) {
        let now = self.now();
        let a = self.attempts.get(key).expect("live attempt");
        let (call_key, token, sent) = (a.call, a.token, a.sent);
        let Some(call) = self.calls.get(call_key) else { return };
        let (caller, attempts, max) = (call.caller, call.attempts, call.max_attempts);
        let retry = match self.policy(caller) {
            Some(p) => {
                p.after_attempt(now, token, result, now - sent);
                if attempts < max && p.allow_retry(now).is_ok() {
                    Some(p.retry_delay(attempts, hint))
                } else {
                    None
                }
            }
            None => None,
        };
        match retry {
            Some(delay) => self.q.schedule(now + delay, Ev::Send { call: call_key }),
            None => self.complete_call(call_key, false),
        }
    }

    fn complete_call(&mut self, key: Key, ok: bool) {
        let now = self.now();
        let Some(call) = self.calls.remove(key) else { return };
        match call.parent {
            Parent::User { created } => self.rec.finished(UserOutcome {
                created,
                done: now,
                level: call.level.index() as u8,
                ok,
                tenant: call.tenant,
            }),
            Parent::Job(job) => self.finish_job(job, ok),
            Parent::Probe { host, epoch } => self.probe_result(host, epoch, ok),
        }
    }

    // ---- servers ----

    fn pick_host(&mut self, tier: usize, pin: Option<usize>) -> Option<usize> {
        let t = &mut self.tiers[tier];
        if let Some(h) = pin {
            return t.hosts[h].up.then_some(h);
        }
        let n = t.hosts.len();
        for i in 0..n {
            let h = (t.rr + i) % n;
            if t.hosts[h].up {
                t.rr = (h + 1) % n;
                return Some(h);
            }
        }
        None
    }

    fn respond(&mut self, attempt: Key, ok: bool, hint: Option<u64>) {
        let at = self.now() + NET_NS;
        self.q.schedule(at, Ev::Respond { attempt, ok, hint });
    }

    fn deliver(&mut self, attempt_key: Key) {
        let now = self.now();
        let Some(a) = self.attempts.get(attempt_key) else { return };
        let caller_deadline = a.deadline;
        // Without propagation the server knows its immediate caller's timeout (a request
        // timeout configured to match); with it, the budget in the header, made absolute at
        // arrival. A header that does not parse is ignored: the request has no deadline.
        let deadline = match a.header {
            Some(h) => parse_grpc_timeout(h.as_bytes())
                .ok()
                .and_then(|b| deadline_at(now, b).ok())
                .unwrap_or(u64::MAX),
            None => caller_deadline,
        };
        let Some(call) = self.calls.get(a.call) else { return };
        let (tier, level, pin, tenant) = (call.tier, call.level, call.pin, call.tenant);
        let probe = matches!(call.parent, Parent::Probe { .. });
        let Some(host) = self.pick_host(tier, pin) else {
            self.respond(attempt_key, false, None); // connection refused: no live host
            return;
        };
        let epoch = self.tiers[tier].hosts[host].epoch;
        let job = self.jobs.insert(Job {
            tier,
            host,
            epoch,
            attempt: attempt_key,
            level,
            deadline,
            permit: None,
            probe,
            tenant,
            caller_deadline,
            started: 0,
            local_done: 0,
        });
        let key = tenant.map(|t| self.tenant_keys[t as usize]);
        let h = &mut self.tiers[tier].hosts[host];
        match h.admission.arrive(now, job, level, Some(deadline), key) {
            Admit::Go(p) => {
                self.jobs.get_mut(job).expect("just inserted").permit = Some(p);
                self.tiers[tier].hosts[host].fifo.push_back(job);
            }
            Admit::Wait => {}
            Admit::Reject(r) => {
                self.jobs.remove(job);
                if self.in_trigger(now) {
                    let w = &mut self.rec.work[tier];
                    w.refused += 1;
                    w.first_refused_ns.get_or_insert(now);
                }
                self.rec.refused(tenant, is_per_key(r.reason));
                self.respond(attempt_key, false, Some(r.retry_after));
                return;
            }
        }
        self.pump(tier, host);
    }

    /// Polls the host's admission, starts what the workers can take, re-arms the wake-up.
    fn pump(&mut self, tier: usize, host: usize) {
        let now = self.now();
        loop {
            let mut out = std::mem::take(&mut self.dispatch);
            self.tiers[tier].hosts[host].admission.poll(now, &mut out);
            if out.is_empty() {
                self.dispatch = out;
                break;
            }
            for d in out.drain(..) {
                match d {
                    Dispatch::Go(job, p) => {
                        if let Some(j) = self.jobs.get_mut(job) {
                            j.permit = Some(p);
                            self.tiers[tier].hosts[host].fifo.push_back(job);
                        }
                    }
                    Dispatch::Drop(job, r) => self.drop_job(job, r),
                }
            }
            self.dispatch = out;
        }
        let workers = self.tiers[tier].workers;
        loop {
            let h = &mut self.tiers[tier].hosts[host];
            if h.busy >= workers {
                break;
            }
            let Some(job) = h.fifo.pop_front() else { break };
            h.busy += 1;
            self.start_job(job);
        }
        let h = &mut self.tiers[tier].hosts[host];
        if let Some(t) = h.admission.next_wakeup(now) {
            if h.wake_at.is_none_or(|w| t < w) {
                h.wake_at = Some(t);
                let epoch = h.epoch;
                self.q.schedule(t.max(now + 1), Ev::Wake { tier, host, epoch });
            }
        }
    }

    fn drop_job(&mut self, job: Key, r: Rejected) {
        if let Some(j) = self.jobs.remove(job) {
            let now = self.now();
            if self.in_trigger(now) {
                let w = &mut self.rec.work[j.tier];
                w.refused += 1;
                w.first_refused_ns.get_or_insert(now);
            }
            self.rec.refused(j.tenant, is_per_key(r.reason));
            self.respond(j.attempt, false, Some(r.retry_after));
        }
    }

    fn cost_factor(&self, tier: usize, host: usize, now: u64) -> f64 {
        let t = &self.tiers[tier];
        let mut f = t
            .slow
            .iter()
            .filter(|(a, b, _)| now >= *a && now < *b)
            .map(|x| x.2)
            .next_back()
            .unwrap_or(1.0);
        if let (Some(h), Some(at)) = (&self.sc.health, t.hosts[host].restarted_at) {
            if h.tier == tier {
                let warm = ns(h.warm_ms) as f64;
                let left = 1.0 - ((now - at) as f64 / warm).min(1.0);
                f *= 1.0 + (h.cold_factor - 1.0) * left;
            }
        }
        f
    }

    /// When work of `dur` started at `start` finishes, with the tier's pauses stopping it.
    fn finish_time(&self, tier: usize, start: u64, dur: u64) -> u64 {
        let mut t = start;
        let mut left = dur;
        for &(a, b) in &self.tiers[tier].pauses {
            if b <= t {
                continue;
            }
            if a <= t {
                t = b; // paused now: resume at the end
                continue;
            }
            if t + left <= a {
                break;
            }
            left -= a - t;
            t = b;
        }
        t + left
    }

    /// Whether the work of a job started at `started` is accounted in [`WorkStats`].
    fn in_trigger(&self, started: u64) -> bool {
        started >= self.trigger.0 && started < self.trigger.1
    }

    fn start_job(&mut self, key: Key) {
        let now = self.now();
        let Some(j) = self.jobs.get(key) else { return };
        let (tier, host, probe, deadline) = (j.tier, j.host, j.probe, j.deadline);
        if self.deadlines
            && !probe
            && now as f64 + self.tiers[tier].hosts[host].work_ns > deadline as f64
        {
            // The caller gives up before the work would be done (on average): drop it
            // unstarted, as the Gate does at dequeue (the worker pool is a queue the Gate
            // does not see when its limit is above the worker count).
            let j = self.jobs.remove(key).expect("checked above");
            if self.in_trigger(now) {
                self.rec.work[tier].dead_on_start += 1;
            }
            let h = &mut self.tiers[tier].hosts[host];
            if let Some(p) = j.permit {
                h.admission.release(now, p, Outcome::Dropped);
            }
            h.busy -= 1;
            // The freed permit and worker go to the next job at once (a wake-up, not a
            // nested pump).
            let epoch = h.epoch;
            self.q.schedule(now, Ev::Wake { tier, host, epoch });
            self.respond(j.attempt, false, None);
            return;
        }
        let mut mean = if probe {
            ns(self.sc.health.as_ref().map_or(0.5, |h| h.probe_cost_ms)) as f64
        } else {
            self.tiers[tier].cost_ns * self.cost_factor(tier, host, now)
        };
        if !probe && self.tiers[tier].optional > 0.0 {
            // The application serves the optional part with probability 1 - d. The
            // dimmer is read either way (reading never changes the Gate's decisions).
            let dimmer = self.tiers[tier].hosts[host].admission.brownout(now);
            if dimmer.is_some_and(|d| d >= 0.1) && self.in_trigger(now) {
                self.rec.work[tier].dimmer_rise_ns.get_or_insert(now);
            }
            let d = if self.prot.dimmer { dimmer.unwrap_or(0.0) } else { 0.0 };
            let t = &mut self.tiers[tier];
            let serve = t.dim_rng.next_f64() >= d;
            if serve {
                mean *= 1.0 + t.optional;
            }
            if self.in_trigger(now) {
                self.rec.optional[usize::from(!serve)] += 1;
            }
        }
        let t = &mut self.tiers[tier];
        let mut sum = 0.0;
        for _ in 0..t.shape {
            sum += -(1.0 - t.rng.next_f64()).ln();
        }
        let dur = (mean * sum / t.shape as f64) as u64;
        let done = self.finish_time(tier, now, dur.max(1));
        if let Some(j) = self.jobs.get_mut(key) {
            j.started = now;
            j.local_done = done;
        }
        if self.deadlines && !probe && done > deadline {
            // Checked cooperatively in real code (a context's cancellation); here the work
            // stops at the deadline.
            self.q.schedule(deadline, Ev::Stop { job: key });
        }
        self.q.schedule(done, Ev::LocalDone { job: key });
    }

    /// The caller's deadline passed during the job's local work: stop it.
    fn stop_job(&mut self, key: Key) {
        let now = self.now();
        let Some(j) = self.jobs.get(key) else { return };
        if now >= j.local_done {
            return;
        }
        let j = self.jobs.remove(key).expect("checked above");
        let h = &mut self.tiers[j.tier].hosts[j.host];
        if h.epoch != j.epoch {
            return;
        }
        if let Some(p) = j.permit {
            h.admission.release(now, p, Outcome::Dropped);
        }
        h.busy -= 1;
        if self.in_trigger(j.started) {
            let w = &mut self.rec.work[j.tier];
            w.stopped_ns += now - j.started;
            w.avoided_ns += j.local_done - now;
        }
        self.respond(j.attempt, false, None);
        self.pump(j.tier, j.host);
    }

    fn on_local_done(&mut self, key: Key) {
        let Some(j) = self.jobs.get(key) else { return };
        if !j.probe {
            let now = self.now();
            let h = &mut self.tiers[j.tier].hosts[j.host];
            h.work_ns += LATENCY_EWMA * ((now - j.started) as f64 - h.work_ns);
        }
        let (tier, host, epoch, level, probe, tenant, deadline) =
            (j.tier, j.host, j.epoch, j.level, j.probe, j.tenant, j.deadline);
        if self.tiers[tier].hosts[host].epoch != epoch {
            self.jobs.remove(key); // the host restarted under it
            return;
        }
        match (&self.sc.tiers[tier].call, probe) {
            (Some(c), false) => {
                let now = self.now();
                self.tiers[tier].hosts[host].client.on_call(now);
                let call = self.calls.insert(Call {
                    parent: Parent::Job(key),
                    caller: CallerRef::Host(tier, host),
                    tier: tier + 1,
                    level,
                    attempts: 0,
                    max_attempts: c.max_attempts,
                    timeout: ns(c.timeout_ms),
                    pin: None,
                    tenant,
                    deadline: (self.deadlines && deadline != u64::MAX).then_some(deadline),
                });
                self.send_attempt(call);
            }
            _ => self.finish_job(key, true),
        }
    }

    fn finish_job(&mut self, key: Key, ok: bool) {
        let now = self.now();
        let Some(j) = self.jobs.remove(key) else { return };
        let (tier, host) = (j.tier, j.host);
        if !j.probe && self.in_trigger(j.started) {
            let work = now - j.started;
            let w = &mut self.rec.work[tier];
            if !ok {
                w.failed_ns += work;
            } else if now + NET_NS <= j.caller_deadline {
                w.useful_ns += work;
            } else {
                w.dead_caller_ns += work;
            }
        }
        let h = &mut self.tiers[tier].hosts[host];
        if h.epoch != j.epoch {
            return;
        }
        // An overload signal when the work failed below or finished after its caller's
        // deadline (Dropped = timeout, 503 from below).
        let outcome = if ok && now <= j.deadline { Outcome::Success } else { Outcome::Dropped };
        if let Some(p) = j.permit {
            h.admission.release(now, p, outcome);
        }
        h.busy -= 1;
        self.respond(j.attempt, ok, None);
        self.pump(tier, host);
    }

    // ---- health checks ----

    fn on_probe(&mut self, host: usize, epoch: u32) {
        let Some(hs) = &self.sc.health else { return };
        let (tier, interval, timeout) = (hs.tier, ns(hs.interval_ms), ns(hs.timeout_ms));
        let now = self.now();
        let h = &self.tiers[tier].hosts[host];
        if h.epoch != epoch || !h.up {
            return;
        }
        self.q.schedule(now + interval, Ev::Probe { host, epoch });
        if self.prot.server.probes_bypass_queue() && self.tiers[tier].protected {
            // Readiness from the policy's state: overloaded is not broken.
            self.probe_result(host, epoch, true);
            return;
        }
        let call = self.calls.insert(Call {
            parent: Parent::Probe { host, epoch },
            caller: CallerRef::Probe,
            tier,
            level: Priority::CRITICAL,
            attempts: 0,
            max_attempts: 1,
            timeout,
            pin: Some(host),
            tenant: None,
            deadline: None,
        });
        self.send_attempt(call);
    }

    fn probe_result(&mut self, host: usize, epoch: u32, ok: bool) {
        let Some(hs) = &self.sc.health else { return };
        let (tier, restart, eject_after) = (hs.tier, ns(hs.restart_ms), hs.failures_to_eject);
        let now = self.now();
        let h = &mut self.tiers[tier].hosts[host];
        if h.epoch != epoch || !h.up {
            return;
        }
        if ok {
            h.failures = 0;
            return;
        }
        h.failures += 1;
        if h.failures < eject_after {
            return;
        }
        // Ejected and restarted: everything it held is lost (callers time out).
        h.up = false;
        h.epoch += 1;
        h.busy = 0;
        h.fifo.clear();
        h.failures = 0;
        h.wake_at = None;
        let t = &self.sc.tiers[tier];
        h.admission = Self::admission_for(
            self.prot,
            t.protect,
            t.workers,
            nominal_ns(self.sc, tier),
            3,
            shard_seed(self.seed, tier, host),
        );
        let epoch = h.epoch;
        self.q.schedule(now + restart, Ev::HostUp { host, epoch });
    }

    fn on_host_up(&mut self, host: usize, epoch: u32) {
        let Some(hs) = &self.sc.health else { return };
        let (tier, interval) = (hs.tier, ns(hs.interval_ms));
        let now = self.now();
        let h = &mut self.tiers[tier].hosts[host];
        if h.epoch != epoch {
            return;
        }
        h.up = true;
        h.restarted_at = Some(now);
        self.q.schedule(now + interval, Ev::Probe { host, epoch });
    }

    fn on_sample(&mut self) {
        let now = self.now();
        let t = &self.tiers[self.watched];
        let mut limit = None;
        let mut waiting = 0u32;
        let (mut dim, mut dims) = (0.0, 0u32);
        for h in t.hosts.iter().filter(|h| h.up) {
            if let Some(l) = h.admission.limit() {
                *limit.get_or_insert(0.0) += l;
            }
            if let Some(d) = h.admission.brownout(now) {
                dim += d;
                dims += 1;
            }
            waiting += (h.admission.waiting() + h.fifo.len()) as u32;
        }
        self.rec.sample(now, limit, waiting);
        if let Some(x) = self.rec.dimmer.get_mut((now / BUCKET_NS) as usize) {
            if dims > 0 {
                *x = dim / dims as f64;
            }
        }
        let _ = self.seed;
        self.q.schedule(now + BUCKET_NS, Ev::Sample);
    }
}

/// Mean latency of a request at `tier` in normal times: its local work plus its downstream
/// call (network both ways), with no queueing.
pub fn nominal_ns(sc: &Scenario, tier: usize) -> f64 {
    let t = &sc.tiers[tier];
    let mut ns = t.cost_ms * MS as f64;
    if t.call.is_some() && tier + 1 < sc.tiers.len() {
        ns += 2.0 * NET_NS as f64 + nominal_ns(sc, tier + 1);
    }
    ns
}

/// Runs `scenario` under `protection`.
pub fn run(scenario: &Scenario, protection: &Protection) -> RunResult {
    World::new(scenario, protection).run()
}
