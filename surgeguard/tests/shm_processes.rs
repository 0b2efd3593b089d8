//! Shared-memory objects across real processes: fork, `kill -9`, create-or-attach races,
//! refused attaches, and the same decisions as the in-process core.
//!
//! Its own `main` (no test harness threads), so `fork` happens in a single-threaded process.
//! Run: `cargo test -p surgeguard --features shm --test shm_processes`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use surgeguard::clock::monotonic_ns;
use surgeguard::core::Limiter;
use surgeguard::core::keyed::{KeyedConfig, hash_key};
use surgeguard::core::layout::Placeable;
use surgeguard::core::limit::{AimdConfig, AlgorithmConfig, FixedConfig};
use surgeguard::core::rate::RateLimiterConfig;
use surgeguard::core::retry::RetryBudgetConfig;
use surgeguard::shm::{
    SharedKeyedLimits, SharedLimiter, SharedRateLimiter, SharedRetryBudget, ShmError,
};
use surgeguard::{LimiterConfig, Outcome, Priority, Reason};

fn fixed(limit: f64) -> LimiterConfig {
    LimiterConfig {
        levels: 1,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: limit,
            ..FixedConfig::default()
        }))
    }
}

/// A page of anonymous shared memory holding a few counters (the "dependency" side).
#[derive(Clone, Copy)]
struct Counters(*mut AtomicU32);

// SAFETY: the page is only reached as `&AtomicU32`, which is `Sync`; it is never unmapped.
unsafe impl Sync for Counters {}
// SAFETY: as above.
unsafe impl Send for Counters {}

impl Counters {
    fn new() -> Self {
        // SAFETY: a fresh anonymous shared mapping of one page; zeroed AtomicU32s are valid.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Self(p.cast())
    }
    fn at(&self, i: usize) -> &AtomicU32 {
        assert!(i < 1024);
        // SAFETY: within the page, aligned, and only ever accessed atomically.
        unsafe { &*self.0.add(i) }
    }
}

/// Forks; the child runs `f` and exits with its return code (never returns).
fn fork(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: this process is single-threaded when it forks (no harness threads); the
    // child runs `f` and `_exit`s without unwinding into the parent's state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: prctl with plain integer arguments: the child is killed if this test
        // process dies (a failed assertion must not leave children holding the pipes).
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -libc::WTERMSIG(status) }
}

