"""Type stubs of the native module ``surgeguard._native`` (import ``surgeguard`` instead).

Durations are seconds (float); ``now_ns`` injects time (int nanoseconds in [0, 2**62];
later is a ``ValueError``) instead of the native monotonic clock, and ``clock=`` (on
``Gate``, ``Limiter``, ``CircuitBreaker``) replaces that clock for the whole object;
priorities are names or ints (0 = most important).
"""

from types import TracebackType
from typing import Any, Callable, Iterable, Literal, Optional, Sequence, Tuple, Type, TypeVar, Union, final

Priority = Union[Literal["critical", "normal", "background"], int, str, None]
OutcomeName = Literal["success", "dropped", "ignored"]
# A permit may also be ended as abandoned: see `Permit.abandon`.
PermitOutcomeName = Literal["success", "dropped", "ignored", "abandoned"]
Seconds = Union[int, float]
Key = Union[str, bytes, int]
ExcTypes = Union[Type[BaseException], Tuple[Type[BaseException], ...]]
_F = TypeVar("_F", bound=Callable[..., Any])

__version__: str

def clock_ns() -> int:
    """The native monotonic clock (nanoseconds) every object reads unless given ``now_ns``."""

def _config_fields() -> list[tuple[str, Optional[str], Any]]:
    """The core's description of each config field: ``(path, keyword, default)``, durations
    in seconds (for the tests that check this binding against it)."""

def hash_key(seed: int, key: Union[str, bytes]) -> int:
    """The seeded 64-bit key hash every binding applies to tenant ids, API keys, agent ids."""

def actionable(reason: Union[str, BaseException], retry_after: Optional[Seconds] = None) -> dict[str, Any]:
    """The HTTP answer for a refusal: ``status`` (429 per key / 503 global),
    ``retry_after_s``, ``reason``, ``error`` and the JSON ``body`` (bytes)."""

def time_to_drain(backlog: int, consume_per_sec: float, produce_per_sec: float) -> Optional[float]:
    """Seconds to drain ``backlog``; ``None`` if it never drains."""

# Deadline headers (see docs/deadlines.md; exported by the `surgeguard` package). A header
# named "grpc-timeout" is read in gRPC's format; any other name as whole milliseconds. A
# value is read as a comma-separated list (a header sent twice, its lines joined): the
# smallest valid item wins. Budgets and deadlines are int nanoseconds.
DeadlineIgnored = Literal["malformed", "negative", "too_large"]
DEADLINE_MAX_BUDGET_NS: int
DEADLINE_HEADERS: Tuple[str, str, str]

def parse_deadline_header(name: str, value: Union[str, bytes]) -> Tuple[Optional[int], Optional[DeadlineIgnored]]:
    """``(budget_ns, None)`` if valid (the smallest valid item of a comma-separated list),
    else ``(None, reason)`` (the first item's). Never raises for a bad value."""

def parse_deadline_headers(
    headers: Iterable[Tuple[str, Union[str, bytes]]],
) -> Tuple[Optional[int], list[Tuple[str, DeadlineIgnored]]]:
    """The smallest valid budget (``None`` if none) and ``(name, reason)`` per ignored header."""

def deadline_at(budget_ns: int, now_ns: Optional[int] = None) -> int:
    """``now + budget_ns`` (int ns), saturating at 2**62."""

def format_deadline_header(
    name: str, deadline_ns: int, margin_ns: Optional[int] = None, now_ns: Optional[int] = None
) -> Optional[str]:
    """The outgoing value for ``deadline_ns - now - margin_ns``, rounded down; ``None`` when
    exhausted (fail fast). ``ValueError`` for a deadline above 2**62 (no deadline)."""

@final
class FixedLimit:
    """A static limit."""
    def __init__(self, *, initial_limit: float = ..., min_limit: float = ..., max_limit: float = ...) -> None: ...
    @property
    def name(self) -> str: ...
    def config(self) -> dict[str, Any]: ...

