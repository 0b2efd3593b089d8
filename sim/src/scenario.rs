//! Scenarios: what the world looks like (load, tiers, callers, health checks) and what goes
//! wrong when. Seven presets reproduce classic overload cascades and a brownout; any scenario can be loaded from JSON.
//!
//! Times in files are seconds (`*_s`) or milliseconds (`*_ms`); the simulator runs in
//! nanoseconds.

use serde::{Deserialize, Serialize};

/// One named, sourced scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name used on the command line.
    pub name: String,
    /// The public account of the failure it reproduces (a paper, a book chapter).
    pub source: String,
    /// One line on what happens.
    pub description: String,
    /// Seed of every random stream in the run.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated length of the run, seconds. Arrivals stop here; the metrics end here.
    pub duration_s: f64,
    /// The trigger window `[start, end)`, seconds: the metrics split before / during / after.
    pub trigger: Span,
    /// Open-loop arrivals by priority class.
    pub load: Vec<LoadClass>,
    /// The user's client: timeout and retries of each original request.
    pub client: CallerSpec,
    /// Client processes the users are spread over (each owns its budget / breaker).
    #[serde(default = "one")]
    pub client_processes: u32,
    /// Service tiers, outermost first; tier `i` calls tier `i + 1` if it has `call`.
    pub tiers: Vec<TierSpec>,
    /// Optional load-balancer health checks with ejection and restart (the health-check and
    /// cold-restart loops of a metastable failure; Bronson et al., HotOS 2021).
    #[serde(default)]
    pub health: Option<HealthSpec>,
    /// Protections compared by default (see `protect::Protection::parse`).
    #[serde(default)]
    pub protections: Vec<String>,
    /// Service capacity during the trigger, requests/s (what goodput is compared with).
    /// Omitted: computed from the first tier (`hosts × workers / (cost × factor)`).
    #[serde(default)]
    pub degraded_capacity_per_s: Option<f64>,
}

/// A time window in seconds, `[start_s, end_s)`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
}

impl Span {
    /// Whether `t` (seconds) is inside.
    pub fn contains(&self, t: f64) -> bool {
        t >= self.start_s && t < self.end_s
    }
}

/// A Poisson stream of original requests at one priority.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadClass {
    /// Label (`critical`, `normal`, `background`, ...).
    pub name: String,
    /// Priority level, 0 = most important (the values of an `X-Request-Priority` header:
    /// `critical`, `normal`, `background`).
    pub priority: u8,
    /// Requests per second outside any change.
    pub rate_per_s: f64,
    /// Rate changes in force during their spans (the last matching one wins).
    #[serde(default)]
    pub changes: Vec<RateChange>,
    /// The tenant (API key, agent id) every arrival of this class carries, if any. Several
    /// classes may name the same tenant. Keyed protections (`keyed+...`) limit per tenant;
    /// the report splits goodput by tenant. A tenant whose rate rises during the trigger
    /// is a *flooding* tenant; the others are *steady* ([`Scenario::flooding_tenants`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A different arrival rate during `span`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateChange {
    /// When.
    pub span: Span,
    /// Requests per second meanwhile.
    pub rate_per_s: f64,
}

/// How a caller calls the next tier: per-attempt timeout, attempts, delay between them.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerSpec {
    /// Per-attempt timeout, ms (the attempt's deadline).
    pub timeout_ms: f64,
    /// Attempts per call, first included (1 + 3 retries = 4).
    pub max_attempts: u32,
    /// Delay before a retry, ms, unless a protection adds backoff (0 = immediate).
    #[serde(default)]
    pub retry_delay_ms: f64,
}

/// A tier: identical hosts behind a round-robin load balancer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    /// Label.
    pub name: String,
    /// Hosts.
    #[serde(default = "one")]
    pub hosts: u32,
    /// Worker threads per host; a request holds one for its local work and its downstream
    /// call.
    pub workers: u32,
    /// Mean local work per request, ms.
    pub cost_ms: f64,
    /// Shape of the local-work distribution (Erlang-k: 1 = exponential, larger = tighter).
    #[serde(default = "two")]
    pub cost_shape: u32,
    /// How this tier calls the next one (none: it is the last).
    #[serde(default)]
    pub call: Option<CallerSpec>,
    /// Whether the server-side protection runs here (a database usually does not).
    #[serde(default = "yes")]
    pub protect: bool,
    /// Capacity changes: the trigger.
    #[serde(default)]
    pub changes: Vec<TierChange>,
    /// The optional part of each request's local work, as a fraction of `cost_ms` (0.3:
    /// recommendations that add 30 %). Served unless the brownout dimmer of a `+dimmer`
    /// protection says to skip it (with probability = the dimmer's value).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub optional_cost: f64,
}

