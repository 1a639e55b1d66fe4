"""eBPF host collector (bcc): host drops, TCP retransmits, RoCEv2 packets per QP, and QP ownership.

Three BPF programs (C sources in `ebpf/programs/`, compiled by bcc when the collector starts; what
they need from the host is in `loader.py`):

* `host_events.c`, tracepoints: `skb:kfree_skb` counted by drop reason and `tcp:tcp_retransmit_skb`
  by peer address. Tracepoint arguments are a stable ABI, so these need no matching kernel headers
  beyond what bcc itself includes. Reason names come from the tracepoint's own format file, so they
  are the running kernel's.
* `roce_xdp.c`, XDP on each `interfaces` entry: RoCEv2 packets (UDP 4791) counted by (dest QP, ECN,
  BTH opcode). It sees only what reaches the kernel's receive path (Soft-RoCE, mirrored or punted
  traffic); a hardware RoCE NIC delivers its own RDMA traffic without the kernel seeing it.
* `qp_owner.c`, kprobes on the ib_core functions every uverbs QP command ends in: pid, comm, cgroup
  id, QPN, dest QPN, dest GID and flow label (hence the UDP source port). Where kprobes are not
  available (kernel without CONFIG_KPROBES, ib_core not loaded) the collector says so once and polls
  `rdma -j resource show qp` instead (`rdma_qp.py`, the `QpSource` seam).

Rows. `counters` (device = host name, role = host, source = ebpf, priority -1), cumulative since the
collector started:
  `host_drops`          port `reason:<DROP_REASON>`            raw_name `skb:kfree_skb`
  `tcp_retransmits`     port `peer:<address>`                  raw_name `tcp:tcp_retransmit_skb`
  `roce_rx_qp_packets`  port `<netdev>/qp<N>/ecn<E>/op<O>`     raw_name `xdp:roce_counts`
and `qp_owners`, one row when a QP is first seen or its owner/peer changes (and again every
`reannounce_s`), with the pid mapped to cgroup (pod) and job by `ProcOwnerResolver` (`owners.py`).

Targets (`health()`, and the standard `rocescope_ebpf_*` self-metrics): `maps`, the reads of the BPF
maps, and `qp`, the QP owners (the kprobe events or the QP table); a failing QP table is counted
and logged once per new error.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.polling import run_ticks
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.ebpf.loader import (
    EbpfUnavailable,
    drop_reason_names,
    kernel_source,
    kprobes_unavailable,
    load_bcc,
    program_text,
    tracefs_root,
    tracepoint_fields,
)
from rocescope.collectors.ebpf.owners import ProcOwnerResolver
from rocescope.collectors.ebpf.rdma_qp import (
    QpParse,
    QpRecord,
    QpSource,
    QpSourceError,
    RdmaCommandQpSource,
    gid_text,
    gid_to_ip,
    roce_udp_sport,
)
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch, make_batch
from rocescope.pipeline.transport import Producer

__all__ = ["QP_KPROBES", "EbpfCollector", "EbpfMetrics"]

log = logging.getLogger(__name__)

#: (probe kind, kernel function, BPF function) of the QP ownership program.
QP_KPROBES: tuple[tuple[str, str, str], ...] = (
    ("kretprobe", "ib_create_qp_user", "qp_create_ret"),
    ("kprobe", "ib_modify_qp_with_udata", "qp_modify"),
    ("kprobe", "ib_destroy_qp_user", "qp_destroy"),
)
XDP_FLAGS_UPDATE_IF_NOEXIST = 1  # never replace another tool's XDP program
_NOT_DROPS = frozenset({"NOT_DROPPED_YET", "CONSUMED"})
_QP_CREATE, _QP_MODIFY, _QP_DESTROY = 1, 2, 3
_ROLE, _SOURCE = "host", "ebpf"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class EbpfMetrics(CollectorMetrics):
    """`rocescope_ebpf_*`: the standard per-target metrics (targets `maps` and `qp`), plus the programs
    attached and the QP events."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__("ebpf", registry)
        r = self.registry
        self.attached = Gauge(
            "rocescope_ebpf_programs_attached", "Attach points in use, by program.", ["program"], registry=r
        )
        self.qp_mode = Gauge(
            "rocescope_ebpf_qp_source", "1 for the QP ownership source in use.", ["source"], registry=r
        )
        self.qp_events = Counter("rocescope_ebpf_qp_events", "QP events from the kprobes.", ["kind"], registry=r)
        self.qp_lost = Counter("rocescope_ebpf_qp_events_lost", "QP events the perf buffer lost.", registry=r)
        self.qp_skipped = Counter(
            "rocescope_ebpf_qp_records_skipped",
            "QP records skipped as kernel QPs (malformed ones: rocescope_ebpf_malformed).",
            ["why"],
            registry=r,
        )


