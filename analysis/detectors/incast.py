"""Incast: many senders converge on one receiver NIC, and the leaf port facing it stays congested for many
consecutive intervals; who sends, and how far the PFC pause spreads upstream.

Method (after DCQCN, Zhu et al., SIGCOMM 2015: ECN marks at the congested egress queue, CNPs sent by
the receiver NIC, rate cuts at every sender NIC; Guo et al., "RDMA over Commodity Ethernet at
Scale", SIGCOMM 2016, and Li et al., HPCC, SIGCOMM 2019, on incast as the N-to-1 pattern behind
PFC pause propagation; queue and PG watermarks read as SONiC `watermarkstat` reports them, the peak
occupancy since the last read):

* the congestion point of an incast is the *receiver-facing* port, the leaf downlink whose far end is
  the receiver NIC: every sender's traffic must leave through it, so only downlink queues are judged
  (uplink and spine queues are the domain of the ECMP / polarization detectors);
* a *congested sample* of a downlink queue is one whose watermark reached `min_watermark_bytes` or
  that ECN-marked at least `min_ecn_rate` packets/s, while the port transmitted at least
  `min_utilization` of its link speed: the queue is fed faster than the NIC drains it, interval after
  interval (a burst shorter than the interval leaves the average low: that is a microburst, see
  `microburst.py`);
* consecutive congested samples of one (port, priority) form an episode; it is an incast when it
  lasts `min_intervals` samples and at least `min_senders` sender NICs are found;
* senders: NICs handling at least `min_cnp_rate` CNPs/s during the episode (DCQCN reaction points cut
  by the receiver's notifications), plus NICs their leaf held back with PFC pauses (a sender whose
  NIC ignores or drops CNPs shows only that), kept when they share a job with the receiver NIC
  (an RDMA connection joins two ranks of one job; without placements, every such NIC counts);
* the finding names the receiver host, its leaf and the senders; the receiver-facing port, the
  receiver NIC and the ports facing the senders; its jobs are the jobs on those NICs (the incast's
  own traffic and every job sharing the hot port); the switch ports that sent PFC pauses meanwhile
  show how far the pause tree reached (critical when it left the receiver's leaf).

Without flow or QP records, two incasts at the same time whose senders share a job with both
receivers cannot be told apart: their senders are reported for both.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl
from pydantic import Field

from rocescope.analysis.detectors.base import Context, Detector, Params
from rocescope.analysis.detectors.pfc_storm import link_speeds_bps
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding

QUEUE_WM = "queue_watermark_bytes"
QUEUE_NOW = "queue_occupancy_bytes"
QUEUE_ECN = "queue_ecn_marked_packets"
RX_PAUSED_US = "pfc_rx_pause_duration_us"
TX_PAUSED_US = "pfc_tx_pause_duration_us"
KEYS = ["device", "port", "priority"]


class FanInParams(Params):
    """Thresholds shared by the incast and microburst detectors."""

    min_watermark_bytes: float = Field(
        1e6, gt=0, description="Queue watermark that counts as congested (above a 400G ECN Kmin of a few 100 KB)."
    )
    min_ecn_rate: float = Field(1000.0, gt=0, description="ECN-marked packets/s on the queue that count as marking.")
    min_cnp_rate: float = Field(10.0, gt=0, description="CNPs handled/s that make a NIC a throttled sender.")
    min_senders: int = Field(2, ge=0, description="Sender NICs needed (the N of N-to-1).")


class IncastParams(FanInParams):
    min_utilization: float = Field(
        0.4, gt=0, le=1, description="Transmit share of link speed the receiver-facing port must keep."
    )
    min_intervals: int = Field(3, ge=1, description="Consecutive congested samples (sustained, not a burst).")
    critical_seconds: float = Field(30.0, gt=0, description="Incasts at least this long are critical.")


@dataclass(frozen=True)
class Sender:
    host: str
    netdev: str
    ref: str  # the leaf port facing the sender NIC, or the NIC itself when its leaf is unknown
    cnp_rate: float
    paused_us_per_s: float


@dataclass(frozen=True)
class FanIn:
    """The receiver of one congested downlink queue and the NICs sending to it."""

    receiver: tuple[str, str]
    leaf_ref: str
    senders: tuple[Sender, ...]
    cnp_sent_rate: float
    pausing: tuple[str, ...]  # switch ports that sent PFC pauses on the priority meanwhile
    job_ids: tuple[str, ...]

    @property
    def devices(self) -> tuple[str, ...]:
        leaf = self.leaf_ref.partition(":")[0]
        return tuple(dict.fromkeys([self.receiver[0], leaf, *(s.host for s in self.senders)]))

    @property
    def ports(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.leaf_ref, f"{self.receiver[0]}:{self.receiver[1]}", *self.refs]))

    @property
    def refs(self) -> list[str]:
        return [s.ref for s in self.senders]

    def evidence(self) -> dict[str, object]:
        return {
            "receiver": f"{self.receiver[0]}:{self.receiver[1]}",
            "fan_in": len(self.senders),
            "senders": [
                {
                    "nic": f"{s.host}:{s.netdev}",
                    "port": s.ref,
                    "cnp_handled_per_s": s.cnp_rate,
                    "paused_us_per_s": s.paused_us_per_s,
                }
                for s in self.senders
            ],
            "receiver_cnp_sent_per_s": self.cnp_sent_rate,
            "pausing_ports": list(self.pausing),
        }


def queue_samples(ctx: Context, p: FanInParams) -> pl.DataFrame:
    """Samples of receiver-facing (downlink) queues whose watermark or ECN marking crossed the floor,
    with the port's utilization, paused share, occupancy at the read and the interval they cover."""
    frames, fabric = ctx.frames, ctx.fabric
    wm = frames.gauges([QUEUE_WM], min_value=p.min_watermark_bytes, roles=["switch"])
    ecn = frames.rates([QUEUE_ECN], min_rate=p.min_ecn_rate, roles=["switch"])
    keys = pl.concat([wm.select("ts", *KEYS), ecn.select("ts", *KEYS)]).unique()
    pairs = keys.select("device", "port").unique().rows()
    down = [(d, port) for d, port in pairs if fabric.port_kind(d, port) == "downlink"]
    if not down:
        return pl.DataFrame()
    keys = keys.join(pl.DataFrame(down, schema=["device", "port"], orient="row"), on=["device", "port"], how="semi")
    devices = sorted({d for d, _ in down})
    prios = sorted(set(keys["priority"].to_list()))
    g = frames.gauges([QUEUE_WM, QUEUE_NOW], devices=devices, priorities=prios)
    gauges = [
        g.filter(pl.col("metric") == m).select("ts", *KEYS, pl.col("value").alias(m)) for m in (QUEUE_WM, QUEUE_NOW)
    ]
    marks = frames.rates([QUEUE_ECN], devices=devices, priorities=prios).select(
        "ts", *KEYS, pl.col("rate").alias("ecn_rate"), "dt_s"
    )
    paused = frames.rates([RX_PAUSED_US], devices=devices, priorities=prios).select(
        "ts", *KEYS, (pl.col("rate") / 1e6).alias("paused_fraction")
    )
    tx = port_tx(ctx, devices)
    out = keys
    for part in [*gauges, marks, paused]:
        out = out.join(part, on=["ts", *KEYS], how="left")
    return (
        out.join(tx, on=["ts", "device", "port"], how="left")
        .with_columns(
            pl.col(QUEUE_WM).fill_null(0.0),
            pl.col("ecn_rate").fill_null(0.0),
            pl.col("paused_fraction").fill_null(0.0),
            pl.col("dt_s").fill_null(ctx.poll_s),
        )
        .sort([*KEYS, "ts"])
    )


