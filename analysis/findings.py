"""Findings: what a detector reports, how it lands in the `findings` table, and how a re-run of a window
replaces (never duplicates) what an earlier run of that window wrote.

Replacement rule for a window [ws, we): findings that start inside it are deleted and rewritten; a
finding that started before ws is kept, and when the new run finds the same problem (kind, ports)
still going at ws, the new row carries the old start and the old row is deleted. So a follow-mode
analysis with overlapping windows keeps one row per problem with its true start.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from rocescope.pipeline.batch import conform
from rocescope.pipeline.store import Store, query_polars

if TYPE_CHECKING:  # not at import: `rocescope findings` reads the table without polars
    from rocescope.analysis.frames import Window

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: Severity
    start: dt.datetime
    end: dt.datetime
    devices: tuple[str, ...]
    ports: tuple[str, ...]
    priority: int
    score: float
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    #: None: the runner attributes the jobs at `ports`; () means the detector knows no job was hurt.
    job_ids: tuple[str, ...] | None = None
    detector: str = ""
    detector_version: str = ""

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def with_(self, **changes: Any) -> Finding:
        return replace(self, **changes)


def _plain(value: Any) -> Any:
    """JSON-ready evidence: times as ISO text, numpy scalars as numbers, NaN/inf as null (valid JSON)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def evidence_json(evidence: dict[str, Any]) -> str:
    return json.dumps(_plain(evidence), separators=(",", ":"), sort_keys=True, allow_nan=False)


def findings_arrow(findings: Sequence[Finding], run_id: str) -> pa.Table:
    """The `findings` stream for these findings, conformed to the schema."""
    ts = pa.timestamp("ns", tz="UTC")
    strs = pa.list_(pa.string())
    table = pa.table(
        {
            "run_id": [run_id] * len(findings),
            "detector": [f.detector for f in findings],
            "detector_version": [f.detector_version for f in findings],
            "kind": [f.kind for f in findings],
            "severity": [f.severity for f in findings],
            "start": pa.array([f.start for f in findings], ts),
            "end": pa.array([f.end for f in findings], ts),
            "job_ids": pa.array([list(f.job_ids or ()) for f in findings], strs),
            "devices": pa.array([list(f.devices) for f in findings], strs),
            "ports": pa.array([list(f.ports) for f in findings], strs),
            "priority": pa.array([f.priority for f in findings], pa.int8()),
            "score": pa.array([float(f.score) for f in findings], pa.float64()),
            "summary": [f.summary for f in findings],
            "evidence": [evidence_json(f.evidence) for f in findings],
        }
    )
    return pa.Table.from_batches([conform("findings", table)]) if findings else conform_empty()


def conform_empty() -> pa.Table:
    from rocescope.schema import arrow_schema

    return arrow_schema("findings").empty_table()


def write_findings(
    store: Store, findings: Sequence[Finding], window: Window, run_id: str, tolerance_s: float = 5.0
) -> int:
    """Replace the window's findings by `findings` (see the module docstring). Returns rows written."""
    params = {"ws": window.start, "we": window.end}
    earlier = query_polars(
        store,
        """SELECT toString(kind) AS kind, ports, start FROM findings
WHERE start < {ws:DateTime64(9, 'UTC')} AND end >= {ws:DateTime64(9, 'UTC')} - INTERVAL 1 MINUTE""",
        params,
    )
    carried: dict[tuple[str, tuple[str, ...]], dt.datetime] = {}
    for kind, ports, start in earlier.iter_rows():
        key = (kind, tuple(ports))
        carried[key] = min(start, carried.get(key, start))
    near = window.start + dt.timedelta(seconds=tolerance_s)
    merged: list[Finding] = []
    superseded: list[tuple[str, tuple[str, ...]]] = []
    for f in findings:
        key = (f.kind, tuple(f.ports))
        if f.start <= near and key in carried:
            merged.append(f.with_(start=carried[key]))
            superseded.append(key)
        else:
            merged.append(f)
    store.command(
        "DELETE FROM findings WHERE start >= {ws:DateTime64(9, 'UTC')} AND start < {we:DateTime64(9, 'UTC')}", params
    )
    for kind, ports in superseded:
        store.command(
            "DELETE FROM findings WHERE kind = {kind:String} AND ports = {ports:Array(String)} "
            "AND start < {ws:DateTime64(9, 'UTC')}",
            {**params, "kind": kind, "ports": list(ports)},
        )
    if merged:
        store.insert("findings", findings_arrow(merged, run_id), dedup_token=f"findings-{run_id}")
    return len(merged)
