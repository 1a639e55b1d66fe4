"""What the BPF programs need from this host: bcc, their C text, kernel headers, tracefs, and kprobes.

bcc is imported lazily (`load_bcc`): the rest of rocescope works without it. It comes from Debian's
python3-bpfcc; scripts/bootstrap links it into the venv. Kernel headers (`kernel_source`):
BCC_KERNEL_SOURCE if set, else the running kernel's /lib/modules build tree, else the merged tree
scripts/system-deps writes. Tracepoint fields and drop reason names are read from the running
kernel's tracefs format files, since both differ between kernel versions. Anything missing raises
`EbpfUnavailable` with what to install or enable.
"""

from __future__ import annotations

import ctypes
import importlib.resources
import logging
import os
import platform
import re
from pathlib import Path
from typing import Any

from rocescope.errors import RocescopeError

__all__ = [
    "DEFAULT_KERNEL_HEADERS",
    "TRACEFS_CANDIDATES",
    "EbpfUnavailable",
    "drop_reason_names",
    "kernel_source",
    "kprobes_unavailable",
    "load_bcc",
    "program_text",
    "tracefs_root",
    "tracepoint_fields",
]

log = logging.getLogger(__name__)

#: Where scripts/system-deps merges Debian's split kernel headers (common + arch) into one tree.
DEFAULT_KERNEL_HEADERS = "/usr/src/linux-headers-merged"
TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


class EbpfUnavailable(RocescopeError):
    """bcc, kernel headers, tracefs or a BPF feature this collector needs is missing."""


def load_bcc() -> Any:
    """The `bcc` module, imported only when eBPF is actually used."""
    try:
        import bcc
    except ImportError as exc:
        raise EbpfUnavailable(
            f"bcc is not importable ({exc}): install Debian's python3-bpfcc (scripts/system-deps) and run "
            "scripts/bootstrap, which links it into the venv"
        ) from exc
    return bcc


def program_text(name: str) -> str:
    """C source of one of the programs shipped in `ebpf/programs/`."""
    return (importlib.resources.files("rocescope.collectors.ebpf.programs") / name).read_text()


def kernel_source() -> str | None:
    """The headers bcc will compile against; sets BCC_KERNEL_SOURCE to the merged tree when bcc would
    otherwise find none (Debian splits headers in two directories, which bcc cannot combine alone)."""
    given = os.environ.get("BCC_KERNEL_SOURCE")
    if given:
        return given
    build = Path("/lib/modules") / platform.release() / "build"
    if build.exists():
        return None
    if Path(DEFAULT_KERNEL_HEADERS, "include").is_dir():
        os.environ["BCC_KERNEL_SOURCE"] = DEFAULT_KERNEL_HEADERS
        return DEFAULT_KERNEL_HEADERS
    raise EbpfUnavailable(
        f"no kernel headers: neither {build} nor {DEFAULT_KERNEL_HEADERS} exists and BCC_KERNEL_SOURCE is unset "
        "(scripts/system-deps installs linux-headers and merges them there)"
    )


def tracefs_root(mount: bool = True) -> str:
    """Where tracefs is mounted; mounts it at /sys/kernel/tracing (as systemd would) when it is not."""
    for root in TRACEFS_CANDIDATES:
        if Path(root, "events").is_dir():
            return root
    target = TRACEFS_CANDIDATES[0]
    if mount and Path(target).is_dir():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(b"tracefs", target.encode(), b"tracefs", 0, None) == 0:
            log.info("mounted tracefs at %s", target)
            return target
        err = ctypes.get_errno()
        raise EbpfUnavailable(f"tracefs is not mounted and mounting it at {target} failed: {os.strerror(err)}")
    raise EbpfUnavailable(f"tracefs is not mounted (looked at {', '.join(TRACEFS_CANDIDATES)})")


def _format_file(category: str, event: str) -> str:
    path = Path(tracefs_root(), "events", category, event, "format")
    try:
        return path.read_text()
    except OSError as exc:
        raise EbpfUnavailable(f"this kernel has no tracepoint {category}:{event} ({exc})") from exc


def tracepoint_fields(category: str, event: str) -> set[str]:
    """Field names of a tracepoint, from its format file (fields differ between kernel versions)."""
    return set(re.findall(r"field:[^;]*?(\w+)(?:\[\d*\])?;", _format_file(category, event)))


def drop_reason_names() -> dict[int, str]:
    """skb_drop_reason values -> names as this kernel prints them (`__print_symbolic` of kfree_skb)."""
    text = _format_file("skb", "kfree_skb")
    return {int(n): name for n, name in re.findall(r'\{\s*(\d+),\s*"(\w+)"\s*\}', text)}


def kprobes_unavailable() -> str | None:
    """Why kprobes cannot be attached here, or None when they can."""
    if Path("/sys/bus/event_source/devices/kprobe").exists():
        return None
    for root in TRACEFS_CANDIDATES:
        if Path(root, "kprobe_events").exists():
            return None
    return "the kernel has no kprobes (no kprobe PMU and no kprobe_events; CONFIG_KPROBES is off)"
