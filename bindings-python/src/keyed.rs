//! Per-key isolation (per-tenant limits, shuffle sharding): `KeyedLimits`, `KeyPermit`, `hash_key`, `actionable`.

use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use surgeguard::placement::{Placed, PlacedKeyPermit};
use surgeguard_core::keyed::{
    actionable as core_actionable, hash_key as core_hash_key, KeyedConfig,
    KeyedLimits as CoreKeyed, ShardRate, MAX_BODY_LEN,
};
use surgeguard_core::{Reason, Rejected, UsageError};

use crate::common::*;
use crate::placed::{open, place_err, shared_call, where_arg, Where};

macro_rules! any_keyed {
    ($($variant:ident = $n:literal),* $(,)?) => {
        /// A keyed table of one of the compiled shard counts, in this process or shared.
        // Always boxed (one allocation per object), so variant sizes do not matter.
        #[allow(clippy::large_enum_variant)]
        enum AnyKeyed {
            $($variant(Placed<CoreKeyed<$n>>),)*
        }

        const SHARD_COUNTS: &[usize] = &[$($n),*];

        impl AnyKeyed {
            /// The table of `shards` shards where `place` says (`None`: not a count).
            fn open(py: Python<'_>, shards: usize, place: Where, cfg: KeyedConfig) -> Option<PyResult<Box<Self>>> {
                $(if shards == $n {
                    return Some(open::<CoreKeyed<$n>>(py, "KeyedLimits", place, cfg)
                        .map(|t| Box::new(AnyKeyed::$variant(t))));
                })*
                None
            }
        }

        /// Runs `$body` with `$x: &Placed<CoreKeyed<N>>`.
        macro_rules! on_placed {
            ($t:expr, $x:ident => $body:expr) => {
                match $t { $(AnyKeyed::$variant($x) => $body,)* }
            };
        }
    };
}

any_keyed!(K8 = 8, K16 = 16, K32 = 32, K64 = 64, K128 = 128, K256 = 256, K512 = 512, K1024 = 1024);

/// Runs `$body` with `$c: &CoreKeyed<N>` (reads; acquire through the placed table).
macro_rules! on_table {
    ($t:expr, $c:ident => $body:expr) => {
        on_placed!(&**$t, x => { let $c = x.limits(); $body })
    };
}

impl AnyKeyed {
    fn try_acquire(
        &self,
        py: Python<'_>,
        h: u64,
        now: u64,
        cost: u32,
    ) -> PyResult<PlacedKeyPermit> {
        on_placed!(self, x => x.try_acquire_key(h, now, cost))
            .map_err(|e| place_err(py, "KeyedLimits", e))
    }

    /// Releases `p` (a permit of this table); the error as a Python exception.
    fn release(&self, py: Python<'_>, p: PlacedKeyPermit) -> PyResult<()> {
        on_placed!(self, x => x.release_key(p)).map_err(|e| place_err(py, "KeyedLimits", e))
    }

    /// Releases `p` and ignores what went wrong (for `__exit__` and drop).
    fn release_quietly(&self, p: PlacedKeyPermit) {
        let _ = on_placed!(self, x => x.release_key(p));
    }
}

/// `KeyedLimits(...)`'s arguments, checked: the shard count and the core config.
#[allow(clippy::too_many_arguments)]
fn keyed_args(
    py: Python<'_>,
    shard_limit: &Bound<'_, PyAny>,
    shards: Option<&Bound<'_, PyAny>>,
    shards_per_key: Option<&Bound<'_, PyAny>>,
    limit_retry_after: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    rate: Option<&Bound<'_, PyAny>>,
    burst: Option<&Bound<'_, PyAny>>,
) -> PyResult<(usize, KeyedConfig)> {
    let shards = opt_uint_arg("shards", shards, u64::MAX)?.unwrap_or(64);
    let seed = opt_uint_arg("seed", seed, u64::MAX)?.unwrap_or(0);
    let mut cfg = KeyedConfig::new(uint_arg("shard_limit", shard_limit, u32::MAX as u64)? as u32);
    cfg.seed = seed;
    if let Some(v) = shards_per_key.filter(|v| !v.is_none()) {
        cfg.shards_per_key = uint_arg("shards_per_key", v, u32::MAX as u64)? as u32;
    }
    if let Some(v) = opt_secs_arg("limit_retry_after", limit_retry_after, 86_400.0)? {
        cfg.limit_retry_after = v;
    }
    match rate.filter(|v| !v.is_none()) {
        Some(r) => {
            let per_second = real_arg("rate", r)?;
            let burst = match burst.filter(|v| !v.is_none()) {
                Some(b) => uint_arg("burst", b, u32::MAX as u64)? as u32,
                None => 1,
            };
            cfg.shard_rate = Some(
                ShardRate::per_second(per_second, burst)
                    .map_err(|e| config_err(py, "KeyedLimits", e))?,
            );
        }
        None if burst.is_some_and(|b| !b.is_none()) => {
            return Err(PyTypeError::new_err("burst= needs rate="));
        }
        None => {}
    }
    let shards =
        usize::try_from(shards).ok().filter(|n| SHARD_COUNTS.contains(n)).ok_or_else(|| {
            PyValueError::new_err(format!("shards must be one of {SHARD_COUNTS:?}, got {shards}"))
        })?;
    Ok((shards, cfg))
}

