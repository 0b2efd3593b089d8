"""The ASGI and WSGI middlewares with a shared Limiter as their gate: admitted or refused
at once (no queue), one limit across worker processes, the permit released with the
response's outcome."""

import asyncio
import os
import signal
import sys
import time

import pytest

import surgeguard as sg
from surgeguard import _native
from surgeguard.asgi import OverloadMiddleware, health
from surgeguard.wsgi import OverloadWSGIMiddleware

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not hasattr(_native, "SharedGate"), reason="shared memory is Linux-only"
)


def http_scope(path="/", headers=()):
    return {"type": "http", "method": "GET", "path": path, "headers": [(k.encode(), v.encode()) for k, v in headers]}


async def call(app, scope):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


def asgi_app(status, started=None, release=None):
    async def app(scope, receive, send):
        if started is not None:
            started.set()
        if release is not None:
            await release.wait()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def test_asgi_admits_or_refuses_at_once_and_releases_with_the_outcome():
    shared = sg.Limiter.shared(None, limit=1, levels=1)
    started, release = asyncio.Event(), asyncio.Event()
    mw = OverloadMiddleware(asgi_app(200, started, release), gate=shared, timeout=5)
    first = asyncio.create_task(call(mw, http_scope()))
    await started.wait()
    assert shared.inflight == 1
    status, headers, body = await call(mw, http_scope())  # refused at once, not queued
    assert status == 503 and "retry-after" in headers
    assert b"limit_reached" in body
    release.set()
    assert (await first)[0] == 200
    assert shared.inflight == 0
    m = shared.metrics()
    assert m["successes"] == 1 and m["rejected"] >= 1
    for status, field in [(503, "drops"), (404, "ignored")]:
        before = shared.metrics()[field]
        assert (await call(OverloadMiddleware(asgi_app(status), gate=shared), http_scope()))[0] == status
        assert shared.metrics()[field] == before + 1
    assert shared.inflight == 0


def _free_key(keyed, key):
    """Whether ``key`` would be admitted now (a probe: the permit is given back)."""
    try:
        keyed.try_acquire(key).release()
        return True
    except sg.KeyLimit:
        return False


async def test_asgi_health_and_keys_with_a_shared_limiter():
    shared = sg.Limiter.shared(None, limit=1, levels=1)
    keyed = sg.KeyedLimits.shared(None, 1, shards=8, shards_per_key=1)
    started, release = asyncio.Event(), asyncio.Event()
    mw = OverloadMiddleware(asgi_app(200, started, release), gate=shared, keyed=keyed, health_path="/health")
    assert (await call(mw, http_scope("/health")))[0] == 200
    first = asyncio.create_task(call(mw, http_scope(headers=[("x-tenant-id", "a")])))
    await started.wait()
    status, _, body = await call(mw, http_scope("/health"))
    assert status == 200 and b"overloaded" in body  # every permit taken: send less
    assert (await call(mw, http_scope(headers=[("x-tenant-id", "a")])))[0] == 429  # the key's cap
    # A key on another shard than "a" (the segment's hash seed is random: probe for one).
    other = next(k for k in (f"b{i}" for i in range(256)) if _free_key(keyed, k))
    assert (await call(mw, http_scope(headers=[("x-tenant-id", other)])))[0] == 503  # the limit
    assert keyed.metrics()["in_flight"] == 1  # the refused request's key permit was given back
    release.set()
    assert (await first)[0] == 200
    assert shared.inflight == 0 and keyed.metrics()["in_flight"] == 0
    assert health(shared)[0] == 200


def test_wsgi_with_a_shared_limiter_releases_on_close():
    shared = sg.Limiter.shared(None, limit=1, levels=1)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"a", b"b"]

    mw = OverloadWSGIMiddleware(app, gate=shared)
    seen = []

    def start_response(status, headers, exc_info=None):
        seen.append(status)

    it = mw({"PATH_INFO": "/"}, start_response)
    assert seen == ["200 OK"] and shared.inflight == 1  # held while the body streams
    refused = mw({"PATH_INFO": "/"}, start_response)
    assert seen[-1].startswith("503") and b"limit_reached" in b"".join(refused)
    assert b"".join(it) == b"ab"
    it.close()
    assert shared.inflight == 0 and shared.metrics()["successes"] == 1


def test_middlewares_refuse_what_is_not_a_gate_or_limiter():
    async def app(scope, receive, send):
        pass

    for bad in (None, 3, "gate", object()):
        with pytest.raises(TypeError):
            OverloadMiddleware(app, gate=bad)
        with pytest.raises(TypeError):
            OverloadWSGIMiddleware(app, gate=bad)
    shared = sg.Limiter.shared(None, limit=1, levels=1)
    with pytest.raises(ValueError):
        OverloadMiddleware(app, gate=shared, timeout=-1)
    with pytest.raises(TypeError):
        OverloadWSGIMiddleware(app, gate=shared, timeout="1")


async def test_one_limit_across_processes_and_a_killed_worker_gives_its_slot_back():
    shared = sg.Limiter.shared(None, limit=1, levels=1)
    mw = OverloadMiddleware(asgi_app(200), gate=shared)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child: a worker holding the only slot
        try:
            p = shared.try_acquire()  # noqa: F841 - held until killed
            os.write(w, b"x")
            time.sleep(60)
        finally:
            os._exit(0)
    assert os.read(r, 1) == b"x"
    assert (await call(mw, http_scope()))[0] == 503  # the other worker holds it
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    await asyncio.sleep(0.11)  # past the sweep interval
    assert (await call(mw, http_scope()))[0] == 200  # the refusal swept the dead worker's slot
    assert shared.inflight == 0
