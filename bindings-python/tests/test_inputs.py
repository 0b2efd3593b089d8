"""Bad input everywhere: clear exceptions, and no state change."""

import math

import pytest

import surgeguard as sg

BAD_SECONDS = [float("nan"), -1.0, -0.001, float("inf"), float("-inf"), 1e30]
WRONG_TYPES = ["1", b"1", [1], None.__class__, object()]


@pytest.mark.parametrize("bad", BAD_SECONDS)
def test_bad_durations_raise_value_error(bad):
    with pytest.raises(ValueError):
        sg.RetryBudget(ttl=bad)
    with pytest.raises(ValueError):
        sg.Backoff(base=bad)
    with pytest.raises(ValueError):
        sg.Gate(limit=1, max_wait=bad)
    with pytest.raises(ValueError):
        sg.CircuitBreaker(open_duration=bad)
    g = sg.Gate(limit=1)
    with pytest.raises(ValueError):
        g.acquire(timeout=bad)


@pytest.mark.parametrize("bad", ["1", b"1", [1], object(), True])
def test_wrong_types_raise_type_error(bad):
    with pytest.raises(TypeError):
        sg.RetryBudget(ttl=bad)
    with pytest.raises(TypeError):
        sg.Gate(limit=1).acquire(timeout=bad)
    with pytest.raises(TypeError):
        sg.RateLimiter(bad)


def test_duration_messages_name_the_argument():
    with pytest.raises(ValueError, match="timeout"):
        sg.Gate(limit=1).acquire(timeout=float("nan"))
    with pytest.raises(ValueError, match=">= 0"):
        sg.Gate(limit=1).acquire(timeout=-2)
    with pytest.raises(TypeError, match="int or a float"):
        sg.Gate(limit=1).acquire(timeout="soon")


def test_config_errors_are_value_errors_with_a_field():
    with pytest.raises(sg.ConfigError) as e:
        sg.RetryBudget(ttl=0.5)  # core: ttl in [1 s, 60 s]
    assert isinstance(e.value, ValueError)
    assert e.value.field == "ttl"
    with pytest.raises(sg.ConfigError):
        sg.Limiter(weights=[0.9, 0.5, 0.1])  # sum above 1
    with pytest.raises(sg.ConfigError):
        sg.CircuitBreaker(failure_rate_threshold=0.0)


@pytest.mark.parametrize("bad", [-1, 8, 99, "urgent", 1.5, None.__class__])
def test_bad_priorities(bad):
    g = sg.Gate(limit=4)
    with pytest.raises((ValueError, TypeError)):
        g.acquire(priority=bad)
    assert g.inflight == 0


def test_priority_beyond_configured_levels_is_refused():
    g = sg.Gate(limit=4, levels=2)
    with pytest.raises(ValueError, match="out of range"):
        g.try_acquire(priority=2)
    with pytest.raises(ValueError):
        g.try_acquire(priority="background")
    assert g.inflight == 0 and g.metrics()["limiter"]["admitted"] == 0


@pytest.mark.parametrize("bad", [-1, 2**64, "5", 1.0, True])
def test_bad_now_ns(bad):
    lim = sg.Limiter(limit=2)
    with pytest.raises((ValueError, TypeError)):
        lim.try_acquire(now_ns=bad)
    assert lim.inflight == 0


def test_double_release_is_refused_and_changes_nothing():
    g = sg.Gate(limit=2)
    p = g.try_acquire()
    p.success()
    before = g.metrics()["limiter"]
    with pytest.raises(sg.UsageError) as e:
        p.success()
    assert e.value.kind == "already_released"
    with pytest.raises(sg.UsageError):
        p.dropped()
    after = g.metrics()["limiter"]
    assert before == after
    assert p.outcome == "success"


def test_a_permit_of_another_gate_is_refused():
    a, b = sg.Gate(limit=2), sg.Gate(limit=2)
    p = a.try_acquire()
    with pytest.raises(sg.UsageError) as e:
        b.release(p)
    assert e.value.kind == "foreign_handle"
    assert (a.inflight, b.inflight) == (1, 0)
    assert p.held
    a.release(p, "dropped")
    assert a.inflight == 0 and p.outcome == "dropped"


