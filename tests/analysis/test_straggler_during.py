"""A straggler during a fabric incident (issue 30 item 6): the incident slows every rank of the job alike, the
straggler makes the others wait; with Inspector's event traces the straggler is named with its own share of the
job's extra time, and the GPU-seconds are split between it and the fabric finding, adding up to the job's loss."""

from __future__ import annotations

import datetime as dt

from nccl_jobs import RingJob, land_collectives, one_leaf

from rocescope.analysis.blame import with_blame
from rocescope.analysis.detectors import unexplained_slowdown
from rocescope.analysis.detectors.base import Context
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Frames
from rocescope.analysis.impact import with_impact
from rocescope.pipeline.store import Store

from telemetry import Telemetry, steps

HOSTS = tuple(f"node-{i}" for i in range(8))
FABRIC = (100.0, 220.0)  # the incident: every collective of the job 1.6x as long
LATE = (120.0, 200.0)  # rank 5 issues its collectives 15 ms late


def _job(store: Store, now: dt.datetime, traced: bool) -> tuple[Telemetry, RingJob, Finding]:
    t = Telemetry(now, 300)
    job = RingJob(
        "team-a/train", HOSTS, "0x5a", traced=traced, slow=steps((*FABRIC, 1.6), base=1.0),
        late={5: steps((*LATE, 15_000.0))},
    )  # fmt: skip
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, job.records(now, 300))
    at = [now + dt.timedelta(seconds=s) for s in FABRIC]
    paths = {"job_paths": {job.job_id: "placed"}}
    incast = Finding("incast", "warning", at[0], at[1], ("leaf1",), ("leaf1:Ethernet1/1", "node-0:eth0"), 3, 1.0,
                     "incast into node-0", evidence=paths, job_ids=(job.job_id,))  # fmt: skip
    return t, job, incast


def _slowdowns(store: Store, t: Telemetry, incast: Finding) -> list[Finding]:
    ctx = Context(Frames(store, t.window), Fabric.from_frames(Frames(store, t.window)))
    ctx.prior = [incast]
    return unexplained_slowdown.detect(ctx, unexplained_slowdown.SlowdownParams())


def test_a_straggler_during_a_fabric_incident_is_named_with_its_own_share(store: Store, now: dt.datetime) -> None:
    t, job, incast = _job(store, now, traced=True)
    (slow,) = _slowdowns(store, t, incast)
    assert slow.devices == ("node-5",) and slow.evidence["stragglers"][0]["rank"] == 5
    assert [d["kind"] for d in slow.evidence["during"]] == ["incast"]
    # the straggler's share: 7 ranks wait 15 ms for 80 s, of all the job's extra time over the 120 s spell
    alone = RingJob(job.job_id, HOSTS, "0x5a", slow=job.slow).lost_gpu_seconds(*FABRIC)  # the incident alone
    own = 1.0 - alone / job.lost_gpu_seconds(*FABRIC)  # the counterfactual: the same spell without the straggler
    assert abs(slow.evidence["own_share"] - own) <= 0.2 * own, (slow.evidence["own_share"], own)
    assert "straggler during incast" in slow.summary

    frames = Frames(store, t.window)
    fabric = Fabric.from_frames(frames)
    straggler, fabric_finding = with_blame(with_impact([slow, incast], frames.collectives(600), fabric), fabric)
    mine = straggler.evidence["impact"][job.job_id]["gpu_seconds_lost"]
    theirs = fabric_finding.evidence["impact"][job.job_id]["gpu_seconds_lost"]
    total = job.lost_gpu_seconds(*FABRIC)
    assert abs(mine + theirs - total) <= 0.2 * total, (mine, theirs, total)  # each moment counted once, split
    assert abs(mine - own * total) <= 0.2 * own * total, (mine, own * total)
    assert straggler.evidence["blame"]["cause"] == "a straggler in the job"


def test_without_event_traces_a_slowdown_a_fabric_incident_explains_names_no_straggler(
    store: Store, now: dt.datetime
) -> None:
    """Without issue times, the rank that waited least may be one the congestion spared: no straggler is told."""
    t, _job_unused, incast = _job(store, now, traced=False)
    assert _slowdowns(store, t, incast) == []
