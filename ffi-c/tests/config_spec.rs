//! Every binding exposes every described config field (`surgeguard_core::fields`), spelled
//! by its table and documented with the core's default:
//!
//! - C: `field::c_name` names it, the member is in its struct in `include/surgeguard.h`,
//!   and the member's comment says `default <value>`;
//! - Python: `bindings-python/src/fields.rs` names it and the keyword is in the class's
//!   signature in `_native.pyi` (the native classes take the core's default for an
//!   unset keyword; `tests/test_config_fields.py` checks the values they report);
//! - Node: `bindings-node/src/fields.rs` names it, the option is in its interface in
//!   `index.d.ts`, and its comment says `default <value>`; the limit algorithms share
//!   `LimiterOptions`, so an option several of them take with different defaults names
//!   each algorithm's (`defaults: gradient 20, aimd 10`).
//!
//! The Node facade (`index.js`, `lib/*.js`) applies a few defaults itself before calling
//! the addon (`o.levels === undefined ? 3 : o.levels`); each one that sets a described
//! field must be the core's default.
//!
//! A field described in the core but missing from a binding fails here. Unset-by-default
//! settings (`Value::Off`) carry no default text: each binding spells "unset" its own way.

use std::path::PathBuf;

use surgeguard::field::c_name;
use surgeguard_core::fields::{FieldSpec, Unit, Value, CONFIGS};

#[path = "../../bindings-python/src/fields.rs"]
mod py;

#[path = "../../bindings-node/src/fields.rs"]
mod js;

fn read(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Where each family lives in each binding: the C struct, the Python class, the Node
/// options interface.
fn homes(family: &str) -> (&'static str, &'static str, &'static str) {
    match family {
        "limiter" => ("sg_limiter_config", "Limiter", "LimiterOptions"),
        "limiter.gradient" => ("sg_gradient_config", "GradientLimit", "LimiterOptions"),
        "limiter.fixed" => ("sg_fixed_config", "FixedLimit", "LimiterOptions"),
        "limiter.aimd" => ("sg_aimd_config", "AimdLimit", "LimiterOptions"),
        "limiter.hysteresis" => ("sg_hysteresis_config", "HysteresisLimit", "LimiterOptions"),
        "limiter.gradient2" => ("sg_gradient2_config", "Gradient2Limit", "LimiterOptions"),
        "limiter.vegas" => ("sg_vegas_config", "VegasLimit", "LimiterOptions"),
        "gate" => ("sg_gate_config", "Gate", "GateOptions"),
        "retry_budget" => ("sg_retry_budget_config", "RetryBudget", "RetryBudgetOptions"),
        "token_throttle" => {
            ("sg_token_throttle_config", "TokenRetryThrottle", "TokenRetryThrottleOptions")
        }
        "backoff" => ("sg_backoff_config", "Backoff", "BackoffOptions"),
        "breaker" => ("sg_breaker_config", "CircuitBreaker", "CircuitBreakerOptions"),
        "adaptive_throttle" => {
            ("sg_adaptive_throttle_config", "AdaptiveThrottle", "AdaptiveThrottleOptions")
        }
        "credits" => ("sg_credits_config", "Credits", "CreditsOptions"),
        "lag_meter" => ("sg_lag_meter_config", "LagMeter", "LagMeterOptions"),
        "watermarks" => ("sg_watermarks_config", "Watermarks", "WatermarksOptions"),
        other => panic!("no binding homes listed for the described family {other:?}"),
    }
}

/// The text between `start` and the next `end` after it.
fn block<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let i = text.find(start)? + start.len();
    let j = text[i..].find(end)?;
    Some(&text[i..i + j])
}

