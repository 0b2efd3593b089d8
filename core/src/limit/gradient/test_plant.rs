//! The deterministic fluid plant the unit tests of every mechanism drive.

use super::*;
pub(super) use crate::time::{MS, SEC};
pub(super) use std::vec::Vec;

/// A deterministic fluid model of a dependency with `slots` servers and service time
/// `service_ms`, driven at `load` × its capacity by Poisson-free arrivals: each window
/// of 100 ms, in-flight = min(limit, offered), latency = service · max(1, N / slots).
pub(super) struct Plant {
    pub(super) slots: f64,
    pub(super) service_ms: f64,
    /// Offered concurrency (arrival rate × service time).
    pub(super) offered: f64,
    pub(super) now: u64,
}

impl Plant {
    pub(super) fn window(&mut self, limit: f64) -> Window {
        self.now += 100 * MS;
        let n = limit.max(1.0).min(self.offered);
        let lat_ms = self.service_ms * (n / self.slots).max(1.0);
        let lat = (lat_ms * MS as f64) as u64;
        let samples = (n / lat_ms * 100.0).max(1.0) as u32;
        Window {
            now: self.now,
            samples,
            drops: 0,
            avg_ns: lat,
            min_ns: lat * 7 / 10,
            p50_ns: lat,
            p90_ns: lat * 12 / 10,
            p99_ns: lat * 15 / 10,
            max_inflight: n.ceil() as u32,
            inflight: n as u32,
        }
    }

    pub(super) fn run(&mut self, g: &mut Gradient, windows: usize) -> f64 {
        for _ in 0..windows {
            let w = self.window(g.limit());
            g.update(&w);
        }
        g.limit()
    }
}

/// The top of the band the default settles in over `slots` slots: a standing queue of
/// about `buffer·C + headroom·sqrt(C)`, doubled, plus 2.
pub(super) fn equilibrium_high(slots: f64) -> f64 {
    let d = GradientConfig::default();
    slots * (1.0 + d.buffer) + 2.0 * d.headroom * libm::sqrt(slots) + 2.0
}

pub(super) fn overloaded(slots: f64, service_ms: f64) -> Plant {
    Plant { slots, service_ms, offered: 10.0 * slots, now: 0 }
}
