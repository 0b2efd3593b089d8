"""Hot-path costs of the Python bindings beside a floor and the usual peers, in one run.

Workload simulated: an uncontended admission on a request path — no waiting, no queue —
which is what every request pays when a service is healthy:

- sync:   ``with gate.acquire(): ...`` vs ``with threading.Semaphore``
- async:  ``async with gate.acquire_async(): ...`` vs ``asyncio.Semaphore``, ``aiolimiter``
- breaker: a decorated function call vs ``pybreaker`` (overhead over the bare call)
- budget: ``RetryBudget.deposit()`` + ``try_withdraw()`` (the retry path's check)

Floor: a bound C method call (``lst.__len__()``), the cheapest thing a Python call can do.
Each number is the best of several repeats (ns per operation, loop overhead included);
ratios are to the floor measured in the same run. Run by hand:

    .venv/bin/pip install -r bindings-python/bench/requirements.txt
    .venv/bin/python bindings-python/bench/bench.py
"""

from __future__ import annotations

import asyncio
import platform
import sys
import threading
import time
import timeit

import surgeguard as sg

try:
    import aiolimiter
except ImportError:  # pragma: no cover
    aiolimiter = None
try:
    import pybreaker
except ImportError:  # pragma: no cover
    pybreaker = None

N = 200_000
REPEAT = 7


def per_op(stmt: str, env: dict, n: int = N) -> float:
    t = min(timeit.repeat(stmt, globals=env, number=n, repeat=REPEAT))
    return t / n * 1e9


def per_op_async(make_body, n: int = N // 2) -> float:
    """Best of REPEAT runs of a coroutine doing `n` operations."""

    async def run() -> float:
        best = float("inf")
        body = make_body()
        for _ in range(REPEAT):
            t0 = time.perf_counter_ns()
            await body(n)
            best = min(best, (time.perf_counter_ns() - t0) / n)
        return best

    return asyncio.run(run())


def main() -> None:
    rows = []
    lst: list = []
    floor = per_op("f()", {"f": lst.__len__})
    rows.append(("floor: bound C method call `lst.__len__()`", floor))

    # A native `with` block that does nothing: a reported BreakerCall's __enter__/__exit__.
    done_call = sg.CircuitBreaker().try_acquire()
    done_call.success()
    rows.append(("floor: native `with` block doing nothing", per_op("with c: pass", {"c": done_call})))
    rows.append(("native clock read `surgeguard.clock_ns()`", per_op("c()", {"c": sg.clock_ns})))

    gate = sg.Gate(limit=1_000_000)
    limiter = sg.Limiter(limit=1_000_000)
    sem = threading.Semaphore(1_000_000)
    env = {"gate": gate, "limiter": limiter, "sem": sem}
    sync_gate = per_op("with gate.acquire(): pass", env)
    rows.append(("sync: `with gate.acquire(): pass`", sync_gate))
    rows.append(("sync: `p = gate.try_acquire(); p.success()`", per_op("p = gate.try_acquire(); p.success()", env)))
    rows.append(("sync: `with limiter.acquire(): pass`", per_op("with limiter.acquire(): pass", env)))
    sem_t = per_op("with sem: pass", env)
    rows.append(("peer: `with threading.Semaphore: pass`", sem_t))

    def gate_body():
        async def body(n: int) -> None:
            for _ in range(n):
                async with gate.acquire_async():
                    pass

        return body

    def asem_body():
        asem = asyncio.Semaphore(1_000_000)

        async def body(n: int) -> None:
            for _ in range(n):
                async with asem:
                    pass

        return body

    def aiolimiter_body():
        lim = aiolimiter.AsyncLimiter(1e12, 1.0)

        async def body(n: int) -> None:
            for _ in range(n):
                async with lim:
                    pass

        return body

    def floor_body():
        async def body(n: int) -> None:
            f = lst.__len__
            for _ in range(n):
                f()

        return body

    async_floor = per_op_async(floor_body)
    rows.append(("async floor: the same C call inside a coroutine loop", async_floor))
    async_gate = per_op_async(gate_body)
    rows.append(("async: `async with gate.acquire_async(): pass`", async_gate))
    asem_t = per_op_async(asem_body)
    rows.append(("peer: `async with asyncio.Semaphore: pass`", asem_t))
    if aiolimiter is not None:
        rows.append(("peer: `async with aiolimiter.AsyncLimiter: pass`", per_op_async(aiolimiter_body)))

    def plain(x):
        return x

    breaker = sg.CircuitBreaker()
    ours = breaker(plain)
    env_b = {"plain": plain, "ours": ours}
    plain_t = per_op("plain(1)", env_b)
    ours_t = per_op("ours(1)", env_b)
    rows.append(("bare Python function call `plain(1)`", plain_t))
    rows.append(("breaker: `@CircuitBreaker` call", ours_t))
    py_t = None
    if pybreaker is not None:
        pb = pybreaker.CircuitBreaker()
        theirs = pb(plain)
        py_t = per_op("theirs(1)", {"theirs": theirs}, n=N // 4)
        rows.append(("peer: `@pybreaker.CircuitBreaker` call", py_t))

    budget = sg.RetryBudget(min_retries_per_sec=1_000_000)
    env_r = {"budget": budget}
    rows.append(("budget: `budget.deposit()`", per_op("budget.deposit()", env_r)))
    rows.append(("budget: `budget.try_withdraw()`", per_op("budget.try_withdraw()", env_r)))

    print(f"Python {sys.version.split()[0]} on {platform.machine()}, surgeguard {sg.__version__}; "
          f"best of {REPEAT}, ns/op (loop included)\n")
    print(f"| {'operation':62s} | {'ns/op':>8s} | {'× floor':>8s} |")
    print(f"|{'-' * 64}|{'-' * 10}|{'-' * 10}|")
    for name, t in rows:
        base = async_floor if name.startswith(("async", "peer: `async")) else floor
        print(f"| {name:62s} | {t:8.1f} | {t / base:8.2f} |")
    print()
    print(f"sync with-block vs threading.Semaphore: {sem_t / sync_gate:.2f}× faster")
    print(f"async with-block vs asyncio.Semaphore:  {asem_t / async_gate:.2f}× faster")
    if py_t is not None:
        ours_over = ours_t - plain_t
        theirs_over = py_t - plain_t
        print(f"breaker overhead: ours {ours_over:.0f} ns, pybreaker {theirs_over:.0f} ns "
              f"(ratio {ours_over / theirs_over:.3f}; target <= 0.2)")
    print(f"sync acquire+release over the floor: {sync_gate - floor:.0f} ns (`with` block)")


if __name__ == "__main__":
    main()
