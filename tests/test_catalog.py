"""The metric catalog against real device output.

Fixtures are copies of files from /work/shared/realdata (each with its `.source.txt`):
ethtool -S of mlx5 (ConnectX-4), bnxt_en, ice and i40e; the mlx5_0 sysfs tree and `rdma statistic`
outputs; SONiC COUNTERS_DB, Cumulus RoCE counters, OpenConfig and SR Linux path lists; an SNMP walk
excerpt and the PFC/QoS MIB object table. A few catalog names cannot be seen in these samples (PFC
was off on the ConnectX-4, the SONiC dumps come from a Broadcom box...): they are listed in
`NOT_IN_SAMPLES` with the document that defines them, and that list must shrink when data grows.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from rocescope.catalog import METRICS, METRICS_BY_NAME, PRIORITIES, VENDORS, resolve, scale, vendor_names

REAL = Path(__file__).parent / "fixtures" / "realdata"
ETHTOOL = REAL / "01_ethtool"
RDMA = REAL / "02_rdma"
SWITCH = REAL / "04_gnmi_sonic"
SNMP = REAL / "05_snmp"

# --------------------------------------------------------------------------------------------------
# parsers for the real files


def parse_ethtool(path: Path) -> dict[str, int]:
    """`ethtool -S` lines `name: value`; bnxt per-ring lines `[N]: name: value` are skipped."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("[") or s.endswith("statistics:"):
            continue
        name, _, value = s.rpartition(": ")
        out[name] = int(value)
    return out


def parse_sysfs(path: Path) -> dict[str, dict[str, str]]:
    """`/sys/class/infiniband/<dev>/ports/<n>/<group>/<name>: value` -> {group: {name: value}}."""
    out: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^/sys/class/infiniband/[^/]+/ports/\d+/(counters|hw_counters)/(\w+): (.*)$", line)
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = m.group(3)
    return out


def parse_rdma_statistic(path: Path) -> set[str]:
    """Counter names in `rdma stat show` outputs (`name value` pairs) and optional-counter lists."""
    text = path.read_text()
    names = set(re.findall(r"\b([a-z][a-z0-9_]*_[a-z0-9_]+) \d+\b", text))
    names |= set(re.findall(r"\b(cc_[a-z_]+)\b", text))
    return names


def json_fields(obj: Any) -> Iterator[tuple[str, str]]:
    """Every (field, value) of a (nested) COUNTERS_DB dump whose value is a string."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str):
                yield k, v
            else:
                yield from json_fields(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from json_fields(v)


SONIC_FILES = (
    "sonic-gnmi_COUNTERS_Ethernet68.txt",
    "sonic-gnmi_COUNTERS_Ethernet68_Queues.txt",
    "sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt",
    "sonic-utilities_mock_counters_db.json",
)


def load_json(name: str) -> Any:
    return json.loads((SWITCH / name).read_text())


def parse_cumulus_counters(path: Path) -> dict[str, str]:
    """`nv show interface <if> qos roce counters`: indented tree -> {'a/b/leaf': 'value text'}."""
    lines = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.endswith("qos roce counters")) + 3  # cmd, header, ---
    out: dict[str, str] = {}
    stack: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        depth = (len(line) - len(line.lstrip())) // 2
        parts = re.split(r"\s{2,}", line.strip())
        del stack[depth:]
        if len(parts) == 1:  # a container
            stack.append(parts[0])
        else:
            out["/".join([*stack, parts[0]])] = parts[1]
    return out


def yang_paths(path: Path) -> list[str]:
    """xpaths of a `pyang -f flatten` csv, module prefixes removed."""
    rows = [r for r in csv.reader(ln for ln in path.read_text().splitlines() if not ln.startswith("#"))]
    return [re.sub(r"/[\w-]+:", "/", r[0]) for r in rows[1:] if r]


def relative(paths: list[str], anchors: tuple[str, ...]) -> set[str]:
    """Paths relative to the most specific anchor (list entry) they sit under."""
    out = set()
    for p in paths:
        hits = [a for a in anchors if p.startswith(a)]
        if hits:
            out.add(p[len(max(hits, key=len)) :])
    return out


OC_ANCHORS = ("/interfaces/interface/", "/qos/interfaces/interface/output/queues/queue/")
SRL_ANCHORS = (
    "/interface/",
    "/qos/interfaces/interface/",
    "/qos/interfaces/interface/output/queues/queue/",
)


def mib_objects(path: Path) -> dict[str, str]:
    """OID -> object name from the MIB object table."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        cols = line.split("\t")
        if line.startswith("#") or len(cols) < 3:
            continue
        out[cols[2]] = cols[1]
    return out


def snmprec_objects(path: Path, oids: dict[str, str]) -> set[str]:
    """Object names of the OIDs in an snmprec walk (OID = object OID + instance index)."""
    names = set()
    for line in path.read_text().splitlines():
        oid = line.split("|", 1)[0]
        hits = [o for o in oids if oid.startswith(o + ".")]
        if hits:
            names.add(oids[max(hits, key=len)])
    return names


@cache
def real_names() -> dict[str, frozenset[str]]:
    """Per vendor: every raw name seen in the real files."""
    sysfs = parse_sysfs(RDMA / "procfs_fixture_mlx5_0_sysfs.txt")
    mibs = mib_objects(SNMP / "pfc_qos_mib_oid_table.tsv")
    return {
        "mlx5": frozenset(parse_ethtool(ETHTOOL / "ethq_mlx5_core_cx4_ethtool-S.txt")),
        "bnxt": frozenset(parse_ethtool(ETHTOOL / "ethq_bnxt_en_ethtool-S.txt")),
        "ice": frozenset(parse_ethtool(ETHTOOL / "ethq_ice_ethtool-S.txt")),
        "i40e": frozenset(parse_ethtool(ETHTOOL / "ethq_i40e_ethtool-S.txt")),
        "mlx5_rdma": frozenset(sysfs["hw_counters"])
        | parse_rdma_statistic(RDMA / "iproute2_commit_msgs_rdma_statistic_real_outputs.txt"),
        "ib_port": frozenset(sysfs["counters"]),
        "sonic_sai": frozenset(k for f in SONIC_FILES for k, _ in json_fields(load_json(f))),
        "cumulus": frozenset(parse_cumulus_counters(SWITCH / "cumulus_nvue_roce_counters_spectrum.txt")),
        "openconfig": frozenset(relative(yang_paths(SWITCH / "openconfig_state_counter_paths.csv"), OC_ANCHORS)),
        "srlinux": frozenset(
            relative(yang_paths(SWITCH / "nokia_srlinux_v25.3.1_qos_pfc_state_paths.csv"), SRL_ANCHORS)
        ),
        "snmp": frozenset(mibs.values()),
    }


def mapped_and_unmapped(vendor: str, names: set[str] | frozenset[str]) -> tuple[set[str], set[str]]:
    mapped = {n for n in names if resolve(vendor, n) is not None}
    return mapped, set(names) - mapped


def report_unmapped(label: str, unmapped: set[str]) -> None:
    """For the record (pytest -s): real names the catalog does not map, priorities folded."""
    folded = sorted({re.sub(r"(?<=[a-z_])\d+(?=[._a-z]|$)", "N", n) for n in unmapped})
    print(f"\n[{label}] {len(unmapped)} unmapped real names ({len(folded)} patterns): {', '.join(folded)}")


# --------------------------------------------------------------------------------------------------
# (1) ethtool -S

ETHTOOL_CASES: dict[str, tuple[str, dict[str, tuple[str, int] | None], int]] = {
    # file: (vendor, expected resolution of real names, floor of mapped names measured on the file)
    "ethq_mlx5_core_cx4_ethtool-S.txt": (
        "mlx5",
        {
            "rx_bytes_phy": ("rx_bytes", -1),
            "tx_bytes_phy": ("tx_bytes", -1),
            "rx_packets_phy": ("rx_packets", -1),
            "tx_packets_phy": ("tx_packets", -1),
            "rx_prio0_bytes": ("rx_prio_bytes", 0),
            "rx_prio3_packets": ("rx_prio_packets", 3),
            "tx_prio7_bytes": ("tx_prio_bytes", 7),
            "tx_prio5_packets": ("tx_prio_packets", 5),
            "rx_pause_ctrl_phy": ("link_rx_pause", -1),
            "tx_pause_ctrl_phy": ("link_tx_pause", -1),
            "rx_global_pause_duration": ("link_rx_pause_duration_us", -1),
            "tx_global_pause_duration": ("link_tx_pause_duration_us", -1),
            "rx_discards_phy": ("rx_discards", -1),
            "tx_discards_phy": ("tx_discards", -1),
            "tx_errors_phy": ("tx_errors", -1),
            "rx_crc_errors_phy": ("rx_fcs_errors", -1),
            "rx_symbol_err_phy": ("rx_symbol_errors", -1),
            "rx_out_of_buffer": ("rx_out_of_buffer", -1),
            "link_down_events_phy": ("link_down_events", -1),
            "rx_buffer_passed_thres_phy": ("rx_buffer_passed_threshold", -1),
            "rx_vport_rdma_unicast_bytes": ("rdma_rx_bytes", -1),
            "tx_vport_rdma_unicast_bytes": ("rdma_tx_bytes", -1),
            "rx_vport_rdma_unicast_packets": ("rdma_rx_packets", -1),
            "tx_vport_rdma_unicast_packets": ("rdma_tx_packets", -1),
            # software (netdev ring) totals are not the port: left unmapped on purpose
            "rx_bytes": None,
            "rx0_bytes": None,
            "rx_vport_unicast_bytes": None,
        },
        52,
    ),
    "ethq_bnxt_en_ethtool-S.txt": (
        "bnxt",
        {
            "rx_bytes": ("rx_bytes", -1),
            "tx_bytes": ("tx_bytes", -1),
            "rx_good_frames": ("rx_packets", -1),
            "tx_good_frames": ("tx_packets", -1),
            "rx_ucast_frames": ("rx_unicast_packets", -1),
            "rx_bytes_pri3": ("rx_prio_bytes", 3),
            "rx_packets_pri3": ("rx_prio_packets", 3),
            "tx_bytes_pri3": ("tx_prio_bytes", 3),
            "tx_packets_pri3": ("tx_prio_packets", 3),
            "rx_pfc_ena_frames_pri3": ("pfc_rx_pause", 3),
            "tx_pfc_ena_frames_pri0": ("pfc_tx_pause", 0),
            "rx_pfc_frames": ("pfc_rx_pause_total", -1),
            "tx_pfc_frames": ("pfc_tx_pause_total", -1),
            "pfc_pri3_rx_duration_us": ("pfc_rx_pause_duration_us", 3),
            "pfc_pri3_tx_duration_us": ("pfc_tx_pause_duration_us", 3),
            "pfc_pri3_rx_transitions": ("pfc_rx_pause_transition", 3),
            "pfc_pri7_tx_transitions": ("pfc_tx_pause_transition", 7),
            "rx_pause_frames": ("link_rx_pause", -1),
            "tx_pause_frames": ("link_tx_pause", -1),
            "rx_stat_discard": ("rx_discards", -1),
            "tx_stat_discard": ("tx_discards", -1),
            "rx_fcs_err_frames": ("rx_fcs_errors", -1),
            "rx_discard_packets_cos3": ("rx_cos_discards", 3),
            "rx_discard_bytes_cos3": ("rx_cos_discard_bytes", 3),
            "rx_total_ring_discards": ("rx_out_of_buffer", -1),
            "rx_buffer_passed_threshold": ("rx_buffer_passed_threshold", -1),
            "rx_fec_uncorrectable_blocks": ("fec_uncorrectable_blocks", -1),
            "link_down_events": ("link_down_events", -1),
        },
        116,
    ),
    "ethq_ice_ethtool-S.txt": (
        "ice",
        {
            "rx_bytes.nic": ("rx_bytes", -1),
            "tx_bytes.nic": ("tx_bytes", -1),
            "rx_unicast.nic": ("rx_unicast_packets", -1),
            "rx_dropped.nic": ("rx_discards", -1),
            "rx_crc_errors.nic": ("rx_fcs_errors", -1),
            "link_xoff_rx.nic": ("link_rx_pause", -1),
            "link_xoff_tx.nic": ("link_tx_pause", -1),
            "rx_priority_3_xoff.nic": ("pfc_rx_pause", 3),
            "tx_priority_3_xoff.nic": ("pfc_tx_pause", 3),
            "rx_priority_3_xon.nic": ("pfc_rx_xon", 3),
            "tx_priority_0_xon.nic": ("pfc_tx_xon", 0),
            "rx_bytes": None,  # VSI (netdev) level, not the port
        },
        41,
    ),
    "ethq_i40e_ethtool-S.txt": (
        "i40e",
        {
            "port.rx_bytes": ("rx_bytes", -1),
            "port.tx_bytes": ("tx_bytes", -1),
            "port.rx_unicast": ("rx_unicast_packets", -1),
            "port.rx_dropped": ("rx_discards", -1),
            "port.rx_crc_errors": ("rx_fcs_errors", -1),
            "port.tx_errors": ("tx_errors", -1),
            "port.link_xoff_rx": ("link_rx_pause", -1),
            "port.link_xoff_tx": ("link_tx_pause", -1),
            "port.rx_priority_3_xoff": ("pfc_rx_pause", 3),
            "port.tx_priority_3_xoff": ("pfc_tx_pause", 3),
            "port.rx_priority_3_xon": ("pfc_rx_xon", 3),
            "port.rx_priority_3_xon_2_xoff": ("pfc_rx_pause_transition", 3),
            "rx_bytes": None,  # VSI (netdev) level, not the port
            "veb.tc_3_rx_bytes": None,
        },
        49,
    ),
}


@pytest.mark.parametrize("filename", sorted(ETHTOOL_CASES))
def test_ethtool_real_names_resolve(filename: str) -> None:
    vendor, expected, floor = ETHTOOL_CASES[filename]
    stats = parse_ethtool(ETHTOOL / filename)
    for raw, want in expected.items():
        assert raw in stats, f"{raw} is not in the real {filename}"
        assert resolve(vendor, raw) == want, raw
    mapped, unmapped = mapped_and_unmapped(vendor, set(stats))
    report_unmapped(filename, unmapped)
    assert len(mapped) >= floor


def test_bnxt_per_ring_lines_are_skipped() -> None:
    stats = parse_ethtool(ETHTOOL / "ethq_bnxt_en_ethtool-S.txt")
    assert "rx_ucast_packets" not in stats  # only exists as `[N]: rx_ucast_packets`
    assert stats["rx_pfc_ena_frames_pri0"] == 0
    assert all(not k.startswith("[") for k in stats)


def test_mlx5_pfc_names_from_kernel_docs() -> None:
    """PFC was off on the sampled ConnectX-4, so its `rx_prio{p}_pause*` lines are absent.

    Built from the documented names (Documentation/networking/device_drivers/ethernet/mellanox/
    mlx5/counters.rst, "Priority Port Counters").
    """
    documented = {
        "rx_prio3_pause": ("pfc_rx_pause", 3),
        "tx_prio3_pause": ("pfc_tx_pause", 3),
        "rx_prio3_pause_duration": ("pfc_rx_pause_duration_us", 3),
        "tx_prio3_pause_duration": ("pfc_tx_pause_duration_us", 3),
        "rx_prio3_pause_transition": ("pfc_rx_pause_transition", 3),
        "rx_prio3_discards": ("rx_prio_discards", 3),
        "rx_prio3_buf_discard": ("rx_prio_buf_discard", 3),
        "rx_prio3_cong_discard": ("rx_prio_cong_discard", 3),
        "rx_prio3_marked": ("rx_prio_ecn_marked", 3),
    }
    for raw, want in documented.items():
        assert resolve("mlx5", raw) == want, raw


# --------------------------------------------------------------------------------------------------
# (2) RDMA: sysfs hw_counters / counters and `rdma statistic`

HW_COUNTERS = {
    "out_of_sequence": "out_of_sequence",
    "packet_seq_err": "packet_seq_err",
    "implied_nak_seq_err": "implied_nak_seq_err",
    "local_ack_timeout_err": "local_ack_timeout_err",
    "duplicate_request": "duplicate_request",
    "rnr_nak_retry_err": "rnr_nak_retry_err",
    "roce_adp_retrans": "roce_adp_retrans",
    "roce_adp_retrans_to": "roce_adp_retrans_to",
    "roce_slow_restart": "roce_slow_restart",
    "roce_slow_restart_cnps": "roce_slow_restart_cnps",
    "roce_slow_restart_trans": "roce_slow_restart_trans",
    "req_cqe_error": "req_cqe_error",
    "resp_cqe_error": "resp_cqe_error",
    "rx_read_requests": "rx_read_requests",
    "rx_write_requests": "rx_write_requests",
    "rx_atomic_requests": "rx_atomic_requests",
    "out_of_buffer": "rdma_out_of_buffer",
}
IB_COUNTERS = {
    "port_rcv_data": "rdma_rx_bytes",
    "port_xmit_data": "rdma_tx_bytes",
    "port_rcv_packets": "rdma_rx_packets",
    "port_xmit_packets": "rdma_tx_packets",
    "port_xmit_wait": "port_xmit_wait",
    "port_xmit_discards": "tx_discards",
    "port_rcv_errors": "rx_errors",
    "symbol_error": "rx_symbol_errors",
    "link_downed": "link_down_events",
}
RDMA_STATISTIC = {  # congestion counters: in `rdma stat show link` of a RoCE port, not in the IB sysfs
    "np_cnp_sent": "cnp_sent",
    "np_ecn_marked_roce_packets": "ecn_marked_roce_packets",
    "rp_cnp_handled": "cnp_handled",
    "rp_cnp_ignored": "cnp_ignored",
    "rx_icrc_encapsulated": "rx_icrc_errors",
    "cc_rx_ce_pkts": "ecn_marked_roce_packets",
    "cc_tx_cnp_pkts": "cnp_sent",
    "cc_rx_cnp_pkts": "cnp_received",
}


def test_sysfs_hw_counters_and_counters_resolve() -> None:
    sysfs = parse_sysfs(RDMA / "procfs_fixture_mlx5_0_sysfs.txt")
    hw, ib = sysfs["hw_counters"], sysfs["counters"]
    for raw, metric in HW_COUNTERS.items():
        assert raw in hw, raw
        assert resolve("mlx5_rdma", raw) == (metric, -1), raw
    for raw, metric in IB_COUNTERS.items():
        assert raw in ib, raw
        assert resolve("ib_port", raw) == (metric, -1), raw
    hw_mapped, hw_unmapped = mapped_and_unmapped("mlx5_rdma", set(hw))
    ib_mapped, ib_unmapped = mapped_and_unmapped("ib_port", set(ib))
    report_unmapped("hw_counters", hw_unmapped)
    report_unmapped("counters", ib_unmapped)
    assert len(hw_mapped) >= 17
    assert len(ib_mapped) >= 9


def test_ib_data_counters_are_4_byte_words() -> None:
    ib = parse_sysfs(RDMA / "procfs_fixture_mlx5_0_sysfs.txt")["counters"]
    assert scale("ib_port", "port_xmit_data") == 4.0
    assert scale("ib_port", "port_rcv_data") == 4.0
    assert scale("ib_port", "port_xmit_packets") == 1.0
    assert int(ib["port_xmit_data"]) * scale("ib_port", "port_xmit_data") == 11_523_046_035_392
    assert "4-byte words" in METRICS_BY_NAME["rdma_rx_bytes"].description


def test_rdma_statistic_names_resolve() -> None:
    names = parse_rdma_statistic(RDMA / "iproute2_commit_msgs_rdma_statistic_real_outputs.txt")
    for raw, metric in RDMA_STATISTIC.items():
        assert raw in names, raw
        assert resolve("mlx5_rdma", raw) == (metric, -1), raw
    mapped, unmapped = mapped_and_unmapped("mlx5_rdma", names)
    report_unmapped("rdma statistic", {n for n in unmapped if "_" in n})
    assert len(mapped) >= 20


# --------------------------------------------------------------------------------------------------
# switches: SONiC, Cumulus, OpenConfig, SR Linux, SNMP


def test_sonic_counters_resolve() -> None:
    port = load_json("sonic-gnmi_COUNTERS_Ethernet68.txt")
    assert resolve("sonic_sai", "SAI_PORT_STAT_PFC_7_RX_PKTS") == ("pfc_rx_pause", 7)
    assert port["SAI_PORT_STAT_PFC_7_RX_PKTS"] == "2"
    expected_port = {
        "SAI_PORT_STAT_IF_IN_OCTETS": ("rx_bytes", -1),
        "SAI_PORT_STAT_IF_OUT_OCTETS": ("tx_bytes", -1),
        "SAI_PORT_STAT_IF_IN_UCAST_PKTS": ("rx_unicast_packets", -1),
        "SAI_PORT_STAT_IF_IN_DISCARDS": ("rx_discards", -1),
        "SAI_PORT_STAT_IF_OUT_ERRORS": ("tx_errors", -1),
        "SAI_PORT_STAT_ETHER_STATS_CRC_ALIGN_ERRORS": ("rx_fcs_errors", -1),
        "SAI_PORT_STAT_PFC_3_RX_PKTS": ("pfc_rx_pause", 3),
        "SAI_PORT_STAT_PFC_3_TX_PKTS": ("pfc_tx_pause", 3),
        "SAI_PORT_STAT_PFC_3_ON2OFF_RX_PKTS": ("pfc_rx_pause_transition", 3),
    }
    for raw, want in expected_port.items():
        assert raw in port, raw
        assert resolve("sonic_sai", raw) == want, raw
    # queue counters: the queue index comes from the key `Ethernet68:<queue>`
    queue = load_json("sonic-gnmi_COUNTERS_Ethernet68_Queues.txt")["Ethernet68:3"]
    expected_queue = {
        "SAI_QUEUE_STAT_BYTES": "queue_tx_bytes",
        "SAI_QUEUE_STAT_PACKETS": "queue_tx_packets",
        "SAI_QUEUE_STAT_DROPPED_PACKETS": "queue_dropped_packets",
        "SAI_QUEUE_STAT_DROPPED_BYTES": "queue_dropped_bytes",
        "SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES": "queue_occupancy_bytes",
        "SAI_QUEUE_ATTR_PAUSE_STATUS": "queue_paused",
        "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED": "pfcwd_storm_detected",
        "PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED": "pfcwd_storm_restored",
    }
    for raw, metric in expected_queue.items():
        assert raw in queue, raw
        assert resolve("sonic_sai", raw) == (metric, -1), raw
        assert METRICS_BY_NAME[metric].per_priority
    assert resolve("sonic_sai", "SAI_QUEUE_STAT_PACKETS_last") is None  # SONiC bookkeeping
    assert resolve("sonic_sai", "PFC_WD_DETECTION_TIME") is None  # configuration, not a counter
    pg = load_json("sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt")["Ethernet16:5"]
    assert resolve("sonic_sai", next(k for k in pg if "SHARED" in k)) == ("pg_watermark_bytes", -1)
    assert resolve("sonic_sai", next(k for k in pg if "XOFF" in k)) == ("pg_headroom_watermark_bytes", -1)
    mock = {k for k, _ in json_fields(load_json("sonic-utilities_mock_counters_db.json"))}
    for raw, metric in {
        "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS": "queue_ecn_marked_packets",
        "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES": "queue_watermark_bytes",
        "SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS": "pg_dropped_packets",
        "SAI_BUFFER_POOL_STAT_WATERMARK_BYTES": "buffer_pool_watermark_bytes",
        "PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS": "pfcwd_tx_dropped_packets",
        "PFC_WD_QUEUE_STATS_RX_DROPPED_PACKETS": "pfcwd_rx_dropped_packets",
        "SAI_PORT_STAT_IF_IN_FEC_NOT_CORRECTABLE_FRAMES": "fec_uncorrectable_blocks",
        "SAI_PORT_STAT_IF_IN_FEC_CORRECTABLE_FRAMES": "fec_corrected_blocks",
    }.items():
        assert raw in mock, raw
        assert resolve("sonic_sai", raw) == (metric, -1), raw
    mapped, unmapped = mapped_and_unmapped("sonic_sai", real_names()["sonic_sai"])
    report_unmapped("sonic COUNTERS_DB", {n for n in unmapped if n.startswith(("SAI_", "PFC_WD", "EST_"))})
    assert len(mapped) >= 51


def test_cumulus_roce_counters_resolve() -> None:
    counters = parse_cumulus_counters(SWITCH / "cumulus_nvue_roce_counters_spectrum.txt")
    assert counters["tx-stats/tx-ecn-stats/ecn-marked-packets"] == "693777677344"
    expected = {
        "rx-stats/rx-pfc-stats/pause-packets": "pfc_rx_pause",
        "rx-stats/rx-pfc-stats/pause-duration": "pfc_rx_pause_duration_us",
        "tx-stats/tx-pfc-stats/pause-packets": "pfc_tx_pause",
        "tx-stats/tx-pfc-stats/pause-duration": "pfc_tx_pause_duration_us",
        "tx-stats/tx-ecn-stats/ecn-marked-packets": "tx_ecn_marked_packets",
        "tx-stats/tx-roce-stats/unicast-no-buffer-discard": "queue_dropped_packets",
        "tx-stats/tx-cnp-stats/cnp-packets": "tx_cnp_packets",
        "tx-stats/tx-roce-stats/tc-max-usage": "queue_watermark_bytes",
        "rx-stats/rx-roce-stats/pg-max-usage": "pg_watermark_bytes",
        "rx-stats/rx-roce-stats/no-buffer-discard": "pg_dropped_packets",
        "rx-stats/rx-roce-stats/roce-bytes": "rdma_rx_bytes",
        "tx-stats/tx-roce-stats/roce-packets": "rdma_tx_packets",
    }
    for raw, metric in expected.items():
        assert raw in counters, raw
        assert resolve("cumulus", raw) == (metric, -1), raw
    mapped, unmapped = mapped_and_unmapped("cumulus", set(counters))
    report_unmapped("cumulus", unmapped)
    assert len(mapped) >= 23


def test_openconfig_and_srlinux_paths_resolve() -> None:
    oc = real_names()["openconfig"]
    assert "state/counters/in-octets" in oc
    assert resolve("openconfig", "ethernet/state/counters/in-mac-pause-frames") == ("link_rx_pause", -1)
    assert resolve("openconfig", "state/ecn-marked-pkts") == ("queue_ecn_marked_packets", -1)
    # public OpenConfig has no PFC container: nothing may claim one
    assert not [n for n in vendor_names("openconfig") if "pfc" in n]
    srl = real_names()["srlinux"]
    raw = "pfc/statistics/pfc-priority/pfc-pause-frames-received"
    assert raw in srl
    assert resolve("srlinux", raw) == ("pfc_rx_pause", -1)  # priority = pfc-priority[index]
    assert resolve("srlinux", "queue-depth/maximum-burst-size") is None  # a limit, not a watermark
    for vendor, floor in (("openconfig", 23), ("srlinux", 12)):
        mapped, unmapped = mapped_and_unmapped(vendor, real_names()[vendor])
        report_unmapped(vendor, unmapped)
        assert len(mapped) >= floor


def test_snmp_objects_resolve() -> None:
    oids = mib_objects(SNMP / "pfc_qos_mib_oid_table.tsv")
    walked = snmprec_objects(SNMP / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec", oids)
    assert {"ifHCOutOctets", "ifHCInMulticastPkts", "ifHCInBroadcastPkts"} <= walked
    assert resolve("snmp", "ifHCOutOctets") == ("tx_bytes", -1)
    expected = {
        "ieee8021PfcRequests": "pfc_tx_pause_total",  # M_CONTROL.request = PFC frames sent
        "ieee8021PfcIndications": "pfc_rx_pause_total",  # per interface (AUGMENTS ifEntry)
        "cpfcIfPriorityRequests": "pfc_tx_pause",
        "cpfcIfPriorityIndications": "pfc_rx_pause",
        "aristaPfcPriorityIndications": "pfc_rx_pause",
        "mellanoxQoSPFCRxPauseDuration": "pfc_rx_pause_duration_us",
        "cpfcWatchdogIfQueueShutdowns": "pfcwd_storm_detected",
        "aristaEgressQueuePktsDropped": "queue_dropped_packets",
        "dot3InPauseFrames": "link_rx_pause",
        "ifHighSpeed": "port_speed_bps",
    }
    for raw, metric in expected.items():
        assert raw in oids.values(), raw
        assert resolve("snmp", raw) == (metric, -1), raw
    assert scale("snmp", "ifHighSpeed") == 1e6  # Mb/s
    assert scale("snmp", "mellanoxQoSPFCRxPauseDuration") == 1000.0  # ms in MELLANOX-QOS-MIB
    assert scale("snmp", "cpfcIfPriorityIndications") == 1.0
    assert scale("snmp", "noSuchObject") == 1.0
    assert "ifmib" not in VENDORS


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
        )
    },
    ("srlinux", "oper-state"): "srl_nokia-interfaces /interface/oper-state; filtered out of the csv",
    ("srlinux", "transceiver/channel/input-power/latest-value"): "srl_nokia-interfaces power-levels "
    "grouping under /interface/transceiver/channel; filtered out of the csv",
    ("snmp", "ifOperStatus"): "IF-MIB ifTable column 1.3.6.1.2.1.2.2.1.8 (RFC 2863); not in the table",
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
