"""The Python replayer of the conformance vectors (tests/vectors/README.md).

Replays every scenario of ``tests/vectors/vectors.json`` through the public Python API with
injected time (``now_ns=``) and fails on the first difference, naming the scenario, the step,
the expected and the actual value. Durations cross the API in seconds: an expected ``ns`` is
compared as ``float(ns) / 1e9`` (the binding's own conversion), ``SG_NEVER`` as ``inf``.

Gate waits go through ``acquire_async`` on an event loop whose clock stands still
(``_FrozenLoop``), with the binding's timer unarmed: the scenario's ``now`` is the only
time, so the binding's real-time timer and timeout backstop never fire; every grant or
drop comes from the polls the binding makes itself after queueing and after each release.
"""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import sys
from typing import Any, Callable

import pytest

import surgeguard as sg
import surgeguard._aio as sg_aio

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "vectors" / "vectors.json"
NEVER = 2**64 - 1


def secs(ns: int) -> float:
    return math.inf if ns == NEVER else float(ns) / 1e9


class Mismatch(AssertionError):
    pass


def same(scenario: str, step: int, what: str, expected: Any, actual: Any) -> None:
    if expected != actual:
        raise Mismatch(f"scenario {scenario} step {step} {what}: expected {expected!r}, actual {actual!r}")


def refusal(call: Callable[[], Any]) -> dict[str, Any]:
    """``{"ok": True}`` or the refusal as the vectors write it (retry_after in seconds)."""
    try:
        call()
    except sg.OverloadError as e:
        return {"ok": False, "reason": e.reason, "retry_after": e.retry_after}
    return {"ok": True}


def expect_secs(e: dict[str, Any]) -> dict[str, Any]:
    out = dict(e)
    if "retry_after" in out:
        out["retry_after"] = secs(out["retry_after"])
    return out


def algorithm(c: dict[str, Any]) -> Any:
    a = dict(c["algo"])
    for k in list(a):
        if k.endswith("_ns"):
            a[k[:-3]] = secs(a.pop(k))
    return {
        "fixed": sg.FixedLimit,
        "aimd": sg.AimdLimit,
        "hysteresis": sg.HysteresisLimit,
        "gradient": sg.GradientLimit,
        "gradient2": sg.Gradient2Limit,
        "vegas": sg.VegasLimit,
    }[c["algorithm"]](**a)


def limiter_kwargs(c: dict[str, Any]) -> dict[str, Any]:
    return dict(
        levels=c["levels"],
        weights=c["weights"],
        min_window=secs(c["min_window_ns"]),
        max_window=secs(c["max_window_ns"]),
        min_samples=c["min_samples"],
        active=secs(c["active_ns"]),
    )


