//! Retry budgets: the windowed Finagle/SRE budget ([`RetryBudget`]) and the gRPC A6 token
//! throttle ([`TokenRetryThrottle`]).
//!
//! A per-call retry limit ("up to 3 retries") is not a control: when everything fails it
//! multiplies load by four at every layer, and three layers make 64× (Google SRE book
//! ch. 22, "Addressing Cascading Failures"). A budget bounds retries as a share of
//! traffic, so amplification has a ceiling however bad things get. Constants: Finagle's
//! `RetryBudget` and gRPC A6 (`grpc/proposal` A6-client-retries.md).

#[cfg(all(not(loom), target_has_atomic = "64"))]
use crate::layout::{fingerprint, Placeable};
use crate::sync::{AtomicI64, AtomicU32, AtomicU64, Exclusive, Ordering};
use crate::time::{AtomicMonotonic, SEC};
use crate::types::check_range;
use crate::{ConfigError, Reason, Rejected};

/// Fixed-point scale of the budget: one request deposits this many units
/// (Finagle `RetryBudget` `ScaleFactor`).
pub const SCALE: i64 = 1000;

/// Slots in the budget's window; each covers `ttl / BUDGET_SLOTS`
/// (Finagle `WindowedAdder` and tower `TpsBudget`: 10 slices).
pub const BUDGET_SLOTS: usize = 10;

/// Settings of a [`RetryBudget`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct RetryBudgetConfig {
    /// How long a deposit can fund retries, in ns. In `[1 s, 60 s]` (Finagle's bounds).
    pub ttl: u64,
    /// Retries per second allowed even with no traffic (the reserve is this × ttl).
    /// At most 1 000 000.
    pub min_retries_per_sec: u32,
    /// Retries allowed as a fraction of requests (`0.1` = 10 %). `0` or in `[0.001, 1000]`
    /// (Finagle allows `[0, 1000]`; below 0.001 the fixed-point cost would not fit).
    pub percent_can_retry: f64,
}

impl Default for RetryBudgetConfig {
    /// ttl 10 s and 10 retries/s (Finagle defaults), 10 % of traffic (the per-client
    /// retry budget of the Google SRE book, ch. 22).
    fn default() -> Self {
        Self { ttl: 10 * SEC, min_retries_per_sec: 10, percent_can_retry: 0.1 }
    }
}

impl RetryBudgetConfig {
    /// Finagle's `RetryBudget()` defaults exactly: ttl 10 s, 10 retries/s, 20 %.
    pub const fn finagle() -> Self {
        Self { ttl: 10 * SEC, min_retries_per_sec: 10, percent_can_retry: 0.2 }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.ttl < SEC || self.ttl > 60 * SEC {
            return Err(ConfigError::out_of_range("retry_budget.ttl"));
        }
        if self.min_retries_per_sec > 1_000_000 {
            return Err(ConfigError::out_of_range("retry_budget.min_retries_per_sec"));
        }
        let p = check_range(self.percent_can_retry, 0.0, 1000.0, "retry_budget.percent_can_retry")?;
        if p != 0.0 && p < 0.001 {
            return Err(ConfigError::out_of_range("retry_budget.percent_can_retry"));
        }
        Ok(())
    }
}

// The current slot's word: deposits (top 24 bits) | withdrawals (24 bits) | slot tag (16).
// A deposit is a plain `fetch_add` at the top, so more than 2^24 deposits in one slot drop
// off the word (credit lost: errs towards fewer retries); withdrawals saturate.
const TAG_BITS: u32 = 16;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const WITHDRAWAL_SHIFT: u32 = TAG_BITS;
const DEPOSIT_SHIFT: u32 = 40;
const COUNT_MASK: u64 = (1 << 24) - 1;
const ONE_DEPOSIT: u64 = 1 << DEPOSIT_SHIFT;
const ONE_WITHDRAWAL: u64 = 1 << WITHDRAWAL_SHIFT;
/// `BudgetRing::started` once the ring has tagged its first slot.
const RING_STARTED: u32 = 1;

const fn slot_tag(epoch: u64) -> u64 {
    epoch & TAG_MASK
}
const fn deposits_of(word: u64) -> u64 {
    word >> DEPOSIT_SHIFT
}
const fn withdrawals_of(word: u64) -> u64 {
    (word >> WITHDRAWAL_SHIFT) & COUNT_MASK
}

