"""A healthy service behind the defaults, over real loopback HTTP.

The server is the README's: ``OverloadMiddleware(app, gate=sg.Gate(), health_path="/healthz")``
under uvicorn, on a free port of 127.0.0.1, in its own process (this file, run as a script).
Its handler calls a dependency with 8 slots of 40 ms (``asyncio.Semaphore(8)`` around
``asyncio.sleep(0.04)``): 200 requests per second at most.

The load is open-loop: Poisson arrivals (seeded) at 50% and 75% of the dependency's
capacity, 20% ``critical``, 60% ``normal`` and 20% ``background`` by ``X-Request-Priority``.
Each client waits 1 s for an attempt and retries at once, up to 3 times, after a 503, a 429
or a timeout. Every request is counted, from the first second: a new server meets its
load cold. The generator is a few lines of HTTP/1.1 over keep-alive connections in the
test's process (about 0.25 ms of CPU per attempt): with httpx (a few ms per attempt) it fell
200 ms behind its schedule on a busy 2-core machine, and its own delays timed attempts out.

A healthy service must not notice the gate. At both loads: at least 99.9% of the requests
succeed, at least 99.5% of the background ones; the server's 503s are at most 0.1% of the
requests; attempts are at most 1.01 per request. Each run prints its figures, the gate's
(limit, waiting, sloughed), the generator's lag behind its schedule and the server's event
loop lag, and how long the dependency's 40 ms really took. About 26 s of wall time (two
runs of 12 s, each with a fresh server); a run that misses a goal while the machine stalled
the test (``STALL_S``) is run once more.
"""

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter

SLOTS = 8
SERVICE_S = 0.040
CAPACITY = SLOTS / SERVICE_S  # 200 requests per second
MIX = (("critical", 0.2), ("normal", 0.6), ("background", 0.2))
ATTEMPT_TIMEOUT_S = 1.0
RETRIES = 3
DURATION_S = 12.0
SEED = 20261204
# A run that misses a goal while the server's event loop or the generator was held back
# longer than this (a stalled loop meets its arrivals in one burst), or while the dependency's
# 40 ms took over 44 ms on average (the server's timers fire late: the dependency itself is
# then slower, its load higher than the test means), is run again on a fresh server, once;
# the goals are the same. The run prints which.
STALL_S = 0.050
RUNS = 2


# ---- the server (this file run as a script) ----


