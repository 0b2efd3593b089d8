"""The two services of the two-hop end-to-end test (run as subprocesses).

``python e2e_two_hop.py dep`` — the dependency: a gate of 1 slot in front of a slow
handler (``SLOW`` seconds). Each started request is logged: when its handler started
(``time.monotonic_ns``, ``CLOCK_MONOTONIC``, the same clock in every process), when the
original caller gave up (the test's ``x-test-give-up-ns`` header, on that clock), and the
deadline the middleware propagated to it (``None`` without a header; on
``surgeguard.clock_ns``, with the start on that clock beside it). ``/_log`` returns the log, ``/_reset`` clears it.

``python e2e_two_hop.py svc <dep-url>`` — the service the test calls (``/warm/on`` and
``/warm/off`` open connections to the dependency): ``/on`` calls the dependency through :class:`surgeguard.httpx.AsyncRetryTransport` with deadline
propagation; ``/off`` through the same transport with ``propagate=False`` (what a service
without deadline propagation does). Both forward ``x-test-give-up-ns``.

Each prints ``PORT <n>`` once serving on 127.0.0.1.
"""

import asyncio
import json
import socket
import sys
import time

import httpx
import uvicorn

import surgeguard as sg
from surgeguard.asgi import OverloadMiddleware
from surgeguard.httpx import AsyncRetryTransport

SLOW = 0.1
#: What the service keeps of its budget for the way to the dependency and back.
MARGIN = 0.1
GIVE_UP = b"x-test-give-up-ns"


def header(scope, name):
    for k, v in scope["headers"]:
        if k == name:
            return v.decode("latin-1")
    return None


async def respond(send, status, body):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def dependency():
    gate = sg.Gate(limit=1, levels=1, codel=False, queue_capacity=512, initial_service=SLOW)
    log = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/_log":
            m = gate.metrics()
            await respond(send, 200, json.dumps({
                "log": log, "inflight": m["limiter"]["inflight"], "waiting": m["waiting"],
            }).encode())
            return
        if path == "/_reset":
            log.clear()
            await respond(send, 200, b"{}")
            return
        give_up = header(scope, GIVE_UP)
        log.append({
            "start_ns": time.monotonic_ns(),  # CLOCK_MONOTONIC: comparable across processes
            "start_clock_ns": sg.clock_ns(),  # the clock the deadline is on (this process)
            "deadline_ns": sg.deadline.current(),
            "give_up_ns": int(give_up) if give_up else None,
        })
        await asyncio.sleep(SLOW)
        await respond(send, 200, b'{"ok":true}')

    return OverloadMiddleware(app, gate, exclude_paths=["/_log", "/_reset"])


def service(dep_url):
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    budget = sg.RetryBudget()
    on = httpx.AsyncClient(
        base_url=dep_url, timeout=10, limits=limits,
        transport=AsyncRetryTransport(httpx.AsyncHTTPTransport(limits=limits), budget=budget, margin=MARGIN,
                                       expected_latency=SLOW),
    )
    off = httpx.AsyncClient(
        base_url=dep_url, timeout=10, limits=limits,
        transport=AsyncRetryTransport(httpx.AsyncHTTPTransport(limits=limits), budget=budget, propagate=False),
    )

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        client = on if path.endswith("/on") else off
        if path.startswith("/warm/"):  # opens connections to the dependency, cheaply
            r = await client.get("/_log")
            await respond(send, r.status_code, b"{}")
            return
        give_up = header(scope, GIVE_UP)
        r = await client.get("/work", headers={GIVE_UP.decode(): give_up} if give_up else {})
        await respond(send, r.status_code, r.content)

    return OverloadMiddleware(app, sg.Gate(limit=256, codel=False))


def main() -> None:
    role = sys.argv[1]
    app = dependency() if role == "dep" else service(sys.argv[2])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                                           timeout_keep_alive=60))  # pools stay warm

    async def serve():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"PORT {port}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
