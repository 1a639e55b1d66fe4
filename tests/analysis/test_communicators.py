"""A communicator's job where hosts are shared (no QP owner naming the process): from its other collectives' job,
else from the one job placed on all its hosts with as many NICs as it has ranks, landed in a real store."""

from __future__ import annotations

import datetime as dt

from nccl_jobs import RingJob, land_collectives

from rocescope.analysis.frames import Frames
from rocescope.pipeline.store import Store

from telemetry import Telemetry


def test_shared_hosts_resolve_through_the_communicator(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 60)
    train = RingJob("ns/train", ("h1", "h2", "h3"), "0xa")  # h3 is shared with the checkpoint transfer
    other = RingJob("ns/other", ("h4", "h5"), "0xb")  # both hosts shared with the transfer: sizes tell
    for job in (train, other):
        job.place(t)
    for host in ("h3", "h4", "h5"):  # a checkpoint transfer placed on three hosts, one NIC each
        t.endpoint("ns/ckpt", host, "eth1", "mlx5_1", "", 0)
    t.land(store)
    land_collectives(store, train.records(now, 60) + other.records(now, 60))
    coll = Frames(store, t.window).collectives()
    got = {(h, j, a) for h, j, a in coll.select("host", "job_id", "attribution").unique().iter_rows()}
    assert got == {
        ("h1", "ns/train", "host"),
        ("h2", "ns/train", "host"),
        ("h3", "ns/train", "communicator"),  # its communicator's other collectives name the job
        ("h4", "ns/other", "communicator"),  # the one job on h4 and h5 with two NICs for two ranks
        ("h5", "ns/other", "communicator"),
    }
