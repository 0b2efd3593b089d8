//! The comparison table: plain text for the terminal, Markdown for `docs/sim/table.md`.

use crate::world::RunResult;

/// Column headers.
pub const HEADERS: [&str; 11] = [
    "scenario",
    "protection",
    "offered/s",
    "goodput/s trigger",
    "% of degraded cap",
    "goodput/s after",
    "success crit/norm/bg (trigger)",
    "p50 ms",
    "p99 ms",
    "retry amp",
    "recovery",
];

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.0}%", (v * 100.0).floor()))
}

fn ms(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// The cells of one run's row.
pub fn row(r: &RunResult) -> [String; 11] {
    let s = &r.summary;
    let cap = if s.degraded_capacity > 0.0 {
        format!("{:.0}%", 100.0 * s.goodput_trigger / s.degraded_capacity)
    } else {
        "-".into()
    };
    let succ = s.success_trigger.iter().map(|&x| pct(x)).collect::<Vec<_>>().join("/");
    [
        r.scenario.clone(),
        r.protection.clone(),
        format!("{:.0}", s.offered_trigger),
        format!("{:.0}", s.goodput_trigger),
        cap,
        format!("{:.0}", s.goodput_after),
        succ,
        ms(s.p50_ms),
        ms(s.p99_ms),
        format!("{:.2}x", s.amplification),
        match s.recovery_s {
            None => "never".into(),
            Some(v) => format!("{v:.1}s"),
        },
    ]
}

/// An aligned plain-text table.
pub fn text(runs: &[RunResult]) -> String {
    aligned(&HEADERS, runs.iter().map(|r| row(r).to_vec()).collect())
}

/// Column headers of the per-tenant table (runs of scenarios with tenants).
pub const TENANT_HEADERS: [&str; 10] = [
    "scenario",
    "protection",
    "tenants steady+flooding",
    "steady offered/s",
    "steady goodput",
    "flooding offered/s",
    "flooding goodput",
    "429 per-key steady/flooding",
    "503 global steady/flooding",
    "p99 ms",
];

/// The cells of one run's per-tenant row, if its scenario has tenants.
pub fn tenant_row(r: &RunResult) -> Option<[String; 10]> {
    let t = r.summary.tenants?;
    Some([
        r.scenario.clone(),
        r.protection.clone(),
        format!("{}+{}", t.steady.tenants, t.flooding.tenants),
        format!("{:.0}", t.steady.offered),
        pct(t.steady.goodput_share),
        format!("{:.0}", t.flooding.offered),
        pct(t.flooding.goodput_share),
        format!("{}/{}", t.steady.refused_per_key, t.flooding.refused_per_key),
        format!("{}/{}", t.steady.refused_global, t.flooding.refused_global),
        ms(r.summary.p99_ms),
    ])
}

/// The per-tenant table as aligned text (empty if no run has tenants).
pub fn tenant_text(runs: &[RunResult]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(tenant_row).map(|r| r.to_vec()).collect();
    if rows.is_empty() {
        return String::new();
    }
    aligned(&TENANT_HEADERS, rows)
}

/// The per-tenant table in Markdown (empty if no run has tenants).
pub fn tenant_markdown(runs: &[RunResult]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(tenant_row).map(|r| r.to_vec()).collect();
    if rows.is_empty() {
        return String::new();
    }
    md(&TENANT_HEADERS, rows)
}

/// Column headers of the brownout table (runs of scenarios with optional work).
pub const BROWNOUT_HEADERS: [&str; 10] = [
    "scenario",
    "protection",
    "goodput/s trigger",
    "% of full-content cap",
    "p99 ms trigger",
    "optional served",
    "dimmer mean",
    "dimmer >= 0.1 at",
    "first refusal at",
    "refused",
];

fn after(t: Option<u64>, start: u64) -> String {
    t.map_or("never".into(), |t| format!("+{:.3}s", t.saturating_sub(start) as f64 / 1e9))
}

/// The cells of one run's brownout row, if its scenario has optional work.
pub fn brownout_row(r: &RunResult) -> Option<[String; 10]> {
    let [served, skipped] = r.rec.optional;
    if served + skipped == 0 {
        return None;
    }
    let s = &r.summary;
    let (t0, t1) = r.trigger;
    let b = |t: u64| (t / crate::metrics::BUCKET_NS) as usize;
    let series = &r.rec.dimmer[b(t0).min(r.rec.dimmer.len())..b(t1).min(r.rec.dimmer.len())];
    let known: Vec<f64> = series.iter().copied().filter(|x| !x.is_nan()).collect();
    let mean = (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64);
    let w = &r.rec.work[r.watched];
    let rise = w.dimmer_rise_ns;
    Some([
        r.scenario.clone(),
        r.protection.clone(),
        format!("{:.0}", s.goodput_trigger),
        format!("{:.0}%", 100.0 * s.goodput_trigger / s.degraded_capacity),
        ms(s.p99_trigger_ms),
        format!("{:.0}%", 100.0 * served as f64 / (served + skipped) as f64),
        mean.map_or("-".into(), |m| format!("{m:.2}")),
        if mean.is_some() { after(rise, t0) } else { "-".into() },
        after(w.first_refused_ns, t0),
        w.refused.to_string(),
    ])
}

/// The brownout table as aligned text (empty if no run has optional work).
pub fn brownout_text(runs: &[RunResult]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(brownout_row).map(|r| r.to_vec()).collect();
    if rows.is_empty() {
        return String::new();
    }
    aligned(&BROWNOUT_HEADERS, rows)
}

/// The brownout table in Markdown (empty if no run has optional work).
pub fn brownout_markdown(runs: &[RunResult]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(brownout_row).map(|r| r.to_vec()).collect();
    if rows.is_empty() {
        return String::new();
    }
    md(&BROWNOUT_HEADERS, rows)
}

/// What the brownout columns mean.
pub const BROWNOUT_LEGEND: &str = "\
% of full-content cap: trigger goodput / the capacity with every optional part served
  (above 100%: dimming made room for more requests).
p99 ms trigger: end-to-end latency of the originals that succeeded during the trigger.
optional served: share of the requests started during the trigger that got their optional
  part (the application skips it with probability = the dimmer; without +dimmer, always).
dimmer mean: Gate::brownout of the protected tier during the trigger (sampled every 0.1 s;
  the gate row shows what it would have said).
dimmer >= 0.1 at / first refusal at: when a worker first read the dimmer at 0.1 or more,
  and when the gate first refused or dropped a request, after the trigger's start.
refused: requests refused or dropped by the gate during the trigger.";

/// Column headers of the work table (runs of scenarios with more than one tier).
pub const WORK_HEADERS: [&str; 12] = [
    "scenario",
    "protection",
    "tier",
    "busy worker-s",
    "useful",
    "dead caller",
    "failed below",
    "stopped",
    "avoided worker-s",
    "dropped unstarted",
    "refused",
    "failed fast",
];

/// The cells of one run's work row: its deepest tier (the dependency every request ends
/// at), if the scenario has more than one tier.
pub fn work_row(r: &RunResult) -> Option<[String; 12]> {
    if r.tiers.len() < 2 {
        return None;
    }
    let t = r.tiers.len() - 1;
    let w = r.rec.work[t];
    let busy = w.busy_ns();
    let share = |x: u64| {
        if busy == 0 {
            "-".to_string()
        } else {
            format!("{:.0}%", 100.0 * x as f64 / busy as f64)
        }
    };
    Some([
        r.scenario.clone(),
        r.protection.clone(),
        r.tiers[t].clone(),
        format!("{:.0}", busy as f64 / 1e9),
        share(w.useful_ns),
        share(w.dead_caller_ns),
        share(w.failed_ns),
        share(w.stopped_ns),
        format!("{:.0}", w.avoided_ns as f64 / 1e9),
        w.dead_on_start.to_string(),
        w.refused.to_string(),
        w.failed_fast.to_string(),
    ])
}

/// The work table as aligned text (empty if no run has more than one tier).
pub fn work_text(runs: &[RunResult]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(work_row).map(|r| r.to_vec()).collect();
    if rows.is_empty() {
        return String::new();
    }
    aligned(&WORK_HEADERS, rows)
}

/// The work table in Markdown (empty if no run has more than one tier).
pub fn work_markdown(runs: &[RunResult]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().filter_map(work_row).map(|r| r.to_vec()).collect();
    if rows.is_empty() {
        return String::new();
    }
    md(&WORK_HEADERS, rows)
}

/// What the work columns mean.
pub const WORK_LEGEND: &str = "\
tier: the deepest tier, the dependency every request ends at. Counted for the jobs that
  started there during the trigger; shares are of the busy worker time.
busy worker-s: worker time spent (worker-seconds, all hosts).
useful: work whose success reached a caller still waiting for it.
dead caller: work that succeeded after its caller had given up (done for a dead caller).
failed below: work that ended in a failure (a failure or timeout further down).
stopped: work stopped mid-way when its caller's deadline passed (deadline propagation).
avoided worker-s: the rest of the stopped work, not done.
dropped unstarted: jobs whose caller's deadline had passed when a worker took them.
refused: attempts refused or dropped by the tier's admission (503: limit, queue, CoDel,
  deadline unmeetable or expired) during the trigger.
