"""Regression tests for the failures a new user found (one test or more per failure;
each fails on the code before its fix)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import surgeguard as sg
import surgeguard.asgi
import surgeguard.prometheus


def settle(g, hold=0.02):
    """Gives the gate a service time (three normal requests of `hold` seconds), so a
    fractional limit keeps its idle slot for a while after a release."""
    for _ in range(3):
        p = g.try_acquire("normal")
        time.sleep(hold)
        p.success()


def no_leaks(g):
    m = g.metrics()
    assert m["limiter"]["inflight"] == 0, m
    assert m["waiting"] == 0, m
    assert (m["binding_waiters"], m["binding_orphans"]) == (0, 0), m


# 0. A queued waiter must not wait forever when the only re-check the core asks for is
#    due after a release (a fractional limit: Gate(limit=1.8)).


async def test_0_async_waiter_is_granted_after_a_fractional_release():
    g = sg.Gate(limit=1.8)
    settle(g)
    crit = g.try_acquire("critical")

    async def waiter():
        async with g.acquire_async("normal"):
            return "granted"

    task = asyncio.create_task(waiter())
    while g.waiting() < 1:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.02)
    crit.success()
    # Before the fix nothing was armed after the release: the task waited forever.
    # The share rule holds the slot for critical while it is active (1 s by default).
    assert await asyncio.wait_for(task, 5.0) == "granted"
    no_leaks(g)


def test_0_thread_waiter_is_granted_after_a_fractional_release():
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


# 1. Ctrl-C while blocked in gate.acquire() interrupts at once and leaves nothing behind.


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler, whatever was inherited: a shell that starts a job in the
    background without job control sets SIGINT to ignored, and Python then installs none."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_1_keyboard_interrupt_while_blocked_in_acquire(sigint_raises):
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


def test_1_sigint_to_a_subprocess_blocked_in_acquire():
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


# 2. A permit shared across threads: exactly one end wins, the others get UsageError,
#    and readers never see pyo3 borrow errors.


def test_2_permit_shared_across_threads():
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


async def test_2_release_that_wakes_an_async_waiter_from_another_thread():
    g = sg.Gate(limit=1, levels=1, codel=False)
    for _ in range(30):
        p = g.try_acquire()
        task = asyncio.create_task(_hold_once(g))
        while g.waiting() < 1:
            await asyncio.sleep(0.001)
        errors = []

        def end():
            try:
                p.success()
            except sg.UsageError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=end) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        await asyncio.wait_for(task, 5)
        assert errors == []
    no_leaks(g)


async def _hold_once(g):
    async with g.acquire_async():
        pass


# 4. Permit misuse raises UsageError.


def test_4_reentering_after_the_block_is_a_usage_error():
    g = sg.Gate(limit=2)
    p = g.acquire()
    with p:
        pass
    with pytest.raises(sg.UsageError):
        with p:
            pass
    assert g.inflight == 0


def test_4_ending_a_permit_never_entered_is_a_usage_error():
    g = sg.Gate(limit=2)
    lim = sg.Limiter(limit=2)
    for p in (g.acquire(), lim.acquire()):
        for end in (p.success, p.dropped, p.ignore, p.release):
            with pytest.raises(sg.UsageError):
                end()
        assert not p.held and p.outcome is None
    assert g.inflight == 0 and lim.inflight == 0


def test_4_nested_with_on_a_held_permit_is_a_usage_error():
    g = sg.Gate(limit=2)
    with g.acquire() as p:
        with pytest.raises(sg.UsageError):
            with p:
                pass
        # The inner attempt did not free the slot while the outer block runs.
        assert p.held and g.inflight == 1
    assert p.outcome == "success" and g.inflight == 0


def test_4_try_acquire_permit_may_be_entered_once():
    g = sg.Gate(limit=2)
    p = g.try_acquire()
    with p:
        assert g.inflight == 1
    assert p.outcome == "success" and g.inflight == 0


def test_4_ending_inside_the_block_is_kept():
    g = sg.Gate(limit=2)
    with g.acquire() as p:
        p.dropped()
    assert p.outcome == "dropped" and g.inflight == 0


# 3. Out-of-range integers are ValueError, never OverflowError.


@pytest.mark.parametrize(
    "call",
    [
        lambda: sg.CircuitBreaker(seed=-1),
        lambda: sg.CircuitBreaker(seed=2**64),
        lambda: sg.KeyedLimits(4, shards=-1),
        lambda: sg.KeyedLimits(4, shards=10**30),
        lambda: sg.KeyedLimits(4, seed=-1),
        lambda: sg.KeyedLimits(4, hash_seed=-1),
        lambda: sg.Backoff(seed=-1),
        lambda: sg.AdaptiveThrottle(seed=-1),
        lambda: sg.KeyedLimits(4).try_acquire("k", cost=-1),
        lambda: sg.KeyedLimits(4).try_acquire("k", cost=10**10),
        lambda: sg.hash_key(-1, "k"),
        lambda: sg.Gate().poll(now_ns=2**62 + 1),
        lambda: sg.Gate().try_acquire(now_ns=2**64),
    ],
)
def test_3_out_of_range_ints_are_value_errors(call):
    with pytest.raises(ValueError) as info:
        call()
    assert not isinstance(info.value, OverflowError)


def test_3_out_of_range_now_changes_nothing():
    g = sg.Gate(limit=2)
    before = g.metrics()
    for bad in (2**62 + 1, 2**64, -1):
        with pytest.raises(ValueError, match="now_ns"):
            g.try_acquire(now_ns=bad)
    assert g.metrics() == before


# 5. An infinite retry_after never reaches the wire.


def test_5_infinite_retry_after_is_capped_on_the_wire():
    table = sg.KeyedLimits(8, rate=1.0, burst=2)
    with pytest.raises(sg.KeyRate) as info:
        table.try_acquire("k", cost=5)  # more than the burst: never admitted
    assert info.value.retry_after == float("inf")
    a = sg.actionable(info.value)
    assert a["retry_after_s"] == 86_400
    assert b"18446744074" not in a["body"]
    assert sg.actionable("key_rate", float("inf"))["retry_after_s"] == 86_400


# 6. Loose or unhelpful argument handling.


def test_6_time_to_drain_refuses_nan_and_negative_rates():
    for args in ((10, float("nan"), 1), (10, 1, float("nan")), (10, -1, 1), (10, float("inf"), 1)):
        with pytest.raises(ValueError):
            sg.time_to_drain(*args)
    assert sg.time_to_drain(10, 1, 2) is None  # never drains: a real answer


def test_6_range_errors_print_short_bounds():
    for kw in ("lifo", "service_alpha"):
        with pytest.raises(ValueError) as info:
            sg.Gate(**{kw: 10**300})
        assert kw in str(info.value) and len(str(info.value)) < 120, str(info.value)


def test_6_release_names_its_argument():
    p = sg.Gate(limit=2).try_acquire()
    with pytest.raises(TypeError, match="outcome"):
        p.release(42)
    assert p.held  # refused arguments change nothing
    p.release("dropped")
    assert p.outcome == "dropped"


def test_6_retry_on_is_checked_at_decoration():
    for bad in (42, (ValueError, 42), "ValueError", None):
        with pytest.raises(TypeError, match="retry_on"):
            sg.retry(retry_on=bad)
    with pytest.raises(TypeError, match="sleep"):
        sg.retry(sleep=3)


# 7. @retry does not count a retry it never made.


def test_7_retry_given_up_for_max_delay_takes_nothing_from_the_budget():
    budget = sg.RetryBudget(min_retries_per_sec=1, percent_can_retry=0.0)
    calls = []

    @sg.retry(attempts=3, budget=budget, max_delay=1.0, sleep=lambda s: None)
    def call():
        calls.append(1)
        raise sg.errors.LimitReached("busy", "limit_reached", 60.0)  # Retry-After: 60 s

    before = budget.available()
    with pytest.raises(sg.LimitReached):
        call()
    assert calls == [1]
    assert budget.available() == before


# 8. A whole object takes a clock: no sleeping in tests.


class FakeClock:
    def __init__(self):
        self.t = 1_000_000_000

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += int(seconds * 1e9)


def test_8_breaker_with_a_clock_opens_and_recovers_without_sleeping():
    clock = FakeClock()
    b = sg.CircuitBreaker(window_calls=4, minimum_calls=4, open_duration=30.0, open_jitter=0.0, clock=clock)

    @b
    def fail():
        raise ConnectionError("down")

    for _ in range(4):
        with pytest.raises(ConnectionError):
            fail()
    assert b.state() == "open"
    with pytest.raises(sg.BreakerOpen):
        with b:
            pass
    clock.sleep(31)
    assert b.state() != "open"
    with b:
        pass


def test_8_gate_latency_comes_from_its_clock():
    clock = FakeClock()
    g = sg.Gate(limit=4, clock=clock)
    with g.acquire() as p:
        assert p.started_at_ns == clock.t
        clock.sleep(0.25)
    assert abs(g.service_time - 0.25) < 0.05
    with pytest.raises(TypeError, match="clock"):
        sg.Gate(clock=5)


def test_8_limiter_and_retry_take_a_clock():
    clock = FakeClock()
    lim = sg.Limiter(limit=2, clock=clock)
    p = lim.try_acquire()
    assert p.started_at_ns == clock.t
    p.success()
    budget = sg.RetryBudget()
    attempts = []

    @sg.retry(attempts=3, budget=budget, sleep=clock.sleep, clock=clock)
    def flaky():
        attempts.append(clock.t)
        if len(attempts) < 3:
            raise ConnectionError("again")
        return "ok"

    t0 = time.monotonic()
    assert flaky() == "ok"
    assert time.monotonic() - t0 < 0.5  # the fake sleep advanced the fake clock
    assert attempts[0] < attempts[1] < attempts[2]


# 9. The semaphore idiom: a job_queue gate waits its turn; the server Gate's refusals are
#    its documented semantics (CoDel).


def test_9_job_queue_semaphore_idiom_never_refuses_under_steady_load():
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


def test_6_config_errors_name_the_python_option():
    with pytest.raises(sg.ConfigError) as info:
        sg.Gate(min_window=5, max_window=1)
    assert "min_window > max_window" in str(info.value)
    assert "_ns" not in str(info.value) and "_ns" not in info.value.field


# Found by the sweep (not named in the issue).


def test_sweep_found_health_and_render_check_their_arguments():
    with pytest.raises(TypeError, match="gate"):
        sg.asgi.health(float("nan"))
    with pytest.raises(TypeError, match="broken"):
        sg.asgi.health(None, broken=5)
    for bad in ({"target": float("nan")}, 5, "ab", [("x",)]):
        with pytest.raises(TypeError):
            sg.prometheus.render(bad)
    with pytest.raises(ValueError, match="prefix"):
        sg.prometheus.render({}, prefix="bad prefix")
    assert "surgeguard_gate" in sg.prometheus.render({"api": sg.Gate()})


async def test_0_burst_into_an_adaptive_gate_never_strands_a_waiter():
    # An adaptive limit falls to fractional values after a burst; every waiter must end
    # (granted or refused) without anything else happening.
    g = sg.Gate(sg.GradientLimit(slow_start=False))
    outcomes = {"ok": 0, "refused": 0}

    async def one(i):
        try:
            async with g.acquire_async(("critical", "normal", "background")[i % 3]):
                await asyncio.sleep(0.002 + (i % 7) * 0.001)
            outcomes["ok"] += 1
        except sg.OverloadError:
            outcomes["refused"] += 1

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(286))), 60)
    assert outcomes["ok"] + outcomes["refused"] == 286 and outcomes["ok"] > 0
    no_leaks(g)


def test_sweep_found_middleware_arguments_checked_at_construction():
    import surgeguard.wsgi

    gate = sg.Gate()
    app = lambda *a: None  # noqa: E731
    for mw in (sg.asgi.OverloadMiddleware, sg.wsgi.OverloadWSGIMiddleware):
        with pytest.raises(TypeError, match="key_header"):
            mw(app, gate, key_header=float("nan"))
        with pytest.raises(TypeError, match="app"):
            mw(float("nan"), gate)
        with pytest.raises(ValueError, match="key_cost"):
            mw(app, gate, key_cost=-1)
        with pytest.raises(TypeError, match="priority"):
            mw(app, gate, priority=5)
        assert gate.inflight == 0 and gate.waiting() == 0


def test_backoff_attempt_zero_is_not_a_retry():
    # 1 is the first retry; 0 is refused as in the C ABI and Node, and changes nothing.
    b = sg.Backoff(seed=1)
    with pytest.raises(ValueError, match="attempt"):
        b.next_delay(0)
    with pytest.raises(ValueError, match="attempt"):
        b.ceiling(0)
    assert b.ceiling(1) > 0


def test_percent_can_retry_is_a_fraction():
    # 10 could mean 10% or 1000%: refused (as in Node); retry_ratio says "per request".
    with pytest.raises(ValueError, match="retry_ratio"):
        sg.RetryBudget(percent_can_retry=10)
    with pytest.raises(TypeError):
        sg.RetryBudget(percent_can_retry=0.1, retry_ratio=2)
    b = sg.RetryBudget(retry_ratio=10, min_retries_per_sec=0)
    for _ in range(10):
        b.deposit(now_ns=10**9)
    assert b.available(now_ns=10**9) >= 100


def test_middlewares_refuse_an_object_that_only_has_a_try_acquire():
    # A CircuitBreaker (or a RateLimiter, a KeyedLimits) has a `try_acquire` of another
    # meaning: accepted, it made every request a TypeError (500). Refused at construction.
    import surgeguard.wsgi

    class Duck:
        def try_acquire(self, priority=None):
            return None

    app = lambda *a: None  # noqa: E731
    wrong = [sg.CircuitBreaker(), sg.RateLimiter(10.0), sg.KeyedLimits(2), Duck()]
    for mw in (sg.asgi.OverloadMiddleware, sg.wsgi.OverloadWSGIMiddleware):
        for gate in wrong:
            with pytest.raises(TypeError, match=f"gate must be .*got {type(gate).__name__}"):
                mw(app, gate=gate)
        for gate in (sg.Gate(), sg.Limiter(limit=2)):
            mw(app, gate=gate)  # accepted
    for gate in wrong:
        with pytest.raises(TypeError, match="gate must be"):
            sg.asgi.health(gate)


def test_the_deadline_header_functions_import_from_the_package_as_documented():
    # docs/deadlines.md's Python section: importable from `surgeguard` itself.
    from surgeguard import (
        DEADLINE_HEADERS,
        DEADLINE_MAX_BUDGET_NS,
        deadline_at,
        format_deadline_header,
        parse_deadline_header,
        parse_deadline_headers,
    )

    assert DEADLINE_MAX_BUDGET_NS == 3_600_000_000_000
    assert DEADLINE_HEADERS == ("grpc-timeout", "x-envoy-expected-rq-timeout-ms", "surgeguard-timeout-ms")
    assert parse_deadline_header("grpc-timeout", "250m") == (250_000_000, None)
    assert parse_deadline_header("surgeguard-timeout-ms", "-5") == (None, "negative")
    assert parse_deadline_headers([("grpc-timeout", "2S"), ("surgeguard-timeout-ms", "oops")]) == (
        2_000_000_000,
        [("surgeguard-timeout-ms", "malformed")],
    )
    assert deadline_at(500, now_ns=1_000) == 1_500
    assert format_deadline_header("surgeguard-timeout-ms", 1_000 + 250_000_000, now_ns=1_000) == "250"
    assert format_deadline_header("grpc-timeout", 1_000, now_ns=1_000) is None
    for name in ("parse_deadline_header", "parse_deadline_headers", "deadline_at", "format_deadline_header"):
        assert name in sg.__all__
