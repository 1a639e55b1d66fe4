"""NCCL Inspector's OpenTelemetry export (OTLP/HTTP JSON) -> `collectives` rows.

NVIDIA/nccl `plugins/profiler/inspector/inspector_otel.cc` (`NCCL_INSPECTOR_OTEL_EXPORT=1`; dev branch, 2026)
POSTs `{"resourceMetrics": [{"resource": ..., "scopeMetrics": [{"metrics": [...]}]}]}` bodies, every metric a
gauge, every attribute a string:

* `v5.1` (default): per interval, GPU, communicator name, collective, message-size bucket and `algo_proto`, the
  geometric-mean bus bandwidth and the mean execution time, as in its 2.30 Prometheus output: rows of source
  `inspector_otlp_agg` (interval means, rank and sequence -1), dated by each point's `timeUnixNano`;
* `v5.2` (`NCCL_INSPECTOR_OTEL_VERBOSE=1`): one point set per operation with `comm_id`, `coll_sn`/`p2p_sn`,
  exact message sizes and `p2p_peer`: rows of source `inspector_otlp`, one per collective; plus per-GPU
  `nccl_collectives_total` / `*_dropped_total` (cumulative: the ring buffer's drops, reported as
  `writer_dropped`, the largest total seen per GPU).

The bodies are read as the OpenTelemetry Collector's file exporter stores them (one body per line) or as a
single body. Points of one operation share their attributes and time; a set without its execution time, a
body that is no OTLP JSON, or a version other than v5.x is counted, never guessed at.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rocescope.collectors.nccl.parse import STREAM, Parsed, collectives_table
from rocescope.collectors.nccl.prom import METRICS, Rows, row
from rocescope.pipeline.batch import conform

__all__ = ["is_otlp", "parse_otlp"]

#: v5.2's algorithm-bandwidth names (the Prometheus output's are `nccl_algorithm_bandwidth_gbs`, ...)
_VERBOSE = {b"nccl_collective_algobw_gbs": ("coll", "algo"), b"nccl_p2p_algobw_gbs": ("p2p", "algo")}
_OPERATIONS = {name.decode(): what for name, what in {**METRICS, **_VERBOSE}.items()}
_DROPPED = ("nccl_collectives_dropped_total", "nccl_p2p_dropped_total")
_TOTALS = ("nccl_collectives_total", "nccl_p2p_total")


def is_otlp(data: bytes) -> bool:
    """An OTLP JSON metrics body (or a file of them, one per line)."""
    head = data.lstrip()[:200]
    return head[:1] == b"{" and b'"resourceMetrics"' in head


def _value(v: dict[str, Any]) -> str:
    """An OTLP AnyValue as text (Inspector sends strings; other exporters may not)."""
    for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if kind in v:
            return str(v[kind])
    raise ValueError(f"attribute value {v!r}")


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {str(a["key"]): _value(a.get("value") or {}) for a in items or ()}


def _points(metric: dict[str, Any]) -> list[dict[str, Any]]:
    data = metric.get("gauge") or metric.get("sum") or {}
    points = data.get("dataPoints") if isinstance(data, dict) else None
    return list(points) if isinstance(points, list) else []


def _number(point: dict[str, Any]) -> float:
    if "asDouble" in point:
        return float(point["asDouble"]) if point["asDouble"] is not None else math.nan
    return float(int(point["asInt"]))


class _Read:
    """What the bodies gave so far: the open point sets, drop totals, and what was skipped."""

    def __init__(self) -> None:
        self.sets: dict[tuple[str, tuple[tuple[str, str], ...], int], dict[str, float]] = {}
        self.dropped: dict[tuple[str, str, str], float] = {}  # (node, gpu, metric) -> the largest total
        self.malformed, self.refused, self.unknown, self.problem = 0, 0, 0, ""

    def bad(self, why: str, refused: bool = False) -> None:
        if refused:
            self.refused += 1
        else:
            self.malformed += 1
        self.problem = self.problem or why

    def body(self, doc: Any) -> None:
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceMetrics"), list):
            self.bad("not an OTLP metrics body (no resourceMetrics)")
            return
        for resource in doc["resourceMetrics"]:
            try:
                extra = _attributes((resource.get("resource") or {}).get("attributes"))
                metrics = []
                for scope in resource.get("scopeMetrics") or ():
                    for metric in scope.get("metrics") or ():
                        if not isinstance(metric, dict):
                            raise TypeError(f"a metric that is no object: {str(metric)[:60]}")
                        metrics.append(metric)
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                self.bad(f"a resource that is not OTLP ({type(exc).__name__}: {exc})")
                continue
            job = {"slurm_job_id": extra["slurm.job.id"]} if "slurm.job.id" in extra else {}
            for metric in metrics:
                self.metric(metric, job)

    def metric(self, metric: dict[str, Any], job: dict[str, str]) -> None:
        name = str(metric.get("name", ""))
        what = _OPERATIONS.get(name)
        for point in _points(metric):
            try:
                labels = {**job, **_attributes(point.get("attributes"))}
                value, when = _number(point), int(point.get("timeUnixNano") or 0)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                self.bad(f"{name}: a point that is not OTLP ({type(exc).__name__}: {exc})")
                continue
            if name in _DROPPED:  # cumulative per GPU: the largest seen is the total so far
                gpu = (labels.get("node", ""), labels.get("gpu", ""), name)
                self.dropped[gpu] = max(self.dropped.get(gpu, 0.0), value)
                continue
            if name in _TOTALS:
                continue
            if what is None:
                self.unknown += 1
                continue
            if not labels.get("version", "v5.").startswith("v5."):
                self.bad(f"Inspector OTLP format {labels['version']} is not read (v5.x is)", refused=True)
                continue
            kind, field = what
            key = (kind, tuple(sorted(labels.items())), when)
            self.sets.setdefault(key, {})[field] = value

    def rows(self) -> tuple[Rows, int]:
        rows = Rows()
        for (kind, items, when), values in self.sets.items():
            labels = dict(items)
            if "exec" not in values:
                self.bad("a point set without its execution time")
                continue
            verbose = f"{kind}_sn" in labels
            try:
                row(rows, kind, labels, values, when, "inspector_otlp" if verbose else "inspector_otlp_agg")
            except (ValueError, KeyError, OverflowError) as exc:
                self.bad(f"{type(exc).__name__}: {exc}")
        dropped = int(sum(self.dropped.values()))
        return rows, dropped


def parse_otlp(data: bytes | str) -> Parsed:
    """OTLP JSON bodies (one, or one per line) -> `collectives` rows (see the module docstring)."""
    raw = data.encode() if isinstance(data, str) else data
    read = _Read()
    try:
        docs = [json.loads(raw)]
    except ValueError:
        docs = []
        for line in raw.splitlines():
            if not line.strip():
                continue
            try:
                docs.append(json.loads(line))
            except ValueError as exc:
                read.bad(f"not JSON ({exc}): {line[:120]!r}")
    for doc in docs:
        read.body(doc)
    rows, dropped = read.rows()
    batch = conform(STREAM, collectives_table(rows.columns(len(rows)), len(rows)))
    return Parsed(batch, read.malformed, read.problem, len(raw), read.unknown, read.refused, dropped)
