"""End to end: a real uvicorn server on 127.0.0.1 with the ASGI middleware, a slow
handler and a bounded client load.

- global overload answers 503 with Retry-After and the JSON body;
- critical requests keep succeeding while background ones are shed;
- a flooding tenant gets 429 + Retry-After + the JSON body while another keeps succeeding;
- no permit, waiter or key slot is left once the load stops.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

import surgeguard as sg

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def server():
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "e2e_server.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), (line, proc.stderr.read() if proc.poll() is not None else "")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()


async def stream(client, url, n, headers, out):
    for _ in range(n):
        r = await client.get(url + "/work", headers=headers)
        out.append(r)


async def settle(client, url):
    deadline = time.monotonic() + 5
    while True:
        state = (await client.get(url + "/_state")).json()
        idle = state["inflight"] == 0 and state["waiting"] == 0 and state["keyed_in_flight"] == 0
        if idle or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.02)


def check_refusal(r, status, reasons):
    assert r.status_code == status
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["content-type"] == "application/json"
    doc = json.loads(r.content)
    assert doc["reason"] in reasons
    assert doc["retry_after_s"] == int(r.headers["retry-after"])
    assert doc["retry"] == "not before retry_after_s"
    return doc


async def test_priorities_under_overload(server):
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        assert (await client.get(server + "/_state")).json()["lifespan"] == "started"
        health = (await client.get(server + "/healthz")).json()
        assert health["status"] in ("ok", "overloaded")
        background, critical = [], []
        bg = [stream(client, server, 12, {"x-request-priority": "background"}, background) for _ in range(30)]
        cr = [stream(client, server, 12, {"x-request-priority": "critical"}, critical) for _ in range(2)]
        await asyncio.gather(*bg, *cr)
        bg_status = Counter(r.status_code for r in background)
        cr_status = Counter(r.status_code for r in critical)
        assert set(bg_status) <= {200, 503} and set(cr_status) <= {200, 503}
        assert bg_status[503] > 0, bg_status  # background was shed
        assert cr_status[200] >= 0.9 * len(critical), cr_status  # critical kept succeeding
        bg_ok = bg_status[200] / len(background)
        assert cr_status[200] / len(critical) > bg_ok
        for r in background:
            if r.status_code == 503:
                check_refusal(r, 503, {"limit_reached", "queue_full", "evicted", "expired",
                                       "codel_slough", "deadline_unmeetable", "shed"})
        state = await settle(client, server)
        assert state["inflight"] == 0 and state["waiting"] == 0
        assert state["binding_waiters"] == 0 and state["binding_orphans"] == 0


async def test_a_flooding_tenant_is_isolated(server):
    # The server's table: 1 slot per shard, 2 shards per key, so a key holds at most 2 of
    # the gate's 4 slots. Same seeds, so the same key-to-shard mapping.
    table = sg.KeyedLimits(1, shards=64, shards_per_key=2, hash_seed=11)
    noisy = "tenant-noisy"
    quiet = next(f"tenant-{i}" for i in range(1000)
                 if not set(table.shards_of(f"tenant-{i}")) & set(table.shards_of(noisy)))
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    # Let the previous test's critical traffic go idle, so its share is lent again.
    await asyncio.sleep(1.2)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        flood, calm = [], []
        await asyncio.gather(
            *[stream(client, server, 10, {"x-tenant-id": noisy}, flood) for _ in range(16)],
            *[stream(client, server, 15, {"x-tenant-id": quiet}, calm) for _ in range(1)],
        )
        flood_status = Counter(r.status_code for r in flood)
        assert flood_status[429] > 0, flood_status
        for r in flood:
            if r.status_code == 429:
                doc = check_refusal(r, 429, {"key_limit", "key_rate"})
                assert doc["error"] == "too many requests"
        assert all(r.status_code == 200 for r in calm), Counter(r.status_code for r in calm)
        state = await settle(client, server)
        assert state["inflight"] == 0 and state["keyed_in_flight"] == 0 and state["waiting"] == 0
