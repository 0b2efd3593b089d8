"""One Gate across worker processes: ``Gate.shared`` with real processes.

A waiter queued in one process is granted by a release in another (sync waiters block in
the native wait, async ones are woken by the process's pump thread); a process killed with
SIGKILL while holding permits and a queued ticket gives both back, and the other processes'
waiters are granted within the sweep bound; in a single process the shared gate decides
exactly as the in-process Gate; bad input is refused with a typed error and no change.
"""

import asyncio
import os
import signal
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import surgeguard
from surgeguard import _native

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not hasattr(_native, "SharedGate"), reason="shared memory is Linux-only"
)

#: The crate's sweep interval: a waiter sweeps dead processes at most this often.
SWEEP_BOUND = 0.1
#: Slack for a loaded host (the machine running the tests is shared).
SLACK = 1.0


def unique(tag):
    return f"pytest-gate-{tag}-{os.getpid()}-{time.monotonic_ns()}"


def fork(fn):
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            code = fn() or 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait_exit(pid, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("child did not finish")


def read_byte(fd, timeout=10.0):
    import select

    r, _, _ = select.select([fd], [], [], timeout)
    assert r, "child did not report"
    return os.read(fd, 1)


def until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.005)


# ---- across processes -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_created_before_fork_a_waiter_in_one_process_is_granted_by_a_release_in_another(mode):
    gate = surgeguard.Gate.shared(None, limit=1, levels=1, codel=False)
    held = gate.try_acquire()
    r, w = os.pipe()

    def child():
        if mode == "sync":
            os.write(w, b"q")
            with gate.acquire(timeout=5.0) as p:
                assert p.held and gate.inflight == 1
                os.write(w, b"g")
        else:

            async def run():
                os.write(w, b"q")
                async with gate.acquire_async(timeout=5.0) as p:
                    assert p.held and gate.inflight == 1
                    os.write(w, b"g")

            asyncio.run(run())
        return 0

    pid = fork(child)
    assert read_byte(r) == b"q"
    until(lambda: gate.waiting() == 1)  # queued in the child
    assert gate.inflight == 1
    released = time.monotonic()
    held.success()
    assert read_byte(r) == b"g"
    granted_after = time.monotonic() - released
    assert wait_exit(pid) == 0
    assert granted_after < SLACK, granted_after
    assert gate.inflight == 0 and gate.waiting() == 0
    assert gate.metrics()["granted"] == 1


def test_attached_by_name_after_fork_waiters_of_several_processes_are_granted_in_turn():
    name = unique("name")
    cfg = dict(limit=1, levels=1, codel=False)
    try:
        gate = surgeguard.Gate.shared(name, **cfg)
        assert gate.created
        held = gate.try_acquire()
        r, w = os.pipe()

        def child():
            mine = surgeguard.Gate.shared(name, **cfg)  # attached after the fork
            assert not mine.created

            async def run():
                os.write(w, b"q")
                async with mine.acquire_async(timeout=5.0):
                    os.write(w, b"g")
                    await asyncio.sleep(0.02)

            asyncio.run(run())
            return 0

        pids = [fork(child) for _ in range(3)]
        assert [read_byte(r) for _ in pids] == [b"q"] * 3
        until(lambda: gate.waiting() == 3)
        held.success()
        assert [read_byte(r) for _ in pids] == [b"g"] * 3  # each granted when the last released
        assert [wait_exit(p) for p in pids] == [0, 0, 0]
        assert gate.inflight == 0 and gate.waiting() == 0
        m = gate.metrics()
        assert m["granted"] == 3 and m["limiter"]["inflight"] == 0
        # Another config is refused on attach.
        with pytest.raises(ValueError):
            surgeguard.Gate.shared(name, limit=2, levels=1, codel=False)
    finally:
        surgeguard.SharedGate.unlink(name)


