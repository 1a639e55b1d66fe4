"""The SNMP device seam: walk table columns of one agent, get back (OID, value) rows.

`SnmpAgent` is the seam `collector.py` polls through. Two implementations:

* `PysnmpAgent`, the live one: pysnmp 7 (v3arch, asyncio) over UDP, SNMP v2c or v3 (USM, e.g.
  authPriv with SHA + AES-128), with a per-request timeout and retries. A walk of several columns
  is ONE multi-column GETBULK walk (RFC 3416 4.2.3): every request carries the next OID of each
  column still open, the flat response is read row-major, and a column closes when its rows leave
  its subtree or the agent says endOfMibView. For 64 ports x 12 columns that is a handful of
  requests per poll instead of one walk per column.
* `SnmprecAgent`, the fixture one: serves a recorded walk in snmpsim's `.snmprec` format
  (`OID|TYPE|VALUE`) from memory, so a real device's walk can be replayed offline (`--once`
  against a file, golden tests). Its parser skips and counts malformed lines.

Values: every integer-like SNMP type (Integer32, Counter32/64, Gauge32, TimeTicks) is an `int`,
OCTET STRING (and IpAddress, Opaque) is `bytes`, OBJECT IDENTIFIER a dotted `str`. Exception values
a buggy agent puts into a walk (noSuchObject, noSuchInstance) are skipped and counted.

Why pysnmp's command generator and not hlapi's `bulk_cmd`: `bulk_cmd` resolves every request
varbind through the MIB view (measured: 17 ms more CPU per 64-port poll, a fifth of the total), while
`pysnmp.entity.rfc3413.cmdgen` takes numeric OIDs as they are. Targets and credentials are still
configured by hlapi's own LCD configurator, exactly as `bulk_cmd` does it.

Cost: pyasn1's BER decoding (inside pysnmp) is ~95% of the CPU of a poll, on the order of 100 us
per value received (bench/snmp.py measures it); the walk asks, per column, for what the previous walk
found plus one, so a poll decodes little past the end of each table.

Engines: one pysnmp `SnmpEngine` is shared by every v2c device and by v3 devices with identical
credentials (`EnginePool`); USM keys a user by name, so two devices with the same v3 user name but
different secrets must not share an engine.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import re
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from rocescope.collectors.snmp.objects import Oid, format_oid, parse_oid
from rocescope.errors import DecodeError, RocescopeError

__all__ = [
    "V3",
    "EnginePool",
    "PysnmpAgent",
    "SnmpAgent",
    "SnmpAuthError",
    "SnmpError",
    "SnmpTimeout",
    "SnmprecAgent",
    "SnmprecData",
    "V2c",
    "Value",
    "parse_snmprec",
    "run_sync",
]

Value = int | bytes | str
T = TypeVar("T")
AuthProtocol = Literal["md5", "sha", "sha224", "sha256", "sha384", "sha512"]
PrivProtocol = Literal["des", "3des", "aes128", "aes192", "aes256"]


class SnmpError(RocescopeError):
    """One SNMP operation against one agent failed (the other devices go on)."""


class SnmpTimeout(SnmpError):
    """The agent did not answer within the timeout, retries included (down, unreachable, or wrong community)."""


class SnmpAuthError(SnmpError):
    """The agent refused our SNMPv3 credentials (unknown user, wrong digest, cannot decrypt)."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion in an event loop of its own, like `asyncio.run`, but without touching the
    thread's current-loop setting: `asyncio.run` leaves it unset afterwards, which breaks later callers
    of `asyncio.get_event_loop()` in the same thread (pyshark is one)."""
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(coro)


# --- credentials ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class V2c:
    """SNMPv2c community (not shown in reprs or logs)."""

    community: str = field(repr=False)


@dataclass(frozen=True)
class V3:
    """SNMPv3 USM user. authPriv when `priv_key` is set, authNoPriv otherwise. Secrets stay out of reprs."""

    user: str
    auth_key: str = field(repr=False)
    priv_key: str | None = field(default=None, repr=False)
    auth_protocol: AuthProtocol = "sha"
    priv_protocol: PrivProtocol = "aes128"

    def __post_init__(self) -> None:
        if self.auth_protocol not in _AUTH or self.priv_protocol not in _PRIV:
            raise ValueError(
                f"SNMPv3 user {self.user!r}: auth_protocol must be one of {sorted(_AUTH)}, "
                f"priv_protocol one of {sorted(_PRIV)}"
            )
        if len(self.auth_key) < 8 or (self.priv_key is not None and len(self.priv_key) < 8):
            raise ValueError(f"SNMPv3 user {self.user!r}: pass phrases must have at least 8 characters (RFC 3414)")

    @property
    def level(self) -> str:
        return "authPriv" if self.priv_key is not None else "authNoPriv"


# --- the seam ------------------------------------------------------------------------------------


class SnmpAgent(Protocol):
    """Access to one SNMP agent."""

    #: Where the agent is, for logs (`udp:10.0.0.1:161 v2c`); never carries secrets.
    description: str

    async def walk(self, roots: Sequence[Oid]) -> list[tuple[Oid, Value]]:
        """Every (OID, value) under each root, in OID order within a root. Raises SnmpError."""
        ...

    async def close(self) -> None: ...


# --- live: pysnmp --------------------------------------------------------------------------------

_AUTH = {
    "md5": "USM_AUTH_HMAC96_MD5",
    "sha": "USM_AUTH_HMAC96_SHA",
    "sha224": "USM_AUTH_HMAC128_SHA224",
    "sha256": "USM_AUTH_HMAC192_SHA256",
    "sha384": "USM_AUTH_HMAC256_SHA384",
    "sha512": "USM_AUTH_HMAC384_SHA512",
}
_PRIV = {
    "des": "USM_PRIV_CBC56_DES",
    "3des": "USM_PRIV_CBC168_3DES",
    "aes128": "USM_PRIV_CFB128_AES",
    "aes192": "USM_PRIV_CFB192_AES",
    "aes256": "USM_PRIV_CFB256_AES",
}
#: pysnmp error indications that mean "your v3 credentials are wrong" rather than "nobody answered".
_AUTH_FAILURES = re.compile(r"digest|unknown (usm )?user|decrypt|unsupported security level|authorization", re.I)
#: GETBULK error-status tooBig(1): the response would not fit; ask for fewer repetitions.
_TOO_BIG = 1
_MAX_REQUESTS_PER_WALK = 100_000


def _auth_data(auth: V2c | V3) -> Any:
    from pysnmp.hlapi.v3arch.asyncio import CommunityData, UsmUserData
    from pysnmp.hlapi.v3arch.asyncio import auth as hlauth

    if isinstance(auth, V2c):
        return CommunityData(auth.community, mpModel=1)
    return UsmUserData(
        auth.user,
        authKey=auth.auth_key,
        privKey=auth.priv_key,
        authProtocol=getattr(hlauth, _AUTH[auth.auth_protocol]),
        privProtocol=getattr(hlauth, _PRIV[auth.priv_protocol]) if auth.priv_key is not None else None,
    )


class EnginePool:
    """pysnmp engines shared by devices with the same credentials; `close()` releases their sockets.

    Engines bind to the running event loop: create the pool and use it inside one loop.
    """

    def __init__(self) -> None:
        self._engines: dict[tuple[Any, ...], Any] = {}

    def engine_for(self, auth: V2c | V3) -> Any:
        from pysnmp.hlapi.v3arch.asyncio import SnmpEngine

        key: tuple[Any, ...] = (
            ("v2c",)
            if isinstance(auth, V2c)
            else ("v3", auth.user, auth.auth_protocol, auth.auth_key, auth.priv_protocol, auth.priv_key)
        )
        engine = self._engines.get(key)
        if engine is None:
            engine = self._engines[key] = SnmpEngine()
        return engine

    def close(self) -> None:
        for engine in self._engines.values():
            # a dispatcher that never opened (no request sent) has nothing to close
            with contextlib.suppress(Exception):
                engine.close_dispatcher()
        self._engines.clear()

    def __len__(self) -> int:
        return len(self._engines)


def _to_value(raw: Any) -> Value | None:
    """pysnmp value -> int | bytes | str; None for the exception values (noSuchObject/noSuchInstance)."""
    from pyasn1.type import univ

    if isinstance(raw, univ.Integer):  # Integer32, Counter32/64, Gauge32, Unsigned32, TimeTicks
        return int(raw)
    if isinstance(raw, univ.OctetString):  # OCTET STRING, IpAddress, Opaque, Bits
        return bytes(raw.asOctets())
    if isinstance(raw, univ.ObjectIdentifier):
        return format_oid(tuple(raw))
    return None


class PysnmpAgent:
    """The live agent: pysnmp over UDP (IPv4, or IPv6 when `host` is an IPv6 literal)."""

    def __init__(
        self,
        host: str,
        port: int,
        auth: V2c | V3,
        *,
        timeout_s: float = 2.0,
        retries: int = 1,
        max_repetitions: int = 25,
        max_varbinds: int = 250,
        engines: EnginePool | None = None,
    ):
        if max_repetitions < 1 or max_varbinds < 1:
            raise ValueError("max_repetitions and max_varbinds must be >= 1")
        self.host = host
        self.port = port
        self.auth = auth
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_repetitions = max_repetitions
        self.max_varbinds = max_varbinds
        self._own_engines = engines is None
        self._engines = engines or EnginePool()
        self._target: tuple[Any, str] | None = None  # (engine, LCD target name)
        version = "v2c" if isinstance(auth, V2c) else f"v3 user {auth.user} {auth.level}"
        self.description = f"udp:{host}:{port} {version}"
        #: Requests sent, varbinds received, exception values skipped, columns cut for a non-increasing OID.
        self.requests = 0
        self.varbinds = 0
        self.exception_values = 0
        self.non_increasing = 0
        #: rows under each root at its last walk: sizes the last request of the next walk.
        self._rows_seen: dict[Oid, int] = {}

    async def _configure(self) -> tuple[Any, str]:
        if self._target is None:
            from pysnmp.error import PySnmpError
            from pysnmp.hlapi.v3arch.asyncio import Udp6TransportTarget, UdpTransportTarget
            from pysnmp.hlapi.v3arch.asyncio.lcd import CommandGeneratorLcdConfigurator

            cls = Udp6TransportTarget if ":" in self.host else UdpTransportTarget
            try:
                target = await cls.create((self.host, self.port), timeout=self.timeout_s, retries=self.retries)
            except PySnmpError as exc:
                raise SnmpError(f"{self.description}: {exc}") from exc
            engine = self._engines.engine_for(self.auth)
            addr_name, _ = CommandGeneratorLcdConfigurator().configure(engine, _auth_data(self.auth), target, b"")
            self._target = (engine, addr_name)
        return self._target

    async def _bulk(self, repetitions: int, varbinds: list[tuple[Any, Any]]) -> tuple[Any, int, int, Sequence[Any]]:
        from pysnmp.entity.rfc3413 import cmdgen

        engine, addr_name = await self._configure()
        future: asyncio.Future[tuple[Any, int, int, Sequence[Any]]] = asyncio.get_running_loop().create_future()

        def done(_engine: Any, _handle: Any, indication: Any, status: Any, index: Any, vbs: Any, _ctx: Any) -> None:
            if not future.done():  # cancelled by a poll deadline, or already answered
                future.set_result((indication, int(status or 0), int(index or 0), vbs))

        cmdgen.BulkCommandGeneratorSingleRun().send_varbinds(
            engine, addr_name, None, b"", 0, repetitions, varbinds, done, None
        )
        self.requests += 1
        return await future

    def _failure(self, indication: Any) -> SnmpError:
        from pysnmp.proto import errind

        text = str(indication)
        if isinstance(indication, errind.RequestTimedOut):
            tries = f"{self.retries + 1} tr{'y' if self.retries == 0 else 'ies'}"
            return SnmpTimeout(f"{self.description}: no response within {self.timeout_s:g} s x {tries}")
        if _AUTH_FAILURES.search(text):
            return SnmpAuthError(f"{self.description}: credentials refused: {text}")
        return SnmpError(f"{self.description}: {text}")

    async def walk(self, roots: Sequence[Oid]) -> list[tuple[Oid, Value]]:
        from pysnmp.proto.rfc1902 import Null, ObjectName
        from pysnmp.proto.rfc1905 import EndOfMibView

        roots = [tuple(r) for r in roots]
        out: list[tuple[Oid, Value]] = []
        cursors: list[Oid] = list(roots)
        active = list(range(len(roots)))
        repetitions = self.max_repetitions
        null = Null("")
        seen = self._rows_seen
        expected = [seen.get(root, -1) for root in roots]
        counts = [0] * len(roots)
        for _ in range(_MAX_REQUESTS_PER_WALK):
            if not active:
                if len(seen) < 4096:
                    seen.update(zip(roots, counts, strict=True))
                return out
            n = len(active)
            reps = max(1, min(repetitions, self.max_varbinds // n))
            if all(counts[c] <= expected[c] for c in active):
                # every open column had this many rows last time: ask for what is left plus one, which
                # shows the end, instead of a full repetition of varbinds past the end of each column
                reps = min(reps, max(expected[c] - counts[c] for c in active) + 1)
            indication, status, index, table = await self._bulk(reps, [(ObjectName(cursors[c]), null) for c in active])
            if indication:
                raise self._failure(indication)
            if status:
                if status == _TOO_BIG and reps > 1:
                    repetitions = reps // 2
                    continue
                raise SnmpError(f"{self.description}: agent error-status {status} at varbind {index}")
            if not table:
                raise SnmpError(f"{self.description}: empty GETBULK response")
            self.varbinds += len(table)
            closed: set[int] = set()
            for k, (name, raw) in enumerate(table):
                col = active[k % n]
                if col in closed:
                    continue
                oid = tuple(name)
                root = roots[col]
                if isinstance(raw, EndOfMibView) or oid[: len(root)] != root:
                    closed.add(col)
                    continue
                if oid <= cursors[col]:  # a looping agent: stop this column rather than walk forever
                    self.non_increasing += 1
                    closed.add(col)
                    continue
                cursors[col] = oid
                counts[col] += 1
                value = _to_value(raw)
                if value is None:
                    self.exception_values += 1
                    continue
                out.append((oid, value))
            if closed:
                active = [c for c in active if c not in closed]
        raise SnmpError(f"{self.description}: walk did not end after {_MAX_REQUESTS_PER_WALK} requests")

    async def get(self, oids: Sequence[Oid]) -> list[tuple[Oid, Value | None]]:
        """Plain GET (None for noSuchObject/noSuchInstance); for probes and tools, not the poll path."""
        from pysnmp.entity.rfc3413 import cmdgen
        from pysnmp.proto.rfc1902 import Null, ObjectName

        engine, addr_name = await self._configure()
        future: asyncio.Future[tuple[Any, int, Sequence[Any]]] = asyncio.get_running_loop().create_future()

        def done(_engine: Any, _handle: Any, indication: Any, status: Any, _index: Any, vbs: Any, _ctx: Any) -> None:
            if not future.done():
                future.set_result((indication, int(status or 0), vbs))

        cmdgen.GetCommandGenerator().send_varbinds(
            engine, addr_name, None, b"", [(ObjectName(o), Null("")) for o in oids], done, None
        )
        self.requests += 1
        indication, status, table = await future
        if indication:
            raise self._failure(indication)
        if status:
            raise SnmpError(f"{self.description}: agent error-status {status}")
        return [(tuple(name), _to_value(raw)) for name, raw in table]

    async def close(self) -> None:
        self._target = None
        if self._own_engines:
            self._engines.close()


# --- fixture: a recorded walk (.snmprec) ---------------------------------------------------------

#: snmprec type tags (the BER tag numbers snmpsim uses) that carry integers.
_INT_TAGS = frozenset({2, 65, 66, 67, 70})
_OCTET_TAGS = frozenset({4, 64, 68})
_OID_TAG = 6
_NULL_TAGS = frozenset({5, 128, 129, 130})
_TYPE = re.compile(r"^(\d+)(x?)$")


@dataclass
class SnmprecData:
    """Rows of a parsed .snmprec walk, sorted by OID, with the lines that could not be read."""

    rows: list[tuple[Oid, Value]]
    malformed: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list)


def _snmprec_value(tag: int, hex_encoded: bool, text: str) -> Value | None:
    if tag in _INT_TAGS:
        return int(text, 16) if hex_encoded else int(text)
    if tag in _OCTET_TAGS:
        data = bytes.fromhex(text) if hex_encoded else text.encode()
        if tag == 64 and not hex_encoded:  # IpAddress written as a dotted quad
            data = bytes(int(p) for p in text.split("."))
            if len(data) != 4:
                raise ValueError("IpAddress needs 4 octets")
        return data
    if tag == _OID_TAG:
        return format_oid(parse_oid(text))
    if tag in _NULL_TAGS:
        return None
    raise ValueError(f"unsupported type tag {tag}")


def parse_snmprec(text: str) -> SnmprecData:
    """Parse snmpsim's `OID|TYPE|VALUE` lines (TYPE `4x` = hex-encoded). Malformed lines are skipped
    and counted; lines with a variation module (`2:numeric|...`) are unsupported here and count too."""
    rows: dict[Oid, Value] = {}
    data = SnmprecData([])
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            oid_text, type_text, value_text = stripped.split("|", 2)
            match = _TYPE.match(type_text)
            if match is None:
                raise ValueError(f"bad type {type_text!r}")
            oid = parse_oid(oid_text)
            value = _snmprec_value(int(match.group(1)), bool(match.group(2)), value_text)
        except (ValueError, OverflowError) as exc:
            data.malformed += 1
            if len(data.examples) < 5:
                data.examples.append((lineno, f"{line[:120]!r}: {exc}"))
            continue
        if value is not None:
            rows[oid] = value
    data.rows = sorted(rows.items())
    return data


class SnmprecAgent:
    """A recorded walk served from memory (the seam's fixture implementation)."""

    def __init__(self, rows: Iterable[tuple[Oid, Value]], description: str = "snmprec"):
        self._rows = sorted(dict(rows).items(), key=lambda row: row[0])  # one value per OID, the last
        self._oids = [oid for oid, _ in self._rows]
        self.description = description

    @classmethod
    def from_file(cls, path: Path | str) -> SnmprecAgent:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise DecodeError(f"{path}: cannot read: {exc}") from exc
        data = parse_snmprec(text)
        if data.malformed and not data.rows:
            raise DecodeError(f"{path}: no readable line; first problem: {data.examples[0][1]}")
        agent = cls(data.rows, f"snmprec:{path.name}")
        agent.malformed = data.malformed
        return agent

    malformed = 0

    async def walk(self, roots: Sequence[Oid]) -> list[tuple[Oid, Value]]:
        out: list[tuple[Oid, Value]] = []
        for root in roots:
            root = tuple(root)
            i = bisect.bisect_right(self._oids, root)
            while i < len(self._rows) and self._oids[i][: len(root)] == root:
                out.append(self._rows[i])
                i += 1
        return out

    async def close(self) -> None:
        return None
