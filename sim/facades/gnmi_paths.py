"""Where a switch of each deployment profile serves a counter, and what a collector subscribes to read it.

A profile's switch rows carry the vendor's port and raw names (`rocescope.sim.gear`); the switch OS decides
the path each is served at (a `Served`), by dialect:

* `ideal` (a profile without metric groups): every row at its SONiC COUNTERS_DB path and its OpenConfig
  path (`gnmi_render`);
* `sonic` (sonic-spectrum, sonic-broadcom): sonic-gnmi's COUNTERS_DB virtual paths: port fields at
  `COUNTERS/<port>/<field>`, queue objects under `Queues`, priority groups under `PriorityGroups`, the PFC
  watchdog's queues under `Pfcwd` (objects keyed `<port>:<index>`); speed and oper status in APPL_DB
  `PORT_TABLE/<port>` (speed in Mb/s, status `up`/`down`);
* `openconfig` (arista-eos): `/interfaces/interface[name=P]/state/counters/...`, `state/oper-status` (UP/DOWN),
  `ethernet/state/negotiated-port-speed` (`openconfig-if-ethernet:SPEED_400GB`), and
  `/qos/interfaces/interface[interface-id=P]/output/queues/queue[name=Q]/state/...`;
* `srlinux`: `/interface[name=P]/statistics/...`, `oper-state` (up/down), `ethernet/port-speed` (`400G`), and
  under `/qos/interfaces/interface[interface-id=P]`: `pfc/statistics/pfc-priority[index=Q]/...`,
  `pfc/pfc-queue[pfc-queue-name=queue-Q]/...`, `output/queues/queue[queue-name=queue-Q]/queue-depth/...`;
* `cumulus` (Cumulus Linux 5.17's gNMI server, tests/fixtures/cumulus): the OpenConfig interface and queue
  paths, and NVIDIA's own beside them: `/interfaces/interface[name=P]/state/counters/ecn-marked-pkts`, under
  `/qos/interfaces/interface[interface-id=P]`: `switch-priority[priority=Q]/state/...` (pause frames and
  durations), `input/priority-group[pg-id=Q]/state/shared-buffer/data/...` (PG buffer use) and the queue's
  `state/instant-queue-len`, `state/no-buffer-uc-dropped-pkts`, `state/shared-buffer/data/...`.

What no gNMI path serves is `None` here: Arista's ARISTA-PFC-MIB objects (served over SNMP, `snmp_objects`),
Cumulus's NVUE-only counters (`nv show interface <if> qos roce counters` keys: the profile names gNMI leaves),
SONiC's buffer pool watermark (its COUNTERS_DB key is the pool's SAI object id; sonic-gnmi has no virtual path
for it).

Each served row also names the subscription that reads it (path, gNMI target); `subscriptions` turns a
profile's rows into the collector's SAMPLE subscriptions, each at the finest cadence of the metric groups
it carries, so a device's every read is sampled once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rocescope import catalog
from rocescope.collectors.gnmi.targets import GnmiPath
from rocescope.sim.facades.gnmi_server import Elem
from rocescope.sim.profile import Profile

__all__ = ["DIALECTS", "Served", "dialect_of", "served", "snmp_objects", "subscriptions"]

DIALECTS = ("ideal", "sonic", "openconfig", "srlinux", "cumulus")
_NAMING_DIALECT = {"sonic": "sonic", "eos": "openconfig", "srlinux": "srlinux", "cumulus": "cumulus"}
#: Metrics served as speed words (`SPEED_400GB`, `400G`), as the gear writes them.
SPEEDS = frozenset({"port_speed_bps", "port_speed_configured_bps"})
#: gNMI targets (prefix `target`) of SONiC's databases.
COUNTERS_DB, APPL_DB = "COUNTERS_DB", "APPL_DB"


@dataclass(frozen=True)
class Served:
    """One row's gNMI leaf: family (`sonic` JSON-of-strings or `openconfig` leaves), path elements, how many
    elements a SONiC subscription must name (`obj_len`), the notification prefix length, the value's text
    style, and the subscription (path, gNMI target) that reads it."""

    family: str
    elems: tuple[Elem, ...]
    obj_len: int
    prefix_len: int
    style: str
    subscription: str
    target: str = ""


def dialect_of(profile: Profile) -> str:
    """The dialect a profile's switches speak (`ideal` where the profile names no metric groups)."""
    if profile.switch.groups is None:
        return "ideal"
    return _NAMING_DIALECT[profile.switch.naming]