class _FrozenLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock never moves: no timer ever comes due."""

    def time(self) -> float:
        return 0.0


def spin(loop: asyncio.AbstractEventLoop) -> None:
    for _ in range(4):
        loop.run_until_complete(asyncio.sleep(0))


def replay_gate(sc: dict[str, Any]) -> int:
    c = sc["config"]
    name = sc["name"]
    gate = sg.Gate(
        algorithm(c["limiter"]),
        **limiter_kwargs(c["limiter"]),
        queue_capacity=c["queue_capacity"],
        codel={"target": secs(c["codel_target_ns"]), "interval": secs(c["codel_interval_ns"]),
               "mode": c["codel_mode"]} if c["codel"] else False,
        lifo=c["lifo"],
        max_wait=secs(c["max_wait_ns"]) if c["max_wait_ns"] else None,
        aging=(c["aging"]["from"], c["aging"]["to"], secs(c["aging"]["after_ns"])) if c["aging"] else False,
        initial_service=secs(c["initial_service_ns"]),
        service_alpha=c["service_alpha"],
        fallback_retry_after=secs(c["fallback_retry_after_ns"]),
    )
    loop = _FrozenLoop()
    # The binding's asyncio timer re-arms from ``next_wakeup()`` read at the real clock (raw
    # CLOCK_MONOTONIC, hours since boot, far past the scenario's injected times), and the
    # Gate acts at the latest time it has seen: one such read would move the scenario's time
    # forward. The replay drives time itself, so the timer is not armed here.
    arm, sg_aio._Timer.arm = sg_aio._Timer.arm, lambda self: None
    permits: dict[int, Any] = {}
    tasks: dict[int, asyncio.Task[Any]] = {}

    def settled() -> list[dict[str, Any]]:
        """Events delivered since the last look, as the vectors write them."""
        spin(loop)
        evs = []
        for t, task in sorted(tasks.items()):
            if not task.done():
                continue
            del tasks[t]
            if task.cancelled():
                raise Mismatch(f"scenario {name}: ticket {t} cancelled unexpectedly")
            exc = task.exception()
            if exc is None:
                permits[t] = task.result()
                evs.append({"ticket": t, "granted": True})
            elif isinstance(exc, sg.OverloadError):
                evs.append({"ticket": t, "granted": False, "reason": exc.reason, "retry_after": exc.retry_after})
            else:
                raise exc
        return evs

    def events(e: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [expect_secs(x) if not x["granted"] else x for x in e]

    try:
        for i, st in enumerate(sc["steps"]):
            op, exp = st["op"], st["expect"]
            if op == "arrive":
                timeout = None if st["timeout"] is None else secs(st["timeout"])
                permit = gate.acquire_async(st["level"], timeout, now_ns=st["now"])
                try:
                    aw = permit.__aenter__()
                except sg.OverloadError as e:
                    got: dict[str, Any] = {"result": "rejected", "reason": e.reason, "retry_after": e.retry_after}
                    same(name, i, "arrive", expect_secs(exp), got)
                    continue
                if aw is permit:
                    same(name, i, "arrive", exp, {"result": "admitted"})
                    permits[i] = permit
                    continue
                tasks[i] = loop.create_task(aw)
                got = {"result": "queued", "events": settled()}
                same(name, i, "arrive", {**exp, "events": events(exp.get("events", []))}, got)
            elif op == "release":
                permits.pop(st["permit"]).release(st["outcome"], now_ns=st["now"])
                same(name, i, "release events", events(exp["events"]), settled())
            elif op == "cancel":
                tasks.pop(st["ticket"]).cancel()
                spin(loop)
            elif op == "shed":
                gate.set_shed_level(st["level"])
            elif op == "static":
                gate.set_static_limit(st["limit"])
            elif op == "check":
                m = gate.metrics()
                got = {k: m[k] for k in exp if k in m and k not in ("limit", "inflight")}
                got["limit"] = gate.limit
                got["inflight"] = gate.inflight
                same(name, i, "check", exp, got)
            elif op == "brownout":
                same(name, i, "brownout", exp, {"dimmer": gate.brownout(now_ns=st["now"])})
            else:
                raise Mismatch(f"scenario {name} step {i}: unknown gate op {op}")
    finally:
        for task in tasks.values():
            task.cancel()
        spin(loop)
        loop.close()
        sg_aio._Timer.arm = arm
    return len(sc["steps"])


def replay_simple(sc: dict[str, Any], shared: bool = False) -> int:
    """`shared`: the families with a placement made in anonymous shared memory."""
    kind, c, name = sc["kind"], sc["config"], sc["name"]
    held: dict[int, Any] = {}
    place = {"shared": True} if shared else {}
    if kind == "limiter":
        obj: Any = sg.Limiter(algorithm(c), **limiter_kwargs(c), **place)
    elif kind == "retry_budget":
        obj = sg.RetryBudget(ttl=secs(c["ttl_ns"]), min_retries_per_sec=c["min_retries_per_sec"],
                             retry_ratio=c["percent_can_retry"], **place)
    elif kind == "token_throttle":
        obj = sg.TokenRetryThrottle(max_tokens=c["max_tokens"], token_ratio=c["token_ratio"])
    elif kind == "adaptive_throttle":
        obj = sg.AdaptiveThrottle(k=c["k"], window=secs(c["window_ns"]),
                                  max_drop_probability=c["max_drop_probability"], form=c["form"], seed=c["seed"])
    elif kind == "backoff":
        obj = sg.Backoff(base=secs(c["base_ns"]), multiplier=c["multiplier"], cap=secs(c["cap_ns"]),
                         jitter=c["jitter"], seed=c["seed"])
    elif kind == "breaker":
        window = {"window_calls": c["window_calls"]} if c["window"] == "count" else {"window_time": secs(c["window_ns"])}
        obj = sg.CircuitBreaker(
            **window,
            failure_rate_threshold=c["failure_rate_threshold"],
            slow_call_rate_threshold=c["slow_call_rate_threshold"],
            slow_call_duration=secs(c["slow_call_ns"]),
            minimum_calls=c["minimum_calls"],
            open_duration=secs(c["open_ns"]),
            open_jitter=c["open_jitter"],
            half_open_probes=c["half_open_probes"],
            probe_lease=secs(c["probe_lease_ns"]),
            ramp_duration=secs(c["ramp_ns"]),
            seed=c["seed"],
        )
    elif kind == "rate_limiter":
        obj = sg.RateLimiter(c["per_second"], c["burst"], **place)
    else:
        raise Mismatch(f"scenario {name}: unknown kind {kind}")

    for i, st in enumerate(sc["steps"]):
        op, exp = st["op"], st["expect"]
        key = (kind, op)
        got: Any
        if key == ("limiter", "acquire"):
            got = refusal(lambda: held.__setitem__(i, obj.try_acquire(st["level"], now_ns=st["now"])))
            exp = expect_secs(exp)
        elif key == ("limiter", "release"):
            held.pop(st["permit"]).release(st["outcome"], now_ns=st["now"])
            got = {}
        elif key in (("limiter", "static"),):
            obj.set_static_limit(st["limit"])
            got = {}
        elif key == ("limiter", "check"):
            m = obj.metrics()
            got = {k: m[k] for k in exp}
            got["inflight_by_level"] = [obj.inflight_of(lv) for lv in range(obj.levels)]
            got["limit"], got["inflight"] = obj.limit, obj.inflight
        elif key == ("retry_budget", "deposit"):
            obj.deposit(now_ns=st["now"])
            got = {}
        elif key == ("retry_budget", "withdraw"):
            got, exp = refusal(lambda: obj.withdraw(now_ns=st["now"])), expect_secs(exp)
        elif key == ("retry_budget", "available"):
            got = {"available": obj.available(now_ns=st["now"])}
        elif key[1] == "check" and kind in ("retry_budget", "token_throttle", "adaptive_throttle"):
            m = obj.metrics()
            got = {k: m[k] for k in exp if k in m}
            if kind == "token_throttle":
                got["tokens"], got["allowed"] = obj.tokens, obj.retry_allowed
        elif key == ("token_throttle", "record"):
            obj.record(st["success"])
            got = {}
        elif key == ("token_throttle", "retry"):
            ok = obj.try_retry()
            # try_retry answers a bool; the refusal's hint is always 0 (only traffic refills).
            got = {"ok": True} if ok else {"ok": False, "reason": "budget_exhausted", "retry_after": 0.0}
            exp = expect_secs(exp)
        elif key == ("adaptive_throttle", "record"):
            obj.record(st["accepted"], now_ns=st["now"])
            got = {}
        elif key == ("adaptive_throttle", "throttle"):
            # The binding draws `rand` from SplitMix64(seed) itself; the vectors record it for C.
            got, exp = refusal(lambda: obj.check(now_ns=st["now"])), expect_secs(exp)
        elif key == ("adaptive_throttle", "probability"):
            got = {"p": obj.drop_probability(now_ns=st["now"])}
        elif key == ("backoff", "delay"):
            hint = None if st["hint"] is None else secs(st["hint"])
            got, exp = {"delay": obj.next_delay(st["attempt"], hint)}, {"delay": secs(exp["delay"])}
        elif key == ("backoff", "ceiling"):
            got, exp = {"ceiling": obj.ceiling(st["attempt"])}, {"ceiling": secs(exp["ceiling"])}
        elif key == ("backoff", "reset"):
            obj.reset()
            got = {}
        elif key == ("breaker", "acquire"):
            def take() -> None:
                held[i] = obj.try_acquire(now_ns=st["now"])

            got = refusal(take)
            if got["ok"]:
                got["probe"] = held[i].is_probe
            exp = expect_secs(exp)
        elif key == ("breaker", "record"):
            obj.record(held.pop(st["permit"]), st["outcome"], now_ns=st["now"])
            got = {}
        elif key == ("breaker", "state"):
            got = {"state": obj.state(now_ns=st["now"])}
        elif key == ("breaker", "check"):
            m = obj.metrics(now_ns=st["now"])
            exp = dict(exp)
            exp["admit_fraction"] = exp.pop("admit_permille") / 1000.0
            got = {k: m[k] for k in exp}
        elif key == ("rate_limiter", "check"):
            got, exp = refusal(lambda: obj.check(st["cost"], now_ns=st["now"])), expect_secs(exp)
        elif key == ("rate_limiter", "take_up_to"):
            got = {"n": obj.take_up_to(st["max"], now_ns=st["now"])}
        elif key == ("rate_limiter", "available"):
            got = {"n": obj.available(now_ns=st["now"])}
        elif key == ("rate_limiter", "wait"):
            got, exp = {"wait": obj.wait_time(st["cost"], now_ns=st["now"])}, {"wait": secs(exp["wait"])}
        elif key == ("rate_limiter", "metrics"):
            m = obj.metrics()
            got = {k: m[k] for k in exp}
        else:
            raise Mismatch(f"scenario {name} step {i}: unknown op {key}")
        same(name, i, op, exp, got)
    return len(sc["steps"])


def plain_secs(ns: int) -> float:
    """The pipeline structures' own conversion: ``ns / 1e9`` as a float, no "never"."""
    return float(ns) / 1e9


