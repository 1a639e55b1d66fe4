"""What Grafana and the ClickHouse plugin do to a panel's SQL before ClickHouse sees it, for the tests.

Two steps, in the order they happen:

1. Grafana's template service (frontend) replaces variables: `$name`, `${name}`, `${name:format}`,
   `[[name]]`. The formatters below copy Grafana's (scenes `formatRegistry`); a variable without a format
   gets the plugin's own default (`CHDatasource.format`: lists become `'a','b'`, single values raw).
   Names Grafana does not know (`$__timeFilter`...) are left alone.
2. The plugin's backend (`pkg/macros/macros.go`) expands its macros from the request's time range and
   interval: `$__timeFilter(c)`, `$__timeFilter_ms(c)`, `$__dateFilter(c)`, `$__timeInterval(c)`,
   `$__timeInterval_ms(c)`, `$__fromTime`, `$__toTime`, `$__fromTime_ms`, `$__toTime_ms`, `$__interval_s`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

Value = str | list[str]


@dataclass(frozen=True)
class Request:
    start: dt.datetime
    end: dt.datetime
    interval_s: int = 5
    variables: Mapping[str, Value] = field(default_factory=dict)


def _strict_uri(value: str) -> str:
    """encodeURIComponent plus `!'()*`: only `[A-Za-z0-9._~-]` stay as they are."""
    return quote(value, safe="")


def _percentencode(v: Value) -> str:
    return _strict_uri("{" + ",".join(v) + "}") if isinstance(v, list) else _strict_uri(v)


def _singlequote(v: Value) -> str:
    def one(s: str) -> str:
        return "'" + s.replace("'", "\\'") + "'"

    return ",".join(one(s) for s in v) if isinstance(v, list) else one(v)


def _sqlstring(v: Value) -> str:
    def one(s: str) -> str:
        return "'" + s.replace("'", "''").replace('"', '\\"') + "'"

    return ",".join(one(s) for s in v) if isinstance(v, list) else one(v)


def _plugin_default(v: Value) -> str:
    return "'" + "','".join(v) + "'" if isinstance(v, list) else v


FORMATS: dict[str, Callable[[Value], str]] = {
    "percentencode": _percentencode,
    "singlequote": _singlequote,
    "sqlstring": _sqlstring,
    "raw": lambda v: ",".join(v) if isinstance(v, list) else v,
    "csv": lambda v: ",".join(v) if isinstance(v, list) else v,
}

# Grafana's variable regex (public/app/features/variables/utils.ts).
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")


def replace_variables(sql: str, variables: Mapping[str, Value]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in variables:
            return m.group(0)
        value = variables[name]
        if fmt is None:
            return _plugin_default(value)
        return FORMATS[fmt](value)

    return _VARIABLE.sub(sub, sql)


def _args(sql: str, open_at: int) -> tuple[list[str], int]:
    """Comma-separated arguments of the call whose `(` is at `open_at`, and the index after its `)`."""
    depth, args, start = 0, [], open_at + 1
    for i in range(open_at, len(sql)):
        ch = sql[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(sql[start:i].strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(sql[start:i].strip())
            start = i + 1
    raise ValueError(f"unbalanced macro call at {open_at}: {sql[open_at : open_at + 40]!r}")


def expand_macros(sql: str, req: Request) -> str:
    frm, to = int(req.start.timestamp()), int(req.end.timestamp())
    frm_ms, to_ms = int(req.start.timestamp() * 1000), int(req.end.timestamp() * 1000)
    interval = max(req.interval_s, 1)
    with_args: dict[str, Callable[[list[str]], str]] = {
        "timeFilter": lambda a: f"{a[0]} >= toDateTime({frm}) AND {a[0]} <= toDateTime({to})",
        "timeFilter_ms": lambda a: (
            f"{a[0]} >= fromUnixTimestamp64Milli({frm_ms}) AND {a[0]} <= fromUnixTimestamp64Milli({to_ms})"
        ),
        "dateFilter": lambda a: f"{a[0]} >= toDate('{req.start:%Y-%m-%d}') AND {a[0]} <= toDate('{req.end:%Y-%m-%d}')",
        "timeInterval": lambda a: f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {interval} second)",
        "timeInterval_ms": lambda a: (
            f"toStartOfInterval(toDateTime64({a[0]}, 3), INTERVAL {interval * 1000} millisecond)"
        ),
    }
    bare = {
        "fromTime": f"toDateTime({frm})",
        "toTime": f"toDateTime({to})",
        "fromTime_ms": f"fromUnixTimestamp64Milli({frm_ms})",
        "toTime_ms": f"fromUnixTimestamp64Milli({to_ms})",
        "interval_s": str(interval),
    }
    out, i = [], 0
    macro = re.compile(r"\$__(\w+)")
    while (m := macro.search(sql, i)) is not None:
        out.append(sql[i : m.start()])
        name = m.group(1)
        if name in with_args and m.end() < len(sql) and sql[m.end()] == "(":
            args, i = _args(sql, m.end())
            out.append(with_args[name](args))
        elif name in bare:
            out.append(bare[name])
            i = m.end()
        else:
            raise ValueError(f"unknown macro $__{name}")
    out.append(sql[i:])
    return "".join(out)


def expand(sql: str, req: Request) -> str:
    """The SQL ClickHouse receives for `sql` under `req`."""
    return expand_macros(replace_variables(sql, req.variables), req)
