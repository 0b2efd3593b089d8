"""Graceful degradation: run / run_async fallbacks, StaleIfError, optional (the dimmer)."""

import asyncio
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import surgeguard as sg
from surgeguard import degrade

SEC = 1_000_000_000

REFUSALS = [
    sg.QueueFull("full", "queue_full", 0.1),
    sg.LimitReached("limit", "limit_reached", 0.0),
    sg.Expired("late", "expired", 0.0),
    sg.BreakerOpen("open", "breaker_open", 5.0),
    sg.RetryBudgetExhausted("no", "budget_exhausted", 0.0),
    sg.DeadlineExceeded(),
    sg.InsufficientBudget(remaining=0.01, expected=0.05),
    TimeoutError("slow"),
    asyncio.TimeoutError(),
]
BUGS = [
    sg.UsageError("twice", "already_released"),
    sg.ConfigError("bad", "limit"),
    TypeError("wrong type"),
    AttributeError("no such attribute"),
    AssertionError("broken invariant"),
    NameError("undefined"),
]


def raiser(exc):
    def f():
        raise exc

    return f


def araiser(exc):
    async def f():
        raise exc

    return f


@pytest.mark.parametrize("exc", REFUSALS, ids=lambda e: type(e).__name__)
def test_run_falls_back_on_refusals_timeouts_and_deadlines(exc):
    seen = []
    assert sg.run(raiser(exc), lambda e: seen.append(e) or "fallback") == "fallback"
    assert seen == [exc]
    assert sg.run(raiser(exc), default=42) == 42


@pytest.mark.parametrize("exc", BUGS, ids=lambda e: type(e).__name__)
def test_run_never_hides_a_bug(exc):
    with pytest.raises(type(exc)):
        sg.run(raiser(exc), default=1)
    # not even when asked to fall back on every Exception
    with pytest.raises(type(exc)):
        sg.run(raiser(exc), default=1, on=Exception)


def test_run_other_errors_propagate_unless_named():
    with pytest.raises(ConnectionError):
        sg.run(raiser(ConnectionError("down")), default=1)
    assert sg.run(raiser(ConnectionError("down")), default=1, on=ConnectionError) == 1
    with pytest.raises(KeyboardInterrupt):
        sg.run(raiser(KeyboardInterrupt()), default=1, on=BaseException)


def test_run_returns_the_value_and_a_failing_fallback_propagates():
    assert sg.run(lambda: 7, default=1) == 7
    with pytest.raises(ZeroDivisionError):
        sg.run(raiser(sg.QueueFull()), lambda e: 1 / 0)


def test_run_skips_the_call_once_the_deadline_passed():
    calls = []
    with sg.deadline.scope(deadline_ns=sg.clock_ns() - 1):
        got = sg.run(lambda: calls.append(1), lambda e: type(e).__name__)
    assert calls == [] and got == "DeadlineExceeded"


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"fallback": 1}, {"fallback": lambda e: 1, "default": 2}, {"default": 1, "on": 3}, {"default": 1, "on": (int,)}],
)
def test_run_bad_arguments_are_type_errors_and_call_nothing(kwargs):
    calls = []
    with pytest.raises(TypeError):
        sg.run(lambda: calls.append(1), **kwargs)
    assert calls == []
    with pytest.raises(TypeError):
        sg.run(42, default=1)


async def test_run_async_falls_back_and_bugs_propagate():
    for exc in REFUSALS:
        assert await sg.run_async(araiser(exc), default="fb") == "fb"

    async def afallback(e):
        return "async fb"

    assert await sg.run_async(araiser(sg.Shed()), afallback) == "async fb"
    for exc in BUGS:
        with pytest.raises(type(exc)):
            await sg.run_async(araiser(exc), default=1, on=Exception)
    with pytest.raises(TypeError):
        await sg.run_async(lambda: 3, default=1)  # not an awaitable: a bug


async def test_run_async_cuts_the_call_at_the_deadline():
    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with sg.deadline.scope(0.05):
        got = await sg.run_async(slow, lambda e: type(e).__name__)
    assert got == "DeadlineExceeded"
    assert cancelled == [True]
    assert loop.time() - t0 < 2


