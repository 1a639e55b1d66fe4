"""`rocescope broker`: a local Kafka-protocol broker (Tansu) to try the Kafka path on one machine."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from rocescope.cli.common import console, fail, run_until_stopped
from rocescope.errors import RocescopeError, TransportError


def broker(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (9092 is kafka.bootstrap_servers' default).")] = 9092,
    data: Annotated[
        Path | None,
        typer.Option(help="Keep topics, records and offsets in this directory (default: in memory, gone at stop)."),
    ] = None,
) -> None:
    """Run a local Kafka-protocol broker (Tansu) on 127.0.0.1 until Ctrl-C or SIGTERM, for `collect`, `sink`
    and `demo --kafka` with transport.kind: kafka. Not for production: one broker, no replication, no
    authentication (loopback only). The Tansu binary comes with rocescope's `local-kafka` extra."""
    from rocescope.testbed.tansu import Broker, last_log_line

    log_dir = data if data is not None else Path(tempfile.mkdtemp(prefix="rocescope-broker-"))
    try:
        if data is not None:
            data.mkdir(parents=True, exist_ok=True)
        local = Broker(log_dir, port=port, data_dir=data).start()
    except (RocescopeError, OSError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else TransportError(str(exc))) from None
    kept = f"data in {data.resolve()}" if data is not None else "in memory"
    console.print(
        f"Kafka-protocol broker (Tansu) at {local.bootstrap}, {kept}; log {local.log_path}; Ctrl-C stops it",
        highlight=False,
        soft_wrap=True,
    )
    stop = run_until_stopped(None)
    try:
        while not stop.wait(0.5):
            if local.proc is None or local.proc.poll() is not None:
                raise fail(TransportError(f"the broker exited: {last_log_line(local.log_path)}"))
    finally:
        local.stop()
        if data is None:
            shutil.rmtree(log_dir, ignore_errors=True)
