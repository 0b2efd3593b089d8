//! `HysteresisAimd`: a rate-limited AIMD with hysteresis — healthy / warning / critical zones
//! on a time-windowed rolling p99, jump detection by a significance test on the mean, a
//! cool-off after critical events, a hard cap. Its AIMD core is TCP's (Jacobson, "Congestion
//! Avoidance and Control", SIGCOMM 1988) and Netflix concurrency-limits' `AIMDLimit`; the dead
//! band between the zones is what keeps one slow window (a GC pause) from halving the limit.

use super::common::{
    check_app_limited, check_duration, check_f64_below, check_positive, clamp_limit,
    is_app_limited, quantize, AlgorithmMetrics, Counters, SlowStart, NCL_APP_LIMITED_FRACTION,
};
use super::{bound_paths, check_bounds, Algorithm, Window};
use crate::time::{Monotonic, MS, SEC};
use crate::ConfigError;

/// Buckets of the rolling p99 (one per `p99_window_ns / 10`).
const P99_BUCKETS: usize = 10;
/// Buckets of the jump detector's look-back (one per `jump_window_ns / 4`).
const JUMP_BUCKETS: usize = 4;
/// Latency histogram of one p99 bucket: log-spaced bins, 4 per octave (19% wide), from
/// `target / 16` to `16 × target`, plus an underflow and an overflow bin (drops land there).
const BINS_PER_OCTAVE: f64 = 4.0;
const OCTAVES_BELOW: f64 = 4.0;
const BINS: usize = 34;
/// Fewer outcomes than this in the horizon say nothing about a p99 (1% of them is one):
/// the zone is WARNING (hold).
const MIN_P99_OUTCOMES: f32 = 100.0;
/// A jump needs this many samples on each side and a z-score of at least this much.
const MIN_JUMP_SAMPLES: f64 = 20.0;
const JUMP_Z: f64 = 3.0;
/// Windows with at most this many requests in flight show the dependency's own latency
/// (two requests queue behind each other only on a single-slot dependency).
const IDLE_INFLIGHT: u32 = 2;
/// The dependency's own p99 reads this far inside the HEALTHY zone once the target has
/// been raised to it: `target = idle p99 × IDLE_MARGIN / healthy_below`.
const IDLE_MARGIN: f64 = 1.25;
/// The idle answers a learned target needs: fewer than the zones' 100. A limit brought to
/// its floor by a target below the dependency's own p99 serves one request at a time (under
/// 50 answers a second on a bimodal 5 / 80 ms dependency), and waiting for 100 idle answers
/// kept it there over 2 s. The p99 of 50 reads at most a little low (about the p98); the
/// margin covers that.
const IDLE_MIN_OUTCOMES: f32 = 50.0;

/// Configuration of [`HysteresisAimd`]. `Default`: a 50 ms target, zones at 0.8× and 1.5×
/// of it, ×0.5 on a critical window, ×0.8 on a jump of the mean by 20% within 2 s, a 5 s
/// cool-off, a 10 s rolling p99, limits from 1 to 1000.
///
/// It pairs well with priority aging at the queue (a `normal` request waiting longer than
/// 500 ms moves to `background`): the Gate's aging preset
/// ([`GateConfig::aging`](crate::gate::GateConfig)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HysteresisConfig {
    /// The limit before any window (20, Netflix concurrency-limits' initial limit).
    pub initial_limit: f64,
    /// Floor (default 1: a critical event sets `max(1, C × 0.5)`). May be below 1.
    pub min_limit: f64,
    /// Hard cap (default 1000).
    pub max_limit: f64,
    /// The latency the zones are measured against (default 50 ms). ns.
    pub target_latency_ns: u64,
    /// HEALTHY while the rolling p99 is below `healthy_below × target` (default 0.8).
    pub healthy_below: f64,
    /// CRITICAL once the rolling p99 is above `critical_above × target` (default 1.5).
    pub critical_above: f64,
    /// The factor of a critical event, in `(0, 1)` (default 0.5).
    pub critical_factor: f64,
    /// A jump is a rise of the average latency by more than this fraction within
    /// `jump_window_ns` (default 0.2, i.e. 20 %), in `(0, 100]`.
    pub jump_rise: f64,
    /// The look-back of jump detection (default 2 s). ns.
    pub jump_window_ns: u64,
    /// The factor applied on a jump, in `(0, 1)` (default 0.8).
    pub jump_factor: f64,
    /// EWMA weight of each completion in the average latency, in `(0, 1]` (default 0.1).
    pub avg_alpha: f64,
    /// After a critical event, no additive increase for this long (default 5 s). ns.
    pub cool_off_ns: u64,
    /// The horizon of the rolling p99 (default 10 s). ns.
    pub p99_window_ns: u64,
    /// No growth while `max_inflight < app_limited_fraction × limit`, in `[0, 1]`.
    pub app_limited_fraction: f64,
    /// Slow start until the first window that is not HEALTHY, a jump or a drop.
    pub slow_start: bool,
}

