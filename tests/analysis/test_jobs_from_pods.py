"""Placements and cables as real sources give them: jobs from `kubectl get pods` alone, with no NIC inventory (a
pod that names no NIC of its host runs on all of them, as a training pod on a whole GPU node does), and LLDP
system names and Kubernetes node names that are FQDNs where the counters carry short names, and switches whose
counters come under their addresses. Findings, their impact and blame must come out as they do from the
simulator's own placements and names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rocescope.analysis.findings import Finding
from rocescope.analysis.run import analyze
from rocescope.collectors.jobs.placement import Inventory, endpoints_batch, parse_pods
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.incidents import build_world
from rocescope.sim.scenario import load_scenario

from landed import Landed

#: The gear-shaped runs' seed (no other test lands them). Each test changes its own copy of a run (`private`).
SEED = 917


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
    scenario = load_scenario("incast")
    run = land(scenario, private=True)  # the incast tests' run: two jobs, the culprit's incast slows both
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
    run = land("pfc_storm", private=True)  # the storm tests' run, in a database of this test's own
    fqdn = "concat(toString({c}), '.dc1.example.com')"
    renames = {
        "links": {"device": fqdn, "peer_device": fqdn},
        "endpoints": {"host": f"upper({fqdn})"},
        "collectives": {"host": fqdn},
    }
    with run.open() as store:
        known = analyze(store, run.window, write=False).findings
        for table, columns in renames.items():
            _rewrite(store, table, columns)
        for table, column in (("links", "peer_device"), ("endpoints", "host"), ("collectives", "host")):
            names = store.query_arrow(f"SELECT DISTINCT toString({column}) AS n FROM {table}").column("n").to_pylist()
            assert names and all(n.lower().endswith(".dc1.example.com") for n in names), table
        renamed = analyze(store, run.window, write=False).findings
    assert known and _seen(renamed) == _seen(known)


def _rewrite(store: Any, table: str, columns: dict[str, str]) -> None:
    """`table` with `columns` replaced by the SQL expressions given (`{c}`: the column), the counters' 1-minute
    rollup refilled with them."""
    named = ", ".join(f"{expr.format(c=c)} AS {c}" for c, expr in columns.items())
    store.command(f"CREATE TABLE renamed ENGINE = Memory AS SELECT * REPLACE ({named}) FROM {table}")
    store.command(f"TRUNCATE TABLE {table}")
    if table == "counters":
        store.command("TRUNCATE TABLE counters_1m")  # refilled by its materialized view from the insert below
    store.command(f"INSERT INTO {table} SELECT * FROM renamed")
    store.command("DROP TABLE renamed")


@pytest.mark.parametrize(
    ("scenario", "profile", "switch_lldp"),
    [
        ("incast", "sonic-spectrum", False),
        pytest.param("pfc_deadlock", "ideal", True, marks=pytest.mark.full),  # the same join, from both sides' LLDP
    ],
    ids=["hosts-lldp-only-port-aliases", "switch-lldp-by-system-name"],
)
def test_switches_known_by_address_are_found_at_the_ends_of_the_cables_lldp_names(
    land: Callable[..., Landed], scenario: str, profile: str, switch_lldp: bool
) -> None:
    """gnmic targets given by address (`source` 10.0.0.N:57400: the counters name switches 10.0.0.N) while LLDP
    names them by system name: from the hosts only (each name is the switch whose port, spelled as LLDP spells
    it, here SONiC's alias `etpN`, carries that host port's traffic), or from the switches too, their own LLDP
    imported under their system names (leaves are found from their hosts, then spines from the leaves).
    Findings name the same devices."""
    run = land(load_scenario(scenario).model_copy(update={"seed": SEED, "profile": profile}), private=True)
    with run.open() as store:
        sql = "SELECT DISTINCT toString(device) AS d FROM counters WHERE role = 'switch' ORDER BY d"
        address = {name: f"10.0.0.{i + 1}" for i, name in enumerate(store.query_arrow(sql).column("d").to_pylist())}
        names, addresses = (", ".join(f"'{x}'" for x in xs) for xs in (address, address.values()))
        if not switch_lldp:
            store.command(f"ALTER TABLE links DELETE WHERE device IN ({names}) SETTINGS mutations_sync = 1")
        known = analyze(store, run.window, write=False).findings
        _rewrite(store, "counters", {"device": f"transform(toString({{c}}), [{names}], [{addresses}])"})
        assert not store.query_arrow(f"SELECT 1 FROM counters_1m WHERE device IN ({names}) LIMIT 1").num_rows
        by_address = analyze(store, run.window, write=False).findings
    name_of = {ip: name for name, ip in address.items()}

    def named(findings: list[Finding]) -> list[tuple[Any, ...]]:
        return [(kind, tuple(name_of.get(d, d) for d in devices), *rest) for kind, devices, *rest in _seen(findings)]

    assert known and any(d in address for f in known for d in f.devices)
    assert named(by_address) == _seen(known)
    assert {p.partition(":")[0] for f in by_address for p in f.ports} & set(address.values())
