"""Fuzzing the device-protocol decoders: gNMI SubscribeResponses (mutated wire bytes of real SONiC and
OpenConfig payloads through `GnmiDecoder.feed`), and SNMP responses (mutated BER of a real SR Linux walk,
decoded by pysnmp's own codec, then the collector's varbind conversion, normalization and Batch)."""

from __future__ import annotations

import random
from typing import Any

from pyasn1.codec.ber import decoder as ber_decoder
from pyasn1.codec.ber import encoder as ber_encoder
from pyasn1.error import PyAsn1Error
from pysnmp.proto import api

from rocescope import schema
from rocescope.collectors.gnmi.decode import GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.snmp.agent import _to_value, parse_snmprec
from rocescope.collectors.snmp.normalize import names_from, normalize
from rocescope.collectors.snmp.objects import DEFAULT_OBJECTS, OBJECTS
from rocescope.errors import DecodeError

from fuzzing import REAL, SEED, Mutator, count, run

SONIC = REAL / "04_gnmi_sonic"
TS = 1_764_000_000_000_000_000


def response(path: str, value: bytes, target: str = "", kind: str = "json_ietf_val") -> bytes:
    n = pb.Notification(timestamp=TS, prefix=pb.Path(target=target))
    u = n.update.add()
    u.path.CopyFrom(parse_path(path))
    setattr(u.val, kind, value)
    return bytes(pb.SubscribeResponse(update=n).SerializeToString())


def _gnmi_corpus() -> list[bytes]:
    typed = pb.Notification(timestamp=TS, prefix=parse_path("/interfaces/interface[name=Ethernet0]/state"))
    for leaf, v in (("counters/in-octets", 1), ("counters/out-pkts", 7), ("oper-status", "UP")):
        u = typed.update.add()
        u.path.CopyFrom(parse_path(leaf))
        if isinstance(v, int):
            u.val.uint_val = v
        else:
            u.val.string_val = v
    sonic = {
        "COUNTERS/Ethernet68": "sonic-gnmi_COUNTERS_Ethernet68.txt",
        "COUNTERS/Ethernet68/Queues": "sonic-gnmi_COUNTERS_Ethernet68_Queues.txt",
        "COUNTERS/Ethernet68/Pfcwd": "sonic-gnmi_COUNTERS_Ethernet68_Pfcwd.txt",
        "PERIODIC_WATERMARKS/Ethernet16/PriorityGroups": "sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt",
    }
    return [
        *(response(path, (SONIC / name).read_bytes(), "COUNTERS_DB") for path, name in sonic.items()),
        response("/", (SONIC / "sonic-gnmi_interfaces.json").read_bytes()[:6000]),
        bytes(pb.SubscribeResponse(update=typed).SerializeToString()),
        bytes(pb.SubscribeResponse(sync_response=True).SerializeToString()),
    ]  # fmt: skip


def test_gnmi_subscribe_responses() -> None:
    """Mutated responses: a DecodeError when the bytes are not a SubscribeResponse, else rows or counted
    problems; every 100 inputs the rows become a `counters` Batch of the schema."""
    dec = GnmiDecoder("fuzz", on_problem=lambda _what: None)
    seen = 0

    def feed(data: bytes) -> None:
        nonlocal seen
        seen += 1
        try:
            dec.feed(data)
        finally:
            if seen % 100 == 0:
                batch = dec.flush()
                assert batch is None or batch.data.schema.equals(schema.arrow_schema("counters"), check_metadata=False)

    run("gNMI SubscribeResponse", Mutator(_gnmi_corpus()).many(count()), feed, (DecodeError,))
    dec.flush()


def test_gnmi_json_values() -> None:
    """The JSON payloads mutated inside a well-formed response: reaches the JSON flattening and catalog."""
    payloads = [
        (SONIC / name).read_bytes()
        for name in (
            "sonic-gnmi_COUNTERS_Ethernet68.txt",
            "sonic-gnmi_COUNTERS_Ethernet68_Queues.txt",
            "sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt",
        )
    ]
    dec = GnmiDecoder("fuzz", on_problem=lambda _what: None)
    paths = ("COUNTERS/Ethernet68", "COUNTERS/Ethernet68/Queues", "PERIODIC_WATERMARKS/Ethernet16/PriorityGroups")
    seen = 0

    def feed(data: bytes) -> None:
        nonlocal seen
        seen += 1
        dec.feed(response(paths[seen % 3], data, "COUNTERS_DB"))
        if seen % 100 == 0:
            dec.flush()

    tally = run("gNMI JSON values", Mutator(payloads).many(count()), feed)
    assert tally.refused == 0  # a bad value inside a good message is counted, never raised
    dec.flush()


