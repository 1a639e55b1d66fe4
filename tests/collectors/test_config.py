"""The `collectors:` section: validated by its owners, env: references read only when a collector builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocescope import config
from rocescope.collectors.config import CollectorsConfig
from rocescope.errors import ConfigError


def load(path: Path) -> CollectorsConfig:
    return CollectorsConfig.of(config.load(path))


README = Path(__file__).parents[2] / "README.md"
SECRETS = {"GNMI_PASSWORD": "gnmi-s3cret", "SNMP_COMMUNITY": "comm-s3cret", "SNMP_AUTH_KEY": "auth-s3cret-1"}


def _readme_example() -> str:
    """The complete example config of README's "Collector sections" (so the documented one stays valid)."""
    text = README.read_text()
    section = text[text.index("### Collector sections") :]
    return section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml"))]


def test_readme_collectors_example_loads_builds_and_redacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_readme_example())
    c = load(path)  # env: references are kept as references at load...
    assert (c.snmp.interval_s, c.pcap.ring_files, c.lldp.gnmi, c.jobs.in_cluster) == (10, 4, True, True)
    with pytest.raises(ConfigError, match=r"collectors\.gnmi\.targets\[0\] \(leaf-r0-01\)\.password names unset"):
        c.gnmi.build()  # ...and read only when the collector builds its targets
    for name, value in {**SECRETS, "SNMP_PRIV_KEY": "priv-s3cret-1"}.items():
        monkeypatch.setenv(name, value)
    leaf, spine = c.gnmi.build()
    assert (leaf.name, leaf.vendor, leaf.tls, leaf.password) == ("leaf-r0-01", "sonic", True, "gnmi-s3cret")
    assert [(p.path, p.interval) for p in spine.paths][1] == ("/qos/interfaces/interface/pfc", 1.0)
    v2, v3 = c.snmp.build()
    assert v2.auth.community == "comm-s3cret"  # type: ignore[union-attr]
    assert (v3.auth.user, v3.auth.priv_key) == ("rocescope", "priv-s3cret-1")  # type: ignore[union-attr]
    inline = tmp_path / "inline.yaml"
    inline.write_text("collectors:\n  snmp:\n    devices: [{name: s, host: h, community: inline-s3cret}]\n")
    dumped = config.dump(config.load(inline), load(inline))
    assert "inline-s3cret" not in dumped and "community: '**********'" in dumped


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "collectors:\n  snmp:\n    devices: [{name: x, host: h, colour: blue}]\n",
            "collectors.snmp.devices.0.colour: unknown key",
        ),
        (
            "collectors:\n  pcap:\n    ring_files: 1\n",
            "collectors.pcap.ring_files: Input should be greater than or equal to 2",
        ),
        (
            "collectors:\n  gnmi:\n    targets: [{name: a, address: b, vendor: junos}]\n",
            "collectors.gnmi.targets.0.vendor",
        ),
        ("collectors:\n  lldp:\n    gnmi_mode: twice\n", "collectors.lldp.gnmi_mode"),
        ("collectors:\n  nic:\n    interval_s: 0\n", "collectors.nic.interval_s: Input should be greater than 0"),
    ],
)
def test_bad_collector_sections_name_entry_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert expected in str(info.value)


def test_collector_entries_the_collector_refuses_are_named(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "collectors:\n  gnmi:\n    targets:\n"
        "      - {name: ok, address: 'a:1'}\n      - {name: spine-01, address: spine-01}\n"
    )
    with pytest.raises(ConfigError, match=r"collectors\.gnmi\.targets\[1\] \(spine-01\): .*not host:port"):
        load(path).gnmi.build()
    path.write_text("collectors:\n  snmp:\n    devices: [{name: a, host: h}, {name: a, host: i}]\n")
    with pytest.raises(ConfigError, match=r"collectors\.snmp\.devices: names must be unique"):
        load(path).snmp.build()


def test_environment_overrides_a_collector_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("collectors:\n  snmp:\n    interval_s: 10\n")
    monkeypatch.setenv("ROCESCOPE_COLLECTORS__SNMP__INTERVAL_S", "2.5")
    assert load(path).snmp.interval_s == 2.5
