"""Deadlines: how long the caller will still wait, carried from hop to hop.

A caller that has given up still costs its dependencies everything they do for it after
that instant. Passing the remaining budget with each request lets every hop refuse or drop
work nobody waits for any more (gRPC deadline propagation; the Google SRE book, "Handling
Overload": check the deadline before starting work, and propagate it downstream).

The deadline of the current request lives in a :mod:`contextvars` variable, so each
asyncio task and each thread sees its own. It is an absolute time on the native monotonic
clock (:func:`surgeguard.clock_ns`, the same for every thread of the process); between
processes only the *remaining* budget travels, in a header. The middlewares set it from
the request's headers::

    async def handler(request):
        left = surgeguard.deadline.remaining()     # seconds left, or None (no deadline)
        ...

Outside a middleware (a job, a test), open a scope; nested scopes keep the earlier
deadline::

    with surgeguard.deadline.scope(0.5):          # this work must be done in 0.5 s
        with surgeguard.deadline.scope(2.0):      # still 0.5 s: the outer one is earlier
            call_dependency()                     # the httpx transports send the rest

Headers (read by :mod:`surgeguard.asgi` / :mod:`surgeguard.wsgi`, sent by
:mod:`surgeguard.httpx`; parsed and formatted by the core, so every binding agrees):

- ``surgeguard-timeout-ms`` — the project's own: the caller's remaining budget in whole
  milliseconds, a decimal integer;
- ``grpc-timeout`` — gRPC's wire format (1 to 8 digits and a unit ``H M S m u n``);
- ``x-envoy-expected-rq-timeout-ms`` — set by Envoy for its upstreams;
- one more header of your choice (milliseconds, like ``surgeguard-timeout-ms``).

The smallest valid budget wins. A malformed, negative or absurd (above one hour) value is
ignored — never a failed request, never an unbounded deadline — and counted by reason
(``malformed``, ``negative``, ``too_large``) in :class:`DeadlineStats`.
"""

from __future__ import annotations

import contextvars
import math
import threading
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _native
from ._native import clock_ns
from .errors import DeadlineExceeded

__all__ = [
    "current",
    "remaining",
    "check",
    "scope",
    "DeadlineStats",
    "HEADER",
    "GRPC_HEADER",
    "ENVOY_HEADER",
    "HEADERS",
]

#: The project's own header: the remaining budget in whole milliseconds.
HEADER = "surgeguard-timeout-ms"
#: gRPC's deadline header (PROTOCOL-HTTP2: ``TimeoutValue TimeoutUnit``).
GRPC_HEADER = "grpc-timeout"
#: Envoy's header for its upstream's expected timeout (milliseconds).
ENVOY_HEADER = "x-envoy-expected-rq-timeout-ms"
#: The headers the middlewares read by default.
HEADERS = (HEADER, GRPC_HEADER, ENVOY_HEADER)

#: The largest injectable time (the core's MAX_NOW, 2**62 ns).
_MAX_NOW = 1 << 62
_SEC = 1_000_000_000

_deadline: "contextvars.ContextVar[Optional[int]]" = contextvars.ContextVar("surgeguard_deadline", default=None)


def _now(now_ns: Optional[int]) -> int:
    if now_ns is None:
        return clock_ns()
    if isinstance(now_ns, bool) or not isinstance(now_ns, int):
        raise TypeError(f"now_ns must be an int (nanoseconds) or None, got {type(now_ns).__name__}")
    if not 0 <= now_ns <= _MAX_NOW:
        raise ValueError(f"now_ns must be in [0, 2**62] nanoseconds, got {now_ns}")
    return now_ns


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or v < 0 or math.isinf(v):
        raise ValueError(f"{name} must be a finite number >= 0 seconds, got {value!r}")
    return v


def _budget_ns(seconds: float) -> int:
    """Seconds (checked finite, >= 0) as ns, saturated at 2**62."""
    return _MAX_NOW if seconds >= _MAX_NOW / _SEC else int(seconds * _SEC)


def current() -> Optional[int]:
    """The current deadline: absolute int nanoseconds on :func:`surgeguard.clock_ns`, or
    ``None`` when no deadline is set."""
    return _deadline.get()


