//! Permits in caller storage.
//!
//! An admission handed to C is an [`sg_permit`]: 64 bytes of caller storage (a stack
//! variable, a field of the request struct) that the library fills on admission and
//! empties on release. No allocation, and every misuse has its own status with no state
//! change:
//!
//! | misuse | how it is caught | status |
//! |---|---|---|
//! | released twice (also by two threads at once) | a state word, `LIVE → RELEASED` by one compare-and-swap; only the winner releases the core permit | `SG_ALREADY_RELEASED` |
//! | released to another object, or to an object of another type | the issuer's id (process-unique, never reused) and type are recorded and compared first | `SG_FOREIGN_HANDLE` |
//! | never filled (zeroed storage), or garbage | the state word holds neither `LIVE` nor `RELEASED` (both are 64-bit magics) | `SG_INVALID_HANDLE` |
//!
//! Inside: the state word, the issuer's id, the issuer's type, and the core's own permit
//! (a limiter's `PlacedRawPermit`, a gate's `RawPermit`, a `BreakerPermit` or a keyed
//! table's `PlacedKeyPermit`, moved in by value; a shared object's permit also names the
//! process slot it is counted to). The core checks its
//! own owner tag again when the permit reaches it.
//!
//! What cannot be caught: a byte copy of a live permit is a second handle to the same
//! admission, and each copy would release once. Move a permit with [`sg_permit_move`]
//! (which empties the source) rather than by assignment.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

use surgeguard_std::placement::{PlacedKeyPermit, PlacedRawPermit};

use crate::handle::{ffi, input, out, Res};
use crate::status::sg_status::{self, *};

/// Caller storage for one admission (a permit of an `sg_limiter`, `sg_gate`,
/// `sg_breaker` or `sg_keyed`). Opaque: fill it only through the library.
///
/// Life: a successful acquire writes it (`LIVE`); the matching release empties it
/// (`RELEASED`) exactly once — a second release says `SG_ALREADY_RELEASED`, a release to
/// another object `SG_FOREIGN_HANDLE`, a release of zeroed or garbage storage
/// `SG_INVALID_HANDLE`, and none of them changes anything. Storage may be reused for a
/// new admission once released. Do not copy a live permit with `=` or `memcpy`: use
/// `sg_permit_move`. Zero it (`sg_permit p = {0};`) if it may be released before it is
/// filled. An acquire writes its output without reading it (so uninitialised storage is
/// fine there): acquiring into a live permit would lose that admission; don't.
// (Not in the doc comment, which cbindgen copies into the header.) In Rust the words are
// `UnsafeCell<MaybeUninit<u64>>`: the state word is updated atomically through a shared
// borrow, and the core permit's padding bytes stay uninitialised. C sees
// `uint64_t opaque[8]` (cbindgen unwraps both wrappers): same size, alignment and ABI.
#[repr(C)]
#[derive(Debug)]
pub struct sg_permit {
    /// Opaque.
    pub opaque: [UnsafeCell<MaybeUninit<u64>>; 8],
}

impl sg_permit {
    /// Zeroed storage: not a permit (releasing it says `SG_INVALID_HANDLE`), the Rust
    /// spelling of `sg_permit p = {0};`.
    pub const fn zeroed() -> Self {
        Self { opaque: [const { UnsafeCell::new(MaybeUninit::new(0)) }; 8] }
    }
}

impl Default for sg_permit {
    fn default() -> Self {
        Self::zeroed()
    }
}

/// Which object type issued a permit (`sg_permit_info.kind`).
pub const SG_PERMIT_KIND_LIMITER: u32 = 1;
/// Issued by an `sg_gate` (`sg_gate_arrive` or a grant from `sg_gate_poll`).
pub const SG_PERMIT_KIND_GATE: u32 = 2;
/// Issued by an `sg_breaker`.
pub const SG_PERMIT_KIND_BREAKER: u32 = 3;
/// Issued by an `sg_keyed`.
pub const SG_PERMIT_KIND_KEYED: u32 = 4;

