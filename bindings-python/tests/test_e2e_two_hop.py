"""Two real hops on loopback: a client → a Python service (uvicorn + the ASGI middleware)
→ a slow Python dependency (uvicorn + the ASGI middleware), over HTTP, through the httpx
transport. The client gives up after ``BUDGET`` seconds.

With the deadline propagated (``surgeguard-timeout-ms`` from the client, then from the
service's transport), the dependency never *starts* work whose original caller has given
up: its gate refuses or drops it. Without propagation, the same burst makes the
dependency start work for callers long gone; the test counts it (and prints both counts).
"""

import asyncio
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
BUDGET = 0.4
BURST = 24
SEC = 1_000_000_000


def spawn(*args):
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "e2e_two_hop.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise AssertionError((line, proc.stderr.read()))
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


@pytest.fixture(scope="module")
def hops():
    procs = []
    try:
        dep, dep_url = spawn("dep")
        procs.append(dep)
        svc, svc_url = spawn("svc", dep_url)
        procs.append(svc)
        yield svc_url, dep_url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                p.kill()


async def burst(client, url, propagate):
    """BURST callers at once, each giving up after BUDGET seconds."""

    async def one():
        give_up = sg.clock_ns() + int(BUDGET * SEC)
        headers = {"x-test-give-up-ns": str(give_up)}
        if propagate:
            headers["surgeguard-timeout-ms"] = str(int(BUDGET * 1000))
        try:
            r = await client.get(url, headers=headers, timeout=BUDGET)
            return r.status_code
        except httpx.TimeoutException:
            return "gave up"

    return Counter(await asyncio.gather(*[one() for _ in range(BURST)]))


async def drained_log(client, dep_url, quiet=0.5, limit=8.0):
    """The dependency's log once it has been idle for ``quiet`` seconds."""
    end = time.monotonic() + limit
    while True:
        state = (await client.get(dep_url + "/_log")).json()
        if state["inflight"] == 0 and state["waiting"] == 0:
            await asyncio.sleep(quiet)
            again = (await client.get(dep_url + "/_log")).json()
            if len(again["log"]) == len(state["log"]) and again["inflight"] == 0:
                return again["log"]
        assert time.monotonic() < end, state
        await asyncio.sleep(0.05)


async def test_the_dependency_never_starts_work_its_caller_gave_up_on(hops):
    svc, dep = hops
    limits = httpx.Limits(max_connections=BURST + 8, max_keepalive_connections=BURST + 8)
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:
        # Warm up: the dependency's gate learns its service time, the service's transport
        # the dependency's latency.
        for _ in range(10):
            assert (await client.get(svc + "/on", headers={"surgeguard-timeout-ms": "2000"})).status_code == 200
        await client.get(dep + "/_reset")

        # Without propagation: the dependency serves every queued request, long after
        # its caller gave up.
        off_answers = await burst(client, svc + "/off", propagate=False)
        off_log = await drained_log(client, dep)
        off_wasted = sum(1 for e in off_log if e["start_ns"] > e["give_up_ns"])
        await client.get(dep + "/_reset")

        # With propagation: the same burst.
        on_answers = await burst(client, svc + "/on", propagate=True)
        on_log = await drained_log(client, dep)
        on_wasted = sum(1 for e in on_log if e["start_ns"] > e["give_up_ns"])

        print(f"\nwork started after the caller gave up: without propagation {off_wasted} of "
              f"{len(off_log)} started ({dict(off_answers)}), with propagation {on_wasted} of "
              f"{len(on_log)} started ({dict(on_answers)})")
        assert off_answers["gave up"] > 0  # the burst does overload the dependency
        assert len(off_log) == BURST and off_wasted >= BURST // 3
        assert on_wasted == 0, on_log
        for e in on_log:
            # every started request carried a deadline no later than its caller's, and
            # started before it
            assert e["deadline_ns"] is not None and e["deadline_ns"] <= e["give_up_ns"]
            assert e["start_ns"] < e["deadline_ns"]
        # propagation did not starve the callers that could be served in time
        assert on_answers[200] >= 4, on_answers
