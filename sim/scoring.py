"""The strict score of findings against the simulator's ground truth, per incident kind.

The rules (`rocescope.sim.truth` says what each kind is and where its anchor lies):

* a finding *matches* an incident when it has the incident's kind, names the incident's anchor (one of its
  anchor ports, or a straggler's host: a finding elsewhere on the same switch sends nobody to the right cable)
  as where its problem is (a microburst's or incast's senders' ports, which it names as context, claim nothing:
  `claimed_ports`), and its evidence interval (`start`, the read before the evidence, to `end`, the read that
  last showed it) overlaps the incident widened by the clock error the profile allows (`clock_s`), and nothing
  more;
* each incident's *best* finding is its earliest match among the findings located at its anchor (whose first
  port, where a detector puts what it localizes, is an anchor port), else among all its matches; a finding is
  true when it is some incident's best; every other finding counts against precision, fragments (a second
  finding of one incident) included;
* incidents that are don't care (near a definition's edge), unobservable (nothing collected could show them) or
  unobservable by the gear's cadence (`Truth.unresolved`) are neither found nor missed, and a finding matching
  only such incidents is neither true nor false; the table shows their shares, apart from the misses;
* an unexplained slowdown that names no straggler ("all ranks slowed alike") of a job an incident of another kind
  concerned while it lasted is neither true nor false: the job did slow, by a cause the detectors of that kind
  did not report (`shared_slowdown`); it is no straggler, and it is what the slowdown is there to say;
* a finding that says it cannot verify its kind (`evidence.verifiable` false: CNPs no monitored NIC handled whose
  peers count none, so lost or handled where nobody counts cannot be told; severity info) claims nothing: it is
  neither a detection nor a false one;
* precision = true findings / findings; recall = matched incidents / incidents; localization = incidents matched
  at their anchor / incidents with a finding of their kind in time on one of their devices (found, perhaps at
  the wrong port); job attribution = matched incidents whose best finding names exactly the incident's jobs;
  findings per incident = (true findings + fragments) / matched incidents;
* delay = best finding's start - incident start (0 when it starts before), in seconds and in units of the
  coarsest cadence in play (the slowest metric group the kind's evidence comes from under the profile);
* a ratio with nothing to count (no finding, no incident, nothing matched) is `-` (None), never 1.0.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.table import Table

from rocescope.analysis.findings import Finding

__all__ = [
    "KindScore",
    "Truth",
    "groups_table",
    "matches",
    "merge",
    "ratio",
    "score",
    "scores_table",
    "shared_slowdown",
]

#: the truth's kind of a straggler, and the detector's of a job slowed for no reported reason
SLOWDOWN = "unexplained_slowdown"


@dataclass(frozen=True)
class Truth:
    kind: str
    start: dt.datetime
    end: dt.datetime
    job_ids: tuple[str, ...]
    devices: tuple[str, ...]
    ports: tuple[str, ...]
    #: jobs whose traffic caused it, jobs whose collectives it slowed, GPU-seconds each job lost (`sim.impact`)
    culprit_jobs: tuple[str, ...] = ()
    victim_jobs: tuple[str, ...] = ()
    gpu_seconds_lost: Mapping[str, float] = field(default_factory=dict)
    #: False: nothing collected could show it
    observable: bool = True
    #: what a finding must name (`device:port` refs, or a host); empty: its ports
    anchor: tuple[str, ...] = ()
    #: near a definition's edge (`rocescope.sim.truth`)
    dont_care: bool = False
    #: why the gear's cadence cannot resolve it (`rocescope.sim.truth.unobservable_by_cadence`); "" if it can
    unresolved: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Truth:
        return cls(
            d["kind"],
            dt.datetime.fromisoformat(d["start"]),
            dt.datetime.fromisoformat(d["end"]),
            tuple(d["job_ids"]),
            tuple(d["devices"]),
            tuple(d["ports"]),
            tuple(d.get("culprit_jobs", ())),
            tuple(d.get("victim_jobs", ())),
            dict(d.get("gpu_seconds_lost", {})),
            bool(d.get("observable", True)),
            tuple(d.get("anchor", ())),
            bool(d.get("dont_care", False)),
        )

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def scored(self) -> bool:
        """Counted as found or missed (not don't care, observable, resolvable by the gear)."""
        return self.observable and not self.dont_care and not self.unresolved


def ratio(num: int, den: int) -> float | None:
    """num / den; None when there is nothing to count (shown as `-`, never as a perfect score)."""
    return num / den if den else None


def _in_time(f: Finding, t: Truth, clock: dt.timedelta) -> bool:
    return f.kind == t.kind and f.start <= t.end + clock and f.end >= t.start - clock


def shared_slowdown(f: Finding, truths: Sequence[Truth], clock: dt.timedelta) -> bool:
    """Whether `f` is a slowdown of a whole job (no straggler named) while an incident of another kind that
    concerns the job lasted (its victims where measured, else its jobs), or traffic that is no incident shared the
    job's links (a don't-care slowdown: `World._label_contention`)."""
    if f.kind != SLOWDOWN or f.devices:
        return False
    jobs = set(f.job_ids or ())
    return any(
        (t.kind != SLOWDOWN or t.dont_care)
        and f.start <= t.end + clock
        and f.end >= t.start - clock
        and jobs & set(t.victim_jobs or t.job_ids)
        for t in truths
    )


def claimed_ports(f: Finding) -> set[str]:
    """The ports a finding says its problem is at: its ports less those its evidence names as its senders' (a
    microburst or incast names the switch ports its senders attach to as context: "bursts into gpu-007 at
    leaf1:Ethernet24, 6 senders" claims no burst where a sender attaches). The first port, where a detector puts
    what it localizes, is always claimed."""
    senders = {s.get("port") for s in f.evidence.get("senders") or () if isinstance(s, dict)}
    return {p for k, p in enumerate(f.ports) if k == 0 or p not in senders}


def names_anchor(f: Finding, t: Truth) -> bool:
    """Whether the finding names one of the incident's anchor ports (or its anchor host) as where its problem is
    (`claimed_ports`)."""
    anchor = t.anchor or t.ports
    ports = [a for a in anchor if ":" in a]
    hosts = {a for a in anchor if ":" not in a}
    return bool(set(ports) & claimed_ports(f)) or bool(hosts & set(f.devices))


def matches(f: Finding, t: Truth, clock_s: float = 0.0) -> bool:
    return _in_time(f, t, dt.timedelta(seconds=clock_s)) and names_anchor(f, t)


@dataclass
class KindScore:
    kind: str
    incidents: int = 0
    findings: int = 0
    #: findings that are some incident's best match
    true_findings: int = 0
    #: further findings matching an incident that already has its best one
    fragments: int = 0
    recalled: int = 0
    #: incidents with a finding of their kind in time on one of their devices (at the anchor or not)
    near: int = 0
    attributed: int = 0
    #: incidents neither found nor missed: don't care, unobservable, unresolvable by the gear's cadence
    dont_care: int = 0
    unobservable: int = 0
    unresolved: int = 0
    #: per matched incident: incident start to its best finding's start, seconds
    delays_s: list[float] = field(default_factory=list)
    #: the coarsest cadence in play for this kind (seconds)
    cadence_s: float = 1.0
    #: each matched incident with its best finding (impact and blame are scored on them: `sim.impact_eval`)
    best: list[tuple[Truth, Finding]] = field(default_factory=list)
    #: findings that match no incident at all (scored, don't care or unobservable): false wherever they are
    unmatched: list[Finding] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return ratio(self.true_findings, self.findings)

    @property
    def recall(self) -> float | None:
        return ratio(self.recalled, self.incidents)

    @property
    def localization(self) -> float | None:
        return ratio(self.recalled, self.near)

    @property
    def attribution(self) -> float | None:
        return ratio(self.attributed, self.recalled)

    @property
    def per_incident(self) -> float | None:
        """Findings per matched incident (1.0: one incident, one finding)."""
        return ratio(self.true_findings + self.fragments, self.recalled)

    @property
    def excluded(self) -> int:
        return self.dont_care + self.unobservable + self.unresolved

    def share(self, n: int) -> float | None:
        """`n` as a share of every incident of the kind, scored or not."""
        return ratio(n, self.incidents + self.excluded)

    @property
    def delays(self) -> list[float]:
        """Delays in units of the coarsest cadence in play."""
        return [d / self.cadence_s for d in self.delays_s]

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        d50 = statistics.median(self.delays_s) if self.delays_s else None
        return {
            "kind": self.kind,
            "incidents": self.incidents,
            "findings": self.findings,
            "precision": r(self.precision),
            "recall": r(self.recall),
            "localization": r(self.localization),
            "job_attribution": r(self.attribution),
            "findings_per_incident": r(self.per_incident),
            "fragments": self.fragments,
            "delay_p50_s": r(d50),
            "delay_max_s": r(max(self.delays_s)) if self.delays_s else None,
            "cadence_s": self.cadence_s,
            "delay_p50_cadences": r(None if d50 is None else d50 / self.cadence_s),
            "dont_care": self.dont_care,
            "unobservable": self.unobservable,
            "unresolved_by_cadence": self.unresolved,
            "dont_care_share": r(self.share(self.dont_care)),
            "unobservable_share": r(self.share(self.unobservable + self.unresolved)),
        }


def score(
    truths: Sequence[Truth],
    findings: Sequence[Finding],
    poll_s: float = 1.0,
    cadence: Mapping[str, float] | None = None,
    clock_s: float = 0.0,
) -> dict[str, KindScore]:
    """Scores per kind for one run (see the module docstring); `cadence`: kind -> the coarsest cadence in play
    (seconds; default the poll), for delays; `clock_s`: the clock error the profile allows."""
    scores: dict[str, KindScore] = defaultdict(lambda: KindScore(""))
    clock = dt.timedelta(seconds=clock_s)

    def of(kind: str) -> KindScore:
        s = scores[kind]
        s.kind, s.cadence_s = kind, max(poll_s, (cadence or {}).get(kind, poll_s))
        return s

    findings = [f for f in findings if f.evidence.get("verifiable", True) is not False]
    best_of: set[int] = set()
    for t in truths:
        s = of(t.kind)
        if not t.scored:
            s.dont_care += t.dont_care
            s.unobservable += not t.observable and not t.dont_care
            s.unresolved += bool(t.unresolved) and t.observable and not t.dont_care
            continue
        s.incidents += 1
        timely = [f for f in findings if _in_time(f, t, clock)]
        hits = [f for f in timely if names_anchor(f, t)]
        s.near += bool(hits) or any(set(f.devices) & set(t.devices) for f in timely)
        if not hits:
            continue
        located = [f for f in hits if f.ports and f.ports[0] in (t.anchor or t.ports)]
        best = min(located or hits, key=lambda f: (f.start, -(f.end - f.start)))
        best_of.add(id(best))
        s.recalled += 1
        s.attributed += set(best.job_ids or ()) == set(t.job_ids)
        s.delays_s.append(max(0.0, (best.start - t.start).total_seconds()))
        s.best.append((t, best))
    for f in findings:
        s = of(f.kind)
        hit = [t for t in truths if matches(f, t, clock_s)]
        if id(f) in best_of:
            s.findings += 1
            s.true_findings += 1
        elif any(t.scored for t in hit):
            s.findings += 1
            s.fragments += 1
        elif not hit and not shared_slowdown(f, truths, clock):
            s.findings += 1
            s.unmatched.append(f)
        # a finding on don't-care or unobservable incidents only is neither true nor false
    return dict(scores)


def merge(into: dict[str, KindScore], other: Mapping[str, KindScore]) -> None:
    for kind, s in other.items():
        m = into.setdefault(kind, KindScore(kind, cadence_s=s.cadence_s))
        for name in ("incidents", "findings", "true_findings", "fragments", "recalled", "near", "attributed",
                     "dont_care", "unobservable", "unresolved"):  # fmt: skip
            setattr(m, name, getattr(m, name) + getattr(s, name))
        m.delays_s += s.delays_s
        m.best += s.best
        m.unmatched += s.unmatched
        m.cadence_s = max(m.cadence_s, s.cadence_s)


def _cell(v: float | None, good: float = 0.95, higher_is_better: bool = True) -> str:
    if v is None:
        return "-"
    ok = v >= good if higher_is_better else v <= good
    return f"[{'green' if ok else 'red'}]{v:.3f}[/]"


def scores_table(scores: Mapping[str, KindScore], title: str = "detector evaluation") -> Table:
    """The scores per kind as a rich table; ratios below 0.95 (or more than 1.1 findings per incident) in red,
    `-` where there is nothing to score."""
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, caption_justify="left",
        caption="truth: incidents scored; found: findings counted; local: matched at the anchor / found in time on "
        "one of its devices; f/inc: findings per matched incident; delay: incident start to the best finding's "
        "start (s), p50 and max; /cad: p50 in the coarsest cadence in play (cad, s); dc: share don't care; "
        "unobs: share unobservable (by the truth or the gear's cadence), kept apart from misses; -: nothing to "
        "score",
    )  # fmt: skip
    cols = ("kind", "truth", "found", "prec", "recall", "local", "jobs", "f/inc", "delay", "max", "cad", "/cad", "dc",
            "unobs")  # fmt: skip
    for col in cols:  # short headers and no wrapping: the table stays whole in a 120-column terminal or a CI log
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for kind in sorted(scores):
        s = scores[kind]
        d = s.as_dict()

        def num(v: float | None, fmt: str = ".1f") -> str:
            return "-" if v is None else format(v, fmt)

        t.add_row(
            kind, str(s.incidents), str(s.findings), _cell(s.precision), _cell(s.recall), _cell(s.localization),
            _cell(s.attribution), _cell(s.per_incident, 1.1, higher_is_better=False), num(d["delay_p50_s"]),
            num(d["delay_max_s"]), f"{s.cadence_s:g}", num(d["delay_p50_cadences"], ".2f"),
            num(d["dont_care_share"], ".2f"), num(d["unobservable_share"], ".2f"),
        )  # fmt: skip
    return t


def groups_table(groups: Mapping[str, Mapping[str, KindScore]], title: str) -> Table:
    """Recall / precision per kind (columns) for each group of runs (rows, e.g. profiles); `-` where nothing
    counts, red below 0.95."""
    kinds = sorted({k for scores in groups.values() for k in scores})
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("", no_wrap=True)
    for kind in kinds:
        t.add_column(kind.replace("_", " "), justify="right", no_wrap=True)

    def cell(v: float | None) -> str:
        return "-" if v is None else f"[{'green' if v >= 0.95 else 'red'}]{v:.2f}[/]"

    for name, scores in sorted(groups.items()):
        row = [name]
        for kind in kinds:
            s = scores.get(kind)
            row.append("" if s is None else f"{cell(s.recall)}/{cell(s.precision)}")
        t.add_row(*row)
    return t
