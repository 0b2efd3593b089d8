use super::histogram::{bucket_low, quantile_of, Histogram, BUCKETS};
use crate::limit::Window;
use crate::time::{Monotonic, MAX_NOW};

/// Builds a [`Window`] from one window's bucket counts (deltas), latency sum and drops.
pub(crate) fn summarize(
    now: u64,
    counts: &[u64; BUCKETS],
    samples: u64,
    sum_ns: u64,
    drops: u64,
    max_inflight: u32,
    inflight: u32,
) -> Window {
    let q = |p| quantile_of(counts.iter().copied(), samples, p);
    Window {
        now,
        samples: samples.min(u32::MAX as u64) as u32,
        drops: drops.min(u32::MAX as u64) as u32,
        avg_ns: sum_ns.checked_div(samples).unwrap_or(0),
        min_ns: counts.iter().position(|&c| c > 0).map_or(0, bucket_low),
        p50_ns: q(0.5),
        p90_ns: q(0.9),
        p99_ns: q(0.99),
        max_inflight,
        inflight,
    }
}

/// Collects samples for `&mut self` users and closes a [`Window`] once it is at least
/// `min_duration` long **and** holds `min_samples` samples (or any drop).
///
/// ```
/// use surgeguard_core::stats::SampleWindow;
/// let mut w = SampleWindow::new(100_000_000, 3);
/// for i in 0..3u64 { w.record(i * 1_000, 10_000_000, 4); }
/// assert!(w.try_close(50_000_000, 4).is_none()); // too short
/// let closed = w.try_close(100_000_000, 4).unwrap();
/// assert_eq!(closed.samples, 3);
/// ```
///
/// Progress: not shared. Cost: a bucket increment per sample; closing scans the buckets.
#[derive(Clone, Debug)]
pub struct SampleWindow {
    hist: Histogram,
    start: Option<u64>,
    sum_ns: u64,
    drops: u64,
    max_inflight: u32,
    min_duration: u64,
    min_samples: u32,
    clock: Monotonic,
}

impl SampleWindow {
    /// A window closed after `min_duration` ns and `min_samples` samples.
    pub fn new(min_duration: u64, min_samples: u32) -> Self {
        Self {
            hist: Histogram::new(),
            start: None,
            sum_ns: 0,
            drops: 0,
            max_inflight: 0,
            min_duration,
            min_samples,
            clock: Monotonic::new(),
        }
    }

    /// Changes the minimum duration of the windows that follow.
    pub fn set_min_duration(&mut self, ns: u64) {
        self.min_duration = ns;
    }

    fn touch(&mut self, now: u64, inflight: u32) -> u64 {
        let now = self.clock.observe(now);
        self.start.get_or_insert(now);
        self.max_inflight = self.max_inflight.max(inflight);
        now
    }

    /// Records a successful completion of latency `rtt_ns` with `inflight` in flight.
    pub fn record(&mut self, now: u64, rtt_ns: u64, inflight: u32) {
        self.touch(now, inflight);
        self.hist.record(rtt_ns);
        self.sum_ns = self.sum_ns.saturating_add(rtt_ns);
    }

    /// Records an overload outcome.
    pub fn record_drop(&mut self, now: u64, inflight: u32) {
        self.touch(now, inflight);
        self.drops += 1;
    }

    /// Closes the window if it is long and full enough, and starts the next one.
    pub fn try_close(&mut self, now: u64, inflight: u32) -> Option<Window> {
        let now = self.clock.observe(now);
        let start = self.start?;
        let samples = self.hist.count();
        if now.saturating_sub(start) < self.min_duration
            || (samples < self.min_samples as u64 && self.drops == 0)
        {
            return None;
        }
        let mut counts = [0u64; BUCKETS];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.hist.bucket(i);
        }
        let w =
            summarize(now, &counts, samples, self.sum_ns, self.drops, self.max_inflight, inflight);
        self.hist.clear();
        self.start = Some(now);
        self.sum_ns = 0;
        self.drops = 0;
        self.max_inflight = inflight;
        Some(w)
    }
}

