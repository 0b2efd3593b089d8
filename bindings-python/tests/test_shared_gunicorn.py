"""One limit across gunicorn workers, with real processes.

``gunicorn -w 4 -k uvicorn.workers.UvicornWorker`` serves an ASGI app whose handler holds
a permit of a limiter of limit L while it calls a dependency: a small threaded HTTP server
in the test process that records how many calls it serves at once. The same with the ASGI middleware over ``surgeguard.Gate.shared`` (a shared queue: requests
wait for a release in any worker) and over one ``Gate`` per worker. With
``surgeguard.Limiter.shared`` (created in the master before the fork with ``--preload``,
or attached by name in each worker after it) the dependency never sees more than L at
once; with one ``surgeguard.Limiter`` per worker it sees up to 4 x L, and more than L in
this run.
"""

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import surgeguard

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="shared memory is Linux-only"),
    pytest.mark.skipif(
        subprocess.run([sys.executable, "-c", "import gunicorn, uvicorn.workers"], capture_output=True).returncode != 0,
        reason="needs gunicorn and uvicorn (tests/requirements.txt)",
    ),
]

WORKERS = 4
LIMIT = 2
HOLD = 0.25  # seconds the dependency takes per call
CLIENTS = 24  # concurrent clients
REQUESTS = 72  # requests in all
GATE_TIMEOUT = 1.5  # the middleware's deadline (wait + service) with a gate

APP = textwrap.dedent(
    '''
    import asyncio, os, surgeguard

    L = int(os.environ["SG_LIMIT"])
    DEP_PORT = int(os.environ["SG_DEP_PORT"])
    MODE = os.environ["SG_MODE"]
    if MODE == "shared":  # attached by name in each worker (or created by the first)
        limiter = surgeguard.Limiter.shared(os.environ["SG_NAME"], limit=L, levels=1)
    elif MODE == "anonymous":  # created in the master before the fork (--preload)
        limiter = surgeguard.Limiter.shared(None, limit=L, levels=1)
    elif MODE == "gate":  # a shared Gate by name: one limit and one queue across workers
        gate = surgeguard.Gate.shared(os.environ["SG_NAME"], limit=L, levels=1, codel=False)
    elif MODE == "gate-anonymous":  # a shared Gate created in the master before the fork
        gate = surgeguard.Gate.shared(None, limit=L, levels=1, codel=False)
    elif MODE == "gate-local":  # one Gate per worker
        gate = surgeguard.Gate(limit=L, levels=1, codel=False)
    else:  # one per worker: the limit is multiplied by the number of workers
        limiter = surgeguard.Limiter(limit=L, levels=1)


    async def call_dependency(path):
        reader, writer = await asyncio.open_connection("127.0.0.1", DEP_PORT)
        writer.write(b"GET " + path.encode() + b" HTTP/1.0\\r\\n\\r\\n")
        await writer.drain()
        data = await reader.read()
        writer.close()
        return data


    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                if m["type"] == "lifespan.startup":
                    open(os.path.join(os.environ["SG_READY"], str(os.getpid())), "w").close()
                    await send({"type": "lifespan.startup.complete"})
                elif m["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        try:
            with limiter.acquire():
                if scope["path"] == "/hang":  # tell the test which worker holds a permit
                    open(os.path.join(os.environ["SG_READY"], f"holder-{os.getpid()}"), "w").close()
                await call_dependency(scope["path"])
            status = 200
        except surgeguard.Rejected:
            status = 503
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": str(os.getpid()).encode()})


    if MODE.startswith("gate"):  # the ASGI middleware admits (queueing), the handler calls
        from surgeguard.asgi import OverloadMiddleware

        limiter = surgeguard.Limiter(limit=1_000_000, levels=1)  # never refuses
        app = OverloadMiddleware(app, gate=gate, timeout=float(os.environ["SG_TIMEOUT"]))
    '''
)


