//! Fleet-wide limits, leased: the local half of a limit whose central state lives in a
//! shared store (Redis: a GCRA per limit, or a hash of slot leases, in one script that reads
//! the store's own clock). The hot path spends what was leased, here, with no I/O; a
//! refiller (the `surgeguard` crate, or the caller) asks this object what to request, runs
//! the script, and hands the answer back. Every decision is in this module, so C, Python,
//! Node and Rust decide alike for the same grants and times.
//!
//! Two objects:
//!
//! - [`TokenLease`]: tokens of a fleet rate limit `R` per second with burst `B`. The central
//!   GCRA grants `g ≤ want` tokens with an expiry; this instance spends them; the refiller
//!   asks again at a low-water mark, for a batch sized to the instance's recent demand
//!   (`b = clamp(λ·T, 1, b_max)`: a quiet instance asks for 1 at a time, which is exact).
//! - [`SlotLease`]: in-flight slots of a fleet concurrency cap `C`, leased with a TTL and
//!   renewed at a third of it. An admission needs a leased slot and at least the longest
//!   request timeout left on the lease, so no request outlives the lease it was admitted on.
//!
//! **The bound.** Every token spent was granted by the central GCRA, and an instance holds
//! at most `b_max` unspent tokens (a grant that would take it above is cut to `b_max`). So
//! over any window `W` the fleet admits at most `R·W + B + N·b_max` on leased tokens (`N`
//! instances): the GCRA's `R·W + B`, plus what each instance held when the window began.
//! A store restart that loses the GCRA's state adds at most one `B`; a failover adds the
//! grants made inside the replication lag. Decisions made in a fallback mode (below) are
//! outside the bound and counted apart.
//!
//! **When the store is gone.** A lease whose expiry has passed (no refill got through in
//! time) falls back to the configured [`Fallback`]: `Safe` (the default) admits at the
//! local share of the last known fleet: a GCRA at `R/N` with burst `⌈B/N⌉` for tokens,
//! `⌊C/N⌋` slots for the cap; `Pessimistic` refuses; `Optimistic` admits (Envoy's fail
//! open). Each mode's decisions are counted. The first grant after an outage ends the
//! fallback, with no burst: what the store grants is all there is to spend.
//!
//! **Progress.** Every call is lock-free: one compare-and-swap loop on one word (tokens, or
//! the slots in flight), retried only when another caller's step succeeded; the refiller's
//! calls are a few loads and stores. No allocation.
//!
//! **Clocks.** `now` is the caller's monotonic clock in ns. A grant's expiry comes as a TTL
//! from the store (`ttl_ns`, counted on the store's clock from when it decided), applied
//! here from the time the request was *sent* (`grant`'s `asked_at`): the store decided
//! after that, so the lease ends here no later than in the store (clock rates agreeing to
//! well under the TTL's margin), and slots the store hands to another instance after their
//! expiry are no longer used here. Client clocks never enter the central decision.

use crate::rate::gcra_decide;
use crate::sync::{next_instance_id, AtomicU32, AtomicU64, Ordering};
use crate::time::{AtomicMonotonic, MS, SEC};
use crate::types::check_range;
use crate::{ConfigError, Reason, Rejected, UsageError};

/// What a lease that ran out of time admits at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Fallback {
    /// The local share of the last known fleet: `R/N` (burst `⌈B/N⌉`) or `⌊C/N⌋` slots.
    #[default]
    Safe = 0,
    /// Refuse everything until a grant gets through.
    Pessimistic = 1,
    /// Admit everything (Envoy's global rate limit fails open).
    Optimistic = 2,
}

/// How a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// On leased tokens or slots (inside the fleet bound).
    Leased,
    /// The lease had expired: the [`Fallback`] decided.
    Fallback(Fallback),
}

/// Settings of a [`TokenLease`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLeaseConfig {
    /// The fleet rate `R`, tokens per second (`> 0`, finite).
    pub rate_per_sec: f64,
    /// The fleet burst `B`, tokens (`≥ 1`).
    pub burst: u32,
    /// The largest batch one instance holds, `b_max` (`1 ≤ b_max ≤ burst`). The bound's
    /// per-instance term; `ε·B/N` keeps the bound at `R·W + (1+ε)·B`.
    pub max_batch: u32,
    /// How much of its recent demand a batch covers, ns (`T`; default 100 ms): about
    /// `1/T` refills per second per busy instance, whatever the request rate.
    pub batch_period_ns: u64,
    /// What an expired lease admits at.
    pub fallback: Fallback,
}

impl Default for TokenLeaseConfig {
    fn default() -> Self {
        Self {
            rate_per_sec: 100.0,
            burst: 100,
            max_batch: 10,
            batch_period_ns: 100 * MS,
            fallback: Fallback::Safe,
        }
    }
}

/// The longest setting accepted (one hour).
const MAX_SETTING_NS: u64 = 3_600 * SEC;

impl TokenLeaseConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range(self.rate_per_sec, 1e-9, 1e12, "token_lease.rate_per_sec")?;
        if self.burst == 0 {
            return Err(ConfigError::out_of_range("token_lease.burst"));
        }
        if self.max_batch == 0 {
            return Err(ConfigError::out_of_range("token_lease.max_batch"));
        }
        if self.max_batch > self.burst {
            return Err(ConfigError::inconsistent(
                "token_lease.max_batch",
                "must not be above",
                "token_lease.burst",
            ));
        }
        if self.batch_period_ns == 0 || self.batch_period_ns > MAX_SETTING_NS {
            return Err(ConfigError::out_of_range("token_lease.batch_period_ns"));
        }
        Ok(())
    }
}

