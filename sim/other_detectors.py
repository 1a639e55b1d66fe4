"""Another commit's detectors on this tree's runs: the exam's difficulty guard.

The guard asks whether the twin is as hard as independent data: run against the detectors of an old commit, the
exam must show the failures that data showed (microbursts missed, incasts over-called, false findings from data
faults). The run is simulated and scored by this tree; only the analysis is the other tree's, in a process of its
own (`python -c`) with that tree first on its path, reading the run's store (the schema only grew since, so an old
reader finds what it reads) and handing its findings back as JSON.

The other tree is an install of that commit's package: `git worktree add DIR <commit>` then
`pip install --no-deps --target TREE DIR`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rocescope.analysis.findings import Finding
from rocescope.analysis.window import Window
from rocescope.errors import SimError

__all__ = ["analyze_with", "findings_from_json"]

#: Run in the other tree's process: this venv's editable install of rocescope is dropped from the import
#: machinery first (its finder would answer `import rocescope` before the path does).
_ANALYZE = """
import dataclasses, datetime as dt, json, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__ and "editable" not in repr(f)]
from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.pipeline.store import ChdbStore
store_dir, db, start, end = sys.argv[1:5]
with ChdbStore(store_dir, db) as store:
    result = analyze(store, Window(dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end)), write=False)
found = [dataclasses.asdict(f) for f in result.findings]
json.dump({"findings": found, "failed": dict(result.failed)}, sys.stdout, default=str)
"""

#: An hour of fabric time analyses in minutes; a child that takes this long is stuck.
_TIMEOUT_S = 3600.0


def findings_from_json(rows: list[dict[str, Any]]) -> list[Finding]:
    """Findings as another tree dumped them (`dataclasses.asdict`, times as ISO text); fields this tree's
    `Finding` lacks are left out, ones the other lacks take their defaults."""
    known = {f.name for f in dataclasses.fields(Finding)}
    out = []
    for row in rows:
        given = {k: v for k, v in row.items() if k in known}
        given["start"], given["end"] = (dt.datetime.fromisoformat(str(row[k])) for k in ("start", "end"))
        given["devices"], given["ports"] = tuple(row.get("devices") or ()), tuple(row.get("ports") or ())
        if given.get("job_ids") is not None:
            given["job_ids"] = tuple(given["job_ids"])
        out.append(Finding(**given))
    return out


def analyze_with(tree: Path, store_dir: Path, database: str, window: Window) -> list[Finding]:
    """The findings the detectors installed at `tree` make of the run in `store_dir`/`database` over `window`
    (SimError when the other tree fails or one of its detectors raised)."""
    if not (tree / "rocescope").is_dir():
        raise SimError(f"{tree} holds no rocescope package (pip install --no-deps --target {tree} <checkout>)")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [str(store_dir.resolve()), database, window.start.isoformat(), window.end.isoformat()]
    try:
        done = subprocess.run(  # this interpreter, a constant script, paths as arguments
            [sys.executable, "-c", _ANALYZE, *args],
            env=env,
            cwd=tree,  # `python -c` puts its working directory first: a checkout's own `rocescope/` would answer
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise SimError(f"the detectors at {tree} did not finish in {_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SimError(f"the detectors at {tree} failed (exit code {done.returncode}): {last}")
    answer = json.loads(done.stdout)
    if answer["failed"]:
        failed = "; ".join(f"{name}: {why}" for name, why in sorted(answer["failed"].items()))
        raise SimError(f"detector(s) at {tree} raised: {failed}")
    return findings_from_json(answer["findings"])