impl Default for HysteresisConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20.0,
            // a critical event never takes the limit below 1; a hard cap of 1000
            min_limit: 1.0,
            max_limit: 1000.0,
            // a fixed target: set it from the dependency's normal p99 (about 2× it)
            target_latency_ns: 50 * MS,
            // zones: HEALTHY < 0.8 × target, CRITICAL > 1.5 × target, WARNING (hold) between
            healthy_below: 0.8,
            critical_above: 1.5,
            // CRITICAL → C × 0.5
            critical_factor: 0.5,
            // the average latency up by more than 20% within 2 s → C × 0.8
            jump_rise: 0.2,
            jump_window_ns: 2 * SEC,
            jump_factor: 0.8,
            // the average latency: an EWMA with alpha = 0.1
            avg_alpha: 0.1,
            // after a critical event, 5 s before the additive increase starts again
            cool_off_ns: 5 * SEC,
            // the p99 over a rolling 10 s window
            p99_window_ns: 10 * SEC,
            app_limited_fraction: NCL_APP_LIMITED_FRACTION,
            slow_start: false,
        }
    }
}

/// Per-bucket latency histogram of the rolling p99 (see [`BINS`]).
#[derive(Clone, Copy, Debug)]
struct Hist {
    bins: [f32; BINS],
}

impl Hist {
    const EMPTY: Self = Self { bins: [0.0; BINS] };
}

/// The bin coordinate of latency `x` (ns) for target `t`: `4·log2(x/t) + 17`, so bin 1 starts
/// at `t/16` and bin 33 (overflow) at `16·t`.
fn coord(x: f64, t: f64) -> f64 {
    BINS_PER_OCTAVE * libm::log2(x.max(1.0) / t) + BINS_PER_OCTAVE * OCTAVES_BELOW + 1.0
}

/// The latency at bin coordinate `c`.
fn uncoord(c: f64, t: f64) -> f64 {
    t * libm::exp2((c - 1.0 - BINS_PER_OCTAVE * OCTAVES_BELOW) / BINS_PER_OCTAVE)
}

/// A ring of `P99_BUCKETS` histograms of `width` ns each: the time-windowed latency
/// distribution over the last `(N − 1)·width` to `N·width` ns.
#[derive(Clone, Debug)]
struct RollingHist {
    width: u64,
    target: f64,
    head: u64,
    ring: [Hist; P99_BUCKETS],
}

impl RollingHist {
    fn new(horizon_ns: u64, target: f64) -> Self {
        Self {
            width: (horizon_ns / P99_BUCKETS as u64).max(1),
            target,
            head: 0,
            ring: [Hist::EMPTY; P99_BUCKETS],
        }
    }

    fn clear(&mut self) {
        self.ring = [Hist::EMPTY; P99_BUCKETS];
    }

    fn advance(&mut self, now: u64) -> usize {
        let epoch = now / self.width;
        if epoch > self.head {
            let gap = epoch - self.head;
            if gap >= P99_BUCKETS as u64 {
                self.clear();
            } else {
                for k in 1..=gap {
                    self.ring[((self.head + k) % P99_BUCKETS as u64) as usize] = Hist::EMPTY;
                }
            }
            self.head = epoch;
        }
        (self.head % P99_BUCKETS as u64) as usize
    }

    /// Spreads `mass` uniformly in log space over `[a, b]` (ns).
    fn spread(&mut self, i: usize, a: f64, b: f64, mass: f64) {
        let (ca, cb) = (coord(a, self.target), coord(b, self.target));
        let bin = |c: f64| (libm::floor(c).clamp(0.0, (BINS - 1) as f64)) as usize;
        if cb - ca < 1e-9 {
            self.ring[i].bins[bin(ca)] += mass as f32;
            return;
        }
        let (lo, hi) = (bin(ca), bin(cb));
        for k in lo..=hi {
            let (l, h) = (ca.max(k as f64), cb.min(k as f64 + 1.0));
            // The end bins also take what lies beyond the histogram's range.
            let (l, h) = (if k == 0 { ca } else { l }, if k == BINS - 1 { cb } else { h });
            if h > l {
                self.ring[i].bins[k] += (mass * (h - l) / (cb - ca)) as f32;
            }
        }
    }

    /// Folds a window: its samples spread between its quantiles (half between min and p50,
    /// 40% to p90, 9% to p99, 1% just above), its drops into the overflow bin.
    fn insert(&mut self, now: u64, w: &Window) {
        let i = self.advance(now);
        let n = w.samples as f64;
        if n > 0.0 {
            let (mn, p50, p90, p99) =
                (w.min_ns as f64, w.p50_ns as f64, w.p90_ns as f64, w.p99_ns as f64);
            let p50 = p50.max(mn);
            let p90 = p90.max(p50);
            let p99 = p99.max(p90);
            self.spread(i, mn, p50, 0.5 * n);
            self.spread(i, p50, p90, 0.4 * n);
            self.spread(i, p90, p99, 0.09 * n);
            self.spread(i, p99, p99 * 1.1, 0.01 * n);
        }
        self.ring[i].bins[BINS - 1] += w.drops as f32;
    }

    /// The p99 of everything in the horizon at `now` (ns), and how many outcomes that is.
    fn p99(&self, now: u64) -> (f64, f32) {
        let age = (now / self.width).saturating_sub(self.head);
        let live = (P99_BUCKETS as u64).saturating_sub(age);
        let mut sum = [0.0f32; BINS];
        for k in 0..live {
            let h =
                &self.ring[((self.head + P99_BUCKETS as u64 - k) % P99_BUCKETS as u64) as usize];
            for (s, b) in sum.iter_mut().zip(h.bins.iter()) {
                *s += *b;
            }
        }
        let total: f32 = sum.iter().sum();
        if total <= 0.0 {
            return (0.0, 0.0);
        }
        let want = 0.01 * total;
        let mut above = 0.0f32;
        for k in (0..BINS).rev() {
            if above + sum[k] >= want && sum[k] > 0.0 {
                // Linear in log space inside the bin.
                let frac = ((want - above) / sum[k]) as f64;
                return (uncoord(k as f64 + 1.0 - frac, self.target), total);
            }
            above += sum[k];
        }
        (uncoord(0.0, self.target), total)
    }
}

