"""The dashboards, proven without a Grafana: they validate against Grafana's own dashboard schema, and every
panel's SQL, expanded the way Grafana and the ClickHouse plugin expand it, runs against a store the demo
filled and returns rows.

The schema comes from the npm package `@grafana/schema` (its TypeScript `Dashboard` type, turned into JSON
Schema by ts-json-schema-generator): `scripts/grafana-schema` builds it into `.cache/grafana-schema/` when it
is missing (node, npm and the npm registry are needed, as in CI).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.config import Settings, StoreConfig
from rocescope.dashboards import build as dash_build
from rocescope.dashboards import grafana as gr
from rocescope.dashboards import queries as q
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.run import RunSummary, run_scenario
from rocescope.sim.scenario import load_scenario

from grafana_macros import Request, expand, replace_variables

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ROCESCOPE_GRAFANA_SCHEMA_CACHE", ROOT / ".cache" / "grafana-schema"))
DASHBOARDS = dash_build.build_dashboards()

#: Panels allowed to come back empty on the short demo, and why.
ALLOWED_EMPTY: dict[str, set[str]] = {
    # needs two findings naming one port; the demo's incidents touch disjoint ports
    "incident": {"Other findings on the same ports"},
}

MALICIOUS = [
    "\\' OR 1=1 --",  # breaks out of Grafana's `singlequote` (it escapes the quote, not the backslash)
    "x\\",  # a trailing backslash would swallow the closing quote
    "'; DROP TABLE findings; --",
    "' UNION SELECT name FROM system.tables --",
    "a'b\"c`d{e}f,g\n\t%27%5C",
    "ünïcödé ☃",
]


# --- the schema


@pytest.fixture(scope="module")
def grafana_schema() -> dict[str, Any]:
    path = CACHE / "dashboard.schema.json"
    if not path.exists():
        subprocess.run([str(ROOT / "scripts" / "grafana-schema"), str(CACHE)], check=True, timeout=600)
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


def test_schema_version_is_the_packages_current_one(grafana_schema: dict[str, Any]) -> None:
    """`modernize` stamps the schemaVersion of the @grafana/schema we validate against."""
    gen = CACHE / "node_modules/@grafana/schema/dist/esm/raw/dashboard/x/types.gen.mjs"
    found = re.search(r"schemaVersion:\s*(\d+)", gen.read_text())
    assert found is not None
    assert int(found.group(1)) == gr.SCHEMA_VERSION
    assert {d["schemaVersion"] for d in DASHBOARDS.values()} == {gr.SCHEMA_VERSION}


def test_required_dashboards_exist() -> None:
    assert set(DASHBOARDS) >= {"fabric_overview", "training_job", "port_drilldown", "incident"}
    assert len({d["uid"] for d in DASHBOARDS.values()}) == len(DASHBOARDS)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_validates_against_grafana_schema(name: str, grafana_schema: dict[str, Any]) -> None:
    validator = jsonschema.Draft7Validator(grafana_schema)
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(DASHBOARDS[name])]
    assert errors == []


def test_schema_catches_what_grafanalib_writes(grafana_schema: dict[str, Any]) -> None:
    """The check has teeth: grafanalib's raw output (before `modernize`) does not validate."""
    validator = jsonschema.Draft7Validator(grafana_schema)
    raw = json.loads(json.dumps(_raw_grafanalib()))
    assert list(validator.iter_errors(raw))


def _raw_grafanalib() -> Any:
    from grafanalib import core as g
    from grafanalib._gen import DashboardEncoder

    built = g.Dashboard(title="raw", panels=[gr.timeseries("t", "SELECT 1")]).auto_panel_ids()
    return json.loads(json.dumps(built.to_json_data(), cls=DashboardEncoder))


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_current_model(name: str) -> None:
    """Datasources are `{type, uid}` of the ClickHouse plugin everywhere, nothing is null, findings annotate."""
    model = DASHBOARDS[name]
    refs = list(_find_key(model, "datasource"))
    assert refs and all(r == gr.DATASOURCE for r in refs)
    assert not list(_nulls(model))
    annotations = model["annotations"]["list"]
    assert [a["name"] for a in annotations] == ["Findings"]
    assert "FROM findings" in annotations[0]["target"]["rawSql"]


