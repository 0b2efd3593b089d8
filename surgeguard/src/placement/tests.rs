use super::*;
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{Reason, UsageError};

fn fixed(limit: f64) -> LimiterConfig {
    let mut c = LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: limit,
        min_limit: 1.0,
        max_limit: limit,
    }));
    c.levels = 1;
    c
}

/// Every placement this build has: local, and (with `shm`) anonymous shared memory.
fn placements() -> Vec<Placement<'static>> {
    #[allow(unused_mut)]
    let mut v = vec![Placement::Local];
    #[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
    v.push(Placement::Anonymous);
    v
}

#[test]
fn a_limiter_admits_to_its_limit_and_takes_its_permits_back_in_every_placement() {
    for place in placements() {
        let l = Placed::<Limiter>::open(place, fixed(2.0)).unwrap();
        let a = l.try_acquire_raw(10, Priority::NORMAL).unwrap();
        let b = l.try_acquire_raw(11, Priority::NORMAL).unwrap();
        assert_eq!(a.started_at(), 10, "{place:?}");
        assert_eq!(l.held_by_this_process(), 2, "{place:?}");
        let Err(PlaceError::Rejected(r)) = l.try_acquire_raw(12, Priority::NORMAL) else {
            panic!("{place:?}: admitted over the limit")
        };
        assert_eq!(r.reason, Reason::LimitReached);
        l.release_raw(a, 20, Outcome::Success).unwrap();
        l.release_raw(b, 21, Outcome::Ignored).unwrap();
        assert_eq!(l.limiter().inflight(), 0, "{place:?}");
        assert_eq!(l.reclaim(), 0, "{place:?}: nothing to give back");
        assert!(l.created());
        assert_eq!(l.is_shared(), place != Placement::Local);
    }
}

#[test]
fn a_permit_of_another_limiter_or_placement_is_foreign_and_changes_nothing() {
    let placed: Vec<_> =
        placements().into_iter().map(|p| Placed::<Limiter>::open(p, fixed(4.0)).unwrap()).collect();
    let other = Placed::<Limiter>::open(Placement::Local, fixed(4.0)).unwrap();
    for l in &placed {
        let mine = l.try_acquire_raw(1, Priority::NORMAL).unwrap();
        let theirs = other.try_acquire_raw(1, Priority::NORMAL).unwrap();
        let before = other.limiter().inflight();
        assert_eq!(
            l.release_raw(theirs, 2, Outcome::Success),
            Err(PlaceError::Usage(UsageError::ForeignHandle))
        );
        assert_eq!(l.limiter().inflight(), 1);
        assert_eq!(
            other.limiter().inflight(),
            before,
            "a foreign permit is consumed, not released"
        );
        l.release_raw(mine, 3, Outcome::Success).unwrap();
    }
    // Across placements: the permit of a shared limiter given to a local one.
    if let [local, shared] = &placed[..] {
        let p = shared.try_acquire_raw(5, Priority::NORMAL).unwrap();
        assert_eq!(
            local.release_raw(p, 6, Outcome::Success),
            Err(PlaceError::Usage(UsageError::ForeignHandle))
        );
        assert_eq!(local.limiter().inflight(), 0);
    }
}

#[test]
fn rate_limiter_and_budget_decide_alike_in_every_placement() {
    let mut answers = Vec::new();
    for place in placements() {
        let rate =
            Placed::<RateLimiter>::open(place, RateLimiterConfig { per_second: 10.0, burst: 2 })
                .unwrap();
        let budget = Placed::<RetryBudget>::open(place, RetryBudgetConfig::default()).unwrap();
        let mut got = Vec::new();
        for t in 0..20u64 {
            let now = t * 30_000_000;
            got.push(rate.check(now, 1).is_ok());
            budget.deposit(now);
            got.push(budget.try_withdraw(now).is_ok());
        }
        answers.push(got);
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "the placements decided differently");
    assert!(answers[0].contains(&false) && answers[0].contains(&true));
}

#[test]
fn keyed_limits_cap_a_key_in_every_placement() {
    for place in placements() {
        let t = Placed::<KeyedLimits<16>>::open(place, KeyedConfig::new(1)).unwrap();
        let key = surgeguard_core::keyed::hash_key(7, b"tenant");
        let a = t.try_acquire_key(key, 1, 1).unwrap();
        let mut held = vec![a];
        // A key maps to `shards_per_key` (2) shards of limit 1: the third is refused.
        held.push(t.try_acquire_key(key, 1, 1).unwrap());
        let Err(PlaceError::Rejected(r)) = t.try_acquire_key(key, 1, 1) else {
            panic!("{place:?}: over the key's cap")
        };
        assert_eq!(r.reason, Reason::KeyLimit);
        assert_eq!(held[0].key_hash(), key);
        for p in held {
            t.release_key(p).unwrap();
        }
        assert_eq!(t.limits().metrics().in_flight, 0);
        assert_eq!(t.shared_key_seed().is_some(), place != Placement::Local);
    }
}

#[test]
fn a_bad_config_is_refused_in_every_placement() {
    for place in placements() {
        assert!(matches!(
            Placed::<Limiter>::open(place, fixed(f64::NAN)),
            Err(PlaceError::Config(_))
        ));
        assert!(matches!(
            Placed::<RateLimiter>::open(place, RateLimiterConfig { per_second: -1.0, burst: 1 }),
            Err(PlaceError::Config(_))
        ));
    }
}
