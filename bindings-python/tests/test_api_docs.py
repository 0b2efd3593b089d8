"""Every public name is documented, and the stubs describe the native module."""

import ast
import inspect
from pathlib import Path

import surgeguard as sg
import surgeguard._native as native
import importlib

from surgeguard import asgi, deadline, degrade, errors, prometheus, wsgi
from surgeguard import httpx as sg_httpx

retry = importlib.import_module("surgeguard.retry")  # `surgeguard.retry` is the decorator
STUB = Path(sg.__file__).with_name("_native.pyi")


def public_members(obj):
    for name, value in inspect.getmembers(obj):
        if not name.startswith("_"):
            yield name, value


def test_every_public_name_has_a_docstring():
    missing = []
    for name in sg.__all__:
        if name in ("__version__",):
            continue
        obj = getattr(sg, name)
        if not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for mname, member in public_members(obj):
                if not (getattr(member, "__doc__", None) or "").strip():
                    missing.append(f"{name}.{mname}")
    for module in (asgi, wsgi, retry, prometheus, errors, sg_httpx, deadline, degrade):
        assert (module.__doc__ or "").strip(), module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not (obj.__doc__ or "").strip():
                missing.append(f"{module.__name__}.{name}")
    assert not missing, missing


def test_stubs_cover_the_native_module():
    tree = ast.parse(STUB.read_text())
    stub_names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
            stub_names[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            stub_names[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub_names[node.target.id] = None  # a module constant (`NAME: int`)
    runtime = {n for n in dir(native) if not n.startswith("__")}
    assert runtime <= set(stub_names) | {"Priority"}, runtime - set(stub_names)
    for cls_name, members in stub_names.items():
        if members is None or not hasattr(native, cls_name):
            continue
        cls = getattr(native, cls_name)
        public = {n for n, _ in public_members(cls)}
        assert public <= members, (cls_name, public - members)


async def test_permit_aexit_is_typed_as_what_awaiting_it_gives():
    # `__aexit__` awaits to None (exceptions propagate); a stub typed to return the
    # permit (a truthy object) told type checkers that `async with` swallows exceptions.
    tree = ast.parse(STUB.read_text())
    annotations = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AsyncFunctionDef) and item.name == "__aexit__":
                    annotations[node.name] = ast.unparse(item.returns)
    permits = [("Permit", lambda: sg.Gate(limit=1).acquire_async())]
    if hasattr(native, "SharedGate"):
        permits += [
            ("Permit", lambda: sg.Limiter.shared(None, limit=1).acquire()),
            ("Permit", lambda: sg.Gate.shared(None, limit=1).acquire_async()),
        ]
    for name, make in permits:
        assert annotations[name] == "None", (name, annotations[name])
        permit = make()
        assert type(permit).__name__ == name
        await permit.__aenter__()
        assert permit.held
        assert await permit.__aexit__(None, None, None) is None
        assert not permit.held


def test_py_typed_marker_ships():
    assert STUB.with_name("py.typed").exists()


def test_exception_hierarchy():
    assert issubclass(sg.QueueFull, sg.Rejected) and issubclass(sg.Rejected, sg.OverloadError)
    assert issubclass(sg.BreakerOpen, sg.OverloadError) and not issubclass(sg.BreakerOpen, sg.Rejected)
    assert issubclass(sg.RetryBudgetExhausted, sg.OverloadError)
    assert issubclass(sg.ConfigError, ValueError) and issubclass(sg.UsageError, RuntimeError)
    assert issubclass(sg.InsufficientBudget, sg.DeadlineExceeded)
    assert issubclass(sg.DeadlineExceeded, sg.OverloadError) and not issubclass(sg.DeadlineExceeded, sg.Rejected)
    d = sg.InsufficientBudget("short", remaining=0.01, expected=0.2)
    assert (d.reason, d.remaining, d.expected) == ("insufficient_budget", 0.01, 0.2)
    assert sg.DeadlineExceeded().reason == "deadline_exceeded"
    e = sg.Expired("late", "expired", 0.25)
    assert (str(e), e.reason, e.retry_after) == ("late", "expired", 0.25)
    import pickle

    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is sg.Expired and e2.reason == "expired" and e2.retry_after == 0.25
    assert set(errors.BY_REASON) >= {"queue_full", "expired", "shed", "key_limit", "breaker_open"}


README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_leads_with_the_adaptive_gate_and_states_the_defaults():
    text = README.read_text()
    first_block = text.split("```python", 1)[1].split("```", 1)[0]
    assert "sg.Gate()" in first_block and "limit=" not in first_block
    for needed in ("max_wait", "job_queue", "clock=", "UsageError", "deadline", "prometheus"):
        assert needed in text, needed
    # The numbers the README states are the ones the package uses.
    g = sg.Gate()
    m = g.metrics()
    assert m["capacity"] == 1024 and "| 1024 waiters" in text
    assert m["limiter"]["algorithm"] == "gradient" and "gradient (adaptive)" in text
    assert m["limiter"]["levels"] == 3 and "| 3:" in text


def test_readme_deadline_and_degradation_examples_run():
    text = README.read_text()
    section = text.split("## Deadlines and degradation", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python")[1:]]
    assert len(blocks) >= 3
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
