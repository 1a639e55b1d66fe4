"""The Kafka path of `demo --kafka`: a local broker when none is configured, and (`--processes`) the sink and
the analysis as `rocescope` processes of their own beside the collectors' (the demo's), as a deployment runs.

The embedded store belongs to one process at a time, so the sink process lands while the collectors publish
and stops once everything published has landed (its group's committed offsets reach the topics' ends); then
`rocescope analyze` runs over the run's window in a process of its own, and the demo reads the findings.
Like `common.py`, this module imports nothing of the CLI but `common.py`.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rocescope import schema
from rocescope.cli.common import console, state
from rocescope.config import Settings
from rocescope.errors import RocescopeError, StoreError

if TYPE_CHECKING:
    from rocescope.testbed.tansu import Broker


def kafka_settings(settings: Settings, processes: bool) -> Settings:
    """The demo's settings over Kafka: a sink on a thread here, or (processes) none: the sink process lands."""
    transport = settings.transport.model_copy(update={"kind": "kafka", "sink_in_process": not processes})
    return settings.model_copy(update={"transport": transport})


def start_local_broker(settings: Settings, log_dir: Path) -> Broker | None:
    """A local broker for this run when kafka.bootstrap_servers is the default and nothing listens there (said
    in one line); None otherwise. The caller stops it."""
    from rocescope.testbed.tansu import local_broker_if_needed

    log_dir.mkdir(parents=True, exist_ok=True)
    local = local_broker_if_needed(settings.kafka, log_dir)
    if local is not None:
        console.print(
            f"no Kafka at {local.bootstrap} (kafka.bootstrap_servers is the default): started a local broker "
            "(Tansu, in memory) there for this run",
            highlight=False,
            soft_wrap=True,
        )
    return local


def rocescope_command(*args: str) -> list[str]:
    """`rocescope ARGS` as a child process, with this process's `--config`."""
    config = ["--config", str(state.config_path)] if state.config_path else []
    return [sys.executable, "-m", "rocescope.cli", *config, *args]


def child_env(settings: Settings) -> dict[str, str]:
    """The environment of a child on this run's Kafka: what the config says, plus the transport and broker."""
    return {
        **os.environ,
        "ROCESCOPE_TRANSPORT__KIND": "kafka",
        "ROCESCOPE_TRANSPORT__SINK_IN_PROCESS": "false",
        "ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS": ",".join(settings.kafka.bootstrap_servers),
        "COLUMNS": "200",  # the children's one-line summaries stay one line in their logs
    }


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1] if lines else "no output"


class SinkProcess(AbstractContextManager["SinkProcess"]):
    """`rocescope sink` in a process of its own, its output in `log_path`; stopped (SIGTERM) on exit."""

    def __init__(self, settings: Settings, log_path: Path):
        self.settings = settings
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                rocescope_command("sink"), stdout=log, stderr=subprocess.STDOUT, env=child_env(settings)
            )
        console.print(f"sink: process {self.proc.pid} (log {log_path})", highlight=False, soft_wrap=True)

    def wait_landed(self, stall_s: float = 60) -> None:
        """Return once the sink's group has committed everything on the stream topics; fail if the sink dies
        or makes no progress for `stall_s`."""
        from rocescope.pipeline.kafka import KafkaTransport

        transport = KafkaTransport(self.settings.kafka)
        group = self.settings.sink.group_id
        try:
            left, since = transport.unlanded(group, schema.STREAMS), time.monotonic()
            while left:
                if self.proc.poll() is not None:
                    raise StoreError(f"the sink exited ({self.proc.returncode}): {last_line(self.log_path)}")
                time.sleep(0.2)
                now = transport.unlanded(group, schema.STREAMS)
                if now != left:
                    left, since = now, time.monotonic()
                elif time.monotonic() - since > stall_s:
                    raise StoreError(
                        f"the sink left {left} messages unlanded for {stall_s:.0f} s (log {self.log_path})"
                    )
        finally:
            transport.close()

    def stop(self) -> str:
        """Stop the sink as a deployment would (SIGTERM: it flushes and exits); its last line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise StoreError(f"the sink did not stop in 60 s (log {self.log_path})") from None
        if self.proc.returncode != 0:
            raise StoreError(f"the sink failed ({self.proc.returncode}): {last_line(self.log_path)}")
        return last_line(self.log_path)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def analyze_process(settings: Settings, start: dt.datetime, end: dt.datetime, log_path: Path) -> str:
    """`rocescope analyze` over [start, end) in a process of its own; a line saying what it did."""
    done = subprocess.run(
        rocescope_command("analyze", "--from", start.isoformat(), "--to", end.isoformat()),
        capture_output=True,
        env=child_env(settings),
        check=False,
    )
    log_path.write_bytes(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RocescopeError(f"the analysis process failed ({done.returncode}): {last_line(log_path)}")
    summary = [line for line in done.stdout.decode(errors="replace").splitlines() if "finding(s)" in line]
    return f"analysis process: {summary[0] if summary else last_line(log_path)}"