/// A snapshot of a lease's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseMetrics {
    /// Tokens (or slots) on the lease now; 0 once it has expired.
    pub held: u64,
    /// When the lease expires, on the caller's clock (0: never granted).
    pub expires_at: u64,
    /// The last known fleet size (at least 1).
    pub fleet_size: u32,
    /// Decisions made on leased tokens or slots.
    pub leased: u64,
    /// Refusals because the lease was spent (the fleet limit binds).
    pub refused: u64,
    /// Decisions made in each fallback mode: safe admitted, safe refused, pessimistic
    /// refused, optimistic admitted.
    pub safe_admitted: u64,
    /// See `safe_admitted`.
    pub safe_refused: u64,
    /// See `safe_admitted`.
    pub pessimistic_refused: u64,
    /// See `safe_admitted`.
    pub optimistic_admitted: u64,
    /// Grants received, and tokens (or slots) they carried.
    pub grants: u64,
    /// See `grants`.
    pub granted: u64,
    /// Granted tokens never spent: cut to `max_batch`, or expired. For a [`TokenLease`],
    /// `leased + held + dropped = granted` (exact while no grant is being applied).
    pub dropped: u64,
}

/// Counters shared by both leases.
#[derive(Debug)]
struct Counts {
    refused: AtomicU64,
    safe_admitted: AtomicU64,
    safe_refused: AtomicU64,
    pessimistic_refused: AtomicU64,
    optimistic_admitted: AtomicU64,
    grants: AtomicU64,
    granted: AtomicU64,
    dropped: AtomicU64,
}

