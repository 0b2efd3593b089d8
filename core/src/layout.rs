//! Placeable types: structures that may live in memory shared between processes.
//!
//! A structure placed in a shared mapping is read and written by processes that may map it
//! at different addresses and may have been built by different compilers (a Python wheel
//! and a Node addon). So a placeable type:
//! - is `#[repr(C)]` down to its atomics, with `size_of`/`align_of`/`offset_of!` asserted
//!   at compile time;
//! - holds no pointer, reference, `&'static str` or function pointer (all meaningless in
//!   another process), and has no `Drop`;
//! - after it is published, changes only through atomics holding plain integers (codes
//!   are validated when read), or through a cell that one thread at a time owns and whose
//!   content, too, is plain integers and floats; plain fields are written once, before
//!   publication;
//! - decides nothing from per-process state (the instance id it carries was drawn by the
//!   process that built it and is only compared with ids read from the same object).
//!
//! [`Placeable::LAYOUT`] is a fingerprint of the layout: a segment header stores it, and a
//! process whose build lays the type out differently refuses to attach. Every field's
//! offset and size goes into it, plus a version bumped when a field's *meaning* changes.
//!
//! **Fold cells.** A few fields are updated by one thread at a time, guarded by a flag taken
//! with one compare-and-swap (a window fold, a retry budget's slot ring, a top-keys
//! update). The flag holds the holder's *process token* ([`set_process_token`]), not just
//! "busy", so that when a process is killed while holding one, a survivor that proves the
//! process dead frees it ([`FoldCell::break_stale`], reached through
//! [`Placeable::fold_cells`]). Without that, a shared limiter would stop adapting and a
//! shared retry budget would refuse every retry. The guarded value is plain numbers, so
//! what a killed holder left half-written is still a valid value (at worst one window is
//! folded from a partly updated state).
//!
//! Placement needs native 64-bit atomics (the `portable-atomic` fallback of
//! microcontrollers keeps process-local critical sections, not address-free atomics), so
//! the impls exist only where `target_has_atomic = "64"`.

/// A type that may be placed, by value, in memory shared between processes (see the
/// module docs for the rules).
///
/// # Safety
///
/// Implementors promise the rules of the [module](self): `#[repr(C)]`, no pointers, no
/// `Drop`, post-publication changes only through atomics (or a one-at-a-time cell) holding
/// integer or float data with no invalid bit patterns, and `LAYOUT` covering every field.
#[allow(unsafe_code)] // a promise about layout, made by each impl with a SAFETY comment
pub unsafe trait Placeable: Sync {
    /// Fingerprint of the layout (see [`fingerprint`]).
    const LAYOUT: u64;

    /// Calls `f` with each one-at-a-time cell of the object (see the module docs), so a
    /// process-shared owner can free those held by dead processes. None by default.
    #[inline]
    fn fold_cells<'a>(&'a self, f: &mut dyn FnMut(FoldCell<'a>)) {
        let _ = f;
    }
}

/// Sets this process's token, written into every fold cell a thread of this process
/// takes (see the module docs). Process-wide; call it with a value that names this
/// process (its pid and start time) before it uses any object in shared memory, and again
/// in a forked child. `0` is read as `1` (the default, which names no process).
pub fn set_process_token(token: u64) {
    crate::sync::set_fold_token(token);
}

/// The token set by [`set_process_token`] (1 until then).
#[inline]
pub fn process_token() -> u64 {
    crate::sync::fold_token()
}

/// One one-at-a-time cell of a placed object (see [`Placeable::fold_cells`]).
#[derive(Clone, Copy, Debug)]
pub struct FoldCell<'a>(pub(crate) &'a crate::sync::FoldFlag);

impl FoldCell<'_> {
    /// The token of the process whose thread holds the cell now, 0 if free (a snapshot).
    #[inline]
    pub fn holder(&self) -> u64 {
        self.0.holder()
    }

    /// Frees the cell if `token` still holds it; `true` if this call freed it (so of
    /// several callers at most one gets `true`).
    ///
    /// # Safety
    ///
    /// The process that `token` names is dead: no thread will ever again run inside the
    /// cell with it. Freeing a cell held by a live thread lets two threads write the same
    /// plain fields at once (a data race).
    #[allow(unsafe_code)]
    pub unsafe fn break_stale(&self, token: u64) -> bool {
        // SAFETY: the caller's promise is the flag's.
        unsafe { self.0.break_stale(token) }
    }

    /// Takes the cell for this process and never gives it back, as a process killed in
    /// the middle of a fold would: for tests of [`break_stale`](Self::break_stale).
    #[doc(hidden)]
    pub fn park(&self) -> bool {
        self.0.try_enter()
    }

    /// [`park`](Self::park) as the process `token` names (for model tests).
    #[doc(hidden)]
    pub fn park_as(&self, token: u64) -> bool {
        self.0.try_enter_as(token)
    }
}

/// FNV-1a over a type name and a list of layout words (sizes, alignments, offsets and a
/// version), usable in constants: `const LAYOUT: u64 = fingerprint("RateLimiter/1", &[..])`.
///
/// ```
/// use surgeguard_core::layout::fingerprint;
/// const A: u64 = fingerprint("T/1", &[8, 8, 0]);
/// assert_ne!(A, fingerprint("T/1", &[8, 8, 4]));
/// assert_ne!(A, fingerprint("T/2", &[8, 8, 0]));
/// ```
pub const fn fingerprint(name: &str, words: &[u64]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3; // FNV-1a 64-bit prime
    let mut h: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a 64-bit offset basis
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u64).wrapping_mul(PRIME);
        i += 1;
    }
    let mut j = 0;
    while j < words.len() {
        let w = words[j].to_le_bytes();
        let mut k = 0;
        while k < 8 {
            h = (h ^ w[k] as u64).wrapping_mul(PRIME);
            k += 1;
        }
        j += 1;
    }
    h
}

#[cfg(all(test, not(loom), target_has_atomic = "64"))]
mod tests {
    use super::*;
    use crate::limit::{algorithm_name, Algorithm, AlgorithmConfig, AnyAlgorithm};
    use crate::rate::RateLimiter;
    use crate::retry::RetryBudget;
    use crate::Limiter;

    #[test]
    fn every_algorithm_code_names_the_algorithm() {
        let configs = [
            AlgorithmConfig::Fixed(Default::default()),
            AlgorithmConfig::Aimd(Default::default()),
            AlgorithmConfig::Hysteresis(Default::default()),
            AlgorithmConfig::Gradient(Default::default()),
            AlgorithmConfig::Gradient2(Default::default()),
            AlgorithmConfig::Vegas(Default::default()),
        ];
        for config in configs {
            let algorithm = AnyAlgorithm::new(config).unwrap();
            assert_eq!(algorithm_name(algorithm.code()), algorithm.name());
            let limiter = Limiter::new(crate::LimiterConfig::with_algorithm(config)).unwrap();
            assert_eq!(limiter.metrics().algorithm, algorithm.name());
        }
        assert_eq!(algorithm_name(200), "unknown");
    }

    #[test]
    fn fingerprints_tell_types_apart() {
        use crate::gate::Gate;
        let all = [
            RateLimiter::LAYOUT,
            RetryBudget::LAYOUT,
            Limiter::LAYOUT,
            Gate::<16>::LAYOUT,
            Gate::<64>::LAYOUT,
            Gate::<65>::LAYOUT,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
