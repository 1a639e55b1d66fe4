"""What a window's fabric is made of, read from the store: cables (LLDP and configured), names one interface goes
by, job placements, connections and sampled flows, which devices and ports report at all, and the jobs' NCCL
collectives. `rocescope.analysis.frames.Frames` adds the counter reads on top; both share one query cache."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from rocescope.analysis.names import NON_FABRIC_PORT, renamed, same_devices
from rocescope.analysis.window import TS, Window, plain
from rocescope.pipeline.store import Store, query_polars

log = logging.getLogger(__name__)

#: A switch's interfaces that are no cable (`names.NON_FABRIC_PORT`: management, loopback, VLAN, overlay, link
#: aggregate) are left out of the analysis: a port-channel counts again what its members count, so a member's
#: errors would be a second "degraded optics" at the port-channel, and a leaf without switch-side LLDP would take
#: each of them for one more uplink. A host's bond stays (a RoCE LAG's RDMA device counts there alone). A constant
#: pattern (no quote in it), not a parameter.
_NON_FABRIC_LITERAL = NON_FABRIC_PORT.replace("\\", "\\\\")  # backslashes escaped in a SQL string literal
SWITCH_PORTS = f" AND NOT (role = 'switch' AND match(toString(port), '{_NON_FABRIC_LITERAL}'))"

#: How long an LLDP neighbour outlives its last advertisement in the agent's table: IEEE 802.1AB's TTL, msgTxInterval
#: (30 s) x msgTxHold (4) by default (lldpd, SONiC, EOS, NX-OS alike). A neighbour a device's later read lacks by
#: more than this is gone; one missing for less may be between two reads of a dump stamped per neighbour.
LLDP_TTL_S = 120.0

LINKS_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "port": pl.String(),
    "peer_device": pl.String(),
    "peer_port": pl.String(),
}
ENDPOINTS_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "host": pl.String(),
    "netdev": pl.String(),
    "rdma_dev": pl.String(),
    "ip": pl.String(),
    "rank": pl.Int32(),
    "valid_from": TS,
    "valid_to": TS,
}
ROLES_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "role": pl.String()}
PORTS_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "port": pl.String()}
ALIASES_SCHEMA: dict[str, pl.DataType] = {"device": pl.String(), "alias": pl.String(), "port": pl.String()}
QP_PEERS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "rdma_dev": pl.String(),
    "dest_ip": pl.String(),
    "job_id": pl.String(),
}
QP_PAIRS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "rdma_dev": pl.String(),
    "qpn": pl.Int64(),
    "dest_qpn": pl.Int64(),
    "dest_ip": pl.String(),
}
FLOW_SAMPLES_SCHEMA: dict[str, pl.DataType] = {
    "capture_point": pl.String(),
    "src_ip": pl.String(),
    "dst_ip": pl.String(),
    "udp_sport": pl.Int32(),
    "packets": pl.Int64(),
}


def on_asics(links: pl.DataFrame, chassis: pl.DataFrame) -> pl.DataFrame:
    """`links` with each end that names a multi-ASIC switch's front-panel port (`Frames._chassis_ports`) moved to
    the ASIC that owns the port: a host's LLDP names the switch, its counters come per ASIC."""
    if not chassis.height or not links.height:
        return links
    for device, port in (("device", "port"), ("peer_device", "peer_port")):
        links = (
            links.with_columns(pl.col(port).str.to_lowercase().alias("_named"))
            .join(chassis, left_on=[device, "_named"], right_on=["chassis", "named"], how="left")
            .with_columns(pl.coalesce("asic", device).alias(device), pl.coalesce("asic_port", port).alias(port))
            .drop("_named", "asic", "asic_port")
        )
    return links.unique(["device", "port"], keep="first", maintain_order=True)