failed fast: attempts the callers did not send because their remaining budget was below
  the tier's expected latency (deadline propagation) during the trigger.";

fn aligned(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if i < 2 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
            s.push_str("  ");
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&headers.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    out.push_str(&line(&w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>()));
    let mut prev = String::new();
    for r in rows {
        if !prev.is_empty() && prev != r[0] {
            out.push('\n');
        }
        prev = r[0].clone();
        out.push_str(&line(&r));
    }
    out
}

/// A Markdown table.
pub fn markdown(runs: &[RunResult]) -> String {
    md(&HEADERS, runs.iter().map(|r| row(r).to_vec()).collect())
}

fn md(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut out = format!("| {} |\n", headers.join(" | "));
    out.push_str(&format!(
        "|{}\n",
        headers
            .iter()
            .enumerate()
            .map(|(i, _)| if i < 2 { " --- |" } else { " ---: |" })
            .collect::<String>()
    ));
    for r in rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out
}

/// What the columns mean (printed under the table and in `table.md`).
pub const LEGEND: &str = "\
offered/s: original requests per second during the trigger (retries excluded).
goodput/s: originals answered successfully within the client's timeout, per second, during
  the trigger and after it; % of degraded cap = trigger goodput / the bottleneck's capacity
  during the trigger (from the scenario).
success: share of the originals created during the trigger that succeeded, by priority.
p50/p99: end-to-end latency of successful originals over the whole run (retries included).
retry amp: attempts reaching the most-loaded tier / originals, from the trigger's start to
  the end (retries at 3 layers can reach 4^3 = 64x at the deepest one).
recovery: the earliest time after the trigger ends from which goodput over every 1 s window
  stays at or above 80% of the pre-trigger goodput; never = not within the run.";

/// What the per-tenant columns mean.
pub const TENANT_LEGEND: &str = "\
tenants: steady tenants + flooding ones (a tenant floods if its rate rises during the trigger).
offered/s: originals per second the group created during the trigger.
goodput: share of those originals that succeeded (within the client's timeout, retries
  included), i.e. the group's goodput as a share of its offered load.
429 per-key / 503 global: attempts refused over the run by the per-tenant limits
  (KeyLimit / KeyRate) / by the global admission (limit, queue, CoDel, deadline).
p99 ms: end-to-end latency of all successful originals over the run.";
