//! Caller storage for the permits of the shared gate (`sg_shared_gate_permit`): six words
//! that C sees as `uint64_t opaque[6]`, holding a state word, the issuing handle's id and
//! up to four words of payload (the Rust permit by value). Whatever bytes the caller passes, a permit is
//! taken at most once (a CAS on the state word) and only by the object that issued it.

use core::cell::UnsafeCell;
use core::mem::{align_of, size_of, MaybeUninit};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::handle::{Out, Res};
use crate::status::sg_status::*;

/// The storage's words, as the C structs declare them.
pub(crate) type Words = [UnsafeCell<MaybeUninit<u64>>; 6];

/// The state words of one storage type: its live and released marks (eight ASCII bytes
/// each, distinct per type, so storage of one type passed as another is refused).
pub(crate) struct Marks {
    pub live: u64,
    pub released: u64,
}

#[repr(C)]
struct Cell {
    state: AtomicU64,
    owner: u64,
    payload: MaybeUninit<[u64; 4]>,
}

const _: () = assert!(size_of::<Cell>() == size_of::<Words>());
const _: () = assert!(align_of::<Cell>() == align_of::<Words>());

fn cell(words: &Words) -> &Cell {
    // SAFETY: `Cell` has the size and alignment of the words (asserted above), and every
    // byte of them is inside an `UnsafeCell`, so the state atomic may be written through
    // this shared borrow; `owner` and `state` are integers (written by `issue`, or the
    // caller's zeroed or garbage bytes: any bits); the payload is only handled as
    // `MaybeUninit` until the state says `issue` wrote it.
    unsafe { &*(words as *const Words).cast::<Cell>() }
}

/// Writes a live permit `p` of the object `owner` into the caller's storage.
pub(crate) fn issue<S, P>(slot: Out<S>, marks: &Marks, owner: u64, p: P) {
    const { assert!(size_of::<S>() == size_of::<Words>() && align_of::<S>() == align_of::<Words>()) };
    const { assert!(size_of::<P>() <= size_of::<[u64; 4]>() && align_of::<P>() <= align_of::<u64>()) };
    // Zeroed, not uninit: every byte is copied to the caller's storage, which C may copy
    // and compare whole (a payload of three words leaves the fourth).
    let mut payload = MaybeUninit::<[u64; 4]>::zeroed();
    // SAFETY: `payload` is large and aligned enough for a `P` (asserted).
    unsafe { payload.as_mut_ptr().cast::<P>().write(p) };
    let cell = Cell { state: AtomicU64::new(marks.live), owner, payload };
    // SAFETY: `S` has the size and alignment of `Cell` (asserted); `Out` points to writable
    // storage for one `S`.
    unsafe { slot.as_ptr().cast::<Cell>().write(cell) };
}

/// Takes the permit out of the caller's storage, if it is a live permit of the object
/// `owner`: exactly one caller wins. `SG_ALREADY_RELEASED` if it was taken before,
/// `SG_FOREIGN_HANDLE` if another object issued it, `SG_INVALID_HANDLE` for storage that
/// holds no permit of this type (zeroed or garbage).
pub(crate) fn take<P>(words: &Words, marks: &Marks, owner: u64) -> Res<P> {
    const { assert!(size_of::<P>() <= size_of::<[u64; 4]>() && align_of::<P>() <= align_of::<u64>()) };
    let cell = cell(words);
    // Relaxed: the payload reached this thread with the storage; the CAS only decides
    // which releaser wins.
    let state = cell.state.load(Ordering::Relaxed);
    if state == marks.released {
        return Err(SG_ALREADY_RELEASED);
    }
    if state != marks.live {
        return Err(SG_INVALID_HANDLE);
    }
    if cell.owner != owner {
        return Err(SG_FOREIGN_HANDLE);
    }
    if cell
        .state
        .compare_exchange(marks.live, marks.released, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return Err(SG_ALREADY_RELEASED);
    }
    // SAFETY: the state was live with this owner, so `issue` wrote a `P` here (the marks
    // are distinct per storage type, and each type's functions take one payload type), and
    // winning the CAS makes this the one read of it.
    Ok(unsafe { cell.payload.as_ptr().cast::<P>().read() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::out;

    #[test]
    fn every_word_written_to_the_storage_is_initialised() {
        // A permit of three words in a payload of four (the shared gate's). Before, the
        // fourth word was copied to the caller's storage from uninitialised stack memory
        // (this test saw an address there; under Miri, reading it is undefined behaviour).
        let marks = Marks { live: 0x4C49_5645, released: 0x5245_4C44 };
        let mut words: Words =
            core::array::from_fn(|_| UnsafeCell::new(MaybeUninit::new(0xA5A5_A5A5_A5A5_A5A5)));
        let slot = out(&mut words as *mut Words).unwrap();
        issue(slot, &marks, 7, [11u64, 12, 13]);
        // SAFETY: every word is initialised (the property under test); the storage is ours.
        let got: [u64; 6] = core::array::from_fn(|i| unsafe { (*words[i].get()).assume_init() });
        assert_eq!(got, [marks.live, 7, 11, 12, 13, 0], "the unused payload word is zero");
        assert_eq!(take::<[u64; 3]>(&words, &marks, 7), Ok([11, 12, 13]));
    }
}
