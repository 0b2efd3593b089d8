//! The crate's integration tests as one test binary: each module was its own binary, and
//! every one of them linked tokio, hyper and axum again (most of `make test`'s build time
//! for this crate). `cargo test -p surgeguard --test services <module>::` runs one.

mod axum_overload;
mod deadlines;
mod degrade;
mod gate;
mod readme;
mod tonic;
mod tower;
mod two_hops;
mod vectors;