/// Mean and variance of the samples of one jump bucket (sums over windows).
#[derive(Clone, Copy, Debug, Default)]
struct Moments {
    n: f64,
    sum: f64,
    /// Sum over windows of `n × per-sample variance` (read from the window's p50..p90).
    var_sum: f64,
}

/// A ring of [`JUMP_BUCKETS`] moment buckets over the jump look-back.
#[derive(Clone, Debug)]
struct RollingMoments {
    width: u64,
    head: u64,
    ring: [Moments; JUMP_BUCKETS],
}

impl RollingMoments {
    fn new(horizon_ns: u64) -> Self {
        Self {
            width: (horizon_ns / JUMP_BUCKETS as u64).max(1),
            head: 0,
            ring: [Moments::default(); JUMP_BUCKETS],
        }
    }

    fn clear(&mut self) {
        self.ring = [Moments::default(); JUMP_BUCKETS];
    }

    fn insert(&mut self, now: u64, w: &Window) {
        let epoch = now / self.width;
        if epoch > self.head {
            let gap = epoch - self.head;
            if gap >= JUMP_BUCKETS as u64 {
                self.clear();
            } else {
                for k in 1..=gap {
                    self.ring[((self.head + k) % JUMP_BUCKETS as u64) as usize] =
                        Moments::default();
                }
            }
            self.head = epoch;
        }
        let m = &mut self.ring[(self.head % JUMP_BUCKETS as u64) as usize];
        let n = w.samples as f64;
        let avg = w.avg_ns as f64;
        // Log-normal reading of the window's spread: σ from p90/p50, CV² = e^{σ²} − 1.
        let sigma = (libm::log(w.p90_ns.max(1) as f64 / w.p50_ns.max(1) as f64) / 1.2816).max(0.0);
        let cv2 = libm::expm1(sigma * sigma);
        m.n += n;
        m.sum += n * avg;
        m.var_sum += n * avg * avg * cv2;
    }

    /// Whether the newest bucket's mean is above the oldest live one's by more than `rise`
    /// (a fraction) and the difference is significant (`z ≥ JUMP_Z`).
    fn jumped(&self, now: u64, rise: f64) -> bool {
        let age = (now / self.width).saturating_sub(self.head);
        if age > 0 {
            return false; // no window in the newest bucket yet
        }
        let new = self.ring[(self.head % JUMP_BUCKETS as u64) as usize];
        // The oldest bucket still inside the look-back.
        let old = (1..JUMP_BUCKETS as u64)
            .rev()
            .map(|k| {
                self.ring[((self.head + JUMP_BUCKETS as u64 - k) % JUMP_BUCKETS as u64) as usize]
            })
            .find(|m| m.n >= MIN_JUMP_SAMPLES);
        let Some(old) = old else { return false };
        if new.n < MIN_JUMP_SAMPLES {
            return false;
        }
        let (mn, mo) = (new.sum / new.n, old.sum / old.n);
        let se = libm::sqrt(new.var_sum / (new.n * new.n) + old.var_sum / (old.n * old.n));
        mn > mo * (1.0 + rise) && (mn - mo) >= JUMP_Z * se
    }
}