async def test_run_async_cancellation_is_not_a_refusal():
    async def slow():
        await asyncio.sleep(5)

    task = asyncio.ensure_future(sg.run_async(slow, default=1))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# ---------------------------------------------------------------- StaleIfError


class Clock:
    def __init__(self):
        self.t = 1_000 * SEC

    def __call__(self):
        return self.t


def test_stale_if_error_serves_the_last_good_value_marked_stale():
    clock = Clock()
    cache = sg.StaleIfError(max_entries=4, max_age=10, clock=clock)
    fresh = cache.get("k", lambda: "v1")
    assert fresh == sg.Served("v1") and not fresh.stale
    clock.t += 3 * SEC
    err = sg.QueueFull("full", "queue_full", 1.0)
    stale = cache.get("k", raiser(err))
    assert stale.value == "v1" and stale.stale and stale.error is err
    assert stale.age == pytest.approx(3.0)
    assert cache.metrics()["served_stale"] == 1
    clock.t += 8 * SEC  # 11 s old: beyond max_age
    with pytest.raises(sg.QueueFull):
        cache.get("k", raiser(err))
    assert len(cache) == 0  # the expired entry was dropped when touched


def test_stale_if_error_never_serves_stale_for_a_bug():
    cache = sg.StaleIfError(clock=Clock())
    cache.get("k", lambda: 1)
    for exc in BUGS:
        with pytest.raises(type(exc)):
            cache.get("k", raiser(exc))
    assert cache.metrics()["served_stale"] == 0


def test_stale_if_error_bad_arguments_change_nothing():
    cache = sg.StaleIfError(max_entries=2, clock=Clock())
    cache.get("a", lambda: 1)
    before = cache.metrics()
    with pytest.raises(TypeError):
        cache.get(["unhashable"], lambda: 1)
    with pytest.raises(TypeError):
        cache.put({}, 1)
    with pytest.raises(TypeError):
        cache.get("a", 5)
    assert cache.metrics() == before and cache.peek("a").value == 1
    for kwargs, error in [
        ({"max_entries": 0}, ValueError),
        ({"max_entries": True}, TypeError),
        ({"max_entries": 1.5}, TypeError),
        ({"max_age": 0}, ValueError),
        ({"max_age": float("nan")}, ValueError),
        ({"max_age": float("inf")}, ValueError),
        ({"max_age": -1}, ValueError),
        ({"max_age": "5"}, TypeError),
        ({"on": 5}, TypeError),
        ({"clock": 5}, TypeError),
    ]:
        with pytest.raises(error):
            sg.StaleIfError(**kwargs)


@settings(max_examples=150, deadline=None)
@given(
    max_entries=st.integers(1, 4),
    max_age=st.integers(1, 5),
    ops=st.lists(
        st.tuples(st.sampled_from(["ok", "fail", "tick"]), st.integers(0, 5), st.integers(0, 3)),
        max_size=60,
    ),
)
def test_stale_if_error_against_a_reference_model(max_entries, max_age, ops):
    """The documented rule: a success stores (most recently used); a failure serves the
    stored value if at most max_age old (touching it), else raises; beyond max_entries
    the least recently used key goes."""
    clock = Clock()
    cache = sg.StaleIfError(max_entries=max_entries, max_age=max_age, clock=clock)
    model = {}  # key -> (value, stored_at); dict order = LRU order (first = oldest use)
    for i, (op, key, dt) in enumerate(ops):
        if op == "tick":
            clock.t += dt * SEC
            continue
        if op == "ok":
            got = cache.get(key, lambda: i)
            assert got == sg.Served(i)
            model.pop(key, None)
            model[key] = (i, clock.t)
            while len(model) > max_entries:
                del model[next(iter(model))]
        else:
            entry = model.get(key)
            fresh = entry is not None and clock.t - entry[1] <= max_age * SEC
            if fresh:
                got = cache.get(key, raiser(ConnectionError()))
                assert got.stale and got.value == entry[0]
                model[key] = model.pop(key)  # touched: most recently used
            else:
                with pytest.raises(ConnectionError):
                    cache.get(key, raiser(ConnectionError()))
                model.pop(key, None)
        assert len(cache) <= max_entries
    assert {k for k in model if clock.t - model[k][1] <= max_age * SEC} <= {
        k for k in range(6) if cache.peek(k) is not None
    }


