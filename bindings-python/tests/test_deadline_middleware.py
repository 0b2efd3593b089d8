"""The ASGI and WSGI middlewares read the caller's deadline; bad headers never fail a
request; the stale mark becomes a Warning header."""

import asyncio
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import surgeguard as sg
from surgeguard import deadline
from surgeguard.asgi import OverloadMiddleware
from surgeguard.deadline import DeadlineStats
from surgeguard.wsgi import OverloadWSGIMiddleware

HOUR = 3600.0


# ---------------------------------------------------------------- ASGI


def asgi_app(record, *, sleep=0.0, raise_exc=None, stale_cache=None):
    async def app(scope, receive, send):
        record.append({"remaining": deadline.remaining(), "current": deadline.current()})
        if sleep:
            await asyncio.sleep(sleep)
        if raise_exc is not None:
            raise raise_exc
        body = b"ok"
        if stale_cache is not None:

            async def fetch():
                if scope["path"] == "/fail":
                    raise ConnectionError("origin down")
                return b"fresh"

            body = (await stale_cache.get_async("k", fetch)).value
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})

    return app


async def call(mw, headers=(), path="/"):
    transport = httpx.ASGITransport(app=mw)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path, headers=list(headers))


async def test_the_smallest_valid_header_wins():
    seen = []
    mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4), deadline_header="x-my-budget-ms")
    r = await call(mw, [("surgeguard-timeout-ms", "500")])
    assert r.status_code == 200 and 0.45 < seen[-1]["remaining"] <= 0.5
    r = await call(mw, [("surgeguard-timeout-ms", "500"), ("grpc-timeout", "200m")])
    assert 0.15 < seen[-1]["remaining"] <= 0.2
    r = await call(mw, [("x-envoy-expected-rq-timeout-ms", "300"), ("grpc-timeout", "2S")])
    assert 0.25 < seen[-1]["remaining"] <= 0.3
    r = await call(mw, [("X-My-Budget-Ms", "100"), ("surgeguard-timeout-ms", "500")])
    assert 0.05 < seen[-1]["remaining"] <= 0.1
    r = await call(mw)
    assert seen[-1]["remaining"] is None
    assert mw.deadline_stats.metrics()["accepted"] == 4
    assert deadline.current() is None  # nothing leaks out of the request


async def test_a_header_sent_twice_reads_as_its_smallest_valid_value_on_lines_or_joined():
    # The rule of the core (deadline::parse_header reads a value as a comma-separated
    # list), so the two lines read as Node reads them joined (its http joins them with
    # ", "), and as a WSGI server's joined value reads.
    for headers, expect in [
        ([("surgeguard-timeout-ms", "500"), ("surgeguard-timeout-ms", "200")], 0.2),
        ([("surgeguard-timeout-ms", "500, 200")], 0.2),
        ([("surgeguard-timeout-ms", "oops"), ("surgeguard-timeout-ms", "300")], 0.3),
        ([("grpc-timeout", "2S,300m")], 0.3),
    ]:
        seen = []
        mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4))
        r = await call(mw, headers)
        assert r.status_code == 200 and expect - 0.05 < seen[-1]["remaining"] <= expect, headers
        m = mw.deadline_stats.metrics()
        assert m["accepted"] == 1 and m["ignored_malformed"] == 0, (headers, m)
    seen = []
    mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4))
    await call(mw, [("surgeguard-timeout-ms", "oops"), ("surgeguard-timeout-ms", "-5")])
    assert seen[-1]["remaining"] is None  # no valid value: the first one's reason, once
    m = mw.deadline_stats.metrics()
    assert m["ignored_malformed"] == 1 and m["ignored_negative"] == 0


async def test_default_and_maximum_budgets():
    seen = []
    stats = DeadlineStats()
    mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4), default_budget=2.0, timeout=1.0, deadline_stats=stats)
    assert mw.deadline_stats is stats
    await call(mw)
    assert 0.9 < seen[-1]["remaining"] <= 1.0  # the default, capped by timeout
    await call(mw, [("surgeguard-timeout-ms", "5000")])
    assert 0.9 < seen[-1]["remaining"] <= 1.0
    await call(mw, [("surgeguard-timeout-ms", "300")])
    assert 0.25 < seen[-1]["remaining"] <= 0.3
    m = stats.metrics()
    assert (m["defaulted"], m["capped"], m["accepted"]) == (1, 2, 2)

    mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4), default_budget=0.4)
    await call(mw, [("grpc-timeout", "garbage")])
    assert 0.35 < seen[-1]["remaining"] <= 0.4


