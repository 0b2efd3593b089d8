"""The Python binding against the core's description of each config field
(``surgeguard_core::fields``): every described field has a keyword, the constructor
accepts it with the described default, and the classes that report their config (the
limit algorithms, the backoff) report that default for an unset keyword.
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


def same(got, default):
    """A reported value equals the described default (floats approximately: seconds)."""
    if isinstance(default, float) and not isinstance(got, bool):
        return got == pytest.approx(default)
    return got == default and type(got) is type(default)


# The stub writes every default as `...` (the stub style): the native classes take the
# core's default for an unset keyword, so these tests read what an unset keyword gave.
@pytest.mark.parametrize(
    "cls, prefix, count",
    [
        (sg.GradientLimit, "limiter.gradient.", 17),
        (sg.FixedLimit, "limiter.fixed.", 3),
        (sg.AimdLimit, "limiter.aimd.", 10),
        (sg.HysteresisLimit, "limiter.hysteresis.", 15),
        (sg.Gradient2Limit, "limiter.gradient2.", 11),
        (sg.VegasLimit, "limiter.vegas.", 12),
        (sg.Backoff, "backoff.", 4),
    ],
)
def test_an_unset_keyword_reports_the_described_default(cls, prefix, count):
    got = cls().config()
    fields = family(prefix)
    assert len(fields) == count
    wrong = [(path, kw, got.get(kw, "missing"), default) for path, kw, default in fields
             if not same(got.get(kw, "missing"), default)]
    assert wrong == []


def test_a_default_that_differs_is_found():
    # The comparison is not vacuous: a changed keyword no longer reports the default.
    got = sg.AimdLimit(initial_limit=11).config()
    _, default = BY_PATH["limiter.aimd.initial_limit"]
    assert not same(got["initial_limit"], default)
    assert not same(sg.VegasLimit(alpha=3).config()["alpha"], BY_PATH["limiter.vegas.alpha"][1])


@pytest.mark.parametrize(
    "cls, prefix",
    [
        (sg.GradientLimit, "limiter.gradient."),
        (sg.FixedLimit, "limiter.fixed."),
        (sg.AimdLimit, "limiter.aimd."),
        (sg.HysteresisLimit, "limiter.hysteresis."),
        (sg.Gradient2Limit, "limiter.gradient2."),
        (sg.VegasLimit, "limiter.vegas."),
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
