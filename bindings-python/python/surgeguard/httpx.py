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
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterable, Optional, Union

import httpx

from ._native import AdaptiveThrottle, Backoff, RetryBudget, TokenRetryThrottle
from .breaker import CircuitBreaker
from .retry import parse_retry_after

__all__ = ["RetryTransport", "AsyncRetryTransport", "IDEMPOTENT_METHODS"]


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

    def _may_retry(self, attempt: int, backoff: Backoff, hint: Optional[float]) -> Optional[float]:
        if attempt >= self.attempts:
            return None
        # The delay first: a retry given up for its delay was never made, so it must not
        # be taken from the budget.
        delay = backoff.next_delay(attempt, hint)
        if self.max_delay is not None and delay > self.max_delay:
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
            call = self._before_send()
            try:
                response = self.transport.handle_request(request)
            except _NOT_SENT as exc:
                self._after(call, None, True)
                backoff = backoff or self.backoff.copy()
                delay = self._may_retry(attempt, backoff, None)
                if delay is None:
                    raise
                del exc
            except Exception:
                self._after(call, None, True)
                raise
            else:
                status = response.status_code
                self._after(call, status, False)
                if status not in self.retry_statuses or not idempotent:
                    return response
                backoff = backoff or self.backoff.copy()
                hint = parse_retry_after(response.headers.get("retry-after"))
                delay = self._may_retry(attempt, backoff, hint)
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
            call = self._before_send()
            try:
                response = await self.transport.handle_async_request(request)
            except _NOT_SENT:
                self._after(call, None, True)
                backoff = backoff or self.backoff.copy()
                delay = self._may_retry(attempt, backoff, None)
                if delay is None:
                    raise
            except BaseException as exc:
                if isinstance(exc, Exception):
                    self._after(call, None, True)
                elif call is not None:
                    call.ignore()
                raise
            else:
                status = response.status_code
                self._after(call, status, False)
                if status not in self.retry_statuses or not idempotent:
                    return response
                backoff = backoff or self.backoff.copy()
                hint = parse_retry_after(response.headers.get("retry-after"))
                delay = self._may_retry(attempt, backoff, hint)
                if delay is None:
                    return response
                await response.aclose()
            r = sleep(delay)
            if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
                await r
            attempt += 1

    async def aclose(self) -> None:
        await self.transport.aclose()
