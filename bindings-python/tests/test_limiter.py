"""Limiter and algorithm configurations."""

import pytest

import surgeguard as sg
from conftest import MS, SEC


def test_admits_exactly_up_to_the_limit_and_reports_outcomes():
    lim = sg.Limiter(limit=2, levels=1)
    a = lim.try_acquire(now_ns=0)
    b = lim.try_acquire(now_ns=0)
    with pytest.raises(sg.LimitReached) as e:
        lim.try_acquire(now_ns=0)
    assert e.value.reason == "limit_reached" and e.value.retry_after > 0
    assert isinstance(e.value, sg.Rejected) and isinstance(e.value, sg.OverloadError)
    a.success(now_ns=5 * MS)
    b.dropped(now_ns=6 * MS)
    c = lim.try_acquire(now_ns=7 * MS)
    c.ignore(now_ns=8 * MS)
    m = lim.metrics()
    assert (m["inflight"], m["successes"], m["drops"], m["ignored"]) == (0, 1, 1, 1)
    assert (m["admitted"], m["rejected"]) == (3, 1)


def test_context_manager_outcomes_follow_the_exception():
    lim = sg.Limiter(limit=4, levels=1)
    with lim.acquire() as p:
        assert p.held
    assert p.outcome == "success"
    with pytest.raises(TimeoutError):
        with lim.acquire() as p:
            raise TimeoutError
    assert p.outcome == "dropped"
    with pytest.raises(sg.QueueFull):
        with lim.acquire() as p:
            raise sg.QueueFull("downstream", "queue_full", 0.1)
    assert p.outcome == "dropped"
    with pytest.raises(KeyError):
        with lim.acquire() as p:
            raise KeyError
    assert p.outcome == "ignored"
    with lim.acquire() as p:
        p.dropped()
    assert p.outcome == "dropped"
    m = lim.metrics()
    assert (m["successes"], m["drops"], m["ignored"], m["inflight"]) == (1, 3, 1, 0)


def test_configured_overload_exceptions():
    lim = sg.Limiter(limit=2, overload_exceptions=(KeyError,))
    with pytest.raises(KeyError):
        with lim.acquire() as p:
            raise KeyError
    assert p.outcome == "dropped"
    with pytest.raises(TimeoutError):
        with lim.acquire() as p:
            raise TimeoutError
    assert p.outcome == "ignored"
    with pytest.raises(TypeError):
        sg.Limiter(overload_exceptions=(int,))


def test_refused_entry_raises_and_holds_nothing():
    lim = sg.Limiter(limit=1, levels=1)
    held = lim.try_acquire()
    p = lim.acquire()
    with pytest.raises(sg.LimitReached):
        with p:
            pytest.fail("must not enter")
    assert not p.held and p.outcome is None
    held.success()
    assert lim.inflight == 0


def test_garbage_collected_permit_returns_its_slot():
    lim = sg.Limiter(limit=1, levels=1)
    p = lim.try_acquire()
    assert lim.inflight == 1
    del p
    assert lim.inflight == 0
    assert lim.metrics()["ignored"] == 1


def test_priority_shares():
    lim = sg.Limiter(limit=10)  # shares 7 / 2 / 0 of 10
    crit = [lim.try_acquire("critical", now_ns=MS) for _ in range(2)]
    bg = []
    while True:
        try:
            bg.append(lim.try_acquire("background", now_ns=MS))
        except sg.LimitReached:
            break
    # Background may not take everything while critical is active: critical's (demand-
    # bounded) reservation keeps room for it.
    assert 0 < len(bg) < 8
    assert lim.inflight_of("background") == len(bg)
    assert lim.inflight_of(0) == 2
    crit.append(lim.try_acquire("critical", now_ns=MS))
    m = lim.metrics()
    assert m["share_by_level"] == [7, 2, 0] and len(m["demand_by_level"]) == 3
    assert lim.inflight <= 10
    for p in [*crit, *bg]:
        p.success(now_ns=2 * MS)
    assert lim.inflight == 0


