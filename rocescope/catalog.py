"""The metric catalog: canonical metric names and the vendor names that map to each.

Collectors keep the vendor's own name in `raw_name` and store the canonical one in `metric`,
so a query about `pfc_rx_pause` works the same for a ConnectX NIC, a SONiC leaf and an SR Linux
spine. `rocescope.schema` re-exports this module; it is split out only to keep files small.

Conventions:

* A vendor name may carry `{p}`: the index digit 0-7 the counter belongs to. For NIC/port
  counters that is the 802.1p priority; for bnxt `*_cos{p}` it is the CoS queue.
* `resolve()` returns priority -1 for a name without `{p}`. For a `per_priority` metric that means
  the index is not in the name but in the object key: the SONiC COUNTERS key (`Ethernet68:3`), the
  SNMP OID index, the gNMI list key (`pfc-priority[index=3]`, `queue[name=...]`, Cumulus's
  `switch-priority[priority=3]`) or, for Cumulus NVUE, the RoCE/CNP traffic class from `nv show qos roce`.
  The collector fills it in.
* A few raw values need a factor to reach the metric's unit (IB data counters are in 4-byte
  words, ifHighSpeed and SONiC's port `speed` are in Mb/s, Mellanox Onyx pause durations are in ms):
  see `scale()`. Port speeds may also come as words (OpenConfig `SPEED_400GB`, SR Linux `400G`): the
  collectors read those (`rocescope.collectors.gnmi.values`).
* RDMA hw_counters are named by their provider: the NIC collector picks `mlx5_rdma` or `bnxt_rdma` by the RDMA
  device's driver (`rocescope.collectors.nic.vendors`). The IBTA `counters/` are `ib_port` for every provider.
* SONiC names are of two kinds: COUNTERS_DB fields (`sonic_sai`: the SAI stat or PFC_WD field, whose
  object key names the port and queue) and the port tables of APPL_DB/STATE_DB (`PORT_TABLE`) and
  CONFIG_DB (`PORT`) as `TABLE/field` (`sonic_db`).
* Every name below was checked against real device output (tests/fixtures/realdata) or, where
  the sample device does not expose it, against the driver/MIB/YANG documentation; the test
  `tests/catalog/test_names.py` lists the latter with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

MetricKind = Literal["counter", "gauge"]

#: Vendors (name families) a raw counter name can come from.
VENDORS: tuple[str, ...] = (
    "mlx5",  # mlx5_core `ethtool -S` (port-level `*_phy`, `rx_prio{p}_*`, vport counters)
    "mlx5_rdma",  # /sys/class/infiniband/*/ports/*/hw_counters and `rdma statistic` names
    "bnxt_rdma",  # the same of Broadcom bnxt_re: Linux 6.6-6.17 names, the 6.18 renames, Broadcom's own driver's
    "ib_port",  # /sys/class/infiniband/*/ports/*/counters (IBTA PortCounters)
    "bnxt",  # bnxt_en `ethtool -S` port statistics (per-ring `[N]: ...` lines are not mapped)
    "ice",  # ice `ethtool -S` port-level `*.nic` statistics
    "i40e",  # i40e `ethtool -S` port-level `port.*` statistics
    "sonic_sai",  # SONiC COUNTERS_DB field names (SAI stat ids, PFC_WD_* fields)
    "sonic_db",  # SONiC port tables as `TABLE/field`: APPL_DB/STATE_DB PORT_TABLE, CONFIG_DB PORT
    "openconfig",  # paths w/o module prefixes under /interfaces/interface or .../output/queues/queue
    "srlinux",  # paths under /interface, /qos/interfaces/interface or its output/queues/queue
    "cumulus",  # NVUE `nv show interface <if> qos roce counters` keys joined with '/'; Cumulus Linux gNMI
    # paths (NVIDIA's, not OpenConfig's) below /interfaces/interface or /qos/interfaces/interface or its queue
    "snmp",  # MIB object names: IF-MIB, EtherLike, IEEE8021-PFC, Cisco/Arista/Mellanox PFC & QoS
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
    #: raw name (as written in `vendor_names`, `{p}` included) -> factor to reach `unit`.
    scales: Mapping[str, float] = field(default_factory=dict)
    #: A reading of a setting where zero (or less) means "not known" (a port speed not negotiated, ifHighSpeed
    #: 0): collectors skip such a value and count it as non-numeric, never store it.
    zero_is_unknown: bool = False


def _m(
    name: str,
    unit: str,
    kind: MetricKind,
    description: str,
    per_priority: bool = False,
    scales: Mapping[str, float] | None = None,
    zero_is_unknown: bool = False,
    **vendor_names: tuple[str, ...],
) -> Metric:
    unknown = set(vendor_names) - set(VENDORS)
    if unknown:
        raise ValueError(f"{name}: unknown vendor(s) {sorted(unknown)}")
    return Metric(name, unit, kind, description, dict(vendor_names), per_priority, dict(scales or {}), zero_is_unknown)


#: THE catalog. Counters are monotonically increasing (rates are derived downstream with
#: reset/wrap handling); gauges are instantaneous or peak-since-last-read values.
# Laid out as a table (one `_m` call per metric); the formatter would spread each call over 10 lines.
# fmt: off
METRICS: tuple[Metric, ...] = (
    # --- port traffic (physical port level where the device distinguishes)
    _m("rx_bytes", "bytes", "counter", "Bytes received on the port.",
       mlx5=("rx_bytes_phy",), bnxt=("rx_bytes",), ice=("rx_bytes.nic",), i40e=("port.rx_bytes",),
       sonic_sai=("SAI_PORT_STAT_IF_IN_OCTETS",), openconfig=("state/counters/in-octets",),
       srlinux=("statistics/in-octets",), snmp=("ifHCInOctets",)),
    _m("tx_bytes", "bytes", "counter", "Bytes transmitted on the port.",
       mlx5=("tx_bytes_phy",), bnxt=("tx_bytes",), ice=("tx_bytes.nic",), i40e=("port.tx_bytes",),
       sonic_sai=("SAI_PORT_STAT_IF_OUT_OCTETS",), openconfig=("state/counters/out-octets",),
       srlinux=("statistics/out-octets",), snmp=("ifHCOutOctets",)),
    _m("rx_packets", "packets", "counter", "Good packets received on the port (all casts).",
       mlx5=("rx_packets_phy",), bnxt=("rx_good_frames",), openconfig=("state/counters/in-pkts",),
       srlinux=("statistics/in-packets",)),
    _m("tx_packets", "packets", "counter", "Packets transmitted on the port (all casts).",
       mlx5=("tx_packets_phy",), bnxt=("tx_good_frames",), openconfig=("state/counters/out-pkts",),
       srlinux=("statistics/out-packets",)),
    _m("rx_unicast_packets", "packets", "counter", "Unicast packets received on the port.",
       bnxt=("rx_ucast_frames",), ice=("rx_unicast.nic",), i40e=("port.rx_unicast",),
       sonic_sai=("SAI_PORT_STAT_IF_IN_UCAST_PKTS",), openconfig=("state/counters/in-unicast-pkts",),
       srlinux=("statistics/in-unicast-packets",), snmp=("ifHCInUcastPkts",)),
    _m("tx_unicast_packets", "packets", "counter", "Unicast packets transmitted on the port.",
       bnxt=("tx_ucast_frames",), ice=("tx_unicast.nic",), i40e=("port.tx_unicast",),
       sonic_sai=("SAI_PORT_STAT_IF_OUT_UCAST_PKTS",), openconfig=("state/counters/out-unicast-pkts",),
       srlinux=("statistics/out-unicast-packets",), snmp=("ifHCOutUcastPkts",)),
    # --- per-priority traffic (802.1p priority of the frame)
    _m("rx_prio_bytes", "bytes", "counter", "Bytes received on one priority.", per_priority=True,
       mlx5=("rx_prio{p}_bytes",), bnxt=("rx_bytes_pri{p}",), snmp=("mellanoxQoSPrioRxBytes",)),
    _m("tx_prio_bytes", "bytes", "counter", "Bytes transmitted on one priority.", per_priority=True,
       mlx5=("tx_prio{p}_bytes",), bnxt=("tx_bytes_pri{p}",), snmp=("mellanoxQoSPrioTxBytes",)),
    _m("rx_prio_packets", "packets", "counter", "Packets received on one priority.", per_priority=True,
       mlx5=("rx_prio{p}_packets",), bnxt=("rx_packets_pri{p}",), snmp=("mellanoxQoSPrioRxPkts",)),
    _m("tx_prio_packets", "packets", "counter", "Packets transmitted on one priority.", per_priority=True,
       mlx5=("tx_prio{p}_packets",), bnxt=("tx_packets_pri{p}",), snmp=("mellanoxQoSPrioTxPkts",)),
    # --- drops and errors
    _m("rx_discards", "packets", "counter", "Received packets dropped by the port (no buffer, policy).",
       mlx5=("rx_discards_phy",), bnxt=("rx_stat_discard",), ice=("rx_dropped.nic",),
       i40e=("port.rx_dropped",), sonic_sai=("SAI_PORT_STAT_IF_IN_DISCARDS",),
       openconfig=("state/counters/in-discards",), srlinux=("statistics/in-discarded-packets",),
       snmp=("ifInDiscards",)),
    _m("tx_discards", "packets", "counter", "Packets dropped on transmit without an error (link down, HOL).",
       mlx5=("tx_discards_phy",), bnxt=("tx_stat_discard",), ib_port=("port_xmit_discards",),
       sonic_sai=("SAI_PORT_STAT_IF_OUT_DISCARDS",), openconfig=("state/counters/out-discards",),
       srlinux=("statistics/out-discarded-packets",), snmp=("ifOutDiscards",)),
    _m("rx_errors", "packets", "counter", "Received packets discarded for errors (all error kinds).",
       bnxt=("rx_stat_err",), ib_port=("port_rcv_errors",), sonic_sai=("SAI_PORT_STAT_IF_IN_ERRORS",),
       openconfig=("state/counters/in-errors",), srlinux=("statistics/in-error-packets",),
       snmp=("ifInErrors",)),
    _m("tx_errors", "packets", "counter", "Packets that could not be transmitted because of errors.",
       mlx5=("tx_errors_phy",), bnxt=("tx_stat_error",), ice=("tx_errors.nic",), i40e=("port.tx_errors",),
       sonic_sai=("SAI_PORT_STAT_IF_OUT_ERRORS",), openconfig=("state/counters/out-errors",),
       srlinux=("statistics/out-error-packets",), snmp=("ifOutErrors",)),
    _m("rx_fcs_errors", "packets", "counter", "Received frames with a bad FCS/CRC (link quality).",
       mlx5=("rx_crc_errors_phy",), bnxt=("rx_fcs_err_frames",), ice=("rx_crc_errors.nic",),
       i40e=("port.rx_crc_errors",), sonic_sai=("SAI_PORT_STAT_ETHER_STATS_CRC_ALIGN_ERRORS",),
       openconfig=("state/counters/in-fcs-errors",), srlinux=("statistics/in-fcs-error-packets",)),
    _m("rx_symbol_errors", "events", "counter", "Physical coding (symbol) errors on receive.",
       mlx5=("rx_symbol_err_phy",), ib_port=("symbol_error",),
       openconfig=("ethernet/state/counters/in-symbol-error",)),
    _m("rx_out_of_buffer", "packets", "counter", "Packets dropped because a host receive ring had no buffer.",
       mlx5=("rx_out_of_buffer",), bnxt=("rx_total_ring_discards",)),
    _m("rx_prio_discards", "packets", "counter",
       "Packets of one priority dropped for lack of receive buffer.",
       per_priority=True, mlx5=("rx_prio{p}_discards",)),
    _m("rx_prio_buf_discard", "packets", "counter",
       "Packets of one priority dropped for lack of per-host buffer.",
       per_priority=True, mlx5=("rx_prio{p}_buf_discard",)),
    _m("rx_prio_cong_discard", "packets", "counter",
       "Packets of one priority dropped for per-host congestion.",
       per_priority=True, mlx5=("rx_prio{p}_cong_discard",)),
    _m("rx_cos_discards", "packets", "counter",
       "Received packets dropped on one CoS queue (index = CoS queue).",
       per_priority=True, bnxt=("rx_discard_packets_cos{p}",)),
    _m("rx_cos_discard_bytes", "bytes", "counter",
       "Received bytes dropped on one CoS queue (index = CoS queue).",
       per_priority=True, bnxt=("rx_discard_bytes_cos{p}",)),
    _m("rx_buffer_passed_threshold", "events", "counter",
       "Times the NIC port receive buffer went over 85% full.",
       mlx5=("rx_buffer_passed_thres_phy",), bnxt=("rx_buffer_passed_threshold",)),
    # --- PFC (802.1Qbb), per priority: received pauses stop our transmit, sent pauses stop the peer
    _m("pfc_rx_pause", "frames", "counter",
       "PFC pause (XOFF) frames received on a priority.", per_priority=True,
       mlx5=("rx_prio{p}_pause",), bnxt=("rx_pfc_ena_frames_pri{p}",), ice=("rx_priority_{p}_xoff.nic",),
       i40e=("port.rx_priority_{p}_xoff",), sonic_sai=("SAI_PORT_STAT_PFC_{p}_RX_PKTS",),
       srlinux=("pfc/statistics/pfc-priority/pfc-pause-frames-received",),
       cumulus=("rx-stats/rx-pfc-stats/pause-packets", "switch-priority/state/counters/in-pause-pkts",
                "state/switch-priority/counters/in-pause-pkts"),
       snmp=("cpfcIfPriorityIndications", "aristaPfcPriorityIndications", "mellanoxQoSPFCRxPausePkts")),
    _m("pfc_tx_pause", "frames", "counter",
       "PFC pause (XOFF) frames sent on a priority.", per_priority=True,
       mlx5=("tx_prio{p}_pause",), bnxt=("tx_pfc_ena_frames_pri{p}",), ice=("tx_priority_{p}_xoff.nic",),
       i40e=("port.tx_priority_{p}_xoff",), sonic_sai=("SAI_PORT_STAT_PFC_{p}_TX_PKTS",),
       srlinux=("pfc/statistics/pfc-priority/pfc-pause-frames-generated",),
       cumulus=("tx-stats/tx-pfc-stats/pause-packets", "switch-priority/state/counters/out-pause-pkts",
                "state/switch-priority/counters/out-pause-pkts"),
       snmp=("cpfcIfPriorityRequests", "aristaPfcPriorityRequests", "mellanoxQoSPFCTxPausePkts")),
    _m("pfc_rx_pause_total", "frames", "counter", "PFC frames received on the port, all priorities together.",
       bnxt=("rx_pfc_frames",), srlinux=("pfc/statistics/total-pfc-pause-frames-received",),
       snmp=("ieee8021PfcIndications", "cpfcIfIndications")),
    _m("pfc_tx_pause_total", "frames", "counter", "PFC frames sent on the port, all priorities together.",
       bnxt=("tx_pfc_frames",), srlinux=("pfc/statistics/total-pfc-pause-frames-generated",),
       snmp=("ieee8021PfcRequests", "cpfcIfRequests")),
    _m("pfc_rx_pause_duration_us", "us", "counter",
       "Time our transmit on a priority was paused by received PFC frames.", per_priority=True,
       scales={"mellanoxQoSPFCRxPauseDuration": 1000.0},
       mlx5=("rx_prio{p}_pause_duration",), bnxt=("pfc_pri{p}_rx_duration_us",),
       sonic_sai=("SAI_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US",),
       cumulus=("rx-stats/rx-pfc-stats/pause-duration", "switch-priority/state/in-pause-duration"),
       snmp=("mellanoxQoSPFCRxPauseDuration",)),
    _m("pfc_tx_pause_duration_us", "us", "counter",
       "Time our PFC frames kept the peer paused on a priority.", per_priority=True,
       scales={"mellanoxQoSPFCTxPauseDuration": 1000.0},
       mlx5=("tx_prio{p}_pause_duration",), bnxt=("pfc_pri{p}_tx_duration_us",),
       sonic_sai=("SAI_PORT_STAT_PFC_{p}_TX_PAUSE_DURATION_US",),
       cumulus=("tx-stats/tx-pfc-stats/pause-duration", "switch-priority/state/out-pause-duration"),
       snmp=("mellanoxQoSPFCTxPauseDuration",)),
    _m("pfc_rx_pause_duration_est_us", "us", "counter",
       "Time a priority was estimated paused, kept apart from hardware timers: SONiC's PFC watchdog (Lua, where "
       "the ASIC has no pause timer and `pfc_stat_history` is on) counts each whole poll in which pause frames "
       "arrived or the queue stayed paused, so an upper bound at the watchdog's poll granularity.",
       per_priority=True, sonic_sai=("EST_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US",)),
    _m("pfc_rx_recent_pause_est_us", "us", "gauge",
       "Length of the latest pause episode received on a priority, as SONiC's PFC watchdog estimated it "
       "(`pfcstat --history`: Recent RX Pause Time US; at the watchdog's poll granularity).",
       per_priority=True, sonic_sai=("EST_PORT_STAT_PFC_{p}_RECENT_PAUSE_TIME_US",)),
    _m("pfc_rx_recent_pause_start_est_us", "us", "gauge",
       "When the latest pause episode on a priority began, microseconds since the epoch (UTC), as SONiC's PFC "
       "watchdog saw it (`pfcstat --history`: Recent RX Pause Timestamp).",
       per_priority=True, sonic_sai=("EST_PORT_STAT_PFC_{p}_RECENT_PAUSE_TIMESTAMP",)),
    _m("pfc_rx_pause_transition", "events", "counter",
       "Pause episodes received on a priority (paused<->unpaused transitions, one per episode).",
       per_priority=True, mlx5=("rx_prio{p}_pause_transition",), bnxt=("pfc_pri{p}_rx_transitions",),
       i40e=("port.rx_priority_{p}_xon_2_xoff",), sonic_sai=("SAI_PORT_STAT_PFC_{p}_ON2OFF_RX_PKTS",)),
    _m("pfc_rx_pause_transition_est", "events", "counter",
       "Pause episodes received on a priority as SONiC's PFC watchdog estimates them from its polls "
       "(`EST_*`, where the ASIC counts no transitions).",
       per_priority=True, sonic_sai=("EST_PORT_STAT_PFC_{p}_ON2OFF_RX_PKTS",)),
    _m("pfc_tx_pause_transition", "events", "counter", "Pause episodes we imposed on the peer on a priority.",
       per_priority=True, bnxt=("pfc_pri{p}_tx_transitions",)),
    _m("pfc_rx_xon", "frames", "counter", "PFC resume (XON, zero quanta) frames received on a priority.",
       per_priority=True, ice=("rx_priority_{p}_xon.nic",), i40e=("port.rx_priority_{p}_xon",)),
    _m("pfc_tx_xon", "frames", "counter", "PFC resume (XON, zero quanta) frames sent on a priority.",
       per_priority=True, ice=("tx_priority_{p}_xon.nic",), i40e=("port.tx_priority_{p}_xon",)),
    _m("pause_storm_warning_events", "events", "counter",
       "Times the NIC kept sending pauses for a long time.",
       mlx5=("tx_pause_storm_warning_events",)),
    _m("pause_storm_error_events", "events", "counter",
       "Times the NIC pause-storm guard stopped sending pauses.",
       mlx5=("tx_pause_storm_error_events",)),
    # --- link-level pause (802.3x global pause; aPAUSEMACCtrlFrames / dot3*PauseFrames)
    _m("link_rx_pause", "frames", "counter", "Global (802.3x) pause frames received.",
       mlx5=("rx_pause_ctrl_phy",), bnxt=("rx_pause_frames",), ice=("link_xoff_rx.nic",),
       i40e=("port.link_xoff_rx",), sonic_sai=("SAI_PORT_STAT_PAUSE_RX_PKTS",),
       openconfig=("ethernet/state/counters/in-mac-pause-frames",),
       srlinux=("ethernet/statistics/in-mac-pause-frames",), snmp=("dot3InPauseFrames",)),
    _m("link_tx_pause", "frames", "counter", "Global (802.3x) pause frames sent.",
       mlx5=("tx_pause_ctrl_phy",), bnxt=("tx_pause_frames",), ice=("link_xoff_tx.nic",),
       i40e=("port.link_xoff_tx",), sonic_sai=("SAI_PORT_STAT_PAUSE_TX_PKTS",),
       openconfig=("ethernet/state/counters/out-mac-pause-frames",),
       srlinux=("ethernet/statistics/out-mac-pause-frames",), snmp=("dot3OutPauseFrames",)),
    _m("link_rx_pause_duration_us", "us", "counter",
       "Time our transmit was stopped by received global pause.",
       mlx5=("rx_global_pause_duration",)),
    _m("link_tx_pause_duration_us", "us", "counter", "Time our global pause frames kept the peer paused.",
       mlx5=("tx_global_pause_duration",)),
    # --- PFC watchdog (switch; index = queue)
    _m("pfcwd_storm_detected", "events", "counter", "PFC storms (queue stuck paused) detected on a queue.",
       per_priority=True, sonic_sai=("PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED",),
       srlinux=("pfc/statistics/pfc-priority/deadlock-recovery-occurrences",),
       snmp=("cpfcWatchdogIfQueueShutdowns", "aristaPfcWatchdogTxQueueStuckCount")),
    _m("pfcwd_storm_restored", "events", "counter", "PFC storms cleared (queue restored) on a queue.",
       per_priority=True, sonic_sai=("PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED",),
       snmp=("cpfcWatchdogIfQueueRestores", "aristaPfcWatchdogTxQueueRecoveredCount")),
    _m("pfcwd_stormed", "bool", "gauge",
       "1 while the PFC watchdog holds a queue as stormed (SONiC COUNTERS_DB `PFC_WD_STATUS`: `stormed` / "
       "`operational`, written by the watchdog's detection and restoration scripts).",
       per_priority=True, sonic_sai=("PFC_WD_STATUS",)),
    _m("pfcwd_tx_dropped_packets", "packets", "counter", "Egress packets dropped by the PFC watchdog action.",
       per_priority=True, sonic_sai=("PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS",),
       snmp=("cpfcWatchdogIfQueueTotalDropPkts",)),
    _m("pfcwd_rx_dropped_packets", "packets", "counter",
       "Ingress packets dropped by the PFC watchdog action.",
       per_priority=True, sonic_sai=("PFC_WD_QUEUE_STATS_RX_DROPPED_PACKETS",),
       snmp=("cpfcWatchdogIfQueueTotalDropInPkts",)),
    # --- switch egress queues (index = queue)
    _m("queue_tx_bytes", "bytes", "counter", "Bytes sent from an egress queue.", per_priority=True,
       sonic_sai=("SAI_QUEUE_STAT_BYTES",), openconfig=("state/transmit-octets",),
       snmp=("aristaEgressQueueBytes",)),
    _m("queue_tx_packets", "packets", "counter", "Packets sent from an egress queue.", per_priority=True,
       sonic_sai=("SAI_QUEUE_STAT_PACKETS",), openconfig=("state/transmit-pkts",),
       snmp=("aristaEgressQueuePkts",)),
    _m("queue_dropped_packets", "packets", "counter",
       "Packets dropped at an egress queue.", per_priority=True,
       sonic_sai=("SAI_QUEUE_STAT_DROPPED_PACKETS",), openconfig=("state/dropped-pkts",),
       cumulus=("tx-stats/tx-roce-stats/unicast-no-buffer-discard",
                "tx-stats/tx-cnp-stats/unicast-no-buffer-discard", "state/no-buffer-uc-dropped-pkts"),
       snmp=("aristaEgressQueuePktsDropped", "mellanoxQoSTCUnicastNoBufferDiscard")),
    _m("queue_dropped_bytes", "bytes", "counter", "Bytes dropped at an egress queue.", per_priority=True,
       sonic_sai=("SAI_QUEUE_STAT_DROPPED_BYTES",), openconfig=("state/dropped-octets",),
       snmp=("aristaEgressQueueBytesDropped",)),
    # packet trimming (SONiC/SAI, for lossy RDMA transports): a packet a full queue would drop is cut to its
    # headers and sent on (or dropped after all), so the receiver learns of the loss at once
    _m("queue_trimmed_packets", "packets", "counter", "Packets trimmed at a full egress queue.",
       per_priority=True, sonic_sai=("SAI_QUEUE_STAT_TRIM_PACKETS",)),
    _m("queue_trimmed_tx_packets", "packets", "counter", "Trimmed packets sent from an egress queue.",
       per_priority=True, sonic_sai=("SAI_QUEUE_STAT_TX_TRIM_PACKETS",)),
    _m("queue_trimmed_dropped_packets", "packets", "counter", "Trimmed packets dropped after all at a queue.",
       per_priority=True, sonic_sai=("SAI_QUEUE_STAT_DROPPED_TRIM_PACKETS",)),
    _m("trimmed_packets", "packets", "counter", "Packets trimmed on the port, all queues.",
       sonic_sai=("SAI_PORT_STAT_TRIM_PACKETS",)),
    _m("trimmed_tx_packets", "packets", "counter", "Trimmed packets sent on the port.",
       sonic_sai=("SAI_PORT_STAT_TX_TRIM_PACKETS",)),
    _m("trimmed_dropped_packets", "packets", "counter", "Trimmed packets dropped after all on the port.",
       sonic_sai=("SAI_PORT_STAT_DROPPED_TRIM_PACKETS",)),
    _m("queue_watermark_bytes", "bytes", "gauge",
       "Peak egress queue occupancy since the last read (SR Linux: over the last minute).", per_priority=True,
       sonic_sai=("SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",), openconfig=("state/max-queue-len",),
       srlinux=("queue-depth/high-watermark-1",),
       cumulus=("tx-stats/tx-roce-stats/tc-max-usage", "tx-stats/tx-cnp-stats/tc-max-usage",
                "state/shared-buffer/data/max-occupancy-since-last-sample")),
    _m("queue_occupancy_bytes", "bytes", "gauge", "Current egress queue occupancy.", per_priority=True,
       sonic_sai=("SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES",),
       cumulus=("tx-stats/tx-roce-stats/tc-usage", "tx-stats/tx-cnp-stats/tc-usage", "state/instant-queue-len")),
    _m("queue_paused", "bool", "gauge", "1 while an egress queue is held by received PFC.", per_priority=True,
       sonic_sai=("SAI_QUEUE_ATTR_PAUSE_STATUS",)),
    # --- switch ingress priority groups (index = PG / SR Linux pfc-queue) and shared buffer pools
    _m("pg_watermark_bytes", "bytes", "gauge",
       "Peak ingress priority-group shared-buffer use since the last read.", per_priority=True,
       sonic_sai=("SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES",),
       srlinux=("pfc/pfc-queue/peak-pfc-buffer-used",),
       cumulus=("rx-stats/rx-roce-stats/pg-max-usage",
                "input/priority-group/state/shared-buffer/data/max-occupancy-since-last-sample")),
    _m("pg_headroom_watermark_bytes", "bytes", "gauge",
       "Peak ingress priority-group headroom (XOFF room) use since the last read.", per_priority=True,
       sonic_sai=("SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES",)),
    _m("pg_occupancy_bytes", "bytes", "gauge",
       "Current ingress priority-group buffer use.", per_priority=True,
       srlinux=("pfc/pfc-queue/pfc-buffer-used",),
       cumulus=("rx-stats/rx-roce-stats/pg-usage", "input/priority-group/state/shared-buffer/data/instant-occupancy")),
    _m("pg_dropped_packets", "packets", "counter",
       "Packets dropped at an ingress priority group (no buffer).",
       per_priority=True, sonic_sai=("SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS",),
       cumulus=("rx-stats/rx-roce-stats/no-buffer-discard",), snmp=("mellanoxQoSPGNoBufferDiscard",)),
    _m("buffer_pool_watermark_bytes", "bytes", "gauge", "Peak shared buffer pool use since the last read.",
       sonic_sai=("SAI_BUFFER_POOL_STAT_WATERMARK_BYTES",),
       cumulus=("rx-stats/rx-roce-stats/buffer-max-usage", "tx-stats/tx-roce-stats/buffer-max-usage")),
    _m("buffer_pool_occupancy_bytes", "bytes", "gauge", "Current shared buffer pool use.",
       cumulus=("rx-stats/rx-roce-stats/buffer-usage", "tx-stats/tx-roce-stats/buffer-usage")),
    # --- ECN marking and CNPs seen by the switch
    _m("queue_ecn_marked_packets", "packets", "counter", "Packets CE-marked (WRED/ECN) at an egress queue.",
       per_priority=True, sonic_sai=("SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",),
       openconfig=("state/ecn-marked-pkts",)),
    _m("tx_ecn_marked_packets", "packets", "counter",
       "Packets CE-marked by the switch on egress, whole port.",
       sonic_sai=("SAI_PORT_STAT_ECN_MARKED_PACKETS",),
       cumulus=("tx-stats/tx-ecn-stats/ecn-marked-packets", "state/counters/ecn-marked-pkts")),
    _m("tx_cnp_packets", "packets", "counter", "CNPs forwarded out of a switch port (CNP traffic class).",
       cumulus=("tx-stats/tx-cnp-stats/cnp-packets",)),
    # --- RoCE congestion control (DCQCN) on the NIC: NP = receiver, RP = sender
    _m("rx_prio_ecn_marked", "packets", "counter",
       "Packets of one priority CE-marked by the NIC (host congestion).",
       per_priority=True, mlx5=("rx_prio{p}_marked",)),
    _m("ecn_marked_roce_packets", "packets", "counter",
       "RoCE packets received with CE set (NP sees congestion).",
       mlx5_rdma=("np_ecn_marked_roce_packets", "cc_rx_ce_pkts"),
       bnxt_rdma=("rx_ecn_marked_pkts", "np_ecn_marked_roce_packets")),
    _m("cnp_sent", "packets", "counter", "CNPs sent by the notification point (receiver).",
       mlx5_rdma=("np_cnp_sent", "cc_tx_cnp_pkts"), bnxt_rdma=("tx_cnp_pkts", "np_cnp_pkts", "np_cnp_sent")),
    # bnxt_re counts every CNP its port receives (the ext stats' rx_cnp: no handled/ignored split). Linux 6.18
    # renamed it rp_cnp_handled after mlx5, and Broadcom's own driver calls it so too; it is still all received.
    _m("cnp_received", "packets", "counter",
       "CNPs the reaction point received, acted on or not (read as handled where the NIC does not split them).",
       mlx5_rdma=("cc_rx_cnp_pkts",), bnxt_rdma=("rx_cnp_pkts", "rp_cnp_handled")),
    _m("cnp_handled", "packets", "counter", "CNPs the reaction point acted on (rate reduced).",
       mlx5_rdma=("rp_cnp_handled",)),
    _m("cnp_ignored", "packets", "counter", "CNPs received but ignored by the reaction point.",
       mlx5_rdma=("rp_cnp_ignored",), bnxt_rdma=("rp_cnp_ignored",)),
    # --- RoCE transport health (hw_counters)
    _m("out_of_sequence", "packets", "counter", "Out-of-sequence packets received (loss or reordering).",
       mlx5_rdma=("out_of_sequence",), bnxt_rdma=("oos_drop_count", "out_of_sequence")),
    _m("packet_seq_err", "events", "counter", "NAK-sequence-error packets received (go-back-N retransmit).",
       mlx5_rdma=("packet_seq_err",), bnxt_rdma=("seq_err_naks_rcvd", "packet_seq_err")),
    _m("implied_nak_seq_err", "events", "counter",
       "Implied NAKs: ACK/read response PSN beyond the expected one.",
       mlx5_rdma=("implied_nak_seq_err",), bnxt_rdma=("missing_resp", "implied_nak_seq_err")),
    _m("local_ack_timeout_err", "events", "counter",
       "Requester ACK timer expiries (retransmit after timeout).",
       mlx5_rdma=("local_ack_timeout_err",), bnxt_rdma=("to_retransmits", "local_ack_timeout_err")),
    _m("duplicate_request", "packets", "counter", "Duplicate requests received (the sender retransmitted).",
       mlx5_rdma=("duplicate_request",), bnxt_rdma=("dup_req", "duplicate_request")),
    _m("rnr_nak_retry_err", "events", "counter", "RNR NAKs received (receiver had no receive WQE posted).",
       mlx5_rdma=("rnr_nak_retry_err",), bnxt_rdma=("rnr_naks_rcvd", "rnr_nak_retry_err")),
    _m("roce_adp_retrans", "events", "counter", "Adaptive retransmissions of RoCE traffic.",
       mlx5_rdma=("roce_adp_retrans",), bnxt_rdma=("roce_adp_retrans",)),
    _m("roce_adp_retrans_to", "events", "counter", "Adaptive-retransmission timeouts of RoCE traffic.",
       mlx5_rdma=("roce_adp_retrans_to",), bnxt_rdma=("roce_adp_retrans_to",)),
    _m("roce_slow_restart", "events", "counter", "Times RoCE slow restart was used.",
       mlx5_rdma=("roce_slow_restart",), bnxt_rdma=("roce_slow_restart",)),
    _m("roce_slow_restart_cnps", "packets", "counter", "CNPs generated by RoCE slow restart.",
       mlx5_rdma=("roce_slow_restart_cnps",), bnxt_rdma=("roce_slow_restart_cnps",)),
    _m("roce_slow_restart_trans", "events", "counter", "Times a QP entered the RoCE slow-restart state.",
       mlx5_rdma=("roce_slow_restart_trans",), bnxt_rdma=("roce_slow_restart_trans",)),
    _m("req_cqe_error", "events", "counter",
       "Requester completions with error (the QP usually goes to error).",
       mlx5_rdma=("req_cqe_error",), bnxt_rdma=("req_cqe_error",)),
    _m("resp_cqe_error", "events", "counter", "Responder completions with error.",
       mlx5_rdma=("resp_cqe_error",), bnxt_rdma=("resp_cqe_error",)),
    _m("rx_read_requests", "requests", "counter", "RDMA READ requests received (this side is the responder).",
       mlx5_rdma=("rx_read_requests",), bnxt_rdma=("rx_read_req", "rx_read_requests")),
    _m("rx_write_requests", "requests", "counter", "RDMA WRITE requests received.",
       mlx5_rdma=("rx_write_requests",), bnxt_rdma=("rx_write_req", "rx_write_requests")),
    _m("rx_atomic_requests", "requests", "counter", "RDMA atomic requests received.",
       mlx5_rdma=("rx_atomic_requests",), bnxt_rdma=("rx_atomic_req", "rx_atomic_requests")),
    _m("rdma_out_of_buffer", "packets", "counter",
       "RDMA packets dropped: no receive WQE posted on the QP's RQ.",
       mlx5_rdma=("out_of_buffer",), bnxt_rdma=("rx_out_of_buffer", "out_of_buffer")),
    _m("rx_icrc_errors", "packets", "counter", "RoCE packets received with a bad ICRC.",
       mlx5_rdma=("rx_icrc_encapsulated",), bnxt_rdma=("rx_icrc_encapsulated",)),
    # --- RDMA (RoCE) traffic volume. bnxt_re's rx_/tx_bytes and _pkts count the RoCE function's unicast with its
    # CNPs (or, in Broadcom's driver, a VF's whole traffic): left raw; its `*_roce_only_*` are the RoCE data.
    _m("rdma_rx_bytes", "bytes", "counter",
       "RDMA/RoCE bytes received (IB port_rcv_data counts 4-byte words: scaled by 4).",
       scales={"port_rcv_data": 4.0}, mlx5=("rx_vport_rdma_unicast_bytes",), ib_port=("port_rcv_data",),
       bnxt_rdma=("rx_roce_only_bytes",), cumulus=("rx-stats/rx-roce-stats/roce-bytes",)),
    _m("rdma_tx_bytes", "bytes", "counter",
       "RDMA/RoCE bytes sent (IB port_xmit_data counts 4-byte words: scaled by 4).",
       scales={"port_xmit_data": 4.0}, mlx5=("tx_vport_rdma_unicast_bytes",), ib_port=("port_xmit_data",),
       bnxt_rdma=("tx_roce_only_bytes",), cumulus=("tx-stats/tx-roce-stats/roce-bytes",)),
    _m("rdma_rx_packets", "packets", "counter", "RDMA/RoCE packets received.",
       mlx5=("rx_vport_rdma_unicast_packets",), ib_port=("port_rcv_packets",), bnxt_rdma=("rx_roce_only_pkts",),
       cumulus=("rx-stats/rx-roce-stats/roce-packets",)),
    _m("rdma_tx_packets", "packets", "counter", "RDMA/RoCE packets sent.",
       mlx5=("tx_vport_rdma_unicast_packets",), ib_port=("port_xmit_packets",), bnxt_rdma=("tx_roce_only_pkts",),
       cumulus=("tx-stats/tx-roce-stats/roce-packets",)),
    _m("port_xmit_wait", "ticks", "counter",
       "Ticks the port had data to send but could not (paused or no credit).",
       ib_port=("port_xmit_wait",)),
    # --- host kernel (eBPF, rocescope.collectors.ebpf.collector): no vendor names; the dimension is in `port`
    _m("host_drops", "packets", "counter",
       "Packets the host kernel dropped (tracepoint skb:kfree_skb); port = `reason:<skb_drop_reason>`."),
    _m("tcp_retransmits", "segments", "counter",
       "TCP segments the host retransmitted (tracepoint tcp:tcp_retransmit_skb); port = `peer:<address>`."),
    _m("roce_rx_qp_packets", "packets", "counter",
       "RoCEv2 packets the kernel received (XDP) by dest QP, ECN and BTH opcode; "
       "port = `<netdev>/qp<n>/ecn<e>/op<o>`."),
    # --- NCCL Inspector about itself
    _m("nccl_records_dropped", "records", "gauge",
       "Collective records Inspector's ring buffers dropped in the dump interval ending at the sample (its "
       "`dump_stats` `coll_dropped_since_last_dump` + `p2p_dropped_since_last_dump`, v4.3+): the job's records "
       "are incomplete, so GPU-seconds measured from them are a lower bound; port = `nccl:<pid>`."),
    # --- link state and PHY
    _m("port_speed_bps", "bps", "gauge",
       "Port speed; ifHighSpeed and SONiC's speed are in Mb/s (scaled by 1e6), OpenConfig identities "
       "(SPEED_400GB) and SR Linux enums (400G) are read as their bit rate; an unknown speed gives no row.",
       scales={"ifHighSpeed": 1e6, "PORT_TABLE/speed": 1e6, "PORT/speed": 1e6}, zero_is_unknown=True,
       openconfig=("ethernet/state/negotiated-port-speed",),
       srlinux=("ethernet/port-speed",), sonic_db=("PORT_TABLE/speed", "PORT/speed"), snmp=("ifHighSpeed",)),
    _m("port_speed_configured_bps", "bps", "gauge",
       "Port speed as configured (OpenConfig `state/port-speed`), which a link may not have negotiated (a 400G "
       "port come up at 200G); analysis uses it only where no running speed is reported for either end.",
       zero_is_unknown=True, openconfig=("ethernet/state/port-speed",)),
    _m("oper_up", "bool", "gauge", "1 when the link is operationally up (collector maps enum states to 0/1).",
       openconfig=("state/oper-status",), srlinux=("oper-state",), sonic_db=("PORT_TABLE/oper_status",),
       snmp=("ifOperStatus",)),
    _m("admin_up", "bool", "gauge",
       "1 when the port is administratively enabled: a port an operator shut is down by intent, not a flap "
       "(IF-MIB ifAdminStatus up(1)/down(2)/testing(3); OpenConfig UP/DOWN/TESTING; SR Linux enable/disable).",
       openconfig=("state/admin-status",), srlinux=("admin-state",),
       sonic_db=("PORT_TABLE/admin_status",), snmp=("ifAdminStatus",)),
    _m("link_down_events", "events", "counter", "Transitions of the link to down (flaps).",
       mlx5=("link_down_events_phy",), bnxt=("link_down_events",), ib_port=("link_downed",)),
    _m("carrier_transitions", "events", "counter", "Link up/down transitions, both directions.",
       openconfig=("state/counters/carrier-transitions",), srlinux=("statistics/carrier-transitions",)),
    _m("fec_corrected_blocks", "blocks", "counter", "FEC codewords (blocks) received with corrected errors.",
       bnxt=("rx_fec_corrected_blocks",), sonic_sai=("SAI_PORT_STAT_IF_IN_FEC_CORRECTABLE_FRAMES",),
       openconfig=("ethernet/state/counters/fec-corrected-blocks",)),
    _m("fec_uncorrectable_blocks", "blocks", "counter", "FEC codewords (blocks) that could not be corrected.",
       bnxt=("rx_fec_uncorrectable_blocks",), sonic_sai=("SAI_PORT_STAT_IF_IN_FEC_NOT_CORRECTABLE_FRAMES",),
       openconfig=("ethernet/state/counters/fec-uncorrectable-blocks",)),
    _m("optics_rx_power_dbm", "dBm", "gauge", "Received optical power of one transceiver lane.",
       srlinux=("transceiver/channel/input-power/latest-value",)),
)
# fmt: on

METRICS_BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}
PRIORITIES: tuple[int, ...] = tuple(range(8))


def _expand(raw: str) -> list[tuple[str, int]]:
    """`raw` with `{p}` replaced by each priority, or `raw` itself with priority -1."""
    if "{p}" in raw:
        return [(raw.replace("{p}", str(p)), p) for p in PRIORITIES]
    return [(raw, -1)]


@cache
def _lookup_table(vendor: str) -> dict[str, tuple[str, int, float]]:
    """Expand every `{p}` template once, so resolving a raw name is one dict lookup."""
    table: dict[str, tuple[str, int, float]] = {}
    for metric in METRICS:
        for raw in metric.vendor_names.get(vendor, ()):
            factor = metric.scales.get(raw, 1.0)
            for name, p in _expand(raw):
                table[name] = (metric.name, p, factor)
    return table


def resolve(vendor: str, raw_name: str) -> tuple[str, int] | None:
    """Map a vendor's counter name to (canonical metric, priority or -1); None if unknown."""
    hit = _lookup_table(vendor).get(raw_name)
    return None if hit is None else (hit[0], hit[1])


