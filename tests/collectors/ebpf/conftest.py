"""Fixtures of the eBPF tests: processes that belong to a job, bcc (BPF needs root), a network namespace."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocescope.collectors.ebpf.loader import EbpfUnavailable, kernel_source, load_bcc
from rocescope.testbed.snmpd import Netns, netns_unavailable


@pytest.fixture
def sleeper() -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Starts child processes with a job id in their environment, killed when the test ends."""
    children: list[subprocess.Popen[bytes]] = []

    def start(job: str) -> subprocess.Popen[bytes]:
        """Returns once the child has exec'd (before, /proc shows our copy; and execve names the process
        before it lays out the new environment, so wait for both)."""
        child = subprocess.Popen(["sleep", "30"], env={**os.environ, "ROCESCOPE_JOB_ID": job})
        children.append(child)
        proc = Path(f"/proc/{child.pid}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            (proc / "comm").read_text().strip() == "sleep" and b"ROCESCOPE_JOB_ID" in (proc / "environ").read_bytes()
        ):
            time.sleep(0.005)
        return child

    yield start
    for child in children:
        child.kill()
        child.wait()


@pytest.fixture
def bcc() -> Any:
    """The bcc module; skips without root (CAP_BPF + CAP_PERFMON, CAP_NET_ADMIN for XDP), bcc or kernel headers."""
    if os.geteuid() != 0:
        pytest.skip("needs root: CAP_BPF + CAP_PERFMON (and CAP_NET_ADMIN for XDP and namespaces)")
    try:
        module = load_bcc()
        kernel_source()
    except EbpfUnavailable as exc:
        pytest.skip(str(exc))
    return module


@pytest.fixture
def netns() -> Iterator[Netns]:
    """A network namespace of the test's own."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Netns() as ns:
        yield ns
