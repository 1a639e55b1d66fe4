"""SNMP collector benchmark: CPU per device poll, extrapolated to 100 switches x 64 ports every 10 s.

N switches of P ports are polled concurrently (`SnmpCollector.poll_all`: pysnmp over UDP on this
machine) for R rounds after one warm-up round (the warm-up creates engines and walks ifName). Only
this process's CPU is counted (`time.process_time`); the agent runs in its own process. Agents:

* `snmpd`: Debian's snmpd (a C agent, as on a switch) inside a network namespace holding P
  interfaces (lo, a management veth and veth ends), N communities on the one agent. It has no PFC
  MIB, so a port gives 10 values (the IF-MIB set). Needs root/CAP_NET_ADMIN.
* `snmpsim`: one snmpsim-command-responder serving N synthetic switch walks (community = device),
  P ports each with the IF-MIB columns and IEEE8021-PFC-MIB counters (12 values a port), at most 64
  varbinds a response. Pure Python like us, so on a 2-core machine it competes for CPU with the
  collector and inflates the figure (the CPU counted is still only ours).
* `auto` (default): snmpd where namespaces can be made, else snmpsim.

Cost is per value (pyasn1's BER decoding inside pysnmp is most of it), so the extrapolation is linear:
CPU per value x 100 switches x 64 ports x the values a port gives per poll in the collector's default
poll of a PFC-capable switch (9 IF-MIB columns, ifHighSpeed every 6th poll, 2 IEEE PFC: 11.17) / 10 s.
Per-round CPU is taken as the median of the rounds (other tenants of a shared machine add noise).

    python bench/snmp.py [--devices N] [--ports P] [--rounds R] [--agent auto|snmpd|snmpsim]

The last two lines are the headline: `snmp_poll_cpu_per_device: X ms` (CPU per poll of a 64-port
PFC-capable switch, default objects) and `snmp_core_share_100x64_10s: Y %` (100 of them every 10 s, as a
share of one core).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rocescope.collectors.snmp.agent import EnginePool, PysnmpAgent, SnmpAgent, V2c, run_sync
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.testbed.snmpd import (
    Netns,
    Snmpd,
    Snmpsim,
    delete_link,
    link_subnet,
    netns_unavailable,
    snmpd_path,
    synthetic_snmprec,
    veth,
)


def values_per_port() -> float:
    """Values a port gives per poll, on average, in the collector's default poll of a PFC-capable switch:
    the IF-MIB columns (ifHighSpeed only every `slow_every` polls) and IEEE8021-PFC-MIB's two."""
    c = SnmpCollector([])
    slow = len(c.slow_objects)
    return len(c.objects) - slow + slow / c.slow_every + len(c.optional_objects)


@contextlib.contextmanager
def snmpsim_agent(work: Path, devices: int, ports: int) -> Iterator[tuple[str, int]]:
    data = work / "data"
    data.mkdir()
    for i in range(devices):
        (data / f"dev{i}.snmprec").write_text(synthetic_snmprec(ports, pfc=True, seed=i))
    with Snmpsim(data, workdir=work / "run") as sim:
        yield "127.0.0.1", sim.port