/// The completed slots of the window, touched only by whichever thread folds.
#[derive(Debug)]
#[repr(C)]
struct BudgetRing {
    /// [`RING_STARTED`] once the first slot is tagged, else 0 (an integer, not a `bool`:
    /// the ring may live in shared memory, see [`Placeable`](crate::layout::Placeable)).
    started: u32,
    /// The epoch of the current slot (whose counts are in `RetryBudget::current`).
    epoch: u64,
    /// Deposits and withdrawals of completed slots, indexed by `epoch % BUDGET_SLOTS`.
    slots: [[u32; 2]; BUDGET_SLOTS],
    /// Net credit of the completed slots still in the window.
    base: i64,
    /// Lifetime totals of completed slots.
    deposits: u64,
    withdrawals: u64,
}

/// A retry budget in the Finagle/SRE form: every request deposits, every retry withdraws,
/// deposits expire after `ttl`, and a reserve of `min_retries_per_sec × ttl` retries is
/// always available.
///
/// Every retry it allows keeps the retries of the last `ttl` within
/// `percent_can_retry × requests of the last ttl + min_retries_per_sec × ttl` (checked by
/// the quickcheck model in `tests/client_model.rs`), so when a dependency is down a client
/// sends about `1 + percent` times its traffic, not `max_attempts` times
/// (`tests/retry_amplification.rs`).
///
/// ```
/// use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
/// use surgeguard_core::time::SEC;
/// // No reserve, 10 %: ten requests fund one retry.
/// let cfg = RetryBudgetConfig { min_retries_per_sec: 0, ..RetryBudgetConfig::default() };
/// let budget = RetryBudget::new(cfg).unwrap();
/// let now = 5 * SEC;
/// for _ in 0..10 {
///     budget.deposit(now);
/// }
/// assert!(budget.try_withdraw(now).is_ok());
/// let refused = budget.try_withdraw(now).unwrap_err();
/// assert_eq!(refused.reason.as_str(), "budget_exhausted");
/// ```
///
/// **How.** Fixed-point units as Finagle: a deposit is [`SCALE`] units, a withdrawal
/// `⌊SCALE / percent⌋`, the reserve `min_retries_per_sec × ttl × withdrawal`. The current
/// slot (ttl / [`BUDGET_SLOTS`]) is one `AtomicU64` holding its deposit and withdrawal
/// counts and a slot tag; the completed slots of the window are summed in a second word
/// (`base`). A withdrawal is a compare-and-swap on the current word, conditioned on
/// `base + reserve + its credit` — so concurrent callers can never withdraw more than the
/// budget holds (no "check, then debit" race as in tower-resilience #370). When a new slot
/// starts, whichever caller wins the fold swaps the current word out and updates `base`,
/// expiring old slots. Expiry errs on the safe side: a deposit may expire up to one slot
/// early, a withdrawal never early.
///
/// **Progress.** Lock-free: [`deposit`](Self::deposit) is one `fetch_add` (wait-free),
/// [`try_withdraw`](Self::try_withdraw) one compare-and-swap loop that only retries when
/// another caller changed the slot. Nobody waits for a fold.
///
/// **Caveat: a refusal during a fold.** Once per slot (`ttl / 10`) one caller folds the
/// ring. A withdrawal that reaches the new slot while another thread is still folding it
/// (it looks twice) cannot yet know what has expired, so it is refused — even with credit
/// to spare — rather than delayed or allowed to over-spend. Such a refusal says
/// [`Reason::BudgetExhausted`] with `retry_after` **0**, the one case with a zero hint: the
/// fold ends a bounded number of the folder's steps later, and a retry at once may pass.
/// It is counted in `retries_denied`. Callers that must tell it apart check
/// `retry_after == 0`. A stress test (`retry_budget_fold_refusals` in
/// `tests/client_model.rs`) and a loom model (`loom_client.rs`) pin this behaviour.
///
/// **Cost.** Deposit: one load, one `fetch_add`. Withdraw: three loads, one CAS. Once per
/// slot, one caller folds: a swap and ≤ 10 slots of plain arithmetic. Size: about 200 bytes.
/// At most 16.7 M requests per slot are counted.
///
/// Time: `now` in ns; a `now` older than the current slot counts as in the current slot.
/// A `now` above [`MAX_NOW`](crate::time::MAX_NOW) is bad input: the call acts at the
/// latest time seen (no slot is folded for it).
///
/// **Placeable** ([`Placeable`](crate::layout::Placeable)): `#[repr(C)]`, integers, floats
/// and atomics only, so it may live in memory shared between processes when every process
/// passes `now` from the same clock (raw `CLOCK_MONOTONIC`). One caveat there: a process
/// killed *inside* a fold (a few dozen instructions once per slot) leaves the fold taken,
/// and every later withdrawal is then refused with `retry_after` 0.
#[derive(Debug)]
#[repr(C)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    deposit_units: i64,
    withdraw_units: i64,
    reserve: i64,
    slot_width: u64,
    clock: AtomicMonotonic,
    /// The current slot: deposits | withdrawals | tag.
    current: AtomicU64,
    /// Net credit of the completed slots in the window (published by the folder).
    base: AtomicI64,
    /// Start of the next slot (ns): the first call at or after it folds.
    next_fold: AtomicU64,
    /// Lifetime totals of completed slots (published by the folder, for metrics).
    folded_deposits: AtomicU64,
    folded_withdrawals: AtomicU64,
    denied: AtomicU64,
    ring: Exclusive<BudgetRing>,
}

