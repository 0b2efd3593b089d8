"""The ASGI middleware around real Starlette and FastAPI apps, in both of the forms users
write: ``OverloadMiddleware(app, ...)`` (the README's) and ``app.add_middleware(...)``."""

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

import surgeguard as sg
from surgeguard.asgi import OverloadMiddleware


async def late(request):
    raise sg.DeadlineExceeded("the caller's deadline passed", "deadline_exceeded", 0.0)


async def fine(request):
    return PlainTextResponse("ok")


def starlette_app():
    return Starlette(routes=[Route("/late", late), Route("/fine", fine)])


def fastapi_app():
    app = FastAPI()

    @app.get("/late")
    async def late_route():
        raise sg.DeadlineExceeded("the caller's deadline passed", "deadline_exceeded", 0.0)

    @app.get("/fine")
    async def fine_route():
        return PlainTextResponse("ok")

    return app


def wrapped(make, gate):
    return OverloadMiddleware(make(), gate=gate)


def added(make, gate):
    app = make()
    app.add_middleware(OverloadMiddleware, gate=gate)
    return app


async def get(app, path, headers=()):
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path, headers=list(headers))


@pytest.mark.parametrize("make", [starlette_app, fastapi_app], ids=["starlette", "fastapi"])
@pytest.mark.parametrize("form", [wrapped, added], ids=["wrapped", "add_middleware"])
async def test_deadline_exceeded_in_a_handler_is_504_in_both_forms(make, form):
    gate = sg.Gate(limit=2)
    app = form(make, gate)
    r = await get(app, "/late", [("surgeguard-timeout-ms", "500")])
    assert r.status_code == 504
    assert r.json() == {"error": "deadline exceeded", "reason": "deadline_exceeded"}
    assert r.headers["content-type"] == "application/json"
    m = gate.metrics()["limiter"]
    # A caller that gave up is not a capacity signal: ignored, not dropped.
    assert m["inflight"] == 0 and m["ignored"] == 1 and m["drops"] == 0
    r = await get(app, "/fine")
    assert r.status_code == 200 and r.text == "ok"
    assert gate.metrics()["limiter"]["successes"] == 1


async def test_a_handler_the_app_already_has_is_kept():
    async def mine(request, exc):
        return JSONResponse({"mine": True}, status_code=503)

    app = starlette_app()
    app.add_exception_handler(sg.OverloadError, mine)
    gate = sg.Gate(limit=2)
    r = await get(OverloadMiddleware(app, gate=gate), "/late")
    assert r.status_code == 503 and r.json() == {"mine": True}
    assert gate.inflight == 0


async def test_outside_the_middleware_the_app_answers_as_before():
    # The handler answers only requests the middleware admitted; an excluded path gets
    # Starlette's own 500, as without the middleware.
    app = starlette_app()
    r = await get(OverloadMiddleware(app, gate=sg.Gate(limit=2), exclude_paths=["/late"]), "/late")
    assert r.status_code == 500
