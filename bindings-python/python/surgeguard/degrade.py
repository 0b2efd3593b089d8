"""Graceful degradation: answer something useful when a dependency refuses or fails.

Three helpers, in the order a service usually reaches for them:

- :func:`run` / :func:`run_async` — a fallback (or a precomputed default) when the call
  is *refused*: a gate's or limiter's rejection, an open breaker, an exhausted retry
  budget, a deadline that passed or a timeout. Never on bugs: a ``UsageError``,
  ``ConfigError``, ``TypeError`` and the like propagate, so a broken call cannot hide
  behind its fallback.
- :class:`StaleIfError` — a bounded cache of the last good value per key, served (marked
  stale) when the origin refuses or fails (RFC 5861's ``stale-if-error``).
- :func:`optional` — the brownout dimmer (Klein et al., "Brownout: building more robust
  cloud applications", ICSE 2014): run optional work with probability ``1 − d``, where
  ``d = gate.brownout()`` rises *before* the gate has to shed requests.

The degradation order: optional features first (:func:`optional`, as ``d`` rises), then
background work (the gate sheds the ``background`` level first), then normal traffic
(the gate's own refusals); ``critical`` last.

When a handler behind :mod:`surgeguard.asgi` or :mod:`surgeguard.wsgi` serves a stale
value, the response gets the header ``Warning: 110 - "Response is Stale"`` (RFC 7234
§5.5.1); :func:`mark_stale` does the same for values served stale by other means.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import math
import threading
from typing import Any, Awaitable, Callable, Hashable, List, NamedTuple, Optional, Tuple, Type, TypeVar

import contextvars

from ._native import clock_ns
from .errors import ConfigError, DeadlineExceeded, OverloadError, UsageError
from . import deadline as _deadline

__all__ = [
    "run",
    "run_async",
    "StaleIfError",
    "Served",
    "optional",
    "mark_stale",
    "REFUSALS",
    "BUGS",
    "STALE_WARNING",
]

T = TypeVar("T")

#: What a fallback answers by default: every surgeguard refusal (gate, limiter, keyed
#: limits, breaker, retry budget, deadline) and timeouts.
REFUSALS: Tuple[Type[BaseException], ...] = (OverloadError, TimeoutError, asyncio.TimeoutError)
#: Never answered by a fallback or a stale value, whatever ``on=`` says: misuse of a
#: handle, bad configuration and programming errors.
BUGS: Tuple[Type[BaseException], ...] = (
    UsageError,
    ConfigError,
    TypeError,
    AttributeError,
    NameError,
    AssertionError,
    NotImplementedError,
    ImportError,
    SyntaxError,
)
#: The header a middleware adds when the handler served a stale value (RFC 7234 §5.5.1).
STALE_WARNING = ("warning", '110 - "Response is Stale"')

_MISSING: Any = object()

# A per-request cell the middlewares set: [False] until a stale value is served.
_stale_cell: "contextvars.ContextVar[Optional[List[bool]]]" = contextvars.ContextVar(
    "surgeguard_stale", default=None
)


def mark_stale() -> None:
    """Marks the current request's response as stale: behind the middlewares, it gets
    ``Warning: 110 - "Response is Stale"``. :class:`StaleIfError` calls it itself; a
    no-op outside a middleware."""
    cell = _stale_cell.get()
    if cell is not None:
        cell[0] = True


def _classes(name: str, value: Any) -> Tuple[Type[BaseException], ...]:
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"{name} must be an exception class or a tuple of them, got {value!r}"[:200])
    return items


def _check_fallback(fallback: Any, default: Any) -> None:
    if (fallback is None) == (default is _MISSING):
        raise TypeError("give exactly one of fallback= (a callable) or default= (a value)")
    if fallback is not None and not callable(fallback):
        raise TypeError(f"fallback must be a callable taking the exception, got {type(fallback).__name__}")


def _degrades(exc: BaseException, on: Tuple[Type[BaseException], ...]) -> bool:
    return isinstance(exc, Exception) and isinstance(exc, on) and not isinstance(exc, BUGS)


def run(
    fn: Callable[[], T],
    fallback: Optional[Callable[[BaseException], T]] = None,
    *,
    default: Any = _MISSING,
    on: Tuple[Type[BaseException], ...] = (),
) -> T:
    """Calls ``fn()``; when it is refused, answers ``fallback(exc)`` or ``default``.

    Refused means an instance of :data:`REFUSALS` (surgeguard's refusals and timeouts) or
    of ``on`` (extra classes, e.g. ``httpx.HTTPError``). A :data:`BUGS` error, a
    ``KeyboardInterrupt`` or a ``CancelledError`` always propagates. If the current
    deadline (:mod:`surgeguard.deadline`) has already passed, ``fn`` is not called: the
    fallback answers a :class:`~surgeguard.DeadlineExceeded`.

    ::

        price = surgeguard.run(lambda: pricing.quote(item), default=item.list_price)
        recs = surgeguard.run(fetch_recommendations, fallback=lambda exc: POPULAR)
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    _check_fallback(fallback, default)
    kinds = REFUSALS + _classes("on", on)
    try:
        _deadline.check()
        return fn()
    except BaseException as exc:
        if not _degrades(exc, kinds):
            raise
        if fallback is None:
            return default
        return fallback(exc)


async def run_async(
    fn: Callable[[], Awaitable[T]],
    fallback: Optional[Callable[[BaseException], Any]] = None,
    *,
    default: Any = _MISSING,
    on: Tuple[Type[BaseException], ...] = (),
) -> T:
    """The async :func:`run`: awaits ``fn()`` (and ``fallback(exc)`` if it returns an
    awaitable). While a deadline is set, ``fn`` gets only the time left: when the
    deadline passes it is cancelled and the fallback answers a
    :class:`~surgeguard.DeadlineExceeded`.

    ::

        recs = await surgeguard.run_async(lambda: client.get(url), default=[])
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable returning an awaitable, got {type(fn).__name__}")
    _check_fallback(fallback, default)
    kinds = REFUSALS + _classes("on", on)
    try:
        _deadline.check()
        left = _deadline.remaining()
        aw = fn()
        if not inspect.isawaitable(aw):
            raise TypeError(f"fn must return an awaitable, got {type(aw).__name__}")
        if left is None:
            return await aw
        try:
            return await asyncio.wait_for(aw, left)
        except (asyncio.TimeoutError, TimeoutError) as timeout:
            if _deadline.remaining() == 0.0:
                raise DeadlineExceeded("the deadline passed while the call ran") from timeout
            raise
    except BaseException as exc:
        if not _degrades(exc, kinds):
            raise
        if fallback is None:
            return default  # type: ignore[no-any-return]
        result = fallback(exc)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]


class Served(NamedTuple):
    """What :class:`StaleIfError` answered: the ``value``; ``stale`` (True when the
    origin failed and this is the last good value); ``age`` (seconds since that value
    was fetched, 0 when fresh); ``error`` (the origin's exception when stale)."""

    value: Any
    stale: bool = False
    age: float = 0.0
    error: Optional[BaseException] = None


class StaleIfError:
    """The last good value per key, served when the origin refuses or fails.

    ::

        prices = StaleIfError(max_entries=10_000, max_age=300)
        served = prices.get(item_id, lambda: pricing.quote(item_id))
        served.value, served.stale                  # stale: the origin failed just now
        served = await prices.get_async(item_id, lambda: client.get(url))

    A success stores its value (the least recently used key is evicted beyond
    ``max_entries``). A failure (an instance of ``on``, default ``Exception``, except
    :data:`BUGS`) serves the stored value if it is at most ``max_age`` seconds old,
    marked stale (and the response marked, see :func:`mark_stale`); otherwise the
    error is raised. A deadline that has already passed skips the origin.

    Memory: at most ``max_entries`` entries, each a reference to your key and value and
    a timestamp (about 150 bytes of overhead, plus the objects themselves); expired
    entries are dropped when touched. Thread-safe: a short lock guards the table, never
    held while the origin runs (blocking, not lock-free; two callers that miss at once
    both call the origin).

    Args:
        max_entries: the most keys kept (1 to 2**24).
        max_age: seconds a value may be served stale (finite, > 0).
        on: exception classes that count as the origin failing.
        clock: int nanoseconds (like ``time.monotonic_ns``); default
            :func:`surgeguard.clock_ns`.
    """

    __slots__ = ("_max_entries", "_max_age", "_on", "_clock", "_lock", "_table", "_served_stale", "_evicted")

    def __init__(
        self,
        max_entries: int = 1024,
        max_age: float = 300.0,
        *,
        on: Tuple[Type[BaseException], ...] = (Exception,),
        clock: Optional[Callable[[], int]] = None,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int):
            raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
        if not 1 <= max_entries <= 1 << 24:
            raise ValueError(f"max_entries must be in [1, 2**24], got {max_entries}")
        if isinstance(max_age, bool) or not isinstance(max_age, (int, float)):
            raise TypeError(f"max_age must be a number of seconds, got {type(max_age).__name__}")
        if not (0 < max_age < math.inf):
            raise ValueError(f"max_age must be a finite number > 0 seconds, got {max_age!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning int nanoseconds, got {type(clock).__name__}")
        self._max_entries = max_entries
        self._max_age = float(max_age)
        self._on = _classes("on", on)
        self._clock = clock if clock is not None else clock_ns
        self._lock = threading.Lock()
        self._table: "collections.OrderedDict[Hashable, Tuple[Any, int]]" = collections.OrderedDict()
        self._served_stale = 0
        self._evicted = 0

    @property
    def max_entries(self) -> int:
        """The most keys kept."""
        return self._max_entries

    @property
    def max_age(self) -> float:
        """Seconds a value may be served stale."""
        return self._max_age

    @property
    def on(self) -> Tuple[Type[BaseException], ...]:
        """The exception classes that count as the origin failing."""
        return self._on

    def _now(self) -> int:
        t = self._clock()
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError(f"clock() must return int nanoseconds, got {type(t).__name__}")
        return t

    def put(self, key: Hashable, value: Any) -> None:
        """Stores ``value`` as the last good value for ``key``."""
        hash(key)  # an unhashable key raises TypeError before anything changes
        now = self._now()
        with self._lock:
            self._table[key] = (value, now)
            self._table.move_to_end(key)
            while len(self._table) > self._max_entries:
                self._table.popitem(last=False)
                self._evicted += 1

    def peek(self, key: Hashable) -> Optional[Served]:
        """The stored value for ``key`` (marked stale, with its age) if it is not older
        than ``max_age``, else ``None``. Does not call the origin."""
        hash(key)
        now = self._now()
        with self._lock:
            entry = self._table.get(key)
            if entry is None:
                return None
            value, at = entry
            age = max(0, now - at) / 1e9
            if age > self._max_age:
                del self._table[key]
                return None
            self._table.move_to_end(key)
        return Served(value, True, age)

    def _failed(self, key: Hashable, exc: BaseException) -> Served:
        if not _degrades(exc, self._on):
            raise exc
        hit = self.peek(key)
        if hit is None:
            raise exc
        with self._lock:
            self._served_stale += 1
        mark_stale()
        return Served(hit.value, True, hit.age, exc)

    def get(self, key: Hashable, fetch: Callable[[], Any]) -> Served:
        """Calls ``fetch()``; stores and returns its value (``stale=False``), or on
        failure the last good value (``stale=True``), or raises the failure."""
        hash(key)
        if not callable(fetch):
            raise TypeError(f"fetch must be a callable taking no arguments, got {type(fetch).__name__}")
        try:
            _deadline.check()
            value = fetch()
        except BaseException as exc:
            return self._failed(key, exc)
        self.put(key, value)
        return Served(value)

    async def get_async(self, key: Hashable, fetch: Callable[[], Awaitable[Any]]) -> Served:
        """The async :meth:`get`: awaits ``fetch()``."""
        hash(key)
        if not callable(fetch):
            raise TypeError(f"fetch must be a callable returning an awaitable, got {type(fetch).__name__}")
        try:
            _deadline.check()
            aw = fetch()
            if not inspect.isawaitable(aw):
                raise TypeError(f"fetch must return an awaitable, got {type(aw).__name__}")
            value = await aw
        except BaseException as exc:
            return self._failed(key, exc)
        self.put(key, value)
        return Served(value)

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)

    def metrics(self) -> dict[str, int]:
        """``entries``, ``max_entries``, ``served_stale`` (count) and ``evicted`` (LRU)."""
        with self._lock:
            return {
                "entries": len(self._table),
                "max_entries": self._max_entries,
                "served_stale": self._served_stale,
                "evicted": self._evicted,
            }


def optional(gate: Any, random: Optional[Callable[[], float]] = None) -> bool:
    """Whether to run optional work now: True with probability ``1 − d``, where
    ``d = gate.brownout()`` is the gate's dimmer in [0, 1] (0 when healthy: always
    True; 1 at saturation: always False).

    ``random`` returns a float in [0, 1) (e.g. ``random.Random(7).random``) for a
    deterministic sequence; default :func:`random.random`.

    ::

        page = render_core(item)
        if surgeguard.optional(gate):
            page.recommendations = recommend(item)      # dimmed first under load
    """
    brownout = getattr(gate, "brownout", None)
    if not callable(brownout):
        raise TypeError(f"gate must be a surgeguard.Gate (with brownout()), got {type(gate).__name__}")
    if random is not None and not callable(random):
        raise TypeError(f"random must be a callable returning a float in [0, 1), got {type(random).__name__}")
    d = float(brownout())
    if d <= 0.0:
        return True
    if d >= 1.0:
        return False
    if random is None:
        import random as _random

        r = _random.random()
    else:
        r = random()
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise TypeError(f"random() must return a float in [0, 1), got {type(r).__name__}")
        if not 0.0 <= r < 1.0:
            raise ValueError(f"random() must return a float in [0, 1), got {r!r}")
    return r >= d