/// Per-key (tenant, API key, agent) concurrency caps and optional per-key rates in a fixed
/// table of `shards` shards, shuffle-sharded: a key maps to `shards_per_key` of them and is
/// admitted if any has room, so one noisy key fills only its own shards. Refusals say
/// `KeyLimit` / `KeyRate` (HTTP 429, see `actionable`). Lock-free.
///
/// Keys are strings, bytes (hashed with `hash_key(hash_seed, ...)`) or int hashes.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct KeyedLimits {
    core: Box<AnyKeyed>,
    shards: usize,
    hash_seed: u64,
}

impl KeyedLimits {
    fn key_hash(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        key_hash_of(self.hash_seed, key)
    }
}

/// The 64-bit hash of a key argument.
pub fn key_hash_of(seed: u64, key: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(core_hash_key(seed, s.to_cow()?.as_bytes()));
    }
    if let Ok(b) = key.cast::<PyBytes>() {
        return Ok(core_hash_key(seed, b.as_bytes()));
    }
    if key.is_instance_of::<PyInt>() {
        return key
            .extract::<u64>()
            .map_err(|_| PyValueError::new_err("an int key must be a hash in [0, 2**64)"));
    }
    Err(PyTypeError::new_err(format!(
        "a key must be a str, bytes or an int hash, got {}",
        type_name(key)
    )))
}

