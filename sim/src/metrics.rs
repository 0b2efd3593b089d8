//! What a run measured: per-bucket time series (for the plots) and every finished original
//! request (for the summary).
//!
//! Definitions:
//! - **offered load**: original requests created per second (retries excluded);
//! - **goodput**: originals that succeeded, per second, counted when they succeed. An attempt
//!   succeeds only if its response reaches the caller before the attempt's timeout (the
//!   client's deadline), so work finished after the caller gave up never counts;
//! - **success rate by priority**: succeeded / finished originals created in the window;
//! - **latency**: from the original's creation to its success (retries included), p50 / p99;
//! - **retry amplification**: attempts that reached the most-loaded tier ÷ originals, both
//!   counted from the trigger's start to the end of the run (1.0 = no retries; with retries
//!   at 3 layers the deepest tier can see up to 4³ = 64×);
//! - **per tenant** (scenarios whose load names tenants): the originals of the
//!   steady and of the flooding tenants created during the trigger, per second, and the
//!   share of them that succeeded (goodput as a share of offered load); attempts refused
//!   over the run, per-key (429: `Reason::KeyLimit` / `KeyRate`) or global (503: any other
//!   reason), by group;
//! - **time to recover**: the earliest time after the trigger ends from which goodput over
//!   every 1 s window stays at or above 80 % of the pre-trigger goodput (`None`: not within
//!   the run).

/// Width of one time-series bucket.
pub const BUCKET_NS: u64 = 100_000_000;
/// Rolling window used to judge recovery.
pub const RECOVERY_WINDOW_NS: u64 = 1_000_000_000;
/// Recovered = goodput at or above this share of the pre-trigger goodput (0.8: a 1 s window
/// at 500 req/s is 4.5 standard deviations of Poisson noise away from it).
pub const RECOVERED_SHARE: f64 = 0.8;

/// Where one tier's worker time went, for the jobs that *started* during the trigger
/// (nanoseconds of worker time, summed over hosts), and what its admission and callers
/// turned away meanwhile.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkStats {
    /// Work that ended in a success its caller was still waiting for (the response
    /// reached it before the attempt's timeout).
    pub useful_ns: u64,
    /// Work that succeeded after its caller had given up: done for a dead caller.
    pub dead_caller_ns: u64,
    /// Work that ended in a failure (a failure or timeout below this tier).
    pub failed_ns: u64,
    /// Work stopped mid-way because its caller's deadline passed (what was done before the
    /// stop is lost too).
    pub stopped_ns: u64,
    /// Work not done thanks to those stops (the rest of each stopped job).
    pub avoided_ns: u64,
    /// Jobs whose deadline had passed when a worker picked them up, dropped unstarted.
    pub dead_on_start: u64,
    /// Attempts to this tier refused or dropped by its admission (503s).
    pub refused: u64,
    /// When the first of them was, ns.
    pub first_refused_ns: Option<u64>,
    /// When a worker first read the Gate's brownout dimmer at 0.1 or more, ns (Gate
    /// policies with optional work; the dimmer is read whether or not it is obeyed).
    pub dimmer_rise_ns: Option<u64>,
    /// Attempts to this tier its callers did not send: the remaining budget was below the
    /// tier's expected latency (fail fast).
    pub failed_fast: u64,
}

impl WorkStats {
    /// Worker time spent, every kind.
    pub fn busy_ns(&self) -> u64 {
        self.useful_ns + self.dead_caller_ns + self.failed_ns + self.stopped_ns
    }
}

/// One finished original request.
#[derive(Clone, Copy, Debug)]
pub struct UserOutcome {
    /// Created at (ns).
    pub created: u64,
    /// Succeeded or finally failed at (ns).
    pub done: u64,
    /// Priority level.
    pub level: u8,
    /// Whether it succeeded.
    pub ok: bool,
    /// The tenant (index into `Scenario::tenants`), if its load class names one.
    pub tenant: Option<u16>,
}

