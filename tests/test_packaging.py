"""A plain `pip install .` (a wheel, not the editable tree) installs cleanly and runs the demo.

The editable install the tests use maps the source folders in place, so a module or data file missing
from the wheel (a package left out of `packages`, a scenario YAML or BPF program left out of
`package-data`) would only show on a user's machine. Here the wheel goes into a fresh venv, outside the
repository, and runs `rocescope demo --fast`. The venv borrows the dependencies of the test venv through a
path entry (installing them again would take a minute of CI for nothing), never its rocescope.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: lines pip prints for this machine's own index settings, not for our package
MACHINE_NOISE = ("is ignored: it is neither a file nor a directory",)


@pytest.mark.timeout(600)
def test_wheel_installs_without_warnings_and_runs_the_demo(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ROCESCOPE_CONFIG")}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-cache-dir", str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    said = [line for line in (install.stdout + install.stderr).splitlines() if "warn" in line.lower()]
    said = [line for line in said if not any(noise in line for noise in MACHINE_NOISE)]
    assert not said, "the install warned:\n" + "\n".join(said)

    where = subprocess.run(
        [
            python,
            "-c",
            "import rocescope.sim.scenario as s, rocescope; print(rocescope.__file__); print(len(s.scenario_names()))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout.split()
    assert where[0].startswith(str(site)), f"rocescope came from {where[0]}, not the wheel"
    assert int(where[1]) >= 10  # the scenario YAML files are in the wheel

    rocescope = venv / "bin" / "rocescope"
    demo = subprocess.run(
        [rocescope, "demo", "--fast", "--scenario", "pfc_storm", "--duration", "100s"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=540,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
    assert (tmp_path / "rocescope-demo" / "report.html").stat().st_size > 10_000
    found = subprocess.run(
        [rocescope, "findings", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    ).stdout
    assert '"pfc_storm"' in found  # the storm of the run is found from the installed wheel
