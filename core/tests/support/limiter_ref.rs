//! A sequential reference model of the Limiter with a fixed limit, written from the rules
//! its documentation states (not from its code):
//!
//! - **Slots.** A limit `L ≥ 1` has `floor(L)` slots; a limit below 1 has one slot and,
//!   after a completion (not `Ignored`) of latency `r`, an idle period of `r·(1/L − 1)`
//!   during which nothing is admitted (`retry_after` = the idle time left).
//! - **Partitions.** Level `p`'s share is `g[p] = floor(L × w[p])`. A level is active while
//!   it saw an arrival (admitted or refused) within `active_ns`. An active level's target
//!   is `t[q] = min(g[q], d[q] + 1)` (`d`: its demand, below) and it
//!   reserves `max(0, t[q] − n[q])`; an arrival at `p` is admitted iff
//!   `total + Σ_{q < p, q active} reserved[q] < slots`, refused for want of a slot first,
//!   then for idle time.
//! - **Static limit.** `set_static_limit(Some(n))` makes `n` the limit in force; `None`
//!   gives back the algorithm's (here: fixed) limit.
//! - **Windows.** With `min_samples = 1` and `min_window_ns = max_window_ns = W`, a window
//!   closes at the first `Success` or `Dropped` release at or after `W` past the last one
//!   (the first such release closes the first window).
//! - **Demand** (with more than one level): the most a level held, or was
//!   refused at for want of a slot (`held + 1`); at each window it decays to
//!   `max(held, d − ceil(d / 4))`.
//!
//! Times here are whole milliseconds (the limiter refreshes activity stamps once per ms).

pub const MS: u64 = 1_000_000;

/// What the rules say about one arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit,
    /// Refused: in flight plus the reservations of more important levels fill the slots.
    NoSlot,
    /// Refused inside a fractional limit's idle period, for this long still.
    Idle(u64),
}

pub struct Reference {
    pub weights: Vec<f64>,
    pub active_ns: u64,
    pub window_ns: u64,
    pub base_limit: f64,
    pub pin: Option<f64>,
    /// Per level: the `now` of its last arrival.
    pub seen: Vec<Option<u64>>,
    /// Per level: in flight.
    pub n: Vec<u64>,
    pub demand: Vec<u32>,
    pub idle_until: u64,
    pub next_window: u64,
    pub windows: u64,
    pub admitted: u64,
    pub rejected: Vec<u64>,
    pub successes: u64,
    pub drops: u64,
    pub ignored: u64,
}

impl Reference {
    pub fn new(base_limit: f64, weights: &[f64], active_ns: u64, window_ns: u64) -> Self {
        let levels = weights.len();
        Self {
            weights: weights.to_vec(),
            active_ns,
            window_ns,
            base_limit,
            pin: None,
            seen: vec![None; levels],
            n: vec![0; levels],
            demand: vec![0; levels],
            idle_until: 0,
            next_window: 0,
            windows: 0,
            admitted: 0,
            rejected: vec![0; levels],
            successes: 0,
            drops: 0,
            ignored: 0,
        }
    }

    pub fn levels(&self) -> usize {
        self.weights.len()
    }
    pub fn limit(&self) -> f64 {
        self.pin.unwrap_or(self.base_limit)
    }
    pub fn slots(&self) -> u64 {
        if self.limit() < 1.0 {
            1
        } else {
            self.limit().floor() as u64
        }
    }
    pub fn share(&self, level: usize) -> u64 {
        (self.limit() * self.weights[level]).floor() as u64
    }
    pub fn active(&self, level: usize, now: u64) -> bool {
        self.seen[level].is_some_and(|s| now - s <= self.active_ns)
    }
    pub fn total(&self) -> u64 {
        self.n.iter().sum()
    }
    /// What level `q` holds back for itself while active: its demand plus one slot, at
    /// most its share.
    pub fn target(&self, q: usize) -> u64 {
        (u64::from(self.demand[q]) + 1).min(self.share(q))
    }
    pub fn reserved_above(&self, p: usize, now: u64) -> u64 {
        (0..p)
            .filter(|&q| self.active(q, now))
            .map(|q| self.target(q).saturating_sub(self.n[q]))
            .sum()
    }

    /// Marks `p` active at `now` and says what the rules decide, booking nothing.
    pub fn decide(&mut self, p: usize, now: u64) -> Decision {
        self.seen[p] = Some(now);
        if self.total() + self.reserved_above(p, now) >= self.slots() {
            Decision::NoSlot
        } else if self.limit() < 1.0 && now < self.idle_until {
            Decision::Idle(self.idle_until - now)
        } else {
            Decision::Admit
        }
    }

    /// Books a decision for an arrival at `p`.
    pub fn book(&mut self, p: usize, decision: Decision) {
        let multi = self.levels() > 1;
        match decision {
            Decision::Admit => {
                self.n[p] += 1;
                self.admitted += 1;
                if multi {
                    self.demand[p] = self.demand[p].max(self.n[p] as u32);
                }
            }
            Decision::NoSlot => {
                self.rejected[p] += 1;
                if multi {
                    self.demand[p] = self.demand[p].max(self.n[p] as u32 + 1);
                }
            }
            Decision::Idle(_) => self.rejected[p] += 1,
        }
    }

    /// A release at `now` of a permit of level `p` admitted at `started`.
    /// `outcome`: 0 success, 1 dropped, 2 ignored.
    pub fn release(&mut self, p: usize, started: u64, now: u64, outcome: u8) {
        self.n[p] -= 1;
        let latency = now - started;
        match outcome {
            0 => self.successes += 1,
            1 => self.drops += 1,
            _ => self.ignored += 1,
        }
        if outcome == 2 {
            return;
        }
        let limit = self.limit();
        if limit < 1.0 {
            // The test uses limits 1/2, 1/4, 1/8: 1/L − 1 is a whole number.
            let factor = (1.0 / limit - 1.0) as u64;
            self.idle_until = self.idle_until.max(now + latency * factor);
        }
        if now >= self.next_window {
            self.windows += 1;
            self.next_window = now + self.window_ns;
            if self.levels() > 1 {
                for l in 0..self.levels() {
                    let d = self.demand[l];
                    self.demand[l] = (d - d.div_ceil(4)).max(self.n[l] as u32);
                }
            }
        }
    }
}