// The layout other processes rely on (see `layout`): checked at compile time.
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<RetryBudgetConfig>() == 24);
    assert!(offset_of!(RetryBudgetConfig, ttl) == 0);
    assert!(offset_of!(RetryBudgetConfig, min_retries_per_sec) == 8);
    assert!(offset_of!(RetryBudgetConfig, percent_can_retry) == 16);
    assert!(offset_of!(BudgetRing, started) == 0);
    assert!(offset_of!(BudgetRing, epoch) == 8);
    assert!(offset_of!(BudgetRing, slots) == 16);
    assert!(offset_of!(BudgetRing, base) == 96);
    assert!(offset_of!(BudgetRing, deposits) == 104);
    assert!(offset_of!(BudgetRing, withdrawals) == 112);
    assert!(size_of::<BudgetRing>() == 120);
    assert!(size_of::<AtomicMonotonic>() == 8 && align_of::<AtomicMonotonic>() == 8);
    assert!(offset_of!(RetryBudget, config) == 0);
    assert!(offset_of!(RetryBudget, deposit_units) == 24);
    assert!(offset_of!(RetryBudget, withdraw_units) == 32);
    assert!(offset_of!(RetryBudget, reserve) == 40);
    assert!(offset_of!(RetryBudget, slot_width) == 48);
    assert!(offset_of!(RetryBudget, clock) == 56);
    assert!(offset_of!(RetryBudget, current) == 64);
    assert!(offset_of!(RetryBudget, base) == 72);
    assert!(offset_of!(RetryBudget, next_fold) == 80);
    assert!(offset_of!(RetryBudget, folded_deposits) == 88);
    assert!(offset_of!(RetryBudget, folded_withdrawals) == 96);
    assert!(offset_of!(RetryBudget, denied) == 104);
    assert!(offset_of!(RetryBudget, ring) == 112);
    assert!(align_of::<RetryBudget>() == 8);
};

// SAFETY: `#[repr(C)]` (the ring and the config too), no pointers and no `Drop`; after
// construction only the atomics change (plain integers) and the ring, through the
// one-at-a-time `Exclusive` cell, which holds integers only (`started` is a `u32` code).
// The config and the derived units are written once, before publication. LAYOUT covers
// every field, the ring's fields and the cell's size.
#[cfg(all(not(loom), target_has_atomic = "64"))]
#[allow(unsafe_code)]
unsafe impl Placeable for RetryBudget {
    const LAYOUT: u64 = {
        use core::mem::{align_of, offset_of, size_of};
        fingerprint(
            "surgeguard_core::retry::RetryBudget/2",
            &[
                size_of::<Self>() as u64,
                align_of::<Self>() as u64,
                size_of::<Exclusive<BudgetRing>>() as u64,
                align_of::<Exclusive<BudgetRing>>() as u64,
                offset_of!(RetryBudgetConfig, min_retries_per_sec) as u64,
                offset_of!(RetryBudgetConfig, percent_can_retry) as u64,
                offset_of!(BudgetRing, epoch) as u64,
                offset_of!(BudgetRing, slots) as u64,
                offset_of!(BudgetRing, base) as u64,
                offset_of!(BudgetRing, deposits) as u64,
                offset_of!(BudgetRing, withdrawals) as u64,
                offset_of!(Self, deposit_units) as u64,
                offset_of!(Self, withdraw_units) as u64,
                offset_of!(Self, reserve) as u64,
                offset_of!(Self, slot_width) as u64,
                offset_of!(Self, clock) as u64,
                offset_of!(Self, current) as u64,
                offset_of!(Self, base) as u64,
                offset_of!(Self, next_fold) as u64,
                offset_of!(Self, folded_deposits) as u64,
                offset_of!(Self, folded_withdrawals) as u64,
                offset_of!(Self, denied) as u64,
                offset_of!(Self, ring) as u64,
                BUDGET_SLOTS as u64,
            ],
        )
    };

