"""WSGI middleware: admission through a :class:`~surgeguard.Gate` (waiting with the GIL
released while queued), per-key isolation, and release when the response iterable is
closed — not when the app returns (PEP 3333), so streaming responses hold their slot.

::

    app = OverloadWSGIMiddleware(app, gate=surgeguard.Gate(), timeout=0.5)

``gate`` may be a :class:`~surgeguard.SharedGate` (``Gate.shared(...)``): one queue across
worker processes, a waiting request's thread blocks (GIL released) until a release in any
worker grants it.

``gate`` may also be a limiter without a queue (a :class:`~surgeguard.Limiter` (``Limiter.shared``): one
limit across worker processes), as in :mod:`surgeguard.asgi`: admitted or refused at once.

Refusals: ``429`` (per key) or ``503`` (global) with ``Retry-After`` and the JSON body of
:func:`surgeguard.actionable`. Outcomes from the status as in :mod:`surgeguard.asgi`.

Deadlines as in :mod:`surgeguard.asgi`: the caller's budget from the request headers (or
``default_budget``, capped by ``timeout``) becomes the gate's deadline and the one
:func:`surgeguard.deadline.remaining` reads, both while the app runs and while its
response is iterated; a stale value served by the handler adds
``Warning: 110 - "Response is Stale"``; a :class:`~surgeguard.DeadlineExceeded` raised
by the app before it started the response becomes ``504``.
"""

from __future__ import annotations

import contextvars
import json
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import deadline as _dl
from ._native import Gate, KeyedLimits, Limiter, actionable, clock_ns
from .asgi import (
    _DEADLINE_BODY,
    _NAMES,
    _admission,
    _budget_and_timeout,
    _check_args,
    _exception_outcome,
    _expired_on_arrival,
    health,
    outcome_for_status,
)
from .degrade import STALE_WARNING, _stale_cell
from .errors import DeadlineExceeded, KeyLimit, KeyRate, OverloadError, Rejected

if TYPE_CHECKING:
    from ._native import SharedGate

__all__ = ["OverloadWSGIMiddleware"]

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

