"""Real SNMP agents to poll in tests, the benchmark and demos: Debian's `snmpd` and `snmpsim`.

* `Snmpd`: net-snmp's agent as a child process, from a config file written here (listen address,
  v2c communities, v3 users), optionally inside a network namespace (`Netns`), so the interfaces it
  reports are ones a test created and can push traffic through.
* `Snmpsim`: the SNMP simulator (PyPI `snmpsim`, LeXtudio's maintained line, on pysnmp 7) serving
  recorded walks (`<community>.snmprec` files in a directory) on loopback.
* `Netns`/`veth`/`link_subnet`: network namespaces and veth pairs with link-local /30s (root or
  CAP_NET_ADMIN); `netns_unavailable()` says why they cannot be made here, for a clear skip.
* `synthetic_snmprec()`: an IF-MIB + IEEE8021-PFC-MIB walk of N ports, for load and PFC tests.

Every process started here is stopped by its own handle (`stop()`, or the context manager); nothing
is killed by name. Traffic the tests send goes only to 127.0.0.1 or to addresses inside namespaces
they created.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from rocescope.collectors.snmp.agent import V3, PysnmpAgent, SnmpError, V2c, run_sync
from rocescope.errors import RocescopeError

__all__ = [
    "Netns",
    "Snmpd",
    "Snmpsim",
    "TestbedError",
    "V3User",
    "delete_link",
    "free_udp_port",
    "link_subnet",
    "netns_unavailable",
    "snmpd_path",
    "snmpsim_path",
    "synthetic_snmprec",
    "veth",
    "wait_answering",
]

_SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)
_counter = itertools.count()


class TestbedError(RocescopeError):
    """An agent or namespace for tests could not be set up."""

    __test__ = False  # not a pytest test class


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def snmpd_path() -> str | None:
    return shutil.which("snmpd") or next((p for p in ("/usr/sbin/snmpd",) if os.access(p, os.X_OK)), None)


def snmpsim_path() -> str | None:
    beside = Path(sys.executable).parent / "snmpsim-command-responder"
    return str(beside) if beside.exists() else shutil.which("snmpsim-command-responder")


def wait_answering(host: str, port: int, auth: V2c | V3, timeout_s: float = 15.0) -> None:
    """Block until an SNMP agent answers a GET at host:port (any answer counts), or raise TestbedError."""

    async def probe() -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            agent = PysnmpAgent(host, port, auth, timeout_s=0.5, retries=0)
            try:
                await agent.get([_SYS_UPTIME])
                return
            except SnmpError as exc:
                last = str(exc)
            finally:
                await agent.close()
            await asyncio.sleep(0.1)
        raise TestbedError(f"no SNMP agent answered at {host}:{port} within {timeout_s:g} s: {last}")

    run_sync(probe())


class _Process:
    """A child process whose output goes to a log file (agents can be chatty: a pipe would fill up)."""

    proc: subprocess.Popen[bytes] | None = None
    log_path: Path

    def _spawn(self, cmd: Sequence[str], env: dict[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _check_alive(self, what: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise TestbedError(f"{what} exited with {self.proc.returncode}: {self.output()[-2000:]}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass(frozen=True)
class V3User:
    """An snmpd v3 user (`createUser NAME SHA AUTHPASS AES PRIVPASS` + `rouser NAME authPriv`)."""

    name: str
    auth_pass: str
    priv_pass: str
    auth: str = "SHA"
    priv: str = "AES"

    def credentials(self) -> V3:
        return V3(self.name, self.auth_pass, self.priv_pass, auth_protocol="sha", priv_protocol="aes128")


@dataclass
class Snmpd(_Process):
    """net-snmp's snmpd on `address:port` (inside `netns` when given), with its own config and state dir."""

    workdir: Path
    address: str = "127.0.0.1"
    port: int = 0
    communities: Sequence[str] = ("public",)
    v3_users: Sequence[V3User] = (V3User("rsuser", "rsauthpass1", "rsprivpass1"),)
    netns: Netns | None = None
    extra_config: Sequence[str] = ()
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.log_path = self.workdir / "snmpd.log"
        if not self.port:
            self.port = free_udp_port() if self.netns is None else 16100 + next(_counter) % 800

    def config_text(self) -> str:
        lines = [f"agentaddress udp:{self.address}:{self.port}"]
        lines += [f"rocommunity {c} default" for c in self.communities]
        for u in self.v3_users:
            lines += [f"createUser {u.name} {u.auth} {u.auth_pass} {u.priv} {u.priv_pass}", f"rouser {u.name} authPriv"]
        lines += list(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self, timeout_s: float = 15.0) -> Snmpd:
        binary = snmpd_path()
        if binary is None:
            raise TestbedError("snmpd is not installed (Debian package `snmpd`; scripts/system-deps installs it)")
        state = self.workdir / "state"
        state.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "snmpd.conf"
        conf.write_text(self.config_text())
        # -f foreground, -Lo log to stdout, -C only our config; its persistent state (engine boots,
        # localized v3 keys) goes to our own directory; MIBS= keeps it from looking for MIB files.
        cmd = [binary, "-f", "-Lo", "-C", "-c", str(conf), "-p", str(self.workdir / "snmpd.pid")]
        if self.netns is not None:
            cmd = [*self.netns.prefix(), *cmd]
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(state), "MIBS": "", "MIBDIRS": str(state)}
        self._spawn(cmd, env)
        try:
            self._wait(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while "NET-SNMP version" not in self.output():
            self._check_alive("snmpd")
            if time.monotonic() > deadline:
                raise TestbedError(f"snmpd did not start within {timeout_s:g} s: {self.output()[-2000:]}")
            time.sleep(0.05)
        wait_answering(self.address, self.port, V2c(self.communities[0]), timeout_s)

    def __enter__(self) -> Snmpd:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Snmpsim(_Process):
    """snmpsim-command-responder serving `data_dir/*.snmprec` (community = file stem) on address:port.

    The files must be in OID order (snmpsim indexes them as they are). Responses carry at most 64
    varbinds: snmpsim 1.2's `--max-var-binds` sets an attribute pysnmp 7's responder no longer reads.
    """

    data_dir: Path
    address: str = "127.0.0.1"
    port: int = 0
    workdir: Path | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self.workdir = Path(self.workdir) if self.workdir is not None else self.data_dir.parent / "snmpsim"
        self.log_path = self.workdir / "snmpsim.log"
        self.port = self.port or free_udp_port(self.address)

    def start(self, timeout_s: float = 60.0) -> Snmpsim:
        binary = snmpsim_path()
        if binary is None:
            raise TestbedError("snmpsim-command-responder is not installed (PyPI `snmpsim`, in the `test` extra)")
        communities = sorted(p.stem for p in self.data_dir.glob("*.snmprec"))
        if not communities:
            raise TestbedError(f"{self.data_dir}: no .snmprec files to serve")
        assert self.workdir is not None
        cmd = [
            binary,
            f"--data-dir={self.data_dir}",
            f"--agent-udpv4-endpoint={self.address}:{self.port}",
            f"--cache-dir={self.workdir / 'cache'}",
            "--log-level=error",
        ]
        env = dict(os.environ)
        if os.geteuid() == 0:
            # As root snmpsim insists on dropping to a user that could not read a private temp dir;
            # this is a loopback test agent, so it may stay root.
            env["SNMPSIM_ALLOW_ROOT"] = "true"
        self._spawn(cmd, env)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                self._check_alive("snmpsim")
                try:
                    wait_answering(self.address, self.port, V2c(communities[0]), timeout_s=2.0)
                    break
                except TestbedError:
                    if time.monotonic() > deadline:
                        raise
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> Snmpsim:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- namespaces ----------------------------------------------------------------------------------


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise TestbedError(f"`ip {' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")


class Netns:
    """A network namespace made (and deleted) by us; its loopback is up."""

    def __init__(self, name: str | None = None):
        self.name = name or f"rs{os.getpid() % 100000}n{next(_counter)}"
        self.created = False

    def create(self) -> Netns:
        _ip("netns", "add", self.name)
        self.created = True
        _ip("-n", self.name, "link", "set", "lo", "up")
        return self

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def run(self, *cmd: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix(), *cmd], capture_output=True, text=True, timeout=timeout_s, check=False)

    def delete(self) -> None:
        if self.created:
            self.created = False
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)

    def __enter__(self) -> Netns:
        return self.create() if not self.created else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.delete()


