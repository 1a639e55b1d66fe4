"""Jobs placed from `kubectl get pods` alone, with no NIC inventory: a pod that names no NIC of its host (no
inventory to resolve NCCL_IB_HCA or the RDMA resource against) runs on all of them, as a training pod on a
whole GPU node does. Findings, their impact and blame must come out as they do when every rank's NIC is known."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocescope.analysis.findings import Finding
from rocescope.analysis.run import analyze
from rocescope.collectors.jobs.placement import Inventory, endpoints_batch, parse_pods
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.incidents import build_world
from rocescope.sim.scenario import load_scenario

from landed import Landed

SEED = 917  # a run of its own: this test replaces its endpoints


def _seen(findings: list[Finding]) -> list[tuple[Any, ...]]:
    out = []
    for f in findings:
        impact = {j: round(v["gpu_seconds_lost"] or 0.0, 1) for j, v in (f.evidence.get("impact") or {}).items()}
        blame = f.evidence.get("blame") or {}
        out.append(
            (f.kind, f.devices, tuple(sorted(f.job_ids)), impact, blame.get("culprit_jobs"), blame.get("victim_jobs"))
        )
    return out


def test_a_pod_list_without_an_inventory_places_jobs_on_their_hosts_nics(land: Callable[..., Landed]) -> None:
    scenario = load_scenario("two_jobs_checkpoint").model_copy(update={"seed": SEED})
    run = land(scenario)
    world = build_world(scenario, None, run.summary.start)
    placed, bad = parse_pods(pod_list_json(world.jobs, world.topology, run.summary.start), Inventory())
    assert bad == 0 and placed and {r.netdev for r in placed} == {""}  # no NIC is named
    with run.open() as store:
        known = analyze(store, run.window, write=False).findings
        store.command("TRUNCATE TABLE endpoints")
        store.insert("endpoints", endpoints_batch(placed, "kubectl").data)
        from_pods = analyze(store, run.window, write=False).findings
    assert any(len((f.evidence.get("blame") or {}).get("victim_jobs") or ()) > 1 for f in known)
    assert _seen(from_pods) == _seen(known)
