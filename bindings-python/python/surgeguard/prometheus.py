"""Prometheus text exposition (format 0.0.4) of any surgeguard objects' metrics.

::

    text = surgeguard.prometheus.render({"api": gate, "db": breaker, "retries": budget})

Each object's ``metrics()`` becomes ``surgeguard_<kind>_<field>{name="..."}`` samples:
counters (``_total``) for event counts, gauges otherwise; per-level lists get a
``level`` label, per-shard lists a ``shard`` label, string states a ``state`` label.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Iterable, List, Mapping, Tuple, Union

__all__ = ["render", "CONTENT_TYPE"]

#: The Content-Type of the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# The metric family of each type (by class name) and which fields are counters.
_KIND = {
    "Gate": "gate",
    "Limiter": "limiter",
    "RetryBudget": "retry_budget",
    "TokenRetryThrottle": "retry_throttle",
    "AdaptiveThrottle": "adaptive_throttle",
    "CircuitBreaker": "breaker",
    "RateLimiter": "rate_limiter",
    "PacedDrain": "paced_drain",
    "Credits": "credits",
    "LagMeter": "lag",
    "Watermarks": "watermarks",
    "KeyedLimits": "keyed",
    "DeadlineStats": "deadline",
    "StaleIfError": "stale_if_error",
}

_COUNTERS = {
    "gate": {"queued", "granted", "expired", "sloughed", "evicted", "cancelled", "shed",
             "queue_full", "deadline_unmeetable", "aged", "lifo_switches", "codel_drops"},
    "limiter": {"admitted", "rejected", "rejected_by_level", "successes", "drops", "ignored",
                "windows", "folded_samples"},
    "retry_budget": {"requests", "retries_allowed", "retries_denied"},
    "retry_throttle": {"retries_allowed", "retries_denied", "successes", "failures"},
    "adaptive_throttle": {"throttled"},
    "breaker": {"opened", "half_opened", "closed", "rejected", "ramp_shed", "probes",
                "stale_records"},
    "rate_limiter": {"allowed", "denied"},
    "paced_drain": {"started", "calls"},
    "credits": {"granted", "taken", "completed", "refused"},
    "lag": {"produced", "consumed"},
    "watermarks": {"pauses", "resumes", "time_paused"},
    "keyed": {"admitted", "rejected_key_limit", "rejected_key_rate", "foreign_releases"},
    "stale_if_error": {"served_stale", "evicted"},
}
#: Kinds whose every field is a counter (deadline headers: accepted, ignored_<reason>, ...).
_ALL_COUNTERS = {"deadline"}

_LIST_LABEL = {"shard_in_flight": "shard"}


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _kind_of(obj: Any) -> str:
    for cls in type(obj).__mro__:
        k = _KIND.get(cls.__name__)
        if k is not None:
            return k
    return type(obj).__name__.lower()


def _metrics_of(obj: Any) -> Dict[str, Any]:
    metrics = getattr(obj, "metrics", None)
    if not callable(metrics):
        raise TypeError(f"render() takes surgeguard objects (with metrics()), got {type(obj).__name__}")
    m = metrics()
    if not isinstance(m, dict):
        raise TypeError(f"{type(obj).__name__}.metrics() did not return a dict")
    return m


class _Families:
    def __init__(self) -> None:
        self.order: List[str] = []
        self.types: Dict[str, str] = {}
        self.samples: Dict[str, List[str]] = {}

    def add(self, family: str, mtype: str, labels: Mapping[str, str], value: Any) -> None:
        if mtype == "counter":
            family += "_total"
        if family not in self.types:
            self.order.append(family)
            self.types[family] = mtype
            self.samples[family] = []
        lab = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
        self.samples[family].append(f"{family}{{{lab}}} {_fmt(value)}")


def _emit(out: _Families, prefix: str, kind: str, name: str, metrics: Mapping[str, Any]) -> None:
    counters = _COUNTERS.get(kind, set())
    for field, value in metrics.items():
        family = f"{prefix}_{kind}_{field}"
        mtype = "counter" if field in counters or kind in _ALL_COUNTERS else "gauge"
        base = {"name": name}
        if isinstance(value, dict):
            sub = field if field in _KIND.values() else f"{kind}_{field}"
            _emit(out, prefix, sub, name, value)
        elif isinstance(value, str):
            out.add(family, "gauge", {**base, field: value}, 1)
        elif isinstance(value, (list, tuple)):
            label = _LIST_LABEL.get(field, "level")
            for i, v in enumerate(value):
                if isinstance(v, (int, float)):
                    out.add(family, mtype, {**base, label: str(i)}, v)
        elif isinstance(value, (int, float)):
            out.add(family, mtype, base, value)
        # None (unknown yet) is left out


def render(
    objects: Union[Mapping[str, Any], Iterable[Tuple[str, Any]]],
    *,
    prefix: str = "surgeguard",
) -> str:
    """Renders ``{name: object}`` (or ``[(name, object), ...]``) as Prometheus text."""
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    if not _METRIC_NAME.fullmatch(prefix):
        raise ValueError(f"prefix must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got {prefix!r}")
    if isinstance(objects, Mapping):
        items = list(objects.items())
    elif isinstance(objects, (str, bytes)) or not isinstance(objects, Iterable):
        raise TypeError(f"objects must be a dict {{name: object}} or (name, object) pairs, got {type(objects).__name__}")
    else:
        items = list(objects)
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"objects must be (name, object) pairs, got {item!r}"[:200])
    # Every object is read before anything is written: a bad one fails the whole call.
    read = [(str(name), _kind_of(obj), _metrics_of(obj)) for name, obj in items]
    out = _Families()
    for name, kind, metrics in read:
        _emit(out, prefix, kind, name, metrics)
    lines: List[str] = []
    for family in out.order:
        mtype = out.types[family]
        lines.append(f"# HELP {family} surgeguard {family[len(prefix) + 1:].replace('_', ' ')}")
        lines.append(f"# TYPE {family} {mtype}")
        lines.extend(out.samples[family])
    return "\n".join(lines) + "\n"