@pytest.mark.parametrize(
    "name,value,reason",
    [
        ("surgeguard-timeout-ms", "abc", "malformed"),
        ("surgeguard-timeout-ms", "1.5", "malformed"),
        ("surgeguard-timeout-ms", "", "malformed"),
        ("surgeguard-timeout-ms", "-5", "negative"),
        ("surgeguard-timeout-ms", "3600001", "too_large"),
        ("surgeguard-timeout-ms", "99999999999999999999999", "too_large"),
        ("grpc-timeout", "10", "malformed"),
        ("grpc-timeout", "123456789m", "malformed"),
        ("grpc-timeout", "2H", "too_large"),
        ("x-envoy-expected-rq-timeout-ms", "1e3", "malformed"),
    ],
)
async def test_bad_headers_are_ignored_and_counted(name, value, reason):
    seen = []
    mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4))
    r = await call(mw, [(name, value)])
    assert r.status_code == 200 and r.text == "ok"
    assert seen[-1]["remaining"] is None  # never a deadline from a bad header
    m = mw.deadline_stats.metrics()
    assert m[f"ignored_{reason}"] == 1 and mw.deadline_stats.ignored() == 1 and m["accepted"] == 0
    text = sg.prometheus.render({"api": mw.deadline_stats})
    assert f'surgeguard_deadline_ignored_{reason}_total{{name="api"}} 1' in text


async def test_a_spent_budget_is_refused_without_running_the_handler():
    seen = []
    gate = sg.Gate(limit=4)
    mw = OverloadMiddleware(asgi_app(seen), gate)
    for value in (("surgeguard-timeout-ms", "0"), ("grpc-timeout", "0n")):
        r = await call(mw, [value])
        assert r.status_code == 503
        assert r.json()["reason"] == "deadline_unmeetable"
    assert seen == [] and mw.deadline_stats.metrics()["expired"] == 2
    assert gate.inflight == 0


async def test_the_gate_refuses_an_unmeetable_deadline_at_arrival():
    seen = []
    gate = sg.Gate(limit=1, levels=1, codel=False, initial_service=0.2)
    mw = OverloadMiddleware(asgi_app(seen, sleep=0.3), gate)
    slow = asyncio.ensure_future(call(mw, [("surgeguard-timeout-ms", "5000")]))
    while gate.inflight == 0:
        await asyncio.sleep(0.005)
    r = await call(mw, [("surgeguard-timeout-ms", "50")])  # cannot finish in 50 ms
    assert r.status_code == 503 and r.json()["reason"] in ("deadline_unmeetable", "expired")
    assert len(seen) == 1  # only the slow request ran
    assert (await slow).status_code == 200
    # without the header the same request waits its turn and is served
    r = await call(mw)
    assert r.status_code == 200 and len(seen) == 2


async def test_propagation_off_ignores_the_headers():
    seen = []
    mw = OverloadMiddleware(asgi_app(seen), sg.Gate(limit=4), read_deadlines=False)
    await call(mw, [("surgeguard-timeout-ms", "0"), ("grpc-timeout", "1m")])
    assert seen[-1]["remaining"] is None
    assert mw.deadline_stats.metrics()["accepted"] == 0


async def test_deadline_exceeded_in_the_handler_is_504_and_not_an_overload_signal():
    seen = []
    gate = sg.Gate(limit=4)
    mw = OverloadMiddleware(asgi_app(seen, raise_exc=sg.InsufficientBudget(remaining=0.01, expected=0.1)), gate)
    r = await call(mw, [("surgeguard-timeout-ms", "1000")])
    assert r.status_code == 504 and r.json()["reason"] == "deadline_exceeded"
    lim = gate.metrics()["limiter"]
    assert lim["ignored"] == 1 and lim["drops"] == 0 and gate.inflight == 0


