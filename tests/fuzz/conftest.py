"""Prints every fuzz target's input count in the terminal summary, so CI output shows it without `-s`."""

from __future__ import annotations

from typing import Any

from fuzzing import SCALE, SEED, TALLIES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TALLIES:
        return
    tr = terminalreporter
    tr.section(f"fuzz inputs (ROCESCOPE_FUZZ_SCALE={SCALE:g}, ROCESCOPE_FUZZ_SEED={SEED})")
    for name, t in sorted(TALLIES.items()):
        tr.write_line(
            f"{name:<28} {t.inputs:>9,} inputs  {t.refused:>8,} refused with a project error  {t.seconds:6.1f} s"
        )
    tr.write_line(f"{'total':<28} {sum(t.inputs for t in TALLIES.values()):>9,} inputs")
