//! Consumer lag in seconds and time to drain: lag measured in seconds, not messages
//! (`lag_sec = lag / consume_rate`, `drain_sec = lag / (consume − produce)`).

use crate::sync::{AtomicU64, Exclusive, Ordering};
use crate::time::{AtomicMonotonic, MAX_NOW, SEC, US};
use crate::ConfigError;

/// Settings of a [`LagMeter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LagMeterConfig {
    /// Width of one rate bucket in nanoseconds, 1 µs to 1 day. A snapshot of the counters
    /// is taken at the first call in each bucket; rates are measured over the last
    /// `SNAPSHOTS − 1` buckets.
    pub bucket: u64,
}

impl Default for LagMeterConfig {
    fn default() -> Self {
        // 1 s buckets: `LagMeter<61>` then measures a 1-minute consume rate.
        Self { bucket: SEC }
    }
}

/// Longest bucket accepted: one day (longer windows are a capacity-planning job).
const MAX_BUCKET: u64 = 86_400 * SEC;
/// Shortest bucket accepted: one microsecond.
const MIN_BUCKET: u64 = US;
/// A sentinel no real value takes: "no rate yet" (a NaN bit pattern never produced by
/// the division in `fold`, whose divisor is positive) and "no oldest item reported".
const NONE: u64 = u64::MAX;

/// A snapshot of a [`LagMeter`]: counters, windowed rates and derived gauges (lag in
/// seconds and time to drain in seconds, the gauges to alert on).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LagMetrics {
    /// Items produced, in total.
    pub produced: u64,
    /// Items consumed (or otherwise removed from the backlog), in total.
    pub consumed: u64,
    /// Items produced and not yet consumed.
    pub lag: u64,
    /// Whether the rates below are measured yet (two snapshots taken).
    pub rates_known: bool,
    /// Items per second produced over the window (0 until known).
    pub produce_rate: f64,
    /// Items per second consumed over the window (0 until known).
    pub consume_rate: f64,
    /// `lag / consume_rate` in seconds; 0 with no lag, `INFINITY` when nothing is consumed.
    pub lag_seconds: f64,
    /// `lag / (consume_rate − produce_rate)` in seconds; 0 with no lag, `INFINITY` when the
    /// backlog is not shrinking (or the rates are not known yet).
    pub time_to_drain_seconds: f64,
    /// Age in nanoseconds of the oldest unprocessed item, if the caller reports it.
    pub oldest_age: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Snapshot {
    at: u64,
    produced: u64,
    consumed: u64,
}

/// The ring of snapshots; only ever touched by the one thread folding.
#[derive(Debug)]
struct Window<const S: usize> {
    snaps: [Snapshot; S],
    len: usize,
    newest: usize,
    next_fold: u64,
}

impl<const S: usize> Window<S> {
    fn push(&mut self, s: Snapshot) {
        self.newest = if self.len == 0 { 0 } else { (self.newest + 1) % S };
        self.snaps[self.newest] = s;
        self.len = (self.len + 1).min(S);
    }

    fn oldest(&self) -> Snapshot {
        self.snaps[(self.newest + 1 + S - self.len) % S]
    }
}