async def test_stale_if_error_async_and_threads():
    cache = sg.StaleIfError(max_entries=64)

    async def ok():
        return "v"

    assert (await cache.get_async("k", ok)).value == "v"
    got = await cache.get_async("k", araiser(sg.BreakerOpen("open", "breaker_open", 1.0)))
    assert got.stale and got.value == "v"

    def hammer(seed):
        rnd = random.Random(seed)
        for i in range(2000):
            k = rnd.randrange(200)
            if rnd.random() < 0.5:
                cache.put(k, i)
            else:
                try:
                    cache.get(k, raiser(ConnectionError()))
                except ConnectionError:
                    pass

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= 64


# ---------------------------------------------------------------- optional (the dimmer)


class FixedDimmer:
    def __init__(self, d):
        self.d = d

    def brownout(self):
        return self.d


@pytest.mark.parametrize("d", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_optional_runs_with_probability_one_minus_d(d):
    rnd = random.Random(1)
    n = 4000
    ran = sum(sg.optional(FixedDimmer(d), rnd.random) for _ in range(n))
    assert abs(ran / n - (1 - d)) < 0.03
    # deterministic with a seeded source
    a = [sg.optional(FixedDimmer(d), random.Random(5).random) for _ in range(50)]
    b = [sg.optional(FixedDimmer(d), random.Random(5).random) for _ in range(50)]
    assert a == b


def test_optional_rejects_bad_input():
    with pytest.raises(TypeError):
        sg.optional(object())
    with pytest.raises(TypeError):
        sg.optional(FixedDimmer(0.5), random=3)
    with pytest.raises(ValueError):
        sg.optional(FixedDimmer(0.5), random=lambda: 1.5)
    with pytest.raises(TypeError):
        sg.optional(FixedDimmer(0.5), random=lambda: "x")


def test_mark_stale_outside_a_middleware_is_a_no_op():
    degrade.mark_stale()


async def test_optional_follows_the_gates_dimmer():
    gate = sg.Gate(limit=1, levels=1, queue_capacity=10, codel=False)
    rnd = random.Random(3)
    assert gate.brownout() == 0.0
    assert all(sg.optional(gate, rnd.random) for _ in range(200))  # idle: always run
    held = gate.try_acquire()
    waiters = [asyncio.ensure_future(gate.acquire_async().__aenter__()) for _ in range(9)]
    while gate.waiting() < 9:
        await asyncio.sleep(0.001)
    # the queue is 90% full: past the top of the occupancy ramp, optional work is off
    assert gate.brownout() == 1.0
    assert not any(sg.optional(gate, rnd.random) for _ in range(200))
    held.success()
    for w in waiters:
        (await w).success()


def test_stale_if_error_and_deadline_stats_render_as_prometheus():
    cache = sg.StaleIfError(max_entries=8, clock=Clock())
    cache.get("k", lambda: 1)
    cache.get("k", raiser(ConnectionError()))
    stats = sg.deadline.DeadlineStats()
    stats.count("ignored_negative")
    text = sg.prometheus.render({"prices": cache, "api": stats})
    assert "# TYPE surgeguard_stale_if_error_served_stale_total counter" in text
    assert 'surgeguard_stale_if_error_served_stale_total{name="prices"} 1' in text
    assert 'surgeguard_stale_if_error_entries{name="prices"} 1' in text
    assert "# TYPE surgeguard_deadline_ignored_negative_total counter" in text
    assert 'surgeguard_deadline_ignored_negative_total{name="api"} 1' in text
    assert 'surgeguard_deadline_ignored_malformed_total{name="api"} 0' in text
