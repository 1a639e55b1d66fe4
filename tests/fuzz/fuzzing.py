"""A seeded mutation fuzzer over the real fixtures, and the bookkeeping every fuzz test shares.

Why not only hypothesis: its per-example overhead (~1 ms) caps a 60 s CI budget far below 10,000
inputs per parser. Byte-level mutation of real device output (bit flips, truncations, splices,
insertions of the characters parsers split on) is cheap and lands close to valid input, where parsers
break. Hypothesis still drives the structure-aware cases (random protobufs, OIDs, YAML documents).

Scale: `ROCESCOPE_FUZZ_SCALE` multiplies every count (default 1: at least 10,000 inputs per parser;
`ROCESCOPE_FUZZ_SCALE=10` is the `--full` run). `ROCESCOPE_FUZZ_SEED` changes the seed (default fixed,
so a failure reproduces); a failing input is written to `.cache/fuzz-failures/` and named in the message.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocescope.errors import RocescopeError

SCALE = float(os.environ.get("ROCESCOPE_FUZZ_SCALE", "1"))
SEED = int(os.environ.get("ROCESCOPE_FUZZ_SEED", "20261124"))
#: Inputs per parser in the default run (the issue asks for at least 10,000).
BASE = 10_000
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "realdata"
FAILURES = Path(__file__).resolve().parents[2] / ".cache" / "fuzz-failures"

#: Bytes parsers split or key on: separators of every format fuzzed here.
_TOKENS = (
    b":", b"\n", b"\r\n", b" ", b"\t", b'"', b"{", b"}", b"[", b"]", b",", b"|", b"/", b"=", b".", b"-", b"\\",
    b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"0", b"9", b"-1", b"1e308", b"NaN", b"18446744073709551616",
    b"null", b"true", b"[]", b"{}", b"\"\"", b"#", b"&", b"*", b"!!python/object", b"~", b"?",
)  # fmt: skip


@dataclass
class Tally:
    """What one fuzz target saw: inputs tried, inputs refused with a project error, seconds."""

    inputs: int = 0
    refused: int = 0
    seconds: float = 0.0


#: target name -> Tally, printed by tests/fuzz/conftest.py in the terminal summary.
TALLIES: dict[str, Tally] = {}


def count(base: int = BASE) -> int:
    """Inputs for a target at the current scale."""
    return max(1, int(base * SCALE))


class Mutator:
    """Seeded byte mutations of a corpus of real inputs."""

    def __init__(self, corpus: Sequence[bytes], seed: int = SEED, tokens: Sequence[bytes] = _TOKENS):
        if not corpus:
            raise ValueError("empty corpus")
        self.corpus = list(corpus)
        self.rng = random.Random(seed)
        self.tokens = list(tokens)

    def _one(self, data: bytearray) -> None:
        rng = self.rng
        n = len(data)
        op = rng.randrange(8)
        at = rng.randrange(n + 1)
        if op == 0 and n:  # bit flip
            data[min(at, n - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # random byte
            data[min(at, n - 1)] = rng.randrange(256)
        elif op == 2:  # insert a token
            data[at:at] = rng.choice(self.tokens)
        elif op == 3:  # delete a range
            del data[at : at + rng.randrange(1, 32)]
        elif op == 4:  # truncate
            del data[at:]
        elif op == 5:  # duplicate a range
            end = min(n, at + rng.randrange(1, 64))
            data[at:at] = data[at:end]
        elif op == 6:  # splice in part of another input
            other = rng.choice(self.corpus)
            i = rng.randrange(len(other) + 1)
            data[at:at] = other[i : i + rng.randrange(1, 256)]
        else:  # random bytes
            data[at:at] = rng.randbytes(rng.randrange(1, 16))

    def __call__(self) -> bytes:
        data = bytearray(self.rng.choice(self.corpus))
        for _ in range(1 + int(self.rng.expovariate(0.7))):
            self._one(data)
        return bytes(data)

    def many(self, n: int) -> Iterator[bytes]:
        for _ in range(n):
            yield self()


def _save(name: str, data: bytes) -> Path:
    FAILURES.mkdir(parents=True, exist_ok=True)
    path = FAILURES / f"{name}-{hashlib.sha256(data).hexdigest()[:12]}.bin"
    path.write_bytes(data)
    return path


def run(
    name: str,
    inputs: Iterator[bytes] | Sequence[bytes],
    parse: Callable[[bytes], object],
    allowed: tuple[type[BaseException], ...] = (RocescopeError,),
) -> Tally:
    """Feed every input to `parse`; a project error counts as refused, anything else fails with the input saved."""
    tally = TALLIES.setdefault(name, Tally())
    t0 = time.perf_counter()
    for data in inputs:
        tally.inputs += 1
        try:
            parse(data)
        except allowed:
            tally.refused += 1
        except Exception as exc:
            saved = _save(name, data)
            raise AssertionError(
                f"{name}: {type(exc).__name__}: {exc} on input {data[:80]!r}... (saved to {saved})"
            ) from exc
    tally.seconds += time.perf_counter() - t0
    return tally


def record(name: str, inputs: int, refused: int = 0, seconds: float = 0.0) -> None:
    """Add to a target's tally (for hypothesis-driven tests that count their own examples)."""
    tally = TALLIES.setdefault(name, Tally())
    tally.inputs += inputs
    tally.refused += refused
    tally.seconds += seconds


def real(*parts: str) -> bytes:
    return REAL.joinpath(*parts).read_bytes()
