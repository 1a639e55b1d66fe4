"""Real components for tests: a Tansu Kafka broker, embedded chdb, chdb served over HTTP."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore, Store
from rocescope.testbed.tansu import Broker

from fuzzing import SCALE, SEED, TALLIES, record

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path).start()
    yield b
    b.stop()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChdbStore]:
    s = ChdbStore(tmp_path / "chdb")
    migrate(s)
    yield s
    s.close()


class ServedStore:
    """Embedded chdb behind ClickHouse's HTTP interface, reached through the server backend."""

    def __init__(self, path: Path):
        from rocescope.config import StoreConfig
        from rocescope.pipeline.store import ClickHouseStore
        from rocescope.testbed.chdb_http import ChdbHttpServer

        self.engine = ChdbStore(path)
        self.http = ChdbHttpServer(self.engine.session).start()
        self.client = ClickHouseStore(StoreConfig(backend="clickhouse", url=self.http.url, database="rocescope"))

    def close(self) -> None:
        self.client.close()
        self.http.stop()
        self.engine.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedStore]:
    s = ServedStore(tmp_path / "served")
    yield s
    s.close()


@pytest.fixture(params=["chdb", "clickhouse-http"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same tests against both backends: embedded chdb, and a ClickHouse server over HTTP."""
    if request.param == "chdb":
        s = ChdbStore(tmp_path / "chdb")
        migrate(s)
        yield s
        s.close()
    else:
        served = ServedStore(tmp_path / "served")
        migrate(served.client)
        yield served.client
        served.close()


@pytest.fixture
def now() -> dt.datetime:
    """Recent timestamps: rows older than the TTL would be dropped at insert."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=10)


# The fuzz targets' input counts in the terminal summary, so CI output shows them without `-s`. Here, not in
# tests/fuzz/conftest.py: under pytest-xdist the targets run in workers, each hands its tallies to the
# controller (`workeroutput`), and the controller, which collects nothing, loads only this conftest.


#: The files that run longest (about 10 to 80 s each, three workers on two cores, measured from `--junitxml` times),
#: run first so that the xdist workers, handed one file at a time, finish together instead of one waiting on a long
#: file handed out last. Only an order: a file missing from the list runs after these, in collection order.
#: scripts/test passes `--no-loadscope-reorder`: without it xdist re-sorts files by their number of tests, which put
#: the long files (a few tests each, on simulated runs) last.
LONGEST_FIRST = (
    "analysis/test_real_gear.py",
    "analysis/test_polarization.py",
    "analysis/report/test_page.py",
    "analysis/test_jobs_from_pods.py",
    "pipeline/test_kafka.py",
    "collectors/test_import_ledger.py",
    "analysis/test_link_health.py",
    "sim/test_served_profiles.py",
    "faults/test_counter_anomalies.py",
    "cli/test_analysis.py",
    "analysis/test_cnp_loss.py",
    "analysis/test_counter_hygiene.py",
    "sim/test_mirror.py",
    "sim/test_serve.py",
    "analysis/test_incast.py",
    "cli/test_kafka_processes.py",
    "sim/test_served_deployment.py",
    "faults/test_store_outage.py",
    "dashboards/test_dashboards.py",
    "analysis/test_impact.py",
    "analysis/test_microburst.py",
    "pipeline/test_store.py",
    "analysis/test_real_gear_fabric.py",
    "fuzz/test_config_cli.py",
    "fuzz/test_pcap_batch.py",
    "analysis/test_duty_cycles.py",
    "cli/test_sim.py",
    "cli/test_profiles.py",
    "analysis/test_admin_and_watchdog.py",
    "collectors/test_importers.py",
    "pipeline/test_retention.py",
    "faults/test_sink_crash.py",
    "faults/test_targets.py",
    "collectors/ebpf/test_collector.py",
    "collectors/snmp/test_live_agents.py",
    "sim/test_draw.py",
    "analysis/test_frames.py",
    "analysis/test_nccl_hang.py",
    "test_schema.py",
    "analysis/test_coverage.py",
    "cli/test_store.py",
)


#: `scripts/test --full` sets it: the tests marked `full` run too (the default run is what CI runs, which should
#: take under 10 minutes on two cores; every real component and every detector's own cases still run in it).
FULL = os.environ.get("ROCESCOPE_FULL_TESTS", "") not in ("", "0")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    rank = {str(tests / name): i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))
    if not FULL:
        skip = pytest.mark.skip(reason="a long run: scripts/test --full (ROCESCOPE_FULL_TESTS=1)")
        for item in items:
            if item.get_closest_marker("full"):
                item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)
    if out is not None:  # an xdist worker
        out["fuzz_tallies"] = {name: (t.inputs, t.refused, t.seconds) for name, t in TALLIES.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: a worker finished; add its tallies."""
    for name, (inputs, refused, seconds) in getattr(node, "workeroutput", {}).get("fuzz_tallies", {}).items():
        record(name, inputs, refused, seconds)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TALLIES:
        return
    tr = terminalreporter
    tr.section(f"fuzz inputs (ROCESCOPE_FUZZ_SCALE={SCALE:g}, ROCESCOPE_FUZZ_SEED={SEED})")
    for name, t in sorted(TALLIES.items()):
        tr.write_line(
            f"{name:<28} {t.inputs:>9,} inputs  {t.refused:>8,} refused with a project error  {t.seconds:6.1f} s"
        )
    tr.write_line(f"{'total':<28} {sum(t.inputs for t in TALLIES.values()):>9,} inputs")
