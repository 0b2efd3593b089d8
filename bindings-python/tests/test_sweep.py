"""The bad-input contract, swept over the whole public surface with hypothesis.

Every public constructor, method and function of the package (found by introspection:
``surgeguard.__all__``, the ``_native.pyi`` stubs and the middleware modules, so a new
name is swept without editing this file) is called with arbitrary arguments: NaN, ±inf,
negatives, zero, 2**64 and beyond, times above 2**62 ns, wrong types, ``None``, strings
named like ``Object.prototype`` keys, and foreign, forged and twice-released permits.

The contract checked for every call:

- it returns, or raises ``TypeError``, ``ValueError``, ``surgeguard.UsageError`` or an
  ``OverloadError`` (the ``Rejected`` family) — nothing else, no crash, no hang;
- when it raises ``TypeError``, ``ValueError`` or ``UsageError``, no observable state
  changed: the object's properties, its ``metrics()`` counters, and the state of every
  permit involved are equal before and after.

Budget: ``SG_SWEEP_EXAMPLES`` examples per target (default 25, about a minute in all on
a loaded 2-core machine), derandomized so ``make pytest`` is repeatable;
``make pytest-sweep`` runs 1000 fresh random examples per target
(``SG_SWEEP_EXAMPLES=N make pytest-sweep`` to choose).
"""

from __future__ import annotations

import ast
import inspect
import math
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import surgeguard as sg
from surgeguard import asgi, prometheus, wsgi

try:  # optional dependency: swept when installed (it is, by tests/requirements.txt)
    from surgeguard import httpx as sg_httpx
except ImportError:  # pragma: no cover
    sg_httpx = None

EXAMPLES = int(os.environ.get("SG_SWEEP_EXAMPLES", "25"))
STUB = Path(sg.__file__).with_name("_native.pyi")
ALLOWED = (TypeError, ValueError, sg.UsageError, sg.OverloadError)


# ---- hostile values ---------------------------------------------------------------------


def _fresh_gate_permit() -> Any:
    return sg.Gate(limit=4).try_acquire()


def _released_permit() -> Any:
    p = sg.Gate(limit=4).try_acquire()
    p.success()
    return p


def _pending_permit() -> Any:
    return sg.Gate(limit=4).acquire()


def _foreign_key_permit() -> Any:
    return sg.KeyedLimits(4).try_acquire("other")


def _released_key_permit() -> Any:
    p = sg.KeyedLimits(4).try_acquire("other")
    p.release()
    return p


def _foreign_call() -> Any:
    return sg.CircuitBreaker().try_acquire()


class _Forged:
    """An object that looks like a permit (same attribute names) but is not one."""

    held = True
    outcome = None
    priority = 1
    reason = "limit_reached"
    retry_after = 1.0

    def success(self) -> None:
        pass

    def release(self, *a: Any, **k: Any) -> None:
        pass


SCALARS: List[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    -1.5,
    0,
    0.0,
    1,
    0.5,
    2,
    3.0,
    1e-12,
    1e300,
    2**31,
    2**32,
    2**53 + 1,
    2**62,
    2**62 + 1,
    2**63,
    2**64 - 1,
    2**64,
    2**64 + 1,
    10**30,
    -(2**63),
    -(2**64),
    10**300,
    True,
    False,
    None,
    "",
    "x",
    "normal",
    "critical",
    "background",
    "success",
    "dropped",
    "ignored",
    "0",
    "nan",
    "__proto__",
    "constructor",
    "toString",
    "hasOwnProperty",
    b"x",
    [],
    [1.0],
    {},
    {"target": math.nan},
    (),
    (1, 2, 3),
    (ValueError,),
    ValueError,
    object(),
    _Forged(),
]

FACTORIES: List[Callable[[], Any]] = [
    _fresh_gate_permit,
    _released_permit,
    _pending_permit,
    _foreign_key_permit,
    _released_key_permit,
    _foreign_call,
    lambda: sg.Gate(limit=1),
]

#: Arguments whose wrong value would make the call legitimately do something slow or
#: unbounded (a huge sleep), so they get only sane values.
HARMLESS = {"sleep": None, "on_retry": None, "clock": None}
# Shared-memory names: a swept string would create (or unlink) files in /dev/shm; None
# makes an anonymous segment, gone with the object.
HARMLESS["name"] = None


def value_strategy() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(SCALARS),
        st.sampled_from(FACTORIES).map(lambda f: f()),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
    )


# ---- the public surface -------------------------------------------------------------------


