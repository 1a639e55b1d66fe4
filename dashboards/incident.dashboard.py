"""Incident: one finding (`$finding`) and the evidence behind it, on the ports it names."""

from __future__ import annotations

from typing import Any

from rocescope.dashboards import grafana as gr
from rocescope.dashboards import queries as q

F = q.F
THE_FINDING = f"{q.FINDING_ID} = {q.text_var('finding')}"
# the finding's ports are `device:port` strings
ON_ITS_PORTS = f"concat(device, ':', port) IN (SELECT arrayJoin({q.col(F, 'ports')}) FROM {F} WHERE {THE_FINDING})"
ITS_PORT = "concat(device, ':', port)"


def build() -> dict[str, Any]:
    lay = gr.Layout()
    lay.add(
        gr.table(
            "The finding",
            f"""SELECT toString({q.col(F, "severity")}) AS severity, toString({q.col(F, "kind")}) AS kind,
    {q.col(F, "start")} AS start, {q.col(F, "end")} AS end,
    dateDiff('second', {q.col(F, "start")}, {q.col(F, "end")}) AS seconds, {q.col(F, "score")} AS score,
    {q.col(F, "job_ids")} AS jobs, {q.col(F, "devices")} AS devices, {q.col(F, "ports")} AS ports,
    {q.col(F, "priority")} AS priority, {q.col(F, "summary")} AS summary,
    concat({q.col(F, "detector")}, ' v', {q.col(F, "detector_version")}) AS detector, {q.col(F, "run_id")} AS run
FROM {F}
WHERE {THE_FINDING}""",
        ),
        w=24,
        h=5,
    )
    lay.add(
        gr.table(
            "Evidence",
            f"""SELECT kv.1 AS key, kv.2 AS value
FROM {F}
ARRAY JOIN JSONExtractKeysAndValuesRaw({q.col(F, "evidence")}) AS kv
WHERE {THE_FINDING}""",
            description="The numbers the detector based the finding on (JSON values).",
        ),
        w=24,
        h=8,
    )
    lay.add(
        gr.timeseries(
            "Time paused on its ports (% of time)",
            q.rate_series(
                ("pfc_rx_pause_duration_us", "pfc_tx_pause_duration_us"),
                ON_ITS_PORTS,
                f"concat({ITS_PORT}, ' ', metric)",
                " / 1e4",
            ),
            "percent",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Throughput on its ports (Gb/s)",
            q.rate_series(("tx_bytes", "rx_bytes"), ON_ITS_PORTS, f"concat({ITS_PORT}, ' ', metric)", " * 8 / 1e9"),
            "Gbits",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "ECN marks on its ports (packets per s)",
            q.rate_series(("queue_ecn_marked_packets", "tx_ecn_marked_packets"), ON_ITS_PORTS, ITS_PORT),
            "pps",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Queue watermarks on its ports",
            q.gauge_series(
                ("queue_watermark_bytes", "pg_watermark_bytes"), ON_ITS_PORTS, f"concat({ITS_PORT}, ' ', metric)"
            ),
            "bytes",
        ),
        w=12,
    )
    lay.add(
        gr.table(
            "Other findings on the same ports",
            f"""SELECT toString({q.col(F, "kind")}) AS kind, {q.col(F, "start")} AS start, {q.col(F, "end")} AS end,
    {q.col(F, "summary")} AS summary, {q.FINDING_ID} AS finding
FROM {F}
WHERE {q.FINDINGS_IN_RANGE} AND NOT ({THE_FINDING})
    AND hasAny({q.col(F, "ports")}, (SELECT groupArrayArray({q.col(F, "ports")}) FROM {F} WHERE {THE_FINDING}))
ORDER BY start""",
        ),
        w=24,
        h=6,
    )
    return gr.dashboard(
        "rocescope: incident",
        "rocescope-incident",
        lay,
        variables=[
            gr.query_var(
                "finding",
                "Finding",
                f"SELECT {q.FINDING_ID} AS value, "
                f"concat(toString({q.col(F, 'kind')}), ' at ', toString({q.col(F, 'start')}), ': ', "
                f"{q.col(F, 'summary')}) AS label "
                f"FROM {F} WHERE {q.FINDINGS_IN_RANGE} ORDER BY {q.col(F, 'start')} DESC",
            )
        ],
        annotation_where=THE_FINDING,
        description="One finding's summary, evidence and the counters of the ports it names.",
        time_from="now-1h",
    )
