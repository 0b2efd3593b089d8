"""`CircuitBreaker`: the native breaker, usable as a decorator and a context manager."""

from __future__ import annotations

import contextvars
import functools
import inspect
from typing import Any, Callable, Optional, Tuple, TypeVar

from ._native import BreakerCall
from ._native import CircuitBreaker as _NativeBreaker

__all__ = ["CircuitBreaker"]

F = TypeVar("F", bound=Callable[..., Any])

# The calls entered with `with breaker:` in this context (thread or task), innermost first:
# (breaker, call, rest) links. A context variable, so asyncio tasks interleaving on one
# thread each see their own.
_entered: "contextvars.ContextVar[Optional[Tuple[Any, BreakerCall, Any]]]" = contextvars.ContextVar(
    "surgeguard_breaker_calls", default=None
)

_REPORT = {"success": "success", "dropped": "failure", "ignored": "ignore"}


class CircuitBreaker(_NativeBreaker):
    """A circuit breaker (count or time window, failure-rate and slow-call thresholds,
    minimum calls, jittered open period, leased half-open probes, traffic ramp).

    Three ways to use it::

        breaker = CircuitBreaker(window_calls=50, minimum_calls=20, open_duration=5.0)

        @breaker                       # sync or async functions
        def call_dependency(): ...

        with breaker:                  # or `async with breaker:`
            call_dependency()

        call = breaker.try_acquire()   # explicit
        try:
            ...
        except Exception:
            call.failure(); raise
        else:
            call.success()

    A refused call raises :class:`surgeguard.BreakerOpen` (``retry_after`` in seconds)
    without calling anything. Exceptions that are instances of ``failure_exceptions``
    (default ``Exception``) count as failures unless they are instances of
    ``ignore_exceptions``; others (``CancelledError``, ``KeyboardInterrupt``) count as
    nothing. Sync functions are wrapped natively (no Python frame added).
    """

    __slots__ = ()

    def __call__(self, func: F) -> F:
        """Decorates ``func`` (sync or ``async def``) so every call goes through the breaker."""
        if inspect.iscoroutinefunction(func):
            breaker = self

            @functools.wraps(func)
            async def guarded(*args: Any, **kwargs: Any) -> Any:
                call = breaker.try_acquire()
                try:
                    result = await func(*args, **kwargs)
                except BaseException as exc:
                    getattr(call, _REPORT[breaker._outcome(type(exc))])()
                    raise
                call.success()
                return result

            return guarded  # type: ignore[return-value]
        wrapper = self._wrap(func)
        functools.update_wrapper(wrapper, func)
        return wrapper  # type: ignore[return-value]

    def __enter__(self) -> BreakerCall:
        call = self.try_acquire()
        _entered.set((self, call, _entered.get()))
        return call

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        node = _entered.get()
        if node is None or node[0] is not self:
            # Not LIFO with another breaker's block: find ours and unlink it.
            node = _unlink(self)
        else:
            _entered.set(node[2])
        if node is not None:
            node[1].__exit__(exc_type, exc, tb)
        return False

    async def __aenter__(self) -> BreakerCall:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


def _unlink(breaker: Any) -> Optional[Tuple[Any, BreakerCall, Any]]:
    items = []
    node = _entered.get()
    found = None
    while node is not None:
        if found is None and node[0] is breaker:
            found = node
        else:
            items.append((node[0], node[1]))
        node = node[2]
    rest = None
    for b, c in reversed(items):
        rest = (b, c, rest)
    _entered.set(rest)
    return found
