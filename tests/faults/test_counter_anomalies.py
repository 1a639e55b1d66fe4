"""Counter anomalies real devices produce, on a clean simulated fabric: a 32-bit counter that wraps, a switch
whose counters are cleared mid-run, a busy counter read once as 0 and once as garbage, duplicated samples,
samples that arrive out of order, and a host whose clock runs 2.5 s ahead.

The same run is landed twice, as the devices reported it and with the anomalies; the rates of every touched
series must equal the clean ones (a glitch may only remove its own samples), no rate is negative or absurd,
and the detectors find nothing in either (the fabric is clean).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.run import analyze
from rocescope.catalog import counter_metrics, max_rate
from rocescope.config import Settings, StoreConfig
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore, query_polars
from rocescope.sim.run import RunSummary, run_scenario
from rocescope.sim.scenario import load_scenario

WRAP32 = 2**32
WRAPPED = ("gpu-003", "tx_packets")  # a NIC's 32-bit packet counter, made to wrap mid-run
CLEARED = "leaf-r0-01"  # `sonic-clear counters` on a switch mid-run
GLITCHED = ("leaf-r1-01", "tx_bytes")  # one sample read as 0, one as garbage (2^64 - 1)
SKEWED = "gpu-005"  # its clock 2.5 s ahead of everyone else's


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    path = tmp_path_factory.mktemp("anomalies")
    settings = Settings(store=StoreConfig(path=path, database="clean", ttl_days=0))
    summary = run_scenario(settings, load_scenario("baseline"), 150.0)
    with ChdbStore(path, "clean") as clean:
        rows = query_polars(clean, "SELECT * FROM counters")
        anomalous = _with_anomalies(rows, summary.start + dt.timedelta(seconds=75))
        clean.command("CREATE DATABASE IF NOT EXISTS anomalous")
    with ChdbStore(path, "anomalous") as store:
        migrate(store, ttl_days=0)
        for table in ("links", "endpoints", "incidents"):
            store.command(f"INSERT INTO anomalous.{table} SELECT * FROM clean.{table}")
        # out of order: later chunks of time first, every chunk shuffled
        order = np.random.default_rng(7).permutation(anomalous.height)
        for chunk in reversed(np.array_split(order, 6)):
            store.insert("counters", anomalous[chunk].to_arrow())
    return path, summary


def _with_anomalies(rows: pl.DataFrame, mid: dt.datetime) -> pl.DataFrame:
    counters = pl.col("metric").is_in(list(counter_metrics()))
    # a 32-bit counter that wraps between two samples around `mid`
    wrapped = (pl.col("device") == WRAPPED[0]) & (pl.col("metric") == WRAPPED[1])
    at_mid = rows.filter(wrapped & (pl.col("ts") <= mid))["value"].max()
    assert isinstance(at_mid, float) and at_mid > 0
    offset = WRAP32 - at_mid - 1
    rows = rows.with_columns(
        pl.when(wrapped).then((pl.col("value") + offset) % WRAP32).otherwise(pl.col("value")).alias("value")
    )
    # counters of one switch cleared at `mid`: from then on they count from the value they had
    cleared = (pl.col("device") == CLEARED) & counters
    series = ["device", "port", "metric", "priority"]
    before = (
        rows.filter(cleared & (pl.col("ts") < mid))
        .group_by(series)
        .agg(pl.col("value").sort_by("ts").last().alias("base"))
    )
    rows = (
        rows.join(before, on=series, how="left")
        .with_columns(
            pl.when(cleared & (pl.col("ts") >= mid)).then(pl.col("value") - pl.col("base")).otherwise("value")
        )
        .drop("base")
    )
    # one busy switch counter read as 0 once and as garbage once
    glitch = (pl.col("device") == GLITCHED[0]) & (pl.col("metric") == GLITCHED[1])
    busiest = rows.filter(glitch).group_by("port").agg(pl.col("value").max()).sort("value")["port"][-1]
    one = glitch & (pl.col("port") == busiest)
    times = rows.filter(one)["ts"].sort()
    # late in the run, where the counter holds far more than it moves in a poll (a real counter's age): a 0
    # read on a counter younger than one poll's movement is indistinguishable from a clear, and is taken as one
    rows = rows.with_columns(
        pl.when(one & (pl.col("ts") == times[100]))
        .then(0.0)
        .when(one & (pl.col("ts") == times[125]))
        .then(float(2**64 - 1))
        .otherwise(pl.col("value"))
        .alias("value")
    )
    # a host whose clock runs ahead
    rows = rows.with_columns(
        pl.when(pl.col("device") == SKEWED)
        .then(pl.col("ts") + pl.duration(milliseconds=2500, time_unit="ns"))
        .otherwise("ts")
        .alias("ts")
    )
    # every tenth sample delivered twice
    return pl.concat([rows, rows.gather_every(10)])


def _rates(path: Path, db: str, summary: RunSummary, devices: list[str]) -> pl.DataFrame:
    with ChdbStore(path, db) as store:
        frames = Frames(store, _window(summary, skew_s=3))
        return frames.rates(list(counter_metrics()), devices=devices)


def _window(summary: RunSummary, skew_s: float = 0) -> Window:
    return Window(summary.start, summary.end + dt.timedelta(seconds=skew_s))


def test_rates_survive_wraps_clears_duplicates_disorder_and_skew(landed: tuple[Path, RunSummary]) -> None:
    path, summary = landed
    devices = [WRAPPED[0], CLEARED, GLITCHED[0], SKEWED]
    clean = _rates(path, "clean", summary, devices)
    seen = _rates(path, "anomalous", summary, devices)
    assert (seen["rate"] >= 0).all(), "a negative rate"
    ceilings = seen["metric"].map_elements(max_rate, return_dtype=pl.Float64)
    assert (seen["rate"] <= ceilings).all(), "an absurd rate"

    keys = ["device", "port", "metric", "priority"]
    clean = clean.with_columns(
        pl.when(pl.col("device") == SKEWED)
        .then(pl.col("ts") + pl.duration(milliseconds=2500, time_unit="ns"))
        .otherwise("ts")
        .alias("ts")
    )
    both = clean.join(seen, on=[*keys, "ts"], how="full", suffix="_seen", coalesce=True)
    glitched = (pl.col("device") == GLITCHED[0]) & (pl.col("metric") == GLITCHED[1])
    differ = both.filter(
        pl.col("rate").is_null()
        | pl.col("rate_seen").is_null()
        | ((pl.col("rate") - pl.col("rate_seen")).abs() > 1e-6 * pl.col("rate").abs() + 1e-9)
    )
    print(f"\n{clean.height} clean rates; {differ.height} differ, all around the two glitched samples")
    assert differ.filter(~glitched).is_empty(), differ.filter(~glitched).head(10)
    # each glitch costs at most its own sample and the one after it; both give a rate of 0 or none
    assert 0 < differ.filter(glitched).height <= 4
    assert (differ.filter(glitched)["rate_seen"].drop_nulls() == 0).all(), "a glitch gives no rate or none at all"
    wrapped = seen.filter((pl.col("device") == WRAPPED[0]) & (pl.col("metric") == WRAPPED[1]))
    assert wrapped.height > 100 and wrapped["rate"].min() > 0, "the wrap is unwrapped, not a reset to zero"


def test_no_findings_on_anomalous_counters(landed: tuple[Path, RunSummary]) -> None:
    path, summary = landed
    for db in ("clean", "anomalous"):
        with ChdbStore(path, db) as store:
            result = analyze(store, _window(summary, skew_s=3), write=False)
        assert not result.failed, result.failed
        assert result.findings == [], f"{db}: {[f.summary for f in result.findings]}"