def port_tx(ctx: Context, devices: list[str]) -> pl.DataFrame:
    """Transmit rate, link speed (bytes/s) and utilization of every port of the devices, per sample."""
    speeds = link_speeds_bps(ctx.frames, devices)
    speed = pl.DataFrame(
        [(d, port, bps / 8) for (d, port), bps in speeds.items()],
        schema={"device": pl.String, "port": pl.String, "speed_Bps": pl.Float64},
        orient="row",
    )
    tx = ctx.frames.rates(["tx_bytes"], devices=devices, roles=["switch"])
    return (
        tx.select("ts", "device", "port", pl.col("rate").alias("tx_Bps"))
        .join(speed, on=["device", "port"], how="left")
        .with_columns(
            pl.when(pl.col("speed_Bps") > 0).then(pl.col("tx_Bps") / pl.col("speed_Bps")).alias("utilization")
        )
    )


def _nic_names(fabric: Fabric) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """(host, rdma_dev) -> netdev and back, from the job placements (RDMA counters name the RDMA device)."""
    to_netdev = {(pl_.host, pl_.rdma_dev): pl_.netdev for pl_ in fabric.placements}
    return to_netdev, {(h, n): r for (h, r), n in to_netdev.items()}


def _between(frame: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Samples whose interval lies in [start, end] (a sample at ts covers the interval ending at ts)."""
    return frame.filter(pl.col("ts") > start, pl.col("ts") <= end)


def fan_in(
    ctx: Context, device: str, port: str, priority: int, start: dt.datetime, end: dt.datetime, p: FanInParams
) -> FanIn | None:
    """The receiver behind a downlink queue and the NICs sending to it during [start, end]."""
    frames, fabric = ctx.frames, ctx.fabric
    receiver = fabric.nic_behind(device, port)
    if receiver is None:
        return None
    seconds = max((end - start).total_seconds(), ctx.poll_s)
    to_netdev, to_rdma = _nic_names(fabric)
    cnp = _between(frames.rates(["cnp_handled"], min_rate=p.min_cnp_rate, roles=["nic"]), start, end)
    cnp_by = cnp.group_by("device", "port").agg((pl.col("delta").sum() / seconds).alias("rate"))
    found: dict[tuple[str, str], list[float]] = {}
    for host, rdma, rate in cnp_by.iter_rows():
        rdma_dev = rdma.split("/", 1)[0]
        found.setdefault((host, to_netdev.get((host, rdma_dev), rdma)), [0.0, 0.0])[0] = float(rate)
    # pauses a leaf sent toward the NICs under it on the priority: senders held back by PFC
    tx_pause = _between(frames.rates([TX_PAUSED_US], min_rate=1.0, roles=["switch"]), start, end).filter(
        pl.col("priority") == priority
    )
    by_port = tx_pause.group_by("device", "port").agg((pl.col("delta").sum() / seconds).alias("us"))
    pausing = []
    for d, sw_port, us in by_port.sort("us", descending=True).iter_rows():
        pausing.append(f"{d}:{sw_port}")
        nic = fabric.nic_behind(d, sw_port)
        if nic is not None:
            found.setdefault(nic, [0.0, 0.0])[1] = float(us)
    host_jobs = fabric.jobs_on_nic(*receiver, start, end)
    senders = []
    for (host, netdev), (rate, us) in sorted(found.items()):
        if host == receiver[0]:
            continue
        if host_jobs and not host_jobs & fabric.jobs_on_nic(host, netdev, start, end):
            continue  # no job joins it to the receiver: congested for another reason
        leaf_port = fabric.peer(host, netdev)
        ref = f"{leaf_port[0]}:{leaf_port[1]}" if leaf_port else f"{host}:{netdev}"
        senders.append(Sender(host, netdev, ref, rate, us))
    rdma = to_rdma.get(receiver)
    sent = _between(frames.rates(["cnp_sent"], min_rate=1.0, roles=["nic"]), start, end).filter(
        pl.col("device") == receiver[0]
    )
    if rdma is not None:
        sent = sent.filter(pl.col("port").str.split("/").list.first() == rdma)
    leaf_ref = f"{device}:{port}"
    refs = [leaf_ref, f"{receiver[0]}:{receiver[1]}", *(s.ref for s in senders)]
    return FanIn(
        receiver=receiver,
        leaf_ref=leaf_ref,
        senders=tuple(senders),
        cnp_sent_rate=float(sent["delta"].sum()) / seconds,
        pausing=tuple(pausing),
        job_ids=tuple(fabric.jobs_at_refs(refs, start, end)),
    )


def upstream_of(fabric: Fabric, fan: FanIn) -> list[str]:
    """Switches the receiver's leaf paused through its uplinks: the pause tree left the leaf."""
    leaf = fan.leaf_ref.partition(":")[0]
    out = set()
    for ref in fan.pausing:
        d, _, port = ref.partition(":")
        peer = fabric.peer(d, port)
        if d == leaf and peer is not None and fabric.port_kind(d, port) == "uplink":
            out.add(peer[0])
    return sorted(out)


def detect(ctx: Context, p: IncastParams) -> list[Finding]:
    samples = queue_samples(ctx, p)
    if samples.is_empty():
        return []
    hot = samples.filter(
        pl.col("utilization") >= p.min_utilization,
        (pl.col(QUEUE_WM) >= p.min_watermark_bytes) | (pl.col("ecn_rate") >= p.min_ecn_rate),
    )
    if hot.is_empty():
        return []
    eps = episodes(
        hot,
        KEYS,
        gap_s=1.5 * ctx.poll_s,
        aggregations=[
            pl.col(QUEUE_WM).max().alias("peak"),
            pl.col("utilization").mean().alias("util"),
            pl.col("ecn_rate").mean().alias("ecn"),
        ],
    ).filter(pl.col("samples") >= p.min_intervals)
    findings = []
    for device, port, prio, start, end, n, peak, util, ecn in eps.iter_rows():
        start, end = ctx.clip(start, end)
        fan = fan_in(ctx, device, port, int(prio), start, end, p)
        if fan is None or len(fan.senders) < p.min_senders:
            continue
        seconds = (end - start).total_seconds()
        beyond = upstream_of(ctx.fabric, fan)
        receiver = f"{fan.receiver[0]}:{fan.receiver[1]}"
        findings.append(
            Finding(
                kind="incast",
                severity="critical" if seconds >= p.critical_seconds or beyond else "warning",
                start=start,
                end=end,
                devices=fan.devices,
                ports=fan.ports,
                priority=int(prio),
                score=seconds * float(util) * max(1, len(fan.senders)),
                summary=(
                    f"incast: {len(fan.senders)} senders to {receiver}; {fan.leaf_ref} priority {prio} "
                    f"{util:.0%} busy with its queue peaking at {peak / 1e6:.1f} MB for {seconds:.0f} s"
                    + (f"; its leaf paused {len(beyond)} spine(s)" if beyond else "")
                ),
                evidence={
                    **fan.evidence(),
                    "samples": n,
                    "utilization": util,
                    "peak_watermark_bytes": peak,
                    "ecn_marked_per_s": ecn,
                    "paused_upstream": beyond,
                },
                job_ids=fan.job_ids,
            )
        )
    return findings


DETECTOR = Detector("incast", "1", ("incast",), IncastParams, detect)
