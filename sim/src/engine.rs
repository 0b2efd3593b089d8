//! Virtual time: a binary heap of events ordered by `(time, sequence)`, and a generational
//! slab for the objects events refer to.
//!
//! Ties are broken by insertion order, so a run is a pure function of the scenario, the
//! protection and the seed: no wall clock, no hash-map iteration, no threads.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    at: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest event first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Pending events in virtual time (nanoseconds).
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: u64,
    processed: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self { heap: BinaryHeap::new(), seq: 0, now: 0, processed: 0 }
    }
}

impl<E> EventQueue<E> {
    /// The time of the event being processed (or of the last one).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Schedules `event` at `at` (clamped to now: time never runs backwards).
    pub fn schedule(&mut self, at: u64, event: E) {
        let at = at.max(self.now);
        self.seq += 1;
        self.heap.push(Entry { at, seq: self.seq, event });
    }

    /// The next event, if any is due at or before `until`; advances `now` to it.
    pub fn pop_until(&mut self, until: u64) -> Option<E> {
        if self.heap.peek().is_some_and(|e| e.at <= until) {
            let e = self.heap.pop()?;
            self.now = e.at;
            self.processed += 1;
            Some(e.event)
        } else {
            None
        }
    }

    /// Events processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }
}

/// A handle into a [`Slab`]: index plus generation, so a stale handle never aliases a
/// reused slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    idx: u32,
    generation: u32,
}

/// A generational arena with a free list.
pub struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self { slots: Vec::new(), free: Vec::new(), live: 0 }
    }
}

impl<T> Slab<T> {
    /// Stores `value` and returns its key.
    pub fn insert(&mut self, value: T) -> Key {
        self.live += 1;
        if let Some(idx) = self.free.pop() {
            let slot = &mut self.slots[idx as usize];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(value);
            Key { idx, generation: slot.0 }
        } else {
            self.slots.push((0, Some(value)));
            Key { idx: (self.slots.len() - 1) as u32, generation: 0 }
        }
    }

    /// The value behind `key`, unless it was removed.
    pub fn get(&self, key: Key) -> Option<&T> {
        match self.slots.get(key.idx as usize) {
            Some((g, Some(v))) if *g == key.generation => Some(v),
            _ => None,
        }
    }

    /// Mutable access to the value behind `key`, unless it was removed.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.slots.get_mut(key.idx as usize) {
            Some((g, Some(v))) if *g == key.generation => Some(v),
            _ => None,
        }
    }

    /// Removes and returns the value behind `key`.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        match self.slots.get_mut(key.idx as usize) {
            Some((g, v @ Some(_))) if *g == key.generation => {
                self.free.push(key.idx);
                self.live -= 1;
                v.take()
            }
            _ => None,
        }
    }

    /// Values stored now.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_in_time_then_insertion_order() {
        let mut q = EventQueue::default();
        q.schedule(5, 'c');
        q.schedule(1, 'a');
        q.schedule(5, 'd');
        q.schedule(1, 'b');
        let mut out = String::new();
        while let Some(e) = q.pop_until(10) {
            out.push(e);
        }
        assert_eq!(out, "abcd");
        assert_eq!(q.now(), 5);
        q.schedule(0, 'e'); // in the past: runs now
        assert_eq!(q.pop_until(4), None);
        assert_eq!(q.pop_until(5), Some('e'));
    }

    #[test]
    fn stale_keys_do_not_alias() {
        let mut s = Slab::default();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
    }
}
