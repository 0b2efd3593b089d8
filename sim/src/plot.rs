//! Hand-written SVG time series: one file per scenario, four stacked panels (offered load,
//! goodput, p99 latency, concurrency limit), one line per protection, the trigger shaded.
//! With a flooding tenant, the goodput panel shows the steady tenants' goodput.

use std::fmt::Write;

use crate::metrics::BUCKET_NS;
use crate::scenario::Scenario;
use crate::world::RunResult;

/// Buckets of the recorder merged into one plotted point (0.5 s).
const MERGE: usize = 5;
const WIDTH: f64 = 920.0;
const PANEL_H: f64 = 150.0;
const GAP: f64 = 34.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 84.0;

/// Okabe–Ito colour-blind-safe palette, then greys.
const COLORS: [&str; 10] = [
    "#d55e00", "#0072b2", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
    "#7f7f7f", "#8c564b",
];

struct Series {
    name: String,
    color: &'static str,
    points: Vec<Option<f64>>,
}

fn merged(v: &[u32]) -> Vec<Option<f64>> {
    v.chunks(MERGE)
        .map(|c| {
            Some(
                c.iter().map(|&x| x as f64).sum::<f64>()
                    / (c.len() as f64 * BUCKET_NS as f64 / 1e9),
            )
        })
        .collect()
}

fn p99_series(r: &RunResult, n: usize) -> Vec<Option<f64>> {
    let width = BUCKET_NS * MERGE as u64;
    let mut by: Vec<Vec<u64>> = vec![Vec::new(); n];
    for o in r.rec.outcomes.iter().filter(|o| o.ok) {
        if let Some(v) = by.get_mut((o.done / width) as usize) {
            v.push(o.done - o.created);
        }
    }
    by.into_iter()
        .map(|mut v| {
            if v.is_empty() {
                return None;
            }
            v.sort_unstable();
            Some(v[((v.len() - 1) as f64 * 0.99).round() as usize] as f64 / 1e6)
        })
        .collect()
}

fn limit_series(r: &RunResult) -> Vec<Option<f64>> {
    r.rec.limit.chunks(MERGE).map(|c| c.last().copied().filter(|x| x.is_finite())).collect()
}

struct Panel<'a> {
    title: &'a str,
    series: Vec<Series>,
    log: bool,
    /// An extra dashed reference series (e.g. the originals).
    reference: Option<(&'a str, Vec<Option<f64>>)>,
}

fn nice_max(m: f64) -> f64 {
    if m <= 0.0 || !m.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(m.log10().floor());
    for k in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if k * p >= m {
            return k * p;
        }
    }
    10.0 * p
}

