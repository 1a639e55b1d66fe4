"""eBPF host collector (bcc): host drops, TCP retransmits, RoCEv2 packets per QP, and QP ownership.

Three BPF programs (C sources in `ebpf/programs/`, compiled by bcc when the collector starts):

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
  `rdma -j resource show qp` instead (`rocescope.collectors.ebpf.rdma_qp`, the `QpSource` seam).

Rows. `counters` (device = host name, role = host, source = ebpf, priority -1), cumulative since the
collector started:
  `host_drops`          port `reason:<DROP_REASON>`            raw_name `skb:kfree_skb`
  `tcp_retransmits`     port `peer:<address>`                  raw_name `tcp:tcp_retransmit_skb`
  `roce_rx_qp_packets`  port `<netdev>/qp<N>/ecn<E>/op<O>`     raw_name `xdp:roce_counts`
and `qp_owners`, one row when a QP is first seen or its owner/peer changes (and again every
`reannounce_s`), with the pid mapped to cgroup (pod) and job by `ProcOwnerResolver`.

bcc is imported lazily (`load_bcc`): the rest of rocescope works without it. It comes from Debian's
python3-bpfcc; scripts/bootstrap links it into the venv. Kernel headers: BCC_KERNEL_SOURCE if set,
else the running kernel's /lib/modules build tree, else the merged tree scripts/system-deps writes.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import importlib.resources
import ipaddress
import logging
import os
import platform
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rocescope.collectors.ebpf.rdma_qp import (
    QpRecord,
    QpSource,
    QpSourceError,
    RdmaCommandQpSource,
    gid_text,
    gid_to_ip,
    roce_udp_sport,
)
from rocescope.errors import DecodeError, RocescopeError
from rocescope.pipeline.batch import Batch, make_batch
from rocescope.pipeline.metrics import SelfMetrics
from rocescope.pipeline.transport import Producer

__all__ = [
    "DEFAULT_KERNEL_HEADERS",
    "QP_KPROBES",
    "EbpfCollector",
    "EbpfMetrics",
    "EbpfUnavailable",
    "Owner",
    "ProcOwnerResolver",
    "drop_reason_names",
    "kernel_source",
    "kprobes_unavailable",
    "load_bcc",
    "pod_uid",
    "program_text",
    "tracefs_root",
    "tracepoint_fields",
]

log = logging.getLogger(__name__)

#: Where scripts/system-deps merges Debian's split kernel headers (common + arch) into one tree.
DEFAULT_KERNEL_HEADERS = "/usr/src/linux-headers-merged"
TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
#: (probe kind, kernel function, BPF function) of the QP ownership program.
QP_KPROBES: tuple[tuple[str, str, str], ...] = (
    ("kretprobe", "ib_create_qp_user", "qp_create_ret"),
    ("kprobe", "ib_modify_qp_with_udata", "qp_modify"),
    ("kprobe", "ib_destroy_qp_user", "qp_destroy"),
)
#: Environment variables naming the job a process belongs to, first hit wins.
JOB_ENV: tuple[str, ...] = ("ROCESCOPE_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
XDP_FLAGS_UPDATE_IF_NOEXIST = 1  # never replace another tool's XDP program
_NOT_DROPS = frozenset({"NOT_DROPPED_YET", "CONSUMED"})
_QP_CREATE, _QP_MODIFY, _QP_DESTROY = 1, 2, 3
_ROLE, _SOURCE = "host", "ebpf"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


class EbpfUnavailable(RocescopeError):
    """bcc, kernel headers, tracefs or a BPF feature this collector needs is missing."""


# --------------------------------------------------------------------------------------------------
# environment: bcc, headers, tracefs


def load_bcc() -> Any:
    """The `bcc` module, imported only when eBPF is actually used."""
    try:
        import bcc
    except ImportError as exc:
        raise EbpfUnavailable(
            f"bcc is not importable ({exc}): install Debian's python3-bpfcc (scripts/system-deps) and run "
            "scripts/bootstrap, which links it into the venv"
        ) from exc
    return bcc


def program_text(name: str) -> str:
    """C source of one of the programs shipped in `ebpf/programs/`."""
    return (importlib.resources.files("rocescope.collectors.ebpf.programs") / name).read_text()


def kernel_source() -> str | None:
    """The headers bcc will compile against; sets BCC_KERNEL_SOURCE to the merged tree when bcc would
    otherwise find none (Debian splits headers in two directories, which bcc cannot combine alone)."""
    given = os.environ.get("BCC_KERNEL_SOURCE")
    if given:
        return given
    build = Path("/lib/modules") / platform.release() / "build"
    if build.exists():
        return None
    if Path(DEFAULT_KERNEL_HEADERS, "include").is_dir():
        os.environ["BCC_KERNEL_SOURCE"] = DEFAULT_KERNEL_HEADERS
        return DEFAULT_KERNEL_HEADERS
    raise EbpfUnavailable(
        f"no kernel headers: neither {build} nor {DEFAULT_KERNEL_HEADERS} exists and BCC_KERNEL_SOURCE is unset "
        "(scripts/system-deps installs linux-headers and merges them there)"
    )


def tracefs_root(mount: bool = True) -> str:
    """Where tracefs is mounted; mounts it at /sys/kernel/tracing (as systemd would) when it is not."""
    for root in TRACEFS_CANDIDATES:
        if Path(root, "events").is_dir():
            return root
    target = TRACEFS_CANDIDATES[0]
    if mount and Path(target).is_dir():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(b"tracefs", target.encode(), b"tracefs", 0, None) == 0:
            log.info("mounted tracefs at %s", target)
            return target
        err = ctypes.get_errno()
        raise EbpfUnavailable(f"tracefs is not mounted and mounting it at {target} failed: {os.strerror(err)}")
    raise EbpfUnavailable(f"tracefs is not mounted (looked at {', '.join(TRACEFS_CANDIDATES)})")


def _format_file(category: str, event: str) -> str:
    path = Path(tracefs_root(), "events", category, event, "format")
    try:
        return path.read_text()
    except OSError as exc:
        raise EbpfUnavailable(f"this kernel has no tracepoint {category}:{event} ({exc})") from exc


def tracepoint_fields(category: str, event: str) -> set[str]:
    """Field names of a tracepoint, from its format file (fields differ between kernel versions)."""
    return set(re.findall(r"field:[^;]*?(\w+)(?:\[\d*\])?;", _format_file(category, event)))


def drop_reason_names() -> dict[int, str]:
    """skb_drop_reason values -> names as this kernel prints them (`__print_symbolic` of kfree_skb)."""
    text = _format_file("skb", "kfree_skb")
    return {int(n): name for n, name in re.findall(r'\{\s*(\d+),\s*"(\w+)"\s*\}', text)}


def kprobes_unavailable() -> str | None:
    """Why kprobes cannot be attached here, or None when they can."""
    if Path("/sys/bus/event_source/devices/kprobe").exists():
        return None
    for root in TRACEFS_CANDIDATES:
        if Path(root, "kprobe_events").exists():
            return None
    return "the kernel has no kprobes (no kprobe PMU and no kprobe_events; CONFIG_KPROBES is off)"


# --------------------------------------------------------------------------------------------------
# owners: pid -> cgroup, pod, job


@dataclass(frozen=True)
class Owner:
    """What a pid maps to. `cgroup` is `pod:<uid>` inside a Kubernetes pod, else the cgroup path."""

    comm: str = ""
    cgroup: str = ""
    pod: str = ""
    job_id: str = ""


def pod_uid(cgroup_path: str) -> str:
    """The pod UID in a kubelet cgroup path (cgroupfs `/kubepods/burstable/pod<uid>/...` or systemd
    `kubepods-burstable-pod<uid with _>.slice`), or ""."""
    m = _POD_RE.search(cgroup_path)
    return m.group(1).replace("_", "-") if m else ""


def _cgroup_path(text: str) -> str:
    """The most telling line of /proc/<pid>/cgroup: a kubepods one, else cgroup v2 (`0::`), else the first."""
    paths = [(line.split(":", 2)[0], line.split(":", 2)[2]) for line in text.splitlines() if line.count(":") >= 2]
    for _, path in paths:
        if "kubepods" in path:
            return path
    for hier, path in paths:
        if hier == "0":
            return path
    return paths[0][1] if paths else ""


class ProcOwnerResolver:
    """Maps a pid to comm, cgroup/pod and job from /proc: the job from `pod_jobs` (pod UID -> job id,
    from the jobs collector) or else from the process environment (`JOB_ENV`). Cached briefly, since
    the same owner holds many QPs."""

    def __init__(
        self,
        proc_root: str | Path = "/proc",
        pod_jobs: Mapping[str, str] | None = None,
        job_env: Sequence[str] = JOB_ENV,
        ttl_s: float = 30.0,
    ):
        self.proc_root = Path(proc_root)
        self.pod_jobs = dict(pod_jobs or {})
        self.job_env = tuple(job_env)
        self.ttl_s = ttl_s
        self._cache: dict[int, tuple[float, Owner]] = {}

    def resolve(self, pid: int, comm: str = "", cgroup_id: int = 0) -> Owner:
        now = time.monotonic()
        hit = self._cache.get(pid)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        owner = self._read(pid, comm, cgroup_id)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[pid] = (now, owner)
        return owner

    def _read(self, pid: int, comm: str, cgroup_id: int) -> Owner:
        base = self.proc_root / str(pid)
        try:
            comm = comm or (base / "comm").read_text().strip()
            path = _cgroup_path((base / "cgroup").read_text())
        except OSError:  # gone already: keep what the event carried
            return Owner(comm=comm, cgroup=f"cgroup-id:{cgroup_id}" if cgroup_id else "")
        pod = pod_uid(path)
        job = self.pod_jobs.get(pod, "") if pod else ""
        if not job:
            job = self._job_from_env(base / "environ")
        return Owner(comm=comm, cgroup=f"pod:{pod}" if pod else path, pod=pod, job_id=job)

    def _job_from_env(self, path: Path) -> str:
        try:
            raw = path.read_bytes()
        except OSError:
            return ""
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        for name in self.job_env:
            value = env.get(name.encode())
            if value:
                return value.decode(errors="replace")
        return ""


# --------------------------------------------------------------------------------------------------
# self-metrics


class EbpfMetrics(SelfMetrics):
    """Self-metrics of one eBPF collector, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r = self.registry
        self.polls = Counter("rocescope_ebpf_polls", "Polls of the BPF maps and QP table.", registry=r)
        self.poll_seconds = Histogram(
            "rocescope_ebpf_poll_seconds",
            "Wall time of one poll.",
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        )
        self.rows = Counter("rocescope_ebpf_rows", "Rows shipped.", ["stream"], registry=r)
        self.attached = Gauge(
            "rocescope_ebpf_programs_attached", "Attach points in use, by program.", ["program"], registry=r
        )
        self.qp_mode = Gauge(
            "rocescope_ebpf_qp_source", "1 for the QP ownership source in use.", ["source"], registry=r
        )
        self.qp_events = Counter("rocescope_ebpf_qp_events", "QP events from the kprobes.", ["kind"], registry=r)
        self.qp_lost = Counter("rocescope_ebpf_qp_events_lost", "QP events the perf buffer lost.", registry=r)
        self.qp_source_errors = Counter("rocescope_ebpf_qp_source_errors", "Failed reads of the QP table.", registry=r)
        self.qp_skipped = Counter(
            "rocescope_ebpf_qp_records_skipped", "QP records skipped (malformed, or kernel QPs).", ["why"], registry=r
        )
        self.publish_errors = Counter("rocescope_ebpf_publish_errors", "Batches the producer refused.", registry=r)
        self.overruns = Counter("rocescope_ebpf_overruns", "Poll ticks skipped because a poll ran late.", registry=r)
        t = ["target"]  # what a poll reads: `maps` (drops, retransmits, XDP counts) and `qp` (the QP owners)
        self.target_up = Gauge("rocescope_ebpf_target_up", "1 when the last read of the target worked.", t, registry=r)
        self.target_seconds = Gauge(
            "rocescope_ebpf_target_read_seconds", "Wall time of the last read of the target.", t, registry=r
        )
        self.errors = Counter("rocescope_ebpf_errors", "Failed reads of a target.", t, registry=r)


