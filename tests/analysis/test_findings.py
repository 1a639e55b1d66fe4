"""Findings land in the store; re-running a window replaces its findings, and a problem still going on
across overlapping windows (follow mode) stays one row with its true start."""

from __future__ import annotations

import datetime as dt
import json

from rocescope.analysis.findings import Finding, write_findings
from rocescope.analysis.frames import Window
from rocescope.pipeline.store import Store
from rocescope.sim.scoring import Truth, score


def storm(start: dt.datetime, end: dt.datetime, port: str = "leaf-1:Ethernet0") -> Finding:
    return Finding(
        kind="pfc_storm",
        severity="critical",
        start=start,
        end=end,
        devices=("gpu-1", "leaf-1"),
        ports=(port,),
        priority=3,
        score=1.0,
        summary="a storm",
        evidence={"at": start, "values": [1.5, float("nan")]},
        job_ids=("ns/a",),
        detector="pfc_storm",
        detector_version="1",
    )


def rows(store: Store) -> list[dict]:
    return store.query_arrow("SELECT kind, start, end, ports, evidence FROM findings ORDER BY start").to_pylist()


def test_rerunning_a_window_replaces_its_findings(any_store: Store, now: dt.datetime) -> None:
    w = Window(now, now + dt.timedelta(minutes=5))
    f = storm(now + dt.timedelta(seconds=30), now + dt.timedelta(seconds=60))
    write_findings(any_store, [f], w, "run-1")
    write_findings(any_store, [f], w, "run-2")
    (row,) = rows(any_store)
    assert json.loads(row["evidence"]) == {"at": f.start.isoformat(), "values": [1.5, None]}
    write_findings(any_store, [], w, "run-3")  # the problem was a false alarm after all
    assert rows(any_store) == []


def test_follow_mode_keeps_one_row_with_the_true_start(any_store: Store, now: dt.datetime) -> None:
    first = Window(now, now + dt.timedelta(minutes=5))
    t0 = now + dt.timedelta(minutes=4)
    write_findings(any_store, [storm(t0, first.end)], first, "run-1")
    second = Window(now + dt.timedelta(minutes=4, seconds=30), now + dt.timedelta(minutes=9, seconds=30))
    # the next window sees the same storm from its own start, clipped
    write_findings(any_store, [storm(second.start, second.start + dt.timedelta(minutes=2))], second, "run-2")
    (row,) = rows(any_store)
    assert row["start"] == t0 and row["end"] == second.start + dt.timedelta(minutes=2)
    # another port's storm starting with the window is a different problem
    other = storm(second.start, second.start + dt.timedelta(minutes=1), "leaf-2:Ethernet4")
    write_findings(any_store, [storm(second.start, second.end), other], second, "run-3")
    assert [r["ports"] for r in rows(any_store)] == [["leaf-1:Ethernet0"], ["leaf-2:Ethernet4"]]


def test_score_counts_precision_recall_localization_jobs_and_delay(now: dt.datetime) -> None:
    end = now + dt.timedelta(seconds=30)
    truth = Truth("pfc_storm", now, end, ("ns/a",), ("gpu-1", "leaf-1"), ("leaf-1:Ethernet0",))
    good = storm(now + dt.timedelta(seconds=1), now + dt.timedelta(seconds=30))
    elsewhere = storm(now, now + dt.timedelta(seconds=5)).with_(devices=("gpu-9",), ports=("gpu-9:eth0",))
    later = storm(now + dt.timedelta(minutes=5), now + dt.timedelta(minutes=6))
    s = score([truth], [good, elsewhere, later], poll_s=1.0)["pfc_storm"]
    assert (s.incidents, s.findings, s.recalled, s.true_findings) == (1, 3, 1, 1)
    assert s.precision == 1 / 3 and s.recall == 1.0 and s.localization == 1.0 and s.attribution == 1.0
    assert s.delays == [1.0]
    wrong_jobs = score([truth], [good.with_(job_ids=("ns/b",))], 1.0)["pfc_storm"]
    assert wrong_jobs.attribution == 0.0 and wrong_jobs.recall == 1.0
    assert score([truth], [], 1.0)["pfc_storm"].recall == 0.0
