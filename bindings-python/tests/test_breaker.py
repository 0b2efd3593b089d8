"""CircuitBreaker: decorator (sync, async, methods), context manager, explicit calls."""

import asyncio

import pytest

import surgeguard as sg
from conftest import MS, SEC, FakeClock


def small(**kw):
    return sg.CircuitBreaker(window_calls=4, minimum_calls=4, open_duration=30, open_jitter=0, **kw)


def test_opens_after_failures_and_refuses_fast():
    b = small()
    calls = []

    @b
    def dep(fail):
        calls.append(fail)
        if fail:
            raise RuntimeError("down")
        return "ok"

    assert dep(False) == "ok"
    for _ in range(3):
        with pytest.raises(RuntimeError):
            dep(True)
    # 3 failures of 4 calls: 75 % >= 50 %: open.
    assert b.state() == "open" and b.is_open()
    with pytest.raises(sg.BreakerOpen) as e:
        dep(False)
    assert e.value.reason == "breaker_open" and 0 < e.value.retry_after <= 30.01
    assert len(calls) == 4  # the refused call never ran
    m = b.metrics()
    assert (m["opened"], m["rejected"]) == (1, 1)
    assert dep.__name__ == "dep" and dep.__wrapped__ is not None


def test_half_open_probe_then_close_with_injected_time():
    b = small(half_open_probes=1, ramp_duration=0)
    t = SEC
    for ok in (False, False, False, False):
        call = b.try_acquire(now_ns=t)
        (call.success if ok else call.failure)(now_ns=t + MS)
    assert b.state(now_ns=t + 2 * MS) == "open"
    t2 = t + 31 * SEC
    assert b.state(now_ns=t2) == "half_open"
    probe = b.try_acquire(now_ns=t2)
    assert probe.is_probe
    with pytest.raises(sg.BreakerOpen):
        b.try_acquire(now_ns=t2)  # the only probe slot is taken
    probe.success(now_ns=t2 + MS)
    assert b.state(now_ns=t2 + 2 * MS) == "closed"


def test_ignored_exceptions_and_base_exceptions_record_nothing():
    b = small(ignore_exceptions=(KeyError,))

    @b
    def dep(exc):
        raise exc

    for exc in (KeyError, KeyError, KeyError, KeyError):
        with pytest.raises(KeyError):
            dep(exc)
    assert b.metrics()["window_calls"] == 0
    with pytest.raises(KeyboardInterrupt):
        dep(KeyboardInterrupt)
    assert b.metrics()["window_calls"] == 0 and b.state() == "closed"


def test_context_manager_sync_and_nested():
    a, b = small(), small()
    with a as call:
        with b:
            pass
        assert not call.reported
    assert call.reported
    for _ in range(3):  # window [ok, fail, fail, fail]: 75 % failures
        with pytest.raises(ValueError):
            with a:
                raise ValueError
    assert a.state() == "open"
    with pytest.raises(sg.BreakerOpen):
        with a:
            pytest.fail("must not run")
    assert b.state() == "closed"


async def test_async_decorator_and_context_manager_per_task():
    b = small()

    @b
    async def dep(fail):
        await asyncio.sleep(0.001)
        if fail:
            raise ConnectionError
        return 1

    assert await dep(False) == 1

    async def in_block(fail):
        async with b:
            await asyncio.sleep(0.002)
            if fail:
                raise TimeoutError

    results = await asyncio.gather(in_block(False), in_block(True), return_exceptions=True)
    assert results[0] is None and isinstance(results[1], TimeoutError)
    m = b.metrics()
    assert (m["window_calls"], m["window_failures"]) == (3, 1)
    with pytest.raises(asyncio.CancelledError):
        t = asyncio.ensure_future(dep(False))
        await asyncio.sleep(0)
        t.cancel()
        await t
    assert b.metrics()["window_calls"] == 3  # cancellation records nothing


def test_decorating_methods():
    b = small()

    class Client:
        def __init__(self):
            self.n = 0

        @b
        def call(self, x):
            self.n += x
            return self.n

    c = Client()
    assert c.call(2) == 2 and c.call(3) == 5


def test_slow_calls_count():
    b = sg.CircuitBreaker(window_calls=2, minimum_calls=2, slow_call_duration=0.01,
                          slow_call_rate_threshold=1.0, open_jitter=0)
    for _ in range(2):
        call = b.try_acquire(now_ns=SEC)
        call.success(now_ns=SEC + 20 * MS)
    assert b.metrics(now_ns=SEC + 21 * MS)["window_slow"] == 2
    assert b.state(now_ns=SEC + 21 * MS) == "open"


def test_breaker_config_errors():
    with pytest.raises(TypeError):
        sg.CircuitBreaker(window_calls=10, window_time=5.0)
    with pytest.raises(sg.ConfigError):
        sg.CircuitBreaker(window_calls=0)
    with pytest.raises(TypeError):
        sg.CircuitBreaker(failure_exceptions=(int,))


def test_breaker_with_a_clock_opens_and_recovers_without_sleeping():
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
