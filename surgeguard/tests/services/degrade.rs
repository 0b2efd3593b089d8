#![cfg(feature = "tokio")]
//! Degradation helpers: the fallback runs on refusals, open breakers, deadlines and failed
//! dependencies and never on bugs; the stale-if-error cache against a reference model of
//! its documented rule (least recently stored evicted past `max_entries`, nothing served
//! at or past `max_age`).

use std::collections::VecDeque;
use std::time::Duration;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use surgeguard::clock::ManualClock;
use surgeguard::deadline::{self, Deadline, DeadlineExceeded};
use surgeguard::degrade::{Degrade, StaleIfError, with_fallback};
use surgeguard::{ConfigError, Reason, Rejected, UsageError};

#[derive(Debug, PartialEq)]
enum AppError {
    Overloaded(Rejected),
    Bug,
}

impl Degrade for AppError {
    fn should_degrade(&self) -> bool {
        matches!(self, Self::Overloaded(_))
    }
}

#[tokio::test]
async fn fallback_runs_on_refusal_breaker_and_deadline_never_on_bugs() {
    for reason in
        [Reason::LimitReached, Reason::BreakerOpen, Reason::DeadlineUnmeetable, Reason::Expired]
    {
        let r = with_fallback(async { Err::<u8, _>(Rejected::new(reason, 0)) }, |e| async move {
            assert_eq!(e.reason, reason);
            Ok(7)
        })
        .await;
        assert_eq!(r, Ok(7), "{reason:?}");
    }
    // A deadline that passes mid-call.
    let slow = deadline::enforce(async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        1
    });
    let r = deadline::scope(
        Deadline::after(Duration::from_millis(2)),
        with_fallback(slow, |_: DeadlineExceeded| async { Ok(2) }),
    )
    .await;
    assert_eq!(r, Ok(2));
    // A tokio timeout is a deadline too.
    let t = tokio::time::timeout(Duration::from_millis(1), std::future::pending::<Result<u8, _>>());
    let r = with_fallback(
        async { t.await.and_then(|r: Result<u8, tokio::time::error::Elapsed>| r) },
        |_| async { Ok(3) },
    )
    .await;
    assert_eq!(r, Ok(3));
    // Bugs are not hidden: no fallback, the error comes back as is.
    let called = std::cell::Cell::new(false);
    let r = with_fallback(async { Err::<u8, _>(AppError::Bug) }, |_| async {
        called.set(true);
        Ok(0)
    })
    .await;
    assert_eq!(r, Err(AppError::Bug));
    assert!(!called.get());
    let r = with_fallback(async { Err::<u8, _>(UsageError::TimeOutOfRange) }, |_| async { Ok(0) })
        .await;
    assert_eq!(r, Err(UsageError::TimeOutOfRange));
    let r =
        with_fallback(async { Err::<u8, _>(ConfigError::out_of_range("x")) }, |_| async { Ok(0) })
            .await;
    assert!(r.is_err());
    // Success passes through; the fallback may give the error back (a miss).
    let r = with_fallback(async { Ok::<u8, AppError>(9) }, |_| async { Ok(0) }).await;
    assert_eq!(r, Ok(9));
    let refused = AppError::Overloaded(Rejected::new(Reason::Shed, 5));
    let r = with_fallback(async { Err::<u8, _>(refused) }, |e| async { Err(e) }).await;
    assert_eq!(r, Err(AppError::Overloaded(Rejected::new(Reason::Shed, 5))));
}

#[derive(Clone, Debug)]
enum Op {
    /// Fetch succeeds with this value.
    Fresh(u8, u16),
    /// Fetch fails with a refusal (stale may be served).
    Refused(u8),
    /// Fetch fails with a bug (never stale).
    Bug(u8),
    Put(u8, u16),
    Advance(u16),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let k = u8::arbitrary(g) % 6;
        match u8::arbitrary(g) % 5 {
            0 => Op::Fresh(k, u16::arbitrary(g)),
            1 => Op::Refused(k),
            2 => Op::Bug(k),
            3 => Op::Put(k, u16::arbitrary(g)),
            _ => Op::Advance(u16::arbitrary(g) % 400),
        }
    }
}

