"""Reading sysfs: from a directory tree (the live `/`, or a fake one a test writes) or from memory.

`DirSysfs(root)` reads `<root>/sys/...` with plain file reads; `MemorySysfs` serves the same calls from
a `{path: value}` mapping, for example one loaded from a recorded `path: value` dump
(`parse_sysfs_dump`, the format of tests/fixtures/realdata/02_rdma/procfs_fixture_mlx5_0_sysfs.txt).
Both raise OSError for what is not there, like the real filesystem.

The value helpers turn the RDMA port attributes into numbers: `state` (`4: ACTIVE`) and `rate`
(`25 Gb/sec (1X EDR)`).
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "DirSysfs",
    "MemorySysfs",
    "Sysfs",
    "SysfsDump",
    "ib_rate_mbps",
    "ib_state_active",
    "parse_sysfs_dump",
]

log = logging.getLogger(__name__)


class Sysfs(Protocol):
    """The few filesystem calls the NIC host needs; paths are absolute (`/sys/class/net/eth3/speed`)."""

    def read(self, path: str) -> str:
        """The file's text, trailing newline removed; OSError if absent or unreadable."""

    def listdir(self, path: str) -> list[str]:
        """Entry names of a directory, sorted; OSError if it is not one."""

    def readlink(self, path: str) -> str:
        """Target of a symbolic link; OSError if it is not one."""

    def exists(self, path: str) -> bool: ...


class DirSysfs:
    """sysfs under a real directory: `DirSysfs("/")` is the host's, `DirSysfs(tmp_path)` a test's."""

    def __init__(self, root: str | os.PathLike[str] = "/"):
        self.root = os.fspath(root)

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path: str) -> str:
        # os-level calls: a poll reads a few hundred small files, and open() costs twice as much.
        fd = os.open(self._path(path), os.O_RDONLY)
        try:
            data = os.read(fd, 65536)
        finally:
            os.close(fd)
        return data.decode("utf-8", "replace").rstrip("\n")

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self._path(path)))

    def readlink(self, path: str) -> str:
        return os.readlink(self._path(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path))


class MemorySysfs:
    """sysfs served from memory: `files` maps paths to contents, `links` maps symlink paths to targets."""

    def __init__(self, files: Mapping[str, str], links: Mapping[str, str] | None = None):
        self.files = {_norm(p): v for p, v in files.items()}
        self.links = {_norm(p): v for p, v in (links or {}).items()}
        self._dirs: dict[str, set[str]] = {}
        for path in (*self.files, *self.links):
            child = path
            parent = posixpath.dirname(child)
            while child != parent:
                self._dirs.setdefault(parent, set()).add(posixpath.basename(child))
                child, parent = parent, posixpath.dirname(parent)

    def read(self, path: str) -> str:
        value = self.files.get(path)  # paths built by the host are already normal
        if value is None:
            value = self.files.get(_norm(path))
            if value is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
        return value.rstrip("\n")

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(self._dirs[_norm(path)])
        except KeyError:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path) from None

    def readlink(self, path: str) -> str:
        try:
            return self.links[_norm(path)]
        except KeyError:
            raise OSError(errno.EINVAL, "not a symbolic link", path) from None

    def exists(self, path: str) -> bool:
        p = _norm(path)
        return p in self.files or p in self.links or p in self._dirs


def _norm(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


@dataclass
class SysfsDump:
    """A parsed `path: value` dump."""

    files: dict[str, str] = field(default_factory=dict)
    malformed: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list)


def parse_sysfs_dump(text: str, source: str = "sysfs dump", logger: logging.Logger | None = log) -> SysfsDump:
    """Parse `/abs/path: value` lines (`#` comments and blank lines ignored); bad lines counted, not raised.

    The value is everything after the first `: `, so `4: ACTIVE` and `25 Gb/sec (1X EDR)` stay whole.
    """
    out = SysfsDump()
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        path, sep, value = stripped.partition(": ")
        if not sep and stripped.endswith(":"):
            path, sep, value = stripped[:-1], ":", ""
        if sep and path.startswith("/") and " " not in path:
            out.files[_norm(path)] = value
            continue
        out.malformed += 1
        if len(out.examples) < 5:
            out.examples.append((lineno, stripped[:120]))
    if out.malformed and logger is not None:
        lineno, line = out.examples[0]
        logger.warning(
            "%s: skipped %d malformed line(s), kept %d files; first at line %d: %r",
            source,
            out.malformed,
            len(out.files),
            lineno,
            line,
        )
    return out


_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def ib_rate_mbps(rate: str) -> int | None:
    """`25 Gb/sec (1X EDR)` -> 25000; `2.5 Gb/sec (1X SDR)` -> 2500; None if unparseable."""
    m = _RATE.match(rate)
    return None if m is None else round(float(m.group(1)) * 1000)


def ib_state_active(state: str) -> bool | None:
    """`4: ACTIVE` -> True; `1: DOWN`, `2: INIT`, `3: ARMED` -> False; None if unparseable."""
    _, _, name = state.partition(":")
    name = name.strip().upper() or state.strip().upper()
    if name in ("ACTIVE", "ACTIVE_DEFER"):
        return True
    if name in ("DOWN", "INIT", "ARMED", "NOP"):
        return False
    return None
