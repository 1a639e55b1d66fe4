"""Fuzzing the text parsers of host output: `ethtool -S`, sysfs dumps and counter values, .snmprec walks,
`rdma -j resource show qp`. Each parser is documented never to raise on bad lines (count and go on),
so here any exception at all is a bug; and a good line spliced around a bad one must still come out."""

from __future__ import annotations

import datetime as dt
import time

from rocescope.collectors.ebpf.rdma_qp import parse_rdma_qp_json
from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.ethtool import parse_ethtool_stats
from rocescope.collectors.nic.host import IB, FixtureHost, FixtureNic
from rocescope.collectors.nic.sysfs import ib_rate_mbps, ib_state_active, parse_sysfs_dump
from rocescope.collectors.snmp.agent import parse_snmprec

from fuzzing import FIXTURES, REAL, Mutator, count, record, run

ETHTOOL = sorted((REAL / "01_ethtool").glob("*ethtool-S.txt"))
SYSFS = REAL / "02_rdma" / "procfs_fixture_mlx5_0_sysfs.txt"
TS = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


def test_ethtool_text() -> None:
    corpus = [p.read_bytes() for p in ETHTOOL]

    def parse(data: bytes) -> None:
        stats = parse_ethtool_stats(data.decode("utf-8", "replace"), logger=None)
        assert all(isinstance(v, int) for _, v in stats.values)

    tally = run("ethtool -S", Mutator(corpus).many(count()), parse)
    assert tally.inputs >= count() and tally.refused == 0


def test_ethtool_good_lines_around_a_bad_one_are_kept() -> None:
    bad = Mutator([b"rx_bytes_phy: 12x", b"[3]: rx_bytes 7", b"::::", b"\x00\xff: 1"], seed=1)
    for i in range(200):
        text = f"NIC statistics:\n     rx_prio3_pause: {i}\n{bad().decode('utf-8', 'replace')}\n     tx_bytes_phy: 42\n"
        values = dict(parse_ethtool_stats(text, logger=None).values)
        assert values.get("rx_prio3_pause") == i and values.get("tx_bytes_phy") == 42, text


def test_sysfs_dump_and_values() -> None:
    mut = Mutator([SYSFS.read_bytes()])

    def parse(data: bytes) -> None:
        dump = parse_sysfs_dump(data.decode("utf-8", "replace"), logger=None)
        for value in dump.files.values():
            ib_rate_mbps(value)
            ib_state_active(value)

    tally = run("sysfs dump", mut.many(count()), parse)
    assert tally.refused == 0


def test_sysfs_counter_values_through_the_nic_collector() -> None:
    """Garbled counter files under /sys/class/infiniband/*/counters: every other counter of the poll lands.

    One input = one garbled counter value; a poll carries 40 of them next to the real (good) ones."""
    dump = SYSFS.read_text()
    nic = FixtureNic("eth3", "mlx5_core", (ETHTOOL[-1]).read_text(), "mlx5_3", 1, dump, speed_mbps=25000)
    host = FixtureHost.from_nics([nic])
    files = host.sysfs.files  # type: ignore[attr-defined]
    counters = sorted(p for p in files if p.startswith(f"{IB}/mlx5_3/ports/1/") and "counters/" in p)
    assert len(counters) > 40, counters
    good_rows = NicCollector(host, "gpu-a01").poll(TS).num_rows
    mut = Mutator([files[p].encode() for p in counters] + [b"18446744073709551615", b"0"], seed=7)
    per_poll, polls = 40, count() // 40
    t0, tried = time.perf_counter(), 0
    for k in range(polls):
        garbled = [counters[(k * per_poll + j) % len(counters)] for j in range(per_poll)]
        saved = {p: files[p] for p in garbled}
        for p in garbled:
            files[p] = mut().decode("utf-8", "replace")
        batch = NicCollector(host, "gpu-a01").poll(TS)
        files.update(saved)
        tried += len(garbled)
        assert batch.num_rows >= good_rows - len(garbled), (batch.num_rows, good_rows)
    record("sysfs counter values", tried, seconds=time.perf_counter() - t0)


def test_snmprec_walk() -> None:
    corpus = [p.read_bytes() for p in (REAL / "05_snmp").glob("*.snmprec")]

    def parse(data: bytes) -> None:
        walk = parse_snmprec(data.decode("utf-8", "replace"))
        assert all(isinstance(v, int | bytes | str) for _, v in walk.rows)

    run("snmprec", Mutator(corpus).many(count()), parse)


def test_rdma_qp_json() -> None:
    corpus = [(FIXTURES / "rdma" / "rdma_resource_show_qp.json").read_bytes()]
    run("rdma resource show qp", Mutator(corpus).many(count()), parse_rdma_qp_json)