def _find_key(value: Any, key: str) -> Iterator[Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                yield v
            yield from _find_key(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from _find_key(v, key)


def _nulls(value: Any, path: str = "") -> Iterator[str]:
    if value is None:
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _nulls(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nulls(v, f"{path}[{i}]")


# --- the SQL: how it is written


def _queries(model: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(what, sql) for every panel target, the annotations and the variables."""
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["rawSql"]
    for ann in model["annotations"]["list"]:
        yield f"annotation {ann['name']}", ann["target"]["rawSql"]
    for var in model["templating"]["list"]:
        yield f"variable {var['name']}", var["query"]["rawSql"]


def test_variables_reach_sql_only_percent_encoded() -> None:
    """Every variable reference is `${name:percentencode}` inside decodeURLComponent('...')."""
    ref = re.compile(r"\$\{?(?!__)(\w+)(?::(\w+))?\}?")
    for name, model in DASHBOARDS.items():
        declared = {v["name"] for v in model["templating"]["list"]}
        for what, sql in _queries(model):
            for m in ref.finditer(sql):
                assert m.group(1) in declared, f"{name} / {what}: unknown variable {m.group(0)}"
                assert m.group(2) == "percentencode", f"{name} / {what}: {m.group(0)}"
                assert sql[: m.start()].endswith("decodeURLComponent('"), f"{name} / {what}"


def test_time_goes_through_plugin_macros() -> None:
    """Time-series panels are scoped by the plugin's time macros, not a hard-coded window."""
    for model in DASHBOARDS.values():
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                if target["queryType"] == "timeseries":
                    sql = target["rawSql"]
                    assert "$__timeFilter(" in sql or ("$__fromTime" in sql and "$__toTime" in sql), panel["title"]


def test_names_come_from_the_catalog_and_schema() -> None:
    with pytest.raises(KeyError):
        q.metric("no_such_metric")
    with pytest.raises(KeyError):
        q.col("findings", "no_such_column")
    quoted = re.compile(r"metric (?:=|IN \()\s*((?:'\w+'(?:,\s*)?)+)")
    from rocescope.catalog import METRICS_BY_NAME

    seen = set()
    for model in DASHBOARDS.values():
        for _, sql in _queries(model):
            for m in quoted.finditer(sql):
                seen |= set(re.findall(r"'(\w+)'", m.group(1)))
    assert seen and seen <= set(METRICS_BY_NAME)


# --- build output and the CLI


def test_build_all_writes_dashboards_and_provisioning(tmp_path: Path) -> None:
    cfg = StoreConfig(backend="clickhouse", url="https://ch.example:9443", user="grafana", password="s3cret-pw")
    written = dash_build.build_all(tmp_path / "out", cfg)
    names = {p.relative_to(tmp_path / "out").as_posix() for p in written}
    assert names == {f"dashboards/{n}.json" for n in DASHBOARDS} | {
        "provisioning/datasources/rocescope.yaml",
        "provisioning/dashboards/rocescope.yaml",
    }
    for path in written:
        assert "s3cret-pw" not in path.read_text()
    ds = yaml.safe_load((tmp_path / "out/provisioning/datasources/rocescope.yaml").read_text())["datasources"][0]
    assert ds["type"] == "grafana-clickhouse-datasource" and ds["uid"] == gr.DS_UID
    assert (
        ds["jsonData"].items()
        >= {
            "host": "ch.example",
            "port": 9443,
            "protocol": "http",
            "secure": True,
            "username": "grafana",
            "defaultDatabase": "rocescope",
        }.items()
    )
    assert ds["secureJsonData"] == {"password": "${ROCESCOPE_STORE__PASSWORD}"}
    provider = yaml.safe_load((tmp_path / "out/provisioning/dashboards/rocescope.yaml").read_text())["providers"][0]
    assert Path(provider["options"]["path"]) == (tmp_path / "out/dashboards").resolve()
    assert json.loads((tmp_path / "out/dashboards/incident.json").read_text()) == DASHBOARDS["incident"]


def test_cli_dashboards_build(tmp_path: Path) -> None:
    from rocescope.cli import app

    result = CliRunner().invoke(app, ["dashboards", "build", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "dashboards" / "fabric_overview.json").exists()
    assert (tmp_path / "provisioning" / "datasources" / "rocescope.yaml").exists()


def test_dashboard_files_are_package_data() -> None:
    """The `<name>.dashboard.py` files ship with the package (they are loaded from it, not from the tree)."""
    files = dash_build.dashboard_files()
    assert {p.name for p in files} >= {f"{n}{dash_build.SUFFIX}" for n in DASHBOARDS}
    text = (ROOT / "pyproject.toml").read_text()
    assert '"rocescope.dashboards" = ["*.dashboard.py"]' in text


# --- the SQL: it runs, against the demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChdbStore, RunSummary]]:
    """The demo fabric and jobs with its four incidents packed into 150 s, landed and analyzed."""
    root = tmp_path_factory.mktemp("dash-demo")
    sc = load_scenario("demo")
    at = {"incast": (15, 45), "pfc_storm": (55, 85), "microburst": (95, 115), "link_flap": (120, 145)}
    incidents = [i.model_copy(update=dict(zip(("start", "end"), at[i.kind], strict=True))) for i in sc.incidents]
    sc = sc.model_copy(update={"incidents": incidents, "duration": 150.0})
    summary = run_scenario(
        Settings(store=StoreConfig(path=root, database="dash", ttl_days=0)), sc, counterfactuals=False
    )
    with ChdbStore(root, "dash") as store:
        analyze(store, Window(summary.start, summary.end))
        yield store, summary


def _rows(store: ChdbStore, sql: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = store.query_arrow(sql).to_pylist()
    return rows


def _samples(store: ChdbStore, summary: RunSummary, name: str) -> list[Request]:
    """Variable values chosen from the store the way a user would pick them, checked against the options
    the dashboard's own variable queries return."""
    base = Request(summary.start, summary.end)
    storm = _rows(store, "SELECT job_ids, ports FROM findings WHERE kind = 'pfc_storm' LIMIT 1")
    assert storm, "the demo's PFC storm was not found: the dashboards have no finding to show"
    job, (nic_port, leaf_port) = storm[0]["job_ids"][0], storm[0]["ports"][:2]
    choices: dict[str, list[dict[str, Any]]] = {
        "fabric_overview": [{}],
        "training_job": [{"job": job}],
        "port_drilldown": [
            {"device": leaf_port.split(":")[0], "port": leaf_port.split(":")[1], "priority": ["3"]},
            {"device": nic_port.split(":")[0], "port": nic_port.split(":")[1], "priority": ["0", "3"]},
        ],
        "incident": [{"finding": "pfc_storm"}],
    }
    requests = []
    for chosen in choices[name]:
        values: dict[str, Any] = {}
        for var in DASHBOARDS[name]["templating"]["list"]:
            sql = expand(var["query"]["rawSql"], Request(base.start, base.end, variables=values))
            options = [next(iter(r.values())) for r in _rows(store, sql)]
            labels = [list(r.values())[-1] for r in _rows(store, sql)]
            want = chosen[var["name"]]
            if var["name"] == "finding":  # pick by label: the id is a hash
                want = options[next(i for i, label in enumerate(labels) if str(label).startswith(want))]
            for v in want if isinstance(want, list) else [want]:
                assert v in [str(o) for o in options], f"{var['name']}={v!r} is not among {options[:10]}"
            values[var["name"]] = want
        requests.append(Request(base.start, base.end, 5, values))
    return requests


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_returns_rows_on_the_demo(name: str, demo: tuple[ChdbStore, RunSummary]) -> None:
    store, summary = demo
    requests = _samples(store, summary, name)
    empty = []
    for what, sql in _queries(DASHBOARDS[name]):
        counts = [len(_rows(store, expand(sql, req))) for req in requests]
        if not any(counts):
            empty.append(what)
    assert set(empty) <= ALLOWED_EMPTY.get(name, set()), f"empty on the demo: {empty}"


def test_timeseries_panels_are_shaped_for_grafana(demo: tuple[ChdbStore, RunSummary]) -> None:
    """Time series queries return (time, series, value): the plugin turns them into one field per series."""
    store, summary = demo
    req = _samples(store, summary, "port_drilldown")[0]
    for panel in DASHBOARDS["port_drilldown"]["panels"]:
        target = panel["targets"][0]
        if target["queryType"] != "timeseries":
            continue
        sql = expand(target["rawSql"], req)
        assert store.query_arrow(sql).column_names == ["time", "series", "value"], panel["title"]
        shape = _rows(
            store,
            f"SELECT toTypeName(time) AS type, min(time) AS first, max(time) AS last, "
            f"arraySort(groupArray(time)) = groupArray(time) AS ordered FROM ({sql}) GROUP BY type",
        )
        for row in shape:
            assert row["type"].startswith("DateTime") and row["ordered"], panel["title"]
            assert (
                req.start - dt.timedelta(seconds=req.interval_s) <= _utc(row["first"]) <= _utc(row["last"]) <= req.end
            )


def _utc(value: Any) -> dt.datetime:
    """chdb's Arrow output gives DateTime as epoch seconds."""
    return value if isinstance(value, dt.datetime) else dt.datetime.fromtimestamp(value, dt.UTC)


@pytest.mark.parametrize("value", MALICIOUS)
def test_malicious_variable_values_stay_string_literals(value: str, demo: tuple[ChdbStore, RunSummary]) -> None:
    store, summary = demo
    window = (summary.start, summary.end)
    # the value comes back intact from the literal it was put in
    literal = replace_variables(q.text_var("v"), {"v": value})
    assert _rows(store, f"SELECT {literal} AS v") == [{"v": value}]
    as_list = replace_variables(q.list_var("v"), {"v": [value.replace(",", ";"), "other"]})
    assert _rows(store, f"SELECT {as_list} AS v") == [{"v": [value.replace(",", ";"), "other"]}]
    # and in every query of every dashboard it only ever is a value that matches nothing
    for model in DASHBOARDS.values():
        variables: dict[str, Any] = {v["name"]: value for v in model["templating"]["list"]}
        if "priority" in variables:
            variables["priority"] = [value]
        for what, sql in _queries(model):
            if not variables:
                continue
            expanded = expand(sql, Request(*window, 5, variables))
            store.query_arrow(f"EXPLAIN SYNTAX {expanded}")  # parses: nothing was cut open
            if what == "Findings":  # training job: count of the job's findings
                assert _rows(store, expanded) == [{"findings": 0}], what


def test_singlequote_would_not_be_safe(demo: tuple[ChdbStore, RunSummary]) -> None:
    """Why the dashboards do not use `${var:singlequote}`: ClickHouse reads the backslash as an escape."""
    store, _ = demo
    sql = replace_variables(
        "SELECT count() AS n FROM endpoints WHERE job_id = ${job:singlequote}", {"job": MALICIOUS[0]}
    )
    assert _rows(store, sql)[0]["n"] == _rows(store, "SELECT count() AS n FROM endpoints")[0]["n"] > 0