def _e(elem: str, **keys: str) -> Elem:
    return elem, tuple(sorted(keys.items()))


def _rest(name: str) -> tuple[Elem, ...]:
    return tuple((part, ()) for part in name.split("/"))


def _container(raw: str, group: str) -> str:
    """The sonic-gnmi virtual container of a queue-level or priority-group field."""
    if group == "pfc_watchdog":
        return "Pfcwd"
    return "PriorityGroups" if raw.startswith("SAI_INGRESS_PRIORITY_GROUP") else "Queues"


def _sonic(port: str, prio: int, raw: str, group: str) -> Served | None:
    sai = catalog.resolve("sonic_sai", raw)
    if sai is not None:
        style = "bool" if raw == "SAI_QUEUE_ATTR_PAUSE_STATUS" else "number"
        if not port.startswith("Ethernet"):
            return None  # a buffer pool: keyed by its SAI object id in COUNTERS_DB, on no virtual path
        if prio < 0 or sai[1] >= 0:
            return Served("sonic", (_e("COUNTERS"), _e(port), _e(raw)), 2, 2, style, "COUNTERS/Ethernet*", COUNTERS_DB)
        box = _container(raw, group)
        queue = (_e("COUNTERS"), _e(port), _e(box), _e(f"{port}:{prio}"), _e(raw))
        return Served("sonic", queue, 3, 2, style, f"COUNTERS/Ethernet*/{box}", COUNTERS_DB)
    if catalog.resolve("sonic_db", raw) is not None and raw.startswith("PORT_TABLE/"):
        field = raw.partition("/")[2]
        style = {"speed": "mbps", "oper_status": "updown"}.get(field, "number")
        return Served("sonic", (_e("PORT_TABLE"), _e(port), _e(field)), 1, 2, style, "PORT_TABLE", APPL_DB)
    return None


def _openconfig(port: str, prio: int, metric: str, raw: str) -> Served | None:
    if catalog.resolve("openconfig", raw) is None:
        return None
    per_priority = catalog.METRICS_BY_NAME[metric].per_priority
    style = {"state/oper-status": "state"}.get(raw, "oc_speed" if metric in SPEEDS else "number")
    if prio < 0 and not per_priority:
        elems = (_e("interfaces"), _e("interface", name=port), *_rest(raw))
        parent = raw.rpartition("/")[0]
        sub = f"/interfaces/interface/{parent if parent.endswith('counters') else raw}"
        return Served("openconfig", elems, 0, 2, style, sub)
    if prio >= 0 and raw.startswith("state/"):
        head = (_e("qos"), _e("interfaces"), _e("interface", **{"interface-id": port}), _e("output"), _e("queues"))
        elems = (*head, _e("queue", name=str(prio)), *_rest(raw))
        return Served("openconfig", elems, 0, 6, style, "/qos/interfaces/interface/output/queues/queue/state")
    return None


#: SR Linux lists under /qos/interfaces/interface: list element -> (its key, how the key names index Q).
_SRL_LISTS = {"pfc-priority": ("index", "{p}"), "pfc-queue": ("pfc-queue-name", "queue-{p}")}


