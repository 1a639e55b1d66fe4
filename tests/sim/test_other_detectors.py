"""Another tree's detectors on this tree's run (the exam's difficulty guard): a process of its own, with that tree
first on its path, reads the run's store and hands its findings back."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.config import Settings, StoreConfig
from rocescope.errors import SimError
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.other_detectors import analyze_with
from rocescope.sim.run import run_scenario
from rocescope.sim.scenario import load_scenario

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
    as in this one: nothing is lost on the way back (kinds, places, times, severities, jobs)."""
    store_dir, db = tmp_path / "store", "guard"
    settings = Settings(store=StoreConfig(path=store_dir, database=db, ttl_days=0))
    summary = run_scenario(settings, load_scenario("incast"), 150.0, counterfactuals=False)
    window = Window(summary.start, summary.end)
    theirs = analyze_with(_installed(tmp_path / "tree"), store_dir, db, window)
    with ChdbStore(store_dir, db) as store:
        ours = analyze(store, window, write=False).findings

    def seen(f: object) -> tuple[object, ...]:
        return tuple(getattr(f, k) for k in ("kind", "severity", "start", "end", "devices", "ports", "job_ids"))

    assert "incast" in {f.kind for f in ours}
    assert [seen(f) for f in theirs] == [seen(f) for f in ours]
    assert [sorted(f.evidence) for f in theirs] == [sorted(f.evidence) for f in ours]  # JSON: values as text


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
