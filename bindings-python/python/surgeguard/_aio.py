"""asyncio waiting for `Gate.acquire_async` (internal).

One future per queued ticket; one timer per gate and event loop, driven by the gate's
``next_wakeup``; wake-ups from other threads go through ``loop.call_soon_threadsafe``;
cancelling the waiting task withdraws the ticket (a permit granted meanwhile is returned
as ignored, never leaked). The native side routes each event to its ticket.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Optional

__all__ = ["wait_ticket"]

#: A waiter whose timeout passed without a word from the core gives up after this much more.
_GRACE = 0.005
#: The timer never fires more often than this (seconds).
_MIN_DELAY = 0.0005

_timers: "weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Timer]]" = (
    weakref.WeakKeyDictionary()
)
_timers_lock = threading.Lock()
#: The thread each loop runs on (a timer is armed directly there, else through
#: ``call_soon_threadsafe``).
_loop_thread: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int]" = weakref.WeakKeyDictionary()


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


def _waker(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[None]") -> Any:
    loop_thread = threading.get_ident()

    def wake() -> None:
        if threading.get_ident() == loop_thread:
            _resolve(fut)
        else:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    return wake


class _Timer:
    """The one timer of a gate on one loop: polls the gate when its next wake-up is due."""

    __slots__ = ("gate", "loop", "handle", "due", "__weakref__")

    def __init__(self, gate: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.gate = weakref.ref(gate)
        self.loop = loop
        self.handle: Optional[asyncio.TimerHandle] = None
        self.due = 0.0

    def arm(self) -> None:
        gate = self.gate()
        if gate is None:
            return
        delay = gate.next_wakeup()
        if delay is None:
            return
        due = self.loop.time() + max(delay, _MIN_DELAY)
        if self.handle is not None:
            if self.due <= due:
                return
            self.handle.cancel()
        self.due = due
        self.handle = self.loop.call_at(due, self._fire)

    def kick(self) -> bool:
        """Called by the gate (any thread) after a pump that left waiters: re-arm from the
        gate's ``next_wakeup``. Returns False once the loop is closed (then the gate
        forgets this timer)."""
        if self.loop.is_closed():
            return False
        if _loop_thread.get(self.loop) == threading.get_ident():
            self.arm()
        else:
            try:
                self.loop.call_soon_threadsafe(self.arm)
            except RuntimeError:  # closed meanwhile
                return False
        return True

    def _fire(self) -> None:
        self.handle = None
        gate = self.gate()
        if gate is None:
            return
        gate.poll()
        if gate.waiting():
            self.arm()


def _timer_for(gate: Any, loop: asyncio.AbstractEventLoop) -> _Timer:
    with _timers_lock:
        per_loop = _timers.get(gate)
        if per_loop is None:
            per_loop = weakref.WeakKeyDictionary()
            _timers[gate] = per_loop
        timer = per_loop.get(loop)
        if timer is None:
            timer = _Timer(gate, loop)
            per_loop[loop] = timer
            _loop_thread[loop] = threading.get_ident()
            gate._add_timer_hook(timer.kick)
        return timer


async def wait_ticket(gate: Any, permit: Any, ticket: Any, timeout: Optional[float], timer: bool = True) -> Any:
    """Waits for a queued ticket; returns the permit (now held) or raises its refusal.

    ``timer``: arm the gate's loop timer (a ``Gate``). A ``SharedGate`` passes False: the
    process's pump thread (native) wakes the future when the ticket is decided (in
    whichever process the slot was freed) and runs the gate's timers."""
    loop = asyncio.get_running_loop()
    fut: "asyncio.Future[None]" = loop.create_future()
    if not ticket.set_waker(_waker(loop, fut)):
        if timer:
            _timer_for(gate, loop).arm()
        backstop = None
        if timeout is not None:
            backstop = loop.call_at(loop.time() + timeout + _GRACE, _resolve, fut)
        try:
            await fut
        except BaseException:
            # Cancelled (or anything thrown in): withdraw the ticket; a grant that raced
            # in is returned as ignored.
            gate._abandon(permit, ticket)
            raise
        finally:
            if backstop is not None:
                backstop.cancel()
        if not ticket.done:
            # The backstop fired before the core said anything: give up, unless a grant
            # is on its way (then keep it).
            if gate._abandon(permit, ticket, True):
                return permit
            raise gate._expired()
    gate._finish(permit, ticket)
    return permit