/// Adaptive concurrency with hysteresis: AIMD on latency zones, with a dead band.
///
/// Per window (times are the windows' `now`, clamped so they never run backwards):
///
/// 1. Latency metrics. The **rolling p99 is a true time-windowed p99**: every window's
///    samples are spread between its quantiles (half between min and p50, 40% to p90, 9%
///    to p99, 1% just above) into log-spaced histograms (4 bins per octave around the
///    target), one per second of the 10 s horizon, and the p99 is read from their sum. One
///    slow request among a thousand leaves it where the thousand are. Drops (timeouts,
///    overload answers) count as latencies above every threshold: a timeout is a slow
///    answer, critical only when more than 1% of the horizon's outcomes are. With fewer
///    than 100 outcomes in the horizon there is no p99 yet: WARNING (hold). The average
///    latency is an EWMA with α = 0.1 per completion (reported in the metrics).
/// 2. Zone: HEALTHY `p99 < 0.8 T`; WARNING `0.8 T ≤ p99 ≤ 1.5 T`; CRITICAL `p99 > 1.5 T`.
/// 3. CRITICAL → `C = max(floor, ⌊C × 0.5⌋)`, the p99 history is reset (so one slow spell
///    halves the limit once, not every window), and a 5 s cool-off starts.
///    Otherwise a **jump** — the mean latency of the last 500 ms is more than 20% above the
///    mean of the oldest 500 ms of the 2 s look-back, *and* that rise is significant
///    (z ≥ 3, each side's variance read from its windows' p50..p90 spread, at least 20
///    samples a side) — gives `C = ⌊C × 0.8⌋`, also in WARNING and instead of the HEALTHY
///    increase; the look-back then restarts, so one rise is counted once. Tail noise of a
///    long-tailed dependency moves small windows' means by far more than 20% at random;
///    the significance test is what keeps it from reading as jumps.
///    WARNING holds. HEALTHY adds **1 per completion** (the window's samples), except
///    during the cool-off, in a window with a drop, or while app-limited
///    (`max_inflight < ½ C`): deliberately
///    linear, dozens of successes to recover what a halving took.
/// 4. Clamp to `[min_limit, max_limit]` (the hard cap).
///
/// **A target below the dependency's own p99 is raised to it.** The zones are fixed
/// multiples of the target: a dependency whose p99 exceeds `1.5 × target` at any
/// concurrency (a bimodal service with a slow mode above it) would read CRITICAL whatever
/// the limit, halve it to the floor and keep it there with idle capacity; one whose p99
/// sits in the dead band would hold the limit wherever it fell. So the windows with at
/// most two requests in flight (no queue of ours) feed a second time-windowed p99, the
/// dependency's own. Once it holds 50 answers, the target in force is
/// `max(target, idle p99 × 1.25 / healthy_below)`: the dependency's own p99 then reads
/// HEALTHY, and the zones measure the latency our concurrency adds to it. A raise cancels
/// the cool-off (the critical readings behind it were the target's error, not an
/// overload), seeds the rolling p99 with those idle answers and, in the window that makes
/// it, reads them as a p99 although fewer than 100 (so the limit leaves the floor at once).
/// The configured target stays in force whenever it is reachable (idle windows
/// below it change nothing), and the learned one follows later idle windows down. See
/// [`HysteresisAimd::effective_target_ns`].
///
/// `C` is a whole number from 1 up; below 1 (only with a fractional floor)
/// fractions are kept.
///
/// ```
/// use surgeguard_core::limit::{Algorithm, HysteresisAimd, HysteresisConfig, Window};
/// use surgeguard_core::time::{MS, SEC};
///
/// let cfg = HysteresisConfig { target_latency_ns: 100 * MS, ..HysteresisConfig::default() };
/// let mut h = HysteresisAimd::new(cfg)?;
/// let w = |now, lat, n| Window { samples: n, max_inflight: 40, ..Window::single(now, lat, 40, false) };
/// assert_eq!(h.update(&w(SEC, 50 * MS, 50)), 20.0); // fewer than 100 outcomes: hold
/// assert_eq!(h.update(&w(2 * SEC, 50 * MS, 10)), 20.0); // still fewer
/// assert_eq!(h.update(&w(3 * SEC, 50 * MS, 40)), 60.0); // HEALTHY: +1 per completion
/// assert_eq!(h.update(&w(4 * SEC, 900 * MS, 100)), 30.0); // CRITICAL: ⌊60 × 0.5⌋
/// assert_eq!(h.update(&w(5 * SEC, 50 * MS, 200)), 30.0); // cooling off
/// # Ok::<(), surgeguard_core::ConfigError>(())
/// ```
///
/// Progress: not shared (`&mut self`). Cost: O(bins) per window — a histogram insert of
/// four segments, a 340-bin sum for the p99 (two when the window had at most two in
/// flight), a 4-bucket scan. Size: about 3 KB.
#[derive(Clone, Debug)]
pub struct HysteresisAimd {
    limit: f64,
    min: f64,
    max: f64,
    target_ns: u64,
    healthy_below: f64,
    critical_above: f64,
    healthy_below_ns: f64,
    critical_above_ns: f64,
    /// The target in force: the configured one, or higher once the dependency's own p99
    /// (measured with at most two requests in flight) showed it unreachable.
    effective_target_ns: f64,
    idle: RollingHist,
    critical_factor: f64,
    jump_rise: f64,
    jump_factor: f64,
    avg_alpha: f64,
    cool_off_ns: u64,
    app_limited_fraction: f64,
    clock: Monotonic,
    avg_ns: Option<f64>,
    p99: RollingHist,
    jump: RollingMoments,
    cool_off_until: u64,
    critical_events: u64,
    jumps: u64,
    slow_start: SlowStart,
    counters: Counters,
}

impl HysteresisAimd {
    /// Builds it, validating every number of the config.
    pub fn new(config: HysteresisConfig) -> Result<Self, ConfigError> {
        check_bounds(
            config.min_limit,
            config.initial_limit,
            config.max_limit,
            bound_paths!("hysteresis"),
        )?;
        check_duration(config.target_latency_ns, "limiter.hysteresis.target_latency_ns")?;
        check_positive(config.healthy_below, 1000.0, "limiter.hysteresis.healthy_below")?;
        check_positive(config.critical_above, 1000.0, "limiter.hysteresis.critical_above")?;
        if config.healthy_below > config.critical_above {
            return Err(ConfigError::inconsistent(
                "limiter.hysteresis.healthy_below",
                "must not be above",
                "limiter.hysteresis.critical_above",
            ));
        }
        for (f, what) in [
            (config.critical_factor, "limiter.hysteresis.critical_factor"),
            (config.jump_factor, "limiter.hysteresis.jump_factor"),
        ] {
            check_f64_below(f, 0.0, 1.0, what)?;
            if f <= 0.0 {
                return Err(ConfigError::out_of_range(what));
            }
        }
        check_positive(config.jump_rise, 100.0, "limiter.hysteresis.jump_rise")?;
        check_duration(config.jump_window_ns, "limiter.hysteresis.jump_window_ns")?;
        check_positive(config.avg_alpha, 1.0, "limiter.hysteresis.avg_alpha")?;
        check_duration(config.cool_off_ns, "limiter.hysteresis.cool_off_ns")?;
        check_duration(config.p99_window_ns, "limiter.hysteresis.p99_window_ns")?;
        check_app_limited(config.app_limited_fraction, "limiter.hysteresis.app_limited_fraction")?;
        let target = config.target_latency_ns as f64;
        Ok(Self {
            limit: clamp_limit(quantize(config.initial_limit), config.min_limit, config.max_limit),
            min: config.min_limit,
            max: config.max_limit,
            target_ns: config.target_latency_ns,
            healthy_below: config.healthy_below,
            critical_above: config.critical_above,
            healthy_below_ns: config.healthy_below * target,
            critical_above_ns: config.critical_above * target,
            effective_target_ns: target,
            idle: RollingHist::new(config.p99_window_ns, target),
            critical_factor: config.critical_factor,
            jump_rise: config.jump_rise,
            jump_factor: config.jump_factor,
            avg_alpha: config.avg_alpha,
            cool_off_ns: config.cool_off_ns,
            app_limited_fraction: config.app_limited_fraction,
            clock: Monotonic::new(),
            avg_ns: None,
            p99: RollingHist::new(config.p99_window_ns, target),
            jump: RollingMoments::new(config.jump_window_ns),
            cool_off_until: 0,
            critical_events: 0,
            jumps: 0,
            slow_start: SlowStart::new(config.slow_start),
            counters: Counters::default(),
        })
    }