#[pymethods]
impl KeyedLimits {
    #[new]
    #[pyo3(signature = (shard_limit, *, shards=None, shards_per_key=None, limit_retry_after=None,
        seed=None, rate=None, burst=None, hash_seed=None, shared=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        shard_limit: &Bound<'_, PyAny>,
        shards: Option<&Bound<'_, PyAny>>,
        shards_per_key: Option<&Bound<'_, PyAny>>,
        limit_retry_after: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        hash_seed: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let place = where_arg(shared, None)?;
        let (shards, cfg) = keyed_args(
            py,
            shard_limit,
            shards,
            shards_per_key,
            limit_retry_after,
            seed,
            rate,
            burst,
        )?;
        let hash_seed = opt_uint_arg("hash_seed", hash_seed, u64::MAX)?;
        let core = AnyKeyed::open(py, shards, place, cfg).expect("a checked shard count")?;
        // A shared table: its segment's seed, the same in every process. A local one: keep
        // the seed private and different per process unless told (see hash_key).
        let hash_seed = hash_seed
            .or_else(|| on_placed!(&*core, x => x.shared_key_seed()))
            .unwrap_or_else(|| {
                surgeguard_core::rng::mix(clock_ns() ^ (std::process::id() as u64).rotate_left(32))
            });
        Ok(Self { core, shards, hash_seed })
    }

    /// Per-key caps across worker processes (Linux): `KeyedLimits.shared("name", 4,
    /// shards=64, ...)` creates or attaches to the shared-memory table of that name
    /// (`None`: anonymous, for processes forked afterwards); same API and arguments.
    /// Another config (or shard count) under the same name raises `ValueError`. A worker
    /// that dies holding key permits gives them back (a refused key sweeps, at most every
    /// 100 ms; `reclaim()` does it at once). Keys hash with a seed drawn when the table was
    /// created and shared by every process attached (unless `hash_seed=` is given, which
    /// then must be the same in every process).
    #[staticmethod]
    #[pyo3(signature = (name, *args, **kwargs))]
    fn shared<'py>(
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shared_call::<Self>(py, name, args, kwargs)
    }

    /// A shared table (Linux): gives back the key permits of worker processes proven dead
    /// (each once) and returns how many; a local table: 0.
    fn reclaim(&self) -> u64 {
        on_placed!(&*self.core, x => x.reclaim())
    }

    /// Whether the table lives in memory shared between processes.
    #[getter]
    fn is_shared(&self) -> bool {
        on_placed!(&*self.core, x => x.is_shared())
    }

    /// Takes a slot (and `cost` units of rate) for `key`, or raises `KeyLimit` / `KeyRate`.
    #[pyo3(signature = (key, cost=None, *, now_ns=None))]
    fn try_acquire(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<KeyPermit> {
        let py = slf.py();
        let t = slf.get();
        let cost = opt_uint_arg("cost", cost, u32::MAX as u64)?.unwrap_or(1) as u32;
        let h = t.key_hash(key)?;
        let now = now_or_clock(now_ns)?;
        let p = t.core.try_acquire(py, h, now, cost)?;
        Ok(KeyPermit { table: slf.clone().unbind(), key_hash: h, permit: Mutex::new(Some(p)) })
    }

    /// Returns `permit` (which must come from this table).
    fn release(slf: &Bound<'_, Self>, permit: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let permit = permit
            .cast::<KeyPermit>()
            .map_err(|_| PyTypeError::new_err("release() takes a KeyPermit"))?;
        if !permit.get().table.bind(py).is(slf) {
            // Let the core count it too: it refuses and changes nothing.
            return Err(usage_err(py, UsageError::ForeignHandle));
        }
        permit.get().release_inner(py)
    }

    /// Records a refusal of `key` made elsewhere (say, by a Gate) in the top-keys summary.
    fn record_rejection(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let h = self.key_hash(key)?;
        Ok(on_table!(&self.core, c => c.record_rejection(h)))
    }

    /// The hash this table uses for `key`.
    fn hash(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.key_hash(key)
    }

    /// The shards `key` maps to.
    fn shards_of(&self, key: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        let h = self.key_hash(key)?;
        Ok(on_table!(&self.core, c => c.shards_of(h).as_slice().to_vec()))
    }

    /// The most permits one key can hold (`shards_per_key × shard_limit`).
    #[getter]
    fn key_limit(&self) -> u64 {
        on_table!(&self.core, c => c.key_limit())
    }

    /// The number of shards.
    #[getter]
    fn shards(&self) -> usize {
        self.shards
    }

    /// The isolation math: how many other keys one noisy key can hurt.
    fn isolation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let iso = on_table!(&self.core, c => c.isolation());
        let d = PyDict::new(py);
        d.set_item("shards", iso.shards)?;
        d.set_item("shards_per_key", iso.shards_per_key)?;
        d.set_item("combinations", iso.combinations)?;
        d.set_item("share_all", iso.share_all)?;
        d.set_item("share_any", iso.share_any)?;
        d.set_item("unaffected", iso.unaffected())?;
        Ok(d)
    }

    /// A snapshot as a dict (`top_keys`: the most refused key hashes).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        on_table!(&self.core, c => {
            let m = c.metrics();
            d.set_item("admitted", m.admitted)?;
            d.set_item("rejected_key_limit", m.rejected_key_limit)?;
            d.set_item("rejected_key_rate", m.rejected_key_rate)?;
            d.set_item("foreign_releases", m.foreign_releases)?;
            d.set_item("in_flight", m.in_flight)?;
            d.set_item("full_shards", m.full_shards)?;
            d.set_item("shard_in_flight", m.shard_in_flight.to_vec())?;
            let top = PyList::empty(py);
            for e in m.top_keys.entries() {
                let k = PyDict::new(py);
                k.set_item("key_hash", e.key_hash)?;
                k.set_item("count", e.count)?;
                k.set_item("error", e.error)?;
                top.append(k)?;
            }
            d.set_item("top_keys", top)?;
        });
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("KeyedLimits(shards={}, key_limit={})", self.shards, self.key_limit())
    }
}