class Dependency:
    """A threaded HTTP server that records the most calls it served at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.max = 0
        self.calls = 0
        self.hang = threading.Event()  # /hang calls wait for it
        dep = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with dep.lock:
                    dep.now += 1
                    dep.calls += 1
                    dep.max = max(dep.max, dep.now)
                try:
                    if self.path == "/hang":
                        dep.hang.wait(20)
                    else:
                        time.sleep(HOLD)
                finally:
                    with dep.lock:
                        dep.now -= 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.hang.set()
        self.server.shutdown()
        self.server.server_close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path="/work"):
    for attempt in range(3):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            c.close()
            return r.status, body
        except ConnectionError:  # pragma: no cover - a worker restarting
            if attempt == 2:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def gunicorn(tmp_path, mode, name=None):
    """Runs gunicorn with the app in `mode`; yields (port, dependency, ready dir)."""
    (tmp_path / "sgapp.py").write_text(APP)
    ready = tmp_path / f"ready-{mode}"
    ready.mkdir()
    dep = Dependency()
    port = free_port()
    env = dict(
        os.environ,
        SG_LIMIT=str(LIMIT),
        SG_DEP_PORT=str(dep.port),
        SG_MODE=mode,
        SG_NAME=name or "",
        SG_READY=str(ready),
        SG_TIMEOUT=str(GATE_TIMEOUT),
    )
    cmd = [
        sys.executable, "-m", "gunicorn",
        "-w", str(WORKERS),
        "-k", "uvicorn.workers.UvicornWorker",
        "-b", f"127.0.0.1:{port}",
        "--chdir", str(tmp_path),
        "--graceful-timeout", "3",
        "--log-level", "warning",
    ]  # fmt: skip
    if mode in ("anonymous", "gate-anonymous"):
        cmd.append("--preload")
    cmd.append("sgapp:app")
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while len(os.listdir(ready)) < WORKERS:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
            assert time.monotonic() < deadline, "gunicorn workers did not start"
            time.sleep(0.05)
        yield port, dep, ready
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()
        dep.close()


def serve_and_drive(tmp_path, mode, name=None, requests=REQUESTS):
    """Runs gunicorn with the app in `mode`, drives it, returns (dependency max, statuses, pids)."""
    with gunicorn(tmp_path, mode, name) as (port, dep, _):
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(lambda _: get(port), range(requests)))
        statuses = [s for s, _ in results]
        pids = {b for s, b in results if s == 200}
        return dep.max, statuses, pids


def test_gunicorn_workers_share_one_limit_by_name(tmp_path):
    name = f"pytest-gunicorn-{os.getpid()}-{time.monotonic_ns()}"
    try:
        most, statuses, pids = serve_and_drive(tmp_path, "shared", name)
        assert set(statuses) <= {200, 503}
        assert most <= LIMIT  # the dependency never saw more than L at once
        assert most == LIMIT and statuses.count(200) >= LIMIT
        assert statuses.count(503) > 0  # the rest were refused, across all workers
        # Every worker released what it held (or, killed by the shutdown, was reclaimed).
        mine = surgeguard.Limiter.shared(name, limit=LIMIT, levels=1)
        mine.reclaim()
        assert mine.inflight == 0
    finally:
        surgeguard.Limiter.unlink(name)


def test_a_shared_limiter_refuses_the_wave_a_shared_gate_queues(tmp_path):
    """The comparison for the test above: the same wave through the shared limiter (no
    queue) is served only as far as L admissions at once allow."""
    name = f"pytest-gunicorn-wave-{os.getpid()}-{time.monotonic_ns()}"
    try:
        most, statuses, pids = serve_and_drive(tmp_path, "shared", name, requests=CLIENTS)
        served, refused = statuses.count(200), statuses.count(503)
        print(f"shared limiter, {CLIENTS} at once: served {served}, refused {refused}, peak {most}")
        assert most <= LIMIT and refused > served, (served, refused)
    finally:
        surgeguard.Limiter.unlink(name)


def test_gunicorn_workers_share_one_limit_created_before_the_fork(tmp_path):
    most, statuses, pids = serve_and_drive(tmp_path, "anonymous")
    assert set(statuses) <= {200, 503}
    assert most == LIMIT
    assert statuses.count(503) > 0


def test_without_sharing_each_worker_has_its_own_limit(tmp_path):
    most, statuses, pids = serve_and_drive(tmp_path, "local")
    assert set(statuses) <= {200, 503}
    assert len(pids) > 1  # served by several workers ...
    assert LIMIT < most <= WORKERS * LIMIT  # ... each admitting L: more than L at once


def test_gunicorn_workers_share_one_gate_and_queue(tmp_path):
    """The ASGI middleware over ``Gate.shared`` by name: never more than L at the
    dependency, and requests queue across workers (a release in one worker grants a
    request waiting in another) rather than being refused at once; those that cannot
    finish within the middleware's timeout are refused (503)."""
    name = f"pytest-gunicorn-gate-{os.getpid()}-{time.monotonic_ns()}"
    try:
        # One wave of CLIENTS requests at once: admit-or-refuse serves L of them; the
        # shared queue serves those that can finish within the timeout (L per HOLD).
        most, statuses, pids = serve_and_drive(tmp_path, "gate", name, requests=CLIENTS)
        served, refused = statuses.count(200), statuses.count(503)
        print(f"shared gate, {CLIENTS} at once: served {served}, refused {refused}, peak {most}")
        assert set(statuses) <= {200, 503}
        assert most == LIMIT  # never more than L at once
        mine = surgeguard.Gate.shared(name, limit=LIMIT, levels=1, codel=False)
        m = mine.metrics()
        assert m["queued"] > 0 and m["granted"] > 0  # requests waited and were granted
        assert served >= 2 * LIMIT and refused > 0, (served, refused)  # queued, deadline kept
        assert m["granted"] >= served - LIMIT  # all but the first L came from the queue
        mine.reclaim()
        assert mine.inflight == 0 and mine.waiting() == 0
    finally:
        surgeguard.SharedGate.unlink(name)


