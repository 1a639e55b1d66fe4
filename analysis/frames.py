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

import logging
from collections.abc import Sequence
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
    on_asics,
)
from rocescope.analysis.window import TS, Window, check_schema
from rocescope.analysis.window import bound as _bound
from rocescope.analysis.window import plain as _plain
from rocescope.analysis.window_scan import LOOKBACK_S, PEAK_GAUGES, WindowScan
from rocescope.pipeline.rates_sql import (
    SERIES,
    SERIES_LAGS,
    SERIES_WINDOW,
    counter_delta_sql,
    delta_seconds_sql,
    fresh_reads_sql,
    max_rate_sql,
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
#: ... with the quantile of the rates of the bucket's samples (`Frames.totals(rate_quantile=...)`)
TOTALS_QUANTILE_SCHEMA: dict[str, pl.DataType] = {**TOTALS_SCHEMA, "rate_quantile": pl.Float64()}
BUCKETS_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "port": pl.String(),
    "metric": pl.String(),
    "bucket": TS,
    "delta": pl.Float64(),
}
PEAKS_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "port": pl.String(), "rate": pl.Float64()}
PORT_VALUES_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "port": pl.String(), "value": pl.Float64()}


def _t(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(sorted(values))


class Frames(WindowScan):
    """Lazy, cached access to one window: each distinct request is one SQL query. The counter reads are here, what
    the window holds (metrics, sources, re-sending groups) in `WindowScan`, what the fabric is made of in
    `TopologyReads`."""

    def __init__(self, store: Store, window: Window, lookback_s: float = LOOKBACK_S) -> None:
        super().__init__(store, window, lookback_s)
        #: metric -> counter samples dropped because their drop proves no reset (`counter_delta_sql`): a clock
        #: stepped back, a stale value re-sent (each counted once, whichever detectors asked)
        self.dropped: dict[str, int] = {}

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
        rate_quantile: float | None = None,
    ) -> pl.DataFrame:
        """Counter increases summed per series over buckets of `bucket_s` seconds (TOTALS_SCHEMA), for
        detectors that judge shares and ratios over time rather than single samples. With `rate_quantile` (0-1),
        also that quantile of the rates of the bucket's samples (linear interpolation, as polars' and numpy's
        default), TOTALS_QUANTILE_SCHEMA: a bucket's busy phases without shipping each sample (an hour of the
        switches' transmit counters on a 128x8 fabric is 11 M samples)."""
        key = ("totals", tuple(metrics), bucket_s, _t(roles), _t(priorities), _t(devices), rate_quantile)
        schema = TOTALS_SCHEMA if rate_quantile is None else TOTALS_QUANTILE_SCHEMA
        if not self.present(metrics):
            return pl.DataFrame(schema=schema)
        if rate_quantile is not None and not 0.0 <= rate_quantile <= 1.0:
            raise ValueError(f"rate_quantile must be within 0-1, not {rate_quantile}")
        quantile = (
            ""
            if rate_quantile is None
            else f", quantileExactInclusive({float(rate_quantile)!r})(sample_rate) AS rate_quantile"
        )
        # integer bucket numbers: toStartOfInterval on DateTime64(9) cost about twice as much per sample here
        sql = f"""
SELECT fromUnixTimestamp64Milli(bucket_no * {{bucket_ms:UInt64}}, 'UTC') AS bucket,
    toString(device) AS device, toString(role) AS role, toString(port) AS port, priority,
    toString(metric) AS metric, sum(delta) AS delta, sum(dt_s) AS seconds, max(dt_s) AS longest_read_s{quantile}
FROM (
    SELECT *, intDiv(toUnixTimestamp64Milli(ts), {{bucket_ms:UInt64}}) AS bucket_no, delta / dt_s AS sample_rate
    FROM ({self._deltas(roles, priorities, devices)})
)
GROUP BY bucket_no, device, role, port, priority, metric
ORDER BY device, port, priority, metric, bucket"""  # noqa: S608 - placeholders only
        extra = _bound(bucket_ms=max(1, round(bucket_s * 1000)), roles=roles, priorities=priorities, devices=devices)
        return _plain(self._query(key, sql, self._params(metrics, extra)), schema, "totals")

    def port_buckets(self, bucket_s: float) -> pl.DataFrame:
        """Bytes and PFC pause frames each port sent and received per bucket of the window, priorities summed
        (BUCKETS_SCHEMA): what cables are recognised by when no LLDP names them."""
        t = self.totals(["tx_bytes", "rx_bytes", "pfc_tx_pause", "pfc_rx_pause"], bucket_s)
        summed = t.group_by("device", "port", "metric", "bucket").agg(pl.col("delta").sum())
        return _plain(summed.sort("device", "port", "metric", "bucket"), BUCKETS_SCHEMA, "port_buckets")
