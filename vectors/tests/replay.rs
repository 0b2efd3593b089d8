//! The Rust replayer and the freshness check of the committed vectors.
//!
//! - `replay_committed_vectors`: parses `tests/vectors/vectors.json` and replays every
//!   step through the core's public API, failing on the first difference.
//! - `committed_vectors_are_fresh`: the generator's output now must equal the committed
//!   files byte for byte (a core change that alters a decision shows up here). Run with
//!   `SG_BLESS=1` to rewrite them (or `cargo run -p surgeguard-vectors --bin gen`).

use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors")
}

#[test]
fn replay_committed_vectors() {
    let text = std::fs::read_to_string(dir().join("vectors.json")).expect("read vectors.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("parse vectors.json");
    let n = doc["scenarios"].as_array().map_or(0, Vec::len);
    assert!(n >= 30, "only {n} scenarios");
    match surgeguard_vectors::replay(&doc) {
        Ok(steps) => assert!(steps >= 10_000, "only {steps} operations"),
        Err(e) => panic!("{e}"),
    }
}

/// Every time a step gives (`now`, and the lag meter's `enqueued_at`) is in the accepted
/// range: the bindings refuse a larger `now` up front, so a vector with one could not be
/// replayed by them.
#[test]
fn every_time_is_in_the_accepted_range() {
    let text = std::fs::read_to_string(dir().join("vectors.json")).expect("read vectors.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("parse vectors.json");
    let mut largest = 0;
    for sc in doc["scenarios"].as_array().expect("scenarios") {
        for step in sc["steps"].as_array().expect("steps") {
            for field in ["now", "enqueued_at"] {
                if let Some(t) = step[field].as_u64() {
                    assert!(
                        t <= surgeguard_core::time::MAX_NOW,
                        "{}: {field} {t} above MAX_NOW in {step}",
                        sc["name"]
                    );
                    largest = largest.max(t);
                }
            }
        }
    }
    // The edge scenarios still reach the end of the range.
    assert_eq!(largest, surgeguard_core::time::MAX_NOW);
}

#[test]
fn committed_vectors_are_fresh() {
    let scenarios = surgeguard_vectors::scenarios::all();
    let json = surgeguard_vectors::to_json(&scenarios);
    let txt = surgeguard_vectors::to_text(&scenarios);
    if std::env::var_os("SG_BLESS").is_some() {
        std::fs::write(dir().join("vectors.json"), &json).expect("write vectors.json");
        std::fs::write(dir().join("vectors.txt"), &txt).expect("write vectors.txt");
        return;
    }
    for (name, now) in [("vectors.json", &json), ("vectors.txt", &txt)] {
        let committed = std::fs::read_to_string(dir().join(name)).unwrap_or_default();
        if &committed != now {
            let line = committed.lines().zip(now.lines()).position(|(a, b)| a != b);
            panic!(
                "tests/vectors/{name} differs from what the generator produces now (first \
                 differing line: {line:?}); if the change is intended, regenerate with \
                 `SG_BLESS=1 cargo test -p surgeguard-vectors` and review the diff"
            );
        }
    }
}

#[test]
fn replayer_catches_a_changed_expectation() {
    let mut doc = serde_json::json!({
        "format": surgeguard_vectors::FORMAT, "version": surgeguard_vectors::VERSION,
        "scenarios": [surgeguard_vectors::scenarios::all().swap_remove(0)],
    });
    assert!(surgeguard_vectors::replay(&doc).is_ok());
    let step = &mut doc["scenarios"][0]["steps"][3]["expect"];
    *step = serde_json::json!({"ok": "tampered"});
    let err = surgeguard_vectors::replay(&doc).unwrap_err();
    assert!(err.contains("step 3"), "{err}");
}

/// One changed expectation in the first scenario of every kind fails the replay at its
/// step: a number changes, a bool flips, a string or `null` becomes "tampered".
#[test]
fn replayer_catches_a_changed_expectation_in_every_kind() {
    let all = surgeguard_vectors::scenarios::all();
    let mut kinds: Vec<&str> = all.iter().filter_map(|s| s["kind"].as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert!(kinds.len() >= 12, "{kinds:?}");
    for kind in kinds {
        let sc = all.iter().find(|s| s["kind"] == kind).expect("a scenario").clone();
        let steps = sc["steps"].as_array().expect("steps");
        let i = steps
            .iter()
            .position(|st| st["expect"].as_object().is_some_and(|e| !e.is_empty()))
            .expect("a step with an expectation");
        let mut doc = serde_json::json!({
            "format": surgeguard_vectors::FORMAT, "version": surgeguard_vectors::VERSION,
            "scenarios": [sc],
        });
        assert!(surgeguard_vectors::replay(&doc).is_ok(), "{kind}");
        let exp = doc["scenarios"][0]["steps"][i]["expect"].as_object_mut().expect("expect");
        let key = exp.keys().next().expect("a field").clone();
        let v = &mut exp[&key];
        *v = match v.take() {
            serde_json::Value::Bool(b) => serde_json::json!(!b),
            serde_json::Value::Number(n) if n.is_u64() => {
                serde_json::json!(n.as_u64().unwrap() ^ 1)
            }
            serde_json::Value::Number(n) => serde_json::json!(n.as_f64().unwrap() + 1.0),
            _ => serde_json::json!("tampered"),
        };
        let err = surgeguard_vectors::replay(&doc).unwrap_err();
        assert!(err.contains(&format!("step {i} ")), "{kind}: {err}");
    }
}
