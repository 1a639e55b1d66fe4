"""What gnmic writes of each profile's switches imports as the rows the gNMI collector decodes from the same answers.

Each profile's switch is the simulator's gNMI target (a real grpc server) serving every row its OS reports, at
the paths that OS uses. It answers the collector's own subscriptions (ONCE), in JSON_IETF and in PROTO; the
answers go once through the collector's decoder and once through gnmic's two output formats, rendered here as
gnmic renders them (openconfig/gnmic pkg/formatters: `event.go` for `--format event`, `json.go` for its
default JSON; paths as `path.GnmiPathToXPath` spells them), into `rocescope import --kind gnmic`'s reader.
Both must give the same rows: an operator who records with gnmic gets what the collector gets.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow as pa
import pytest

from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.gnmi.decode import GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb, pb_grpc
from rocescope.collectors.gnmi.targets import ENCODINGS, GnmiPath
from rocescope.collectors.importers import gnmic_documents, gnmic_rows
from rocescope.sim.facades.gnmi import GnmiFacade
from rocescope.sim.facades.gnmi_paths import dialect_of, served, subscriptions
from rocescope.sim.facades.gnmi_server import ONCE
from rocescope.sim.facades.server import OPENCONFIG_PATHS, SONIC_PATHS
from rocescope.sim.gear import Gear
from rocescope.sim.incidents import build_world
from rocescope.sim.profile import load_profile
from rocescope.sim.run import with_profile
from rocescope.sim.scenario import load_scenario

PROFILES = ("ideal", "sonic-spectrum", "sonic-broadcom", "arista-eos", "srlinux", "cumulus")
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SWITCH = "leaf-r0-01"
COLUMNS = ("ts", "device", "port", "priority", "metric", "value")
SOURCE = f"{SWITCH}:57400"  # gnmic's `source`: the target's name as its config gives it (host:port)


def switch_table(profile: str) -> tuple[pa.Table, tuple[GnmiPath, ...]]:
    """Every row one switch of the profile reports (values that each spelling can carry), and the collector's
    subscriptions for the profile."""
    prof = load_profile(profile)
    world = build_world(with_profile(load_scenario("pfc_storm"), prof), 5.0, START)
    layout = Gear(prof, world).layout()
    rows = [r for r in layout.to_pylist() if r["device"] == SWITCH]
    values = [_value(r["metric"], i) for i, r in enumerate(rows)]
    table = pa.table(
        {
            "ts": pa.array([int(START.timestamp() * 1e9)] * len(rows), pa.int64()).cast(pa.timestamp("ns", "UTC")),
            "device": [SWITCH] * len(rows),
            "role": ["switch"] * len(rows),
            "port": [r["port"] for r in rows],
            "priority": pa.array([r["priority"] for r in rows], pa.int8()),
            "metric": [r["metric"] for r in rows],
            "value": pa.array(values, pa.float64()),
            "raw_name": [r["raw_name"] for r in rows],
            "group": [r["group"] for r in rows],
        }
    )
    dialect = dialect_of(prof)
    if dialect == "ideal":
        paths = (*(GnmiPath(p, "COUNTERS_DB") for p in SONIC_PATHS), *(GnmiPath(p, "") for p in OPENCONFIG_PATHS))
        return table, paths
    hits = [served(dialect, r["port"], r["priority"], r["metric"], r["raw_name"], r["group"]) for r in rows]
    return table, subscriptions([(h, prof.cadence_s(r["group"], 1.0)) for h, r in zip(hits, rows, strict=True) if h])


def _value(metric: str, i: int) -> float:
    if metric == "oper_up":
        return float(i % 2)
    if metric == "port_speed_bps":
        return 400e9
    return float(1000 + 37 * i)


def answers(address: str, paths: tuple[GnmiPath, ...], encoding: str) -> list[Any]:
    """The SubscribeResponses of ONCE subscriptions, one request per gNMI target name, as the collector asks."""
    out = []
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.gNMIStub(channel)
        for target in dict.fromkeys(p.target for p in paths):
            sub_list = pb.SubscriptionList(prefix=pb.Path(target=target), mode=ONCE, encoding=ENCODINGS[encoding])
            for p in (p for p in paths if p.target == target):
                sub_list.subscription.add().path.CopyFrom(parse_path(p.path, origin=p.origin))
            out += list(stub.Subscribe(iter([pb.SubscribeRequest(subscribe=sub_list)]), timeout=30))
    return out


# --- gnmic's formatters ---------------------------------------------------------------------------------------


def xpath(p: Any) -> str:
    """`path.GnmiPathToXPath(p, false)`: origin, elements joined by `/`, keys sorted as `[k=v]`."""
    elems = "/".join(e.name + "".join(f"[{k}={e.key[k]}]" for k in sorted(e.key)) for e in p.elem)
    return f"{p.origin}:{elems}" if p.origin else elems


def _tags_from_path(p: Any) -> tuple[str, dict[str, str]]:
    """event.go `tagsFromGNMIPath`: the path without keys, and its keys as `<elem>_<key>` tags (and `target`)."""
    tags: dict[str, str] = {}
    name = f"{p.origin}:" if p.origin else ""
    for e in p.elem:
        if e.name:
            name += "/" + e.name
        for k, v in e.key.items():
            tags[f"{e.name.split(':')[-1]}_{k}" if e.name else k] = v
    if p.target:
        tags["target"] = p.target
    return name, tags


def _value_of(val: Any) -> Any:
    kind = val.WhichOneof("value")
    if kind in ("json_ietf_val", "json_val"):
        return json.loads(getattr(val, kind))
    return getattr(val, kind)


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    """karimra/go-map-flattener under `prefix`, separator `/` (what event.go does with a JSON object)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(_flat(f"{prefix}/{k}", v))
    return out


