"""Coverage-guided fuzzing (atheris: libFuzzer over instrumented Python) of the two binary decoders that
take bytes from outside: capture files (`pcap.fast.decode_pcap`) and Kafka messages (`batch.decode`).

Run by `test_atheris.py` in a child process (libFuzzer owns the process and exits when done):
    python tests/fuzz/atheris_targets.py pcap|arrow -runs=N -seed=S CORPUS_DIR
Any exception other than the project's own error types is a crash; libFuzzer then writes the input to
`crash-*` in the working directory and exits non-zero.
"""

from __future__ import annotations

import os
import sys

import atheris

with atheris.instrument_imports(include=["rocescope"]):
    from rocescope import schema
    from rocescope.collectors.pcap.fast import decode_pcap
    from rocescope.collectors.pcap.framing import UnsupportedCapture
    from rocescope.errors import DecodeError, SchemaError
    from rocescope.pipeline.batch import decode


class _Stats:
    """Inputs tried and refused with a project error, rewritten in place after every input (libFuzzer ends
    the process from C, so nothing runs at exit): `ATHERIS_STATS` names the file."""

    def __init__(self, path: str | None):
        self.inputs = self.refused = 0
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if path else None

    def add(self, refused: bool) -> None:
        self.inputs += 1
        self.refused += refused
        if self.fd is not None:
            os.pwrite(self.fd, f"{self.inputs} {self.refused}\n".encode(), 0)


STATS = _Stats(os.environ.get("ATHERIS_STATS"))


def pcap(data: bytes) -> None:
    try:
        decoded = decode_pcap(data)
    except (UnsupportedCapture, DecodeError):
        STATS.add(refused=True)
        return
    STATS.add(refused=False)
    lengths = {len(column) for column in decoded.columns.values()}
    if len(lengths) > 1:
        raise AssertionError(f"columns of different lengths: {lengths}")


def arrow(data: bytes) -> None:
    refused = True
    for stream in schema.STREAMS:
        try:
            batch = decode(stream, data)
        except (DecodeError, SchemaError):
            continue
        batch.data.validate(full=True)
        refused = False
    STATS.add(refused)


TARGETS = {"pcap": pcap, "arrow": arrow}

if __name__ == "__main__":
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()
