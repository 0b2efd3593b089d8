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
