"""Fabric overview: where the fabric hurts right now, before anyone knows which job to look at."""

from __future__ import annotations

from typing import Any

from rocescope.dashboards import grafana as gr
from rocescope.dashboards import queries as q

F = q.F
SWITCH = "role = 'switch'"
#: What the "Hottest switch ports" table reads
HOTTEST_METRICS = (
    "tx_bytes",
    "pfc_rx_pause_duration_us",
    "pfc_tx_pause_duration_us",
    "queue_ecn_marked_packets",
    "queue_dropped_packets",
    "rx_discards",
    "tx_discards",
)


def build() -> dict[str, Any]:
    lay = gr.Layout()
    lay.add(
        gr.timeseries(
            "Findings over time by kind",
            f"""SELECT $__timeInterval({q.col(F, "start")}) AS time, toString({q.col(F, "kind")}) AS series,
    count() AS value
FROM {F}
WHERE $__timeFilter({q.col(F, "start")})
GROUP BY time, series
ORDER BY time""",
            bars=True,
            stack=True,
            description="Findings by the time they started, stacked per kind.",
        ),
        w=12,
    )
    lay.add(
        gr.table(
            "Open findings, worst first",
            f"""SELECT toString({q.col(F, "severity")}) AS severity, toString({q.col(F, "kind")}) AS kind,
    {q.col(F, "start")} AS start, {q.col(F, "end")} AS end, {q.col(F, "job_ids")} AS jobs,
    {q.col(F, "summary")} AS summary, {q.FINDING_ID} AS finding
FROM {F}
WHERE {q.FINDINGS_IN_RANGE}
ORDER BY indexOf(['critical', 'warning', 'info'], severity), {q.col(F, "score")} DESC
LIMIT 100""",
            description="Open the Incident dashboard with a finding's id to see its evidence.",
        ),
        w=12,
    )
    lay.add(
        gr.table(
            "Hottest switch ports",
            f"""SELECT device, port,
    round(maxIf(rate, metric = {q.metric("tx_bytes")}) * 8 / 1e9, 2) AS max_tx_gbps,
    round(maxIf(rate, metric = {q.metric("pfc_rx_pause_duration_us")}) / 1e4, 1) AS max_paused_pct,
    round(maxIf(rate, metric = {q.metric("pfc_tx_pause_duration_us")}) / 1e4, 1) AS max_pausing_peer_pct,
    round(maxIf(rate, metric = {q.metric("queue_ecn_marked_packets")})) AS max_ecn_marks_per_s,
    sumIf({q.DELTA}, metric IN ({q.metrics("queue_dropped_packets", "rx_discards", "tx_discards")})) AS drops
FROM {q.port_rates(*HOTTEST_METRICS)}
WHERE $__timeFilter(ts) AND {SWITCH}
GROUP BY device, port
ORDER BY max_pausing_peer_pct + max_paused_pct DESC, max_tx_gbps DESC
LIMIT 15""",
            description="Busiest and most paused switch ports; paused % = share of time the port's transmit "
            "was held by PFC (max over one sample interval).",
        ),
        w=24,
    )
    lay.add(
        gr.heatmap(
            "PFC pause sent, by switch (ms of pause per s, all ports)",
            q.rate_series(("pfc_tx_pause_duration_us",), SWITCH, "device", " / 1e3"),
            "ms",
            description="Time the switch's PFC frames held its peers paused; a hot row is backpressure at its source.",
        ),
        w=12,
        h=9,
    )
    lay.add(
        gr.heatmap(
            "ECN marks, by switch (packets per s)",
            q.rate_series(("queue_ecn_marked_packets", "tx_ecn_marked_packets"), SWITCH, "device"),
            "pps",
            description="Packets CE-marked by each switch: congestion that DCQCN is reacting to.",
        ),
        w=12,
        h=9,
    )
    uplink_rates = f"""SELECT $__timeInterval(ts) AS time, device, port, {q.per_second()} * 8 / 1e9 AS gbps
    FROM {q.port_rates("tx_bytes")}
    WHERE $__timeFilter(ts) AND (device, port) IN ({q.UPLINKS})
    GROUP BY time, device, port"""
    lay.add(
        gr.timeseries(
            "Leaf uplink balance (busiest / mean uplink, 1 = balanced)",
            f"""SELECT time, device AS series, max(gbps) / greatest(avg(gbps), 1e-9) AS value
FROM ({uplink_rates})
GROUP BY time, series
ORDER BY time""",
            description="Per leaf, the busiest uplink's rate over the mean of its uplinks: ECMP polarization shows "
            "as a leaf far above 1.",
        ),
        w=12,
    )
    lay.add(
        gr.table(
            "Leaf uplinks: share of the leaf's upstream traffic",
            f"""SELECT device AS leaf, port AS uplink, round(avg(gbps), 2) AS avg_gbps,
    round(100 * sum(gbps) / sum(sum(gbps)) OVER (PARTITION BY device), 1) AS share_pct
FROM ({uplink_rates})
GROUP BY device, port
ORDER BY leaf, uplink""",
            description="With N uplinks a balanced leaf gives each 100/N %.",
        ),
        w=12,
    )
    lay.add(
        gr.table(
            "Coverage: what each switch lets the detectors judge",
            f"""SELECT {q.col(q.C1M, "device")} AS switch,
    uniqExactIf(port, metric = {q.metric("tx_bytes")}) AS ports,
    uniqExactIf(port, metric = {q.metric("pfc_rx_pause_duration_us")}) AS pause_duration,
    uniqExactIf(port, metric = {q.metric("pfc_rx_pause")}) AS pause_frames,
    uniqExactIf(port, metric = {q.metric("pfc_rx_pause_total")}) AS pfc_per_interface_only,
    uniqExactIf(port, metric = {q.metric("port_speed_bps")}) AS speed_reported,
    round(60 / greatest(maxIf(samples, metric = {q.metric("queue_watermark_bytes")}), 1)) AS watermark_every_s,
    round(60 / greatest(maxIf(samples, metric = {q.metric("queue_ecn_marked_packets")}), 1)) AS ecn_every_s
FROM {q.C1M}
WHERE $__timeFilter({q.col(q.C1M, "minute")}) AND {q.col(q.C1M, "role")} = 'switch'
GROUP BY switch
ORDER BY pause_duration + pause_frames + pfc_per_interface_only, switch""",
            description="Ports whose switch counts no PFC pause cannot be judged for storms (per interface only: "
            "the priority is assumed); without a reported speed it is inferred; queue watermarks read less often than "
            "every 10 s or ECN marks less often than every second cannot place bursts under a second. "
            "`rocescope coverage` says it per port, job and finding kind.",
        ),
        w=24,
    )
    return gr.dashboard(
        "rocescope: fabric overview",
        "rocescope-fabric",
        lay,
        description="Findings, hottest ports, PFC and ECN per switch, leaf uplink balance.",
    )