def _stub_params() -> Dict[Tuple[str, str], List[Tuple[str, bool]]]:
    """(class, method) → [(parameter, keyword_only)] from the stubs."""
    out: Dict[Tuple[str, str], List[Tuple[str, bool]]] = {}
    for node in ast.parse(STUB.read_text()).body:
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        for fn in node.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            if fn.name.startswith("_") and fn.name != "__init__":
                continue
            if any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list):
                continue
            a = fn.args
            params = [(p.arg, False) for p in a.posonlyargs + a.args if p.arg != "self"]
            params += [(p.arg, True) for p in a.kwonlyargs]
            out[(node.name, fn.name)] = params
    return out


def _sig_params(f: Callable[..., Any]) -> List[Tuple[str, bool]]:
    params = []
    for p in inspect.signature(f).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params.append((p.name, p.kind == p.KEYWORD_ONLY))
    return params


class Target:
    def __init__(self, name: str, make: Callable[[], Any], method: str, params: List[Tuple[str, bool]]):
        self.name, self.make, self.method, self.params = name, make, method, params

    def __repr__(self) -> str:
        return self.name


#: How to build a live instance of each public class (for its methods).
INSTANCES: Dict[str, Callable[[], Any]] = {
    "Gate": lambda: sg.Gate(limit=2),
    "Limiter": lambda: sg.Limiter(limit=2),
    "Permit": lambda: sg.Gate(limit=2).try_acquire(),
    "KeyedLimits": lambda: sg.KeyedLimits(4),
    "KeyPermit": lambda: sg.KeyedLimits(4).try_acquire("k"),
    "CircuitBreaker": lambda: sg.CircuitBreaker(),
    "BreakerCall": lambda: sg.CircuitBreaker().try_acquire(),
    "BreakerFunction": lambda: sg.CircuitBreaker()(lambda *a, **k: None),
    "RateLimiter": lambda: sg.RateLimiter(10.0, 5),
    "PacedDrain": lambda: sg.PacedDrain(10.0),
    "Credits": lambda: sg.Credits(),
    "LagMeter": lambda: sg.LagMeter(),
    "Watermarks": lambda: sg.Watermarks(),
    "RetryBudget": lambda: sg.RetryBudget(),
    "TokenRetryThrottle": lambda: sg.TokenRetryThrottle(),
    "AdaptiveThrottle": lambda: sg.AdaptiveThrottle(),
    "Backoff": lambda: sg.Backoff(seed=1),
    "FixedLimit": lambda: sg.FixedLimit(),
    "AimdLimit": lambda: sg.AimdLimit(),
    "HysteresisLimit": lambda: sg.HysteresisLimit(),
    "GradientLimit": lambda: sg.GradientLimit(),
    "Gradient2Limit": lambda: sg.Gradient2Limit(),
    "VegasLimit": lambda: sg.VegasLimit(),
    **(
        {
            "SharedGate": lambda: sg.Gate.shared(None, limit=2, queue_capacity=8),
        }
        if hasattr(sg, "SharedGate")
        else {}
    ),
}

#: The classes with a placement, placed in shared memory (Linux): each method is swept on
#: a shared instance too (the same class, another placement).
SHARED_INSTANCES: Dict[str, Callable[[], Any]] = (
    {
        "Limiter": lambda: sg.Limiter.shared(None, limit=2),
        "Permit": lambda: sg.Limiter.shared(None, limit=2).try_acquire(),
        "KeyedLimits": lambda: sg.KeyedLimits.shared(None, 4),
        "KeyPermit": lambda: sg.KeyedLimits.shared(None, 4).try_acquire("k"),
        "RateLimiter": lambda: sg.RateLimiter.shared(None, 10.0, 5),
        "RetryBudget": lambda: sg.RetryBudget.shared(None),
    }
    if hasattr(sg, "SharedGate")
    else {}
)

#: A shared gate's permits are `Permit`s too: swept as well.
SHARED_GATE_PERMITS: Dict[str, Callable[[], Any]] = (
    {"Permit": lambda: sg.Gate.shared(None, limit=2, queue_capacity=8).try_acquire()}
    if hasattr(sg, "SharedGate")
    else {}
)