_REASONS = {200: "OK", 429: "Too Many Requests", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _environ_key(header: str) -> str:
    return "HTTP_" + header.upper().replace("-", "_")


def _refuse(start_response: StartResponse, refusal: OverloadError) -> List[bytes]:
    a = actionable(refusal)
    body: bytes = a["body"]
    start_response(
        f"{a['status']} {_REASONS.get(a['status'], '')}".strip(),
        [
            ("Content-Type", "application/json"),
            ("Retry-After", str(a["retry_after_s"])),
            ("Content-Length", str(len(body))),
        ],
    )
    return [body]


class _Closing:
    """Wraps the app's iterable; ends the permit exactly once when closed."""

    __slots__ = ("_it", "_iter", "_done", "_ctx")

    def __init__(self, it: Iterable[bytes], done: Callable[[str], None], ctx: contextvars.Context) -> None:
        self._it = it
        self._iter: Optional[Iterator[bytes]] = None
        self._done: Optional[Callable[[str], None]] = done
        self._ctx = ctx  # the request's deadline and stale mark, also while iterating

    def __iter__(self) -> Iterator[bytes]:
        self._iter = self._ctx.run(iter, self._it)
        return self

    def __next__(self) -> bytes:
        if self._iter is None:
            self._iter = self._ctx.run(iter, self._it)
        try:
            return self._ctx.run(next, self._iter)
        except StopIteration:
            raise
        except BaseException as exc:
            self._finish(_exception_outcome(exc))
            raise

    def close(self) -> None:
        try:
            close = getattr(self._it, "close", None)
            if close is not None:
                self._ctx.run(close)
        finally:
            self._finish(None)

    def _finish(self, outcome: Optional[str]) -> None:
        done, self._done = self._done, None
        if done is not None:
            done(outcome or "")


class OverloadWSGIMiddleware:
    """WSGI overload middleware (see the module docs).

    Args:
        app: the WSGI app.
        gate: the :class:`~surgeguard.Gate` (or a :class:`~surgeguard.SharedGate`), or a limiter without a queue (a
            :class:`~surgeguard.Limiter` (``Limiter.shared``)): admitted or refused at once.
        timeout: the request's deadline in seconds, covering the wait while queued (the
            thread blocks, GIL released) *and* the expected service time: a request that
            cannot finish in time is refused at once (``DeadlineUnmeetable``). ``None``
            (default): no deadline.
        priority_header / priority: as :class:`surgeguard.asgi.OverloadMiddleware`
            (``priority(environ)``).
        keyed / key_header / key / key_cost: per-key isolation (``key(environ)``).
        health_path / broken: the health answer outside the gate.
        read_deadlines / deadline_header / default_budget / deadline_stats: the caller's
            deadline, as :class:`surgeguard.asgi.OverloadMiddleware` (``timeout`` is
            also the largest budget a caller can ask for).
    """

    def __init__(
        self,
        app: WSGIApp,
        gate: "Union[Gate, SharedGate, Limiter]",
        *,
        timeout: Optional[float] = None,
        priority_header: str = "x-request-priority",
        priority: Optional[Callable[[Environ], Union[str, int, None]]] = None,
        keyed: Optional[KeyedLimits] = None,
        key_header: Optional[str] = "x-tenant-id",
        key: Optional[Callable[[Environ], Union[str, bytes, None]]] = None,
        key_cost: int = 1,
        health_path: Optional[str] = None,
        broken: Optional[Callable[[], bool]] = None,
        read_deadlines: bool = True,
        deadline_header: Optional[str] = None,
        default_budget: Optional[float] = None,
        deadline_stats: Optional[_dl.DeadlineStats] = None,
    ) -> None:
        _check_args(app, gate, priority_header, priority, keyed, key_header, key, key_cost, health_path, broken)
        self._admit = _admission(gate)
        self._admit.acquire(None, timeout)  # validates timeout once, here
        self._deadlines = _dl._ServerPolicy(read_deadlines, deadline_header, default_budget, timeout, deadline_stats)
        self.deadline_stats = self._deadlines.stats
        self._deadline_env = [(n, _environ_key(n)) for n in self._deadlines.names]
        self.app = app
        self.gate = gate
        self.timeout = timeout
        self.priority_env = _environ_key(priority_header)
        self.priority = priority
        self.keyed = keyed
        self.key_env = _environ_key(key_header) if key_header else None
        self.key = key
        self.key_cost = key_cost
        self.health_path = health_path
        self.broken = broken
        self._levels = self._admit.levels

    def _priority_of(self, environ: Environ) -> Union[str, int, None]:
        if self.priority is not None:
            return self.priority(environ)
        raw = environ.get(self.priority_env)
        if raw is None:
            return None
        v = str(raw).strip().lower()
        n = _NAMES.get(v)
        if n is None:
            if not v.isdigit() or len(v) > 3:
                return None
            n = int(v)
        return min(n, self._levels - 1)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if self.health_path is not None and environ.get("PATH_INFO") == self.health_path:
            status, body = health(self._admit, self.broken)
            data = json.dumps(body).encode()
            start_response(
                f"{status} {_REASONS.get(status, '')}".strip(),
                [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
            )
            return [data]
        key_permit = None
        key = None
        if self.keyed is not None:
            key = self.key(environ) if self.key is not None else (
                environ.get(self.key_env) if self.key_env else None
            )
            if key is not None:
                try:
                    key_permit = self.keyed.try_acquire(key, self.key_cost)
                except (KeyLimit, KeyRate) as refusal:
                    return _refuse(start_response, refusal)
        arrival = clock_ns()
        values = [(n, environ[k]) for n, k in self._deadline_env if k in environ]
        budget, timeout = _budget_and_timeout(self._deadlines, values, self.timeout)
        try:
            if budget == 0:
                raise _expired_on_arrival(self.deadline_stats)
            permit = self._admit.acquire(self._priority_of(environ), timeout).__enter__()
        except Rejected as refusal:
            if key_permit is not None:
                key_permit.release()
            if key is not None and self.keyed is not None:
                self.keyed.record_rejection(key)
            return _refuse(start_response, refusal)

        seen: List[int] = []
        stale = [False]
        ctx = contextvars.copy_context()
        ctx.run(_stale_cell.set, stale)
        if budget:
            ctx.run(_dl._deadline.set, _dl._at(budget, arrival))

        def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            try:
                seen.append(int(status.split(" ", 1)[0]))
            except ValueError:
                pass
            if stale[0]:
                headers = [*headers, STALE_WARNING]
            if exc_info is not None:
                return start_response(status, headers, exc_info)
            return start_response(status, headers)

        def done(outcome: str) -> None:
            try:
                if permit.held:
                    permit.release(outcome or (outcome_for_status(seen[-1]) if seen else "ignored"))
            finally:
                if key_permit is not None and key_permit.held:
                    key_permit.release()

        try:
            result = ctx.run(self.app, environ, start)
        except DeadlineExceeded:
            if seen:
                done("ignored")
                raise
            done("ignored")
            start_response(
                "504 Gateway Timeout",
                [("Content-Type", "application/json"), ("Content-Length", str(len(_DEADLINE_BODY)))],
            )
            return [_DEADLINE_BODY]
        except BaseException as exc:
            done(_exception_outcome(exc))
            raise
        return _Closing(result, done, ctx)
