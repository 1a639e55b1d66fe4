"""Each profile's switches serve their counters where their OS does, and the gNMI collector reads each path back
as the row it came from; what no gNMI path serves is exactly what the profile's notes say."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.collectors.gnmi.resolve import resolve_elems
from rocescope.sim.facades.gnmi_paths import dialect_of, served, snmp_objects, subscriptions
from rocescope.sim.gear import Gear
from rocescope.sim.incidents import build_world
from rocescope.sim.profile import load_profile
from rocescope.sim.run import with_profile
from rocescope.sim.scenario import load_scenario

START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
#: metrics a profile's switches report that no gNMI path serves, and why
OFF_GNMI = {
    "sonic-spectrum": {"buffer_pool_watermark_bytes"},  # COUNTERS_DB keys it by SAI oid: no sonic-gnmi virtual path
    "sonic-broadcom": {"buffer_pool_watermark_bytes"},
    "arista-eos": {"pfc_rx_pause", "pfc_tx_pause"},  # ARISTA-PFC-MIB over SNMP
    "srlinux": set(),
    "cumulus": set(),  # Cumulus Linux 5.17's gNMI server: its NVUE-only counters are not in the profile
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OFF_GNMI))
def test_every_served_path_reads_back_as_its_row(name: str) -> None:
    prof = load_profile(name)
    world = build_world(with_profile(load_scenario("pfc_storm"), prof), 10.0, START)
    layout = Gear(prof, world).layout().to_pylist()
    dialect = dialect_of(prof)
    off: set[str] = set()
    rows = []
    for r in (r for r in layout if r["role"] == "switch"):
        hit = served(dialect, r["port"], r["priority"], r["metric"], r["raw_name"], r["group"])
        if hit is None:
            off.add(r["metric"])
            continue
        rows.append((hit, prof.cadence_s(r["group"], 1.0)))
        back = resolve_elems([(n, dict(keys)) for n, keys in hit.elems], hit.target)
        assert (back.port, back.priority, back.metric) == (r["port"], r["priority"], r["metric"]), (r, hit)
    assert off == OFF_GNMI[name]
    assert set(snmp_objects(dialect, {r["raw_name"] for r in layout})) == (
        {"aristaPfcPriorityIndications", "aristaPfcPriorityRequests"} if name == "arista-eos" else set()
    )
    # one subscription per container, at the finest cadence it carries
    subs = {(s.path, s.target): s.interval_s for s in subscriptions(rows)}
    if name.startswith("sonic"):
        assert subs[("COUNTERS/Ethernet*", "COUNTERS_DB")] == 1.0
        assert subs[("COUNTERS/Ethernet*/Queues", "COUNTERS_DB")] == 10.0  # queues 10 s, watermarks 60 s
        assert subs[("PORT_TABLE", "APPL_DB")] == 1.0
    if name == "cumulus":  # NVIDIA's lists beside OpenConfig's, QoS at 10 s
        assert subs[("/qos/interfaces/interface/switch-priority", "")] == 10.0
        assert subs[("/qos/interfaces/interface/input/priority-group", "")] == 10.0
        assert subs[("/qos/interfaces/interface/output/queues/queue/state", "")] == 10.0
        assert subs[("/interfaces/interface/state/counters", "")] == 1.0
    if name == "srlinux":
        assert subs[("/qos/interfaces/interface/pfc/statistics", "")] == 1.0
        assert subs[("/qos/interfaces/interface/output/queues/queue/queue-depth", "")] == 60.0
