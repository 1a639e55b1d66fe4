"""Counter rates as SQL, shared by the store's views (`port_rates`, `port_rates_fresh`, `port_rates_fresh_of`) and
the detectors' frames (`rocescope.analysis.frames`): one series per source, wraps and proven resets, one-sample
glitches stepped over, and the values a target re-sends between its refreshes (refresh groups inferred from the
samples themselves)."""

from __future__ import annotations

from rocescope import schema
from rocescope.catalog import COUNTER32_RAW_NAMES, MAX_RATE_DEFAULT, METRICS, max_rate

#: One counter series, in the table's key order.
SERIES = ", ".join(schema.COUNTER_SERIES)
#: The window partition of one series as one source delivered it: the same counter landed by two sources (gNMI
#: and SNMP, two collector shards) is two series, never interleaved (their reads, a few counts apart, would make
#: every other sample a "reset").
SOURCE_SERIES = f"{SERIES}, source"

#: One (series, source) as one string (a key for IN lists).
SOURCE_SERIES_KEY = "metric, '|', device, '|', port, '|', toString(priority), '|', source"

#: Values a 32-bit counter can hold; a drop from near this to near zero is a wrap, not a reset.
_WRAP32 = 2**32
_WRAP64 = 2**64


#: A counter sample with its two predecessors in its series (over the window `SERIES_WINDOW`), the inputs
#: of `counter_delta_sql` and `delta_seconds_sql`.
SERIES_LAGS = f"""lagInFrame(value) OVER w AS prev_value, lagInFrame(ts) OVER w AS prev_ts,
        lagInFrame(value, 2) OVER w AS before_value, lagInFrame(ts, 2) OVER w AS before_ts,
        row_number() OVER w AS n, raw_name IN ({", ".join(repr(n) for n in sorted(COUNTER32_RAW_NAMES))}) AS wraps32"""
SERIES_WINDOW = f"WINDOW w AS (PARTITION BY {SOURCE_SERIES} ORDER BY ts ASC ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)"


#: The columns of a counter sample that the re-send rules pass through.
_SAMPLE = "ts, device, role, port, priority, metric, value, source, raw_name"
#: One refresh group: the metric on one device as one source delivers it (SONiC refreshes COUNTERS_DB per
#: flex-counter group and device: every port's queue counters at once).
REFRESH_GROUP = "device, '|', metric, '|', source"
_REFRESH_GROUP_COLUMNS = REFRESH_GROUP.replace(", '|', ", ", ")
#: Refresh-group inference (`refresh_groups_sql`): at least this many value changes in the group, ...
MIN_CHANGES = 8
#: ... this share of the spacings between a series' changes within half a read of a multiple of the group's
#: shortest one (a counter refreshed every r seconds can only change r, 2r, 3r... apart; errors that come when
#: they please do not line up so) ...
MIN_REGULAR_SHARE = 0.9
#: ... and the shortest at least this many reads: a group refreshed as often as it is read has no re-sends.
MIN_READS_PER_REFRESH = 2.0
#: Counters of a link's state machine, never a refresh group: the port counts each down (and up) as it happens and
#: every read returns the count (mlx5's `link_down_events_phy`, OpenConfig's `carrier-transitions`: no flex counter
#: poll in between), so their changes keep the events' own timing. A link flapping on a steady period (an
#: auto-negotiation loop) changes them at regular spacings that are no refresh; taken for one, its first flap would
#: be spread back over every read since the counter last moved.
LINK_EVENT_COUNTERS = ("link_down_events", "carrier_transitions")


def _changes_sql(rows: str) -> str:
    """`rows` (counter samples) with, per sample, whether its value changed from the previous one of its series
    (`changed`; a series' first sample is no change), the seconds since that previous sample (`gap_s`) and
    since the series' last change before it (`since_s`, NULL before its first; for a changed sample, `spacing_s`:
    the spacing of two changes)."""
    series = f"PARTITION BY {SOURCE_SERIES}"
    since = "if(last_change IS NULL, NULL, dateDiff('nanosecond', last_change, ts) / 1e9)"
    return f"""
    SELECT *, {since} AS since_s, if(changed, {since}, NULL) AS spacing_s
    FROM (
        SELECT {_SAMPLE}, n, changed, gap_s,
            max(if(changed, ts, NULL)) OVER ({series} ORDER BY ts ASC
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS last_change
        FROM (
            SELECT {_SAMPLE}, row_number() OVER r AS n, n > 1 AND value != lagInFrame(value) OVER r AS changed,
                if(n = 1, NULL, dateDiff('nanosecond', lagInFrame(ts) OVER r, ts) / 1e9) AS gap_s
            FROM ({rows})
            WINDOW r AS ({series} ORDER BY ts ASC ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
        )
    )"""


