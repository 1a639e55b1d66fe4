"""SnmpCollector over recorded walks and scripted agents: slow objects every nth poll, objects it does
not know refused, devices from config mappings, and a device's health through a failure streak."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocescope.collectors.snmp.agent import V3, SnmprecAgent, SnmpTimeout, V2c, Value, parse_snmprec, run_sync
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.collectors.snmp.objects import Oid
from rocescope.testbed.snmpd import synthetic_snmprec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pysnmp.*")


def test_slow_objects_are_read_every_nth_poll(tmp_path: Path) -> None:
    path = tmp_path / "sw.snmprec"
    path.write_text(synthetic_snmprec(2, pfc=False))
    agent = SnmprecAgent.from_file(path)
    collector = SnmpCollector([SnmpDevice("sw", "file")], agent_factory=lambda d, e: agent, slow_every=3)

    async def polls(n: int) -> list[int]:
        out = []
        for _ in range(n):
            batch = await collector.poll_device("sw")
            assert batch is not None
            out.append(batch.data.column("metric").to_pylist().count("port_speed_bps"))
        return out

    assert run_sync(polls(7)) == [2, 0, 0, 2, 0, 0, 2]
    every = SnmpCollector([SnmpDevice("sw", "file")], agent_factory=lambda d, e: agent, slow_every=1)
    batches = [every.poll_once()["sw"] for _ in range(3)]
    assert all(b is not None and b.data.column("metric").to_pylist().count("port_speed_bps") == 2 for b in batches)


def test_unknown_object_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown SNMP object"):
        SnmpCollector([SnmpDevice("x", "h")], objects=("ifHCInOctetz",))


def test_device_from_config_mapping() -> None:
    spec = {"name": "leaf1", "host": "10.0.0.1", "version": "v3", "user": "mon", "auth_key": "authpass1"}
    v3 = SnmpDevice.from_mapping({**spec, "priv_key": "x" * 8})
    assert isinstance(v3.auth, V3) and v3.auth.level == "authPriv" and v3.auth.priv_protocol == "aes128"
    assert "authpass1" not in repr(v3) and "xxxxxxxx" not in repr(v3)  # secrets stay out of logs
    v2 = SnmpDevice.from_mapping({"name": "leaf2", "host": "10.0.0.2", "community": "s3cret", "timeout_s": 1})
    assert v2.auth == V2c("s3cret") and v2.timeout_s == 1.0 and v2.port == 161 and "s3cret" not in repr(v2)
    assert v2.deadline_s == 4 * 1.0 * 2
    for bad in (
        {"name": "x", "host": "h", "bogus": 1},
        {"name": "x", "host": "h", "version": "v1"},
        {"name": "x", "host": "h", "version": "v3", "user": "u", "auth_key": "short"},
        {"name": "x", "host": "h", "version": "v3", "user": "u", "auth_key": "authpass1", "auth_protocol": "sha1"},
        {"name": "x", "host": "h", "port": 0},
        {"name": "x", "host": "h", "timeout_s": "soon"},
        {"name": "", "host": "h"},
    ):
        with pytest.raises(ValueError):
            SnmpDevice.from_mapping(bad)


class FlakyAgent(SnmprecAgent):
    """A recorded walk that times out while `down` is set, as a device that stopped answering."""

    down = False

    async def walk(self, roots: Sequence[Oid]) -> list[tuple[Oid, Value]]:
        if self.down:
            raise SnmpTimeout(f"{self.description}: no response within 1 s x 2 tries")
        return await super().walk(roots)


def test_health_through_a_failure_streak(caplog: pytest.LogCaptureFixture) -> None:
    agent = FlakyAgent(parse_snmprec(synthetic_snmprec(2, pfc=True)).rows, "udp:10.0.0.9:161 v2c")
    devices = [SnmpDevice("sw", "10.0.0.9"), SnmpDevice("never", "10.0.0.10")]
    collector = SnmpCollector(devices, agent_factory=lambda d, e: agent)
    m = collector.metrics

    async def poll(times: int) -> None:
        for _ in range(times):
            await collector.poll_device("sw")

    caplog.set_level(logging.INFO, logger="rocescope.collectors.snmp.collector")
    run_sync(poll(1))
    first = collector.health()["sw"]
    assert first.up and first.polls == 1 and first.values == m.value("rocescope_snmp_values_total", target="sw") > 0
    assert collector.health()["never"].up is False  # listed before its first poll, as down
    agent.down = True
    run_sync(poll(3))
    down = collector.health()["sw"]
    assert not down.up and down.failures == down.consecutive_failures == 3 and down.polls == 1
    assert down.last_error == "poll failed: udp:10.0.0.9:161 v2c: no response within 1 s x 2 tries"
    assert down.down_since_ts is not None and down.last_success_ts == first.last_success_ts
    assert m.value("rocescope_snmp_target_up", target="sw") == 0
    assert m.value("rocescope_snmp_consecutive_failures", target="sw") == 3
    assert m.value("rocescope_snmp_poll_failures_total", target="sw") == 3
    agent.down = False
    run_sync(poll(1))
    again = collector.health()["sw"]
    assert again.up and again.consecutive_failures == 0 and again.down_since_ts is None and again.polls == 2
    assert not down.up  # health() gave a snapshot
    assert m.value("rocescope_snmp_target_up", target="sw") == 1
    assert m.value("rocescope_snmp_consecutive_failures", target="sw") == 0
    assert m.value("rocescope_snmp_poll_seconds_count") == 5
    said = [r.getMessage() for r in caplog.records if r.name == "rocescope.collectors.snmp.collector"]
    assert [s for s in said if "poll failed" in s] == [f"snmp sw: {down.last_error}"]  # one line for the streak
    assert [s for s in said if "read fine again" in s] == ["snmp sw: read fine again"]