def opt_secs(ns: Any) -> Any:
    return None if ns is None else plain_secs(ns)


def inf_if_null(x: Any) -> Any:
    """The vectors write an infinite float as ``null``."""
    return math.inf if x is None else x


# The snapshot count the binding's LagMeter instantiates (LAG_SNAPSHOTS in src/flow.rs; the
# class does not expose it).
LAG_SNAPSHOTS = 61


def replay_flow(sc: dict[str, Any], shared: bool = False) -> int:
    """Credits, LagMeter, Watermarks, PacedDrain, KeyedLimits (durations in seconds)."""
    kind, c, name = sc["kind"], sc["config"], sc["name"]
    held: dict[int, Any] = {}
    if kind == "credits":
        obj: Any = sg.Credits(capacity=c["capacity"], low_water=c["low_water"])
    elif kind == "lag_meter":
        same(name, -1, "snapshots", c["snapshots"], LAG_SNAPSHOTS)
        obj = sg.LagMeter(bucket=plain_secs(c["bucket_ns"]))
    elif kind == "watermarks":
        obj = sg.Watermarks(capacity=c["capacity"], pause_below=c["pause_below"], resume_above=c["resume_above"])
    elif kind == "paced_drain":
        obj = sg.PacedDrain(c["target_per_sec"], headroom=c["headroom"], burst=c["burst"])
    elif kind == "keyed":
        # Keys are str, hashed with hash_key(hash_seed, utf8): the vectors' seed is both the
        # shard-mapping seed and the hash seed (as in Node and C).
        rate = {} if c["rate_per_second"] is None else {"rate": c["rate_per_second"], "burst": c["rate_burst"]}
        obj = sg.KeyedLimits(c["shard_limit"], shards=c["shards"], shards_per_key=c["shards_per_key"],
                             limit_retry_after=plain_secs(c["limit_retry_after_ns"]), seed=c["seed"],
                             hash_seed=c["seed"], **rate, **({"shared": True} if shared else {}))
    else:
        raise Mismatch(f"scenario {name}: unknown kind {kind}")

    for i, st in enumerate(sc["steps"]):
        op, exp = st["op"], st["expect"]
        now = st.get("now")
        key = (kind, op)
        got: Any
        if key == ("credits", "try_take"):
            if i % 2 == 0:
                # The bool form says only whether the credit was taken.
                got, exp = {"ok": obj.try_take(st["k"])}, {"ok": exp["ok"]}
            else:
                got, exp = refusal(lambda: obj.take(st["k"])), expect_secs(exp)
        elif key == ("credits", "take_up_to"):
            got = {"n": obj.take_up_to(st["k"])}
        elif key == ("credits", "complete"):
            try:
                obj.complete(st["k"])
                got = {"ok": True}
            except sg.UsageError as e:
                got = {"ok": False, "error": e.kind}
        elif key == ("credits", "grant"):
            got = {"n": obj.grant(st["n"])}
        elif key == ("credits", "grant_due"):
            got = {"n": obj.grant_due()}
        elif key == ("credits", "replenish"):
            got = {"n": obj.replenish()}
        elif key == ("credits", "check"):
            got = {"available": obj.available, "buffered": obj.buffered, "outstanding": obj.outstanding,
                   "stalled": obj.stalled}
        elif key in (("credits", "metrics"), ("paced_drain", "metrics")):
            got = obj.metrics()
        elif key == ("lag_meter", "record_produced"):
            obj.record_produced(st["n"], now_ns=now)
            got = {}
        elif key == ("lag_meter", "record_consumed"):
            obj.record_consumed(st["n"], now_ns=now)
            got = {}
        elif key == ("lag_meter", "observe_totals"):
            obj.observe_totals(st["produced"], st["consumed"], now_ns=now)
            got = {}
        elif key == ("lag_meter", "report_oldest"):
            obj.report_oldest(st["enqueued_at"], now_ns=now)
            got = {}
        elif key == ("lag_meter", "lag"):
            got = {"lag": obj.lag(now_ns=now)}
        elif key == ("lag_meter", "produce_rate"):
            got = {"rate": obj.produce_rate(now_ns=now)}
        elif key == ("lag_meter", "consume_rate"):
            got = {"rate": obj.consume_rate(now_ns=now)}
        elif key == ("lag_meter", "lag_time"):
            got, exp = {"lag_time": obj.lag_seconds(now_ns=now)}, {"lag_time": opt_secs(exp["lag_time"])}
        elif key == ("lag_meter", "time_to_drain"):
            got = {"time_to_drain": obj.time_to_drain(now_ns=now)}
            exp = {"time_to_drain": opt_secs(exp["time_to_drain"])}
        elif key == ("lag_meter", "time_to_drain_exceeds"):
            got = {"exceeds": obj.time_to_drain_exceeds(plain_secs(st["limit"]), now_ns=now)}
        elif key == ("lag_meter", "oldest_age"):
            got, exp = {"oldest_age": obj.oldest_age(now_ns=now)}, {"oldest_age": opt_secs(exp["oldest_age"])}
        elif key == ("lag_meter", "metrics"):
            got = obj.metrics(now_ns=now)
            exp = dict(exp, lag_seconds=inf_if_null(exp["lag_seconds"]),
                       time_to_drain_seconds=inf_if_null(exp["time_to_drain_seconds"]),
                       oldest_age=opt_secs(exp["oldest_age"]))
        elif key == ("watermarks", "observe"):
            got = {"transition": obj.observe(st["level"], now_ns=now)}
        elif key == ("watermarks", "is_paused"):
            got = {"paused": obj.paused}
        elif key == ("watermarks", "metrics"):
            got = obj.metrics(now_ns=now)
            exp = dict(exp, time_paused=plain_secs(exp["time_paused"]))
        elif key == ("paced_drain", "permits"):
            got = {"n": obj.permits(st["backlog"], now_ns=now)}
        elif key == ("paced_drain", "next_permit_in"):
            got, exp = {"wait": obj.next_permit_in(now_ns=now)}, {"wait": plain_secs(exp["wait"])}
        elif key == ("paced_drain", "time_to_drain"):
            got = {"time_to_drain": obj.time_to_drain(st["backlog"], st["produce_per_sec"])}
            exp = {"time_to_drain": opt_secs(exp["time_to_drain"])}
        elif key == ("keyed", "acquire"):
            def take() -> None:
                held[i] = obj.try_acquire(st["key"], st["cost"], now_ns=now)

            got, exp = refusal(take), expect_secs(exp)
        elif key == ("keyed", "release"):
            held.pop(st["permit"]).release()
            got = {}
        elif key == ("keyed", "hash"):
            got = {"hash": obj.hash(st["key"])}
        elif key == ("keyed", "shards_of"):
            got = {"shards": obj.shards_of(st["key"])}
        elif key == ("keyed", "record_rejection"):
            got = {"recorded": obj.record_rejection(st["key"])}
        elif key == ("keyed", "metrics"):
            m = obj.metrics()
            got = {k: m[k] for k in exp if k in m and k != "top_keys"}
            got["key_limit"] = obj.key_limit
            got["top_keys"] = ";".join(f"{e['key_hash']:016x}:{e['count']}:{e['error']}" for e in m["top_keys"]) or "-"
        else:
            raise Mismatch(f"scenario {name} step {i}: unknown op {key}")
        same(name, i, op, exp, got)
    return len(sc["steps"])


