"""Gate: sync waiting (GIL released), shedding, readiness, thread stress."""

import threading
import time

import pytest

import surgeguard as sg
from conftest import MS, SEC


def test_admit_queue_grant_in_priority_order_with_injected_time():
    g = sg.Gate(limit=1, codel=False)
    first = g.try_acquire(now_ns=MS)
    results = []

    def waiter(prio, name):
        with g.acquire(prio, timeout=5.0, now_ns=2 * MS) as p:
            results.append((name, p.priority))

    threads = []
    for prio, name in [("background", "b"), ("normal", "n"), ("critical", "c")]:
        t = threading.Thread(target=waiter, args=(prio, name))
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 5
        while g.waiting() < len(threads) and time.monotonic() < deadline:
            time.sleep(0.001)
    assert g.waiting() == 3
    assert g.waiting("critical") == 1
    first.success(now_ns=3 * MS)
    for t in threads:
        t.join(10)
    assert [r[0] for r in results] == ["c", "n", "b"]
    m = g.metrics()
    assert (m["granted"], m["waiting"], m["limiter"]["inflight"]) == (3, 0, 0)
    assert (m["binding_waiters"], m["binding_orphans"]) == (0, 0)


def test_timeout_zero_never_waits(gate1):
    held = gate1.try_acquire()
    t = time.monotonic()
    with pytest.raises(sg.Rejected):
        with gate1.acquire(timeout=0):
            pass
    assert time.monotonic() - t < 0.5
    with pytest.raises(sg.LimitReached):
        gate1.try_acquire()
    held.success()
    assert gate1.waiting() == 0 and gate1.inflight == 0
    with gate1.acquire(timeout=0):
        assert gate1.inflight == 1


def test_sync_timeout_expires_and_leaves_nothing(gate1):
    held = gate1.try_acquire()
    t = time.monotonic()
    with pytest.raises(sg.Expired) as e:
        with gate1.acquire(timeout=0.05):
            pass
    waited = time.monotonic() - t
    assert 0.02 < waited < 2.0
    assert e.value.reason == "expired" and e.value.retry_after > 0
    held.success()
    m = gate1.metrics()
    assert (m["waiting"], m["limiter"]["inflight"], m["binding_waiters"]) == (0, 0, 0)


def test_the_gil_is_released_while_waiting(gate1):
    held = gate1.try_acquire()
    ticks = []
    stop = threading.Event()

    def spinner():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    s = threading.Thread(target=spinner)
    s.start()
    with pytest.raises(sg.Expired):
        with gate1.acquire(timeout=0.2):
            pass
    stop.set()
    s.join()
    held.success()
    assert len(ticks) > 20  # the other thread ran while this one waited


def test_shed_switch_refuses_and_drops_waiters():
    g = sg.Gate(limit=1, codel=False)
    held = g.try_acquire("critical")
    errors = []

    def waiter():
        try:
            with g.acquire("background", timeout=5.0):
                pass
        except sg.Rejected as e:
            errors.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    while g.waiting() == 0:
        time.sleep(0.001)
    g.set_shed_level("background")
    assert g.shed_level == 2
    assert g.state == "overloaded" and g.overloaded
    t.join(5)
    assert len(errors) == 1 and isinstance(errors[0], sg.Shed)
    with pytest.raises(sg.Shed) as e:
        g.try_acquire("background")
    assert e.value.reason == "shed"
    g.set_shed_level(None)
    assert g.shed_level is None and g.state == "healthy"
    held.success()
    with g.acquire("background", timeout=0):
        pass


def test_queue_full_and_eviction():
    g = sg.Gate(limit=1, queue_capacity=1, codel=False)
    held = g.try_acquire("critical")
    out = {}

    def waiter(name, prio):
        try:
            with g.acquire(prio, timeout=5.0):
                out[name] = "granted"
        except sg.Rejected as e:
            out[name] = type(e).__name__

    t1 = threading.Thread(target=waiter, args=("bg", "background"))
    t1.start()
    while g.waiting() == 0:
        time.sleep(0.001)
    with pytest.raises(sg.QueueFull):
        g.acquire("background", timeout=1.0).__enter__()
    t2 = threading.Thread(target=waiter, args=("crit", "critical"))
    t2.start()  # evicts the background waiter
    t1.join(5)
    assert out["bg"] == "Evicted"
    held.success()
    t2.join(5)
    assert out["crit"] == "granted"
    assert g.inflight == 0 and g.waiting() == 0


def test_a_permit_is_entered_once_and_sync_async_are_not_mixed():
    g = sg.Gate(limit=2)
    p = g.acquire()
    with p:
        pass
    with pytest.raises(RuntimeError):
        with p:
            pass
    with pytest.raises(TypeError):
        with g.acquire_async():
            pass
    assert g.inflight == 0


def test_metrics_and_repr():
    g = sg.Gate(limit=3)
    with g.acquire("critical"):
        m = g.metrics()
        assert m["limiter"]["inflight"] == 1
        assert m["limiter"]["inflight_by_level"] == [1, 0, 0]
    assert "Gate(" in repr(g)
    assert g.levels == 3 and g.limit == 3
    assert g.next_wakeup() is None
    assert g.poll() is None
    assert g.service_time >= 0


def test_thread_stress_invariants():
    limit = 4
    g = sg.Gate(limit=limit, queue_capacity=256)
    n_threads, per_thread = 16, 150
    inside = 0
    max_inside = 0
    lock = threading.Lock()
    outcomes = {"ok": 0, "refused": 0}
    errors = []

    def worker(i):
        nonlocal inside, max_inside
        prios = ["critical", "normal", "background"]
        for j in range(per_thread):
            try:
                with g.acquire(prios[(i + j) % 3], timeout=2.0):
                    with lock:
                        inside += 1
                        max_inside = max(max_inside, inside)
                    if j % 7 == 0:
                        time.sleep(0.0002)
                    with lock:
                        inside -= 1
                with lock:
                    outcomes["ok"] += 1
            except sg.Rejected:
                with lock:
                    outcomes["refused"] += 1
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert max_inside <= limit, "never more in flight than the limit"
    assert outcomes["ok"] + outcomes["refused"] == n_threads * per_thread
    assert outcomes["ok"] > 0
    m = g.metrics()
    assert m["limiter"]["inflight"] == 0 and m["waiting"] == 0
    assert (m["binding_waiters"], m["binding_orphans"]) == (0, 0)
    lm = m["limiter"]
    assert lm["successes"] + lm["drops"] + lm["ignored"] == lm["admitted"] == outcomes["ok"]


def test_a_held_permit_is_entered_once_and_released_on_exit():
    # A permit from try_acquire() holds its slot already: entering opens the block, leaving
    # releases it; a second entry (or an entry of a pending permit that was entered) fails.
    g = sg.Gate(limit=2)
    p = g.try_acquire()
    assert p.held and g.inflight == 1
    with p:
        assert g.inflight == 1
    assert not p.held and p.outcome == "success" and g.inflight == 0
    with pytest.raises(RuntimeError):
        with p:
            pass
    q = g.acquire()
    with q:
        assert q.held and g.inflight == 1
        with pytest.raises(RuntimeError):
            q.__enter__()
    assert g.inflight == 0