/// `state` of a live permit ("SGPRMLIV").
const LIVE: u64 = 0x5347_5052_4D4C_4956;
/// `state` of a released (or moved-away) permit ("SGPRMREL").
const RELEASED: u64 = 0x5347_5052_4D52_454C;

/// The layout behind `sg_permit`'s opaque words.
#[repr(C)]
struct Cell {
    state: AtomicU64,
    owner: u64,
    kind: u32,
    _reserved: u32,
    /// The core permit, by value; its padding bytes stay uninitialised, so the payload is
    /// only ever handled as `MaybeUninit` (never as integers).
    payload: MaybeUninit<[u64; 5]>,
}

const _: () = assert!(size_of::<Cell>() == size_of::<sg_permit>());
const _: () = assert!(align_of::<Cell>() == align_of::<sg_permit>());

/// A core permit type that fits the payload and can be moved by bytes.
pub(crate) trait CorePermit: Sized {}
impl CorePermit for surgeguard_core::RawPermit {}
impl CorePermit for surgeguard_core::breaker::BreakerPermit {}
impl CorePermit for PlacedRawPermit {}
impl CorePermit for PlacedKeyPermit {}

/// Checks at compile time that `P` fits the payload and has no drop glue (it is moved
/// out by a byte copy and, if the core refuses it, the bytes are simply kept), unless
/// `leak_check`: `RawPermit`'s drop glue only reports a permit dropped unreleased, and
/// this crate never drops one (`Limiter::release_raw` consumes it without running it,
/// also when it refuses it, and the bytes kept stay the one live copy).
const fn fits<P>(leak_check: bool) {
    assert!(size_of::<P>() <= size_of::<[u64; 5]>());
    assert!(align_of::<P>() <= align_of::<u64>());
    assert!(leak_check || !core::mem::needs_drop::<P>());
}
const _: () = fits::<surgeguard_core::RawPermit>(true);
const _: () = fits::<surgeguard_core::breaker::BreakerPermit>(false);
const _: () = fits::<PlacedRawPermit>(true);
const _: () = fits::<PlacedKeyPermit>(false);

impl sg_permit {
    fn cell(&self) -> &Cell {
        // SAFETY: `Cell` has the size and alignment of `sg_permit` (asserted above). Every
        // byte of `sg_permit` is inside an `UnsafeCell`, so the `state` atomic of the `&Cell`
        // may be written through this shared borrow (as `AtomicU64` allows). Reading `owner`
        // and `kind` as integers needs them initialised: `issue`/`sg_permit_move` write them
        // as integers, and zeroed or garbage storage from C is initialised bytes; only the
        // payload may hold uninitialised (padding) bytes, and it is `MaybeUninit`.
        unsafe { &*(self as *const Self).cast::<Cell>() }
    }
}

/// Writes `permit` (issued by object `owner`, as `kind`) into the caller's storage.
pub(crate) fn issue<P: CorePermit>(
    slot: crate::handle::Out<sg_permit>,
    owner: u64,
    kind: u32,
    p: P,
) {
    slot.write(live_permit(owner, kind, p));
}

/// A live permit holding `p`, issued by object `owner` as `kind`.
pub(crate) fn live_permit<P: CorePermit>(owner: u64, kind: u32, p: P) -> sg_permit {
    let mut payload = MaybeUninit::<[u64; 5]>::zeroed();
    // SAFETY: `fits::<P>()` holds for every `CorePermit`: `P` fits in the payload and needs no
    // more than `u64` alignment, so the write is in bounds and aligned.
    unsafe { payload.as_mut_ptr().cast::<P>().write(p) };
    let cell = Cell { state: AtomicU64::new(LIVE), owner, kind, _reserved: 0, payload };
    // SAFETY: same size and alignment (asserted above), and every bit pattern, including
    // uninitialised bytes (the payload holds `P`'s padding), is a valid `sg_permit`: its
    // words are `MaybeUninit<u64>`. (The `UnsafeCell`s change no layout.)
    unsafe { core::mem::transmute::<Cell, sg_permit>(cell) }
}

