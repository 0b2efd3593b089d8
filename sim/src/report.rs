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
    let rows: Vec<[String; 11]> = runs.iter().map(row).collect();
    let mut w: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
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
    let mut out = line(&HEADERS.map(String::from));
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
    let mut out = format!("| {} |\n", HEADERS.join(" | "));
    out.push_str(&format!(
        "|{}\n",
        HEADERS
            .iter()
            .enumerate()
            .map(|(i, _)| if i < 2 { " --- |" } else { " ---: |" })
            .collect::<String>()
    ));
    for r in runs {
        out.push_str(&format!("| {} |\n", row(r).join(" | ")));
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