/// A change in a tier during `span`: slower work, or a full stop (a pause).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierChange {
    /// When.
    pub span: Span,
    /// Local work is this many times the normal cost (sampled when work starts).
    #[serde(default = "unit")]
    pub cost_factor: f64,
    /// Nothing progresses during the span (an injected pause; a stop-the-world GC).
    #[serde(default)]
    pub pause: bool,
}

/// Load-balancer health checks (probes that queue behind real traffic time out and eject a
/// host that is only busy) and what a restart costs (cold caches): two of the loops that keep
/// a metastable failure going (Bronson et al., "Metastable Failures in Distributed Systems",
/// HotOS 2021; Google SRE book, ch. 22 "Addressing Cascading Failures").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSpec {
    /// The tier checked.
    pub tier: usize,
    /// Probe period per host, ms.
    pub interval_ms: f64,
    /// A probe slower than this fails, ms.
    pub timeout_ms: f64,
    /// Consecutive failures that eject (and restart) a host.
    pub failures_to_eject: u32,
    /// Time out of rotation while restarting, ms.
    pub restart_ms: f64,
    /// Local work right after a restart is this many times slower...
    pub cold_factor: f64,
    /// ... decaying linearly to normal over this long, ms.
    pub warm_ms: f64,
    /// Local work of a probe when it goes through the request path, ms.
    #[serde(default = "probe_cost")]
    pub probe_cost_ms: f64,
}

