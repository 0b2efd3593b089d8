//! Permit and ticket ids: a slab of move-only core handles addressed by JS numbers.
//!
//! Core permits (`RawPermit`, `BreakerPermit`, `KeyPermit`) are move-only so they cannot
//! be released twice. JS cannot hold them, so the binding keeps them here and gives JS an
//! id: `generation × 2^24 + index`, an integer below 2^53 (exact in a JS number). A
//! released id's generation no longer matches, so a double release is refused with
//! `SG_ALREADY_RELEASED` instead of returning someone else's slot.

use std::cell::RefCell;

/// Slots addressable by an id (16.7 M live permits per object).
const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// Generations wrap below 2^29, keeping ids below 2^53.
const GEN_MASK: u32 = (1 << 29) - 1;
/// 2^53: ids are below it.
const MAX_ID: f64 = 9_007_199_254_740_992.0;

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// A generation-checked slab. Single-threaded (the JS thread), hence `RefCell`.
pub struct Slab<T> {
    inner: RefCell<Inner<T>>,
}

struct Inner<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self { inner: RefCell::new(Inner { entries: Vec::new(), free: Vec::new(), live: 0 }) }
    }
}

impl<T> Slab<T> {
    /// Stores `value`; its id, or the value back if 2^24 are live.
    #[inline]
    pub fn insert(&self, value: T) -> Result<f64, T> {
        let mut s = self.inner.borrow_mut();
        let index = match s.free.pop() {
            Some(i) => i,
            None => {
                let i = s.entries.len();
                if i as u64 > INDEX_MASK {
                    return Err(value);
                }
                s.entries.push(Entry { generation: 0, value: None });
                i as u32
            }
        };
        s.live += 1;
        let e = &mut s.entries[index as usize];
        e.value = Some(value);
        Ok((u64::from(e.generation) << INDEX_BITS | u64::from(index)) as f64)
    }

    /// Takes the value of `id` out; `None` if `id` is not live (released, or never issued).
    #[inline]
    pub fn take(&self, id: f64) -> Option<T> {
        if !(0.0..MAX_ID).contains(&id) || id.fract() != 0.0 {
            return None;
        }
        let id = id as u64;
        let index = (id & INDEX_MASK) as usize;
        let generation = (id >> INDEX_BITS) as u32;
        let mut s = self.inner.borrow_mut();
        let e = s.entries.get_mut(index)?;
        if e.generation != generation || e.value.is_none() {
            return None;
        }
        let v = e.value.take();
        e.generation = (e.generation + 1) & GEN_MASK;
        s.free.push(index as u32);
        s.live -= 1;
        v
    }

    /// Reads the value of a live `id`.
    pub fn with<R>(&self, id: f64, f: impl FnOnce(&T) -> R) -> Option<R> {
        if !(0.0..MAX_ID).contains(&id) || id.fract() != 0.0 {
            return None;
        }
        let id = id as u64;
        let s = self.inner.borrow();
        let e = s.entries.get((id & INDEX_MASK) as usize)?;
        if e.generation != (id >> INDEX_BITS) as u32 {
            return None;
        }
        e.value.as_ref().map(f)
    }

    /// Takes every live value out (their ids become stale).
    pub fn drain(&self) -> Vec<T> {
        let mut s = self.inner.borrow_mut();
        let mut out = Vec::with_capacity(s.live);
        let mut freed = Vec::new();
        for (i, e) in s.entries.iter_mut().enumerate() {
            if let Some(v) = e.value.take() {
                e.generation = (e.generation + 1) & GEN_MASK;
                freed.push(i as u32);
                out.push(v);
            }
        }
        s.free.extend(freed);
        s.live = 0;
        out
    }

    /// Live entries (permits held by JS).
    pub fn live(&self) -> usize {
        self.inner.borrow().live
    }
}
