//! The top-level README's Rust example is one of this crate's README examples, which compile
//! as doctests (`src/lib.rs`): a Rust block in the top-level README that is not here verbatim
//! would be an example nobody compiles.

#[test]
fn every_rust_block_of_the_top_level_readme_is_one_of_this_crates() {
    let top = include_str!("../../../README.md");
    let ours = include_str!("../../README.md");
    let blocks: Vec<&str> =
        top.split("```rust").skip(1).map(|rest| rest.split("\n```").next().unwrap_or("")).collect();
    assert!(!blocks.is_empty(), "README.md has no Rust example");
    for block in blocks {
        assert!(
            ours.contains(block),
            "README.md's Rust example is not in surgeguard/README.md:\n{block}"
        );
    }
}
