"""Port speeds from every source there is, and inferred where there is none, so no port is judged "0% busy"
because nobody reported its speed.

Where a speed comes from, best first:

* `reported`: the port's own running speed, the `port_speed_bps` gauge: SNMP `ifHighSpeed`, OpenConfig
  `negotiated-port-speed`, SONiC `PORT_TABLE` speed, SR Linux `port-speed`, a NIC's sysfs `speed`;
* `peer`: the running speed reported for the other end of the cable (a leaf port facing a NIC takes the
  NIC's): both ends of a link run at the speed they negotiated;
* `configured`: the speed the port is set to (OpenConfig `state/port-speed`, `port_speed_configured_bps`),
  which a link may not have negotiated (a 400G port come up at 200G), so only where neither end reports
  its running speed;
* `inferred`: the highest rate the device's ports of the same kind (downlinks, uplinks) reached in the
  window, snapped up to the next standard Ethernet speed. Ports of one kind on one switch run at one speed
  in practice (a 64 x 400G leaf), and a busy fabric drives some of them to line rate; the evidence of a
  finding says when a speed was inferred. A device whose ports never moved more than `MIN_INFERRED_BPS`
  gives no inference rather than a guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from rocescope.analysis.fabric import Fabric, PortKind
from rocescope.analysis.frames import Frames

__all__ = ["STANDARD_BPS", "PortSpeeds", "Speed", "snap_up"]

#: Ethernet port speeds, bits/s.
STANDARD_BPS = (1e9, 10e9, 25e9, 40e9, 50e9, 100e9, 200e9, 400e9, 800e9, 1.6e12)
#: An observed peak below this (bits/s) says nothing about the port's speed.
MIN_INFERRED_BPS = 5e9
#: Rates read from two clocks can overshoot line rate a little; a peak this much above a speed still fits it.
_OVERSHOOT = 1.05

SPEED_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "port": pl.String(),
    "speed_Bps": pl.Float64(),
    "speed_source": pl.String(),
}


def snap_up(bps: float) -> float | None:
    """The smallest standard speed the observed rate fits in; None when it is too low to tell."""
    if bps < MIN_INFERRED_BPS:
        return None
    for speed in STANDARD_BPS:
        if bps <= speed * _OVERSHOOT:
            return speed
    return STANDARD_BPS[-1]


@dataclass(frozen=True)
class Speed:
    bps: float
    source: str  # reported | peer | configured | inferred


class PortSpeeds:
    """Speeds of the ports of a window's devices, looked up lazily per device set and cached."""

    def __init__(self, frames: Frames, fabric: Fabric) -> None:
        self.frames = frames
        self.fabric = fabric
        self._known: dict[tuple[str, str], Speed] = {}
        self._done: set[str] = set()

    def _reported(self, devices: list[str], metric: str = "port_speed_bps") -> dict[tuple[str, str], float]:
        """The speed each port reported in the window, else the last it reported before (a static fact is sent
        once and stamped with its last change: a 400G uplink reported days ago is still 400G)."""
        rows = self.frames.port_maxima(metric, devices=devices, min_value=1.0).iter_rows()
        out = {(d, self.fabric.iface(d, p)): float(v) for d, p, v in rows}
        # only devices the window gives no speed for: a device reporting every poll costs nothing more
        reporting = {d for d, _ in out}
        silent = [d for d in devices if d not in reporting]
        if silent:
            last = self.frames.last_gauges([metric], devices=silent).filter(pl.col("value") >= 1.0)
            for d, p, v in last.select("device", "port", "value").iter_rows():
                out.setdefault((d, self.fabric.iface(d, p)), float(v))
        return out

    def _load(self, devices: Iterable[str]) -> None:
        todo = sorted(set(devices) - self._done)
        if not todo:
            return
        peers = {p for d, port in self.fabric.peers if d in todo for p in [self.fabric.peers[(d, port)][0]]}
        reported = self._reported(sorted(set(todo) | peers))
        for (d, p), bps in reported.items():
            if d in todo:
                self._known[(d, p)] = Speed(bps, "reported")
        for d in todo:
            for port in self.fabric.ports_of(d):
                peer = self.fabric.peer(d, port)
                if (d, port) not in self._known and peer is not None and peer in reported:
                    self._known[(d, port)] = Speed(reported[peer], "peer")
        for (d, p), bps in self._reported(todo, "port_speed_configured_bps").items():
            self._known.setdefault((d, p), Speed(bps, "configured"))
        # inferred only for switches with a port that has no speed yet (it fills nothing else): on gear that
        # reports every port's speed, no scan of the traffic counters
        unknown = [
            d
            for d in todo
            if d in self.fabric.switches
            and any((d, p) not in self._known for p in self.fabric.counter_ports.get(d, ()))
        ]
        self._infer(unknown)
        self._done.update(todo)

    def _infer(self, switches: list[str]) -> None:
        """Per switch and port kind, the highest rate any of its ports of that kind reached, snapped up."""
        if not switches:
            return
        peaks = self.frames.peak_rates(["tx_bytes", "rx_bytes"], devices=switches)
        best: dict[tuple[str, PortKind], float] = {}
        ports: dict[tuple[str, PortKind], list[str]] = {}
        for d, port, rate in peaks.iter_rows():
            kind = self.fabric.port_kind(d, port)
            best[(d, kind)] = max(best.get((d, kind), 0.0), float(rate) * 8)
            ports.setdefault((d, kind), []).append(port)
        for (d, kind), bps in best.items():
            speed = snap_up(bps)
            if speed is None:
                continue
            for port in ports[(d, kind)]:
                self._known.setdefault((d, port), Speed(speed, "inferred"))

    def of(self, device: str, port: str) -> Speed | None:
        self._load([device])
        return self._known.get((device, self.fabric.iface(device, port)))

    def frame(self, devices: Iterable[str]) -> pl.DataFrame:
        """(device, port, speed_Bps, speed_source) of every port of the devices with a speed (SPEED_SCHEMA)."""
        wanted = set(devices)
        self._load(wanted)
        rows = [(d, p, s.bps / 8, s.source) for (d, p), s in sorted(self._known.items()) if d in wanted]
        return pl.DataFrame(rows, schema=SPEED_SCHEMA, orient="row")

    def sources(self, refs: Iterable[tuple[str, str]]) -> dict[str, str]:
        """`device:port` -> where its speed came from, for a finding's evidence."""
        out = {}
        for d, p in refs:
            s = self.of(d, p)
            out[f"{d}:{p}"] = s.source if s is not None else "unknown"
        return out
