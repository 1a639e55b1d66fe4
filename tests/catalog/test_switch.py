"""The catalog against real switch output: SONiC COUNTERS_DB and port tables, Cumulus RoCE counters,
OpenConfig and SR Linux paths, SNMP objects, port speeds from every source."""

from __future__ import annotations

from rocescope.catalog import METRICS_BY_NAME, VENDORS, resolve, scale, vendor_names

from real_samples import (
    SNMP,
    SWITCH,
    json_fields,
    load_json,
    mapped_and_unmapped,
    mib_objects,
    openconfig_ethernet_state,
    parse_cumulus_counters,
    real_names,
    report_unmapped,
    snmprec_objects,
    sonic_port_fields,
    srlinux_ethernet,
)

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


def test_port_speed_names_resolve_from_every_source() -> None:
    """Port speed from every source the real data shows: OpenConfig and SR Linux YANG leaves, SONiC's
    APPL_DB/STATE_DB PORT_TABLE and CONFIG_DB PORT `speed` (Mb/s, like ifHighSpeed), NIC sysfs (collector)."""
    oc, srl, sonic = openconfig_ethernet_state(), srlinux_ethernet(), sonic_port_fields()
    assert "ethernet/state/port-speed" in oc  # the configured speed, which a link may not have negotiated
    assert resolve("openconfig", "ethernet/state/port-speed") == ("port_speed_configured_bps", -1)
    for vendor, raw, names, factor in (
        ("openconfig", "ethernet/state/negotiated-port-speed", oc, 1.0),
        ("srlinux", "ethernet/port-speed", srl, 1.0),
        ("sonic_db", "PORT_TABLE/speed", sonic, 1e6),
        ("sonic_db", "PORT/speed", sonic, 1e6),
        ("snmp", "ifHighSpeed", {"ifHighSpeed"}, 1e6),
    ):
        assert raw in names, raw
        assert resolve(vendor, raw) == ("port_speed_bps", -1), raw
        assert scale(vendor, raw) == factor, raw
    assert resolve("sonic_db", "PORT_TABLE/oper_status") == ("oper_up", -1)
    assert "PORT_TABLE/oper_status" in sonic
    # configuration, not speed: the advertised/supported lists stay unmapped
    assert "PORT_TABLE/supported_speeds" in sonic and resolve("sonic_db", "PORT_TABLE/supported_speeds") is None
    assert resolve("openconfig", "ethernet/config/port-speed") is None  # intent, not state