def veth(
    a: tuple[str, Netns | None, str | None],
    b: tuple[str, Netns | None, str | None],
    prefix_len: int = 30,
) -> None:
    """A veth pair: each end as (interface name, namespace or None for ours, address or None), set up."""
    (a_name, a_ns, a_addr), (b_name, b_ns, b_addr) = a, b
    _ip("link", "add", a_name, "type", "veth", "peer", "name", b_name)
    for name, ns, addr in ((a_name, a_ns, a_addr), (b_name, b_ns, b_addr)):
        where: list[str] = [] if ns is None else ["-n", ns.name]
        if ns is not None:
            _ip("link", "set", name, "netns", ns.name)
        if addr is not None:
            _ip(*where, "addr", "add", f"{addr}/{prefix_len}", "dev", name)
        _ip(*where, "link", "set", name, "up")


def link_subnet() -> tuple[str, str]:
    """Two addresses of a /30 for a veth pair: link-local (169.254.16.0-169.254.127.255, clear of
    169.254.169.254 and friends), chosen by pid so concurrent runs do not collide, and not already
    on any interface of this namespace."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False).stdout
    start = (os.getpid() * 7 + next(_counter)) % 7168
    for k in range(7168):
        i = (start + k) % 7168
        third, fourth = 16 + i // 64, (i % 64) * 4
        a, b = f"169.254.{third}.{fourth + 1}", f"169.254.{third}.{fourth + 2}"
        if f" {a}/" not in used and f" {b}/" not in used:
            return a, b
    raise TestbedError("no free link-local /30 left for a veth pair")


def delete_link(name: str, netns: Netns | None = None) -> None:
    """Remove an interface (a veth end takes its peer with it); absent already is fine."""
    where = [] if netns is None else ["-n", netns.name]
    subprocess.run(["ip", *where, "link", "del", name], capture_output=True, check=False)


def netns_unavailable() -> str | None:
    """None when namespaces and veth pairs can be made here; otherwise why not."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = Netns()
    try:
        probe.create()
        veth((f"{probe.name}a", None, None), (f"{probe.name}b", probe, None))
    except TestbedError as exc:
        return f"network namespaces/veth pairs cannot be created here: {exc}"
    finally:
        probe.delete()
    return None