def _srlinux(port: str, prio: int, metric: str, raw: str) -> Served | None:
    if catalog.resolve("srlinux", raw) is None:
        return None
    style = {"oper-state": "updown"}.get(raw, "srl_speed" if metric in SPEEDS else "number")
    parts = raw.split("/")
    if parts[0] not in ("pfc", "queue-depth"):
        elems = (_e("interface", name=port), *_rest(raw))
        sub = "/interface/" + ("statistics" if parts[0] == "statistics" else raw)
        return Served("openconfig", elems, 0, 1, style, sub)
    head = (_e("qos"), _e("interfaces"), _e("interface", **{"interface-id": port}))
    if parts[0] == "queue-depth":
        queue = _e("queue", **{"queue-name": f"queue-{max(prio, 0)}"})
        elems = (*head, _e("output"), _e("queues"), queue, *_rest(raw))
        return Served("openconfig", elems, 0, 6, style, "/qos/interfaces/interface/output/queues/queue/queue-depth")
    body: list[Elem] = []
    for part in parts:
        listed = _SRL_LISTS.get(part)
        body.append(_e(part, **{listed[0]: listed[1].format(p=max(prio, 0))}) if listed and prio >= 0 else _e(part))
    sub = "/qos/interfaces/interface/" + "/".join(parts[:2])
    return Served("openconfig", (*head, *body), 0, 3, style, sub)


#: Cumulus's lists under /qos/interfaces/interface[interface-id=P]: the raw name's head -> (the elements up to
#: the list entry, the entry's element, its key).
_CUMULUS_LISTS = {
    "switch-priority/": ((), "switch-priority", "priority"),
    "input/priority-group/": (("input",), "priority-group", "pg-id"),
}


def _cumulus(port: str, prio: int, metric: str, raw: str) -> Served | None:
    if catalog.resolve("openconfig", raw) is not None:
        return _openconfig(port, prio, metric, raw)
    if catalog.resolve("cumulus", raw) is None:
        return None
    head = (_e("qos"), _e("interfaces"), _e("interface", **{"interface-id": port}))
    for lead, (above, name, key) in _CUMULUS_LISTS.items():
        if raw.startswith(lead) and prio >= 0:
            entry = (*(_e(a) for a in above), _e(name, **{key: str(prio)}))
            elems = (*head, *entry, *_rest(raw.removeprefix(lead)))
            sub = "/qos/interfaces/interface/" + lead.rstrip("/")
            return Served("openconfig", elems, 0, len(head) + len(entry), "number", sub)
    if not raw.startswith("state/"):
        return None  # an NVUE key: on no gNMI path
    if prio < 0:
        elems = (_e("interfaces"), _e("interface", name=port), *_rest(raw))
        return Served("openconfig", elems, 0, 2, "number", "/interfaces/interface/state/counters")
    queue = (*head, _e("output"), _e("queues"), _e("queue", name=str(prio)))
    sub = "/qos/interfaces/interface/output/queues/queue/state"
    return Served("openconfig", (*queue, *_rest(raw)), 0, 6, "number", sub)


def served(dialect: str, port: str, prio: int, metric: str, raw: str, group: str) -> Served | None:
    """Where a switch of `dialect` serves one row over gNMI; None where no gNMI path serves it."""
    if dialect == "sonic":
        return _sonic(port, prio, raw, group)
    if dialect == "openconfig":
        return _openconfig(port, prio, metric, raw)
    if dialect == "cumulus":
        return _cumulus(port, prio, metric, raw)
    if dialect == "srlinux":
        return _srlinux(port, prio, metric, raw)
    raise ValueError(f"no gNMI paths for dialect {dialect!r}")


def snmp_objects(dialect: str, raws: Iterable[str]) -> list[str]:
    """The MIB objects (raw names) a switch of `dialect` serves over SNMP only (Arista's ARISTA-PFC-MIB)."""
    if dialect != "openconfig":
        return []
    return sorted({r for r in raws if catalog.resolve("snmp", r) is not None and r.startswith("arista")})


def subscriptions(rows: Sequence[tuple[Served, float]]) -> tuple[GnmiPath, ...]:
    """The SAMPLE subscriptions that read these served rows, (row, its group's cadence in seconds) each: one
    per distinct subscription path, at the finest cadence of the rows it carries; in first-seen order."""
    every: dict[tuple[str, str], float] = {}
    for s, cadence in rows:
        key = (s.subscription, s.target)
        every[key] = min(every.get(key, cadence), cadence)
    return tuple(GnmiPath(path, target, interval_s=seconds) for (path, target), seconds in every.items())
