"""One limit across worker processes: a Limiter placed in shared memory, with real processes.

Forked workers share one limit; a worker killed with SIGKILL while holding permits gets
them back to the others; workers attaching by name agree on one segment; another config
is refused.
"""

import os
import signal
import sys
import time

import pytest

from surgeguard import _native

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not hasattr(_native, "SharedGate"), reason="shared memory is Linux-only"
)

def SharedLimiter(name, **kw):
    """A Limiter placed in shared memory (`shared=` of the constructor)."""
    return _native.Limiter(shared=True if name is None else name, **kw)


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


def test_created_before_fork_shared_by_children_and_a_killed_child_gives_its_permits_back():
    shared = SharedLimiter(None, limit=4, levels=1)
    r, w = os.pipe()

    def child():
        held = [shared.try_acquire() for _ in range(3)]  # noqa: F841 - held until killed
        os.write(w, b"x")
        time.sleep(60)

    pid = fork(child)
    assert os.read(r, 1) == b"x"
    assert shared.inflight == 3  # the child's permits, seen by the parent
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    # The 2nd acquire is refused for want of a slot, sweeps, and gets one of the child's.
    mine = [shared.try_acquire() for _ in range(4)]
    assert shared.inflight == 4
    with pytest.raises(_native_rejected()):
        shared.try_acquire()
    assert shared.reclaim() == 0  # nothing reclaimed twice
    for p in mine:
        p.success()
    assert shared.inflight == 0
    assert shared.metrics()["ignored"] == 3  # reclaimed as ignored: no latency sample


def _native_rejected():
    import surgeguard

    return surgeguard.Rejected


def test_attached_by_name_after_fork_and_refused_with_another_config():
    name = unique("name")
    r, w = os.pipe()
    go_r, go_w = os.pipe()

    def child():
        s = SharedLimiter(name, limit=10, levels=1)
        p = s.try_acquire()  # noqa: F841 - held
        os.write(w, b"1" if s.created else b"0")
        os.read(go_r, 1)
        p.success()
        return 0

    pids = [fork(child) for _ in range(4)]
    flags = b"".join(os.read(r, 1) for _ in pids)
    assert flags.count(b"1") == 1, flags  # exactly one creator
    mine = SharedLimiter(name, limit=10, levels=1)
    assert not mine.created
    assert mine.inflight == 4
    with pytest.raises(ValueError, match="another config"):
        SharedLimiter(name, limit=11, levels=1)
    os.write(go_w, b"gggg")
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    assert mine.inflight == 0
    _native.Limiter.unlink(name)


def test_permits_release_once_and_bad_input_is_refused():
    shared = SharedLimiter(None, limit=2, levels=1)
    with shared.try_acquire() as p:
        assert p.held
    assert not p.held
    with pytest.raises(RuntimeError):
        p.success()
    with pytest.raises(ValueError):
        shared.try_acquire(now_ns=2**63)
    with pytest.raises(ValueError):
        SharedLimiter("bad name")
    assert shared.inflight == 0


# ---- the facade: surgeguard.Limiter.shared ------------------------------------------


def test_limiter_shared_has_the_limiter_api():
    import surgeguard

    shared = surgeguard.Limiter.shared(None, limit=2, levels=1)
    assert isinstance(shared, surgeguard.Limiter) and shared.is_shared
    assert shared.levels == 1 and shared.limit == 2
    pending = shared.acquire()
    assert not pending.held and shared.inflight == 0  # admitted on entry, as Limiter.acquire
    with pending as p:
        assert p is pending and p.held and shared.inflight == 1
        assert shared.inflight_of(0) == 1 and shared.held_by_this_process == 1
        with shared.acquire():
            with pytest.raises(surgeguard.Rejected):  # the limit, refused at once (no queue)
                with shared.acquire():
                    pass  # pragma: no cover
    assert shared.inflight == 0
    with pytest.raises(surgeguard.UsageError):  # a released permit cannot be entered again
        pending.__enter__()
    with pytest.raises(surgeguard.UsageError):  # nor released
        pending.success()
    with pytest.raises(ValueError):  # an exception inside: ignored (no latency sample)
        with shared.acquire():
            raise ValueError("boom")
    m = shared.metrics()
    assert m["ignored"] == 1 and shared.inflight == 0
    never = shared.acquire()
    with pytest.raises(surgeguard.UsageError):  # a pending permit holds nothing to release
        never.success()
    del never
    assert shared.inflight == 0
    p = shared.try_acquire()
    del p  # dropped while held: released as ignored
    assert shared.inflight == 0