FLOW_KINDS = ("credits", "lag_meter", "watermarks", "paced_drain", "keyed")

def replay_deadline(sc: dict[str, Any]) -> int:
    """Deadline headers through the native functions (values arrive as bytes)."""
    from surgeguard import _native as n

    name = sc["name"]
    for i, st in enumerate(sc["steps"]):
        op, exp = st["op"], st["expect"]
        if op == "parse":
            budget, ignored = n.parse_deadline_header(st["name"], bytes.fromhex(st["value_hex"]))
            got: dict[str, Any] = {"budget": budget} if ignored is None else {"ignored": ignored}
            # A str value gives the same answer when it is text.
            try:
                text = bytes.fromhex(st["value_hex"]).decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None:
                same(name, i, "parse (str)", (budget, ignored), n.parse_deadline_header(st["name"], text))
        elif op == "at":
            got = {"deadline": n.deadline_at(st["budget"], now_ns=st["now"])}
        elif op == "format":
            got = {"value": n.format_deadline_header(st["name"], st["deadline"], st["margin"], now_ns=st["now"])}
        else:
            raise Mismatch(f"scenario {name} step {i}: unknown deadline op {op}")
        same(name, i, op, exp, got)
    return len(sc["steps"])


DOC = json.loads(VECTORS.read_text())