@pytest.mark.parametrize("waiter", ["sync", "async"])
def test_a_killed_process_holding_permits_and_a_ticket_gives_them_back_and_waiters_are_granted(waiter):
    name = unique("kill")
    cfg = dict(limit=2, levels=1, codel=False)
    try:
        gate = surgeguard.Gate.shared(name, **cfg)
        r, w = os.pipe()

        def child():
            mine = surgeguard.Gate.shared(name, **cfg)
            held = [mine.try_acquire() for _ in range(2)]  # noqa: F841 - held until killed
            threading.Thread(target=lambda: mine.acquire(timeout=30).__enter__(), daemon=True).start()
            until(lambda: mine.waiting() == 1)
            os.write(w, b"x")
            time.sleep(60)

        pid = fork(child)
        assert read_byte(r) == b"x"
        assert gate.inflight == 2 and gate.waiting() == 1
        result = {}

        def wait_here():
            if waiter == "sync":
                p = gate.acquire(timeout=10).__enter__()
            else:

                async def run():
                    return await gate.acquire_async(timeout=10).__aenter__()

                p = asyncio.run(run())
            result["at"] = time.monotonic()
            result["permit"] = p

        t = threading.Thread(target=wait_here)
        t.start()
        until(lambda: gate.waiting() == 2)  # ours queued behind the child's ticket
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        killed = time.monotonic()
        t.join(10)
        assert "permit" in result
        assert result["at"] - killed < SWEEP_BOUND + SLACK, result["at"] - killed
        # The child's two permits and its ticket are gone, each once: ours holds one slot.
        assert gate.inflight == 1 and gate.waiting() == 0
        assert gate.reclaim() == 0
        result["permit"].success()
        assert gate.inflight == 0
        a, b = gate.try_acquire(), gate.try_acquire()
        with pytest.raises(surgeguard.Rejected):
            gate.try_acquire()
        a.success()
        b.success()
    finally:
        surgeguard.SharedGate.unlink(name)


def test_a_forked_child_cannot_release_the_parents_permit():
    gate = surgeguard.Gate.shared(None, limit=2, levels=1, codel=False)
    held = gate.try_acquire()

    def child():
        try:
            held.success()  # the child's copy of the parent's permit
        except surgeguard.UsageError:
            pass
        else:
            return 3
        global _copy
        _copy = held  # dropped at exit: must not release the parent's slot either
        return 0

    pid = fork(child)
    assert wait_exit(pid) == 0
    assert gate.inflight == 1 and held.held
    held.success()
    assert gate.inflight == 0


def test_the_interpreter_exits_cleanly_right_after_an_async_grant():
    """The pump thread wakes a future from outside Python; an interpreter that finalizes
    while that call is still inside Python must not abort the process (an atexit hook
    waits for it, then closes the pump's way into Python)."""
    import subprocess

    script = (
        "import asyncio, surgeguard as sg\n"
        "g = sg.Gate.shared(None, limit=1, levels=1, codel=False)\n"
        "h = g.try_acquire()\n"
        "async def run():\n"
        "    asyncio.get_running_loop().call_later(0.02, h.success)\n"
        "    async with g.acquire_async(timeout=5):\n"
        "        pass\n"
        "asyncio.run(run())\n"
    )
    codes = [subprocess.run([sys.executable, "-c", script], capture_output=True).returncode for _ in range(6)]
    assert codes == [0] * 6, codes


# ---- one process --------------------------------------------------------------------------


def test_async_waiters_are_granted_in_priority_order_and_cancel_withdraws():
    gate = surgeguard.Gate.shared(None, limit=1, levels=3, codel=False)

    async def run():
        order = []
        first = gate.try_acquire()

        async def waiter(prio):
            async with gate.acquire_async(prio):
                order.append(prio)
                await asyncio.sleep(0.005)

        tasks = [asyncio.create_task(waiter(p)) for p in ("background", "normal", "critical")]
        cancelled = asyncio.create_task(waiter("normal"))
        while gate.waiting() < 4:
            await asyncio.sleep(0.001)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert gate.waiting() == 3  # withdrawn, not left queued
        first.success()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order

    order = asyncio.run(run())
    assert order == ["critical", "normal", "background"]
    assert gate.inflight == 0 and gate.waiting() == 0
    assert gate.metrics()["cancelled"] == 1


