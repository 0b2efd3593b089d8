//! loom models of the Limiter: exact admission, no lost permit, no lost or doubled
//! sample across a window fold (through the packed count-and-sum words too, including a
//! word moved out while a window is collected), and the kill switch winning a race with a
//! fold.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use surgeguard_core::limit::{AimdConfig, AlgorithmConfig, FixedConfig};
use surgeguard_core::stats::{AtomicLatencyHistogram, LatencyCursor, BUCKETS};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};

const MS: u64 = 1_000_000;

fn limiter(limit: f64, levels: u8, min_samples: u32) -> Limiter {
    let cfg = LimiterConfig {
        levels,
        min_samples,
        min_window_ns: 0,
        max_window_ns: MS,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: limit,
            min_limit: 1.0,
            max_limit: limit,
        }))
    };
    Limiter::new(cfg).unwrap()
}

#[test]
fn admissions_never_exceed_the_limit() {
    loom::model(|| {
        let l = Arc::new(limiter(1.0, 1, 1));
        let holding = Arc::new(AtomicUsize::new(0));
        let admitted = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let (l, holding, admitted) = (l.clone(), holding.clone(), admitted.clone());
                thread::spawn(move || {
                    if let Ok(p) = l.try_acquire(i * MS, Priority::NORMAL) {
                        admitted.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(
                            holding.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two admitted at limit 1"
                        );
                        holding.fetch_sub(1, Ordering::SeqCst);
                        p.release(i * MS + MS, Outcome::Success);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(admitted.load(Ordering::SeqCst) >= 1, "someone is always admitted");
        assert_eq!(l.inflight(), 0, "no permit lost");
        let m = l.metrics();
        assert_eq!(m.admitted, admitted.load(Ordering::SeqCst) as u64);
    });
}

#[test]
fn priority_levels_keep_the_exact_total() {
    loom::model(|| {
        let l = Arc::new(limiter(1.0, 2, 1));
        let holding = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = [Priority::CRITICAL, Priority::NORMAL]
            .into_iter()
            .map(|lvl| {
                let (l, holding) = (l.clone(), holding.clone());
                thread::spawn(move || {
                    if let Ok(p) = l.try_acquire(MS, lvl) {
                        assert_eq!(holding.fetch_add(1, Ordering::SeqCst), 0, "over the limit");
                        holding.fetch_sub(1, Ordering::SeqCst);
                        p.release(2 * MS, Outcome::Ignored);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(l.inflight(), 0);
        assert_eq!(l.inflight_of(Priority::CRITICAL) + l.inflight_of(Priority::NORMAL), 0);
    });
}

/// Two threads each take a permit at 0 and release it at `release_at(i)`, then a last
/// completion far later folds whatever is left: every sample is folded exactly once.
fn two_samples_then_a_fold(release_at: fn(u64) -> u64) {
    loom::model(move || {
        let l = Arc::new(limiter(4.0, 1, 1));
        let handles: Vec<_> = (0..2u64)
            .map(|i| {
                let l = l.clone();
                thread::spawn(move || {
                    let p = l.try_acquire(0, Priority::NORMAL).unwrap();
                    p.release(release_at(i), Outcome::Success);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let p = l.try_acquire(10 * MS, Priority::NORMAL).unwrap();
        p.release(20 * MS, Outcome::Success);
        let m = l.metrics();
        assert_eq!(m.successes, 3);
        assert_eq!(m.folded_samples, 3, "every sample folded exactly once");
    });
}

#[test]
fn no_sample_is_lost_or_doubled_across_a_fold() {
    // min_samples 1 and a 1 ms window: both releases may fold, concurrently.
    two_samples_then_a_fold(|i| 5 * MS + i);
}

#[test]
fn packed_samples_are_not_lost_or_doubled_across_a_fold() {
    // Latencies 4 and 5 ns share one packed bucket; under loom its count field is 2 bits,
    // so the second sample moves the word out (the spill hand-off) while the other thread
    // may be folding.
    two_samples_then_a_fold(|i| 4 + i);
}

#[test]
fn latency_histogram_collects_each_sample_once_while_words_move_out() {
    loom::model(|| {
        // Two recorders, two samples each, all in one packed bucket (so words fill and
        // move out to the spill), against a collector that collects and commits once
        // while they run. Every sample and its exact value must be collected once.
        let h = Arc::new(AtomicLatencyHistogram::new());
        let handles: Vec<_> = [[4u64, 5], [5, 4]]
            .into_iter()
            .map(|vals| {
                let h = h.clone();
                thread::spawn(move || {
                    for v in vals {
                        h.record(v);
                    }
                })
            })
            .collect();
        let mut cursor = LatencyCursor::new();
        let mut counts = [0u64; BUCKETS];
        let (n1, s1) = h.collect(&mut cursor, &mut counts);
        assert!(n1 <= 4);
        cursor.commit();
        for t in handles {
            t.join().unwrap();
        }
        let (n2, s2) = h.collect(&mut cursor, &mut counts);
        assert_eq!(n1 + n2, 4, "each sample collected exactly once");
        assert_eq!(s1 + s2, 18, "each value summed exactly once");
        assert_eq!(h.total(), 4);
        assert_eq!(counts.iter().sum::<u64>(), n2);
    });
}

#[test]
fn kill_switch_wins_against_a_concurrent_fold() {
    loom::model(|| {
        let cfg = LimiterConfig {
            levels: 1,
            min_samples: 1,
            min_window_ns: 0,
            max_window_ns: MS,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Aimd(AimdConfig::default()))
        };
        let l = Arc::new(Limiter::new(cfg).unwrap());
        let folder = {
            let l = l.clone();
            thread::spawn(move || {
                let p = l.try_acquire(0, Priority::NORMAL).unwrap();
                p.release(5 * MS, Outcome::Dropped);
            })
        };
        l.set_static_limit(Some(3.0)).unwrap();
        folder.join().unwrap();
        assert_eq!(l.limit(), 3.0, "a pin is never overwritten by a racing fold");
    });
}

fn fractional(limit: f64) -> Limiter {
    let cfg = LimiterConfig {
        levels: 1,
        min_samples: 1_000,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: limit,
            min_limit: limit,
            max_limit: 1.0,
        }))
    };
    Limiter::new(cfg).unwrap()
}

#[test]
fn fractional_limit_never_admits_inside_an_idle_period() {
    // Limit 0.5: a completion of latency 10 ms starts 10 ms of idle time. The holder
    // releases at 10 ms (idle until 20 ms) while another thread tries at 15 ms: the slot is
    // either still held or inside the idle period, so it must be refused either way.
    loom::model(|| {
        let l = Arc::new(fractional(0.5));
        let p = l.try_acquire_raw(0, Priority::NORMAL).unwrap();
        let holder = {
            let l = l.clone();
            thread::spawn(move || l.release_raw(p, 10 * MS, Outcome::Success).unwrap())
        };
        let tried = l.try_acquire(15 * MS, Priority::NORMAL);
        assert!(tried.is_err(), "admitted at 15 ms, inside the idle period 10..20 ms");
        holder.join().unwrap();
        assert_eq!(l.inflight(), 0);
        assert!(l.try_acquire(20 * MS, Priority::NORMAL).is_ok(), "free after the idle time");
    });
}

#[test]
fn fractional_limit_stale_deadline_is_caught_by_the_cas() {
    // The slot is free and idle until 20 ms. A second admission and release (at 25 and
    // 26 ms: idle until 27 ms) race an acquirer at 26.5 ms that may have read the old
    // deadline: it must never be admitted inside 26..27 ms.
    loom::model(|| {
        let l = Arc::new(fractional(0.5));
        let p = l.try_acquire_raw(0, Priority::NORMAL).unwrap();
        l.release_raw(p, 10 * MS, Outcome::Success).unwrap();
        let other = {
            let l = l.clone();
            thread::spawn(move || {
                if let Ok(p) = l.try_acquire_raw(25 * MS, Priority::NORMAL) {
                    l.release_raw(p, 26 * MS, Outcome::Success).unwrap();
                    true
                } else {
                    false
                }
            })
        };
        let mine = l.try_acquire_raw(26 * MS + MS / 2, Priority::NORMAL);
        let other_ran = other.join().unwrap();
        if let Ok(p) = mine {
            // Admitted at 26.5 ms: only legal if the other admission had not happened yet
            // (then the other was refused: the slot was taken, or it came after ours).
            assert!(!other_ran, "admitted inside the idle period 26..27 ms");
            l.release_raw(p, 27 * MS, Outcome::Ignored).unwrap();
        }
        assert_eq!(l.inflight(), 0);
    });
}
