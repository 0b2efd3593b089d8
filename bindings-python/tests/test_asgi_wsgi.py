"""The ASGI and WSGI middleware in process: statuses, headers, bodies, outcomes,
pass-through, health answers, release on close."""

import asyncio
import json
import threading

import pytest

import surgeguard as sg
import surgeguard.prometheus
from surgeguard.asgi import OverloadMiddleware, health, outcome_for_status
from surgeguard.wsgi import OverloadWSGIMiddleware


def http_scope(path="/", headers=()):
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
    }


async def call(app, scope):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict((k.decode(), v.decode()) for k, v in start["headers"]), body


def make_app(status=200, gate_ref=None, seen=None, started=None, release=None):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            seen.append("lifespan")
            return
        if scope["type"] == "websocket":
            seen.append("websocket")
            return
        if started is not None:
            started.set()
        if release is not None:
            await release.wait()
        if gate_ref is not None:
            seen.append(gate_ref.inflight)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    return app


async def test_admits_and_releases_with_the_status_outcome():
    for status, outcome_field in [(200, "successes"), (503, "drops"), (404, "ignored")]:
        g = sg.Gate(limit=2)
        seen = []
        mw = OverloadMiddleware(make_app(status, g, seen), g)
        st, headers, body = await call(mw, http_scope())
        assert st == status and body == b"hello"
        assert seen == [1]  # the permit was held while the app ran
        m = g.metrics()["limiter"]
        assert m[outcome_field] == 1 and m["inflight"] == 0


async def test_global_refusal_is_503_with_retry_after_and_json():
    g = sg.Gate(limit=1, codel=False)
    held = g.try_acquire()
    mw = OverloadMiddleware(make_app(), g, timeout=0)
    st, headers, body = await call(mw, http_scope())
    assert st == 503
    assert int(headers["retry-after"]) >= 1
    assert headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["error"] == "service overloaded" and doc["reason"] == "limit_reached"
    assert doc["retry_after_s"] == int(headers["retry-after"])
    held.success()


async def test_priority_header_and_callable():
    g = sg.Gate(limit=4)
    g.set_shed_level("background")
    mw = OverloadMiddleware(make_app(), g)
    assert (await call(mw, http_scope(headers=[("X-Request-Priority", "background")])))[0] == 503
    assert (await call(mw, http_scope(headers=[("X-Request-Priority", "critical")])))[0] == 200
    assert (await call(mw, http_scope(headers=[("X-Request-Priority", "2")])))[0] == 503
    assert (await call(mw, http_scope(headers=[("X-Request-Priority", "bogus")])))[0] == 200
    mw2 = OverloadMiddleware(make_app(), g, priority=lambda scope: "background")
    st, _, body = await call(mw2, http_scope())
    assert st == 503 and json.loads(body)["reason"] == "shed"


async def test_per_key_refusal_is_429_with_the_cores_body():
    g = sg.Gate(limit=10)
    keyed = sg.KeyedLimits(1, shards=64, shards_per_key=1, hash_seed=3)
    release = asyncio.Event()
    started = asyncio.Event()
    seen = []
    mw = OverloadMiddleware(make_app(seen=seen, started=started, release=release), g, keyed=keyed)
    hold = asyncio.create_task(call(mw, http_scope(headers=[("X-Tenant-Id", "noisy")])))
    await started.wait()
    st, headers, body = await call(mw, http_scope(headers=[("X-Tenant-Id", "noisy")]))
    assert st == 429 and headers["retry-after"] == "1"
    assert body == sg.actionable("key_limit", 1.0)["body"]
    quiet = next(f"quiet-{i}" for i in range(100) if set(keyed.shards_of(f"quiet-{i}")) != set(keyed.shards_of("noisy")))
    release.set()
    assert (await call(mw, http_scope(headers=[("X-Tenant-Id", quiet)])))[0] == 200
    assert (await hold)[0] == 200
    assert keyed.metrics()["in_flight"] == 0 and g.inflight == 0