def test_one_process_queues_at_most_64_tickets_as_the_readme_says():
    # README: a process holds at most 64 queued tickets of a shared gate; an arrival
    # beyond that is admitted if a slot is free, else refused at once, never queued.
    gate = surgeguard.Gate.shared(None, limit=1, levels=1, codel=False, queue_capacity=256)

    async def run():
        held = gate.try_acquire()

        async def waiter():
            async with gate.acquire_async(timeout=10):
                pass

        tasks = [asyncio.create_task(waiter()) for _ in range(64)]
        while gate.waiting() < 64:
            await asyncio.sleep(0.001)
        with pytest.raises(surgeguard.LimitReached):
            async with gate.acquire_async(timeout=10):
                pass
        assert gate.waiting() == 64
        held.success()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)

    asyncio.run(run())
    assert gate.inflight == 0 and gate.waiting() == 0


def test_an_async_wait_dropped_unawaited_withdraws_its_ticket():
    import gc
    import warnings

    gate = surgeguard.Gate.shared(None, limit=1, levels=1, codel=False)
    held = gate.try_acquire()

    async def run():
        coro = gate.acquire_async().__aenter__()  # queued: a coroutine waiting for the grant
        assert gate.waiting() == 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "never awaited": on purpose
            del coro
            gc.collect()

    asyncio.run(run())
    assert gate.waiting() == 0  # withdrawn, not left to be granted to nobody
    held.success()
    assert gate.inflight == 0
    again = gate.try_acquire()  # the slot is free, not granted to the dropped wait
    again.success()


def test_timeouts_expire_waiters_sync_and_async():
    gate = surgeguard.Gate.shared(None, limit=1, levels=1, codel=False)
    held = gate.try_acquire()
    t0 = time.monotonic()
    with pytest.raises(surgeguard.Rejected):
        with gate.acquire(timeout=0.05):
            pass
    assert time.monotonic() - t0 < 0.05 + SLACK

    async def run():
        async with gate.acquire_async(timeout=0.05):
            pass

    with pytest.raises(surgeguard.Rejected):
        asyncio.run(run())
    with pytest.raises(surgeguard.LimitReached):
        with gate.acquire(timeout=0):  # never waits
            pass
    assert gate.waiting() == 0 and gate.inflight == 1
    held.success()
    assert gate.inflight == 0


def test_permits_release_once_and_bad_input_is_refused():
    gate = surgeguard.Gate.shared(None, limit=2, levels=3)
    other = surgeguard.Gate.shared(None, limit=2, levels=3)
    p = gate.try_acquire("critical")
    assert p.held and p.priority == 0 and gate.inflight == 1 and gate.held_by_this_process == 1
    with pytest.raises(surgeguard.UsageError):
        other.release(p)  # a permit of another gate: refused, nothing changes
    assert p.held and gate.inflight == 1 and other.inflight == 0
    with pytest.raises(TypeError):
        gate.release(object())
    p.success()
    with pytest.raises(surgeguard.UsageError):
        p.success()  # released twice
    with pytest.raises(surgeguard.UsageError):
        gate.release(p)
    assert gate.inflight == 0
    for bad in ("urgent", -1, 3, 1.5, float("nan")):
        with pytest.raises((TypeError, ValueError)):
            gate.try_acquire(bad)
    for bad in (float("nan"), -1.0, float("inf"), "1"):
        with pytest.raises((TypeError, ValueError)):
            gate.acquire(timeout=bad)
    with pytest.raises(TypeError):
        surgeguard.Gate.shared(42, limit=1)
    with pytest.raises(TypeError):
        surgeguard.Gate.shared(None, limit=1, clock=lambda: 0)  # every process reads one clock
    with pytest.raises((TypeError, ValueError)):
        surgeguard.Gate.shared(None, limit=float("nan"))
    with pytest.raises(ValueError):
        surgeguard.Gate.shared(None, limit=1, queue_capacity=0)
    with pytest.raises((ValueError, OSError)):
        surgeguard.Gate.shared("a/b", limit=1)
    assert gate.inflight == 0 and gate.waiting() == 0


