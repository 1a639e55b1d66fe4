"""gNMI decode benchmark: SubscribeResponse bytes -> parse -> columnar `counters` Batch, per core.

Three message shapes a switch sends in SAMPLE mode, one notification per port per sample:

* `proto`: typed leaves (uint_val) under a per-port prefix, SONiC COUNTERS_DB paths
  (`COUNTERS/Ethernet<i>` + `SAI_PORT_STAT_...`, `Queues/Ethernet<i>:<q>/SAI_QUEUE_STAT_...`);
* `oc`: the same as OpenConfig typed leaves (`/interfaces/interface[name=..]` + `state/counters/...`);
* `json`: sonic-gnmi's JSON_IETF objects (one update per port, string values), flattened here.

The decode figure is single-threaded CPU time (`time.process_time`, so it is per core) over all
updates, flushing a Batch every `--batch` responses as the collector does. With `--e2e` (default on),
a replay server in a child process streams the `proto` messages over loopback grpc to a real
`GnmiCollector`, and the updates decoded per wall second are reported (bounded by 2 cores shared
with the server).

    python bench/gnmi.py [--full] [--ports 64] [--samples 40] [--no-e2e]

Headline lines: `gnmi_decode: N updates/s` (proto) and `gnmi_e2e_loopback: N updates/s`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import threading
import time
from collections.abc import Iterator
from typing import Any

from rocescope.collectors.gnmi.collector import GnmiCollector
from rocescope.collectors.gnmi.decode import GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.gnmi.targets import GnmiPath, GnmiTarget

PORT_FIELDS = (
    "SAI_PORT_STAT_IF_IN_OCTETS",
    "SAI_PORT_STAT_IF_OUT_OCTETS",
    "SAI_PORT_STAT_IF_IN_UCAST_PKTS",
    "SAI_PORT_STAT_IF_OUT_UCAST_PKTS",
    "SAI_PORT_STAT_IF_IN_DISCARDS",
    "SAI_PORT_STAT_IF_OUT_DISCARDS",
    "SAI_PORT_STAT_IF_IN_ERRORS",
    "SAI_PORT_STAT_IF_OUT_ERRORS",
    "SAI_PORT_STAT_ECN_MARKED_PACKETS",
    "SAI_PORT_STAT_ETHER_STATS_CRC_ALIGN_ERRORS",
    *(f"SAI_PORT_STAT_PFC_{p}_{w}" for p in range(8) for w in ("RX_PKTS", "TX_PKTS")),
    *(f"SAI_PORT_STAT_PFC_{p}_{w}_PAUSE_DURATION_US" for p in (3, 4) for w in ("RX", "TX")),
)
QUEUE_FIELDS = ("SAI_QUEUE_STAT_BYTES", "SAI_QUEUE_STAT_PACKETS", "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS")
_IF_LEAVES = (
    *("in-octets", "out-octets", "in-pkts", "out-pkts", "in-unicast-pkts", "out-unicast-pkts"),
    *("in-discards", "out-discards", "in-errors", "out-errors", "in-fcs-errors", "carrier-transitions"),
)
OC_LEAVES = (
    *(f"state/counters/{leaf}" for leaf in _IF_LEAVES),
    "ethernet/state/counters/in-mac-pause-frames",
    "ethernet/state/counters/out-mac-pause-frames",
)
QUEUES = (0, 3, 4)


def proto_messages(ports: int, samples: int) -> list[bytes]:
    out = []
    for s in range(samples):
        ts = 1_740_830_400_000_000_000 + s * 1_000_000_000
        for i in range(ports):
            port = f"Ethernet{i * 4}"
            n = pb.Notification(timestamp=ts, prefix=parse_path(f"COUNTERS/{port}", target="COUNTERS_DB"))
            for k, f in enumerate(PORT_FIELDS):
                u = n.update.add()
                u.path.elem.add(name=f)
                u.val.uint_val = 1_000_000 * s + 1000 * i + k
            for q in QUEUES:
                for k, f in enumerate(QUEUE_FIELDS):
                    u = n.update.add()
                    for name in ("Queues", f"{port}:{q}", f):
                        u.path.elem.add(name=name)
                    u.val.uint_val = 1_000_000 * s + 1000 * i + 10 * q + k
            out.append(bytes(pb.SubscribeResponse(update=n).SerializeToString()))
    return out


def oc_messages(ports: int, samples: int) -> list[bytes]:
    out = []
    for s in range(samples):
        ts = 1_740_830_400_000_000_000 + s * 1_000_000_000
        for i in range(ports):
            port = f"Ethernet{i * 4}"
            n = pb.Notification(timestamp=ts, prefix=parse_path(f"/interfaces/interface[name={port}]"))
            for k, leaf in enumerate(OC_LEAVES):
                u = n.update.add()
                u.path.CopyFrom(parse_path(leaf))
                u.val.uint_val = 1_000_000 * s + 1000 * i + k
            out.append(bytes(pb.SubscribeResponse(update=n).SerializeToString()))
            for q in QUEUES:
                head = f"/qos/interfaces/interface[interface-id={port}]/output/queues/queue[name={q}]/state"
                n = pb.Notification(timestamp=ts, prefix=parse_path(head))
                for k, leaf in enumerate(("transmit-octets", "transmit-pkts", "ecn-marked-pkts", "dropped-pkts")):
                    u = n.update.add()
                    u.path.elem.add(name=leaf)
                    u.val.uint_val = 1_000_000 * s + 1000 * i + 10 * q + k
                out.append(bytes(pb.SubscribeResponse(update=n).SerializeToString()))
    return out


def json_messages(ports: int, samples: int) -> list[bytes]:
    out = []
    for s in range(samples):
        ts = 1_740_830_400_000_000_000 + s * 1_000_000_000
        for i in range(ports):
            port = f"Ethernet{i * 4}"
            doc = {f: str(1_000_000 * s + 1000 * i + k) for k, f in enumerate(PORT_FIELDS)}
            n = pb.Notification(timestamp=ts, prefix=pb.Path(target="COUNTERS_DB"))
            u = n.update.add()
            u.path.CopyFrom(parse_path(f"COUNTERS/{port}"))
            u.val.json_ietf_val = json.dumps(doc).encode()
            q = n.update.add()
            q.path.CopyFrom(parse_path(f"COUNTERS/{port}/Queues"))
            qdoc = {f"{port}:{x}": {f: str(10 * x + k) for k, f in enumerate(QUEUE_FIELDS)} for x in QUEUES}
            q.val.json_ietf_val = json.dumps(qdoc).encode()
            out.append(bytes(pb.SubscribeResponse(update=n).SerializeToString()))
    return out


def decode_rate(messages: list[bytes], batch: int, repeat: int) -> tuple[float, int, int]:
    """(updates/s of process CPU, rows, updates) decoding `messages` `repeat` times."""
    best = 0.0
    rows = updates = 0
    for _ in range(repeat):
        dec = GnmiDecoder("bench")
        rows = 0
        t0 = time.process_time()
        for k, data in enumerate(messages, 1):
            dec.feed(data)
            if k % batch == 0:
                b = dec.flush()
                rows += b.num_rows if b is not None else 0
        b = dec.flush()
        rows += b.num_rows if b is not None else 0
        cpu = time.process_time() - t0
        updates = dec.stats.values
        best = max(best, updates / cpu)
    return best, rows, updates


# --- end to end over loopback --------------------------------------------------------------------


def _replay_server(messages: list[bytes], ready: Any, port_out: Any) -> None:
    """A gNMI target that answers Subscribe by streaming pre-serialized responses, round after round."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    def subscribe(requests: Iterator[Any], context: Any) -> Iterator[bytes]:
        next(requests)
        sync = bytes(pb.SubscribeResponse(sync_response=True).SerializeToString())
        first = True
        while context.is_active():
            yield from messages
            if first:
                first = False
                yield sync

    handler = grpc.method_handlers_generic_handler(
        "gnmi.gNMI",
        {
            "Subscribe": grpc.stream_stream_rpc_method_handler(
                subscribe, lambda b: pb.SubscribeRequest.FromString(b), None
            )
        },
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port_out.value = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ready.set()
    server.wait_for_termination()


def e2e_rate(messages: list[bytes], seconds: float) -> float:
    ctx = mp.get_context("spawn")
    ready, port = ctx.Event(), ctx.Value("i", 0)
    proc = ctx.Process(target=_replay_server, args=(messages, ready, port), daemon=True)
    proc.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("replay server did not start")
        target = GnmiTarget("bench", f"127.0.0.1:{port.value}", paths=(GnmiPath("COUNTERS/Ethernet*", "COUNTERS_DB"),))
        collector = GnmiCollector([target], flush_s=1.0)
        stop = threading.Event()
        worker = threading.Thread(target=collector.run, args=(stop,))
        worker.start()
        deadline = time.monotonic() + 30
        while not collector.health()["bench"].synced and time.monotonic() < deadline:
            time.sleep(0.01)
        v0, t0 = collector.health()["bench"].values, time.monotonic()
        time.sleep(seconds)
        v1, t1 = collector.health()["bench"].values, time.monotonic()
        stop.set()
        worker.join(10)
        return (v1 - v0) / (t1 - t0)
    finally:
        proc.terminate()
        proc.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="bigger: 256 ports x 100 samples, 3 repeats, 10 s e2e")
    ap.add_argument("--ports", type=int, default=None)
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--batch", type=int, default=64, help="responses per Batch flush")
    ap.add_argument("--no-e2e", dest="e2e", action="store_false")
    args = ap.parse_args()
    ports = args.ports or (256 if args.full else 64)
    samples = args.samples or (100 if args.full else 20)
    repeat = 3 if args.full else 2
    per_port = len(PORT_FIELDS) + len(QUEUES) * len(QUEUE_FIELDS)
    print(f"{ports} ports x {samples} samples, {per_port} values a port (SONiC) per sample")
    results = {}
    for name, build in (("json", json_messages), ("oc", oc_messages), ("proto", proto_messages)):
        messages = build(ports, samples)
        size = sum(map(len, messages))
        rate, rows, updates = decode_rate(messages, args.batch, repeat)
        assert rows == updates, (rows, updates)
        results[name] = rate
        print(f"gnmi_decode_{name}: {rate:,.0f} updates/s ({updates} updates, {size / len(messages):.0f} B a response)")
    if args.e2e:
        rate = e2e_rate(proto_messages(ports, 4), 10.0 if args.full else 3.0)
        print(f"gnmi_e2e_loopback: {rate:,.0f} updates/s")
    print(f"gnmi_decode: {results['proto']:,.0f} updates/s")


if __name__ == "__main__":
    main()
