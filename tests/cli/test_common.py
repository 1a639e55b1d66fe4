"""The shared pieces: health lines and the flag-over-config rule."""

from __future__ import annotations

import pytest

from rocescope.cli.common import pick, print_health
from rocescope.collectors.common.health import Health


def test_print_health_prints_one_line_per_target_and_counts_those_down(capsys: pytest.CaptureFixture[str]) -> None:
    health = {
        "leaf1": Health("leaf1", polls=3, values=1200),
        "leaf2": Health("leaf2", failures=2, last_error="timed out"),
    }
    assert print_health(health) == 1
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at the console's width
    assert out.startswith("leaf1: up, 3 polls") and "1,200 values" in out
    assert "leaf2: DOWN" in out and out.endswith("last error: timed out")
    assert print_health({}) == 0


def test_a_flag_overrides_the_config_only_when_given() -> None:
    assert pick(None, 5) == 5
    assert pick(0, 5) == 0
    assert pick(False, True) is False
