"""RateLimiter, PacedDrain, Credits, LagMeter, Watermarks, KeyedLimits, actionable."""

import json

import pytest

import surgeguard as sg
from conftest import MS, SEC


def test_rate_limiter_gcra():
    r = sg.RateLimiter(10, burst=5)
    now = 7 * SEC
    assert [r.try_acquire(now_ns=now) for _ in range(6)] == [True] * 5 + [False]
    with pytest.raises(sg.RateLimited) as e:
        r.check(now_ns=now)
    assert e.value.retry_after == pytest.approx(0.1)
    assert r.wait_time(now_ns=now) == pytest.approx(0.1)
    assert r.wait_time(6, now_ns=now) == float("inf")
    assert r.available(now_ns=now + SEC) == 5
    assert r.take_up_to(3, now_ns=now + SEC) == 3
    m = r.metrics()
    assert (m["allowed"], m["burst"]) == (8, 5) and m["per_second"] == pytest.approx(10)
    assert r.per_second == pytest.approx(10) and r.burst == 5


def test_paced_drain():
    d = sg.PacedDrain(1000.0)
    t0 = 10 * SEC
    assert d.permits(1_000_000, now_ns=t0) == 80
    assert d.permits(1_000_000, now_ns=t0 + 10 * MS) == 8
    assert d.permits(3, now_ns=t0 + 20 * MS) == 3
    assert d.drain_per_sec == pytest.approx(800)
    assert d.next_permit_in(now_ns=t0 + 20 * MS) >= 0
    assert d.time_to_drain(1600, 0.0) == pytest.approx(2.0)
    assert d.time_to_drain(1, 900.0) is None
    assert sg.time_to_drain(3_600_000, 1200.0, 1000.0) == pytest.approx(5 * 3600)
    assert d.metrics()["started"] == 91
    with pytest.raises(sg.ConfigError):
        sg.PacedDrain(100.0, headroom=1.0)


def test_credits():
    c = sg.Credits(capacity=4, low_water=1)
    assert c.stalled and c.replenish() == 4
    for _ in range(4):
        c.take()
    assert not c.try_take()
    with pytest.raises(sg.NoCredit):
        c.take()
    c.complete(2)
    assert c.grant_due() == 0 and c.replenish() == 0
    c.complete()
    assert c.replenish() == 3
    assert (c.available, c.buffered, c.outstanding) == (3, 1, 4)
    with pytest.raises(sg.UsageError):
        c.complete(5)
    assert c.buffered == 1
    assert c.take_up_to(10) == 3 and c.grant(10) == 0
    m = c.metrics()
    assert m["taken"] == 7 and m["refused"] == 2


def test_lag_meter():
    lag = sg.LagMeter(bucket=1.0)
    for s in range(0, 6):
        lag.record_produced(100, now_ns=s * SEC)
        lag.record_consumed(50, now_ns=s * SEC)
    now = 6 * SEC
    assert lag.lag(now_ns=now) == 300
    assert lag.produce_rate(now_ns=now) == pytest.approx(100)
    assert lag.consume_rate(now_ns=now) == pytest.approx(50)
    assert lag.lag_seconds(now_ns=now) == pytest.approx(6.0)
    assert lag.time_to_drain(now_ns=now) is None  # growing
    assert lag.time_to_drain_exceeds(60, now_ns=now)
    lag.report_oldest(2 * SEC, now_ns=now)
    assert lag.oldest_age(now_ns=now) == pytest.approx(4.0)
    m = lag.metrics(now_ns=now)
    assert m["lag"] == 300 and m["rates_known"]


def test_lag_meter_counts_are_u64_and_bad_counts_change_nothing():
    lag = sg.LagMeter()
    lag.record_produced(2**40, now_ns=0)  # a byte count, beyond u32
    lag.record_consumed(2**33, now_ns=0)
    assert lag.lag(now_ns=0) == 2**40 - 2**33
    for bad in (-1, 2**64, 1.5, "3"):
        with pytest.raises((ValueError, TypeError, OverflowError)):
            lag.record_produced(bad, now_ns=0)
    assert lag.lag(now_ns=0) == 2**40 - 2**33