def test_format() -> None:
    assert DOC["format"] == "surgeguard-vectors" and DOC["version"] == 1
    assert len(DOC["scenarios"]) >= 30
    assert sum(len(s["steps"]) for s in DOC["scenarios"]) >= 10_000


#: The largest accepted time (2**62 ns); the binding refuses a later `now_ns` with
#: ValueError before the core sees it.
MAX_NOW = 2**62


def in_range(sc: dict[str, Any]) -> dict[str, Any]:
    """The scenario as a Python caller can replay it: a step whose `now` is beyond the
    accepted range, which the core treats as the latest time seen, is replayed at the
    latest time seen (the binding itself refuses the out-of-range value, see
    `test_out_of_range_now_in_the_vectors_is_refused`)."""
    sc = json.loads(json.dumps(sc))
    latest = 0
    for i, st in enumerate(sc["steps"]):
        times = {k: v for k, v in st.items() if (k == "now" or k.endswith("_at")) and isinstance(v, int)}
        if any(v > MAX_NOW for v in times.values()):
            if sc["kind"] not in ("gate", "limiter") or set(times) != {"now"}:
                # Other kinds still give an out-of-range time a meaning of their own in
                # the core; a Python caller cannot pass it, so replay the part before it.
                sc["steps"] = sc["steps"][:i]
                break
            st["now"] = latest
        elif "now" in times:
            latest = max(latest, times["now"])
    return sc