async def test_lifespan_websocket_health_and_excluded_paths_pass():
    g = sg.Gate(limit=1)
    seen = []
    mw = OverloadMiddleware(make_app(seen=seen), g, health_path="/healthz", exclude_paths=["/metrics"],
                            broken=lambda: False)
    await mw({"type": "lifespan"}, None, None)
    await mw({"type": "websocket", "path": "/ws"}, None, None)
    assert seen == ["lifespan", "websocket"]
    held = g.try_acquire()
    st, _, body = await call(mw, http_scope("/healthz"))
    assert st == 200 and json.loads(body)["status"] == "ok"
    g.set_shed_level("background")
    st, _, body = await call(mw, http_scope("/healthz"))
    assert st == 200 and json.loads(body)["status"] == "overloaded"  # not broken
    assert (await call(mw, http_scope("/metrics")))[0] == 200  # bypasses the full gate
    held.success()
    assert health(None, broken=lambda: True) == (503, {"status": "broken"})


async def test_exceptions_release_with_the_right_outcome():
    g = sg.Gate(limit=2)

    async def timeout_app(scope, receive, send):
        raise asyncio.TimeoutError

    async def bug_app(scope, receive, send):
        raise KeyError

    with pytest.raises(asyncio.TimeoutError):
        await call(OverloadMiddleware(timeout_app, g), http_scope())
    with pytest.raises(KeyError):
        await call(OverloadMiddleware(bug_app, g), http_scope())
    m = g.metrics()["limiter"]
    assert (m["drops"], m["ignored"], m["inflight"]) == (1, 1, 0)


async def test_client_disconnect_cancellation_releases():
    g = sg.Gate(limit=1)
    started = asyncio.Event()
    mw = OverloadMiddleware(make_app(started=started, release=asyncio.Event()), g)
    task = asyncio.create_task(call(mw, http_scope()))
    await started.wait()
    assert g.inflight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert g.inflight == 0 and g.metrics()["limiter"]["ignored"] == 1


def test_outcome_for_status():
    assert [outcome_for_status(s) for s in (200, 302, 404, 429, 500, 503)] == [
        "success", "success", "ignored", "dropped", "ignored", "dropped"]


def wsgi_call(app, path="/", headers=None):
    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got = {}

    def start_response(status, hdrs, exc_info=None):
        got["status"] = int(status.split()[0])
        got["headers"] = dict(hdrs)

    it = app(environ, start_response)
    return got, it


def test_wsgi_releases_when_the_iterable_closes():
    g = sg.Gate(limit=1)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"a", b"b"])

    mw = OverloadWSGIMiddleware(app, g, timeout=0)
    got, it = wsgi_call(mw)
    assert got["status"] == 200
    assert g.inflight == 1  # streaming: still held
    assert b"".join(it) == b"ab"
    assert g.inflight == 1  # not closed yet
    it.close()
    assert g.inflight == 0 and g.metrics()["limiter"]["successes"] == 1
    it.close()  # idempotent
    assert g.metrics()["limiter"]["successes"] == 1


def test_wsgi_refusals_and_keys():
    g = sg.Gate(limit=1, codel=False)
    keyed = sg.KeyedLimits(1, shards=8, shards_per_key=1, hash_seed=1)

    def app(environ, start_response):
        start_response("503 Service Unavailable", [])
        return [b"x"]

    mw = OverloadWSGIMiddleware(app, g, timeout=0, keyed=keyed)
    held = keyed.try_acquire("t1")
    got, body = wsgi_call(mw, headers={"X-Tenant-Id": "t1"})
    assert got["status"] == 429 and got["headers"]["Retry-After"] == "1"
    assert json.loads(b"".join(body))["reason"] == "key_limit"
    held.release()
    gheld = g.try_acquire()
    got, body = wsgi_call(mw, headers={"X-Tenant-Id": "t1"})
    assert got["status"] == 503 and json.loads(b"".join(body))["error"] == "service overloaded"
    gheld.success()
    got, body = wsgi_call(mw, headers={"X-Tenant-Id": "t1"})
    assert got["status"] == 503  # from the app: an overload signal
    body.close()
    m = g.metrics()["limiter"]
    assert (m["drops"], m["inflight"]) == (1, 0) and keyed.metrics()["in_flight"] == 0
    got, body = wsgi_call(OverloadWSGIMiddleware(app, g, health_path="/health"), "/health")
    assert got["status"] == 200