@pytest.mark.parametrize("name", [1, b"x", 1.5, ["x"]])
def test_limiter_shared_refuses_a_name_of_another_type(name):
    import surgeguard

    with pytest.raises(TypeError, match="name must be a str or None"):
        surgeguard.Limiter.shared(name, limit=2)


@pytest.mark.parametrize("name", ["", "x" * 201, "a b", ".", "..", "é"])
def test_limiter_shared_refuses_a_bad_name(name):
    import surgeguard

    with pytest.raises(ValueError, match="bad shared segment name"):
        surgeguard.Limiter.shared(name, limit=2)


def test_limiter_shared_refuses_bad_config_and_a_mismatched_attach():
    import surgeguard

    name = unique("facade")
    with pytest.raises(ValueError, match="limit"):
        surgeguard.Limiter.shared(name, limit=float("nan"))
    with pytest.raises(TypeError):
        surgeguard.Limiter.shared(name, limit=2, clock=lambda: 0)  # one clock for all processes
    assert not os.path.exists(f"/dev/shm/surgeguard.{name}")  # nothing made by a refusal
    a = surgeguard.Limiter.shared(name, limit=3, levels=1)
    try:
        assert a.created
        b = surgeguard.Limiter.shared(name, limit=3, levels=1)
        assert not b.created
        with a.acquire():
            assert b.inflight == 1
        for other in ({"limit": 4, "levels": 1}, {"limit": 3, "levels": 2}, {"algorithm": "aimd", "levels": 1}):
            with pytest.raises(ValueError, match="another config"):
                surgeguard.Limiter.shared(name, **other)
        with pytest.raises(ValueError):
            a.try_acquire(now_ns=2**62 + 1)
        with pytest.raises(ValueError):
            a.acquire(now_ns=-1)
        assert a.inflight == 0
    finally:
        surgeguard.Limiter.unlink(name)


# ---- kill -9 through the facade: the documented bound -------------------------------

SWEEP_INTERVAL = 0.1  # a refused acquire sweeps at most once per 100 ms (the crate's shm docs)


@pytest.mark.parametrize("how", ["sigkill", "exit_without_release"])
def test_a_killed_worker_attached_by_name_gives_its_permits_back_within_the_bound(how):
    import surgeguard

    name = unique("kill")
    parent = surgeguard.Limiter.shared(name, limit=3, levels=1)
    try:
        mine = parent.try_acquire()
        r, w = os.pipe()
        go_r, go_w = os.pipe()  # the child exits only when told: until then it lives

        def child():
            s = surgeguard.Limiter.shared(name, limit=3, levels=1)  # attached after the fork
            held = [s.acquire().__enter__() for _ in range(2)]  # noqa: F841 - held until killed
            os.write(w, b"x")
            if how == "exit_without_release":
                os.read(go_r, 1)
                os._exit(0)  # no release, no detach: as a crash
            time.sleep(60)

        pid = fork(child)
        assert os.read(r, 1) == b"x"
        assert parent.inflight == 3
        with pytest.raises(surgeguard.Rejected):  # full while the child lives
            parent.try_acquire()
        if how == "sigkill":
            os.kill(pid, signal.SIGKILL)
        else:
            os.write(go_w, b"x")
        os.waitpid(pid, 0)  # dead (reaped)
        died = time.monotonic()
        got = []
        while len(got) < 2:
            try:
                got.append(parent.try_acquire())
            except surgeguard.Rejected:
                assert time.monotonic() - died < SWEEP_INTERVAL + 1.0, "not reclaimed within the bound"
                time.sleep(0.005)
        # Both of the child's permits came back, once each: the limit holds exactly.
        assert parent.inflight == 3 and parent.held_by_this_process == 3
        with pytest.raises(surgeguard.Rejected):
            parent.try_acquire()
        assert parent.reclaim() == 0  # nothing reclaimed twice
        for p in [mine, *got]:
            p.success()
        assert parent.inflight == 0
        assert parent.metrics()["ignored"] == 2  # the child's, released without a sample
    finally:
        surgeguard.Limiter.unlink(name)


