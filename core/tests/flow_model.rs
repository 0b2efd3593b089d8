#![cfg(not(loom))]
//! quickcheck model tests for `surgeguard_core::flow`: each structure is driven by random
//! operations next to a small sequential reference model, checking every result and the
//! invariants of pipeline backpressure (items delivered never exceed credit granted; watermarks never
//! flap; lag and time to drain follow `lag / consume_rate` and `lag / (consume − produce)`).

use quickcheck::{quickcheck, Arbitrary, Gen};
use surgeguard_core::flow::{
    CreditTable, Credits, CreditsConfig, LagMeter, LagMeterConfig, Transition, Watermarks,
    WatermarksConfig,
};
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::{Reason, Rejected, UsageError};

fn below(g: &mut Gen, n: u64) -> u64 {
    u64::arbitrary(g) % n
}

// ---------------------------------------------------------------- credits

#[derive(Clone, Debug)]
enum CreditOp {
    Grant(u32),
    TryTake(u32),
    TakeUpTo(u32),
    Complete(u32),
    Replenish,
}

impl Arbitrary for CreditOp {
    fn arbitrary(g: &mut Gen) -> Self {
        let k = below(g, 12) as u32;
        match below(g, 5) {
            0 => Self::Grant(k),
            1 => Self::TryTake(k),
            2 => Self::TakeUpTo(k),
            3 => Self::Complete(k),
            _ => Self::Replenish,
        }
    }
}

#[derive(Clone, Debug)]
struct CreditScenario {
    capacity: u32,
    low_water: u32,
    ops: Vec<(usize, CreditOp)>,
}

impl Arbitrary for CreditScenario {
    fn arbitrary(g: &mut Gen) -> Self {
        let capacity = 1 + below(g, 10) as u32;
        let low_water = below(g, u64::from(capacity)) as u32;
        let ops = Vec::<(u8, CreditOp)>::arbitrary(g)
            .into_iter()
            .map(|(ch, op)| (usize::from(ch % 3), op))
            .collect();
        Self { capacity, low_water, ops }
    }
}

/// The reference: plain integers, one channel.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct CreditModel {
    available: u32,
    buffered: u32,
    granted: u64,
    taken: u64,
    completed: u64,
    refused: u64,
}

impl CreditModel {
    fn due(&self, capacity: u32, low_water: u32) -> u32 {
        let out = self.available + self.buffered;
        if out <= low_water {
            capacity - out
        } else {
            0
        }
    }
}