/// Consumer lag measured in time: produce and consume rates over a sliding window of
/// `SNAPSHOTS − 1` buckets, `lag = produced − consumed`, lag in seconds
/// (`lag / consume_rate`), time to drain (`lag / (consume_rate − produce_rate)`, none when
/// the backlog is not shrinking), the age of the oldest unprocessed item if the caller
/// reports it, and the alert predicate [`time_to_drain_exceeds`](Self::time_to_drain_exceeds)
/// (page when the time to drain exceeds the retention left: data would be lost).
///
/// Feed it either with increments ([`record_produced`](Self::record_produced),
/// [`record_consumed`](Self::record_consumed)) or with cumulative totals
/// ([`observe_totals`](Self::observe_totals): a Kafka partition's end offset and committed
/// offset; for a queue whose depth is known, `(consumed + depth, consumed)`); items
/// dropped from the backlog count as consumed. Rates come from cumulative counters
/// snapshotted once per bucket, so no item is lost or counted twice across a bucket
/// boundary, and a rate is the exact average over the time between the oldest and the
/// newest snapshot.
///
/// The recovery arithmetic, checked in the tests: a 1 h outage at produce rate `P`
/// leaves `3600·P` items; with 20% headroom (`C = 1.2·P`) they drain in
/// `3600·P / 0.2·P` s = 5 h.
///
/// ```
/// use surgeguard_core::flow::{LagMeter, LagMeterConfig};
/// use surgeguard_core::time::SEC;
///
/// let meter = LagMeter::<61>::new(LagMeterConfig::default()).unwrap(); // 1-minute rates
/// meter.observe_totals(0, 3_600_000, 0); // 1 h of backlog at 1000/s
/// for s in 1..=60 {
///     // produce 1000/s, consume 1200/s (20% headroom)
///     meter.observe_totals(s * SEC, 3_600_000 + 1000 * s, 1200 * s);
/// }
/// let now = 61 * SEC; // the window now covers seconds 1..61 exactly
/// assert_eq!(meter.lag(now), 3_588_000);
/// assert_eq!(meter.consume_rate(now), Some(1200.0));
/// assert_eq!(meter.lag_time(now), Some(2990 * SEC)); // 3,588,000 / 1200/s
/// assert_eq!(meter.time_to_drain(now), Some(17_940 * SEC)); // 3,588,000 / 200/s
/// assert!(meter.time_to_drain_exceeds(now, 4 * 3600 * SEC));
/// ```
///
/// Progress: lock-free, with no retry loops in this code: each call is a fixed sequence of
/// atomic operations (a clock `fetch_max`, a load, a counter update), and the first call
/// in a new bucket also tries one CAS to fold the snapshot ring — whoever wins folds in
/// O(1), everyone else moves on. Readers racing a fold may pair the new produce rate with
/// the previous fold's consume rate (two windows one bucket apart); single-threaded use is
/// exactly deterministic. Cost: about `24 · SNAPSHOTS + 96` bytes.
#[derive(Debug)]
pub struct LagMeter<const SNAPSHOTS: usize> {
    produced: AtomicU64,
    consumed: AtomicU64,
    oldest_enqueued_at: AtomicU64,
    produce_rate: AtomicU64,
    consume_rate: AtomicU64,
    /// A hint: the `next_fold` of the window, so most calls skip the CAS.
    next_fold: AtomicU64,
    clock: AtomicMonotonic,
    window: Exclusive<Window<SNAPSHOTS>>,
    bucket: u64,
}

impl<const SNAPSHOTS: usize> LagMeter<SNAPSHOTS> {
    /// A meter with nothing recorded. `SNAPSHOTS` must be at least 2 (one bucket of
    /// window); `bucket` between 1 µs and 1 day.
    pub fn new(config: LagMeterConfig) -> Result<Self, ConfigError> {
        if SNAPSHOTS < 2 {
            return Err(ConfigError::out_of_range("lag_meter.snapshots"));
        }
        if !(MIN_BUCKET..=MAX_BUCKET).contains(&config.bucket) {
            return Err(ConfigError::out_of_range("lag_meter.bucket"));
        }
        Ok(Self {
            produced: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            oldest_enqueued_at: AtomicU64::new(NONE),
            produce_rate: AtomicU64::new(NONE),
            consume_rate: AtomicU64::new(NONE),
            next_fold: AtomicU64::new(0),
            clock: AtomicMonotonic::new(),
            window: Exclusive::new(Window {
                snaps: [Snapshot::default(); SNAPSHOTS],
                len: 0,
                newest: 0,
                next_fold: 0,
            }),
            bucket: config.bucket,
        })
    }

    /// The settings.
    pub fn config(&self) -> LagMeterConfig {
        LagMeterConfig { bucket: self.bucket }
    }

    /// Clamps `now` and folds a snapshot if a bucket boundary has passed.
    fn tick(&self, now: u64) -> u64 {
        let now = self.clock.observe(now);
        // Relaxed: a hint only; the window's own `next_fold`, read under `Exclusive`, decides.
        if now >= self.next_fold.load(Ordering::Relaxed) {
            self.window.try_with(|w| self.fold(w, now));
        }
        now
    }

