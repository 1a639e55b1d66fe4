"""The metric catalog: canonical metric names and the vendor names that map to each.

Collectors keep the vendor's own name in `raw_name` and store the canonical one in `metric`,
so a query about `pfc_rx_pause` works the same for a ConnectX NIC, a SONiC leaf and an SR Linux
spine. A vendor name may carry `{p}`: the 802.1p priority (0-7) the counter belongs to.
`rocescope.schema` re-exports this module; it is split out only to keep files small.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

MetricKind = Literal["counter", "gauge"]

#: Vendors (name families) a raw counter name can come from.
VENDORS: tuple[str, ...] = (
    "mlx5",  # mlx5_core `ethtool -S`
    "mlx5_rdma",  # /sys/class/infiniband/*/ports/*/hw_counters
    "ib_port",  # /sys/class/infiniband/*/ports/*/counters (IBTA PortCounters)
    "bnxt",  # bnxt_en `ethtool -S`
    "ice",  # ice `ethtool -S`
    "i40e",  # i40e `ethtool -S`
    "sonic_sai",  # SONiC COUNTERS_DB (SAI stat ids)
    "openconfig",  # OpenConfig gNMI leaf paths (relative to the interface or queue)
    "srlinux",  # Nokia SR Linux gNMI leaf paths
    "cumulus",  # Cumulus/NVUE RoCE counters on Spectrum
    "ifmib",  # IF-MIB / IEEE8021-PFC-MIB object names
)


@dataclass(frozen=True)
class Metric:
    """One canonical metric: what it measures, its unit, and how vendors name it."""

    name: str
    unit: str
    kind: MetricKind
    description: str
    vendor_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    per_priority: bool = False


def _m(
    name: str,
    unit: str,
    kind: MetricKind,
    description: str,
    per_priority: bool = False,
    **vendor_names: tuple[str, ...],
) -> Metric:
    return Metric(name, unit, kind, description, dict(vendor_names), per_priority)


#: THE catalog. Counters are monotonically increasing (rates are derived downstream with
#: reset/wrap handling); gauges are instantaneous or peak-since-last-read values.
METRICS: tuple[Metric, ...] = (
    # --- port traffic
    _m(
        "rx_bytes", "bytes", "counter", "Bytes received on the port.",
        mlx5=("rx_bytes_phy", "rx_bytes"), bnxt=("rx_bytes",), ice=("rx_bytes",),
        i40e=("rx_bytes",), sonic_sai=("SAI_PORT_STAT_IF_IN_OCTETS",),
        openconfig=("state/counters/in-octets",), srlinux=("statistics/in-octets",),
        ifmib=("ifHCInOctets",),
    ),
    _m(
        "tx_bytes", "bytes", "counter", "Bytes transmitted on the port.",
        mlx5=("tx_bytes_phy", "tx_bytes"), bnxt=("tx_bytes",), ice=("tx_bytes",),
        i40e=("tx_bytes",), sonic_sai=("SAI_PORT_STAT_IF_OUT_OCTETS",),
        openconfig=("state/counters/out-octets",), srlinux=("statistics/out-octets",),
        ifmib=("ifHCOutOctets",),
    ),
    _m(
        "rx_packets", "packets", "counter", "Packets received on the port.",
        mlx5=("rx_packets_phy", "rx_packets"), bnxt=("rx_packets",), ice=("rx_packets",),
        i40e=("rx_packets",), sonic_sai=("SAI_PORT_STAT_IF_IN_UCAST_PKTS",),
        openconfig=("state/counters/in-pkts",), srlinux=("statistics/in-packets",),
        ifmib=("ifHCInUcastPkts",),
    ),
    _m(
        "tx_packets", "packets", "counter", "Packets transmitted on the port.",
        mlx5=("tx_packets_phy", "tx_packets"), bnxt=("tx_packets",), ice=("tx_packets",),
        i40e=("tx_packets",), sonic_sai=("SAI_PORT_STAT_IF_OUT_UCAST_PKTS",),
        openconfig=("state/counters/out-pkts",), srlinux=("statistics/out-packets",),
        ifmib=("ifHCOutUcastPkts",),
    ),
    _m(
        "rx_prio_bytes", "bytes", "counter", "Bytes received on one priority.", per_priority=True,
        mlx5=("rx_prio{p}_bytes",), ice=("rx_priority_{p}_bytes",),
    ),
    _m(
        "tx_prio_bytes", "bytes", "counter", "Bytes transmitted on one priority.", per_priority=True,
        mlx5=("tx_prio{p}_bytes",), ice=("tx_priority_{p}_bytes",),
    ),
    _m(
        "rx_discards", "packets", "counter", "Received packets discarded (no buffer, policy).",
        mlx5=("rx_discards_phy",), bnxt=("rx_stat_discard",), ice=("rx_dropped.nic", "rx_dropped"),
        i40e=("port.rx_dropped",), sonic_sai=("SAI_PORT_STAT_IF_IN_DISCARDS",),
        openconfig=("state/counters/in-discards",), srlinux=("statistics/in-discarded-packets",),
        ifmib=("ifInDiscards",),
    ),
    _m(
        "tx_discards", "packets", "counter", "Transmit packets discarded.",
        mlx5=("tx_discards_phy",), bnxt=("tx_stat_discard",),
        sonic_sai=("SAI_PORT_STAT_IF_OUT_DISCARDS",), openconfig=("state/counters/out-discards",),
        srlinux=("statistics/out-discarded-packets",), ifmib=("ifOutDiscards",),
    ),
    _m(
        "rx_errors", "packets", "counter", "Received packets with errors (FCS, symbol...).",
        sonic_sai=("SAI_PORT_STAT_IF_IN_ERRORS",), openconfig=("state/counters/in-errors",),
        srlinux=("statistics/in-error-packets",), ifmib=("ifInErrors",),
        mlx5=("rx_crc_errors_phy",), ib_port=("port_rcv_errors",),
    ),
    _m(
        "rx_out_of_buffer", "packets", "counter", "Packets dropped for lack of receive WQEs/buffers.",
        mlx5=("rx_out_of_buffer",), mlx5_rdma=("out_of_buffer",),
    ),
    # --- PFC
    _m(
        "pfc_rx_pause", "frames", "counter", "PFC pause frames received on a priority.",
        per_priority=True, mlx5=("rx_prio{p}_pause",), bnxt=("rx_pfc_ena_frames_pri{p}",),
        ice=("rx_priority_{p}_xoff.nic", "rx_priority_{p}_xoff"), i40e=("port.rx_priority_{p}_xoff",),
        sonic_sai=("SAI_PORT_STAT_PFC_{p}_RX_PKTS",),
        openconfig=("state/counters/in-pfc-frames", "pfc/state/counters/in-pause-frames"),
        srlinux=("pfc/statistics/in-pause-frames",),
        ifmib=("ieee8021PfcIndications", "requestsIn"),
    ),
    _m(
        "pfc_tx_pause", "frames", "counter", "PFC pause frames sent on a priority.",
        per_priority=True, mlx5=("tx_prio{p}_pause",), bnxt=("tx_pfc_ena_frames_pri{p}",),
        ice=("tx_priority_{p}_xoff.nic", "tx_priority_{p}_xoff"), i40e=("port.tx_priority_{p}_xoff",),
        sonic_sai=("SAI_PORT_STAT_PFC_{p}_TX_PKTS",),
        openconfig=("pfc/state/counters/out-pause-frames",),
        srlinux=("pfc/statistics/out-pause-frames",), ifmib=("ieee8021PfcRequests", "requestsOut"),
    ),
    _m(
        "pfc_rx_pause_duration_us", "us", "counter",
        "Time the port was paused by received PFC frames on a priority.", per_priority=True,
        mlx5=("rx_prio{p}_pause_duration",), sonic_sai=("SAI_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US",),
    ),
    _m(
        "pfc_tx_pause_duration_us", "us", "counter",
        "Time the port paused its peer on a priority.", per_priority=True,
        mlx5=("tx_prio{p}_pause_duration",), sonic_sai=("SAI_PORT_STAT_PFC_{p}_TX_PAUSE_DURATION_US",),
    ),
    _m(
        "pfc_rx_xon", "frames", "counter", "PFC resume (XON, quanta 0) frames received.",
        per_priority=True, ice=("rx_priority_{p}_xon.nic", "rx_priority_{p}_xon"),
        i40e=("port.rx_priority_{p}_xon",), mlx5=("rx_prio{p}_pause_transition",),
    ),
    _m(
        "pfc_tx_xon", "frames", "counter", "PFC resume (XON) frames sent.",
        per_priority=True, ice=("tx_priority_{p}_xon.nic", "tx_priority_{p}_xon"),
        i40e=("port.tx_priority_{p}_xon",),
    ),
    _m(
        "link_rx_pause", "frames", "counter", "Global (802.3x) pause frames received.",
        mlx5=("rx_pause_ctrl_phy",), bnxt=("rx_pause_frames",), ice=("link_xoff_rx",),
        i40e=("port.link_xoff_rx",), openconfig=("ethernet/state/counters/in-mac-pause-frames",),
        srlinux=("ethernet/statistics/in-mac-pause-frames",),
    ),
    _m(
        "link_tx_pause", "frames", "counter", "Global (802.3x) pause frames sent.",
        mlx5=("tx_pause_ctrl_phy",), bnxt=("tx_pause_frames",), ice=("link_xoff_tx",),
        i40e=("port.link_xoff_tx",), openconfig=("ethernet/state/counters/out-mac-pause-frames",),
        srlinux=("ethernet/statistics/out-mac-pause-frames",),
    ),
    _m(
        "pfcwd_storm_detected", "events", "counter", "PFC watchdog storms detected on a queue.",
        per_priority=True, sonic_sai=("PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED",),
    ),
    _m(
        "pfcwd_storm_restored", "events", "counter", "PFC watchdog storms restored on a queue.",
        per_priority=True, sonic_sai=("PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED",),
    ),
    # --- queues, ECN
    _m(
        "queue_tx_bytes", "bytes", "counter", "Bytes sent from an egress queue.", per_priority=True,
        sonic_sai=("SAI_QUEUE_STAT_BYTES",), openconfig=("state/transmit-octets",),
    ),
    _m(
        "queue_tx_packets", "packets", "counter", "Packets sent from an egress queue.",
        per_priority=True, sonic_sai=("SAI_QUEUE_STAT_PACKETS",), openconfig=("state/transmit-pkts",),
    ),
    _m(
        "queue_dropped_packets", "packets", "counter", "Packets dropped at an egress queue.",
        per_priority=True, sonic_sai=("SAI_QUEUE_STAT_DROPPED_PACKETS",),
        openconfig=("state/dropped-pkts",),
    ),
    _m(
        "queue_watermark_bytes", "bytes", "gauge",
        "Peak egress queue occupancy since the last read.", per_priority=True,
        sonic_sai=("SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",),
        openconfig=("state/max-queue-len",), srlinux=("queue-depth/maximum-burst-size",),
    ),
    _m(
        "queue_occupancy_bytes", "bytes", "gauge", "Current egress queue occupancy.",
        per_priority=True, sonic_sai=("SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES",),
    ),
    _m(
        "pg_watermark_bytes", "bytes", "gauge",
        "Peak ingress priority-group occupancy since the last read.", per_priority=True,
        sonic_sai=(
            "SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES",
            "SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES",
        ),
    ),
    _m(
        "pg_dropped_packets", "packets", "counter", "Packets dropped at an ingress priority group.",
        per_priority=True, sonic_sai=("SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS",),
    ),
    _m(
        "ecn_marked_packets", "packets", "counter", "Packets marked CE by the switch (WRED/ECN).",
        per_priority=True, sonic_sai=("SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS", "SAI_PORT_STAT_ECN_MARKED_PACKETS"),
        openconfig=("state/ecn-marked-pkts",), cumulus=("tx-ecn-marked-packets",),
    ),
    # --- RoCE / DCQCN on the NIC
    _m(
        "ecn_marked_roce_packets", "packets", "counter",
        "RoCE packets received with CE set (the notification point sees congestion).",
        mlx5_rdma=("np_ecn_marked_roce_packets",),
    ),
    _m(
        "cnp_sent", "packets", "counter", "CNPs sent by the notification point (receiver).",
        mlx5_rdma=("np_cnp_sent",),
    ),
    _m(
        "cnp_handled", "packets", "counter", "CNPs handled by the reaction point (sender).",
        mlx5_rdma=("rp_cnp_handled",),
    ),
    _m(
        "cnp_ignored", "packets", "counter", "CNPs received but ignored by the reaction point.",
        mlx5_rdma=("rp_cnp_ignored",),
    ),
    _m(
        "out_of_sequence", "packets", "counter", "Out-of-sequence packets received (lost or reordered).",
        mlx5_rdma=("out_of_sequence",),
    ),
    _m(
        "packet_seq_err", "events", "counter", "NAK sequence errors received (go-back-N retransmits).",
        mlx5_rdma=("packet_seq_err",),
    ),
    _m(
        "local_ack_timeout_err", "events", "counter", "QP ack timeouts (retransmit after timeout).",
        mlx5_rdma=("local_ack_timeout_err",),
    ),
    _m(
        "roce_adp_retrans", "events", "counter", "Adaptive retransmissions.",
        mlx5_rdma=("roce_adp_retrans",),
    ),
    _m(
        "rdma_rx_bytes", "bytes", "counter", "RDMA bytes received on the port (IB data is in 4-byte words).",
        ib_port=("port_rcv_data",), mlx5=("rx_vport_rdma_unicast_bytes",),
    ),
    _m(
        "rdma_tx_bytes", "bytes", "counter", "RDMA bytes sent on the port.",
        ib_port=("port_xmit_data",), mlx5=("tx_vport_rdma_unicast_bytes",),
    ),
    _m(
        "port_xmit_wait", "ticks", "counter", "Ticks the port had data to send but could not (paused).",
        ib_port=("port_xmit_wait",),
    ),
    # --- link state
    _m(
        "port_speed_bps", "bps", "gauge", "Negotiated port speed.",
        openconfig=("ethernet/state/port-speed",), ifmib=("ifHighSpeed",),
    ),
    _m(
        "oper_up", "bool", "gauge", "1 when the link is operationally up.",
        openconfig=("state/oper-status",), srlinux=("oper-state",), ifmib=("ifOperStatus",),
    ),
    _m(
        "link_down_events", "events", "counter", "Link-down transitions.",
        mlx5=("link_down_events_phy",), openconfig=("state/counters/carrier-transitions",),
        ib_port=("link_downed",),
    ),
    _m(
        "fec_uncorrectable_blocks", "blocks", "counter", "FEC blocks that could not be corrected.",
        openconfig=("ethernet/state/counters/fec-uncorrectable-blocks",),
        sonic_sai=("SAI_PORT_STAT_IF_IN_FEC_NOT_CORRECTABLE_FRAMES",),
    ),
    _m(
        "optics_rx_power_dbm", "dBm", "gauge", "Received optical power (lowest lane).",
    ),
)

METRICS_BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}
PRIORITIES: tuple[int, ...] = tuple(range(8))


@cache
def _lookup_table(vendor: str) -> dict[str, tuple[str, int]]:
    """Expand every `{p}` template once, so resolving a raw name is one dict lookup."""
    table: dict[str, tuple[str, int]] = {}
    for metric in METRICS:
        for raw in metric.vendor_names.get(vendor, ()):
            if "{p}" in raw:
                for p in PRIORITIES:
                    table[raw.replace("{p}", str(p))] = (metric.name, p)
            else:
                table.setdefault(raw, (metric.name, -1))
    return table


def resolve(vendor: str, raw_name: str) -> tuple[str, int] | None:
    """Map a vendor's counter name to (canonical metric, priority or -1); None if unknown."""
    return _lookup_table(vendor).get(raw_name)


_TEMPLATE = re.compile(r"\{p\}")


def vendor_names(vendor: str) -> dict[str, tuple[str, int]]:
    """Every raw name of `vendor` with its (metric, priority), templates expanded."""
    return dict(_lookup_table(vendor))


def counter_metrics() -> tuple[str, ...]:
    """Names of the metrics whose rates are meaningful (monotonic counters)."""
    return tuple(m.name for m in METRICS if m.kind == "counter")
