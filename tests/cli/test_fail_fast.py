"""A server that is not there, or a bad setting, is one line on stderr in seconds, naming the address or the
variable and what to do; library warnings stay out of the console."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rocescope.testbed.tansu import free_port


def run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rocescope.cli", *args],
        env={**os.environ, "COLUMNS": "80", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - started


def test_an_unreachable_broker_is_one_line_within_seconds(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {"ROCESCOPE_TRANSPORT__KIND": "kafka", "ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS": address}
    done, seconds = run(["sink"], env, tmp_path)
    assert done.returncode == 1
    assert seconds < 5, f"took {seconds:.1f} s"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no kafka-python retries, no traceback
    assert address in lines[0] and "ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS" in lines[0]
    assert "rocescope broker" in lines[0] and "connection refused" in lines[0]


def test_library_warnings_go_to_the_log_at_debug_level(tmp_path: Path) -> None:
    """urllib3 warns of its retry and clickhouse-connect of the failure before raising it: both are in the
    log at debug level, not among the console's warnings."""
    url = f"http://127.0.0.1:{free_port()}"
    env = {"ROCESCOPE_STORE__BACKEND": "clickhouse", "ROCESCOPE_STORE__URL": url}
    done, _ = run(["--log-level", "DEBUG", "findings"], env, tmp_path)
    assert done.returncode == 1
    assert "DEBUG urllib3.connectionpool: Retrying" in done.stderr
    assert "WARNING urllib3" not in done.stderr and "WARNING clickhouse_connect" not in done.stderr


def test_an_unreachable_clickhouse_is_one_line_within_seconds(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done, seconds = run(["findings"], {"ROCESCOPE_STORE__BACKEND": "clickhouse", "ROCESCOPE_STORE__URL": url}, tmp_path)
    assert done.returncode == 1
    assert seconds < 5, f"took {seconds:.1f} s"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert url in lines[0] and "ROCESCOPE_STORE__URL" in lines[0] and "connection refused" in lines[0]


def test_a_bad_variable_is_one_line_on_any_command(tmp_path: Path) -> None:
    for args in (["findings"], ["sink"], ["config"]):
        done, _ = run(args, {"ROCESCOPE_KAFKA__PARTITIONS": "six"}, tmp_path)
        assert done.returncode == 1, args
        assert done.stderr.strip().splitlines() == [
            "error: invalid config (environment): kafka.partitions (ROCESCOPE_KAFKA__PARTITIONS): "
            "Input should be a valid integer, unable to parse string as an integer"
        ], args
