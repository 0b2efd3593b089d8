"""Shared helpers for the surgeguard tests."""

import pytest

import surgeguard as sg

SEC = 1_000_000_000
MS = 1_000_000


@pytest.fixture
def gate1():
    """A gate with one slot, one level, no CoDel: deterministic waiting."""
    return sg.Gate(limit=1, levels=1, codel=False)