    #[inline]
    fn fold_cells<'a>(&'a self, f: &mut dyn FnMut(crate::layout::FoldCell<'a>)) {
        f(crate::layout::FoldCell(self.ring.flag()));
    }
}

/// A snapshot of a [`RetryBudget`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryBudgetMetrics {
    /// Requests deposited, ever.
    pub requests: u64,
    /// Retries the budget allowed, ever.
    pub retries_allowed: u64,
    /// Retries the budget refused, ever.
    pub retries_denied: u64,
    /// Retries that would be allowed right now (reserve included).
    pub available: u64,
}

impl RetryBudget {
    /// A budget with `config`, or why the config cannot be used.
    pub fn new(config: RetryBudgetConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let p = config.percent_can_retry;
        // Finagle RetryBudget: deposit = ScaleFactor (0 when percent is 0),
        // withdraw = ScaleFactor / percent (1 when percent is 0).
        let (deposit_units, withdraw_units) =
            if p == 0.0 { (0, 1) } else { (SCALE, libm::floor(SCALE as f64 / p).max(1.0) as i64) };
        // Finagle: reserve = minRetriesPerSec × ttl × withdraw.
        let reserve =
            (config.min_retries_per_sec as u128 * withdraw_units as u128 * config.ttl as u128
                / SEC as u128) as i64;
        Ok(Self {
            config,
            deposit_units,
            withdraw_units,
            reserve,
            slot_width: config.ttl / BUDGET_SLOTS as u64,
            clock: AtomicMonotonic::new(),
            current: AtomicU64::new(0),
            base: AtomicI64::new(0),
            next_fold: AtomicU64::new(0),
            folded_deposits: AtomicU64::new(0),
            folded_withdrawals: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            ring: Exclusive::new(BudgetRing {
                started: 0,
                epoch: 0,
                slots: [[0, 0]; BUDGET_SLOTS],
                base: 0,
                deposits: 0,
                withdrawals: 0,
            }),
        })
    }

    /// The config this budget was built from.
    pub fn config(&self) -> RetryBudgetConfig {
        self.config
    }

    /// Units one retry costs (`⌊SCALE / percent⌋`).
    pub fn withdrawal_units(&self) -> i64 {
        self.withdraw_units
    }

    /// The reserve in units (`min_retries_per_sec × ttl × withdrawal`).
    pub fn reserve_units(&self) -> i64 {
        self.reserve
    }

    /// Records one request (first attempts, not retries): it funds `percent` of a retry
    /// for `ttl`.
    pub fn deposit(&self, now: u64) {
        let now = self.clock.in_range_or_latest(now);
        // Safe without the fold: if it is busy, the deposit may land in the slot being
        // closed and expire early, which only errs towards fewer retries.
        let _ = self.current_epoch(now);
        // Relaxed: a count; the fold's swap takes whatever is there.
        self.current.fetch_add(ONE_DEPOSIT, Ordering::Relaxed);
    }

    /// Takes one retry from the budget, or refuses with
    /// [`Reason::BudgetExhausted`] and a hint of when expiring retries free enough room.
    pub fn try_withdraw(&self, now: u64) -> Result<(), Rejected> {
        let now = self.clock.in_range_or_latest(now);
        let w = self.withdraw_units;
        // Two views at most: a tag mismatch means a fold swapped the slot under us, and a
        // fold in progress may have finished by the second look.
        for _ in 0..2 {
            let Some(epoch) = self.current_epoch(now) else { continue };
            // Acquire: pairs with the Release store of `base` in `fold`; a base from a
            // later fold than our slot tag orders that fold's swap before our CAS, which
            // then fails.
            let base = self.base.load(Ordering::Acquire);
            let mut word = self.current.load(Ordering::Relaxed);
            while word & TAG_MASK == slot_tag(epoch) {
                let credit = base + self.reserve + self.credit_of(word);
                if credit < w || withdrawals_of(word) == COUNT_MASK {
                    self.denied.fetch_add(1, Ordering::Relaxed);
                    return Err(Rejected::new(Reason::BudgetExhausted, self.refill_hint(now)));
                }
                // Relaxed: the word is the only datum this CAS decides on; `base` is
                // ordered by the Acquire load above.
                match self.current.compare_exchange_weak(
                    word,
                    word + ONE_WITHDRAWAL,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(()),
                    Err(current) => word = current,
                }
            }
        }
        // Another thread is folding the new slot right now (seen twice); until it finishes
        // we cannot know what has expired, so refuse rather than risk over-spending. The
        // hint 0 is the truth: the refusal ends when that fold does, a bounded number of
        // the folder's own steps later; a retry at once may pass.
        self.denied.fetch_add(1, Ordering::Relaxed);
        Err(Rejected::new(Reason::BudgetExhausted, 0))
    }