    /// The rolling p99 (ns) as of the latest window; 0 before any outcome.
    pub fn rolling_p99_ns(&self) -> u64 {
        self.p99.p99(self.clock.latest()).0 as u64
    }

    /// The target in force (ns): the configured one, unless the dependency's own p99 (with
    /// at most two requests in flight) showed it unreachable; then `idle p99 × 1.25 /
    /// healthy_below`.
    pub fn effective_target_ns(&self) -> u64 {
        self.effective_target_ns as u64
    }

    /// The EWMA of the mean latency (ns); 0 before any sample.
    pub fn avg_latency_ns(&self) -> u64 {
        self.avg_ns.unwrap_or(0.0) as u64
    }

    /// Whether additive increase is suspended at `now` after a critical event.
    pub fn is_cooling_off(&self, now: u64) -> bool {
        now.max(self.clock.latest()) < self.cool_off_until
    }

    /// Critical events so far.
    pub fn critical_events(&self) -> u64 {
        self.critical_events
    }

    /// Jumps detected so far.
    pub fn jumps(&self) -> u64 {
        self.jumps
    }

    /// A snapshot of its counters and gauges (`latency_ns` = rolling p99, `baseline_ns` =
    /// target).
    pub fn metrics(&self) -> AlgorithmMetrics {
        self.counters.snapshot(
            self.limit,
            self.slow_start.is_active(),
            self.rolling_p99_ns(),
            self.target_ns,
        )
    }

    /// Folds the window's mean into the EWMA (α per completion).
    fn update_average(&mut self, w: &Window) {
        let x = w.avg_ns as f64;
        let avg = match self.avg_ns {
            None => x,
            Some(a) => {
                let keep = libm::pow(1.0 - self.avg_alpha, w.samples as f64);
                a * keep + x * (1.0 - keep)
            }
        };
        self.avg_ns = Some(avg);
    }

    /// Learns the dependency's own p99 from windows with at most [`IDLE_INFLIGHT`] requests
    /// in flight (their answers only: a drop says nothing about a latency), and raises the
    /// target to it when the configured one is below. True when it raised the target now.
    fn learn_idle(&mut self, now: u64, w: &Window) -> bool {
        if w.max_inflight > IDLE_INFLIGHT || w.samples == 0 {
            return false;
        }
        self.idle.insert(now, &Window { drops: 0, ..*w });
        let (p99, n) = self.idle.p99(now);
        if n < IDLE_MIN_OUTCOMES {
            return false;
        }
        let configured = self.target_ns as f64;
        let wanted = (p99 * IDLE_MARGIN / self.healthy_below).max(configured);
        if wanted > self.effective_target_ns {
            // The critical readings that brought the limit down here were the target's
            // error, not an overload: no cool-off for them; and these idle answers are the
            // p99 at this concurrency, so the zones need not wait for 100 more.
            self.cool_off_until = now;
            self.p99 = self.idle.clone();
        }
        let raised = wanted > self.effective_target_ns;
        self.effective_target_ns = wanted;
        self.healthy_below_ns = self.healthy_below * wanted;
        self.critical_above_ns = self.critical_above * wanted;
        raised
    }

    /// A critical event: ×critical_factor, cool-off, slow start over, p99 history reset.
    fn critical(&mut self, now: u64) -> f64 {
        self.critical_events = self.critical_events.saturating_add(1);
        self.cool_off_until = now.saturating_add(self.cool_off_ns);
        self.slow_start.end();
        self.p99.clear();
        self.jump.clear();
        self.limit * self.critical_factor
    }
}

impl Algorithm for HysteresisAimd {
    fn limit(&self) -> f64 {
        self.limit
    }