@pytest.mark.parametrize(
    "cls,name",
    [
        (sg.FixedLimit, "fixed"),
        (sg.AimdLimit, "aimd"),
        (sg.HysteresisLimit, "hysteresis_aimd"),
        (sg.GradientLimit, "gradient"),
        (sg.Gradient2Limit, "gradient2"),
        (sg.VegasLimit, "vegas"),
    ],
)
def test_algorithm_configs(cls, name):
    a = cls(initial_limit=5, min_limit=1, max_limit=50)
    assert a.name == name
    assert a.config()["initial_limit"] == 5
    assert name in repr(a) or cls.__name__ in repr(a)
    lim = sg.Limiter(a)
    assert lim.limit == 5
    assert lim.metrics()["algorithm"] == name
    assert sg.Limiter(name).metrics()["algorithm"] == name
    with pytest.raises(sg.ConfigError):
        cls(initial_limit=100, max_limit=10)


def test_limit_and_algorithm_are_exclusive():
    with pytest.raises(TypeError):
        sg.Limiter(sg.AimdLimit(), limit=3)


def test_windows_fold_with_injected_time():
    lim = sg.Limiter(limit=100, levels=1)
    t = 0
    for _ in range(12):
        p = lim.try_acquire(now_ns=t)
        t += 20 * MS
        p.success(now_ns=t)
    m = lim.metrics()
    assert m["windows"] >= 1
    assert abs(m["avg_rtt"] - 0.020) < 1e-6


def test_async_with_on_a_limiter():
    import asyncio

    lim = sg.Limiter(limit=1, levels=1)

    async def main():
        async with lim.acquire() as p:
            assert p.held and lim.inflight == 1
            with pytest.raises(sg.LimitReached):
                async with lim.acquire():
                    pass
        assert p.outcome == "success" and lim.inflight == 0

    asyncio.run(main())


def test_algorithm_settings_in_seconds():
    a = sg.AimdLimit(initial_limit=10, target_latency=0.05, timeout=2.0, backoff_ratio=0.8, slow_start=False)
    c = a.config()
    assert c["target_latency"] == 0.05 and c["timeout"] == 2.0 and c["slow_start"] is False
    assert "target_latency=0.05" in repr(a)
    h = sg.HysteresisLimit(target_latency=0.05, cool_off=5.0)
    assert h.config()["cool_off"] == 5.0
    g = sg.GradientLimit(probe_interval=0.0, seed=3)
    assert g.config()["seed"] == 3
    v = sg.VegasLimit(alpha=3, beta=6, decrease_ratio=None)
    assert v.config()["alpha"] == 3 and v.config()["decrease_ratio"] is None
    assert sg.Gradient2Limit(fixed=True).config()["fixed"] is True
    with pytest.raises(ValueError):
        sg.AimdLimit(target_latency=-1)
    with pytest.raises(TypeError):
        sg.AimdLimit(slow_start=1)
    with pytest.raises(sg.ConfigError):
        sg.AimdLimit(backoff_ratio=0.1)


def test_adaptive_limit_backs_off_on_drops():
    lim = sg.Limiter(sg.AimdLimit(initial_limit=20, backoff_ratio=0.5, slow_start=False), levels=1)
    t = 0
    for _ in range(40):
        p = lim.try_acquire(now_ns=t)
        t += 30 * MS
        p.dropped(now_ns=t)
    assert lim.limit < 20


def test_an_abandoned_permit_is_a_drop_only_past_the_last_windows_p99():
    # Windows of at least 10 ms and 5 answers: 10 answers of 10 ms close one (p99 10 ms).
    lim = sg.Limiter(limit=4, levels=1, min_window=0.01, max_window=0.01, min_samples=5)
    t = MS
    for _ in range(10):
        p = lim.try_acquire(now_ns=t)
        p.success(now_ns=t + 10 * MS)
        t += 10 * MS
    before = lim.metrics()
    # Held 50 ms, then the caller went away: what a client's timeout looks like.
    late = lim.try_acquire(now_ns=t)
    late.abandon(now_ns=t + 50 * MS)
    assert late.outcome == "dropped"
    # Gone after 1 ms: says nothing about capacity.
    early = lim.try_acquire(now_ns=t + 50 * MS)
    early.release("abandoned", now_ns=t + 51 * MS)
    assert early.outcome == "ignored"
    m = lim.metrics()
    assert (m["drops"] - before["drops"], m["ignored"] - before["ignored"]) == (1, 1)
    # Twice is refused like any second release, and changes nothing.
    with pytest.raises(sg.UsageError):
        late.abandon(now_ns=t + 60 * MS)
    assert lim.metrics()["drops"] == m["drops"]