class TopologyReads:
    """Lazy, cached topology reads of one window: each distinct request is one SQL query."""

    def __init__(self, store: Store, window: Window, lookback_s: float) -> None:
        self.store = store
        self.window = window
        #: rates at the window's first samples need the sample before it (`_scan` lengthens it for slow series)
        self.lookback = dt.timedelta(seconds=lookback_s)
        self._cache: dict[tuple[Any, ...], pl.DataFrame] = {}
        self.queries = 0

    def _query(self, key: tuple[Any, ...], sql: str, params: Mapping[str, Any]) -> pl.DataFrame:
        if key not in self._cache:
            self.queries += 1
            t = time.perf_counter()
            self._cache[key] = query_polars(self.store, sql, params)
            log.debug("%.3f s, %d rows: %s", time.perf_counter() - t, self._cache[key].height, key)
        return self._cache[key]

    def _params(self, metrics: Sequence[str], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The window's bounds (`lo`: from the look-back on) and `extra` as query parameters."""
        return {
            "lo": self.window.start - self.lookback,
            "start": self.window.start,
            "end": self.window.end,
            "metrics": list(metrics),
            **(extra or {}),
        }

    def links(self) -> pl.DataFrame:
        """The latest adjacency per port seen up to the window's end (LINKS_SCHEMA), without the neighbours that
        aged out: one its device's own LLDP reads (the same source) stopped naming more than `LLDP_TTL_S` before
        the window, while they went on (a neighbour that stops advertising leaves the agent's table after its
        TTL, so a later read without it says the cable is gone). A neighbour read in the window, or within a TTL
        before it, stays (a link that went down there drops out of LLDP for that reason), and so does the last
        read of a device that fell silent (the best cabling known)."""
        sql = """
SELECT device, port, argMax(peer_device, last_seen) AS peer_device, argMax(peer_port, last_seen) AS peer_port
FROM (
    SELECT *, max(last_seen) OVER (PARTITION BY device, source) AS device_seen FROM (
        SELECT toString(device) AS device, toString(port) AS port, source, max(seen_at) AS last_seen,
            toString(argMax(peer_device, seen_at)) AS peer_device, toString(argMax(peer_port, seen_at)) AS peer_port
        FROM links WHERE seen_at < {end:DateTime64(9, 'UTC')} AND source NOT IN ('alias', 'rdma', 'chassis')
        GROUP BY device, port, source
    )
)
WHERE last_seen >= {start:DateTime64(9, 'UTC')} - toIntervalMillisecond({ttl_ms:Int64})
    OR last_seen >= device_seen - toIntervalMillisecond({ttl_ms:Int64})
GROUP BY device, port ORDER BY device, port"""
        params = self._params((), {"ttl_ms": round(LLDP_TTL_S * 1000)})
        links = plain(self._query(("links",), sql, params), LINKS_SCHEMA, "links")
        links = self.named(links, ("device", "peer_device"))
        return on_asics(links, self._chassis_ports()).sort("device", "port")

    def _chassis_ports(self) -> pl.DataFrame:
        """Front-panel ports of multi-ASIC switches (`links` rows of source `chassis`: the switch, the port as its
        neighbours name it, lower case; the ASIC's device and its port)."""
        sql = """
SELECT toString(device) AS chassis, lower(toString(port)) AS named,
    toString(argMax(peer_device, seen_at)) AS asic, toString(argMax(peer_port, seen_at)) AS asic_port
FROM links WHERE seen_at < {end:DateTime64(9, 'UTC')} AND source = 'chassis'
GROUP BY chassis, named"""
        return self._query(("chassis",), sql, self._params(()))

    def port_aliases(self) -> pl.DataFrame:
        """Switch port aliases (ALIASES_SCHEMA: device, alias, port) as `links` rows of source `alias` carry them:
        a SONiC switch advertises the alias (`etp1`) over LLDP, its counters name the port (`Ethernet0`)."""
        return self._renames("alias")

    def rdma_netdevs(self) -> pl.DataFrame:
        """Each host RDMA port's netdev (ALIASES_SCHEMA: device, alias = the RDMA port `mlx5_2/1`, port = its netdev)
        as `links` rows of source `rdma` carry them: the NIC collector's inventory (`/sys/class/infiniband/<dev>/
        ports/<p>/gid_attrs/ndevs`), for hosts no placement names."""
        return self._renames("rdma")

    def _renames(self, source: str) -> pl.DataFrame:
        """`links` rows of `source` that name one device's interface two ways (the peer is the device itself)."""
        sql = """
SELECT toString(device) AS owner, toString(port) AS alias, toString(argMax(peer_port, seen_at)) AS named
FROM links WHERE seen_at < {end:DateTime64(9, 'UTC')} AND source = {source:String}
GROUP BY owner, alias ORDER BY owner, alias"""
        frame = self._query(("renames", source), sql, {**self._params(()), "source": source})
        return plain(frame.rename({"owner": "device", "named": "port"}, strict=False), ALIASES_SCHEMA, source)

    def endpoints(self) -> pl.DataFrame:
        """Job placements valid at some point of the window (ENDPOINTS_SCHEMA); one that names no NIC, or a
        netdev without its RDMA device, completed from the NICs its host reports (`placements.py`)."""
        from rocescope.analysis.placements import host_nics, incomplete, on_host_nics  # they import this module

        if ("endpoints+nics",) in self._cache:
            return self._cache[("endpoints+nics",)]
        sql = """
SELECT toString(job_id) AS job_id, toString(host) AS host, toString(netdev) AS netdev,
    toString(rdma_dev) AS rdma_dev, toString(ip) AS ip, rank, valid_from, valid_to
FROM endpoints
WHERE valid_from < {end:DateTime64(9, 'UTC')} AND valid_to > {start:DateTime64(9, 'UTC')}
ORDER BY job_id, host, netdev"""
        placed = plain(self._query(("endpoints",), sql, self._params(())), ENDPOINTS_SCHEMA, "endpoints")
        placed = self.named(placed, ("host",))
        if incomplete(placed):
            placed = on_host_nics(placed, host_nics(self.ports("nic")), ENDPOINTS_SCHEMA)
        self._cache[("endpoints+nics",)] = placed
        return placed

    def collectives(self, lookback_s: float = 0.0, after_s: float = 0.0) -> pl.DataFrame:
        """NCCL collectives that ended in the window, up to `lookback_s` before it (a baseline) or `after_s` after
        it (one hung through a deadlock in the window is reported when it completes), each with its training
        job (`rocescope.analysis.collectives.ATTRIBUTED_SCHEMA`; shared hosts resolved through the communicator:
        `rocescope.analysis.communicators`)."""
        from rocescope.analysis.collectives import job_collectives  # they import this module
        from rocescope.analysis.communicators import by_communicator

        key = ("collectives", lookback_s, after_s)
        if key not in self._cache:
            self.queries += 3
            span = Window(
                self.window.start - dt.timedelta(seconds=lookback_s), self.window.end + dt.timedelta(seconds=after_s)
            )
            attributed = self.named(job_collectives(self.store, span), ("host",))  # NCCL's hostname
            self._cache[key] = by_communicator(attributed, self.endpoints())
        return self._cache[key]

    def usable_collectives(self, lookback_s: float = 0.0, after_s: float = 0.0) -> pl.DataFrame:
        """`collectives` that impact can count, with their weights (`rocescope.analysis.impact.usable`), once per
        window: the slowdown and hang detectors and impact read the same ones (millions in an hour of 128x8)."""
        from rocescope.analysis.impact import usable  # it imports this module

        key = ("usable collectives", lookback_s, after_s)
        if key not in self._cache:
            self._cache[key] = usable(self.collectives(lookback_s, after_s))
        return self._cache[key]

    def qp_peers(self) -> pl.DataFrame:
        """RDMA connections seen up to the window's end (QP_PEERS_SCHEMA: host, rdma_dev, dest_ip, job_id), from
        `qp_owners` (eBPF or `rdma resource show qp`); empty where nothing collects them."""
        sql = """
SELECT DISTINCT toString(host) AS host, toString(rdma_dev) AS rdma_dev, toString(dest_ip) AS dest_ip,
    toString(job_id) AS job_id
FROM qp_owners
WHERE seen_at < {end:DateTime64(9, 'UTC')} AND seen_at >= {lo:DateTime64(9, 'UTC')} - INTERVAL 1 DAY
ORDER BY host, rdma_dev, dest_ip"""
        peers = plain(self._query(("qp_peers",), sql, self._params(())), QP_PEERS_SCHEMA, "qp_peers")
        return self.named(peers, ("host",))

    def qp_pairs(self) -> pl.DataFrame:
        """Queue pairs seen up to the window's end with both numbers (QP_PAIRS_SCHEMA: host, rdma_dev, qpn,
        dest_qpn, dest_ip): a connection whose two ends both report pairs up (`qpn` of one is `dest_qpn` of the
        other), which names the host behind a remote address without an inventory."""
        sql = """
SELECT DISTINCT toString(host) AS host, toString(rdma_dev) AS rdma_dev, toInt64(qpn) AS qpn,
    toInt64(dest_qpn) AS dest_qpn, toString(dest_ip) AS dest_ip
FROM qp_owners
WHERE seen_at < {end:DateTime64(9, 'UTC')} AND seen_at >= {lo:DateTime64(9, 'UTC')} - INTERVAL 1 DAY
ORDER BY host, rdma_dev, qpn"""
        pairs = plain(self._query(("qp_pairs",), sql, self._params(())), QP_PAIRS_SCHEMA, "qp_pairs")
        return self.named(pairs, ("host",))

    def named(self, frame: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
        """`frame` with the names other sources give devices (FQDN, case) replaced by their counters' (`names`)."""
        names = {v for c in columns for v in frame[c].unique().to_list() if v}
        return renamed(frame, columns, same_devices(self.roles()["device"].to_list(), names))

    def flow_samples(self, start: dt.datetime | None = None, end: dt.datetime | None = None) -> pl.DataFrame:
        """Sampled RoCEv2 packets (CNPs left out) counted per capture point and flow (src, dst, UDP source
        port) in [start, end) (default: the window) (FLOW_SAMPLES_SCHEMA); empty where nothing is captured."""
        lo, hi = max(start or self.window.start, self.window.start), min(end or self.window.end, self.window.end)
        sql = """
SELECT toString(capture_point) AS capture_point, toString(src_ip) AS src_ip, toString(dst_ip) AS dst_ip,
    toInt32(udp_sport) AS udp_sport, toInt64(count()) AS packets
FROM packets
WHERE ts >= {lo:DateTime64(9, 'UTC')} AND ts < {hi:DateTime64(9, 'UTC')} AND opcode != 129
GROUP BY capture_point, src_ip, dst_ip, udp_sport
ORDER BY capture_point, src_ip, dst_ip, udp_sport"""
        frame = self._query(("flow_samples", lo, hi), sql, {"lo": lo, "hi": hi})
        return plain(frame, FLOW_SAMPLES_SCHEMA, "flow_samples")

    def roles(self) -> pl.DataFrame:
        """Each device with ports seen in the window, with its role (switch | nic | host) (ROLES_SCHEMA).
        Read from the 1-minute rollup's port traffic counters (every port device reports them each poll):
        a DISTINCT over an hour of raw samples of a large fabric costs seconds, over the rollup nothing."""
        sql = """
SELECT DISTINCT toString(device) AS device, toString(role) AS role FROM counters_1m
WHERE minute >= toStartOfMinute({start:DateTime64(9, 'UTC')}) AND minute < {end:DateTime64(9, 'UTC')}
    AND metric IN ('tx_bytes', 'rx_bytes')
ORDER BY device"""
        return plain(self._query(("roles",), sql, self._params(())), ROLES_SCHEMA, "roles")

    def ports(self, role: str = "switch") -> pl.DataFrame:
        """Each switch port with traffic counters in the window (PORTS_SCHEMA): the names the counters use,
        which LLDP may spell another way; with role `nic`, each host port with any counter (an RDMA-only host
        reports no bytes). From the 1-minute rollup, like `roles`."""
        sql = f"""
SELECT DISTINCT toString(device) AS device, toString(port) AS port FROM counters_1m
WHERE minute >= toStartOfMinute({{start:DateTime64(9, 'UTC')}}) AND minute < {{end:DateTime64(9, 'UTC')}}
    AND role = {{role:String}} AND (role != 'switch' OR metric IN ('tx_bytes', 'rx_bytes')){SWITCH_PORTS}
ORDER BY device, port"""  # noqa: S608 - a constant and placeholders only
        return plain(self._query(("ports", role), sql, self._params((), {"role": role})), PORTS_SCHEMA, "ports")
