"""surgeguard: overload control for Python services, over one Rust core.

Admission (server side):

- :class:`Gate` — adaptive concurrency limit + bounded priority queue (CoDel, adaptive
  LIFO, deadlines) + shed switch::

      gate = surgeguard.Gate()              # adaptive (gradient); Gate(limit=N) is fixed
      with gate.acquire(priority="critical", timeout=0.2) as permit:
          ...                               # waits (GIL released) while queued;
                                            # timeout = deadline for wait + service
      async with gate.acquire_async(priority="background") as permit:
          ...

  A server gate refuses work that queued too long (CoDel) on purpose; for a semaphore
  with a queue (jobs, worker pools) use :func:`job_queue`.

  ``Gate.shared("name", limit=4)`` (Linux) is one gate across worker processes: a
  :class:`SharedGate` in shared memory (created before the fork or attached by name after
  it) whose waiters in one process are granted by releases in any.

- :class:`Limiter` — the limiter alone (no queue: refusals raise at once).
  ``Limiter.shared("name", limit=4)`` (Linux) is one limiter across worker processes
  (gunicorn, ``uvicorn --workers``): a :class:`Limiter` placed in shared memory, created
  before the fork or attached by name after it, with the same API and :class:`Permit`.
  :class:`RateLimiter`, :class:`RetryBudget` and :class:`KeyedLimits` are placed the same
  way (``Class.shared(name, ...)``, or ``shared=name`` in the constructor).
- :class:`KeyedLimits` — per-tenant / per-agent caps and rates, shuffle-sharded.
- :mod:`surgeguard.asgi` / :mod:`surgeguard.wsgi` — middleware (503 / 429 + Retry-After).

Client side: :class:`RetryBudget`, :class:`TokenRetryThrottle`,
:class:`AdaptiveThrottle`, :class:`Backoff`, :func:`retry`, :class:`CircuitBreaker`,
:class:`RateLimiter`, and :mod:`surgeguard.httpx` (an httpx transport).

Deadlines and degradation: :mod:`surgeguard.deadline` (the caller's remaining time,
read by the middlewares and sent by the httpx transports), the header functions
:func:`parse_deadline_header`, :func:`parse_deadline_headers`, :func:`deadline_at` and
:func:`format_deadline_header` (``docs/deadlines.md``), :func:`run` /
:func:`run_async` (fallbacks on refusal), :class:`StaleIfError` (the last good value),
:func:`optional` (the brownout dimmer: skip optional work before the gate sheds).

Pipelines: :class:`Credits`, :class:`LagMeter`, :class:`Watermarks`, :class:`PacedDrain`.

Durations are seconds (floats); priorities are names (``"critical"``, ``"normal"``,
``"background"``) or ints (0 = most important); every time-dependent call takes an
optional ``now_ns=`` (int nanoseconds, at most 2**62) to inject time, otherwise the
object's ``clock=`` or the native monotonic clock is read (:func:`clock_ns`). Use one or
the other per object.

Refusals raise :class:`OverloadError` subclasses carrying ``reason`` and ``retry_after``.
"""

from __future__ import annotations

from . import deadline, errors, prometheus
from ._native import (
    DEADLINE_HEADERS,
    DEADLINE_MAX_BUDGET_NS,
    AdaptiveThrottle,
    AimdLimit,
    Backoff,
    BreakerCall,
    BreakerFunction,
    Credits,
    FixedLimit,
    Gate,
    Gradient2Limit,
    GradientLimit,
    HysteresisLimit,
    KeyedLimits,
    KeyPermit,
    LagMeter,
    Limiter,
    PacedDrain,
    Permit,
    RateLimiter,
    RetryBudget,
    TokenRetryThrottle,
    VegasLimit,
    Watermarks,
    __version__,
    actionable,
    clock_ns,
    deadline_at,
    format_deadline_header,
    hash_key,
    parse_deadline_header,
    parse_deadline_headers,
    time_to_drain,
)
try:  # Linux only: memory shared between worker processes
    from ._native import SharedGate
except ImportError:  # pragma: no cover - other platforms
    pass
from .breaker import CircuitBreaker
from .degrade import Served, StaleIfError, mark_stale, optional, run, run_async
from .errors import (
    BreakerOpen,
    Cancelled,
    CodelSlough,
    ConfigError,
    DeadlineExceeded,
    DeadlineUnmeetable,
    Evicted,
    InsufficientBudget,
    Expired,
    KeyLimit,
    KeyRate,
    LimitReached,
    NoCredit,
    OverloadError,
    QueueFull,
    RateLimited,
    Rejected,
    RetryBudgetExhausted,
    Shed,
    Throttled,
    UsageError,
)
from .retry import retry


def job_queue(limit: int, *, queue_capacity: int = 4096, clock: object = None) -> Gate:
    """A :class:`Gate` that behaves like a semaphore with a bounded queue (the p-limit /
    ``asyncio.Semaphore`` idiom): a fixed ``limit``, one priority level, FIFO order, no
    CoDel and no maximum wait, so ``with gate.acquire():`` waits its turn instead of being
    refused under steady load. It refuses only when ``queue_capacity`` waiters are
    already queued (``QueueFull``), or on ``timeout=`` if you pass one.

    Use it for batch work and job runners. For a server, use the default :class:`Gate`:
    its CoDel and adaptive LIFO refuse work that has queued too long *on purpose*, so
    a client retries elsewhere instead of waiting for an answer it no longer wants.
    """
    return Gate(
        limit=limit,
        levels=1,
        codel=False,
        lifo="never",
        queue_capacity=queue_capacity,
        clock=clock,
    )


__all__ = [
    # admission
    "Gate",
    "job_queue",
    "Limiter",
    "Permit",
    *(["SharedGate"] if "SharedGate" in globals() else []),
    "KeyedLimits",
    "KeyPermit",
    "FixedLimit",
    "AimdLimit",
    "HysteresisLimit",
    "GradientLimit",
    "Gradient2Limit",
    "VegasLimit",
    # client side
    "RetryBudget",
    "TokenRetryThrottle",
    "AdaptiveThrottle",
    "Backoff",
    "retry",
    "CircuitBreaker",
    "BreakerCall",
    "BreakerFunction",
    "RateLimiter",
    # deadlines and degradation
    "deadline",
    "parse_deadline_header",
    "parse_deadline_headers",
    "deadline_at",
    "format_deadline_header",
    "DEADLINE_MAX_BUDGET_NS",
    "DEADLINE_HEADERS",
    "run",
    "run_async",
    "StaleIfError",
    "Served",
    "optional",
    "mark_stale",
    # pipelines
    "Credits",
    "LagMeter",
    "Watermarks",
    "PacedDrain",
    "time_to_drain",
    # helpers
    "actionable",
    "hash_key",
    "clock_ns",
    "errors",
    "prometheus",
    # exceptions
    "OverloadError",
    "Rejected",
    "LimitReached",
    "QueueFull",
    "Evicted",
    "DeadlineUnmeetable",
    "Expired",
    "CodelSlough",
    "Shed",
    "RateLimited",
    "KeyLimit",
    "KeyRate",
    "Throttled",
    "NoCredit",
    "Cancelled",
    "BreakerOpen",
    "RetryBudgetExhausted",
    "DeadlineExceeded",
    "InsufficientBudget",
    "ConfigError",
    "UsageError",
    "__version__",
]
