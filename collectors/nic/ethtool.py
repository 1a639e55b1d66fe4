"""Parser for `ethtool -S <netdev>` text (mlx5_core, bnxt_en, ice, i40e and any other driver).

`ethtool -S` prints one `name: value` line per statistic under a `NIC statistics:` header. Drivers
also print per-queue (per-ring, per-channel) statistics; those describe host rings, not the port, and
there are hundreds per NIC, so they are recognised and skipped (counted in `queue_values`):

* bnxt_en: `[N]: rx_ucast_packets: 10198513532` (ring N);
* mlx5_core: `rx0_packets`, `tx15_bytes`, `ch3_events`, `xdpsq0_*`, `ptp_cq0_*`, `qos_tx0_*`;
* ice / ixgbe: `tx_queue_0_packets`, `rx_queue_7_bytes`;
* i40e: `tx-0.tx_packets`, `rx-3.rx_bytes`.

Port-level names are returned unchanged (`rx_bytes_phy`, `rx_prio3_pause`, `rx_priority_3_xoff.nic`,
`port.rx_priority_3_xoff`, `rx_pfc_ena_frames_pri3`...): mapping them to canonical metrics is the
catalog's job (`rocescope.catalog.resolve`). A line that is neither a statistic, a header nor blank
is malformed: it is counted, the first few are kept for the report, one warning line is logged per
parsed text, and the good lines around it are kept. The parser never raises on bad input.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

__all__ = [
    "DRIVER_VENDORS",
    "EthtoolStats",
    "is_queue_stat",
    "parse_ethtool_stats",
    "vendor_of_driver",
]

log = logging.getLogger(__name__)

#: Kernel driver of a netdev -> catalog vendor (`rocescope.catalog.VENDORS`) of its `ethtool -S` names.
DRIVER_VENDORS: dict[str, str] = {
    "mlx5_core": "mlx5",
    "bnxt_en": "bnxt",
    "ice": "ice",
    "i40e": "i40e",
}

#: Per-queue statistic names (see the module docstring); matched at the start of the name.
_Q = r"(?:(?:rx|tx|ch|xdpsq|xsk|qos_tx|ptp_[a-z]+)\d+_|[rt]x_queue_\d+_|[rt]x-\d+\.)"
_QUEUE_NAME = re.compile(_Q)
#: bnxt_en per-ring line body after the leading `[N]:`.
_RING_PREFIX = re.compile(r"\[\d+\]:\s*")
#: How many malformed lines a result keeps verbatim (all are counted).
MAX_EXAMPLES = 5
_MAX_LINE_SHOWN = 120


def vendor_of_driver(driver: str) -> str:
    """Catalog vendor for a driver; an unknown driver is its own vendor (nothing in the catalog matches)."""
    return DRIVER_VENDORS.get(driver, driver or "unknown")


def is_queue_stat(name: str) -> bool:
    """True for a per-queue / per-ring / per-channel statistic name."""
    return _QUEUE_NAME.match(name) is not None


@dataclass
class EthtoolStats:
    """What one `ethtool -S` text held."""

    #: Port-level statistics, in output order: (raw name, value).
    values: list[tuple[str, int]] = field(default_factory=list)
    #: Per-queue statistics recognised and skipped.
    queue_values: int = 0
    #: Lines that were neither a statistic, a header (words and a colon) nor blank.
    malformed: int = 0
    #: The first `MAX_EXAMPLES` malformed lines: (1-based line number, line, shortened).
    examples: list[tuple[int, str]] = field(default_factory=list)


_QUEUE = ""  # _NAMES value of a per-queue name
_NAMES_LIMIT = 100_000
#: The text before a line's last ':' (leading blanks included) -> its statistic name, or _QUEUE. Drivers
#: print the same names every poll, so after the first parse a statistic line costs one dict lookup.
_NAMES: dict[str, str] = {}


def _classify(head: str) -> str | None:
    """Statistic name for the text before the value's ':', _QUEUE for per-queue ones, None if malformed."""
    name = head.strip()
    if name.startswith("["):
        ring = _RING_PREFIX.match(name)
        return _QUEUE if ring is not None and ring.end() < len(name) else None
    if not name or ":" in name:
        return None
    return _QUEUE if _QUEUE_NAME.match(name) else name


def parse_ethtool_stats(text: str, source: str = "ethtool -S", logger: logging.Logger | None = log) -> EthtoolStats:
    """Parse `ethtool -S` output. Malformed lines are counted and, if `logger`, reported in one warning."""
    out = EthtoolStats()
    values = out.values
    names = _NAMES
    queue = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        head, sep, raw = line.rpartition(":")
        if sep:
            name = names.get(head)
            if name is None:
                name = _classify(head)
                if name is not None:
                    if len(names) >= _NAMES_LIMIT:
                        names.clear()
                    names[head] = name
            try:
                value = int(raw)
            except ValueError:
                value = None
            if value is not None and name is not None:
                if name:
                    values.append((name, value))
                else:
                    queue += 1
                continue
            if value is None and not raw.strip() and " " in head.strip() and ":" not in head:
                continue  # a section header: "NIC statistics:" (statistic names have no spaces)
        elif not line.strip():
            continue
        out.malformed += 1
        if len(out.examples) < MAX_EXAMPLES:
            out.examples.append((lineno, line.strip()[:_MAX_LINE_SHOWN]))
    out.queue_values = queue
    if out.malformed and logger is not None:
        logger.warning("%s", describe_malformed(source, out))
    return out


def describe_malformed(source: str, stats: EthtoolStats) -> str:
    """One line saying how many lines were skipped and showing the first one."""
    if not stats.malformed:
        return f"{source}: no malformed lines"
    lineno, line = stats.examples[0]
    return (
        f"{source}: skipped {stats.malformed} malformed line(s) of `ethtool -S` output, "
        f"kept {len(stats.values)} values; first at line {lineno}: {line!r}"
    )
