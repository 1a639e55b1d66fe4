"""Lone UTF-16 surrogates from JSON `\\ud800` escapes: replaced, so one garbled name cannot fail a batch.

`json` accepts `"\\ud800"` (and, from bytes, a surrogate's UTF-8 encoding) and returns a str Arrow
cannot encode; a device (or a damaged file) sending one would make the whole batch, with every good row
in it, fail to build. Found by tests/fuzz.
"""

from __future__ import annotations

import re
from typing import Any

_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
#: The escape, or a surrogate's UTF-8 bytes (json.loads decodes bytes with "surrogatepass").
_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def may_hold_surrogates(text: str | bytes) -> bool:
    """True when the JSON text may decode to a lone surrogate (the rare case worth a walk)."""
    if isinstance(text, bytes):
        return _ESCAPE_BYTES.search(text) is not None
    return _ESCAPE.search(text) is not None


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def scrub(doc: Any) -> Any:
    """`doc` with lone surrogates in every key and string replaced by '?' (iterative: no recursion limit)."""
    root: list[Any] = [doc]
    stack: list[tuple[Any, Any]] = [(root, 0)]  # (container, index or key) of every value to look at
    while stack:
        parent, key = stack.pop()
        value = parent[key]
        if isinstance(value, str):
            parent[key] = _clean(value)
        elif isinstance(value, list):
            stack.extend((value, i) for i in range(len(value)))
        elif isinstance(value, dict):
            for k in list(value):
                clean = _clean(k)
                if clean != k:
                    value[clean] = value.pop(k)
                stack.append((value, clean))
    return root[0]
