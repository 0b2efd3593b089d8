//! One concurrency limit across worker processes: what a shared-memory limiter costs beside
//! the in-process one and beside what users run today.
//!
//! Workload simulated: a worker admitting a call to a dependency under a limit shared by
//! all workers on the host: each op is one admission and one release (`Success`, 500 ns
//! latency), `now` a counter advancing 1 µs per op. One thread, uncontended (the cost a
//! worker pays per request when the limit is not the bottleneck).
//!
//! Rows, in one run:
//! - `in_process`: the core `Limiter` in the process's own memory (the floor: no sharing);
//! - `shared_anonymous`: the same limiter in an anonymous `MAP_SHARED` segment
//!   (`surgeguard::shm::SharedLimiter`), plus the process's held-permit count;
//! - `shared_dev_shm`: the same, file-backed under `/dev/shm` (attached by name);
//! - `fcntl_lock`: a counter in a shared file guarded by an `fcntl` write lock
//!   (`F_SETLKW`), lock/check-increment/unlock then lock/decrement/unlock: the file-lock
//!   semaphore many pre-fork servers use;
//! - `redis_incr_decr`: one `INCR` (and a `DECR` on refusal) to admit and one `DECR` to
//!   release against a local `redis-server` (RESP over TCP, no client library): the
//!   Redis semaphore of the rate-limiting libraries. Only when `redis-server` is on `PATH`
//!   (the bench starts its own on port 6399 with persistence off).
//!
//! Report the ratios (`shared / in_process`, `fcntl / shared`, `redis / shared`) from one
//! run.
//!
//! Group `shm_gate`: the Gate (limiter + queue) shared by processes.
//! - `in_process_admit_release` / `shared_admit_release`: one uncontended arrival
//!   (admitted) and its release, on the core `Gate<64>` and on `SharedGate<64>` (the
//!   segment's lock around the arrival, a dispatch after the release);
//! - `wake_round_trip`: two processes and a limit of 1, each iteration one hand-off there
//!   and back: this process queues behind a forked child's waiter and releases the permit
//!   (the child, asleep in `FUTEX_WAIT`, is granted and woken), the child releases it back
//!   (this process is woken). Half of it is one cross-process wake (release in A → grant
//!   seen in B), including the syscalls and the scheduler.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use surgeguard::clock::monotonic_ns;
use surgeguard::shm::{SharedArrival, SharedGate, SharedLimiter, SharedOutcome};
use surgeguard_core::gate::{Arrival, Gate, GateConfig, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};

const LIMIT: f64 = 1000.0;

fn config() -> LimiterConfig {
    LimiterConfig {
        levels: 1,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: LIMIT,
            min_limit: 1.0,
            max_limit: LIMIT,
        }))
    }
}

/// A semaphore of `LIMIT` over a file: the count in its first 8 bytes, an `fcntl` write
/// lock around every read-modify-write.
struct FileSemaphore {
    file: std::fs::File,
}

impl FileSemaphore {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("sg-bench-fcntl-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        file.set_len(8).unwrap();
        Self { file }
    }

    fn lock(&self, kind: libc::c_short) {
        // SAFETY: a zeroed flock is valid; F_SETLKW on our own fd.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_len = 8;
        // SAFETY: as above.
        let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_SETLKW, &fl) };
        assert_eq!(rc, 0);
    }

    fn update(&self, f: impl FnOnce(u64) -> Option<u64>) -> bool {
        use std::os::unix::fs::FileExt;
        self.lock(libc::F_WRLCK as libc::c_short);
        let mut buf = [0u8; 8];
        self.file.read_exact_at(&mut buf, 0).unwrap();
        let next = f(u64::from_le_bytes(buf));
        if let Some(n) = next {
            self.file.write_all_at(&n.to_le_bytes(), 0).unwrap();
        }
        self.lock(libc::F_UNLCK as libc::c_short);
        next.is_some()
    }

    fn cycle(&self) {
        if self.update(|n| ((n as f64) < LIMIT).then_some(n + 1)) {
            self.update(|n| Some(n.saturating_sub(1)));
        }
    }
}

/// A local `redis-server` of our own, and one connection to it.
struct Redis {
    server: Child,
    conn: BufReader<TcpStream>,
    line: String,
}