def test_gunicorn_workers_share_one_gate_created_before_the_fork(tmp_path):
    """``Gate.shared(None, ...)`` in the master (``--preload``): each worker starts its own
    pump thread after the fork; the limit holds and requests queue across workers."""
    most, statuses, pids = serve_and_drive(tmp_path, "gate-anonymous", requests=CLIENTS)
    served, refused = statuses.count(200), statuses.count(503)
    print(f"shared gate before the fork, {CLIENTS} at once: served {served}, refused {refused}, peak {most}")
    assert set(statuses) <= {200, 503}
    assert most == LIMIT
    assert served >= 2 * LIMIT and refused > 0, (served, refused)


def test_without_sharing_each_worker_has_its_own_gate(tmp_path):
    most, statuses, pids = serve_and_drive(tmp_path, "gate-local")
    print(f"one gate per worker: served {statuses.count(200)}, refused {statuses.count(503)}, peak {most}")
    assert set(statuses) <= {200, 503}
    assert LIMIT < most <= WORKERS * LIMIT


def test_a_worker_killed_while_holding_permits_gives_them_back(tmp_path):
    """Two requests hold both permits (their dependency calls hang); their workers are
    killed with SIGKILL; the next request to a live worker is admitted: its refused
    acquire sweeps the dead workers' permits back (at most 100 ms after the first
    refusal they cause, the crate's documented bound)."""
    name = f"pytest-gunicorn-kill-{os.getpid()}-{time.monotonic_ns()}"

    def hang(port):
        try:
            get_once(port, "/hang")
        except OSError:
            pass  # its worker was killed

    try:
        with gunicorn(tmp_path, "shared", name) as (port, dep, ready):
            hanging = [threading.Thread(target=hang, args=(port,), daemon=True) for _ in range(LIMIT)]
            for t in hanging:
                t.start()
            deadline = time.monotonic() + 10
            while dep.now < LIMIT:
                assert time.monotonic() < deadline, "the hanging requests did not arrive"
                time.sleep(0.01)
            holders = {int(f.split("-")[1]) for f in os.listdir(ready) if f.startswith("holder-")}
            assert 1 <= len(holders) <= LIMIT
            assert get(port)[0] == 503  # the limit is taken, across the workers
            for pid in holders:
                os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            while any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in holders):
                assert time.monotonic() - killed < 5
                time.sleep(0.01)
            # The dead workers' calls still run at the dependency (a request does not stop
            # when its sender dies): end them first, or the dependency would count them
            # beside the requests admitted on the reclaimed permits.
            dep.hang.set()
            while dep.now:
                assert time.monotonic() - killed < 5
                time.sleep(0.01)
            dep.max = 0
            dead = time.monotonic()
            statuses = []
            while not statuses or statuses[-1] != 200:
                statuses.append(get(port)[0])
                assert time.monotonic() - dead < SWEEP_BOUND + 2.0, statuses  # + slack for a loaded host
            assert dep.max <= LIMIT
            # Both came back, each once: two requests at once are admitted, a third is not.
            with ThreadPoolExecutor(CLIENTS) as pool:
                results = [s for s, _ in pool.map(lambda _: get(port), range(CLIENTS))]
            assert dep.max <= LIMIT and results.count(200) >= LIMIT, results
    finally:
        surgeguard.Limiter.unlink(name)


