"""Simulated runs landed once per test session, analyzed by many tests.

Each scenario lands through the real pipeline (embedded sink) into its own database of one chdb
directory; the store is closed after landing (chdb serves one directory per process at a time), and a
test opens it again with `Landed.open()` (tests/analysis/landed.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rocescope.config import Settings, StoreConfig
from rocescope.sim.run import run_scenario
from rocescope.sim.scenario import Scenario, load_scenario

from landed import Landed


@pytest.fixture(scope="session")
def land(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Landed]:
    """land(scenario name or Scenario, seed=None, duration_s=None) -> Landed, cached per arguments."""
    root = tmp_path_factory.mktemp("landed")
    cache: dict[tuple[Any, ...], Landed] = {}

    def _land(scenario: str | Scenario, seed: int | None = None, duration_s: float | None = None) -> Landed:
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        if seed is not None:
            sc = sc.model_copy(update={"seed": seed})
        key = (sc.model_dump_json(), duration_s)
        if key not in cache:
            db = f"t{len(cache)}_{sc.name}".replace("-", "_")
            settings = Settings(store=StoreConfig(path=root, database=db, ttl_days=0))
            cache[key] = Landed(root, db, run_scenario(settings, sc, duration_s))
        return cache[key]

    return _land