def remaining(*, now_ns: Optional[int] = None) -> Optional[float]:
    """Seconds left before the current deadline (``0.0`` once it has passed), or ``None``
    when no deadline is set."""
    now = _now(now_ns)
    d = _deadline.get()
    if d is None:
        return None
    return max(0, d - now) / _SEC


def check(*, now_ns: Optional[int] = None) -> None:
    """Raises :class:`~surgeguard.DeadlineExceeded` if the current deadline has passed
    (call it before starting expensive work)."""
    now = _now(now_ns)
    d = _deadline.get()
    if d is not None and now >= d:
        raise DeadlineExceeded("the deadline has passed before the work started")


class scope:
    """``with deadline.scope(seconds):`` — a deadline ``seconds`` from now for the code
    inside (sync or async; each task and thread has its own). Nested scopes take the
    earlier deadline: an inner scope never extends an outer one.

    ``scope(deadline_ns=...)`` sets an absolute deadline (on :func:`surgeguard.clock_ns`)
    instead; ``scope(None)`` keeps the current deadline (handy for optional budgets).
    The deadline in force inside is the ``as`` value (absolute ns, or ``None``).
    """

    __slots__ = ("_deadline", "_token")

    def __init__(
        self,
        seconds: Optional[float] = None,
        *,
        deadline_ns: Optional[int] = None,
        now_ns: Optional[int] = None,
    ) -> None:
        if seconds is not None and deadline_ns is not None:
            raise TypeError("scope() takes seconds or deadline_ns, not both")
        new: Optional[int] = None
        if seconds is not None:
            s = _seconds("seconds", seconds)
            new = min(_now(now_ns) + _budget_ns(s), _MAX_NOW)
        elif deadline_ns is not None:
            if now_ns is not None:
                raise TypeError("now_ns is only used with seconds")
            new = _now(deadline_ns)  # same checks: an int in [0, 2**62]
        elif now_ns is not None:
            _now(now_ns)
        self._deadline = new
        self._token: Optional[contextvars.Token[Optional[int]]] = None

    def __enter__(self) -> Optional[int]:
        if self._token is not None:
            raise RuntimeError("this deadline scope is already entered")
        outer = _deadline.get()
        d = self._deadline
        if d is None or (outer is not None and outer <= d):
            d = outer
        self._token = _deadline.set(d)
        return d

    def __exit__(self, *exc: Any) -> bool:
        token, self._token = self._token, None
        if token is not None:
            _deadline.reset(token)
        return False

    async def __aenter__(self) -> Optional[int]:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> bool:
        return self.__exit__(*exc)


# ---------------------------------------------------------------------------------------
# Header parsing (the core's rules) and the count of ignored headers.


class DeadlineStats:
    """Counts of deadline headers seen by a middleware: ``accepted`` (a valid budget was
    used), ``ignored_<reason>`` (a header was malformed, negative or absurd and was
    skipped), ``defaulted`` (no valid header: the server's default budget applied),
    ``capped`` (the caller's budget was above the server's maximum) and ``expired``
    (the budget had already run out on arrival: refused without queueing).

    Render it with :func:`surgeguard.prometheus.render` (``surgeguard_deadline_*``).
    Counters are updated under a small lock (never held while anything else runs).
    """

    __slots__ = ("_lock", "_counts")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = {
            "accepted": 0,
            "ignored_malformed": 0,
            "ignored_negative": 0,
            "ignored_too_large": 0,
            "defaulted": 0,
            "capped": 0,
            "expired": 0,
        }

    def count(self, name: str, n: int = 1) -> None:
        """Adds ``n`` to counter ``name`` (an ``ignored_<reason>`` counter is created on
        its first use)."""
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def metrics(self) -> Dict[str, int]:
        """A snapshot of the counters."""
        with self._lock:
            return dict(self._counts)

    def ignored(self) -> int:
        """The number of ignored headers, all reasons together."""
        with self._lock:
            return sum(v for k, v in self._counts.items() if k.startswith("ignored_"))


HeaderPairs = Iterable[Tuple[Union[str, bytes], Union[str, bytes]]]