/// Time series and outcomes of one run.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    /// Originals created per bucket.
    pub originals: Vec<u32>,
    /// Attempts sent to the first tier per bucket (originals and retries).
    pub attempts_top: Vec<u32>,
    /// Attempts sent to each tier per bucket (`[tier][bucket]`).
    pub attempts_by_tier: Vec<Vec<u32>>,
    /// Originals that succeeded per bucket (by success time).
    pub good: Vec<u32>,
    /// The first protected tier's limit, summed over live hosts, at each bucket's end
    /// (NaN: the policy has no limit).
    pub limit: Vec<f64>,
    /// Requests waiting at the first tier (policy queue + worker-pool queue) at each bucket's
    /// end.
    pub waiting: Vec<u32>,
    /// Every finished original.
    pub outcomes: Vec<UserOutcome>,
    /// Attempts refused per tenant (by index), `[per-key (429), global (503)]`.
    pub refused_by_tenant: Vec<[u64; 2]>,
    /// Attempts of no tenant refused, `[per-key, global]`.
    pub refused_anonymous: [u64; 2],
    /// Originals created per bucket, per tenant (`[tenant][bucket]`).
    pub originals_by_tenant: Vec<Vec<u32>>,
    /// Where each tier's worker time went during the trigger (`[tier]`).
    pub work: Vec<WorkStats>,
    /// Jobs started during the trigger with optional work (`TierSpec::optional_cost`):
    /// `[served, skipped]`.
    pub optional: [u64; 2],
    /// The brownout dimmer (`Gate::brownout`) of the watched tier, averaged over its live
    /// hosts, at each bucket's end (NaN: the policy has none).
    pub dimmer: Vec<f64>,
}

fn bump(v: &mut [u32], t: u64) {
    if let Some(x) = v.get_mut((t / BUCKET_NS) as usize) {
        *x += 1;
    }
}

impl Recorder {
    /// A recorder for a run of `duration_ns` over `tiers` tiers.
    pub fn new(duration_ns: u64, tiers: usize) -> Self {
        let n = duration_ns.div_ceil(BUCKET_NS) as usize;
        Self {
            originals: vec![0; n],
            attempts_top: vec![0; n],
            attempts_by_tier: vec![vec![0; n]; tiers],
            good: vec![0; n],
            limit: vec![f64::NAN; n],
            waiting: vec![0; n],
            outcomes: Vec::new(),
            refused_by_tenant: Vec::new(),
            refused_anonymous: [0; 2],
            originals_by_tenant: Vec::new(),
            work: vec![WorkStats::default(); tiers],
            optional: [0; 2],
            dimmer: vec![f64::NAN; n],
        }
    }

    /// An attempt of `tenant` was refused by an admission policy, `per_key` (429) or not
    /// (503).
    pub fn refused(&mut self, tenant: Option<u16>, per_key: bool) {
        let slot = match tenant {
            Some(t) => {
                let t = t as usize;
                if self.refused_by_tenant.len() <= t {
                    self.refused_by_tenant.resize(t + 1, [0; 2]);
                }
                &mut self.refused_by_tenant[t]
            }
            None => &mut self.refused_anonymous,
        };
        slot[usize::from(!per_key)] += 1;
    }

    /// Buckets in the run.
    pub fn buckets(&self) -> usize {
        self.originals.len()
    }

    /// An original of `tenant` (if any) was created.
    pub fn original(&mut self, now: u64, tenant: Option<u16>) {
        bump(&mut self.originals, now);
        if let Some(t) = tenant {
            let t = t as usize;
            if self.originals_by_tenant.len() <= t {
                let n = self.buckets();
                self.originals_by_tenant.resize(t + 1, vec![0; n]);
            }
            bump(&mut self.originals_by_tenant[t], now);
        }
    }

    /// An attempt went out to tier `tier`.
    pub fn attempt(&mut self, now: u64, tier: usize) {
        if tier == 0 {
            bump(&mut self.attempts_top, now);
        }
        if let Some(v) = self.attempts_by_tier.get_mut(tier) {
            bump(v, now);
        }
    }

    /// An original finished.
    pub fn finished(&mut self, o: UserOutcome) {
        if o.ok {
            bump(&mut self.good, o.done);
        }
        self.outcomes.push(o);
    }

    /// Samples the gauges for the bucket containing `now`.
    pub fn sample(&mut self, now: u64, limit: Option<f64>, waiting: u32) {
        let i = (now / BUCKET_NS) as usize;
        if i < self.limit.len() {
            self.limit[i] = limit.unwrap_or(f64::NAN);
            self.waiting[i] = waiting;
        }
    }

