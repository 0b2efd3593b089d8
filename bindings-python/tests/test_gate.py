"""Gate: sync waiting (GIL released), shedding, readiness, thread stress."""

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import surgeguard as sg
from conftest import MS, SEC, FakeClock, no_leaks, settle


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


# A queued waiter does not wait forever when the only re-check the core asks for is due
# after a release (a fractional limit: Gate(limit=1.8)).
def test_thread_waiter_is_granted_after_a_fractional_release():
    g = sg.Gate(limit=1.8)
    settle(g)
    crit = g.try_acquire("critical")
    result = []

    def waiter():
        with g.acquire("normal", timeout=5.0):
            result.append("granted")

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 5
    while g.waiting() < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.02)
    crit.success()
    t.join(6)
    assert result == ["granted"]
    no_leaks(g)


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler, whatever was inherited: a shell that starts a job in the
    background without job control sets SIGINT to ignored, and Python then installs none."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# Ctrl-C while blocked in gate.acquire() interrupts at once and leaves nothing behind.
def test_keyboard_interrupt_while_blocked_in_acquire(sigint_raises):
    g = sg.Gate(limit=1, levels=1, codel=False)
    held = g.try_acquire()
    timer = threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        with g.acquire():  # no timeout: before the fix this blocked for good
            pytest.fail("admitted while the slot is held")
    assert time.monotonic() - t0 < 3.0
    timer.join()
    assert g.waiting() == 0 and g.inflight == 1
    held.success()
    no_leaks(g)


def test_sigint_to_a_subprocess_blocked_in_acquire():
    code = textwrap.dedent(
        """
        import signal, sys, surgeguard as sg
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited as ignored
        g = sg.Gate(limit=1, levels=1, codel=False)
        held = g.try_acquire()
        print("ready", flush=True)
        try:
            with g.acquire():
                print("admitted", flush=True)
        except KeyboardInterrupt:
            m = g.metrics()
            print("interrupted", g.waiting(), g.inflight, m["binding_waiters"], flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.strip() == "interrupted 0 1 0"


# A permit shared across threads: exactly one end wins, the others get UsageError, and
# readers never see pyo3 borrow errors.
def test_permit_shared_across_threads():
    for _ in range(100):
        g = sg.Gate(limit=1, levels=1, codel=False)
        p = g.try_acquire()
        errors, wins, reads = [], [], []
        barrier = threading.Barrier(4)

        def end():
            barrier.wait()
            try:
                p.success()
                wins.append(1)
            except sg.UsageError:
                pass
            except BaseException as e:  # noqa: BLE001 - the test records anything else
                errors.append(e)

        def read():
            barrier.wait()
            try:
                for _ in range(50):
                    reads.append((p.held, p.outcome))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=end) for _ in range(3)] + [threading.Thread(target=read)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert errors == [] and wins == [1]
        assert p.outcome == "success" and not p.held
        no_leaks(g)


# Permit misuse raises UsageError.
def test_reentering_after_the_block_is_a_usage_error():
    g = sg.Gate(limit=2)
    p = g.acquire()
    with p:
        pass
    with pytest.raises(sg.UsageError):
        with p:
            pass
    assert g.inflight == 0


def test_ending_a_permit_never_entered_is_a_usage_error():
    g = sg.Gate(limit=2)
    lim = sg.Limiter(limit=2)
    for p in (g.acquire(), lim.acquire()):
        for end in (p.success, p.dropped, p.ignore, p.release):
            with pytest.raises(sg.UsageError):
                end()
        assert not p.held and p.outcome is None
    assert g.inflight == 0 and lim.inflight == 0


def test_nested_with_on_a_held_permit_is_a_usage_error():
    g = sg.Gate(limit=2)
    with g.acquire() as p:
        with pytest.raises(sg.UsageError):
            with p:
                pass
        # The inner attempt did not free the slot while the outer block runs.
        assert p.held and g.inflight == 1
    assert p.outcome == "success" and g.inflight == 0


def test_try_acquire_permit_may_be_entered_once():
    g = sg.Gate(limit=2)
    p = g.try_acquire()
    with p:
        assert g.inflight == 1
    assert p.outcome == "success" and g.inflight == 0


def test_ending_inside_the_block_is_kept():
    g = sg.Gate(limit=2)
    with g.acquire() as p:
        p.dropped()
    assert p.outcome == "dropped" and g.inflight == 0


# A whole object takes a clock: no sleeping in tests.
def test_gate_latency_comes_from_its_clock():
    clock = FakeClock()
    g = sg.Gate(limit=4, clock=clock)
    with g.acquire() as p:
        assert p.started_at_ns == clock.t
        clock.sleep(0.25)
    assert abs(g.service_time - 0.25) < 0.05
    with pytest.raises(TypeError, match="clock"):
        sg.Gate(clock=5)


# The semaphore idiom: a job_queue gate waits its turn; the server Gate's refusals are its
# documented semantics (CoDel).
def test_job_queue_semaphore_idiom_never_refuses_under_steady_load():
    gate = sg.job_queue(3)
    refused, done = [], []
    inflight, peak = [0], [0]
    lock = threading.Lock()

    def worker():
        for _ in range(15):
            try:
                with gate.acquire():
                    with lock:
                        inflight[0] += 1
                        peak[0] = max(peak[0], inflight[0])
                    time.sleep(0.02)
                    with lock:
                        inflight[0] -= 1
                done.append(1)
            except sg.OverloadError as e:
                refused.append(e)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert refused == [] and len(done) == 120
    assert peak[0] <= 3
    no_leaks(gate)
    with pytest.raises(ValueError):
        sg.job_queue(3, queue_capacity=10**9)