    fn update(&mut self, w: &Window) -> f64 {
        if w.samples == 0 && w.drops == 0 {
            return self.limit;
        }
        let now = self.clock.observe(w.now);
        let old = self.limit;
        if w.dropped() {
            self.counters.count_drop();
        }
        self.p99.insert(now, w);
        let raised = self.learn_idle(now, w);
        let mut jumped = false;
        if w.samples > 0 {
            self.update_average(w);
            self.jump.insert(now, w);
            jumped = self.jump.jumped(now, self.jump_rise);
        }
        let (p99, outcomes) = self.p99.p99(now);
        // The window that raised the target from idle answers reads their p99 (HEALTHY by
        // construction) although fewer than 100: the limit leaves the floor at once instead
        // of waiting for 100 more answers one at a time.
        let known = outcomes >= MIN_P99_OUTCOMES || raised;
        let new = if known && p99 > self.critical_above_ns {
            self.critical(now)
        } else if jumped {
            self.jumps = self.jumps.saturating_add(1);
            self.slow_start.end();
            self.jump.clear();
            old * self.jump_factor
        } else if !known || p99 >= self.healthy_below_ns {
            // WARNING: the hysteresis dead band (or no p99 yet). Not healthy: slow start
            // is over once a p99 says so.
            if known {
                self.slow_start.end();
            }
            old
        } else if now < self.cool_off_until || w.dropped() {
            // Cooling off; or a timeout in this window: not critical unless the horizon's
            // share says so, but no reason to grow either.
            old
        } else if is_app_limited(w.max_inflight, old, self.app_limited_fraction) {
            self.counters.count_app_limited();
            old
        } else {
            // +1 per completion.
            self.slow_start.grow(old, w.samples, old + w.samples as f64)
        };
        self.limit = clamp_limit(quantize(new), self.min, self.max);
        self.counters.record(old, self.limit);
        self.limit
    }

    fn name(&self) -> &'static str {
        "hysteresis_aimd"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Target 100 ms: HEALTHY < 80 ms, WARNING 80..=150 ms, CRITICAL > 150 ms.
    fn h() -> HysteresisAimd {
        HysteresisAimd::new(HysteresisConfig {
            target_latency_ns: 100 * MS,
            ..HysteresisConfig::default()
        })
        .unwrap()
    }

    /// A window of `n` samples all at `lat`, with the limit in use.
    fn win(now: u64, lat: u64, n: u32) -> Window {
        Window { samples: n, max_inflight: 10_000, ..Window::single(now, lat, 10_000, false) }
    }

    /// A window of `n` samples whose slowest is `slow` and the rest `lat` (its p99 is its
    /// maximum, as for any window under 100 samples).
    fn win_with_outlier(now: u64, lat: u64, slow: u64, n: u32) -> Window {
        Window {
            p99_ns: slow,
            avg_ns: (lat * (n as u64 - 1) + slow) / n as u64,
            ..win(now, lat, n)
        }
    }

    #[test]
    fn zones_hold_without_a_p99_then_act() {
        let mut h = h();
        assert_eq!(h.update(&win(100 * MS, 50 * MS, 50)), 20.0, "50 outcomes: no p99 yet");
        assert_eq!(h.update(&win(200 * MS, 50 * MS, 50)), 70.0, "HEALTHY: +1 per completion");
        assert_eq!(h.update(&win(300 * MS, 120 * MS, 1000)), 70.0, "WARNING holds");
        assert_eq!(h.update(&win(400 * MS, 400 * MS, 10_000)), 35.0, "CRITICAL halves");
        assert!(h.is_cooling_off(400 * MS + 4 * SEC));
        assert!(!h.is_cooling_off(400 * MS + 5 * SEC));
        assert_eq!(h.critical_events(), 1);
    }

    #[test]
    fn increase_is_one_per_completion() {
        // 100 completions in healthy windows: +100, not +1 per window.
        let mut h = h();
        h.update(&win(100 * MS, 20 * MS, 200));
        let before = h.limit();
        for k in 0..10 {
            h.update(&win((2 + k) * 100 * MS, 20 * MS, 10));
        }
        assert_eq!(h.limit(), before + 100.0);
    }

    #[test]
    fn one_outlier_among_a_thousand_is_not_a_p99() {
        // 100 req/s of 20 ms for 10 s, in windows of 10; one window holds one 400 ms answer.
        // Its window p99 is 400 ms (CRITICAL by itself), but the 10 s p99 is 20 ms.
        let mut h = h();
        let mut now = 0;
        for k in 0..100u64 {
            now += 100 * MS;
            let w = if k == 50 {
                win_with_outlier(now, 20 * MS, 400 * MS, 10)
            } else {
                win(now, 20 * MS, 10)
            };
            h.update(&w);
        }
        assert_eq!(h.critical_events(), 0, "{:?}", h.metrics());
        assert!(h.rolling_p99_ns() < 80 * MS, "{}", h.rolling_p99_ns());
    }

    #[test]
    fn a_slow_spell_above_one_percent_is_critical_and_counts_once() {
        let mut h = h();
        let mut now = 0;
        for _ in 0..20 {
            now += 100 * MS;
            h.update(&win(now, 20 * MS, 100));
        }
        let before = h.limit();
        // For 400 ms, a fifth of the answers take 300 ms: over the 2 s seen so far, more
        // than 1% of the outcomes are above 150 ms.
        for _ in 0..4 {
            now += 100 * MS;
            let w = Window { p90_ns: 300 * MS, ..win_with_outlier(now, 20 * MS, 300 * MS, 33) };
            h.update(&w);
        }
        assert_eq!(h.critical_events(), 1, "{:?}", h.metrics());
        // The p99 history was reset: the healthy answers after it do not halve again.
        for _ in 0..20 {
            now += 100 * MS;
            h.update(&win(now, 20 * MS, 100));
        }
        assert_eq!(h.critical_events(), 1, "{:?}", h.metrics());
        assert_eq!(h.limit(), libm::floor(before * 0.5));
    }

