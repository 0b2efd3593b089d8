//! The permit life cycle through the C API, written to run under Miri
//! (`cargo +nightly miri test -p surgeguard-ffi --test permit`): acquire, inspect, move,
//! release, double release, foreign release and zeroed storage, for a `RawPermit`
//! (limiter) and a `BreakerPermit` (both have padding bytes), plus two threads racing to
//! release one permit.

use std::mem::MaybeUninit;
use std::ptr;

use surgeguard::breaker::*;
use surgeguard::limiter::*;
use surgeguard::permit::*;
use surgeguard::status::sg_status::{self, *};
use surgeguard::vocab::SG_OUTCOME_SUCCESS;

fn limiter() -> *mut sg_limiter {
    let mut cfg = MaybeUninit::<sg_limiter_config>::zeroed();
    let mut l = ptr::null_mut();
    // SAFETY: `cfg` and `l` are valid output slots; `cfg` is filled before it is read.
    unsafe {
        assert_eq!(sg_limiter_config_default(cfg.as_mut_ptr()), SG_OK);
        assert_eq!(sg_limiter_new(cfg.as_ptr(), &mut l), SG_OK);
    }
    assert!(!l.is_null());
    l
}

fn breaker() -> *mut sg_breaker {
    let mut cfg = MaybeUninit::<sg_breaker_config>::zeroed();
    let mut b = ptr::null_mut();
    // SAFETY: as in `limiter`.
    unsafe {
        assert_eq!(sg_breaker_config_default(cfg.as_mut_ptr()), SG_OK);
        assert_eq!(sg_breaker_new(cfg.as_ptr(), &mut b), SG_OK);
    }
    assert!(!b.is_null());
    b
}

/// `sg_permit_is_live` through a shared borrow (as a Rust caller would pass `&p`).
fn is_live(p: &sg_permit) -> Result<bool, sg_status> {
    let mut live = false;
    // SAFETY: `p` is a readable permit and `live` a valid output slot.
    match unsafe { sg_permit_is_live(p, &mut live) } {
        SG_OK => Ok(live),
        s => Err(s),
    }
}

fn info(p: &sg_permit) -> Result<sg_permit_info, sg_status> {
    let mut info = sg_permit_info::default();
    // SAFETY: as in `is_live`.
    match unsafe { sg_permit_info_get(p, &mut info) } {
        SG_OK => Ok(info),
        s => Err(s),
    }
}

