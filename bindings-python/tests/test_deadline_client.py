"""The httpx transports under a deadline: outgoing headers, fail fast, retries within the
budget; the retry decorator never retries past the deadline."""

import asyncio
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import surgeguard as sg
from surgeguard import deadline
from surgeguard.httpx import AsyncRetryTransport, LatencyEstimate, RetryTransport

SEC = 1_000_000_000


class Recorder:
    """A mock dependency: records each request's headers, arrival and timeouts."""

    def __init__(self, status=200, headers=None, delay=0.0, raise_exc=None):
        self.seen = []
        self.status = status
        self.headers = headers or {}
        self.delay = delay
        self.raise_exc = raise_exc

    def __call__(self, request):
        self.seen.append(
            {
                "headers": dict(request.headers),
                "at": sg.clock_ns(),
                "timeout": dict(request.extensions.get("timeout") or {}),
            }
        )
        if self.delay:
            time.sleep(self.delay)
        if self.raise_exc is not None:
            raise self.raise_exc
        return httpx.Response(self.status, headers=self.headers)


def client(rec, **kwargs):
    return httpx.Client(transport=RetryTransport(httpx.MockTransport(rec), **kwargs), base_url="http://dep")


def test_no_deadline_no_header():
    rec = Recorder()
    client(rec).get("/")
    assert "surgeguard-timeout-ms" not in rec.seen[0]["headers"]


def test_the_remaining_budget_minus_the_margin_goes_out():
    rec = Recorder()
    c = client(rec, deadline_headers=("surgeguard-timeout-ms", "grpc-timeout"), margin=0.05)
    with deadline.scope(1.0) as d:
        before = sg.clock_ns()
        c.get("/")
    h = rec.seen[0]["headers"]
    sent_ms = int(h["surgeguard-timeout-ms"])
    # the time left when it was formatted, minus the margin, rounded down: never more
    assert (d - rec.seen[0]["at"]) / 1e6 - 50 - 1 <= sent_ms <= (d - before) / 1e6 - 50
    budget, ignored = sg._native.parse_deadline_headers([("grpc-timeout", h["grpc-timeout"])])
    assert ignored == [] and d - rec.seen[0]["at"] - 50_000_000 - 10**6 <= budget <= d - before - 50_000_000
    # httpx's own timeouts are cut to the time left
    assert all(v is not None and v <= 1.0 for v in rec.seen[0]["timeout"].values())


def test_propagate_false_sends_nothing_and_never_fails_fast():
    rec = Recorder()
    c = client(rec, propagate=False, expected_latency=10.0)
    with deadline.scope(0.01):
        assert c.get("/").status_code == 200
    assert "surgeguard-timeout-ms" not in rec.seen[0]["headers"]


def test_fails_fast_when_the_budget_is_below_the_expected_latency():
    rec = Recorder()
    c = client(rec, expected_latency=0.5)
    with deadline.scope(0.2):
        with pytest.raises(sg.InsufficientBudget) as info:
            c.get("/")
    assert rec.seen == []  # nothing was sent
    assert info.value.expected == 0.5 and 0 < info.value.remaining <= 0.2
    assert isinstance(info.value, sg.DeadlineExceeded) and isinstance(info.value, sg.OverloadError)
    with deadline.scope(deadline_ns=sg.clock_ns() - 1):
        with pytest.raises(sg.DeadlineExceeded):
            c.get("/")
    assert rec.seen == []
    with deadline.scope(2.0):
        assert c.get("/").status_code == 200


def test_less_than_a_millisecond_left_is_not_sent():
    rec = Recorder()
    c = client(rec, margin=0.0)
    with deadline.scope(0.0005):
        with pytest.raises(sg.DeadlineExceeded):
            c.get("/")
    assert rec.seen == []


def test_the_expected_latency_is_learned():
    rec = Recorder(delay=0.03)
    est = LatencyEstimate(window=16, min_samples=4)
    c = client(rec, latency=est)
    with deadline.scope(0.02):
        c.get("/")  # nothing learned yet: sent
    for _ in range(3):
        c.get("/")
    assert 0.03 <= est.median() < 0.5
    n = len(rec.seen)
    with deadline.scope(0.02):
        with pytest.raises(sg.InsufficientBudget):
            c.get("/")
    assert len(rec.seen) == n


def test_a_timeout_past_the_deadline_is_deadline_exceeded():
    def slow(request):
        time.sleep(0.06)
        raise httpx.ReadTimeout("read timed out", request=request)

    c = httpx.Client(transport=RetryTransport(httpx.MockTransport(slow)), base_url="http://dep")
    with deadline.scope(0.05):
        with pytest.raises(sg.DeadlineExceeded) as info:
            c.get("/")
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)