    /// Retries that would be allowed now (reserve included), without taking any.
    pub fn available(&self, now: u64) -> u64 {
        let now = self.clock.in_range_or_latest(now);
        let _ = self.current_epoch(now);
        self.available_now()
    }

    /// A snapshot of the counters (`available` as of the last call's time).
    pub fn metrics(&self) -> RetryBudgetMetrics {
        let word = self.current.load(Ordering::Relaxed);
        RetryBudgetMetrics {
            requests: self.folded_deposits.load(Ordering::Relaxed) + deposits_of(word),
            retries_allowed: self.folded_withdrawals.load(Ordering::Relaxed) + withdrawals_of(word),
            retries_denied: self.denied.load(Ordering::Relaxed),
            available: self.available_now(),
        }
    }

    fn available_now(&self) -> u64 {
        let base = self.base.load(Ordering::Acquire);
        let total = base + self.reserve + self.credit_of(self.current.load(Ordering::Relaxed));
        if total <= 0 {
            0
        } else {
            (total / self.withdraw_units) as u64
        }
    }

    /// Net credit of a slot with these counts.
    fn credit_of(&self, word: u64) -> i64 {
        self.net(deposits_of(word), withdrawals_of(word))
    }

    fn net(&self, deposits: u64, withdrawals: u64) -> i64 {
        deposits as i64 * self.deposit_units - withdrawals as i64 * self.withdraw_units
    }

    /// The epoch of the current slot, folding first if `now` has reached a new slot.
    /// `None` only if a fold is due and another thread is doing it.
    fn current_epoch(&self, now: u64) -> Option<u64> {
        // Acquire: pairs with the Release store at the end of `fold`, so that fold's swap
        // and `base` happen-before what this caller reads next.
        let next = self.next_fold.load(Ordering::Acquire);
        if now < next {
            return Some(next / self.slot_width - 1);
        }
        self.ring.try_with(|ring| self.fold(ring, now))
    }

    fn fold(&self, ring: &mut BudgetRing, now: u64) -> u64 {
        let n = BUDGET_SLOTS as u64;
        let epoch = now / self.slot_width;
        if ring.started != RING_STARTED {
            ring.started = RING_STARTED;
            ring.epoch = epoch;
            // Tag the (so far untagged) first slot; the counts already in it stay.
            // Relaxed: published by the Release store of `next_fold` below.
            self.current.fetch_add(slot_tag(epoch), Ordering::Relaxed);
        } else if epoch > ring.epoch {
            // AcqRel: Acquire takes the counts' increments; Release (with the stores
            // below) publishes the new tag.
            let old = self.current.swap(slot_tag(epoch), Ordering::AcqRel);
            let (deposits, withdrawals) = (deposits_of(old), withdrawals_of(old));
            ring.deposits += deposits;
            ring.withdrawals += withdrawals;
            // Completed slots that leave the window: epochs <= epoch - n.
            let mut e = ring.epoch.saturating_sub(n - 1);
            while e < ring.epoch && e + n <= epoch {
                let s = &mut ring.slots[(e % n) as usize];
                ring.base -= self.net(s[0] as u64, s[1] as u64);
                *s = [0, 0];
                e += 1;
            }
            // The slot just closed joins them, unless it is already out of the window.
            if ring.epoch + n > epoch {
                ring.slots[(ring.epoch % n) as usize] = [deposits as u32, withdrawals as u32];
                ring.base += self.net(deposits, withdrawals);
            }
            ring.epoch = epoch;
            // Release: pairs with the Acquire load in `try_withdraw`.
            self.base.store(ring.base, Ordering::Release);
            self.folded_deposits.store(ring.deposits, Ordering::Relaxed);
            self.folded_withdrawals.store(ring.withdrawals, Ordering::Relaxed);
        }
        // Release: pairs with the Acquire load in `current_epoch`.
        self.next_fold
            .store(ring.epoch.saturating_add(1).saturating_mul(self.slot_width), Ordering::Release);
        ring.epoch
    }

