"""httpx transports with retry budgets, backoff, Retry-After, adaptive throttling and a
breaker (httpx is optional: ``pip install surgeguard[httpx]``).

::

    budget = surgeguard.RetryBudget()
    client = httpx.Client(transport=surgeguard.httpx.RetryTransport(budget=budget))
    async_client = httpx.AsyncClient(transport=surgeguard.httpx.AsyncRetryTransport(budget=budget))

A response with a retryable status (429, 502, 503, 504 by default) or a connection error
is retried up to ``attempts`` times while the budget allows, after a jittered delay that
is never shorter than the response's ``Retry-After``. Non-idempotent requests (POST,
PATCH without an ``Idempotency-Key`` header) are retried only when they were never sent
(connection failures), unless ``retry_non_idempotent=True``. When retries stop, the last
response is returned as it is (or the last error raised).

Deadlines (:mod:`surgeguard.deadline`): while a deadline is set (by the ASGI/WSGI
middleware from the incoming request, or by ``deadline.scope``), each attempt

- carries the time left minus ``margin`` in ``surgeguard-timeout-ms`` (and any other
  ``deadline_headers``, e.g. ``grpc-timeout``), so the dependency can refuse or drop work
  its caller will no longer wait for;
- is not sent when the time left (minus ``margin``) is below the dependency's expected
  latency (``expected_latency=``, or the median of its recent answers): it fails fast with
  :class:`~surgeguard.InsufficientBudget` (:class:`~surgeguard.DeadlineExceeded` once the
  deadline has passed);
- has httpx's timeouts cut to the time left (a timeout past the deadline raises
  ``DeadlineExceeded``);
- is retried only if the backoff delay plus the expected latency still fits before the
  deadline: no retry starts that cannot finish, and no backoff sleeps past the deadline.

Deadline arguments (both transports): ``propagate`` (default True; False sends no header
and ignores the deadline), ``deadline_headers`` (default ``("surgeguard-timeout-ms",)``;
also ``"grpc-timeout"``, ``"x-envoy-expected-rq-timeout-ms"``), ``margin`` (seconds kept
for the answer's way back, default 0.005), ``expected_latency`` (seconds; default: the
learned median of ``latency``, a :class:`LatencyEstimate`, once it has 8 answers).
"""

from __future__ import annotations

import asyncio
import collections
import math
import threading
import time
from typing import Any, Callable, Deque, Iterable, Optional, Tuple, Union

import httpx

from . import deadline as _dl
from ._native import AdaptiveThrottle, Backoff, RetryBudget, TokenRetryThrottle, clock_ns
from .breaker import CircuitBreaker
from .errors import DeadlineExceeded, InsufficientBudget
from .retry import parse_retry_after

__all__ = ["RetryTransport", "AsyncRetryTransport", "IDEMPOTENT_METHODS", "LatencyEstimate"]

_SEC = 1_000_000_000


