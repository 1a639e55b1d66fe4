"""Deployment profiles: what a real fabric's switches, NICs and LLDP make of what the simulator models.

The engine knows everything at every poll; real gear does not. A profile says, per switch OS + ASIC and
per NIC driver, what telemetry a deployment actually gets, and `rocescope.sim.gear` applies it to a run:

* names: the switch OS's port names (`Ethernet0`, `Ethernet1/1`, `ethernet-1/1`, `swp1`, `swp1s0`) and
  the raw counter names, looked up in `rocescope.catalog` through the profile's vendor keys in order
  (`raw_names` for the few a vendor key lacks, such as Arista's ARISTA-PFC-MIB objects); the NIC
  driver's names (`mlx5` ethtool + `mlx5_N` hw_counters, or `bnxt` ethtool + `bnxt_reN` hw_counters);
* what exists: each switch metric group lists the canonical metrics the platform reports at all; a
  metric the model has but no group lists is never reported (no pause duration on Broadcom);
* cadence: each group is read every `every` (SONiC `counterpoll`: ports 1 s, queues and priority groups
  10 s, watermarks 60 s; the PFC watchdog every 200 ms); a watermark is the peak since the last read;
* clocks: with `device_phase`, each device reads each group at its own seeded phase within the
  interval and stamps it with its own clock, the groups `offset_ms` apart and the paths of a group
  `path_spread_ms` apart; NIC collectors run on their own phase; hosts' clocks may be skewed by up to
  `host_skew_max` (at most 0.5 s);
* topology knowledge: LLDP from both sides, the hosts only (lldpd on GPU nodes) or the switches only,
  and the port id a switch advertises (its name, or SONiC's alias `etpN`);
* PFC watchdog: on, off or as the scenario says; detection and restoration times, action (the engine
  models the physics).

A profile is a small YAML file in `profiles/` (shipped: `ideal`, `sonic-spectrum`, `sonic-broadcom`,
`arista-eos`, `srlinux`, `cumulus`) or a path. Everything defaults to `ideal`: every metric at every
poll, one shared clock, the simulator's own names, LLDP from both sides: today's fast path exactly.
Sub-poll cadences (the watchdog's 200 ms) are read at the poll: the fast path snapshots once per poll.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from rocescope.catalog import METRICS_BY_NAME, VENDORS
from rocescope.config import read_yaml
from rocescope.errors import SimError
from rocescope.units import parse_duration

PROFILE_DIR = "profiles"
DEFAULT_PROFILE = "ideal"

Seconds = Annotated[float, BeforeValidator(parse_duration)]
#: Switch metric groups, as SONiC's counterpoll splits them (flex counter groups); `pfc` where PFC counters
#: come apart from the port counters (Arista: ARISTA-PFC-MIB over SNMP).
GroupName = Literal["ports", "pfc", "queues", "priority_groups", "watermarks", "pfc_watchdog"]
GROUPS: tuple[GroupName, ...] = ("ports", "pfc", "queues", "priority_groups", "watermarks", "pfc_watchdog")
#: The NIC's counters form one group of their own (a collector per host).
NIC_GROUP = "nic"
PortNaming = Literal["sonic", "eos", "srlinux", "cumulus"]
LldpSide = Literal["both", "hosts", "switches"]
NicDriver = Literal["mlx5", "bnxt"]
#: Catalog vendors of each NIC driver: (ethtool -S names on the netdev, RDMA hw_counters names; "": none in
#: the catalog, the profile's `rdma_names` say them), and the RDMA device name (`mlx5_0`, `bnxt_re0`) of rail N.
NIC_DRIVERS: dict[str, tuple[str, str, str]] = {
    "mlx5": ("mlx5", "mlx5_rdma", "mlx5_{n}"),
    "bnxt": ("bnxt", "", "bnxt_re{n}"),
}
MAX_HOST_SKEW_S = 0.5
#: A metric a driver reports -> the model's counters it sums (bnxt_re's `rx_cnp_pkts` counts every CNP
#: received: the model's handled + ignored).
DERIVED: dict[str, tuple[str, ...]] = {"cnp_received": ("cnp_handled", "cnp_ignored")}


class ProfileError(SimError):
    """A profile that is missing, unreadable or invalid."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _known_metrics(metrics: tuple[str, ...]) -> tuple[str, ...]:
    unknown = [m for m in metrics if m not in METRICS_BY_NAME]
    if unknown:
        raise ValueError(f"not in the catalog: {unknown}")
    return metrics


