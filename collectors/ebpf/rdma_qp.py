"""QP ownership from iproute2's `rdma resource show qp` (JSON), behind the `QpSource` seam.

This is the fallback of the eBPF collector where the RDMA control path cannot be kprobed: the kernel
tracks every QP (restrack) with its owner, and `rdma -j resource show qp` prints them, one JSON object
per QP in one array (iproute2 `rdma/res-qp.c`): `ifindex`, `ifname` (RDMA device), `port` (absent
before the QP is bound), `lqpn`, `rqpn` (connected QPs), `type`, `state`, `rq-psn`, `sq-psn`,
`path-mig-state`, `pdn`, `pid` (absent for kernel QPs), `comm` (task name, or the kernel module).
It carries no GID, so the destination address and UDP source port stay unknown on this path.

Sources: `RdmaCommandQpSource` runs the tool; `FixtureQpSource` replays recorded output. A record
that does not look like a QP is skipped and counted (with an example), never guessed at; output that
is not a JSON array at all raises DecodeError.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocescope.collectors.common.json_text import load_json
from rocescope.errors import DecodeError, RocescopeError

__all__ = [
    "FixtureQpSource",
    "QpParse",
    "QpRecord",
    "QpSource",
    "QpSourceError",
    "RdmaCommandQpSource",
    "calc_flow_label",
    "flow_label_to_udp_sport",
    "gid_text",
    "gid_to_ip",
    "parse_rdma_qp_json",
    "roce_udp_sport",
]

_QPN_MAX = 0xFFFFFF  # QP numbers are 24 bits (BTH DestQP)
_U32_MAX = 0xFFFFFFFF
_EXAMPLES = 3


class QpSourceError(RocescopeError):
    """The QP table could not be read (tool missing, no RDMA netlink, timeout)."""


@dataclass(frozen=True)
class QpRecord:
    """One QP and its owner; `pid` 0 means a kernel QP (`comm` is then the kernel module)."""

    rdma_dev: str
    qpn: int
    dest_qpn: int = 0
    port: int = 0
    qp_type: str = ""
    state: str = ""
    pid: int = 0
    comm: str = ""
    dest_gid: str = ""  # the remote GID, as sysfs prints it
    dest_ip: str = ""  # the address the remote GID stands for
    udp_sport: int = 0  # RoCEv2 UDP source port; 0 when unknown
    cgroup_id: int = 0


@dataclass
class QpParse:
    """Good records, and how many were skipped with a few examples of why."""

    records: list[QpRecord] = field(default_factory=list)
    skipped: int = 0
    examples: list[str] = field(default_factory=list)

    def skip(self, why: str) -> None:
        self.skipped += 1
        if len(self.examples) < _EXAMPLES:
            self.examples.append(why)


def _uint(obj: dict[str, Any], key: str, maximum: int, required: bool = False) -> int:
    value = obj.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValueError(f"{key}={value!r}")
    return value


def _text(obj: dict[str, Any], key: str, required: bool = False) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value) or "\x00" in value:
        raise ValueError(f"{key}={value!r}")
    return value


def _record(obj: dict[str, Any]) -> QpRecord:
    """iproute2 shows no remote GID or flow label: the UDP source port is the kernel's default for a
    connected QP (flow label 0, so derived from both QP numbers), as the drivers compute it."""
    qpn, dest_qpn = _uint(obj, "lqpn", _QPN_MAX, required=True), _uint(obj, "rqpn", _QPN_MAX)
    return QpRecord(
        rdma_dev=_text(obj, "ifname", required=True),
        qpn=qpn,
        dest_qpn=dest_qpn,
        udp_sport=roce_udp_sport(qpn, dest_qpn) if dest_qpn else 0,
        port=_uint(obj, "port", _U32_MAX),
        qp_type=_text(obj, "type"),
        state=_text(obj, "state"),
        pid=_uint(obj, "pid", _U32_MAX),
        comm=_text(obj, "comm"),
    )


def parse_rdma_qp_json(text: str | bytes) -> QpParse:
    """Records of `rdma -j resource show qp`. Old iproute2 wrapped each record in its own array: nested
    arrays are flattened. Raises DecodeError when the output is not a JSON array."""
    doc = load_json(text, "`rdma resource show qp -j`")
    if not isinstance(doc, list):
        raise DecodeError(f"`rdma resource show qp -j`: want a JSON array, got {type(doc).__name__}")
    out = QpParse()
    stack: list[Any] = list(reversed(doc))
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif not isinstance(item, dict):
            out.skip(f"not an object: {str(item)[:60]!r}")
        else:
            try:
                out.records.append(_record(item))
            except ValueError as exc:
                out.skip(f"bad {exc}"[:120])
    return out


class QpSource(Protocol):
    """Where the QP table comes from: the live tool, or recorded output."""

    name: str

    def snapshot(self) -> QpParse: ...


class RdmaCommandQpSource:
    """Runs `rdma -j resource show qp` (iproute2) on this host."""

    name = "rdma"

    def __init__(self, rdma_path: str | None = None, timeout_s: float = 5.0):
        self.rdma_path = rdma_path or shutil.which("rdma") or "rdma"
        self.timeout_s = timeout_s

    def snapshot(self) -> QpParse:
        cmd = [self.rdma_path, "-j", "resource", "show", "qp"]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError as exc:
            raise QpSourceError(f"`rdma` (iproute2) not found: {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise QpSourceError(f"`{' '.join(cmd)}` timed out after {self.timeout_s:g}s") from exc
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise QpSourceError(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {why[-1] if why else 'no output'}")
        if not done.stdout.strip():  # no RDMA device: iproute2 prints nothing at all
            return QpParse()
        return parse_rdma_qp_json(done.stdout)


class FixtureQpSource:
    """Recorded `rdma -j resource show qp` output, for tests and replays."""

    name = "fixture"

    def __init__(self, text: str | bytes):
        self.text = text

    @classmethod
    def from_file(cls, path: Path | str) -> FixtureQpSource:
        return cls(Path(path).read_bytes())

    def snapshot(self) -> QpParse:
        return parse_rdma_qp_json(self.text)


# --- RoCEv2 addressing, as the kernel derives it (include/rdma/ib_verbs.h)

_FLOW_LABEL_MASK = 0xFFFFF
_UDP_SPORT_MIN = 0xC000  # IB_ROCE_UDP_ENCAP_VALID_PORT_MIN


def calc_flow_label(lqpn: int, rqpn: int) -> int:
    """rdma_calc_flow_label(): the symmetric flow label the kernel picks when the user left it 0."""
    fl = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    fl ^= fl >> 20
    fl ^= fl >> 40
    return fl & _FLOW_LABEL_MASK


def flow_label_to_udp_sport(flow_label: int) -> int:
    """rdma_flow_label_to_udp_sport(): the RoCEv2 UDP source port (the ECMP entropy) of a flow label."""
    low, high = flow_label & 0x03FFF, flow_label & 0xFC000
    low ^= high >> 14
    return low | _UDP_SPORT_MIN


def roce_udp_sport(lqpn: int, rqpn: int, flow_label: int = 0) -> int:
    """UDP source port of a connected QP's packets (flow label as given, else the computed one)."""
    return flow_label_to_udp_sport(flow_label or calc_flow_label(lqpn, rqpn))


def gid_text(gid: bytes) -> str:
    """A GID as sysfs `gids/N` and `show_gids` print it (`0000:...:ffff:0a00:0002`, so it joins with
    endpoints.gid); "" for the zero GID or a wrong length."""
    if len(gid) != 16 or not any(gid):
        return ""
    return ":".join(gid[i : i + 2].hex() for i in range(0, 16, 2))


def gid_to_ip(gid: bytes) -> str:
    """The address a RoCEv2 GID stands for: IPv4 for IPv4-mapped GIDs, else IPv6; "" for the zero GID."""
    if len(gid) != 16 or not any(gid):
        return ""
    addr = ipaddress.IPv6Address(gid)
    return str(addr.ipv4_mapped) if addr.ipv4_mapped is not None else str(addr)