async def test_a_stale_answer_carries_the_warning_header():
    cache = sg.StaleIfError()
    mw = OverloadMiddleware(asgi_app([], stale_cache=cache), sg.Gate(limit=4))
    r = await call(mw, path="/ok")
    assert r.text == "fresh" and "warning" not in r.headers
    r = await call(mw, path="/fail")
    assert r.text == "fresh" and r.headers["warning"] == '110 - "Response is Stale"'
    r = await call(mw, path="/ok")
    assert "warning" not in r.headers  # the mark belongs to one request


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"deadline_header": 5}, TypeError),
        ({"deadline_header": ""}, ValueError),
        ({"deadline_header": "bad name"}, ValueError),
        ({"deadline_header": "é"}, ValueError),
        ({"default_budget": -1}, ValueError),
        ({"default_budget": float("nan")}, ValueError),
        ({"default_budget": float("inf")}, ValueError),
        ({"default_budget": 86_401}, ValueError),
        ({"default_budget": "1"}, TypeError),
        ({"read_deadlines": "yes"}, TypeError),
        ({"deadline_stats": object()}, TypeError),
    ],
)
def test_bad_middleware_arguments(kwargs, error):
    with pytest.raises(error):
        OverloadMiddleware(asgi_app([]), sg.Gate(), **kwargs)
    with pytest.raises(error):
        OverloadWSGIMiddleware(wsgi_app([]), sg.Gate(), **kwargs)


header_values = st.one_of(
    st.binary(max_size=24),
    st.from_regex(rb"\A[ \t]?-?[0-9]{0,12}[HMSmun]?[ \t]?\Z"),
    st.integers(-(10**12), 10**12).map(lambda i: str(i).encode()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(
        st.tuples(
            st.sampled_from([b"surgeguard-timeout-ms", b"grpc-timeout", b"x-envoy-expected-rq-timeout-ms", b"x-custom"]),
            header_values,
        ),
        max_size=5,
    )
)
def test_any_header_bytes_never_fail_the_request_nor_grant_an_unbounded_deadline(values):
    seen = []
    gate = sg.Gate(limit=4)
    mw = OverloadMiddleware(asgi_app(seen), gate, deadline_header="x-custom")
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": list(values), "query_string": b""}
    asyncio.run(mw(scope, receive, send))
    status = sent[0]["status"]
    # each header (its lines joined), by the documented formats (a reference, not the parser)
    headers = _reference_lines(values)
    valid = [v for v in (_reference_budget(n, raw) for n, raw in headers) if v is not None]
    if valid and min(valid) == 0:
        assert status == 503 and seen == []
    else:
        assert status == 200
        rem = seen[0]["remaining"]
        if valid:
            assert rem is not None and rem <= min(valid) / 1e9
        else:
            assert rem is None
        assert rem is None or rem <= HOUR
    stats = mw.deadline_stats.metrics()
    assert stats["ignored_malformed"] + stats["ignored_negative"] + stats["ignored_too_large"] == len(headers) - len(valid)
    assert gate.inflight == 0


def _reference_budget(name, raw):
    """The documented header rules, written independently of the core's parser: a value
    is a comma-separated list (a header sent twice, its lines joined), whose smallest
    valid item wins."""
    valid = [b for b in (_reference_item(name, item) for item in raw.split(b",")) if b is not None]
    return min(valid) if valid else None


def _reference_lines(values):
    """``(name, raw)`` lines as one value per name, the lines joined by commas."""
    lines = {}
    for name, raw in values:
        lines.setdefault(name, []).append(raw)
    return [(name, b", ".join(raws)) for name, raws in lines.items()]


def _reference_item(name, raw):
    """One item of a deadline header's value."""
    v = raw.strip(b" \t")
    if name == b"grpc-timeout":
        if not (2 <= len(v) <= 9 and v[:-1].isdigit() and v[-1:] in b"HMSmun" and v[:-1].isascii()):
            return None
        unit = {b"H": 3600 * 10**9, b"M": 60 * 10**9, b"S": 10**9, b"m": 10**6, b"u": 10**3, b"n": 1}[v[-1:]]
        ns = int(v[:-1]) * unit
    else:
        if not (v and v.isdigit() and v.isascii()):
            return None
        ns = int(v) * 10**6
    return ns if ns <= 3600 * 10**9 else None


# ---------------------------------------------------------------- WSGI


def wsgi_app(record, *, stale_cache=None, raise_exc=None):
    def app(environ, start_response):
        record.append({"remaining": deadline.remaining()})
        if raise_exc is not None:
            raise raise_exc
        body = b"ok"
        if stale_cache is not None:

            def fetch():
                if environ["PATH_INFO"] == "/fail":
                    raise ConnectionError("origin down")
                return b"fresh"

            body = stale_cache.get("k", fetch).value
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body_iter():
            record.append({"remaining_while_iterating": deadline.remaining()})
            yield body

        return body_iter()

    return app


def wsgi_call(mw, headers=(), path="/"):
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path}
    for name, value in headers:
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    out = {}

    def start_response(status, headers, exc_info=None):
        out["status"] = int(status.split()[0])
        out["headers"] = {k.lower(): v for k, v in headers}

    result = mw(environ, start_response)
    try:
        out["body"] = b"".join(result)
    finally:
        getattr(result, "close", lambda: None)()
    return out