/// The comment lines right above the line where `is_member` holds, joined (C `//` lines
/// or a JSDoc block), or `None` if no line matches.
fn doc_above(body: &str, is_member: impl Fn(&str) -> bool) -> Option<String> {
    let lines: Vec<&str> = body.lines().collect();
    let at = lines.iter().position(|l| is_member(l.trim()))?;
    let mut doc = Vec::new();
    for l in lines[..at].iter().rev() {
        let t = l.trim();
        let text = t
            .strip_prefix("//")
            .or_else(|| t.strip_prefix("/**"))
            .or_else(|| t.strip_prefix("*/"))
            .or_else(|| t.strip_prefix('*'));
        match text {
            Some(x) => doc.push(x.trim_end_matches("*/").trim()),
            None => break,
        }
    }
    doc.reverse();
    Some(doc.join(" "))
}

/// Whether `doc` states `f`'s default (`default 100 ms`, `default 0.7 / 0.25 / 0.05`,
/// `default \`SG_ALGORITHM_GRADIENT\``: the value follows the word, in any case).
fn states_default(doc: &str, f: &FieldSpec) -> bool {
    let want = f.default_text().to_string().to_lowercase();
    let doc = doc.to_lowercase();
    doc.match_indices("default").any(|(i, _)| {
        let after = &doc[i + "default".len()..];
        let near: String = after.chars().take(want.len() + 24).collect();
        let near = near.trim_start_matches([' ', ':']);
        match f.unit {
            // Enum defaults are spelled as constants (`SG_CODEL_FOLLY`) or strings.
            Unit::Choice => near.contains(&want),
            _ => {
                near.starts_with(&want)
                    && !near[want.len()..].starts_with(|c: char| c.is_ascii_digit())
            }
        }
    })
}

