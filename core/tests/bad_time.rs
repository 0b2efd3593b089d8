#![cfg(not(loom))]
//! Out-of-range time is bad input, never a time: a `now` above `time::MAX_NOW` (2^62 ns;
//! `u64::MAX` is the C ABI's "never") must not move any structure's clock. The call acts
//! at the latest time the structure has seen, and nothing derived from the bad value is
//! kept (no latency sample, no window, no deadline, no open timer).
//!
//! For every public structure of the core that takes a `now`, a quickcheck property drives
//! random healthy traffic (time mostly moving forward, sometimes jumping, sometimes a
//! little backwards), lands one call at a bad `now` somewhere in it, and checks that the
//! structure then behaves exactly like a twin that got the same call at the latest time
//! seen: the same decision for every call, before, at and after the bad one, and the same
//! metrics at the end. Before the fix, one such call froze windows, pushed deadlines and
//! rate-limit hints out by centuries, and turned latency estimates into hours.
//!
//! `Backoff`, `Credits`/`CreditTable` and `TokenRetryThrottle` take no time at all;
//! `WaitQueue` stores the caller's `enqueued_at` and deadline as data and decides nothing
//! from them (the Gate, which does, is checked here).

use std::cell::Cell;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use surgeguard_core::breaker::{
    BreakerPermit, BreakerWindow, CircuitBreaker, CircuitBreakerConfig,
};
use surgeguard_core::codel::{Codel, CodelConfig};
use surgeguard_core::flow::{LagMeter, LagMeterConfig, Watermarks, WatermarksConfig};
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::keyed::{KeyPermit, KeyedConfig, KeyedLimits, ShardRate};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig, HysteresisConfig};
use surgeguard_core::queue::Ticket;
use surgeguard_core::rate::{PacedDrain, PacedDrainConfig, RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::stats::{SampleWindow, WindowedMin};
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig, ThrottleForm};
use surgeguard_core::time::{MAX_NOW, MS, SEC, US};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, UsageError};

thread_local! {
    /// Set by an operation that passed no `now` to the structure (a release with nothing
    /// held, a cancel): its time is then not a time the structure has seen.
    static UNTIMED: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// Set while the twin makes its stand-in for the bad call.
    static TWIN_OF_BAD: Cell<bool> = const { Cell::new(false) };
}

/// A release of `p` by `release`, judged by the rule for a bad `now`: a release at a
/// `now` above `MAX_NOW` is refused with `TimeOutOfRange` and returns the slot as
/// `Ignored` at the latest time seen (the permit was moved in, so it cannot be handed
/// back). The twin's stand-in is that `Ignored` release at the latest time.
fn judged_release(
    now: u64,
    want: Outcome,
    release: impl FnOnce(u64, Outcome) -> Result<(), UsageError>,
) -> String {
    if now > MAX_NOW {
        match release(now, want) {
            Err(UsageError::TimeOutOfRange) => "refused: bad time".into(),
            other => format!("a bad-time release answered {other:?}"),
        }
    } else if TWIN_OF_BAD.with(Cell::get) {
        match release(now, Outcome::Ignored) {
            Ok(()) => "refused: bad time".into(),
            other => format!("{other:?}"),
        }
    } else {
        format!("{:?}", release(now, want))
    }
}

/// Marks the current operation as one that passed no `now`.
fn untimed() -> String {
    UNTIMED.with(|c| c.set(true));
    String::new()
}

/// Where healthy traffic starts.
const T0: u64 = 1_000 * SEC;

/// One structure under test. `apply` runs operation `kind` (taken modulo the number of
/// operations the structure has) with argument `arg` at `now`, and describes the result
/// without anything that names the instance (owner ids differ between twins).
trait Subject {
    fn make() -> Self;
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String;
    /// Counters and gauges; `latest` is an in-range time for the calls that need one.
    fn snapshot(&mut self, latest: u64) -> String;
    /// The time a bad call acts at: the latest time seen (`latest`), or the structure's
    /// own documented record of it.
    fn stand_in(&self, latest: u64) -> u64 {
        latest
    }
}