def scale(vendor: str, raw_name: str) -> float:
    """Factor that turns the raw value into the metric's unit (1.0 unless the catalog says otherwise)."""
    hit = _lookup_table(vendor).get(raw_name)
    return 1.0 if hit is None else hit[2]


def vendor_names(vendor: str) -> dict[str, tuple[str, int]]:
    """Every raw name of `vendor` with its (metric, priority), templates expanded."""
    return {raw: (metric, p) for raw, (metric, p, _) in _lookup_table(vendor).items()}


def counter_metrics() -> tuple[str, ...]:
    """Names of the metrics whose rates are meaningful (monotonic counters)."""
    return tuple(m.name for m in METRICS if m.kind == "counter")


#: The highest per-second increase a counter of each unit can show on one port (800 GbE with margin:
#: 1e11 bytes/s, ~1.2e9 minimum-size frames/s; pause time at most 1 s per second, with room for jitter
#: between the device's and the collector's clocks). A larger increase is a glitch (a bogus sample, a
#: counter read as 0 once), not traffic.
MAX_RATE_PER_UNIT: Mapping[str, float] = {"bytes": 2.5e11, "us": 2.0e6}
MAX_RATE_DEFAULT = 2.5e9

#: Raw names of counters that are 32 bits wide, so a drop from the top of 2^32 to its bottom is a wrap. SNMP
#: objects by their MIB: IF-MIB (RFC 2863) ifInOctets, ifOutOctets, ifIn/OutUcastPkts, ifInDiscards,
#: ifOutDiscards, ifInErrors, ifOutErrors are Counter32 (the ifHC* counters are Counter64); EtherLike-MIB
#: (RFC 3635) dot3In/OutPauseFrames are Counter32; IEEE8021-PFC-MIB's ieee8021PfcRequests/Indications are
#: Counter32. gNMI, ethtool and sysfs counters are 64-bit: a drop there is a reset or a glitch, never a wrap.
COUNTER32_RAW_NAMES = frozenset(
    {"ifInOctets", "ifOutOctets", "ifInUcastPkts", "ifOutUcastPkts", "ifInDiscards", "ifOutDiscards",
     "ifInErrors", "ifOutErrors", "dot3InPauseFrames", "dot3OutPauseFrames", "ieee8021PfcRequests",
     "ieee8021PfcIndications"}
)  # fmt: skip


def max_rate(metric: str) -> float:
    """The plausible ceiling of `metric`'s per-second rate (MAX_RATE_PER_UNIT by its unit)."""
    m = METRICS_BY_NAME.get(metric)
    return MAX_RATE_DEFAULT if m is None else MAX_RATE_PER_UNIT.get(m.unit, MAX_RATE_DEFAULT)
