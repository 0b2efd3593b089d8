//! The limits to come back to (state machine step 8): the recall of the limit held before a
//! cut, and the one-off jumps other mechanisms decide (the flat test's resume, the
//! speed-up cut), applied after the step of the window.

use super::*;

/// Pending limits.
///
/// Invariants: `limit == 0` means no recall pending (then `base` and `recalling` mean
/// nothing); a pending recall is above the current limit (reaching it ends the recall).
/// `recalling` is set once a recall doubling was applied, so a congested window after it
/// ends the recall. `was_near` is the previous window's "within `buffer` of the baseline"
/// (two in a row double). `resume_at` and `cut_to` are 0 unless a jump is pending; each is
/// applied by the next window that reaches step 8, then cleared.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Recall {
    /// The limit to come back to (0: none pending), and the baseline when it was set.
    pub(super) limit: f32,
    pub(super) base: f32,
    /// A recall doubling was applied since `limit` was set.
    pub(super) recalling: bool,
    /// The previous window's statistic was within `buffer` of the baseline.
    pub(super) was_near: bool,
    /// The flat test's verdict: the limit resumes at least here.
    pub(super) resume_at: f32,
    /// A speed-up at a binding limit: the limit is cut to this (and slow start resumes).
    pub(super) cut_to: f32,
}

impl Gradient {
    /// Remembers `limit`, reached over baseline `base`, as one to come back to (step 8),
    /// unless a higher one is pending.
    pub(super) fn remember(&mut self, limit: f64, base: f64) {
        if limit > self.recall.limit as f64 {
            self.recall.limit = limit as f32;
            self.recall.base = base as f32;
            self.recall.recalling = false;
        }
    }

    /// Step 8: the recall, then the jumps other mechanisms left pending (the flat test's
    /// resume, the speed-up cut). `new` is the limit steps 5 to 7 chose, `l` the limit in
    /// force during the window; returns the limit to carry on with.
    pub(super) fn recall_step(
        &mut self,
        stat: f64,
        congested: bool,
        reached: bool,
        l: f64,
        mut new: f64,
    ) -> f64 {
        let near = stat <= self.base.value * (1.0 + self.cfg.buffer);
        if self.recall.limit > 0.0 && self.probe_free() && self.intr.share <= 0.0 {
            if congested && self.recall.recalling {
                self.recall.limit = 0.0;
                self.recall.recalling = false;
            } else if near && self.recall.was_near && reached && l < self.recall.limit as f64 {
                new = new.max((2.0 * l).min(self.recall.limit as f64));
                self.recall.recalling = true;
            }
        }
        self.recall.was_near = near;
        if self.recall.resume_at > 0.0 {
            new = new.max(self.recall.resume_at as f64);
            self.recall.resume_at = 0.0;
        }
        if self.recall.cut_to > 0.0 {
            new = self.recall.cut_to as f64;
            self.recall.cut_to = 0.0;
            self.ss.on = self.cfg.slow_start;
        }
        new
    }
}
