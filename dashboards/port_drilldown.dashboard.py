"""Port drill-down: every signal of one port (`$device`, `$port`, priorities `$priority`) on one page."""

from __future__ import annotations

from typing import Any

from rocescope.dashboards import grafana as gr
from rocescope.dashboards import queries as q

F, C1M = q.F, q.C1M
DEVICE, PORT = q.text_var("device"), q.text_var("port")
THIS_PORT = f"device = {DEVICE} AND port = {PORT}"
# per-priority metrics on the chosen priorities; port-wide ones (priority -1) always
PRIORITIES = f"(priority = -1 OR has({q.list_var('priority')}, toString(priority)))"
BY_PRIORITY = "concat(metric, if(priority >= 0, concat(' p', toString(priority)), ''))"


def build() -> dict[str, Any]:
    lay = gr.Layout()
    lay.add(
        gr.timeseries(
            "Throughput (Gb/s)",
            q.rate_series(
                ("tx_bytes", "rx_bytes", "rdma_tx_bytes", "rdma_rx_bytes"), THIS_PORT, "metric", " * 8 / 1e9"
            ),
            "Gbits",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "PFC pause frames per s, by priority",
            q.rate_series(("pfc_rx_pause", "pfc_tx_pause"), f"{THIS_PORT} AND {PRIORITIES}", BY_PRIORITY),
            "pps",
            description="rx: the peer paused us; tx: we paused the peer.",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Time paused (% of time), by priority",
            q.rate_series(
                ("pfc_rx_pause_duration_us", "pfc_tx_pause_duration_us"),
                f"{THIS_PORT} AND {PRIORITIES}",
                BY_PRIORITY,
                " / 1e4",
            ),
            "percent",
            description="rx: our transmit was held; tx: our pauses held the peer. 100 % is a stuck queue.",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "ECN marks and CNPs per s",
            q.rate_series(
                (
                    "queue_ecn_marked_packets",
                    "tx_ecn_marked_packets",
                    "ecn_marked_roce_packets",
                    "cnp_sent",
                    "cnp_handled",
                ),
                f"device = {DEVICE} AND (port = {PORT} OR splitByChar('/', port)[1] IN ("
                f"SELECT rdma_dev FROM {q.E} WHERE host = {DEVICE} AND netdev = {PORT})) AND {PRIORITIES}",
                BY_PRIORITY,
            ),
            "pps",
            description="Switch queues: CE marks; NICs: marked packets received and CNPs (RDMA counters of the "
            "port's RDMA device).",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Buffer watermarks (peak per interval)",
            q.gauge_series(
                ("queue_watermark_bytes", "pg_watermark_bytes", "pg_headroom_watermark_bytes", "queue_occupancy_bytes"),
                f"{THIS_PORT} AND {PRIORITIES}",
                BY_PRIORITY,
            ),
            "bytes",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Discards and errors per s",
            q.rate_series(
                (
                    "rx_discards",
                    "tx_discards",
                    "queue_dropped_packets",
                    "pg_dropped_packets",
                    "rx_fcs_errors",
                    "pfcwd_tx_dropped_packets",
                ),
                f"{THIS_PORT} AND {PRIORITIES}",
                BY_PRIORITY,
            ),
            "pps",
        ),
        w=12,
    )
    lay.add(
        gr.state_timeline(
            "Link state",
            q.gauge_series(("oper_up",), THIS_PORT, "'oper up'", "min"),
            description="Lowest oper state in each interval: a flap shows as a red slice.",
            mappings=[
                {
                    "type": "value",
                    "options": {"0": {"text": "down", "color": "red"}, "1": {"text": "up", "color": "green"}},
                }
            ],
        ),
        w=12,
        h=5,
    )
    lay.add(
        gr.timeseries(
            "Link down events per interval",
            f"""SELECT $__timeInterval(ts) AS time, metric AS series, sum({q.DELTA}) AS value
FROM {q.port_rates("link_down_events", "carrier_transitions")}
WHERE $__timeFilter(ts) AND {THIS_PORT}
GROUP BY time, series
ORDER BY time""",
            bars=True,
        ),
        w=12,
        h=5,
    )
    return gr.dashboard(
        "rocescope: port drill-down",
        "rocescope-port",
        lay,
        variables=[
            gr.query_var("device", "Device", f"SELECT DISTINCT {q.col(C1M, 'device')} FROM {C1M} ORDER BY 1"),
            gr.query_var(
                "port",
                "Port",
                f"SELECT DISTINCT {q.col(C1M, 'port')} FROM {C1M} WHERE {q.col(C1M, 'device')} = {DEVICE} ORDER BY 1",
            ),
            gr.query_var(
                "priority",
                "Priority",
                f"SELECT DISTINCT toString({q.col(C1M, 'priority')}) FROM {C1M} "
                f"WHERE {q.col(C1M, 'device')} = {DEVICE} AND {q.col(C1M, 'port')} = {PORT} "
                f"AND {q.col(C1M, 'priority')} >= 0 ORDER BY 1",
                multi=True,
                include_all=True,
            ),
        ],
        annotation_where=f"has({q.col(F, 'devices')}, {DEVICE})",
        description="Rates, pauses, pause time, ECN, watermarks, discards and link state of one port.",
    )