#: A sample gap this far (as a share of its series' median gap) from the median is no regular read: a clock step,
#: a lost or dropped read. SAMPLE sends are milliseconds apart from their interval; a step of seconds is not.
ODD_GAP_SHARE = 0.25


def _clean_spacings_sql(rows: str) -> str:
    """`_changes_sql` of `rows` with `clean_spacing_s`: a change's spacing from the previous change where every
    sample gap between them was a regular read (within `ODD_GAP_SHARE` of the series' median gap), else NULL. A
    clock stepped back 2.5 s shortens one spacing of a 10 s counter to 7.5 s, a lost read lengthens one: neither
    says how often the target refreshes."""
    series = f"PARTITION BY {SOURCE_SERIES}"
    return f"""
    SELECT *, if(changed AND NOT odd_between, spacing_s, NULL) AS clean_spacing_s
    FROM (
        SELECT *, max(odd) OVER ({series}, segment) AS odd_between
        FROM (
            SELECT *, ifNull(abs(gap_s - series_read_s) > {ODD_GAP_SHARE} * series_read_s, 0) AS odd,
                ifNull(sum(toUInt32(changed)) OVER ({series} ORDER BY ts ASC
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS segment
            FROM (SELECT *, median(gap_s) OVER ({series}) AS series_read_s FROM ({_changes_sql(rows)}))
        )
    )"""


#: Over an aggregation by `SOURCE_SERIES` with columns `samples` (reads) and `changes` (distinct values less one):
#: how much more often than once in `MIN_READS_PER_REFRESH` reads the series changed (<= 0: no more often, a
#: series a slower refresh may hold), and the window over its refresh group.
_TOO_OFTEN = f"changes * {MIN_READS_PER_REFRESH} - (samples - 1)"
_IN_GROUP = f"OVER (PARTITION BY {_REFRESH_GROUP_COLUMNS})"


#: The rows that are no link event counter (`LINK_EVENT_COUNTERS`), as SQL.
_NOT_LINK_EVENT = f"toString(metric) NOT IN ({', '.join(repr(m) for m in LINK_EVENT_COUNTERS)})"


def candidate_series_sql() -> str:
    """Over an aggregation by `SOURCE_SERIES` with columns `samples` (reads) and `changes` (distinct values less one),
    as SQL: whether the row's series is one of a group that may re-send, from counts alone (no ordering, cheap): the
    group's values changed `MIN_CHANGES` times or more, and none of its series more often than once in
    `MIN_READS_PER_REFRESH` reads (a counter only grows, so its distinct values less one are its changes); only
    series that changed at all, never a link's event counter (`LINK_EVENT_COUNTERS`). Groups refreshed as often as
    they are read (nearly all) stop here."""
    return f"""(changes > 0 AND {_NOT_LINK_EVENT}
            AND sum(changes) {_IN_GROUP} >= {MIN_CHANGES} AND max({_TOO_OFTEN}) {_IN_GROUP} <= 0)"""


def _candidate_series_sql(rows: str) -> str:
    """The keys (`SOURCE_SERIES_KEY`) of the series among `rows` (counter samples) that `candidate_series_sql`
    names."""
    return f"""
    SELECT key FROM (
        SELECT concat({SOURCE_SERIES_KEY}) AS key, {candidate_series_sql()} AS candidate
        FROM (
            SELECT {SOURCE_SERIES}, count() AS samples, uniqExact(value) - 1 AS changes FROM ({rows})
            WHERE {_NOT_LINK_EVENT}
            GROUP BY {SOURCE_SERIES}
        )
    )
    WHERE candidate"""


