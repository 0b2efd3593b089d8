"""Regression tests for the failures a new user found (one test or more per failure;
each fails on the code before its fix)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import surgeguard as sg


def settle(g, hold=0.02):
    """Gives the gate a service time (three normal requests of `hold` seconds), so a
    fractional limit keeps its idle slot for a while after a release."""
    for _ in range(3):
        p = g.try_acquire("normal")
        time.sleep(hold)
        p.success()


def no_leaks(g):
    m = g.metrics()
    assert m["limiter"]["inflight"] == 0, m
    assert m["waiting"] == 0, m
    assert (m["binding_waiters"], m["binding_orphans"]) == (0, 0), m


# 0. A queued waiter must not wait forever when the only re-check the core asks for is
#    due after a release (a fractional limit: Gate(limit=1.8)).


async def test_0_async_waiter_is_granted_after_a_fractional_release():
    g = sg.Gate(limit=1.8)
    settle(g)
    crit = g.try_acquire("critical")

    async def waiter():
        async with g.acquire_async("normal"):
            return "granted"

    task = asyncio.create_task(waiter())
    while g.waiting() < 1:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.02)
    crit.success()
    # Before the fix nothing was armed after the release: the task waited forever.
    # The share rule holds the slot for critical while it is active (1 s by default).
    assert await asyncio.wait_for(task, 5.0) == "granted"
    no_leaks(g)


def test_0_thread_waiter_is_granted_after_a_fractional_release():
    g = sg.Gate(limit=1.8)
    settle(g)
    crit = g.try_acquire("critical")
    result = []

    def waiter():
        with g.acquire("normal", timeout=5.0):
            result.append("granted")

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 5
    while g.waiting() < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.02)
    crit.success()
    t.join(6)
    assert result == ["granted"]
    no_leaks(g)


# 1. Ctrl-C while blocked in gate.acquire() interrupts at once and leaves nothing behind.


def test_1_keyboard_interrupt_while_blocked_in_acquire():
    g = sg.Gate(limit=1, levels=1, codel=False)
    held = g.try_acquire()
    timer = threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        with g.acquire():  # no timeout: before the fix this blocked for good
            pytest.fail("admitted while the slot is held")
    assert time.monotonic() - t0 < 3.0
    timer.join()
    assert g.waiting() == 0 and g.inflight == 1
    held.success()
    no_leaks(g)


def test_1_sigint_to_a_subprocess_blocked_in_acquire():
    code = textwrap.dedent(
        """
        import sys, surgeguard as sg
        g = sg.Gate(limit=1, levels=1, codel=False)
        held = g.try_acquire()
        print("ready", flush=True)
        try:
            with g.acquire():
                print("admitted", flush=True)
        except KeyboardInterrupt:
            m = g.metrics()
            print("interrupted", g.waiting(), g.inflight, m["binding_waiters"], flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.strip() == "interrupted 0 1 0"


# 2. A permit shared across threads: exactly one end wins, the others get UsageError,
#    and readers never see pyo3 borrow errors.


def test_2_permit_shared_across_threads():
    for _ in range(100):
        g = sg.Gate(limit=1, levels=1, codel=False)
        p = g.try_acquire()
        errors, wins, reads = [], [], []
        barrier = threading.Barrier(4)

        def end():
            barrier.wait()
            try:
                p.success()
                wins.append(1)
            except sg.UsageError:
                pass
            except BaseException as e:  # noqa: BLE001 - the test records anything else
                errors.append(e)

        def read():
            barrier.wait()
            try:
                for _ in range(50):
                    reads.append((p.held, p.outcome))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=end) for _ in range(3)] + [threading.Thread(target=read)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert errors == [] and wins == [1]
        assert p.outcome == "success" and not p.held
        no_leaks(g)


async def test_2_release_that_wakes_an_async_waiter_from_another_thread():
    g = sg.Gate(limit=1, levels=1, codel=False)
    for _ in range(30):
        p = g.try_acquire()
        task = asyncio.create_task(_hold_once(g))
        while g.waiting() < 1:
            await asyncio.sleep(0.001)
        errors = []

        def end():
            try:
                p.success()
            except sg.UsageError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=end) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        await asyncio.wait_for(task, 5)
        assert errors == []
    no_leaks(g)


async def _hold_once(g):
    async with g.acquire_async():
        pass


# 4. Permit misuse raises UsageError.


def test_4_reentering_after_the_block_is_a_usage_error():
    g = sg.Gate(limit=2)
    p = g.acquire()
    with p:
        pass
    with pytest.raises(sg.UsageError):
        with p:
            pass
    assert g.inflight == 0


def test_4_ending_a_permit_never_entered_is_a_usage_error():
    g = sg.Gate(limit=2)
    lim = sg.Limiter(limit=2)
    for p in (g.acquire(), lim.acquire()):
        for end in (p.success, p.dropped, p.ignore, p.release):
            with pytest.raises(sg.UsageError):
                end()
        assert not p.held and p.outcome is None
    assert g.inflight == 0 and lim.inflight == 0


def test_4_nested_with_on_a_held_permit_is_a_usage_error():
    g = sg.Gate(limit=2)
    with g.acquire() as p:
        with pytest.raises(sg.UsageError):
            with p:
                pass
        # The inner attempt did not free the slot while the outer block runs.
        assert p.held and g.inflight == 1
    assert p.outcome == "success" and g.inflight == 0


def test_4_try_acquire_permit_may_be_entered_once():
    g = sg.Gate(limit=2)
    p = g.try_acquire()
    with p:
        assert g.inflight == 1
    assert p.outcome == "success" and g.inflight == 0


def test_4_ending_inside_the_block_is_kept():
    g = sg.Gate(limit=2)
    with g.acquire() as p:
        p.dropped()
    assert p.outcome == "dropped" and g.inflight == 0
