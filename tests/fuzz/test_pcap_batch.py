"""Fuzzing the byte decoders: capture files (the numpy fast path on every input, tshark/pyshark on a few)
and Kafka messages (Arrow IPC through `batch.decode`, and through the real Sink into chdb, where a bad
message between good ones is dead-lettered and the good ones land)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from rocescope import schema
from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.fast import batches, decode_pcap
from rocescope.collectors.pcap.framing import UnsupportedCapture
from rocescope.collectors.pcap.tshark import PcapFile
from rocescope.config import SinkConfig
from rocescope.errors import DecodeError, SchemaError
from rocescope.pipeline.batch import decode, encode
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import ChdbStore
from rocescope.pipeline.transport import InProcessBus, InProcessProducer

from fuzzing import REAL, Mutator, count, run
from samples import sample_batch

PCAPS = sorted(p for p in (REAL / "03_pcap").glob("*.pcap") if "erf" not in p.name)


def _records(data: bytes) -> list[tuple[bytes, bytes]]:
    """(16-byte record header, frame) of every whole record of a little-endian classic pcap."""
    out, off = [], 24
    while off + 16 <= len(data):
        incl = int.from_bytes(data[off + 8 : off + 12], "little")
        if off + 16 + incl > len(data):
            break
        out.append((data[off : off + 16], data[off + 16 : off + 16 + incl]))
        off += 16 + incl
    return out


def _pcap(header: bytes, records: list[tuple[bytes, bytes]]) -> bytes:
    parts = [header]
    for rec, frame in records:
        parts.append(rec[:8] + len(frame).to_bytes(4, "little") + rec[12:16] + frame)
    return b"".join(parts)


def test_pcap_fast_path_frames() -> None:
    """One input = one mutated frame (the record framing kept whole), 100 per file, each placed after a
    real RoCEv2 frame: the fast path's per-call cost (~1 ms of numpy set-up) stays out of the count, and
    every real frame must come out with its fields whatever the garbage next to it did."""
    files = [p.read_bytes() for p in PCAPS]
    header = files[0][:24]
    assert all(f[:4] == b"\xd4\xc3\xb2\xa1" for f in files)
    records = [r for f in files if f[20:24] == header[20:24] for r in _records(f)]
    psn = {r: decode_pcap(_pcap(header, [r])).columns["psn"].tolist() for r in records}
    roce = [r for r in records if len(psn[r]) == 1]
    assert len(roce) > 50
    mut = Mutator([frame for _, frame in records])
    rng = mut.rng
    per_file = 100

    def parse(_: bytes) -> None:
        spliced: list[tuple[bytes, bytes]] = []
        good = []
        for _ in range(per_file):
            good.append(len(spliced))
            spliced.append(rng.choice(roce))
            spliced.append((rng.choice(records)[0], mut()))
        decoded = decode_pcap(_pcap(header, spliced))
        list(batches(decoded, "fuzz", 1, 10_000))
        assert decoded.error is None
        got = dict(zip(decoded.frames.tolist(), decoded.columns["psn"].tolist(), strict=True))
        for i in good:
            assert got.get(i) == psn[spliced[i]][0], (i, spliced[i + 1])

    tally = run("pcap frames (numpy path)", (b"" for _ in range(count() // per_file)), parse)
    tally.inputs = tally.inputs * per_file  # mutated frames


def test_pcap_fast_path_files() -> None:
    """Mutated whole files (file header, record framing): UnsupportedCapture (tshark's turn) for a
    damaged file header, else rows; damage in the framing ends the file there with the reason."""
    corpus = [p.read_bytes()[:4096] for p in PCAPS]

    def parse(data: bytes) -> None:
        list(batches(decode_pcap(data), "fuzz", 1, 10_000))

    run("pcap files (numpy path)", Mutator(corpus).many(count()), parse, (UnsupportedCapture,))


def test_pcap_records_before_the_damage_are_kept() -> None:
    data = (REAL / "03_pcap" / "rdma_ib_tutorial_rdma_write_bw.pcap").read_bytes()
    whole = decode_pcap(data)
    assert whole.num_rows > 10
    cut = int(whole.frames[10])  # the 11th RoCE row's record number
    offsets = [24]
    while len(offsets) <= cut:
        incl = int.from_bytes(data[offsets[-1] + 8 : offsets[-1] + 12], "little")
        offsets.append(offsets[-1] + 16 + incl)
    damaged = data[: offsets[cut] + 8] + (10**9).to_bytes(4, "little") + data[offsets[cut] + 12 :]
    part = decode_pcap(damaged)
    assert part.error is not None and part.num_rows == 10
    assert part.columns["psn"].tolist() == whole.columns["psn"][:10].tolist()


def test_pcap_pyshark_path(tmp_path: Path) -> None:
    """A few mutated captures through tshark (pyshark), the path for what the fast path refuses."""
    corpus = [p.read_bytes() for p in PCAPS]

    def parse(data: bytes) -> None:
        path = tmp_path / "fuzz.pcap"
        path.write_bytes(data)
        collector = PcapCollector("fuzz", fast_files=False)
        source = PcapFile(path)
        try:
            list(collector.collect(source))
        finally:
            source.close()

    run("pcap (tshark via pyshark)", Mutator(corpus, seed=17).many(count(4)), parse)


def _encoded() -> list[bytes]:
    return [encode(sample_batch(stream, 3, seed=i)) for i, stream in enumerate(schema.STREAMS)]


def test_arrow_ipc_messages() -> None:
    corpus = _encoded()
    streams = list(schema.STREAMS)

    def parse(data: bytes) -> None:
        for stream in streams:
            try:
                batch = decode(stream, data)
            except SchemaError:
                continue
            batch.data.validate(full=True)

    run("Kafka message (Arrow IPC)", Mutator(corpus).many(count()), parse, (DecodeError, SchemaError))


def test_sink_keeps_good_messages_around_bad_ones(tmp_path: Path) -> None:
    store = ChdbStore(tmp_path / "chdb")
    try:
        from rocescope.pipeline.migrations import migrate

        migrate(store)
        bus = InProcessBus()
        producer = InProcessProducer(bus, encode_payload=True)
        mut = Mutator([encode(sample_batch("counters", 5, seed=99))], seed=23)
        bad_count = 0
        for i in range(20):
            producer.publish(sample_batch("counters", 10, seed=i, device=f"leaf-{i}"))
            bad = mut()
            try:
                decode("counters", bad)
            except (DecodeError, SchemaError):
                bus.append(schema.topic("counters"), b"bad", bad, [])
                bad_count += 1
        assert bad_count >= 5
        Sink(bus.consumer("g", ["counters"]), store, SinkConfig(max_seconds=0.1)).run(idle_exit_s=0.3)
        landed = store.query_arrow("SELECT count() AS n, uniqExact(device) AS d FROM counters").to_pylist()[0]
        assert landed == {"n": 200, "d": 20}
        assert len(bus.messages(bus.dead_letter_topic)) == bad_count
    finally:
        store.close()


def test_decode_refuses_invalid_arrow() -> None:
    """Regression (found here): Arrow reads a stream whose dictionary indices point past the dictionary;
    decode let it through to the store. Now a DecodeError (dead-lettered by the sink)."""
    good = encode(sample_batch("counters", 3, seed=1))
    refused = 0
    for i in range(len(good)):  # one bit flipped at every byte of the message
        bad = bytearray(good)
        bad[i] ^= 0x04
        try:
            batch = decode("counters", bytes(bad))
        except (DecodeError, SchemaError):
            refused += 1
            continue
        batch.data.validate(full=True)  # what decode accepts is valid Arrow (this raised before the fix)
    assert refused > 0


def test_decode_refuses_a_foreign_schema() -> None:
    table = pa.table({"x": [1]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(SchemaError, match="missing columns"):
        decode("counters", bytes(sink.getvalue()))
