"""The catalog against real NIC output: `ethtool -S` of mlx5, bnxt_en, ice and i40e; RDMA sysfs counters and
`rdma statistic`."""

from __future__ import annotations

import pytest

from rocescope.catalog import METRICS_BY_NAME, resolve, scale

from real_samples import (
    ETHTOOL,
    NIC,
    RDMA,
    mapped_and_unmapped,
    parse_ethtool,
    parse_rdma_statistic,
    parse_sysfs,
    report_unmapped,
)

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
# (3) bnxt_re hw_counters: the names of each driver generation (trees built from the driver sources)

#: canonical metric -> its bnxt_re name in Linux 6.6-6.17, in 6.18, in Broadcom's own driver (None: absent there).
BNXT_RE: dict[str, tuple[str | None, str | None, str | None]] = {
    "cnp_sent": ("tx_cnp_pkts", "np_cnp_pkts", "np_cnp_sent"),
    "cnp_received": ("rx_cnp_pkts", "rp_cnp_handled", "rp_cnp_handled"),
    "cnp_ignored": (None, None, "rp_cnp_ignored"),
    "ecn_marked_roce_packets": ("rx_ecn_marked_pkts", "np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets"),
    "out_of_sequence": ("oos_drop_count", "out_of_sequence", "out_of_sequence"),
    "packet_seq_err": ("seq_err_naks_rcvd", "packet_seq_err", "packet_seq_err"),
    "local_ack_timeout_err": ("to_retransmits", "local_ack_timeout_err", "local_ack_timeout_err"),
    "rnr_nak_retry_err": ("rnr_naks_rcvd", "rnr_nak_retry_err", "rnr_nak_retry_err"),
    "implied_nak_seq_err": ("missing_resp", "implied_nak_seq_err", "implied_nak_seq_err"),
    "duplicate_request": ("dup_req", "duplicate_request", "duplicate_request"),
    "rdma_out_of_buffer": ("rx_out_of_buffer", "out_of_buffer", "out_of_buffer"),
    "rx_read_requests": ("rx_read_req", "rx_read_requests", "rx_read_requests"),
    "rx_write_requests": ("rx_write_req", "rx_write_requests", "rx_write_requests"),
    "rx_atomic_requests": ("rx_atomic_req", "rx_atomic_requests", "rx_atomic_requests"),
    "req_cqe_error": (None, "req_cqe_error", "req_cqe_error"),
    "resp_cqe_error": (None, "resp_cqe_error", "resp_cqe_error"),
    "rdma_rx_bytes": ("rx_roce_only_bytes", "rx_roce_only_bytes", None),
    "rdma_tx_bytes": ("tx_roce_only_bytes", "tx_roce_only_bytes", None),
    "rdma_rx_packets": ("rx_roce_only_pkts", "rx_roce_only_pkts", None),
    "rdma_tx_packets": ("tx_roce_only_pkts", "tx_roce_only_pkts", None),
    "roce_adp_retrans": (None, None, "roce_adp_retrans"),
    "rx_icrc_errors": (None, None, "rx_icrc_encapsulated"),
}
BNXT_RE_FILES = ("bnxt_re0_sysfs_linux6.17.txt", "bnxt_re0_sysfs_linux6.18.txt", "bnxt_re0_sysfs_broadcom_driver.txt")


@pytest.mark.parametrize("generation", range(3), ids=["linux-6.6-6.17", "linux-6.18", "broadcom-driver"])
def test_bnxt_re_hw_counters_of_each_generation_resolve(generation: int) -> None:
    names = set(parse_sysfs(NIC / BNXT_RE_FILES[generation])["hw_counters"])
    for metric, spellings in BNXT_RE.items():
        raw = spellings[generation]
        if raw is not None:
            assert raw in names, f"{raw} is not a hw_counters file of {BNXT_RE_FILES[generation]}"
            assert resolve("bnxt_rdma", raw) == (metric, -1), raw
    mapped, unmapped = mapped_and_unmapped("bnxt_rdma", names)
    report_unmapped(BNXT_RE_FILES[generation], unmapped)
    assert {resolve("bnxt_rdma", n)[0] for n in mapped if resolve("bnxt_rdma", n)} >= {
        "cnp_sent", "cnp_received", "ecn_marked_roce_packets", "out_of_sequence", "packet_seq_err"
    }  # fmt: skip


def test_bnxt_re_cnp_count_is_what_was_received_whatever_its_name() -> None:
    """bnxt_re has no handled/ignored split: its `rx_cnp_pkts`, renamed `rp_cnp_handled` in 6.18, is every CNP
    received, so it never lands as mlx5's `cnp_handled` (what a reaction point acted on)."""
    assert resolve("bnxt_rdma", "rp_cnp_handled") == ("cnp_received", -1)
    assert resolve("mlx5_rdma", "rp_cnp_handled") == ("cnp_handled", -1)
    assert resolve("bnxt_rdma", "rx_cnp_pkts") == ("cnp_received", -1)
    # mlx5's names are not bnxt_re's: rx_cnp_pkts means nothing to mlx5
    assert resolve("mlx5_rdma", "rx_cnp_pkts") is None
    assert "received" in METRICS_BY_NAME["cnp_received"].description


def test_bnxt_re_function_totals_stay_raw() -> None:
    """rx_bytes/tx_bytes/rx_pkts/tx_pkts of bnxt_re count the RoCE function's traffic with its CNPs: the RoCE data
    volume is `*_roce_only_*`, so the totals are not mapped (they would be a second rdma_rx_bytes series)."""
    for raw in ("rx_bytes", "tx_bytes", "rx_pkts", "tx_pkts"):
        assert resolve("bnxt_rdma", raw) is None
