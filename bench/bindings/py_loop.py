"""A driver for instruction counts of the Python hot paths (see bench/callgrind-bindings.sh):
runs one path N times after the same warm-up, so that the difference of two runs' counts
divided by the difference of their N is the cost of one iteration.

    python py_loop.py floor|with|try N

floor: a native ``with`` block doing nothing (a reported breaker call, as in
bindings-python/bench/bench.py); with: ``with gate.acquire(): pass``; try:
``gate.try_acquire().success()``. Uses the ``surgeguard`` installed in this interpreter.
"""

import sys

import surgeguard as sg

which, n = sys.argv[1], int(sys.argv[2])
gate = sg.Gate(limit=1_000_000)
done_call = sg.CircuitBreaker().try_acquire()
done_call.success()
for _ in range(2000):
    with gate.acquire():
        pass
    gate.try_acquire().success()
    with done_call:
        pass
if which == "with":
    for _ in range(n):
        with gate.acquire():
            pass
elif which == "try":
    for _ in range(n):
        gate.try_acquire().success()
elif which == "floor":
    for _ in range(n):
        with done_call:
            pass
else:
    raise SystemExit(f"unknown path {which}: floor, with or try")
