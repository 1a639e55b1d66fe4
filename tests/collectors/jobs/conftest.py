"""Shared by the jobs collector's tests: the simulator's fabric, its kubectl pod list, and the placement it
means (the simulator's own `endpoints`, the ground truth)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import JobSpec, endpoints_arrow, place_jobs
from rocescope.sim.topology import FabricSpec, Topology

KEYS = ("job_id", "job_name", "namespace", "pod", "rank", "host", "netdev", "rdma_dev", "ip", "gid")
_JOBS = [JobSpec("llama", 4), JobSpec("bert", 2, namespace="ml", rails=(0, 1))]


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(FabricSpec(hosts=8, rails=4))


@pytest.fixture(scope="module")
def pods(topo: Topology) -> dict[str, Any]:
    return pod_list_json(place_jobs(topo, _JOBS), topo)


@pytest.fixture(scope="module")
def expected(topo: Topology) -> list[tuple[Any, ...]]:
    """The simulator's placement of the jobs, as sorted key tuples."""
    t = endpoints_arrow(place_jobs(topo, _JOBS), topo, dt.datetime(2025, 1, 1, tzinfo=dt.UTC)).to_pylist()
    return sorted(tuple(r[k] for k in KEYS) for r in t)


@pytest.fixture(scope="module")
def keyed() -> Callable[[Iterable[Any]], list[tuple[Any, ...]]]:
    """Placement rows as sorted key tuples, to compare with `expected`."""
    return lambda rows: sorted(tuple(getattr(r, k) for k in KEYS) for r in rows)
