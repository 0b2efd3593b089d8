//! `cargo run -p surgeguard-sim` (= `make demo`): runs the preset scenarios under the
//! protections each compares, prints one table, writes SVG plots and `table.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use surgeguard_sim::protect::{CLIENT_NAMES, SERVER_NAMES};
use surgeguard_sim::scenario::{preset, presets};
use surgeguard_sim::{plot, report, run, Protection, RunResult, Scenario};

/// The healthy phase's heading (stdout and table.md).
const HEALTHY_TITLE: &str =
    "Healthy phase: the default Gate in front of an 8-slot, 40 ms dependency, no \
     slowdown (20/60/20 priorities, Poisson arrivals, clients with a 1 s timeout and 3 immediate \
     retries; seeds 1-5; the healthy-service suite of `make sweep` covers every mix, arrival \
     pattern and service shape)";

struct Args {
    scenarios: Vec<Scenario>,
    protections: Option<Vec<String>>,
    seed: Option<u64>,
    out: Option<PathBuf>,
    scale: f64,
    dump: bool,
}

fn help() -> String {
    let mut s = String::from(
        "surgeguard-sim: deterministic overload simulator driving the real surgeguard core.

USAGE: cargo run --release -p surgeguard-sim -- [OPTIONS]

With no options: every preset scenario under its default protections, one table on
stdout, SVG plots and table.md written to docs/sim/.

OPTIONS
  -s, --scenario NAME[,NAME]  run these presets (default: all)
  -f, --file PATH             load a scenario from a JSON file (repeatable)
  -p, --protection LIST       comma-separated protections instead of each scenario's own
      --seed N                override the scenarios' seed
      --out DIR               where plots and table.md go (default: docs/sim; `-` = none)
      --time-scale F          multiply every duration by F (quick looks: 0.5)
      --dump                  print the selected scenarios as JSON (a template) and exit
  -h, --help                  this text

SCENARIOS
",
    );
    for sc in presets() {
        s.push_str(&format!(
            "  {:<18} {}\n  {:<18}   source: {}\n",
            sc.name, sc.description, "", sc.source
        ));
    }
    s.push_str(
        "\nPROTECTIONS: [keyed+]SERVER[+CLIENT...], e.g. none, static, aimd, gradient+budget, \
         budget+backoff, keyed+gate\n",
    );
    s.push_str("  server (on every tier with \"protect\": true; default none):\n");
    for (n, d) in SERVER_NAMES {
        s.push_str(&format!("    {n:<12} {d}\n"));
    }
    s.push_str("  client (at every caller: users and tiers):\n");
    for (n, d) in CLIENT_NAMES {
        s.push_str(&format!("    {n:<12} {d}\n"));
    }
    s.push_str("\nMETRICS\n");
    for l in report::LEGEND
        .lines()
        .chain(report::BROWNOUT_LEGEND.lines())
        .chain(report::WORK_LEGEND.lines())
        .chain(report::TENANT_LEGEND.lines())
    {
        s.push_str("  ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn parse() -> Result<Option<Args>, String> {
    let mut a = Args {
        scenarios: Vec::new(),
        protections: None,
        seed: None,
        out: Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .map_or_else(|| PathBuf::from("docs/sim"), |root| root.join("docs").join("sim")),
        ),
        scale: 1.0,
        dump: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{}", help());
                return Ok(None);
            }
            "-s" | "--scenario" => {
                for n in val(&arg)?.split(',') {
                    a.scenarios.push(
                        preset(n.trim())
                            .ok_or_else(|| format!("unknown scenario `{n}` (see --help)"))?,
                    );
                }
            }
            "-f" | "--file" => {
                let p = val(&arg)?;
                let text = std::fs::read_to_string(&p).map_err(|e| format!("{p}: {e}"))?;
                a.scenarios.push(Scenario::from_json(&text).map_err(|e| format!("{p}: {e}"))?);
            }
            "-p" | "--protection" => {
                let list: Vec<String> =
                    val(&arg)?.split(',').map(|s| s.trim().to_string()).collect();
                for p in &list {
                    Protection::parse(p)?;
                }
                a.protections = Some(list);
            }
            "--seed" => a.seed = Some(val(&arg)?.parse().map_err(|_| "--seed needs an integer")?),
            "--out" => {
                let v = val(&arg)?;
                a.out = (v != "-").then(|| PathBuf::from(v));
            }
            "--time-scale" => {
                let f: f64 = val(&arg)?.parse().map_err(|_| "--time-scale needs a number")?;
                if !(f.is_finite() && f > 0.0 && f <= 10.0) {
                    return Err("--time-scale must be in (0, 10]".into());
                }
                a.scale = f;
            }
            "--dump" => a.dump = true,
            other => return Err(format!("unknown option `{other}` (see --help)")),
        }
    }
    if a.scenarios.is_empty() {
        a.scenarios = presets();
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(Some(a)) => a,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.dump {
        for sc in &args.scenarios {
            println!("{}", sc.to_json());
        }
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let mut all: Vec<RunResult> = Vec::new();
    let mut events = 0u64;
    for sc in &args.scenarios {
        let mut sc = if args.scale == 1.0 { sc.clone() } else { sc.time_scaled(args.scale) };
        if let Some(seed) = args.seed {
            sc.seed = seed;
        }
        let names = args.protections.clone().unwrap_or_else(|| sc.protections.clone());
        let names = if names.is_empty() { vec!["none".to_string()] } else { names };
        let mut runs = Vec::new();
        for n in &names {
            let prot = match Protection::parse(n) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let r = run(&sc, &prot);
            events += r.events;
            runs.push(r);
        }
        if let Some(dir) = &args.out {
            if let Err(e) = std::fs::create_dir_all(dir).and_then(|_| {
                std::fs::write(dir.join(format!("{}.svg", sc.name)), plot::svg(&sc, &runs))
            }) {
                eprintln!("error: writing plots to {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
        }
        all.extend(runs);
    }
    print!("{}", report::text(&all));
    println!();
    println!("{}", report::LEGEND);
    let brown = report::brownout_text(&all);
    if !brown.is_empty() {
        println!("\nBrownout (optional work):\n");
        print!("{brown}");
        println!();
        println!("{}", report::BROWNOUT_LEGEND);
    }
    let work = report::work_text(&all);
    if !work.is_empty() {
        println!("\nWhere the deepest tier's work went:\n");
        print!("{work}");
        println!();
        println!("{}", report::WORK_LEGEND);
    }
    let tenants = report::tenant_text(&all);
    if !tenants.is_empty() {
        println!("\nPer tenant:\n");
        print!("{tenants}");
        println!();
        println!("{}", report::TENANT_LEGEND);
    }
    let healthy = surgeguard_sim::healthy::healthy_phase_markdown();
    println!("\n{HEALTHY_TITLE}\n");
    print!("{healthy}");
    println!(
        "\n{} runs, {} events, {:.1} s wall",
        all.len(),
        events,
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = &args.out {
        let mut md = String::from(
            "# Simulator results\n\nGenerated by `make demo` (`cargo run --release -p surgeguard-sim`). \
             Deterministic: the same code and seed give the same table.\n\n",
        );
        for sc in &args.scenarios {
            md.push_str(&format!(
                "- **{}** — {} ({}). ![{}]({}.svg)\n",
                sc.name, sc.description, sc.source, sc.name, sc.name
            ));
        }
        md.push('\n');
        md.push_str(&report::markdown(&all));
        md.push_str("\n```text\n");
        md.push_str(report::LEGEND);
        md.push_str("\n```\n");
        let brown = report::brownout_markdown(&all);
        if !brown.is_empty() {
            md.push_str("\n## Brownout: optional work and the dimmer\n\n");
            md.push_str(&brown);
            md.push_str("\n```text\n");
            md.push_str(report::BROWNOUT_LEGEND);
            md.push_str("\n```\n");
        }
        let work = report::work_markdown(&all);
        if !work.is_empty() {
            md.push_str("\n## Where the deepest tier's work went\n\n");
            md.push_str(&work);
            md.push_str("\n```text\n");
            md.push_str(report::WORK_LEGEND);
            md.push_str("\n```\n");
        }
        let tenants = report::tenant_markdown(&all);
        if !tenants.is_empty() {
            md.push_str("\n## Per tenant\n\n");
            md.push_str(&tenants);
            md.push_str("\n```text\n");
            md.push_str(report::TENANT_LEGEND);
            md.push_str("\n```\n");
        }
        md.push_str(&format!("\n## {HEALTHY_TITLE}\n\n{healthy}"));
        if let Err(e) = std::fs::write(dir.join("table.md"), md) {
            eprintln!("error: writing table.md: {e}");
            return ExitCode::FAILURE;
        }
        println!("plots and table.md written to {}", dir.display());
    }
    ExitCode::SUCCESS
}
