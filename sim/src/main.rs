//! Placeholder: the simulator lands with its issue.
fn main() {
    println!("surgeguard-sim: not built yet");
}
