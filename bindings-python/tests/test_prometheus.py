"""Prometheus text rendering of every object's metrics."""

import re

import surgeguard as sg
from surgeguard import prometheus

LINE = re.compile(r'^[a-z_:][a-z0-9_:]*\{([a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*)?\} (-?[0-9.e+-]+|NaN|\+Inf|-Inf)$')


def test_render_everything():
    g = sg.Gate(limit=2)
    with g.acquire("critical"):
        pass
    objs = {
        "api": g,
        "lim": sg.Limiter(limit=3),
        "budget": sg.RetryBudget(),
        "tokens": sg.TokenRetryThrottle(),
        "throttle": sg.AdaptiveThrottle(),
        "db": sg.CircuitBreaker(),
        "rate": sg.RateLimiter(5),
        "drain": sg.PacedDrain(10.0),
        "credits": sg.Credits(),
        "lag": sg.LagMeter(),
        "wm": sg.Watermarks(),
        "tenants": sg.KeyedLimits(2, shards=8),
    }
    text = prometheus.render(objs)
    assert text.endswith("\n")
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            types[name] = kind
        elif not line.startswith("#"):
            assert LINE.match(line), line
            assert line.split("{")[0] in types, line
    assert types["surgeguard_gate_granted_total"] == "counter"
    assert types["surgeguard_limiter_successes_total"] == "counter"
    assert types["surgeguard_breaker_window_calls"] == "gauge"
    assert 'surgeguard_limiter_successes_total{name="api"} 1' in text
    assert 'surgeguard_limiter_inflight_by_level{name="api",level="0"} 0' in text
    assert 'surgeguard_gate_state{name="api",state="healthy"} 1' in text
    assert 'surgeguard_keyed_shard_in_flight{name="tenants",shard="7"} 0' in text
    assert prometheus.CONTENT_TYPE.startswith("text/plain; version=0.0.4")
    assert prometheus.render([("x", sg.RetryBudget())]).count("# TYPE") == 4
