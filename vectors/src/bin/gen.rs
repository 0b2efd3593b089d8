//! Writes `tests/vectors/vectors.json` and `tests/vectors/vectors.txt` from the core:
//! `cargo run -p surgeguard-vectors --bin gen` (or `SG_BLESS=1 cargo test -p surgeguard-vectors`).

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let scenarios = surgeguard_vectors::scenarios::all();
    let steps: usize = scenarios.iter().map(|s| s["steps"].as_array().map_or(0, Vec::len)).sum();
    std::fs::write(dir.join("vectors.json"), surgeguard_vectors::to_json(&scenarios))
        .expect("write vectors.json");
    std::fs::write(dir.join("vectors.txt"), surgeguard_vectors::to_text(&scenarios))
        .expect("write vectors.txt");
    println!("{} scenarios, {steps} operations -> {}", scenarios.len(), dir.display());
}