#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    arg: u32,
    dt: u64,
    back: bool,
}

#[derive(Clone, Debug)]
struct Case {
    steps: Vec<Step>,
    /// The bad call comes before `steps[bad_at]` (or after the last step).
    bad_at: usize,
    bad_now: u64,
    bad_kind: u8,
    bad_arg: u32,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = usize::arbitrary(g) % 150;
        let steps = (0..n)
            .map(|_| {
                let r = u8::arbitrary(g);
                let dt = match r % 16 {
                    0 => u64::arbitrary(g) % (40 * SEC), // a jump: windows close
                    1 | 2 => 0,
                    _ => u64::arbitrary(g) % (30 * MS),
                };
                Step { kind: u8::arbitrary(g), arg: u32::arbitrary(g), dt, back: r % 16 == 15 }
            })
            .collect();
        let bad_now = match u8::arbitrary(g) % 3 {
            0 => u64::MAX,
            1 => MAX_NOW + 1,
            _ => MAX_NOW + 1 + u64::arbitrary(g) % (u64::MAX - MAX_NOW - 1),
        };
        Case {
            steps,
            bad_at: usize::arbitrary(g) % (n + 1),
            bad_now,
            bad_kind: u8::arbitrary(g),
            bad_arg: u32::arbitrary(g),
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let c = self.clone();
        Box::new(self.steps.shrink().map(move |steps| {
            let bad_at = c.bad_at.min(steps.len());
            Case { steps, bad_at, ..c.clone() }
        }))
    }
}

impl Arbitrary for Step {
    fn arbitrary(_: &mut Gen) -> Self {
        unreachable!("steps are built by Case::arbitrary")
    }
}

/// Runs `case` on a subject and on its twin; `Err` describes the first difference.
fn against_twin<S: Subject>(case: &Case) -> Result<(), String> {
    let (mut subject, mut twin) = (S::make(), S::make());
    let mut now = T0;
    let mut latest = 0; // every structure starts having seen time 0
    for i in 0..=case.steps.len() {
        if i == case.bad_at {
            let got = subject.apply(case.bad_kind, case.bad_arg, case.bad_now);
            TWIN_OF_BAD.with(|c| c.set(true));
            let at = twin.stand_in(latest);
            let want = twin.apply(case.bad_kind, case.bad_arg, at);
            TWIN_OF_BAD.with(|c| c.set(false));
            if got != want {
                return Err(format!("the bad call at step {i}: {got} != twin's {want}"));
            }
        }
        let Some(s) = case.steps.get(i) else { break };
        now = if s.back { now.saturating_sub(s.dt) } else { now + s.dt };
        UNTIMED.with(|c| c.set(false));
        let (got, want) = (subject.apply(s.kind, s.arg, now), twin.apply(s.kind, s.arg, now));
        if got != want {
            return Err(format!("step {i} at {now}: {got} != twin's {want}"));
        }
        if !UNTIMED.with(Cell::get) {
            latest = latest.max(now);
        }
    }
    let (got, want) = (subject.snapshot(latest), twin.snapshot(latest));
    if got != want {
        return Err(format!("metrics: {got} != twin's {want}"));
    }
    Ok(())
}

