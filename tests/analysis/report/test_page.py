"""The HTML incident report: built from a simulated PFC storm (real detector findings) and from synthetic
polarization / deadlock / incast findings, then opened in headless Chromium (Debian's `chromium`, driven
over the DevTools protocol on a pipe) to prove it renders offline, without console errors, with every plot.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import json
import os
import re
import selectors
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rocescope.analysis.findings import Finding, findings_arrow
from rocescope.analysis.report.page import build_report, count_svgs, write_report
from rocescope.analysis.run import analyze
from rocescope.cli import app

from landed import Landed

CHROMIUM = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium: scripts/system-deps installs Debian's")


# --- a minimal DevTools-protocol client over --remote-debugging-pipe (no websocket library needed)


def _readable(fd: int, timeout_s: float) -> bool:
    """Wait for input with epoll: select() refuses descriptors above 1023, which a long test session reaches."""
    with selectors.DefaultSelector() as waiting:
        waiting.register(fd, selectors.EVENT_READ)
        return bool(waiting.select(timeout_s))


class Browser:
    """Headless Chromium; commands go to its fd 3, replies and events come from its fd 4, NUL-separated."""

    def __init__(self, binary: str, profile: Path) -> None:
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        # the child's ends, moved above 9 so that redirecting them onto fds 3 and 4 cannot clobber them
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, res_w)]
        os.close(cmd_r)
        os.close(res_w)
        wire = f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&-'
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                 "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]  # fmt: skip
        self.proc = subprocess.Popen(
            ["bash", "-c", wire, binary, *flags],  # bash: dash redirects only fds 0-9
            pass_fds=ends,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in ends:
            os.close(fd)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - _now()
            if left <= 0 or not _readable(self._res_r, left):
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._res_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        parsed: dict[str, Any] = json.loads(msg)
        return parsed

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = _now() + 60
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = _now() + timeout
        while True:
            ev = self._read(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def close(self) -> None:
        with suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._res_r)


def _now() -> float:
    return time.monotonic()


@contextmanager
def browser(tmp: Path) -> Iterator[Browser]:
    assert CHROMIUM is not None
    b = Browser(CHROMIUM, tmp / "chromium-profile")
    try:
        yield b
    finally:
        b.close()


def render(page: Path, png: Path) -> dict[str, Any]:
    """Open the page, collect console errors, exceptions and any network request, count the plots (and
    their drawn size), and save a full-page screenshot."""
    with browser(png.parent) as b:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.send(f"{domain}.enable", session=s)
        b.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=s,
        )
        b.send("Page.navigate", {"url": page.resolve().as_uri()}, session=s)
        b.wait_for("Page.loadEventFired")
        probe = """JSON.stringify({
            svgs: document.querySelectorAll('svg').length,
            plots: [...document.querySelectorAll('figure.plot')].map(f => {
                const r = f.querySelector('svg').getBoundingClientRect();
                return {name: f.dataset.plot, finding: f.dataset.finding, w: r.width, h: r.height};
            }),
            skipped: [...document.querySelectorAll('[data-skipped]')].map(p => p.dataset.skipped),
            cases: document.querySelectorAll('section.case').length,
            scripts: document.querySelectorAll('script').length,
            resources: performance.getEntriesByType('resource').map(e => e.name),
        })"""
        found = json.loads(b.send("Runtime.evaluate", {"expression": probe}, session=s)["result"]["value"])
        size = b.send("Page.getLayoutMetrics", session=s)["cssContentSize"]
        shot = b.send(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True,
             "clip": {"x": 0, "y": 0, "width": 1280, "height": size["height"], "scale": 1}},
            session=s,
        )  # fmt: skip
        png.write_bytes(base64.b64decode(shot["data"]))
        errors = []
        for ev in b.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                errors.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                errors.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        requests = [
            ev["params"]["request"]["url"]
            for ev in b.events
            if ev.get("method") == "Network.requestWillBeSent"
            and not ev["params"]["request"]["url"].startswith(("file:", "data:", "about:"))
        ]
    found |= {"errors": errors, "requests": requests, "height": size["height"]}
    return found


# --- stores: the session's shared landings; what a module writes into them it deletes afterwards


@pytest.fixture(scope="module")
def storm(land: Callable[..., Landed]) -> Iterator[Landed]:
    """A simulated PFC storm with the detectors' findings written (and removed after the module)."""
    run = land("pfc_storm")
    with run.open() as store:
        result = analyze(store, run.window)
    assert any(f.kind == "pfc_storm" for f in result.findings)
    yield run
    with run.open() as store:
        store.command("DELETE FROM findings WHERE run_id = {r:String}", {"r": result.run_id})


SYNTHETIC_JOB = "synthetic/report-test"
SYNTHETIC_RUN = "synthetic-report-test"