def test_gnmi_good_updates_around_a_bad_one_are_kept() -> None:
    mut = Mutator([b'{"SAI_PORT_STAT_IF_IN_OCTETS": "12"}', b"[1, 2", b'"x"'], seed=11)
    for i in range(300):
        n = pb.Notification(timestamp=TS, prefix=pb.Path(target="COUNTERS_DB"))
        for path, value in (
            ("COUNTERS/Ethernet0/SAI_PORT_STAT_IF_IN_OCTETS", str(i).encode()),
            ("COUNTERS/Ethernet4", mut()),
            ("COUNTERS/Ethernet8/SAI_PORT_STAT_IF_OUT_OCTETS", b"42"),
        ):
            u = n.update.add()
            u.path.CopyFrom(parse_path(path))
            u.val.json_ietf_val = value
        dec = GnmiDecoder("sw", on_problem=lambda _what: None)
        dec.feed(bytes(pb.SubscribeResponse(update=n).SerializeToString()))
        batch = dec.flush()
        assert batch is not None
        got = {(p, v) for p, v in zip(batch.data["port"].to_pylist(), batch.data["value"].to_pylist(), strict=True)}
        assert {("Ethernet0", float(i)), ("Ethernet8", 42.0)} <= got, got


# --- SNMP ----------------------------------------------------------------------------------------


def _snmp_corpus() -> list[bytes]:
    """GetResponse messages of the real walk, 5 varbinds each, BER-encoded as an agent sends them."""
    walk = parse_snmprec((REAL / "05_snmp" / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec").read_text())
    v2 = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    out = []
    for i in range(0, len(walk.rows), 5):
        pdu = v2.GetResponsePDU()
        v2.apiPDU.set_defaults(pdu)
        binds = []
        for oid, value in walk.rows[i : i + 5]:
            binds.append(
                (v2.ObjectIdentifier(oid), v2.Counter64(value) if isinstance(value, int) else v2.OctetString(value))
            )
        v2.apiPDU.set_varbinds(pdu, binds)
        msg = v2.Message()
        v2.apiMessage.set_defaults(msg)
        v2.apiMessage.set_community(msg, "public")
        v2.apiMessage.set_pdu(msg, pdu)
        out.append(bytes(ber_encoder.encode(msg)))
    return out


def test_snmp_varbinds() -> None:
    v2 = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    objects = [OBJECTS[name] for name in DEFAULT_OBJECTS]
    corpus = _snmp_corpus()
    assert len(corpus) >= 5

    def decode(data: bytes) -> None:
        try:  # pysnmp's dispatcher does this, and drops what does not decode: not rocescope's code
            msg, _ = ber_decoder.decode(data, asn1Spec=v2.Message())
            binds: list[Any] = v2.apiPDU.get_varbinds(v2.apiMessage.get_pdu(msg))
            rows = [(tuple(oid), value) for oid, raw in binds if (value := _to_value(raw)) is not None]
        except (PyAsn1Error, OverflowError):  # pyasn1 0.6 raises OverflowError on an absurd BER length
            return
        norm = normalize(rows, objects)
        if len(norm):
            batch = norm.name_ports(TS, names_from(rows)).to_batch("sw", "switch", "snmp")
            assert batch.num_rows == len(norm)

    tally = run("SNMP responses (BER)", Mutator(corpus).many(count()), decode)
    assert tally.refused == 0


def test_snmp_varbind_rows() -> None:
    """Random varbinds near the polled columns (odd index lengths, huge arcs and values, text where a
    counter belongs) spliced between the real walk's rows: the real rows always come out. The BER codec
    is too slow for 10,000 (pyasn1, ~1 ms each), so volume is at the varbind level."""
    walk = parse_snmprec((REAL / "05_snmp" / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec").read_text())
    objects = [OBJECTS[name] for name in DEFAULT_OBJECTS]
    good = normalize(walk.rows, objects)
    assert len(good) > 0
    rng = random.Random(SEED)
    roots = [o.oid for o in objects]
    values: list[Any] = [0, -1, 2**64 - 1, 2**64, 2**200, -(2**70), b"", b"\xff" * 9, "up", None, 3, 1, 2, True]

    def rows(data: bytes) -> None:
        bad = []
        for _ in range(10):
            oid = rng.choice(roots) + tuple(
                rng.choice((1, 3, 0, 2**31, 2**64, 2**100)) for _ in range(rng.randrange(4))
            )
            bad.append((oid, rng.choice(values)))
        spliced = [*walk.rows[:20], *bad, *walk.rows[20:]]
        norm = normalize(spliced, objects)
        batch = norm.name_ports(TS, names_from(spliced)).to_batch("sw", "switch", "snmp")
        got = set(zip(batch.data["raw_name"].to_pylist(), batch.data["value"].to_pylist(), strict=True))
        assert set(zip(good.rows.raw_name, good.rows.value, strict=True)) <= got

    tally = run("SNMP varbind rows", (b"" for _ in range(count() // 10)), rows)
    tally.inputs = tally.inputs * 10  # ten random varbinds per call
