"""Packets decoded by tshark through pyshark: the sources, and one RoCEv2 row per packet.

The seam is the packet source: a pcap file (`PcapFile`) or a live interface (`LiveInterface`);
both are pyshark captures, so tshark's own RoCE dissector (UDP 4791 as `infiniband`) does the
decoding either way. `decode_packet` turns a RoCEv2 packet into the fields of one `packets` row, and
names why any other frame is not one (RoCEv1, native InfiniBand, other UDP): the fast path (`fast.py`)
gives the same rows and the same reasons. A source that tshark cannot read to the end keeps the
packets before the problem and says why.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from rocescope.errors import DecodeError

__all__ = [
    "CNP_OPCODE",
    "NOT_INFINIBAND",
    "NOT_ROCEV2",
    "ROCEV1",
    "ROCEV2_PORT",
    "ROCE_CAPTURE_FILTER",
    "TRUNCATED_BTH",
    "LiveInterface",
    "PacketSource",
    "PcapFile",
    "decode_packet",
]

log = logging.getLogger(__name__)

ROCEV2_PORT = 4791
CNP_OPCODE = 0x81
_BECN = 0x40  # BTH byte 4: FECN is bit 7, BECN bit 6
#: What a live capture keeps: RoCEv2, and the tunnels a switch mirrors it in (ERSPAN over GRE, VXLAN), VLAN-tagged
#: or not (BPF reads past a tag only after `vlan`).
_ROCE_OR_TUNNEL = f"udp port {ROCEV2_PORT} or udp port 4789 or proto gre"
ROCE_CAPTURE_FILTER = f"{_ROCE_OR_TUNNEL} or (vlan and ({_ROCE_OR_TUNNEL}))"
# Why a frame is not a RoCEv2 row (the keys of the collector's `skipped` counts)
NOT_INFINIBAND = "not infiniband"
ROCEV1 = "RoCEv1 or native InfiniBand (no UDP/IP)"
NOT_ROCEV2 = "not RoCEv2"
TRUNCATED_BTH = "truncated BTH"


class PacketSource(Protocol):
    """Where packets come from; iterating yields pyshark packets.

    A source that ends early (a truncated file, tshark failing) stops iterating and sets `error`,
    so the packets read before the problem are kept.
    """

    error: str | None

    def packets(self) -> Iterator[Any]: ...
    def close(self) -> None: ...


class _PysharkSource:
    _capture: Any
    error: str | None = None

    def _iterate(self) -> Iterator[Any]:
        from pyshark.capture.capture import TSharkCrashException

        try:
            yield from self._capture
        except TSharkCrashException as exc:
            self.error = _last_error_line(str(exc))
        self._finish()
        if self.error is not None:
            self.error = self._confirm(self.error)

    def _confirm(self, error: str) -> str | None:
        """The error after a second look, where one is possible (a live capture cannot be read again)."""
        return error

    def _finish(self) -> None:
        """Wait for tshark to exit: its status (a truncated or foreign file) is only known then."""
        import asyncio

        loop = self._capture.eventloop
        for process in list(self._capture._running_processes):
            with contextlib.suppress(TimeoutError):
                loop.run_until_complete(asyncio.wait_for(process.wait(), 10))
        self.close()

    def close(self) -> None:
        from pyshark.capture.capture import TSharkCrashException

        try:
            self._capture.close()
        except TSharkCrashException as exc:
            self.error = self.error or _last_error_line(str(exc))
            # pyshark leaves the dead tshark registered and would raise again from __del__.
            self._capture._running_processes.clear()


def _last_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("Last error line:")]
    return lines[0].removeprefix("Last error line:").strip() if lines else text.splitlines()[0]


class PcapFile(_PysharkSource):
    """A capture file, read by tshark (pcap and pcapng files take the fast path instead: `PcapCollector`)."""

    def __init__(self, path: Path | str, tshark_path: str | None = None):
        import pyshark

        self.path = Path(path)
        self.tshark_path = tshark_path
        if not self.path.is_file():
            raise DecodeError(f"{self.path}: no such capture file")
        self._capture = pyshark.FileCapture(
            str(self.path), use_json=True, include_raw=True, tshark_path=tshark_path, keep_packets=False
        )

    def packets(self) -> Iterator[Any]:
        return self._iterate()

    def _confirm(self, error: str) -> str | None:
        """tshark's verdict on the file from a plain run of its own.

        pyshark learns tshark's exit status through an asyncio child watcher, which reports 255 ("Unknown
        child process") when anything else in the process reaped tshark first: a whole file would then
        count as one that ends early. A run whose status `subprocess` waits for itself settles it."""
        from pyshark.tshark.tshark import get_process_path

        argv = [get_process_path(self.tshark_path), "-r", str(self.path), "-T", "fields", "-e", "frame.number"]
        run = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
        if run.returncode == 0:
            log.warning("%s: tshark's exit status was lost (%s); a second read finds the file whole", self.path, error)
            return None
        lines = [line for line in run.stderr.splitlines() if line.strip() and "Running as user" not in line]
        return lines[-1].strip() if lines else error


class LiveInterface(_PysharkSource):
    """A live interface (mirror port or host netdev), RoCEv2 only, for a bounded number of packets."""

    def __init__(self, interface: str, packet_count: int, timeout_s: float, tshark_path: str | None = None):
        import pyshark

        self.packet_count = packet_count
        self.timeout_s = timeout_s
        self._capture = pyshark.LiveCapture(
            interface=interface,
            bpf_filter=ROCE_CAPTURE_FILTER,
            use_json=True,
            include_raw=True,
            tshark_path=tshark_path,
        )

    def packets(self) -> Iterator[Any]:
        self._capture.sniff(packet_count=self.packet_count, timeout=self.timeout_s)
        return self._iterate()


def _ts_ns(sniff_timestamp: str) -> int:
    """Exact nanoseconds from tshark's decimal epoch string (a float would lose them)."""
    seconds, _, frac = sniff_timestamp.partition(".")
    return int(seconds) * 1_000_000_000 + int((frac + "000000000")[:9])


