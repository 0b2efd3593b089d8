"""The Python binding against the core's description of each config field
(``surgeguard_core::fields``): every described field has a keyword, the constructor
accepts it with the described default, and the gradient controller reports that default.
A config error names the keyword and says what is wrong."""

import pytest

import surgeguard as sg
from surgeguard import _native

FIELDS = _native._config_fields()
BY_PATH = {path: (kw, default) for path, kw, default in FIELDS}


def test_every_described_field_has_a_keyword():
    assert len(FIELDS) > 40
    missing = [path for path, kw, _ in FIELDS if kw is None]
    assert missing == []


def family(prefix):
    """The fields under `prefix`; a Limiter's own, not its algorithms' (`limiter.gradient.*`)."""
    own = prefix == "limiter."
    return [(p, kw, d) for p, kw, d in FIELDS if p.startswith(prefix) and not (own and p.count(".") > 1)]


def test_the_gradient_controller_reports_the_described_defaults():
    got = sg.GradientLimit().config()
    fields = family("limiter.gradient.")
    assert len(fields) == 17
    for path, kw, default in fields:
        assert got[kw] == pytest.approx(default), path


def test_the_backoff_reports_the_described_defaults():
    got = sg.Backoff().config()
    fields = family("backoff.")
    assert len(fields) == 4
    for path, kw, default in fields:
        assert got[kw] == pytest.approx(default) if isinstance(default, float) else got[kw] == default, path


@pytest.mark.parametrize(
    "cls, prefix",
    [
        (sg.GradientLimit, "limiter.gradient."),
        (sg.Limiter, "limiter."),
        (sg.Gate, "gate."),
        (sg.RetryBudget, "retry_budget."),
        (sg.TokenRetryThrottle, "token_throttle."),
        (sg.Backoff, "backoff."),
        (sg.CircuitBreaker, "breaker."),
        (sg.AdaptiveThrottle, "adaptive_throttle."),
        (sg.Credits, "credits."),
        (sg.LagMeter, "lag_meter."),
        (sg.Watermarks, "watermarks."),
    ],
)
def test_each_keyword_takes_its_described_default(cls, prefix):
    fields = family(prefix)
    assert fields
    for path, kw, default in fields:
        if "." in kw:
            # A nested setting (`codel.target`): a dict under its group's keyword.
            group, key = kw.split(".")
            cls(**{group: {key: default}})
        elif path.startswith("gate.aging"):
            cls(**{kw: bool(default)})
        else:
            cls(**{kw: default})


@pytest.mark.parametrize(
    "build, field, message",
    [
        (lambda: sg.GradientLimit(drop_tolerance=1.0), "drop_tolerance", "drop_tolerance is out of range"),
        (lambda: sg.GradientLimit(buffer=float("nan")), "buffer", "buffer must be a finite number"),
        (lambda: sg.Gate(min_window=5, max_window=1), "min_window", "min_window must not be above max_window"),
        (lambda: sg.Limiter(weights=[0.9, 0.5, 0.1]), "weights", "weights is inconsistent"),
        (lambda: sg.Gate(codel={"target": 0.2, "interval": 0.1}), "codel.target",
         "codel.target must be below codel.interval"),
        (lambda: sg.RetryBudget(ttl=0.5), "ttl", "ttl is out of range"),
        (lambda: sg.CircuitBreaker(open_duration=0), "open_duration", "open_duration is out of range"),
    ],
)
def test_config_errors_name_the_keyword(build, field, message):
    with pytest.raises(sg.ConfigError) as info:
        build()
    assert isinstance(info.value, ValueError)
    assert info.value.field == field
    assert message in str(info.value)
    assert "_ns" not in str(info.value)