class LatencyEstimate:
    """The median of a dependency's last ``window`` response times (seconds): what the
    transports expect the next call to take when ``expected_latency`` is not given.
    ``None`` until ``min_samples`` answers were seen. Memory: ``window`` floats.
    Thread-safe (a short lock; blocking, not lock-free)."""

    __slots__ = ("_samples", "_lock", "_median", "min_samples")

    def __init__(self, window: int = 64, min_samples: int = 8) -> None:
        for name, v in (("window", window), ("min_samples", min_samples)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if not 1 <= window <= 4096:
            raise ValueError(f"window must be in [1, 4096], got {window}")
        if not 1 <= min_samples <= window:
            raise ValueError(f"min_samples must be in [1, window], got {min_samples}")
        self._samples: Deque[float] = collections.deque(maxlen=window)
        self._lock = threading.Lock()
        self._median: Optional[float] = None
        self.min_samples = min_samples

    def record(self, seconds: float) -> None:
        """Adds one response time (NaN, negative and infinite values are skipped)."""
        if not (0.0 <= seconds < math.inf):
            return
        with self._lock:
            self._samples.append(seconds)
            self._median = None

    def median(self) -> Optional[float]:
        """The median of the recent samples, or ``None`` while there are too few."""
        with self._lock:
            if self._median is None and len(self._samples) >= self.min_samples:
                ordered = sorted(self._samples)
                self._median = ordered[len(ordered) // 2]
            return self._median


def _check(value: Any, types: Any, name: str, what: str) -> None:
    if value is not None and not isinstance(value, types):
        raise TypeError(f"{name} must be {what} or None, got {type(value).__name__}")

#: RFC 9110 §9.2.2 idempotent methods.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
#: Statuses that say "overloaded or unavailable: try again later".
RETRY_STATUSES = (429, 502, 503, 504)
#: Errors raised before the request reached the server.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class _Common:
    def __init__(
        self,
        *,
        attempts: int = 3,
        backoff: Optional[Backoff] = None,
        budget: Union[RetryBudget, TokenRetryThrottle, None] = None,
        throttle: Optional[AdaptiveThrottle] = None,
        breaker: Optional[CircuitBreaker] = None,
        retry_statuses: Iterable[int] = RETRY_STATUSES,
        retry_non_idempotent: bool = False,
        max_delay: Optional[float] = 30.0,
        sleep: Optional[Callable[[float], Any]] = None,
        propagate: bool = True,
        deadline_headers: Iterable[str] = (_dl.HEADER,),
        margin: float = 0.005,
        expected_latency: Optional[float] = None,
        latency: Optional[LatencyEstimate] = None,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
        _check(backoff, Backoff, "backoff", "a surgeguard.Backoff")
        _check(budget, (RetryBudget, TokenRetryThrottle), "budget", "a RetryBudget or a TokenRetryThrottle")
        _check(throttle, AdaptiveThrottle, "throttle", "a surgeguard.AdaptiveThrottle")
        _check(breaker, CircuitBreaker, "breaker", "a surgeguard.CircuitBreaker")
        if isinstance(retry_statuses, (str, bytes)) or not isinstance(retry_statuses, Iterable):
            raise TypeError(f"retry_statuses must be a collection of ints, got {type(retry_statuses).__name__}")
        retry_statuses = list(retry_statuses)
        for s in retry_statuses:
            if isinstance(s, bool) or not isinstance(s, int):
                raise TypeError(f"retry_statuses must hold int statuses, got {s!r}"[:120])
            if not 100 <= s <= 599:
                raise ValueError(f"retry_statuses must hold HTTP statuses (100-599), got {s}")
        if not isinstance(retry_non_idempotent, bool):
            raise TypeError(f"retry_non_idempotent must be a bool, got {type(retry_non_idempotent).__name__}")
        if max_delay is not None:
            if isinstance(max_delay, bool) or not isinstance(max_delay, (int, float)):
                raise TypeError(f"max_delay must be a number of seconds or None, got {type(max_delay).__name__}")
            if not 0 <= max_delay < float("inf"):
                raise ValueError(f"max_delay must be a finite number >= 0 seconds, got {max_delay!r}")
        if sleep is not None and not callable(sleep):
            raise TypeError(f"sleep must be callable, got {type(sleep).__name__}")
        if not isinstance(propagate, bool):
            raise TypeError(f"propagate must be a bool, got {type(propagate).__name__}")
        if isinstance(deadline_headers, (str, bytes)) or not isinstance(deadline_headers, Iterable):
            raise TypeError(f"deadline_headers must be a collection of header names, got {type(deadline_headers).__name__}")
        deadline_headers = [h.lower() if isinstance(h, str) else h for h in deadline_headers]
        for h in deadline_headers:
            if h not in _dl.HEADERS:
                raise ValueError(f"deadline_headers must name headers among {_dl.HEADERS}, got {h!r}"[:200])
        self.margin_ns = _dl._budget_ns(_dl._seconds("margin", margin))
        self.expected_latency = None if expected_latency is None else _dl._seconds("expected_latency", expected_latency)
        if latency is not None and not isinstance(latency, LatencyEstimate):
            raise TypeError(f"latency must be a surgeguard.httpx.LatencyEstimate, got {type(latency).__name__}")
        self.propagate = propagate
        self.deadline_headers: Tuple[str, ...] = tuple(deadline_headers)
        self.latency = latency if latency is not None else LatencyEstimate()
        self.attempts = attempts
        self.backoff = backoff if backoff is not None else Backoff()
        self.budget = budget
        self.throttle = throttle
        self.breaker = breaker
        self.retry_statuses = frozenset(retry_statuses)
        self.retry_non_idempotent = retry_non_idempotent
        self.max_delay = max_delay
        self.sleep = sleep

    def _idempotent(self, request: httpx.Request) -> bool:
        return (
            self.retry_non_idempotent
            or request.method.upper() in IDEMPOTENT_METHODS
            or "idempotency-key" in request.headers
        )

    def _begin(self) -> None:
        if isinstance(self.budget, RetryBudget):
            self.budget.deposit()

    def _before_send(self) -> Any:
        if self.throttle is not None:
            self.throttle.check()  # raises surgeguard.Throttled
        if self.breaker is not None:
            return self.breaker.try_acquire()  # raises surgeguard.BreakerOpen
        return None

    def _after(self, call: Any, status: Optional[int], error: bool) -> None:
        overloaded = error or (status is not None and status in self.retry_statuses)
        if self.throttle is not None:
            self.throttle.record(not overloaded)
        if isinstance(self.budget, TokenRetryThrottle):
            self.budget.record(not overloaded)
        if call is not None:
            if overloaded or (status is not None and status >= 500):
                call.failure()
            else:
                call.success()

    def expected(self) -> Optional[float]:
        """The latency the next call is expected to take (seconds): ``expected_latency``
        if given, else the learned median (``None`` until enough answers were seen)."""
        if self.expected_latency is not None:
            return self.expected_latency
        return self.latency.median()

    def _prepare(self, request: httpx.Request) -> Optional[int]:
        """Before an attempt: fails fast when the deadline cannot be met, else stamps the
        deadline headers and cuts httpx's timeouts. Returns the deadline (ns) or None."""
        if not self.propagate:
            return None
        d = _dl.current()
        if d is None:
            return None
        now = clock_ns()
        left = d - now
        usable = left - self.margin_ns
        if left <= 0:
            raise DeadlineExceeded("the deadline passed before the request was sent")
        expected = self.expected()
        values = [(name, _dl._format(name, d, self.margin_ns, now)) for name in self.deadline_headers]
        if (
            usable <= 0
            or (expected is not None and usable < expected * _SEC)
            or any(v is None for _, v in values)
        ):
            raise InsufficientBudget(
                f"{max(usable, 0) / _SEC:.3f} s left is less than the {expected or 0:.3f} s "
                f"the call is expected to take; not sent",
                remaining=max(usable, 0) / _SEC,
                expected=expected or 0.0,
            )
        for name, value in values:
            request.headers[name] = value
        timeouts = request.extensions.get("timeout")
        cap = left / _SEC
        if isinstance(timeouts, dict):
            request.extensions = {
                **request.extensions,
                "timeout": {k: cap if v is None else min(v, cap) for k, v in timeouts.items()},
            }
        return d

    def _deadline_error(self, d: Optional[int], exc: BaseException) -> Optional[BaseException]:
        """The error to raise instead of ``exc`` when the deadline has passed meanwhile."""
        if d is not None and isinstance(exc, httpx.TimeoutException) and clock_ns() >= d:
            err = DeadlineExceeded("the deadline passed while waiting for the answer")
            err.__cause__ = exc
            return err
        return None

    def _may_retry(
        self, attempt: int, backoff: Backoff, hint: Optional[float], d: Optional[int] = None
    ) -> Optional[float]:
        if attempt >= self.attempts:
            return None
        # The delay first: a retry given up for its delay was never made, so it must not
        # be taken from the budget.
        delay = backoff.next_delay(attempt, hint)
        if self.max_delay is not None and delay > self.max_delay:
            return None
        if d is not None:
            # No retry that cannot finish before the deadline (and no sleep past it).
            need = delay + (self.expected() or 0.0)
            if clock_ns() + self.margin_ns + need * _SEC >= d:
                return None
        budget = self.budget
        if isinstance(budget, RetryBudget) and not budget.try_withdraw():
            return None
        if isinstance(budget, TokenRetryThrottle) and not budget.try_retry():
            return None
        return delay


class RetryTransport(_Common, httpx.BaseTransport):
    """A sync httpx transport that retries within a budget (see the module docs)."""

    def __init__(self, transport: Optional[httpx.BaseTransport] = None, **kwargs: Any) -> None:
        _check(transport, httpx.BaseTransport, "transport", "an httpx.BaseTransport")
        super().__init__(**kwargs)
        self.transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._begin()
        idempotent = self._idempotent(request)
        backoff: Optional[Backoff] = None
        sleep = self.sleep or time.sleep
        attempt = 1
        while True:
            d = self._prepare(request)
            call = self._before_send()
            started = time.monotonic()
            try:
                response = self.transport.handle_request(request)
            except _NOT_SENT as exc:
                self._after(call, None, True)
                backoff = backoff or self.backoff.copy()
                delay = self._may_retry(attempt, backoff, None, d)
                if delay is None:
                    late = self._deadline_error(d, exc)
                    if late is not None:
                        raise late from exc
                    raise
                del exc
            except Exception as exc:
                self._after(call, None, True)
                late = self._deadline_error(d, exc)
                if late is not None:
                    raise late from exc
                raise
            else:
                status = response.status_code
                self._after(call, status, False)
                if status not in self.retry_statuses:
                    self.latency.record(time.monotonic() - started)
                if status not in self.retry_statuses or not idempotent:
                    return response
                backoff = backoff or self.backoff.copy()
                hint = parse_retry_after(response.headers.get("retry-after"))
                delay = self._may_retry(attempt, backoff, hint, d)
                if delay is None:
                    return response
                response.close()
            sleep(delay)
            attempt += 1

    def close(self) -> None:
        self.transport.close()


class AsyncRetryTransport(_Common, httpx.AsyncBaseTransport):
    """An async httpx transport that retries within a budget (see the module docs)."""

    def __init__(self, transport: Optional[httpx.AsyncBaseTransport] = None, **kwargs: Any) -> None:
        _check(transport, httpx.AsyncBaseTransport, "transport", "an httpx.AsyncBaseTransport")
        super().__init__(**kwargs)
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._begin()
        idempotent = self._idempotent(request)
        backoff: Optional[Backoff] = None
        sleep = self.sleep or asyncio.sleep
        attempt = 1
        while True:
            d = self._prepare(request)
            call = self._before_send()
            started = time.monotonic()
            try:
                response = await self.transport.handle_async_request(request)
            except _NOT_SENT as exc:
                self._after(call, None, True)
                backoff = backoff or self.backoff.copy()
                delay = self._may_retry(attempt, backoff, None, d)
                if delay is None:
                    late = self._deadline_error(d, exc)
                    if late is not None:
                        raise late from exc
                    raise
            except BaseException as exc:
                if isinstance(exc, Exception):
                    self._after(call, None, True)
                elif call is not None:
                    call.ignore()
                late = self._deadline_error(d, exc)
                if late is not None:
                    raise late from exc
                raise
            else:
                status = response.status_code
                self._after(call, status, False)
                if status not in self.retry_statuses:
                    self.latency.record(time.monotonic() - started)
                if status not in self.retry_statuses or not idempotent:
                    return response
                backoff = backoff or self.backoff.copy()
                hint = parse_retry_after(response.headers.get("retry-after"))
                delay = self._may_retry(attempt, backoff, hint, d)
                if delay is None:
                    return response
                await response.aclose()
            r = sleep(delay)
            if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
                await r
            attempt += 1

    async def aclose(self) -> None:
        await self.transport.aclose()