quickcheck! {
    /// Every call returns what the reference model says; taken never exceeds granted,
    /// outstanding never exceeds capacity, and a channel is untouched by other channels' calls.
    fn credits_match_the_model_and_never_deliver_more_than_granted(s: CreditScenario) -> bool {
        let cfg = CreditsConfig { capacity: s.capacity, low_water: s.low_water };
        let table = CreditTable::<3>::new(cfg).unwrap();
        let mut models = [CreditModel::default(); 3];
        for (ch, op) in &s.ops {
            let (c, m) = (table.channel(*ch).unwrap(), &mut models[*ch]);
            let before: Vec<_> = (0..3).filter(|i| i != ch).map(|i| table.channel(i).unwrap().metrics()).collect();
            match *op {
                CreditOp::Grant(n) => {
                    let g = n.min(s.capacity - m.available - m.buffered);
                    assert_eq!(c.grant(n), g);
                    m.available += g;
                    m.granted += u64::from(g);
                }
                CreditOp::TryTake(k) => {
                    if m.available >= k {
                        assert_eq!(c.try_take(k), Ok(()));
                        m.available -= k;
                        m.buffered += k;
                        m.taken += u64::from(k);
                    } else {
                        assert_eq!(c.try_take(k), Err(Rejected::new(Reason::NoCredit, 0)));
                        m.refused += 1;
                    }
                }
                CreditOp::TakeUpTo(k) => {
                    let n = k.min(m.available);
                    assert_eq!(c.take_up_to(k), n);
                    if n == 0 && k > 0 {
                        m.refused += 1;
                    }
                    m.available -= n;
                    m.buffered += n;
                    m.taken += u64::from(n);
                }
                CreditOp::Complete(k) => {
                    if m.buffered >= k {
                        assert_eq!(c.complete(k), Ok(()));
                        m.buffered -= k;
                        m.completed += u64::from(k);
                    } else {
                        assert_eq!(c.complete(k), Err(UsageError::AlreadyReleased));
                    }
                }
                CreditOp::Replenish => {
                    let due = m.due(s.capacity, s.low_water);
                    assert_eq!(c.grant_due(), due);
                    assert_eq!(c.replenish(), due);
                    m.available += due;
                    m.granted += u64::from(due);
                }
            }
            let got = c.metrics();
            assert!(got.taken <= got.granted, "delivered more than granted: {got:?}");
            assert!(got.completed <= got.taken);
            assert!(c.outstanding() <= s.capacity);
            assert_eq!(
                (got.available, got.buffered, got.granted, got.taken, got.completed, got.refused),
                (
                    u64::from(m.available),
                    u64::from(m.buffered),
                    m.granted,
                    m.taken,
                    m.completed,
                    m.refused
                )
            );
            let after: Vec<_> = (0..3).filter(|i| i != ch).map(|i| table.channel(i).unwrap().metrics()).collect();
            assert_eq!(before, after, "another channel changed");
        }
        let total = table.metrics();
        total.taken == models.iter().map(|m| m.taken).sum::<u64>()
            && total.granted == models.iter().map(|m| m.granted).sum::<u64>()
            && table.stalled() == models.iter().filter(|m| m.available == 0).count()
    }

    /// A producer that always sends as much as it may and a consumer that replenishes at
    /// low water: the items sent never exceed the credit granted, and batches are never
    /// smaller than `capacity − low_water` (except the first).
    fn replenishment_goes_out_in_batches(capacity: u8, low: u8, work: Vec<(u8, u8)>) -> bool {
        let capacity = u32::from(capacity.max(1));
        let low_water = u32::from(low) % capacity;
        let c = Credits::new(CreditsConfig { capacity, low_water }).unwrap();
        let mut sent = 0u64;
        let mut granted = u64::from(c.replenish());
        for (send, done) in work {
            sent += u64::from(c.take_up_to(u32::from(send)));
            let done = u32::from(done).min(c.buffered());
            c.complete(done).unwrap();
            let g = c.replenish();
            assert!(g == 0 || g >= capacity - low_water, "batch of {g}");
            granted += u64::from(g);
            assert!(sent <= granted);
        }
        c.metrics().taken == sent && c.metrics().granted == granted
    }
}

// ---------------------------------------------------------------- watermarks

#[derive(Clone, Debug)]
struct LevelScenario {
    config: WatermarksConfig,
    /// `(dt, level)` pairs.
    steps: Vec<(u64, u64)>,
}