fn default_seed() -> u64 {
    0x5eed_0008
}
fn one() -> u32 {
    1
}
fn two() -> u32 {
    2
}
fn yes() -> bool {
    true
}
fn unit() -> f64 {
    1.0
}
fn probe_cost() -> f64 {
    0.5
}
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Scenario {
    /// Parses a scenario from JSON text.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let s: Scenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario as pretty JSON (what `--dump` prints).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("scenarios serialize")
    }

    /// Checks the numbers a run relies on.
    pub fn validate(&self) -> Result<(), String> {
        let finite_pos = |x: f64, what: &str| {
            if x.is_finite() && x > 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be a positive number"))
            }
        };
        finite_pos(self.duration_s, "duration_s")?;
        if self.duration_s > 3600.0 {
            return Err("duration_s above one hour".into());
        }
        if !(self.trigger.start_s >= 0.0 && self.trigger.end_s > self.trigger.start_s) {
            return Err("trigger must have 0 <= start_s < end_s".into());
        }
        if self.trigger.end_s > self.duration_s {
            return Err("trigger must end before duration_s".into());
        }
        if self.load.is_empty() {
            return Err("load needs at least one class".into());
        }
        for c in &self.load {
            if c.priority as usize >= 3 {
                return Err(format!("class {}: priority must be 0, 1 or 2", c.name));
            }
            if !(c.rate_per_s.is_finite() && c.rate_per_s >= 0.0) {
                return Err(format!("class {}: rate_per_s", c.name));
            }
            for ch in &c.changes {
                if !(ch.rate_per_s.is_finite() && ch.rate_per_s >= 0.0) {
                    return Err(format!("class {}: change rate_per_s", c.name));
                }
            }
        }
        if self.load.iter().any(|c| c.tenant.as_deref() == Some("")) {
            return Err("a tenant name must not be empty".into());
        }
        if self.tenants().len() > u16::MAX as usize {
            return Err("at most 65535 tenants".into());
        }
        let caller = |c: &CallerSpec, who: &str| -> Result<(), String> {
            finite_pos(c.timeout_ms, &format!("{who}.timeout_ms"))?;
            if c.max_attempts == 0 || c.max_attempts > 10 {
                return Err(format!("{who}.max_attempts must be 1..=10"));
            }
            if !(c.retry_delay_ms.is_finite() && c.retry_delay_ms >= 0.0) {
                return Err(format!("{who}.retry_delay_ms"));
            }
            Ok(())
        };
        caller(&self.client, "client")?;
        if self.client_processes == 0 || self.client_processes > 1000 {
            return Err("client_processes must be 1..=1000".into());
        }
        if self.tiers.is_empty() {
            return Err("at least one tier".into());
        }
        for (i, t) in self.tiers.iter().enumerate() {
            if t.hosts == 0 || t.hosts > 64 || t.workers == 0 || t.workers > 100_000 {
                return Err(format!("tier {}: hosts 1..=64, workers 1..=100000", t.name));
            }
            finite_pos(t.cost_ms, &format!("tier {}.cost_ms", t.name))?;
            if t.cost_shape == 0 || t.cost_shape > 64 {
                return Err(format!("tier {}: cost_shape 1..=64", t.name));
            }
            if let Some(c) = &t.call {
                if i + 1 == self.tiers.len() {
                    return Err(format!("tier {}: the last tier cannot call further", t.name));
                }
                caller(c, &format!("tier {}.call", t.name))?;
            }
            for ch in &t.changes {
                finite_pos(ch.cost_factor, "cost_factor")?;
            }
            if !(t.optional_cost.is_finite() && (0.0..=10.0).contains(&t.optional_cost)) {
                return Err(format!("tier {}: optional_cost must be in [0, 10]", t.name));
            }
        }
        if let Some(h) = &self.health {
            if h.tier >= self.tiers.len() {
                return Err("health.tier out of range".into());
            }
            for (x, w) in [
                (h.interval_ms, "interval_ms"),
                (h.timeout_ms, "timeout_ms"),
                (h.restart_ms, "restart_ms"),
                (h.cold_factor, "cold_factor"),
                (h.warm_ms, "warm_ms"),
                (h.probe_cost_ms, "probe_cost_ms"),
            ] {
                finite_pos(x, &format!("health.{w}"))?;
            }
            if h.failures_to_eject == 0 {
                return Err("health.failures_to_eject must be at least 1".into());
            }
        }
        Ok(())
    }

    /// Capacity of the first tier during the trigger, requests/s.
    pub fn degraded_capacity(&self) -> f64 {
        if let Some(c) = self.degraded_capacity_per_s {
            return c;
        }
        let t = &self.tiers[0];
        let mid = (self.trigger.start_s + self.trigger.end_s) / 2.0;
        let factor = t
            .changes
            .iter()
            .filter(|c| c.span.contains(mid))
            .map(|c| if c.pause { f64::INFINITY } else { c.cost_factor })
            .next_back()
            .unwrap_or(1.0);
        (t.hosts * t.workers) as f64 / (t.cost_ms * factor / 1000.0)
    }

    /// The offered load (original requests per second) at time `t` seconds.
    pub fn rate_at(&self, class: usize, t: f64) -> f64 {
        let c = &self.load[class];
        c.changes
            .iter()
            .filter(|ch| ch.span.contains(t))
            .map(|ch| ch.rate_per_s)
            .next_back()
            .unwrap_or(c.rate_per_s)
    }

    /// The distinct tenants of the load classes, in order of first appearance (a tenant's
    /// index in this list is what arrivals and outcomes carry).
    pub fn tenants(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.load.iter().filter_map(|c| c.tenant.as_ref()) {
            if !out.contains(t) {
                out.push(t.clone());
            }
        }
        out
    }

    /// The tenant index of each load class (`None`: the class has no tenant).
    pub fn class_tenants(&self) -> Vec<Option<u16>> {
        let names = self.tenants();
        self.load
            .iter()
            .map(|c| {
                c.tenant.as_ref().and_then(|t| names.iter().position(|n| n == t)).map(|i| i as u16)
            })
            .collect()
    }

    /// For each tenant (as [`tenants`](Self::tenants)): whether it floods, i.e. one of its
    /// classes offers more at the trigger's midpoint than its usual rate.
    pub fn flooding_tenants(&self) -> Vec<bool> {
        let mid = (self.trigger.start_s + self.trigger.end_s) / 2.0;
        let mut out = vec![false; self.tenants().len()];
        for (class, t) in self.class_tenants().into_iter().enumerate() {
            if let Some(t) = t {
                out[t as usize] |= self.rate_at(class, mid) > self.load[class].rate_per_s;
            }
        }
        out
    }

    /// A smaller copy for quick tests: every duration of the story (run, trigger, changes)
    /// times `time`, every arrival rate and worker pool (hence capacity) times `load`.
    /// Costs and timeouts are kept, so the per-request dynamics are the same.
    pub fn scaled(&self, time: f64, load: f64) -> Self {
        let mut s = self.time_scaled(time);
        for c in &mut s.load {
            c.rate_per_s *= load;
            for ch in &mut c.changes {
                ch.rate_per_s *= load;
            }
        }
        for t in &mut s.tiers {
            t.workers = ((t.workers as f64 * load).round() as u32).max(1);
        }
        if let Some(c) = &mut s.degraded_capacity_per_s {
            *c *= load;
        }
        s
    }

    /// A copy with every duration (run, trigger, changes) multiplied by `f`.
    /// Rates, costs and timeouts are kept, so the dynamics are the same, only shorter.
    pub fn time_scaled(&self, f: f64) -> Self {
        let mut s = self.clone();
        let span = |sp: &mut Span| {
            sp.start_s *= f;
            sp.end_s *= f;
        };
        s.duration_s *= f;
        span(&mut s.trigger);
        for c in &mut s.load {
            for ch in &mut c.changes {
                span(&mut ch.span);
            }
        }
        for t in &mut s.tiers {
            for ch in &mut t.changes {
                span(&mut ch.span);
            }
        }
        s
    }
}