# --------------------------------------------------------------------------------------------------
# the collector


@dataclass
class _Counters:
    ts: list[int] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    raw_names: list[str] = field(default_factory=list)

    def add(self, ts: int, port: str, metric: str, value: float, raw_name: str) -> None:
        self.ts.append(ts)
        self.ports.append(port)
        self.metrics.append(metric)
        self.values.append(value)
        self.raw_names.append(raw_name)

    def batch(self, device: str) -> Batch:
        n = len(self.ts)
        columns: dict[str, Sequence[Any]] = {
            "ts": self.ts,
            "device": [device] * n,
            "role": [_ROLE] * n,
            "port": self.ports,
            "priority": [-1] * n,
            "metric": self.metrics,
            "value": self.values,
            "source": [_SOURCE] * n,
            "raw_name": self.raw_names,
        }
        return make_batch("counters", columns, key=device)


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
        self._problems: dict[str, str] = {}

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

    def _current_qps(self) -> list[QpRecord]:
        if self.qp_mode == "kprobe":
            if self._qp_bpf is not None:
                self._qp_bpf.perf_buffer_poll(timeout=0)  # runs _on_qp_event for each pending event
            return list(self._qps.values())
        if self.qp_source is None:
            return []
        try:
            parsed = self.qp_source.snapshot()
        except (QpSourceError, DecodeError) as exc:
            self.metrics.qp_source_errors.inc()
            self._problem("qp", f"reading QP owners from {self.qp_source.name} failed: {exc}")
            return []
        if parsed.skipped:
            self.metrics.qp_skipped.labels("malformed").inc(parsed.skipped)
            self._problem(
                "qp-records", f"skipped {parsed.skipped} malformed QP record(s), e.g. {'; '.join(parsed.examples)}"
            )
        else:
            self._ok("qp-records")
        self._ok("qp")
        return parsed.records

    def _owner_rows(self, ts: int) -> Batch | None:
        now = time.monotonic()
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                *("host", "rdma_dev", "qpn", "dest_qpn", "dest_ip", "pid", "comm", "cgroup", "job_id"),
                *("dest_gid", "udp_sport"),
            )
        }
        seen: set[tuple[str, int]] = set()
        for rec in self._current_qps():
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
    def _counter_rows(self, ts: int) -> _Counters:
        out = _Counters()
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
        batches = [self._counter_rows(ts_ns).batch(self.hostname)]
        self._read("maps", wall0, True)
        if self.qp_mode != "off":
            t0 = time.perf_counter()
            owners = self._owner_rows(ts_ns)
            self._read("qp", t0, "qp" not in self._problems)
            if owners is not None:
                batches.append(owners)
        m = self.metrics
        for b in batches:
            m.rows.labels(b.stream).inc(b.num_rows)
        m.polls.inc()
        m.poll_seconds.observe(time.perf_counter() - wall0)
        return batches

    def run(self, interval_s: float, stop_event: threading.Event) -> int:
        """Poll every `interval_s` until `stop_event` is set, publishing each Batch; returns the poll count."""
        polls = 0
        next_tick = time.monotonic() + interval_s
        while not stop_event.wait(max(0.0, next_tick - time.monotonic())):
            self._publish(self.poll())
            polls += 1
            next_tick += interval_s
            now = time.monotonic()
            if now > next_tick:
                missed = int((now - next_tick) // interval_s) + 1
                self.metrics.overruns.inc(missed)
                next_tick += missed * interval_s
        return polls

    def _publish(self, batches: Iterable[Batch]) -> None:
        if self.producer is None:
            return
        for batch in batches:
            if not batch.num_rows:
                continue
            try:
                self.producer.publish(batch)
            except Exception as exc:  # any transport failure: count it, keep polling
                self.metrics.publish_errors.inc()
                log.warning(
                    "ebpf %s: publishing %d %s rows failed: %s", self.hostname, batch.num_rows, batch.stream, exc
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

    def _read(self, target: str, t0: float, ok: bool) -> None:
        """Per-target self-metrics of one read: duration, up, and a failure counted."""
        m = self.metrics
        m.target_seconds.labels(target).set(time.perf_counter() - t0)
        m.target_up.labels(target).set(1 if ok else 0)
        if not ok:
            m.errors.labels(target).inc()

    def _problem(self, what: str, message: str) -> None:
        if self._problems.get(what) != message:
            self._problems[what] = message
            log.warning("ebpf %s: %s", self.hostname, message)

    def _ok(self, what: str) -> None:
        if self._problems.pop(what, None) is not None:
            log.info("ebpf %s: %s works again", self.hostname, what)
