"""LLDP neighbors from what devices report: lldpcli output (hosts) and openconfig-lldp state (switches over gNMI).

lldpd's JSON has variants, all handled by `parse_lldpcli`: `-f json` keys objects by name and writes a
key seen once as an object, several times as a list of one-key objects (one neighbor:
`"interface": {"eth0": {...}}`; several: `[{"eth0": ...}, ...]`); the chassis is keyed by its system name
(`{"spine-1": {"id": ...}}`), or unkeyed when the neighbor sent none; `-f json0` writes every value as a
list (`"interface": [{"name": "eth0", ...}]`); `-f xml` is read as json0 (lldpd writes both from one
writer) and `-f keyvalue` lines and the default plain text are put in the same shape. gNMI Notifications of
`/lldp/interfaces/interface/neighbors/neighbor/state`, JSON objects or typed leaves, are decoded by
`links_from_notifications`.

The peer port is the LLDP port id when its subtype names an interface (ifname, ifalias, local), and
the port description when the id is a MAC or an address (lldpd's default: id = MAC, descr = ifname).
The peer device is the system name, else the chassis id. A neighbor that cannot be read is skipped
and counted; the others are kept.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.gnmi.paths import Elem, path_elems
from rocescope.errors import DecodeError

__all__ = [
    "LLDP_STATE_PATH",
    "Neighbor",
    "links_from_notifications",
    "lldpcli_document",
    "parse_lldpcli",
    "peer_port",
]

log = logging.getLogger(__name__)

LLDP_STATE_PATH = "/lldp/interfaces/interface/neighbors/neighbor/state"
#: Port id subtypes whose value is not an interface name: the port description names it better.
_ADDRESS_SUBTYPES = frozenset({"mac", "ip", "mac_address", "network_address", "unhandled"})
_MAX_DEPTH = 32


@dataclass(frozen=True, order=True)
class Neighbor:
    """One adjacency as the local device sees it."""

    device: str
    port: str
    peer_device: str
    peer_port: str


def peer_port(subtype: str, value: str, descr: str) -> str:
    kind = subtype.rpartition(":")[2].lower()
    if kind in _ADDRESS_SUBTYPES and descr.strip():
        return descr.strip()
    if kind == "local" and value.isdigit() and descr.strip():
        return descr.strip()  # a local id that is an ifIndex: the description is the name
    return value


# --- lldpcli JSON -----------------------------------------------------------------------------------


def _first(x: object) -> object:
    """json0 wraps every value in a list: take its one element."""
    while isinstance(x, list) and len(x) == 1:
        x = x[0]
    return x


def _text(x: object) -> str:
    """A string whether it comes bare, as {"value": ...} or as [{"value": ...}] (json0)."""
    x = _first(x)
    if isinstance(x, dict):
        x = _first(x.get("value", ""))
    if isinstance(x, str | int | float) and not isinstance(x, bool):
        return str(x)
    if x is None or x == {}:
        return ""
    raise ValueError(f"not a text value: {str(x)[:60]}")


def _interfaces(lldp: object) -> Iterator[tuple[str, object]]:
    """(local interface, neighbor body) whatever the variant."""
    lldp = _first(lldp)
    if not isinstance(lldp, dict):
        raise DecodeError("lldpcli JSON: `lldp` is not an object")
    items = lldp.get("interface", [])
    if isinstance(items, dict):
        items = [items]  # lldpd writes a key seen once as an object
    if not isinstance(items, list):
        raise DecodeError("lldpcli JSON: `interface` is neither an object nor a list")
    for item in items:
        if not isinstance(item, dict):
            yield "", item  # counted as malformed by the caller
            continue
        if "name" in item and not isinstance(item["name"], dict):  # json0: {"name": "eth0", "chassis": [...]}
            yield str(_text(item["name"])), item
            continue
        for name, body in item.items():
            yield str(name), body


def _chassis(body: Mapping[str, Any]) -> tuple[str, str]:
    """(system name, chassis id) of a neighbor body."""
    ch = _first(body.get("chassis"))
    if not isinstance(ch, dict):
        raise ValueError("no chassis")
    cid = _first(ch.get("id"))
    if isinstance(cid, dict) and ("value" in cid or "type" in cid):
        return _text(ch.get("name", "")), _text(cid)  # unkeyed (no sysname) or json0
    if isinstance(_first(ch.get("name")), dict):
        return _text(ch["name"]), ""  # json0 shape without a chassis id
    if len(ch) != 1:
        raise ValueError(f"chassis with {len(ch)} keys")
    (name, inner), *_ = ch.items()
    inner = _first(inner)
    cid = _text(inner.get("id", "")) if isinstance(inner, dict) else ""
    return str(name), cid


def _port(body: Mapping[str, Any]) -> str:
    port = _first(body.get("port"))
    if not isinstance(port, dict):
        raise ValueError("no port")
    pid = _first(port.get("id"))
    if isinstance(pid, dict):
        subtype, value = _text(pid.get("type", "")), _text(pid.get("value", ""))
    else:
        subtype, value = "", _text(pid)
    return peer_port(subtype, value, _text(port.get("descr", "")))


# --- lldpcli XML, keyvalue and plain text, read as json0 -------------------------------------------------------------

#: What lldpd names a chassis or port id by its subtype (`chassis.mac=...` in keyvalue, `type="mac"` elsewhere).
_ID_SUBTYPES = frozenset({"mac", "ip", "local", "ifname", "ifalias", "unhandled"})
#: The sections of one neighbor in keyvalue output (`lldp.<interface>.<section>...`); an interface name may
#: hold dots (`eth0.100`), a section name never.
_SECTIONS = "via|rid|age|chassis|port|vlan|ppvid|pi|lldp-med|unknown-tlvs"
_KEYVALUE = re.compile(rf"lldp\.(?P<iface>.+?)\.(?P<section>{_SECTIONS})(?:\.(?P<rest>.*))?$")


def _json0(elem: ET.Element) -> dict[str, Any]:
    """An lldpcli XML element as the json0 variant writes the same (lldpd writes both from one writer):
    attributes as keys, children as lists of objects, text as `value`; the display labels dropped."""
    out: dict[str, Any] = {k: v for k, v in elem.attrib.items() if k != "label"}
    for child in elem:
        out.setdefault(child.tag, []).append(_json0(child))
    if elem.text and elem.text.strip():
        out["value"] = elem.text.strip()
    return out


def _from_xml(text: str, what: str) -> dict[str, Any]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise DecodeError(f"{what}: not lldpcli XML: {exc}") from None
    if root.tag != "lldp":
        raise DecodeError(f"{what}: lldpcli XML without an <lldp> root (found <{root.tag}>)")
    try:
        return {"lldp": [_json0(root)]}
    except RecursionError:
        raise DecodeError(f"{what}: lldpcli XML nested too deep") from None


def _from_keyvalue(text: str, what: str) -> dict[str, Any]:
    """`lldpcli -f keyvalue` lines (`lldp.eth0.chassis.name=leaf-01`) as json0; a neighbor starts at its
    interface's `via` line (several neighbors on one interface repeat the keys)."""
    interfaces: list[dict[str, Any]] = []
    current: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        m = _KEYVALUE.match(key.strip()) if sep else None
        if m is None:
            continue
        iface, section, rest = m["iface"], m["section"], m["rest"] or ""
        entry = current.get(iface)
        if entry is None or (section == "via" and "via" in entry):
            entry = current[iface] = {"name": iface}
            interfaces.append(entry)
        if section in ("chassis", "port") and "." not in rest:
            part = entry.setdefault(section, [{}])[0]
            if rest in _ID_SUBTYPES:
                part["id"] = [{"type": rest, "value": value}]
            elif rest in ("name", "descr"):
                part[rest] = [{"value": value}]
        elif section in ("via", "rid", "age"):
            entry[section] = value
    if not interfaces and text.strip():
        raise DecodeError(f"{what}: no `lldp.<interface>.` lines: not lldpcli keyvalue output")
    return {"lldp": [{"interface": interfaces}]}


