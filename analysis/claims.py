"""Which finding a training job's loss at each moment belongs to, where findings overlap.

Findings that overlap in time and claim one job share its loss by how directly they claim it (`_claim`): the job's
own unexplained slowdown first (its detector established that no finding overlapping it explains it: its loss is the
straggler's, or a cause nobody reported), then a congestion finding (an incast, a storm...) before one that only
changes how congestion is handled (`AMPLIFIERS`: lost CNPs, PFC off), then one that names the job among its jobs
before one that merely runs near it (same hosts or leaves), then one whose ports the job is known to use (on its
NIC, or its connections seen crossing there: `evidence.job_paths`) before one its placement merely allows, then the
one that leaves the job's traffic less of its path (a deadlock, a storm or a link down, then an incast, lost CNPs,
an imbalance or a failing optic, microbursts), then the one naming fewer jobs. While the stronger claim lasts, the
job's loss is that finding's only; of equal claims the one that began first (two findings of one incident: the
earlier) counts it, so a job's losses summed over findings never count one moment twice. One claim is partial: a
straggler found during a fabric finding (`SHARE`, `DURING`) takes its own share of the job's loss while that finding
lasts, and leaves the finding the rest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from rocescope.analysis.findings import Finding

__all__ = ["AMPLIFIERS", "DURING", "SHARE", "SLOWDOWN", "Carve", "Span", "claimed_spans", "overlapping", "uncarved"]

Span = tuple[dt.datetime, dt.datetime]
#: A job's own slowdown that no other finding explains (`rocescope.analysis.detectors.unexplained_slowdown`).
SLOWDOWN = "unexplained_slowdown"
#: Kinds that change how congestion is handled (lost CNPs: PFC instead of DCQCN; PFC off: drops instead of
#: pauses) rather than cause it: what a job lost while a congestion finding overlaps them is that finding's.
AMPLIFIERS = frozenset({"cnp_loss", "pfc_misconfig"})


def overlapping(starts: pl.Series, ends: pl.Series, spans: Iterable[tuple[dt.datetime, dt.datetime]]) -> pl.Series:
    """Whether each [start, end] overlaps one of the spans (`_overlaps`)."""
    frame = pl.DataFrame({"began": starts, "ts": ends})
    return _overlaps(frame, {(): list(spans)}, [])


def _merged(spans: Iterable[Span]) -> list[list[dt.datetime]]:
    """The spans merged into disjoint ones, in order."""
    merged: list[list[dt.datetime]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _overlaps(rows: pl.DataFrame, spans: Mapping[tuple[Any, ...], Iterable[Span]], by: Sequence[str]) -> pl.Series:
    """Whether each row's [`began`, `ts`] overlaps one of the spans of its key (the values of its `by` columns).
    Each key's spans are merged (disjoint, sorted), so only the last one that starts by a row's end can overlap it:
    one as-of join by key."""
    ts = rows.schema["ts"]
    flat = [(*key, s, e) for key, sp in spans.items() for s, e in _merged(sp)]
    if not flat or rows.is_empty():
        return pl.Series("overlaps", [False] * rows.height, pl.Boolean)
    schema = {**{c: rows.schema[c] for c in by}, "_s": ts, "_e": ts}
    frame = pl.DataFrame(flat, schema=schema, orient="row").sort("_s")
    ordered = rows.select(*by, "began", "ts").with_row_index("_i").sort("ts")  # sorted as a whole: per key too
    hit = ordered.join_asof(frame, left_on="ts", right_on="_s", by=list(by) or None, check_sortedness=False)
    hit = hit.with_columns(overlaps=pl.col("_e").is_not_null() & (pl.col("_e") >= pl.col("began"))).sort("_i")
    return hit["overlaps"]


#: A span of a stronger claim and the share of the loss there the weaker target keeps (0: none of it; a straggler
#: during a fabric finding takes only its own share, `SHARE`, and leaves the rest)
Carve = tuple[dt.datetime, dt.datetime, float]
#: The evidence key of a slowdown that claims only a share of the loss while the findings it names (`DURING`) last
SHARE, DURING = "own_share", "during"


def uncarved(during: pl.DataFrame, carved: Mapping[tuple[int, str], Sequence[Carve]]) -> pl.DataFrame:
    """`during` with each target's (fid, job) rows that overlap a span carved from it left out, or, where the span
    leaves it a share, weighed by that share (`weight`)."""
    keeps = sorted({keep for spans in carved.values() for _, _, keep in spans})
    out = during
    for keep in keeps:
        spans = {key: [(a, b) for a, b, k in sp if k == keep] for key, sp in carved.items()}
        hit = _overlaps(out, spans, ["fid", "job_id"])
        if keep <= 0:
            out = out.filter(~hit)
        else:
            out = out.with_columns(weight=pl.when(hit).then(pl.col("weight") * keep).otherwise(pl.col("weight")))
    return out


#: How directly a finding's ports are known to carry a job (`evidence.job_paths`, `Fabric.path_evidence`): on the
#: job's NIC, on a path its connections were seen to take, or on one its placement merely allows.
_PATH_CLAIM = {"placed": 2, "observed": 1, "possible": 0}


#: Of two findings on the job's path, the one that leaves its traffic less of the path claims the loss: a
#: deadlock or a storm (a queue held paused: nothing) and a link down (nothing on that link until it is back)
#: before an incast (the receiver's line rate shared by its senders), before lost CNPs (senders not slowed, the
#: incast's pauses spread), before an imbalanced member or a failing optic (a share of one member, or resends),
#: before microbursts (milliseconds of a full queue).
_KIND_CLAIM = {
    "pfc_deadlock": 6, "pfc_storm": 5, "link_flap": 5, "incast": 4, "cnp_loss": 3, "ecmp_imbalance": 2,
    "polarization": 2, "degraded_optics": 2, "microburst": 1,
}  # fmt: skip


def _claim(f: Finding, job: str) -> tuple[bool, bool, bool, int, int, int]:
    """How directly a finding claims a job, stronger first: it is the job's own slowdown (its detector found that
    no other finding explains it: a straggler, or a cause nobody reported), it causes congestion (not an
    amplifier), it names the job, its ports are known to carry the job's traffic (`_PATH_CLAIM`), it leaves the
    job's traffic less (`_KIND_CLAIM`), it names few jobs."""
    named = job in (f.job_ids or ())
    path = _PATH_CLAIM.get(str((f.evidence.get("job_paths") or {}).get(job, "possible")), 0)
    kind = _KIND_CLAIM.get(f.kind, 0)
    own = f.kind == SLOWDOWN and named
    return (own, f.kind not in AMPLIFIERS, named, path, kind, -len(f.job_ids or ()))


