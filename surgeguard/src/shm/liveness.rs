//! Who is alive: a process's identity is its pid plus its start time, so a reused pid is
//! never mistaken for the process that died (PostgreSQL's `pmsignal.c` notes that a bare
//! `kill(pid, 0)` "can sometimes give a false positive result" for this reason).

use std::sync::atomic::{AtomicU64, Ordering};

/// What `/proc/<pid>/stat` says about a pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Running (or sleeping, stopped...) with this start time (clock ticks since boot).
    Alive(u64),
    /// No such process, or a zombie/dead one: it will never release anything.
    Gone,
    /// `/proc` could not be read for another reason: treat as alive (never reclaim a
    /// process we cannot prove dead).
    Unknown,
}

/// Field 22 (`starttime`) and field 3 (`state`) of `/proc/<pid>/stat` (proc(5)). Field 2
/// (`comm`) is free text in parentheses, so fields are counted after its last `)`.
pub(crate) fn seen(pid: u32) -> Seen {
    if pid == 0 {
        return Seen::Gone;
    }
    let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Seen::Gone,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Seen::Gone,
        Err(_) => return Seen::Unknown,
    };
    parse_stat(&text)
}

/// Parses a `/proc/<pid>/stat` line (split out for tests).
pub(crate) fn parse_stat(text: &str) -> Seen {
    let Some(close) = text.rfind(')') else { return Seen::Unknown };
    let mut fields = text[close + 1..].split_ascii_whitespace();
    // After `comm`: field 3 is the state, field 22 the start time (index 19 from here).
    let Some(state) = fields.next() else { return Seen::Unknown };
    if state == "Z" || state == "X" || state == "x" {
        return Seen::Gone;
    }
    match fields.nth(18).and_then(|f| f.parse::<u64>().ok()) {
        Some(start) => Seen::Alive(start),
        None => Seen::Unknown,
    }
}

/// This process's start time (cached per process; a forked child re-reads it).
pub(crate) fn my_start_time() -> u64 {
    static CACHE: AtomicU64 = AtomicU64::new(0);
    // Relaxed: a cache of a value that never changes for a given pid.
    let cached = CACHE.load(Ordering::Relaxed);
    let pid = std::process::id() as u64;
    if cached != 0 && cached >> 40 == pid {
        return cached & ((1 << 40) - 1);
    }
    let start = match seen(pid as u32) {
        Seen::Alive(s) => s,
        _ => 0,
    };
    if start < 1 << 40 {
        CACHE.store(pid << 40 | start, Ordering::Relaxed);
    }
    start
}

/// A hash of this boot (`/proc/sys/kernel/random/boot_id`): `CLOCK_MONOTONIC` and start
/// times count from boot, so a segment file from another boot is meaningless.
pub(crate) fn boot_id() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| super::hash_bytes(s.trim().as_bytes()))
        .unwrap_or(0)
}

/// The inode of this process's pid namespace: pids in the table mean something only to
/// processes of the same namespace.
pub(crate) fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_start_time_after_a_comm_with_spaces_and_parens() {
        let line = "1234 (we(ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    98765 1000 100 18446744073709551615";
        assert_eq!(parse_stat(line), Seen::Alive(98765));
        let zombie = "1234 (x) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(zombie), Seen::Gone);
        assert_eq!(parse_stat("garbage"), Seen::Unknown);
    }

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_gone() {
        let me = std::process::id();
        assert_eq!(seen(me), Seen::Alive(my_start_time()));
        assert!(my_start_time() > 0);
        assert_eq!(seen(0), Seen::Gone);
        // pid_max is at most 2^22: this pid never exists.
        assert_eq!(seen(u32::MAX - 1), Seen::Gone);
    }
}
