"""A finding's case: a plot that fails costs only itself; finding ids are stable (no store needed)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rocescope.analysis.report.cases import draw_plot, finding_id


def test_a_plot_that_fails_costs_only_itself() -> None:
    def broken() -> Any:
        raise KeyError("cycle")

    plot = draw_plot("deadlock_cycle", "deadlock cycle", broken)
    assert not plot.drawn and plot.note == "failed: KeyError: 'cycle'"


def test_finding_ids_are_stable_and_distinct() -> None:
    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    a = {"kind": "incast", "start": t, "ports": ["a:1"]}
    assert finding_id(a) == finding_id(dict(a)) and len(finding_id(a)) == 8
    assert finding_id(a) != finding_id({**a, "ports": ["a:2"]})