    /// When expiring slots (oldest first) would free room for one retry; if none would,
    /// the start of the next slot.
    fn refill_hint(&self, now: u64) -> u64 {
        let width = self.slot_width;
        let next_slot = width - now % width;
        let n = BUDGET_SLOTS as u64;
        let hint = self.ring.try_with(|ring| {
            let current = self.credit_of(self.current.load(Ordering::Relaxed));
            let mut credit = ring.base + self.reserve + current;
            for e in ring.epoch.saturating_sub(n - 1)..=ring.epoch {
                credit -= if e == ring.epoch {
                    current
                } else {
                    let s = ring.slots[(e % n) as usize];
                    self.net(s[0] as u64, s[1] as u64)
                };
                if credit >= self.withdraw_units {
                    let expires = (e + n).saturating_mul(width);
                    return expires.saturating_sub(now).max(1);
                }
            }
            next_slot
        });
        hint.unwrap_or(next_slot)
    }
}

/// Settings of a [`TokenRetryThrottle`] (gRPC `retryThrottling`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenThrottleConfig {
    /// `maxTokens`: in `(0, 1000]` (grpc-go's bounds).
    pub max_tokens: f64,
    /// `tokenRatio`: tokens a success adds, in `[0.001, max_tokens]`; kept to three
    /// decimal places as gRPC does.
    pub token_ratio: f64,
}

impl Default for TokenThrottleConfig {
    /// gRPC A6's example: `maxTokens` 10, `tokenRatio` 0.1.
    fn default() -> Self {
        Self { max_tokens: 10.0, token_ratio: 0.1 }
    }
}

/// The gRPC A6 retry throttle: a token count that starts full at `max_tokens`, loses one
/// per failed RPC, gains `token_ratio` per successful one, and allows retries only while
/// it is above `max_tokens / 2`. A throttled retry fails at once, it never waits.
///
/// ```
/// use surgeguard_core::retry::{TokenRetryThrottle, TokenThrottleConfig};
/// let throttle = TokenRetryThrottle::new(TokenThrottleConfig::default()).unwrap();
/// assert!(throttle.try_retry().is_ok());
/// for _ in 0..5 {
///     throttle.record(false); // 10 -> 5 tokens: no longer above half
/// }
/// assert!(throttle.try_retry().is_err());
/// throttle.record(true); // 5.1 > 5
/// assert!(throttle.try_retry().is_ok());
/// ```
///
/// **Progress.** Lock-free: [`try_retry`](Self::try_retry) is one load (wait-free);
/// [`record`](Self::record) a compare-and-swap loop that clamps to `[0, max_tokens]`.
///
/// **Cost.** One atomic word of milli-tokens; one or two atomic steps per call.
///
/// Reference: `grpc/proposal` A6-client-retries.md. Tokens refill only as
/// RPCs succeed, not with time, so a refusal's `retry_after` is 0: only traffic changes
/// the answer.
#[derive(Debug)]
pub struct TokenRetryThrottle {
    config: TokenThrottleConfig,
    max_milli: u32,
    ratio_milli: u32,
    tokens_milli: AtomicU32,
    allowed: AtomicU64,
    denied: AtomicU64,
    successes: AtomicU64,
    failures: AtomicU64,
}

/// A snapshot of a [`TokenRetryThrottle`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TokenThrottleMetrics {
    /// The current token count.
    pub tokens: f64,
    /// Whether retries are currently refused (tokens at or below half).
    pub throttled: bool,
    /// Retries allowed, ever.
    pub retries_allowed: u64,
    /// Retries refused, ever.
    pub retries_denied: u64,
    /// Successful RPCs recorded, ever.
    pub successes: u64,
    /// Failed RPCs recorded, ever.
    pub failures: u64,
}

