"""Scenario files: a fabric, jobs, hashing, a seed, a duration and a list of incidents, as small YAML.

A scenario is validated in full before anything is built; a bad file raises `ScenarioError` with one
line per problem, naming the key (`incidents.1.senders: Input should be ...`). Durations and times
are seconds or strings like `90s`, `2m`, `1m30s`, `500ms`, `1h`.

The shipped scenarios live next to this module in `scenarios/` (`baseline`, one or more per incident kind,
named after it: `incast`, `incast_large`, `cnp_loss_fabric`, `straggler`..., `bad_day`, `demo`, and who hurts
whom: `two_jobs_checkpoint`, `self_inflicted`); `load_scenario("incast")`
finds them by name, anything else is read as a path. `traffic:` lists traffic that is no incident and has no
ground truth (storage writers, data loaders; lossless RoCE or a lossy priority, in no placed job by default).

    name: incast
    seed: 11
    duration: 2m
    fabric: {hosts: 16, rails: 2, spines: 2}
    jobs:
      - {name: llm-a, namespace: team-a, hosts: 16}
    incidents:
      - {kind: incast, start: 30s, end: 90s, receiver: gpu-016, rail: 0, senders: 8}
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from rocescope.config import read_yaml
from rocescope.errors import SimError
from rocescope.sim.ecmp import HashFunction, HashingMode
from rocescope.sim.jobs import Collective, MiB, Placement
from rocescope.sim.params import EngineParams
from rocescope.sim.topology import FabricSpec
from rocescope.units import parse_duration

SCENARIO_DIR = "scenarios"


class ScenarioError(SimError):
    """A scenario file that is missing, unreadable or invalid."""


Seconds = Annotated[float, BeforeValidator(parse_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobModel(_Model):
    """A training job (`JobSpec`) and how its hosts are picked."""

    name: str
    namespace: str = "default"
    hosts: int = Field(ge=1)
    placement: Placement = "contiguous"
    rails: tuple[int, ...] | None = None
    message_mib: float = Field(256, ge=0)
    compute_ms: float = Field(100, ge=0)
    qps_per_connection: int = Field(1, ge=1)
    cross_rail_flows: int = Field(0, ge=0)
    cross_rail_mib: float = Field(8, ge=0)
    #: The collective per rail: NCCL's ring or double binary tree all-reduce, or a mixture-of-experts all-to-all.
    collective: Collective = "ring"


class _Incident(_Model):
    #: Seconds of fabric time since the run started.
    start: Seconds = 0.0
    #: None: until the end of the run.
    end: Seconds | None = None
    #: Free text for the ground truth; a default description is generated otherwise.
    description: str | None = None

    @model_validator(mode="after")
    def _window(self) -> _Incident:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end} s) must be after start ({self.start} s)")
        return self


class _Traffic(_Incident):
    """Extra traffic from `senders` hosts to one receiver NIC (`receiver` host, `rail`)."""

    receiver: str
    rail: int = Field(0, ge=0)
    #: The fan-in: how many senders (the hosts after the receiver, in name order), or their names.
    senders: int | list[str] = 8
    #: Name of the job the extra traffic belongs to (namespace `background`); default `<kind>-<n>`.
    job: str | None = None
    #: False: the traffic belongs to no placed job (storage or checkpoint readers outside the job
    #: inventory): its flows have no `endpoints` rows and the ground truth names only the jobs it hurts.
    placed: bool = True
    #: The training job (`namespace/name`) whose own traffic this is (its checkpoint writes): the senders must
    #: be its hosts on a rail it uses; the traffic has no job of its own, and the ground truth blames `owner`.
    owner: str | None = None


class Incast(_Traffic):
    kind: Literal["incast"]
    #: Bytes each sender moves per transfer (back to back while the window lasts).
    mib_per_sender: float = Field(64, gt=0)


class Microburst(_Traffic):
    kind: Literal["microburst"]
    #: Length of one burst and time between burst starts.
    burst: Seconds = 0.02
    period: Seconds = 1.0

    @model_validator(mode="after")
    def _burst(self) -> Microburst:
        if not 0 < self.burst < self.period:
            raise ValueError("need 0 < burst < period")
        return self


class PfcStorm(_Incident):
    kind: Literal["pfc_storm"]
    #: The port that keeps sending pause frames: a NIC (`gpu-005`, `eth0`) or a switch port.
    device: str
    port: str
    fraction: float = Field(1.0, ge=0, le=1)
    priority: int | None = Field(None, ge=0, le=7)


class PfcDeadlock(_Incident):
    """Traffic between two leaves of a rail forced round leaf-spine-leaf-spine (a bad reroute)."""

    kind: Literal["pfc_deadlock"]
    rail: int = Field(0, ge=0)
    #: The two leaves (default: the first two of the rail) and the two spines (default: the first two).
    leaves: tuple[str, str] | None = None
    spines: tuple[str, str] | None = None
    job: str | None = None


class CnpLoss(_Incident):
    kind: Literal["cnp_loss"]
    #: The sender NIC that loses CNPs.
    host: str
    rail: int = Field(0, ge=0)
    fraction: float = Field(1.0, ge=0, le=1)
    ignored: bool = False


class Polarization(_Incident):
    """Every switch hashes with the same function and seed for the window."""

    kind: Literal["polarization"]
    function: HashFunction = "crc32"


class LinkFlap(_Incident):
    """A cable whose carrier goes down and up; without `port`, the whole device restarts (a reboot): every link of
    it goes down once, for `down`, at the start, and its counters restart from zero."""

    kind: Literal["link_flap"]
    device: str
    port: str | None = None
    #: The link goes down for `down` at the start of every `period` of the window.
    period: Seconds = 10.0
    down: Seconds = 1.0
    #: Degraded optics: fraction of frames failing their FCS while up during the window.
    error_rate: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _flap(self) -> LinkFlap:
        if self.port is not None and not 0 < self.down < self.period:
            raise ValueError("need 0 < down < period")
        if not self.down > 0:
            raise ValueError("need 0 < down")
        return self


class DegradedOptics(_Incident):
    """A failing transceiver or a dirty fibre: a share of the frames `device:port` receives fail their FCS
    while the link stays up (no flaps)."""

    kind: Literal["degraded_optics"]
    device: str
    port: str
    error_rate: float = Field(1e-4, gt=0, lt=1)


class EcmpImbalance(_Incident):
    """A few elephant flows from hosts of one leaf whose UDP source ports all hash onto the same uplink:
    it runs hot while its siblings idle (a single-link rail fabric has no second tier to even it out)."""

    kind: Literal["ecmp_imbalance"]
    leaf: str
    #: Which of the leaf's uplinks (in port order) the elephants collide on.
    uplink: int = Field(0, ge=0)
    #: How many elephants (from the leaf's first hosts), or their senders' names (hosts on the leaf).
    senders: int | list[str] = 3
    #: Their receivers, hosts under other leaves of the rail (default: the first hosts of the next leaf).
    receivers: list[str] | None = None
    job: str | None = None
    placed: bool = True


class CnpLossyQueue(_Incident):
    """`switches` map the CNP DSCP (48) to the lossy queue `priority`: where lossy traffic congests that
    queue, it drops the CNPs of the congested flows crossing it back, and their senders never slow down.
    Ground truth kind `cnp_loss`: the NICs sending those CNPs and the switch queues dropping them."""

    kind: Literal["cnp_lossy_queue"]
    switches: list[str] = Field(min_length=1)
    priority: int = Field(0, ge=0, le=7)


class Straggler(_Incident):
    """One GPU computes slower (thermal throttling, a bad HBM page, a noisy neighbour on its CPU) while the
    fabric stays clean: every collective of its job waits for it. Ground truth kind `unexplained_slowdown`."""

    kind: Literal["straggler"]
    #: The slow GPU: a host of a training job and its local GPU, the one driving the NIC of `rail`.
    host: str
    rail: int = Field(0, ge=0)
    #: Its compute takes this many times as long as the job's `compute_ms`.
    slowdown: float = Field(1.5, gt=1)
    #: Drawn during the scenario's fan-in, on a rank of the job its receiver runs (the exam: a straggler while an
    #: incast slows the same job, whose GPU-seconds the two share); the fabric is not clean then.
    during_fan_in: bool = False


class PfcMisconfig(_Incident):
    """PFC not enabled on the lossless priority of one switch ingress port."""

    kind: Literal["pfc_misconfig"]
    device: str
    port: str
    priority: int | None = Field(None, ge=0, le=7)


IncidentModel = Annotated[
    Incast
    | Microburst
    | PfcStorm
    | PfcDeadlock
    | CnpLoss
    | Polarization
    | LinkFlap
    | PfcMisconfig
    | DegradedOptics
    | EcmpImbalance
    | CnpLossyQueue
    | Straggler,
    Field(discriminator="kind"),
]
INCIDENT_KINDS: tuple[str, ...] = (
    "incast",
    "microburst",
    "pfc_storm",
    "pfc_deadlock",
    "cnp_loss",
    "polarization",
    "link_flap",
    "pfc_misconfig",
    "degraded_optics",
    "ecmp_imbalance",
    "cnp_lossy_queue",
    "straggler",
)
#: The ground-truth kind an incident is scored as, where it differs from its own.
TRUTH_KIND: dict[str, str] = {"cnp_lossy_queue": "cnp_loss", "straggler": "unexplained_slowdown"}


class Background(_Model):
    """Traffic that is no incident and has no ground truth: storage, checkpoint writers, data loaders.
    Sender k streams to receiver k mod len(receivers) on `rail` for the window."""

    name: str
    start: Seconds = 0.0
    end: Seconds | None = None
    rail: int = Field(0, ge=0)
    senders: list[str] = Field(min_length=1)
    receivers: list[str] = Field(min_length=1)
    #: None: RoCE on the lossless priority (ECN, DCQCN, PFC); else this priority (lossy: tail drop,
    #: senders without congestion control, as UDP-based storage traffic).
    priority: int | None = Field(None, ge=0, le=7)
    #: Storage clients are usually outside the job inventory: no `endpoints` rows unless placed.
    placed: bool = False

    @model_validator(mode="after")
    def _window(self) -> Background:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end} s) must be after start ({self.start} s)")
        if set(self.senders) & set(self.receivers):
            raise ValueError("a host cannot be both a sender and a receiver")
        return self


class Mirror(_Model):
    """The packet mirror (`rocescope.sim.mirror`): how RoCEv2 packets of the flows are sampled. Off unless
    a scenario turns it on (`mirror: {enabled: true}`), so runs without it land no `packets`."""

    enabled: bool = False
    #: 1 in N data packets (and ACKs) is sampled, as sFlow or a sampled mirror session does.
    sampling_rate: int = Field(1_000_000, ge=1)
    #: Every CNP is kept up to this many per second of fabric time (fabric-wide); above it, a uniform sample.
    cnp_cap_per_s: int = Field(200, ge=0)
    #: The receiver acknowledges every this many data packets (RC ACK coalescing).
    ack_every: int = Field(16, ge=1)
    #: DSCP of the lossless class (data and ACKs) and of CNPs (ConnectX default: 48).
    dscp: int = Field(26, ge=0, le=63)
    cnp_dscp: int = Field(48, ge=0, le=63)
    #: Packets per RDMA WRITE message (NCCL writes 512 KiB chunks: 128 packets at 4096 MTU).
    message_packets: int = Field(128, ge=1)
    #: pcap files (serve mode): bytes kept per frame (0 = whole frames, ICRC included), and rotation.
    snaplen: int = Field(0, ge=0)
    rotate_s: float = Field(60.0, gt=0)


class Collectives(_Model):
    """What the training jobs' NCCL Inspector reports (`rocescope.sim.collectives`): one collective per rank and
    training step, timed by the fabric. On unless a scenario turns it off."""

    enabled: bool = True
    #: Communication phases (gradient buckets) are fused into steps of about this long, so a job reports a
    #: few collectives per second of fabric time whatever its iteration rate.
    step_s: float = Field(0.5, gt=0)
    #: NCCL_INSPECTOR_DUMP_VERBOSE=1: each record carries its `event_trace_ts` (issue and kernel times).
    verbose: bool = True
    #: Small collectives per step (a loss scalar's all-reduce, a gradient norm) that NCCL numbers and Inspector
    #: never records (CPU-timed, dropped under its default NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=1): each job
    #: draws its own count in this range from the seed, and its records' `sequence` advances by that much more.
    unrecorded_per_step: tuple[int, int] = (0, 0)

    @model_validator(mode="after")
    def _range(self) -> Collectives:
        lo, hi = self.unrecorded_per_step
        if not 0 <= lo <= hi:
            raise ValueError(f"unrecorded_per_step {self.unrecorded_per_step}: want 0 <= low <= high")
        return self


class Scenario(_Model):
    """One reproducible run: everything follows from these values and the seed."""

    name: str
    description: str = ""
    seed: int = 0
    duration: Seconds = 600.0
    poll_interval_s: float = Field(1.0, gt=0)
    hashing: HashingMode = "random"
    hash_function: HashFunction = "crc32"
    #: Jobs start at seeded offsets in their first compute gap (not in lock step).
    stagger: bool = True
    #: Validated as the dataclass itself: its own checks run, unknown keys are refused.
    fabric: FabricSpec = FabricSpec()
    #: `EngineParams` overrides (e.g. `dcqcn: false`, `buffer_bytes: ...`).
    params: dict[str, Any] = Field(default_factory=dict)
    jobs: list[JobModel] = Field(min_length=1)
    incidents: list[IncidentModel] = Field(default_factory=list)
    #: Traffic that is not an incident (no ground truth).
    traffic: list[Background] = Field(default_factory=list)
    mirror: Mirror = Mirror()
    collectives: Collectives = Collectives()
    #: The deployment profile (`rocescope.sim.profile`, a name in `profiles/` or a file): how the gear
    #: reports the run; `--profile` overrides it.
    profile: str = "ideal"
    #: Devices no collector reads (a storage array, a leaf outside the monitoring's scope): their traffic flows
    #: and their neighbours' LLDP names them, but they send no counters, LLDP, QP or NCCL records of their own.
    unmonitored: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.duration <= 0:
            raise ValueError("duration must be positive")
        try:
            EngineParams(**self.params)
        except (SimError, TypeError) as exc:
            raise ValueError(f"params: {exc}") from None
        names = [f"{j.namespace}/{j.name}" for j in self.jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"job ids must be unique, got {names}")
        if sum(j.hosts for j in self.jobs) > self.fabric.hosts:
            raise ValueError(f"jobs need {sum(j.hosts for j in self.jobs)} hosts, the fabric has {self.fabric.hosts}")
        return self

    def engine_params(self) -> EngineParams:
        return EngineParams(**self.params)


def message_bytes(mib: float) -> int:
    return round(mib * MiB)


def _describe(exc: ValidationError) -> str:
    """One line per problem, `incidents.1.senders: ...`: the union tag pydantic adds is dropped."""
    problems = []
    for err in exc.errors():
        loc = list(err["loc"])
        if len(loc) >= 3 and loc[0] == "incidents" and loc[2] in INCIDENT_KINDS:
            del loc[2]
        key = ".".join(str(p) for p in loc) or "(top level)"
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(f"{key}: {reason}")
    return "; ".join(problems)


def parse_scenario(data: object, where: str = "scenario") -> Scenario:
    """Validate a scenario given as a mapping (e.g. parsed YAML)."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: the top level must be a mapping, not {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"invalid scenario {where}: {_describe(exc)}") from None


def scenario_names() -> list[str]:
    """Names of the scenarios shipped with rocescope."""
    root = resources.files("rocescope.sim").joinpath(SCENARIO_DIR)
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def scenario_text(scenario: str | Path) -> tuple[str, str]:
    """(YAML text, where it came from) of a shipped scenario name or a file path."""
    if isinstance(scenario, str) and re.fullmatch(r"[a-z0-9_]+", scenario):
        res = resources.files("rocescope.sim").joinpath(SCENARIO_DIR, f"{scenario}.yaml")
        if res.is_file():
            return res.read_text(), f"{scenario} (shipped)"
        if not Path(scenario).exists():
            raise ScenarioError(f"no scenario {scenario!r}; shipped: {', '.join(scenario_names())}, or give a file")
    path = Path(scenario)
    try:
        return path.read_text(), str(path)
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file {path}: {exc.strerror or exc}") from None


def load_scenario(scenario: str | Path) -> Scenario:
    """A shipped scenario by name (`incast`), or a YAML file by path; validated."""
    text, where = scenario_text(scenario)
    try:
        data = read_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario {where} is not valid YAML: {exc}") from None
    return parse_scenario(data, where)
