"""What every collector says about itself: one set of self-metrics and one health record per target.

A target is what one read reaches: a switch (gNMI, SNMP), a netdev or RDMA port (NIC), the BPF maps,
a host's lldpcli, the Kubernetes API, a file. Every collector counts the same things per target under
`rocescope_<kind>_*` (a source adds its own beside them), keeps a `Health` per target for the CLI and
the tests, and logs one line when a target's problem changes, never one per poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rocescope.pipeline.metrics import SelfMetrics

__all__ = ["NONNUMERIC", "NOT_IN_CATALOG", "STALE", "CollectorMetrics", "Health", "Targets"]

#: Why a value was left raw (kept as `raw:<name>`) or, where unknown names are not kept, skipped.
NOT_IN_CATALOG = "name not in the catalog"
#: Why a value was skipped: text or binary with no metric that reads it (a description, an unknown speed's 0).
NONNUMERIC = "non-numeric"
#: Why a value was skipped: stamped no later than the previous value of its series (a clock stepped back, a value
#: re-sent with its old stamp).
STALE = "not after the previous sample"

_POLL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class CollectorMetrics(SelfMetrics):
    """`rocescope_<kind>_*`, in a private registry (several collectors in one process never share counters)."""

    def __init__(self, kind: str, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        self.kind = kind
        r, t = self.registry, ["target"]
        p = f"rocescope_{kind}"
        self.polls = Counter(f"{p}_polls", "Reads of the target that worked.", t, registry=r)
        self.failures = Counter(f"{p}_poll_failures", "Reads of the target that failed.", t, registry=r)
        self.up = Gauge(f"{p}_target_up", "1 when the target's last read worked.", t, registry=r)
        self.target_seconds = Gauge(f"{p}_target_seconds", "Wall time of the target's last read.", t, registry=r)
        self.last_success = Gauge(
            f"{p}_last_success_timestamp_seconds", "When the target was last read fine.", t, registry=r
        )
        self.values = Counter(
            f"{p}_values",
            "Values read from the target, by what became of them: landed (rows handed to the transport under a "
            "catalog name), raw (kept under their raw name, and why) or skipped (and why). Malformed records are "
            "counted apart (`malformed`): a record that cannot be read has no countable values.",
            [*t, "outcome", "reason"],
            registry=r,
        )
        self.malformed = Counter(f"{p}_malformed", "Records skipped as malformed (the others are kept).", t, registry=r)
        self.overruns = Counter(f"{p}_overruns", "Poll ticks skipped because a poll ran late.", t, registry=r)
        self.poll_seconds = Histogram(
            f"{p}_poll_seconds",
            "Wall time of one poll (of one target or of all, per source).",
            registry=r,
            buckets=_POLL_BUCKETS,
        )
        self.publish_errors = Counter(f"{p}_publish_errors", "Batches the producer refused.", registry=r)

    def count_values(
        self,
        target: str,
        values: int,
        unknown: int = 0,
        keep_unknown: bool = True,
        skipped: Mapping[str, int] | None = None,
    ) -> None:
        """`values` rows produced, `unknown` names the catalog does not know (rows `raw:<name>` among them with
        `keep_unknown`, else dropped), and the values `skipped` by reason: `values_total{outcome,reason}`."""
        m = self.values
        landed = values - (unknown if keep_unknown else 0)
        if landed:
            m.labels(target, "landed", "").inc(landed)
        if unknown:
            m.labels(target, "raw" if keep_unknown else "skipped", NOT_IN_CATALOG).inc(unknown)
        for reason, n in (skipped or {}).items():
            if n:
                m.labels(target, "skipped", reason).inc(n)


@dataclass
class Health:
    """What the collector knows about one target (cumulative since it started)."""

    target: str
    polls: int = 0  # reads that worked
    failures: int = 0  # reads that failed
    consecutive_failures: int = 0
    values: int = 0
    unknown: int = 0
    malformed: int = 0
    stale: int = 0  # values decoded and dropped: stamped no later than the previous of their series
    last_seconds: float = 0.0  # wall time of the last read
    last_success_ts: float | None = None  # epoch seconds
    down_since_ts: float | None = None  # epoch seconds the target went down (None while up)
    last_error: str | None = None
    malformed_streak: int = 0  # reads in a row that skipped malformed records (logged at the first)
    # streaming sources (gNMI): a stream is up while connected, and has data once synced
    connected: bool | None = None
    synced: bool | None = None
    reconnects: int = 0
    sync_seconds: float | None = None  # from subscribing to the first full sample
    last_update_ts: float | None = None  # epoch seconds of the last notification
    problem: str | None = None  # what the last read that worked skipped (logged once per change)

    @property
    def up(self) -> bool:
        if self.connected is not None:
            return bool(self.connected and self.synced) and self.last_error is None
        return self.polls > 0 and self.last_error is None

    def summary(self, up: bool | None = None) -> str:
        """One line for the CLI: `leaf1: up, 12 polls (0.02 s last), 3,400 values (2 unknown, 0 malformed), ...`."""
        ok = self.up if up is None else up
        parts = [f"{self.target}: {'up' if ok else 'DOWN'}"]
        if self.connected is None:
            parts.append(f"{self.polls} polls ({self.last_seconds:.3f} s last)")
        parts.append(f"{self.values:,} values ({self.unknown} unknown, {self.malformed} malformed)")
        parts.append(f"{self.failures} failed")
        if self.connected is not None:
            parts.append(f"{self.reconnects} reconnects")
            if self.sync_seconds is not None:
                parts.append(f"synced in {self.sync_seconds:.2f} s")
        line = ", ".join(parts)
        return f"{line}; last error: {self.last_error}" if self.last_error else line


class Targets:
    """The health of each target of one collector, kept in step with its self-metrics and its log."""

    def __init__(self, metrics: CollectorMetrics, log: logging.Logger, who: str = "", keep_unknown: bool = True):
        self.metrics = metrics
        self.log = log
        self.who = who or metrics.kind
        self.keep_unknown = keep_unknown  # values the catalog does not know are rows `raw:<name>` (else dropped)
        self.health: dict[str, Health] = {}

    def add(self, *targets: str) -> None:
        """List targets before their first read (a target never read is reported as down, not left out)."""
        for target in targets:
            self.health.setdefault(target, Health(target))

    def __getitem__(self, target: str) -> Health:
        h = self.health.get(target)
        if h is None:
            h = self.health[target] = Health(target)
        return h

    def succeeded(
        self,
        target: str,
        seconds: float,
        values: int = 0,
        unknown: int = 0,
        malformed: int = 0,
        problem: str = "",
        skipped: Mapping[str, int] | None = None,
    ) -> Health:
        """A read that worked (`problem`: it worked but skipped something; logged once while it stays the same);
        `values` rows, `unknown` of them under raw names, `skipped` values by reason (`count_values`)."""
        h, m = self[target], self.metrics
        if h.last_error is not None or (h.problem and not problem):
            self.log.warning("%s %s: read fine again", self.who, target)
        h.polls += 1
        h.consecutive_failures = 0
        h.values += values
        h.unknown += unknown
        h.malformed += malformed
        h.last_seconds = seconds
        h.last_success_ts = time.time()
        h.down_since_ts = None
        h.last_error = None
        m.polls.labels(target).inc()
        m.up.labels(target).set(1)
        m.target_seconds.labels(target).set(seconds)
        m.last_success.labels(target).set(h.last_success_ts)
        m.count_values(target, values, unknown, self.keep_unknown, skipped)
        if malformed:
            m.malformed.labels(target).inc(malformed)
            if not problem and not h.malformed_streak:  # one line when it starts, not one per poll
                self.log.warning("%s %s: %d malformed record(s) skipped, the others kept", self.who, target, malformed)
        h.malformed_streak = h.malformed_streak + 1 if malformed else 0
        if problem and problem != h.problem:
            self.log.warning("%s %s: %s", self.who, target, problem)
        h.problem = problem or None
        return h

    def failed(self, target: str, problem: str, seconds: float = 0.0) -> Health:
        """A read that failed: counted, and logged once per new problem."""
        h, m = self[target], self.metrics
        if h.last_error != problem:
            self.log.warning("%s %s: %s", self.who, target, problem)
        h.failures += 1
        h.consecutive_failures += 1
        h.last_seconds = seconds
        h.last_error = problem
        h.problem = None
        if h.down_since_ts is None:
            h.down_since_ts = time.time()
        m.failures.labels(target).inc()
        m.up.labels(target).set(0)
        m.target_seconds.labels(target).set(seconds)
        return h
