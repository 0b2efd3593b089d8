"""Pure ASGI middleware (not ``BaseHTTPMiddleware``): admission through a
:class:`~surgeguard.Gate`, per-key isolation through :class:`~surgeguard.KeyedLimits`, and
a cheap health check that tells "overloaded" (keep me, send less) from "broken".

::

    app = OverloadMiddleware(app, gate=surgeguard.Gate(),
                             keyed=surgeguard.KeyedLimits(8), key_header="x-tenant-id")
    # Starlette / FastAPI: app.add_middleware(OverloadMiddleware, gate=gate)

Per request (``scope["type"] == "http"``; lifespan and websocket pass through):

1. ``health_path`` (if set) is answered at once, outside the gate (health checks
   on a separate, cheap path).
2. The key (``key_header`` or ``key(scope)``), if any, is checked first: a per-key refusal
   is ``429`` with ``Retry-After`` and the JSON body of :func:`surgeguard.actionable`.
3. The priority (``X-Request-Priority``: ``critical`` / ``normal`` / ``background`` or an
   int, or ``priority(scope)``) goes to the gate, which may queue the request; with a
   ``timeout`` the request must be able to *finish* (wait + expected service) within
   it; a refusal is ``503`` with ``Retry-After`` and the JSON body.
   The request's deadline (below) goes with it.
4. The app runs with the deadline in :mod:`surgeguard.deadline` (``remaining()``); the
   permit is released in ``finally`` with an outcome from the response status: below
   400 → success; 429, 502, 503, 504 or an overload exception (timeout) → dropped;
   a cancelled request (the client went away) → abandoned: dropped if it was held longer
   than the limiter's last p99 latency (what a client's timeout looks like), else ignored;
   anything else (other 4xx/5xx, a :class:`~surgeguard.DeadlineExceeded`) → ignored.

``gate`` may be a :class:`~surgeguard.SharedGate` (``Gate.shared(...)``, Linux): one
limit, queue and set of waiters across worker processes, with the same queueing,
priorities and deadlines (a request queued in one worker is granted by a release in any).

``gate`` may also be a limiter without a queue — a :class:`~surgeguard.Limiter` (``Limiter.shared``)
(one limit across worker processes) or a :class:`~surgeguard.Limiter`: each request is
then admitted at once or refused at once (``503``, ``limit_reached``), never queued, and
``timeout`` is only the deadline the handler reads. Anything else (a
:class:`~surgeguard.CircuitBreaker`, a :class:`~surgeguard.RateLimiter`, a
:class:`~surgeguard.KeyedLimits`, whose ``try_acquire`` means something else) is a
``TypeError`` at construction.

Deadlines: the caller's remaining budget is read from ``surgeguard-timeout-ms``,
``grpc-timeout``, ``x-envoy-expected-rq-timeout-ms`` and ``deadline_header`` (the smallest
valid one wins; bad values are ignored and counted in ``deadline_stats``); without one,
``default_budget`` applies; ``timeout`` caps both. At arrival the budget becomes an
absolute deadline that the gate enforces (refused at once if it cannot be met, dropped
from the queue once its turn would come too late) and the handler reads. A budget already
spent on arrival is refused (``503``, ``deadline_unmeetable``). A
:class:`~surgeguard.DeadlineExceeded` escaping the app before it answered becomes ``504``,
in both forms of a Starlette or FastAPI app: ``app.add_middleware(OverloadMiddleware, ...)``
and ``OverloadMiddleware(app, ...)`` (which installs an exception handler for it in the
app, unless it has one, because Starlette's outermost layer answers escaping exceptions
with 500 itself).
A handler that served a stale value (:class:`surgeguard.StaleIfError`) gets
``Warning: 110 - "Response is Stale"`` on its response.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import deadline as _dl
from ._native import Gate, KeyedLimits, Limiter, actionable, clock_ns

try:  # Linux only: a Gate in memory shared between worker processes
    from ._native import SharedGate as _SharedGate

    _GATES: Tuple[type, ...] = (Gate, _SharedGate)
except ImportError:  # pragma: no cover - other platforms
    _GATES = (Gate,)
# A Limiter, local or shared (Limiter.shared): admitted or refused at once, no queue.
_LIMITERS: Tuple[type, ...] = (Limiter,)
from .degrade import STALE_WARNING, _stale_cell
from .errors import DeadlineExceeded, DeadlineUnmeetable, KeyLimit, KeyRate, OverloadError, Rejected

if TYPE_CHECKING:
    from ._native import SharedGate

__all__ = ["OverloadMiddleware", "health", "outcome_for_status", "DROPPED_STATUSES"]

Scope = Dict[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Response statuses that are an overload signal for the limit.
DROPPED_STATUSES = frozenset({429, 502, 503, 504})
#: Exceptions from the app that count as overload (timeouts, surgeguard's own refusals).
_OVERLOAD: Tuple[type, ...] = (TimeoutError, asyncio.TimeoutError, OverloadError)
#: The answer when the app raised :class:`~surgeguard.DeadlineExceeded` before answering.
_DEADLINE_BODY = b'{"error":"deadline exceeded","reason":"deadline_exceeded"}'
_STALE = (STALE_WARNING[0].encode(), STALE_WARNING[1].encode())


#: While the app runs under the middleware: ``[False]``, set to ``[True]`` when the
#: exception handler installed in a wrapped Starlette app answered a
#: :class:`~surgeguard.DeadlineExceeded` with 504 (its outcome is then ``ignored``).
_deadline_answered: "contextvars.ContextVar[List[bool]]" = contextvars.ContextVar("surgeguard_deadline_answered")


async def _answer_deadline(scope: Scope, receive: Receive, send: Send) -> None:
    """The 504 a :class:`~surgeguard.DeadlineExceeded` escaping the app is answered with."""
    await _respond(send, 504, [(b"content-type", b"application/json")], _DEADLINE_BODY)


async def _starlette_deadline_handler(request: Any, exc: Exception) -> ASGIApp:
    """Starlette's exception handler for :class:`~surgeguard.DeadlineExceeded`: the 504 a
    request admitted by the middleware gets (Starlette calls the returned ASGI app)."""
    answered = _deadline_answered.get(None)
    if answered is None:  # not under the middleware: Starlette's own answer, as before
        raise exc
    answered[0] = True
    return _answer_deadline


def _is_starlette(app: Any) -> bool:
    """A Starlette application (FastAPI's is one), told apart without importing it."""
    return any(c.__name__ == "Starlette" and c.__module__ == "starlette.applications" for c in type(app).__mro__)


def _answer_deadlines_in(app: Any) -> None:
    """Makes a wrapped Starlette app answer :class:`~surgeguard.DeadlineExceeded` with 504.

    Starlette's outermost layer (``ServerErrorMiddleware``) answers any exception its
    handlers leave with 500 before re-raising it, so the middleware wrapped around the app
    would see the 500 already sent. An exception handler runs inside that layer, before it
    answers. A handler the app already has for the class (or a base other than
    ``Exception``) is kept. With ``app.add_middleware(OverloadMiddleware, ...)`` the
    middleware runs inside that layer and needs none of this."""
    handlers = getattr(app, "exception_handlers", None)
    if not isinstance(handlers, dict):
        return
    if any(isinstance(k, type) and k is not Exception and issubclass(DeadlineExceeded, k) for k in handlers):
        return
    app.add_exception_handler(DeadlineExceeded, _starlette_deadline_handler)


def _exception_outcome(exc: BaseException) -> str:
    """A caller that gave up is not a capacity signal; other overload errors are. A
    cancelled request (the client went away) is "abandoned": a drop if it was held longer
    than the limiter's last p99, which is what a client's timeout looks like."""
    if isinstance(exc, DeadlineExceeded):
        return "ignored"
    if isinstance(exc, asyncio.CancelledError):
        return "abandoned"
    return "dropped" if isinstance(exc, _OVERLOAD) else "ignored"


def _expired_on_arrival(stats: "_dl.DeadlineStats") -> DeadlineUnmeetable:
    stats.count("expired")
    return DeadlineUnmeetable("the caller's deadline had passed on arrival", "deadline_unmeetable", 0.0)


def outcome_for_status(status: int) -> str:
    """``"success"`` below 400, ``"dropped"`` for overload statuses, else ``"ignored"``."""
    if status < 400:
        return "success"
    if status in DROPPED_STATUSES:
        return "dropped"
    return "ignored"


def _is_limiter(obj: Any) -> bool:
    """Whether ``obj`` is a limiter the middlewares admit through (admit or refuse at
    once). Only surgeguard's: other objects with a ``try_acquire`` (a breaker, a rate
    limiter, a keyed table) take other arguments and return other things, so duck typing
    would pass construction and fail every request."""
    return isinstance(obj, _LIMITERS)


class _Admit:
    """``acquire(...)`` of a :class:`_LimiterGate`: admits on entry or raises the refusal."""

    __slots__ = ("_limiter", "_priority")

    def __init__(self, limiter: Any, priority: Union[str, int, None]) -> None:
        self._limiter = limiter
        self._priority = priority

    def __enter__(self) -> Any:
        return self._limiter.try_acquire(self._priority)

    async def __aenter__(self) -> Any:
        return self._limiter.try_acquire(self._priority)


class _LimiterGate:
    """A limiter seen through the part of the Gate API the middlewares use: admit or
    refuse at once (no queue, so nothing to wait for)."""

    __slots__ = ("limiter", "levels")

    def __init__(self, limiter: Any) -> None:
        self.limiter = limiter
        levels = getattr(limiter, "levels", 1)
        self.levels = levels if isinstance(levels, int) and levels >= 1 else 1

    def acquire(self, priority: Union[str, int, None], timeout: Optional[float] = None) -> _Admit:
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
            if not timeout >= 0 or timeout == float("inf"):
                raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
        return _Admit(self.limiter, priority)

    acquire_async = acquire

    @property
    def overloaded(self) -> bool:
        inflight, limit = getattr(self.limiter, "inflight", None), getattr(self.limiter, "limit", None)
        return isinstance(inflight, int) and isinstance(limit, (int, float)) and inflight >= limit

    def metrics(self) -> Dict[str, Any]:
        return {"waiting": 0, "limiter": {"inflight": self.limiter.inflight, "limit": self.limiter.limit}}


def _admission(gate: Any) -> Any:
    """What the middleware admits through: the Gate itself, or a limiter adapted."""
    return _LimiterGate(gate) if _is_limiter(gate) else gate


def health(gate: "Union[Gate, SharedGate, Limiter, None]", broken: Optional[Callable[[], bool]] = None) -> Tuple[int, Dict[str, Any]]:
    """The readiness answer: ``(status, body)``. ``gate`` may also be a limiter (a
    ``Limiter.shared``): overloaded when every permit is taken.

    - ``broken()`` true → ``503 {"status": "broken"}``: remove this instance.
    - gate overloaded → ``200 {"status": "overloaded", "send_less": true}``: keep it, send
      it less (a busy instance must not fail its health check, or the
      balancer moves its load onto the others and they fail in turn).
    - otherwise → ``200 {"status": "ok"}``.
    """
    if gate is not None and _is_limiter(gate):
        gate = _LimiterGate(gate)
    if gate is not None and not isinstance(gate, (*_GATES, _LimiterGate)):
        raise TypeError(f"gate must be a surgeguard.Gate, a limiter or None, got {type(gate).__name__}")
    if broken is not None and not callable(broken):
        raise TypeError(f"broken must be a callable or None, got {type(broken).__name__}")
    if broken is not None and broken():
        return 503, {"status": "broken"}
    if gate is not None and gate.overloaded:
        m = gate.metrics()
        return 200, {
            "status": "overloaded",
            "send_less": True,
            "waiting": m["waiting"],
            "inflight": m["limiter"]["inflight"],
            "limit": m["limiter"]["limit"],
        }
    return 200, {"status": "ok"}


def _header(scope: Scope, name: bytes) -> Optional[str]:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            try:
                return v.decode("latin-1")
            except Exception:  # pragma: no cover - bytes always decode as latin-1
                return None
    return None


def _priority_value(raw: Optional[str], levels: int) -> Union[str, int, None]:
    """A header value as a priority the gate accepts, or None (the default level)."""
    if raw is None:
        return None
    v = raw.strip().lower()
    n = _NAMES.get(v)
    if n is None:
        if not v.isdigit() or len(v) > 3:
            return None  # unknown: the default level, never an error
        n = int(v)
    return min(n, levels - 1)


_NAMES = {"critical": 0, "normal": 1, "background": 2}


async def _respond(send: Send, status: int, headers: List[Tuple[bytes, bytes]], body: bytes) -> None:
    headers = headers + [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, refusal: OverloadError) -> None:
    a = actionable(refusal)
    await _respond(
        send,
        a["status"],
        [
            (b"content-type", b"application/json"),
            (b"retry-after", str(a["retry_after_s"]).encode()),
        ],
        a["body"],
    )


def _check_args(
    app: Any,
    gate: Any,
    priority_header: Any,
    priority: Any,
    keyed: Any,
    key_header: Any,
    key: Any,
    key_cost: Any,
    health_path: Any,
    broken: Any,
) -> None:
    """The middleware arguments both middlewares share: wrong types are ``TypeError``,
    out-of-range values ``ValueError``, all at construction."""
    if not callable(app):
        raise TypeError(f"app must be a callable (the wrapped app), got {type(app).__name__}")
    if not isinstance(gate, _GATES) and not _is_limiter(gate):
        raise TypeError(
            "gate must be a surgeguard.Gate, a SharedGate or a Limiter (local or Limiter.shared), "
            f"got {type(gate).__name__}"
        )
    if keyed is not None and not isinstance(keyed, KeyedLimits):
        raise TypeError(f"keyed must be a surgeguard.KeyedLimits or None, got {type(keyed).__name__}")
    for name, value, optional in (
        ("priority_header", priority_header, False),
        ("key_header", key_header, True),
        ("health_path", health_path, True),
    ):
        if value is None and optional:
            continue
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str{' or None' if optional else ''}, got {type(value).__name__}")
        if not value or not value.isascii():
            raise ValueError(f"{name} must be a non-empty ASCII string, got {value!r}")
    for name, value in (("priority", priority), ("key", key), ("broken", broken)):
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be a callable or None, got {type(value).__name__}")
    if isinstance(key_cost, bool) or not isinstance(key_cost, int):
        raise TypeError(f"key_cost must be an int, got {type(key_cost).__name__}")
    if not 0 <= key_cost <= 2**32 - 1:
        raise ValueError(f"key_cost must be an int in [0, 2**32 - 1], got {key_cost}")


def _budget_and_timeout(
    policy: "_dl._ServerPolicy", values: List[Tuple[str, Any]], timeout: Optional[float]
) -> Tuple[Optional[int], Optional[float]]:
    budget = policy.budget_ns(values)
    if budget is None:
        return None, None
    if budget == policy.max_ns and timeout == 0:
        return None, 0.0  # the server's `timeout=0`: never wait (no deadline)
    return budget, budget / 1e9


class OverloadMiddleware:
    """Pure ASGI overload middleware (see the module docs).

    Args:
        app: the ASGI app.
        gate: the :class:`~surgeguard.Gate` all requests pass (a
            :class:`~surgeguard.SharedGate` for one across worker processes), or a limiter without a
            queue (a :class:`~surgeguard.Limiter` (``Limiter.shared``) for one limit across worker
            processes): admitted or refused at once.
        timeout: the request's deadline in seconds, covering the wait in the queue *and*
            the expected service time (the gate's ``service_time``): a request that
            cannot finish in time is refused at once (``DeadlineUnmeetable``), and a
            waiter is dropped (``Expired``) once its turn would come too late. Give the
            time your client waits for a whole answer, not a queueing budget. ``None``
            (default): no deadline — wait until granted or dropped by CoDel, eviction or
            shedding; ``0``: never wait.
        priority_header: the request header naming the priority.
        priority: ``priority(scope) -> name | int | None`` (overrides the header).
        keyed: a :class:`~surgeguard.KeyedLimits` table for per-key isolation.
        key_header: the header holding the key (e.g. ``"x-tenant-id"``, ``"x-agent-id"``).
        key: ``key(scope) -> str | bytes | None`` (overrides the header).
        key_cost: rate units one request costs its key.
        health_path: a path answered by :func:`health` outside the gate.
        broken: ``broken() -> bool`` for the health answer.
        exclude_paths: paths that bypass the gate (e.g. metrics).
        read_deadlines: read the caller's deadline from the request headers (default
            True; False ignores them all).
        deadline_header: one more header holding the remaining budget in milliseconds.
        default_budget: seconds given to a request that carries no valid deadline header
            (``None``: no deadline, unless ``timeout``).
        deadline_stats: a :class:`~surgeguard.deadline.DeadlineStats` to count in (one
            is made otherwise; read it as ``middleware.deadline_stats``).

    ``timeout`` is also the largest budget a caller can ask for.
    """

    def __init__(
        self,
        app: ASGIApp,
        gate: "Union[Gate, SharedGate, Limiter]",
        *,
        timeout: Optional[float] = None,
        priority_header: str = "x-request-priority",
        priority: Optional[Callable[[Scope], Union[str, int, None]]] = None,
        keyed: Optional[KeyedLimits] = None,
        key_header: Optional[str] = "x-tenant-id",
        key: Optional[Callable[[Scope], Union[str, bytes, None]]] = None,
        key_cost: int = 1,
        health_path: Optional[str] = None,
        broken: Optional[Callable[[], bool]] = None,
        exclude_paths: Iterable[str] = (),
        read_deadlines: bool = True,
        deadline_header: Optional[str] = None,
        default_budget: Optional[float] = None,
        deadline_stats: Optional[_dl.DeadlineStats] = None,
    ) -> None:
        _check_args(app, gate, priority_header, priority, keyed, key_header, key, key_cost, health_path, broken)
        if isinstance(exclude_paths, (str, bytes)) or not isinstance(exclude_paths, Iterable):
            raise TypeError(f"exclude_paths must be a collection of paths, got {type(exclude_paths).__name__}")
        exclude_paths = list(exclude_paths)
        if not all(isinstance(p, str) for p in exclude_paths):
            raise TypeError("exclude_paths must hold str paths")
        self._admit = _admission(gate)
        self._admit.acquire_async(None, timeout)  # validates timeout once, here
        self._deadlines = _dl._ServerPolicy(read_deadlines, deadline_header, default_budget, timeout, deadline_stats)
        self.deadline_stats = self._deadlines.stats
        self._deadline_names = {n.encode("latin-1"): n for n in self._deadlines.names}
        if _is_starlette(app):
            _answer_deadlines_in(app)
        self.app = app
        self.gate = gate
        self.timeout = timeout
        self.priority_header = priority_header.lower().encode("latin-1")
        self.priority = priority
        self.keyed = keyed
        self.key_header = key_header.lower().encode("latin-1") if key_header else None
        self.key = key
        self.key_cost = key_cost
        self.health_path = health_path
        self.broken = broken
        self.exclude_paths = frozenset(exclude_paths)
        self._levels = self._admit.levels

    def _key_of(self, scope: Scope) -> Union[str, bytes, None]:
        if self.key is not None:
            return self.key(scope)
        if self.keyed is not None and self.key_header is not None:
            return _header(scope, self.key_header)
        return None

    def _budget(self, scope: Scope) -> Tuple[Optional[int], Optional[float]]:
        """The request's budget in ns (``None``: no deadline; ``0``: already spent) and
        the gate's timeout in seconds."""
        names = self._deadline_names
        values = [(names[k.lower()], v) for k, v in scope.get("headers") or () if k.lower() in names]
        return _budget_and_timeout(self._deadlines, values, self.timeout)

    def _priority_of(self, scope: Scope) -> Union[str, int, None]:
        if self.priority is not None:
            return self.priority(scope)
        return _priority_value(_header(scope, self.priority_header), self._levels)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.health_path is not None and path == self.health_path:
            status, body = health(self._admit, self.broken)
            await _respond(send, status, [(b"content-type", b"application/json")], json.dumps(body).encode())
            return
        if path in self.exclude_paths:
            await self.app(scope, receive, send)
            return

        key_permit = None
        key = None
        if self.keyed is not None:
            key = self._key_of(scope)
            if key is not None:
                try:
                    key_permit = self.keyed.try_acquire(key, self.key_cost)
                except (KeyLimit, KeyRate) as refusal:
                    await _refuse(send, refusal)
                    return
        try:
            arrival = clock_ns()
            budget, timeout = self._budget(scope)
            try:
                if budget == 0:
                    raise _expired_on_arrival(self.deadline_stats)
                permit = await self._admit.acquire_async(self._priority_of(scope), timeout).__aenter__()
            except Rejected as refusal:
                if key is not None and self.keyed is not None:
                    self.keyed.record_rejection(key)
                await _refuse(send, refusal)
                return
            status: List[int] = []
            stale = [False]

            async def send_wrapper(message: Dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])
                    if stale[0]:
                        message = {**message, "headers": [*message.get("headers", ()), _STALE]}
                await send(message)

            outcome = "ignored"
            stale_token = _stale_cell.set(stale)
            answered = [False]
            answered_token = _deadline_answered.set(answered)
            try:
                with _dl.scope(deadline_ns=_dl._at(budget, arrival) if budget else None):
                    await self.app(scope, receive, send_wrapper)
                if status and not answered[0]:
                    outcome = outcome_for_status(status[0])
            except DeadlineExceeded:
                if status:
                    raise
                await _answer_deadline(scope, receive, send_wrapper)
            except BaseException as exc:
                outcome = _exception_outcome(exc)
                raise
            finally:
                _deadline_answered.reset(answered_token)
                _stale_cell.reset(stale_token)
                if permit.held:
                    permit.release(outcome)
        finally:
            if key_permit is not None and key_permit.held:
                key_permit.release()
