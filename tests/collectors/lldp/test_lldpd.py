"""lldpcli in every format (`-f json`, `json0`, `xml`, `keyvalue`, and the default `plain`) gives the same
neighbors: from the outputs a real lldpd printed (fixtures), and live from real lldpd daemons in network
namespaces this test creates and removes (LLDP frames cross veth pairs only, nothing leaves the namespaces)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocescope.collectors.lldp.parse import Neighbor, parse_lldpcli
from rocescope.collectors.lldp.sources import HostLldp, LldpcliCommand
from rocescope.errors import DecodeError
from rocescope.testbed.snmpd import Netns, netns_unavailable

FIXTURES = Path(__file__).parents[2] / "fixtures" / "lldp"
FORMATS = ("json", "json0", "xml", "keyvalue", "plain")
GPU_NEIGHBORS = [
    Neighbor("gpu-001", "eth0", "leaf-01.dc1.example.com", "Ethernet8"),  # port id a MAC: the description names it
    Neighbor("gpu-001", "eth1", "leaf-02", "swp3"),  # port id subtype ifname
]
LEAF_02_NEIGHBORS = [Neighbor("leaf-02", "swp3", "gpu-001", "eth1")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_structured_format_lldpd_prints_gives_the_same_neighbors(fmt: str) -> None:
    out = (FIXTURES / f"lldpd_1.0.16_netns_gpu-001.{fmt}").read_bytes()
    assert parse_lldpcli(out, "gpu-001") == (GPU_NEIGHBORS, 0)
    for leaf_fmt in ("keyvalue", "plain"):  # plain without details: the same lines, fewer of them
        leaf = (FIXTURES / f"lldpd_1.0.16_netns_leaf-02.{leaf_fmt}").read_text()
        assert parse_lldpcli(leaf, "leaf-02") == (LEAF_02_NEIGHBORS, 0)


def test_keyvalue_and_xml_edge_cases() -> None:
    kv = "\n".join(
        [
            "lldp.eth0.100.via=LLDP",  # a VLAN interface: its name holds a dot
            "lldp.eth0.100.chassis.local=leaf-07",  # no system name: the chassis id names the neighbor
            "lldp.eth0.100.port.local=Ethernet1/3",
            "lldp.eth1.via=LLDP",
            "lldp.eth1.chassis.name=leaf-08",
            "lldp.eth1.port.mac=aa:bb:cc:00:00:04",  # a MAC port id: the description names the port
            "lldp.eth1.port.descr=Ethernet4",
            "lldp.eth2.via=LLDP",
            "lldp.eth2.chassis.mac=aa:bb:cc:dd:ee:ff",  # neither a name nor a port: counted, not guessed
        ]
    )
    assert parse_lldpcli(kv, "gpu-009") == (
        [
            Neighbor("gpu-009", "eth0.100", "leaf-07", "Ethernet1/3"),
            Neighbor("gpu-009", "eth1", "leaf-08", "Ethernet4"),
        ],
        1,
    )
    assert parse_lldpcli("\n", "gpu-009") == ([], 0)  # keyvalue of a host without neighbors prints nothing
    deep = "<lldp>" + "<interface>" * 5000 + "</interface>" * 5000 + "</lldp>"
    for bad in ("<lldp><interface", "<html><body>502</body></html>", "lldp-ish=1\nnothing=here", deep):
        with pytest.raises(DecodeError, match="gpu-009"):
            parse_lldpcli(bad, "gpu-009")


# --- live: real lldpd daemons ----------------------------------------------------------------------------

_SKIP = None if shutil.which("lldpd") and shutil.which("lldpcli") else "lldpd is not installed"


@pytest.fixture
def fabric() -> Iterator[dict[str, tuple[Netns, Path]]]:
    """gpu-001 (eth0, eth1) cabled to leaf-01.dc1.example.com (Ethernet8) and leaf-02 (swp3), each running
    lldpd; torn down whatever happens."""
    why = _SKIP or netns_unavailable()
    if why:
        pytest.skip(why)
    # lldpd runs its configuration through lldpcli as its unprivileged user: the sockets' and configurations'
    # directory must be one that user can enter (pytest's tmp_path is root's alone)
    workdir = Path(tempfile.mkdtemp(prefix="rocescope-lldpd-"))
    workdir.chmod(0o755)
    configs = {
        "gpu": ["configure system hostname gpu-001"],
        "leaf1": ["configure system hostname leaf-01.dc1.example.com"],
        "leaf2": ["configure system hostname leaf-02", "configure lldp portidsubtype ifname"],
    }
    spaces = {name: Netns() for name in configs}
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for ns in spaces.values():
            ns.create()
        tag = spaces["gpu"].name
        for i, (gpu_if, leaf, leaf_if) in enumerate((("eth0", "leaf1", "Ethernet8"), ("eth1", "leaf2", "swp3"))):
            a, b = f"{tag}a{i}", f"{tag}b{i}"  # unique in our namespace, renamed in theirs
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            for end, ns, name in ((a, spaces["gpu"], gpu_if), (b, spaces[leaf], leaf_if)):
                _ip("link", "set", end, "netns", ns.name)
                _ip("-n", ns.name, "link", "set", end, "name", name)
                _ip("-n", ns.name, "link", "set", name, "up")
        out = {}
        for name, lines in configs.items():
            conf, sock = workdir / f"{name}.conf", workdir / f"{name}.sock"
            conf.write_text("\n".join([*lines, "configure lldp tx-interval 1"]) + "\n")
            argv = [*spaces[name].prefix(), "lldpd", "-d", "-u", str(sock), "-O", str(conf)]
            log = (workdir / f"{name}.log").open("wb")
            daemons.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            out[name] = (spaces[name], sock)
        yield out
    finally:
        for d in daemons:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(d.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.wait(10)
        for ns in spaces.values():
            ns.delete()
        shutil.rmtree(workdir, ignore_errors=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _lldpcli(ns: Netns, sock: Path, fmt: str) -> LldpcliCommand:
    return LldpcliCommand([*ns.prefix(), "lldpcli", "-u", str(sock), "-f", fmt, "show", "neighbors", "details"])


def _settled(ns: Netns, sock: Path, device: str, expected: list[Neighbor]) -> tuple[list[Neighbor], int]:
    """What lldpcli reports once it is what `expected` says, or after 30 s. A daemon's first frames leave
    before its configuration is applied (they carry the machine's hostname), then it sends every second."""
    deadline = time.monotonic() + 30
    while True:
        try:
            found = HostLldp(device, _lldpcli(ns, sock, "json")).neighbors()
        except DecodeError:  # the control socket is not there yet
            found = ([], 0)
        if found == (expected, 0) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_lldpcli_of_real_lldpd_daemons_in_every_format(fabric: dict[str, tuple[Netns, Path]]) -> None:
    gpu, leaf2 = fabric["gpu"], fabric["leaf2"]
    assert _settled(*gpu, "gpu-001", GPU_NEIGHBORS) == (GPU_NEIGHBORS, 0)
    assert _settled(*leaf2, "leaf-02", LEAF_02_NEIGHBORS) == (LEAF_02_NEIGHBORS, 0)
    for fmt in FORMATS:
        assert HostLldp("gpu-001", _lldpcli(*gpu, fmt)).neighbors() == (GPU_NEIGHBORS, 0), fmt
        assert HostLldp("leaf-02", _lldpcli(*leaf2, fmt)).neighbors() == (LEAF_02_NEIGHBORS, 0), fmt


@settings(max_examples=200, deadline=None)
@given(
    fmt=st.sampled_from(FORMATS),
    cut=st.integers(0, 5000),
    garble=st.lists(st.tuples(st.integers(0, 5000), st.characters()), max_size=6),
)
def test_fuzz_damaged_lldpcli_output_raises_only_decode_errors(
    fmt: str, cut: int, garble: list[tuple[int, str]]
) -> None:
    """Cut or garbled output of any format: neighbors or a DecodeError naming the device, nothing else."""
    text = list((FIXTURES / f"lldpd_1.0.16_netns_gpu-001.{fmt}").read_text()[:cut])
    for at, ch in garble:
        if text:
            text[at % len(text)] = ch
    try:
        found, bad = parse_lldpcli("".join(text), "gpu-001")
    except DecodeError as exc:
        assert "gpu-001" in str(exc)
        return
    assert bad >= 0 and all(n.device == "gpu-001" and n.port and n.peer_device for n in found)
