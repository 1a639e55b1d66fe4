"""SQL injection: every entry point that takes a user value binds it as a query parameter.

Device names arrive in gNMI responses, job names in kubectl pod lists, and users type job, kind, time,
detector and finding values on the command line. Each hostile string below goes in through those doors
against a real embedded chdb store and must be inert: stored and matched literally, and every table
intact afterwards. `rocescope sql QUERY` runs the user's own SQL by design (it is a SQL console: the
user already holds the store's rights); only its `--param` values are checked here, which are bound
server-side. Dashboard variables have their own test: tests/dashboards/test_dashboards.py
(`decodeURLComponent('${var:percentencode}')` with hostile values, run against the store).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rocescope.analysis.findings import Finding, write_findings
from rocescope.analysis.frames import Window
from rocescope.analysis.present import load_findings
from rocescope.analysis.report.page import build_report
from rocescope.cli import app
from rocescope.collectors.gnmi.decode import GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.jobs.placement import Inventory, endpoints_batch, parse_pods
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore, Store
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import JobSpec, place_jobs
from rocescope.sim.topology import FabricSpec, Topology

#: Quotes, backslashes, statement breaks, comments, placeholders, identifiers, unicode (bidi override).
HOSTILE = [
    "'",
    "\\",
    "\\'",
    "'; DROP TABLE counters; --",
    "\\' OR 1=1 --",
    "' OR '1'='1",
    "x'); DROP TABLE findings; --",
    "{d:String}",
    "`counters`",
    "%27%20OR%201%3D1",
    "ünïcødé\u202e😀",
    '"; DROP DATABASE rocescope; --',
]
CLI_HOSTILE = ["\\' OR 1=1 --", "'; DROP TABLE counters; --", "\\", "ünïcødé\u202e😀"]
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def _counters(device: str) -> bytes:
    """A gNMI SubscribeResponse as the device `device` would send it (its name comes from the target list
    and the path; here the device name itself is the hostile value)."""
    n = pb.Notification(timestamp=int(NOW.timestamp() * 1e9), prefix=pb.Path(target="COUNTERS_DB"))
    u = n.update.add()
    u.path.CopyFrom(parse_path("COUNTERS/Ethernet0"))
    u.val.json_ietf_val = b'{"SAI_PORT_STAT_IF_IN_OCTETS": "5", "SAI_PORT_STAT_IF_OUT_OCTETS": "7"}'
    return bytes(pb.SubscribeResponse(update=n).SerializeToString())


def _tables(store: ChdbStore) -> dict[str, int]:
    rows = store.query_arrow(
        "SELECT name, total_rows FROM system.tables WHERE database = currentDatabase() AND engine LIKE '%MergeTree'"
    ).to_pylist()
    return {r["name"]: r["total_rows"] for r in rows}


@pytest.fixture
def landed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A store holding counters of hostile device names, endpoints of hostile job names (from a kubectl
    pod list) and one finding per hostile value; closed, so the CLI can open it."""
    path = tmp_path / "chdb"
    store = ChdbStore(path)
    migrate(store)
    topo = Topology(FabricSpec(hosts=2, rails=1))
    pods = pod_list_json(place_jobs(topo, [JobSpec("llama", 1)]), topo)
    findings = []
    for i, value in enumerate(HOSTILE):
        dec = GnmiDecoder(value)
        dec.feed(_counters(value))
        batch = dec.flush()
        assert batch is not None
        store.insert("counters", batch.data)
        item = json.loads(json.dumps(pods["items"][0]))
        item["metadata"]["namespace"] = "ns"
        item["metadata"]["labels"]["training.kubeflow.org/job-name"] = value
        rows, bad = parse_pods({"items": [item]}, Inventory.from_topology(topo), NOW)
        assert bad == 0 and rows
        store.insert("endpoints", endpoints_batch(rows).data)
        start = NOW - dt.timedelta(minutes=10) + dt.timedelta(seconds=i)
        findings.append(
            Finding(
                "incast", "high", start, start + dt.timedelta(seconds=5), (value,), (f"{value}:Ethernet0",), 3,
                1.0 + i, f"summary {value}", {"note": value}, (f"ns/{value}",), "incast", "1",
            )
        )  # fmt: skip
    write_findings(store, findings, Window(NOW - dt.timedelta(hours=1), NOW), "run-1")
    store.close()
    monkeypatch.setenv("ROCESCOPE_STORE__PATH", str(path))
    monkeypatch.delenv("ROCESCOPE_CONFIG", raising=False)
    yield path