#[test]
fn limiter_permit_acquire_move_release_and_misuse() {
    let (l, other) = (limiter(), limiter());
    // SAFETY: `l` and `other` are live limiters freed once at the end; every permit pointer
    // is a local `sg_permit`.
    unsafe {
        let mut p = sg_permit::zeroed();
        assert_eq!(is_live(&p), Err(SG_INVALID_HANDLE));
        assert_eq!(sg_limiter_release(l, &mut p, 1, SG_OUTCOME_SUCCESS), SG_INVALID_HANDLE);

        assert_eq!(sg_limiter_try_acquire(l, 1_000, 2, &mut p, ptr::null_mut()), SG_OK);
        assert_eq!(is_live(&p), Ok(true));
        let i = info(&p).unwrap();
        assert_eq!((i.kind, i.level, i.started_at_ns), (SG_PERMIT_KIND_LIMITER, 2, 1_000));
        let mut inflight = 0;
        assert_eq!(sg_limiter_inflight(l, &mut inflight), SG_OK);
        assert_eq!(inflight, 1);

        // Released to another limiter: refused, nothing changes.
        assert_eq!(sg_limiter_release(other, &mut p, 2_000, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
        assert_eq!(is_live(&p), Ok(true));

        // Moved: the destination is the permit, the source reads as released.
        let mut q = sg_permit::default();
        assert_eq!(sg_permit_move(&mut p, &mut p), SG_INVALID_ARGUMENT);
        assert_eq!(sg_permit_move(&mut p, &mut q), SG_OK);
        assert_eq!(is_live(&p), Ok(false));
        assert_eq!(is_live(&q), Ok(true));
        assert_eq!(info(&q).unwrap().started_at_ns, 1_000);
        assert_eq!(sg_permit_move(&mut p, &mut q), SG_ALREADY_RELEASED);
        assert_eq!(sg_limiter_release(l, &mut p, 2_000, SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);

        // A Rust move of the storage (a typed copy, padding included) keeps it valid.
        let mut r = q;
        assert_eq!(sg_limiter_release(l, &mut r, 2_000, SG_OUTCOME_SUCCESS), SG_OK);
        assert_eq!(sg_limiter_inflight(l, &mut inflight), SG_OK);
        assert_eq!(inflight, 0);
        assert_eq!(sg_limiter_release(l, &mut r, 3_000, SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);
        assert_eq!(is_live(&r), Ok(false));
        assert_eq!(info(&r), Err(SG_ALREADY_RELEASED));

        // Released storage can be reused.
        assert_eq!(sg_limiter_try_acquire(l, 4_000, 0, &mut r, ptr::null_mut()), SG_OK);
        assert_eq!(sg_limiter_release(l, &mut r, 5_000, SG_OUTCOME_SUCCESS), SG_OK);

        sg_limiter_free(l);
        sg_limiter_free(other);
    }
}

#[test]
fn breaker_permit_release_and_misuse() {
    let (b, l) = (breaker(), limiter());
    // SAFETY: as in the limiter test.
    unsafe {
        let mut p = sg_permit::zeroed();
        assert_eq!(sg_breaker_try_acquire(b, 1_000, &mut p, ptr::null_mut()), SG_OK);
        let i = info(&p).unwrap();
        assert_eq!((i.kind, i.is_probe), (SG_PERMIT_KIND_BREAKER, false));
        // A breaker permit released to a limiter: another object, another type.
        assert_eq!(sg_limiter_release(l, &mut p, 2_000, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
        let mut q = sg_permit::zeroed();
        assert_eq!(sg_permit_move(&mut p, &mut q), SG_OK);
        assert_eq!(sg_breaker_record(b, &mut q, 2_000, SG_OUTCOME_SUCCESS, 1_000), SG_OK);
        assert_eq!(
            sg_breaker_record(b, &mut q, 3_000, SG_OUTCOME_SUCCESS, 1_000),
            SG_ALREADY_RELEASED
        );
        assert_eq!(
            sg_breaker_record(b, &mut p, 3_000, SG_OUTCOME_SUCCESS, 1_000),
            SG_ALREADY_RELEASED
        );
        sg_breaker_free(b);
        sg_limiter_free(l);
    }
}

/// A limiter and a permit handed to other threads, as C code would share them.
#[derive(Clone, Copy)]
struct Shared(*mut sg_limiter, *mut sg_permit);

// SAFETY: the limiter is thread-safe and the permit is only touched through the library,
// whose state word makes concurrent releases safe; both outlive the threads.
unsafe impl Send for Shared {}

impl Shared {
    fn get(self) -> (*mut sg_limiter, *mut sg_permit) {
        (self.0, self.1)
    }
}

#[test]
fn two_threads_release_one_permit_exactly_once() {
    let l = limiter();
    let mut p = sg_permit::zeroed();
    // SAFETY: `l` is live; `p` is a local permit.
    assert_eq!(unsafe { sg_limiter_try_acquire(l, 1_000, 0, &mut p, ptr::null_mut()) }, SG_OK);
    let ptrs = Shared(l, ptr::addr_of_mut!(p));
    let results: Vec<sg_status> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || {
                    let (l, p) = ptrs.get();
                    // SAFETY: the limiter is thread-safe and outlives the scope; the permit
                    // outlives the scope and is only touched through the library.
                    unsafe { sg_limiter_release(l, p, 2_000, SG_OUTCOME_SUCCESS) }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|&&s| s == SG_OK).count();
    let again = results.iter().filter(|&&s| s == SG_ALREADY_RELEASED).count();
    assert_eq!((ok, again), (1, 1), "{results:?}");
    let mut inflight = 1;
    // SAFETY: `l` is live; freed once.
    unsafe {
        assert_eq!(sg_limiter_inflight(l, &mut inflight), SG_OK);
        sg_limiter_free(l);
    }
    assert_eq!(inflight, 0);
}
