"""snmpd inside a network namespace the test creates: its veth counters must move with the traffic the
test sends, and an interface that appears between polls must be named (ifIndex -> ifName refresh).

Layout (all made here, all removed in `finally`):

    host (collector)  --veth mgmt-->  ns AGENT (snmpd on its mgmt end)  <--veth data--  ns PEER (ping -f)

Each veth gets a link-local /30 of its own (`link_subnet`).

Traffic goes only from PEER to AGENT's data address (ICMP echo, answered by AGENT): both ends live
in namespaces this test created. SNMP goes from the host to AGENT's management address.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from rocescope.collectors.snmp.agent import V2c
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.pipeline.batch import Batch
from rocescope.testbed.snmpd import (
    Netns,
    Snmpd,
    delete_link,
    link_subnet,
    netns_unavailable,
    snmpd_path,
    veth,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pysnmp.*")

PINGS = 2000
PAYLOAD = 1000
IP_PACKET = PAYLOAD + 8 + 20  # ICMP header + IPv4 header; the interface counts 14 more (Ethernet)


def value(batch: Batch | None, port: str, metric: str) -> float:
    assert batch is not None
    d = batch.data.to_pydict()
    hits = [v for p, m, v in zip(d["port"], d["metric"], d["value"], strict=True) if p == port and m == metric]
    assert len(hits) == 1, (port, metric, sorted(set(d["port"])))
    return float(hits[0])


def test_veth_counters_follow_traffic_and_new_interfaces_get_names(tmp_path: Path) -> None:
    if snmpd_path() is None:
        pytest.skip("Debian's snmpd is not installed (scripts/system-deps installs it as root)")
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = f"{os.getpid() % 10000}"
    mgmt_host, mgmt_agent = f"rsm{tag}h", f"rsm{tag}a"
    data_peer, data_agent = f"rsd{tag}p", f"rsd{tag}a"
    extra_a, extra_b = f"rsx{tag}a", f"rsx{tag}b"
    agent_ns, peer_ns = Netns(), Netns()
    snmpd: Snmpd | None = None
    try:
        agent_ns.create()
        peer_ns.create()
        host_addr, mgmt_addr = link_subnet()
        peer_addr, data_addr = link_subnet()
        veth((mgmt_host, None, host_addr), (mgmt_agent, agent_ns, mgmt_addr))
        veth((data_peer, peer_ns, peer_addr), (data_agent, agent_ns, data_addr))
        snmpd = Snmpd(tmp_path / "snmpd", address=mgmt_addr, netns=agent_ns).start()
        collector = SnmpCollector(
            [SnmpDevice("agent-ns", mgmt_addr, snmpd.port, V2c("public"), timeout_s=1.0, retries=1)],
            names_every=1000,  # only an unknown ifIndex may trigger a name walk in this test
        )
        before = collector.poll_once()["agent-ns"]
        assert before is not None, collector.health()
        assert {"lo", mgmt_agent, data_agent} <= set(before.data.column("port").to_pylist())
        assert value(before, data_agent, "oper_up") == 1.0
        rx0, tx0 = value(before, data_agent, "rx_bytes"), value(before, data_agent, "tx_bytes")

        ping = peer_ns.run("ping", "-f", "-q", "-c", str(PINGS), "-s", str(PAYLOAD), "-W", "1", data_addr)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        received = int(re.search(r"(\d+) received", ping.stdout).group(1))  # type: ignore[union-attr]
        assert received >= PINGS * 0.99
        sent_bytes, echoed_bytes = PINGS * IP_PACKET, received * IP_PACKET

        # snmpd caches interface counters for a few seconds: poll until they catch up
        deadline = time.monotonic() + 30
        while True:
            after = collector.poll_once()["agent-ns"]
            assert after is not None, collector.health()
            drx = value(after, data_agent, "rx_bytes") - rx0
            dtx = value(after, data_agent, "tx_bytes") - tx0
            if (drx >= sent_bytes and dtx >= echoed_bytes) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert drx >= sent_bytes, f"rx moved {drx:.0f} B, sent {sent_bytes} B"
        assert dtx >= echoed_bytes, f"tx moved {dtx:.0f} B, echoed {echoed_bytes} B"
        assert drx < sent_bytes * 1.5 and dtx < echoed_bytes * 1.5  # the echo traffic, not something else
        assert value(after, data_agent, "rx_unicast_packets") - value(before, data_agent, "rx_unicast_packets") >= 0
        walks = collector.metrics.value("rocescope_snmp_name_walks_total", target="agent-ns")

        # a new interface: its ifIndex is unknown, so the poll that meets it walks the names again
        veth((extra_a, agent_ns, None), (extra_b, agent_ns, None))
        deadline = time.monotonic() + 30
        while True:
            batch = collector.poll_once()["agent-ns"]
            assert batch is not None
            ports = set(batch.data.column("port").to_pylist())
            if {extra_a, extra_b} <= ports or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {extra_a, extra_b} <= ports
        assert not any(p.startswith("ifIndex:") for p in ports)
        assert collector.metrics.value("rocescope_snmp_name_walks_total", target="agent-ns") == walks + 1
    finally:
        if snmpd is not None:
            snmpd.stop()
        delete_link(mgmt_host)  # our end of the management veth; the namespaces take the rest with them
        agent_ns.delete()
        peer_ns.delete()
    assert not Path(f"/sys/class/net/{mgmt_host}").exists()
    assert not Path("/run/netns", agent_ns.name).exists() and not Path("/run/netns", peer_ns.name).exists()