impl Counts {
    fn new() -> Self {
        Self {
            refused: AtomicU64::new(0),
            safe_admitted: AtomicU64::new(0),
            safe_refused: AtomicU64::new(0),
            pessimistic_refused: AtomicU64::new(0),
            optimistic_admitted: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn bump(c: &AtomicU64, n: u64) {
        // Relaxed: counters order nothing.
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self, held: u64, leased: u64, expires_at: u64, fleet_size: u32) -> LeaseMetrics {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LeaseMetrics {
            held,
            expires_at,
            fleet_size,
            leased,
            refused: l(&self.refused),
            safe_admitted: l(&self.safe_admitted),
            safe_refused: l(&self.safe_refused),
            pessimistic_refused: l(&self.pessimistic_refused),
            optimistic_admitted: l(&self.optimistic_admitted),
            grants: l(&self.grants),
            granted: l(&self.granted),
            dropped: l(&self.dropped),
        }
    }

    /// Every decision made so far, leased ones given: the demand the batch size follows
    /// (a refusal counts as one token).
    fn decisions(&self, leased: u64) -> u64 {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        leased
            + l(&self.refused)
            + l(&self.safe_admitted)
            + l(&self.safe_refused)
            + l(&self.pessimistic_refused)
            + l(&self.optimistic_admitted)
    }
}

/// Whether `now` is before `expires_at` (`now` already clamped by the lease's clock).
#[inline]
fn before(now: u64, expires_at: u64) -> bool {
    now < expires_at
}

/// The local half of a fleet rate limit: tokens leased from the central GCRA. See the
/// module docs for the bound and the fallback.
///
/// ```
/// use surgeguard_core::fleet::{Mode, TokenLease, TokenLeaseConfig};
/// use surgeguard_core::time::{MS, SEC};
///
/// let lease = TokenLease::new(TokenLeaseConfig::default()).unwrap();
/// // Nothing leased yet: ask for a first batch (1: no demand seen yet).
/// assert_eq!(lease.want(0), Some(1));
/// // The store granted 1 token for 3 s; 4 instances in the fleet.
/// lease.grant(MS, 1, 3 * SEC, 4);
/// assert_eq!(lease.try_take(2 * MS, 1), Ok(Mode::Leased));
/// // Spent: the fleet limit binds until the next grant.
/// assert!(lease.try_take(3 * MS, 1).is_err());
/// ```
#[derive(Debug)]
pub struct TokenLease {
    cfg: TokenLeaseConfig,
    /// Every `now` goes through it: time never runs backwards here, and a `now` above
    /// `MAX_NOW` acts at the latest time seen.
    clock: AtomicMonotonic,
    /// Unspent tokens of the current grant.
    tokens: AtomicU64,
    /// When the current grant expires (0: never granted).
    expires_at: AtomicU64,
    /// The last known fleet size (at least 1).
    fleet: AtomicU32,
    /// The safe mode's local GCRA: its theoretical arrival time.
    safe_tat: AtomicU64,
    /// The decisions counted at the last `want`, and when it ran.
    seen: AtomicU64,
    seen_at: AtomicU64,
    /// The TTL of the last grant, ns.
    ttl: AtomicU64,
    /// The demand rate, tokens per second (f64 bits), an EWMA over `want` calls.
    demand: AtomicU64,
    /// The size of the batch last asked for (the low-water mark is half of it).
    batch: AtomicU32,
    counts: Counts,
}

impl TokenLease {
    /// A lease with nothing granted yet (a `try_take` before the first grant is a fallback
    /// decision), or `ConfigError`.
    pub fn new(cfg: TokenLeaseConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            clock: AtomicMonotonic::new(),
            tokens: AtomicU64::new(0),
            expires_at: AtomicU64::new(0),
            fleet: AtomicU32::new(1),
            safe_tat: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            seen_at: AtomicU64::new(0),
            ttl: AtomicU64::new(0),
            demand: AtomicU64::new(0f64.to_bits()),
            batch: AtomicU32::new(1),
            counts: Counts::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> TokenLeaseConfig {
        self.cfg
    }

    /// Spends `cost` tokens at `now`: `Ok(mode)` if admitted; `Err` with
    /// [`Reason::RateLimited`] if the lease is spent (the fleet limit binds; `retry_after`
    /// one batch period) or a fallback refused. `cost` 0 admits and spends nothing.
    pub fn try_take(&self, now: u64, cost: u32) -> Result<Mode, Rejected> {
        let now = self.clock.observe(now);
        if cost == 0 {
            return Ok(Mode::Leased);
        }
        // Relaxed: the expiry and the tokens are each read once; a grant racing this call
        // replaces both, and the CAS below fails if the tokens changed under it.
        if before(now, self.expires_at.load(Ordering::Relaxed)) {
            let mut t = self.tokens.load(Ordering::Relaxed);
            loop {
                if t < u64::from(cost) {
                    Counts::bump(&self.counts.refused, 1);
                    return Err(Rejected::new(Reason::RateLimited, self.cfg.batch_period_ns));
                }
                match self.tokens.compare_exchange_weak(
                    t,
                    t - u64::from(cost),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    // Spent tokens are counted as granted − dropped − held: nothing to bump.
                    Ok(_) => return Ok(Mode::Leased),
                    Err(cur) => t = cur,
                }
            }
        }
        self.fallback(now, cost)
    }

    fn fallback(&self, now: u64, cost: u32) -> Result<Mode, Rejected> {
        let mode = self.cfg.fallback;
        match mode {
            Fallback::Optimistic => {
                Counts::bump(&self.counts.optimistic_admitted, u64::from(cost));
                Ok(Mode::Fallback(mode))
            }
            Fallback::Pessimistic => {
                Counts::bump(&self.counts.pessimistic_refused, 1);
                Err(Rejected::new(Reason::RateLimited, self.cfg.batch_period_ns))
            }
            Fallback::Safe => {
                let (emission, tolerance) = self.safe_gcra();
                let mut tat = self.safe_tat.load(Ordering::Relaxed);
                loop {
                    match gcra_decide(tat, now, emission, tolerance, cost) {
                        Ok(new) => match self.safe_tat.compare_exchange_weak(
                            tat,
                            new,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        ) {
                            Ok(_) => {
                                Counts::bump(&self.counts.safe_admitted, u64::from(cost));
                                return Ok(Mode::Fallback(mode));
                            }
                            Err(cur) => tat = cur,
                        },
                        Err(wait) => {
                            Counts::bump(&self.counts.safe_refused, 1);
                            return Err(Rejected::new(Reason::RateLimited, wait));
                        }
                    }
                }
            }
        }
    }

    /// The safe mode's GCRA: emission `N/R` s, burst `⌈B/N⌉` (tolerance `t·(burst − 1)`).
    fn safe_gcra(&self) -> (u64, u64) {
        let n = u64::from(self.fleet.load(Ordering::Relaxed).max(1));
        let emission = ((n as f64 / self.cfg.rate_per_sec) * SEC as f64).clamp(1.0, 1e18) as u64;
        let burst = u64::from(self.cfg.burst).div_ceil(n).max(1);
        (emission, emission.saturating_mul(burst - 1))
    }

    /// What the refiller should ask the store for at `now`, or `None` if nothing is due.
    /// Due when nothing was ever granted, the lease expired, fewer than a third of its time
    /// is left, or its tokens fell to the low-water mark (half the last batch). The batch
    /// is the recent demand over one batch period, `clamp(λ·T, 1, b_max)`, where `λ` is an
    /// EWMA (weight 1/2 per call) of the tokens asked for per second since the last call.
    /// The refiller calls it often (each batch period, and when a take is refused); it
    /// updates the demand estimate each time.
    pub fn want(&self, now: u64) -> Option<u32> {
        let now = self.clock.observe(now);
        let lambda = self.follow_demand(now);
        let b = libm::ceil(lambda * self.cfg.batch_period_ns as f64 / SEC as f64)
            .clamp(1.0, f64::from(self.cfg.max_batch)) as u32;
        let expires = self.expires_at.load(Ordering::Relaxed);
        let tokens = self.tokens.load(Ordering::Relaxed);
        let low = u64::from(self.batch.load(Ordering::Relaxed).div_ceil(2));
        let ttl = self.ttl.load(Ordering::Relaxed);
        let due = expires == 0
            || !before(now, expires)
            || tokens < low.max(1)
            || expires.saturating_sub(now) < ttl / 3;
        if due {
            self.batch.store(b, Ordering::Relaxed);
            Some(b)
        } else {
            None
        }
    }

    /// Folds the decisions since the last call into the demand EWMA (weight 1/2) and
    /// returns it, tokens per second.
    fn follow_demand(&self, now: u64) -> f64 {
        let total = self.counts.decisions(self.spent());
        let since = self.seen_at.load(Ordering::Relaxed);
        let seen = self.seen.load(Ordering::Relaxed);
        let mut lambda = f64::from_bits(self.demand.load(Ordering::Relaxed));
        if since == 0 || now > since {
            if since > 0 {
                let rate = total.saturating_sub(seen) as f64 * SEC as f64 / (now - since) as f64;
                lambda = if lambda == 0.0 { rate } else { 0.5 * (lambda + rate) };
                self.demand.store(lambda.to_bits(), Ordering::Relaxed);
            }
            self.seen.store(total, Ordering::Relaxed);
            self.seen_at.store(now.max(1), Ordering::Relaxed);
        }
        lambda
    }

    /// Tokens spent on the lease so far: granted − dropped − held.
    fn spent(&self) -> u64 {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (l(&self.counts.granted).saturating_sub(l(&self.counts.dropped)))
            .saturating_sub(self.tokens.load(Ordering::Relaxed))
    }

    /// The store's answer to a request sent at `asked_at`: `granted` tokens valid for
    /// `ttl_ns` from then, and the fleet's size (instances that asked within the store's
    /// window; 0 is taken as 1).
    /// Tokens left from an earlier grant that has not expired stay; the sum is cut to
    /// `max_batch` (the cut is counted as dropped). Tokens of an expired grant are dropped.
    pub fn grant(&self, asked_at: u64, granted: u32, ttl_ns: u64, fleet_size: u32) {
        // Taken as given (an earlier time than the latest take is the point).
        let now = self.clock.in_range_or_latest(asked_at);
        let ttl = ttl_ns.min(MAX_SETTING_NS);
        let old_exp = self.expires_at.load(Ordering::Relaxed);
        let alive = before(now, old_exp);
        let cap = u64::from(self.cfg.max_batch);
        let mut t = self.tokens.load(Ordering::Relaxed);
        loop {
            let keep = if alive { t } else { 0 };
            let sum = keep + u64::from(granted);
            let new = sum.min(cap);
            match self.tokens.compare_exchange_weak(t, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    Counts::bump(&self.counts.dropped, (t - keep) + (sum - new));
                    break;
                }
                Err(cur) => t = cur,
            }
        }
        self.expires_at.store(now.saturating_add(ttl).max(1), Ordering::Relaxed);
        self.fleet.store(fleet_size.max(1), Ordering::Relaxed);
        self.ttl.store(ttl, Ordering::Relaxed);
        Counts::bump(&self.counts.grants, 1);
        Counts::bump(&self.counts.granted, u64::from(granted));
    }

    /// Tokens spendable at `now` (0 once the lease expired).
    pub fn available(&self, now: u64) -> u64 {
        let now = self.clock.observe(now);
        if before(now, self.expires_at.load(Ordering::Relaxed)) {
            self.tokens.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// The counters at `now`.
    pub fn metrics(&self, now: u64) -> LeaseMetrics {
        let now = self.clock.observe(now);
        let exp = self.expires_at.load(Ordering::Relaxed);
        let raw = self.tokens.load(Ordering::Relaxed);
        let mut m = self.counts.snapshot(
            if before(now, exp) { raw } else { 0 },
            self.spent(),
            exp,
            self.fleet.load(Ordering::Relaxed),
        );
        if !before(now, exp) {
            // Expired tokens are dropped at the next grant; count them as dropped now, so
            // that leased + held + dropped = granted at every moment.
            m.dropped += raw;
        }
        m
    }
}

/// Settings of a [`SlotLease`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotLeaseConfig {
    /// The fleet cap `C`: in-flight requests across every instance (`≥ 1`).
    pub cap: u32,
    /// The longest a request admitted on a slot may take, ns (its timeout; `> 0`): an
    /// admission needs at least this much time left on the lease, so no request outlives
    /// the lease it was admitted on (default 1 s).
    pub longest_request_ns: u64,
    /// What an expired lease admits at.
    pub fallback: Fallback,
}

impl Default for SlotLeaseConfig {
    fn default() -> Self {
        Self { cap: 64, longest_request_ns: SEC, fallback: Fallback::Safe }
    }
}

impl SlotLeaseConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cap == 0 {
            return Err(ConfigError::out_of_range("slot_lease.cap"));
        }
        if self.longest_request_ns == 0 || self.longest_request_ns > MAX_SETTING_NS {
            return Err(ConfigError::out_of_range("slot_lease.longest_request_ns"));
        }
        Ok(())
    }
}

/// One admission on a [`SlotLease`]: give it back with [`SlotLease::release`].
#[must_use = "a slot must be released"]
#[derive(Debug, PartialEq, Eq)]
pub struct SlotPermit {
    mode: Mode,
    /// The lease that issued it.
    owner: u32,
}

impl SlotPermit {
    /// How it was admitted.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

/// The local half of a fleet concurrency cap: in-flight slots leased from the store (a
/// hash of `instance → (slots, expiry)` that grants `min(want, C − Σ others)`), renewed at
/// a third of their TTL. Slots of a crashed instance come back when its lease expires in
/// the store. See the module docs for the fallback.
///
/// ```
/// use surgeguard_core::fleet::{Mode, SlotLease, SlotLeaseConfig};
/// use surgeguard_core::time::{MS, SEC};
///
/// let cfg = SlotLeaseConfig { cap: 8, longest_request_ns: SEC, ..Default::default() };
/// let lease = SlotLease::new(cfg).unwrap();
/// lease.grant(0, 2, 10 * SEC, 4); // 2 of the fleet's 8 slots for 10 s
/// let a = lease.try_acquire(MS).unwrap();
/// let b = lease.try_acquire(MS).unwrap();
/// assert!(lease.try_acquire(MS).is_err(), "both leased slots in flight");
/// lease.release(a).unwrap();
/// assert_eq!(lease.try_acquire(2 * MS).map(|p| p.mode()).ok(), Some(Mode::Leased));
/// # lease.release(b).unwrap();
/// ```
#[derive(Debug)]
pub struct SlotLease {
    cfg: SlotLeaseConfig,
    /// This lease's identity: its permits carry it.
    id: u32,
    /// As [`TokenLease`]'s.
    clock: AtomicMonotonic,
    /// Slots leased now.
    slots: AtomicU32,
    /// Requests in flight here, whatever they were admitted on.
    inflight: AtomicU32,
    /// The most in flight (plus refusals) since the last `want`: the demand it asks for.
    peak: AtomicU32,
    expires_at: AtomicU64,
    ttl: AtomicU64,
    fleet: AtomicU32,
    admitted: AtomicU64,
    counts: Counts,
}

impl SlotLease {
    /// A lease with no slots yet (an acquire before the first grant is a fallback
    /// decision), or `ConfigError`.
    pub fn new(cfg: SlotLeaseConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            id: next_instance_id(),
            clock: AtomicMonotonic::new(),
            slots: AtomicU32::new(0),
            inflight: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            expires_at: AtomicU64::new(0),
            ttl: AtomicU64::new(0),
            fleet: AtomicU32::new(1),
            admitted: AtomicU64::new(0),
            counts: Counts::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> SlotLeaseConfig {
        self.cfg
    }

    /// Admits one request at `now` if a leased slot is free and at least the longest
    /// request's time is left on the lease; otherwise, with the lease expired or too short,
    /// the fallback decides (`Safe`: up to `⌊C/N⌋` in flight here, at least 1). A refusal
    /// is [`Reason::LimitReached`].
    pub fn try_acquire(&self, now: u64) -> Result<SlotPermit, Rejected> {
        let now = self.clock.observe(now);
        let exp = self.expires_at.load(Ordering::Relaxed);
        let on_lease = before(now.saturating_add(self.cfg.longest_request_ns), exp);
        let (cap, mode) = if on_lease {
            (self.slots.load(Ordering::Relaxed), Mode::Leased)
        } else {
            match self.cfg.fallback {
                Fallback::Optimistic => (u32::MAX, Mode::Fallback(Fallback::Optimistic)),
                Fallback::Pessimistic => (0, Mode::Fallback(Fallback::Pessimistic)),
                Fallback::Safe => {
                    let n = self.fleet.load(Ordering::Relaxed).max(1);
                    ((self.cfg.cap / n).max(1), Mode::Fallback(Fallback::Safe))
                }
            }
        };
        let mut cur = self.inflight.load(Ordering::Relaxed);
        loop {
            if cur >= cap {
                self.peak.fetch_max(cur.saturating_add(1), Ordering::Relaxed);
                Counts::bump(
                    match mode {
                        Mode::Leased => &self.counts.refused,
                        Mode::Fallback(Fallback::Pessimistic) => &self.counts.pessimistic_refused,
                        _ => &self.counts.safe_refused,
                    },
                    1,
                );
                let hint = self.cfg.longest_request_ns.min(SEC);
                return Err(Rejected::new(Reason::LimitReached, hint));
            }
            // Relaxed: the count is the only thing this word protects.
            match self.inflight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
        self.peak.fetch_max(cur + 1, Ordering::Relaxed);
        Counts::bump(
            match mode {
                Mode::Leased => &self.admitted,
                Mode::Fallback(Fallback::Optimistic) => &self.counts.optimistic_admitted,
                _ => &self.counts.safe_admitted,
            },
            1,
        );
        Ok(SlotPermit { mode, owner: self.id })
    }

    /// Gives a slot back. A permit of another lease is refused with `ForeignHandle` and
    /// changes nothing.
    pub fn release(&self, permit: SlotPermit) -> Result<(), UsageError> {
        if permit.owner != self.id {
            return Err(UsageError::ForeignHandle);
        }
        // Never below 0: a permit exists for every count (it is consumed here).
        let _ =
            self.inflight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
        Ok(())
    }

    /// Requests in flight here.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// What the refiller should ask the store for at `now`: the demand since the last call
    /// (the most in flight at once, a refusal counting as one more), at least 1 and at most
    /// `C`; `None` if nothing is due. Due when nothing was granted yet, the lease expired,
    /// fewer than a third of its TTL is left, or the demand exceeds the slots held.
    pub fn want(&self, now: u64) -> Option<u32> {
        let now = self.clock.observe(now);
        let inflight = self.inflight.load(Ordering::Relaxed);
        let peak = self.peak.swap(inflight, Ordering::Relaxed).max(inflight);
        let want = peak.clamp(1, self.cfg.cap);
        let exp = self.expires_at.load(Ordering::Relaxed);
        let ttl = self.ttl.load(Ordering::Relaxed);
        let due = exp == 0
            || !before(now, exp)
            || exp.saturating_sub(now) < ttl / 3
            || want > self.slots.load(Ordering::Relaxed);
        due.then_some(want)
    }

    /// The store's answer to a request sent at `asked_at`: `slots` leased for `ttl_ns`
    /// from then, and the fleet's size. Fewer slots than in flight admit nothing until
    /// enough are released.
    pub fn grant(&self, asked_at: u64, slots: u32, ttl_ns: u64, fleet_size: u32) {
        // Taken as given (an earlier time than the latest take is the point).
        let now = self.clock.in_range_or_latest(asked_at);
        let ttl = ttl_ns.min(MAX_SETTING_NS);
        self.slots.store(slots.min(self.cfg.cap), Ordering::Relaxed);
        self.expires_at.store(now.saturating_add(ttl).max(1), Ordering::Relaxed);
        self.ttl.store(ttl, Ordering::Relaxed);
        self.fleet.store(fleet_size.max(1), Ordering::Relaxed);
        Counts::bump(&self.counts.grants, 1);
        Counts::bump(&self.counts.granted, u64::from(slots));
    }

    /// The counters at `now` (`held`: slots leased, 0 once expired; `leased`: admissions
    /// on the lease).
    pub fn metrics(&self, now: u64) -> LeaseMetrics {
        let now = self.clock.observe(now);
        let exp = self.expires_at.load(Ordering::Relaxed);
        let held = if before(now, exp) { u64::from(self.slots.load(Ordering::Relaxed)) } else { 0 };
        self.counts.snapshot(
            held,
            self.admitted.load(Ordering::Relaxed),
            exp,
            self.fleet.load(Ordering::Relaxed),
        )
    }
}

/// Settings of a [`RetryLease`]: a retry budget for the whole fleet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryLeaseConfig {
    /// Retries allowed per request, fleet-wide, over the window `ρ` (`0 ≤ ρ ≤ 10`;
    /// default 0.1, Finagle's 10%).
    pub ratio: f64,
    /// Retries per second allowed with no traffic, fleet-wide `m` (`≥ 0`; default 1).
    pub min_per_sec: f64,
    /// The window `W` the script counts requests and retries over, ns (1 s – 1 h;
    /// default 10 s, Finagle's TTL).
    pub window_ns: u64,
    /// The most retry tokens one instance holds, `b_r` (`≥ 1`; default 10).
    pub max_batch: u32,
    /// How much of its recent retry demand a batch covers, ns (default 100 ms).
    pub batch_period_ns: u64,
}

impl Default for RetryLeaseConfig {
    fn default() -> Self {
        Self {
            ratio: 0.1,
            min_per_sec: 1.0,
            window_ns: 10 * SEC,
            max_batch: 10,
            batch_period_ns: 100 * MS,
        }
    }
}

/// A retry budget for the whole fleet: the requests of every instance are counted in the
/// store (each refill adds this instance's since the last), and retry tokens are leased
/// while the fleet's retries in the window stay within `ρ · requests + m · W`. So over a
/// window the fleet retries at most `ρ·Req + m·W + N·b_r` (`N·b_r`: the tokens instances
/// hold); requests not yet flushed only make it stricter.
///
/// A retry also needs the instance's own [`RetryBudget`](crate::retry::RetryBudget): the
/// local budget is the floor, so an instance cut off from the store (its lease expired: no
/// fleet tokens to go by) is still bounded by its own budget and cannot start a storm.
/// A refused fleet token still spends the local one (the order errs towards fewer retries).
#[derive(Debug)]
pub struct RetryLease {
    cfg: RetryLeaseConfig,
    tokens: TokenLease,
    pending: AtomicU64,
}

impl RetryLease {
    /// A lease with no tokens yet (retries before the first grant are bounded by the local
    /// budget alone), or `ConfigError`.
    pub fn new(cfg: RetryLeaseConfig) -> Result<Self, ConfigError> {
        check_range(cfg.ratio, 0.0, 10.0, "retry_lease.ratio")?;
        check_range(cfg.min_per_sec, 0.0, 1e9, "retry_lease.min_per_sec")?;
        if cfg.window_ns < SEC || cfg.window_ns > MAX_SETTING_NS {
            return Err(ConfigError::out_of_range("retry_lease.window_ns"));
        }
        if cfg.max_batch == 0 {
            return Err(ConfigError::out_of_range("retry_lease.max_batch"));
        }
        if cfg.batch_period_ns == 0 || cfg.batch_period_ns > MAX_SETTING_NS {
            return Err(ConfigError::out_of_range("retry_lease.batch_period_ns"));
        }
        let tokens = TokenLease::new(TokenLeaseConfig {
            // The rate and burst only size the fallback, which is off here (optimistic: the
            // local budget decides alone).
            rate_per_sec: 1.0,
            burst: cfg.max_batch,
            max_batch: cfg.max_batch,
            batch_period_ns: cfg.batch_period_ns,
            fallback: Fallback::Optimistic,
        })
        .map_err(|_| ConfigError::out_of_range("retry_lease.max_batch"))?;
        Ok(Self { cfg, tokens, pending: AtomicU64::new(0) })
    }

