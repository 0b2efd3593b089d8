"""Shared helpers for the surgeguard tests."""

import time

import pytest

import surgeguard as sg

SEC = 1_000_000_000
MS = 1_000_000


@pytest.fixture
def gate1():
    """A gate with one slot, one level, no CoDel: deterministic waiting."""
    return sg.Gate(limit=1, levels=1, codel=False)


def settle(g, hold=0.02):
    """Gives the gate a service time (three normal requests of `hold` seconds), so a
    fractional limit keeps its idle slot for a while after a release."""
    for _ in range(3):
        p = g.try_acquire("normal")
        time.sleep(hold)
        p.success()


def no_leaks(g):
    """Nothing in flight, nothing waiting, no waiter left in the binding."""
    m = g.metrics()
    assert m["limiter"]["inflight"] == 0, m
    assert m["waiting"] == 0, m
    assert (m["binding_waiters"], m["binding_orphans"]) == (0, 0), m


class FakeClock:
    """A clock for a whole object (`clock=`): `sleep` advances it, so tests never sleep."""

    def __init__(self):
        self.t = 1_000_000_000

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += int(seconds * 1e9)