def _public_classes() -> Dict[str, type]:
    out = {}
    for name in sg.__all__:
        obj = getattr(sg, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            out[name] = obj
    return out


def targets() -> List[Target]:
    stub = _stub_params()
    out: List[Target] = []
    classes = _public_classes()
    for cname, cls in classes.items():
        if (cname, "__init__") in stub:
            out.append(Target(f"{cname}()", (lambda c=cls: c), "", stub[(cname, "__init__")]))
        for (sc, m), params in stub.items():
            if sc != cname or m == "__init__":
                continue
            if cname not in INSTANCES:
                continue
            out.append(Target(f"{cname}.{m}", INSTANCES[cname], m, params))
            if cname in SHARED_INSTANCES:
                out.append(Target(f"{cname}.{m}[shared]", SHARED_INSTANCES[cname], m, params))
            if cname in SHARED_GATE_PERMITS:
                out.append(Target(f"{cname}.{m}[shared gate]", SHARED_GATE_PERMITS[cname], m, params))
    for name in sg.__all__:
        obj = getattr(sg, name)
        if inspect.isfunction(obj) or inspect.isbuiltin(obj):
            out.append(Target(f"{name}()", (lambda o=obj: o), "", _sig_params(obj)))
    for mod in (asgi, wsgi, prometheus, sg_httpx):
        if mod is None:
            continue
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not isinstance(obj, frozenset):
                params = _sig_params(obj)
                # Options passed on through **kwargs (the httpx transports' shared ones).
                for base in getattr(obj, "__mro__", ())[1:]:
                    if base.__module__ == mod.__name__ and "__init__" in vars(base):
                        params += [p for p in _sig_params(base.__init__) if p[0] != "self"]
                out.append(Target(f"{mod.__name__}.{name}", (lambda o=obj: o), "", params))
    return out


TARGETS = targets()


def test_every_public_class_with_methods_is_swept() -> None:
    stub_classes = {c for (c, m) in _stub_params() if m != "__init__"}
    missing = sorted(c for c in _public_classes() if c in stub_classes and c not in INSTANCES)
    assert not missing, f"add a factory to INSTANCES for {missing}"
    assert len(TARGETS) > 100


# ---- snapshots -----------------------------------------------------------------------------

#: Values that move with the wall clock between two reads, without any call.
VOLATILE = {"oldest_age", "available", "tokens", "drop_probability", "lag", "produce_rate",
            "consume_rate", "time_paused", "lag_seconds", "time_to_drain", "next_permit_in"}


def _stable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _stable(x) for k, x in v.items() if k not in VOLATILE}
    if isinstance(v, (list, tuple)):
        return [_stable(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def snapshot(obj: Any, now: int) -> Any:
    """The observable state of `obj` (and of a permit's issuer); time-dependent metrics
    are read at `now`, so two snapshots differ only if a call changed something."""
    if obj is None or inspect.isroutine(obj) or inspect.isclass(obj):
        return None
    state: Dict[str, Any] = {}
    for name in dir(type(obj)):
        if name.startswith("_") or name in VOLATILE:
            continue
        attr = inspect.getattr_static(type(obj), name, None)
        if attr is not None and not callable(attr) and hasattr(attr, "__get__"):
            try:
                state[name] = getattr(obj, name)
            except Exception as e:  # noqa: BLE001 - a property that raises is state too
                state[name] = repr(e)
    m = getattr(obj, "metrics", None)
    if callable(m):
        try:
            state["metrics"] = m(now_ns=now)
        except TypeError:
            try:
                state["metrics"] = m()
            except TypeError:
                pass
    for attr in ("breaker",):
        other = state.get(attr)
        if other is not None and other is not obj:
            state[attr] = snapshot(other, now)
    return _stable(state)


def snapshot_all(objs: List[Any], now: int) -> List[Any]:
    return [snapshot(o, now) for o in objs if not isinstance(o, (int, float, str, bytes, type(None)))]


# ---- the sweep -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS, ids=repr)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=os.environ.get("SG_SWEEP_RANDOM") is None,
)
@given(data=st.data())
def test_contract(target: Target, data: st.DataObject) -> None:
    owner = target.make()
    fn = getattr(owner, target.method) if target.method else owner
    args: List[Any] = []
    kwargs: Dict[str, Any] = {}
    positional_open = True
    for name, kw_only in target.params:
        if name in HARMLESS:
            # Passed as its harmless value while arguments are still positional, so the
            # next positional value does not land in its place (a swept string used to
            # become a shared-memory name: files left in /dev/shm, "/" an OSError).
            if not kw_only and positional_open:
                args.append(HARMLESS[name])
            continue
        # Leave an optional argument out sometimes (its default is part of the surface).
        if data.draw(st.booleans(), label=f"give {name}"):
            v = data.draw(value_strategy(), label=name)
            if kw_only or not positional_open:
                kwargs[name] = v
            else:
                args.append(v)
        else:
            positional_open = False
    involved = [owner] + args + list(kwargs.values())
    # Objects a permit belongs to are part of the state too.
    now = sg.clock_ns()
    before = snapshot_all(involved, now)
    try:
        result = fn(*args, **kwargs)
    except ALLOWED as e:
        if not isinstance(e, sg.OverloadError):
            after = snapshot_all(involved, now)
            assert after == before, f"{target.name}{tuple(args)}{kwargs} raised {e!r} and changed state: {before} -> {after}"
        return
    except BaseException as e:  # noqa: BLE001 - the contract forbids any other type
        pytest.fail(f"{target.name}(*{args!r}, **{kwargs!r}) raised {type(e).__name__}: {e}")
    # A context manager or awaitable the call returned is closed without use.
    close = getattr(result, "close", None)
    if inspect.iscoroutine(result) and close is not None:
        close()
