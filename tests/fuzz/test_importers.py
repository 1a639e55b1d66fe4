"""Fuzzing the `import --kind` readers and the collectors' JSON parsers they reuse: gnmic event/JSON output,
SONiC redis dumps, `lldpcli -f json|json0`, `kubectl get pods -o json`, each taken as far as the Batch
the importer ships (so a value the schema refuses would show up here, not in production). Allowed: the
documented DecodeError for input that is not the format at all; everything readable comes out."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from rocescope.collectors import importers, sonic_dump
from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.jobs.placement import Inventory, endpoints_batch, parse_pods
from rocescope.collectors.lldp.collector import links_batch
from rocescope.collectors.lldp.parse import parse_lldpcli
from rocescope.errors import DecodeError
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import JobSpec, place_jobs
from rocescope.sim.topology import FabricSpec, Topology

from fuzzing import FIXTURES, REAL, Mutator, count, run

AT = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
GNMIC = (FIXTURES / "gnmic" / "srl_event.json").read_bytes()


def test_gnmic_output() -> None:
    """Rows of many inputs gather in one CounterRows, as `import --kind gnmic --kafka-topic` gathers many
    messages, and become batches every 100 inputs (building Arrow per input would cost 3 ms each)."""
    ndjson = b"\n".join(json.dumps(doc).encode() for doc in importers.gnmic_documents(GNMIC))
    rows = CounterRows()
    seen = 0

    def parse(data: bytes) -> None:
        nonlocal rows, seen
        seen += 1
        try:
            importers.gnmic_rows(importers.gnmic_documents(data), "", rows)
        finally:
            if seen % 100 == 0:
                rows.to_batches("switch", "import")
                rows = CounterRows()

    run("gnmic JSON", Mutator([GNMIC, ndjson]).many(count()), parse, (DecodeError,))
    rows.to_batches("switch", "import")


def test_gnmic_good_events_around_a_bad_one_are_kept() -> None:
    events = next(importers.gnmic_documents(GNMIC))
    assert isinstance(events, list)
    good = [e for e in events if "values" in e][:2]
    want = importers.gnmic_rows(iter([good])).value
    mut = Mutator([json.dumps(good[0]).encode()], seed=3)
    for _ in range(300):
        bad = mut()
        text = json.dumps(good[0]).encode() + b"\n" + bad + b"\n" + json.dumps(good[1]).encode()
        values = importers.gnmic_rows(importers.gnmic_documents(text)).value
        for v in want:  # the good events' values, whatever the bad record in between did
            assert v in values, (bad, values)


def _sonic(name: str) -> Any:
    def parse(data: bytes) -> None:
        # exactly what `rocescope import --kind sonic` does with a file's bytes
        rows, links, _ = sonic_dump.sonic_dump(load_json(data, name), name, AT)
        rows.to_batches("switch", "import")
        if links:
            links_batch(links, AT, name)

    return parse


def _small_dumps(doc: dict[str, Any], per: int = 4) -> list[bytes]:
    """The real COUNTERS_DB cut into dumps of a few counter objects each (with the name maps), so one
    input costs ~0.5 ms instead of the 20 ms of the whole 500-object dump."""
    names = ("COUNTERS_PORT_NAME_MAP", "COUNTERS_QUEUE_NAME_MAP", "COUNTERS_PG_NAME_MAP")
    maps = {k: doc[k] for k in names}
    objects = sorted(k for k in doc if ":oid:" in k)
    return [
        json.dumps({**maps, **{k: doc[k] for k in objects[i : i + per]}}, indent=1).encode()
        for i in range(0, len(objects), per)
    ]


def test_sonic_dump() -> None:
    counters = json.loads((REAL / "04_gnmi_sonic" / "sonic-utilities_mock_counters_db.json").read_bytes())
    corpus = [
        *_small_dumps(counters)[:40],
        (REAL / "06_lldp" / "sonic-snmpagent_mock_appl_db_LLDP_ENTRY_TABLE.json").read_bytes(),
    ]
    run("sonic redis dump", Mutator(corpus).many(count()), _sonic("sw"), (DecodeError,))


def test_sonic_deep_nesting_is_a_decode_error() -> None:
    """Regression (found by this fuzzer's token splices): nesting past Python's recursion limit raised
    RecursionError out of `import --kind sonic` instead of a DecodeError naming the file."""
    with pytest.raises(DecodeError):
        _sonic("sw")(b"[" * 200_000)


def _lldp(data: bytes) -> None:
    found, _ = parse_lldpcli(data, "gpu-001")
    if found:
        links_batch(found, AT, "gpu-001")


def test_lldpcli_json() -> None:
    corpus = [
        p.read_bytes() for p in (FIXTURES / "lldp").glob("lldpd_test_lldpcli_neighbors.json*") if "source" not in p.name
    ]
    run("lldpcli JSON", Mutator(corpus).many(count()), _lldp, (DecodeError,))


@pytest.fixture(scope="module")
def pods() -> tuple[bytes, Inventory]:
    topo = Topology(FabricSpec(hosts=4, rails=2))
    jobs = place_jobs(topo, [JobSpec("llama", 2), JobSpec("bert", 1, namespace="ml")])
    return json.dumps(pod_list_json(jobs, topo), indent=1).encode(), Inventory.from_topology(topo)


def test_kubectl_pods(pods: tuple[bytes, Inventory]) -> None:
    text, inv = pods

    def parse(data: bytes) -> None:
        rows, _ = parse_pods(data, inv, AT)
        if rows:
            endpoints_batch(rows, "kubectl")

    run("kubectl pods JSON", Mutator([text]).many(count()), parse, (DecodeError,))


def test_kubectl_good_pods_around_a_bad_one_are_kept(pods: tuple[bytes, Inventory]) -> None:
    text, inv = pods
    doc = json.loads(text)
    want = {(r.job_id, r.rank) for r in parse_pods(doc, inv, AT)[0]}
    mut = Mutator([json.dumps(doc["items"][0]).encode()], seed=5)
    for _ in range(300):
        try:
            bad = json.loads(mut())
        except ValueError:
            continue
        items = [doc["items"][0], bad, *doc["items"][1:]]
        rows, _ = parse_pods({**doc, "items": items}, inv, AT)
        assert want <= {(r.job_id, r.rank) for r in rows}, bad