def _from_plain(text: str, what: str) -> dict[str, Any]:
    """lldpcli's default output (`-f plain`): an `Interface: eth0, via: LLDP, ...` line per neighbor, then
    `Chassis:` and `Port:` blocks with `ChassisID: mac ...`, `SysName: ...`, `PortID: ifname ...`,
    `PortDescr: ...` lines."""
    interfaces: list[dict[str, Any]] = []
    entry: dict[str, Any] | None = None
    part: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        value = value.strip()
        if not sep:
            continue
        if key == "Interface" and not line.startswith(" "):
            entry = {"name": value.split(",", 1)[0].strip()}
            interfaces.append(entry)
        elif entry is None:
            continue
        elif key in ("Chassis", "Port"):
            part = entry.setdefault(key.lower(), [{}])[0]
        elif key in ("ChassisID", "PortID"):
            subtype, _, ident = value.partition(" ")
            part["id"] = [{"type": subtype, "value": ident.strip()}]
        elif key in ("SysName", "PortDescr"):
            part["name" if key == "SysName" else "descr"] = [{"value": value}]
    if not interfaces and "LLDP neighbors" not in text:
        raise DecodeError(f"{what}: no `Interface:` lines: not lldpcli output")
    return {"lldp": [{"interface": interfaces}]}


