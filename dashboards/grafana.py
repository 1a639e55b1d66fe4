"""Building blocks for the dashboards: grafanalib panels wired to the ClickHouse plugin, and `modernize`.

grafanalib writes the dashboard model of Grafana 6-8 (schemaVersion 12, nulls everywhere, `rows`, `span`,
Prometheus-shaped targets), which current Grafana migrates on load but its published schema rejects.
`modernize` is the one place that turns grafanalib's output into the current model (schemaVersion of
`@grafana/schema`, datasource refs `{type, uid}`, no nulls, no legacy keys); the tests validate the result
against the JSON Schema generated from `@grafana/schema`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import attr
from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from rocescope.dashboards import queries as q

#: The official ClickHouse plugin, and the uid the provisioned datasource gets.
DS_TYPE = "grafana-clickhouse-datasource"
DS_UID = "rocescope-clickhouse"
DATASOURCE: dict[str, str] = {"type": DS_TYPE, "uid": DS_UID}
#: `defaultDashboard.schemaVersion` of `@grafana/schema` (the tests check it against the npm package).
SCHEMA_VERSION = 42
#: Grafana's grid is 24 columns wide.
GRID_WIDTH = 24

# Keys grafanalib writes that the current dashboard model no longer has (Grafana migrates them away).
_LEGACY_DASHBOARD_KEYS = frozenset({"__inputs", "hideControls", "rows", "sharedCrosshair", "style"})
_LEGACY_PANEL_KEYS = frozenset(
    {"editable", "error", "height", "minSpan", "span", "thresholds", "color", "columns", "fontSize", "mappings"}
)
_LEGACY_VARIABLE_KEYS = frozenset({"useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min", "auto_count"})
_LEGACY_TIMEPICKER_KEYS = frozenset({"time_options", "hidden", "nowDelay"})

QueryType = Literal["timeseries", "table"]
#: Queries return (time, series, value); the plugin makes `series` a label: name each line after it.
SERIES_NAME = "${__field.labels.series}"


@dataclass(frozen=True)
class CHTarget:
    """One query of the ClickHouse plugin in SQL-editor mode (`format` 0 = time series, 1 = table)."""

    sql: str
    kind: QueryType = "timeseries"
    ref_id: str = "A"

    def to_json_data(self) -> dict[str, Any]:
        return {
            "refId": self.ref_id,
            "datasource": DATASOURCE,
            "editorType": "sql",
            "queryType": self.kind,
            "format": 0 if self.kind == "timeseries" else 1,
            "rawSql": self.sql,
        }


@attr.s
class Viz(g.Panel):  # type: ignore[misc]  # grafanalib is untyped
    """A current panel type grafanalib does not model (or models in its legacy form): heatmap, state-timeline."""

    type: str = attr.ib(default="heatmap")
    options: dict[str, Any] = attr.ib(factory=dict)
    defaults: dict[str, Any] = attr.ib(factory=dict)

    def to_json_data(self) -> dict[str, Any]:
        data: dict[str, Any] = self.panel_json(
            {
                "type": self.type,
                "options": self.options,
                "fieldConfig": {"defaults": {"displayName": SERIES_NAME, **self.defaults}, "overrides": []},
            }
        )
        return data


#: Viz with grafanalib's Panel fields (title, targets...): mypy's attrs plugin cannot see through the untyped base.
_Viz: Any = Viz


@dataclass
class Layout:
    """Places panels left to right, wrapping at the grid width, so dashboards list panels instead of coordinates."""

    x: int = 0
    y: int = 0
    row_h: int = 0
    panels: list[Any] = field(default_factory=list)

    def add(self, panel: Any, w: int, h: int = 8) -> None:
        if self.x + w > GRID_WIDTH:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.panels.append(attr.evolve(panel, gridPos=g.GridPos(h=h, w=w, x=self.x, y=self.y)))
        self.x += w
        self.row_h = max(self.row_h, h)


def timeseries(
    title: str, sql: str, unit: str = "short", description: str = "", bars: bool = False, stack: bool = False
) -> Any:
    """A time series panel over one SQL query returning (time, series, value) rows."""
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[CHTarget(sql)],
        unit=unit,
        drawStyle="bars" if bars else "line",
        fillOpacity=60 if bars else 10,
        stacking={"mode": "normal", "group": "A"} if stack else {"mode": "none", "group": "A"},
        legendDisplayMode="table",
        legendPlacement="right",
        legendCalcs=["max", "mean"],
        tooltipMode="multi",
        tooltipSort="desc",
        extraJson={"fieldConfig": {"defaults": {"displayName": SERIES_NAME}}},
    )


def table(title: str, sql: str, description: str = "") -> Any:
    """A table panel over one SQL query."""
    return g.Table(
        title=title, description=description, dataSource=DATASOURCE, targets=[CHTarget(sql, "table")], filterable=True
    )


def stat(title: str, sql: str, unit: str = "short", description: str = "") -> Any:
    """A stat panel over one SQL query returning one row."""
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[CHTarget(sql, "table")],
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="none",
    )


def heatmap(title: str, sql: str, unit: str, description: str = "") -> Any:
    """A heatmap whose rows are the series of a (time, series, value) query (buckets computed in SQL)."""
    return _Viz(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[CHTarget(sql)],
        type="heatmap",
        options={
            "calculate": False,
            "cellGap": 1,
            "color": {
                "mode": "scheme",
                "scheme": "Oranges",
                "scale": "exponential",
                "exponent": 0.5,
                "fill": "dark-orange",
            },
            "yAxis": {"axisPlacement": "left", "unit": ""},
            "rowsFrame": {"layout": "auto"},
            "cellValues": {"unit": unit},
            "tooltip": {"mode": "single", "yHistogram": False},
            "legend": {"show": True},
        },
    )


def state_timeline(title: str, sql: str, description: str = "", mappings: Sequence[dict[str, Any]] = ()) -> Any:
    """A state timeline over a (time, series, value) query: link state, findings per kind."""
    return _Viz(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[CHTarget(sql)],
        type="state-timeline",
        options={"showValue": "never", "mergeValues": True, "rowHeight": 0.9, "legend": {"showLegend": True}},
        defaults={"mappings": list(mappings), "color": {"mode": "thresholds"}},
    )


def query_var(name: str, label: str, sql: str, multi: bool = False, include_all: bool = False) -> Any:
    """A template variable whose options come from SQL (first column value, optional second the label)."""
    return g.Template(
        name=name,
        label=label,
        query={"refId": f"var-{name}", "queryType": "sql", "rawSql": sql},
        dataSource=DATASOURCE,
        type="query",
        multi=multi,
        includeAll=include_all,
        refresh=2,  # on time range change: options follow the data
        sort=1,
    )


def findings_annotation(where: str = "1") -> dict[str, Any]:
    """The findings table as annotations (a region per finding, tagged with kind, severity and jobs)."""
    return {
        "name": "Findings",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "red",
        "target": CHTarget(q.annotation_sql(where), "table", "Anno").to_json_data(),
    }


def dashboard(
    title: str,
    uid: str,
    layout: Layout,
    variables: Sequence[Any] = (),
    annotation_where: str = "1",
    description: str = "",
    time_from: str = "now-15m",
) -> dict[str, Any]:
    """A complete dashboard as current Grafana JSON (see `modernize`)."""
    built = g.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=["rocescope"],
        panels=layout.panels,
        templating=g.Templating(list=list(variables)),
        annotations=g.Annotations(list=[findings_annotation(annotation_where)]),
        time=g.Time(time_from, "now"),
        timezone="utc",
        refresh="1m",
        graphTooltip=1,
    ).auto_panel_ids()
    return modernize(built)


def modernize(built: Any) -> dict[str, Any]:
    """grafanalib's dashboard as the current model: the one place that bridges the two (see the module doc)."""
    data: dict[str, Any] = _drop_nulls(json.loads(json.dumps(built.to_json_data(), cls=DashboardEncoder)))
    for key in _LEGACY_DASHBOARD_KEYS:
        data.pop(key, None)
    data["schemaVersion"] = SCHEMA_VERSION
    for key in _LEGACY_TIMEPICKER_KEYS:
        data.get("timepicker", {}).pop(key, None)
    for panel in data.get("panels", []):
        for key in _LEGACY_PANEL_KEYS:
            panel.pop(key, None)
        if panel.get("repeatDirection") and not panel.get("repeat"):
            panel.pop("repeatDirection")
        panel.pop("maxPerRow", None)
        thresholds = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds")
        if thresholds is not None and not isinstance(thresholds.get("steps"), list):
            thresholds["steps"] = []  # grafanalib's Stat writes "" here
    for var in data.get("templating", {}).get("list", []):
        for key in _LEGACY_VARIABLE_KEYS:
            var.pop(key, None)
        var.pop("current", None)  # Grafana picks the first option; a baked-in default would go stale
        var["options"] = []
        if var.get("type") == "query":
            var["allowCustomValue"] = False  # only values the store returned can be selected
    return data


def _drop_nulls(value: Any) -> Any:
    """Remove null members: Grafana treats a missing key like null, its schema does not allow most nulls."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value if v is not None]
    return value