def test_out_of_range_now_in_the_vectors_is_refused() -> None:
    bad = sorted({st["now"] for s in DOC["scenarios"] for st in s["steps"] if isinstance(st.get("now"), int) and st["now"] > MAX_NOW})
    for now in bad or [MAX_NOW + 1]:
        for obj in (sg.Limiter(limit=1), sg.Gate(limit=1)):
            before = obj.metrics()
            with pytest.raises(ValueError, match="now_ns"):
                obj.try_acquire(now_ns=now)
            assert obj.metrics() == before


@pytest.mark.parametrize("sc", DOC["scenarios"], ids=[s["name"] for s in DOC["scenarios"]])
def test_vectors(sc: dict[str, Any]) -> None:
    sc = in_range(sc)
    if not sc["steps"]:
        pytest.skip("every step is at an out-of-range time")
    if sc["kind"] == "gate":
        n = replay_gate(sc)
    elif sc["kind"] == "deadline":
        n = replay_deadline(sc)
    elif sc["kind"] in FLOW_KINDS:
        n = replay_flow(sc)
    else:
        n = replay_simple(sc)
    assert n == len(sc["steps"]) > 0


#: The kinds whose objects have a placement: replayed again in shared memory (Linux).
PLACED_KINDS = ("limiter", "retry_budget", "rate_limiter", "keyed")
PLACED = [s for s in DOC["scenarios"] if s["kind"] in PLACED_KINDS]