def lldpcli_document(output: str | bytes, what: str) -> object:
    """lldpcli's output in any of its formats (`-f json`, `json0`, `xml`, `keyvalue`, `plain`) as the JSON
    variants hold it."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    head = text.lstrip()[:5]
    if not head:  # keyvalue (and plain) output of a device without neighbors is empty
        return {"lldp": [{"interface": []}]}
    if head.startswith("<"):
        return _from_xml(text, what)
    if head == "lldp.":
        return _from_keyvalue(text, what)
    if head in ("-----", "LLDP ", "Inter"):
        return _from_plain(text, what)
    return load_json(output, what)


def parse_lldpcli(output: str | bytes | Mapping[str, Any], device: str) -> tuple[list[Neighbor], int]:
    """(neighbors, malformed neighbors skipped) from `lldpcli [-f json|json0|xml|keyvalue|plain] show neighbors`.

    Raises DecodeError when the output is not lldpcli's at all; a neighbor that cannot be read is
    skipped and counted.
    """
    if isinstance(output, Mapping):
        doc: object = output
    else:
        doc = lldpcli_document(output, f"{device}: lldpcli output")
    if not isinstance(doc, dict) or "lldp" not in doc:
        raise DecodeError(f"{device}: lldpcli output has no `lldp` object")
    out: list[Neighbor] = []
    bad = 0
    for ifname, body in _interfaces(doc["lldp"]):
        try:
            body = _first(body)
            if not ifname or not isinstance(body, dict):
                raise ValueError("interface entry is not an object")
            sysname, cid = _chassis(body)
            peer = sysname or cid
            peer_port = _port(body)
            if not peer or not peer_port:
                raise ValueError("neighbor without a name or port id")
            out.append(Neighbor(device, ifname, peer, peer_port))
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            bad += 1
            log.debug("%s: lldp neighbor on %r skipped: %s", device, ifname, exc)
    return out, bad


# --- gNMI openconfig-lldp ---------------------------------------------------------------------------


def _strip(name: str) -> str:
    return name.rpartition(":")[2]


def _walk(elems: list[Elem], doc: object, depth: int = 0) -> Iterator[tuple[list[Elem], object]]:
    """(elements, scalar) leaves of a JSON value under `elems`; list entries keyed by `name` or `id`."""
    if depth > _MAX_DEPTH:
        raise DecodeError("JSON nested too deep")
    if isinstance(doc, dict):
        for k, v in doc.items():
            name = _strip(str(k))
            if isinstance(v, list):
                for item in v:
                    if isinstance(item, dict):
                        key = next((k2 for k2 in ("name", "id") if k2 in item), None)
                        keys = {key: str(item[key])} if key is not None else {}
                        yield from _walk([*elems, (name, keys)], item, depth + 1)
            else:
                yield from _walk([*elems, (name, {})], v, depth + 1)
    else:
        yield elems, doc


def _scalar(val: Any) -> Iterator[tuple[list[Elem], object]]:
    kind = val.WhichOneof("value")
    if kind in ("json_ietf_val", "json_val"):
        yield from _walk([], load_json(getattr(val, kind), "the update's value"))
    elif kind is None:
        raise DecodeError("update without a value")
    else:
        yield [], getattr(val, kind)


_WANTED = frozenset({"system-name", "port-id", "port-id-type", "port-description", "chassis-id"})


def links_from_notifications(notifications: Iterable[Any], device: str) -> tuple[list[Neighbor], int]:
    """(neighbors, malformed updates or neighbors) from gNMI Notifications of openconfig-lldp state."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    bad = 0
    for n in notifications:
        prefix = path_elems(n.prefix)
        for u in n.update:
            try:
                base = prefix + path_elems(u.path)
                for extra, value in _scalar(u.val):
                    elems = [(_strip(nm), keys) for nm, keys in base] + extra
                    names = [nm for nm, _ in elems]
                    if "interface" not in names or "neighbor" not in names or names[-1] not in _WANTED:
                        continue
                    iface = elems[names.index("interface")][1].get("name", "")
                    nid = elems[names.index("neighbor")][1].get("id", "")
                    if not iface:
                        raise DecodeError(f"{device}: neighbor leaf without an interface name")
                    if isinstance(value, dict | list) or value is None:
                        raise DecodeError(f"{device}: {names[-1]} is not a scalar")
                    found.setdefault((iface, nid), {})[names[-1]] = str(value)
            except (DecodeError, ValueError, TypeError) as exc:
                bad += 1
                log.debug("%s: lldp update skipped: %s", device, exc)
    out: list[Neighbor] = []
    for (iface, _), leaves in sorted(found.items()):
        peer = leaves.get("system-name") or leaves.get("chassis-id", "")
        port = peer_port(leaves.get("port-id-type", ""), leaves.get("port-id", ""), leaves.get("port-description", ""))
        if not peer or not port:
            bad += 1
            continue
        out.append(Neighbor(device, iface, peer, port))
    return out, bad