/// The documented rule: entries in the order they were last stored; storing a new key past
/// `max` evicts the front; a value is served while `now − stored < max_age`, and a lookup
/// that finds it older removes it.
struct Model {
    max: usize,
    max_age: u64,
    now: u64,
    entries: VecDeque<(u8, u16, u64)>,
}

impl Model {
    fn put(&mut self, k: u8, v: u16) {
        let existed = self.entries.iter().position(|e| e.0 == k).map(|i| self.entries.remove(i));
        self.entries.push_back((k, v, self.now));
        if existed.is_none() && self.entries.len() > self.max {
            self.entries.pop_front();
        }
    }

    fn lookup(&mut self, k: u8) -> Option<(u16, u64)> {
        let i = self.entries.iter().position(|e| e.0 == k)?;
        let (_, v, t) = self.entries[i];
        if self.now - t >= self.max_age {
            self.entries.remove(i);
            return None;
        }
        Some((v, self.now - t))
    }
}

fn stale_cache_matches_model(max: u8, ops: Vec<Op>) -> bool {
    let max = usize::from(max % 5) + 1;
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let clock = ManualClock::new(1_000);
    let cache: StaleIfError<u8, u16, ManualClock> =
        StaleIfError::with_clock(max, Duration::from_millis(500), clock.clone()).unwrap();
    let mut m = Model { max, max_age: 500_000_000, now: 1_000, entries: VecDeque::new() };
    for op in ops {
        match op {
            Op::Fresh(k, v) => {
                let got = rt.block_on(cache.get(k, async { Ok::<_, AppError>(v) })).unwrap();
                m.put(k, v);
                assert!(!got.stale && got.value == v && got.age.is_zero());
            }
            Op::Refused(k) => {
                let err = AppError::Overloaded(Rejected::new(Reason::BreakerOpen, 1));
                let got = rt.block_on(cache.get(k, async { Err::<u16, _>(err) }));
                match (got, m.lookup(k)) {
                    (Ok(s), Some((v, age))) => {
                        assert!(s.stale);
                        assert_eq!((s.value, s.age), (v, Duration::from_nanos(age)));
                    }
                    (Err(AppError::Overloaded(_)), None) => {}
                    (got, want) => panic!("{got:?} vs model {want:?}"),
                }
            }
            Op::Bug(k) => {
                let got = rt.block_on(cache.get(k, async { Err::<u16, _>(AppError::Bug) }));
                assert_eq!(got, Err(AppError::Bug));
            }
            Op::Put(k, v) => {
                cache.put(k, v);
                m.put(k, v);
            }
            Op::Advance(ms) => {
                clock.advance(Duration::from_millis(u64::from(ms))).unwrap();
                m.now += u64::from(ms) * 1_000_000;
            }
        }
        assert_eq!(cache.len(), m.entries.len());
        assert!(cache.len() <= max);
        assert!(cache.order_len() <= 2 * max, "order queue {} > 2 × {max}", cache.order_len());
    }
    true
}

#[test]
fn stale_if_error_matches_its_documented_rule() {
    QuickCheck::new().tests(300).quickcheck(stale_cache_matches_model as fn(u8, Vec<Op>) -> bool);
}

#[tokio::test]
async fn stale_if_error_counts_and_bounds() {
    let cache = StaleIfError::new(2, Duration::from_secs(60)).unwrap();
    let refused = || async { Err::<u32, _>(Rejected::new(Reason::Shed, 0)) };
    assert!(cache.get("a", refused()).await.is_err()); // nothing stored: the error
    cache.get("a", async { Ok::<_, Rejected>(1) }).await.unwrap();
    for i in 0..100u32 {
        cache.put("b", i); // re-storing one key never grows the order queue past the bound
    }
    assert!(cache.order_len() <= 4);
    cache.put("c", 3); // evicts "a", the least recently stored
    assert!(cache.get("a", refused()).await.is_err());
    assert_eq!(cache.get("b", refused()).await.unwrap().value, 99);
    let m = cache.metrics();
    assert_eq!((m.fresh, m.stale, m.misses, m.evicted), (1, 1, 2, 1));
}