def synthetic_findings(at: dt.datetime) -> list[Finding]:
    """SYNTHETIC findings (not from a detector) shaped like the polarization, pfc_deadlock and incast
    detectors' evidence, on the pfc_deadlock scenario's topology (leaf-r0-01/02, leaf-r1-01/02 with four
    uplinks each, spine-01/02, gpu-001..016); plus an incast whose evidence lacks `senders`, whose fan-in
    must be skipped with a note."""
    end = at + dt.timedelta(seconds=30)
    common: dict[str, Any] = {"start": at, "end": end, "job_ids": (SYNTHETIC_JOB,), "detector": "synthetic-test"}
    cycle = [  # (paused, asserter): each port held paused by the port facing it
        ("leaf-r0-01:Ethernet32", "spine-01:Ethernet0"),
        ("spine-01:Ethernet8", "leaf-r0-02:Ethernet32"),
        ("leaf-r0-02:Ethernet36", "spine-02:Ethernet8"),
        ("spine-02:Ethernet0", "leaf-r0-01:Ethernet36"),
    ]
    senders = [f"gpu-{i:03d}:eth0" for i in range(9, 16)]
    return [
        Finding(
            kind="polarization", severity="critical", devices=("spine-01", "leaf-r0-01", "leaf-r1-01"),
            ports=("spine-01:Ethernet0", "spine-01:Ethernet8"), priority=-1, score=900.0,
            summary="SYNTHETIC ECMP polarization at spine-01",
            evidence={"hot_ports": ["spine-01:Ethernet0", "spine-01:Ethernet8"], "spines": [], "first_tier": []},
            **common,
        ),
        Finding(
            kind="pfc_deadlock", severity="critical", devices=("leaf-r0-01", "spine-01", "leaf-r0-02", "spine-02"),
            ports=tuple(p for p, _ in cycle), priority=3, score=800.0,
            summary="SYNTHETIC PFC deadlock leaf-r0-01 -> spine-01 -> leaf-r0-02 -> spine-02",
            evidence={
                "cycle": [{"paused": p, "asserter": a, "start": at, "end": end, "paused_fraction": 1.0}
                          for p, a in cycle],
                "victims": [{"paused": "gpu-003:eth0", "asserter": "leaf-r0-01:Ethernet8"}],
            },
            **common,
        ),
        Finding(
            kind="incast", severity="warning", devices=("gpu-016", "leaf-r0-02"),
            ports=("gpu-016:eth0", *senders), priority=3, score=700.0,
            summary="SYNTHETIC 7-to-1 incast to gpu-016:eth0",
            evidence={
                "receiver": "gpu-016:eth0", "fan_in": len(senders),
                "senders": [{"nic": s, "port": "?", "cnp_handled_per_s": 100.0 * (i + 1)}
                            for i, s in enumerate(senders)],
            },
            **common,
        ),
        Finding(
            kind="incast", severity="info", devices=("gpu-015",), ports=("gpu-015:eth0",), priority=3,
            score=1.0, summary="SYNTHETIC incast whose evidence has no senders", evidence={"receiver": "gpu-015:eth0"},
            **common,
        ),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def synthetic(land: Callable[..., Landed]) -> Iterator[Landed]:
    """The pfc_deadlock landing (real traffic on its leaf uplinks) with SYNTHETIC findings of job
    SYNTHETIC_JOB added for the module; the tests ask for that job only, so real findings other tests may
    have written there do not matter."""
    run = land("pfc_deadlock")
    with run.open() as store:
        store.insert("findings", findings_arrow(synthetic_findings(run.at(60)), SYNTHETIC_RUN))
    yield run
    with run.open() as store:
        store.command("DELETE FROM findings WHERE run_id = {r:String}", {"r": SYNTHETIC_RUN})


def _since(run: Landed) -> dt.datetime:
    return run.summary.start - dt.timedelta(minutes=5)


# --- tests


@needs_chromium
def test_storm_report_renders_offline_with_every_plot(storm: Landed, tmp_path: Path) -> None:
    with storm.open() as store:
        report = build_report(store, since=_since(storm))
    (case,) = report.cases
    assert case.row["kind"] == "pfc_storm"
    assert [p.name for p in case.plots if p.drawn] == ["timeline", "pause_tree"]
    page = tmp_path / "report.html"
    page.write_text(report.html)
    assert "<script" not in report.html and "http://" not in report.html.replace("http://www.w3.org", "")
    assert len(report.html) < 1_000_000, "one case should be far below a megabyte"

    seen = render(page, tmp_path / "report.png")
    assert seen["errors"] == [] and seen["requests"] == [] and seen["scripts"] == 0
    assert seen["resources"] == []  # nothing fetched: the page is self-contained
    assert [p["name"] for p in seen["plots"]] == [p.name for p in report.plots]
    assert seen["svgs"] == count_svgs(report.html) == len(report.plots)
    assert all(p["w"] > 400 and p["h"] > 150 for p in seen["plots"]), seen["plots"]
    assert seen["skipped"] == [p.name for p in report.skipped]
    assert seen["cases"] == 1
    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    print(f"screenshot: {tmp_path / 'report.png'}")


@needs_chromium
def test_synthetic_polarization_deadlock_and_incast_plots(synthetic: Landed, tmp_path: Path) -> None:
    with synthetic.open() as store:
        report = build_report(store, job=SYNTHETIC_JOB, since=_since(synthetic))
    by_kind: dict[str, list[str]] = {}
    for c in report.cases:
        by_kind.setdefault(c.row["kind"], []).extend(p.name for p in c.plots if p.drawn)
    assert by_kind["polarization"] == ["timeline", "uplinks"]
    assert by_kind["pfc_deadlock"] == ["timeline", "deadlock_cycle"]
    assert by_kind["incast"] == ["timeline", "fan_in", "timeline"]  # the second one has no senders
    (no_senders,) = [p for p in report.skipped if p.name == "fan_in"]
    assert "senders" in no_senders.note
    assert [p.name for p in report.overview if p.drawn] == ["uplinks"]  # the busiest leaves' uplinks
    assert [c.row["kind"] for c in report.cases] == ["polarization", "pfc_deadlock", "incast", "incast"]

    page = tmp_path / "report.html"
    page.write_text(report.html)
    seen = render(page, tmp_path / "report.png")
    assert seen["errors"] == [] and seen["requests"] == [] and seen["resources"] == []
    assert seen["svgs"] == len(report.plots) == 8
    assert sorted(p["name"] for p in seen["plots"]) == sorted(p.name for p in report.plots)
    assert all(p["w"] > 400 and p["h"] > 80 for p in seen["plots"]), seen["plots"]
    assert seen["skipped"] == ["fan_in"]
    assert seen["cases"] == len(report.cases) == 4
    print(f"screenshot: {tmp_path / 'report.png'}")


def test_job_and_finding_filters(synthetic: Landed, tmp_path: Path) -> None:
    with synthetic.open() as store:
        every = build_report(store, since=_since(synthetic))
        mine = build_report(store, job=SYNTHETIC_JOB, since=_since(synthetic))
        nobody = build_report(store, job="no/such-job", since=_since(synthetic))
        first = build_report(store, job=SYNTHETIC_JOB, since=_since(synthetic), max_cases=1)
        deadlock = next(c for c in mine.cases if c.row["kind"] == "pfc_deadlock")
        one = build_report(store, since=_since(synthetic), finding=deadlock.id[:6])
        out = write_report(store, tmp_path / "sub" / "r.html", job=SYNTHETIC_JOB, since=_since(synthetic))
        with pytest.raises(Exception, match="no finding with id"):
            build_report(store, since=_since(synthetic), finding="zzzz")
    assert {r["kind"] for r in mine.rows} == {"polarization", "pfc_deadlock", "incast"}
    assert nobody.rows == [] and "No findings for job no/such-job" in nobody.html
    assert len(first.cases) == 1 and first.not_drawn == 3 and "3 less severe finding(s)" in first.html
    assert [c.id for c in one.cases] == [deadlock.id] and one.overview == []
    assert out.read_text().startswith("<!DOCTYPE html>") and SYNTHETIC_JOB in out.read_text()
    assert f'href="#case-{deadlock.id}"' in every.html and f'id="case-{deadlock.id}"' in every.html


def test_cli_report_writes_the_page(storm: Landed, tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {storm.path}\n  database: {storm.database}\n  ttl_days: 0\n")
    out = tmp_path / "cli.html"
    since = _since(storm).isoformat()
    result = CliRunner().invoke(app, ["--config", str(cfg), "report", "--from", since, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 finding(s), 1 case(s), 3 plot(s)" in " ".join(result.output.split())
    page = out.read_text()
    assert count_svgs(page) == 3 and "pfc_storm" in page  # timeline, pause tree; who hurt whom (the jobs' side)
    assert 'data-plot="blame"' in page
    fid = re.search(r'id="case-([0-9a-f]{8})"', page)
    assert fid is not None
    bad = CliRunner().invoke(
        app, ["--config", str(cfg), "report", "--from", since, "--finding", "nope", "--out", str(out)]
    )
    assert bad.exit_code == 1 and "no finding with id" in " ".join(bad.output.split())


def test_empty_store_window_still_gives_a_page(storm: Landed) -> None:
    with storm.open() as store:
        report = build_report(store, since=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    assert report.rows == [] and report.cases == [] and "No findings" in report.html