def test_shared_gate_has_the_gate_reading_api():
    gate = surgeguard.Gate.shared(None, limit=3, levels=3)
    assert isinstance(gate, surgeguard.SharedGate)
    assert gate.limit == 3 and gate.levels == 3 and gate.state == "healthy" and not gate.overloaded
    assert gate.next_wakeup() is None and gate.poll() is None
    with gate.acquire("normal") as p:
        assert p.held and gate.inflight == 1
    assert not p.held and gate.inflight == 0
    gate.set_shed_level("background")
    with pytest.raises(surgeguard.Shed):
        gate.try_acquire("background")
    assert gate.shed_level == 2
    gate.set_shed_level(None)
    gate.set_static_limit(1)
    assert gate.limit == 1
    m = gate.metrics()
    assert m["shed"] == 1 and m["attached_processes"] >= 1 and "binding_waiters" in m
    assert "SharedGate(" in repr(gate)


# ---- the same decisions as the in-process Gate ----------------------------------------------

CONFIGS = [
    dict(limit=2, levels=1, codel=False),
    dict(limit=3, levels=3, queue_capacity=8),
    dict(algorithm="aimd", levels=2, min_window=0.001, max_window=0.01, min_samples=1, max_wait=0.002),
    dict(algorithm="gradient", levels=3, min_window=0.001, max_window=0.01, min_samples=1),
]

OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release", "shed"]),
        st.integers(0, 2),  # level (clamped to the config's levels) or which permit
        st.sampled_from(["success", "dropped", "ignored"]),
        st.integers(0, 5_000_000),  # ns since the last operation
    ),
    max_size=50,
)

_COMPARED = ("waiting", "queued", "granted", "expired", "cancelled", "shed", "queue_full", "limiter")


@settings(max_examples=50, deadline=None)
@given(cfg=st.sampled_from(CONFIGS), ops=OPS)
def test_a_shared_gate_decides_as_the_in_process_gate(cfg, ops):
    """Same config, same try_acquire / release / shed operations at the same injected
    times: the same admissions, refusal reasons, limits and counters."""
    local = surgeguard.Gate(**cfg)
    shared = surgeguard.Gate.shared(None, **cfg)
    now = surgeguard.clock_ns()
    held = []
    for op, n, outcome, dt in ops:
        now += dt
        if op == "acquire":
            level = n % local.levels
            results = []
            for g in (local, shared):
                try:
                    results.append(g.try_acquire(level, now_ns=now))
                except surgeguard.Rejected as e:
                    results.append((type(e), e.reason, e.retry_after))
            if isinstance(results[0], tuple):
                assert results[0] == results[1]
            else:
                assert not isinstance(results[1], tuple), results
                held.append(tuple(results))
        elif op == "release" and held:
            lp, sp = held.pop(n % len(held))
            lp.release(outcome, now_ns=now)
            sp.release(outcome, now_ns=now)
        elif op == "shed":
            level = None if n == 0 else n % local.levels
            local.set_shed_level(level)
            shared.set_shed_level(level)
        assert shared.limit == local.limit and shared.inflight == local.inflight
        assert shared.state == local.state
    lm, sm = local.metrics(), shared.metrics()
    # The limiter's refusal counters aside: a shared arrival that queues runs one dispatch
    # under the segment's lock before try_acquire withdraws it (a slot freed by another
    # process meanwhile goes to it), and that dispatch's failed admission counts a
    # limiter refusal; the in-process try_acquire withdraws before dispatching.
    for m in (lm, sm):
        for k in ("rejected", "rejected_by_level"):
            m["limiter"].pop(k)
    assert {k: lm[k] for k in _COMPARED} == {k: sm[k] for k in _COMPARED}