/// Takes the core permit out of a live permit issued by `owner` as `kind`, marking the
/// storage released. `Err` changes nothing. If the core then refuses the permit, call
/// [`restore`] to make it live again.
pub(crate) fn take<P: CorePermit>(permit: &sg_permit, owner: u64, kind: u32) -> Res<P> {
    let cell = permit.cell();
    // Relaxed (here and in the CAS): the payload was written before the storage reached
    // this thread by whatever handed it over; the state word only needs atomicity, so
    // that exactly one releaser wins.
    match cell.state.load(Ordering::Relaxed) {
        LIVE => {}
        RELEASED => return Err(SG_ALREADY_RELEASED),
        _ => return Err(SG_INVALID_HANDLE),
    }
    if cell.owner != owner || cell.kind != kind {
        return Err(SG_FOREIGN_HANDLE);
    }
    cell.state
        .compare_exchange(LIVE, RELEASED, Ordering::Relaxed, Ordering::Relaxed)
        .map_err(|_| SG_ALREADY_RELEASED)?;
    // SAFETY: `issue` wrote a `P` (same `kind`, checked) into the payload; only this thread
    // won the CAS, so it is read out once. `P` has no drop glue, so the bytes left behind
    // are inert.
    Ok(unsafe { cell.payload.as_ptr().cast::<P>().read() })
}

/// Undoes [`take`] after the core refused the permit: it is live again.
pub(crate) fn restore(permit: &sg_permit) {
    // Relaxed: as in `take`.
    permit.cell().state.store(LIVE, Ordering::Relaxed);
}

/// The cell of a live permit.
fn live_cell(permit: &sg_permit) -> Res<&Cell> {
    let cell = permit.cell();
    // Relaxed: as in `take`.
    match cell.state.load(Ordering::Relaxed) {
        LIVE => Ok(cell),
        RELEASED => Err(SG_ALREADY_RELEASED),
        _ => Err(SG_INVALID_HANDLE),
    }
}

/// What a permit says about itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_permit_info {
    /// `SG_PERMIT_KIND_*`: which object type issued it.
    pub kind: u32,
    /// Limiter and gate permits: the priority level it was admitted at (0 otherwise).
    pub level: u32,
    /// Limiter and gate permits: the `now` it was admitted at (0 otherwise).
    pub started_at_ns: u64,
    /// Breaker permits: whether this call is a half-open probe.
    pub is_probe: bool,
    /// Keyed permits: the shard whose slot it holds (0 otherwise).
    pub shard: u32,
    /// Keyed permits: the key hash it was admitted for (0 otherwise).
    pub key_hash: u64,
}

/// Describes a live permit. `SG_ALREADY_RELEASED` for a released one, `SG_INVALID_HANDLE`
/// for storage that never held one.
#[no_mangle]
pub unsafe extern "C" fn sg_permit_info_get(
    permit: *const sg_permit,
    info_out: *mut sg_permit_info,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract: NULL or a readable `sg_permit`.
        let permit = unsafe { input(permit)? };
        let info_out = out(info_out)?;
        let cell = live_cell(permit)?;
        let payload = cell.payload.as_ptr();
        let mut info = sg_permit_info { kind: cell.kind, ..Default::default() };
        match cell.kind {
            SG_PERMIT_KIND_LIMITER => {
                // SAFETY: limiter permits hold a `PlacedRawPermit` (see `issue`); it is
                // read through a shared reference and not moved.
                let p = unsafe { &*payload.cast::<PlacedRawPermit>() };
                info.level = p.level().index() as u32;
                info.started_at_ns = p.started_at();
            }
            SG_PERMIT_KIND_GATE => {
                // SAFETY: gate permits hold a `RawPermit` (see `issue`); it is read
                // through a shared reference and not moved.
                let p = unsafe { &*payload.cast::<surgeguard_core::RawPermit>() };
                info.level = p.level().index() as u32;
                info.started_at_ns = p.started_at();
            }
            SG_PERMIT_KIND_BREAKER => {
                // SAFETY: breaker permits hold a `BreakerPermit`.
                let p = unsafe { &*payload.cast::<surgeguard_core::breaker::BreakerPermit>() };
                info.is_probe = p.is_probe();
            }
            SG_PERMIT_KIND_KEYED => {
                // SAFETY: keyed permits hold a `PlacedKeyPermit`.
                let p = unsafe { &*payload.cast::<PlacedKeyPermit>() };
                info.shard = p.shard() as u32;
                info.key_hash = p.key_hash();
            }
            _ => return Err(SG_INVALID_HANDLE),
        }
        info_out.write(info);
        Ok(())
    })
}

