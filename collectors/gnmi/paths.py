"""gNMI paths as text and as (name, keys) elements: `/interfaces/interface[name=ethernet-1/1]/state`.

Key values may hold `/`; inside `[...]`, `\\]` and `\\\\` escape. Keys print sorted, so one path has
one spelling (it is the raw name of a value the catalog does not know).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rocescope.collectors.gnmi.proto import pb

__all__ = ["NO_KEYS", "Elem", "elems_str", "parse_path", "path_elems", "path_str"]

Elem = tuple[str, Mapping[str, str]]
NO_KEYS: Mapping[str, str] = {}


def parse_path(text: str, target: str = "", origin: str = "") -> Any:
    """`/interfaces/interface[name=Ethernet0]/state` (or `COUNTERS/Ethernet*`) as a gnmi.Path.

    Key values may hold `/` (`name=ethernet-1/1`); `\\]` and `\\\\` escape inside them. Raises ValueError.
    """
    elems: list[tuple[str, dict[str, str]]] = []
    i, n = 0, len(text)
    name: list[str] = []
    keys: dict[str, str] = {}

    def close() -> None:
        if name or keys:
            if not name:
                raise ValueError(f"path {text!r}: a key without an element name")
            elems.append(("".join(name), dict(keys)))
        name.clear()
        keys.clear()

    while i < n:
        ch = text[i]
        if ch == "/":
            close()
            i += 1
        elif ch == "[":
            end = i + 1
            buf: list[str] = []
            while end < n and text[end] != "]":
                if text[end] == "\\" and end + 1 < n:
                    end += 1
                buf.append(text[end])
                end += 1
            if end >= n:
                raise ValueError(f"path {text!r}: unclosed `[`")
            k, sep, v = "".join(buf).partition("=")
            if not sep or not k:
                raise ValueError(f"path {text!r}: key {''.join(buf)!r} is not NAME=VALUE")
            keys[k] = v
            i = end + 1
        else:
            if keys:
                raise ValueError(f"path {text!r}: text after a key in one element")
            name.append(ch)
            i += 1
    close()
    path = pb.Path(origin=origin, target=target)
    for nm, kv in elems:
        elem = path.elem.add(name=nm)
        for k, v in kv.items():
            elem.key[k] = v
    return path


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("]", "\\]")


def elems_str(elems: Iterable[Elem]) -> str:
    """`/a/b[k=v]/c`; keys sorted so one path has one spelling."""
    parts = []
    for name, keys in elems:
        parts.append(name + "".join(f"[{k}={_escape(keys[k])}]" for k in sorted(keys)))
    return "/" + "/".join(parts)


def path_elems(path: Any) -> list[Elem]:
    """(name, keys) of a gnmi.Path; the deprecated `element` strings when it has no `elem`."""
    if len(path.elem):
        return [(e.name, dict(e.key)) for e in path.elem]
    return [(name, NO_KEYS) for name in path.element]


def path_str(path: Any) -> str:
    """A gnmi.Path as text, with `target:` / `origin:` in front when set (for logs and raw names)."""
    head = "".join(f"{p}:" for p in (path.target, path.origin) if p)
    return head + elems_str(path_elems(path))