    /// The settings.
    pub fn config(&self) -> RetryLeaseConfig {
        self.cfg
    }

    /// Counts one request (an original attempt) for the fleet; also deposit it into the
    /// local budget as usual.
    pub fn deposit(&self) {
        Counts::bump(&self.pending, 1);
    }

    /// Requests counted since the last call: what the refiller adds to the store's count.
    pub fn take_pending(&self) -> u64 {
        self.pending.swap(0, Ordering::Relaxed)
    }

    /// Gives back requests a failed refill did not deliver (they count at the next one).
    pub fn restore_pending(&self, n: u64) {
        Counts::bump(&self.pending, n);
    }

    /// May one retry go at `now`? It needs the local budget's token, and a fleet token
    /// while the lease holds (once it has expired, the local budget decides alone:
    /// `Mode::Fallback(Optimistic)`).
    pub fn try_retry(&self, now: u64, local: &crate::retry::RetryBudget) -> Result<Mode, Rejected> {
        local.try_withdraw(now)?;
        self.tokens
            .try_take(now, 1)
            .map_err(|r| Rejected::new(Reason::BudgetExhausted, r.retry_after))
    }

    /// The token lease (its `want`, `grant`, metrics).
    pub fn tokens(&self) -> &TokenLease {
        &self.tokens
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use quickcheck::{quickcheck, Arbitrary, Gen};
    use std::vec::Vec;

    fn tokens(fallback: Fallback) -> TokenLease {
        TokenLease::new(TokenLeaseConfig {
            rate_per_sec: 100.0,
            burst: 100,
            max_batch: 10,
            batch_period_ns: 100 * MS,
            fallback,
        })
        .unwrap()
    }

    #[test]
    fn leased_tokens_are_spent_then_the_fleet_limit_binds() {
        let l = tokens(Fallback::Safe);
        l.grant(MS, 3, SEC, 4);
        assert_eq!(l.try_take(2 * MS, 2), Ok(Mode::Leased));
        assert_eq!(l.try_take(2 * MS, 2).unwrap_err().reason, Reason::RateLimited);
        assert_eq!(l.try_take(2 * MS, 1), Ok(Mode::Leased));
        assert_eq!(l.try_take(2 * MS, 0), Ok(Mode::Leased), "cost 0 spends nothing");
        let m = l.metrics(3 * MS);
        assert_eq!((m.held, m.leased, m.refused, m.granted, m.fleet_size), (0, 3, 1, 3, 4));
    }

    #[test]
    fn a_grant_above_the_largest_batch_is_cut_and_an_expired_one_dropped() {
        let l = tokens(Fallback::Pessimistic);
        l.grant(0, 8, SEC, 1);
        l.grant(MS, 8, SEC, 1); // 8 + 8 held, cut to 10
        let m = l.metrics(MS);
        assert_eq!((m.held, m.dropped), (10, 6));
        // Past its expiry: the 10 are not spendable, and the next grant drops them.
        assert_eq!(l.available(MS + SEC), 0);
        assert_eq!(l.try_take(MS + SEC, 1).unwrap_err().reason, Reason::RateLimited, "pessimistic");
        l.grant(2 * SEC, 1, SEC, 1);
        let m = l.metrics(2 * SEC);
        assert_eq!((m.held, m.dropped, m.pessimistic_refused), (1, 16, 1));
    }

    #[test]
    fn an_expired_lease_falls_back_as_configured() {
        // Optimistic admits everything; pessimistic refuses everything.
        let o = tokens(Fallback::Optimistic);
        for k in 0..50 {
            assert_eq!(o.try_take(k * MS, 1), Ok(Mode::Fallback(Fallback::Optimistic)));
        }
        assert_eq!(o.metrics(SEC).optimistic_admitted, 50);
        // Safe: the local share of the last known fleet, R/N = 25/s with burst 25.
        let s = tokens(Fallback::Safe);
        s.grant(0, 1, MS, 4); // fleet of 4, expires at 1 ms
        let mut admitted = 0;
        for k in 0..1000 {
            if s.try_take(2 * MS + k * MS, 1).is_ok() {
                admitted += 1;
            }
        }
        // Over 1 s: the burst of 25 plus 25/s (the first admission is at the start).
        assert!((49..=51).contains(&admitted), "{admitted}");
        let m = s.metrics(SEC);
        assert_eq!(m.safe_admitted, admitted);
        assert_eq!(m.safe_refused, 1000 - admitted);
        // A grant ends the fallback, with no burst: only what was granted is spent.
        s.grant(2 * SEC, 2, SEC, 4);
        assert_eq!(s.try_take(2 * SEC, 1), Ok(Mode::Leased));
        assert_eq!(s.try_take(2 * SEC, 1), Ok(Mode::Leased));
        assert!(s.try_take(2 * SEC, 1).is_err());
    }

    #[test]
    fn the_batch_follows_demand_and_the_refill_comes_at_low_water_or_a_third_of_the_ttl() {
        let l = tokens(Fallback::Safe);
        assert_eq!(l.want(MS), Some(1), "nothing granted yet");
        l.grant(MS, 1, 3 * SEC, 1);
        assert_eq!(l.want(2 * MS), None, "1 held, at the low-water mark of 1: not below");
        // 60 decisions in 100 ms: 600/s, a 100 ms batch of 60, cut to 10.
        l.try_take(3 * MS, 1).unwrap();
        for _ in 0..59 {
            let _ = l.try_take(50 * MS, 1);
        }
        assert_eq!(l.want(102 * MS), Some(10));
        l.grant(102 * MS, 10, 3 * SEC, 1);
        assert_eq!(l.want(103 * MS), None, "a full batch");
        // A third of the TTL left: renew.
        // (The demand: 600/s, then idle for 2 s: an EWMA of 300/s, a batch of 30, cut to 10.)
        assert_eq!(l.want(102 * MS + 2 * SEC + MS), Some(10));
    }

    #[test]
    fn a_lease_ends_here_no_later_than_in_the_store() {
        // Asked at 10 ms, answered at 50 ms (a take ran at 50 ms meanwhile): the 100 ms TTL
        // counts from 10 ms, when the store had not decided yet.
        let l = SlotLease::new(SlotLeaseConfig { longest_request_ns: MS, ..Default::default() })
            .unwrap();
        let _ = l.try_acquire(50 * MS);
        l.grant(10 * MS, 4, 100 * MS, 1);
        assert_eq!(l.metrics(50 * MS).expires_at, 110 * MS);
        let p = l.try_acquire(108 * MS).unwrap();
        assert_eq!(p.mode(), Mode::Leased);
        l.release(p).unwrap();
        let p = l.try_acquire(109 * MS).unwrap();
        assert_eq!(p.mode(), Mode::Fallback(Fallback::Safe), "1 ms left: not enough");
        l.release(p).unwrap();
    }

    #[test]
    fn bad_times_act_at_the_latest_time_seen() {
        let l = tokens(Fallback::Pessimistic);
        l.grant(10 * MS, 2, SEC, 1);
        assert_eq!(l.try_take(u64::MAX, 1), Ok(Mode::Leased), "acts at 10 ms: leased");
        assert_eq!(l.try_take(5 * MS, 1), Ok(Mode::Leased), "earlier: also at 10 ms");
        assert!(TokenLease::new(TokenLeaseConfig { rate_per_sec: f64::NAN, ..Default::default() })
            .is_err());
        let field = |c| TokenLease::new(c).err().map(|e| (e.field, e.other));
        let batch = TokenLeaseConfig { max_batch: 200, ..Default::default() };
        assert_eq!(field(batch), Some(("token_lease.max_batch", Some("token_lease.burst"))));
        let burst = TokenLeaseConfig { burst: 0, ..Default::default() };
        assert_eq!(field(burst), Some(("token_lease.burst", None)));
        let cap = SlotLease::new(SlotLeaseConfig { cap: 0, ..Default::default() }).err();
        assert_eq!(cap.map(|e| e.field), Some("slot_lease.cap"));
        assert!(SlotLease::new(SlotLeaseConfig { longest_request_ns: 0, ..Default::default() })
            .is_err());
    }

    #[test]
    fn slots_need_a_free_leased_slot_and_the_longest_request_left_on_the_lease() {
        let cfg = SlotLeaseConfig { cap: 8, longest_request_ns: SEC, fallback: Fallback::Safe };
        let l = SlotLease::new(cfg).unwrap();
        l.grant(0, 2, 10 * SEC, 2);
        let a = l.try_acquire(MS).unwrap();
        let b = l.try_acquire(MS).unwrap();
        assert_eq!(l.try_acquire(MS).unwrap_err().reason, Reason::LimitReached);
        assert_eq!(l.want(2 * MS), Some(3), "2 in flight and one refused: 3 wanted");
        l.release(a).unwrap();
        l.release(b).unwrap();
        // 9 s in: less than the longest request (1 s) left: the fallback (safe, 8/2 = 4).
        let held: Vec<_> = (0..4).map(|_| l.try_acquire(9 * SEC).unwrap()).collect();
        assert!(held.iter().all(|p| p.mode() == Mode::Fallback(Fallback::Safe)));
        assert!(l.try_acquire(9 * SEC).is_err());
        let m = l.metrics(9 * SEC);
        assert_eq!((m.leased, m.refused, m.safe_admitted, m.safe_refused), (2, 1, 4, 1));
        for p in held {
            l.release(p).unwrap();
        }
        assert_eq!(l.inflight(), 0);
        // A shrunk lease admits nothing until in-flight is below it.
        l.grant(9 * SEC, 1, 10 * SEC, 2);
        let c = l.try_acquire(9 * SEC).unwrap();
        assert!(l.try_acquire(9 * SEC).is_err());
        l.release(c).unwrap();
        // A permit of another lease is refused and changes nothing.
        let other = SlotLease::new(cfg).unwrap();
        other.grant(9 * SEC, 1, 10 * SEC, 2);
        let foreign = other.try_acquire(9 * SEC).unwrap();
        let mine = l.try_acquire(9 * SEC).unwrap();
        assert_eq!(l.release(foreign), Err(UsageError::ForeignHandle));
        assert_eq!((l.inflight(), other.inflight()), (1, 1));
        l.release(mine).unwrap();
        // Pessimistic and optimistic.
        let p = SlotLease::new(SlotLeaseConfig { fallback: Fallback::Pessimistic, ..cfg }).unwrap();
        assert!(p.try_acquire(0).is_err());
        let o = SlotLease::new(SlotLeaseConfig { fallback: Fallback::Optimistic, ..cfg }).unwrap();
        let many: Vec<_> = (0..100).map(|_| o.try_acquire(0).unwrap()).collect();
        assert_eq!(o.inflight(), 100);
        for p in many {
            o.release(p).unwrap();
        }
    }

    #[test]
    fn a_fleet_retry_needs_the_local_budget_and_a_fleet_token_while_leased() {
        use crate::retry::{RetryBudget, RetryBudgetConfig};
        let local = RetryBudget::new(RetryBudgetConfig {
            ttl: 10 * SEC,
            min_retries_per_sec: 0,
            percent_can_retry: 1.0,
        })
        .unwrap();
        let l = RetryLease::new(RetryLeaseConfig::default()).unwrap();
        for _ in 0..3 {
            local.deposit(MS);
            l.deposit();
        }
        assert_eq!(l.take_pending(), 3);
        assert_eq!(l.take_pending(), 0);
        l.restore_pending(3);
        assert_eq!(l.take_pending(), 3);
        // Not leased yet: the local budget alone (3 deposits at 100%: 3 retries).
        assert_eq!(l.try_retry(MS, &local), Ok(Mode::Fallback(Fallback::Optimistic)));
        // One fleet token: one leased retry, then the fleet refuses though the local
        // budget has more.
        l.tokens().grant(2 * MS, 1, SEC, 1);
        assert_eq!(l.try_retry(2 * MS, &local), Ok(Mode::Leased));
        assert_eq!(l.try_retry(2 * MS, &local).unwrap_err().reason, Reason::BudgetExhausted);
        // The local budget is spent now (3 of 3): the floor refuses even with fleet tokens.
        l.tokens().grant(3 * MS, 5, SEC, 1);
        assert!(l.try_retry(3 * MS, &local).is_err());
        for bad in [
            RetryLeaseConfig { ratio: -0.1, ..Default::default() },
            RetryLeaseConfig { ratio: f64::NAN, ..Default::default() },
            RetryLeaseConfig { min_per_sec: -1.0, ..Default::default() },
            RetryLeaseConfig { window_ns: MS, ..Default::default() },
            RetryLeaseConfig { max_batch: 0, ..Default::default() },
            RetryLeaseConfig { batch_period_ns: 0, ..Default::default() },
        ] {
            assert!(RetryLease::new(bad).is_err(), "{bad:?}");
        }
    }

    /// One instance's part in a fleet test: demand per step, in tokens.
    #[derive(Clone, Debug)]
    struct Fleet {
        instances: Vec<(u8, u8)>, // (demand per 10 ms, batch cap)
        steps: u16,
        burst: u8,
        rate: u16,
    }

    impl Arbitrary for Fleet {
        fn arbitrary(g: &mut Gen) -> Self {
            let n = 1 + usize::arbitrary(g) % 6;
            Fleet {
                instances: (0..n).map(|_| (u8::arbitrary(g) % 20, u8::arbitrary(g))).collect(),
                steps: 50 + u16::arbitrary(g) % 300,
                burst: 1 + u8::arbitrary(g) % 50,
                rate: 1 + u16::arbitrary(g) % 2000,
            }
        }
    }

    /// The bound, over a whole history: N instances each with its own lease, a central
    /// GCRA (the store's rule: grant `min(want, what conforms now)`) refilling whichever
    /// asks, random demand. Over every window `W` of the run, tokens spent ≤ `R·W + B +
    /// N·b_max`.
    fn bound_holds(f: Fleet) -> bool {
        let rate = f64::from(f.rate);
        let burst = u32::from(f.burst);
        let max_batch = 1 + u32::from(f.instances.iter().map(|i| i.1).max().unwrap_or(0)) % burst;
        let cfg = TokenLeaseConfig {
            rate_per_sec: rate,
            burst,
            max_batch,
            batch_period_ns: 100 * MS,
            fallback: Fallback::Pessimistic,
        };
        let leases: Vec<TokenLease> =
            f.instances.iter().map(|_| TokenLease::new(cfg).unwrap()).collect();
        let central =
            crate::rate::RateLimiter::with_interval((SEC as f64 / rate).max(1.0) as u64, burst)
                .unwrap();
        let step = 10 * MS;
        let mut spent_at: Vec<(u64, u64)> = Vec::new();
        for k in 1..=u64::from(f.steps) {
            let now = k * step;
            for (i, l) in leases.iter().enumerate() {
                if let Some(want) = l.want(now) {
                    let g = central.take_up_to(now, want);
                    // Short TTLs now and then: leases expire between refills too.
                    let ttl = if k % 7 == 0 { 15 * MS } else { 3 * SEC };
                    l.grant(now, g, ttl, leases.len() as u32);
                }
                let mut n = 0;
                for _ in 0..f.instances[i].0 {
                    if l.try_take(now, 1).is_ok() {
                        n += 1;
                    }
                }
                spent_at.push((now, n));
                // What the bound rests on: no instance holds more than b_max, and every
                // token is spent, held or dropped, once.
                let m = l.metrics(now);
                if m.held > u64::from(max_batch) || m.leased + m.held + m.dropped != m.granted {
                    return false;
                }
            }
        }
        let slack = f64::from(burst) + leases.len() as f64 * f64::from(max_batch);
        // Tokens spent per step, then every window [a, b] of whole steps.
        let mut per_step = std::vec![0u64; usize::from(f.steps) + 1];
        for (t, n) in spent_at {
            per_step[(t / step) as usize] += n;
        }
        for a in 1..per_step.len() {
            let mut total = 0u64;
            for (b, n) in per_step.iter().enumerate().skip(a) {
                total += n;
                let w = (b - a) as f64 * step as f64 / SEC as f64;
                if total as f64 > rate * w + slack + 1e-9 {
                    return false;
                }
            }
        }
        true
    }

    #[test]
    #[cfg_attr(miri, ignore = "100 whole histories: minutes under Miri; make unit runs it")]
    fn fleet_admissions_stay_within_rw_plus_b_plus_n_bmax() {
        quickcheck(bound_holds as fn(Fleet) -> bool);
    }
}