/// Whether the storage holds a live permit (`true`) or a released one (`false`);
/// `SG_INVALID_HANDLE` for storage that never held one.
#[no_mangle]
pub unsafe extern "C" fn sg_permit_is_live(
    permit: *const sg_permit,
    live_out: *mut bool,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract: NULL or a readable `sg_permit`.
        let permit = unsafe { input(permit)? };
        let live_out = out(live_out)?;
        let live = match live_cell(permit) {
            Ok(_) => true,
            Err(SG_ALREADY_RELEASED) => false,
            Err(e) => return Err(e),
        };
        live_out.write(live);
        Ok(())
    })
}

/// Moves a live permit from `src` to `dst` (e.g. into a request struct or another
/// thread's slot): `dst` becomes the permit, `src` reads as released. `dst` must be
/// zeroed storage or a released permit (it is read, so not uninitialised memory): a
/// `dst` that holds a live permit is refused with `SG_INVALID_ARGUMENT` (moving over it
/// would lose that admission), as is `src == dst`; neither changes anything.
#[no_mangle]
pub unsafe extern "C" fn sg_permit_move(src: *mut sg_permit, dst: *mut sg_permit) -> sg_status {
    ffi(|| {
        if src == dst && !src.is_null() {
            return Err(SG_INVALID_ARGUMENT);
        }
        // SAFETY: the crate's contract: NULL or an `sg_permit` readable for the call. Its
        // state word is written through this shared borrow, which `sg_permit`'s `UnsafeCell`s
        // allow.
        let src_ref = unsafe { input(src.cast_const())? };
        // SAFETY: as for `src`: `dst` is NULL or an `sg_permit` (zeroed, released or live)
        // readable for the call; only its state word is read here.
        let dst_ref = unsafe { input(dst.cast_const())? };
        let cell = live_cell(src_ref)?;
        // Relaxed: as in `take`.
        if dst_ref.cell().state.load(Ordering::Relaxed) == LIVE {
            return Err(SG_INVALID_ARGUMENT);
        }
        let dst = out(dst)?;
        let (owner, kind) = (cell.owner, cell.kind);
        // Take the payload as raw words, winning the source's state word first.
        cell.state
            .compare_exchange(LIVE, RELEASED, Ordering::Relaxed, Ordering::Relaxed)
            .map_err(|_| SG_ALREADY_RELEASED)?;
        // The source was live and this thread won its state word, so nobody else moves or
        // releases it meanwhile. The payload is copied as `MaybeUninit` (padding included,
        // never read as integers).
        let payload = cell.payload;
        let moved = Cell { state: AtomicU64::new(LIVE), owner, kind, _reserved: 0, payload };
        // SAFETY: same size and alignment (asserted above), and every bit pattern is a valid
        // `sg_permit` (`MaybeUninit` words).
        dst.write(unsafe { core::mem::transmute::<Cell, sg_permit>(moved) });
        Ok(())
    })
}
