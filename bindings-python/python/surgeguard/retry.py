"""`retry(...)`: retries with a budget, jittered backoff and the server's Retry-After.

A per-call "up to N attempts" multiplies load by N at every layer when a dependency is
down (three layers of 4 attempts make 4³ = 64 calls; Google SRE book, "Handling
Overload"). ``retry`` is bounded twice: by
``attempts`` and by a shared :class:`~surgeguard.RetryBudget` (or
:class:`~surgeguard.TokenRetryThrottle`), so retries stay a share of traffic however bad
things get. Delays come from :class:`~surgeguard.Backoff` (jittered) and are never shorter
than the server's ``Retry-After`` (an exception's ``retry_after`` attribute, or an
``httpx.HTTPStatusError``'s response header).

Under a deadline (:mod:`surgeguard.deadline`), no retry is made whose backoff delay would
end after it, and :class:`~surgeguard.DeadlineExceeded` is never retried.

Non-idempotent work (``idempotent=False``) is retried only when the failure proves the
work never ran: a local refusal (:class:`~surgeguard.OverloadError` raised by surgeguard
itself) or a refused connection.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import inspect
import time
from typing import Any, Callable, Optional, Tuple, Type, TypeVar, Union

from . import deadline as _dl
from ._native import Backoff, RetryBudget, TokenRetryThrottle, clock_ns
from .errors import DeadlineExceeded, OverloadError, RetryBudgetExhausted

__all__ = ["retry", "retry_after_of", "parse_retry_after"]

F = TypeVar("F", bound=Callable[..., Any])

#: What is retried unless told otherwise.
DEFAULT_RETRY_ON: Tuple[Type[BaseException], ...] = (OverloadError, TimeoutError, ConnectionError)


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds from a ``Retry-After`` header value (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        secs = when.timestamp() - (time.time() if now is None else now)
    if secs != secs or secs < 0:  # NaN or in the past
        return 0.0
    return min(secs, 86_400.0)


def retry_after_of(exc: BaseException) -> Optional[float]:
    """The server's hint carried by an exception: ``exc.retry_after`` (surgeguard's own
    refusals) or the ``Retry-After`` header of ``exc.response`` (httpx, requests)."""
    hint = getattr(exc, "retry_after", None)
    if isinstance(hint, (int, float)) and not isinstance(hint, bool):
        return float(hint) if hint == hint and hint >= 0 else None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        try:
            return parse_retry_after(headers.get("retry-after"))
        except AttributeError:
            return None
    return None


def _never_ran(exc: BaseException) -> bool:
    """Whether the failure proves the work was not started (safe to retry anything)."""
    if isinstance(exc, OverloadError):
        return True
    return isinstance(exc, ConnectionRefusedError)


class _Policy:
    """The shared, immutable part of a retry decorator."""

    __slots__ = (
        "attempts",
        "backoff",
        "budget",
        "retry_on",
        "idempotent",
        "max_delay",
        "sleep",
        "on_retry",
        "clock",
    )

    def __init__(
        self,
        attempts: int,
        backoff: Optional[Backoff],
        budget: Union[RetryBudget, TokenRetryThrottle, None],
        retry_on: Tuple[Type[BaseException], ...],
        idempotent: bool,
        max_delay: Optional[float],
        sleep: Optional[Callable[[float], Any]],
        on_retry: Optional[Callable[[int, BaseException, float], Any]],
        clock: Optional[Callable[[], int]] = None,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError("backoff must be a surgeguard.Backoff")
        if budget is not None and not isinstance(budget, (RetryBudget, TokenRetryThrottle)):
            raise TypeError("budget must be a RetryBudget or a TokenRetryThrottle")
        if max_delay is not None:
            if isinstance(max_delay, bool) or not isinstance(max_delay, (int, float)):
                raise TypeError(f"max_delay must be a number of seconds or None, got {type(max_delay).__name__}")
            if not (0 <= max_delay < float("inf")):
                raise ValueError(f"max_delay must be a finite number >= 0 seconds, got {max_delay!r}")
        retry_on = _exception_classes("retry_on", retry_on)
        if not isinstance(idempotent, bool):
            raise TypeError(f"idempotent must be a bool, got {type(idempotent).__name__}")
        for name, fn in (("sleep", sleep), ("on_retry", on_retry), ("clock", clock)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        self.attempts = attempts
        self.backoff = backoff if backoff is not None else Backoff()
        self.budget = budget
        self.retry_on = retry_on
        self.idempotent = idempotent
        self.max_delay = max_delay
        self.sleep = sleep
        self.on_retry = on_retry
        self.clock = clock

    def _now(self) -> Optional[int]:
        return None if self.clock is None else self.clock()

    def start(self) -> None:
        if isinstance(self.budget, RetryBudget):
            self.budget.deposit(now_ns=self._now())

    def record(self, ok: bool) -> None:
        if isinstance(self.budget, TokenRetryThrottle):
            self.budget.record(ok)

    def delay_for(self, attempt: int, exc: BaseException, backoff: Backoff) -> Optional[float]:
        """Seconds to wait before the next attempt, or None to give up (re-raise)."""
        if not isinstance(exc, self.retry_on) or isinstance(exc, (RetryBudgetExhausted, DeadlineExceeded)):
            return None
        if attempt >= self.attempts:
            return None
        if not self.idempotent and not _never_ran(exc):
            return None
        # The delay first: a retry given up for its delay must not be counted against
        # the budget (it was never made).
        delay = backoff.next_delay(attempt, retry_after_of(exc))
        if self.max_delay is not None and delay > self.max_delay:
            _note(exc, f"surgeguard: not retried, the next attempt is {delay:.3f} s away")
            return None
        d = _dl.current()
        if d is not None and clock_ns() + delay * 1e9 >= d:
            _note(exc, "surgeguard: not retried, the next attempt would start after the deadline")
            return None
        budget = self.budget
        if isinstance(budget, RetryBudget):
            if not budget.try_withdraw(now_ns=self._now()):
                _note(exc, "surgeguard: not retried, the retry budget is exhausted")
                return None
        elif isinstance(budget, TokenRetryThrottle):
            if not budget.try_retry():
                _note(exc, "surgeguard: not retried, the retry throttle is closed")
                return None
        if self.on_retry is not None:
            self.on_retry(attempt, exc, delay)
        return delay


def _exception_classes(name: str, value: Any) -> Tuple[Type[BaseException], ...]:
    """Checks an exception class or a tuple of them (refused at decoration, not at the
    first failure)."""
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"{name} must be an exception class or a tuple of them, got {value!r}"[:200])
    return items


def _note(exc: BaseException, text: str) -> None:
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(text)


def retry(
    func: Optional[F] = None,
    *,
    attempts: int = 3,
    backoff: Optional[Backoff] = None,
    budget: Union[RetryBudget, TokenRetryThrottle, None] = None,
    retry_on: Tuple[Type[BaseException], ...] = DEFAULT_RETRY_ON,
    idempotent: bool = True,
    max_delay: Optional[float] = 30.0,
    sleep: Optional[Callable[[float], Any]] = None,
    on_retry: Optional[Callable[[int, BaseException, float], Any]] = None,
    clock: Optional[Callable[[], int]] = None,
) -> Any:
    """Retries a sync or async callable.

    Args:
        attempts: the most calls in all (1 = never retry).
        backoff: a :class:`~surgeguard.Backoff` template (copied per call; default gRPC A6:
            0.1 s × 2 up to 1 s, full jitter).
        budget: a shared :class:`~surgeguard.RetryBudget` (each call deposits, each retry
            withdraws) or :class:`~surgeguard.TokenRetryThrottle`; when it says no, the
            error is raised instead of retried.
        retry_on: exception classes worth retrying (default: ``OverloadError``,
            ``TimeoutError``, ``ConnectionError``).
        idempotent: False for work that must not run twice: then only failures that prove
            it never ran (surgeguard's own refusals, a refused connection) are retried.
        max_delay: give up instead of waiting longer than this (seconds; ``None``: no cap).
        sleep: the sleep function (``time.sleep`` / ``asyncio.sleep`` by default).
        on_retry: called as ``on_retry(attempt, exc, delay)`` before each retry.
        clock: the time for the budget, as int nanoseconds (like ``time.monotonic_ns``;
            default: surgeguard's native clock). With ``sleep=`` and a fake clock, tests
            need not sleep (as tenacity's ``sleep=``).

    Arguments are checked here, at decoration (``retry_on=42`` raises ``TypeError`` at
    once, not at the first failure).

    Use as ``@retry`` or ``@retry(attempts=4, budget=budget)``.
    """
    policy = _Policy(attempts, backoff, budget, retry_on, idempotent, max_delay, sleep, on_retry, clock)

    def decorate(f: F) -> F:
        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def async_retrying(*args: Any, **kwargs: Any) -> Any:
                policy.start()
                sleeper = policy.sleep or asyncio.sleep
                per_call: Optional[Backoff] = None
                attempt = 1
                while True:
                    try:
                        result = await f(*args, **kwargs)
                    except BaseException as exc:
                        if isinstance(exc, policy.retry_on):
                            policy.record(False)
                        if per_call is None:
                            per_call = policy.backoff.copy()
                        delay = policy.delay_for(attempt, exc, per_call)
                        if delay is None:
                            raise
                        r = sleeper(delay)
                        if inspect.isawaitable(r):
                            await r
                        attempt += 1
                        continue
                    policy.record(True)
                    return result

            return async_retrying  # type: ignore[return-value]

        @functools.wraps(f)
        def retrying(*args: Any, **kwargs: Any) -> Any:
            policy.start()
            sleeper = policy.sleep or time.sleep
            per_call: Optional[Backoff] = None
            attempt = 1
            while True:
                try:
                    result = f(*args, **kwargs)
                except BaseException as exc:
                    if isinstance(exc, policy.retry_on):
                        policy.record(False)
                    if per_call is None:
                        per_call = policy.backoff.copy()
                    delay = policy.delay_for(attempt, exc, per_call)
                    if delay is None:
                        raise
                    sleeper(delay)
                    attempt += 1
                    continue
                policy.record(True)
                return result

        return retrying  # type: ignore[return-value]

    if func is not None:
        return decorate(func)
    return decorate