    fn range(&self, from_ns: u64, to_ns: u64) -> std::ops::Range<usize> {
        let a = ((from_ns / BUCKET_NS) as usize).min(self.buckets());
        let b = (to_ns.div_ceil(BUCKET_NS) as usize).min(self.buckets());
        a..b.max(a)
    }

    fn per_second(&self, v: &[u32], from_ns: u64, to_ns: u64) -> f64 {
        let r = self.range(from_ns, to_ns);
        let secs = r.len() as f64 * BUCKET_NS as f64 / 1e9;
        if secs == 0.0 {
            return 0.0;
        }
        v[r].iter().map(|&x| x as f64).sum::<f64>() / secs
    }

    /// Originals created per second in `[from, to)` (bucket-aligned).
    pub fn offered(&self, from_ns: u64, to_ns: u64) -> f64 {
        self.per_second(&self.originals, from_ns, to_ns)
    }

    /// Goodput in `[from, to)`: originals succeeded per second.
    pub fn goodput(&self, from_ns: u64, to_ns: u64) -> f64 {
        self.per_second(&self.good, from_ns, to_ns)
    }

    /// Attempts at the most-loaded tier ÷ originals, in `[from, to)`.
    pub fn amplification(&self, from_ns: u64, to_ns: u64) -> f64 {
        let r = self.range(from_ns, to_ns);
        let o: u64 = self.originals[r.clone()].iter().map(|&x| x as u64).sum();
        let a: u64 = self
            .attempts_by_tier
            .iter()
            .map(|v| v[r.clone()].iter().map(|&x| x as u64).sum())
            .max()
            .unwrap_or(0);
        if o == 0 {
            0.0
        } else {
            a as f64 / o as f64
        }
    }

    /// Success rate of the originals of `level` created in `[from, to)` that finished.
    pub fn success_rate(&self, level: u8, from_ns: u64, to_ns: u64) -> Option<f64> {
        let (mut ok, mut all) = (0u64, 0u64);
        for o in &self.outcomes {
            if o.level == level && o.created >= from_ns && o.created < to_ns {
                all += 1;
                ok += o.ok as u64;
            }
        }
        (all > 0).then(|| ok as f64 / all as f64)
    }

    /// Latency percentiles (`qs` in [0, 1]) of the originals that succeeded in
    /// `[from, to)`, ns. `None` when nothing succeeded.
    pub fn latency(&self, qs: &[f64], from_ns: u64, to_ns: u64) -> Option<Vec<u64>> {
        let mut lat: Vec<u64> = self
            .outcomes
            .iter()
            .filter(|o| o.ok && o.done >= from_ns && o.done < to_ns)
            .map(|o| o.done - o.created)
            .collect();
        if lat.is_empty() {
            return None;
        }
        lat.sort_unstable();
        Some(qs.iter().map(|q| lat[((lat.len() - 1) as f64 * q).round() as usize]).collect())
    }

    /// The earliest time after `trigger_end` from which goodput over every 1 s window
    /// (sliding by one bucket, up to the run's end) is at least [`RECOVERED_SHARE`] of
    /// `baseline` (originals/s), as a delay from `trigger_end`. `None`: the last window is
    /// still below.
    pub fn recovery(&self, trigger_end: u64, run_end: u64, baseline: f64) -> Option<u64> {
        let w = (RECOVERY_WINDOW_NS / BUCKET_NS) as usize;
        let start = trigger_end.div_ceil(BUCKET_NS) as usize;
        let end = ((run_end / BUCKET_NS) as usize).min(self.buckets());
        if end < start + w {
            return None;
        }
        let threshold = RECOVERED_SHARE * baseline * (RECOVERY_WINDOW_NS as f64 / 1e9);
        let mut last_bad: Option<usize> = None; // start bucket of the last bad window
        for s in start..=end - w {
            let sum: u32 = self.good[s..s + w].iter().sum();
            if (sum as f64) < threshold {
                last_bad = Some(s);
            }
        }
        match last_bad {
            None => Some(start as u64 * BUCKET_NS - trigger_end),
            Some(s) if s == end - w => None,
            Some(s) => Some((s as u64 + 1) * BUCKET_NS - trigger_end),
        }
    }
}

