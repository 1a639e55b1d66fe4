"""JSON from devices and files (`load_json`): lone UTF-16 surrogates from `\\ud800` escapes are replaced, so
one garbled name cannot fail a batch.

`json` accepts `"\\ud800"` (and, from bytes, a surrogate's UTF-8 encoding) and returns a str Arrow
cannot encode; a device (or a damaged file) sending one would make the whole batch, with every good row
in it, fail to build. Found by tests/fuzz.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rocescope.errors import DecodeError

_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
#: The escape, or a surrogate's UTF-8 bytes (json.loads decodes bytes with "surrogatepass").
_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def may_hold_surrogates(text: str | bytes) -> bool:
    """True when the JSON text may decode to a lone surrogate (the rare case worth a walk)."""
    # substring tests first (C scans, 20x the regex's speed on a 16 MB block of a capture): most text has neither
    if isinstance(text, bytes):
        if b"\\u" not in text and b"\xed" not in text:
            return False
        return _ESCAPE_BYTES.search(text) is not None
    if "\\u" not in text and text.isascii():
        return False
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


def load_json(data: str | bytes, what: str) -> Any:
    """The JSON document in `data`, lone surrogates scrubbed; DecodeError naming `what` when it is not JSON
    (never RecursionError on deep nesting, nor UnicodeDecodeError on bytes that are not UTF-8)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DecodeError(f"{what} is not JSON: {exc}") from None
    return scrub(doc) if may_hold_surrogates(data) else doc
