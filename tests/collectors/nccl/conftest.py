"""Shared by the NCCL tests: a store that keeps old rows (NVIDIA's real samples are from 2025)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore


@pytest.fixture
def keeping_store(tmp_path: Path) -> Iterator[ChdbStore]:
    """A migrated store without retention: rows of any age stay."""
    s = ChdbStore(tmp_path / "chdb")
    migrate(s, ttl_days=0)
    yield s
    s.close()