fn property<S: Subject>(case: Case) -> TestResult {
    match against_twin::<S>(&case) {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

fn check<S: Subject>() {
    QuickCheck::new().tests(200).quickcheck(property::<S> as fn(Case) -> TestResult);
}

fn outcome(arg: u32) -> Outcome {
    match arg % 3 {
        0 => Outcome::Success,
        1 => Outcome::Dropped,
        _ => Outcome::Ignored,
    }
}

fn level(arg: u32) -> Priority {
    Priority::new((arg % 3) as u8).unwrap()
}

fn permit_text(p: &RawPermit) -> String {
    format!("permit(level {}, at {})", p.level().index(), p.started_at())
}

/// Removes the held item `arg` picks (if any).
fn take<T>(held: &mut Vec<T>, arg: u32) -> Option<T> {
    (!held.is_empty()).then(|| held.remove(arg as usize % held.len()))
}

// ---------------------------------------------------------------------------------------
// Client side: rate limits, retry budget, adaptive throttle, breaker

struct Rate(RateLimiter);

impl Subject for Rate {
    fn make() -> Self {
        Self(RateLimiter::new(RateLimiterConfig { per_second: 200.0, burst: 5 }).unwrap())
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 4 {
            0 => format!("{:?}", self.0.check(now, arg % 7)),
            1 => format!("{}", self.0.take_up_to(now, arg % 9)),
            2 => format!("{}", self.0.available(now)),
            _ => format!("{}", self.0.wait_time(now, arg % 7)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?} {}", self.0.metrics(), self.0.available(latest))
    }
}

struct Drain(PacedDrain);

impl Subject for Drain {
    fn make() -> Self {
        Self(PacedDrain::new(PacedDrainConfig::new(500.0)).unwrap())
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 2 {
            0 => format!("{}", self.0.permits(now, (arg % 300) as u64)),
            _ => format!("{}", self.0.next_permit_in(now)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?} {}", self.0.metrics(), self.0.next_permit_in(latest))
    }
}

struct Budget(RetryBudget);

impl Subject for Budget {
    fn make() -> Self {
        let config = RetryBudgetConfig { ttl: SEC, min_retries_per_sec: 2, percent_can_retry: 0.2 };
        Self(RetryBudget::new(config).unwrap())
    }
    fn apply(&mut self, kind: u8, _: u32, now: u64) -> String {
        match kind % 4 {
            0 | 1 => {
                self.0.deposit(now);
                String::new()
            }
            2 => format!("{:?}", self.0.try_withdraw(now)),
            _ => format!("{}", self.0.available(now)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?} {}", self.0.metrics(), self.0.available(latest))
    }
}

struct Throttle<const EMA: bool>(AdaptiveThrottle);

impl<const EMA: bool> Subject for Throttle<EMA> {
    fn make() -> Self {
        let form = if EMA { ThrottleForm::Ema } else { ThrottleForm::Ring };
        let config =
            AdaptiveThrottleConfig { window: 12 * SEC, form, ..AdaptiveThrottleConfig::default() };
        Self(AdaptiveThrottle::new(config).unwrap())
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 4 {
            0 | 1 => {
                self.0.record(now, arg % 3 == 0); // mostly refused: the throttle engages
                String::new()
            }
            2 => format!("{:?}", self.0.should_throttle(now, (arg as u64) << 32)),
            _ => format!("{:?}", self.0.drop_probability(now).to_bits()),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?} {}", self.0.metrics(), self.0.drop_probability(latest))
    }
}

struct Breaker<const TIME: bool> {
    b: CircuitBreaker,
    held: Vec<BreakerPermit>,
}

impl<const TIME: bool> Subject for Breaker<TIME> {
    fn make() -> Self {
        let window = if TIME { BreakerWindow::Time(2 * SEC) } else { BreakerWindow::Count(20) };
        let config = CircuitBreakerConfig {
            window,
            minimum_calls: 5,
            open_duration: 500 * MS,
            ramp_duration: 400 * MS,
            seed: 7,
            ..CircuitBreakerConfig::default()
        };
        Self { b: CircuitBreaker::new(config).unwrap(), held: Vec::new() }
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 4 {
            0 | 1 => match self.b.try_acquire(now) {
                Ok(p) => {
                    let text = format!("{p:?}");
                    self.held.push(p);
                    text
                }
                Err(r) => format!("{r:?}"),
            },
            2 => match take(&mut self.held, arg) {
                Some(p) => {
                    // Mostly failures and slow calls, so the breaker trips and recovers.
                    self.b.record(p, now, outcome(arg / 3), (arg % 4000) as u64 * MS);
                    String::from("recorded")
                }
                None => untimed(),
            },
            _ => format!("{:?}", self.b.state(now)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?} held {}", self.b.metrics(latest), self.held.len())
    }
}

// ---------------------------------------------------------------------------------------
// Server side: limiter, gate, CoDel

struct Lim<const HYSTERESIS: bool> {
    l: Limiter,
    held: Vec<RawPermit>,
}

impl<const HYSTERESIS: bool> Subject for Lim<HYSTERESIS> {
    /// The limiter records time at most once per millisecond (its hot paths read the
    /// clock's line and rarely write it): a bad call acts at that record.
    fn stand_in(&self, _: u64) -> u64 {
        self.l.latest_time()
    }
    fn make() -> Self {
        let mut config =
            LimiterConfig { min_window_ns: 20 * MS, min_samples: 3, ..Default::default() };
        if HYSTERESIS {
            config.algorithm = AlgorithmConfig::Hysteresis(HysteresisConfig::default());
        }
        Self { l: Limiter::new(config).unwrap(), held: Vec::new() }
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 5 {
            0 | 1 => match self.l.try_acquire_raw(now, level(arg)) {
                Ok(p) => {
                    let text = permit_text(&p);
                    self.held.push(p);
                    text
                }
                Err(r) => format!("{r:?}"),
            },
            2 | 3 => match take(&mut self.held, arg) {
                Some(p) => {
                    judged_release(now, outcome(arg / 3), |t, o| self.l.release_raw(p, t, o))
                }
                None => untimed(),
            },
            _ => {
                self.l.note_arrival(now, level(arg));
                String::new()
            }
        }
    }
    fn snapshot(&mut self, _: u64) -> String {
        format!("{:?}", self.l.metrics())
    }
}

struct G {
    g: Gate<8>,
    held: Vec<RawPermit>,
    tickets: Vec<Ticket>,
}

impl G {
    fn ticket_text(&mut self, t: Ticket) -> String {
        let i = self.tickets.iter().position(|&x| x == t);
        format!("ticket#{}", i.map_or(usize::MAX, |i| i))
    }
}

impl Subject for G {
    /// The Gate keeps no clock of its own: it acts at its limiter's record of the latest
    /// time (written at most once per millisecond), and so does a bad call.
    fn stand_in(&self, _: u64) -> u64 {
        self.g.limiter().latest_time()
    }
    fn make() -> Self {
        let config = GateConfig {
            limiter: LimiterConfig {
                algorithm: AlgorithmConfig::Fixed(FixedConfig {
                    initial_limit: 3.0,
                    ..FixedConfig::default()
                }),
                min_window_ns: 20 * MS,
                min_samples: 3,
                ..Default::default()
            },
            max_wait_ns: Some(200 * MS),
            ..GateConfig::default()
        };
        Self { g: Gate::new(config).unwrap(), held: Vec::new(), tickets: Vec::new() }
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        // Deadlines are absolute times: a few seconds after the start.
        let deadline = (arg % 4 == 0).then(|| T0 + (arg / 4 % 5000) as u64 * MS);
        match kind % 7 {
            0 | 1 => match self.g.arrive(now, level(arg), deadline) {
                Arrival::Admitted(p) => {
                    let text = permit_text(&p);
                    self.held.push(p);
                    text
                }
                Arrival::Queued(t) => {
                    self.tickets.push(t);
                    self.ticket_text(t)
                }
                Arrival::Rejected(r) => format!("{r:?}"),
            },
            2 => match self.g.try_arrive(now, level(arg), deadline) {
                Ok(p) => {
                    let text = permit_text(&p);
                    self.held.push(p);
                    text
                }
                Err(r) => format!("{r:?}"),
            },
            3 => match take(&mut self.held, arg) {
                Some(p) => judged_release(now, outcome(arg / 3), |t, o| self.g.release(p, t, o)),
                None => untimed(),
            },
            4 => {
                let mut out = [const { None }; 4];
                let n = self.g.poll(now, &mut out);
                let mut text = String::new();
                for e in out[..n].iter_mut() {
                    match e.take() {
                        Some(Event::Granted(t, p)) => {
                            text += &format!("{} {} ", self.ticket_text(t), permit_text(&p));
                            self.held.push(p);
                        }
                        Some(Event::Expired(t, r)) => {
                            text += &format!("{} {r:?} ", self.ticket_text(t));
                        }
                        None => {}
                    }
                }
                text
            }
            5 => {
                let t = self.tickets.get(arg as usize % self.tickets.len().max(1)).copied();
                let text = format!("{:?}", t.map(|t| self.g.cancel(t)));
                untimed();
                text
            }
            _ => format!("{:?}", self.g.next_wakeup(now)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?} {:?}", self.g.metrics(), self.g.next_wakeup(latest))
    }
}

struct Cd(Codel);

impl Subject for Cd {
    fn make() -> Self {
        Self(Codel::new(CodelConfig::default()).unwrap())
    }
    fn apply(&mut self, _: u8, arg: u32, now: u64) -> String {
        let delay = (arg % 200) as u64 * 100 * US;
        format!("{}", self.0.on_dequeue(now, delay, (arg % 5) as usize))
    }
    fn snapshot(&mut self, _: u64) -> String {
        format!("{:?} {} {}", self.0.metrics(), self.0.is_overloaded(), self.0.load())
    }
}

// ---------------------------------------------------------------------------------------
// Pipelines and isolation

struct Lag {
    m: LagMeter<8>,
    produced: u64,
    consumed: u64,
}

impl Subject for Lag {
    fn make() -> Self {
        let m = LagMeter::new(LagMeterConfig { bucket: 100 * MS }).unwrap();
        Self { m, produced: 0, consumed: 0 }
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        let n = (arg % 50) as u64;
        match kind % 8 {
            0 => {
                self.m.record_produced(now, n);
                String::new()
            }
            1 => {
                self.m.record_consumed(now, n / 2);
                String::new()
            }
            2 => {
                self.produced += n;
                self.consumed += n / 3;
                self.m.observe_totals(now, self.produced, self.consumed);
                String::new()
            }
            3 => {
                let at = (arg % 3 != 0).then(|| T0 + (arg % 2000) as u64 * MS);
                self.m.report_oldest(now, at);
                String::new()
            }
            4 => format!("{}", self.m.lag(now)),
            5 => format!("{:?}", self.m.time_to_drain(now)),
            6 => format!("{:?}", self.m.lag_time(now)),
            _ => format!("{:?}", self.m.oldest_age(now)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?}", self.m.metrics(latest))
    }
}

struct Marks(Watermarks);

impl Subject for Marks {
    fn make() -> Self {
        let config = WatermarksConfig { capacity: 10, pause_below: 3, resume_above: 6 };
        Self(Watermarks::new(config).unwrap())
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 3 {
            0 | 1 => format!("{:?}", self.0.observe(now, (arg % 11) as u64)),
            _ => format!("{:?}", self.0.metrics(now)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?}", self.0.metrics(latest))
    }
}

struct Keyed {
    k: KeyedLimits<16>,
    held: Vec<KeyPermit>,
}

impl Subject for Keyed {
    fn make() -> Self {
        let config = KeyedConfig {
            shard_rate: Some(ShardRate::per_second(50.0, 3).unwrap()),
            ..KeyedConfig::new(2)
        };
        Self { k: KeyedLimits::new(config).unwrap(), held: Vec::new() }
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        match kind % 3 {
            0 | 1 => match self.k.try_acquire((arg % 6) as u64 * 0x9E37_79B9, now, arg % 3) {
                Ok(p) => {
                    let text = format!("shard {}", p.shard());
                    self.held.push(p);
                    text
                }
                Err(r) => format!("{r:?}"),
            },
            _ => {
                let text = format!("{:?}", take(&mut self.held, arg).map(|p| self.k.release(p)));
                untimed();
                text
            }
        }
    }
    fn snapshot(&mut self, _: u64) -> String {
        format!("{:?}", self.k.metrics())
    }
}

// ---------------------------------------------------------------------------------------
// Statistics (single-owner structures the limit algorithms build on)

struct Samples(SampleWindow);

impl Subject for Samples {
    fn make() -> Self {
        Self(SampleWindow::new(50 * MS, 3))
    }
    fn apply(&mut self, kind: u8, arg: u32, now: u64) -> String {
        let inflight = arg % 20;
        match kind % 3 {
            0 => {
                self.0.record(now, (arg % 5000) as u64 * US, inflight);
                String::new()
            }
            1 => {
                self.0.record_drop(now, inflight);
                String::new()
            }
            _ => format!("{:?}", self.0.try_close(now, inflight)),
        }
    }
    fn snapshot(&mut self, latest: u64) -> String {
        format!("{:?}", self.0.try_close(latest, 0))
    }
}

struct MinFilter(WindowedMin);

impl Subject for MinFilter {
    fn make() -> Self {
        Self(WindowedMin::new(SEC))
    }
    fn apply(&mut self, _: u8, arg: u32, now: u64) -> String {
        format!("{}", self.0.update(now, (arg % 1000) as u64))
    }
    fn snapshot(&mut self, _: u64) -> String {
        format!("{:?}", self.0.get())
    }
}

// ---------------------------------------------------------------------------------------
// The properties

#[test]
fn rate_limiter_ignores_bad_time() {
    check::<Rate>();
}

#[test]
fn paced_drain_ignores_bad_time() {
    check::<Drain>();
}

#[test]
fn retry_budget_ignores_bad_time() {
    check::<Budget>();
}

#[test]
fn adaptive_throttle_ignores_bad_time() {
    check::<Throttle<false>>();
    check::<Throttle<true>>();
}

#[test]
fn circuit_breaker_ignores_bad_time() {
    check::<Breaker<false>>();
    check::<Breaker<true>>();
}

#[test]
fn limiter_ignores_bad_time() {
    check::<Lim<false>>();
    check::<Lim<true>>();
}

#[test]
fn gate_ignores_bad_time() {
    check::<G>();
}

#[test]
fn codel_ignores_bad_time() {
    check::<Cd>();
}

#[test]
fn lag_meter_ignores_bad_time() {
    check::<Lag>();
}

#[test]
fn watermarks_ignore_bad_time() {
    check::<Marks>();
}

#[test]
fn keyed_limits_ignore_bad_time() {
    check::<Keyed>();
}

#[test]
fn sample_window_and_windowed_min_ignore_bad_time() {
    check::<Samples>();
    check::<MinFilter>();
}

// ---------------------------------------------------------------------------------------
// The symptoms as first reported, one call each

#[test]
fn one_bad_call_leaves_no_trace_in_the_reported_symptoms() {
    for bad in [u64::MAX, MAX_NOW + 1] {
        // The rate limiter: no centuries-long hint afterwards.
        let r = Rate::make().0;
        assert!(r.check(T0, 1).is_ok());
        let _ = r.check(bad, 1);
        assert!(r.check(T0 + SEC, 1).is_ok());

        // The Gate: an arrival without a deadline is admitted afterwards, and a release
        // at the bad time is refused (its slot comes back, as `Ignored`): no hours-long
        // service time.
        let g = G::make().g;
        let Arrival::Admitted(p) = g.arrive(T0, Priority::NORMAL, None) else { panic!() };
        let Arrival::Admitted(q) = g.arrive(bad, Priority::NORMAL, None) else { panic!() };
        assert_eq!(q.started_at(), T0);
        g.release(p, T0 + 3 * MS, Outcome::Success).unwrap();
        assert_eq!(g.release(q, bad, Outcome::Success), Err(UsageError::TimeOutOfRange));
        assert_eq!(g.service_ns(), 3 * MS);
        assert_eq!(g.limiter().inflight(), 0);
        assert!(matches!(g.arrive(T0 + 4 * MS, Priority::NORMAL, None), Arrival::Admitted(_)));

        // The retry budget: what it reports available, it allows.
        let b = Budget::make().0;
        b.deposit(T0);
        let _ = b.available(bad);
        assert!(b.available(T0 + MS) > 0);
        assert!(b.try_withdraw(T0 + MS).is_ok());
    }
}

#[test]
fn a_deadline_past_max_now_is_no_deadline() {
    for deadline in [MAX_NOW + 1, u64::MAX] {
        let (with, without) = (G::make().g, G::make().g);
        for i in 0..8u64 {
            let now = T0 + i * MS;
            let a = format!("{:?}", with.arrive(now, Priority::NORMAL, Some(deadline)));
            let b = format!("{:?}", without.arrive(now, Priority::NORMAL, None));
            // Same decision; ticket and permit owners differ between the two gates.
            assert_eq!(a.split('(').next(), b.split('(').next(), "arrival {i}");
        }
        assert_eq!(format!("{:?}", with.metrics()), format!("{:?}", without.metrics()));
        assert_eq!(with.next_wakeup(T0 + 9 * MS), without.next_wakeup(T0 + 9 * MS));
    }
}

#[test]
fn releases_of_a_bad_time_keep_the_permit_contract() {
    // `release` takes the permit by value: it is refused with `TimeOutOfRange`, and its
    // slot still comes back (as `Ignored`, no sample) so a bad time never leaks a slot;
    // a second use stays impossible by type.
    let l = Limiter::new(LimiterConfig::default()).unwrap();
    let p = l.try_acquire_raw(T0, Priority::NORMAL).unwrap();
    assert_eq!(l.release_raw(p, u64::MAX, Outcome::Success), Err(UsageError::TimeOutOfRange));
    assert_eq!(l.metrics().inflight, 0);
    assert_eq!(l.metrics().successes, 0);
    assert_eq!(l.metrics().ignored, 1);
}

/// A forward jump within range is time passing with nothing happening, as `time`'s docs
/// say per family: windows expire, buckets refill, open breakers half-open, waiters expire.
#[test]
fn a_forward_jump_is_time_passing() {
    let jump = MAX_NOW - 1;
    // Rate limits: the bucket refills, capped at the burst.
    let r = Rate::make().0;
    while r.check(T0, 1).is_ok() {}
    assert_eq!(r.available(jump), 5);
    // The retry budget: deposits expire, the reserve remains.
    let b = Budget::make().0;
    for _ in 0..100 {
        b.deposit(T0);
    }
    assert_eq!(b.available(T0), 22); // 20 % of 100, plus the reserve of 2
    assert_eq!(b.available(jump), 2);
    // A breaker: the open period ends, the next call is a probe.
    let br = Breaker::<false>::make();
    while br.b.state(T0) != surgeguard_core::breaker::BreakerState::Open {
        let p = br.b.try_acquire(T0).unwrap();
        br.b.record(p, T0, Outcome::Dropped, MS);
    }
    assert!(br.b.try_acquire(jump).unwrap().is_probe());
    // The Gate: a queued waiter's maximum wait passes; the next poll expires it.
    let g = G::make().g;
    let held: Vec<_> = (0..3)
        .map(|_| match g.arrive(T0, Priority::NORMAL, None) {
            Arrival::Admitted(p) => p,
            other => panic!("{other:?}"),
        })
        .collect();
    let Arrival::Queued(t) = g.arrive(T0, Priority::NORMAL, None) else { panic!() };
    let mut out = [const { None }; 4];
    assert_eq!(g.poll(jump, &mut out), 1);
    assert!(matches!(out[0], Some(Event::Expired(x, _)) if x == t));
    for p in held {
        g.release(p, jump, Outcome::Ignored).unwrap();
    }
    // Watermarks: a pause in progress counts the jump as time paused.
    let w = Marks::make().0;
    w.observe(T0, 9);
    assert_eq!(w.metrics(jump).time_paused, jump - T0);
}