class Group(_Model):
    """One metric group of a switch: which metrics exist, how often the device reads them, and when it stamps."""

    every: Seconds = Field(gt=0)
    #: Stamp offset of this group's notifications after the device's read (milliseconds).
    offset_ms: float = Field(0.0, ge=0, le=500)
    metrics: tuple[str, ...] = Field(min_length=1)
    #: Per-priority metrics only for these priorities (the PFC watchdog watches lossless queues; NVUE's RoCE
    #: counters count the RoCE class); None: every priority the model reports.
    priorities: tuple[int, ...] | None = None

    @model_validator(mode="after")
    def _metrics(self) -> Group:
        _known_metrics(self.metrics)
        if self.priorities is not None and any(not 0 <= p <= 7 for p in self.priorities):
            raise ValueError("priorities are 0..7")
        return self


class PfcWatchdog(_Model):
    """The switches' PFC watchdog (SONiC default: on, polled every 200 ms, 200 ms detection and restoration,
    action drop). The engine models it (`rocescope.sim.pfcwd`); the profile turns it on or off."""

    #: None: as the scenario's `params` say (an operator's own setting); True/False: the platform's default.
    enabled: bool | None = None
    detection: Seconds = Field(0.2, gt=0)
    restoration: Seconds = Field(0.2, gt=0)
    poll: Seconds = Field(0.2, gt=0)
    action: Literal["drop", "forward", "alert"] = "drop"

    def engine_params(self) -> dict[str, object]:
        """`EngineParams` overrides that set the watchdog as the profile says (none when it leaves it)."""
        if self.enabled is None:
            return {}
        if not self.enabled:
            return {"pfcwd": False}
        return {
            "pfcwd": True,
            "pfcwd_detection_s": self.detection,
            "pfcwd_restoration_s": self.restoration,
            "pfcwd_poll_s": self.poll,
            "pfcwd_action": self.action,
        }


class SwitchSide(_Model):
    """How the switches name things, what they report, and how often."""

    #: Free text (e.g. `SONiC 202405 on Spectrum-4`).
    platform: str = "simulated (SONiC names)"
    naming: PortNaming = "sonic"
    #: Host-facing ports per front-panel port (Cumulus `swp1s0`, `swp1s1` on a 2x breakout).
    breakout: int = Field(1, ge=1, le=8)
    #: What LLDP advertises as the port id: the port's name, or its alias (SONiC: `etpN`).
    lldp_port_id: Literal["name", "alias"] = "name"
    #: Catalog vendor keys for raw names, first match wins.
    vendors: tuple[str, ...] = ("sonic_sai", "openconfig", "snmp")
    #: metric -> raw name, for metrics the catalog has no name for under `vendors`.
    raw_names: dict[str, str] = Field(default_factory=dict)
    #: None: every metric the model has, at every poll (ideal).
    groups: dict[GroupName, Group] | None = None
    pfc_watchdog: PfcWatchdog = PfcWatchdog()
    #: What the switch's gNMI target sends under SAMPLE on the served path: `reads`, each read once at its own
    #: stamp (a target that suppresses redundant values); `current`, every subscribed path's current value at
    #: every sample interval, read or not, stamped with the send time (sonic-gnmi: SAMPLE reads COUNTERS_DB on
    #: its own timer, so a 10 s queue counter sampled every second is nine re-sends and one change);
    #: `current_read_stamp`, the same values stamped with when they were read (a target that stamps a value with
    #: its last update: the store gets duplicates of one timestamp).
    sample: Literal["reads", "current", "current_read_stamp"] = "reads"

    @model_validator(mode="after")
    def _check(self) -> SwitchSide:
        bad = sorted(set(self.vendors) - set(VENDORS))
        if bad:
            raise ValueError(f"vendors: unknown catalog vendor(s) {bad}")
        _known_metrics(tuple(self.raw_names))
        if self.groups is not None:
            seen: dict[str, str] = {}
            for name, group in self.groups.items():
                for m in group.metrics:
                    if m in seen:
                        raise ValueError(f"groups: {m} is in both {seen[m]} and {name}")
                    seen[m] = name
                    if raw_name(m, self.vendors, self.raw_names) is None:
                        raise ValueError(f"groups.{name}: no raw name for {m} under {list(self.vendors)} (raw_names)")
        return self

    def group_of(self, metric: str) -> str | None:
        """The group that reports `metric`; None if the platform does not report it at all."""
        if self.groups is None:
            return "ports"
        return next((name for name, g in self.groups.items() if metric in g.metrics), None)


