"""Every catalog name is spelled as in reality (or documented where the samples lack it), maps to one metric,
and every metric is fully defined."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from rocescope.catalog import METRICS, METRICS_BY_NAME, PRIORITIES, VENDORS, resolve, scale, vendor_names

from real_samples import real_names

# --------------------------------------------------------------------------------------------------
# (3) every catalog name is spelled as in reality

#: (vendor, raw name as in the catalog) -> why it is absent from the real samples.
NOT_IN_SAMPLES: dict[tuple[str, str], str] = {
    **{
        ("mlx5", raw): "kernel mlx5/counters.rst Priority Port Counters: shown only for priorities with "
        "PFC enabled; PFC was off on the sampled ConnectX-4"
        for raw in (
            "rx_prio{p}_pause",
            "tx_prio{p}_pause",
            "rx_prio{p}_pause_duration",
            "tx_prio{p}_pause_duration",
            "rx_prio{p}_pause_transition",
        )
    },
    **{
        ("mlx5", raw): "kernel mlx5/counters.rst Priority Port Counters: newer driver/firmware than the "
        "sampled ConnectX-4 (fw 14.23, kernel 4.15)"
        for raw in (
            "rx_prio{p}_discards",
            "rx_prio{p}_buf_discard",
            "rx_prio{p}_cong_discard",
            "rx_prio{p}_marked",
        )
    },
    ("mlx5", "tx_pause_storm_warning_events"): "kernel mlx5/counters.rst Physical Port Counters; "
    "newer firmware than the sample",
    ("mlx5", "tx_pause_storm_error_events"): "kernel mlx5/counters.rst Physical Port Counters; "
    "newer firmware than the sample",
    ("sonic_sai", "SAI_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US"): "SAI saiport.h; SONiC polls it for the "
    "PFC watchdog on Mellanox/VS platforms; the sampled Broadcom box and the mock only have the "
    "estimated EST_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US",
    ("sonic_sai", "SAI_PORT_STAT_PFC_{p}_TX_PAUSE_DURATION_US"): "SAI saiport.h; not polled on the "
    "sampled Broadcom box",
    ("sonic_sai", "SAI_PORT_STAT_PAUSE_RX_PKTS"): "in the FLEX_COUNTER PORT_COUNTER_ID_LIST of "
    "realdata 04_gnmi_sonic/sonic-gnmi_db_dump_full_redis.json (1.5 MB, not copied)",
    ("sonic_sai", "SAI_PORT_STAT_PAUSE_TX_PKTS"): "in the FLEX_COUNTER PORT_COUNTER_ID_LIST of "
    "realdata 04_gnmi_sonic/sonic-gnmi_db_dump_full_redis.json (1.5 MB, not copied)",
    ("sonic_sai", "SAI_PORT_STAT_ECN_MARKED_PACKETS"): "SAI saiport.h port stat; not polled by the "
    "sampled SONiC builds",
    ("openconfig", "state/oper-status"): "openconfig-interfaces /interfaces/interface/state/oper-status; "
    "the csv keeps only counter leaves",
    **{
        ("srlinux", f"statistics/{leaf}"): "srl_nokia-interfaces /interface/statistics leaf (SR Linux CLI "
        "`info from state interface ... statistics`); the csv is filtered to PFC/pause/ECN/queue/drop"
        for leaf in (
            "in-octets",
            "out-octets",
            "in-packets",
            "out-packets",
            "in-unicast-packets",
            "out-unicast-packets",
            "in-error-packets",
            "out-error-packets",
            "in-fcs-error-packets",
            "carrier-transitions",  # also in tests/fixtures/yang/srl_nokia-interfaces.yang and gnmic/srl_event.json
        )
    },
    ("srlinux", "oper-state"): "srl_nokia-interfaces /interface/oper-state; filtered out of the csv",
    ("srlinux", "transceiver/channel/input-power/latest-value"): "srl_nokia-interfaces power-levels "
    "grouping under /interface/transceiver/channel; filtered out of the csv",
    ("snmp", "ifOperStatus"): "IF-MIB ifTable column 1.3.6.1.2.1.2.2.1.8 (RFC 2863); not in the table",
    ("snmp", "ifAdminStatus"): "IF-MIB ifTable column 1.3.6.1.2.1.2.2.1.7 (RFC 2863); not in the table",
    ("openconfig", "state/admin-status"): "openconfig-interfaces /interfaces/interface/state/admin-status, as "
    "SONiC's gNMI answers it in realdata 04_gnmi_sonic/sonic-gnmi_interfaces.json; the csv keeps only counters",
    ("srlinux", "admin-state"): "srl_nokia-interfaces /interface/admin-state (tests/fixtures/yang/"
    "srl_nokia-interfaces.yang, type srl_nokia-comm:admin-state: enable/disable); filtered out of the csv",
    **{
        ("cumulus", f"state/switch-priority/counters/{leaf}"): "Cumulus Linux 5.14 gNMI page, note on the QoS "
        "paths 5.14 changed: the pause counters' container moved to state/switch-priority[priority]/counters/ "
        "(its table still lists the leaves under switch-priority[priority]/state/counters/)"
        for leaf in ("in-pause-pkts", "out-pause-pkts")
    },
}


def catalog_names() -> Iterator[tuple[str, str, str]]:
    for metric in METRICS:
        for vendor, raws in metric.vendor_names.items():
            for raw in raws:
                yield vendor, raw, metric.name


def seen(vendor: str, raw: str) -> bool:
    real = real_names()[vendor]
    if "{p}" in raw:
        return any(raw.replace("{p}", str(p)) in real for p in PRIORITIES)
    return raw in real


def test_every_catalog_name_exists_in_real_data() -> None:
    assert set(real_names()) == set(VENDORS)
    missing = [
        (vendor, raw, metric)
        for vendor, raw, metric in catalog_names()
        if not seen(vendor, raw) and (vendor, raw) not in NOT_IN_SAMPLES
    ]
    assert not missing, f"catalog names not found in the real samples: {missing}"


def test_not_in_samples_list_is_current() -> None:
    claimed = {(vendor, raw) for vendor, raw, _ in catalog_names()}
    for key, reason in NOT_IN_SAMPLES.items():
        assert key in claimed, f"{key} is no longer in the catalog"
        assert not seen(*key), f"{key} is now in the real data: drop it from NOT_IN_SAMPLES"
        assert reason


# --------------------------------------------------------------------------------------------------
# (4) uniqueness, (5) metric definitions


@pytest.mark.parametrize("vendor", VENDORS)
def test_no_raw_name_maps_to_two_metrics(vendor: str) -> None:
    owner: dict[str, str] = {}
    clashes = []
    for metric in METRICS:
        for raw in metric.vendor_names.get(vendor, ()):
            expanded = [raw.replace("{p}", str(p)) for p in PRIORITIES] if "{p}" in raw else [raw]
            for name in expanded:
                if name in owner and owner[name] != metric.name:
                    clashes.append((name, owner[name], metric.name))
                owner.setdefault(name, metric.name)
    assert not clashes


def test_every_metric_is_fully_defined() -> None:
    assert len(METRICS_BY_NAME) == len(METRICS), "duplicate metric names"
    used: set[str] = set()
    for m in METRICS:
        assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", m.name), m.name
        assert m.unit, m.name
        assert m.kind in ("counter", "gauge"), m.name
        assert m.description and "\n" not in m.description and m.description.endswith("."), m.name
        assert set(m.vendor_names) <= set(VENDORS), m.name
        used |= set(m.vendor_names)
        templated = any("{p}" in raw for raws in m.vendor_names.values() for raw in raws)
        assert m.per_priority or not templated, f"{m.name}: `{{p}}` names but not per_priority"
        own = {raw for raws in m.vendor_names.values() for raw in raws}
        assert set(m.scales) <= own, f"{m.name}: scale for a name it does not map"
        assert all(f > 0 for f in m.scales.values()), m.name
        for suffix, unit in (("_us", "us"), ("_bytes", "bytes"), ("_bps", "bps"), ("_dbm", "dBm")):
            if m.name.endswith(suffix):
                assert m.unit == unit, m.name
        if "watermark" in m.name or "occupancy" in m.name:
            assert m.kind == "gauge", m.name
    assert used == set(VENDORS), f"vendors without any name: {set(VENDORS) - used}"
    # names the detectors are written against
    for name in ("pfc_rx_pause", "pfc_tx_pause", "cnp_sent", "ecn_marked_roce_packets", "rx_prio_packets"):
        assert name in METRICS_BY_NAME


def test_resolve_api() -> None:
    assert resolve("mlx5", "no_such_counter") is None
    assert resolve("no_such_vendor", "rx_bytes") is None
    table = vendor_names("ice")
    assert table["rx_priority_5_xoff.nic"] == ("pfc_rx_pause", 5)
    assert "rx_priority_5_xoff" not in table  # ice only has the `.nic` port-level names
    assert scale("mlx5", "rx_bytes_phy") == 1.0