def _bth_bytes(infiniband: Any) -> bytes:
    raw = infiniband.bth
    text = raw if isinstance(raw, str) else str(raw)
    return bytes.fromhex(text.replace(":", ""))


def _innermost(packet: Any) -> dict[str, Any]:
    """The first layer of each protocol within the innermost Ethernet frame. tshark's JSON holds a protocol
    seen twice (the outer and the carried IP of a tunnel) as one layer with `duplicate_layers`, in the order
    of `frame.protocols`."""
    protocols = str(getattr(packet.frame_info, "protocols", "")).split(":")
    start = max((i for i, name in enumerate(protocols) if name == "eth"), default=0)
    before = Counter(protocols[:start])
    inside = set(protocols[start:])
    out = {}
    for layer in packet.layers:
        name = layer.layer_name
        instances = [layer, *getattr(layer, "duplicate_layers", [])]
        if (name in inside or not protocols[0]) and before[name] < len(instances):
            out[name] = instances[before[name]]
    return out


def decode_packet(packet: Any) -> dict[str, Any] | str:
    """One RoCEv2 row (without capture point and sampling rate), or the reason the frame is not one. A mirrored
    copy in a tunnel (ERSPAN, GRE, VXLAN) is read from the innermost Ethernet frame's layers."""
    layers = _innermost(packet)
    if "infiniband" not in layers:
        return NOT_INFINIBAND
    if "udp" not in layers:
        return ROCEV1
    ip = layers.get("ip", layers.get("ipv6"))
    udp = layers["udp"]
    if ip is None or int(udp.dstport) != ROCEV2_PORT:
        return NOT_ROCEV2
    bth = _bth_bytes(layers["infiniband"])
    if len(bth) < 12:
        return TRUNCATED_BTH
    if "ip" in layers:
        dsfield = int(str(ip.dsfield), 16) if str(ip.dsfield).startswith("0x") else int(ip.dsfield)
    else:
        dsfield = int(str(ip.tclass), 16)
    return {
        "ts": _ts_ns(packet.sniff_timestamp),
        "src_ip": str(ip.src),
        "dst_ip": str(ip.dst),
        "udp_sport": int(udp.srcport),
        "dscp": dsfield >> 2,
        "ecn": dsfield & 0x3,
        "opcode": bth[0],
        "dest_qp": int.from_bytes(bth[5:8], "big"),
        "psn": int.from_bytes(bth[9:12], "big") & 0xFFFFFF,
        "pkey": int.from_bytes(bth[2:4], "big"),
        "becn": int(bool(bth[4] & _BECN)),
        "length": int(packet.length),
    }
