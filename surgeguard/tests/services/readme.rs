//! The top-level README's Rust section is this crate's README, whose examples compile as
//! doctests (`src/lib.rs`): the two must not drift apart.

#[test]
fn the_top_level_readme_carries_this_crates_section_verbatim() {
    let top = include_str!("../../../README.md");
    let ours = include_str!("../../README.md");
    assert!(
        top.contains(ours.trim()),
        "README.md's Rust section differs from surgeguard/README.md"
    );
}
