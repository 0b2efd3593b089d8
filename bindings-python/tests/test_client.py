"""Retry budget, token throttle, adaptive throttle, backoff, retry(), httpx transport."""

import asyncio
import time

import httpx
import pytest

import surgeguard as sg
import surgeguard.httpx as sghttpx
from conftest import MS, SEC, FakeClock


def test_retry_budget_bounds_retries_to_a_share_of_requests():
    b = sg.RetryBudget(ttl=10, min_retries_per_sec=0, percent_can_retry=0.1)
    now = 5 * SEC
    for _ in range(50):
        b.deposit(now_ns=now)
    allowed = sum(b.try_withdraw(now_ns=now) for _ in range(20))
    assert allowed == 5
    with pytest.raises(sg.RetryBudgetExhausted) as e:
        b.withdraw(now_ns=now)
    assert e.value.reason == "budget_exhausted"
    m = b.metrics()
    assert (m["requests"], m["retries_allowed"], m["retries_denied"]) == (50, 5, 16)
    assert b.available(now_ns=now) == 0
    # Deposits expire after the ttl; the reserve is then all that is left (none here).
    assert b.available(now_ns=now + 20 * SEC) == 0
    assert "RetryBudget(" in repr(b)


def test_retry_budget_reserve():
    b = sg.RetryBudget(ttl=1, min_retries_per_sec=3, percent_can_retry=0.1)
    assert sum(b.try_withdraw(now_ns=SEC) for _ in range(10)) == 3


def test_token_retry_throttle():
    t = sg.TokenRetryThrottle(max_tokens=10, token_ratio=0.1)
    assert t.try_retry() and t.retry_allowed
    for _ in range(5):
        t.record(False)
    assert not t.try_retry() and t.tokens == 5
    t.record(True)
    assert t.try_retry()
    m = t.metrics()
    assert (m["failures"], m["successes"], m["retries_allowed"], m["retries_denied"]) == (5, 1, 2, 1)
    with pytest.raises(TypeError):
        t.record(1)
    with pytest.raises(sg.ConfigError):
        sg.TokenRetryThrottle(max_tokens=0)


def test_adaptive_throttle():
    t = sg.AdaptiveThrottle(seed=1)
    now = 10 * SEC
    for _ in range(100):
        t.record(False, now_ns=now)
    assert t.drop_probability(now_ns=now) == 0.75
    refused = sum(t.should_throttle(now_ns=now) for _ in range(2000))
    assert 1300 < refused < 1700  # about 75 %
    with pytest.raises(sg.Throttled):
        for _ in range(100):
            t.check(now_ns=now)
    assert t.metrics()["throttled"] >= refused
    healthy = sg.AdaptiveThrottle(form="ema")
    for _ in range(100):
        healthy.record(True, now_ns=now)
    assert healthy.drop_probability(now_ns=now) == 0
    with pytest.raises(ValueError):
        sg.AdaptiveThrottle(form="other")