class NicSide(_Model):
    """The host NICs: driver (its names), what it reports, and the collector's interval."""

    driver: NicDriver = "mlx5"
    #: None: the collector reads at every poll.
    every: Seconds | None = Field(None, gt=0)
    #: None: every NIC metric the model has.
    metrics: tuple[str, ...] | None = None
    #: metric -> RDMA hw_counters name, where the catalog has none for the driver.
    rdma_names: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> NicSide:
        _known_metrics(tuple(self.rdma_names))
        if self.metrics is not None:
            _known_metrics(self.metrics)
            missing = [m for m in self.metrics if self.raw_name(m) is None]
            if missing:
                raise ValueError(f"metrics: no {self.driver} ethtool or RDMA name for {missing} (rdma_names)")
            for derived, sources in DERIVED.items():
                if derived in self.metrics and set(sources) & set(self.metrics):
                    raise ValueError(f"metrics: {derived} sums {list(sources)}: list one or the others")
        return self

    def raw_name(self, metric: str) -> tuple[str, bool] | None:
        """(raw name template, True if an RDMA hw_counter else an `ethtool -S` stat), None if not exposed."""
        ethtool, rdma, _ = NIC_DRIVERS[self.driver]
        on_netdev = raw_name(metric, (ethtool,))
        if on_netdev is not None:
            return on_netdev, False
        on_rdma = raw_name(metric, (rdma,), self.rdma_names)
        return None if on_rdma is None else (on_rdma, True)


class Clocks(_Model):
    """Whose clock stamps what."""

    #: Each device reads each group at its own seeded phase within the interval, on its own clock.
    device_phase: bool = False
    #: Between the paths (metrics) of one group's notification, spread evenly (milliseconds).
    path_spread_ms: float = Field(0.0, ge=0, le=100)
    #: Hosts' clocks are off by a seeded amount in [-max, +max] (NTP on GPU nodes is not always good).
    host_skew_max: Seconds = 0.0

    @model_validator(mode="after")
    def _skew(self) -> Clocks:
        if self.host_skew_max > MAX_HOST_SKEW_S:
            raise ValueError(f"host_skew_max is at most {MAX_HOST_SKEW_S} s")
        return self


class Profile(_Model):
    """One deployment: switch side, NIC side, clocks and topology knowledge."""

    name: str
    description: str = ""
    switch: SwitchSide = SwitchSide()
    nic: NicSide = NicSide()
    clocks: Clocks = Clocks()
    #: Which side's LLDP lands in `links`.
    lldp: LldpSide = "both"

    @property
    def is_ideal(self) -> bool:
        """True when the profile changes nothing (the fast path's telemetry passes through untouched)."""
        return self.model_copy(update={"name": "", "description": ""}) == Profile(name="")

    def cadence_s(self, group: str, poll_s: float) -> float:
        """How often `group` (a switch group, or `nic`) is read, never finer than the poll."""
        if group == NIC_GROUP:
            every = self.nic.every
        else:
            groups = self.switch.groups
            every = groups[group].every if groups is not None and group in groups else None
        return max(poll_s, every or poll_s)


def raw_name(metric: str, vendors: tuple[str, ...], overrides: dict[str, str] | None = None) -> str | None:
    """The raw name template (with `{p}`) `metric` has under the first vendor that names it."""
    if overrides and metric in overrides:
        return overrides[metric]
    names = METRICS_BY_NAME[metric].vendor_names
    return next((names[v][0] for v in vendors if names.get(v)), None)


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        problems.append(f"{key}: {'unknown key' if err['type'] == 'extra_forbidden' else err['msg']}")
    return "; ".join(problems)


def profile_names() -> list[str]:
    """Names of the profiles shipped with rocescope."""
    root = resources.files("rocescope.sim").joinpath(PROFILE_DIR)
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_profile(profile: str | Path | Profile | None = None) -> Profile:
    """A shipped profile by name (`sonic-spectrum`), a YAML file by path, or `ideal` for None; validated."""
    if isinstance(profile, Profile):
        return profile
    name = DEFAULT_PROFILE if profile is None else profile
    if isinstance(name, str) and re.fullmatch(r"[a-z0-9_-]+", name):
        res = resources.files("rocescope.sim").joinpath(PROFILE_DIR, f"{name}.yaml")
        if not res.is_file():
            raise ProfileError(f"no profile {name!r}; shipped: {', '.join(profile_names())}, or give a file")
        text, where = res.read_text(), f"{name} (shipped)"
    else:
        try:
            text, where = Path(name).read_text(), str(name)
        except OSError as exc:
            raise ProfileError(f"cannot read profile file {name}: {exc.strerror or exc}") from None
    try:
        data = read_yaml(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {where} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {where}: the top level must be a mapping")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"invalid profile {where}: {_describe(exc)}") from None
