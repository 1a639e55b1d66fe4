"""What the CLI tests share: a config file pointing the store at the test's own directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_config() -> Callable[..., Path]:
    """`write_config(folder, extra="")`: a rocescope.yaml in `folder` with the store in `folder/data`, plus `extra`."""

    def write(folder: Path, extra: str = "") -> Path:
        path = folder / "rocescope.yaml"
        path.write_text(f"store:\n  path: {folder / 'data'}\n{extra}")
        return path

    return write
