"""Simulated runs landed once per test run, analyzed by many tests.

Each scenario lands through the real pipeline (embedded sink) into its own database of the worker's one
chdb directory (chdb serves one directory per process, for the process's life); the store is closed after
landing, and a test opens it again with `Landed.open()` (tests/analysis/landed.py). Under pytest-xdist the
workers share the simulations: the first worker to ask for a run lands it and leaves its rows (Arrow files)
and summary in the run's shared temp directory, under a file lock; another worker asking for the same run
inserts those rows into a database of its own (the materialized views make the rollups again).
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import pickle
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.feather as feather
import pytest

from rocescope import schema
from rocescope.config import Settings, StoreConfig
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.run import RunSummary, run_scenario
from rocescope.sim.scenario import Scenario, load_scenario

from landed import Landed

#: what a landed run's rows are: the streams and the ground truth (rollups follow from their views)
SHARED_TABLES = (*schema.STREAMS, "incidents")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _share(shared: Path, root: Path, db: str, summary: RunSummary) -> None:
    """Written aside and renamed into place: a worker that dies mid-write leaves no half run for the others."""
    part = shared.with_suffix(".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    with ChdbStore(root, db) as store:
        for table in SHARED_TABLES:
            feather.write_feather(store.query_arrow(f"SELECT * FROM `{db}`.`{table}`"), part / f"{table}.arrow")
    (part / "summary.pickle").write_bytes(pickle.dumps(summary))
    part.rename(shared)


def _copy(shared: Path, root: Path, db: str) -> RunSummary:
    with ChdbStore(root, db) as store:
        migrate(store, ttl_days=0)
        for table in SHARED_TABLES:
            rows = feather.read_table(shared / f"{table}.arrow")
            if rows.num_rows:
                store.insert(table, rows)
    summary: RunSummary = pickle.loads((shared / "summary.pickle").read_bytes())
    return summary


@pytest.fixture(scope="session")
def land(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Callable[..., Landed]:
    """land(scenario name or Scenario, seed=None, duration_s=None, impacts=False, private=False) -> Landed, cached
    per arguments.

    With `private`, a database of the caller's own, for a test that changes what landed (replaces endpoints,
    renames devices): the same shared run (simulated once for every worker), copied again on every call.

    With `impacts`, the ground truth carries each incident's toll measured against counterfactual reruns of the
    fabric (one rerun per incident that overlaps other activity: as long as the run itself), which only the
    tests of impact and blame read; without, incidents are measured against the jobs' clean times."""
    root = tmp_path_factory.mktemp("landed")
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if worker_id != "master" else base) / "landed-shared"
    shared.mkdir(exist_ok=True)
    cache: dict[tuple[Any, ...], Landed] = {}
    databases = itertools.count()

    def _land(
        scenario: str | Scenario,
        seed: int | None = None,
        duration_s: float | None = None,
        impacts: bool = False,
        private: bool = False,
    ) -> Landed:
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        if seed is not None:
            sc = sc.model_copy(update={"seed": seed})
        key = (sc.model_dump_json(), duration_s, impacts)
        if key in cache and not private:
            return cache[key]
        db = f"{'p' if private else 't'}{next(databases)}_{sc.name}".replace("-", "_")
        run = shared / hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        with _locked(run.with_suffix(".lock")):
            if run.exists():
                summary = _copy(run, root, db)
            else:
                settings = Settings(store=StoreConfig(path=root, database=db, ttl_days=0))
                summary = run_scenario(settings, sc, duration_s, counterfactuals=impacts)
                _share(run, root, db, summary)
        landed = Landed(root, db, summary)
        if not private:
            cache[key] = landed
        return landed

    return _land