    #[test]
    fn timeouts_are_critical_only_above_one_percent() {
        let mut h = h();
        let mut now = 0;
        for k in 0..100u64 {
            now += 100 * MS;
            // One timeout in the 10 s (0.1% of the outcomes).
            let w = Window { drops: u32::from(k == 50), ..win(now, 20 * MS, 10) };
            h.update(&w);
        }
        assert_eq!(h.critical_events(), 0);
        // 5% timeouts: critical.
        for _ in 0..10 {
            now += 100 * MS;
            h.update(&Window { drops: 5, ..win(now, 20 * MS, 95) });
        }
        assert!(h.critical_events() >= 1);
        assert!(h.metrics().drop_windows >= 10);
    }

    /// SplitMix64 standard normal (Box-Muller).
    fn normal(rng: &mut crate::rng::SplitMix64) -> f64 {
        let (u, v) = (1.0 - rng.next_f64(), rng.next_f64());
        libm::sqrt(-2.0 * libm::log(u)) * libm::cos(2.0 * core::f64::consts::PI * v)
    }

    /// A window of `n` log-normal samples (median `median_ms`, σ `sigma`), summarised as the
    /// limiter would (quantiles of the sorted samples).
    fn lognormal_window(
        rng: &mut crate::rng::SplitMix64,
        now: u64,
        n: usize,
        median_ms: f64,
        sigma: f64,
    ) -> Window {
        let mut v = [0u64; 64];
        for x in v[..n].iter_mut() {
            *x = (median_ms * MS as f64 * libm::exp(sigma * normal(rng))) as u64;
        }
        let v = &mut v[..n];
        v.sort_unstable();
        let q = |p: f64| v[((n as f64 * p) as usize).min(n - 1)];
        Window {
            now,
            samples: n as u32,
            drops: 0,
            avg_ns: v.iter().sum::<u64>() / n as u64,
            min_ns: v[0],
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            max_inflight: 10_000,
            inflight: 10_000,
        }
    }

    #[test]
    fn tail_noise_is_no_jump_and_a_real_rise_is() {
        // Heavy tail (σ 1, p99 ≈ 10× the median), 60 s of windows of 20 samples: the small
        // windows' means swing by far more than 20% at random. Before the significance test
        // this read as about two jumps a second.
        let mut rng = crate::rng::SplitMix64::new(7);
        let cfg = HysteresisConfig { target_latency_ns: SEC, ..HysteresisConfig::default() };
        let mut h = HysteresisAimd::new(cfg).unwrap();
        let mut now = 0;
        for _ in 0..600 {
            now += 100 * MS;
            h.update(&lognormal_window(&mut rng, now, 20, 6.0, 1.0));
        }
        assert!(h.jumps() <= 2, "{} jumps on noise", h.jumps());
        // A real, sustained doubling of latency is detected within the look-back.
        let before = h.jumps();
        for _ in 0..20 {
            now += 100 * MS;
            h.update(&lognormal_window(&mut rng, now, 40, 12.0, 0.3));
        }
        assert!(h.jumps() > before, "{:?}", h.metrics());
    }

    #[test]
    fn cool_off_does_not_block_decreases() {
        let mut h = h();
        h.update(&win(100 * MS, 400 * MS, 200));
        assert_eq!(h.limit(), 10.0);
        h.update(&win(SEC, 400 * MS, 200));
        assert_eq!(h.limit(), 5.0, "a second critical spell during the cool-off");
        h.update(&win(2 * SEC, 20 * MS, 200));
        assert_eq!(h.limit(), 5.0, "cooling off");
        h.update(&win(7 * SEC, 20 * MS, 200));
        assert_eq!(h.limit(), 205.0, "after 5 s: +1 per completion");
    }

    #[test]
    fn hard_cap_and_floor() {
        let mut h = h();
        h.update(&win(MS, 10 * MS, 100_000));
        assert_eq!(h.limit(), 1000.0, "hard cap");
        let mut now = MS;
        for _ in 0..20 {
            now += 6 * SEC;
            h.update(&win(now, 400 * MS, 200));
        }
        assert_eq!(h.limit(), 1.0, "max(1, C × 0.5)");
    }

    #[test]
    fn fractional_floor_keeps_fractions_below_one() {
        let cfg = HysteresisConfig {
            initial_limit: 1.0,
            min_limit: 0.1,
            target_latency_ns: 100 * MS,
            ..HysteresisConfig::default()
        };
        let mut h = HysteresisAimd::new(cfg).unwrap();
        h.update(&win(SEC, 400 * MS, 200));
        assert_eq!(h.limit(), 0.5);
        h.update(&win(2 * SEC, 400 * MS, 200));
        assert_eq!(h.limit(), 0.25);
    }

    #[test]
    fn app_limited_windows_do_not_grow() {
        let mut h = h();
        h.update(&win(100 * MS, 20 * MS, 200));
        let l = h.limit();
        h.update(&Window { max_inflight: 2, ..win(200 * MS, 20 * MS, 50) });
        assert_eq!(h.limit(), l);
        assert_eq!(h.metrics().app_limited, 1);
    }

    #[test]
    fn time_never_runs_backwards() {
        let mut h = h();
        h.update(&win(10 * SEC, 400 * MS, 200));
        assert!(h.is_cooling_off(0), "a stale `now` reads as the latest time seen");
        h.update(&win(SEC, 20 * MS, 200)); // clamped to 10 s: still cooling off
        assert_eq!(h.limit(), 10.0);
    }

    #[test]
    fn empty_window_changes_nothing() {
        let mut h = h();
        let before = h.clone().metrics();
        assert_eq!(h.update(&Window { now: SEC, ..Window::default() }), 20.0);
        assert_eq!(h.metrics(), before);
    }