def may_resend_sql() -> str:
    """Over an aggregation by `SOURCE_SERIES` with columns `samples` (reads), `changes` (distinct values less one)
    and `sources` (how many sources landed the series), as SQL: whether the row's refresh group may be one that
    `refresh_groups_sql` finds. Where each of the group's series came from one source, its own test on counts
    (`_candidate_series_sql`); where a series came from several, the one source kept per series leaves a subset,
    which can show no more changes of calm series (`_TOO_OFTEN` <= 0) than all of them have. No group may: the
    inference need not run."""
    return f"""if(max(sources) {_IN_GROUP} > 1,
            sum(if({_TOO_OFTEN} <= 0, changes, 0)) {_IN_GROUP} >= {MIN_CHANGES},
            sum(changes) {_IN_GROUP} >= {MIN_CHANGES} AND max({_TOO_OFTEN}) {_IN_GROUP} <= 0)"""


def refresh_groups_sql(rows: str, candidates: str | None = None) -> str:
    """The refresh groups (`REFRESH_GROUP` key, `refresh_s`, `read_s`) among `rows` (counter samples) whose
    target re-sends values between refreshes, as SQL.

    SONiC's gNMI server under SAMPLE sends the current COUNTERS_DB value on every tick, changed or not, stamped
    with the send time, while COUNTERS_DB refreshes queue counters every 10 s and watermarks every 60 s: read
    each second, a queue counter is nine zeros and one 10x jump. A group's refresh period is inferred from its
    values: the shortest spacing between a series' changes, when the group changed at least `MIN_CHANGES`
    times, that spacing is `MIN_READS_PER_REFRESH` reads (the median spacing of samples) or more, and the
    spacings are multiples of it (`MIN_REGULAR_SHARE`); spacings across a clock step or a lost read are left out
    (`_clean_spacings_sql`). Groups refreshed as often as they are read, rare events and groups with few changes
    are none. `candidates` (an array expression of `SOURCE_SERIES_KEY`s) names the series `candidate_series_sql`
    picks where the caller counted them already (`Frames._scan`), else they are counted here."""
    keys = candidates or f"({_candidate_series_sql(rows)})"
    moving = f"SELECT * FROM ({rows}) WHERE concat({SOURCE_SERIES_KEY}) IN {keys}"
    spacing = "clean_spacing_s"
    return f"""
    SELECT key, group_refresh_s AS refresh_s, group_read_s AS read_s FROM (
        SELECT concat({REFRESH_GROUP}) AS key, any(refresh_s) AS group_refresh_s, any(read_s) AS group_read_s,
            countIf(changed) AS changes,
            avgIf(abs({spacing} - refresh_s * round({spacing} / refresh_s)) <= 0.5 * read_s, {spacing} IS NOT NULL)
                AS regular
        FROM (
            SELECT *, min({spacing}) OVER g AS refresh_s, median(gap_s) OVER g AS read_s
            FROM ({_clean_spacings_sql(moving)})
            WINDOW g AS (PARTITION BY {_REFRESH_GROUP_COLUMNS})
        )
        GROUP BY key
    )
    WHERE changes >= {MIN_CHANGES} AND group_refresh_s >= {MIN_READS_PER_REFRESH} * group_read_s
        AND regular >= {MIN_REGULAR_SHARE}"""


#: The query parameters `fresh_reads_sql` reads the re-sending groups from by default (`refresh_groups_sql`'s
#: columns as arrays: keys, refresh periods, read intervals).
RESENT_PARAMS = ("{resent:Array(String)}", "{refresh_s:Array(Float64)}", "{read_s:Array(Float64)}")


