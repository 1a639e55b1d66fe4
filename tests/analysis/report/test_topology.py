"""The pause-tree and deadlock drawings read their evidence defensively: a missing field skips the plot with
a reason (no store needed)."""

from __future__ import annotations

import pytest

from rocescope.analysis.report.plots import Skip
from rocescope.analysis.report.topology import deadlock_arrows, pause_tree_arrows


def test_missing_evidence_fields_skip_with_a_reason() -> None:
    with pytest.raises(Skip, match="pause tree"):
        pause_tree_arrows({})
    with pytest.raises(Skip, match="cycle"):
        deadlock_arrows({"cycle": [{"paused": "a:1", "asserter": "b:1"}]})
    with pytest.raises(Skip, match="no device"):
        deadlock_arrows({"cycle": [{"paused": "a:1"}, {"paused": "b:1", "asserter": "a:1"}]})


def test_pause_tree_arrows_mark_the_root() -> None:
    arrows = pause_tree_arrows(
        {"root": "gpu-1:eth0", "tree": [{"asserter": "gpu-1:eth0", "paused": "leaf-1:Ethernet0"},
                                         {"asserter": "leaf-1:Ethernet4", "paused": "gpu-2:eth0"}]}
    )  # fmt: skip
    assert [(a.src, a.dst) for a in arrows] == [("gpu-1", "leaf-1"), ("leaf-1", "gpu-2")]
    assert arrows[0].color != arrows[1].color  # the root's own edge stands out
