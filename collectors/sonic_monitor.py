"""SONiC COUNTERS_DB as `redis-cli MONITOR` recorded it: every flex-counter poll, stamped when redis took it.

A MONITOR trace is what SONiC engineers post when a counter misbehaves (a PFC storm the watchdog missed): one
line per command, `<epoch> [<db> <client>] "HMSET" "COUNTERS:oid:0x..." "<field>" "<value>" ...`. Unlike a
dump it holds the counters' history, each poll at its own time. Writes of COUNTERS_DB (db 2) objects become
counter rows through the same mapping as the dump importer (`importers.add_value`), named through a name map
where one is given (`COUNTERS_PORT_NAME_MAP` and the queue and PG maps of a dump), else under their oid (the
evidence is kept; a port named `oid-0x100000000000d` is still one port). The PFC watchdog's lua scripts write
its verdict (`PFC_WD_STATUS`: `stormed`/`operational`, kept) and their bookkeeping (`*_last` copies of the
counters, skipped and counted, as are reads).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.importers import add_value

__all__ = ["COUNTERS_DB", "MonitorTrace", "monitor_rows"]

#: redis database number of COUNTERS_DB on SONiC (database_config.json)
COUNTERS_DB = 2
_LINE = re.compile(r"^(?P<ts>\d+(?:\.\d+)?) \[(?P<db>\d+) (?P<client>[^\]]*)\] (?P<cmd>.*)$")
_WRITES = frozenset({"HSET", "HMSET"})


@dataclass
class MonitorTrace:
    """The rows of a trace and what was not turned into rows, by reason."""

    rows: CounterRows
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def monitor_rows(text: str, device: str, names: Mapping[str, str] | None = None) -> MonitorTrace:
    """Counter rows of a `redis-cli MONITOR` trace (see the module docstring); `names`: oid -> object name."""
    out = MonitorTrace(CounterRows())
    names = names or {}
    for line in text.splitlines():
        if not line.strip() or line.strip() == "OK":
            continue
        m = _LINE.match(line.strip())
        if m is None:
            out.rows.malformed += 1
            continue
        try:
            args = shlex.split(m.group("cmd"))
        except ValueError:
            out.rows.malformed += 1
            continue
        if not args or args[0].upper() not in _WRITES:
            out.skip("a read or another command")
            continue
        if int(m.group("db")) != COUNTERS_DB:
            out.skip("another database")
            continue
        if len(args) < 4 or len(args) % 2:
            out.rows.malformed += 1
            continue
        table, _, oid = args[1].partition(":")
        if table != "COUNTERS" or not oid.startswith("oid:"):
            out.skip("not a COUNTERS object")
            continue
        obj = names.get(oid) or oid.replace(":", "-")  # `oid-0x...`: a `:` would read as port:queue
        seconds, _, fraction = m.group("ts").partition(".")
        ts = int(seconds) * 1_000_000_000 + int(fraction[:9].ljust(9, "0"))  # to the microsecond, exactly
        for name, value in zip(args[2::2], args[3::2], strict=True):
            if m.group("client") == "lua" and name.endswith("_last"):
                out.skip("the PFC watchdog's own bookkeeping (lua `_last` fields)")
                continue
            add_value(out.rows, ts, device, [("COUNTERS", {}), (obj, {}), (name, {})], value, "COUNTERS_DB")
    return out
