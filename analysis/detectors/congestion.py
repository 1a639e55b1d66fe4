"""What the incast and microburst detectors share: congestion at a receiver-facing port, and who feeds it.

Physics (DCQCN, Zhu et al., SIGCOMM 2015: ECN marks at the congested egress queue, CNPs sent by the
receiver NIC, rate cuts at every sender NIC; Guo et al., "RDMA over Commodity Ethernet at Scale",
SIGCOMM 2016, and Li et al., HPCC, SIGCOMM 2019, on incast as the N-to-1 pattern behind PFC pause
propagation; queue and PG watermarks read as SONiC `watermarkstat` reports them, the peak occupancy since
the last read):

* the congestion point of many-to-one traffic is the *receiver-facing* port, the leaf downlink whose far
  end is the receiver NIC: every sender's traffic leaves through it. Only downlinks are judged here (uplink
  and spine queues are the ECMP and polarization detectors' domain);
* congestion evidence on a downlink comes at each signal's own cadence: queue watermarks (often every
  60 s, one peak per read), ECN-marked packets of the queue (often every 10 s), the receiver NIC's CNPs
  sent (every second); each sample covers its own interval, so they are laid over the port's transmit
  samples by time, never joined on a timestamp (`align`);
* the port's utilization is its transmit rate over its speed (reported, or inferred: `speeds.py`); its *load*
  is its transmit rate over what its peer's pauses left of that speed. An egress queue grows only while
  arrivals exceed its service rate, and a port with a queue transmits whenever it is not paused, so a port
  whose queue stands for a whole sample runs at `saturated_load` or more: sustained overload (an incast) is
  told from bursts shorter than a sample (microbursts) by the port's own rate, at any background load;
* senders: NICs handling CNPs (reaction points cut by the receiver's notifications), NICs their leaf held
  back with PFC pauses (one whose NIC ignores or drops CNPs shows only that; paused most of the time is
  still sending), and NICs the sampled packets show sending to the receiver. A NIC with a QP to the
  receiver (`qp_owners`, from eBPF or `rdma resource show qp`) is joined to it whatever the jobs. CNP
  handlers count only while the receiver sends CNPs (a lossy fan-in sends none, and its CNP-handling
  neighbours are someone else's senders). A sender is kept unless it runs other jobs than the receiver's
  and no sampled flow or QP joins them (an RDMA connection joins two ranks of one job; storage and
  checkpoint servers run no placed job), and unless its QPs are collected and none goes to the receiver's
  address (a busy job's NICs all handle CNPs; a job-mate whose pairs all go elsewhere sends its RoCE there).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from rocescope.analysis.align import as_duration, covering, mean_over, with_intervals
from rocescope.analysis.detectors.base import Context, Params, lossless_threshold, threshold
from rocescope.analysis.fabric import with_ifaces

QUEUE_WM = "queue_watermark_bytes"
QUEUE_NOW = "queue_occupancy_bytes"
QUEUE_ECN = "queue_ecn_marked_packets"
RX_PAUSED_US = "pfc_rx_pause_duration_us"
TX_PAUSED_US = "pfc_tx_pause_duration_us"
TX_PAUSE_FRAMES = "pfc_tx_pause"
RX_PAUSE_FRAMES = "pfc_rx_pause"
KEYS = ["device", "port", "priority"]


class FanInParams(Params):
    """Thresholds shared by the incast and microburst detectors."""

    min_watermark_bytes: float = threshold(
        1e6,
        "Queue watermark that counts as congested by itself (above a 400G ECN Kmin of a few 100 KB); a lower "
        "peak counts where the queue's own ECN marks in the read's interval show it passed its Kmin "
        "(`marked_watermarks`).",
        "derivation: above the ECN Kmin of a few hundred KB used at 100-400G, so a queue that peaked this high "
        "passed its marking threshold, not only a short standing backlog.",
        gt=0,
    )
    min_ecn_rate: float = threshold(
        1000.0,
        "ECN-marked packets/s on the queue that count as marking.",
        "derivation: a queue marks only above its Kmin, so sustained marks show it crossed it; 1000/s is a tiny share "
        "of a 100G+ port's millions of packets/s, erring toward seeing marking (the port's own load decides).",
        gt=0,
    )
    min_cnp_rate: float = threshold(
        10.0,
        "CNPs handled/s that make a NIC a throttled sender.",
        "derivation: DCQCN (Zhu et al. 2015) notifies at most once per 50 us per flow (20000/s); 10/s, one CNP per "
        "100 ms, is a floor above stray notifications, far below any sender DCQCN is cutting.",
        gt=0,
    )
    min_cnp_sent_rate: float = threshold(
        100.0,
        "CNPs/s a receiver NIC sends that show its leaf port's queue marking.",
        "derivation: a receiver NIC sends CNPs only for ECN-marked packets (DCQCN's notification point), so sustained "
        "sending shows its leaf queue marking; 100/s is 0.5% of one flow's 50 us CNP ceiling, above stray marks.",
        gt=0,
    )
    min_pause_frames_per_s: float = threshold(
        10.0,
        "Pause frames/s a leaf sends towards a NIC that hold it back (no pause duration).",
        "derivation: a congested switch keeps refreshing XOFF toward the NIC it holds, so holding shows as a steady "
        "stream of frames; 10/s is a floor above an isolated pause, erring toward counting a held sender.",
        gt=0,
    )
    min_senders: int = threshold(
        2,
        "Sender NICs needed (the N of N-to-1).",
        "derivation: the N of N-to-1: one sender on a link of the receiver's speed cannot overrun the receiver's "
        "port, so a fan-in needs at least two.",
        ge=0,
    )
    saturated_load: float = threshold(
        0.9,
        "Transmit share of what pauses left of the line rate at which a sample was saturated: a "
        "standing queue keeps its port transmitting whenever it is not paused (queueing: an egress queue grows only "
        "while arrivals exceed its service rate); 0.9 leaves room for the Ethernet framing of small frames (a 1 KB "
        "frame carries 2% preamble and gap) and for the rate error of clocks read about a second apart (the exam's "
        "incast definition: at least 90% of line rate with the queue above the ECN threshold).",
        "derivation: a port with a standing queue transmits whenever not paused; 0.9 leaves room for preamble and "
        "inter-frame gap (2% of a 1 KB frame) and for the rate error of counters read about a second apart.",
        gt=0,
        le=1,
    )
    lossless_priorities: tuple[int, ...] = lossless_threshold(
        "Priorities that run PFC and ECN (RoCE).",
    )


def downlink_evidence(ctx: Context, p: FanInParams) -> pl.DataFrame:
    """Congestion evidence samples at receiver-facing ports: (device, port, priority, ts, dt_s, kind, value),
    kind `watermark` (bytes), `ecn` (marks/s) or `cnp` (the receiver NIC's CNPs sent/s); each covers its own
    interval (ts - dt_s, ts]."""
    frames, fabric = ctx.frames, ctx.fabric
    cols = [*KEYS, "ts", "dt_s", "kind", "value"]
    timed = frames.timed_gauges(QUEUE_WM, min_value=p.min_watermark_bytes, roles=["switch"])
    parts: list[pl.DataFrame] = []
    if not timed.is_empty():
        parts.append(timed.select(*KEYS, "ts", "dt_s", pl.lit("watermark").alias("kind"), "value"))
    ecn = frames.rates([QUEUE_ECN], min_rate=p.min_ecn_rate, roles=["switch"])
    parts.append(ecn.select(*KEYS, "ts", "dt_s", pl.lit("ecn").alias("kind"), pl.col("rate").alias("value")))
    sent = frames.rates(["cnp_sent"], min_rate=p.min_cnp_sent_rate, roles=["nic"])
    if not sent.is_empty():
        rows = []
        prio = p.lossless_priorities[0] if p.lossless_priorities else -1
        for host, port, ts, dt_s, rate in sent.select("device", "port", "ts", "dt_s", "rate").iter_rows():
            leaf = fabric.peer(host, port)
            if leaf is not None:
                rows.append((leaf[0], leaf[1], prio, ts, dt_s, "cnp", rate))
        if rows:
            types: list[pl.DataType] = [pl.String(), pl.String(), pl.Int8(), sent.schema["ts"], pl.Float64(),
                                        pl.String(), pl.Float64()]  # fmt: skip
            parts.append(pl.DataFrame(rows, schema=dict(zip(cols, types, strict=True)), orient="row"))
    parts = [x.with_columns(pl.col("priority").cast(pl.Int8)) for x in parts if not x.is_empty()]
    if not parts:
        return pl.DataFrame()
    return _downlinks(ctx, pl.concat(parts, how="vertical_relaxed")).select(cols)


def _downlinks(ctx: Context, rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` of receiver-facing ports only (none: an empty frame)."""
    fabric = ctx.fabric
    down = [
        (d, port)
        for d, port in rows.select("device", "port").unique().iter_rows()
        if fabric.port_kind(d, port) == "downlink"
    ]
    if not down:
        return rows.clear()
    keep = pl.DataFrame(down, schema={"device": pl.String, "port": pl.String}, orient="row")
    return rows.join(keep, on=["device", "port"], how="semi")


def marked_watermarks(ctx: Context, p: FanInParams) -> pl.DataFrame:
    """Watermark reads of receiver-facing queues below `min_watermark_bytes` whose own ECN marks inside the read's
    interval show the queue passed its marking threshold, as `downlink_evidence` rows of kind `watermark`.

    Kmin is the operator's (a few hundred KB at 100-400G, lower on shallow-buffer ASICs) and no counter reports
    it, so a fixed byte floor either drops peaks above a low Kmin or takes standing backlogs below a high one. A
    marked packet exists only while its queue is above Kmin, so marks in the read's interval prove the crossing
    whatever Kmin is set. The receiver's CNPs do not count here: they answer marks made at any hop of its flows
    (a spine's queue), not only at this one."""
    # any mark at all (a count of one in a read is far above 1e-9/s): the engine keeps only queues that marked
    marks = ctx.frames.rates([QUEUE_ECN], min_rate=1e-9, roles=["switch"])
    if marks.is_empty():
        return pl.DataFrame()
    devices = sorted(set(marks["device"].to_list()))
    reads = ctx.frames.gauges([QUEUE_WM], roles=["switch"], devices=devices)
    if reads.is_empty():
        return pl.DataFrame()
    reads = with_intervals(reads, KEYS).filter(pl.col("value") > 0, pl.col("value") < p.min_watermark_bytes)
    seen = reads.join(marks.select(*KEYS, pl.col("ts").alias("_m"), pl.col("dt_s").alias("_md")), on=KEYS).filter(
        pl.col("_m") > pl.col("ts") - as_duration(pl.col("dt_s")),
        pl.col("_m") - as_duration(pl.col("_md")) < pl.col("ts"),
    )
    out = seen.select(*KEYS, "ts", "dt_s", pl.lit("watermark").alias("kind"), "value").unique(maintain_order=True)
    return _downlinks(ctx, out.with_columns(pl.col("priority").cast(pl.Int8)))


def port_utilization(ctx: Context, ports: pl.DataFrame) -> pl.DataFrame:
    """Per transmit sample of the (device, port) pairs: ts, dt_s, tx_Bps, speed_Bps, speed_source,
    utilization (null where no speed is known or inferable)."""
    devices = sorted(set(ports["device"].to_list()))
    tx = ctx.frames.rates(["tx_bytes"], devices=devices, roles=["switch"])
    tx = tx.join(ports.select("device", "port").unique(), on=["device", "port"], how="semi")
    speeds = ctx.speeds.frame(devices)
    return (
        tx.select("ts", "device", "port", "dt_s", "delta", "rate", pl.col("rate").alias("tx_Bps"))
        .join(speeds, on=["device", "port"], how="left")
        .with_columns(
            pl.when(pl.col("speed_Bps") > 0).then(pl.col("tx_Bps") / pl.col("speed_Bps")).alias("utilization")
        )
    )


def port_load(ctx: Context, ports: pl.DataFrame, lossless: Sequence[int]) -> pl.DataFrame:
    """`port_utilization` with `paused` (the share of each transmit sample the port's peer held it paused on a
    lossless priority) and `load` (the transmit rate over what the pauses left of the line rate; null for a port
    paused nine tenths of the time or more: a storm's victim, whose rate says nothing of what is offered to it)."""
    util = port_utilization(ctx, ports)
    held = _held_paused(ctx, util, lossless)
    util = util.join(held, on=["device", "port", "ts"], how="left").with_columns(pl.col("paused").fill_null(0.0))
    room = 1.0 - pl.col("paused")
    return util.with_columns(pl.when(room >= 0.1).then(pl.col("utilization") / room).alias("load"))


def _held_paused(ctx: Context, util: pl.DataFrame, lossless: Sequence[int]) -> pl.DataFrame:
    """Per transmit sample of `util`, the largest share of its interval a lossless priority was held paused, by
    the port's pause duration counter. Pause frames alone do not say it: a pause ends at the XON that may follow
    its XOFF at once, so frames give no lower bound, and an upper bound would make busy ports look saturated."""
    out = pl.DataFrame(schema={"device": pl.String, "port": pl.String, "ts": util.schema["ts"], "paused": pl.Float64})
    devices = sorted(set(util["device"].to_list()))
    rates = ctx.frames.rates([RX_PAUSED_US], devices=devices, roles=["switch"]) if devices else pl.DataFrame()
    if rates.is_empty() or not lossless:
        return out
    spans = util.select("device", "port", "ts", "dt_s").join(
        pl.DataFrame({"priority": list(lossless)}, schema={"priority": pl.Int8}), how="cross"
    )
    got = mean_over(spans, rates, KEYS, "_us")
    return got.group_by("device", "port", "ts").agg((pl.col("_us").max() / 1e6).clip(0.0, 1.0).alias("paused"))


def congested_samples(ctx: Context, evidence: pl.DataFrame, util: pl.DataFrame) -> pl.DataFrame:
    """The transmit samples of each evidenced port that some congestion evidence covers (any priority's),
    with the evidence's priority and strongest values; tolerance: half an evidence interval (other clocks)."""
    out = []
    for kind in ("watermark", "ecn", "cnp"):
        ev = evidence.filter(pl.col("kind") == kind)
        if ev.is_empty():
            continue
        ev = ev.group_by("device", "port", "ts").agg(
            pl.col("dt_s").max(), pl.col("value").max(), pl.col("priority").min()
        )
        hit = covering(util, ev.rename({"value": kind, "priority": f"{kind}_priority"}), ["device", "port"],
                       [kind, f"{kind}_priority"], late_reads=0.5)  # fmt: skip
        out.append(hit.filter(pl.col(kind).is_not_null()).select("ts", "device", "port", kind, f"{kind}_priority"))
    if not out:
        return util.clear()
    joined = util
    for part in out:
        joined = joined.join(part, on=["ts", "device", "port"], how="left")
    kinds = [c for c in ("watermark", "ecn", "cnp") if c in joined.columns]
    prio = pl.coalesce([pl.col(f"{k}_priority") for k in kinds]).alias("priority")
    return joined.filter(pl.any_horizontal(pl.col(k).is_not_null() for k in kinds)).with_columns(prio)


@dataclass(frozen=True)
class Sender:
    host: str
    netdev: str
    ref: str  # the leaf port facing the sender NIC, or the NIC itself when its leaf is unknown
    cnp_rate: float
    paused_us_per_s: float
    pause_frames_per_s: float = 0.0
    sampled_packets: int = 0


@dataclass(frozen=True)
class FanIn:
    """The receiver of one congested downlink queue and the NICs sending to it."""

    receiver: tuple[str, str]
    leaf_ref: str
    senders: tuple[Sender, ...]
    cnp_sent_rate: float
    pausing: tuple[str, ...]  # switch ports that sent PFC pauses on the priority meanwhile
    job_ids: tuple[str, ...]
    sources: tuple[str, ...]  # where the senders were found: cnp, pfc, packets

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
                    "pause_frames_per_s": s.pause_frames_per_s,
                    "sampled_packets": s.sampled_packets,
                }
                for s in self.senders
            ],
            "receiver_cnp_sent_per_s": self.cnp_sent_rate,
            "pausing_ports": list(self.pausing),
            "sender_sources": list(self.sources),
        }