def test_hostile_values_are_inert_everywhere(landed: Path, tmp_path: Path) -> None:
    with ChdbStore(landed) as store:
        before = _tables(store)
        assert before["counters"] == 2 * len(HOSTILE) and before["findings"] == len(HOSTILE)
        stored = set(store.query_arrow("SELECT DISTINCT toString(device) AS d FROM counters").column("d").to_pylist())
        assert stored == set(HOSTILE), "device names are stored literally"
        jobs = store.query_arrow("SELECT DISTINCT toString(job_id) AS j FROM endpoints").column("j").to_pylist()
        assert set(jobs) == {f"ns/{v}" for v in HOSTILE}, "job names from the pod list are stored literally"
        for value in HOSTILE:  # the analysis API: one finding each, matched literally
            assert [r["summary"] for r in load_findings(store, NOW - dt.timedelta(days=1), job=f"ns/{value}")] == [
                f"summary {value}"
            ]
            assert load_findings(store, NOW - dt.timedelta(days=1), kind=value) == []
            report = build_report(store, f"ns/{value}", NOW - dt.timedelta(days=1), None)
            assert len(report.rows) == 1

    runner = CliRunner()
    for value in CLI_HOSTILE:  # each CLI run opens and migrates the store (~0.4 s): the sharpest four
        out = runner.invoke(app, ["findings", "--job", f"ns/{value}", "--since", "24h", "--json"])
        assert out.exit_code == 0, out.output
        assert [r["summary"] for r in json.loads(out.stdout)] == [f"summary {value}"]
        out = runner.invoke(app, ["findings", "--kind", value, "--json"])
        assert out.exit_code == 0 and json.loads(out.stdout) == [], out.output
        out = runner.invoke(app, ["findings", "--since", value])
        assert out.exit_code == 1 and "not a time or duration" in out.output
        out = runner.invoke(app, ["report", "--job", f"ns/{value}", "--from", "24h", "-o", str(tmp_path / "r.html")])
        assert out.exit_code == 0 and "1 finding(s)" in out.output, out.output
        out = runner.invoke(app, ["report", "--finding", value, "-o", str(tmp_path / "r.html")])
        assert out.exit_code == 1 and "no finding with id" in out.output, out.output
        out = runner.invoke(app, ["analyze", "--detector", value, "--from", "1h", "--dry-run"])
        assert out.exit_code in (0, 1) and "Traceback" not in out.output, out.output
        query = "SELECT count() AS n FROM counters WHERE device = {d:String}"
        out = runner.invoke(app, ["sql", query, "--param", f"d={value}", "--format", "json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout.splitlines()[0])["n"] == 2, out.stdout

    with ChdbStore(landed) as store:
        assert _tables(store) == before, "every table intact, no row lost or added"


def test_bound_strings_arrive_literally(any_store: Store) -> None:
    """Both backends (chdb, and ClickHouse's HTTP interface through clickhouse-connect): a bound string
    is the value itself. Before the fix chdb read backslash-quote as a quote and refused a lone backslash
    or a tab (ClickHouse parses parameter text in its escaped format)."""
    for value in [*HOSTILE, "a\tb", "a\nb", "x\\ny", "\\\\"]:
        got = any_store.query_arrow(
            "SELECT {p:String} AS v, [{p:String}] = {a:Array(String)} AS same", {"p": value, "a": [value]}
        )
        assert got.to_pylist() == [{"v": value, "same": 1}], value