def _at(budget_ns: int, arrival_ns: int) -> int:
    """The absolute deadline ``arrival + budget``, saturating at 2**62 (the core's rule)."""
    return _native.deadline_at(budget_ns, arrival_ns)  # type: ignore[no-any-return]


def _format(name: str, deadline_ns: int, margin_ns: int, now_ns: int) -> Optional[str]:
    """The outgoing value of header ``name`` (the core's formatter: rounded down), or
    ``None`` when nothing worth sending remains."""
    return _native.format_deadline_header(name, deadline_ns, margin_ns, now_ns)  # type: ignore[no-any-return]


def _joined_lines(values: Iterable[Tuple[str, Union[str, bytes]]]) -> List[Tuple[str, Union[str, bytes]]]:
    """``(name, value)`` pairs with the lines of one name joined by ``", "`` (RFC 9110,
    section 5.3), in the order the names first appear."""
    lines: Dict[str, List[Union[str, bytes]]] = {}
    for name, value in values:
        lines.setdefault(name, []).append(value)
    out: List[Tuple[str, Union[str, bytes]]] = []
    for name, vs in lines.items():
        if len(vs) == 1:
            out.append((name, vs[0]))
        elif all(isinstance(v, bytes) for v in vs):
            out.append((name, b", ".join(vs)))  # type: ignore[arg-type]
        elif all(isinstance(v, str) for v in vs):
            out.append((name, ", ".join(vs)))  # type: ignore[arg-type]
        else:
            out.extend((name, v) for v in vs)  # mixed or odd types: read one by one
    return out


class _ServerPolicy:
    """What a middleware does with the deadline headers of one request (internal).

    ``budget_ns(values)`` takes ``(header_name, raw_value)`` pairs of the headers this
    policy reads and returns the budget to apply in ns (``None``: no deadline)."""

    __slots__ = ("names", "default_ns", "max_ns", "stats", "enabled")

    def __init__(
        self,
        enabled: bool,
        header: Optional[str],
        default_budget: Optional[float],
        maximum: Optional[float],
        stats: Optional[DeadlineStats],
    ) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"read_deadlines must be a bool, got {type(enabled).__name__}")
        if header is not None:
            if not isinstance(header, str):
                raise TypeError(f"deadline_header must be a str or None, got {type(header).__name__}")
            if not header or not header.isascii() or any(c in header for c in " \t\r\n:"):
                raise ValueError(f"deadline_header must be a non-empty ASCII header name, got {header!r}")
        if stats is not None and not isinstance(stats, DeadlineStats):
            raise TypeError(f"deadline_stats must be a surgeguard.deadline.DeadlineStats, got {type(stats).__name__}")
        self.enabled = enabled
        names = list(HEADERS)
        if header is not None and header.lower() not in names:
            names.append(header.lower())
        self.names: Tuple[str, ...] = tuple(names)
        self.default_ns = None if default_budget is None else _budget_ns(_seconds("default_budget", default_budget))
        if default_budget is not None and default_budget > 86_400:
            raise ValueError(f"default_budget must be at most 86400 seconds, got {default_budget!r}")
        self.max_ns = None if maximum is None else _budget_ns(float(maximum))
        self.stats = stats if stats is not None else DeadlineStats()

    def budget_ns(self, values: Iterable[Tuple[str, Union[str, bytes]]]) -> Optional[int]:
        best: Optional[int] = None
        if self.enabled and values:
            # The core combines them: the smallest valid budget wins; each ignored
            # header comes back with its reason. A header sent on several lines is read
            # as its lines joined by commas, one list (what Node's http and WSGI servers
            # hand over), so it reads and counts alike in every binding.
            best, ignored = _native.parse_deadline_headers(_joined_lines(values))
            for _name, reason in ignored:
                self.stats.count(f"ignored_{reason}")
        if best is None:
            best = self.default_ns
            if best is not None:
                self.stats.count("defaulted")
        else:
            self.stats.count("accepted")
        if self.max_ns is not None and (best is None or best > self.max_ns):
            if best is not None:
                self.stats.count("capped")
            best = self.max_ns
        return best
