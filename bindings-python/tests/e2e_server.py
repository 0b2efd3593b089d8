"""A real uvicorn server for the end-to-end test (run as a subprocess).

Binds 127.0.0.1 on a free port, prints ``PORT <n>`` once serving, and serves:
``/work`` (a slow handler behind the middleware), ``/_state`` (gate and table gauges,
outside the gate) and ``/healthz``.
"""

import asyncio
import json
import socket
import sys

import uvicorn

import surgeguard as sg
from surgeguard.asgi import OverloadMiddleware

GATE = sg.Gate(limit=4, queue_capacity=8)
KEYED = sg.KeyedLimits(1, shards=64, shards_per_key=2, hash_seed=11)
LIFESPAN = {"state": "none"}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                LIFESPAN["state"] = "started"
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/_state":
        m = GATE.metrics()
        body = json.dumps({
            "inflight": m["limiter"]["inflight"],
            "waiting": m["waiting"],
            "binding_waiters": m["binding_waiters"],
            "binding_orphans": m["binding_orphans"],
            "keyed_in_flight": KEYED.metrics()["in_flight"],
            "lifespan": LIFESPAN["state"],
            "shards_overlap": {},
        }).encode()
    else:
        await asyncio.sleep(0.1)
        body = b"done"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


wrapped = OverloadMiddleware(app, GATE, timeout=0.25, keyed=KEYED, key_header="x-tenant-id",
                             health_path="/healthz", exclude_paths=["/_state"])


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(wrapped, lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def serve():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"PORT {port}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
