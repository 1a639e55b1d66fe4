"""The incident notebook runs top to bottom (nbclient, a kernel of this venv's Python) against a store
holding a simulated PFC storm and its findings, so it cannot rot as the code under it changes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocescope.analysis.run import analyze

from landed import Landed

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[2] / "analysis" / "notebooks" / "incident.ipynb"
KERNEL = "rocescope-test"


def _kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernelspec running this interpreter (the venv's, where rocescope is installed), found first on
    JUPYTER_PATH; runtime and IPython files go to the test's directory, not the home directory."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))


def _text(cell: Any) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", ""))
        data = o.get("data", {})
        out.append(data.get("text/plain", ""))
        out.append(data.get("text/html", ""))
    return "\n".join(out)


def test_incident_notebook_runs_against_a_simulated_storm(
    land: Callable[..., Landed], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = land("pfc_storm")
    with run.open() as store:  # closed before the kernel opens the directory (one process at a time)
        result = analyze(store, run.window)
    try:
        _kernel(tmp_path, monkeypatch)
        for var in ("ROCESCOPE_CONFIG", "ROCESCOPE_JOB", "ROCESCOPE_STORE__BACKEND"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("ROCESCOPE_STORE__PATH", str(run.path))
        monkeypatch.setenv("ROCESCOPE_STORE__DATABASE", run.database)
        monkeypatch.setenv("ROCESCOPE_STORE__TTL_DAYS", "0")
        nb = nbformat.read(NOTEBOOK, as_version=4)
        client = nbclient.NotebookClient(
            nb, kernel_name=KERNEL, timeout=240, resources={"metadata": {"path": str(tmp_path)}}
        )
        client.execute()  # raises CellExecutionError, with the cell and the traceback, if any cell fails
    finally:
        with run.open() as store:
            store.command("DELETE FROM findings WHERE run_id = {r:String}", {"r": result.run_id})

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not any(o.get("output_type") == "error" for o in c.get("outputs", [])) for c in code)
    text = "\n".join(_text(c) for c in code)
    (truth,) = run.truths
    assert "team-a/llm-a" in text and "pfc_storm" in text  # the job's findings are listed
    assert "PFC storm" in text  # the case's summary
    svgs = [o for c in code for o in c.get("outputs", []) if "image/svg+xml" in o.get("data", {})]
    assert len(svgs) == 2  # the timeline and the pause tree
    assert truth.ports[1].split(":")[0] in text  # the paused leaf shows up in the SQL of paused ports
    assert "NIC(s) of team-a/llm-a under" in text