/// A slot of one key in a `KeyedLimits` table: release it once (`release()`, or leave the
/// `with` block). Released automatically if garbage-collected while held.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct KeyPermit {
    table: Py<KeyedLimits>,
    key_hash: u64,
    permit: Mutex<Option<PlacedKeyPermit>>,
}

impl KeyPermit {
    fn release_inner(&self, py: Python<'_>) -> PyResult<()> {
        let p = self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        match p {
            Some(p) => self.table.get().core.release(py, p),
            None => Err(usage_err(py, UsageError::AlreadyReleased)),
        }
    }
}

#[pymethods]
impl KeyPermit {
    /// Returns the slot.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.release_inner(py)
    }

    /// The key hash it was admitted for.
    #[getter]
    fn key_hash(&self) -> u64 {
        self.key_hash
    }

    /// Whether it still holds its slot.
    #[getter]
    fn held(&self) -> bool {
        self.permit.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _exc_type: &Bound<'_, PyAny>,
        _exc_value: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> bool {
        let p = self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(p) = p {
            self.table.get().core.release_quietly(p);
        }
        false
    }
}

impl Drop for KeyPermit {
    fn drop(&mut self) {
        let p = self.permit.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(p) = p {
            self.table.get().core.release_quietly(p);
        }
    }
}

/// The seeded 64-bit hash every binding applies to a key (str, bytes).
#[pyfunction]
pub fn hash_key(seed: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>) -> PyResult<u64> {
    let seed = uint_arg("seed", seed, u64::MAX)?;
    if key.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err("hash_key() takes a str or bytes key"));
    }
    key_hash_of(seed, key)
}

fn reason_of(name: &str) -> PyResult<Reason> {
    Reason::ALL
        .iter()
        .copied()
        .find(|r| r.as_str() == name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown reason {name:?}")))
}

/// The largest `Retry-After` written on the wire (one day, in ns).
pub const MAX_RETRY_AFTER_NS: u64 = 86_400 * 1_000_000_000;

/// What an HTTP edge answers for a refusal: a dict with `status` (429 per key, 503
/// global), `retry_after_s` (the `Retry-After` value), `reason`, `error` and `body` (the
/// JSON bytes, identical in every binding). Takes an `OverloadError` or a reason name and
/// `retry_after` seconds. The hint is capped at 86400 s (one day): an infinite
/// `retry_after` (a cost above the burst) never reaches the wire.
#[pyfunction]
#[pyo3(signature = (reason, retry_after=None))]
pub fn actionable<'py>(
    py: Python<'py>,
    reason: &Bound<'py, PyAny>,
    retry_after: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (name, ra): (String, f64) = if let Ok(s) = reason.cast::<PyString>() {
        let ra = match retry_after.filter(|v| !v.is_none()) {
            Some(v) => real_arg("retry_after", v)?,
            None => 0.0,
        };
        (s.to_cow()?.into_owned(), ra)
    } else {
        let name: String = reason.getattr("reason").and_then(|r| r.extract()).map_err(|_| {
            PyTypeError::new_err("actionable() takes a reason name or an OverloadError")
        })?;
        let ra = reason
            .getattr("retry_after")
            .ok()
            .filter(|v| !v.is_none())
            .map(|v| real_arg("retry_after", &v))
            .transpose()?
            .unwrap_or(0.0);
        (name, ra)
    };
    let r = reason_of(&name)?;
    let ns = if ra.is_nan() || ra < 0.0 {
        0
    } else if ra >= u64::MAX as f64 / SEC_F {
        u64::MAX
    } else {
        (ra * SEC_F).ceil() as u64
    };
    // Never an unbounded hint on the wire: a refusal that can never succeed (a cost above
    // the burst: retry_after is infinite) says `Retry-After: 86400`, one day, the cap.
    let a = core_actionable(&Rejected::new(r, ns.min(MAX_RETRY_AFTER_NS)));
    let mut buf = [0u8; MAX_BODY_LEN];
    let n = a.write_json(&mut buf).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("status", a.status)?;
    d.set_item("retry_after_s", a.retry_after_s)?;
    d.set_item("reason", a.reason.as_str())?;
    d.set_item("error", a.error())?;
    d.set_item("body", PyBytes::new(py, &buf[..n]))?;
    Ok(d)
}
