"""The metric catalog against real device output.

Fixtures are copies of files from /work/shared/realdata (each with its `.source.txt`):
ethtool -S of mlx5 (ConnectX-4), bnxt_en, ice and i40e; the mlx5_0 sysfs tree and `rdma statistic`
outputs; SONiC COUNTERS_DB, Cumulus RoCE counters, OpenConfig and SR Linux path lists; an SNMP walk
excerpt and the PFC/QoS MIB object table; and, beside them, SONiC port tables (APPL_DB, STATE_DB,
CONFIG_DB from sonic-gnmi's tests and the full redis dump) and the published YANG models of
openconfig-if-ethernet and SR Linux interfaces (tests/fixtures/sonic, tests/fixtures/yang). A few
catalog names cannot be seen in these samples (PFC was off on the ConnectX-4, the SONiC dumps come from
a Broadcom box...): they are listed in `NOT_IN_SAMPLES` with the document that defines them, and that
list must shrink when data grows.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from rocescope.catalog import resolve

import yang_tree

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL = FIXTURES / "realdata"
SONIC_PORTS = FIXTURES / "sonic"
YANG = FIXTURES / "yang"
ETHTOOL = REAL / "01_ethtool"
RDMA = REAL / "02_rdma"
SWITCH = REAL / "04_gnmi_sonic"
SNMP = REAL / "05_snmp"
#: Built from driver sources and vendor documentation (names real, see each .source.txt): bnxt_re sysfs trees,
#: Cumulus Linux gNMI metric tables.
NIC = FIXTURES / "nic"
CUMULUS = FIXTURES / "cumulus"
BNXT_RE_DUMPS = ("bnxt_re0_sysfs_linux6.17.txt", "bnxt_re0_sysfs_linux6.18.txt", "bnxt_re0_sysfs_broadcom_driver.txt")
CUMULUS_GNMI_DOCS = ("cumulus_linux_5.14_gnmi_metrics_qos.md", "cumulus_linux_5.17_gnmi_metrics_qos_interface.md")

# --------------------------------------------------------------------------------------------------
# parsers for the real files


def parse_ethtool(path: Path) -> dict[str, int]:
    """`ethtool -S` lines `name: value`; bnxt per-ring lines `[N]: name: value` are skipped."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("[") or s.endswith("statistics:"):
            continue
        name, _, value = s.rpartition(": ")
        out[name] = int(value)
    return out


def parse_sysfs(path: Path) -> dict[str, dict[str, str]]:
    """`/sys/class/infiniband/<dev>/ports/<n>/<group>/<name>: value` -> {group: {name: value}}."""
    out: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^/sys/class/infiniband/[^/]+/ports/\d+/(counters|hw_counters)/(\w+): (.*)$", line)
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = m.group(3)
    return out


def parse_rdma_statistic(path: Path) -> set[str]:
    """Counter names in `rdma stat show` outputs (`name value` pairs) and optional-counter lists."""
    text = path.read_text()
    names = set(re.findall(r"\b([a-z][a-z0-9_]*_[a-z0-9_]+) \d+\b", text))
    names |= set(re.findall(r"\b(cc_[a-z_]+)\b", text))
    return names


def json_fields(obj: Any) -> Iterator[tuple[str, str]]:
    """Every (field, value) of a (nested) COUNTERS_DB dump whose value is a string."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str):
                yield k, v
            else:
                yield from json_fields(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from json_fields(v)


SONIC_FILES = (
    "sonic-gnmi_COUNTERS_Ethernet68.txt",
    "sonic-gnmi_COUNTERS_Ethernet68_Queues.txt",
    "sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt",
    "sonic-utilities_mock_counters_db.json",
)


def load_json(name: str) -> Any:
    return json.loads((SWITCH / name).read_text())


#: SONiC port tables: (key prefix as redis spells it, table name in `TABLE/field`).
PORT_TABLE_KEYS = (("PORT_TABLE:", "PORT_TABLE"), ("PORT_TABLE|", "PORT_TABLE"), ("PORT|", "PORT"))


def sonic_port_fields() -> set[str]:
    """`TABLE/field` of every port-table entry in the real dumps (APPL_DB `PORT_TABLE:`, STATE_DB
    `PORT_TABLE|`, CONFIG_DB `PORT|`)."""
    docs = [*load_json("sonic-gnmi_db_dump_full_redis.json")]
    docs += [json.loads(f.read_text()) for f in sorted(SONIC_PORTS.glob("sonic-gnmi_*_DB_PORT*.json"))]
    out = set()
    for db in docs:
        for key, fields in db.items():
            for prefix, table in PORT_TABLE_KEYS:
                if key.startswith(prefix) and isinstance(fields, dict):
                    out |= {f"{table}/{name}" for name in fields}
    return out


def openconfig_ethernet_state() -> set[str]:
    """`ethernet/state/<leaf>` of openconfig-if-ethernet (port-speed, negotiated-port-speed...)."""
    module = yang_tree.parse(YANG / "openconfig-if-ethernet.yang")
    state = module.find("grouping", "ethernet-top").find("container", "ethernet").find("container", "state")
    return {f"ethernet/state/{leaf}" for leaf in yang_tree.leaves(module, state)}


def srlinux_ethernet() -> set[str]:
    """`ethernet/<leaf>` of SR Linux's /interface[name]/ethernet container (port-speed...)."""
    module = yang_tree.parse(YANG / "srl_nokia-interfaces.yang")
    ethernet = module.find("grouping", "interface-top").find("list", "interface").find("container", "ethernet")
    return {f"ethernet/{leaf}" for leaf in yang_tree.leaves(module, ethernet)}


def parse_cumulus_counters(path: Path) -> dict[str, str]:
    """`nv show interface <if> qos roce counters`: indented tree -> {'a/b/leaf': 'value text'}."""
    lines = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.endswith("qos roce counters")) + 3  # cmd, header, ---
    out: dict[str, str] = {}
    stack: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        depth = (len(line) - len(line.lstrip())) // 2
        parts = re.split(r"\s{2,}", line.strip())
        del stack[depth:]
        if len(parts) == 1:  # a container
            stack.append(parts[0])
        else:
            out["/".join([*stack, parts[0]])] = parts[1]
    return out


