#![cfg(loom)]
//! loom models of the fleet leases, tiny on purpose (two threads, a few steps): takes
//! racing each other and a grant on a token lease, and acquires racing on a slot lease.
//!
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p surgeguard-core --release --test loom_fleet

use loom::sync::Arc;
use loom::thread;
use surgeguard_core::fleet::{Fallback, SlotLease, SlotLeaseConfig, TokenLease, TokenLeaseConfig};
use surgeguard_core::time::{MS, SEC};

fn lease() -> TokenLease {
    let cfg = TokenLeaseConfig {
        rate_per_sec: 10.0,
        burst: 4,
        max_batch: 2,
        batch_period_ns: 100 * MS,
        fallback: Fallback::Pessimistic,
    };
    TokenLease::new(cfg).unwrap()
}

/// One token leased, two takers and a grant of one more racing them: no token is spent
/// twice, and every token granted is spent, held or dropped exactly once.
#[test]
fn takes_racing_a_grant_spend_each_token_once() {
    loom::model(|| {
        let l = Arc::new(lease());
        l.grant(MS, 1, SEC, 1);
        let a = {
            let l = l.clone();
            thread::spawn(move || l.try_take(2 * MS, 1).is_ok())
        };
        let b = {
            let l = l.clone();
            thread::spawn(move || l.try_take(2 * MS, 1).is_ok())
        };
        l.grant(2 * MS, 1, SEC, 1);
        let ok = usize::from(a.join().unwrap()) + usize::from(b.join().unwrap());
        let m = l.metrics(2 * MS);
        assert!(ok >= 1, "at least the token held before the race");
        assert_eq!(m.leased, ok as u64);
        assert_eq!(m.leased + m.held + m.dropped, m.granted);
        assert!(m.held <= 2);
    });
}

/// One leased slot, two callers: exactly one gets it; after its release the count is 0.
#[test]
fn one_slot_two_callers() {
    loom::model(|| {
        let cfg =
            SlotLeaseConfig { cap: 4, longest_request_ns: MS, fallback: Fallback::Pessimistic };
        let l = Arc::new(SlotLease::new(cfg).unwrap());
        l.grant(0, 1, SEC, 1);
        let spawn = |l: Arc<SlotLease>| {
            thread::spawn(move || match l.try_acquire(MS) {
                Ok(p) => {
                    l.release(p).unwrap();
                    1
                }
                Err(_) => 0,
            })
        };
        let a = spawn(l.clone());
        let b = spawn(l.clone());
        let got = a.join().unwrap() + b.join().unwrap();
        assert!((1..=2).contains(&got), "{got}");
        assert_eq!(l.inflight(), 0);
        assert_eq!(l.metrics(MS).leased, got);
    });
}