    #[test]
    fn histogram_p99_reads_a_uniform_window_back() {
        let mut r = RollingHist::new(10 * SEC, 100e6);
        r.insert(SEC, &win(SEC, 20 * MS, 1000));
        let (p99, n) = r.p99(SEC);
        assert!((n - 1000.0).abs() < 0.5);
        assert!((p99 / 20e6 - 1.0).abs() < 0.2, "{p99}");
        // The horizon expires it.
        assert_eq!(r.p99(SEC + 11 * SEC).1, 0.0);
    }

    /// A window of a bimodal dependency (90% at 5 ms, 10% at 80 ms: its own p99 ~85 ms at
    /// any concurrency) with `inflight` in flight and `samples` answers.
    fn bimodal_window(now: u64, inflight: u32, samples: u32) -> Window {
        Window {
            now,
            samples,
            drops: 0,
            avg_ns: 12_500_000,
            min_ns: 4_500_000,
            p50_ns: 5 * MS,
            p90_ns: 5_500_000,
            p99_ns: 85 * MS,
            max_inflight: inflight,
            inflight,
        }
    }

    #[test]
    fn a_target_below_the_dependency_s_own_p99_is_no_floor_trap() {
        // The bimodal dependency: 90% at 5 ms, 10% at 80 ms, so its own p99 is ~80 ms at
        // any concurrency, above the critical 75 ms of the default 50 ms target. 16 slots,
        // 1,000 req/s offered: windows of 100 ms hold min(limit, 12.5) in flight.
        let mut h = HysteresisAimd::new(HysteresisConfig::default()).unwrap();
        let mut now = 0;
        let mut at_floor_ms = 0;
        for _ in 0..300 {
            now += 100 * MS;
            let inflight = libm::floor(h.limit()).clamp(1.0, 12.5) as u32;
            let w = bimodal_window(now, inflight, inflight * 8);
            h.update(&w);
            if h.limit() <= 2.0 {
                at_floor_ms += 100;
            }
        }
        // It fell (the configured zones read CRITICAL), learned the dependency's own p99
        // at the floor within a second or two, and grew back with its full rule.
        assert!(h.critical_events() >= 1);
        assert!(at_floor_ms <= 2000, "{at_floor_ms} ms at the floor");
        assert!(h.limit() >= 13.0, "{}", h.limit());
        let t = h.effective_target_ns() as f64 / MS as f64;
        assert!((90.0..=160.0).contains(&t), "{t} ms");
        // A dependency within the configured target keeps it.
        let mut h = HysteresisAimd::new(HysteresisConfig::default()).unwrap();
        for k in 1..=100u64 {
            h.update(&Window {
                samples: 20,
                max_inflight: 1,
                ..Window::single(k * 100 * MS, 10 * MS, 1, false)
            });
        }
        assert_eq!(h.effective_target_ns(), 50 * MS);
    }

    #[test]
    fn the_floor_is_left_once_fifty_idle_answers_raise_the_target() {
        // At the floor, one request at a time, answers of a dependency whose own p99 (85 ms)
        // is above the 75 ms CRITICAL line of the default target: ten answers a window.
        // Fifty answers raise the target, and that window grows the limit at once (waiting
        // for 100 answers, one at a time, kept it at the floor over 2 s on a bimodal
        // dependency).
        let cfg = HysteresisConfig { initial_limit: 1.0, ..HysteresisConfig::default() };
        let mut h = HysteresisAimd::new(cfg).unwrap();
        let mut left_at = None;
        for k in 1..=12u64 {
            h.update(&bimodal_window(k * 100 * MS, 1, 10));
            if h.limit() > 1.0 && left_at.is_none() {
                left_at = Some(k);
            }
        }
        // 50 answers by the 5th window (the rolling count may read a hair under 50 in
        // f32: then the 6th); 100 answers took until the 11th.
        assert!(matches!(left_at, Some(k) if k <= 6), "left the floor at window {left_at:?}");
        assert!(h.effective_target_ns() > 100 * MS);
    }

    #[test]
    fn size_is_as_documented() {
        assert!(core::mem::size_of::<HysteresisAimd>() < 3100);
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = HysteresisConfig::default();
        let bad = [
            HysteresisConfig { target_latency_ns: 0, ..base },
            HysteresisConfig { healthy_below: 2.0, critical_above: 1.5, ..base },
            HysteresisConfig { healthy_below: f64::NAN, ..base },
            HysteresisConfig { critical_above: -1.0, ..base },
            HysteresisConfig { critical_factor: 1.0, ..base },
            HysteresisConfig { critical_factor: 0.0, ..base },
            HysteresisConfig { jump_factor: f64::INFINITY, ..base },
            HysteresisConfig { jump_rise: 0.0, ..base },
            HysteresisConfig { jump_window_ns: 0, ..base },
            HysteresisConfig { avg_alpha: 1.5, ..base },
            HysteresisConfig { cool_off_ns: u64::MAX, ..base },
            HysteresisConfig { p99_window_ns: 0, ..base },
            HysteresisConfig { app_limited_fraction: -1.0, ..base },
            HysteresisConfig { max_limit: 1e12, ..base },
        ];
        for c in bad {
            assert!(HysteresisAimd::new(c).is_err(), "{c:?}");
        }
        assert_eq!(HysteresisAimd::new(base).unwrap().name(), "hysteresis_aimd");
    }
}