@final
class AimdLimit:
    """Additive increase under the target latency, multiplicative decrease on overload."""
    def __init__(
        self,
        *,
        initial_limit: float = ...,
        min_limit: float = ...,
        max_limit: float = ...,
        target_latency: Seconds = ...,
        latency_percentile: float = ...,
        backoff_ratio: float = ...,
        timeout: Seconds = ...,
        app_limited_fraction: float = ...,
        slow_start: bool = ...,
        netflix_parity: bool = ...,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    def config(self) -> dict[str, Any]: ...

@final
class HysteresisLimit:
    """Zoned AIMD on the rolling p99 (healthy / warning / critical)."""
    def __init__(
        self,
        *,
        initial_limit: float = ...,
        min_limit: float = ...,
        max_limit: float = ...,
        target_latency: Seconds = ...,
        healthy_below: float = ...,
        critical_above: float = ...,
        critical_factor: float = ...,
        jump_rise: float = ...,
        jump_window: Seconds = ...,
        jump_factor: float = ...,
        avg_alpha: float = ...,
        cool_off: Seconds = ...,
        p99_window: Seconds = ...,
        app_limited_fraction: float = ...,
        slow_start: bool = ...,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    def config(self) -> dict[str, Any]: ...

@final
class GradientLimit:
    """Envoy's gradient controller (the default algorithm)."""
    def __init__(
        self,
        *,
        initial_limit: float = ...,
        min_limit: float = ...,
        max_limit: float = ...,
        buffer: float = ...,
        headroom: float = ...,
        smoothing: float = ...,
        sample_percentile: float = ...,
        probe_interval: Seconds = ...,
        probe_jitter: float = ...,
        probe_limit: float = ...,
        probe_samples: int = ...,
        pinned_baseline: Seconds = ...,
        backoff: float = ...,
        drop_tolerance: float = ...,
        slow_start: bool = ...,
        app_limited_ratio: float = ...,
        seed: int = ...,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    def config(self) -> dict[str, Any]: ...

@final
class Gradient2Limit:
    """Netflix concurrency-limits' Gradient2."""
    def __init__(
        self,
        *,
        initial_limit: float = ...,
        min_limit: float = ...,
        max_limit: float = ...,
        smoothing: float = ...,
        queue_size: float = ...,
        long_window: int = ...,
        rtt_tolerance: float = ...,
        fixed: bool = ...,
        backoff_ratio: float = ...,
        app_limited_fraction: float = ...,
        slow_start: bool = ...,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    def config(self) -> dict[str, Any]: ...

@final
class VegasLimit:
    """Netflix concurrency-limits' Vegas."""
    def __init__(
        self,
        *,
        initial_limit: float = ...,
        min_limit: float = ...,
        max_limit: float = ...,
        smoothing: float = ...,
        alpha: Optional[int] = ...,
        beta: Optional[int] = ...,
        threshold: Optional[int] = ...,
        decrease_ratio: Optional[float] = ...,
        probe_multiplier: int = ...,
        seed: int = ...,
        app_limited_fraction: float = ...,
        slow_start: bool = ...,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    def config(self) -> dict[str, Any]: ...

Algorithm = Union[
    FixedLimit, AimdLimit, HysteresisLimit, GradientLimit, Gradient2Limit, VegasLimit, str, None
]

class Permit:
    """One admission: ``with`` / ``async with`` it, or end it once with ``success()``,
    ``dropped()`` or ``ignore()``."""
    def __enter__(self) -> "Permit": ...
    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool: ...
    async def __aenter__(self) -> "Permit": ...
    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None: ...
    def success(self, *, now_ns: Optional[int] = None) -> None: ...
    def dropped(self, *, now_ns: Optional[int] = None) -> None: ...
    def ignore(self, *, now_ns: Optional[int] = None) -> None: ...
    def abandon(self, *, now_ns: Optional[int] = None) -> None:
        """The caller went away: "dropped" if held longer than the last window's p99, else "ignored"."""
    def release(self, outcome: Optional[PermitOutcomeName] = None, *, now_ns: Optional[int] = None) -> None: ...
    @property
    def priority(self) -> int: ...
    @property
    def held(self) -> bool: ...
    @property
    def outcome(self) -> Optional[OutcomeName]: ...
    @property
    def started_at_ns(self) -> Optional[int]: ...

@final
class Limiter:
    """An exact, lock-free, priority-aware adaptive concurrency limiter (no queue)."""
    def __init__(
        self,
        algorithm: Algorithm = None,
        *,
        limit: Optional[float] = None,
        levels: Optional[int] = None,
        weights: Optional[Sequence[float]] = None,
        min_window: Optional[Seconds] = None,
        max_window: Optional[Seconds] = None,
        window_rtt_multiple: Optional[float] = None,
        min_samples: Optional[int] = None,
        active: Optional[Seconds] = None,
        overload_exceptions: Optional[ExcTypes] = None,
        clock: Optional[Callable[[], int]] = None,
        shared: Union[str, bool, None] = None,
    ) -> None:
        """``shared=``: a segment name (created or attached) or ``True`` (anonymous, shared
        with processes forked afterwards) places the limiter in memory shared between
        worker processes (Linux); a shared limiter takes no ``clock``."""
    @staticmethod
    def shared(
        name: Optional[str],
        algorithm: Algorithm = None,
        *,
        limit: Optional[float] = None,
        levels: Optional[int] = None,
        weights: Optional[Sequence[float]] = None,
        min_window: Optional[Seconds] = None,
        max_window: Optional[Seconds] = None,
        window_rtt_multiple: Optional[float] = None,
        min_samples: Optional[int] = None,
        active: Optional[Seconds] = None,
        overload_exceptions: Optional[ExcTypes] = None,
    ) -> "Limiter":
        """One limiter across worker processes (Linux): created or attached by ``name``
        (``None``: anonymous, shared with processes forked afterwards); a ``Limiter``."""
    @staticmethod
    def unlink(name: str) -> bool: ...
    def reclaim(self) -> int: ...
    @property
    def is_shared(self) -> bool: ...
    @property
    def created(self) -> bool: ...
    @property
    def attached_processes(self) -> int: ...
    @property
    def held_by_this_process(self) -> int: ...
    def acquire(self, priority: Priority = None, *, now_ns: Optional[int] = None) -> Permit: ...
    def try_acquire(self, priority: Priority = None, *, now_ns: Optional[int] = None) -> Permit: ...
    def set_static_limit(self, limit: Optional[float]) -> None: ...
    @property
    def limit(self) -> float: ...
    @property
    def inflight(self) -> int: ...
    @property
    def levels(self) -> int: ...
    def inflight_of(self, priority: Priority) -> int: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class _Ticket:
    """A queued ticket (internal, used by the asyncio waiting)."""
    def set_waker(self, waker: Callable[[], None]) -> bool: ...
    @property
    def done(self) -> bool: ...
    @property
    def id(self) -> int: ...

@final
class Gate:
    """Limiter + bounded priority queue (CoDel, adaptive LIFO, deadlines) + shed switch."""
    def __init__(
        self,
        algorithm: Algorithm = None,
        *,
        limit: Optional[float] = None,
        levels: Optional[int] = None,
        weights: Optional[Sequence[float]] = None,
        min_window: Optional[Seconds] = None,
        max_window: Optional[Seconds] = None,
        window_rtt_multiple: Optional[float] = None,
        min_samples: Optional[int] = None,
        active: Optional[Seconds] = None,
        queue_capacity: Optional[int] = None,
        codel: Union[bool, dict[str, Any], None] = None,
        lifo: Union[Literal["codel", "never"], float, None] = None,
        max_wait: Optional[Seconds] = None,
        aging: Union[bool, Tuple[Priority, Priority, Seconds], None] = None,
        initial_service: Optional[Seconds] = None,
        service_alpha: Optional[float] = None,
        fallback_retry_after: Optional[Seconds] = None,
        overload_exceptions: Optional[ExcTypes] = None,
        clock: Optional[Callable[[], int]] = None,
    ) -> None: ...
    @staticmethod
    def shared(
        name: Optional[str],
        algorithm: Algorithm = None,
        *,
        limit: Optional[float] = None,
        levels: Optional[int] = None,
        weights: Optional[Sequence[float]] = None,
        min_window: Optional[Seconds] = None,
        max_window: Optional[Seconds] = None,
        window_rtt_multiple: Optional[float] = None,
        min_samples: Optional[int] = None,
        active: Optional[Seconds] = None,
        queue_capacity: Optional[int] = None,
        codel: Union[bool, dict[str, Any], None] = None,
        lifo: Union[Literal["codel", "never"], float, None] = None,
        max_wait: Optional[Seconds] = None,
        aging: Union[bool, Tuple[Priority, Priority, Seconds], None] = None,
        initial_service: Optional[Seconds] = None,
        service_alpha: Optional[float] = None,
        fallback_retry_after: Optional[Seconds] = None,
        overload_exceptions: Optional[ExcTypes] = None,
    ) -> "SharedGate":
        """One gate across worker processes (Linux): by name, or anonymous before ``fork``."""
    def acquire(
        self, priority: Priority = None, timeout: Optional[Seconds] = None, *, now_ns: Optional[int] = None
    ) -> Permit: ...
    def acquire_async(
        self, priority: Priority = None, timeout: Optional[Seconds] = None, *, now_ns: Optional[int] = None
    ) -> Permit: ...
    def try_acquire(self, priority: Priority = None, *, now_ns: Optional[int] = None) -> Permit: ...
    def release(self, permit: Permit, outcome: Optional[OutcomeName] = None, *, now_ns: Optional[int] = None) -> None: ...
    def set_shed_level(self, priority: Priority) -> None: ...
    @property
    def shed_level(self) -> Optional[int]: ...
    @property
    def state(self) -> Literal["healthy", "overloaded"]: ...
    @property
    def overloaded(self) -> bool: ...
    def waiting(self, priority: Priority = None) -> int: ...
    @property
    def inflight(self) -> int: ...
    @property
    def limit(self) -> float: ...
    @property
    def levels(self) -> int: ...
    def set_static_limit(self, limit: Optional[float]) -> None: ...
    def brownout(self, *, now_ns: Optional[int] = None) -> float:
        """The brownout dimmer in [0, 1]: serve optional content with probability ``1 - d``."""
    def next_wakeup(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def poll(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    @property
    def service_time(self) -> float: ...
    def metrics(self) -> dict[str, Any]: ...
    def _finish(self, permit: Permit, ticket: _Ticket) -> None: ...
    def _abandon(self, permit: Permit, ticket: _Ticket, keep: bool = False) -> bool: ...
    def _expired(self) -> BaseException: ...

@final
class RetryBudget:
    """Finagle / SRE retry budget: retries as a share of requests, plus a reserve."""
    def __init__(
        self,
        *,
        ttl: Optional[Seconds] = None,
        min_retries_per_sec: Optional[int] = None,
        percent_can_retry: Optional[float] = None,
        retry_ratio: Optional[float] = None,
        shared: Union[str, bool, None] = None,
    ) -> None: ...
    @staticmethod
    def shared(
        name: Optional[str],
        *,
        ttl: Optional[Seconds] = None,
        min_retries_per_sec: Optional[int] = None,
        percent_can_retry: Optional[float] = None,
        retry_ratio: Optional[float] = None,
    ) -> "RetryBudget":
        """One retry budget across worker processes (Linux), by ``name`` or anonymous (``None``)."""
    def deposit(self, *, now_ns: Optional[int] = None) -> None: ...
    def try_withdraw(self, *, now_ns: Optional[int] = None) -> bool: ...
    def withdraw(self, *, now_ns: Optional[int] = None) -> None: ...
    def available(self, *, now_ns: Optional[int] = None) -> int: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class TokenRetryThrottle:
    """The gRPC A6 retry throttle."""
    def __init__(self, *, max_tokens: Optional[float] = None, token_ratio: Optional[float] = None) -> None: ...
    def record(self, success: bool) -> None: ...
    def try_retry(self) -> bool: ...
    @property
    def retry_allowed(self) -> bool: ...
    @property
    def tokens(self) -> float: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class AdaptiveThrottle:
    """SRE client-side adaptive throttling."""
    def __init__(
        self,
        *,
        k: Optional[float] = None,
        window: Optional[Seconds] = None,
        max_drop_probability: Optional[float] = None,
        form: Optional[Literal["ring", "ema"]] = None,
        seed: Optional[int] = None,
    ) -> None: ...
    def record(self, accepted: bool, *, now_ns: Optional[int] = None) -> None: ...
    def should_throttle(self, *, now_ns: Optional[int] = None) -> bool: ...
    def check(self, *, now_ns: Optional[int] = None) -> None: ...
    def drop_probability(self, *, now_ns: Optional[int] = None) -> float: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class Backoff:
    """Exponential backoff with jitter, never shorter than the server's Retry-After."""
    def __init__(
        self,
        *,
        base: Optional[Seconds] = None,
        multiplier: Optional[float] = None,
        cap: Optional[Seconds] = None,
        jitter: Optional[Literal["full", "equal", "decorrelated", "none"]] = None,
        seed: Optional[int] = None,
    ) -> None: ...
    def next_delay(self, attempt: int, retry_after: Optional[Seconds] = None) -> float: ...
    def ceiling(self, attempt: int) -> float: ...
    def reset(self) -> None: ...
    def copy(self) -> "Backoff": ...
    def config(self) -> dict[str, Any]: ...

class CircuitBreaker:
    """The native circuit breaker (see ``surgeguard.CircuitBreaker`` for the decorator and
    context-manager forms)."""
    def __init__(
        self,
        *,
        window_calls: Optional[int] = None,
        window_time: Optional[Seconds] = None,
        failure_rate_threshold: Optional[float] = None,
        slow_call_rate_threshold: Optional[float] = None,
        slow_call_duration: Optional[Seconds] = None,
        minimum_calls: Optional[int] = None,
        open_duration: Optional[Seconds] = None,
        open_jitter: Optional[float] = None,
        half_open_probes: Optional[int] = None,
        probe_lease: Optional[Seconds] = None,
        ramp_duration: Optional[Seconds] = None,
        seed: Optional[int] = None,
        failure_exceptions: Optional[ExcTypes] = None,
        ignore_exceptions: Optional[ExcTypes] = None,
        clock: Optional[Callable[[], int]] = None,
    ) -> None: ...
    def try_acquire(self, *, now_ns: Optional[int] = None) -> "BreakerCall": ...
    def record(self, call: "BreakerCall", outcome: OutcomeName = "success", *, now_ns: Optional[int] = None) -> None: ...
    def _wrap(self, func: _F) -> "BreakerFunction": ...
    def _outcome(self, exc_type: Optional[Type[BaseException]]) -> OutcomeName: ...
    def state(self, *, now_ns: Optional[int] = None) -> Literal["closed", "ramping", "open", "half_open"]: ...
    def is_open(self, *, now_ns: Optional[int] = None) -> bool: ...
    def metrics(self, *, now_ns: Optional[int] = None) -> dict[str, Any]: ...

@final
class BreakerCall:
    """One call a breaker allowed; report it once."""
    def success(self, *, now_ns: Optional[int] = None) -> None: ...
    def failure(self, *, now_ns: Optional[int] = None) -> None: ...
    def ignore(self, *, now_ns: Optional[int] = None) -> None: ...
    @property
    def is_probe(self) -> bool: ...
    @property
    def reported(self) -> bool: ...
    def __enter__(self) -> "BreakerCall": ...
    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool: ...

@final
class BreakerFunction:
    """A sync callable guarded by a breaker."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, instance: Any, owner: Any = None) -> Any: ...
    @property
    def breaker(self) -> CircuitBreaker: ...

@final
class RateLimiter:
    """GCRA rate limiter; a refusal says how long to wait."""
    def __init__(self, per_second: float, burst: Optional[int] = None, *, shared: Union[str, bool, None] = None) -> None: ...
    @staticmethod
    def shared(name: Optional[str], per_second: float, burst: Optional[int] = None) -> "RateLimiter":
        """One rate across worker processes (Linux), by ``name`` or anonymous (``None``)."""
    def try_acquire(self, cost: Optional[int] = None, *, now_ns: Optional[int] = None) -> bool: ...
    def check(self, cost: Optional[int] = None, *, now_ns: Optional[int] = None) -> None: ...
    def take_up_to(self, max: int, *, now_ns: Optional[int] = None) -> int: ...
    def available(self, *, now_ns: Optional[int] = None) -> int: ...
    def wait_time(self, cost: Optional[int] = None, *, now_ns: Optional[int] = None) -> float: ...
    @property
    def burst(self) -> int: ...
    @property
    def per_second(self) -> float: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class PacedDrain:
    """Paces the drain of a backlog after an outage."""
    def __init__(self, target_per_sec: float, *, headroom: Optional[float] = None, burst: Optional[int] = None) -> None: ...
    def permits(self, backlog: int, *, now_ns: Optional[int] = None) -> int: ...
    def next_permit_in(self, *, now_ns: Optional[int] = None) -> float: ...
    def time_to_drain(self, backlog: int, produce_per_sec: Optional[float] = None) -> Optional[float]: ...
    @property
    def drain_per_sec(self) -> float: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class Credits:
    """Demand-driven (credit) flow control for one channel."""
    def __init__(self, *, capacity: Optional[int] = None, low_water: Optional[int] = None) -> None: ...
    def try_take(self, k: Optional[int] = None) -> bool: ...
    def take(self, k: Optional[int] = None) -> None: ...
    def take_up_to(self, k: int) -> int: ...
    def complete(self, k: Optional[int] = None) -> None: ...
    def grant(self, n: int) -> int: ...
    def grant_due(self) -> int: ...
    def replenish(self) -> int: ...
    @property
    def available(self) -> int: ...
    @property
    def buffered(self) -> int: ...
    @property
    def outstanding(self) -> int: ...
    @property
    def stalled(self) -> bool: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class LagMeter:
    """Consumer lag in seconds and time to drain."""
    def __init__(self, *, bucket: Optional[Seconds] = None) -> None: ...
    def record_produced(self, n: Optional[int] = None, *, now_ns: Optional[int] = None) -> None: ...
    def record_consumed(self, n: Optional[int] = None, *, now_ns: Optional[int] = None) -> None: ...
    def observe_totals(self, produced_total: int, consumed_total: int, *, now_ns: Optional[int] = None) -> None: ...
    def report_oldest(self, enqueued_at_ns: Optional[int], *, now_ns: Optional[int] = None) -> None: ...
    def lag(self, *, now_ns: Optional[int] = None) -> int: ...
    def produce_rate(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def consume_rate(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def lag_seconds(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def time_to_drain(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def time_to_drain_exceeds(self, limit: Seconds, *, now_ns: Optional[int] = None) -> bool: ...
    def oldest_age(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def metrics(self, *, now_ns: Optional[int] = None) -> dict[str, Any]: ...

@final
class Watermarks:
    """Pause / resume with hysteresis on free capacity."""
    def __init__(
        self, *, capacity: Optional[int] = None, pause_below: Optional[int] = None, resume_above: Optional[int] = None
    ) -> None: ...
    def observe(self, level: int, *, now_ns: Optional[int] = None) -> Optional[Literal["pause", "resume"]]: ...
    @property
    def paused(self) -> bool: ...
    def metrics(self, *, now_ns: Optional[int] = None) -> dict[str, Any]: ...

@final
class KeyedLimits:
    """Per-key caps and rates in a shuffle-sharded fixed table."""
    def __init__(
        self,
        shard_limit: int,
        *,
        shards: Optional[int] = None,
        shards_per_key: Optional[int] = None,
        limit_retry_after: Optional[Seconds] = None,
        seed: Optional[int] = None,
        rate: Optional[float] = None,
        burst: Optional[int] = None,
        hash_seed: Optional[int] = None,
        shared: Union[str, bool, None] = None,
    ) -> None: ...
    @staticmethod
    def shared(
        name: Optional[str],
        shard_limit: int,
        *,
        shards: Optional[int] = None,
        shards_per_key: Optional[int] = None,
        limit_retry_after: Optional[Seconds] = None,
        seed: Optional[int] = None,
        rate: Optional[float] = None,
        burst: Optional[int] = None,
        hash_seed: Optional[int] = None,
    ) -> "KeyedLimits":
        """Per-key caps across worker processes (Linux), by ``name`` or anonymous (``None``)."""
    def reclaim(self) -> int: ...
    @property
    def is_shared(self) -> bool: ...
    def try_acquire(self, key: Key, cost: Optional[int] = None, *, now_ns: Optional[int] = None) -> "KeyPermit": ...
    def release(self, permit: "KeyPermit") -> None: ...
    def record_rejection(self, key: Key) -> bool: ...
    def hash(self, key: Key) -> int: ...
    def shards_of(self, key: Key) -> list[int]: ...
    @property
    def key_limit(self) -> int: ...
    @property
    def shards(self) -> int: ...
    def isolation(self) -> dict[str, Any]: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class KeyPermit:
    """One key's slot; release it once."""
    def release(self) -> None: ...
    @property
    def key_hash(self) -> int: ...
    @property
    def held(self) -> bool: ...
    def __enter__(self) -> "KeyPermit": ...
    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool: ...

@final
class _SharedTicket:
    """A queued ticket of a SharedGate (internal, used by the asyncio waiting)."""
    def set_waker(self, waker: Callable[[], None]) -> bool: ...
    @property
    def done(self) -> bool: ...

@final
class SharedGate:
    """A Gate in memory shared between processes (Linux): one limit, queue and set of waiters."""
    def __init__(
        self,
        name: Optional[str] = None,
        algorithm: Algorithm = None,
        *,
        limit: Optional[float] = None,
        levels: Optional[int] = None,
        weights: Optional[Sequence[float]] = None,
        min_window: Optional[Seconds] = None,
        max_window: Optional[Seconds] = None,
        window_rtt_multiple: Optional[float] = None,
        min_samples: Optional[int] = None,
        active: Optional[Seconds] = None,
        queue_capacity: Optional[int] = None,
        codel: Union[bool, dict[str, Any], None] = None,
        lifo: Union[Literal["codel", "never"], float, None] = None,
        max_wait: Optional[Seconds] = None,
        aging: Union[bool, Tuple[Priority, Priority, Seconds], None] = None,
        initial_service: Optional[Seconds] = None,
        service_alpha: Optional[float] = None,
        fallback_retry_after: Optional[Seconds] = None,
        overload_exceptions: Optional[ExcTypes] = None,
    ) -> None: ...
    @staticmethod
    def unlink(name: str) -> bool: ...
    def acquire(
        self, priority: Priority = None, timeout: Optional[Seconds] = None, *, now_ns: Optional[int] = None
    ) -> Permit: ...
    def acquire_async(
        self, priority: Priority = None, timeout: Optional[Seconds] = None, *, now_ns: Optional[int] = None
    ) -> Permit: ...
    def try_acquire(self, priority: Priority = None, *, now_ns: Optional[int] = None) -> Permit: ...
    def release(
        self, permit: Permit, outcome: Optional[OutcomeName] = None, *, now_ns: Optional[int] = None
    ) -> None: ...
    def reclaim(self) -> int: ...
    @property
    def created(self) -> bool: ...
    @property
    def attached_processes(self) -> int: ...
    @property
    def held_by_this_process(self) -> int: ...
    def set_shed_level(self, priority: Priority) -> None: ...
    @property
    def shed_level(self) -> Optional[int]: ...
    @property
    def state(self) -> Literal["healthy", "overloaded"]: ...
    @property
    def overloaded(self) -> bool: ...
    def waiting(self, priority: Priority = None) -> int: ...
    @property
    def inflight(self) -> int: ...
    @property
    def limit(self) -> float: ...
    @property
    def levels(self) -> int: ...
    def set_static_limit(self, limit: Optional[float]) -> None: ...
    def brownout(self, *, now_ns: Optional[int] = None) -> float: ...
    def next_wakeup(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    def poll(self, *, now_ns: Optional[int] = None) -> Optional[float]: ...
    @property
    def service_time(self) -> float: ...
    def metrics(self) -> dict[str, Any]: ...
    def _finish(self, permit: Permit, ticket: _SharedTicket) -> None: ...
    def _abandon(self, permit: Permit, ticket: _SharedTicket, keep: bool = False) -> bool: ...
    def _expired(self) -> BaseException: ...