def test_backoff_delays():
    b = sg.Backoff(base=0.1, multiplier=2, cap=1.0, jitter="none")
    assert [b.next_delay(i) for i in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.ceiling(3) == 0.4
    assert b.next_delay(1, retry_after=5.0) == 5.0  # never sooner than the server says
    full = sg.Backoff(seed=7)
    ds = [full.next_delay(3) for _ in range(1000)]
    assert all(0 <= d <= 0.4 for d in ds) and max(ds) > 0.39 and min(ds) < 0.01
    same = [sg.Backoff(seed=7).next_delay(2) for _ in range(3)]
    assert same[0] == same[1] == same[2]
    c = full.copy()
    assert c.config()["base"] == 0.1 and c.config()["jitter"] == "full"
    eq = sg.Backoff(jitter="equal", seed=3)
    assert all(0.2 <= eq.next_delay(3) <= 0.4 for _ in range(200))
    dec = sg.Backoff(jitter="decorrelated", seed=3)
    assert all(0.1 <= dec.next_delay(i) <= 1.0 for i in range(1, 50))
    dec.reset()
    with pytest.raises(ValueError):
        sg.Backoff(jitter="chaotic")
    with pytest.raises(sg.ConfigError):
        sg.Backoff(base=1.0, cap=0.5)
    with pytest.raises(ValueError):
        b.next_delay(-1)


def test_retry_decorator_sync():
    calls = []
    slept = []

    @sg.retry(attempts=4, backoff=sg.Backoff(jitter="none"), sleep=slept.append)
    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("down")
        return "ok"

    assert flaky() == "ok"
    assert len(calls) == 3 and slept == [0.1, 0.2]
    assert flaky.__name__ == "flaky"


def test_retry_honours_retry_after_and_max_delay():
    slept = []

    @sg.retry(attempts=3, backoff=sg.Backoff(jitter="none"), sleep=slept.append)
    def refused():
        raise sg.QueueFull("full", "queue_full", 2.5)

    with pytest.raises(sg.QueueFull):
        refused()
    assert slept == [2.5, 2.5]
    slept.clear()

    @sg.retry(attempts=3, max_delay=1.0, sleep=slept.append)
    def far():
        raise sg.BreakerOpen("open", "breaker_open", 60.0)

    with pytest.raises(sg.BreakerOpen):
        far()
    assert slept == []


def test_retry_stops_when_the_budget_is_empty():
    budget = sg.RetryBudget(ttl=10, min_retries_per_sec=0, percent_can_retry=0.5)
    calls = []

    @sg.retry(attempts=10, budget=budget, sleep=lambda s: None)
    def down():
        calls.append(1)
        raise TimeoutError

    for _ in range(4):
        with pytest.raises(TimeoutError):
            down()
    # 4 requests fund 2 retries: 4 first attempts + 2 retries in all.
    assert len(calls) == 6


def test_retry_never_repeats_non_idempotent_work_unless_it_never_ran():
    calls = []

    @sg.retry(attempts=5, idempotent=False, sleep=lambda s: None)
    def post(kind):
        calls.append(kind)
        if kind == "timeout":
            raise TimeoutError  # may have run: not retried
        if len(calls) < 3:
            raise sg.LimitReached("local", "limit_reached", 0.0)  # never ran: retried
        return "ok"

    with pytest.raises(TimeoutError):
        post("timeout")
    assert calls == ["timeout"]
    calls.clear()
    assert post("refused") == "ok" and len(calls) == 3


def test_retry_does_not_retry_other_errors():
    calls = []

    @sg.retry(attempts=5)
    def bug():
        calls.append(1)
        raise ValueError

    with pytest.raises(ValueError):
        bug()
    assert calls == [1]
    with pytest.raises(ValueError):
        sg.retry(attempts=0)


async def test_retry_decorator_async_with_token_throttle():
    throttle = sg.TokenRetryThrottle(max_tokens=4, token_ratio=1)
    calls = []

    @sg.retry(attempts=5, budget=throttle, backoff=sg.Backoff(base=0.001, cap=0.002))
    async def flaky():
        calls.append(1)
        await asyncio.sleep(0)
        raise ConnectionResetError

    with pytest.raises(ConnectionResetError):
        await flaky()
    # 4 tokens: failures take one each; retries stop at or below half (2).
    assert len(calls) == 2
    assert throttle.tokens == 2


def _mock(statuses, headers=None):
    seen = []

    def handler(request):
        seen.append(request.method)
        status = statuses[min(len(seen) - 1, len(statuses) - 1)]
        return httpx.Response(status, headers=headers or {}, text="x")

    return seen, httpx.MockTransport(handler)


def test_httpx_transport_retries_idempotent_requests():
    seen, mock = _mock([503, 503, 200], {"retry-after": "0"})
    slept = []
    t = sghttpx.RetryTransport(mock, attempts=3, backoff=sg.Backoff(jitter="none", base=0.01), sleep=slept.append)
    with httpx.Client(transport=t) as c:
        r = c.get("http://test/")
    assert r.status_code == 200 and seen == ["GET", "GET", "GET"]
    assert slept == [0.01, 0.02]


def test_httpx_transport_honours_retry_after_and_leaves_post_alone():
    seen, mock = _mock([429, 200], {"retry-after": "3"})
    slept = []
    t = sghttpx.RetryTransport(mock, sleep=slept.append)
    with httpx.Client(transport=t) as c:
        assert c.get("http://test/").status_code == 200
        assert slept == [3.0]
        seen.clear()
        r = c.post("http://test/", content=b"x")
        assert r.status_code == 429 and seen == ["POST"]
        seen.clear()
        r = c.post("http://test/", content=b"x", headers={"Idempotency-Key": "k1"})
        assert r.status_code == 200 and seen == ["POST", "POST"]


def test_httpx_transport_budget_and_breaker():
    budget = sg.RetryBudget(min_retries_per_sec=0, percent_can_retry=0.5)
    breaker = sg.CircuitBreaker(window_calls=4, minimum_calls=4, open_duration=30)
    seen, mock = _mock([503])
    t = sghttpx.RetryTransport(mock, attempts=5, budget=budget, breaker=breaker, sleep=lambda s: None)
    with httpx.Client(transport=t) as c:
        r = c.get("http://test/")
        assert r.status_code == 503
        assert len(seen) == 1  # one request funds half a retry: none allowed
        gets = 1
        with pytest.raises(sg.BreakerOpen):
            while gets < 10:
                c.get("http://test/")
                gets += 1
        # The breaker opened after its 4-call window filled with failures ...
        assert gets <= 4
        # ... and retries stayed within the budget: 50 % of requests.
        assert len(seen) <= gets + gets // 2


async def test_async_httpx_transport():
    seen, mock = _mock([502, 200])
    t = sghttpx.AsyncRetryTransport(mock, backoff=sg.Backoff(base=0.001, cap=0.001))
    async with httpx.AsyncClient(transport=t) as c:
        r = await c.get("http://test/")
    assert r.status_code == 200 and len(seen) == 2


def test_parse_retry_after():
    from surgeguard.retry import parse_retry_after, retry_after_of

    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("nonsense") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert retry_after_of(sg.Shed("s", "shed", 1.5)) == 1.5
    assert retry_after_of(ValueError()) is None


def test_httpx_transport_does_not_count_a_retry_given_up_for_max_delay():
    budget = sg.RetryBudget(min_retries_per_sec=1, percent_can_retry=0.0)
    seen, mock = _mock([503, 200], {"retry-after": "60"})
    t = sghttpx.RetryTransport(mock, budget=budget, max_delay=1.0, sleep=lambda s: None)
    before = budget.available()
    with httpx.Client(transport=t) as c:
        assert c.get("http://test/").status_code == 503
    assert seen == ["GET"] and budget.available() == before


def test_retry_on_is_checked_at_decoration():
    for bad in (42, (ValueError, 42), "ValueError", None):
        with pytest.raises(TypeError, match="retry_on"):
            sg.retry(retry_on=bad)
    with pytest.raises(TypeError, match="sleep"):
        sg.retry(sleep=3)


# @retry does not count a retry it never made.
def test_retry_given_up_for_max_delay_takes_nothing_from_the_budget():
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


def test_limiter_and_retry_take_a_clock():
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
