"""NCCL Inspector's Prometheus textfile (`nccl_inspector_metrics_<GPU UUID>.prom`) -> `collectives` rows.

Two generations of NVIDIA/nccl `plugins/profiler/inspector/inspector_prom.cc` are read:

* 2.29: one series set per completed collective (the last one of each communicator per dump):
  `nccl_algorithm_bandwidth_gbs`, `nccl_bus_bandwidth_gbs`, `nccl_collective_exec_time_microseconds` with
  `comm_id, hostname, rank, slurm_job, slurm_job_id, nranks, n_nodes, gpu_device_id, collective, coll_sn,
  timestamp` (ISO, seconds) and `message_size` (`2.00GB`). Rows of source `inspector_prom`.
* 2.30+: per interval, one set per GPU, communicator name, collective, message-size bucket and algorithm:
  `nccl_bus_bandwidth_gbs` (geometric mean) and `nccl_collective_exec_time_microseconds` (mean), P2P as
  `nccl_p2p_*` with `p2p_operation`; labels `version, slurm_job_id, node, gpu, comm_name, n_nodes, nranks,
  collective, message_size` (`4-5GB`: the bucket's lower bound is taken) and `algo_proto`. No time and no
  rank: rows of source `inspector_prom_agg`, dated by the caller (the file's mtime), rank and sequence -1.

The lines of one operation share their labels and end with the execution time (every generation writes
it last), so a set is complete at that line; an unfinished set at the end of the text is left unread
unless `final`. Other metrics (node_exporter's own, a newer plugin's extras) are counted as unknown.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field

import numpy as np

from rocescope.collectors.nccl.parse import STREAM, Parsed, collectives_table
from rocescope.pipeline.batch import conform

__all__ = ["METRICS", "Rows", "message_bytes", "parse_prom_text", "row"]

_SAMPLE = re.compile(rb"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*$")
_LABEL = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)(?:-\d+(?:\.\d+)?)?(B|KB|MB|GB|TB)$")
_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_GPU = re.compile(r"^(?:GPU)?(\d+)$")
#: metric -> (operation kind, value)
METRICS = {
    b"nccl_algorithm_bandwidth_gbs": ("coll", "algo"),
    b"nccl_bus_bandwidth_gbs": ("coll", "bus"),
    b"nccl_collective_exec_time_microseconds": ("coll", "exec"),
    b"nccl_p2p_algorithm_bandwidth_gbs": ("p2p", "algo"),
    b"nccl_p2p_bus_bandwidth_gbs": ("p2p", "bus"),
    b"nccl_p2p_exec_time_microseconds": ("p2p", "exec"),
}
#: Inspector's placeholder for a name it was not given
_UNKNOWN = "unknown"


def message_bytes(text: str) -> int:
    """`2.00GB` (2.29) or the bucket `4-5GB` (2.30+: its lower bound), in 1024-based units, as bytes."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"message_size {text!r}")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") if "\\" in value else value


def _int(labels: dict[str, str], *names: str, default: int | None = None) -> int:
    for name in names:
        if name in labels:
            return int(labels[name])
    if default is None:
        raise ValueError(f"no {names[0]} label")
    return default


@dataclass
class Rows:
    """`collectives` columns built a row at a time (Prometheus and OTLP: a row per series set)."""

    cols: dict[str, list[object]] = field(default_factory=lambda: {})

    def add(self, **values: object) -> None:
        for k, v in values.items():
            self.cols.setdefault(k, []).append(v)

    def __len__(self) -> int:
        return len(self.cols.get("ts", []))

    def columns(self, n: int) -> dict[str, object]:
        """The first `n` rows' columns, typed for `collectives_table`."""
        cols: dict[str, object] = {k: v[:n] for k, v in self.cols.items()}
        if n:
            for name, dtype in (("pid", np.uint32), ("gpu", np.int16), ("rank", np.int32), ("ranks", np.int32)):
                cols[name] = np.asarray(self.cols[name][:n], dtype)
            cols["bytes"] = np.asarray(self.cols["bytes"][:n], np.uint64)
        return cols