def serve() -> None:
    import uvicorn

    import surgeguard as sg
    from surgeguard.asgi import OverloadMiddleware

    dependency = asyncio.Semaphore(SLOTS)
    held = {"s": 0.0, "n": 0}  # how long the dependency's calls really took

    async def app(scope, receive, send):
        if scope["type"] != "http":  # uvicorn runs with lifespan="off"; nothing else comes
            return
        async with dependency:
            t = time.monotonic()
            await asyncio.sleep(SERVICE_S)
            held["s"] += time.monotonic() - t
            held["n"] += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    gate = sg.Gate()
    protected = OverloadMiddleware(app, gate=gate, health_path="/healthz")

    lag = {"max": 0.0, "stalls": 0}

    async def watch_loop():
        # How late the event loop wakes a 10 ms sleep: a server starved of CPU shows here.
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            late = time.monotonic() - t - 0.01
            lag["max"] = max(lag["max"], late)
            lag["stalls"] += late > STALL_S

    async def root(scope, receive, send):
        # The gate's metrics, read outside the middleware (the test's probe, not the user's app).
        if scope["type"] == "http" and scope["path"] == "/_state":
            m = gate.metrics()
            body = json.dumps({"limit": gate.limit, "waiting": m["waiting"], "sloughed": m["sloughed"],
                               "expired": m["expired"], "evicted": m["evicted"],
                               "rejected": m["limiter"]["rejected"], "admitted": m["limiter"]["admitted"],
                               "inflight": m["limiter"]["inflight"], "cpu_s": time.process_time(),
                               "codel_drops": m["codel_drops"], "rejected_by_level": m["limiter"]["rejected_by_level"],
                               "loop_lag_max_s": lag["max"], "loop_stalls": lag["stalls"],
                               "service_mean_s": held["s"] / max(1, held["n"])}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await protected(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(root, lifespan="off", log_level="warning", access_log=False,
                                           backlog=2048))

    async def main():
        watcher = asyncio.create_task(watch_loop())  # held: the loop keeps only a weak reference
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        await task
        watcher.cancel()

    asyncio.run(main())


# ---- the test ----


def arrivals(rate: float, duration: float, seed: int):
    """Seeded Poisson arrivals: (seconds from the start, priority)."""
    rng = random.Random(seed)
    names = [name for name, _ in MIX]
    weights = [share for _, share in MIX]
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append((t, rng.choices(names, weights)[0]))


class Server:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise AssertionError(f"server did not start: {line!r} (its stderr is above)")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait()


class Connections:
    """A small HTTP/1.1 keep-alive client over asyncio streams: one GET per connection at a
    time, idle connections reused, a connection whose attempt timed out closed (the server
    sees the client leave)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.idle = []

    async def get(self, path: str, headers: dict) -> int:
        conn = None
        while self.idle and conn is None:
            conn = self.idle.pop()
            if conn[0].at_eof() or conn[1].is_closing():  # the server closed it while idle
                conn[1].transport.abort()
                conn = None
        if conn is None:
            conn = await asyncio.open_connection(self.host, self.port)
        reader, writer = conn
        try:
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(f"GET {path} HTTP/1.1\r\nhost: {self.host}\r\n{head}\r\n".encode())
            lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
            status = int(lines[0].split()[1])
            length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                           if line.lower().startswith(b"content-length:")), None)
            if length is None:
                raise ValueError("a response without content-length")
            await reader.readexactly(length)
        except BaseException:
            writer.transport.abort()
            raise
        self.idle.append(conn)
        return status

    def close(self):
        for _, writer in self.idle:
            writer.transport.abort()


async def run_load(url: str, rate: float, seed: int) -> dict:
    plan = arrivals(rate, DURATION_S, seed)
    requests, succeeded = Counter(), Counter()
    attempts, statuses, timeouts, errors = Counter(), Counter(), Counter(), Counter()
    lags = []
    host, port = url.removeprefix("http://").split(":")
    client = Connections(host, int(port))

    async def request(priority):
        requests[priority] += 1
        headers = {"x-request-priority": priority}
        for _ in range(1 + RETRIES):
            attempts[priority] += 1
            try:
                status = await asyncio.wait_for(client.get("/work", headers), ATTEMPT_TIMEOUT_S)
            except asyncio.TimeoutError:
                timeouts[priority] += 1
                continue
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                errors[type(exc).__name__] += 1
                continue
            statuses[status] += 1
            if status == 200:
                succeeded[priority] += 1
                return
            if status not in (429, 503):
                return

    loop = asyncio.get_running_loop()
    tasks = []
    cpu0 = time.process_time()
    start = loop.time()
    for t, priority in plan:
        delay = start + t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(loop.time() - start - t)
        tasks.append(asyncio.create_task(request(priority)))
    sent = loop.time() - start
    await asyncio.gather(*tasks)
    cpu = time.process_time() - cpu0
    client.close()
    state = json.loads(fetch_json(url + "/_state"))
    lags.sort()
    return {"rate": rate, "sent_s": sent, "requests": requests, "succeeded": succeeded,
            "attempts": attempts, "statuses": statuses, "timeouts": timeouts, "errors": errors,
            "lag_p99": lags[int(0.99 * (len(lags) - 1))], "lag_max": lags[-1], "client_cpu": cpu, "state": state}


def fetch_json(url: str) -> bytes:
    """One GET outside the load (blocking: the load is over)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def report(res: dict) -> str:
    n = sum(res["requests"].values())
    ok = sum(res["succeeded"].values())
    tries = sum(res["attempts"].values())
    per = "  ".join(f"{p} {res['succeeded'][p] / res['requests'][p]:.2%} of {res['requests'][p]}"
                    for p, _ in MIX)
    s = res["state"]
    return (f"load {res['rate'] / CAPACITY:.0%} ({res['rate']:.0f} req/s; sent {n} in {res['sent_s']:.1f} s = "
            f"{n / res['sent_s']:.0f} req/s, generator lag p99 {res['lag_p99'] * 1e3:.1f} ms "
            f"max {res['lag_max'] * 1e3:.1f} ms)\n"
            f"  success {ok / n:.2%} ({per})\n"
            f"  attempts per request {tries / n:.3f}; 503s {res['statuses'][503]} ({res['statuses'][503] / n:.2%}), "
            f"429s {res['statuses'][429]}, timeouts {sum(res['timeouts'].values())}, "
            f"errors {dict(res['errors']) or 0}\n"
            f"  CPU per attempt: client {res['client_cpu'] / tries * 1e3:.2f} ms, "
            f"server {s['cpu_s'] / tries * 1e3:.2f} ms; "
            f"server loop lag max {s['loop_lag_max_s'] * 1e3:.0f} ms, stalls over {STALL_S * 1e3:.0f} ms "
            f"{s['loop_stalls']}; the dependency's {SERVICE_S * 1e3:.0f} ms took {s['service_mean_s'] * 1e3:.1f} ms "
            f"on average (utilization {s['admitted'] / res['sent_s'] * s['service_mean_s'] / SLOTS:.0%})\n"
            f"  gate: limit {s['limit']:.1f}, waiting {s['waiting']}, sloughed {s['sloughed']} "
            f"(CoDel drops by level {s['codel_drops']}), expired {s['expired']}, evicted {s['evicted']}, "
            f"admitted {s['admitted']} "
            f"(not at once {s['rejected']}, by level {s['rejected_by_level']}), in flight {s['inflight']}")


def shortfalls(res: dict) -> list:
    """The goals this run missed."""
    n = sum(res["requests"].values())
    missed = []
    if sum(res["succeeded"].values()) < 0.999 * n:
        missed.append("success below 99.9% of requests")
    if res["succeeded"]["background"] < 0.995 * res["requests"]["background"]:
        missed.append("background success below 99.5%")
    if res["statuses"][503] > 0.001 * n:
        missed.append("503s above 0.1% of requests")
    if sum(res["attempts"].values()) > 1.01 * n:
        missed.append("attempts above 1.01 per request")
    return missed


def stalled(res: dict) -> bool:
    """The machine, not the gate, held the server or the generator back longer than
    ``STALL_S``, or slowed the dependency (its timers) by more than a tenth."""
    s = res["state"]
    return max(s["loop_lag_max_s"], res["lag_max"]) > STALL_S or s["service_mean_s"] > 1.1 * SERVICE_S


async def healthy_at(load: float, seed: int) -> None:
    for run in range(1, RUNS + 1):
        server = Server()
        try:
            res = await run_load(server.url, load * CAPACITY, seed)
        finally:
            server.stop()
        text = report(res)
        print(text)
        missed = shortfalls(res)
        if not missed or not stalled(res):
            break
        if run < RUNS:
            print(f"  missed ({'; '.join(missed)}) while the machine stalled the test: "
                  "the same load again on a fresh server")
    note = " (the machine stalled the test in every run: see the lags above)" if stalled(res) else ""
    assert not missed, f"{'; '.join(missed)}{note}\n{text}"


async def test_half_capacity_is_served_whole():
    await healthy_at(0.50, SEED)


async def test_three_quarters_capacity_is_served_whole():
    await healthy_at(0.75, SEED + 1)


if __name__ == "__main__":
    serve()
