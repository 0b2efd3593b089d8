//! The robustness sweep: every limit algorithm on every closed-loop scenario over many seeds,
//! summarised as min / median goodput and p99 (`make sweep`; a reduced run is a test).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, Gradient2Config, GradientConfig, HysteresisConfig, VegasConfig,
};
use surgeguard_core::time::SEC;

use crate::closed_loop::scenarios::{self, Named};
use crate::closed_loop::{run, score, Real, Scenario, Score, Static};

/// One row of the sweep: an algorithm (through the real limiter) or a static limit.
#[derive(Clone, Copy, Debug)]
pub struct Algo {
    /// Row label.
    pub name: &'static str,
    /// `None`: a static limit of `floor`.
    pub config: Option<AlgorithmConfig>,
    /// The algorithm's floor (`min_limit`).
    pub floor: f64,
    /// A peer's parity configuration (counts for "best peer"), not one of our defaults.
    pub peer: bool,
}

/// The default algorithm's row label.
pub const DEFAULT: &str = "gradient (default)";

/// The crate's algorithms in their default configurations, then the peers' parity
/// configurations (Netflix concurrency-limits, Envoy) and a static limit of 64.
pub fn algorithms() -> Vec<Algo> {
    use AlgorithmConfig as A;
    let ours = |name, config: AlgorithmConfig, floor| Algo {
        name,
        config: Some(config),
        floor,
        peer: false,
    };
    let peer = |name, config: AlgorithmConfig, floor| Algo {
        name,
        config: Some(config),
        floor,
        peer: true,
    };
    let g = gradient_override(GradientConfig::default());
    let g2 = Gradient2Config::default();
    let v = VegasConfig::default();
    let a = AimdConfig::default();
    let h = HysteresisConfig::default();
    let na = AimdConfig::netflix();
    let ng2 = Gradient2Config::netflix();
    vec![
        ours(DEFAULT, A::Gradient(g), g.min_limit),
        ours("gradient2", A::Gradient2(g2), g2.min_limit),
        ours("vegas", A::Vegas(v), v.min_limit),
        ours("aimd", A::Aimd(a), a.min_limit),
        ours("hysteresis", A::Hysteresis(h), h.min_limit),
        peer("netflix aimd", A::Aimd(na), na.min_limit),
        peer("netflix gradient2", A::Gradient2(ng2), ng2.min_limit),
        peer("envoy (probe 10 s)", A::Gradient(GradientConfig::envoy(10 * SEC)), 3.0),
        Algo { name: "static 64", config: None, floor: 64.0, peer: true },
    ]
}

/// The default Gradient's row with the fields named in `SWEEP_GRADIENT` replaced
/// (`buffer=0.2,headroom=1`: `buffer`, `headroom`, `smoothing`, `backoff`, `initial_limit`,
/// `sample_percentile`, `drop_tolerance`, `app_limited_ratio`), to try a tuning against
/// every scenario. A name or value it cannot read panics with the entry.
/// `SWEEP_GRADIENT=key=value,...` overrides of a Gradient config (see the sweep binary).
pub fn gradient_override(mut g: GradientConfig) -> GradientConfig {
    let Ok(spec) = std::env::var("SWEEP_GRADIENT") else { return g };
    for entry in spec.split(',').filter(|e| !e.is_empty()) {
        let value = entry.split_once('=').and_then(|(k, v)| Some((k, v.parse::<f64>().ok()?)));
        let Some((key, x)) = value else { panic!("SWEEP_GRADIENT: cannot read {entry:?}") };
        match key {
            "buffer" => g.buffer = x,
            "headroom" => g.headroom = x,
            "smoothing" => g.smoothing = x,
            "backoff" => g.backoff = x,
            "initial_limit" => g.initial_limit = x,
            "sample_percentile" => g.sample_percentile = x,
            "drop_tolerance" => g.drop_tolerance = x,
            "app_limited_ratio" => g.app_limited_ratio = x,
            _ => panic!("SWEEP_GRADIENT: no field {key:?}"),
        }
    }
    g
}

/// Runs one algorithm on one scenario instance.
pub fn run_one(algo: &Algo, s: &Scenario) -> Score {
    let r = match algo.config {
        Some(c) => run(s, &mut Real::new(c)),
        None => run(s, &mut Static::new(algo.floor)),
    };
    let floor = if algo.config.is_some() { algo.floor } else { 0.0 };
    score(s, &r, floor)
}

/// The scores of every seed of one (scenario, algorithm) cell.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    /// One score per seed, in seed order.
    pub scores: Vec<Score>,
}

