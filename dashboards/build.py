"""Build the dashboards (`<name>.dashboard.py` in this package) into Grafana JSON plus provisioning files.

`build_all` is what `rocescope dashboards build` and the demo call. The output directory holds
`dashboards/<name>.json` and Grafana's provisioning tree (`provisioning/datasources/rocescope.yaml` for the
official ClickHouse plugin, `provisioning/dashboards/rocescope.yaml` pointing at the JSON), so a Grafana
started with `GF_PATHS_PROVISIONING=<out>/provisioning` shows the dashboards with no clicking.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from rocescope.config import StoreConfig
from rocescope.dashboards.grafana import DS_TYPE, DS_UID

#: The datasource reads the store password from this variable of Grafana's environment (never from a file).
PASSWORD_ENV = "ROCESCOPE_STORE__PASSWORD"
SUFFIX = ".dashboard.py"


def dashboard_files() -> list[Path]:
    """The `<name>.dashboard.py` files shipped in this package (package data: not importable module names)."""
    root = resources.files("rocescope.dashboards")
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(SUFFIX))


def load(path: Path) -> Callable[[], dict[str, Any]]:
    """The `build` function of one dashboard file, loaded with importlib (its name has a dot in it)."""
    name = path.name.removesuffix(SUFFIX)
    spec = importlib.util.spec_from_file_location(f"rocescope.dashboards._{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build: Callable[[], dict[str, Any]] = module.build
    return build


def build_dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard as current Grafana JSON, by file name stem."""
    return {p.name.removesuffix(SUFFIX): load(p)() for p in dashboard_files()}


def datasource_provisioning(store_cfg: StoreConfig) -> dict[str, Any]:
    """The ClickHouse datasource over HTTP at the store's URL; the password comes from Grafana's environment."""
    url = urlsplit(store_cfg.url)
    secure = url.scheme == "https"
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "rocescope",
                "uid": DS_UID,
                "type": DS_TYPE,
                "access": "proxy",
                "isDefault": True,
                "editable": False,
                "jsonData": {
                    "host": url.hostname or "127.0.0.1",
                    "port": url.port or (8443 if secure else 8123),
                    "protocol": "http",
                    "secure": secure,
                    "username": store_cfg.user,
                    "defaultDatabase": store_cfg.database,
                    "tlsSkipVerify": not store_cfg.verify_tls,
                    **({"path": url.path.strip("/")} if url.path.strip("/") else {}),
                },
                # Grafana expands ${VAR} in provisioning files: the secret never lands on disk.
                "secureJsonData": {"password": f"${{{PASSWORD_ENV}}}"},
            }
        ],
    }


def dashboards_provisioning(dashboards_dir: Path) -> dict[str, Any]:
    """A file provider serving the generated JSON in a `rocescope` folder."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "rocescope",
                "folder": "rocescope",
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 30,
                "options": {"path": str(dashboards_dir), "foldersFromFilesStructure": False},
            }
        ],
    }


def build_all(out_dir: Path, store_cfg: StoreConfig) -> list[Path]:
    """Write every dashboard and the provisioning files under `out_dir`; returns the files written."""
    out_dir = out_dir.resolve()
    dash_dir = out_dir / "dashboards"
    ds_dir = out_dir / "provisioning" / "datasources"
    prov_dir = out_dir / "provisioning" / "dashboards"
    for d in (dash_dir, ds_dir, prov_dir):
        d.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in build_dashboards().items():
        path = dash_dir / f"{name}.json"
        path.write_text(json.dumps(model, indent=2, sort_keys=True) + "\n")
        written.append(path)
    for path, doc in (
        (ds_dir / "rocescope.yaml", datasource_provisioning(store_cfg)),
        (prov_dir / "rocescope.yaml", dashboards_provisioning(dash_dir)),
    ):
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        written.append(path)
    return written