@settings(max_examples=25, deadline=None)
@given(
    budget_ms=st.integers(50, 250),
    retry_after=st.sampled_from([None, "0", "0.02", "0.05", "0.3"]),
    expected=st.sampled_from([None, 0.0, 0.01, 0.04]),
    attempts=st.integers(1, 4),
)
def test_no_retry_starts_that_cannot_finish_and_no_sleep_passes_the_deadline(budget_ms, retry_after, expected, attempts):
    headers = {} if retry_after is None else {"retry-after": retry_after}
    rec = Recorder(status=503, headers=headers)
    sleeps = []

    def sleep(delay):
        sleeps.append((sg.clock_ns(), delay))
        time.sleep(delay)

    c = client(rec, attempts=attempts, sleep=sleep, expected_latency=expected,
               backoff=sg.Backoff(base=0.005, cap=0.02), margin=0.01)
    with deadline.scope(budget_ms / 1000) as d:
        try:
            r = c.get("/")
        except sg.DeadlineExceeded:
            r = None  # the time ran out before an attempt could be sent
    if r is not None:
        assert r.status_code == 503  # the last answer, as is
    assert len(rec.seen) <= attempts
    for at, delay in sleeps:
        # each sleep, and the attempt after it, fit before the deadline
        assert at + delay * SEC + (expected or 0) * SEC < d
    for s in rec.seen[1:]:
        assert s["at"] + (expected or 0) * SEC < d


def test_retries_continue_without_a_deadline():
    rec = Recorder(status=503, headers={"retry-after": "0.3"})
    c = client(rec, attempts=3, sleep=lambda s: None)
    assert c.get("/").status_code == 503 and len(rec.seen) == 3
    rec = Recorder(status=503, headers={"retry-after": "0.3"})
    c = client(rec, attempts=3, sleep=lambda s: None)
    with deadline.scope(0.2):
        assert c.get("/").status_code == 503
    assert len(rec.seen) == 1  # a 0.3 s wait cannot fit in 0.2 s: no retry, no sleep


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"margin": -0.1}, ValueError),
        ({"margin": float("nan")}, ValueError),
        ({"margin": "1"}, TypeError),
        ({"expected_latency": float("inf")}, ValueError),
        ({"expected_latency": -1}, ValueError),
        ({"deadline_headers": ["x-other"]}, ValueError),
        ({"deadline_headers": "grpc-timeout"}, TypeError),
        ({"propagate": 1}, TypeError),
        ({"latency": 3}, TypeError),
    ],
)
def test_bad_transport_arguments(kwargs, error):
    with pytest.raises(error):
        RetryTransport(httpx.MockTransport(Recorder()), **kwargs)
    with pytest.raises(error):
        AsyncRetryTransport(httpx.MockTransport(Recorder()), **kwargs)


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"window": 5000}, {"min_samples": 0}, {"window": 4, "min_samples": 5}])
def test_bad_latency_estimates(kwargs):
    with pytest.raises(ValueError):
        LatencyEstimate(**kwargs)
    with pytest.raises(TypeError):
        LatencyEstimate(window=2.0)


def test_latency_estimate_is_the_median_and_skips_bad_samples():
    est = LatencyEstimate(window=5, min_samples=3)
    for s in (float("nan"), -1.0, float("inf"), 0.1, 0.3):
        est.record(s)
    assert est.median() is None
    est.record(0.2)
    assert est.median() == 0.2
    for s in (1.0, 1.0, 1.0):
        est.record(s)
    assert est.median() == 1.0  # the window keeps the last 5: 0.3 0.2 1 1 1


async def test_async_transport_under_a_deadline():
    rec = Recorder()
    c = httpx.AsyncClient(transport=AsyncRetryTransport(httpx.MockTransport(rec), expected_latency=0.1), base_url="http://dep")
    async with deadline.scope(1.0):
        await c.get("/")
        async with deadline.scope(0.05):
            with pytest.raises(sg.InsufficientBudget):
                await c.get("/")
    assert len(rec.seen) == 1 and 900 <= int(rec.seen[0]["headers"]["surgeguard-timeout-ms"]) <= 995
    rec503 = Recorder(status=503, headers={"retry-after": "0.5"})
    c = httpx.AsyncClient(transport=AsyncRetryTransport(httpx.MockTransport(rec503), attempts=3), base_url="http://dep")
    t0 = time.monotonic()
    async with deadline.scope(0.2):
        assert (await c.get("/")).status_code == 503
    assert len(rec503.seen) == 1 and time.monotonic() - t0 < 0.15


def test_the_retry_decorator_respects_the_deadline():
    calls = []
    slept = []

    @sg.retry(attempts=5, sleep=slept.append, backoff=sg.Backoff(base=0.05, cap=0.05, jitter="none"))
    def flaky():
        calls.append(1)
        raise sg.QueueFull("full", "queue_full", 0.0)

    with deadline.scope(0.12):
        with pytest.raises(sg.QueueFull):
            flaky()
    # delays of 0.05 s: the fake sleep does not advance time, so every retry fits; at
    # most 5 calls, each delay ending before the deadline
    assert len(calls) == 5
    calls.clear()

    @sg.retry(attempts=5, sleep=lambda s: None)
    def late():
        calls.append(1)
        raise sg.DeadlineExceeded()

    with pytest.raises(sg.DeadlineExceeded):
        late()
    assert calls == [1]  # never retried

    calls.clear()

    @sg.retry(attempts=5, sleep=lambda s: None, backoff=sg.Backoff(base=1.0, cap=1.0, jitter="none"))
    def slow_retry():
        calls.append(1)
        raise sg.QueueFull("full", "queue_full", 0.0)

    with deadline.scope(0.5):
        with pytest.raises(sg.QueueFull) as info:
            slow_retry()
    assert calls == [1]
    assert any("after the deadline" in n for n in getattr(info.value, "__notes__", []))
