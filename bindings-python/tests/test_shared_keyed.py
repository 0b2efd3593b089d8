"""Per-key caps across worker processes: ``KeyedLimits.shared`` with real processes.

The shared table makes exactly the in-process table's decisions; forked workers share
the per-key caps; a worker killed holding key permits gives them back exactly once;
workers attaching by name hash keys alike; another config is refused.
"""

import os
import signal
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import surgeguard as sg
from surgeguard import _native

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not hasattr(_native, "SharedGate"), reason="shared memory is Linux-only"
)

KeyedLimits = sg.KeyedLimits


def unique(tag):
    return f"pytest-{tag}-{os.getpid()}-{time.monotonic_ns()}"


def fork(fn):
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            code = fn() or 0
        finally:
            os._exit(code)
    return pid


def outcome(table, key, cost, now):
    try:
        return table.try_acquire(key, cost, now_ns=now), None
    except sg.Rejected as e:
        return None, (type(e).__name__, e.retry_after)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, 9), st.integers(0, 2)),
        st.tuples(st.just("release"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("advance"), st.integers(0, 20_000_000), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, rate=st.booleans(), k=st.integers(1, 3), seed=st.integers(0, 2**64 - 1))
def test_shared_table_makes_the_in_process_decisions(ops, rate, k, seed):
    kw = dict(shards=8, shards_per_key=k, seed=seed, hash_seed=11)
    if rate:
        kw.update(rate=200.0, burst=3)
    local = KeyedLimits(2, **kw)
    shared = KeyedLimits.shared(None, 2, **kw)
    assert shared.is_shared and not local.is_shared
    now = 10**9
    held = []
    for op, a, b in ops:
        if op == "acquire":
            key = f"tenant-{a}"
            p, why = outcome(local, key, b, now)
            q, why2 = outcome(shared, key, b, now)
            assert why == why2
            assert (p is None) == (q is None)
            if p is not None:
                held.append((p, q))
        elif op == "release" and held:
            p, q = held.pop(a % len(held))
            p.release()
            q.release()
        elif op == "advance":
            now += a
    assert local.metrics() == shared.metrics()
    for p, q in held:
        p.release()
        q.release()
    assert shared.metrics()["in_flight"] == 0


def test_forked_workers_share_the_caps_and_a_killed_workers_permits_come_back_once():
    table = KeyedLimits.shared(None, 2, shards=16, shards_per_key=1)
    r, w = os.pipe()
    pids = []
    for _ in range(4):

        def child():
            try:
                p = table.try_acquire("tenant-a")  # noqa: F841 - held until killed
                os.write(w, b"y")
            except sg.KeyLimit:
                os.write(w, b"n")
            time.sleep(60)

        pids.append(fork(child))
    got = b"".join(os.read(r, 1) for _ in pids)
    assert sorted(got) == sorted(b"yynn")  # one cap across the workers
    assert table.metrics()["in_flight"] == 2
    with pytest.raises(sg.KeyLimit):
        table.try_acquire("tenant-a")
    assert table.reclaim() == 0  # live workers are never reclaimed
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert table.reclaim() == 2  # exactly the two held
    assert table.reclaim() == 0  # and only once
    with table.try_acquire("tenant-a"), table.try_acquire("tenant-a"):
        assert table.metrics()["in_flight"] == 2
    assert table.metrics()["in_flight"] == 0


def test_by_name_one_table_one_hash_and_refusals():
    name = unique("keyed")
    a = KeyedLimits.shared(name, 3, shards=8)
    r, w = os.pipe()

    def child():
        b = KeyedLimits.shared(name, 3, shards=8)
        with b.try_acquire("x"):
            os.write(w, str(b.hash("x")).encode().ljust(24))
            time.sleep(0.2)
        return 0

    pid = fork(child)
    child_hash = int(os.read(r, 24))
    assert child_hash == a.hash("x")  # one seed for the segment, in every process
    deadline = time.monotonic() + 5
    while a.metrics()["in_flight"] != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert a.metrics()["admitted"] == 1 and a.metrics()["in_flight"] == 0
    with pytest.raises(ValueError):
        KeyedLimits.shared(name, 4, shards=8)  # another config
    with pytest.raises(ValueError):
        KeyedLimits.shared(name, 3, shards=16)  # another table size
    with pytest.raises(ValueError):
        KeyedLimits.shared("bad name", 3)
    with pytest.raises(TypeError):
        KeyedLimits.shared(b"bytes", 3)
    with pytest.raises(sg.ConfigError):
        KeyedLimits.shared(unique("zero"), 0)
    with pytest.raises(ValueError):
        KeyedLimits.shared(unique("shards"), 1, shards=7)
    other = KeyedLimits.shared(None, 3, shards=8)
    p = a.try_acquire("x")
    with pytest.raises(sg.UsageError):
        other.release(p)  # another table's permit: refused, nothing changes
    assert a.metrics()["in_flight"] == 1 and other.metrics()["in_flight"] == 0
    a.release(p)
    with pytest.raises(sg.UsageError):
        p.release()  # released once
    assert a.metrics()["in_flight"] == 0
    os.unlink(f"/dev/shm/surgeguard.{name}")
