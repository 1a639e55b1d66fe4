"""NCCL Inspector's JSON-mode output, written as the plugin writes it: for the simulated fabric, tests, benches.

The layout is NVIDIA/nccl `plugins/profiler/inspector` (2.30): `inspector_json.cc` for the record and its key
order, `json.cc` for the text (compact, doubles "%lf", NaN as the string "nan"), `inspectorComputeOpBw` in
`inspector.cc` for the bandwidths, and `<hostname>-pid<pid>.log` for the file name. Whatever writes with
this module is read back by `parse.py` exactly as real Inspector output would be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["P2P_OPS", "InspectorRecord", "bandwidths", "file_name", "json_line"]

#: Operations Inspector reports under `p2p_perf` (with a peer) rather than `coll_perf`
P2P_OPS = frozenset({"Send", "Recv"})


@dataclass(frozen=True)
class InspectorRecord:
    """One completed operation of one rank, as Inspector dumps it."""

    host: str
    pid: int
    communicator: str  # `0x%lx` of the communicator hash
    rank: int
    ranks: int
    nodes: int
    op: str  # AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Send, Recv, ...
    sequence: int
    bytes: int
    exec_time_us: int
    dumped_at_us: int
    comm_name: str = "unknown"  # what Inspector prints for a communicator the application did not name
    peer: int = -1  # the peer rank of a Send/Recv
    timing_source: str = "kernel_gpu"
    #: verbose mode (NCCL_INSPECTOR_DUMP_VERBOSE=1): (issued, API returned, [(kernel start, kernel stop)]) in us
    trace: tuple[int, int, tuple[tuple[int, int], ...]] | None = None


def bandwidths(op: str, size: int, ranks: int, exec_time_us: float) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in GB/s as `inspectorComputeOpBw` computes them."""
    seconds = exec_time_us / 1e6
    if op in P2P_OPS or op in ("Reduce", "Broadcast", "SendRecv"):
        traffic, factor = float(size), 1.0
    elif op == "AllReduce":
        traffic, factor = float(size), 2 * (ranks - 1) / ranks
    elif op == "AlltoAll":  # each rank sends (ranks - 1)/ranks of its buffer away, as nccl-tests' alltoall counts
        traffic, factor = float(size), (ranks - 1) / ranks
    elif op in ("ReduceScatter", "AllGather", "AllGatherV"):
        traffic, factor = float(size * ranks), (ranks - 1) / ranks
    else:
        traffic, factor = 0.0, 0.0
    algo = traffic / 1e9 / seconds if seconds else 0.0
    return algo, algo * factor


def _double(x: float) -> str:
    return '"nan"' if math.isnan(x) else f"{x:f}"


def _text(value: str) -> str:
    """json.cc's string quoting: `"`, `\\`, `/`, tab and newline escaped."""
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/")
    return '"' + out.replace("\t", "\\t").replace("\n", "\\n") + '"'


def _trace(p: str, trace: tuple[int, int, tuple[tuple[int, int], ...]]) -> str:
    start, stop, kernels = trace
    sn = ",".join(
        f'{{"channel_id":{i},"kernel_start_sn":{3 + 3 * i},"kernel_stop_sn":{4 + 3 * i},'
        f'"kernel_record_sn":{5 + 3 * i}}}'
        for i in range(len(kernels))
    )
    ts = ",".join(
        f'{{"channel_id":{i},"kernel_start_ts":{a},"kernel_stop_ts":{b},"kernel_record_ts":{b}}}'
        for i, (a, b) in enumerate(kernels)
    )
    return (
        f',"event_trace_sn":{{"{p}_start_sn":1,"{p}_stop_sn":2,"kernel_events":[{sn}]}}'
        f',"event_trace_ts":{{"{p}_start_ts":{start},"{p}_stop_ts":{stop},"kernel_events":[{ts}]}}'
    )


def json_line(r: InspectorRecord) -> str:
    """One record as the line Inspector writes (newline included)."""
    algo, bus = bandwidths(r.op, r.bytes, r.ranks, r.exec_time_us)
    p = "p2p" if r.op in P2P_OPS else "coll"
    peer = f',"p2p_peer":{r.peer}' if p == "p2p" else ""
    trace = _trace(p, r.trace) if r.trace is not None else ""
    return (
        f'{{"header":{{"id":{_text(r.communicator)},"comm_name":{_text(r.comm_name)},"rank":{r.rank},'
        f'"n_ranks":{r.ranks},"nnodes":{r.nodes}}},'
        f'"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface",'
        f'"dump_timestamp_us":{r.dumped_at_us},"hostname":{_text(r.host)},"pid":{r.pid}}},'
        f'"{p}_perf":{{"{p}":"{r.op}","{p}_sn":{r.sequence}{peer},"{p}_msg_size_bytes":{r.bytes},'
        f'"{p}_exec_time_us":{r.exec_time_us},"{p}_timing_source":"{r.timing_source}",'
        f'"{p}_algobw_gbs":{_double(algo)},"{p}_busbw_gbs":{_double(bus)}{trace}}}}}\n'
    )


def file_name(host: str, pid: int) -> str:
    """The file Inspector's dump thread writes a process's records to, in NCCL_INSPECTOR_DUMP_DIR."""
    return f"{host}-pid{pid}.log"
