"""Fixtures of the fault tests: a loopback S3 and a Tansu broker on it that survives restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocescope.testbed.tansu import Broker

from harness import LoopbackS3


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[LoopbackS3]:
    s = LoopbackS3(tmp_path).start()
    yield s
    s.stop()


@pytest.fixture
def durable_broker(tmp_path: Path, s3: LoopbackS3) -> Iterator[Broker]:
    """Tansu on `s3://` storage: killed and restarted on the same port, it keeps topics, data and offsets."""
    b = Broker(tmp_path, storage=f"s3://{s3.bucket}/", env=s3.env()).start()
    yield b
    b.stop()