    fn fold(&self, w: &mut Window<SNAPSHOTS>, now: u64) {
        if now < w.next_fold {
            return; // another thread folded this bucket already
        }
        if w.len > 0 && now <= w.snaps[w.newest].at {
            // Only at the end of time: `next_fold` saturated at `u64::MAX`, so `now` can
            // equal it again. A second snapshot at the same instant would cover no time.
            return;
        }
        let (produced, consumed) = self.totals();
        w.push(Snapshot { at: now, produced, consumed });
        w.next_fold = (now / self.bucket).saturating_add(1).saturating_mul(self.bucket);
        // Relaxed: the hint orders nothing (see `tick`).
        self.next_fold.store(w.next_fold, Ordering::Relaxed);
        if w.len >= 2 {
            let (old, new) = (w.oldest(), w.snaps[w.newest]);
            // `at` strictly increases (each fold is past the previous `next_fold` and the
            // newest snapshot): secs > 0.
            let secs = (new.at - old.at) as f64 / SEC as f64;
            let p = new.produced.wrapping_sub(old.produced) as f64 / secs;
            let c = new.consumed.wrapping_sub(old.consumed) as f64 / secs;
            // Relaxed: each rate is a self-contained value (see the type's docs on pairing).
            self.produce_rate.store(p.to_bits(), Ordering::Relaxed);
            self.consume_rate.store(c.to_bits(), Ordering::Relaxed);
        }
    }

    /// `(produced, consumed)` with `consumed` read first: every item counted as consumed
    /// was produced before, so `produced ≥ consumed` in the pair.
    fn totals(&self) -> (u64, u64) {
        // Acquire: pairs with the Release updates of `consumed` in `record_consumed` and
        // `observe_totals`, so a production that happened before a consumption seen here is
        // seen by the load of `produced` below.
        let consumed = self.consumed.load(Ordering::Acquire);
        let produced = self.produced.load(Ordering::Relaxed);
        (produced, consumed)
    }

