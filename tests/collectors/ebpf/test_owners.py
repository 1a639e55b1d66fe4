"""pid -> comm, cgroup (pod) and job, from the real /proc and from a /proc laid out as in a pod."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from rocescope.collectors.ebpf.owners import ProcOwnerResolver, pod_uid

Sleeper = Callable[[str], subprocess.Popen[bytes]]  # the `sleeper` fixture


def test_pod_uid_from_kubelet_cgroup_paths() -> None:
    uid = "0c2d6a3e-1b5f-4f0a-9a51-6d3c4e2b1a90"
    assert pod_uid(f"/kubepods/burstable/pod{uid}/3f1e9c0d2b") == uid
    systemd = f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri"
    assert pod_uid(systemd) == uid
    assert pod_uid("/user.slice/user-0.slice/session-3.scope") == ""


def test_owner_of_a_real_process_comes_from_proc(sleeper: Sleeper) -> None:
    child = sleeper("job-42")
    try:
        owner = ProcOwnerResolver().resolve(child.pid)
        assert owner.comm == "sleep"
        assert owner.job_id == "job-42"
        expected = Path(f"/proc/{child.pid}/cgroup").read_text().splitlines()
        assert any(owner.cgroup in line for line in expected)
    finally:
        child.kill()
        child.wait()
    gone = ProcOwnerResolver().resolve(child.pid, comm="trainer", cgroup_id=4242)
    assert (gone.comm, gone.cgroup, gone.job_id) == ("trainer", "cgroup-id:4242", "")


def test_owner_in_a_pod_maps_to_its_job(tmp_path: Path) -> None:
    uid = "0c2d6a3e-1b5f-4f0a-9a51-6d3c4e2b1a90"
    proc = tmp_path / "proc" / "77"
    proc.mkdir(parents=True)
    (proc / "comm").write_text("python\n")
    (proc / "cgroup").write_text(f"12:memory:/kubepods/burstable/pod{uid}/abc\n0::/\n")
    (proc / "environ").write_bytes(b"PATH=/bin\0SLURM_JOB_ID=999\0")
    resolver = ProcOwnerResolver(tmp_path / "proc", pod_jobs={uid: "team-a/llama-70b"})
    owner = resolver.resolve(77)
    assert (owner.comm, owner.cgroup, owner.pod, owner.job_id) == ("python", f"pod:{uid}", uid, "team-a/llama-70b")
    assert ProcOwnerResolver(tmp_path / "proc").resolve(77).job_id == "999"  # no pod mapping: the environment
