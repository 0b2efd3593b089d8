"""The exceptions surgeguard raises, one class per core reason.

Hierarchy::

    OverloadError                 anything that says "send less" (reason, retry_after)
    ├── Rejected                  admission refused
    │   ├── LimitReached          the concurrency limit (or the level's share) is reached
    │   ├── QueueFull             the admission queue is full
    │   ├── Evicted               a more important request took this waiter's place
    │   ├── DeadlineUnmeetable    the deadline cannot be met at the current drain rate
    │   ├── Expired               waited past the deadline / timeout
    │   ├── CodelSlough           the queue stood too long (CoDel)
    │   ├── Shed                  this priority is being shed (the on-call switch)
    │   ├── RateLimited           the rate limiter has no capacity
    │   ├── KeyLimit, KeyRate     a per-key (tenant, agent) cap or rate refused it
    │   ├── Throttled             client-side adaptive throttling refused it locally
    │   ├── NoCredit              the consumer granted no credit (pipelines)
    │   └── Cancelled             the waiter was cancelled
    ├── BreakerOpen               the circuit breaker is open
    ├── RetryBudgetExhausted      the retry budget has no room for another retry
    └── DeadlineExceeded          the caller's deadline has passed (nothing was sent)
        └── InsufficientBudget    the time left is below the dependency's expected latency

    ConfigError(ValueError)       a configuration value cannot be used (``field`` names it)
    UsageError(RuntimeError)      a handle was misused: released twice, or of another object

Every :class:`OverloadError` carries ``reason`` (the stable snake-case name shared by all
bindings, e.g. ``"queue_full"``) and ``retry_after`` (seconds; do not try again sooner).

This module imports nothing from the native extension, so it can be imported first.
"""

from __future__ import annotations

__all__ = [
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
    "BY_REASON",
]


class OverloadError(Exception):
    """Something refused work because of overload: slow down.

    Attributes:
        reason: the stable snake-case reason (``"queue_full"``, ``"breaker_open"``, ...).
        retry_after: seconds before trying again could succeed (``inf`` for never).
    """

    reason: str
    retry_after: float

    def __init__(self, message: str = "overloaded", reason: str = "", retry_after: float = 0.0):
        super().__init__(message, reason, retry_after)
        self.reason = reason
        self.retry_after = float(retry_after)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.args[0]!r}, reason={self.reason!r}, "
            f"retry_after={self.retry_after!r})"
        )


class Rejected(OverloadError):
    """Admission was refused; ``reason`` says why, ``retry_after`` when to come back."""


class LimitReached(Rejected):
    """The concurrency limit (or this priority's share of it) is reached."""


class QueueFull(Rejected):
    """The admission queue is full and this request is not more important than any waiter."""


class Evicted(Rejected):
    """A more important request took this waiter's place in a full queue."""


class DeadlineUnmeetable(Rejected):
    """The deadline (timeout) cannot be met at the current drain rate: refused at once."""


class Expired(Rejected):
    """The waiter's deadline (timeout) ran out before a slot freed up."""


class CodelSlough(Rejected):
    """CoDel: the queue stood above target for a whole interval; this waiter was dropped."""


class Shed(Rejected):
    """The on-call shed switch refuses this priority."""


class RateLimited(Rejected):
    """The rate limiter has no capacity before ``retry_after``."""


class KeyLimit(Rejected):
    """This key (tenant, API key, agent) is at its own concurrency cap (HTTP 429)."""


class KeyRate(Rejected):
    """This key (tenant, API key, agent) is over its own rate (HTTP 429)."""


class Throttled(Rejected):
    """Client-side adaptive throttling refused the request locally."""


class NoCredit(Rejected):
    """The consumer has granted no credit for another item (pipeline backpressure)."""


class Cancelled(Rejected):
    """The waiter was cancelled by its owner."""


class BreakerOpen(OverloadError):
    """The circuit breaker is open (or half-open with every probe slot taken)."""


class RetryBudgetExhausted(OverloadError):
    """The retry budget has no room for another retry: fail instead of retrying."""


class DeadlineExceeded(OverloadError):
    """The deadline propagated from the caller (or set with
    :func:`surgeguard.deadline.scope`) has passed: the work was not started, because
    whoever asked for it has given up. ``reason`` is ``"deadline_exceeded"``.

    Retrying cannot help (the budget is gone): :func:`surgeguard.retry` and the httpx
    transports never retry it. :func:`surgeguard.run` serves its fallback for it.
    """

    def __init__(self, message: str = "the deadline has passed", reason: str = "deadline_exceeded",
                 retry_after: float = 0.0):
        super().__init__(message, reason, retry_after)


class InsufficientBudget(DeadlineExceeded):
    """Failing fast: the time left before the deadline is shorter than the dependency's
    expected latency (configured, or learned from its recent answers), so the call
    would finish too late. Nothing was sent. ``reason`` is ``"insufficient_budget"``.

    Attributes:
        remaining: seconds that were left.
        expected: the latency the call was expected to take (seconds).
    """

    remaining: float
    expected: float

    def __init__(self, message: str = "not enough time left for the call", reason: str = "insufficient_budget",
                 retry_after: float = 0.0, *, remaining: float = 0.0, expected: float = 0.0):
        super().__init__(message, reason, retry_after)
        self.remaining = float(remaining)
        self.expected = float(expected)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_insufficient, (self.args, self.remaining, self.expected))


def _insufficient(args: tuple, remaining: float, expected: float) -> "InsufficientBudget":
    return InsufficientBudget(*args, remaining=remaining, expected=expected)


class ConfigError(ValueError):
    """A configuration value cannot be used; nothing was built or changed.

    Attributes:
        field: the offending setting as the keyword is spelled (``buffer``,
            ``min_window``, ``codel.target`` for a key of the ``codel`` dict).
    """

    field: str

    def __init__(self, message: str = "invalid configuration", field: str = ""):
        super().__init__(message, field)
        self.field = field

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UsageError(RuntimeError):
    """A handle was misused; nothing changed.

    Attributes:
        kind: ``"already_released"`` (ended twice), ``"foreign_handle"`` (given to an
            object that did not issue it), ``"not_admitted"`` (ended before it was
            admitted, or after its admission was refused), ``"already_entered"``
            (``with p:`` on a permit already inside its block), ``"not_entered"``
            (``__exit__`` without ``__enter__``), ``"not_waiting"`` (the asyncio helpers
            finished a wait for a permit that was not waiting; the slot went back),
            ``"unknown_ticket"`` or ``"bad_level"``.
    """

    kind: str

    def __init__(self, message: str = "invalid use", kind: str = ""):
        super().__init__(message, kind)
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


#: The exception class for each core reason name.
BY_REASON: dict[str, type[OverloadError]] = {
    "limit_reached": LimitReached,
    "queue_full": QueueFull,
    "evicted": Evicted,
    "deadline_unmeetable": DeadlineUnmeetable,
    "expired": Expired,
    "codel_slough": CodelSlough,
    "shed": Shed,
    "breaker_open": BreakerOpen,
    "budget_exhausted": RetryBudgetExhausted,
    "throttled": Throttled,
    "rate_limited": RateLimited,
    "key_limit": KeyLimit,
    "key_rate": KeyRate,
    "cancelled": Cancelled,
    "no_credit": NoCredit,
}
