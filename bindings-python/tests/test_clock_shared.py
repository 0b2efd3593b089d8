"""The native clock is raw CLOCK_MONOTONIC: the same origin in every process.

A timestamp stored by one worker process (a GCRA arrival time, a deadline) must mean the
same to another, so the native clock cannot be "time since this process first asked".
Python's own ``time.monotonic_ns()`` reads CLOCK_MONOTONIC on Linux, so it brackets ours.
"""

import os
import sys
import time

import pytest

import surgeguard as sg

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="CLOCK_MONOTONIC origin is Linux-specific here")


def test_clock_ns_is_clock_monotonic():
    for _ in range(100):
        before = time.monotonic_ns()
        ours = sg.clock_ns()
        after = time.monotonic_ns()
        assert before <= ours <= after, (before, ours, after)


def test_a_forked_child_reads_the_same_clock():
    r, w = os.pipe()
    parent_before = sg.clock_ns()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        os.write(w, str(sg.clock_ns()).encode())
        os._exit(0)
    os.close(w)
    child = int(os.read(r, 64).decode())
    os.close(r)
    os.waitpid(pid, 0)
    parent_after = sg.clock_ns()
    assert parent_before <= child <= parent_after