@pytest.mark.skipif(sys.platform != "linux", reason="shared memory is Linux-only")
@pytest.mark.parametrize("sc", PLACED, ids=[s["name"] for s in PLACED])
def test_vectors_through_the_shared_placement(sc: dict[str, Any]) -> None:
    sc = in_range(sc)
    if not sc["steps"]:
        pytest.skip("every step is at an out-of-range time")
    n = replay_flow(sc, shared=True) if sc["kind"] in FLOW_KINDS else replay_simple(sc, shared=True)
    assert n == len(sc["steps"]) > 0


def test_the_shared_placement_is_replayed_for_every_placed_kind() -> None:
    assert {s["kind"] for s in PLACED} == set(PLACED_KINDS)
    if sys.platform == "linux":
        assert sg.Limiter(limit=1, shared=True).is_shared and sg.KeyedLimits(1, shared=True).is_shared


def test_a_changed_expectation_is_caught() -> None:
    sc = json.loads(json.dumps(DOC["scenarios"][0]))
    sc["steps"][3]["expect"] = {"ok": "tampered"}
    with pytest.raises(Mismatch, match="step 3"):
        replay_simple(sc)


def test_a_changed_expectation_of_a_deadline_is_caught() -> None:
    for sc in (s for s in DOC["scenarios"] if s["kind"] == "deadline"):
        sc = json.loads(json.dumps(sc))
        sc["steps"][5]["expect"] = {"budget": 7} if "ignored" in sc["steps"][5]["expect"] else {"ignored": "negative"}
        with pytest.raises(Mismatch, match="step 5 "):
            replay_deadline(sc)


def test_a_changed_dimmer_is_caught() -> None:
    sc = json.loads(json.dumps(next(s for s in DOC["scenarios"] if s["name"] == "gate_brownout_ramp")))
    i = max(i for i, st in enumerate(sc["steps"]) if st["op"] == "brownout" and 0 < st["expect"]["dimmer"] < 1)
    sc["steps"][i]["expect"]["dimmer"] += 1e-12
    with pytest.raises(Mismatch, match=f"step {i} "):
        replay_gate(sc)


@pytest.mark.parametrize("kind", FLOW_KINDS)
def test_a_changed_expectation_of_a_pipeline_kind_is_caught(kind: str) -> None:
    sc = json.loads(json.dumps(next(s for s in DOC["scenarios"] if s["kind"] == kind)))
    i, step = next((i, st) for i, st in enumerate(sc["steps"]) if st["expect"])
    key = sorted(step["expect"])[0]
    v = step["expect"][key]
    step["expect"][key] = (not v) if isinstance(v, bool) else "tampered" if v is None or isinstance(v, str) else v + 1
    with pytest.raises(Mismatch, match=f"step {i} "):
        replay_flow(sc)
