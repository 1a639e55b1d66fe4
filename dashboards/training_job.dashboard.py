"""Training job: is this job hurt by the fabric, where, by what, how much, and by whose traffic? Everything is
scoped to `$job`."""

from __future__ import annotations

from typing import Any

from rocescope.dashboards import grafana as gr
from rocescope.dashboards import queries as q

F, E, L = q.F, q.E, q.L
JOB = q.text_var("job")
ON_JOB_NICS = q.job_nic_filter()
ON_JOB_PORTS = f"({ON_JOB_NICS} OR (device, port) IN ({q.JOB_LEAF_PORTS}))"


def build() -> dict[str, Any]:
    lay = gr.Layout()
    placement = f"SELECT * FROM ({q.JOB_ENDPOINTS})"
    lay.add(gr.stat("Hosts", f"SELECT uniqExact(host) AS hosts FROM ({placement})"), w=4, h=4)
    lay.add(gr.stat("NICs", f"SELECT uniqExact(host, netdev) AS nics FROM ({placement})"), w=4, h=4)
    lay.add(
        gr.stat(
            "Rails",
            f"SELECT uniqExact(netdev) AS rails FROM ({placement})",
            description="Rail-optimized: one NIC per rail per host.",
        ),
        w=4,
        h=4,
    )
    lay.add(
        gr.stat(
            "Findings",
            f"SELECT count() AS findings FROM {F} WHERE {q.FINDINGS_IN_RANGE} AND has({q.col(F, 'job_ids')}, {JOB})",
        ),
        w=4,
        h=4,
    )
    lay.add(
        gr.stat(
            "Leaves",
            f"SELECT uniqExact(device) AS leaves FROM ({q.JOB_LEAF_PORTS})",
            description="Switches the job's NICs are cabled to.",
        ),
        w=8,
        h=4,
    )
    lay.add(
        gr.table(
            "Placement: hosts, NICs, rails and their leaf ports",
            f"""SELECT e.rank AS rank, e.host AS host, e.netdev AS nic, e.rdma_dev AS rdma_dev, e.ip AS ip,
    l.{q.col(L, "peer_device")} AS leaf, l.{q.col(L, "peer_port")} AS leaf_port, e.valid_from AS since
FROM ({q.JOB_ENDPOINTS}) AS e
LEFT JOIN (SELECT DISTINCT device, port, peer_device, peer_port FROM {L}) AS l
    ON l.device = e.host AND l.port = e.netdev
ORDER BY host, nic""",
        ),
        w=24,
    )
    lay.add(
        gr.state_timeline(
            "The job's findings on a timeline",
            f"""SELECT t AS time, toString({q.col(F, "kind")}) AS series,
    if(t < {q.col(F, "end")}, 1, 0) AS value
FROM {F}
ARRAY JOIN [{q.col(F, "start")}, {q.col(F, "end")}] AS t
WHERE {q.FINDINGS_IN_RANGE} AND has({q.col(F, "job_ids")}, {JOB})
ORDER BY time""",
            mappings=[
                {
                    "type": "value",
                    "options": {"0": {"text": "ok", "color": "green"}, "1": {"text": "finding", "color": "red"}},
                }
            ],
        ),
        w=24,
        h=6,
    )
    lay.add(
        gr.table(
            "The job's findings",
            f"""SELECT toString({q.col(F, "severity")}) AS severity, toString({q.col(F, "kind")}) AS kind,
    {q.col(F, "start")} AS start, {q.col(F, "end")} AS end, {q.col(F, "summary")} AS summary,
    {q.FINDING_ID} AS finding
FROM {F}
WHERE {q.FINDINGS_IN_RANGE} AND has({q.col(F, "job_ids")}, {JOB})
ORDER BY start""",
        ),
        w=24,
        h=6,
    )
    culprits, victims = q.finding_blame("culprit_jobs"), q.finding_blame("victim_jobs")
    lay.add(
        gr.table(
            "Who hurt this job, and whom it hurt",
            f"""SELECT {q.col(F, "start")} AS start, toString({q.col(F, "kind")}) AS kind,
    arrayStringConcat({culprits}, ', ') AS culprit_jobs, arrayStringConcat({victims}, ', ') AS victim_jobs,
    round({q.finding_impact(JOB, "gpu_seconds_lost")}, 1) AS gpu_s_lost_by_this_job,
    round({q.finding_impact(JOB, "exec_inflation")}, 2) AS its_slowdown, {q.col(F, "summary")} AS summary,
    {q.FINDING_ID} AS finding
FROM {F}
WHERE {q.FINDINGS_IN_RANGE} AND (has({culprits}, {JOB}) OR has({victims}, {JOB}))
ORDER BY start""",
            description="Findings whose traffic came from this job (culprit: an incast's senders, a storm's root NIC) "
            "or that slowed its collectives (victim), with the GPU-seconds each cost it against its own baseline. "
            "`rocescope blame` gives the whole fabric's who-hurt-whom.",
        ),
        w=18,
        h=6,
    )
    lay.add(
        gr.stat(
            "GPU-seconds lost to findings",
            f"""SELECT round(sum({q.finding_impact(JOB, "gpu_seconds_lost")}), 1) AS gpu_seconds_lost
FROM {F} WHERE {q.FINDINGS_IN_RANGE} AND has({victims}, {JOB})
  AND NOT JSONHas({q.col(F, "evidence")}, 'impact', {JOB}, 'amplifies')""",
            description="Sum over the findings that hurt the job of its ranks' collective time beyond their baseline. "
            "Findings of one incident that overlap each count theirs: an upper bound. Lost CNPs' share of a "
            "congestion's loss is left out: the congestion counts it.",
        ),
        w=6,
        h=6,
    )
    co = q.CO
    lay.add(
        gr.timeseries(
            "Collective bus bandwidth (median over ranks)",
            f"""SELECT $__timeInterval({q.col(co, "ts")}) AS time,
    concat(toString({q.col(co, "collective")}), ' ', formatReadableSize({q.col(co, "bytes")})) AS series,
    median({q.col(co, "bus_bw_gbs")}) AS value
FROM ({q.JOB_COLLECTIVES})
WHERE NOT isNaN({q.col(co, "bus_bw_gbs")})
GROUP BY time, series
ORDER BY time""",
            "GBs",
            description="NCCL Inspector's bus bandwidth of the job's collectives per operation and message size: a "
            "drop that a finding explains is its cost; one that none explains is an `unexplained_slowdown`.",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Collective execution time (median and slowest rank)",
            f"""SELECT time, series, value FROM (
    SELECT $__timeInterval({q.col(co, "ts")}) AS time, toString({q.col(co, "collective")}) AS op,
        median({q.col(co, "exec_time_us")}) / 1e3 AS p50, max({q.col(co, "exec_time_us")}) / 1e3 AS slowest
    FROM ({q.JOB_COLLECTIVES})
    GROUP BY time, op
)
ARRAY JOIN [concat(op, ' median'), concat(op, ' slowest rank')] AS series, [p50, slowest] AS value
ORDER BY time""",
            "ms",
            description="A ring ends for all ranks together: every rank's time grows alike when the fabric slows it. "
            "A straggler shows as the others waiting (the median up) while its own time stays low.",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "CNPs sent (by receivers) vs handled (by senders), job NICs",
            q.rate_series(("cnp_sent", "cnp_handled"), ON_JOB_NICS, "metric"),
            "pps",
            description="A receiver sends CNPs when it sees ECN marks; senders should handle about as many. "
            "Sent far above handled means CNPs are lost or ignored.",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "Time paused by PFC on the job's ports (% of time, worst ports)",
            f"""SELECT time, series, value FROM (
    {q.rate_series(("pfc_rx_pause_duration_us",), ON_JOB_PORTS, "concat(device, ':', port)", " / 1e4")}
) WHERE series IN (
    SELECT concat(device, ':', port) FROM {q.port_rates("pfc_rx_pause_duration_us")}
    WHERE $__timeFilter(ts) AND {ON_JOB_PORTS}
    GROUP BY device, port ORDER BY max(rate) DESC LIMIT 10
)
ORDER BY time""",
            "percent",
            description="Share of time each port's transmit was held by received PFC: the job's NICs and the leaf "
            "ports facing them (the 10 worst).",
        ),
        w=12,
    )
    lay.add(
        gr.timeseries(
            "ECN marks on the job's ports (packets per s)",
            q.rate_series(
                ("ecn_marked_roce_packets", "queue_ecn_marked_packets"),
                ON_JOB_PORTS,
                "if(role = 'nic', 'NICs', 'leaf ports')",
            ),
            "pps",
            description="CE-marked RoCE packets the job's NICs received, and marks by the leaf queues toward them.",
        ),
        w=12,
    )
    lay.add(
        gr.table(
            "The job's share of each uplink of its leaves (estimated)",
            f"""WITH
    host_tx AS (
        SELECT l.peer_device AS leaf, sumIf(r.{q.DELTA}, {q.job_nic_filter("r.device", "r.port")}) AS job_bytes,
            sum(r.{q.DELTA}) AS all_bytes
        FROM {q.port_rates("tx_bytes")} AS r
        INNER JOIN (SELECT DISTINCT device, port, peer_device FROM {L}) AS l ON l.device = r.device AND l.port = r.port
        WHERE $__timeFilter(r.ts) AND r.role = 'nic'
        GROUP BY leaf
    ),
    uplink_tx AS (
        SELECT device AS leaf, port AS uplink, sum({q.DELTA}) AS bytes
        FROM {q.port_rates("tx_bytes")}
        WHERE $__timeFilter(ts) AND (device, port) IN ({q.UPLINKS})
        GROUP BY leaf, uplink
    )
SELECT u.leaf AS leaf, u.uplink AS uplink,
    round(u.bytes * 8 / 1e9 / greatest(dateDiff('second', $__fromTime, $__toTime), 1), 2) AS uplink_avg_gbps,
    round(100 * h.job_bytes / greatest(h.all_bytes, 1), 1) AS job_share_pct,
    round(u.bytes * h.job_bytes / greatest(h.all_bytes, 1) * 8 / 1e9
        / greatest(dateDiff('second', $__fromTime, $__toTime), 1), 2) AS job_avg_gbps
FROM uplink_tx AS u
INNER JOIN host_tx AS h ON h.leaf = u.leaf
WHERE h.job_bytes > 0
ORDER BY leaf, uplink""",
            description="Counters carry no flow identity, so the job's share of an uplink is estimated as its share "
            "of the bytes the leaf's hosts sent; sampled packets (the `packets` table) would make it exact.",
        ),
        w=24,
    )
    lay.add(
        gr.table(
            "Coverage: what the job's hosts let the analysis judge",
            f"""SELECT p.host AS host, p.nics AS nics,
    countIf(c.host != '') AS collectives,
    if(collectives = 0, 'no NCCL collectives from this host: the loss of the job cannot be measured here', '') AS note
FROM (SELECT host, uniqExact(netdev) AS nics FROM ({q.JOB_ENDPOINTS}) GROUP BY host) AS p
LEFT JOIN (SELECT {q.col(q.CO, "host")} AS host FROM {q.CO}
           WHERE $__timeFilter({q.col(q.CO, "ts")})) AS c ON c.host = p.host
GROUP BY p.host, p.nics
ORDER BY collectives, host""",
            description="Per host of the job, the NCCL collectives recorded under its name in the range: a host "
            "with none (Inspector not enabled, a pod off the host network that reports its pod name) is where "
            "slowdowns and GPU-seconds cannot be measured. `rocescope coverage` lists every reason.",
        ),
        w=24,
    )
    return gr.dashboard(
        "rocescope: training job",
        "rocescope-job",
        lay,
        variables=[
            gr.query_var(
                "job",
                "Job",
                f"SELECT DISTINCT {q.col(E, 'job_id')} FROM {E} "
                f"WHERE {q.col(E, 'valid_from')} <= $__toTime AND {q.col(E, 'valid_to')} >= $__fromTime "
                f"ORDER BY 1",
            )
        ],
        annotation_where=f"has({q.col(F, 'job_ids')}, {JOB})",
        description="One training job: its placement, findings, what they cost it and whose traffic caused them, its "
        "collectives, congestion signals and uplink share.",
    )