SWEEP_BOUND = 0.1


def test_a_gate_worker_killed_holding_permits_and_queued_tickets_gives_them_back(tmp_path):
    """A shared Gate: two requests hold both permits (their dependency calls hang) and
    more requests wait in the shared queue, in several workers; the holders' workers are
    killed (SIGKILL), some with queued tickets of their own. The live workers' waiting
    requests are then granted (their pump threads sweep the dead workers at most every
    100 ms) and served; the dead workers' tickets are withdrawn, not granted to nobody.
    gunicorn spreads the waiters over its workers as it likes: a run in which every one
    was queued in a killed worker checks nothing, and is run again (at most 3 runs)."""
    for attempt in range(3):
        run_dir = tmp_path / f"run{attempt}"
        run_dir.mkdir()
        if _gate_kill_run(run_dir):
            return
    pytest.fail("in 3 runs every waiting request was queued in a killed worker")


def _gate_kill_run(tmp_path):
    """One run of the test above; False if no waiter was queued in a live worker."""
    name = f"pytest-gunicorn-gatekill-{os.getpid()}-{time.monotonic_ns()}"
    waiters = 8
    done = {}

    def hang(port):
        try:
            get_once(port, "/hang")
        except OSError:
            pass  # its worker was killed

    def work(port, i):
        try:
            done[i] = (get_once(port, "/work"), time.monotonic())
        except OSError:
            done[i] = (None, time.monotonic())  # queued in a killed worker

    try:
        with gunicorn(tmp_path, "gate", name) as (port, dep, ready):
            gate = surgeguard.Gate.shared(name, limit=LIMIT, levels=1, codel=False)
            hanging = [threading.Thread(target=hang, args=(port,), daemon=True) for _ in range(LIMIT)]
            for t in hanging:
                t.start()
            deadline = time.monotonic() + 10
            while dep.now < LIMIT:
                assert time.monotonic() < deadline, "the hanging requests did not arrive"
                time.sleep(0.01)
            queued = [threading.Thread(target=work, args=(port, i), daemon=True) for i in range(waiters)]
            for t in queued:
                t.start()
            while gate.waiting() < waiters:
                assert time.monotonic() < deadline, f"only {gate.waiting()} queued"
                time.sleep(0.01)
            holders = {int(f.split("-")[1]) for f in os.listdir(ready) if f.startswith("holder-")}
            assert gate.inflight == LIMIT and 1 <= len(holders) <= LIMIT
            for pid in holders:
                os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            dep.hang.set()  # the dead workers' calls end at the dependency
            for t in queued:
                t.join(10)
            served = {i: at - killed for i, (status, at) in done.items() if status == 200}
            if len(done) == waiters and all(status is None for status, _ in done.values()):
                return False  # every waiter was in a killed worker
            print(f"gate kill -9: {len(served)} of {waiters} waiters served, first after "
                  f"{min(served.values()) * 1000:.0f} ms")  # fmt: skip
            assert served, done  # the live workers' waiters were granted ...
            # ... within the sweep bound (+ the dependency's HOLD, + slack for a loaded host)
            assert min(served.values()) < SWEEP_BOUND + HOLD + 1.0, served
            # 503: a waiter whose deadline (the middleware's timeout) passed in the queue.
            assert set(s for s, _ in done.values()) <= {200, 503, None}, done
            end = time.monotonic() + 5
            while gate.waiting() or gate.inflight:  # nothing left queued or held for the dead
                gate.reclaim()
                assert time.monotonic() < end, (gate.waiting(), gate.inflight)
                time.sleep(0.02)
    finally:
        surgeguard.SharedGate.unlink(name)
    return True


def _alive(pid):
    """A zombie (killed, not yet reaped by the gunicorn master) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def get_once(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status
