"""Another tree's detectors on this tree's run (the exam's difficulty guard): a process of its own, with that tree
first on its path, reads the run's store and hands its findings back."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from rocescope.analysis.frames import Window
from rocescope.errors import SimError
from rocescope.sim.evaluate import evaluate_run
from rocescope.sim.other_detectors import analyze_with

REPO = Path(__file__).resolve().parents[2]


def _installed(tree: Path) -> Path:
    """This checkout laid out as `pip install --target tree` lays it out (pyproject's package-dir), without the
    build a real install runs (setuptools from the registry): the other tree of the test."""
    layout = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(layout.items(), key=lambda kv: kv[0].count(".")):
        shutil.copytree(REPO / folder, tree.joinpath(*package.split(".")), dirs_exist_ok=True)
    return tree


def test_another_trees_detectors_find_what_this_trees_do_on_the_same_run(tmp_path: Path) -> None:
    """The same detectors, run in the other process from a tree of their own, make the same findings of the run
    as in this one: nothing is lost on the way back (kinds, places, times, severities, jobs). The evaluation scores
    both on the one simulation: theirs as the outcome, this tree's as its `own` (the guard's two columns)."""
    theirs = evaluate_run("incast", 1, tmp_path / "store", 80.0, impact=False, detectors=_installed(tmp_path / "tree"))
    ours = theirs.own
    assert ours is not None and ours.own is None

    def seen(f: object) -> tuple[object, ...]:
        return tuple(getattr(f, k) for k in ("kind", "severity", "start", "end", "devices", "ports", "job_ids"))

    assert "incast" in {f.kind for f in ours.findings}
    assert [seen(f) for f in theirs.findings] == [seen(f) for f in ours.findings]
    assert [sorted(f.evidence) for f in theirs.findings] == [sorted(f.evidence) for f in ours.findings]  # JSON: text
    assert {k: s.as_dict() for k, s in theirs.scores.items()} == {k: s.as_dict() for k, s in ours.scores.items()}


def test_a_tree_without_the_package_is_a_clear_error(tmp_path: Path) -> None:
    window = Window.last(60.0)
    with pytest.raises(SimError, match="holds no rocescope package"):
        analyze_with(tmp_path, tmp_path / "store", "guard", window)


def test_a_tree_that_fails_says_why_in_one_line(tmp_path: Path) -> None:
    """A tree whose package cannot even be imported (an old commit against a newer library) fails the run with the
    child's last line, not a traceback to dig through."""
    (tmp_path / "rocescope").mkdir()
    (tmp_path / "rocescope" / "__init__.py").write_text("raise ImportError('built for another polars')\n")
    with pytest.raises(SimError, match=r"failed \(exit code 1\): ImportError: built for another polars"):
        analyze_with(tmp_path, tmp_path / "store", "guard", Window.last(60.0))