def _ns(ts: dt.datetime | None) -> int:
    if ts is None:
        return time.time_ns()
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return (ts - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def _percpu_sum(value: Any) -> int:
    """A per-CPU map value (a sequence of per-CPU counts) or a plain one, as one number."""
    try:
        return sum(int(v) for v in value)
    except TypeError:
        return int(value.value)


class EbpfCollector:
    """Attaches the programs (`start`), reads their maps and the QP table into Batches (`poll`), ships
    them on a cadence (`run`), and detaches (`close`)."""

    def __init__(
        self,
        hostname: str,
        producer: Producer | None = None,
        interfaces: Iterable[str] = (),
        qp_source: QpSource | None = None,
        resolver: ProcOwnerResolver | None = None,
        metrics: EbpfMetrics | None = None,
        host_events: bool = True,
        qp_ownership: bool = True,
        reannounce_s: float = 600.0,
    ):
        self.hostname = hostname
        self.producer = producer
        self.interfaces = list(interfaces)
        self.qp_source = qp_source
        self.resolver = resolver or ProcOwnerResolver()
        self.metrics = metrics or EbpfMetrics()
        self.targets = Targets(self.metrics, log, f"ebpf {hostname}")
        self.targets.add("maps")
        self.host_events = host_events
        self.qp_ownership = qp_ownership
        self.reannounce_s = reannounce_s
        self.qp_mode = "off"  # kprobe | <QpSource.name> | off
        self._host: Any = None
        self._xdp: Any = None
        self._qp_bpf: Any = None
        self._xdp_ifaces: dict[int, str] = {}
        self._reasons: dict[int, str] = {}
        self._qps: dict[tuple[str, int], QpRecord] = {}  # live QPs from the kprobes
        self._shipped: dict[tuple[str, int], tuple[tuple[Any, ...], float]] = {}

    def health(self) -> dict[str, Health]:
        """Per target (`maps`, `qp`): what the collector knows of its reads."""
        return dict(self.targets.health)

    # --- attach
    def start(self) -> EbpfCollector:
        """Compile and attach what was asked for; raises EbpfUnavailable when a required part cannot be."""
        try:
            if self.host_events:
                self._start_host_events()
            if self.interfaces:
                self._start_xdp()
            if self.qp_ownership:
                self._start_qp()
        except BaseException:
            self.close()
            raise
        return self

    def _compile(self, name: str, cflags: Sequence[str] = ()) -> Any:
        bcc = load_bcc()
        kernel_source()
        try:
            return bcc.BPF(text=program_text(name).encode(), cflags=list(cflags))
        except Exception as exc:  # bcc raises bare Exception on compile/load failures
            raise EbpfUnavailable(f"BPF program {name} did not compile or load: {exc}") from exc

    def _start_host_events(self) -> None:
        tracefs_root()
        cflags = []
        if "reason" in tracepoint_fields("skb", "kfree_skb"):
            cflags.append("-DHAVE_DROP_REASON")
            self._reasons = drop_reason_names()
        if "err" in tracepoint_fields("tcp", "tcp_retransmit_skb"):
            cflags.append("-DHAVE_RETRANSMIT_ERR")
        self._host = self._compile("host_events.c", cflags)  # TRACEPOINT_PROBEs attach on load
        self.metrics.attached.labels("host_events").set(2)

    def _start_xdp(self) -> None:
        bcc = load_bcc()
        self._xdp = self._compile("roce_xdp.c")
        fn = self._xdp.load_func(b"roce_xdp", bcc.BPF.XDP)
        for ifname in self.interfaces:
            try:
                ifindex = socket.if_nametoindex(ifname)
                self._xdp.attach_xdp(ifname.encode(), fn, XDP_FLAGS_UPDATE_IF_NOEXIST)
            except Exception as exc:  # OSError for an unknown name; bcc raises bare Exception
                raise EbpfUnavailable(
                    f"cannot attach XDP to {ifname}: {exc} (does it exist, or already run an XDP program?)"
                ) from exc
            self._xdp_ifaces[ifindex] = ifname
        self.metrics.attached.labels("roce_xdp").set(len(self._xdp_ifaces))

    def _start_qp(self) -> None:
        self.targets.add("qp")
        if self.qp_source is None:
            why = kprobes_unavailable()
            if why is None:
                why = self._attach_qp_kprobes()
            if why is None:
                self.qp_mode = "kprobe"
                self.metrics.qp_mode.labels("kprobe").set(1)
                return
            self.qp_source = RdmaCommandQpSource()
            log.warning(
                "ebpf %s: QP ownership: %s; falling back to polling `rdma resource show qp -j`", self.hostname, why
            )
        self.qp_mode = self.qp_source.name
        self.metrics.qp_mode.labels(self.qp_source.name).set(1)

    def _attach_qp_kprobes(self) -> str | None:
        """Attach the QP ownership kprobes; why not, if they cannot be."""
        try:
            self._qp_bpf = self._compile("qp_owner.c")
        except EbpfUnavailable as exc:  # e.g. headers without include/rdma: the fallback still works
            return str(exc)
        try:
            for kind, function, fn_name in QP_KPROBES:
                attach = self._qp_bpf.attach_kretprobe if kind == "kretprobe" else self._qp_bpf.attach_kprobe
                attach(event=function.encode(), fn_name=fn_name.encode())
            self._qp_bpf[b"qp_events"].open_perf_buffer(self._on_qp_event, lost_cb=self._on_qp_lost)
        except Exception as exc:  # bcc raises bare Exception when a probe cannot attach
            self._qp_bpf.cleanup()
            self._qp_bpf = None
            return f"kprobes on ib_core did not attach ({exc})"
        self.metrics.attached.labels("qp_owner").set(len(QP_KPROBES))
        return None

    # --- QP events (kprobe mode)
    def _on_qp_event(self, _cpu: int, data: Any, _size: int) -> None:
        ev = self._qp_bpf[b"qp_events"].event(data)
        self.apply_qp_event(
            int(ev.kind),
            bytes(ev.dev).split(b"\0", 1)[0].decode(errors="replace"),
            int(ev.qpn),
            pid=int(ev.pid),
            comm=bytes(ev.comm).split(b"\0", 1)[0].decode(errors="replace"),
            cgroup_id=int(ev.cgroup_id),
            dest_qpn=int(ev.dest_qpn) if ev.has_dest_qpn else None,
            dgid=bytes(ev.dgid) if ev.has_av else None,
            flow_label=int(ev.flow_label),
        )

    def _on_qp_lost(self, lost: int) -> None:
        self.metrics.qp_lost.inc(lost)

    def apply_qp_event(
        self,
        kind: int,
        rdma_dev: str,
        qpn: int,
        pid: int = 0,
        comm: str = "",
        cgroup_id: int = 0,
        dest_qpn: int | None = None,
        dgid: bytes | None = None,
        flow_label: int = 0,
    ) -> None:
        """Fold one create/modify/destroy event into the live QP table (the kprobe program's events)."""
        key = (rdma_dev, qpn)
        self.metrics.qp_events.labels({_QP_CREATE: "create", _QP_MODIFY: "modify"}.get(kind, "destroy")).inc()
        if kind == _QP_DESTROY:
            self._qps.pop(key, None)
            self._shipped.pop(key, None)
            return
        rec = self._qps.get(key) or QpRecord(rdma_dev, qpn, pid=pid, comm=comm, cgroup_id=cgroup_id)
        if dest_qpn is not None:
            rec = replace(rec, dest_qpn=dest_qpn)
        if dgid is not None:
            sport = roce_udp_sport(qpn, rec.dest_qpn, flow_label)
            rec = replace(rec, dest_gid=gid_text(dgid), dest_ip=gid_to_ip(dgid), udp_sport=sport)
        self._qps[key] = rec

    def _current_qps(self) -> QpParse:
        """The live QPs: from the kprobe events, or a snapshot of the QP source (which may raise)."""
        if self.qp_mode == "kprobe":
            if self._qp_bpf is not None:
                self._qp_bpf.perf_buffer_poll(timeout=0)  # runs _on_qp_event for each pending event
            return QpParse(list(self._qps.values()))
        if self.qp_source is None:
            return QpParse()
        return self.qp_source.snapshot()

    def _poll_owners(self, ts: int) -> Batch | None:
        """The `qp_owners` rows to ship (None: nothing new), with the `qp` target's health."""
        t0 = time.perf_counter()
        try:
            parsed = self._current_qps()
        except (QpSourceError, DecodeError) as exc:
            self._shipped.clear()  # announce every owner again once the table reads
            source = self.qp_source.name if self.qp_source is not None else self.qp_mode
            self.targets.failed("qp", f"reading QP owners from {source} failed: {exc}", time.perf_counter() - t0)
            return None
        owners = self._owner_rows(parsed.records, ts)
        problem = ""
        if parsed.skipped:
            problem = f"skipped {parsed.skipped} malformed QP record(s), e.g. {'; '.join(parsed.examples)}"
        shipped = owners.num_rows if owners is not None else 0
        self.targets.succeeded("qp", time.perf_counter() - t0, shipped, malformed=parsed.skipped, problem=problem)
        return owners

    def _owner_rows(self, records: Iterable[QpRecord], ts: int) -> Batch | None:
        now = time.monotonic()
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                *("host", "rdma_dev", "qpn", "dest_qpn", "dest_ip", "pid", "comm", "cgroup", "job_id"),
                *("dest_gid", "udp_sport"),
            )
        }
        seen: set[tuple[str, int]] = set()
        for rec in records:
            if rec.pid == 0:  # a kernel QP (GSI, IPoIB, NVMe-oF...): no job owns it
                self.metrics.qp_skipped.labels("kernel").inc()
                continue
            key = (rec.rdma_dev, rec.qpn)
            seen.add(key)
            owner = self.resolver.resolve(rec.pid, rec.comm, rec.cgroup_id)
            row = (
                rec.dest_qpn,
                rec.dest_ip,
                rec.pid,
                owner.comm,
                owner.cgroup,
                owner.job_id,
                rec.dest_gid,
                rec.udp_sport,
            )
            last = self._shipped.get(key)
            if last is not None and last[0] == row and now - last[1] < self.reannounce_s:
                continue
            self._shipped[key] = (row, now)
            for name, value in zip(cols, (self.hostname, rec.rdma_dev, rec.qpn, *row), strict=True):
                cols[name].append(value)
        for gone in set(self._shipped) - seen:
            del self._shipped[gone]
        if not cols["qpn"]:
            return None
        columns: dict[str, Sequence[Any]] = {**cols, "seen_at": [ts] * len(cols["qpn"])}
        return make_batch("qp_owners", columns, key=self.hostname)

    # --- counters
    def _counter_rows(self, ts: int) -> CounterRows:
        out = CounterRows()
        if self._host is not None:
            for key, value in self._host[b"drops"].items():
                n = _percpu_sum(value)
                reason = self._reasons.get(int(key.value), str(int(key.value)))
                if n and reason not in _NOT_DROPS:
                    out.add(ts, f"reason:{reason}", "host_drops", float(n), "skb:kfree_skb")
            for key, value in self._host[b"retransmits"].items():
                raw = bytes(key.addr)
                addr = ipaddress.ip_address(raw[:4] if key.family == socket.AF_INET else raw)
                out.add(ts, f"peer:{addr}", "tcp_retransmits", float(value.value), "tcp:tcp_retransmit_skb")
        if self._xdp is not None:
            for key, value in self._xdp[b"roce_counts"].items():
                ifname = self._xdp_ifaces.get(int(key.ifindex), f"if{key.ifindex}")
                port = f"{ifname}/qp{key.qpn}/ecn{key.ecn}/op{key.opcode}"
                out.add(ts, port, "roce_rx_qp_packets", float(_percpu_sum(value)), "xdp:roce_counts")
        return out

    # --- polling
    def poll(self, ts: dt.datetime | None = None) -> list[Batch]:
        """One `counters` Batch (may be empty) and, when owners are new or changed, one `qp_owners` Batch."""
        wall0 = time.perf_counter()
        ts_ns = _ns(ts)
        rows = self._counter_rows(ts_ns)
        batches = [rows.to_batch(self.hostname, _ROLE, _SOURCE)]
        self.targets.succeeded("maps", time.perf_counter() - wall0, len(rows))
        if self.qp_mode != "off":
            owners = self._poll_owners(ts_ns)
            if owners is not None:
                batches.append(owners)
        self.metrics.poll_seconds.observe(time.perf_counter() - wall0)
        return batches

    def run(self, interval_s: float, stop_event: threading.Event) -> int:
        """Poll every `interval_s` (the first after one interval, so the maps have counted) until
        `stop_event` is set, publishing each non-empty Batch; returns the poll count."""
        return run_ticks(
            self.poll, self.producer, interval_s, stop_event, self.metrics, log, self.hostname, first_tick_now=False
        )

    # --- detach
    def close(self) -> None:
        """Detach XDP (in the caller's network namespace, where it was attached) and free the programs."""
        if self._xdp is not None:
            for ifname in self._xdp_ifaces.values():
                try:
                    self._xdp.remove_xdp(ifname.encode(), XDP_FLAGS_UPDATE_IF_NOEXIST)
                except Exception as exc:  # the interface may be gone already
                    log.info("ebpf %s: detaching XDP from %s: %s", self.hostname, ifname, exc)
            self._xdp_ifaces.clear()
        for attr in ("_xdp", "_host", "_qp_bpf"):
            prog = getattr(self, attr)
            if prog is not None:
                prog.cleanup()
                setattr(self, attr, None)
        for program in ("host_events", "roce_xdp", "qp_owner"):
            self.metrics.attached.labels(program).set(0)

    def __enter__(self) -> EbpfCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