# --- synthetic walks -----------------------------------------------------------------------------


def synthetic_snmprec(
    ports: int = 64,
    *,
    first_ifindex: int = 1001,
    pfc: bool = True,
    seed: int = 0,
    names: Iterable[str] | None = None,
) -> str:
    """An snmprec walk of a switch with `ports` Ethernet ports: ifDescr/ifName, ifAdminStatus, ifOperStatus, the IF-MIB
    counters, ifHighSpeed (400G) and, with `pfc`, IEEE8021-PFC-MIB requests/indications. Values are
    deterministic in `seed`, so tests can compute what the collector must report."""
    port_names = list(names) if names is not None else [f"Ethernet{i * 8}" for i in range(ports)]
    lines: list[tuple[tuple[int, ...], str]] = []

    def add(oid: str, tag: int, value: object) -> None:
        lines.append((tuple(int(x) for x in oid.split(".")), f"{oid}|{tag}|{value}"))

    for i, name in enumerate(port_names[:ports]):
        idx = first_ifindex + i
        base = (seed + 1) * 1_000_000 + i * 1000
        add(f"1.3.6.1.2.1.2.2.1.2.{idx}", 4, name)
        add(f"1.3.6.1.2.1.2.2.1.7.{idx}", 2, 2 if i % 14 == 0 else 1)  # ifAdminStatus: some shut (down(2))
        add(f"1.3.6.1.2.1.2.2.1.8.{idx}", 2, 1 if i % 7 else 2)  # ifOperStatus: the shut ones and some more down
        for col in (13, 14, 19, 20):
            add(f"1.3.6.1.2.1.2.2.1.{col}.{idx}", 65, base + col)
        add(f"1.3.6.1.2.1.31.1.1.1.1.{idx}", 4, name)
        for col in (6, 7, 10, 11):
            add(f"1.3.6.1.2.1.31.1.1.1.{col}.{idx}", 70, base * 1_000_000 + col)
        add(f"1.3.6.1.2.1.31.1.1.1.15.{idx}", 66, 400_000)
        if pfc:
            for col in (2, 3):
                add(f"1.3.111.2.802.1.1.21.1.1.1.{col}.{idx}", 65, base + 100 + col)
    lines.sort()
    return "".join(text + "\n" for _, text in lines)


class GarbageAgent:
    """A UDP socket on loopback that answers every datagram with junk: truncated BER, half the request, a
    mangled copy, the request itself. A real socket, a broken 'agent' (tests of collectors that must survive it)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="garbage-snmp-agent", daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            for junk in (b"\x30\x03\x02\x01", data[: len(data) // 2], bytes(b ^ 0x5A for b in data), data):
                self.sock.sendto(junk, peer)
            self.answered += 1

    def __enter__(self) -> GarbageAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