fn priority_mix(total: f64, critical: f64, normal: f64) -> Vec<LoadClass> {
    let class = |name: &str, priority: u8, share: f64| LoadClass {
        name: name.into(),
        priority,
        rate_per_s: (total * share * 1e6).round() / 1e6,
        changes: Vec::new(),
        tenant: None,
    };
    vec![
        class("critical", 0, critical),
        class("normal", 1, normal),
        class("background", 2, 1.0 - critical - normal),
    ]
}

fn span(start_s: f64, end_s: f64) -> Span {
    Span { start_s, end_s }
}

fn caller(timeout_ms: f64, max_attempts: u32) -> CallerSpec {
    CallerSpec { timeout_ms, max_attempts, retry_delay_ms: 0.0 }
}

fn protections(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The busy-but-useless service (Google SRE book, ch. 22 "Addressing Cascading Failures":
/// a queue that grows until every worker serves requests whose callers have gone): 1,500 req/s, capacity
/// 2,500 → 1,250 req/s when an index refresh doubles per-query cost, 64 workers, an
/// unbounded queue, clients time out at 1 s and retry 3 times. Time is compressed: the
/// refresh lasts 20 s instead of 2 min.
pub fn busy_but_useless() -> Scenario {
    Scenario {
        name: "busy-but-useless".into(),
        source: "Google SRE book ch. 22, Addressing Cascading Failures (server overload, queue management)".into(),
        description:
            "1,500 req/s; an index refresh halves capacity 2,500 -> 1,250 req/s for 20 s; \
                      64 workers; clients: 1 s timeout, 3 immediate retries"
                .into(),
        seed: default_seed(),
        duration_s: 45.0,
        trigger: span(5.0, 25.0),
        // Priority mix: the three default levels (10% critical, 60% normal, 30% background).
        load: priority_mix(1500.0, 0.1, 0.6),
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![TierSpec {
            name: "search".into(),
            hosts: 1,
            workers: 64,
            cost_ms: 64.0 / 2500.0 * 1000.0, // 64 workers / 2,500 req/s = 25.6 ms
            cost_shape: 2,
            call: None,
            protect: true,
            changes: vec![TierChange { span: span(5.0, 25.0), cost_factor: 2.0, pause: false }],
            optional_cost: 0.0,
        }],
        health: None,
        protections: protections(&[
            "none",
            "static",
            "aimd",
            "gradient",
            "hysteresis",
            "vegas",
            "gradient2",
            "gradient+budget",
            "gate",
            "gate+budget",
        ]),
        degraded_capacity_per_s: None,
    }
}

/// Retries at every layer multiply (Google SRE book, ch. 22: 3 layers each making 4 attempts
/// turn one user action into up to 4³ = 64 database attempts), and the retries keep the
/// overload going after the trigger (Bronson et al., HotOS 2021): a database loses most of its
/// capacity for 10 s under client → gateway → service → database, every layer making 4
/// attempts.
pub fn retry_storm() -> Scenario {
    let relay = |name: &str, timeout_ms: f64| TierSpec {
        name: name.into(),
        hosts: 1,
        workers: 20_000, // event-driven proxies: concurrency is not their bottleneck
        cost_ms: 1.0,
        cost_shape: 2,
        call: Some(caller(timeout_ms, 4)),
        protect: true,
        changes: Vec::new(),
        optional_cost: 0.0,
    };
    Scenario {
        name: "retry-storm".into(),
        source: "Google SRE book ch. 22 (4 attempts x 3 layers = 64x); Bronson et al., Metastable Failures (HotOS 2021): the retry loop".into(),
        description: "500 req/s through client -> gateway -> service -> database, 4 attempts \
                      at each of 3 layers; the database slows 10x for 10 s"
            .into(),
        seed: default_seed(),
        duration_s: 30.0,
        trigger: span(5.0, 15.0),
        load: priority_mix(500.0, 0.1, 0.6),
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![
            relay("gateway", 400.0),
            relay("service", 150.0),
            TierSpec {
                name: "database".into(),
                hosts: 1,
                workers: 32,
                cost_ms: 10.0, // 3,200 queries/s
                cost_shape: 2,
                call: None,
                protect: true,
                changes: vec![TierChange {
                    span: span(5.0, 15.0),
                    cost_factor: 10.0,
                    pause: false,
                }],
                optional_cost: 0.0,
            },
        ],
        health: None,
        protections: protections(&[
            "none",
            "backoff",
            "breaker",
            "throttle",
            "budget",
            "gradient+budget",
            "gate+budget",
            "gate+budget+backoff",
            "gate+budget+deadlines",
            "gate+budget+deadlines-and-timeouts",
        ]),
        degraded_capacity_per_s: Some(32.0 / 0.1),
    }
}

/// A metastable failure (Bronson et al., "Metastable Failures in Distributed Systems", HotOS
/// 2021: the overload outlives its trigger; the dependency recovers, the platform does not): the
/// database slows 10x for 10 s; the app tier's health checks queue behind traffic, hosts
/// are ejected and come back cold, clients retry. The retry, health-check and cold-restart loops together.
pub fn metastable() -> Scenario {
    Scenario {
        name: "metastable".into(),
        source: "Bronson et al., Metastable Failures in Distributed Systems (HotOS 2021): retries, health-check ejection and cold restarts keep it down after the trigger".into(),
        description: "2,000 req/s to 4 app hosts (32 workers) over a database; the database \
                      slows 10x for 10 s; queued health checks eject hosts, restarts are cold"
            .into(),
        seed: default_seed(),
        duration_s: 45.0,
        trigger: span(5.0, 15.0),
        load: priority_mix(2000.0, 0.1, 0.6),
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![
            TierSpec {
                name: "app".into(),
                hosts: 4,
                workers: 32,
                cost_ms: 20.0,
                cost_shape: 2,
                call: Some(caller(1000.0, 1)),
                protect: true,
                changes: Vec::new(),
                optional_cost: 0.0,
            },
            TierSpec {
                name: "database".into(),
                hosts: 1,
                workers: 64,
                cost_ms: 10.0,
                cost_shape: 2,
                call: None,
                protect: false,
                changes: vec![TierChange {
                    span: span(5.0, 15.0),
                    cost_factor: 10.0,
                    pause: false,
                }],
                optional_cost: 0.0,
            },
        ],
        health: Some(HealthSpec {
            tier: 0,
            interval_ms: 1000.0,
            timeout_ms: 1000.0,
            failures_to_eject: 3,
            restart_ms: 5000.0,
            cold_factor: 3.0,
            warm_ms: 30_000.0,
            probe_cost_ms: 0.5,
        }),
        protections: protections(&[
            "none",
            "static",
            "aimd",
            "gradient",
            "gradient+budget",
            "gate",
            "gate+budget",
            "gate+budget+breaker",
            "gate+budget+deadlines",
        ]),
        // The slowed database is the bottleneck: 64 workers / 100 ms.
        degraded_capacity_per_s: Some(640.0),
    }
}

/// Criticality (Google SRE book, ch. 21 "Handling Overload": shed the least critical work
/// first; never drop a more important request to serve a less important one): a
/// background flood beside critical and normal traffic.
pub fn priority_flood() -> Scenario {
    let mut load = vec![
        LoadClass {
            name: "critical".into(),
            priority: 0,
            rate_per_s: 300.0,
            changes: vec![],
            tenant: None,
        },
        LoadClass {
            name: "normal".into(),
            priority: 1,
            rate_per_s: 900.0,
            changes: vec![],
            tenant: None,
        },
        LoadClass {
            name: "background".into(),
            priority: 2,
            rate_per_s: 300.0,
            changes: vec![],
            tenant: None,
        },
    ];
    load[2].changes.push(RateChange { span: span(5.0, 20.0), rate_per_s: 3300.0 });
    Scenario {
        name: "priority-flood".into(),
        source: "Google SRE book ch. 21, Handling Overload (criticality: never drop critical work to serve background)"
            .into(),
        description: "300 critical + 900 normal + 300 background req/s; background jumps to \
                      3,300 req/s for 15 s; capacity 2,500 req/s"
            .into(),
        seed: default_seed(),
        duration_s: 35.0,
        trigger: span(5.0, 20.0),
        load,
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![TierSpec {
            name: "api".into(),
            hosts: 1,
            workers: 50,
            cost_ms: 20.0,
            cost_shape: 2,
            call: None,
            protect: true,
            changes: Vec::new(),
            optional_cost: 0.0,
        }],
        health: None,
        protections: protections(&["none", "static", "aimd", "gradient", "gate", "gate+budget"]),
        degraded_capacity_per_s: Some(2500.0),
    }
}

/// A 10-second stop-the-world pause of a core database (a GC pause, a failover, a lock) under
/// an API tier: the slow-dependency trigger of Google SRE book, ch. 22.
pub fn dependency_pause() -> Scenario {
    Scenario {
        name: "dependency-pause".into(),
        source: "Google SRE book ch. 22 (a slow dependency): a 10-second pause of a core database"
            .into(),
        description: "1,000 req/s to an API (200 workers) over a core database (50 workers); \
                      the database pauses for 10 s"
            .into(),
        seed: default_seed(),
        duration_s: 35.0,
        trigger: span(5.0, 15.0),
        load: priority_mix(1000.0, 0.2, 0.6),
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![
            TierSpec {
                name: "api".into(),
                hosts: 1,
                workers: 200,
                cost_ms: 5.0,
                cost_shape: 2,
                call: Some(caller(500.0, 2)),
                protect: true,
                changes: Vec::new(),
                optional_cost: 0.0,
            },
            TierSpec {
                name: "database".into(),
                hosts: 1,
                workers: 50,
                cost_ms: 10.0,
                cost_shape: 2,
                call: None,
                protect: false,
                changes: vec![TierChange { span: span(5.0, 15.0), cost_factor: 1.0, pause: true }],
                optional_cost: 0.0,
            },
        ],
        health: None,
        protections: protections(&["none", "static", "aimd", "gradient", "gate", "gate+budget"]),
        degraded_capacity_per_s: Some(0.0),
    }
}

/// Steady tenants in [`noisy_tenant`].
pub const STEADY_TENANTS: usize = 20;

/// One tenant's backlog starves every tenant on a shared queue; the fix is per-tenant
/// concurrency caps and shuffle sharding (AWS Builders' Library, "Workload isolation using
/// shuffle-sharding"), answered with a 429 the caller can act on (RFC 6585, `Retry-After`). 21 tenants share one API of 1,000 req/s; 20 send 25 req/s
/// each (half the capacity together); the 21st jumps from 25 to 8,000 req/s (8x the
/// capacity) for 10 s. All at the same priority, so only the tenant tells them apart.
pub fn noisy_tenant() -> Scenario {
    let tenant = |name: String, changes: Vec<RateChange>| LoadClass {
        name: name.clone(),
        priority: 1,
        rate_per_s: 25.0,
        changes,
        tenant: Some(name),
    };
    let mut load: Vec<LoadClass> =
        (1..=STEADY_TENANTS).map(|i| tenant(format!("tenant-{i:02}"), Vec::new())).collect();
    load.push(tenant(
        "tenant-noisy".into(),
        vec![RateChange { span: span(5.0, 15.0), rate_per_s: 8000.0 }],
    ));
    Scenario {
        name: "noisy-tenant".into(),
        source: "AWS Builders' Library, Workload isolation using shuffle-sharding; per-tenant 429s (RFC 6585)"
            .into(),
        description: "21 tenants share an API (40 workers, 1,000 req/s); 20 send 25 req/s \
                      each, one jumps to 8,000 req/s (8x capacity) for 10 s"
            .into(),
        seed: default_seed(),
        duration_s: 25.0,
        trigger: span(5.0, 15.0),
        load,
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![TierSpec {
            name: "api".into(),
            hosts: 1,
            workers: 40,
            cost_ms: 40.0,
            cost_shape: 2,
            call: None,
            protect: true,
            changes: Vec::new(),
            optional_cost: 0.0,
        }],
        health: None,
        protections: protections(&["none", "gate", "keyed+gate"]),
        degraded_capacity_per_s: Some(1000.0),
    }
}

/// Brownout (Klein et al., "Brownout: building more robust cloud applications", ICSE
/// 2014): every response has an optional part (recommendations: 30 % more work) the
/// application may skip. With everything served the API handles 1,923 req/s (50 workers of
/// 26 ms), with nothing optional 2,500 req/s; a surge to 2,200 req/s for 15 s fits only if
/// the optional part is dimmed. The degraded capacity is the one with everything served.
pub fn brownout() -> Scenario {
    Scenario {
        name: "brownout".into(),
        source:
            "Klein et al., Brownout (ICSE 2014): optional content dimmed before requests are shed"
                .into(),
        description: "1,500 req/s to an API (50 workers, 20 ms + 30% optional work: 1,923 \
                      req/s with everything served, 2,500 with nothing optional); a surge to \
                      2,200 req/s for 15 s"
            .into(),
        seed: default_seed(),
        duration_s: 30.0,
        trigger: span(5.0, 20.0),
        load: {
            let mut l = priority_mix(1500.0, 0.1, 0.6);
            for c in &mut l {
                let r = c.rate_per_s * 2200.0 / 1500.0;
                c.changes.push(RateChange { span: span(5.0, 20.0), rate_per_s: r });
            }
            l
        },
        client: caller(1000.0, 4),
        client_processes: 1,
        tiers: vec![TierSpec {
            name: "api".into(),
            hosts: 1,
            workers: 50,
            cost_ms: 20.0,
            cost_shape: 2,
            call: None,
            protect: true,
            changes: Vec::new(),
            optional_cost: 0.3,
        }],
        health: None,
        protections: protections(&["none", "static", "gate", "gate+dimmer"]),
        degraded_capacity_per_s: Some(50.0 / 0.026),
    }
}

/// Every preset, in the order the demo runs them.
pub fn presets() -> Vec<Scenario> {
    vec![
        busy_but_useless(),
        retry_storm(),
        metastable(),
        priority_flood(),
        dependency_pause(),
        noisy_tenant(),
        brownout(),
    ]
}

/// A preset by name.
pub fn preset(name: &str) -> Option<Scenario> {
    presets().into_iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_round_trip_through_json() {
        for s in presets() {
            s.validate().unwrap();
            let back = Scenario::from_json(&s.to_json()).unwrap();
            assert_eq!(back.to_json(), s.to_json());
        }
        assert!((busy_but_useless().degraded_capacity() - 1250.0).abs() < 1e-6);
    }

    #[test]
    fn tenants_are_indexed_and_the_flooding_one_is_found() {
        let s = noisy_tenant();
        let names = s.tenants();
        assert_eq!(names.len(), STEADY_TENANTS + 1);
        let flooding = s.flooding_tenants();
        assert_eq!(flooding.iter().filter(|&&f| f).count(), 1);
        assert_eq!(names[flooding.iter().position(|&f| f).unwrap()], "tenant-noisy");
        assert!(s.class_tenants().iter().all(Option::is_some));
        assert!(busy_but_useless().tenants().is_empty());
        assert!(busy_but_useless().class_tenants().iter().all(Option::is_none));
        let mut bad = noisy_tenant();
        bad.load[0].tenant = Some(String::new());
        assert!(bad.validate().is_err());
    }

    #[test]
    fn bad_files_are_refused() {
        let mut s = busy_but_useless();
        s.duration_s = f64::NAN;
        assert!(s.validate().is_err());
        assert!(Scenario::from_json("{\"name\": 3}").is_err());
        let mut s = busy_but_useless();
        s.tiers[0].call = Some(caller(1.0, 1));
        assert!(s.validate().is_err());
    }
}
