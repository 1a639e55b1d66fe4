"""Values as devices spell them: numbers, state words, and port speeds written as words.

Telemetry values arrive as numbers, numeric text (SONiC and JSON_IETF uint64) or words. Words become
numbers in two ways:

* state words for any path (`UP`/`DOWN`, `enable`/`disable`, `true`/`false` -> 1/0), as oper and admin
  status and pause status need;
* words a metric is reported in (`TEXT_VALUES`): a port speed is an OpenConfig identity
  (`openconfig-if-ethernet:SPEED_400GB`, openconfig-if-ethernet.yang `ETHERNET_SPEED`) or an SR Linux
  enum (`400G`, srl_nokia-interfaces.yang `port-speed`), read as bits/s; SONiC's PFC watchdog status
  (`stormed`/`operational`) as 1/0.

Some metrics are readings of a setting where zero means "not known" (`POSITIVE_ONLY`, from the catalog's
`zero_is_unknown`): a port with no
negotiated speed says 0, `SPEED_UNKNOWN` or `N/A`. Such a value is skipped and counted as non-numeric,
never stored as a zero, so no port is ever judged "0% busy" of a zero speed. `reading` applies all of it;
the gNMI decoder inlines the same rules on its hot path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from rocescope import catalog

__all__ = ["PFCWD_STATUS", "POSITIVE_ONLY", "STATE_WORDS", "TEXT_VALUES", "number", "reading", "scalar", "speed_bps"]

#: Words that stand for 1/0 on any path (oper status, SONiC pause status, booleans as text).
STATE_WORDS: Mapping[str, float] = {
    "up": 1.0,
    "true": 1.0,
    "down": 0.0,
    "false": 0.0,
    "lower_layer_down": 0.0,
    "not_present": 0.0,
    "dormant": 0.0,
    "testing": 0.0,  # IF-MIB / OpenConfig admin and oper TESTING: no packets pass
    "enable": 1.0,  # SR Linux admin-state
    "disable": 0.0,
}

#: SONiC's PFC watchdog queue status (COUNTERS_DB `PFC_WD_STATUS`), as `pfcwd_stormed`.
PFCWD_STATUS: Mapping[str, float] = {"stormed": 1.0, "operational": 0.0}

#: OpenConfig ETHERNET_SPEED identities: SPEED_10MB ... SPEED_2500MB ... SPEED_1600GB (SPEED_UNKNOWN: None).
_OPENCONFIG_SPEED = re.compile(r"SPEED_(\d{1,5})(MB|GB)")
#: SR Linux port-speed enum: 10M, 100M, 1G, 10G, 25G, ..., 800G, 1T.
_SRLINUX_SPEED = re.compile(r"(\d{1,5}(?:\.\d{1,3})?)([MGT])")
_UNIT = {"MB": 1e6, "GB": 1e9, "M": 1e6, "G": 1e9, "T": 1e12}


def number(text: str | bytes) -> float | None:
    """A numeric string or a state word as a number, else None."""
    try:
        return float(text)
    except ValueError:
        word = text.decode(errors="replace") if isinstance(text, bytes) else text
        return STATE_WORDS.get(word.strip().lower())


def scalar(value: object) -> float | None:
    """A JSON scalar (bool, number, numeric text or state word) as a number, else None."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return number(value)
    return None


def speed_bps(text: str) -> float | None:
    """A port speed word in bits/s: an OpenConfig identity (module prefix or not) or an SR Linux enum.

    `SPEED_UNKNOWN`, `N/A` and anything else unreadable give None."""
    word = text.strip().rpartition(":")[2].upper()
    m = _OPENCONFIG_SPEED.fullmatch(word) or _SRLINUX_SPEED.fullmatch(word)
    if m is None:
        return None
    bps = float(m.group(1)) * _UNIT[m.group(2)]
    return bps if bps > 0 else None


#: Metrics whose devices report words: the parser turns the word into the metric's unit (no catalog scale).
TEXT_VALUES: Mapping[str, Callable[[str], float | None]] = {
    "port_speed_bps": speed_bps,
    "port_speed_configured_bps": speed_bps,
    "pfcwd_stormed": lambda text: PFCWD_STATUS.get(text.strip().lower()),
}
#: Metrics where zero or less means "not known" (a speed not negotiated), never a real value (the catalog says).
POSITIVE_ONLY: frozenset[str] = frozenset(m.name for m in catalog.METRICS if m.zero_is_unknown)


def reading(metric: str | None, value: object, factor: float = 1.0) -> float | None:
    """The value of `metric` (None: a name the catalog does not know) in its unit, or None if unreadable.

    Numbers are scaled by the catalog's `factor`; words go through the metric's parser (already in its
    unit); a POSITIVE_ONLY metric's zero, negative or NaN reading is None."""
    x = scalar(value)
    if x is None:
        if metric is None or not isinstance(value, str):
            return None
        parse = TEXT_VALUES.get(metric)
        return None if parse is None else parse(value)
    x *= factor
    if metric in POSITIVE_ONLY and not (x > 0 and math.isfinite(x)):
        return None
    return x
