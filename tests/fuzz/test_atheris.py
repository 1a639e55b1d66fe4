"""Coverage-guided fuzzing with atheris (libFuzzer) of the byte decoders, beside the seeded mutation
fuzzers: libFuzzer keeps the inputs that reach new branches of the instrumented rocescope code and
mutates those. Each target runs in a child process (`atheris_targets.py`) from a corpus of real inputs."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocescope import schema
from rocescope.pipeline.batch import encode

from fuzzing import REAL, SEED, count, record
from samples import sample_batch

pytest.importorskip("atheris", reason="atheris has wheels for Linux x86_64 only (pyproject's marker)")
TARGETS = Path(__file__).with_name("atheris_targets.py")


def _corpus(target: str, where: Path) -> Path:
    where.mkdir()
    if target == "pcap":
        for path in sorted((REAL / "03_pcap").glob("*.pcap*")):
            (where / path.name).write_bytes(path.read_bytes())
    else:
        for i, stream in enumerate(schema.STREAMS):
            (where / f"{stream}.arrow").write_bytes(encode(sample_batch(stream, 3, seed=i)))
    return where


@pytest.mark.parametrize("target", ["pcap", "arrow"])
@pytest.mark.timeout(900)
def test_coverage_guided(target: str, tmp_path: Path) -> None:
    corpus = _corpus(target, tmp_path / "corpus")
    runs = count()
    stats = tmp_path / "stats"
    # libFuzzer's RSS check reads the peak RSS the kernel keeps across fork and exec, i.e. this pytest
    # process's: allow the decoders 2 GiB on top of it
    rss_limit_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + 2048
    args = [f"-runs={runs}", f"-seed={SEED}", "-max_len=65536", f"-rss_limit_mb={rss_limit_mb}", str(corpus)]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(TARGETS), target, *args],
        cwd=tmp_path,  # where libFuzzer writes a crashing input (crash-<sha1>)
        env={**os.environ, "ATHERIS_STATS": str(stats), "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=840,
    )
    crashes = sorted(tmp_path.glob("crash-*"))
    assert done.returncode == 0 and not crashes, f"{target}: {crashes} {done.stderr[-3000:]}"
    assert re.search(rf"Done {runs} runs", done.stderr), done.stderr[-2000:]
    inputs, refused = (int(x) for x in stats.read_text().split())
    assert inputs >= runs
    record(f"{target} (atheris)", inputs, refused, time.perf_counter() - started)
