"""What one analysis window holds, from one scan of its samples: which metrics have samples and which moved, which
devices report each, which counter series more than one source landed (each is rated from one), and which refresh
groups re-send unchanged values between refreshes (SONiC's gNMI server under SAMPLE). `Frames` reads the counters
through it; a detector's request for evidence the window lacks costs no query."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from rocescope.analysis.topology_reads import TopologyReads
from rocescope.analysis.window import Window
from rocescope.catalog import METRICS
from rocescope.pipeline.rates_sql import (
    LINK_EVENT_COUNTERS,
    SERIES,
    SOURCE_SERIES,
    SOURCE_SERIES_KEY,
    candidate_series_sql,
    may_resend_sql,
    refresh_groups_sql,
)
from rocescope.pipeline.store import Store

log = logging.getLogger(__name__)

__all__ = ["COUNTER_METRICS", "LOOKBACK_S", "PEAK_GAUGES", "WindowScan"]

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


class WindowScan(TopologyReads):
    """The window's one scan (`_scan`) and what follows from it, lazily and once."""

    def __init__(self, store: Store, window: Window, lookback_s: float = LOOKBACK_S) -> None:
        super().__init__(store, window, lookback_s)
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
                # ... by their series, the table's sort key: the index reads their granules alone (the devices'
                # every port and priority of those metrics were ten times as many samples on an hour of 128x8)
                series = sorted({tuple(k.split("|")[:4]) for k in extra["candidates"]})
                extra["candidate_series"] = [(m, d, port, int(prio)) for m, d, port, prio in series]
                metrics = sorted({m for m, *_ in series})
                one_source += f" AND ({SERIES}) IN {{candidate_series:Array(Tuple(String, String, String, Int8))}}"
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

    def reporting(self, metric: str) -> set[str]:
        """Devices with samples of `metric` in the window: which evidence exists at all (Broadcom switches report
        pause frames but no pause duration). From the window's one scan of the raw samples (`_scan`), never from a
        rollup (whose retention and sort order are another table's: a query per metric scanned all of it)."""
        self._scan()
        return set(self._reporting.get(metric, ()))