fn fmt_num(x: f64) -> String {
    if x >= 10_000.0 || (x >= 1000.0 && (x / 1000.0).fract() == 0.0) {
        format!("{:.0}k", x / 1000.0)
    } else if x >= 1.0 || x == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Per bucket, the originals of the steady (non-flooding) tenants that succeeded (by
/// success time; `ok_only`) or that were created.
fn steady(r: &RunResult, flooding: &[bool], ok_only: bool) -> Vec<u32> {
    let mut v = vec![0u32; r.rec.buckets()];
    let is_steady = |t: usize| !flooding.get(t).copied().unwrap_or(false);
    if !ok_only {
        for (_, created) in
            r.rec.originals_by_tenant.iter().enumerate().filter(|(t, _)| is_steady(*t))
        {
            for (x, c) in v.iter_mut().zip(created) {
                *x += c;
            }
        }
        return v;
    }
    for o in &r.rec.outcomes {
        let Some(t) = o.tenant else { continue };
        if !o.ok || !is_steady(t as usize) {
            continue;
        }
        if let Some(x) = v.get_mut((o.done / BUCKET_NS) as usize) {
            *x += 1;
        }
    }
    v
}

/// Renders the plot of one scenario's runs.
pub fn svg(sc: &Scenario, runs: &[RunResult]) -> String {
    let n = runs.first().map_or(0, |r| r.rec.buckets().div_ceil(MERGE));
    let color = |i: usize| COLORS[i % COLORS.len()];
    let mk = |f: &dyn Fn(&RunResult) -> Vec<Option<f64>>| -> Vec<Series> {
        runs.iter()
            .enumerate()
            .map(|(i, r)| Series { name: r.protection.clone(), color: color(i), points: f(r) })
            .collect()
    };
    let flooding = sc.flooding_tenants();
    let mut panels = vec![
        Panel {
            title:
                "offered load at the first tier, req/s (attempts incl. retries; dashed: originals)",
            series: mk(&|r| merged(&r.rec.attempts_top)),
            log: false,
            reference: runs.first().map(|r| ("originals", merged(&r.rec.originals))),
        },
        if flooding.iter().any(|&f| f) {
            // Tenants: the steady tenants' goodput is the story (the flood's is not wanted).
            Panel {
                title: "goodput of the steady tenants, req/s (dashed: their originals)",
                series: mk(&|r| merged(&steady(r, &flooding, true))),
                log: false,
                reference: runs
                    .first()
                    .map(|r| ("originals", merged(&steady(r, &flooding, false)))),
            }
        } else {
            Panel {
                title: "goodput, req/s (originals answered within the client's timeout)",
                series: mk(&|r| merged(&r.rec.good)),
                log: false,
                reference: None,
            }
        },
        Panel {
            title: "p99 latency of successful requests, ms (log scale)",
            series: mk(&|r| p99_series(r, n)),
            log: true,
            reference: None,
        },
        Panel {
            title: "concurrency limit of the protected tier (sum over hosts)",
            series: mk(&limit_series),
            log: false,
            reference: None,
        },
    ];
    if sc.tiers.iter().any(|t| t.optional_cost > 0.0) {
        panels.push(Panel {
            title: "brownout dimmer of the protected tier (Gate::brownout; optional work \
                    is skipped with this probability under +dimmer)",
            series: mk(&|r| {
                r.rec
                    .dimmer
                    .chunks(MERGE)
                    .map(|c| c.last().copied().filter(|x| x.is_finite()))
                    .collect()
            }),
            log: false,
            reference: None,
        });
    }
    let height = TOP + panels.len() as f64 * (PANEL_H + GAP) + 10.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let dur = sc.duration_s;
    let x_of =
        |i: usize| LEFT + plot_w * ((i as f64 + 0.5) * MERGE as f64 * BUCKET_NS as f64 / 1e9) / dur;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{} — {}</text>"#,
        esc(&sc.name),
        esc(&sc.source)
    );
    let _ = writeln!(o, r##"<text x="{LEFT}" y="34" fill="#444">{}</text>"##, esc(&sc.description));
    // Legend.
    let mut lx = LEFT;
    for (i, r) in runs.iter().enumerate() {
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="52" x2="{}" y2="52" stroke="{}" stroke-width="3"/><text x="{}" y="56">{}</text>"#,
            lx + 18.0,
            color(i),
            lx + 22.0,
            esc(&r.protection)
        );
        lx += 30.0 + 7.0 * r.protection.len() as f64;
    }
    let (t0, t1) = (sc.trigger.start_s, sc.trigger.end_s);
    for (pi, p) in panels.iter().enumerate() {
        let y0 = TOP + pi as f64 * (PANEL_H + GAP);
        let vals = p
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .chain(p.reference.iter().flat_map(|r| r.1.iter()))
            .flatten()
            .copied();
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for v in vals {
            if v > 0.0 {
                lo = lo.min(v);
            }
            hi = hi.max(v);
        }
        let (ymin, ymax) = if p.log {
            let lo = if lo.is_finite() { 10f64.powf(lo.log10().floor()) } else { 1.0 };
            let hi = if hi > 0.0 { 10f64.powf(hi.log10().ceil()) } else { 10.0 };
            (lo.max(0.1), hi.max(lo * 10.0))
        } else {
            (0.0, nice_max(hi))
        };
        let y_of = |v: f64| -> f64 {
            let f = if p.log {
                (v.max(ymin).log10() - ymin.log10()) / (ymax.log10() - ymin.log10())
            } else {
                v / ymax
            };
            y0 + PANEL_H * (1.0 - f.clamp(0.0, 1.0))
        };
        let _ = writeln!(
            o,
            r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#,
            y0 - 6.0,
            esc(p.title)
        );
        let xs = |t: f64| LEFT + plot_w * t / dur;
        let _ = writeln!(
            o,
            r##"<rect x="{}" y="{y0}" width="{}" height="{PANEL_H}" fill="#fbe3d6"/>"##,
            xs(t0),
            xs(t1) - xs(t0)
        );
        let _ = writeln!(
            o,
            r##"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#999"/>"##
        );
        // Y ticks.
        let ticks: Vec<f64> = if p.log {
            let mut v = Vec::new();
            let mut t = ymin;
            while t <= ymax * 1.0001 {
                v.push(t);
                t *= 10.0;
            }
            v
        } else {
            (0..=4).map(|k| ymax * k as f64 / 4.0).collect()
        };
        for t in ticks {
            let y = y_of(t);
            let _ = writeln!(
                o,
                r##"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#e5e5e5"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 4.0,
                y + 4.0,
                fmt_num(t)
            );
        }
        // X ticks every 5 s.
        let mut t = 0.0;
        while t <= dur + 1e-9 {
            let x = xs(t);
            let _ = writeln!(
                o,
                r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#999"/><text x="{x}" y="{}" text-anchor="middle">{t:.0}s</text>"##,
                y0 + PANEL_H,
                y0 + PANEL_H + 4.0,
                y0 + PANEL_H + 15.0
            );
            t += 5.0;
        }
        let line = |o: &mut String, pts: &[Option<f64>], color: &str, dash: &str| {
            let mut d = String::new();
            let mut pen = false;
            for (i, v) in pts.iter().enumerate() {
                match v {
                    Some(v) => {
                        let _ = write!(
                            d,
                            "{}{:.1},{:.1} ",
                            if pen { "L" } else { "M" },
                            x_of(i),
                            y_of(*v)
                        );
                        pen = true;
                    }
                    None => pen = false,
                }
            }
            if !d.is_empty() {
                let _ = writeln!(
                    o,
                    r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6" stroke-opacity="0.9"{dash}/>"#
                );
            }
        };
        if let Some((_, pts)) = &p.reference {
            line(&mut o, pts, "#000", r#" stroke-dasharray="4 3""#);
        }
        for s in &p.series {
            line(&mut o, &s.points, s.color, "");
        }
        let _ = &p.series.first().map(|s| &s.name);
    }
    let _ = writeln!(o, "</svg>");
    o
}
