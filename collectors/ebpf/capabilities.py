"""Linux capabilities of this process (`CapEff` in /proc/self/status), and the eBPF collector's check.

What `rocescope collect ebpf` needs: CAP_BPF + CAP_PERFMON to load programs, read maps and attach
tracepoints/kprobes (CAP_SYS_ADMIN stands in for both on kernels before 5.8), CAP_NET_ADMIN to attach
XDP (`--interface`); optionally CAP_SYS_PTRACE (other processes' /proc, for QP owners) and
CAP_SYS_ADMIN (to mount tracefs where it is not mounted). Grant exactly those (a pod's
`securityContext.capabilities.add`, systemd `AmbientCapabilities=`, `setpriv`), not plain root: a process
that also holds CAP_SYS_MODULE or CAP_SYS_RAWIO (load kernel modules, raw memory and port I/O: what
plain root and `--privileged` containers get) can rewrite the kernel, and no eBPF collector needs that.
`check_ebpf` refuses such a process unless the operator passes `--allow-privileged`.
"""

from __future__ import annotations

from pathlib import Path

from rocescope.errors import RocescopeError

__all__ = ["CAPABILITIES", "PrivilegeError", "check_ebpf", "effective", "names"]

#: The capability numbers this module speaks of (linux/capability.h).
CAPABILITIES = {
    "CAP_NET_ADMIN": 12,
    "CAP_SYS_MODULE": 16,
    "CAP_SYS_RAWIO": 17,
    "CAP_SYS_PTRACE": 19,
    "CAP_SYS_ADMIN": 21,
    "CAP_PERFMON": 38,
    "CAP_BPF": 39,
}
#: Held together with what the collector needs, these make the process the kernel's equal.
ROOT_EQUIVALENT = ("CAP_SYS_MODULE", "CAP_SYS_RAWIO")


class PrivilegeError(RocescopeError):
    """The process has too few capabilities for what was asked, or far more than it needs."""


def effective(status: str | None = None) -> int:
    """The effective capability mask: of `status` (a /proc/<pid>/status text), else of this process."""
    text = status if status is not None else Path("/proc/self/status").read_text()
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split(":", 1)[1].strip(), 16)
    raise PrivilegeError("no CapEff line in /proc/self/status: cannot tell this process's capabilities")


def names(mask: int) -> list[str]:
    """The known capabilities set in `mask`."""
    return [name for name, bit in CAPABILITIES.items() if mask >> bit & 1]


def check_ebpf(xdp: bool, allow_privileged: bool = False, caps: int | None = None) -> list[str]:
    """The capabilities the collector will use; raises PrivilegeError when one is missing, or when the
    process is root-equivalent and `allow_privileged` is not given."""
    held = set(names(effective() if caps is None else caps))
    excess = [name for name in ROOT_EQUIVALENT if name in held]
    if excess and not allow_privileged:
        raise PrivilegeError(
            f"refusing to run with {' and '.join(excess)} (fully privileged, e.g. plain root): grant only "
            "CAP_BPF, CAP_PERFMON and, for XDP, CAP_NET_ADMIN (optionally CAP_SYS_PTRACE for QP owners), "
            "or pass --allow-privileged"
        )
    need = [] if {"CAP_BPF", "CAP_PERFMON"} <= held or "CAP_SYS_ADMIN" in held else ["CAP_BPF", "CAP_PERFMON"]
    if xdp and "CAP_NET_ADMIN" not in held:
        need.append("CAP_NET_ADMIN")
    if need:
        raise PrivilegeError(f"missing {', '.join(need)}: the eBPF collector cannot load its programs without them")
    return sorted(held)