def _share(g: Finding, f: Finding) -> float | None:
    """The share of a job's loss `g` claims while `f` lasts, where `g` is a straggler found during `f` (a fabric
    finding that slowed the job too: `DURING`); None where `g` claims all of it."""
    share = g.evidence.get(SHARE)
    if g.kind != SLOWDOWN or not isinstance(share, int | float):
        return None
    during = {(str(d.get("kind")), str(d.get("start"))) for d in g.evidence.get(DURING) or () if isinstance(d, dict)}
    return float(share) if (f.kind, f.start.isoformat()) in during else None


def claimed_spans(findings: Sequence[Finding], jobs: Sequence[set[str]]) -> dict[tuple[int, str], list[Carve]]:
    """(finding, job) -> the spans of overlapping findings that claim the job more directly (see the module
    docstring), with the share of the loss the finding keeps there: none, while they last, except beside a
    straggler found during a fabric finding, which takes its own share and leaves the fabric finding the rest."""
    out: dict[tuple[int, str], list[Carve]] = {}
    for i, f in enumerate(findings):
        for k, g in enumerate(findings):
            if k == i or g.start > f.end or g.end < f.start or _share(f, g) is not None:
                continue  # f a straggler during g: the pair is carved when g is the target
            share = _share(g, f)
            for job in jobs[i] & jobs[k]:
                stronger, mine = _claim(g, job), _claim(f, job)
                if share is not None:  # g, a straggler during f: g takes its share there, f keeps the rest
                    out.setdefault((i, job), []).append((g.start, g.end, 1.0 - share))
                    out.setdefault((k, job), []).append((f.start, f.end, share))
                elif stronger > mine or (stronger == mine and (g.start, k) < (f.start, i)):
                    out.setdefault((i, job), []).append((g.start, g.end, 0.0))
    return out