/// Whether `doc` states `f`'s default for the algorithm `algo` (`gradient default 20`,
/// `defaults: gradient 20, aimd 10`): the name as a word, then the value.
fn states_default_for(doc: &str, algo: &str, f: &FieldSpec) -> bool {
    let want = f.default_text().to_string().to_lowercase();
    let doc = doc.to_lowercase();
    doc.match_indices(algo).any(|(i, _)| {
        let before = doc[..i].chars().next_back();
        let after = &doc[i + algo.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') || !after.starts_with(' ') {
            return false;
        }
        let after = after.trim_start();
        let after = after.strip_prefix("default").unwrap_or(after).trim_start_matches([' ', ':']);
        after.starts_with(&want) && !after[want.len()..].starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The limit algorithms (`limiter.<name>`) whose settings include the Node option `opt`,
/// with their defaults: a shared option (`initialLimit`) whose defaults differ states each
/// algorithm's by name.
fn node_sharers(opt: &str) -> Vec<(&'static str, &'static FieldSpec)> {
    CONFIGS
        .iter()
        .filter_map(|(family, specs)| {
            let algo = family.strip_prefix("limiter.")?;
            let f = specs.iter().find(|f| js::js_name(f.path) == Some(opt))?;
            Some((algo, f))
        })
        .collect()
}

/// Whether the Node doc of `f` (option `opt`) states its default: each algorithm's by
/// name where the algorithms sharing the option differ, else plainly or by name.
fn node_states_default(doc: &str, family: &str, opt: &str, f: &FieldSpec) -> bool {
    let Some(algo) = family.strip_prefix("limiter.") else { return states_default(doc, f) };
    let sharers = node_sharers(opt);
    let same = sharers.iter().all(|(_, g)| g.default == f.default);
    states_default_for(doc, algo, f) || (same && states_default(doc, f))
}

/// Settings that have no default in Node: the occupancy is the value of `lifo` itself,
/// and `aging: { from, to, afterMs }` takes all three or none (its default is no aging,
/// which `aging` states).
const NODE_NO_DEFAULT: &[&str] =
    &["gate.lifo.occupancy", "gate.aging.from", "gate.aging.to", "gate.aging.after_ns"];

/// The problems of one binding with one field, if any.
struct Report(Vec<String>);

impl Report {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }
}

#[test]
fn every_binding_exposes_every_described_field_with_its_default() {
    let header = read("include/surgeguard.h");
    let pyi = read("bindings-python/python/surgeguard/_native.pyi");
    let dts = read("bindings-node/index.d.ts");
    let mut r = Report(Vec::new());
    let mut fields = 0;
    for (family, specs) in CONFIGS {
        let (c_struct, py_class, js_iface) = homes(family);
        let c_body =
            block(&header, &format!("typedef struct {c_struct} {{"), &format!("}} {c_struct};"))
                .unwrap_or_else(|| panic!("{c_struct} not in the header"));
        let py_body = block(&pyi, &format!("class {py_class}:"), "\nclass ")
            .or_else(|| block(&pyi, &format!("class {py_class}("), "\nclass "))
            .unwrap_or_else(|| panic!("class {py_class} not in the stub"));
        let py_init = block(py_body, "def __init__(", ") ->").unwrap_or(py_body);
        let js_body = block(&dts, &format!("export interface {js_iface} "), "\n}")
            .unwrap_or_else(|| panic!("{js_iface} not in index.d.ts"));
        for f in *specs {
            fields += 1;
            let p = f.path;
            let stated = f.default != Value::Off;
            // C: a member of the family's struct (a nested config's own struct).
            match c_name(p) {
                None => r.check(false, || format!("C: {p} is not in field::c_name")),
                Some(cn) => {
                    let member = cn.rsplit('.').next().unwrap();
                    let is_member = |l: &str| {
                        l.ends_with(&format!(" {member};")) || l.contains(&format!(" {member}["))
                    };
                    match doc_above(c_body, is_member) {
                        None => r.check(false, || {
                            format!("C: {c_struct}.{member} ({p}) is not in the header")
                        }),
                        Some(doc) => r.check(!stated || states_default(&doc, f), || {
                            format!(
                                "C: {c_struct}.{member} ({p}) does not say `default {}`: {doc:?}",
                                f.default_text()
                            )
                        }),
                    }
                }
            }
            // Python: the keyword (the first segment of a nested one) in the signature.
            match py::py_name(p) {
                None => r.check(false, || format!("Python: {p} is not in fields.rs")),
                Some(kw) => {
                    let arg = kw.split('.').next().unwrap();
                    r.check(py_init.contains(&format!("{arg}:")), || {
                        format!("Python: {py_class}({arg}=...) ({p}) is not in _native.pyi")
                    });
                }
            }
            // Node: the option (or its object, then the key) in the interface, documented.
            match js::js_name(p) {
                None => r.check(false, || format!("Node: {p} is not in fields.rs")),
                Some(opt) => {
                    let mut segs = opt.split('.');
                    let head = segs.next().unwrap();
                    let key = segs.next();
                    let is_option = |l: &str| {
                        l.starts_with(&format!("{head}?:"))
                            && key.is_none_or(|k| l.contains(&format!("{k}:")))
                    };
                    match doc_above(js_body, is_option) {
                        None => r.check(false, || format!("Node: {js_iface}.{opt} ({p}) is not in index.d.ts")),
                        Some(doc) => r.check(!stated || NODE_NO_DEFAULT.contains(&p) || node_states_default(&doc, family, opt, f), || {
                            format!("Node: {js_iface}.{opt} ({p}) does not say `default {}`: {doc:?}", f.default_text())
                        }),
                    }
                }
            }
        }
    }
    assert!(fields > 40, "{fields} fields described");
    assert!(r.0.is_empty(), "{} problems:\n{}", r.0.len(), r.0.join("\n"));
}

#[test]
fn the_per_algorithm_check_reads_the_named_default() {
    let aimd = CONFIGS.iter().find(|(f, _)| *f == "limiter.aimd").unwrap().1;
    let f = aimd.iter().find(|f| f.path == "limiter.aimd.initial_limit").unwrap();
    let doc = "The limit (defaults: gradient 20, gradient2 10, aimd 10).";
    assert!(states_default_for(doc, "aimd", f));
    assert!(!states_default_for("The limit (defaults: gradient 20, aimd 100).", "aimd", f));
    assert!(!states_default_for("The limit (defaults: gradient 20, gradient2 10).", "aimd", f));
    // `gradient` is not read from `gradient2 ...`.
    let g = CONFIGS.iter().find(|(f, _)| *f == "limiter.gradient").unwrap().1;
    let g = g.iter().find(|f| f.path == "limiter.gradient.initial_limit").unwrap();
    assert!(!states_default_for("(defaults: gradient2 20, gradient 10)", "gradient", g));
    assert!(states_default_for("(gradient default 20)", "gradient", g));
    // A shared option whose defaults differ must name the algorithm.
    assert!(!node_states_default("The limit (default 10).", "limiter.aimd", "initialLimit", f));
    assert!(node_states_default("(aimd default 10)", "limiter.aimd", "initialLimit", f));
}

#[test]
fn the_doc_check_reads_defaults_strictly() {
    let f = CONFIGS[0].1.iter().find(|f| f.path == "limiter.min_samples").unwrap();
    assert!(states_default("closes with samples (default 10).", f));
    assert!(states_default("Default: 10", f));
    assert!(!states_default("closes with samples (default 100).", f));
    assert!(!states_default("closes with 10 samples.", f));
}

/// The defaults the Node facade applies itself before calling the addon
/// (`o.levels === undefined ? 3 : o.levels`, `o.algorithm || 'gradient'`): each
/// `(file, option, literal)` found in `index.js` and `lib/*.js`.
fn node_facade_defaults() -> Vec<(String, String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bindings-node");
    let mut files = vec![dir.join("index.js")];
    let mut lib: Vec<_> = std::fs::read_dir(dir.join("lib"))
        .expect("bindings-node/lib")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "js"))
        .collect();
    lib.sort();
    files.extend(lib);
    let mut out = Vec::new();
    for p in files {
        let text = std::fs::read_to_string(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        for (sep, end) in [(" === undefined ? ", " :"), (" || ", "")] {
            for (i, _) in text.match_indices(sep) {
                // The option: the identifier after the last `.` before the separator.
                let before = &text[..i];
                let ident_start =
                    before.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |j| j + 1);
                if !before[..ident_start].ends_with('.') {
                    continue;
                }
                let opt = &before[ident_start..];
                // The literal: a number, a quoted string, true or false.
                let rest = &text[i + sep.len()..];
                let lit_len = if let Some(quoted) = rest.strip_prefix('\'') {
                    quoted.find('\'').map(|j| j + 2)
                } else {
                    rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
                };
                let Some(n) = lit_len else { continue };
                let lit = &rest[..n];
                let is_lit = lit.starts_with('\'')
                    || lit == "true"
                    || lit == "false"
                    || lit.parse::<f64>().is_ok();
                if is_lit && rest[n..].starts_with(end) {
                    out.push((name.clone(), opt.to_string(), lit.to_string()));
                }
            }
        }
    }
    out
}