def test_async_with_admits_at_once_and_releases_on_exit():
    import asyncio

    import surgeguard

    shared = surgeguard.Limiter.shared(None, limit=1, levels=1)

    async def main():
        async with shared.acquire() as p:
            assert isinstance(p, surgeguard.Permit) and p.held and shared.inflight == 1
            with pytest.raises(surgeguard.Rejected):
                async with shared.acquire():
                    pass  # pragma: no cover
            await asyncio.sleep(0)
        assert not p.held and shared.inflight == 0
        with pytest.raises(KeyError):
            async with shared.try_acquire():
                raise KeyError("x")
        assert shared.inflight == 0
        return shared.metrics()

    m = asyncio.run(main())
    assert m["ignored"] == 1 and m["rejected"] >= 1


# ---- the same decisions as the in-process Limiter -------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CONFIGS = [
    dict(limit=3, levels=1),
    dict(limit=5, levels=3),
    dict(algorithm="aimd", levels=2, min_window=0.001, max_window=0.01, min_samples=1),
    dict(algorithm="gradient", levels=3, min_window=0.001, max_window=0.01, min_samples=1),
]

OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release"]),
        st.integers(0, 2),  # level (clamped to the config's levels) or which permit
        st.sampled_from(["success", "dropped", "ignored"]),
        st.integers(0, 5_000_000),  # ns since the last operation
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(cfg=st.sampled_from(CONFIGS), ops=OPS)
def test_a_shared_limiter_decides_as_the_in_process_one(cfg, ops):
    """Same config, same operations at the same injected times: the same admissions,
    refusal reasons, limits and metrics (the shared limiter is the core's own Limiter,
    placed in shared memory)."""
    import surgeguard

    local = surgeguard.Limiter(**cfg)
    shared = surgeguard.Limiter.shared(None, **cfg)
    now = surgeguard.clock_ns()
    held = []  # (local permit, shared permit)
    for op, n, outcome, dt in ops:
        now += dt
        if op == "acquire":
            level = n % local.levels
            results = []
            for lim in (local, shared):
                try:
                    results.append(lim.try_acquire(level, now_ns=now))
                except surgeguard.Rejected as e:
                    results.append((e.reason, e.retry_after))
            if isinstance(results[0], tuple):
                assert results[0] == results[1]
            else:
                assert not isinstance(results[1], tuple), results
                held.append(tuple(results))
        elif held:
            lp, sp = held.pop(n % len(held))
            lp.release(outcome, now_ns=now)
            sp.release(outcome, now_ns=now)
        assert shared.limit == local.limit and shared.inflight == local.inflight
    lm, sm = local.metrics(), shared.metrics()
    assert lm == sm, (lm, sm)


def test_unlink_says_whether_the_name_existed_and_paths_are_refused_as_in_node(tmp_path):
    # Node's `unlinkShared` answers false for a missing name and refuses a path
    # (RangeError, SG_INVALID_ARG); Python raised OSError for both.
    import surgeguard

    for cls, make in (
        (surgeguard.Limiter, lambda n: surgeguard.Limiter.shared(n, limit=2)),
        (surgeguard.SharedGate, lambda n: surgeguard.Gate.shared(n, limit=2)),
    ):
        name = unique("unlink")
        assert cls.unlink(name) is False  # never made
        obj = make(name)
        assert cls.unlink(name) is True
        assert cls.unlink(name) is False  # already gone; `obj` keeps its segment
        assert obj.inflight == 0
        for bad in ("a/b", str(tmp_path / "seg"), "", "a b", "x" * 201):
            with pytest.raises(ValueError):
                cls.unlink(bad)


def test_a_path_name_in_a_missing_directory_is_the_documented_oserror(tmp_path):
    # A name with a '/' is a path (as in Node, where opening it fails with
    # SG_SHM_UNAVAILABLE): one that cannot be opened is OSError, the contract's "shared
    # memory could not be used", never another type.
    import surgeguard

    for make in (
        lambda n: surgeguard.Limiter.shared(n, limit=2),
        lambda n: surgeguard.Gate.shared(n, limit=2),
        lambda n: surgeguard.RateLimiter.shared(n, 10.0),
        lambda n: surgeguard.KeyedLimits.shared(n, 2),
    ):
        for name in ("a/b", str(tmp_path / "missing" / "seg")):
            with pytest.raises(OSError, match="No such file or directory"):
                make(name)
    # A path in a directory that exists works, and is removed with os.unlink.
    at = str(tmp_path / "seg")
    a = surgeguard.Limiter.shared(at, limit=2, levels=1)
    b = surgeguard.Limiter.shared(at, limit=2, levels=1)
    with a.acquire():
        assert b.inflight == 1
    os.unlink(at)