def row(
    rows: Rows, kind: str, labels: dict[str, str], values: dict[str, float], dumped_at_ns: int, source: str = ""
) -> None:
    """One operation's series set as a row; ValueError when a label a row needs is missing or wrong. Labels of
    both exports (Prometheus' `message_size` bucket, OTLP v5.2's exact `coll_msg_size_bytes`, `p2p_sn`...)."""
    if "timestamp" in labels:
        when = dt.datetime.fromisoformat(labels["timestamp"].replace("Z", "+00:00"))
        ts = int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()) * 1_000_000_000
    else:
        ts = dumped_at_ns
    op = labels["collective"] if kind == "coll" else labels["p2p_operation"]
    ranks, rank = _int(labels, "nranks", "n_ranks"), _int(labels, "rank", default=-1)
    gpu_label = labels.get("gpu_device_id", labels.get("gpu", ""))
    gpu = _GPU.match(gpu_label)
    exec_us = values["exec"]
    pid = _int(labels, "pid", default=0)
    if not op or ranks <= 0 or rank >= ranks or not 0 <= pid < 2**32 or not (exec_us >= 0 and math.isfinite(exec_us)):
        raise ValueError("collective, ranks, rank, pid or execution time out of range")
    comm_name, job = labels.get("comm_name", ""), labels.get("slurm_job_id", "")
    rows.add(
        ts=ts,
        host=labels.get("hostname", labels.get("node", "")),
        pid=pid,
        gpu=int(gpu.group(1)) if gpu else -1,
        communicator=labels.get("comm_id", ""),
        comm_name="" if comm_name == _UNKNOWN else comm_name,
        rank=rank,
        ranks=ranks,
        nodes=_int(labels, "n_nodes", "nnodes", default=-1),
        collective=op,
        peer=_int(labels, "peer", "p2p_peer", default=-1),
        sequence=_int(labels, f"{kind}_sn", "sequence", default=-1),
        bytes=_int(labels, f"{kind}_msg_size_bytes", default=-1)
        if f"{kind}_msg_size_bytes" in labels
        else message_bytes(labels["message_size"]),
        exec_time_us=exec_us,
        algo_bw_gbs=values.get("algo", math.nan),
        bus_bw_gbs=values.get("bus", math.nan),
        timing_source=labels.get("coll_timing_source", labels.get("timing_source", "")),
        algorithm=labels.get("algo_proto", ""),
        slurm_job_id="" if job == _UNKNOWN else job,
        source=source or ("inspector_prom" if "coll_sn" in labels else "inspector_prom_agg"),
    )


def parse_prom_text(data: bytes | str, dumped_at_ns: int, final: bool = True) -> Parsed:
    """Inspector's Prometheus textfile -> `collectives` rows (see the module docstring)."""
    raw = data.encode() if isinstance(data, str) else data
    end = len(raw) if final else raw.rfind(b"\n") + 1
    rows, unknown, skipped = Rows(), 0, []  # skipped: (offset, why) of each malformed record
    pending: dict[tuple[str, bytes], tuple[int, dict[str, float]]] = {}  # open sets: first line's offset, values
    safe, safe_rows, pos = 0, 0, 0  # where no set is open, and the rows complete by then

    def bad(why: str) -> None:
        skipped.append((pos, why))

    for line in raw[:end].splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        text = line.strip()
        if not text or text.startswith(b"#"):
            if not pending:
                safe, safe_rows = pos, len(rows)
            continue
        m = _SAMPLE.match(text)
        metric = METRICS.get(m.group(1)) if m else None
        if m is None or metric is None:
            if m is None and text.startswith(b"nccl_"):
                bad(f"not a sample line: {text[:120]!r}")
            else:
                unknown += 1
            if not pending:
                safe, safe_rows = pos, len(rows)
            continue
        kind, what = metric
        key = (kind, m.group(2))
        _, values = pending.setdefault(key, (start, {}))
        try:
            values[what] = float(m.group(3))
        except ValueError:
            values[what] = math.nan if what != "exec" else -1.0
        if what == "exec":
            del pending[key]
            try:
                labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(2).decode())}
                row(rows, kind, labels, values, dumped_at_ns)
            except (ValueError, KeyError, UnicodeDecodeError, OverflowError) as exc:
                bad(f"{type(exc).__name__}: {exc}: {text[:120]!r}")
        if not pending:
            safe, safe_rows = pos, len(rows)
    if final:
        for _ in pending:
            bad("a series set without its execution time")
        safe, safe_rows = end, len(rows)
    n = safe_rows
    counted = [why for at, why in skipped if at <= safe]  # later ones are read again with the rest
    batch = conform(STREAM, collectives_table(rows.columns(n), n))
    return Parsed(batch, len(counted), counted[0] if counted else "", safe, unknown)
