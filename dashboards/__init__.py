"""rocescope.dashboards: Grafana dashboards as code (one `<name>.dashboard.py` each, built by `build.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocescope.config import StoreConfig


def build_all(out_dir: Path, store_cfg: StoreConfig) -> list[Path]:
    """Write the dashboards and Grafana provisioning under `out_dir` (what `rocescope demo` can call).

    Imported lazily so that `import rocescope.dashboards` does not load grafanalib.
    """
    from rocescope.dashboards.build import build_all as _build_all

    return _build_all(out_dir, store_cfg)
