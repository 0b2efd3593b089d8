//! Gives the shared library a SONAME, so programs link against `libsurgeguard.so.0`
//! (the ABI major version) rather than the unversioned file name.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsurgeguard.so.0");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
