"""Culprits apart from victims, by kind, on a small placed fabric: an incast is its transfer's job's doing (not
a training job's that merely shares the senders' hosts), storage servers in no job blame none, a storm is its
root NIC's job's, an imbalance the elephants' job's, polarized hashing or a flapping link nobody's; who hurt
whom gives a victim's loss to the culprits."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest

from rocescope.analysis.blame import NO_JOB, blame_of, culprits, who_hurt_whom
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import ENDPOINTS_SCHEMA, LINKS_SCHEMA, ROLES_SCHEMA

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FAR = T0 + dt.timedelta(days=1)
HOSTS = [f"gpu-{i}" for i in range(1, 10)]


def fabric() -> Fabric:
    """gpu-1..8 on leaf1; train-a on gpu-1..4, train-b on gpu-5..8 (and gpu-9); a checkpoint transfer placed on
    gpu-1..4 and the receiver gpu-9; gpu-10..11 are storage servers in no job."""
    hosts = [*HOSTS, "gpu-10", "gpu-11"]
    links = [(h, "eth0", "leaf1", f"Ethernet{i}") for i, h in enumerate(hosts)]
    placed = [("ns/train-a", h) for h in HOSTS[:4]] + [("ns/train-b", h) for h in HOSTS[4:]]
    placed += [("ns/ckpt", h) for h in [*HOSTS[:4], "gpu-9"]]
    endpoints = [(job, h, "eth0", "mlx5_0", "", k, T0, FAR) for k, (job, h) in enumerate(placed)]
    return Fabric.build(
        pl.DataFrame(links, schema=LINKS_SCHEMA, orient="row"),
        pl.DataFrame(endpoints, schema=ENDPOINTS_SCHEMA, orient="row"),
        pl.DataFrame([*((h, "nic") for h in hosts), ("leaf1", "switch")], schema=ROLES_SCHEMA, orient="row"),
    )


def finding(kind: str, evidence: dict[str, Any], jobs: tuple[str, ...] = ()) -> Finding:
    return Finding(kind, "warning", T0, T0 + dt.timedelta(minutes=1), (), (), 3, 1.0, kind, evidence, jobs)


@pytest.mark.parametrize(
    ("kind", "evidence", "jobs", "want"),
    [
        ("incast", {"senders": [{"nic": f"{h}:eth0"} for h in HOSTS[:4]], "receiver": "gpu-9:eth0"}, (), {"ns/ckpt"}),
        ("incast", {"senders": [{"nic": f"gpu-{i}:eth0"} for i in (10, 11)], "receiver": "gpu-9:eth0"}, (), set()),
        ("microburst", {"senders": ["gpu-5:eth0", "gpu-6:eth0"], "receiver": "gpu-7:eth0"}, (), {"ns/train-b"}),
        ("pfc_storm", {"root": "gpu-6:eth0", "root_ports": ["gpu-6:eth0"]}, ("ns/train-b",), {"ns/train-b"}),
        ("cnp_loss", {"where": "nic"}, ("ns/train-a",), {"ns/train-a"}),
        ("cnp_loss", {"where": "fabric"}, ("ns/train-a",), set()),
        ("ecmp_imbalance", {"hot_member": "leaf1:Ethernet20"}, ("ns/train-b",), {"ns/train-b"}),
        ("polarization", {}, ("ns/train-a", "ns/train-b"), set()),
        ("link_flap", {}, ("ns/train-a", "ns/train-b"), set()),
    ],
    ids=["transfer", "storage", "microburst", "storm_root", "cnp_nic", "cnp_fabric", "elephants", "hashing", "flap"],
)
def test_culprits_by_kind(kind: str, evidence: dict[str, Any], jobs: tuple[str, ...], want: set[str]) -> None:
    assert set(culprits(finding(kind, evidence, jobs), fabric())) == want


def test_victims_are_the_jobs_impact_counts_hurt_and_a_culprit_may_be_one() -> None:
    impact = {
        "ns/train-a": {"gpu_seconds_lost": 12.0, "exec_inflation": 1.4, "hurt": True},
        "ns/train-b": {"gpu_seconds_lost": 0.1, "exec_inflation": 1.0, "hurt": False},
        "ns/ckpt": {"gpu_seconds_lost": 3.0, "exec_inflation": 1.2, "hurt": True},
    }
    senders = [{"nic": f"{h}:eth0"} for h in HOSTS[:4]]
    f = finding("incast", {"senders": senders, "receiver": "gpu-9:eth0", "impact": impact})
    blame = blame_of(f, fabric())
    assert blame["culprit_jobs"] == ["ns/ckpt"] and blame["victim_jobs"] == ["ns/ckpt", "ns/train-a"]
    flap = finding("link_flap", {"impact": impact})
    rows = [{"kind": g.kind, "evidence": {**g.evidence, "blame": blame_of(g, fabric())}} for g in (f, flap)]
    edges = {(e.culprit, e.victim): e.gpu_seconds_lost for e in who_hurt_whom(rows)}
    assert edges == {
        ("ns/ckpt", "ns/train-a"): 12.0,
        ("ns/ckpt", "ns/ckpt"): 3.0,
        (NO_JOB, "ns/train-a"): 12.0,
        (NO_JOB, "ns/ckpt"): 3.0,
    }


def test_without_collectives_the_findings_jobs_are_victims_with_no_loss() -> None:
    f = finding("pfc_storm", {"root_ports": ["gpu-6:eth0"]}, ("ns/train-b", "ns/train-a"))
    blame = blame_of(f, fabric())
    assert blame["measured"] is False and blame["victim_jobs"] == ["ns/train-a"]
    (edge,) = who_hurt_whom([{"kind": f.kind, "evidence": {"blame": blame}}])
    assert (edge.culprit, edge.victim, edge.gpu_seconds_lost) == ("ns/train-b", "ns/train-a", None)
