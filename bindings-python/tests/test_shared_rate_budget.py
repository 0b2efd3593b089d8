"""RateLimiter.shared and RetryBudget.shared: one rate and one retry budget across
processes, with the in-process API; bad input refused.
"""

import os
import sys
import time

import pytest

import surgeguard

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="shared memory is Linux-only")

SEC = 1_000_000_000


def unique(tag):
    return f"pytest-{tag}-{os.getpid()}-{time.monotonic_ns()}"


def in_children(n, fn):
    """Runs fn() in n forked children at once; returns their exit codes' sum of results (0-255)."""
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 255
            try:
                os.read(go_r, 1)
                code = fn()
            finally:
                os._exit(code)
        pids.append(pid)
    os.write(go_w, b"g" * n)
    return [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]


@pytest.mark.parametrize("by_name", [True, False])
def test_one_rate_across_processes(by_name):
    name = unique("rate") if by_name else None
    rate = surgeguard.RateLimiter.shared(name, 1, burst=10)  # 10 now, then 1 per second
    try:
        assert isinstance(rate, surgeguard.RateLimiter) and rate.burst == 10 and rate.per_second == 1
        now = surgeguard.clock_ns()

        def child():
            r = surgeguard.RateLimiter.shared(name, 1, burst=10) if by_name else rate
            return sum(r.try_acquire(now_ns=now) for _ in range(10))

        taken = in_children(4, child)
        # 40 asks at one instant, burst 10: exactly 10 allowed in all (4 x 10 unshared).
        assert sum(taken) == 10, taken
        assert rate.available(now_ns=now) == 0
        assert not rate.try_acquire(now_ns=now)
        assert rate.try_acquire(now_ns=now + SEC)  # one more a second later
        m = rate.metrics()
        assert m["allowed"] == 11 and m["denied"] == 31
        if by_name:
            with pytest.raises(ValueError, match="another config"):
                surgeguard.RateLimiter.shared(name, 2, burst=10)
            with pytest.raises(ValueError, match="another config"):
                surgeguard.RateLimiter.shared(name, 1, burst=11)
    finally:
        if by_name:
            surgeguard.Limiter.unlink(name)


@pytest.mark.parametrize("by_name", [True, False])
def test_one_retry_budget_across_processes(by_name):
    name = unique("budget") if by_name else None
    cfg = dict(ttl=10.0, min_retries_per_sec=0, percent_can_retry=0.5)
    budget = surgeguard.RetryBudget.shared(name, **cfg)
    try:
        assert isinstance(budget, surgeguard.RetryBudget)
        now = surgeguard.clock_ns()

        def child():
            b = surgeguard.RetryBudget.shared(name, **cfg) if by_name else budget
            for _ in range(10):
                b.deposit(now_ns=now)
            return 0

        assert in_children(4, child) == [0, 0, 0, 0]
        # 40 requests deposited by four processes: 50% of them may be retried, here.
        assert budget.available(now_ns=now) == 20
        assert sum(budget.try_withdraw(now_ns=now) for _ in range(25)) == 20
        with pytest.raises(surgeguard.RetryBudgetExhausted):
            budget.withdraw(now_ns=now)
        if by_name:
            with pytest.raises(ValueError, match="another config"):
                surgeguard.RetryBudget.shared(name, ttl=10.0, min_retries_per_sec=0, percent_can_retry=0.4)
    finally:
        if by_name:
            surgeguard.Limiter.unlink(name)


@pytest.mark.parametrize("name", [1, b"x", 2.5, object()])
def test_a_name_of_another_type_is_refused(name):
    with pytest.raises(TypeError, match="name must be a str or None"):
        surgeguard.RateLimiter.shared(name, 1)
    with pytest.raises(TypeError, match="name must be a str or None"):
        surgeguard.RetryBudget.shared(name)


@pytest.mark.parametrize("name", ["", "y" * 201, "a b", "..", "a\x00"])
def test_a_bad_name_is_refused(name):
    with pytest.raises(ValueError, match="bad shared segment name"):
        surgeguard.RateLimiter.shared(name, 1)
    with pytest.raises(ValueError, match="bad shared segment name"):
        surgeguard.RetryBudget.shared(name)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "1", None])
def test_a_bad_config_is_refused_and_makes_no_segment(bad):
    name = unique("badcfg")
    with pytest.raises((ValueError, TypeError)):
        surgeguard.RateLimiter.shared(name, bad)
    if bad is not None:
        with pytest.raises((ValueError, TypeError)):
            surgeguard.RetryBudget.shared(name, percent_can_retry=bad)
    with pytest.raises(TypeError):
        surgeguard.RetryBudget.shared(name, percent_can_retry=0.1, retry_ratio=0.1)
    assert not os.path.exists(f"/dev/shm/surgeguard.{name}")


def test_a_name_made_by_another_kind_is_refused():
    name = unique("kind")
    surgeguard.RateLimiter.shared(name, 1)
    try:
        with pytest.raises(ValueError):
            surgeguard.RetryBudget.shared(name)
        with pytest.raises(ValueError):
            surgeguard.Limiter.shared(name, limit=1)
    finally:
        surgeguard.Limiter.unlink(name)
