"""The kernel's arrays: the order egress ports are processed in."""

from __future__ import annotations

from rocescope.sim.arrays import processing_order


def test_processing_order_is_topological_and_breaks_cycles() -> None:
    order = processing_order([[1, 2, 3], [0, 2], [3, 4]])
    pos = {p: k for k, p in enumerate(order)}
    assert pos[1] < pos[2] < pos[3] < pos[4] and pos[0] < pos[2]
    cyclic = processing_order([[0, 1, 2], [1, 2, 3], [2, 3, 1], [3, 1, 2]])
    assert sorted(cyclic) == [0, 1, 2, 3] and cyclic[0] == 0