/// Whether the facade's literal `lit` for a Node option is the described default of `f`
/// (durations in ms).
fn facade_literal_is(lit: &str, f: &FieldSpec) -> bool {
    let num = lit.parse::<f64>().ok();
    match (f.unit, f.default) {
        (Unit::Nanos, Value::Int(ns)) => num == Some(ns as f64 / 1e6),
        (_, Value::Int(n)) => num == Some(n as f64),
        (_, Value::Float(x)) => num == Some(x),
        (_, Value::Bool(b)) => lit == b.to_string(),
        (_, Value::Name(s)) => lit == format!("'{s}'"),
        _ => false,
    }
}

#[test]
fn the_node_facade_applies_only_the_described_defaults() {
    let found = node_facade_defaults();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (file, opt, lit) in &found {
        // Every described field the option sets (an option the algorithms share sets each).
        let fields: Vec<&FieldSpec> = CONFIGS
            .iter()
            .flat_map(|(_, specs)| specs.iter())
            .filter(|f| js::js_name(f.path) == Some(opt.as_str()))
            .collect();
        if fields.is_empty() {
            continue; // a facade-only setting (a retry count, a header name)
        }
        checked += 1;
        for f in fields {
            if !facade_literal_is(lit, f) {
                wrong.push(format!(
                    "{file}: {opt} defaults to {lit}, the core's {} is {}",
                    f.path,
                    f.default_text()
                ));
            }
        }
    }
    // levels in the Limiter and the Gate, the algorithm's name.
    assert!(checked >= 3, "facade defaults found: {found:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