def cumulus_gnmi_paths(path: Path) -> list[str]:
    """Paths of the metric tables of NVIDIA's Cumulus Linux gNMI page, list keys removed, with a leading `/`."""
    paths = re.findall(r"^\|\s*`(/?(?:qos|interfaces)/[^`]+)`", path.read_text(), re.MULTILINE)
    return ["/" + re.sub(r"\[[^\]]*\]", "", p).lstrip("/") for p in paths]


def yang_paths(path: Path) -> list[str]:
    """xpaths of a `pyang -f flatten` csv, module prefixes removed."""
    rows = [r for r in csv.reader(ln for ln in path.read_text().splitlines() if not ln.startswith("#"))]
    return [re.sub(r"/[\w-]+:", "/", r[0]) for r in rows[1:] if r]


def relative(paths: list[str], anchors: tuple[str, ...]) -> set[str]:
    """Paths relative to the most specific anchor (list entry) they sit under."""
    out = set()
    for p in paths:
        hits = [a for a in anchors if p.startswith(a)]
        if hits:
            out.add(p[len(max(hits, key=len)) :])
    return out


OC_ANCHORS = ("/interfaces/interface/", "/qos/interfaces/interface/output/queues/queue/")
CUMULUS_ANCHORS = (*OC_ANCHORS, "/qos/interfaces/interface/")
SRL_ANCHORS = (
    "/interface/",
    "/qos/interfaces/interface/",
    "/qos/interfaces/interface/output/queues/queue/",
)


def mib_objects(path: Path) -> dict[str, str]:
    """OID -> object name from the MIB object table."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        cols = line.split("\t")
        if line.startswith("#") or len(cols) < 3:
            continue
        out[cols[2]] = cols[1]
    return out


def snmprec_objects(path: Path, oids: dict[str, str]) -> set[str]:
    """Object names of the OIDs in an snmprec walk (OID = object OID + instance index)."""
    names = set()
    for line in path.read_text().splitlines():
        oid = line.split("|", 1)[0]
        hits = [o for o in oids if oid.startswith(o + ".")]
        if hits:
            names.add(oids[max(hits, key=len)])
    return names


@cache
def real_names() -> dict[str, frozenset[str]]:
    """Per vendor: every raw name seen in the real files."""
    sysfs = parse_sysfs(RDMA / "procfs_fixture_mlx5_0_sysfs.txt")
    mibs = mib_objects(SNMP / "pfc_qos_mib_oid_table.tsv")
    return {
        "mlx5": frozenset(parse_ethtool(ETHTOOL / "ethq_mlx5_core_cx4_ethtool-S.txt")),
        "bnxt": frozenset(parse_ethtool(ETHTOOL / "ethq_bnxt_en_ethtool-S.txt")),
        "ice": frozenset(parse_ethtool(ETHTOOL / "ethq_ice_ethtool-S.txt")),
        "i40e": frozenset(parse_ethtool(ETHTOOL / "ethq_i40e_ethtool-S.txt")),
        "bnxt_rdma": frozenset(n for f in BNXT_RE_DUMPS for n in parse_sysfs(NIC / f)["hw_counters"]),
        "mlx5_rdma": frozenset(sysfs["hw_counters"])
        | parse_rdma_statistic(RDMA / "iproute2_commit_msgs_rdma_statistic_real_outputs.txt"),
        "ib_port": frozenset(sysfs["counters"]),
        "sonic_sai": frozenset(k for f in SONIC_FILES for k, _ in json_fields(load_json(f))),
        "sonic_db": frozenset(sonic_port_fields()),
        "cumulus": frozenset(parse_cumulus_counters(SWITCH / "cumulus_nvue_roce_counters_spectrum.txt"))
        | relative([p for f in CUMULUS_GNMI_DOCS for p in cumulus_gnmi_paths(CUMULUS / f)], CUMULUS_ANCHORS),
        "openconfig": frozenset(relative(yang_paths(SWITCH / "openconfig_state_counter_paths.csv"), OC_ANCHORS))
        | openconfig_ethernet_state(),
        "srlinux": frozenset(
            relative(yang_paths(SWITCH / "nokia_srlinux_v25.3.1_qos_pfc_state_paths.csv"), SRL_ANCHORS)
        )
        | srlinux_ethernet(),
        "snmp": frozenset(mibs.values()),
    }


def mapped_and_unmapped(vendor: str, names: set[str] | frozenset[str]) -> tuple[set[str], set[str]]:
    mapped = {n for n in names if resolve(vendor, n) is not None}
    return mapped, set(names) - mapped


def report_unmapped(label: str, unmapped: set[str]) -> None:
    """For the record (pytest -s): real names the catalog does not map, priorities folded."""
    folded = sorted({re.sub(r"(?<=[a-z_])\d+(?=[._a-z]|$)", "N", n) for n in unmapped})
    print(f"\n[{label}] {len(unmapped)} unmapped real names ({len(folded)} patterns): {', '.join(folded)}")