fn sorted(v: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    v
}

impl Cell {
    /// Min, median, max of goodput.
    pub fn goodput(&self) -> (f64, f64, f64) {
        spread(&sorted(self.scores.iter().map(|s| s.goodput)))
    }
    /// Min, median, max of p99 (ms).
    pub fn p99(&self) -> (f64, f64, f64) {
        spread(&sorted(self.scores.iter().map(|s| s.p99_ms)))
    }
    /// Seeds that sat at their floor with idle capacity for 2 s or more.
    pub fn stuck_seeds(&self) -> usize {
        self.scores.iter().filter(|s| s.stuck_s >= 2.0).count()
    }
}

fn spread(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// The sweep's result: `cells[scenario][algorithm]`.
pub struct Sweep {
    /// Scenario names (rows).
    pub scenarios: Vec<&'static str>,
    /// Algorithms (columns).
    pub algos: Vec<Algo>,
    /// The cells.
    pub cells: Vec<Vec<Cell>>,
}

/// Runs `seeds` seeds (1..=seeds) of every scenario in `which` for every algorithm in
/// `algos`, on `threads` threads. Deterministic whatever the thread count.
pub fn sweep(which: &[Named], algos: &[Algo], seeds: u64, threads: usize) -> Sweep {
    let jobs: Vec<(usize, usize, u64)> = (0..which.len())
        .flat_map(|s| (0..algos.len()).flat_map(move |a| (1..=seeds).map(move |k| (s, a, k))))
        .collect();
    let results = Mutex::new(vec![Score::default(); jobs.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(s, a, k)) = jobs.get(i) else { break };
                let sc = (which[s].1)(k);
                let out = run_one(&algos[a], &sc);
                results.lock().expect("no panics while held")[i] = out;
            });
        }
    });
    let results = results.into_inner().expect("no panics while held");
    let mut cells = vec![vec![Cell::default(); algos.len()]; which.len()];
    for (i, &(s, a, _)) in jobs.iter().enumerate() {
        cells[s][a].scores.push(results[i]);
    }
    Sweep { scenarios: which.iter().map(|w| w.0).collect(), algos: algos.to_vec(), cells }
}

impl Sweep {
    /// The best median goodput among the peers' rows in scenario `s`.
    pub fn best_peer_median(&self, s: usize) -> f64 {
        self.algos
            .iter()
            .zip(&self.cells[s])
            .filter(|(a, _)| a.peer)
            .map(|(_, c)| c.goodput().1)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// Index of the default algorithm's column.
    pub fn default_index(&self) -> Option<usize> {
        self.algos.iter().position(|a| a.name == DEFAULT)
    }

    /// A markdown table: one row per (scenario, algorithm), goodput and p99 as min / median.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| scenario | algorithm | goodput % min / median | p99 ms median / max | seeds stuck at floor |\n|---|---|---|---|---|\n",
        );
        for (s, name) in self.scenarios.iter().enumerate() {
            for (a, algo) in self.algos.iter().enumerate() {
                let c = &self.cells[s][a];
                let (gmin, gmed, _) = c.goodput();
                let (_, pmed, pmax) = c.p99();
                out.push_str(&format!(
                    "| {name} | {} | {gmin:.1} / {gmed:.1} | {pmed:.1} / {pmax:.1} | {} |\n",
                    algo.name,
                    c.stuck_seeds()
                ));
            }
        }
        out
    }

    /// The goals: per scenario, the default's worst seed against the best peer's median
    /// (within 3 points), and the seeds stuck at the floor with idle capacity (none). Returns
    /// the text and whether every goal holds.
    pub fn goals(&self) -> (String, bool) {
        let mut ok = true;
        let mut out = String::from(
            "| scenario | default worst seed | best peer median | gap | seeds stuck (any algorithm) |\n|---|---|---|---|---|\n",
        );
        let Some(d) = self.default_index() else { return (out, true) };
        for (s, name) in self.scenarios.iter().enumerate() {
            let worst = self.cells[s][d].goodput().0;
            let best = self.best_peer_median(s);
            let stuck: usize = self.cells[s].iter().map(Cell::stuck_seeds).sum();
            let pass = worst >= best - 3.0 && stuck == 0;
            ok &= pass;
            out.push_str(&format!(
                "| {name} | {worst:.1} | {best:.1} | {:+.1}{} | {stuck} |\n",
                worst - best,
                if pass { "" } else { " FAIL" }
            ));
        }
        (out, ok)
    }
}

/// All sweep scenarios.
pub fn all_scenarios() -> Vec<Named> {
    scenarios::ALL.to_vec()
}