def event_format(resp: Any) -> list[dict[str, Any]]:
    """event.go `ResponseToEventMsgs` for one SubscribeResponse (subscription name `rocescope`)."""
    if resp.WhichOneof("response") != "update":
        return []
    n = resp.update
    prefix, prefix_tags = _tags_from_path(n.prefix)
    out = []
    for upd in n.update:
        tags = dict(prefix_tags)
        name, path_tags = _tags_from_path(upd.path)
        name = prefix.rstrip("/") + "/" + name.lstrip("/")
        for k, v in path_tags.items():
            if k in tags:
                if tags[k] != v:
                    tags[f"{name}_{k}"] = v
                continue
            tags[k] = v
        tags.update({"source": SOURCE, "subscription-name": "rocescope"})
        out.append(
            {"name": "rocescope", "timestamp": n.timestamp, "tags": tags, "values": _flat(name, _value_of(upd.val))}
        )
    return out


def json_format(resp: Any) -> dict[str, Any] | None:
    """json.go `formatSubscribeResponse` for one SubscribeResponse (gnmic's default output format)."""
    if resp.WhichOneof("response") != "update":
        return {"sync-response": True} if resp.WhichOneof("response") == "sync_response" else None
    n = resp.update
    msg: dict[str, Any] = {
        "source": SOURCE,
        "subscription-name": "rocescope",
        "timestamp": n.timestamp,
        "time": dt.datetime.fromtimestamp(n.timestamp / 1e9, dt.UTC).isoformat(),
    }
    if xpath(n.prefix):
        msg["prefix"] = xpath(n.prefix)
    if n.prefix.target:
        msg["target"] = n.prefix.target
    msg["updates"] = [
        {"Path": xpath(u.path), "values": {"/".join(e.name for e in u.path.elem): _value_of(u.val)}} for u in n.update
    ]
    return msg


def _written(docs: Iterator[Any], multiline: bool) -> str:
    """gnmic's file output: a document per response, indented by two spaces (its default) or one per line."""
    return "\n".join(json.dumps(d, indent=2 if multiline else None) for d in docs if d)


def _rows(rows: CounterRows | pa.RecordBatch) -> list[tuple[Any, ...]]:
    """(ts in ns, device, port, priority, metric, value), sorted."""
    if isinstance(rows, CounterRows):
        table = pa.table({k: getattr(rows, k) for k in COLUMNS})
    else:
        table = pa.table({k: rows.column(k).cast(pa.int64()) if k == "ts" else rows.column(k) for k in COLUMNS})
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("encoding", ["json_ietf", "proto"])
@pytest.mark.parametrize("profile", PROFILES)
def test_gnmic_output_imports_as_the_collector_decodes(profile: str, encoding: str) -> None:
    table, paths = switch_table(profile)
    with GnmiFacade(lambda: table, dialect=dialect_of(load_profile(profile))) as target:
        got = answers(target.address, paths, encoding)
    decoder = GnmiDecoder(SWITCH)
    for resp in got:
        decoder.add_response(resp)
    batch = decoder.flush()
    assert batch is not None and decoder.stats.malformed == 0
    want = _rows(batch.data)
    assert {m for *_, m, _ in want} >= {"tx_bytes", "rx_bytes"}
    for render, multiline in ((event_format, True), (json_format, False)):
        text = _written((render(r) for r in got), multiline)  # event: a JSON array of events per response
        rows = gnmic_rows(gnmic_documents(text))
        assert rows.malformed == 0
        assert _rows(rows) == want
