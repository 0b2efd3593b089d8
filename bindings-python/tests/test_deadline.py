"""The deadline context variable: scope, current, remaining, check."""

import asyncio
import contextvars
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import surgeguard as sg
from surgeguard import deadline

SEC = 1_000_000_000


def test_no_deadline_by_default():
    assert deadline.current() is None
    assert deadline.remaining() is None
    deadline.check()  # no deadline: never raises


def test_scope_sets_and_restores():
    t0 = sg.clock_ns()
    with deadline.scope(0.5) as d:
        assert d == deadline.current()
        assert t0 + SEC // 2 <= d <= sg.clock_ns() + SEC // 2
        assert 0.4 < deadline.remaining() <= 0.5
    assert deadline.current() is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 10 * SEC)), min_size=1, max_size=6))
def test_nested_scopes_take_the_earliest(budgets):
    now = 1_000 * SEC
    expected = []
    scopes = []
    for b in budgets:
        scopes.append(deadline.scope(None if b is None else b / SEC, now_ns=now))
    entered = []
    try:
        best = None
        for b, s in zip(budgets, scopes):
            d = s.__enter__()
            entered.append(s)
            if b is not None:
                cand = now + round(b / SEC * SEC)
                best = cand if best is None else min(best, cand)
            # within float rounding of the seconds -> ns conversion
            if best is None:
                assert d is None
            else:
                assert abs(d - best) <= 2
            expected.append(d)
            assert deadline.current() == d
    finally:
        for s in reversed(entered):
            s.__exit__(None, None, None)
    assert deadline.current() is None
    # never extended by an inner scope
    for a, b in zip(expected, expected[1:]):
        if a is not None:
            assert b is not None and b <= a


def test_remaining_and_check_after_the_deadline():
    with deadline.scope(deadline_ns=sg.clock_ns() - 1):
        assert deadline.remaining() == 0.0
        with pytest.raises(sg.DeadlineExceeded) as info:
            deadline.check()
        assert info.value.reason == "deadline_exceeded"
        assert isinstance(info.value, sg.OverloadError)
    with deadline.scope(deadline_ns=10 * SEC):
        assert deadline.remaining(now_ns=4 * SEC) == 6.0
        deadline.check(now_ns=9 * SEC)
        with pytest.raises(sg.DeadlineExceeded):
            deadline.check(now_ns=10 * SEC)


@pytest.mark.parametrize(
    "args,kwargs,error",
    [
        ((float("nan"),), {}, ValueError),
        ((float("inf"),), {}, ValueError),
        ((-0.001,), {}, ValueError),
        (("1",), {}, TypeError),
        ((True,), {}, TypeError),
        ((1.0,), {"deadline_ns": 5}, TypeError),
        ((), {"deadline_ns": -1}, ValueError),
        ((), {"deadline_ns": 2**62 + 1}, ValueError),
        ((), {"deadline_ns": 1.5}, TypeError),
        ((1.0,), {"now_ns": 2**62 + 1}, ValueError),
        ((1.0,), {"now_ns": -1}, ValueError),
        ((), {"deadline_ns": 5, "now_ns": 1}, TypeError),
    ],
)
def test_bad_scopes_are_refused_and_change_nothing(args, kwargs, error):
    with pytest.raises(error):
        deadline.scope(*args, **kwargs)
    assert deadline.current() is None


def test_bad_now_is_refused():
    with pytest.raises(ValueError):
        deadline.remaining(now_ns=2**62 + 1)
    with pytest.raises(TypeError):
        deadline.remaining(now_ns="1")


def test_huge_budgets_saturate_instead_of_overflowing():
    with deadline.scope(1e300, now_ns=0) as d:
        assert d == 2**62
    with deadline.scope(1e300) as d:
        assert d == 2**62


def test_a_scope_cannot_be_entered_twice():
    s = deadline.scope(1)
    with s:
        with pytest.raises(RuntimeError):
            s.__enter__()
    assert deadline.current() is None


async def test_each_task_has_its_own_deadline():
    seen = {}

    async def worker(name, budget):
        async with deadline.scope(budget):
            await asyncio.sleep(0.01)
            seen[name] = deadline.remaining()

    await asyncio.gather(worker("short", 0.2), worker("long", 5.0), worker("none", None))
    assert seen["short"] < 0.2 and 4 < seen["long"] <= 5.0 and seen["none"] is None
    assert deadline.current() is None


def test_threads_do_not_share_a_deadline():
    out = []
    with deadline.scope(1):
        t = threading.Thread(target=lambda: out.append(deadline.current()))
        t.start()
        t.join()
        # a copied context does carry it (run_in_executor with copy_context, etc.)
        assert contextvars.copy_context().run(deadline.current) == deadline.current()
    assert out == [None]


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
