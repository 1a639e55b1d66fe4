"""A plain `pip install .` (a wheel, not the editable tree) installs cleanly and holds every file the source has.

The editable install the tests use maps the source folders in place, so a module or data file missing
from the wheel (a package left out of `packages`, a scenario YAML or BPF program left out of
`package-data`) would only show on a user's machine. Here the wheel goes into a fresh venv, outside the
repository: every module and data file of the source folders must be in it, and its `rocescope` command must
start. Running the demo from it (`--full`) compiles the simulator's kernel afresh for the wheel's path (~25 s
of numba). The venv borrows the dependencies of the test venv through a path entry (installing them again
would take a minute of CI for nothing), never its rocescope.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
#: lines pip prints for this machine's own index settings, not for our package
MACHINE_NOISE = ("is ignored: it is neither a file nor a directory",)


def source_files() -> set[str]:
    """Every module and package-data file of the listed packages, as paths inside the installed `rocescope`."""
    dirs: dict[str, str] = SETUPTOOLS["package-dir"]
    data: dict[str, list[str]] = SETUPTOOLS["package-data"]
    files = set()
    for package in SETUPTOOLS["packages"]:
        top = max((p for p in dirs if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / dirs[top] / package.removeprefix(top).lstrip(".").replace(".", "/")
        inside = Path(*package.split(".")[1:])
        for path in folder.iterdir():
            if path.is_file() and (
                path.suffix == ".py" or any(fnmatch.fnmatch(path.name, g) for g in data.get(package, []))
            ):
                files.add(str(inside / path.name))
    return files


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(venv, its site-packages, environment) with the wheel of this tree installed."""
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    return venv, site, env


@pytest.mark.timeout(300)
def test_the_wheel_installs_without_warnings_with_every_module_and_data_file(
    wheel_venv: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, site, env = wheel_venv
    python = venv / "bin" / "python"
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
    installed = {str(p.relative_to(site / "rocescope")) for p in (site / "rocescope").rglob("*") if p.is_file()}
    missing = source_files() - installed
    assert not missing, f"left out of the wheel: {sorted(missing)}"
    started = subprocess.run([venv / "bin" / "rocescope", "--help"], capture_output=True, text=True, env=env)
    assert started.returncode == 0 and "demo" in started.stdout, started.stderr[-2000:]


@pytest.mark.full  # the demo's kernel compiles afresh for the wheel's path; the file list above is checked in CI
@pytest.mark.timeout(600)
def test_the_wheel_runs_the_demo_and_finds_its_storm(
    wheel_venv: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, _site, env = wheel_venv
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