impl Arbitrary for LevelScenario {
    fn arbitrary(g: &mut Gen) -> Self {
        let capacity = 3 + below(g, 60);
        let pause_below = 1 + below(g, capacity - 2);
        let resume_above = pause_below + 1 + below(g, capacity - pause_below - 1);
        let config = WatermarksConfig { capacity, pause_below, resume_above };
        let steps = if bool::arbitrary(g) {
            // A sawtooth: up by `step` to `hi`, down to `lo`, repeated.
            let lo = below(g, capacity + 5);
            let hi = lo + below(g, capacity + 5);
            let step = 1 + below(g, 7);
            let cycles = below(g, 20);
            let mut v = Vec::new();
            for _ in 0..cycles {
                let mut l = lo;
                while l < hi {
                    v.push((1 + below(g, 5), l));
                    l += step;
                }
                while l > lo {
                    v.push((1 + below(g, 5), l));
                    l = l.saturating_sub(step).max(lo);
                }
            }
            v
        } else {
            Vec::<(u8, u8)>::arbitrary(g)
                .into_iter()
                .map(|(dt, l)| (u64::from(dt), u64::from(l) % (capacity + 5)))
                .collect()
        };
        Self { config, steps }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Region {
    Below,
    Above,
}

quickcheck! {
    /// Transitions are exactly those of the reference (pause when free < low, resume when
    /// free > high), and never more than one plus the number of full crossings of the band
    /// in the input — a load inside the band never flaps the consumer.
    fn watermarks_never_flap(s: LevelScenario) -> bool {
        let w = Watermarks::new(s.config).unwrap();
        let cfg = s.config;
        let (mut paused, mut since, mut paused_ns) = (false, 0u64, 0u64);
        let (mut transitions, mut pauses) = (0u64, 0u64);
        let mut regions: Vec<Region> = Vec::new();
        let mut now = 0u64;
        for &(dt, level) in &s.steps {
            now += dt;
            let free = cfg.capacity.saturating_sub(level);
            let expected = if !paused && free < cfg.pause_below {
                paused = true;
                since = now;
                pauses += 1;
                Some(Transition::Pause)
            } else if paused && free > cfg.resume_above {
                paused = false;
                paused_ns += now - since;
                Some(Transition::Resume)
            } else {
                None
            };
            assert_eq!(w.observe(now, level), expected, "at level {level}");
            assert_eq!(w.is_paused(), paused);
            transitions += u64::from(expected.is_some());
            let region = if free < cfg.pause_below {
                Some(Region::Below)
            } else if free > cfg.resume_above {
                Some(Region::Above)
            } else {
                None
            };
            if let Some(r) = region {
                if regions.last() != Some(&r) {
                    regions.push(r);
                }
            }
        }
        let full_crossings = regions.windows(2).count() as u64;
        assert!(transitions <= full_crossings + 1, "{transitions} flips, {full_crossings} crossings");
        let m = w.metrics(now);
        let current = if paused { now - since } else { 0 };
        m.pauses == pauses
            && m.resumes == transitions - pauses
            && m.time_paused == paused_ns + current
            && m.paused == paused
    }
}

// ---------------------------------------------------------------- lag meter

#[derive(Clone, Debug)]
struct LagScenario {
    bucket: u64,
    /// `(dt, produced, consumed)`.
    steps: Vec<(u64, u64, u64)>,
}

impl Arbitrary for LagScenario {
    fn arbitrary(g: &mut Gen) -> Self {
        let bucket = *g.choose(&[100 * MS, SEC, 3 * SEC]).unwrap();
        let steps = Vec::<(u16, u16, u16)>::arbitrary(g)
            .into_iter()
            .map(|(dt, p, c)| (u64::from(dt) * 10 * MS, u64::from(p), u64::from(c)))
            .collect();
        Self { bucket, steps }
    }
}

/// The reference meter: every snapshot kept in a `Vec`, the window is the last `S`.
struct LagModel {
    bucket: u64,
    keep: usize,
    snaps: Vec<(u64, u64, u64)>,
    next_fold: u64,
    produced: u64,
    consumed: u64,
}

impl LagModel {
    fn tick(&mut self, now: u64) {
        if now >= self.next_fold {
            self.snaps.push((now, self.produced, self.consumed));
            self.next_fold = (now / self.bucket + 1) * self.bucket;
        }
    }

    fn rates(&self) -> Option<(f64, f64)> {
        let n = self.snaps.len();
        if n < 2 {
            return None;
        }
        let old = self.snaps[n.saturating_sub(self.keep)];
        let new = self.snaps[n - 1];
        let secs = (new.0 - old.0) as f64 / 1e9;
        Some(((new.1 - old.1) as f64 / secs, (new.2 - old.2) as f64 / secs))
    }
}

fn close(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x.abs_diff(y) <= 1 + x.max(y) / 1_000_000_000_000,
        (x, y) => x == y,
    }
}

fn check_lag_meter<const S: usize>(s: &LagScenario) -> bool {
    let m = LagMeter::<S>::new(LagMeterConfig { bucket: s.bucket }).unwrap();
    let mut model = LagModel {
        bucket: s.bucket,
        keep: S,
        snaps: Vec::new(),
        next_fold: 0,
        produced: 0,
        consumed: 0,
    };
    let mut now = 0;
    for &(dt, p, c) in &s.steps {
        now += dt;
        m.record_produced(now, p);
        model.tick(now);
        model.produced += p;
        let c = c.min(model.produced - model.consumed); // never consume what was not produced
        m.record_consumed(now, c);
        model.consumed += c;

        let lag = model.produced - model.consumed;
        assert_eq!(m.lag(now), lag);
        let rates = model.rates();
        assert_eq!(m.produce_rate(now), rates.map(|r| r.0));
        assert_eq!(m.consume_rate(now), rates.map(|r| r.1));
        // lag_seconds = lag / consume_rate; drain = lag / (consume − produce).
        let lag_time = match rates {
            _ if lag == 0 => Some(0),
            Some((_, c)) if c > 0.0 => Some((lag as f64 / c * 1e9).round() as u64),
            _ => None,
        };
        let ttd = match rates {
            _ if lag == 0 => Some(0),
            Some((p, c)) if c > p => Some((lag as f64 / (c - p) * 1e9).round() as u64),
            _ => None,
        };
        assert!(close(m.lag_time(now), lag_time), "{:?} vs {lag_time:?}", m.lag_time(now));
        assert!(close(m.time_to_drain(now), ttd), "{:?} vs {ttd:?}", m.time_to_drain(now));
        let limit = 5 * SEC;
        assert_eq!(m.time_to_drain_exceeds(now, limit), ttd.is_none_or(|t| t > limit));
    }
    true
}

#[derive(Clone, Debug)]
struct Steady {
    produce: u64,
    consume: u64,
    backlog: u64,
    secs: u64,
}

impl Arbitrary for Steady {
    fn arbitrary(g: &mut Gen) -> Self {
        Self {
            produce: below(g, 100_000),
            consume: below(g, 100_000),
            backlog: below(g, 1 << 40),
            secs: 5 + below(g, 100),
        }
    }
}

quickcheck! {
    /// Rates, lag, lag time and time to drain equal the reference model's at every step,
    /// for a 1-bucket and a 4-bucket window.
    fn lag_meter_matches_the_model(s: LagScenario) -> bool {
        check_lag_meter::<2>(&s) && check_lag_meter::<5>(&s)
    }

    /// Hand arithmetic: a backlog `B` with steady rates `P` and `C` for `n` seconds, read
    /// through a 4-second window, gives rates `P` and `C` exactly, lag `B + n·(P − C)`,
    /// `lag_time = lag / C` and `time_to_drain = lag / (C − P)` (none when `C ≤ P`).
    fn lag_meter_matches_hand_arithmetic(s: Steady) -> bool {
        let m = LagMeter::<5>::new(LagMeterConfig::default()).unwrap();
        // Steady consumption at C never drains below zero: start with enough backlog.
        let backlog = s.backlog + s.secs * s.consume;
        m.observe_totals(0, backlog, 0);
        for t in 1..=s.secs {
            m.observe_totals(t * SEC, backlog + t * s.produce, t * s.consume);
        }
        let now = (s.secs + 1) * SEC;
        let lag = backlog + s.secs * s.produce - s.secs * s.consume;
        assert_eq!(m.lag(now), lag);
        assert_eq!(m.produce_rate(now), Some(s.produce as f64));
        assert_eq!(m.consume_rate(now), Some(s.consume as f64));
        let ns = |num: u64, den: u64| -> u64 {
            // round(num · 1e9 / den) in integers.
            let r = (u128::from(num) * u128::from(SEC) * 2 + u128::from(den)) / (2 * u128::from(den));
            r.min(u128::from(u64::MAX)) as u64
        };
        let lag_time = (s.consume > 0).then(|| ns(lag, s.consume));
        let ttd = (s.consume > s.produce).then(|| ns(lag, s.consume - s.produce));
        assert!(lag == 0 || close(m.lag_time(now), lag_time), "{:?} vs {lag_time:?}", m.lag_time(now));
        assert!(lag == 0 || close(m.time_to_drain(now), ttd), "{:?} vs {ttd:?}", m.time_to_drain(now));
        true
    }
}
