//! The one clock of the binding: raw `CLOCK_MONOTONIC` nanoseconds (time since boot), the
//! same origin in every process and in every surgeguard binding, so a timestamp stored in
//! memory shared between `cluster` workers means the same to each.
//!
//! The core never reads a clock (it takes `now` as an argument); the binding does, so that the common path
//! needs no time argument and no BigInt crossing. Callers can inject `nowNs` instead.
//!
//! Source: `clock_gettime(CLOCK_MONOTONIC)` (vDSO, ~25–30 ns on this VM, a third of an
//! acquire + release pair in `perf`). On x86-64 Linux, when the kernel itself uses the TSC
//! as its clocksource and the CPU has `constant_tsc` and `nonstop_tsc`, the binding reads
//! the TSC directly instead, scaled to that clock's nanoseconds: the first 100 ms of use
//! run on `clock_gettime` while the rate is measured between two bracketed (TSC, clock)
//! samples, after which the mapping is fixed and shared by every thread (relative error
//! ~1e-5; the TSC is monotonic on such machines). `SURGEGUARD_NO_TSC=1` turns it off.

use std::sync::OnceLock;
use std::time::Instant;

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// `clock_gettime(CLOCK_MONOTONIC)` reading, ns, clamped to `[1, MAX_NOW]` (so 0 can mean
/// "never" in the core).
#[cfg(unix)]
#[inline]
fn instant_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the whole call; CLOCK_MONOTONIC is
    // supported on every unix target Rust supports (std's `Instant` reads it too), and the
    // call writes nothing else.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return fallback_ns();
    }
    let ns = (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64);
    ns.clamp(1, surgeguard_core::time::MAX_NOW)
}

#[cfg(not(unix))]
#[inline]
fn instant_ns() -> u64 {
    fallback_ns()
}

/// An `Instant` origin fixed at the first call in this process (only where
/// `CLOCK_MONOTONIC` cannot be read).
#[cold]
fn fallback_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    (origin.elapsed().as_nanos().min(u128::from(surgeguard_core::time::MAX_NOW - 1)) as u64) + 1
}

/// Nanoseconds on the process-wide monotonic clock.
#[inline]
pub fn now_ns() -> u64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if let Some(ns) = tsc::now_ns() {
        return ns;
    }
    slow_now_ns()
}

#[cold]
fn slow_now_ns() -> u64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    return tsc::calibrating_now_ns();
    #[allow(unreachable_code)]
    instant_ns()
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod tsc {
    use std::sync::OnceLock;

    use super::instant_ns;

    /// How long the rate is measured before the TSC takes over, ns.
    const CALIBRATION_NS: u64 = 100_000_000;

    /// `ns = anchor_ns + (tsc − anchor_tsc) × ns_per_tick`, fixed once calibrated.
    struct Mapping {
        anchor_ns: u64,
        anchor_tsc: u64,
        ns_per_tick: f64,
    }

    static MAPPING: OnceLock<Mapping> = OnceLock::new();
    static START: OnceLock<(u64, u64)> = OnceLock::new();
    static USABLE: OnceLock<bool> = OnceLock::new();

    #[inline]
    fn ticks() -> u64 {
        // SAFETY: `_rdtsc` has no preconditions: it only reads the time-stamp counter, which
        // every x86-64 CPU has (this module is built for x86_64 only), and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Whether the kernel trusts the TSC as its own clock (else `clock_gettime` only).
    fn usable() -> bool {
        *USABLE.get_or_init(|| {
            let source = std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .unwrap_or_default();
            let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            source.trim() == "tsc"
                && cpu.contains(" constant_tsc")
                && cpu.contains(" nonstop_tsc")
                && std::env::var_os("SURGEGUARD_NO_TSC").is_none()
        })
    }

    /// The fast path: `None` until calibrated (or if the TSC is not usable).
    #[inline]
    pub fn now_ns() -> Option<u64> {
        let m = MAPPING.get()?;
        let d = ticks().wrapping_sub(m.anchor_tsc);
        // A TSC below the anchor (never on a constant TSC) falls back to `clock_gettime`.
        if d >= 1 << 62 {
            return None;
        }
        Some(m.anchor_ns + (d as f64 * m.ns_per_tick) as u64)
    }

    /// One (TSC, clock) sample: the tightest of three brackets `rdtsc; clock_gettime; rdtsc`.
    fn sample() -> (u64, u64) {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..3 {
            let t0 = ticks();
            let ns = instant_ns();
            let t1 = ticks();
            let width = t1.wrapping_sub(t0);
            if width < best.0 {
                best = (width, ns, t0 + width / 2);
            }
        }
        (best.1, best.2)
    }

    /// `clock_gettime` while calibrating; installs the TSC mapping once 100 ms have passed.
    pub fn calibrating_now_ns() -> u64 {
        if !usable() {
            return instant_ns();
        }
        let (start_ns, start_tsc) = *START.get_or_init(sample);
        let (ns, tsc) = sample();
        if ns >= start_ns + CALIBRATION_NS && tsc > start_tsc {
            let ns_per_tick = (ns - start_ns) as f64 / (tsc - start_tsc) as f64;
            MAPPING.get_or_init(|| Mapping { anchor_ns: ns, anchor_tsc: tsc, ns_per_tick });
        }
        ns
    }
}

/// `[Instant reading, binding clock reading]` taken back to back, ns (for the tests).
#[napi(js_name = "clockCheck")]
pub fn clock_check() -> Vec<f64> {
    let a = instant_ns();
    let b = now_ns();
    vec![a as f64, b as f64]
}

/// The binding's clock as a BigInt of nanoseconds: what every call uses when no `nowNs`
/// is given.
#[napi(js_name = "nowNs")]
pub fn now_ns_js() -> BigInt {
    BigInt::from(now_ns())
}

/// `nowNs` if given (a non-negative BigInt below 2^64), else the clock.
pub fn resolve_now(now_ns: Option<BigInt>) -> Result<u64> {
    match now_ns {
        None => Ok(self::now_ns()),
        Some(b) => {
            let (signed, value, lossless) = b.get_u64();
            if signed || !lossless || value > surgeguard_core::time::MAX_NOW {
                return Err(Error::new(Status::InvalidArg, "nowNs must be in [0, 2^62]"));
            }
            Ok(value)
        }
    }
}