def test_wsgi_waits_in_threads():
    g = sg.Gate(limit=1, codel=False)
    done = []

    def app(environ, start_response):
        start_response("200 OK", [])
        return [b"ok"]

    mw = OverloadWSGIMiddleware(app, g, timeout=5)
    held = g.try_acquire()

    def worker():
        got, it = wsgi_call(mw)
        list(it)
        it.close()
        done.append(got["status"])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    held.success()
    for t in threads:
        t.join(10)
    assert done == [200] * 4 and g.inflight == 0


def test_health_and_render_check_their_arguments():
    with pytest.raises(TypeError, match="gate"):
        sg.asgi.health(float("nan"))
    with pytest.raises(TypeError, match="broken"):
        sg.asgi.health(None, broken=5)
    for bad in ({"target": float("nan")}, 5, "ab", [("x",)]):
        with pytest.raises(TypeError):
            sg.prometheus.render(bad)
    with pytest.raises(ValueError, match="prefix"):
        sg.prometheus.render({}, prefix="bad prefix")
    assert "surgeguard_gate" in sg.prometheus.render({"api": sg.Gate()})


def test_middleware_arguments_checked_at_construction():
    import surgeguard.wsgi

    gate = sg.Gate()
    app = lambda *a: None  # noqa: E731
    for mw in (sg.asgi.OverloadMiddleware, sg.wsgi.OverloadWSGIMiddleware):
        with pytest.raises(TypeError, match="key_header"):
            mw(app, gate, key_header=float("nan"))
        with pytest.raises(TypeError, match="app"):
            mw(float("nan"), gate)
        with pytest.raises(ValueError, match="key_cost"):
            mw(app, gate, key_cost=-1)
        with pytest.raises(TypeError, match="priority"):
            mw(app, gate, priority=5)
        assert gate.inflight == 0 and gate.waiting() == 0


def test_middlewares_refuse_an_object_that_only_has_a_try_acquire():
    # A CircuitBreaker (or a RateLimiter, a KeyedLimits) has a `try_acquire` of another
    # meaning: accepted, it made every request a TypeError (500). Refused at construction.
    import surgeguard.wsgi

    class Duck:
        def try_acquire(self, priority=None):
            return None

    app = lambda *a: None  # noqa: E731
    wrong = [sg.CircuitBreaker(), sg.RateLimiter(10.0), sg.KeyedLimits(2), Duck()]
    for mw in (sg.asgi.OverloadMiddleware, sg.wsgi.OverloadWSGIMiddleware):
        for gate in wrong:
            with pytest.raises(TypeError, match=f"gate must be .*got {type(gate).__name__}"):
                mw(app, gate=gate)
        for gate in (sg.Gate(), sg.Limiter(limit=2)):
            mw(app, gate=gate)  # accepted
    for gate in wrong:
        with pytest.raises(TypeError, match="gate must be"):
            sg.asgi.health(gate)


async def test_a_request_cancelled_after_the_p99_is_an_overload_signal():
    # A client that went away after waiting longer than the limiter's last p99 timed out:
    # its cancelled request is a drop (an earlier cancel is ignored, as above).
    now = [1_000_000]
    g = sg.Gate(limit=4, min_window=0.01, max_window=0.01, min_samples=5, clock=lambda: now[0])

    async def ten_ms(scope, receive, send):
        now[0] += 10_000_000
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    for _ in range(10):
        await call(OverloadMiddleware(ten_ms, g), http_scope())
    before = g.metrics()["limiter"]
    started, never = asyncio.Event(), asyncio.Event()

    async def slow(scope, receive, send):
        started.set()
        now[0] += 50_000_000
        await never.wait()

    task = asyncio.create_task(call(OverloadMiddleware(slow, g), http_scope()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    m = g.metrics()["limiter"]
    assert (m["drops"] - before["drops"], m["ignored"] - before["ignored"], m["inflight"]) == (1, 0, 0)
