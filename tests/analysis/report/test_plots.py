"""The figures skip, with a reason, what they cannot draw (no store needed)."""

from __future__ import annotations

import pytest

from rocescope.analysis.report.plots import Skip, uplink_figure


def test_uplinks_without_bytes_skip_with_a_reason() -> None:
    with pytest.raises(Skip, match="no transmitted bytes"):
        uplink_figure([("leaf uplinks", [("Ethernet0", 0.0), ("Ethernet4", 0.0)])], "t")