/// The numbers of one run, as the table shows them.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Originals/s during the trigger.
    pub offered_trigger: f64,
    /// Goodput before the trigger (the baseline for recovery).
    pub goodput_before: f64,
    /// Goodput during the trigger.
    pub goodput_trigger: f64,
    /// Goodput after the trigger.
    pub goodput_after: f64,
    /// The bottleneck's capacity during the trigger (from the scenario).
    pub degraded_capacity: f64,
    /// Success rate per level (critical, normal, background) over the whole run.
    pub success: [Option<f64>; 3],
    /// Success rate per level for originals created during the trigger.
    pub success_trigger: [Option<f64>; 3],
    /// p50 and p99 latency of successes over the whole run, ms.
    pub p50_ms: Option<f64>,
    /// See `p50_ms`.
    pub p99_ms: Option<f64>,
    /// p99 during the trigger, ms.
    pub p99_trigger_ms: Option<f64>,
    /// Retry amplification from the trigger's start to the end.
    pub amplification: f64,
    /// Time to recover after the trigger ends, s.
    pub recovery_s: Option<f64>,
    /// Per-tenant numbers, if the scenario has tenants.
    pub tenants: Option<TenantSummary>,
}

/// One group of tenants (steady or flooding) in a [`TenantSummary`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TenantGroup {
    /// Tenants in the group.
    pub tenants: usize,
    /// Their originals created during the trigger, per second.
    pub offered: f64,
    /// Share of those originals that succeeded (`None`: there were none).
    pub goodput_share: Option<f64>,
    /// Their attempts refused per key over the run (429).
    pub refused_per_key: u64,
    /// Their attempts refused by the global admission over the run (503).
    pub refused_global: u64,
}

/// The per-tenant view of a run: steady tenants against the flooding ones.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TenantSummary {
    /// Tenants whose rate does not rise during the trigger.
    pub steady: TenantGroup,
    /// Tenants whose rate rises during the trigger.
    pub flooding: TenantGroup,
}

impl TenantSummary {
    /// Splits `rec` by `flooding` (one flag per tenant index) over the trigger `[t0, t1)`;
    /// `None` if there are no tenants.
    pub fn of(rec: &Recorder, trigger: (u64, u64), flooding: &[bool]) -> Option<Self> {
        if flooding.is_empty() {
            return None;
        }
        let (t0, t1) = trigger;
        let secs = (t1 - t0) as f64 / 1e9;
        let mut groups = [TenantGroup::default(); 2];
        let mut counts = [(0u64, 0u64); 2];
        for &f in flooding {
            groups[f as usize].tenants += 1;
        }
        for o in &rec.outcomes {
            let Some(t) = o.tenant else { continue };
            if o.created >= t0 && o.created < t1 {
                let g = flooding.get(t as usize).copied().unwrap_or(false) as usize;
                counts[g].0 += 1;
                counts[g].1 += o.ok as u64;
            }
        }
        for (t, r) in rec.refused_by_tenant.iter().enumerate() {
            let g = &mut groups[flooding.get(t).copied().unwrap_or(false) as usize];
            g.refused_per_key += r[0];
            g.refused_global += r[1];
        }
        for (g, (all, ok)) in groups.iter_mut().zip(counts) {
            g.offered = all as f64 / secs;
            g.goodput_share = (all > 0).then(|| ok as f64 / all as f64);
        }
        let [steady, flooding] = groups;
        Some(Self { steady, flooding })
    }
}

