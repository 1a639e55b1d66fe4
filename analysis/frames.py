"""One analysis window's data as polars frames, read from the store with the heavy lifting in SQL.

Detectors never scan raw counters themselves: they ask for per-second rates or gauges of a few
metrics, optionally only above a floor (`min_rate`, `min_value`), so the engine computes the
per-series deltas (wraps and resets handled by `counter_delta_sql`, the same rule as the
`port_rates` view) and ships back only the rows that can matter. A 1-hour window of a large fabric is
hundreds of millions of values; the rows a detector looks at are a few thousand.

Every frame has a fixed schema (checked: `check_schema`), string columns as plain `pl.String` so
frames from different queries join without categorical surprises, and times as UTC datetimes
(`rocescope.analysis.window`). What the fabric is made of (cables, names, placements, connections,
collectives) is read by `rocescope.analysis.topology_reads`, which `Frames` extends with the counters.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from rocescope.analysis.align import with_intervals
from rocescope.analysis.topology_reads import (
    ALIASES_SCHEMA,
    ENDPOINTS_SCHEMA,
    FLOW_SAMPLES_SCHEMA,
    LINKS_SCHEMA,
    PORTS_SCHEMA,
    QP_PAIRS_SCHEMA,
    QP_PEERS_SCHEMA,
    ROLES_SCHEMA,
    SWITCH_PORTS,
    TopologyReads,
    on_asics,
)
from rocescope.analysis.window import TS, Window, check_schema
from rocescope.analysis.window import bound as _bound
from rocescope.analysis.window import plain as _plain
from rocescope.catalog import METRICS
from rocescope.pipeline.rates_sql import (
    LINK_EVENT_COUNTERS,
    SERIES,
    SERIES_LAGS,
    SERIES_WINDOW,
    SOURCE_SERIES,
    SOURCE_SERIES_KEY,
    candidate_series_sql,
    counter_delta_sql,
    delta_seconds_sql,
    fresh_reads_sql,
    max_rate_sql,
    may_resend_sql,
    refresh_groups_sql,
)
from rocescope.pipeline.store import Store

log = logging.getLogger(__name__)

#: What detectors import from here (the window, the schemas of every read) wherever it is defined.
__all__ = [
    "ALIASES_SCHEMA",
    "ENDPOINTS_SCHEMA",
    "FLOW_SAMPLES_SCHEMA",
    "LINKS_SCHEMA",
    "PORTS_SCHEMA",
    "QP_PAIRS_SCHEMA",
    "QP_PEERS_SCHEMA",
    "RATES_SCHEMA",
    "ROLES_SCHEMA",
    "SWITCH_PORTS",
    "TS",
    "Frames",
    "Window",
    "check_schema",
    "on_asics",
]

#: How far before the window the sample that gives each series' first rate is looked for: two reads of the
#: slowest cadence gear is commonly read at (60 s: SONiC's watermark counterpoll, SNMP polls), and a margin for a
#: device's read phase; at 30 s, every window read at 60 s lost its first rate.
LOOKBACK_S = 125.0
#: The look-back grows to two reads (and a phase margin) of the slowest counter series the window holds, up to this:
#: two reads of SNMP's most common slow poll, every 5 minutes (LibreNMS' and Observium's default; Cacti's), and
#: 30 s of phase. A series read once in the whole range is read at least half as often as the range is long, so it
#: gets the longest look-back at once.
MAX_LOOKBACK_S = 2 * 300.0 + 30.0
_PHASE_MARGIN_S = 5.0

#: The samples `_scan` reads, per counter series in the table's key order: its reads, whether and how often its value
#: changed, its first and last read, and how many sources landed it (one row of mixed sources where several did).
_BY_SERIES = f"""
        SELECT {SERIES}, any(landed_by) AS source, count() AS samples, min(value) != max(value) AS moved,
            dateDiff('millisecond', min(ts), max(ts)) / 1e3 AS span_s, max(ts) AS last_ts,
            uniqExact(landed_by) AS sources, uniqExact(value) - 1 AS changes
        FROM (
            SELECT {SERIES}, ts, value, source AS landed_by FROM counters
            WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
        )
        GROUP BY {SERIES}"""  # noqa: S608 - placeholders only
#: ... and per series and source, for the metrics (`metrics`) that have a series landed by several sources.
_BY_SOURCE = f"""
        SELECT {SOURCE_SERIES}, count() AS samples, min(value) != max(value) AS moved,
            dateDiff('millisecond', min(ts), max(ts)) / 1e3 AS span_s, max(ts) AS last_ts,
            count() OVER (PARTITION BY {SERIES}) AS sources, uniqExact(value) - 1 AS changes
        FROM counters
        WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
            AND metric IN {{metrics:Array(String)}}
        GROUP BY {SOURCE_SERIES}"""  # noqa: S608 - placeholders only

#: The metrics whose values are counts (rated by differences), where re-sent values matter.
COUNTER_METRICS = tuple(m.name for m in METRICS if m.kind == "counter")
_COUNTERS = frozenset(COUNTER_METRICS)
#: Peak-since-last-read gauges (SONiC's queue, PG and buffer pool watermarks, read and cleared by each flex counter
#: poll, every 60 s by default): sent again between refreshes, one peak would be read as one burst per send.
PEAK_GAUGES = ("queue_watermark_bytes", "pg_watermark_bytes", "buffer_pool_watermark_bytes")

RATES_SCHEMA: dict[str, pl.DataType] = {
    "ts": TS,
    "device": pl.String(),
    "role": pl.String(),
    "port": pl.String(),
    "priority": pl.Int8(),
    "metric": pl.String(),
    "rate": pl.Float64(),
    "delta": pl.Float64(),
    "dt_s": pl.Float64(),
}
GAUGES_SCHEMA: dict[str, pl.DataType] = {
    "ts": TS,
    "device": pl.String(),
    "role": pl.String(),
    "port": pl.String(),
    "priority": pl.Int8(),
    "metric": pl.String(),
    "value": pl.Float64(),
}
BREAKS_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "port": pl.String(),
    "before": TS,
    "after": TS,
    "went_back": pl.Boolean(),
}
#: a series unread for more than this many of its usual intervals went silent (one or two missed reads are a
#: collector's or a network's hiccup)
SILENT_READS = 3
TOTALS_SCHEMA: dict[str, pl.DataType] = {
    "bucket": TS,
    "device": pl.String(),
    "role": pl.String(),
    "port": pl.String(),
    "priority": pl.Int8(),
    "metric": pl.String(),
    "delta": pl.Float64(),
    "seconds": pl.Float64(),
    #: the longest read interval in the bucket: how much of the bucket's count one read at its edge can carry
    "longest_read_s": pl.Float64(),
}
BUCKETS_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "port": pl.String(),
    "metric": pl.String(),
    "bucket": TS,
    "delta": pl.Float64(),
}
PEAKS_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "port": pl.String(), "rate": pl.Float64()}
PORT_VALUES_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "port": pl.String(), "value": pl.Float64()}


#: The refresh of a peak gauge whose own period could not be inferred (`_peaks_on_resending_targets`): longer than
#: any window, so only its changes are reads.
UNKNOWN_REFRESH_S = 1e9


def _peaks_on_resending_targets(groups: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Peak gauge groups (`PEAK_GAUGES`) of targets (device and source) proven to re-send unchanged counters, that
    `refresh_groups_sql` could not time themselves: a watermark changes at most once a refresh (60 s), so a quiet
    minute's few changes say no period. Re-sending is the target's (its gNMI server's SAMPLE), and a queue's peak
    since the last read that comes again to the byte on such a target is the same read sent again: only its
    changes are reads (`UNKNOWN_REFRESH_S`). Two refreshes that peak at the same byte count are then one read."""
    out: dict[str, tuple[float, float]] = {}
    for key, (_, read_s) in groups.items():
        device, _, source = key.split("|")
        for metric in PEAK_GAUGES:
            peak = f"{device}|{metric}|{source}"
            if peak not in groups:
                out[peak] = (UNKNOWN_REFRESH_S, read_s)
    return out