# ---- the middlewares -----------------------------------------------------------------------


def test_wsgi_middleware_queues_on_a_shared_gate():
    from surgeguard.wsgi import OverloadWSGIMiddleware

    gate = surgeguard.Gate.shared(None, limit=1, levels=1, codel=False)
    seen = {"now": 0, "max": 0}
    lock = threading.Lock()

    def app(environ, start_response):
        with lock:
            seen["now"] += 1
            seen["max"] = max(seen["max"], seen["now"])
        time.sleep(0.02)
        with lock:
            seen["now"] -= 1
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    mw = OverloadWSGIMiddleware(app, gate=gate, timeout=5.0)
    statuses = []

    def call():
        out = {}
        body = mw({"PATH_INFO": "/", "REQUEST_METHOD": "GET"}, lambda s, h, e=None: out.setdefault("s", s))
        b"".join(body)
        body.close()
        statuses.append(out["s"])

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert statuses == ["200 OK"] * 5  # all queued and served, none refused
    assert seen["max"] == 1
    assert gate.inflight == 0 and gate.metrics()["granted"] >= 1


def test_asgi_middleware_queues_on_a_shared_gate_and_answers_health():
    from surgeguard.asgi import OverloadMiddleware

    gate = surgeguard.Gate.shared(None, limit=1, levels=1, codel=False)
    seen = {"now": 0, "max": 0}

    async def app(scope, receive, send):
        seen["now"] += 1
        seen["max"] = max(seen["max"], seen["now"])
        await asyncio.sleep(0.01)
        seen["now"] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = OverloadMiddleware(app, gate=gate, timeout=5.0, health_path="/health")

    async def call(path="/"):
        sent = []

        async def send(m):
            sent.append(m)

        async def receive():
            return {"type": "http.request"}

        await mw({"type": "http", "path": path, "headers": []}, receive, send)
        return sent[0]["status"]

    async def run():
        return await asyncio.gather(*(call() for _ in range(6))), await call("/health")

    statuses, health = asyncio.run(run())
    assert statuses == [200] * 6 and health == 200
    assert seen["max"] == 1 and gate.inflight == 0
    assert gate.metrics()["granted"] >= 1


def test_asgi_middleware_on_a_shared_gate_enforces_the_callers_deadline_and_priority():
    from surgeguard.asgi import OverloadMiddleware

    gate = surgeguard.Gate.shared(None, limit=1, levels=3, codel=False)
    order = []

    async def app(scope, receive, send):
        order.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = OverloadMiddleware(app, gate=gate)

    async def call(path, headers):
        sent = []

        async def send(m):
            sent.append(m)

        async def receive():
            return {"type": "http.request"}

        await mw({"type": "http", "path": path, "headers": headers}, receive, send)
        return sent[0]["status"]

    async def run():
        held = gate.try_acquire()
        t0 = time.monotonic()
        # The caller gives 30 ms: it waits in the shared queue, then is dropped (503).
        late = await call("/late", [(b"surgeguard-timeout-ms", b"30")])
        waited = time.monotonic() - t0
        bg = asyncio.create_task(call("/bg", [(b"x-request-priority", b"background")]))
        crit = asyncio.create_task(call("/crit", [(b"x-request-priority", b"critical")]))
        while gate.waiting() < 2:
            await asyncio.sleep(0.001)
        held.success()
        return late, waited, await asyncio.gather(crit, bg)

    late, waited, statuses = asyncio.run(run())
    assert late == 503 and 0.02 <= waited < 0.03 + SLACK
    assert statuses == [200, 200] and order == ["/crit", "/bg"]  # critical first
    assert gate.inflight == 0 and gate.waiting() == 0