fn kill9(pid: libc::pid_t) {
    // SAFETY: our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let until = monotonic_ns() + 20_000_000_000;
    while !f() {
        assert!(monotonic_ns() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn unique(name: &str) -> String {
    format!("test-{name}-{}-{}", std::process::id(), monotonic_ns())
}

/// A child `kill -9`'d while holding permits: its slots come back (here before it is even
/// reaped: a zombie counts as dead), on the first refusal, exactly once.
fn kill9_holding_permits_gives_them_back() {
    let shared = SharedLimiter::anonymous(fixed(5.0)).unwrap();
    let flags = Counters::new();
    // The parent holds one from before the fork: the child must count its own permits in
    // its own slot, or reclaiming the child would take the parent's too.
    let before_fork = shared.try_acquire(monotonic_ns(), Priority::NORMAL).unwrap();
    let child = fork(|| {
        for _ in 0..3 {
            let p = shared.try_acquire_raw(monotonic_ns(), Priority::NORMAL).unwrap();
            std::mem::forget(p); // held until killed
        }
        flags.at(0).store(1, Ordering::Release);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    wait_until("the child's permits", || flags.at(0).load(Ordering::Acquire) == 1);
    assert_eq!(shared.limiter().inflight(), 4);
    assert_eq!(shared.attached_processes(), 2);
    kill9(child);
    // Not reaped yet: a zombie is dead too.
    wait_until("the child to die", || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).map_or(true, |s| s.contains(") Z "))
    });
    let now = monotonic_ns();
    let mut held = Vec::new();
    for i in 0..4 {
        // The 2nd acquire is refused by the core, sweeps, and is retried: admitted.
        let p = shared
            .try_acquire(now, Priority::NORMAL)
            .unwrap_or_else(|e| panic!("acquire {i}: {e}"));
        held.push(p);
    }
    assert_eq!(shared.limiter().inflight(), 5, "exactly the child's 3 came back");
    assert_eq!(shared.held_by_this_process(), 5);
    assert!(matches!(shared.try_acquire(now, Priority::NORMAL), Err(ShmError::Rejected(_))));
    assert_eq!(shared.reclaim(), 0, "nothing is reclaimed twice");
    assert_eq!(shared.limiter().metrics().ignored, 3, "released as Ignored, no sample");
    for p in held {
        p.release(now + 1_000, Outcome::Success).unwrap();
    }
    before_fork.release(now + 1_000, Outcome::Success).unwrap();
    assert_eq!(shared.limiter().inflight(), 0);
    assert_eq!(wait(child), -libc::SIGKILL);
    println!("ok kill9_holding_permits_gives_them_back");
}

/// N worker processes with threads in front of a dependency that counts its concurrency:
/// with one shared limit L it never sees more than L; with a limiter per process, up to
/// N·L.
fn the_dependency_sees_at_most_the_shared_limit() {
    const WORKERS: usize = 4;
    const LIMIT: u32 = 3;
    let run = |shared: Option<&SharedLimiter>| -> u32 {
        let dep = Counters::new(); // [0] = current, [1] = max seen
        let pids: Vec<_> = (0..WORKERS)
            .map(|_| {
                fork(|| {
                    let local = Limiter::new(fixed(LIMIT as f64)).unwrap();
                    std::thread::scope(|s| {
                        for _ in 0..LIMIT {
                            s.spawn(|| {
                                let until = monotonic_ns() + 300_000_000;
                                while monotonic_ns() < until {
                                    let now = monotonic_ns();
                                    let admitted = match shared {
                                        Some(sh) => {
                                            sh.try_acquire_raw(now, Priority::NORMAL).ok().map(Ok)
                                        }
                                        None => local
                                            .try_acquire_raw(now, Priority::NORMAL)
                                            .ok()
                                            .map(Err),
                                    };
                                    let Some(permit) = admitted else {
                                        std::thread::sleep(Duration::from_micros(200));
                                        continue;
                                    };
                                    let c = dep.at(0).fetch_add(1, Ordering::SeqCst) + 1;
                                    dep.at(1).fetch_max(c, Ordering::SeqCst);
                                    std::thread::sleep(Duration::from_millis(2));
                                    dep.at(0).fetch_sub(1, Ordering::SeqCst);
                                    match permit {
                                        Ok(p) => sh_release(shared.unwrap(), p),
                                        Err(p) => local
                                            .release_raw(p, monotonic_ns(), Outcome::Success)
                                            .unwrap(),
                                    }
                                }
                            });
                        }
                    });
                    0
                })
            })
            .collect();
        for pid in pids {
            assert_eq!(wait(pid), 0);
        }
        dep.at(1).load(Ordering::SeqCst)
    };
    fn sh_release(sh: &SharedLimiter, p: surgeguard::shm::SharedRawPermit) {
        sh.release_raw(p, monotonic_ns(), Outcome::Success).unwrap();
    }
    let shared = SharedLimiter::anonymous(fixed(LIMIT as f64)).unwrap();
    let with = run(Some(&shared));
    let without = run(None);
    println!(
        "  dependency concurrency: shared limit {LIMIT}: max {with}; per-process limits: max {without}"
    );
    assert!(with <= LIMIT, "shared: saw {with} > {LIMIT}");
    assert!(without > LIMIT, "per-process limits should exceed {LIMIT} (saw {without})");
    assert_eq!(shared.limiter().inflight(), 0);
    println!("ok the_dependency_sees_at_most_the_shared_limit");
}

/// Eight processes open one name at the same instant: exactly one creates it, all share
/// it; when all are killed, one reclaim gives every permit back.
fn create_or_attach_by_name_races_to_one_segment() {
    const N: usize = 8;
    let name = unique("race");
    let go = Counters::new(); // [0] start flag, [1] created count, [2] holding count
    let pids: Vec<_> = (0..N)
        .map(|_| {
            let name = name.clone();
            fork(move || {
                while go.at(0).load(Ordering::Acquire) == 0 {
                    std::hint::spin_loop();
                }
                let sh = match SharedLimiter::open(&name, fixed(100.0)) {
                    Ok(sh) => sh,
                    Err(e) => {
                        eprintln!("open: {e}");
                        return 2;
                    }
                };
                if sh.created() {
                    go.at(1).fetch_add(1, Ordering::SeqCst);
                }
                std::mem::forget(sh.try_acquire_raw(monotonic_ns(), Priority::NORMAL).unwrap());
                go.at(2).fetch_add(1, Ordering::SeqCst);
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        })
        .collect();
    go.at(0).store(1, Ordering::Release);
    wait_until("every child holding", || go.at(2).load(Ordering::SeqCst) == N as u32);
    assert_eq!(go.at(1).load(Ordering::SeqCst), 1, "exactly one creator");
    let me = SharedLimiter::open(&name, fixed(100.0)).unwrap();
    assert!(!me.created());
    assert_eq!(me.limiter().inflight(), N as u32, "one segment, shared by all");
    assert_eq!(me.attached_processes(), N as u32);
    for &pid in &pids {
        kill9(pid);
        assert_eq!(wait(pid), -libc::SIGKILL);
    }
    assert_eq!(me.reclaim(), N as u64);
    assert_eq!(me.reclaim(), 0);
    assert_eq!(me.limiter().inflight(), 0);
    assert_eq!(me.attached_processes(), 0, "not attached until its first acquire");
    SharedLimiter::unlink(&name).unwrap();
    println!("ok create_or_attach_by_name_races_to_one_segment");
}

/// Another config, another kind of object, or a file that is not a segment: refused.
fn mismatched_attaches_are_refused() {
    let name = unique("mismatch");
    let a = SharedLimiter::open(&name, fixed(10.0)).unwrap();
    assert!(a.created());
    assert_eq!(SharedLimiter::open(&name, fixed(11.0)).unwrap_err(), ShmError::ConfigMismatch);
    let rate = RateLimiterConfig { per_second: 10.0, burst: 5 };
    assert_eq!(SharedRateLimiter::open(&name, rate).unwrap_err(), ShmError::KindMismatch);
    let b = SharedLimiter::open(&name, fixed(10.0)).unwrap();
    assert!(!b.created());
    let junk = std::env::temp_dir().join(unique("junk"));
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let err = SharedLimiter::open(junk.to_str().unwrap(), fixed(10.0)).unwrap_err();
    assert_eq!(err, ShmError::NotASegment);
    std::fs::remove_file(&junk).unwrap();
    assert_eq!(SharedLimiter::open("no spaces", fixed(1.0)).unwrap_err(), ShmError::BadName);
    assert!(matches!(SharedLimiter::open(&name, fixed(f64::NAN)), Err(ShmError::Config(_))));
    // A permit of another segment is refused (and changes nothing).
    let other = SharedLimiter::anonymous(fixed(10.0)).unwrap();
    let p = other.try_acquire_raw(monotonic_ns(), Priority::NORMAL).unwrap();
    assert_eq!(
        a.release_raw(p, monotonic_ns(), Outcome::Success),
        Err(ShmError::Usage(surgeguard::UsageError::ForeignHandle))
    );
    assert_eq!(other.limiter().inflight(), 1);
    SharedLimiter::unlink(&name).unwrap();
    println!("ok mismatched_attaches_are_refused");
}

/// One rate and one retry budget across processes, not one per process.
fn rate_and_budget_are_one_across_processes() {
    let rate =
        SharedRateLimiter::anonymous(RateLimiterConfig { per_second: 0.001, burst: 10 }).unwrap();
    let budget = SharedRetryBudget::anonymous(RetryBudgetConfig {
        min_retries_per_sec: 0,
        percent_can_retry: 0.5,
        ..RetryBudgetConfig::default()
    })
    .unwrap();
    let counts = Counters::new();
    let now = monotonic_ns();
    for _ in 0..4 {
        budget.deposit(now);
    }
    let pids: Vec<_> = (0..4)
        .map(|_| {
            fork(|| {
                for _ in 0..10 {
                    if rate.check(now, 1).is_ok() {
                        counts.at(0).fetch_add(1, Ordering::SeqCst);
                    }
                    if budget.try_withdraw(now).is_ok() {
                        counts.at(1).fetch_add(1, Ordering::SeqCst);
                    }
                }
                0
            })
        })
        .collect();
    for pid in pids {
        assert_eq!(wait(pid), 0);
    }
    assert_eq!(counts.at(0).load(Ordering::SeqCst), 10, "one burst of 10 across 4 processes");
    assert_eq!(counts.at(1).load(Ordering::SeqCst), 2, "4 deposits × 50% = 2 retries in all");
    println!("ok rate_and_budget_are_one_across_processes");
}

fn fold_holder<T: Placeable>(object: &T) -> u64 {
    let mut holder = 0;
    object.fold_cells(&mut |c| holder |= c.holder());
    holder
}

/// A worker `kill -9`'d in the middle of a fold (parked inside it by the test hook): while
/// it lives its cell is left alone; once it is dead the next operation (after the
/// per-process check interval) frees the cell, so the budget folds and allows retries
/// again, and a shared limiter's `reclaim` frees its window fold.
fn kill9_inside_a_fold_frees_the_cell() {
    let name = unique("fold");
    let cfg = RetryBudgetConfig {
        min_retries_per_sec: 0,
        percent_can_retry: 0.5,
        ..RetryBudgetConfig::default()
    };
    let budget = SharedRetryBudget::open(&name, cfg).unwrap();
    let limiter = SharedLimiter::anonymous(fixed(3.0)).unwrap();
    let flags = Counters::new();
    let (n2, cfg2, lim) = (name.clone(), cfg, &limiter);
    let child = fork(move || {
        let mine = SharedRetryBudget::open(&n2, cfg2).unwrap();
        let mut parked = 0;
        mine.get().fold_cells(&mut |c| parked += c.park() as u32);
        lim.limiter().fold_cells(&mut |c| parked += c.park() as u32);
        flags.at(0).store(parked, Ordering::Release);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    wait_until("the child to park", || flags.at(0).load(Ordering::Acquire) != 0);
    assert_eq!(flags.at(0).load(Ordering::Acquire), 2, "both cells taken by the child");
    let held = fold_holder(budget.get());
    assert_ne!(held, 0);
    assert_eq!(fold_holder(limiter.limiter()), held, "one token per process");
    let t0 = monotonic_ns() + 2_000_000_000;
    for i in 0..10 {
        budget.deposit(t0 + i);
    }
    std::thread::sleep(Duration::from_millis(15));
    assert!(budget.try_withdraw(t0 + 20).is_err(), "ring held: no fold, no retry");
    assert_eq!(budget.reclaim(), 0, "a live holder is never freed");
    assert_eq!(limiter.reclaim(), 0);
    assert_eq!(fold_holder(budget.get()), held);
    kill9(child);
    wait_until("the child to die", || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).map_or(true, |s| s.contains(") Z "))
    });
    std::thread::sleep(Duration::from_millis(15));
    // The next operation meets the dead holder's cell and frees it.
    let t1 = t0 + 2_000_000_000;
    for i in 0..10 {
        budget.deposit(t1 + i);
    }
    assert_eq!(fold_holder(budget.get()), 0, "freed by an operation");
    assert!(budget.try_withdraw(t1 + 20).is_ok(), "folds and allows retries again");
    assert_eq!(fold_holder(limiter.limiter()), held, "the limiter's cell: still taken");
    limiter.reclaim();
    assert_eq!(fold_holder(limiter.limiter()), 0, "freed by reclaim");
    assert_eq!(budget.reclaim(), 0, "nothing freed twice");
    assert_eq!(wait(child), -libc::SIGKILL);
    SharedRetryBudget::unlink(&name).unwrap();
    println!("ok kill9_inside_a_fold_frees_the_cell");
}

/// Key permits of a worker `kill -9`'d while holding them come back exactly once: a
/// refused key sweeps and is admitted; the top-keys flag it held is freed too.
fn kill9_holding_key_permits_gives_them_back() {
    let config = KeyedConfig { shards_per_key: 1, ..KeyedConfig::new(2) };
    let name = unique("keyed");
    let keyed = SharedKeyedLimits::<8, 4>::open(&name, config).unwrap();
    let flags = Counters::new();
    let (x, y) = (hash_key(1, b"tenant-x"), hash_key(1, b"tenant-y"));
    let mine = keyed.try_acquire(y, monotonic_ns(), 1).unwrap();
    let n2 = name.clone();
    let child = fork(move || {
        let k = SharedKeyedLimits::<8, 4>::open(&n2, config).unwrap();
        for key in [x, x, y] {
            let _held = k.try_acquire(key, monotonic_ns(), 1).unwrap(); // held until killed
        }
        let mut parked = 0;
        k.limits().fold_cells(&mut |c| parked += c.park() as u32);
        flags.at(0).store(1 + parked, Ordering::Release);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    wait_until("the child's key permits", || flags.at(0).load(Ordering::Acquire) != 0);
    assert_eq!(flags.at(0).load(Ordering::Acquire), 2, "the top-keys flag parked");
    assert_eq!(keyed.limits().metrics().in_flight, 4);
    assert_eq!(keyed.attached_processes(), 2);
    let refused = keyed.try_acquire(x, monotonic_ns(), 1).unwrap_err();
    assert!(matches!(refused, ShmError::Rejected(r) if r.reason == Reason::KeyLimit));
    assert_eq!(keyed.reclaim(), 0, "a live worker is never reclaimed");
    kill9(child);
    wait_until("the child to die", || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).map_or(true, |s| s.contains(") Z "))
    });
    std::thread::sleep(Duration::from_millis(110)); // past the sweep interval
    let again = keyed.try_acquire(x, monotonic_ns(), 1).expect("the refusal sweeps: admitted");
    let m = keyed.limits().metrics();
    assert_eq!(m.in_flight, 2, "the child's 3 came back, exactly");
    assert_eq!(keyed.reclaim(), 0, "nothing twice");
    assert_eq!(keyed.attached_processes(), 1);
    let mut top = 0;
    keyed.limits().fold_cells(&mut |c| top |= c.holder());
    assert_eq!(top, 0, "the top-keys flag is free again");
    assert!(keyed.limits().record_rejection(x));
    keyed.release(again).unwrap();
    keyed.release(mine).unwrap();
    assert_eq!(keyed.limits().metrics().in_flight, 0);
    assert_eq!(wait(child), -libc::SIGKILL);
    SharedKeyedLimits::<8, 4>::unlink(&name).unwrap();
    println!("ok kill9_holding_key_permits_gives_them_back");
}

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8),
    Release(u8, bool),
    Advance(u16),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 3 {
            0 => Op::Acquire(u8::arbitrary(g) % 3),
            1 => Op::Release(u8::arbitrary(g), bool::arbitrary(g)),
            _ => Op::Advance(u16::arbitrary(g)),
        }
    }
}

/// The shared limiter is the core's own: the same operations give the same decisions and
/// the same metrics as an in-process limiter.
fn same_decisions_as_in_process(ops: Vec<Op>) -> bool {
    let cfg = LimiterConfig::with_algorithm(AlgorithmConfig::Aimd(AimdConfig {
        initial_limit: 4.0,
        ..AimdConfig::default()
    }));
    let local = Limiter::new(cfg).unwrap();
    let shared = SharedLimiter::anonymous(cfg).unwrap();
    let (mut now, mut a, mut b) = (1_000_000_000u64, Vec::new(), Vec::new());
    for op in ops {
        match op {
            Op::Acquire(l) => {
                let level = Priority::new(l).unwrap();
                let x = local.try_acquire_raw(now, level);
                let y = shared.try_acquire_raw(now, level);
                match (x, y) {
                    (Ok(p), Ok(q)) => {
                        a.push(p);
                        b.push(q);
                    }
                    (Err(r), Err(ShmError::Rejected(s))) if r == s => {}
                    _ => return false,
                }
            }
            Op::Release(i, ok) if !a.is_empty() => {
                let i = i as usize % a.len();
                let outcome = if ok { Outcome::Success } else { Outcome::Dropped };
                local.release_raw(a.swap_remove(i), now, outcome).unwrap();
                shared.release_raw(b.swap_remove(i), now, outcome).unwrap();
            }
            Op::Release(..) => {}
            Op::Advance(d) => now += d as u64 * 100_000,
        }
    }
    let same = local.metrics() == shared.limiter().metrics();
    for (p, q) in a.into_iter().zip(b) {
        local.release_raw(p, now, Outcome::Ignored).unwrap();
        shared.release_raw(q, now, Outcome::Ignored).unwrap();
    }
    same
}

fn main() {
    kill9_holding_permits_gives_them_back();
    create_or_attach_by_name_races_to_one_segment();
    mismatched_attaches_are_refused();
    rate_and_budget_are_one_across_processes();
    kill9_inside_a_fold_frees_the_cell();
    kill9_holding_key_permits_gives_them_back();
    the_dependency_sees_at_most_the_shared_limit();
    QuickCheck::new().tests(300).quickcheck(same_decisions_as_in_process as fn(Vec<Op>) -> bool);
    println!("ok same_decisions_as_in_process");
}