def fresh_reads_sql(rows: str, groups: tuple[str, str, str] = RESENT_PARAMS) -> str:
    """`rows` (counter samples) without the values re-sent between refreshes, as SQL: in a group of `groups`
    (array expressions of keys, refresh periods and read intervals, `refresh_groups_sql`; by default the query
    parameters `RESENT_PARAMS`), an unchanged value is a re-send, no read, except the first one read in each
    further refresh period after its series' last change (half a read early counts): that is a real read of a
    value that did not move (a still counter, an idle queue's zero peak). The next change then spans the time
    since the last read kept. Each period, not each read after the first period: a watermark that saturated at
    the same peak twice is two peaks, never one per send from then on."""
    keys, refresh_s, read_s = groups
    period = f"arrayElement({refresh_s}, g)"
    slack = f"0.5 * arrayElement({read_s}, g)"
    return f"""
    SELECT {_SAMPLE} FROM (
        SELECT *, indexOf({keys}, concat({REFRESH_GROUP})) AS g,
            if(lagInFrame(changed) OVER s, 0, lagInFrame(since_s) OVER s) AS before_s
        FROM ({_changes_sql(rows)})
        WINDOW s AS (PARTITION BY {SOURCE_SERIES} ORDER BY ts ASC ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    )
    WHERE g = 0 OR changed OR n = 1 OR ifNull(
        floor((since_s + {slack}) / {period}) > floor((before_s + {slack}) / {period}),
        0)"""


def one_source_sql(rows: str) -> str:
    """`rows` (counter samples) from one source per series, as SQL: the source that delivered the most samples
    (ties: the source named last), as the detectors' frames choose (`Frames.shadowed_sources`). A counter two
    sources land a few counts apart (gNMI and SNMP, two collector shards in failover) is never interleaved, and
    its rate is never counted twice by a sum over sources."""
    return f"""
    SELECT {_SAMPLE} FROM (
        SELECT *, max((source_samples, source)) OVER (PARTITION BY {SERIES}) AS best
        FROM (SELECT {_SAMPLE}, count() OVER (PARTITION BY {SOURCE_SERIES}) AS source_samples FROM ({rows}))
    )
    WHERE (source_samples, source) = best"""


def _stepped_over_sql() -> str:
    """The previous sample is out of line with its two neighbours, which are in order themselves: a counter
    read once as 0 (it dipped by more than the counter then moved: a reset counting past its old value within
    one interval stays a reset) or as garbage (it rose implausibly fast, `max_rate_sql`, and came back). It
    is stepped over, not taken for a reset or a wrap."""
    spike_s = "dateDiff('nanosecond', before_ts, prev_ts) / 1e9"
    return f"""(n > 2 AND value >= before_value AND (
            (prev_value < before_value AND value - before_value <= before_value - prev_value)
            OR (prev_value > value AND prev_value - before_value > {spike_s} * {max_rate_sql()})))"""


def counter_delta_sql() -> str:
    """The increase of a counter since the previous sample (`SERIES_LAGS` columns), as SQL: wraps
    unwrapped, a proven reset counts from zero, a one-sample glitch stepped over; NULL for a drop that proves
    nothing (the caller drops the sample and counts it).

    A drop is a 32-bit wrap only for a counter 32 bits wide (`COUNTER32_RAW_NAMES`) when the previous value
    was in the top quarter of 2^32 and the new one in the bottom quarter; a 64-bit wrap above 2^63. Any
    other drop is a reset (device reboot, counter clear) only when the counter restarted: the new value is
    what the counter could have counted since the previous read (`max_rate_sql` x the interval) and at most
    half the old one. A smaller drop (a clock stepped back, a re-sent stale value) is no reset: counted as
    the whole counter it was a storm "held 524286% of the time". After a sample out of line with both its
    neighbours the increase is counted from the sample before it.
    """
    w32, w64 = _WRAP32, _WRAP64
    interval = "dateDiff('nanosecond', prev_ts, ts) / 1e9"
    return f"""multiIf(
        {_stepped_over_sql()}, value - before_value,
        value >= prev_value, value - prev_value,
        wraps32 AND prev_value >= {w32 * 3 // 4} AND prev_value < {w32} AND value < {w32 // 4},
            value + {w32} - prev_value,
        prev_value >= {w64 // 2}, value + {w64} - prev_value,
        value <= {interval} * {max_rate_sql()} AND value <= prev_value / 2, value,
        NULL
    )"""


def delta_seconds_sql() -> str:
    """The seconds `counter_delta_sql`'s increase spans (two intervals where a glitch was stepped over)."""
    return f"dateDiff('nanosecond', if({_stepped_over_sql()}, before_ts, prev_ts), ts) / 1e9"