def test_wsgi_reads_the_deadline_for_the_app_and_its_response_iterable():
    seen = []
    gate = sg.Gate(limit=2)
    mw = OverloadWSGIMiddleware(wsgi_app(seen), gate, deadline_header="x-my-budget-ms")
    r = wsgi_call(mw, [("surgeguard-timeout-ms", "400"), ("grpc-timeout", "9000m")])
    assert r["status"] == 200 and r["body"] == b"ok"
    assert 0.35 < seen[0]["remaining"] <= 0.4
    assert 0.3 < seen[1]["remaining_while_iterating"] <= 0.4
    wsgi_call(mw, [("x-my-budget-ms", "100")])
    assert 0.05 < seen[2]["remaining"] <= 0.1
    assert deadline.current() is None and gate.inflight == 0


def test_wsgi_reads_a_header_its_server_joined_as_the_smallest_valid_value():
    # WSGI servers join a header sent twice with commas into one environ value.
    seen = []
    mw = OverloadWSGIMiddleware(wsgi_app(seen), sg.Gate(limit=2))
    r = wsgi_call(mw, [("surgeguard-timeout-ms", "400,100")])
    assert r["status"] == 200 and 0.05 < seen[0]["remaining"] <= 0.1
    assert mw.deadline_stats.metrics()["accepted"] == 1


def test_wsgi_bad_headers_spent_budgets_and_504():
    seen = []
    mw = OverloadWSGIMiddleware(wsgi_app(seen), sg.Gate(limit=2))
    r = wsgi_call(mw, [("surgeguard-timeout-ms", "-1"), ("grpc-timeout", "1.5S")])
    assert r["status"] == 200 and seen[0]["remaining"] is None
    m = mw.deadline_stats.metrics()
    assert m["ignored_negative"] == 1 and m["ignored_malformed"] == 1
    r = wsgi_call(mw, [("surgeguard-timeout-ms", "0")])
    assert r["status"] == 503 and json.loads(r["body"])["reason"] == "deadline_unmeetable"
    gate = sg.Gate(limit=2)
    mw = OverloadWSGIMiddleware(wsgi_app([], raise_exc=sg.DeadlineExceeded()), gate)
    r = wsgi_call(mw, [("surgeguard-timeout-ms", "100")])
    assert r["status"] == 504 and gate.inflight == 0 and gate.metrics()["limiter"]["ignored"] == 1


def test_wsgi_stale_warning():
    cache = sg.StaleIfError()
    mw = OverloadWSGIMiddleware(wsgi_app([], stale_cache=cache), sg.Gate(limit=2))
    assert "warning" not in wsgi_call(mw, path="/ok")["headers"]
    r = wsgi_call(mw, path="/fail")
    assert r["body"] == b"fresh" and r["headers"]["warning"] == '110 - "Response is Stale"'


@settings(max_examples=200, deadline=None)
@given(
    values=st.dictionaries(
        st.sampled_from(["surgeguard-timeout-ms", "grpc-timeout", "x-envoy-expected-rq-timeout-ms"]),
        st.one_of(st.text(max_size=16), st.from_regex(r"\A-?[0-9]{0,11}[HMSmun]?\Z")),
    )
)
def test_wsgi_any_header_text_never_fails_the_request(values):
    seen = []
    gate = sg.Gate(limit=2)
    mw = OverloadWSGIMiddleware(wsgi_app(seen), gate)
    r = wsgi_call(mw, list(values.items()))
    valid = [
        b for b in (_reference_budget(n.encode(), v.encode("latin-1")) if v.isascii() else None
                    for n, v in values.items())
        if b is not None
    ]
    if valid and min(valid) == 0:
        assert r["status"] == 503 and seen == []
    else:
        assert r["status"] == 200 and r["body"] == b"ok"
        rem = seen[0]["remaining"]
        assert (rem is None) == (not valid)
        assert rem is None or rem <= min(valid) / 1e9 <= HOUR
    assert gate.inflight == 0