def test_foreign_handles_elsewhere():
    k1, k2 = sg.KeyedLimits(2, shards=8), sg.KeyedLimits(2, shards=8)
    kp = k1.try_acquire("t")
    with pytest.raises(sg.UsageError):
        k2.release(kp)
    assert k1.metrics()["in_flight"] == 1 and kp.held
    k1.release(kp)
    with pytest.raises(sg.UsageError):
        k1.release(kp)
    b1, b2 = sg.CircuitBreaker(), sg.CircuitBreaker()
    call = b1.try_acquire()
    with pytest.raises(sg.UsageError):
        b2.record(call)
    assert not call.reported
    b1.record(call, "success")
    with pytest.raises(sg.UsageError):
        call.success()


def test_bad_outcome_names():
    g = sg.Gate(limit=1)
    p = g.try_acquire()
    with pytest.raises(ValueError):
        p.release("great")
    assert p.held
    p.release("ignored")


def test_unknown_keyword_arguments_are_type_errors():
    with pytest.raises(TypeError):
        sg.Gate(limit=1, capacity=3)
    with pytest.raises(TypeError):
        sg.AimdLimit(bogus=1)
    with pytest.raises(TypeError):
        sg.Limiter(algorithm=42)
    with pytest.raises(ValueError):
        sg.Limiter(algorithm="fastest")


def test_huge_and_nan_numbers_in_configs():
    with pytest.raises(ValueError):
        sg.Limiter(limit=float("nan"))
    with pytest.raises(ValueError):
        sg.Limiter(limit=1e12)
    with pytest.raises(ValueError):
        sg.RateLimiter(float("inf"))
    with pytest.raises(ValueError):
        sg.Gate(limit=1, queue_capacity=10**9)
    with pytest.raises(ValueError):
        sg.Gate(limit=1, queue_capacity=0)
    with pytest.raises(sg.ConfigError):
        sg.KeyedLimits(0)
    with pytest.raises(ValueError):
        sg.KeyedLimits(1, shards=100)
    lim = sg.Limiter(limit=3)
    with pytest.raises(sg.ConfigError):
        lim.set_static_limit(float("nan"))
    assert lim.limit == 3
    assert not math.isnan(lim.limit)


def test_static_limit_kill_switch():
    lim = sg.Limiter(limit=8)
    lim.set_static_limit(2)
    assert lim.limit == 2
    a, b = lim.try_acquire(), lim.try_acquire()
    with pytest.raises(sg.LimitReached):
        lim.try_acquire()
    lim.set_static_limit(None)
    assert lim.limit == 8
    a.success(), b.success()


# Out-of-range integers are ValueError, never OverflowError.
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
def test_out_of_range_ints_are_value_errors(call):
    with pytest.raises(ValueError) as info:
        call()
    assert not isinstance(info.value, OverflowError)


def test_out_of_range_now_changes_nothing():
    g = sg.Gate(limit=2)
    before = g.metrics()
    for bad in (2**62 + 1, 2**64, -1):
        with pytest.raises(ValueError, match="now_ns"):
            g.try_acquire(now_ns=bad)
    assert g.metrics() == before


def test_range_errors_print_short_bounds():
    for kw in ("lifo", "service_alpha"):
        with pytest.raises(ValueError) as info:
            sg.Gate(**{kw: 10**300})
        assert kw in str(info.value) and len(str(info.value)) < 120, str(info.value)


def test_release_names_its_argument():
    p = sg.Gate(limit=2).try_acquire()
    with pytest.raises(TypeError, match="outcome"):
        p.release(42)
    assert p.held  # refused arguments change nothing
    p.release("dropped")
    assert p.outcome == "dropped"


def test_config_errors_name_the_python_option():
    with pytest.raises(sg.ConfigError) as info:
        sg.Gate(min_window=5, max_window=1)
    assert "min_window must not be above max_window" in str(info.value)
    assert info.value.field == "min_window"
    assert "_ns" not in str(info.value) and "_ns" not in info.value.field