/// The minimum of a series over a sliding time horizon, in constant space: Kathleen
/// Nichols' windowed min filter (as used by BBR) keeps the best, second-best and
/// third-best candidates so an old minimum expires without storing the whole window.
///
/// ```
/// use surgeguard_core::stats::WindowedMin;
/// let mut m = WindowedMin::new(1_000);
/// assert_eq!(m.update(0, 50), 50);
/// assert_eq!(m.update(10, 80), 50);
/// assert_eq!(m.update(1_500, 90), 90); // the 50 expired
/// ```
///
/// Progress: not shared. Cost: a few comparisons per sample.
///
/// Time: a `now` older than the newest candidate counts as that candidate's time; a `now`
/// above [`MAX_NOW`] is bad input and counts as the latest time seen (no candidate is
/// stamped with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowedMin {
    horizon: u64,
    s: [(u64, u64); 3],
    seeded: bool,
    latest: Monotonic,
}

impl WindowedMin {
    /// A filter over the last `horizon` ns.
    pub const fn new(horizon: u64) -> Self {
        Self { horizon, s: [(0, u64::MAX); 3], seeded: false, latest: Monotonic::new() }
    }

    /// The current minimum (`None` before the first sample).
    pub fn get(&self) -> Option<u64> {
        self.seeded.then_some(self.s[0].1)
    }

    /// Forgets everything.
    pub fn reset(&mut self) {
        self.seeded = false;
        self.s = [(0, u64::MAX); 3];
    }

    /// Adds `value` seen at `now` and returns the minimum over the horizon.
    pub fn update(&mut self, now: u64, value: u64) -> u64 {
        let latest = self.latest.observe(now);
        let now = if now > MAX_NOW { latest } else { now }.max(self.s[2].0);
        let val = (now, value);
        if !self.seeded || value <= self.s[0].1 || now - self.s[2].0 > self.horizon {
            self.s = [val; 3];
            self.seeded = true;
            return value;
        }
        if value <= self.s[1].1 {
            self.s[1] = val;
            self.s[2] = val;
        } else if value <= self.s[2].1 {
            self.s[2] = val;
        }
        let dt = now - self.s[0].0;
        if dt > self.horizon {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = val;
            if now - self.s[0].0 > self.horizon {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
            }
        } else if self.s[1].0 == self.s[0].0 && dt > self.horizon / 4 {
            self.s[1] = val;
            self.s[2] = val;
        } else if self.s[2].0 == self.s[1].0 && dt > self.horizon / 2 {
            self.s[2] = val;
        }
        self.s[0].1
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    #[test]
    fn window_closes_on_time_and_count_or_drop() {
        let mut w = SampleWindow::new(100 * MS, 10);
        for i in 0..5 {
            w.record(i * MS, 10 * MS, 3);
        }
        assert!(w.try_close(200 * MS, 3).is_none(), "5 < 10 samples and no drop");
        w.record_drop(201 * MS, 7);
        let c = w.try_close(202 * MS, 2).unwrap();
        assert_eq!((c.samples, c.drops, c.max_inflight, c.inflight), (5, 1, 7, 2));
        let err = (c.avg_ns as f64 - (10 * MS) as f64).abs() / (10 * MS) as f64;
        assert!(err < 1e-9);
        assert!((c.p99_ns as f64 - (10 * MS) as f64).abs() / ((10 * MS) as f64) <= 0.05);
        assert!(w.try_close(400 * MS, 0).is_none(), "empty window never closes");
    }

    #[test]
    fn windowed_min_expires_old_minimum() {
        let mut m = WindowedMin::new(100);
        assert_eq!(m.get(), None);
        m.update(0, 10);
        for t in 1..=100 {
            assert_eq!(m.update(t, 20 + t), 10);
        }
        // At t=250 the 10 (t=0) is long gone; the minimum is from the last horizon.
        let mut last = 0;
        for t in 101..=250 {
            last = m.update(t, 500 - t);
        }
        assert_eq!(last, 250);
        assert_eq!(m.update(1_000, 999), 999, "a gap longer than the horizon resets");
    }
}