impl Summary {
    /// Computes the summary of `rec` for a run with the given trigger and length;
    /// `flooding` flags each tenant (empty: no tenants).
    pub fn of(
        rec: &Recorder,
        trigger: (u64, u64),
        run_end: u64,
        degraded_capacity: f64,
        flooding: &[bool],
    ) -> Self {
        let (t0, t1) = trigger;
        // Skip the first second (empty system warming up) in the baseline.
        let warm = (1_000_000_000u64).min(t0 / 2);
        let goodput_before = rec.goodput(warm, t0);
        let ms = |ns: u64| ns as f64 / 1e6;
        let lat = rec.latency(&[0.5, 0.99], 0, run_end);
        Summary {
            offered_trigger: rec.offered(t0, t1),
            goodput_before,
            goodput_trigger: rec.goodput(t0, t1),
            goodput_after: rec.goodput(t1, run_end),
            degraded_capacity,
            success: core::array::from_fn(|l| rec.success_rate(l as u8, 0, run_end)),
            success_trigger: core::array::from_fn(|l| rec.success_rate(l as u8, t0, t1)),
            p50_ms: lat.as_ref().map(|v| ms(v[0])),
            p99_ms: lat.as_ref().map(|v| ms(v[1])),
            p99_trigger_ms: rec.latency(&[0.99], t0, t1).map(|v| ms(v[0])),
            amplification: rec.amplification(t0, run_end),
            recovery_s: rec.recovery(t1, run_end, goodput_before).map(|ns| ns as f64 / 1e9),
            tenants: TenantSummary::of(rec, trigger, flooding),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const S: u64 = 1_000_000_000;

    #[test]
    fn recovery_is_the_end_of_the_last_bad_window() {
        let mut r = Recorder::new(10 * S, 1);
        // 100 successes per bucket (1,000/s) except a hole in [5 s, 6 s).
        for b in 0..100u64 {
            if !(50..60).contains(&b) {
                for _ in 0..100 {
                    r.finished(UserOutcome {
                        created: 0,
                        done: b * BUCKET_NS,
                        level: 1,
                        ok: true,
                        tenant: None,
                    });
                }
            }
        }
        assert_eq!(r.goodput(0, S), 1000.0);
        // The trigger ended at 4 s; the last 1 s window below 800 starts at 5.7 s (it holds
        // 0.3 s of the hole), so every window from 5.8 s on is good: 1.8 s.
        assert_eq!(r.recovery(4 * S, 10 * S, 1000.0), Some(1_800_000_000));
        assert_eq!(r.recovery(7 * S, 10 * S, 1000.0), Some(0));
        assert_eq!(r.recovery(4 * S, 10 * S, 2000.0), None);
    }

    #[test]
    fn success_and_latency_by_window() {
        let mut r = Recorder::new(2 * S, 1);
        r.finished(UserOutcome { created: 0, done: 10, level: 0, ok: true, tenant: None });
        r.finished(UserOutcome { created: 5, done: 30, level: 0, ok: false, tenant: None });
        assert_eq!(r.success_rate(0, 0, S), Some(0.5));
        assert_eq!(r.success_rate(1, 0, S), None);
        assert_eq!(r.latency(&[0.5], 0, S), Some(vec![10]));
    }

    #[test]
    fn tenants_split_into_steady_and_flooding() {
        let mut r = Recorder::new(4 * S, 1);
        let o = |created: u64, ok: bool, tenant: u16| UserOutcome {
            created,
            done: created + 10,
            level: 1,
            ok,
            tenant: Some(tenant),
        };
        // Trigger [1 s, 3 s): tenant 0 steady (2 of 2 ok), tenant 1 floods (1 of 4 ok).
        for (c, ok, t) in [(S, true, 0), (2 * S, true, 0), (0, false, 0)] {
            r.finished(o(c, ok, t));
        }
        for (c, ok) in [(S, true), (S, false), (2 * S, false), (2 * S, false)] {
            r.finished(o(c, ok, 1));
        }
        r.refused(Some(1), true);
        r.refused(Some(1), true);
        r.refused(Some(0), false);
        r.refused(None, true);
        let t = TenantSummary::of(&r, (S, 3 * S), &[false, true]).unwrap();
        assert_eq!((t.steady.tenants, t.flooding.tenants), (1, 1));
        assert_eq!((t.steady.offered, t.flooding.offered), (1.0, 2.0));
        assert_eq!((t.steady.goodput_share, t.flooding.goodput_share), (Some(1.0), Some(0.25)));
        assert_eq!((t.flooding.refused_per_key, t.flooding.refused_global), (2, 0));
        assert_eq!((t.steady.refused_per_key, t.steady.refused_global), (0, 1));
        assert_eq!(r.refused_anonymous, [1, 0]);
        assert_eq!(TenantSummary::of(&r, (S, 3 * S), &[]), None);
    }
}