def _t(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(sorted(values))


class Frames(TopologyReads):
    """Lazy, cached access to one window: each distinct request is one SQL query. The counter reads are here,
    what the fabric is made of in `TopologyReads`."""

    def __init__(self, store: Store, window: Window, lookback_s: float = LOOKBACK_S) -> None:
        super().__init__(store, window, lookback_s)
        #: metric -> counter samples dropped because their drop proves no reset (`counter_delta_sql`): a clock
        #: stepped back, a stale value re-sent (each counted once, whichever detectors asked)
        self.dropped: dict[str, int] = {}
        self._shadowed: list[str] | None = None
        self._moved: dict[str, bool] | None = None  # metric -> whether a series of it moved (`_scan`)
        self._resent: dict[str, tuple[float, float]] | None = None
        self._may_resend: set[str] = set()  # metrics with a refresh group that may re-send (`_scan`)
        self._candidates: dict[str, list[str]] | None = None  # metric -> series a refresh group may hold (`_scan`)
        self._reporting: dict[str, set[str]] = {}  # metric -> devices with samples of it in the window (`_scan`)

    def _scan(self) -> None:
        """One scan of the window's samples (from the look-back on), once: which metrics have samples and which of
        them moved (`present`), and which counter series another source delivered more samples of
        (`shadowed_sources`), and which metrics have a refresh group that may re-send values (`resent_groups` infers
        the groups only then: on gear that sends each value once, it costs nothing). A detector's request for
        metrics the window lacks then costs no query: on gear that reports a few dozen of the catalog's metrics,
        most requests (each a window function over the store, tens of milliseconds however few rows it returns)
        are for evidence that is not there.

        The scan aggregates by series, in the table's key order (`optimize_aggregation_in_order`: a streaming
        aggregation, a quarter of a hash aggregation's time over an hour of a large fabric). A series that more
        than one source landed is then one row of mixed sources; only the metrics that have such a series are
        scanned again, by source."""
        if self._moved is not None:
            return
        frame = self._query(("scan", self.lookback), self._scan_sql(_BY_SERIES), self._params(()))
        multi = frame.filter(pl.col("multi").list.len() > 0)["metric"].to_list() if frame.height else []
        if multi:
            exact = self._query(("scan", self.lookback, "by source"), self._scan_sql(_BY_SOURCE), self._params(multi))
            frame = pl.concat([frame.filter(~pl.col("metric").is_in(multi)), exact])
        rows = frame.to_dicts() if frame.height else []
        counters = [r for r in rows if r["metric"] in _COUNTERS]
        slowest = max((float(r["slowest_s"]) for r in counters), default=0.0)
        want = MAX_LOOKBACK_S if any(r["read_once"] for r in counters) else 2 * slowest + _PHASE_MARGIN_S
        longer = dt.timedelta(seconds=min(want, MAX_LOOKBACK_S))
        if longer > self.lookback:  # the first rate of a series read every few minutes needs its read before
            log.info("counters read every %.0f s: the look-back before the window is %s", slowest, longer)
            self.lookback = longer
            self._scan()
            return
        self._moved = {str(r["metric"]): bool(r["moved"]) for r in rows}
        self._reporting = {str(r["metric"]): {str(d) for d in r["devices"] or ()} for r in rows}
        self._may_resend = {str(r["metric"]) for r in rows if r["may_resend"]} - set(LINK_EVENT_COUNTERS)
        # the series a refresh group may hold, as counted here, unless sources overlap (then one source per series
        # is kept first, and `refresh_groups_sql` counts what is left)
        self._candidates = None if multi else {str(r["metric"]): list(r["candidates"] or ()) for r in rows}
        best: dict[tuple[Any, ...], tuple[int, str]] = {}
        multi_rows = [(r["metric"], *e.values()) for r in rows for e in r["multi"] or ()]
        for metric, device, port, priority, source, samples in multi_rows:
            series = (metric, device, port, priority)
            best[series] = max(best.get(series, (-1, "")), (int(samples), str(source)))
        self._shadowed = [
            f"{metric}|{device}|{port}|{priority}|{source}"
            for metric, device, port, priority, source, _ in multi_rows
            if best[(metric, device, port, priority)][1] != source
        ]
        if self._shadowed:
            log.info("%d counter series landed by more than one source: each rated from one", len(self._shadowed))

    @staticmethod
    def _scan_sql(inner: str) -> str:
        """The per-metric summary of `_scan` over `inner`, an aggregation by series (`_BY_SERIES`) or by series and
        source (`_BY_SOURCE`)."""
        return f"""
SELECT toString(metric) AS metric, max(moved) AS moved,
    groupArrayIf((toString(device), toString(port), priority, toString(source), samples), sources > 1) AS multi,
    max(if(samples > 1, span_s / (samples - 1), 0)) AS slowest_s, countIf(samples = 1) AS read_once,
    max(may_resend) AS may_resend, groupArrayIf(concat({SOURCE_SERIES_KEY}), candidate) AS candidates,
    groupUniqArrayIf(toString(device), last_ts >= {{start:DateTime64(9, 'UTC')}}) AS devices
FROM (
    SELECT *, {may_resend_sql()} AS may_resend, {candidate_series_sql()} AS candidate FROM ({inner})
) GROUP BY metric
SETTINGS optimize_aggregation_in_order = 1"""  # noqa: S608 - placeholders only

    def present(self, metrics: Sequence[str], *, moved: bool = False) -> bool:
        """Whether any of `metrics` has samples from the look-back to the window's end (with `moved`: a series
        whose value changed there)."""
        self._scan()
        assert self._moved is not None
        return any(self._moved.get(m, False) if moved else m in self._moved for m in metrics)

    def shadowed_sources(self) -> list[str]:
        """The (series, source) keys (`SOURCE_SERIES_KEY`) of counters that another source delivered more samples of
        in the window (ties: the source named last wins): each series is rated from one source. Empty (and no
        cost to any rate query) where every series has one source."""
        self._scan()
        assert self._shadowed is not None
        return self._shadowed

    def _one_source(self) -> str:
        """The filter that keeps one source per counter series (`shadowed_sources`), or nothing."""
        return f" AND concat({SOURCE_SERIES_KEY}) NOT IN {{shadowed:Array(String)}}" if self.shadowed_sources() else ""

    def resent_groups(self) -> dict[str, tuple[float, float]]:
        """Refresh groups (device|metric|source) whose target re-sends unchanged values between refreshes, with
        their refresh period and read interval in seconds (`refresh_groups_sql`): counters and peak gauges
        (`PEAK_GAUGES`). One scan of the window's samples, once; empty (and no cost to any query) where every group
        is refreshed as it is read."""
        self._scan()
        # only metrics with a group that may re-send (`_scan`): the others' groups are none, and the inference reads
        # every sample of what it is given (on gear that sends each value once, nothing)
        metrics = sorted(self._may_resend.intersection((*COUNTER_METRICS, *PEAK_GAUGES)))
        if self._candidates is not None and not any(self._candidates.get(m) for m in metrics):
            metrics = []  # no group may: the scan counted no series that could be in one
        if self._resent is None and not metrics:
            self._resent = {}
        if self._resent is None:
            one_source = self._one_source()
            extra: dict[str, Any] = {}
            if self._candidates is not None:  # counted by the scan: only their samples are read
                extra["candidates"] = sorted(k for m in metrics for k in self._candidates.get(m, ()))
                extra["candidate_devices"] = sorted({k.split("|")[1] for k in extra["candidates"]})
                metrics = sorted({k.split("|")[0] for k in extra["candidates"]})
                one_source += " AND device IN {candidate_devices:Array(String)}"
            samples = f"""
                SELECT ts, device, role, port, priority, metric, value, source, raw_name FROM counters
                WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
                    AND metric IN {{metrics:Array(String)}}{one_source}"""  # noqa: S608 - placeholders only
            keys = "{candidates:Array(String)}" if extra else None
            frame = self._query(("resent",), refresh_groups_sql(samples, keys), self._params(metrics, extra))
            self._resent = {str(k): (float(r), float(g)) for k, r, g in frame.iter_rows()} if frame.height else {}
            self._resent |= _peaks_on_resending_targets(self._resent)
            if self._resent:
                log.info(
                    "%d counter and watermark groups re-send unchanged values between refreshes "
                    "(e.g. %s every %.0f s): the re-sends are no reads",
                    len(self._resent),
                    *next((k, r) for k, (r, _) in self._resent.items()),
                )
        return self._resent

    def _params(self, metrics: Sequence[str], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The window's parameters, and the sources and refresh groups the window's scan found (`_scan`)."""
        p = super()._params(metrics)
        if self._shadowed:
            p["shadowed"] = self._shadowed
        if self._resent:
            p["resent"] = list(self._resent)
            p["refresh_s"] = [r for r, _ in self._resent.values()]
            p["read_s"] = [g for _, g in self._resent.values()]
        p.update(extra or {})
        return p

    @staticmethod
    def _filters(
        roles: Sequence[str] | None, priorities: Sequence[int] | None, devices: Sequence[str] | None = None
    ) -> str:
        """The WHERE clauses of a counters query; a switch's interfaces that are no cable are always left out
        (`SWITCH_PORTS`)."""
        where = SWITCH_PORTS
        if devices is not None:
            where += " AND device IN {devices:Array(String)}"
        if roles is not None:
            where += " AND role IN {roles:Array(String)}"
        if priorities is not None:
            where += " AND priority IN {priorities:Array(Int8)}"
        return where

    def _deltas(
        self,
        roles: Sequence[str] | None,
        priorities: Sequence[int] | None,
        devices: Sequence[str] | None = None,
        changed_only: bool = False,
        keep_dropped: bool = False,
    ) -> str:
        """Per-series counter increases between consecutive samples in the window (the sample before
        the window start gives the first one); only fixed SQL and placeholders go into the text.

        With `changed_only`, series whose value never moved in the window are left out before the
        window function runs (an aggregation, cheap in key order): their increases are all zero, and
        most error, drop, pause and CNP counters of a fabric sit still for hours. With `keep_dropped`, samples
        whose drop proves no reset (`counter_delta_sql`) stay in, with a NULL delta, to be counted."""
        filters = self._filters(roles, priorities, devices)
        # a counter two sources land (gNMI and SNMP, two collector shards) is rated from one of them, never from
        # both interleaved (`shadowed_sources`)
        one_source = self._one_source()
        moved = (
            f"""
                AND ({SERIES}) IN (
                    SELECT {SERIES} FROM counters
                    WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
                        AND metric IN {{metrics:Array(String)}}{filters}
                    GROUP BY {SERIES} HAVING min(value) != max(value))"""  # noqa: S608 - placeholders only
            if changed_only
            else ""
        )
        samples = f"""
                SELECT ts, device, role, port, priority, metric, value, source, raw_name FROM counters
                WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
                    AND metric IN {{metrics:Array(String)}}{filters}{moved}{one_source}"""  # noqa: S608 - placeholders only
        return f"""
    SELECT ts, device, role, port, priority, metric, delta, dt_s FROM (
        SELECT ts, device, role, port, priority, metric, n,
            {counter_delta_sql()} AS delta, {delta_seconds_sql()} AS dt_s
        FROM (
            SELECT ts, device, role, port, priority, metric, value, source, raw_name,
                {SERIES_LAGS}
            FROM ({fresh_reads_sql(samples) if self.resent_groups() else samples})
            {SERIES_WINDOW}
        )
    )
    WHERE n > 1 AND dt_s > 0 AND ts >= {{start:DateTime64(9, 'UTC')}}
        AND {"(delta IS NULL OR delta <= dt_s * " if keep_dropped else "(delta <= dt_s * "}{max_rate_sql()})"""  # noqa: S608

    def rates(
        self,
        metrics: Sequence[str],
        *,
        min_rate: float | None = None,
        roles: Sequence[str] | None = None,
        priorities: Sequence[int] | None = None,
        devices: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Per-second rates of counter metrics, one row per sample in the window (RATES_SCHEMA);
        with `min_rate` (> 0), only rows at or above it."""
        key = ("rates", tuple(metrics), min_rate, _t(roles), _t(priorities), _t(devices))
        floor = "" if min_rate is None else " WHERE rate >= {min_rate:Float64} OR delta IS NULL"
        changed = min_rate is not None and min_rate > 0
        if not self.present(metrics, moved=changed):  # a rate above zero needs a series that moved
            return pl.DataFrame(schema=RATES_SCHEMA)
        sql = f"""
SELECT ts, toString(device) AS device, toString(role) AS role, toString(port) AS port, priority,
    toString(metric) AS metric, delta / dt_s AS rate, delta, dt_s
FROM ({self._deltas(roles, priorities, devices, changed_only=changed, keep_dropped=True)}){floor}
ORDER BY device, port, priority, metric, ts"""  # noqa: S608 - placeholders only
        extra = _bound(min_rate=min_rate, roles=roles, priorities=priorities, devices=devices)
        fresh = key not in self._cache
        raw = self._query(key, sql, self._params(metrics, extra))
        if "delta" not in raw.columns:
            return _plain(raw, RATES_SCHEMA, "rates")
        dropped = raw.filter(pl.col("delta").is_null())
        if fresh and dropped.height:
            for (metric,), group in dropped.group_by("metric"):
                self.dropped[str(metric)] = self.dropped.get(str(metric), 0) + group.height
            log.debug("%d samples of %s dropped: a drop that proves no reset", dropped.height, list(metrics))
        return _plain(raw.filter(pl.col("delta").is_not_null()), RATES_SCHEMA, "rates")

    def peak_rates(self, metrics: Sequence[str], *, devices: Sequence[str]) -> pl.DataFrame:
        """Per (device, port), the highest rate of the metrics over two consecutive samples in the window
        (PEAKS_SCHEMA): sustained for two polls, and a sample stamped early by a jittery clock is evened out by
        its neighbour (what a speed can be inferred from)."""
        key = ("peak_rates", tuple(metrics), _t(devices))
        if not self.present(metrics):
            return pl.DataFrame(schema=PEAKS_SCHEMA)
        sql = f"""
SELECT toString(device) AS device, toString(port) AS port, max(pair_rate) AS rate FROM (
    SELECT device, port, (delta + lagInFrame(delta) OVER p) / (dt_s + lagInFrame(dt_s) OVER p) AS pair_rate,
        row_number() OVER p AS k
    FROM ({self._deltas(None, None, devices)})
    WINDOW p AS (PARTITION BY device, port, priority, metric ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
) WHERE k > 1
GROUP BY device, port ORDER BY device, port"""  # noqa: S608 - placeholders only
        extra = _bound(devices=devices)
        return _plain(self._query(key, sql, self._params(metrics, extra)), PEAKS_SCHEMA, "peak_rates")

    def gauges(
        self,
        metrics: Sequence[str],
        *,
        min_value: float | None = None,
        roles: Sequence[str] | None = None,
        priorities: Sequence[int] | None = None,
        devices: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Gauge samples in the window (GAUGES_SCHEMA); with `min_value`, only rows at or above it. A peak gauge
        (`PEAK_GAUGES`) sent again between its refreshes is one read (`resent_groups`)."""
        key = ("gauges", tuple(metrics), min_value, _t(roles), _t(priorities), _t(devices))
        if not self.present(metrics):
            return pl.DataFrame(schema=GAUGES_SCHEMA)
        floor = "" if min_value is None else " AND value >= {min_value:Float64}"
        filters = self._filters(roles, priorities, devices)
        if set(metrics) & set(PEAK_GAUGES) and self.resent_groups():  # a peak sent again is no second peak
            samples = f"""
                SELECT ts, device, role, port, priority, metric, value, source, raw_name FROM counters
                WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
                    AND metric IN {{metrics:Array(String)}}{filters}"""  # noqa: S608 - placeholders only
            source, filters = f"({fresh_reads_sql(samples)})", ""
        else:
            source = "counters"
        sql = f"""
SELECT ts, toString(device) AS device, toString(role) AS role, toString(port) AS port, priority,
    toString(metric) AS metric, value
FROM {source}
WHERE ts >= {{start:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
    AND metric IN {{metrics:Array(String)}}{filters}{floor}
ORDER BY device, port, priority, metric, ts"""  # noqa: S608 - placeholders only
        extra = _bound(min_value=min_value, roles=roles, priorities=priorities, devices=devices)
        return _plain(self._query(key, sql, self._params(metrics, extra)), GAUGES_SCHEMA, "gauges")

    def timed_gauges(
        self,
        metric: str,
        *,
        min_value: float,
        roles: Sequence[str] | None = None,
        devices: Sequence[str] | None = None,
        default_s: float = 1.0,
    ) -> pl.DataFrame:
        """The reads of gauge `metric` at or above `min_value`, each with `dt_s`, the time since its series' previous
        read (`rocescope.analysis.align.with_intervals`, with `default_s`), which only every read of the devices that
        had such a read tells (a peak read every 60 s covers the minute before it); once per request, since several
        detectors ask for the same (an hour of 128x8 has 22 M watermark reads)."""
        key = ("timed_gauges", metric, min_value, _t(roles), _t(devices), default_s)
        if key not in self._cache:
            high = self.gauges([metric], min_value=min_value, roles=roles, devices=devices)
            if high.is_empty():
                self._cache[key] = high.with_columns(pl.lit(None, pl.Float64).alias("dt_s"))
            else:
                every = self.gauges([metric], roles=roles, devices=sorted(set(high["device"].to_list())))
                keys = ["device", "port", "priority"]
                self._cache[key] = with_intervals(every, keys, default_s).filter(pl.col("value") >= min_value)
        return self._cache[key]

    def port_maxima(self, metric: str, *, devices: Sequence[str], min_value: float) -> pl.DataFrame:
        """Per (device, port), the highest value of a gauge in the window at or above `min_value`
        (PORT_VALUES_SCHEMA): a port's speed without shipping each of its samples (gear sends it every poll: an hour
        of a 128x8 fabric's leaves is 2.8 M rows for 2,000 numbers)."""
        key = ("port_maxima", metric, min_value, _t(devices))
        if not self.present([metric]):
            return pl.DataFrame(schema=PORT_VALUES_SCHEMA)
        sql = f"""
SELECT toString(device) AS device, toString(port) AS port, max(value) AS peak FROM counters
WHERE ts >= {{start:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
    AND metric IN {{metrics:Array(String)}}{self._filters(None, None, devices)} AND value >= {{min_value:Float64}}
GROUP BY device, port ORDER BY device, port"""  # noqa: S608 - placeholders only
        extra = _bound(min_value=min_value, devices=devices)
        frame = self._query(key, sql, self._params([metric], extra)).rename({"peak": "value"}, strict=False)
        return _plain(frame, PORT_VALUES_SCHEMA, "port_maxima")

    def last_gauges(self, metrics: Sequence[str], *, devices: Sequence[str]) -> pl.DataFrame:
        """Each series' last value before the window's end (GAUGES_SCHEMA, stamped when it was reported), however
        long before: static facts (a port's speed, its admin status) are reported once and stamped with their
        last change (Arista: days earlier), so a window may hold none of them."""
        key = ("last_gauges", tuple(metrics), _t(devices))
        sql = f"""
SELECT last_ts AS ts, device, last_role AS role, port, priority, metric, value FROM (
    SELECT max(ts) AS last_ts, toString(device) AS device, toString(any(role)) AS last_role, toString(port) AS port,
        priority, toString(metric) AS metric, argMax(value, ts) AS value
    FROM counters
    WHERE ts < {{end:DateTime64(9, 'UTC')}} AND metric IN {{metrics:Array(String)}}{self._filters(None, None, devices)}
    GROUP BY metric, device, port, priority
) ORDER BY device, port, priority, metric"""  # noqa: S608 - placeholders only
        return _plain(self._query(key, sql, self._params(metrics, _bound(devices=devices))), GAUGES_SCHEMA, "last")

    def byte_counter_breaks(self) -> pl.DataFrame:
        """Switch ports whose transmitted-byte counter went back, or went unread for more than `SILENT_READS` of
        its usual interval, between two of their samples in the window (BREAKS_SCHEMA: the last sample before,
        the first after, and whether it went back), per source: a device that restarted is silent meanwhile and
        counts again from zero on every port at once. A 64-bit byte counter does not wrap in a deployment's life."""
        sql = f"""
SELECT device, port, prev_ts AS before, ts AS after, value < prev AS went_back FROM (
    SELECT *, quantileExact(0.5)(gap_s) OVER (PARTITION BY device, port, source) AS usual_s FROM (
        SELECT *, if(k > 1, dateDiff('millisecond', prev_ts, ts) / 1e3, NULL) AS gap_s FROM (
            SELECT ts, toString(device) AS device, toString(port) AS port, source, value,
                lagInFrame(value) OVER w AS prev, lagInFrame(ts) OVER w AS prev_ts, row_number() OVER w AS k
            FROM counters
            WHERE ts >= {{lo:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}} AND metric = 'tx_bytes'
                AND role = 'switch'
            WINDOW w AS (PARTITION BY device, port, source ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
        )
    )
) WHERE k > 1 AND ts >= {{start:DateTime64(9, 'UTC')}} AND (value < prev OR gap_s > {SILENT_READS} * usual_s)
ORDER BY device, port, after"""  # noqa: S608 - a constant and placeholders only
        if not self.present(["tx_bytes"]):
            return pl.DataFrame(schema=BREAKS_SCHEMA)
        return _plain(self._query(("breaks",), sql, self._params(["tx_bytes"])), BREAKS_SCHEMA, "breaks")

    def gauges_below(
        self, metrics: Sequence[str], max_value: float, *, roles: Sequence[str] | None = None
    ) -> pl.DataFrame:
        """Gauge samples at or below `max_value` (GAUGES_SCHEMA): the rare dips (a link's `oper_up` at 0)
        without shipping every healthy sample."""
        key = ("gauges_below", tuple(metrics), max_value, _t(roles))
        if not self.present(metrics):
            return pl.DataFrame(schema=GAUGES_SCHEMA)
        sql = f"""
SELECT ts, toString(device) AS device, toString(role) AS role, toString(port) AS port, priority,
    toString(metric) AS metric, value
FROM counters
WHERE ts >= {{start:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}
    AND metric IN {{metrics:Array(String)}}{self._filters(roles, None)} AND value <= {{max_value:Float64}}
ORDER BY device, port, priority, metric, ts"""  # noqa: S608 - placeholders only
        extra = _bound(max_value=max_value, roles=roles)
        return _plain(self._query(key, sql, self._params(metrics, extra)), GAUGES_SCHEMA, "gauges_below")

    def totals(
        self,
        metrics: Sequence[str],
        bucket_s: float,
        *,
        roles: Sequence[str] | None = None,
        priorities: Sequence[int] | None = None,
        devices: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Counter increases summed per series over buckets of `bucket_s` seconds (TOTALS_SCHEMA), for
        detectors that judge shares and ratios over time rather than single samples."""
        key = ("totals", tuple(metrics), bucket_s, _t(roles), _t(priorities), _t(devices))
        if not self.present(metrics):
            return pl.DataFrame(schema=TOTALS_SCHEMA)
        # integer bucket numbers: toStartOfInterval on DateTime64(9) cost about twice as much per sample here
        sql = f"""
SELECT fromUnixTimestamp64Milli(bucket_no * {{bucket_ms:UInt64}}, 'UTC') AS bucket,
    toString(device) AS device, toString(role) AS role, toString(port) AS port, priority,
    toString(metric) AS metric, sum(delta) AS delta, sum(dt_s) AS seconds, max(dt_s) AS longest_read_s
FROM (
    SELECT *, intDiv(toUnixTimestamp64Milli(ts), {{bucket_ms:UInt64}}) AS bucket_no
    FROM ({self._deltas(roles, priorities, devices)})
)
GROUP BY bucket_no, device, role, port, priority, metric
ORDER BY device, port, priority, metric, bucket"""  # noqa: S608 - placeholders only
        extra = _bound(bucket_ms=max(1, round(bucket_s * 1000)), roles=roles, priorities=priorities, devices=devices)
        return _plain(self._query(key, sql, self._params(metrics, extra)), TOTALS_SCHEMA, "totals")

    def port_buckets(self, bucket_s: float) -> pl.DataFrame:
        """Bytes and PFC pause frames each port sent and received per bucket of the window, priorities summed
        (BUCKETS_SCHEMA): what cables are recognised by when no LLDP names them."""
        t = self.totals(["tx_bytes", "rx_bytes", "pfc_tx_pause", "pfc_rx_pause"], bucket_s)
        summed = t.group_by("device", "port", "metric", "bucket").agg(pl.col("delta").sum())
        return _plain(summed.sort("device", "port", "metric", "bucket"), BUCKETS_SCHEMA, "port_buckets")

    def reporting(self, metric: str) -> set[str]:
        """Devices with samples of `metric` in the window: which evidence exists at all (Broadcom switches report
        pause frames but no pause duration). From the window's one scan of the raw samples (`_scan`), never from a
        rollup (whose retention and sort order are another table's: a query per metric scanned all of it)."""
        self._scan()
        return set(self._reporting.get(metric, ()))
