"""SNMP facade: a v2c agent on loopback (UDP) serving one simulated switch's IF-MIB and PFC counters.

A small responder on pysnmp's protocol layer (BER via pyasn1, `pysnmp.proto.api` v2c messages): GET,
GETNEXT and GETBULK over a sorted OID table rebuilt from `source()` (the switch's latest `counters`
table) whenever that table's timestamp changes. What the real `rocescope.collectors.snmp.collector` walks:

* IF-MIB ifTable: ifDescr, ifAdminStatus (always up), ifOperStatus (1 up / 2 down), ifInDiscards, ifInErrors
  (FCS errors), ifOutDiscards, ifOutErrors (0): Counter32, wrapping at 2^32 as a device's would;
* ifXTable: ifName, ifHCInOctets, ifHCInUcastPkts, ifHCOutOctets, ifHCOutUcastPkts (Counter64),
  ifHighSpeed (Gauge32, Mb/s);
* IEEE8021-PFC-MIB ieee8021PfcRequests / ieee8021PfcIndications (per interface, all priorities:
  the sums of `pfc_tx_pause` / `pfc_rx_pause`, Counter32);
* MELLANOX-QOS-MIB mellanoxQoSPFC{Rx,Tx}Pause{Pkts,Duration} per (ifIndex, priority), Counter64;
* any other per-(ifIndex, priority) object the SNMP collector knows, from rows named after it (a deployment
  profile's raw names: Arista's ARISTA-PFC-MIB aristaPfcPriorityRequests / Indications), Counter64.

ifIndex = position of the port among the switch's ports + 1. One asyncio loop (`SnmpServer`, on its
own thread) serves every switch's agent. SNMPv1 and SET are not answered (no response, as an agent
with no v1 community behaves), nor is a wrong community.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api, rfc1902, rfc1905

from rocescope.collectors.snmp.objects import OBJECTS

__all__ = ["SnmpAgentFacade", "SnmpServer", "oid_table"]

Source = Callable[[], pa.Table]
Oid = tuple[int, ...]
_P = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
_IF = (1, 3, 6, 1, 2, 1, 2, 2, 1)
_IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
_PFC = (1, 3, 111, 2, 802, 1, 1, 21, 1, 1, 1)
_MLNX = (1, 3, 6, 1, 4, 1, 33049, 15, 1, 2, 1)
_MAX_VARBINDS = 600  # per response: stays well inside one UDP datagram
_C32 = 1 << 32
_C64 = 1 << 64

#: (canonical metric, column OID, SNMP type) of the per-port counters.
_PORT_COLUMNS: tuple[tuple[str, Oid, str], ...] = (
    ("rx_discards", (*_IF, 13), "c32"),
    ("rx_fcs_errors", (*_IF, 14), "c32"),
    ("tx_discards", (*_IF, 19), "c32"),
    ("rx_bytes", (*_IFX, 6), "c64"),
    ("rx_unicast_packets", (*_IFX, 7), "c64"),
    ("tx_bytes", (*_IFX, 10), "c64"),
    ("tx_unicast_packets", (*_IFX, 11), "c64"),
)
_PRIO_COLUMNS: tuple[tuple[str, Oid], ...] = (
    ("pfc_rx_pause", (*_MLNX, 3)),
    ("pfc_rx_pause_duration_us", (*_MLNX, 4)),
    ("pfc_tx_pause", (*_MLNX, 5)),
    ("pfc_tx_pause_duration_us", (*_MLNX, 6)),
)


def _value(kind: str, x: float) -> Any:
    v = int(x)
    if kind == "c32":
        return rfc1902.Counter32(v % _C32)
    if kind == "c64":
        return rfc1902.Counter64(v % _C64)
    if kind == "g32":
        return rfc1902.Gauge32(min(max(v, 0), _C32 - 1))
    return rfc1902.Integer32(v)


def oid_table(table: pa.Table) -> tuple[list[Oid], list[Any]]:
    """The agent's MIB view of one switch's `counters` rows: sorted OIDs and their values."""
    cols = table.select(["port", "priority", "metric", "value"]).to_pydict()
    raws = table.column("raw_name").to_pylist() if "raw_name" in table.schema.names else [""] * table.num_rows
    ports: dict[str, int] = {}
    values: dict[tuple[str, str, int], float] = {}
    by_object: list[tuple[str, str, int, float]] = []
    for port, prio, metric, value, raw in zip(
        cols["port"], cols["priority"], cols["metric"], cols["value"], raws, strict=True
    ):
        if metric == "buffer_pool_watermark_bytes":
            continue  # not an interface
        ports.setdefault(port, len(ports) + 1)
        values[(port, metric, prio)] = value
        obj = OBJECTS.get(raw)
        if obj is not None and obj.index == "ifIndex.priority" and prio >= 0 and obj.oid[:-1] != _MLNX:
            by_object.append((raw, port, prio, value))
    rows: list[tuple[Oid, Any]] = []
    for port, idx in ports.items():
        name = rfc1902.OctetString(port.encode())
        rows.append(((*_IF, 2, idx), name))
        rows.append(((*_IFX, 1, idx), name))
        rows.append(((*_IF, 7, idx), rfc1902.Integer32(1)))  # ifAdminStatus: the twin shuts no port
        rows.append(((*_IF, 8, idx), rfc1902.Integer32(1 if values.get((port, "oper_up", -1), 1) else 2)))
        rows.append(((*_IF, 20, idx), rfc1902.Counter32(0)))
        for metric, column, kind in _PORT_COLUMNS:
            rows.append(((*column, idx), _value(kind, values.get((port, metric, -1), 0.0))))
        speed = values.get((port, "port_speed_bps", -1))
        if speed is not None:
            rows.append(((*_IFX, 15, idx), _value("g32", speed / 1e6)))
        prios = sorted({q for (p, m, q) in values if p == port and m == "pfc_tx_pause" and q >= 0})
        tx = sum(values[(port, "pfc_tx_pause", q)] for q in prios)
        rx = sum(values.get((port, "pfc_rx_pause", q), 0.0) for q in prios)
        rows.append(((*_PFC, 2, idx), _value("c32", tx)))
        rows.append(((*_PFC, 3, idx), _value("c32", rx)))
        for metric, column in _PRIO_COLUMNS:
            for q in prios:
                if (port, metric, q) in values:
                    rows.append(((*column, idx, q), _value("c64", values[(port, metric, q)])))
    for raw, port, prio, value in by_object:
        rows.append(((*OBJECTS[raw].oid, ports[port], prio), _value("c64", value)))
    rows.sort(key=lambda r: r[0])
    return [r[0] for r in rows], [r[1] for r in rows]


class SnmpAgentFacade(asyncio.DatagramProtocol):
    """One switch's agent: answers v2c GET/GETNEXT/GETBULK for `community` from `source()`."""

    def __init__(self, device: str, source: Source, community: str = "public") -> None:
        self.device = device
        self.source = source
        self.community = community
        self.host = "127.0.0.1"
        self.port = 0
        self.requests = 0
        self._transport: asyncio.DatagramTransport | None = None
        self._ts: object = None
        self._oids: list[Oid] = []
        self._vals: list[Any] = []

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a datagram endpoint's transport

    def _view(self) -> tuple[list[Oid], list[Any]]:
        table = self.source()
        ts = table.column("ts")[0].as_py() if table.num_rows else None
        if ts != self._ts or not self._oids:
            self._oids, self._vals = oid_table(table)
            self._ts = ts
        return self._oids, self._vals

    def _next(self, oids: list[Oid], vals: list[Any], oid: Oid) -> tuple[Oid, Any]:
        i = bisect.bisect_right(oids, oid)
        if i >= len(oids):
            return oid, rfc1905.endOfMibView
        return oids[i], vals[i]

    def _get(self, oids: list[Oid], vals: list[Any], oid: Oid) -> tuple[Oid, Any]:
        i = bisect.bisect_left(oids, oid)
        if i < len(oids) and oids[i] == oid:
            return oid, vals[i]
        return oid, rfc1905.noSuchInstance

    def answer(self, data: bytes) -> bytes | None:
        """The response to one request datagram (None: not answered)."""
        try:
            if int(api.decodeMessageVersion(data)) != api.SNMP_VERSION_2C:
                return None
            msg, _ = decoder.decode(data, asn1Spec=_P.Message())
        except Exception:
            return None
        if str(_P.apiMessage.get_community(msg)) != self.community:
            return None
        pdu = _P.apiMessage.get_pdu(msg)
        rsp = _P.apiMessage.get_response(msg)
        rpdu = _P.apiMessage.get_pdu(rsp)
        oids, vals = self._view()
        asked: Sequence[Oid] = [tuple(o) for o, _ in _P.apiPDU.get_varbinds(pdu)]
        out: list[tuple[Oid, Any]] = []
        if pdu.isSameTypeWith(_P.GetRequestPDU()):
            out = [self._get(oids, vals, o) for o in asked]
        elif pdu.isSameTypeWith(_P.GetNextRequestPDU()):
            out = [self._next(oids, vals, o) for o in asked]
        elif pdu.isSameTypeWith(_P.GetBulkRequestPDU()):
            nr = min(int(_P.apiBulkPDU.get_non_repeaters(pdu)), len(asked))
            reps = max(0, int(_P.apiBulkPDU.get_max_repetitions(pdu)))
            out = [self._next(oids, vals, o) for o in asked[:nr]]
            cursor = list(asked[nr:])
            for _ in range(reps):
                if not cursor or len(out) + len(cursor) > _MAX_VARBINDS:
                    break
                row = [self._next(oids, vals, o) for o in cursor]
                out.extend(row)
                cursor = [o for o, _ in row]
                if all(v is rfc1905.endOfMibView for _, v in row):
                    break
        else:
            return None
        self.requests += 1
        _P.apiPDU.set_varbinds(rpdu, out)
        return bytes(encoder.encode(rsp))

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        reply = self.answer(data)
        if reply is not None and self._transport is not None:
            self._transport.sendto(reply, addr)


def _factory(agent: SnmpAgentFacade) -> Callable[[], SnmpAgentFacade]:
    return lambda: agent


class SnmpServer:
    """Every agent on one asyncio loop, on its own thread; `start()` binds them (free ports unless given)."""

    def __init__(self, agents: Sequence[SnmpAgentFacade], host: str = "127.0.0.1") -> None:
        self.agents = list(agents)
        self.host = host
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._transports: list[asyncio.BaseTransport] = []

    def start(self) -> SnmpServer:
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="snmp-facades", daemon=True)
        self._thread.start()
        ready.wait(10)

        async def bind() -> None:
            for agent in self.agents:
                transport, _ = await loop.create_datagram_endpoint(_factory(agent), local_addr=(self.host, agent.port))
                agent.host, agent.port = transport.get_extra_info("sockname")[:2]
                self._transports.append(transport)

        asyncio.run_coroutine_threadsafe(bind(), loop).result(10)
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for t in self._transports:
            loop.call_soon_threadsafe(t.close)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        self._loop = None
        self._transports = []

    def __enter__(self) -> SnmpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
