"""Placements and cables as real sources give them: jobs from `kubectl get pods` alone, with no NIC inventory (a
pod that names no NIC of its host runs on all of them, as a training pod on a whole GPU node does), and LLDP
system names and Kubernetes node names that are FQDNs where the counters carry short names. Findings, their
impact and blame must come out as they do from the simulator's own placements and names."""

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

SEED = 917  # runs of their own: these tests replace their endpoints and links


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


def test_fqdn_names_from_lldp_kubernetes_and_nccl_are_the_devices_counters_name(land: Callable[..., Landed]) -> None:
    """LLDP system names as FQDNs, Kubernetes node names as upper-case FQDNs, NCCL's hostname as the FQDN; the
    counters keep the short names."""
    run = land(load_scenario("pfc_storm").model_copy(update={"seed": SEED}))
    fqdn = "concat(toString({c}), '.dc1.example.com')"
    renames = {
        "links": {"device": fqdn, "peer_device": fqdn},
        "endpoints": {"host": f"upper({fqdn})"},
        "collectives": {"host": fqdn},
    }
    with run.open() as store:
        known = analyze(store, run.window, write=False).findings
        for table, columns in renames.items():
            named = ", ".join(f"{expr.format(c=c)} AS {c}" for c, expr in columns.items())
            store.command(f"CREATE TABLE renamed ENGINE = Memory AS SELECT * REPLACE ({named}) FROM {table}")
            store.command(f"TRUNCATE TABLE {table}")
            store.command(f"INSERT INTO {table} SELECT * FROM renamed")
            store.command("DROP TABLE renamed")
        for table, column in (("links", "peer_device"), ("endpoints", "host"), ("collectives", "host")):
            names = store.query_arrow(f"SELECT DISTINCT toString({column}) AS n FROM {table}").column("n").to_pylist()
            assert names and all(n.lower().endswith(".dc1.example.com") for n in names), table
        renamed = analyze(store, run.window, write=False).findings
    assert known and _seen(renamed) == _seen(known)