impl Redis {
    fn start() -> Option<Self> {
        let server = Command::new("redis-server")
            .args(["--port", "6399", "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        for _ in 0..200 {
            if let Ok(s) = TcpStream::connect("127.0.0.1:6399") {
                s.set_nodelay(true).ok()?;
                return Some(Self { server, conn: BufReader::new(s), line: String::new() });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn command(&mut self, cmd: &[u8]) -> i64 {
        self.conn.get_mut().write_all(cmd).unwrap();
        self.line.clear();
        self.conn.read_line(&mut self.line).unwrap();
        self.line.trim_start_matches(':').trim_end().parse().unwrap()
    }

    fn cycle(&mut self) {
        const INCR: &[u8] = b"*2\r\n$4\r\nINCR\r\n$5\r\nsgsem\r\n";
        const DECR: &[u8] = b"*2\r\n$4\r\nDECR\r\n$5\r\nsgsem\r\n";
        let n = self.command(INCR);
        // Admitted if within the limit; the release (or the refusal's undo) is one DECR.
        black_box(n as f64 <= LIMIT);
        self.command(DECR);
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("shm");

    let local = Limiter::new(config()).unwrap();
    let mut now = 1_000_000_000u64;
    g.bench_function("in_process", |b| {
        b.iter(|| {
            now += 1_000;
            if let Ok(p) = local.try_acquire(now, Priority::NORMAL) {
                p.release(now + 500, Outcome::Success);
            }
        })
    });

    let anon = SharedLimiter::anonymous(config()).unwrap();
    g.bench_function("shared_anonymous", |b| {
        b.iter(|| {
            now += 1_000;
            if let Ok(p) = anon.try_acquire(now, Priority::NORMAL) {
                let _ = p.release(now + 500, Outcome::Success);
            }
        })
    });

    let name = format!("bench-{}", std::process::id());
    let named = SharedLimiter::open(&name, config()).unwrap();
    g.bench_function("shared_dev_shm", |b| {
        b.iter(|| {
            now += 1_000;
            if let Ok(p) = named.try_acquire(now, Priority::NORMAL) {
                let _ = p.release(now + 500, Outcome::Success);
            }
        })
    });
    let _ = SharedLimiter::unlink(&name);

    let file = FileSemaphore::new();
    g.bench_function("fcntl_lock", |b| b.iter(|| file.cycle()));

    if let Some(mut redis) = Redis::start() {
        g.bench_function("redis_incr_decr", |b| b.iter(|| redis.cycle()));
    } else {
        eprintln!("shm bench: no redis-server on PATH, the redis row is skipped");
    }
    g.finish();
}

fn gate_config(limit: f64) -> GateConfig {
    GateConfig {
        limiter: LimiterConfig {
            levels: 1,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: 1.0,
                max_limit: limit.max(1.0),
            }))
        },
        codel: None,
        lifo: LifoTrigger::Never,
        ..GateConfig::default()
    }
}

fn bench_gate(c: &mut Criterion) {
    let mut g = c.benchmark_group("shm_gate");
    let mut now = 1_000_000_000u64;

    let local = Gate::<64>::new(gate_config(LIMIT)).unwrap();
    g.bench_function("in_process_admit_release", |b| {
        b.iter(|| {
            now += 1_000;
            if let Arrival::Admitted(p) = local.arrive(now, Priority::NORMAL, None) {
                let _ = local.release(p, now + 500, Outcome::Success);
            }
        })
    });

    let shared = SharedGate::<64>::anonymous(gate_config(LIMIT)).unwrap();
    g.bench_function("shared_admit_release", |b| {
        b.iter(|| {
            now += 1_000;
            if let Ok(SharedArrival::Admitted(p)) = shared.arrive(now, Priority::NORMAL, None) {
                let _ = shared.release(p, now + 500, Outcome::Success);
            }
        })
    });

    // Ping-pong across processes on a limit of 1.
    let gate = SharedGate::<64>::anonymous(gate_config(1.0)).unwrap();
    // SAFETY: one anonymous shared page for the child's "queued" counter.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED);
    // SAFETY: the page is zeroed, aligned and only used atomically; it is never unmapped.
    let queued = unsafe { &*page.cast::<std::sync::atomic::AtomicU64>() };
    let Ok(SharedArrival::Admitted(first)) = gate.arrive(monotonic_ns(), Priority::NORMAL, None)
    else {
        panic!("the first arrival is admitted")
    };
    let mut held = Some(first);
    // SAFETY: the child only runs the gate's operations and `_exit`s; it is killed below.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        loop {
            let Ok(SharedArrival::Queued(t)) = gate.arrive(monotonic_ns(), Priority::NORMAL, None)
            else {
                // SAFETY: ends the child.
                unsafe { libc::_exit(2) };
            };
            queued.fetch_add(1, std::sync::atomic::Ordering::Release);
            match gate.wait(&t, u64::MAX / 2) {
                Ok(Some(SharedOutcome::Granted(p))) => {
                    let _ = gate.release(p, monotonic_ns(), Outcome::Ignored);
                }
                // SAFETY: ends the child.
                _ => unsafe { libc::_exit(3) },
            }
        }
    }
    let mut rounds = 0u64;
    g.bench_function("wake_round_trip", |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                rounds += 1;
                while queued.load(std::sync::atomic::Ordering::Acquire) < rounds {
                    std::hint::spin_loop();
                }
                let Ok(SharedArrival::Queued(mine)) =
                    gate.arrive(monotonic_ns(), Priority::NORMAL, None)
                else {
                    panic!("queued behind the child")
                };
                let p = held.take().expect("held");
                gate.release(p, monotonic_ns(), Outcome::Ignored).unwrap();
                held = match gate.wait(&mine, 10_000_000_000) {
                    Ok(Some(SharedOutcome::Granted(p))) => Some(p),
                    other => panic!("{other:?}"),
                };
            }
            start.elapsed()
        })
    });
    // SAFETY: our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    g.finish();
}

criterion_group!(benches, bench, bench_gate);
criterion_main!(benches);