@contextlib.contextmanager
def snmpd_agent(work: Path, devices: int, ports: int) -> Iterator[tuple[str, int]]:
    reason = netns_unavailable()
    if reason is not None:
        raise SystemExit(f"--agent snmpd needs network namespaces: {reason}")
    ns = Netns()
    host_end = f"rsbench{ns.name[-4:]}"
    host_addr, agent_addr = link_subnet()
    try:
        ns.create()
        veth((host_end, None, host_addr), ("mgmt0", ns, agent_addr))
        for i in range((ports - 2) // 2):  # lo + mgmt0 + pairs of veth ends = P interfaces
            veth((f"p{i}a", ns, None), (f"p{i}b", ns, None))
        with Snmpd(work, address=agent_addr, netns=ns, communities=[f"dev{i}" for i in range(devices)]) as agent:
            yield agent_addr, agent.port
    finally:
        delete_link(host_end)
        ns.delete()


def measure(host: str, port: int, devices: int, rounds: int) -> dict[str, float]:
    agents: list[PysnmpAgent] = []

    def factory(device: SnmpDevice, engines: EnginePool) -> SnmpAgent:
        agent = PysnmpAgent(device.host, device.port, device.auth, timeout_s=5.0, retries=1, engines=engines)
        agents.append(agent)
        return agent

    collector = SnmpCollector(
        [SnmpDevice(f"sw{i}", host, port, V2c(f"dev{i}"), timeout_s=5.0) for i in range(devices)],
        agent_factory=factory,
    )

    async def run() -> dict[str, float]:
        try:
            warm = await collector.poll_all()
            failed = [name for name, batch in warm.items() if batch is None]
            if failed:
                raise SystemExit(f"warm-up poll failed for {failed}: {collector.health()[failed[0]].last_error}")
            requests0 = sum(a.requests for a in agents)
            varbinds0 = sum(a.varbinds for a in agents)
            rows = 0
            cpus: list[float] = []
            wall0 = time.perf_counter()
            for _ in range(rounds):
                cpu0 = time.process_time()
                batches = await collector.poll_all()
                cpus.append(time.process_time() - cpu0)
                rows += sum(b.num_rows for b in batches.values() if b is not None)
            wall = time.perf_counter() - wall0
            polls = devices * rounds
            ok = sum(collector.health()[n].up is True for n in collector.devices)
            return {
                "cpu_ms": statistics.median(cpus) / devices * 1000,
                "cpu_ms_min": min(cpus) / devices * 1000,
                "cpu_ms_max": max(cpus) / devices * 1000,
                "wall_s_per_round": wall / rounds,
                "rows": rows / polls,
                "requests": (sum(a.requests for a in agents) - requests0) / polls,
                "varbinds": (sum(a.varbinds for a in agents) - varbinds0) / polls,
                "ok": ok,
            }
        finally:
            await collector.aclose()

    return run_sync(run())


def decode_floor_us(varbinds: int = 100, repeat: int = 50) -> float:
    """CPU of pyasn1 decoding one Counter64 varbind of a v2c response, right now on this machine: the
    floor under any pysnmp poller, printed so the figures can be read against the machine's speed."""
    from pyasn1.codec.ber import decoder, encoder
    from pysnmp.proto import rfc1902
    from pysnmp.proto.api import v2c

    msg, pdu = v2c.Message(), v2c.ResponsePDU()
    v2c.apiMessage.set_defaults(msg)
    v2c.apiPDU.set_defaults(pdu)
    oid = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6)
    v2c.apiPDU.set_varbinds(
        pdu, [(rfc1902.ObjectName((*oid, 1000 + i)), rfc1902.Counter64(10**12 + i)) for i in range(varbinds)]
    )
    v2c.apiMessage.set_pdu(msg, pdu)
    wire, spec = encoder.encode(msg), v2c.Message()
    cpu0 = time.process_time()
    for _ in range(repeat):
        decoder.decode(wire, asn1Spec=spec)
    return (time.process_time() - cpu0) / repeat / varbinds * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=20, help="switches polled concurrently")
    ap.add_argument("--ports", type=int, default=64, help="ports per switch")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds (after one warm-up)")
    ap.add_argument("--agent", choices=("auto", "snmpd", "snmpsim"), default="auto")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    kind = args.agent
    if kind == "auto":
        kind = "snmpd" if snmpd_path() is not None and netns_unavailable() is None else "snmpsim"
    with tempfile.TemporaryDirectory(prefix="rocescope-bench-snmp-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        agent = (
            snmpsim_agent(work, args.devices, args.ports)
            if kind == "snmpsim"
            else snmpd_agent(work, args.devices, args.ports)
        )
        with agent as (host, port):
            started = time.perf_counter() - t0
            r = measure(host, port, args.devices, args.rounds)
    per_value_us = r["cpu_ms"] / r["rows"] * 1000
    per_port = values_per_port()
    per_device_ms = per_value_us * 64 * per_port / 1000
    share = per_device_ms / 1000 * 100 / 10 * 100
    print(f"agent: {kind} ({started:.1f} s to start), {args.devices} devices x {args.ports} ports, {r['ok']} up")
    print(
        f"per device poll: {r['rows']:.0f} values ({r['rows'] / args.ports:.1f}/port), {r['requests']:.1f} requests, "
        f"{r['varbinds']:.0f} varbinds received"
    )
    print(
        f"CPU per device poll: {r['cpu_ms']:.1f} ms median of {args.rounds} rounds "
        f"(min {r['cpu_ms_min']:.1f}, max {r['cpu_ms_max']:.1f}) = {per_value_us:.0f} us per value"
    )
    print(f"round of {args.devices} concurrent polls: {r['wall_s_per_round']:.2f} s wall")
    print(f"pyasn1 BER decode alone, this machine now: {decode_floor_us():.0f} us per varbind (the pysnmp floor)")
    print(
        f"extrapolated: 64 ports x {per_port:.2f} values = {per_device_ms:.1f} ms per switch poll; "
        f"100 switches every 10 s = {per_device_ms * 100 / 1000:.1f} s CPU per 10 s"
    )
    print(f"snmp_poll_cpu_per_device: {per_device_ms:.1f} ms")
    print(f"snmp_core_share_100x64_10s: {share:.0f} %")


if __name__ == "__main__":
    main()
