"""The native deadline-header functions and ``Gate.brownout`` at the boundary: bad input
gets a clear error (``TypeError`` for a wrong type, ``ValueError`` for a value out of
range) and changes nothing; a bad header value is never an error, only a reason.

Reference values come from the header formats' definitions (gRPC's PROTOCOL-HTTP2 grammar
for ``grpc-timeout``; whole milliseconds for the others), not from the implementation."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import surgeguard as sg
from surgeguard import _native as n

UNITS = {"H": 3_600_000_000_000, "M": 60_000_000_000, "S": 1_000_000_000, "m": 1_000_000, "u": 1_000, "n": 1}
CAP = 3_600_000_000_000


def reference(name: str, value: bytes) -> tuple[int | None, str | None]:
    text = value.strip(b" \t")
    negative = text.startswith(b"-")
    body = text[1:] if negative else text
    if name.lower() == "grpc-timeout":
        if not body or chr(body[-1]) not in UNITS:
            return None, "malformed"
        digits, per = body[:-1], UNITS[chr(body[-1])]
        if len(digits) > 8:
            return None, "malformed"
    else:
        digits, per = body, 1_000_000
    if not digits or not all(48 <= b <= 57 for b in digits):
        return None, "malformed"
    if negative:
        return None, "negative"
    ns = int(digits) * per
    return (ns, None) if ns <= CAP else (None, "too_large")


NAMES = st.sampled_from(["grpc-timeout", "GRPC-TIMEOUT", "surgeguard-timeout-ms", "x-envoy-expected-rq-timeout-ms", "x-mine"])


@given(NAMES, st.binary(max_size=12) | st.from_regex(rb"\A[ \t]?-?[0-9]{0,10}[HMSmun]?[ \t]?\Z"))
def test_parse_matches_the_definition(name: str, value: bytes) -> None:
    assert n.parse_deadline_header(name, value) == reference(name, value)


@given(st.lists(st.tuples(NAMES, st.from_regex(rb"\A-?[0-9]{1,9}[HMSmun]?\Z")), max_size=6))
def test_the_smallest_valid_budget_wins(headers: list[tuple[str, bytes]]) -> None:
    budget, ignored = n.parse_deadline_headers(headers)
    parsed = [(h, reference(*h)) for h in headers]
    valid = [b for _, (b, _) in parsed if b is not None]
    assert budget == (min(valid) if valid else None)
    assert ignored == [(name, r) for (name, _), (_, r) in parsed if r is not None]


@given(st.integers(0, 2 * CAP), st.integers(0, 10**6), st.sampled_from(["grpc-timeout", "surgeguard-timeout-ms"]))
def test_format_rounds_down_and_parses_back(budget: int, margin: int, name: str) -> None:
    now = 10**12
    value = n.format_deadline_header(name, now + budget, margin, now_ns=now)
    left = min(max(budget - margin, 0), CAP)
    unit = 1 if name == "grpc-timeout" else 1_000_000
    if left < unit:
        assert value is None  # exhausted: fail fast, send nothing
        return
    assert value is not None
    back, reason = n.parse_deadline_header(name, value)
    assert reason is None and back is not None and back <= left


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        n.parse_deadline_header(b"grpc-timeout", "1S")
    with pytest.raises(TypeError):
        n.parse_deadline_header("grpc-timeout", 1)
    with pytest.raises(TypeError):
        n.parse_deadline_headers([("grpc-timeout",)])
    with pytest.raises(TypeError):
        n.parse_deadline_headers(5)
    for bad in (-1, 2**64, 1.5, True, None):
        with pytest.raises((TypeError, ValueError)):
            n.deadline_at(bad, now_ns=0)
        with pytest.raises((TypeError, ValueError)):
            n.format_deadline_header("grpc-timeout", bad, now_ns=0)
    with pytest.raises(ValueError, match="no deadline"):
        n.format_deadline_header("grpc-timeout", 2**62 + 1, now_ns=0)
    with pytest.raises(ValueError, match="now_ns"):
        n.deadline_at(1, now_ns=2**62 + 1)
    with pytest.raises(ValueError, match="now_ns"):
        n.format_deadline_header("grpc-timeout", 10, now_ns=2**62 + 1)
    assert n.deadline_at(10**9, now_ns=2**62) == 2**62
    assert n.parse_deadline_header("grpc-timeout", "\udcff") == (None, "malformed")


def test_brownout_is_in_range_and_refuses_bad_times() -> None:
    gate = sg.Gate(limit=1, queue_capacity=10)
    assert gate.brownout(now_ns=0) == 0.0
    assert gate.brownout() == 0.0
    permit = gate.try_acquire(now_ns=1)
    assert permit is not None
    before = gate.metrics()
    for bad in (-1, 2**62 + 1, 2**64):
        with pytest.raises(ValueError, match="now_ns"):
            gate.brownout(now_ns=bad)
    with pytest.raises(TypeError):
        gate.brownout(now_ns=1.5)
    assert gate.metrics() == before
    permit.release(now_ns=2)