def _between(frame: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Samples whose interval lies in [start, end] (a sample at ts covers the interval ending at ts)."""
    return frame.filter(pl.col("ts") > start, pl.col("ts") <= end)


def _per_nic(ctx: Context, frame: pl.DataFrame, seconds: float) -> dict[tuple[str, str], float]:
    """Sum of deltas per NIC interface over the span, per second."""
    if frame.is_empty():
        return {}
    rows = with_ifaces(frame, ctx.fabric).group_by("device", "iface").agg(pl.col("delta").sum() / seconds)
    return {(d, i): float(v) for d, i, v in rows.iter_rows()}


def _flows_to(
    ctx: Context, receiver: tuple[str, str], start: dt.datetime, end: dt.datetime
) -> dict[tuple[str, str], int]:
    """Sampled packets to the receiver NIC's address per sending NIC (empty where no packets are captured)."""
    ep = ctx.frames.endpoints()
    ips = {ip: (h, n) for h, n, ip in ep.select("host", "netdev", "ip").iter_rows() if ip}
    mine = {ip for ip, nic in ips.items() if nic == receiver}
    if not mine:
        return {}
    flows = ctx.frames.flow_samples(start, end).filter(pl.col("dst_ip").is_in(sorted(mine)))
    out: dict[tuple[str, str], int] = {}
    for src, packets in flows.group_by("src_ip").agg(pl.col("packets").sum()).iter_rows():
        nic = ips.get(src)
        if nic is not None:
            out[nic] = out.get(nic, 0) + int(packets)
    return out


def _connected_to(ctx: Context, receiver: tuple[str, str]) -> tuple[dict[tuple[str, str], int], set[tuple[str, str]]]:
    """NICs with an RDMA connection (a QP, from `qp_owners`) to the receiver NIC's address, and how many QPs; and
    every NIC whose QPs are collected at all (empty where the receiver's address is not known)."""
    ep = ctx.frames.endpoints()
    mine = {ip for h, n, ip in ep.select("host", "netdev", "ip").iter_rows() if (h, n) == receiver and ip}
    qps = ctx.frames.qp_peers()
    if not mine or qps.is_empty():
        return {}, set()
    # per NIC, not per QP row: a fabric's QP table runs to a hundred thousand rows, read at every fan-in
    per_nic = qps.group_by("host", "rdma_dev").agg(pl.col("dest_ip").is_in(sorted(mine)).sum().alias("to_receiver"))
    out: dict[tuple[str, str], int] = {}
    watched: set[tuple[str, str]] = set()
    for host, rdma, n in per_nic.iter_rows():
        nic = (host, ctx.fabric.iface(host, f"{rdma}/1"))
        watched.add(nic)
        if n:
            out[nic] = out.get(nic, 0) + int(n)
    return out, watched


def fan_in(
    ctx: Context, device: str, port: str, priority: int, start: dt.datetime, end: dt.datetime, p: FanInParams
) -> FanIn | None:
    """The receiver behind a downlink and the NICs sending to it during [start, end]."""
    frames, fabric = ctx.frames, ctx.fabric
    receiver = fabric.nic_behind(device, port)
    if receiver is None:
        return None
    sent = with_ifaces(frames.rates(["cnp_sent"], min_rate=1.0, roles=["nic"]), fabric)
    sent = sent.filter(pl.col("device") == receiver[0], pl.col("iface") == receiver[1])
    # a span shorter than one of the receiver's reads is rated over the read (its counts cover no less); a
    # receiver sending no CNPs: over a second, the finest cadence switches' pause counters are commonly read at
    every = sent["dt_s"].median()
    seconds = max((end - start).total_seconds(), float(every) if isinstance(every, int | float) else 1.0)
    sent = _between(sent, start, end)
    sent_rate = float(sent["delta"].sum()) / seconds
    # NICs handling CNPs are this receiver's senders only while it sends CNPs (lossy fan-in sends none)
    cnps = frames.rates(["cnp_handled"], min_rate=p.min_cnp_rate, roles=["nic"])
    received = frames.rates(["cnp_received"], min_rate=p.min_cnp_rate, roles=["nic"])  # bnxt_re: no handled split
    cnps = pl.concat([cnps, received.filter(~pl.col("device").is_in(sorted(frames.reporting("cnp_handled"))))])
    handled = _per_nic(ctx, _between(cnps, start, end), seconds) if sent_rate >= 1.0 else {}
    found: dict[tuple[str, str], list[float]] = {nic: [rate, 0.0, 0.0] for nic, rate in handled.items()}
    sources = {"cnp"} if handled else set()
    # pauses a leaf sent toward the NICs under it on the priority (duration, or frames where no duration)
    pausing = []
    for metric, slot in ((TX_PAUSED_US, 1), (TX_PAUSE_FRAMES, 2)):
        floor = 1.0 if metric == TX_PAUSED_US else p.min_pause_frames_per_s
        sent = _between(frames.rates([metric], min_rate=floor, roles=["switch"]), start, end)
        sent = sent.filter(pl.col("priority") == priority)
        by_port = sent.group_by("device", "port").agg((pl.col("delta").sum() / seconds).alias("per_s"))
        for d, sw_port, per_s in by_port.sort("per_s", descending=True).iter_rows():
            pausing.append(f"{d}:{sw_port}")
            nic = fabric.nic_behind(d, sw_port)
            if nic is not None:
                found.setdefault(nic, [0.0, 0.0, 0.0])[slot] = float(per_s)
                sources.add("pfc")
    packets = _flows_to(ctx, receiver, start, end)
    if packets:
        sources.add("packets")
    qps, watched = _connected_to(ctx, receiver)
    if qps:
        sources.add("qp_owners")
    host_jobs = fabric.jobs_on_nic(*receiver, start, end)
    senders = []
    for nic in sorted(set(found) | set(packets)):
        host, netdev = nic
        if host == receiver[0]:
            continue
        seen = packets.get(nic, 0)
        theirs = fabric.jobs_on_nic(host, netdev, start, end)
        if not seen and not qps.get(nic) and host_jobs and theirs and not host_jobs & theirs:
            continue  # in other jobs only, no flow or QP joins it to the receiver: congested for another reason
        if not seen and not qps.get(nic) and nic in watched:
            continue  # its QPs are collected and none reaches the receiver: it sends RoCE elsewhere
        rate, us, frames_per_s = found.get(nic, [0.0, 0.0, 0.0])
        leaf_port = fabric.peer(host, netdev)
        ref = f"{leaf_port[0]}:{leaf_port[1]}" if leaf_port else f"{host}:{netdev}"
        senders.append(Sender(host, netdev, ref, rate, us, frames_per_s, seen))
    leaf_ref = f"{device}:{port}"
    refs = [leaf_ref, f"{receiver[0]}:{receiver[1]}", *(s.ref for s in senders)]
    return FanIn(
        receiver=receiver,
        leaf_ref=leaf_ref,
        senders=tuple(senders),
        cnp_sent_rate=sent_rate,
        pausing=tuple(dict.fromkeys(pausing)),
        job_ids=tuple(fabric.jobs_at_refs(refs, start, end)),
        sources=tuple(sorted(sources)),
    )
