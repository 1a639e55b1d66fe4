"""`rocescope dashboards build`: the Grafana dashboards as files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rocescope.cli.common import console, fail, load_settings
from rocescope.errors import RocescopeError


def dashboards_build(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for dashboards/ and provisioning/.")] = Path(
        "grafana"
    ),
) -> None:
    """Write the dashboards as Grafana JSON plus provisioning for the ClickHouse plugin (datasource at
    store.url; Grafana reads the password from ROCESCOPE_STORE__PASSWORD in its environment)."""
    from rocescope.dashboards.build import build_all

    try:
        written = build_all(out, load_settings().store)
    except RocescopeError as exc:
        raise fail(exc) from None
    for path in written:
        console.print(str(path), highlight=False)
    console.print(f"start Grafana with GF_PATHS_PROVISIONING={out.resolve() / 'provisioning'}", highlight=False)
