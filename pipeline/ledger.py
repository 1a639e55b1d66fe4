"""The import ledger: which files `rocescope import` landed, by content, so importing one again changes nothing.

A recorded capture is often imported twice (a retried script, a colleague's copy of the same file, the same
directory imported with a new file added): every row would land twice, the rollups' sums double, and rates,
collectives and GPU-seconds with them. Rows carry no identity of their own that a store could deduplicate on
(two real samples may be equal), but a file does: its bytes, with the kind and options it was imported with,
hashed. A file whose digest is in `imports` is skipped and said so.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from rocescope.pipeline.store import Store

__all__ = ["Imported", "digest", "imported", "record"]

#: (file as recorded, when)
Imported = tuple[str, dt.datetime]


def digest(path: Path, kind: str, options: Sequence[str] = ()) -> str:
    """SHA-256 of the kind, the options that change what lands (device, --at, ...) and the file's bytes, read
    in 1 MiB blocks (a capture may be larger than memory allows twice)."""
    h = hashlib.sha256()
    for part in (kind, *options):
        h.update(part.encode() + b"\0")
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def imported(store: Store, digests: Iterable[str]) -> dict[str, Imported]:
    """The digests among `digests` already imported, with the file and time they were."""
    wanted = sorted(set(digests))
    if not wanted:
        return {}
    sql = (
        "SELECT digest, argMax(file, imported_at) AS file, max(imported_at) AS at FROM imports "
        "WHERE digest IN {d:Array(String)} GROUP BY digest"
    )
    rows = store.query_arrow(sql, {"d": wanted}).to_pylist()
    return {str(r["digest"]): (str(r["file"]), r["at"]) for r in rows}


def record(store: Store, kind: str, landed: Mapping[str, tuple[Path, int]]) -> None:
    """Note the files landed (digest -> (file, rows))."""
    if not landed:
        return
    now = dt.datetime.now(dt.UTC)
    table = pa.table(
        {
            "digest": list(landed),
            "kind": [kind] * len(landed),
            "file": [str(path) for path, _ in landed.values()],
            "rows": pa.array([rows for _, rows in landed.values()], pa.uint64()),
            "imported_at": pa.array([now] * len(landed), pa.timestamp("ns", tz="UTC")),
        }
    )
    store.insert("imports", table)
