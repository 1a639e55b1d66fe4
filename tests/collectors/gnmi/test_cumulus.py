"""Cumulus Linux 5.x over gNMI: every PFC, queue, priority-group and watermark path NVIDIA documents for its gNMI
server lands on its canonical metric, with the priority or queue from the list key.

The paths are the documentation's own (tests/fixtures/cumulus: the "Metrics" tables of the Cumulus Linux 5.14
and 5.17 gNMI Streaming pages, with their .source.txt); each case below checks that its path is in those tables
before resolving it. Cumulus publishes OpenConfig's interface and queue leaves (vendor `openconfig`) and NVIDIA's
own beside them (vendor `cumulus`: switch-priority pause counters and durations, priority-group buffer use, the
instant queue depth, the interface's ECN count).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from rocescope.collectors.gnmi.decode import GnmiDecoder, resolve_elems
from rocescope.collectors.gnmi.paths import parse_path, path_elems
from rocescope.collectors.gnmi.proto import pb
from rocescope.pipeline.batch import Batch

DOCS = Path(__file__).resolve().parents[2] / "fixtures" / "cumulus"
V514 = DOCS / "cumulus_linux_5.14_gnmi_metrics_qos.md"
V517 = DOCS / "cumulus_linux_5.17_gnmi_metrics_qos_interface.md"
TS = 1_772_366_400_000_000_000
#: The list keys of the documented paths, given values as a Cumulus switch would (breakout port swp1s0, RoCE on
#: switch priority 3, priority group 3, traffic class 3).
KEYS = {
    "interface[name]": "interface[name=swp1s0]",
    "interface[interface-id]": "interface[interface-id=swp1s0]",
    "switch-priority[priority]": "switch-priority[priority=3]",
    "priority-group[pg-id]": "priority-group[pg-id=3]",
    "priority-group[priority_group]": "priority-group[priority_group=3]",
    "queue[name]": "queue[name=3]",
    "pool[id]": "pool[id=0]",
    "headroom-buffer[buffer-type]": "headroom-buffer[buffer-type=primary]",
}


def documented(doc: Path) -> set[str]:
    """The paths of a metrics table, as the page writes them."""
    return set(re.findall(r"^\|\s*`([^`]+)`", doc.read_text(), re.MULTILINE))


def keyed(path: str) -> str:
    for template, value in KEYS.items():
        path = path.replace(template, value)
    return path


# (documented path, the page it is on, expected (port, priority, metric); metric None: kept raw)
CASES: list[tuple[str, Path, tuple[str, int, str | None]]] = [
    # PFC pause frames and durations per switch priority (NVIDIA paths)
    ("/qos/interfaces/interface[interface-id]/switch-priority[priority]/state/counters/in-pause-pkts", V517,
     ("swp1s0", 3, "pfc_rx_pause")),
    ("/qos/interfaces/interface[interface-id]/switch-priority[priority]/state/counters/out-pause-pkts", V517,
     ("swp1s0", 3, "pfc_tx_pause")),
    ("/qos/interfaces/interface[interface-id]/switch-priority[priority]/state/in-pause-duration", V517,
     ("swp1s0", 3, "pfc_rx_pause_duration_us")),
    ("/qos/interfaces/interface[interface-id]/switch-priority[priority]/state/out-pause-duration", V517,
     ("swp1s0", 3, "pfc_tx_pause_duration_us")),
    ("/qos/interfaces/interface[interface-id]/switch-priority[priority]/state/counters/in-pause-pkts", V514,
     ("swp1s0", 3, "pfc_rx_pause")),
    ("/qos/interfaces/interface[interface-id]/switch-priority[priority]/state/counters/in-discards", V517,
     ("swp1s0", -1, None)),  # any drop reason of the priority: no canonical meaning
    # egress queues (OpenConfig leaves, and NVIDIA's)
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/transmit-octets", V517,
     ("swp1s0", 3, "queue_tx_bytes")),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/transmit-pkts", V517,
     ("swp1s0", 3, "queue_tx_packets")),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/ecn-marked-pkts", V517,
     ("swp1s0", 3, "queue_ecn_marked_packets")),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/no-buffer-uc-dropped-pkts", V517,
     ("swp1s0", 3, "queue_dropped_packets")),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/instant-queue-len", V517,
     ("swp1s0", 3, "queue_occupancy_bytes")),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/shared-buffer/data/"
     "max-occupancy-since-last-sample", V517, ("swp1s0", 3, "queue_watermark_bytes")),
    ("/qos/interfaces/interface[name]/output/queues/queue[name]/state/max-queue-len", V517,
     ("swp1s0", 3, "queue_watermark_bytes")),
    # peaks since a clear, cells, WRED drops beside the no-buffer ones: kept raw
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/shared-buffer/data/max-occupancy",
     V517, ("swp1s0", -1, None)),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/max-queue-len-cells", V514,
     ("swp1s0", -1, None)),
    ("/qos/interfaces/interface[interface-id]/output/queues/queue[name]/state/wred-dropped-pkts", V517,
     ("swp1s0", -1, None)),
    # ingress priority groups
    ("/qos/interfaces/interface[interface-id]/input/priority-group[pg-id]/state/shared-buffer/data/"
     "max-occupancy-since-last-sample", V517, ("swp1s0", 3, "pg_watermark_bytes")),
    ("/qos/interfaces/interface[interface-id]/input/priority-group[pg-id]/state/shared-buffer/data/"
     "instant-occupancy", V517, ("swp1s0", 3, "pg_occupancy_bytes")),
    ("/qos/interfaces/interface[interface-id]/input/priority-group[pg-id]/state/shared-buffer/data/max-occupancy",
     V517, ("swp1s0", -1, None)),
    ("/qos/interfaces/interface[interface-id]/input/priority-group[pg-id]/state/counters/in-pkts", V517,
     ("swp1s0", -1, None)),
    ("/qos/interfaces/interface[interface-id]/input/headroom-buffer[buffer-type]/priority-group[pg-id]/state/"
     "max-occupancy-since-last-sample", V517, ("swp1s0", -1, None)),  # two buffer types per PG: not one series
    # the interface: OpenConfig leaves and NVIDIA's ECN count
    ("/interfaces/interface[name]/state/counters/ecn-marked-pkts", V517, ("swp1s0", -1, "tx_ecn_marked_packets")),
    ("/interfaces/interface[name]/state/counters/out-octets", V517, ("swp1s0", -1, "tx_bytes")),
    ("/interfaces/interface[name]/state/counters/in-discards", V517, ("swp1s0", -1, "rx_discards")),
    ("/interfaces/interface[name]/ethernet/state/counters/in-mac-pause-frames", V517, ("swp1s0", -1, "link_rx_pause")),
    ("/interfaces/interface[name]/ethernet/state/counters/out-mac-pause-frames", V517,
     ("swp1s0", -1, "link_tx_pause")),
    ("/interfaces/interface[name]/state/oper-status", V517, ("swp1s0", -1, "oper_up")),
    ("/interfaces/interface[name]/ethernet/state/negotiated-port-speed", V517, ("swp1s0", -1, "port_speed_bps")),
    ("/interfaces/interface[name]/state/counters/tx-wait", V517, ("swp1s0", -1, None)),  # byte times, not IB ticks
]  # fmt: skip


@pytest.mark.parametrize(("path", "doc", "expected"), CASES, ids=[f"{c[1].name[16:20]}:{c[0]}" for c in CASES])
def test_documented_cumulus_paths_resolve(path: str, doc: Path, expected: tuple[str, int, str | None]) -> None:
    assert path in documented(doc), f"{path} is not in {doc.name}"
    r = resolve_elems(path_elems(parse_path(keyed(path))))
    assert (r.port, r.priority, r.metric) == expected


def test_the_pause_counters_as_the_514_note_spells_them_resolve_too() -> None:
    """The 5.14 page's note moves the pause counters' container to `state/switch-priority[priority]/counters/`."""
    note = "/qos/interfaces/interface[interface-id]/state/switch-priority[priority]/counters/"
    assert note in V514.read_text()
    for leaf, metric in (("in-pause-pkts", "pfc_rx_pause"), ("out-pause-pkts", "pfc_tx_pause")):
        r = resolve_elems(path_elems(parse_path(keyed(note + leaf))))
        raw = f"state/switch-priority/counters/{leaf}"
        assert (r.port, r.priority, r.metric, r.raw_name) == ("swp1s0", 3, metric, raw)


def frame(batch: Batch | None) -> pl.DataFrame:
    assert batch is not None
    df = pl.from_arrow(batch.data)
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("port", "metric", "raw_name").cast(pl.String))


def test_a_cumulus_notification_lands_pfc_queue_and_watermark_rows() -> None:
    """What `gnmic subscribe --prefix /qos/interfaces/interface[interface-id=swp1s0]` receives, decoded whole: each
    value on its port, priority and metric, the path below the interface kept as the raw name."""
    n = pb.Notification(timestamp=TS, prefix=parse_path("/qos/interfaces/interface[interface-id=swp1s0]"))
    sent = {
        "switch-priority[priority=3]/state/counters/in-pause-pkts": 1_204,
        "switch-priority[priority=3]/state/in-pause-duration": 88_415,
        "switch-priority[priority=3]/state/counters/out-pause-pkts": 37,
        "switch-priority[priority=3]/state/out-pause-duration": 2_210,
        "output/queues/queue[name=3]/state/ecn-marked-pkts": 693_777,
        "output/queues/queue[name=3]/state/no-buffer-uc-dropped-pkts": 0,
        "output/queues/queue[name=3]/state/instant-queue-len": 155_648,
        "output/queues/queue[name=3]/state/shared-buffer/data/max-occupancy-since-last-sample": 4_718_592,
        "input/priority-group[pg-id=3]/state/shared-buffer/data/max-occupancy-since-last-sample": 2_359_296,
        "input/priority-group[pg-id=3]/state/shared-buffer/data/max-occupancy": 9_437_184,
    }
    for path, value in sent.items():
        u = n.update.add()
        u.path.CopyFrom(parse_path(path))
        u.val.uint_val = value
    dec = GnmiDecoder("leaf-r0-01")
    dec.feed(pb.SubscribeResponse(update=n).SerializeToString())
    df = frame(dec.flush())
    columns = df.select("port", "priority", "metric", "value", "raw_name")
    got = {(p, q, m): (v, r) for p, q, m, v, r in columns.iter_rows()}
    assert got == {
        ("swp1s0", 3, "pfc_rx_pause"): (1_204, "switch-priority/state/counters/in-pause-pkts"),
        ("swp1s0", 3, "pfc_rx_pause_duration_us"): (88_415, "switch-priority/state/in-pause-duration"),
        ("swp1s0", 3, "pfc_tx_pause"): (37, "switch-priority/state/counters/out-pause-pkts"),
        ("swp1s0", 3, "pfc_tx_pause_duration_us"): (2_210, "switch-priority/state/out-pause-duration"),
        ("swp1s0", 3, "queue_ecn_marked_packets"): (693_777, "state/ecn-marked-pkts"),
        ("swp1s0", 3, "queue_dropped_packets"): (0, "state/no-buffer-uc-dropped-pkts"),
        ("swp1s0", 3, "queue_occupancy_bytes"): (155_648, "state/instant-queue-len"),
        ("swp1s0", 3, "queue_watermark_bytes"): (
            4_718_592, "state/shared-buffer/data/max-occupancy-since-last-sample"),
        ("swp1s0", 3, "pg_watermark_bytes"): (
            2_359_296, "input/priority-group/state/shared-buffer/data/max-occupancy-since-last-sample"),
        # a peak since the last watermark clear, not since the last read: kept raw
        ("swp1s0", -1, "raw:input/priority-group/state/shared-buffer/data/max-occupancy"): (
            9_437_184, "input/priority-group/state/shared-buffer/data/max-occupancy"),
    }  # fmt: skip
    assert dec.stats.unknown == 1
