"""The report's job side over a real analysis of one job's incast hurting another (tests/analysis/nccl_jobs.py):
what the findings cost each job, the who-hurt-whom graph, and each case's cost and blame lines."""

from __future__ import annotations

import datetime as dt
import html
import re

import pytest
from nccl_jobs import INCAST, incast_between_jobs

from rocescope.analysis.blame import Edge
from rocescope.analysis.report.blame import blame_figure
from rocescope.analysis.report.page import build_report, count_svgs
from rocescope.analysis.report.plots import Skip
from rocescope.analysis.run import analyze
from rocescope.pipeline.store import Store


def test_the_page_shows_what_each_job_lost_and_who_hurt_whom(store: Store, now: dt.datetime) -> None:
    t, victim, culprit = incast_between_jobs(store, now)
    analyze(store, t.window)
    report = build_report(store, since=t.window.start)
    assert [p.name for p in report.jobs if p.drawn] == ["blame"]
    assert count_svgs(report.html) == len(report.plots)
    page = html.unescape(report.html)
    section = page[page.index("What it cost the jobs") : page.index("<h2>Cases")]
    lost = float(re.search(rf"<td>{victim.job_id}</td><td>([\d.]+)</td><td>1</td>", section).group(1))  # type: ignore[union-attr]
    assert abs(lost - victim.lost_gpu_seconds(*INCAST)) <= 0.2 * victim.lost_gpu_seconds(*INCAST)
    assert culprit.job_id not in section.split("<figure")[0]  # not hurt: not in the cost table
    assert f"<dt>blame</dt><dd>{culprit.job_id} -> {victim.job_id} (senders' traffic)</dd>" in page
    assert f"{victim.job_id}: {lost:.1f} GPU-s (1.80x, bus bandwidth -44%)" in page
    assert f"<td>{lost:.1f}&nbsp;GPU-s</td>" in report.html  # the job's table: what each finding cost it


def test_the_graph_is_skipped_with_a_reason_when_nothing_was_measured() -> None:
    with pytest.raises(Skip, match="no finding measured a loss"):
        blame_figure([Edge("(no job)", "team-a/train")])
