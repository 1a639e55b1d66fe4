"""`eval --workers N` runs each scenario in a worker process; an eval killed alone must not leave its workers
running orphaned (each finishing a run nobody reads, holding a core), as they did before they asked the kernel
to end them with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = """
import sys, time, multiprocessing
from concurrent.futures import ProcessPoolExecutor
from rocescope.sim.evaluate import die_with_parent

def busy(_: int) -> int:
    import os
    sys.stdout.write(f"{os.getpid()}\\n")  # one write: two workers' print() (text, then end) could interleave
    sys.stdout.flush()
    time.sleep(120)
    return 0

if __name__ == "__main__":
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent) as pool:
        futures = [pool.submit(busy, i) for i in range(2)]
        time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is gone, only not yet reaped


def test_workers_end_when_the_eval_that_started_them_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    workers = [int(parent.stdout.readline()) for _ in range(2)]
    assert all(_alive(pid) for pid in workers)
    parent.send_signal(signal.SIGKILL)  # no cleanup of any kind in the parent
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = [pid for pid in workers if _alive(pid)]
    for pid in orphans:  # a failing run cleans up after itself
        os.kill(pid, signal.SIGKILL)
    assert not orphans