def max_rate_sql(metric: str = "metric") -> str:
    """The plausible ceiling of a counter's rate (catalog.max_rate) as SQL over the metric column: a
    computed increase above it is a glitch, not traffic, and gives no rate."""
    by_ceiling: dict[float, list[str]] = {}
    for m in METRICS:
        if m.kind == "counter" and max_rate(m.name) != MAX_RATE_DEFAULT:
            by_ceiling.setdefault(max_rate(m.name), []).append(m.name)
    arms = "".join(
        f"{metric} IN ({', '.join(repr(n) for n in names)}), {ceiling!r}, " for ceiling, names in by_ceiling.items()
    )
    return f"multiIf({arms}{MAX_RATE_DEFAULT!r})"


def _rates_sql(samples: str) -> str:
    """Per-second rates between consecutive `samples` (counter samples) of one series and source, as SQL (wraps
    and resets as `counter_delta_sql`, never negative). Duplicate samples (same timestamp), the first sample of
    a series, drops that prove no reset and implausible increases (`max_rate_sql`) give no rate."""
    return f"""
SELECT ts, device, role, port, priority, metric, source, value, dt_s, increase / dt_s AS rate, reset_or_wrap
FROM
(
    SELECT ts, device, role, port, priority, metric, source, value,
        {counter_delta_sql()} AS increase, {delta_seconds_sql()} AS dt_s, value < prev_value AS reset_or_wrap, n
    FROM
    (
        SELECT ts, device, role, port, priority, metric, source, value, raw_name,
            {SERIES_LAGS}
        FROM ({samples})
        {SERIES_WINDOW}
    )
)
WHERE n > 1 AND dt_s > 0 AND increase IS NOT NULL AND rate <= {max_rate_sql()}"""


def _counter_samples(db: str, where: str = "") -> str:
    return f"""SELECT {_SAMPLE} FROM `{db}`.`counters`
        WHERE metric IN (SELECT metric FROM `{db}`.`metric_catalog` WHERE kind = 'counter'){where}"""


def port_rates_sql(db: str) -> str:
    """`port_rates`: every counter sample's rate since the previous one of its series and source (`_rates_sql`),
    over the whole store. Each source's series is rated as it came: a counter two sources land appears twice,
    and values a target re-sent between refreshes are zeros and jumps (see `port_rates_fresh_sql`)."""
    return f"CREATE OR REPLACE VIEW `{db}`.`port_rates` AS{_rates_sql(_counter_samples(db))}"


def port_rates_fresh_sql(db: str, of_metrics: bool = False) -> str:
    """`port_rates_fresh(start=..., end=...)`: rates of the counter samples stamped in [start, end) as the
    detectors read them, for dashboards and SQL: one source per series (`one_source_sql`), and the values a
    target re-sent between its refreshes (`refresh_groups_sql`, inferred from the window's own samples) are no
    reads, so a 10 s queue counter sent every second is one steady rate, not nine zeros and a 10x jump. A
    parameterized view: the refresh inference needs a bounded window (Grafana: `start=$__fromTime_ms,
    end=$__toTime_ms`).

    `of_metrics`: `port_rates_fresh_of(start=..., end=..., metrics=[...])`, the same rates of these metrics only,
    read from the store's metric-first sort key instead of every counter of the window (3-10x faster; a panel
    names its metrics). The same rows: sources and refresh groups are chosen per metric."""
    window = " AND ts >= {start:DateTime64(9, 'UTC')} AND ts < {end:DateTime64(9, 'UTC')}"
    if of_metrics:
        window += " AND metric IN {metrics:Array(String)}"
    one = one_source_sql(_counter_samples(db, window))
    groups = f"(SELECT (groupArray(key), groupArray(refresh_s), groupArray(read_s)) FROM ({refresh_groups_sql(one)}))"
    fresh = fresh_reads_sql(one, ("resent.1", "resent.2", "resent.3"))
    name = "port_rates_fresh_of" if of_metrics else "port_rates_fresh"
    return f"CREATE OR REPLACE VIEW `{db}`.`{name}` AS\nWITH {groups} AS resent{_rates_sql(fresh)}"