def test_watermarks():
    wm = sg.Watermarks()
    assert wm.observe(250, now_ns=0) is None
    assert wm.observe(301, now_ns=1) == "pause" and wm.paused
    assert wm.observe(250, now_ns=2) is None
    assert wm.observe(199, now_ns=3) == "resume"
    m = wm.metrics(now_ns=3)
    assert (m["pauses"], m["resumes"]) == (1, 1)
    with pytest.raises(sg.ConfigError):
        sg.Watermarks(capacity=10, pause_below=5, resume_above=4)


def test_keyed_limits_isolate_a_noisy_key():
    t = sg.KeyedLimits(1, shards=64, hash_seed=7)
    assert t.key_limit == 2 and t.shards == 64
    assert t.shards_of("tenant-a") != t.shards_of("tenant-b")
    held = [t.try_acquire("tenant-a"), t.try_acquire("tenant-a")]
    with pytest.raises(sg.KeyLimit) as e:
        t.try_acquire("tenant-a")
    assert e.value.reason == "key_limit" and e.value.retry_after == 1.0
    with t.try_acquire("tenant-b") as p:
        assert p.held
    assert not p.held
    for p in held:
        p.release()
    m = t.metrics()
    assert m["in_flight"] == 0 and m["rejected_key_limit"] == 1
    assert m["top_keys"][0]["key_hash"] == t.hash("tenant-a")
    assert t.hash("tenant-a") == sg.hash_key(7, "tenant-a") == sg.hash_key(7, b"tenant-a")
    assert t.isolation()["unaffected"] > 0.999


def test_keyed_rate_and_gc():
    t = sg.KeyedLimits(100, shards=8, shards_per_key=1, rate=10, burst=2, hash_seed=1)
    now = SEC
    a = t.try_acquire("k", now_ns=now)
    b = t.try_acquire("k", now_ns=now)
    with pytest.raises(sg.KeyRate) as e:
        t.try_acquire("k", now_ns=now)
    assert e.value.retry_after == pytest.approx(0.1)
    del a, b  # garbage-collected permits return their slots
    assert t.metrics()["in_flight"] == 0
    with pytest.raises(TypeError):
        sg.KeyedLimits(1, burst=3)
    with pytest.raises(TypeError):
        t.try_acquire(1.5)


def test_actionable_bodies_are_the_cores():
    a = sg.actionable("key_rate", 29.4)
    assert (a["status"], a["retry_after_s"], a["reason"]) == (429, 30, "key_rate")
    assert a["body"] == (
        b'{"error": "too many requests", "reason": "key_rate", "retry_after_s": 30, '
        b'"retry": "not before retry_after_s"}'
    )
    assert json.loads(a["body"])["retry_after_s"] == 30
    g = sg.actionable(sg.QueueFull("q", "queue_full", 0.2))
    assert (g["status"], g["retry_after_s"], g["error"]) == (503, 1, "service overloaded")
    with pytest.raises(ValueError):
        sg.actionable("no_such_reason", 1)
    with pytest.raises(TypeError):
        sg.actionable(42)


# An infinite retry_after never reaches the wire.
def test_infinite_retry_after_is_capped_on_the_wire():
    table = sg.KeyedLimits(8, rate=1.0, burst=2)
    with pytest.raises(sg.KeyRate) as info:
        table.try_acquire("k", cost=5)  # more than the burst: never admitted
    assert info.value.retry_after == float("inf")
    a = sg.actionable(info.value)
    assert a["retry_after_s"] == 86_400
    assert b"18446744074" not in a["body"]
    assert sg.actionable("key_rate", float("inf"))["retry_after_s"] == 86_400


def test_time_to_drain_refuses_nan_and_negative_rates():
    for args in ((10, float("nan"), 1), (10, 1, float("nan")), (10, -1, 1), (10, float("inf"), 1)):
        with pytest.raises(ValueError):
            sg.time_to_drain(*args)
    assert sg.time_to_drain(10, 1, 2) is None  # never drains: a real answer