    /// `n` items entered the backlog.
    pub fn record_produced(&self, now: u64, n: u64) {
        self.tick(now);
        // Relaxed: ordered for readers by the Release on `consumed` (see `totals`).
        self.produced.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` items left the backlog (processed, or dropped on purpose).
    pub fn record_consumed(&self, now: u64, n: u64) {
        self.tick(now);
        // Release: pairs with the Acquire in `totals`.
        self.consumed.fetch_add(n, Ordering::Release);
    }

    /// Cumulative totals, e.g. a Kafka partition's end offset and committed offset. Each
    /// total only moves forward (a smaller value than one already seen is ignored).
    pub fn observe_totals(&self, now: u64, produced_total: u64, consumed_total: u64) {
        self.tick(now);
        // Relaxed: ordered for readers by the Release on `consumed` just below.
        self.produced.fetch_max(produced_total, Ordering::Relaxed);
        // Release: pairs with the Acquire in `totals`.
        self.consumed.fetch_max(consumed_total, Ordering::Release);
    }

    /// The enqueue time of the oldest unprocessed item (same clock as `now`), or `None`
    /// when the backlog is empty. An enqueue time above [`MAX_NOW`] is bad input and is
    /// ignored (the previous report stands).
    pub fn report_oldest(&self, now: u64, enqueued_at: Option<u64>) {
        self.tick(now);
        let v = match enqueued_at {
            None => NONE,
            Some(t) if t <= MAX_NOW => t, // below `NONE` (u64::MAX)
            Some(_) => return,
        };
        // Relaxed: a self-contained gauge.
        self.oldest_enqueued_at.store(v, Ordering::Relaxed);
    }

    /// Items produced and not yet consumed.
    pub fn lag(&self, now: u64) -> u64 {
        self.tick(now);
        let (produced, consumed) = self.totals();
        produced.saturating_sub(consumed)
    }

    fn rate(cell: &AtomicU64) -> Option<f64> {
        // Relaxed: a self-contained value.
        let bits = cell.load(Ordering::Relaxed);
        (bits != NONE).then(|| f64::from_bits(bits))
    }

    /// Items per second produced over the window; `None` until two snapshots exist.
    pub fn produce_rate(&self, now: u64) -> Option<f64> {
        self.tick(now);
        Self::rate(&self.produce_rate)
    }

    /// Items per second consumed over the window; `None` until two snapshots exist.
    pub fn consume_rate(&self, now: u64) -> Option<f64> {
        self.tick(now);
        Self::rate(&self.consume_rate)
    }

    /// `(lag, produce_rate, consume_rate)` after one tick.
    fn state(&self, now: u64) -> (u64, Option<(f64, f64)>) {
        let lag = self.lag(now);
        let rates = match (Self::rate(&self.produce_rate), Self::rate(&self.consume_rate)) {
            (Some(p), Some(c)) => Some((p, c)),
            _ => None,
        };
        (lag, rates)
    }

    /// Lag in time (ns): `lag / consume_rate`. `Some(0)` with no lag; `None` (infinite)
    /// when nothing is being consumed or the rate is not known yet.
    pub fn lag_time(&self, now: u64) -> Option<u64> {
        let (lag, rates) = self.state(now);
        seconds_to_ns(lag_seconds(lag, rates))
    }

    /// Time to drain (ns): `lag / (consume_rate − produce_rate)`. `Some(0)` with no lag;
    /// `None` (infinite) when the backlog is not shrinking or the rates are not known yet.
    pub fn time_to_drain(&self, now: u64) -> Option<u64> {
        let (lag, rates) = self.state(now);
        seconds_to_ns(drain_seconds(lag, rates))
    }

    /// The alert predicate: true when the backlog will take longer than `limit` ns to
    /// drain — including when it is not draining at all, or there is a backlog and the
    /// rates are not measured yet (alerts fail safe). False with no lag.
    pub fn time_to_drain_exceeds(&self, now: u64, limit: u64) -> bool {
        self.time_to_drain(now).is_none_or(|t| t > limit)
    }

    /// Age (ns) of the oldest unprocessed item, if the caller reports it
    /// ([`report_oldest`](Self::report_oldest)).
    pub fn oldest_age(&self, now: u64) -> Option<u64> {
        let now = self.tick(now);
        // Relaxed: a self-contained gauge.
        let at = self.oldest_enqueued_at.load(Ordering::Relaxed);
        (at != NONE).then(|| now.saturating_sub(at))
    }

    /// A snapshot of counters, rates and derived gauges at `now`.
    pub fn metrics(&self, now: u64) -> LagMetrics {
        let oldest_age = self.oldest_age(now);
        let (lag, rates) = self.state(now);
        let (produced, consumed) = self.totals();
        let (p, c) = rates.unwrap_or((0.0, 0.0));
        LagMetrics {
            produced,
            consumed,
            lag,
            rates_known: rates.is_some(),
            produce_rate: p,
            consume_rate: c,
            lag_seconds: lag_seconds(lag, rates),
            time_to_drain_seconds: drain_seconds(lag, rates),
            oldest_age,
        }
    }
}

/// `lag_seconds = lag / consume_rate`; `INFINITY` when not consuming.
fn lag_seconds(lag: u64, rates: Option<(f64, f64)>) -> f64 {
    match rates {
        _ if lag == 0 => 0.0,
        Some((_, c)) if c > 0.0 => lag as f64 / c,
        _ => f64::INFINITY,
    }
}

/// `drain_time = backlog / (consume_rate − produce_rate)`; `INFINITY` when the
/// backlog is not shrinking.
fn drain_seconds(lag: u64, rates: Option<(f64, f64)>) -> f64 {
    match rates {
        _ if lag == 0 => 0.0,
        Some((p, c)) if c > p => lag as f64 / (c - p),
        _ => f64::INFINITY,
    }
}

/// Seconds to nanoseconds, rounded; `None` for infinity, saturating at `u64::MAX`.
fn seconds_to_ns(secs: f64) -> Option<u64> {
    // `as` saturates: anything at or past 2^64 ns becomes `u64::MAX`.
    secs.is_finite().then(|| libm::round(secs * SEC as f64) as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    const HOUR: u64 = 3600;

    fn meter<const S: usize>() -> LagMeter<S> {
        LagMeter::new(LagMeterConfig::default()).unwrap()
    }

    #[test]
    fn bad_configs_are_refused() {
        let c = LagMeterConfig::default();
        assert_eq!(
            LagMeter::<1>::new(c).unwrap_err(),
            ConfigError::out_of_range("lag_meter.snapshots")
        );
        for bucket in [0, US - 1, MAX_BUCKET + 1, u64::MAX] {
            let err = LagMeter::<4>::new(LagMeterConfig { bucket }).unwrap_err();
            assert_eq!(err, ConfigError::out_of_range("lag_meter.bucket"));
        }
        assert!(LagMeter::<2>::new(LagMeterConfig { bucket: US }).is_ok());
        assert!(LagMeter::<2>::new(LagMeterConfig { bucket: MAX_BUCKET }).is_ok());
    }

    #[test]
    fn no_lag_means_zero_lag_time_and_no_alert() {
        let m = meter::<4>();
        assert_eq!(m.lag(0), 0);
        assert_eq!(m.lag_time(0), Some(0));
        assert_eq!(m.time_to_drain(0), Some(0));
        assert!(!m.time_to_drain_exceeds(0, 0));
        assert_eq!(m.oldest_age(0), None);
    }

    #[test]
    fn unknown_rates_with_a_backlog_alert_fail_safe() {
        let m = meter::<4>();
        m.record_produced(0, 10);
        assert_eq!(m.produce_rate(0), None);
        assert_eq!(m.lag(0), 10);
        assert_eq!(m.lag_time(0), None);
        assert_eq!(m.time_to_drain(0), None);
        assert!(m.time_to_drain_exceeds(0, u64::MAX));
        let s = m.metrics(0);
        assert!(!s.rates_known);
        assert_eq!(s.time_to_drain_seconds, f64::INFINITY);
    }

    #[test]
    fn calls_at_the_end_of_time_keep_finite_rates() {
        // The largest accepted time, and bad times past it: calls past `MAX_NOW` act at
        // the latest time seen, so they take no snapshot that would shrink the window.
        let m = meter::<4>();
        let end = MAX_NOW;
        m.observe_totals(end - 2 * SEC, 0, 0);
        m.observe_totals(end - SEC, 1000, 500);
        m.observe_totals(end, 2000, 1000);
        for i in 0..10 {
            m.observe_totals(u64::MAX - i, 2001 + i, 1001 + i);
        }
        let (p, c) = (m.produce_rate(u64::MAX).unwrap(), m.consume_rate(MAX_NOW + 1).unwrap());
        assert!(p.is_finite() && c.is_finite(), "rates {p} {c}");
        // Snapshots at end − 2 s (0, 0), end − 1 s (0, 0: taken before that call counts)
        // and end (1000, 500): the window still spans two seconds.
        assert_eq!((p, c), (500.0, 250.0));
        assert!(m.metrics(u64::MAX).time_to_drain_seconds.is_infinite()); // not draining
        assert_eq!(m.lag(u64::MAX), 1000);
    }

    #[test]
    fn an_enqueue_time_past_max_now_is_ignored() {
        let m = meter::<4>();
        m.report_oldest(10 * SEC, Some(4 * SEC));
        m.report_oldest(11 * SEC, Some(u64::MAX));
        m.report_oldest(11 * SEC, Some(MAX_NOW + 1));
        assert_eq!(m.oldest_age(12 * SEC), Some(8 * SEC));
        m.report_oldest(12 * SEC, Some(MAX_NOW));
        assert_eq!(m.oldest_age(12 * SEC), Some(0));
        m.report_oldest(12 * SEC, None);
        assert_eq!(m.oldest_age(12 * SEC), None);
    }

    /// Feeds `p` produced and `c` consumed items per second for `secs` seconds from `from`.
    fn feed<const S: usize>(m: &LagMeter<S>, from: u64, secs: u64, p: u64, c: u64) -> u64 {
        for s in from..from + secs {
            m.record_produced(s * SEC, p);
            m.record_consumed(s * SEC, c);
        }
        from + secs
    }

    #[test]
    fn steady_rates_are_measured_exactly() {
        let m = meter::<11>(); // 10 s window
        let t = feed(&m, 0, 30, 1000, 800);
        // The snapshot at t = 30 s covers seconds 20..29 fully.
        assert_eq!(m.produce_rate(t * SEC), Some(1000.0));
        assert_eq!(m.consume_rate(t * SEC), Some(800.0));
        assert_eq!(m.lag(t * SEC), 30 * 200);
        assert_eq!(m.lag_time(t * SEC), Some(6000 * SEC / 800)); // 7.5 s
        assert_eq!(m.time_to_drain(t * SEC), None, "growing backlog never drains");
        assert!(m.time_to_drain_exceeds(t * SEC, u64::MAX));
    }

    #[test]
    fn the_window_forgets_old_buckets() {
        let m = meter::<3>(); // 2 s window
        let t = feed(&m, 0, 10, 0, 0);
        m.record_produced(t * SEC, 0); // snapshot at 10 s
        let t = feed(&m, t, 5, 500, 0);
        // Covers seconds 13..14 only.
        assert_eq!(m.produce_rate(t * SEC), Some(500.0));
        let t = feed(&m, t, 2, 0, 0);
        assert_eq!(m.produce_rate(t * SEC), Some(0.0));
        assert_eq!(m.lag(t * SEC), 2500);
        assert_eq!(m.lag_time(t * SEC), None, "nothing consumed: infinite");
    }

    #[test]
    fn rates_are_averages_over_the_actual_snapshot_times() {
        let m = meter::<2>();
        m.record_produced(0, 0); // snapshot at 0
        m.record_produced(500 * MS, 300);
        // First call past 1 s is at 2.5 s: the snapshot spans 2.5 s with 300 items.
        assert_eq!(m.produce_rate(2500 * MS), Some(120.0));
    }

    /// With 20% headroom, a 1-hour outage takes ~5 hours to drain (1 h × P / 0.2 P).
    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn one_hour_outage_with_20_percent_headroom_drains_in_5_hours() {
        const P: u64 = 1000; // produced per second, always
        const C: u64 = 1200; // consumer capacity: 20% headroom over P
        let m = meter::<61>(); // 1-minute rates
        let mut backlog = 0u64;
        let mut t = 0;
        let step = |t: u64, consume_cap: u64, backlog: &mut u64| {
            m.record_produced(t * SEC, P);
            *backlog += P;
            let c = consume_cap.min(*backlog);
            m.record_consumed(t * SEC, c);
            *backlog -= c;
        };
        while t < HOUR {
            step(t, C, &mut backlog); // healthy: keeps up
            t += 1;
        }
        assert_eq!(m.lag(t * SEC), 0);
        while t < 2 * HOUR {
            step(t, 0, &mut backlog); // outage: consumes nothing
            t += 1;
        }
        assert_eq!(m.lag(t * SEC), HOUR * P); // 3.6 M items
        assert_eq!(m.consume_rate(t * SEC), Some(0.0));
        assert!(m.time_to_drain_exceeds(t * SEC, 1000 * HOUR * SEC), "not draining");
        // One window into the recovery the rates are the recovery rates.
        for _ in 0..60 {
            step(t, C, &mut backlog);
            t += 1;
        }
        let lag = HOUR * P - 60 * (C - P); // 3,588,000
        assert_eq!(m.lag(t * SEC), lag);
        assert_eq!(m.consume_rate(t * SEC), Some(1200.0));
        assert_eq!(m.produce_rate(t * SEC), Some(1000.0));
        assert_eq!(m.lag_time(t * SEC), Some(lag * SEC / C)); // 2990 s
        assert_eq!(m.time_to_drain(t * SEC), Some(lag * SEC / (C - P))); // 17,940 s
                                                                         // Total drain: 60 s so far + 17,940 s = 18,000 s = 5 h after the outage ended.
        let drain_end = t + m.time_to_drain(t * SEC).unwrap() / SEC;
        assert_eq!(drain_end - 2 * HOUR, 5 * HOUR);
        // And the simulation agrees: the backlog is gone exactly 5 h after recovery began.
        while backlog > 0 {
            step(t, C, &mut backlog);
            t += 1;
        }
        assert_eq!(t - 2 * HOUR, 5 * HOUR);
        assert_eq!(m.lag(t * SEC), 0);
        assert_eq!(m.time_to_drain(t * SEC), Some(0));
    }

    /// Headroom against drain time for a 1 h stall: 5% → ~20 h, 20% → ~5 h, 30% → ~3.3 h.
    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn drain_time_scales_as_outage_over_headroom() {
        for (headroom_pct, hours) in [(5u64, 20.0), (20, 5.0), (30, 10.0 / 3.0)] {
            let p = 10_000u64;
            let c = p * (100 + headroom_pct) / 100;
            let m = meter::<2>();
            let backlog = HOUR * p;
            m.observe_totals(0, backlog, 0);
            m.observe_totals(SEC, backlog + p, c);
            // The snapshot at 2 s closes the bucket 1..2 s: rates p and c.
            let ttd = m.time_to_drain(2 * SEC).unwrap() as f64 / SEC as f64;
            let expected = (backlog + p - c) as f64 / (c - p) as f64;
            assert!((ttd - expected).abs() < 1e-6, "{headroom_pct}%: {ttd} vs {expected}");
            assert!((ttd / 3600.0 - hours).abs() < 0.01, "{headroom_pct}%: {ttd} s");
        }
    }

    /// 24 h of backlog at 80K/s, consumers at 100K/s → ~96 h (24 h × 80K / 20K).
    #[test]
    #[cfg_attr(miri, ignore = "arithmetic over many iterations; too slow under Miri")]
    fn clickstream_backlog_takes_96_hours() {
        let m = meter::<2>();
        let backlog = 24 * HOUR * 80_000; // ~6.9 B
        m.observe_totals(0, backlog, 0);
        m.observe_totals(SEC, backlog + 80_000, 100_000);
        let lag = backlog - 20_000;
        let now = 2 * SEC; // closes the bucket 1..2 s
        assert_eq!(m.lag(now), lag);
        assert_eq!(m.time_to_drain(now), Some(lag / 20_000 * SEC)); // 345,599 s
        assert!(m.time_to_drain_exceeds(now, 95 * HOUR * SEC));
        assert!(!m.time_to_drain_exceeds(now, 96 * HOUR * SEC));
        let s = m.metrics(now);
        assert_eq!(s.lag_seconds, lag as f64 / 100_000.0);
        assert_eq!(s.time_to_drain_seconds, lag as f64 / 20_000.0);
        assert_eq!((s.produce_rate, s.consume_rate), (80_000.0, 100_000.0));
    }

    #[test]
    fn totals_only_move_forward() {
        let m = meter::<2>();
        m.observe_totals(0, 100, 40);
        m.observe_totals(0, 90, 30);
        assert_eq!(m.lag(0), 60);
        let s = m.metrics(0);
        assert_eq!((s.produced, s.consumed), (100, 40));
    }

    #[test]
    fn oldest_age_is_reported_by_the_caller() {
        let m = meter::<2>();
        m.report_oldest(10 * SEC, Some(4 * SEC));
        assert_eq!(m.oldest_age(10 * SEC), Some(6 * SEC));
        assert_eq!(m.oldest_age(3 * SEC), Some(6 * SEC), "time never runs backwards");
        assert_eq!(m.metrics(12 * SEC).oldest_age, Some(8 * SEC));
        m.report_oldest(12 * SEC, Some(20 * SEC)); // from the future: age 0, not negative
        assert_eq!(m.oldest_age(12 * SEC), Some(0));
        m.report_oldest(12 * SEC, None);
        assert_eq!(m.oldest_age(12 * SEC), None);
    }

    #[test]
    fn a_now_in_the_past_does_not_fold_or_distort_rates() {
        let m = meter::<2>();
        m.record_produced(0, 0);
        m.record_produced(2 * SEC, 100); // folds at 2 s: 0 items over 2 s
        assert_eq!(m.produce_rate(2 * SEC), Some(0.0));
        m.record_produced(SEC, 100); // treated as 2 s
        m.record_produced(4 * SEC, 0); // folds: 200 items over 2..4 s
        assert_eq!(m.produce_rate(4 * SEC), Some(100.0));
    }

    #[test]
    fn conversions_saturate_and_round() {
        assert_eq!(seconds_to_ns(f64::INFINITY), None);
        assert_eq!(seconds_to_ns(1e30), Some(u64::MAX));
        assert_eq!(seconds_to_ns(1.5e-9), Some(2));
        assert_eq!(lag_seconds(5, None), f64::INFINITY);
        assert_eq!(lag_seconds(0, None), 0.0);
        assert_eq!(drain_seconds(5, Some((3.0, 3.0))), f64::INFINITY);
        assert_eq!(drain_seconds(6, Some((1.0, 3.0))), 3.0);
    }
}