impl TokenRetryThrottle {
    /// A throttle with `config` (tokens start full), or why the config cannot be used.
    pub fn new(config: TokenThrottleConfig) -> Result<Self, ConfigError> {
        let max = check_range(config.max_tokens, 0.0, 1000.0, "token_throttle.max_tokens")?;
        if max <= 0.0 {
            return Err(ConfigError::out_of_range("token_throttle.max_tokens"));
        }
        let ratio = check_range(config.token_ratio, 0.0, 1000.0, "token_throttle.token_ratio")?;
        // gRPC keeps tokenRatio to three decimal places.
        let max_milli = libm::round(max * 1000.0) as u32;
        let ratio_milli = libm::round(ratio * 1000.0) as u32;
        if ratio_milli == 0 {
            return Err(ConfigError::out_of_range("token_throttle.token_ratio"));
        }
        if ratio_milli > max_milli {
            return Err(ConfigError::inconsistent(
                "token_throttle.token_ratio",
                "must not be above",
                "token_throttle.max_tokens",
            ));
        }
        Ok(Self {
            config,
            max_milli,
            ratio_milli,
            tokens_milli: AtomicU32::new(max_milli),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    /// The config this throttle was built from.
    pub fn config(&self) -> TokenThrottleConfig {
        self.config
    }

    /// Records an RPC's result: success adds `token_ratio`, failure takes one token.
    /// Count as failures only retryable statuses and "don't retry" pushback (gRPC A6).
    pub fn record(&self, success: bool) {
        let (max, ratio) = (self.max_milli, self.ratio_milli);
        // Relaxed: the token count is the only datum and RMWs are totally ordered on it.
        let _ = self.tokens_milli.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
            Some(if success { (t + ratio).min(max) } else { t.saturating_sub(1000) })
        });
        if success {
            self.successes.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether a retry (or hedge) may be sent now: tokens must be above `max_tokens / 2`.
    pub fn try_retry(&self) -> Result<(), Rejected> {
        if self.is_retry_allowed() {
            self.allowed.fetch_add(1, Ordering::Relaxed);
            Ok(())
        } else {
            self.denied.fetch_add(1, Ordering::Relaxed);
            Err(Rejected::new(Reason::BudgetExhausted, 0))
        }
    }

    /// Whether retries are currently allowed, without counting a retry.
    pub fn is_retry_allowed(&self) -> bool {
        // gRPC A6: retries only while token_count > maxTokens / 2.
        2 * self.tokens_milli.load(Ordering::Relaxed) as u64 > self.max_milli as u64
    }

    /// The current token count.
    pub fn tokens(&self) -> f64 {
        self.tokens_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> TokenThrottleMetrics {
        TokenThrottleMetrics {
            tokens: self.tokens(),
            throttled: !self.is_retry_allowed(),
            retries_allowed: self.allowed.load(Ordering::Relaxed),
            retries_denied: self.denied.load(Ordering::Relaxed),
            successes: self.successes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    fn budget(ttl_s: u64, min: u32, pct: f64) -> RetryBudget {
        RetryBudget::new(RetryBudgetConfig {
            ttl: ttl_s * SEC,
            min_retries_per_sec: min,
            percent_can_retry: pct,
        })
        .unwrap()
    }

    fn drain(b: &RetryBudget, now: u64) -> u64 {
        let mut n = 0;
        while b.try_withdraw(now).is_ok() {
            n += 1;
            assert!(n < 1_000_000);
        }
        n
    }

    #[test]
    fn finagle_defaults_reserve_and_percent() {
        let b = RetryBudget::new(RetryBudgetConfig::finagle()).unwrap();
        // Finagle fixed point: withdraw = 1000 / 0.2 = 5000; reserve = 10 × 10 s × 5000.
        assert_eq!(b.withdrawal_units(), 5000);
        assert_eq!(b.reserve_units(), 500_000);
        let now = 100 * SEC;
        // With no traffic, exactly min_retries_per_sec × ttl = 100 retries.
        assert_eq!(b.available(now), 100);
        // 1000 requests fund 20 % = 200 more.
        for _ in 0..1000 {
            b.deposit(now);
        }
        assert_eq!(drain(&b, now), 300);
        let m = b.metrics();
        assert_eq!((m.requests, m.retries_allowed, m.retries_denied), (1000, 300, 1));
    }

    #[test]
    fn deposits_expire_after_ttl_and_withdrawals_come_back() {
        let b = budget(10, 0, 0.5);
        let t0 = 50 * SEC;
        for _ in 0..10 {
            b.deposit(t0);
        }
        assert_eq!(drain(&b, t0 + SEC), 5);
        let refused = b.try_withdraw(t0 + SEC).unwrap_err();
        assert_eq!(refused.reason, Reason::BudgetExhausted);
        // Deposits (slot of t0) and withdrawals (slot of t0 + 1 s) cancel out: nothing
        // comes back, so the hint is the next slot boundary.
        assert!(refused.retry_after > 0 && refused.retry_after <= SEC);
        // After ttl the deposits have expired; the withdrawals are still in the window:
        // the balance is negative, so nothing is available.
        assert_eq!(b.available(t0 + 10 * SEC), 0);
        // Once the withdrawals' slot expires too, the budget is back to empty (not negative).
        assert_eq!(b.available(t0 + 11 * SEC + 1), 0);
        for _ in 0..2 {
            b.deposit(t0 + 12 * SEC);
        }
        assert_eq!(b.available(t0 + 12 * SEC), 1);
    }

    #[test]
    fn refusal_hint_points_at_the_expiry_of_old_withdrawals() {
        // Reserve of exactly 1 retry (1/s × 1 s), percent 100 %.
        let b = budget(1, 1, 1.0);
        let t0 = 10 * SEC;
        assert!(b.try_withdraw(t0).is_ok());
        let refused = b.try_withdraw(t0 + 50 * MS).unwrap_err();
        // The withdrawal at t0 sits in the slot [t0, t0 + 100 ms) and expires at t0 + 1 s.
        assert_eq!(refused.retry_after, SEC - 50 * MS);
        assert!(b.try_withdraw(t0 + SEC).is_ok());
    }

    #[test]
    fn time_going_backwards_stays_in_the_current_slot() {
        let b = budget(10, 0, 1.0);
        b.deposit(100 * SEC);
        // An older `now` does not resurrect or expire anything.
        assert_eq!(b.available(3 * SEC), 1);
        assert!(b.try_withdraw(3 * SEC).is_ok());
        assert_eq!(b.available(100 * SEC), 0);
    }

    #[test]
    fn zero_percent_is_reserve_only() {
        let b = budget(2, 3, 0.0);
        for _ in 0..100 {
            b.deposit(SEC);
        }
        assert_eq!(drain(&b, SEC), 6);
    }

    #[test]
    fn bad_budget_configs_are_refused() {
        let ok = RetryBudgetConfig::default();
        for bad in [
            RetryBudgetConfig { ttl: SEC - 1, ..ok },
            RetryBudgetConfig { ttl: 61 * SEC, ..ok },
            RetryBudgetConfig { percent_can_retry: f64::NAN, ..ok },
            RetryBudgetConfig { percent_can_retry: -0.1, ..ok },
            RetryBudgetConfig { percent_can_retry: f64::INFINITY, ..ok },
            RetryBudgetConfig { percent_can_retry: 1e-6, ..ok },
            RetryBudgetConfig { percent_can_retry: 1000.5, ..ok },
            RetryBudgetConfig { min_retries_per_sec: 2_000_000, ..ok },
        ] {
            assert!(RetryBudget::new(bad).is_err(), "{bad:?}");
        }
        assert!(RetryBudget::new(RetryBudgetConfig { percent_can_retry: 1000.0, ..ok }).is_ok());
    }

    #[test]
    fn grpc_throttle_threshold_is_strictly_above_half() {
        let t = TokenRetryThrottle::new(TokenThrottleConfig::default()).unwrap();
        assert_eq!(t.tokens(), 10.0);
        for _ in 0..4 {
            t.record(false);
        }
        assert_eq!(t.tokens(), 6.0);
        assert!(t.try_retry().is_ok());
        t.record(false);
        // 5 is not > 10 / 2.
        assert_eq!(t.tokens(), 5.0);
        assert_eq!(t.try_retry().unwrap_err().reason, Reason::BudgetExhausted);
        t.record(true);
        assert!((t.tokens() - 5.1).abs() < 1e-9);
        assert!(t.try_retry().is_ok());
        // Clamped to [0, max].
        for _ in 0..50 {
            t.record(false);
        }
        assert_eq!(t.tokens(), 0.0);
        for _ in 0..200 {
            t.record(true);
        }
        assert_eq!(t.tokens(), 10.0);
        let m = t.metrics();
        assert_eq!((m.retries_allowed, m.retries_denied, m.failures, m.successes), (2, 1, 55, 201));
    }

    #[test]
    fn bad_throttle_configs_are_refused() {
        for (max, ratio) in [
            (0.0, 0.1),
            (1000.1, 0.1),
            (f64::NAN, 0.1),
            (10.0, 0.0),
            (10.0, 0.0004),
            (10.0, -1.0),
            (10.0, f64::INFINITY),
            (1.0, 2.0),
        ] {
            let cfg = TokenThrottleConfig { max_tokens: max, token_ratio: ratio };
            assert!(TokenRetryThrottle::new(cfg).is_err(), "{cfg:?}");
        }
    }
}
