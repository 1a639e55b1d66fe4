"""Who may ask the chdb HTTP facade, and, when it is read-only, what: the guard `rocescope serve-http` runs behind.

Why: any process on this machine can reach a loopback port, and so can any web page the user opens (a
cross-origin POST with a text body needs no preflight; DNS rebinding points a page's own name at 127.0.0.1).
Before a statement reaches the engine the facade checks, in this order:

1. ``Host`` names loopback (localhost, 127.0.0.1, [::1]) or the bound address: a rebound page sends its own name;
2. the credentials, taken as ClickHouse takes them (HTTP basic auth, ``X-ClickHouse-User``/``X-ClickHouse-Key``
   headers, or ``user``/``password`` URL arguments; one way per request), compared in constant time;
3. read-only (ClickHouse ``readonly=2`` semantics, as Grafana's ClickHouse plugin needs): the statement is
   parsed by the engine's own parser, never by a second grammar that could disagree with it. ``formatQuery``
   (the text bound as a parameter) proves it is one well-formed statement and gives its canonical text;
   ``EXPLAIN AST`` of that text gives its tree. Only SELECT/WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN pass,
   with no INTO OUTFILE and no function or table engine that reaches outside the store: every table function
   and engine in chdb's own catalog that is not on the in-store list below (``file``, ``url``, ``s3``,
   ``remote``, ``python``, ``executable``..., and whatever a later chdb adds). Settings (URL arguments and
   SETTINGS clauses) pass when typed as numbers, flags or choices; free-text ones (the file paths of the
   Template and Protobuf formats, SQL pieces such as ``select`` or ``additional_result_filter``) and the few
   that change parsing or the guard itself are refused, before ``EXPLAIN AST`` (which applies them) runs. The
   second layer: the session runs with ``readonly=2``, so the engine itself refuses writes and DDL even if a
   statement slipped past. ``--allow-writes`` skips step 3 entirely (the full power of ``rocescope sql``).

Refusals are answered as ClickHouse answers them (HTTP status, ``Code: N. DB::Exception: ... (NAME)``), so a
client shows a clear message, and carry a one-line reason for the facade's log.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from email.message import Message
from typing import Any

__all__ = ["LOOPBACK_NAMES", "ReadOnlyGuard", "Refused", "check_credentials", "check_host", "claimed_user"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
#: Table functions and engines that compute their rows or read only what the store holds (lower case).
IN_STORE = frozenset(
    {
        *("sqlstandardvalues", "values", "numbers", "numbers_mt", "zeros", "zeros_mt", "primes", "null", "loop"),
        *("generateseries", "generate_series", "generaterandom", "format", "view", "viewifpermitted", "viewexplain"),
        *("merge", "dictionary", "mergetreeindex", "mergetreeprojection", "mergetreeanalyzeindexes"),
        *("mergetreeanalyzeindexesuuid", "mergetreecodecblockcounts", "mergetreetextindex"),
        *("timeseries", "timeseriesdata", "timeseriesmetricfamilies", "timeseriesmetrics", "timeseriessamples"),
        *("timeseriesselector", "timeseriestags", "prometheusquery", "prometheusqueryrange"),
        *("memory", "log", "tinylog", "stripelog", "set", "join", "buffer", "materializedview", "alias"),
    }
)
#: Scalar functions that read outside the store (the table functions and engines come from chdb's catalog).
OUTSIDE_FUNCTIONS = frozenset({"file", "catboostevaluate"})
#: Root nodes of the statements a read-only session runs (EXPLAIN AST names, lower case prefixes).
READ_ROOTS = ("select", "show", "describe", "exists", "explain")
#: Settings typed as free text: file paths, URLs, SQL pieces. Refused in read-only mode.
FREE_TEXT_TYPES = frozenset({"String", "Map", "URI"})
#: Settings that change how a statement is parsed, or lift the guard.
GUARD_SETTINGS = frozenset({"readonly", "dialect", "implicit_select", "allow_introspection_functions", "allow_ddl"})
_READ_ONLY = (
    "Cannot execute query in readonly mode: serve-http serves reads only (SELECT, SHOW, DESCRIBE, EXISTS, EXPLAIN); "
    "to write, use `rocescope sql` or start serve-http with --allow-writes"
)
# Canonical (formatQuery) text: backquoted or double-quoted identifiers, string literals, words, other characters.
_TOKEN_RE = re.compile(
    r"""\s*(`(?:[^`\\]|\\.)*`|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
    r"|0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|\w+|\S)",
    re.DOTALL,
)
_CLAUSE_ENDS = frozenset({")", ";", "FORMAT", "UNION", "EXCEPT", "INTERSECT", "INTO"})
_IN_SCOPE_RE = re.compile(r"\.?\s*:?\s*In scope SELECT formatQuery\(.*\)\.\s*(\(\w+\))\s*$", re.DOTALL)
_PAIRS = {"(": ")", "[": "]", "{": "}"}


class Refused(Exception):
    """A request the guard turns away: how it is answered (HTTP status, ClickHouse code) and why (for the log)."""

    def __init__(self, status: int, code: int, name: str, text: str, reason: str, kind: str = "statement") -> None:
        super().__init__(f"Code: {code}. DB::Exception: {text}. ({name})")
        self.status = status
        self.code = code
        self.reason = reason
        self.kind = kind  # host, auth or statement


def _host_name(value: str) -> str:
    """The host part of a ``Host`` header or a bound address, lower case, IPv6 in brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    if value.count(":") > 1:  # a bare IPv6 address (a bound address)
        return f"[{value}]"
    return value.partition(":")[0]


def check_host(header: str | None, bound: str) -> None:
    """Refuse a ``Host`` that is not a loopback name or the bound address: DNS rebinding sends the page's name."""
    allowed = LOOPBACK_NAMES if bound in _WILDCARDS else LOOPBACK_NAMES | {_host_name(bound)}
    if header is None or _host_name(header) not in allowed:
        raise Refused(
            403,
            36,
            "BAD_ARGUMENTS",
            f"Host header {header!r} is not a loopback name ({', '.join(sorted(allowed))}); "
            "refused so that a web page cannot reach this server through DNS rebinding",
            f"Host {header!r} is not loopback",
            "host",
        )


def _auth_failed(text: str, reason: str) -> Refused:
    return Refused(403, 516, "AUTHENTICATION_FAILED", text, reason, "auth")


def _basic(header: str) -> tuple[str, str]:
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise _auth_failed(f"{scheme} authentication is not supported", "not basic auth")
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        sep = ""
    if not sep:
        raise _auth_failed("Malformed Authorization header", "malformed basic auth")
    return user, password


def _ways(headers: Message, params: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """Every set of credentials the request carries, in ClickHouse's three ways."""
    if (auth := headers.get("Authorization")) is not None:
        yield _basic(auth)
    if "X-ClickHouse-User" in headers or "X-ClickHouse-Key" in headers:
        yield headers.get("X-ClickHouse-User") or "default", headers.get("X-ClickHouse-Key") or ""
    if "user" in params or "password" in params:
        yield params.get("user") or "default", params.get("password", "")


def claimed_user(headers: Message, params: Mapping[str, str]) -> str:
    """The user a request says it is (for the log; not verified)."""
    try:
        return next(_ways(headers, params), ("default", ""))[0]
    except Refused:
        return "?"


def check_credentials(headers: Message, params: Mapping[str, str], user: str, password: str) -> None:
    """Refuse a request whose credentials are missing (when a password is set), mixed, or wrong."""
    ways = list(_ways(headers, params))
    if len(ways) > 1:
        raise Refused(
            403,
            516,
            "AUTHENTICATION_FAILED",
            "Invalid authentication: give the credentials one way (Authorization header, X-ClickHouse-User/Key "
            "headers or user/password URL parameters), not several",
            "credentials given several ways",
            "auth",
        )
    given_user, given_password = ways[0] if ways else ("default", "")
    if password and not given_password:
        raise Refused(
            401,
            194,
            "REQUIRED_PASSWORD",
            f"{given_user}: Authentication failed: password is required (serve-http prints it at start, or takes "
            "store.password / ROCESCOPE_STORE__PASSWORD)",
            "no password",
            "auth",
        )
    same_user = hmac.compare_digest(given_user.encode(), user.encode())
    if not (hmac.compare_digest(given_password.encode(), password.encode()) and same_user):
        raise Refused(
            403,
            516,
            "AUTHENTICATION_FAILED",
            f"{given_user}: Authentication failed: password is incorrect, or there is no user with such name",
            "wrong user or password",
            "auth",
        )


def _escaped(text: str) -> str:
    """``text`` as a query parameter value (ClickHouse reads parameters in the escaped TSV form)."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _tokens(canonical: str) -> list[str]:
    return _TOKEN_RE.findall(canonical)


def _unquoted(token: str) -> str:
    return token[1:-1] if token[:1] in '`"' else token


def setting_names(canonical: str) -> list[str]:
    """The names in every ``SETTINGS name = value, ...`` clause of a statement's canonical text.

    A value there is a literal: a number, a string, a word (DEFAULT, true, NULL) or a bracketed map or tuple.
    Anything after it but a comma or the end of the clause is not understood, and refused.
    """
    tokens = _tokens(canonical)
    names: list[str] = []
    for at, token in enumerate(tokens):
        i = at + 1
        while token.upper() == "SETTINGS" and i + 1 < len(tokens) and tokens[i + 1] == "=":
            names.append(_unquoted(tokens[i]))
            i += 2
            if i < len(tokens) and tokens[i] in ("-", "+"):
                i += 1
            i = _skip_value(tokens, i)
            if i < len(tokens) and tokens[i] == ",":
                i += 1
            elif i < len(tokens) and tokens[i].upper() not in _CLAUSE_ENDS:
                raise Refused(
                    400, 62, "SYNTAX_ERROR", f"Cannot check the SETTINGS clause near {tokens[i]!r}", "SETTINGS clause"
                )
            else:
                break
    return names


def _skip_value(tokens: list[str], i: int) -> int:
    """The index after the value starting at ``i``: one token, or a bracketed group."""
    if i >= len(tokens) or tokens[i] not in _PAIRS:
        return i + 1
    closing: list[str] = []
    while i < len(tokens):
        if tokens[i] in _PAIRS:
            closing.append(_PAIRS[tokens[i]])
        elif closing and tokens[i] == closing[-1]:
            closing.pop()
            if not closing:
                return i + 1
        i += 1
    return i


def _writes_a_file(canonical: str) -> bool:
    """``INTO OUTFILE`` or ``FROM INFILE``: chdb reads or writes that path on this machine."""
    words = [t.upper() for t in _tokens(canonical)]
    return any(pair in (("INTO", "OUTFILE"), ("FROM", "INFILE")) for pair in itertools.pairwise(words))


class ReadOnlyGuard:
    """Read-only for one chdb session: sets ``readonly=2`` on it and checks each statement before it runs."""

    def __init__(self, session: Any) -> None:
        self._session = session  # chdb's Session methods carry no annotations
        self.outside: dict[str, str] = {}
        catalog = (
            ("table function", "SELECT lower(name) FROM system.table_functions"),
            ("table engine", "SELECT lower(name) FROM system.table_engines"),
        )
        for kind, sql in catalog:
            for (name,) in self._rows(sql):
                if name not in IN_STORE and not name.endswith("mergetree"):
                    self.outside.setdefault(name, kind)
        for name in OUTSIDE_FUNCTIONS:
            self.outside.setdefault(name, "function")
        self._setting_types: dict[str, str] = dict(self._rows("SELECT name, type FROM system.settings"))
        session.query("SET readonly = 2", "TabSeparated")  # the engine's own check, under ours

    def _rows(self, sql: str, params: Mapping[str, str] | None = None) -> list[list[str]]:
        rows: list[list[str]] = json.loads(self._session.query(sql, "JSONCompact", params=params).bytes())["data"]
        return rows

    def check_setting(self, name: str) -> None:
        """Refuse a setting that is unknown, free text, or changes parsing or the guard."""
        kind = self._setting_types.get(name)
        if kind is None:
            raise Refused(404, 115, "UNKNOWN_SETTING", f"Unknown setting '{name}'", f"unknown setting {name!r}")
        if name in GUARD_SETTINGS or kind in FREE_TEXT_TYPES:
            raise Refused(
                403,
                164,
                "READONLY",
                f"Cannot modify '{name}' setting in readonly mode: serve-http takes number, flag and choice settings",
                f"setting {name!r} in read-only mode",
            )

    def refuse_insert(self, head: str) -> Refused:
        """The refusal of an ``INSERT ... FORMAT`` with its data (never parsed: it is refused by its head)."""
        return Refused(403, 164, "READONLY", _READ_ONLY, f"read-only: INSERT ({head.strip()[:80]!r})")

    def check_statement(self, sql: str, binds: Mapping[str, str]) -> None:
        """Refuse anything but one read statement that stays inside the store (see the module docstring)."""
        canonical = self._canonical(sql)  # one statement, so EXPLAIN AST of it runs nothing else
        excerpt = f"{sql.strip()[:80]!r}"
        for name in setting_names(canonical):  # before EXPLAIN AST, which applies the statement's SETTINGS
            self.check_setting(name)
        if _writes_a_file(canonical):
            raise Refused(
                403,
                497,
                "ACCESS_DENIED",
                "Not enough privileges: INTO OUTFILE and FROM INFILE reach outside the store",
                f"INTO OUTFILE ({excerpt})",
            )
        tree = [row[0] for row in self._rows(f"EXPLAIN AST {canonical}", binds)]
        root = tree[0].split()[0] if tree and tree[0].split() else ""
        if not root.lower().startswith(READ_ROOTS):
            statement = (_tokens(canonical) or ["?"])[0].upper()
            raise Refused(403, 164, "READONLY", _READ_ONLY, f"read-only: {statement} ({excerpt})")
        for line in tree[1:]:  # Function, FunctionWithKeyValueArguments (dictionary sources), ...
            words = line.split()
            if len(words) > 1 and "Function" in words[0]:
                kind = self.outside.get(words[1].lower())
                if kind is not None:
                    raise Refused(
                        403,
                        497,
                        "ACCESS_DENIED",
                        f"Not enough privileges: {kind} {words[1]} reaches outside the store, and serve-http "
                        "serves only the store; run `rocescope sql` on this machine for that",
                        f"{kind} {words[1]} ({excerpt})",
                    )

    def _canonical(self, sql: str) -> str:
        """One statement, as the engine's formatter writes it (no comments; one quoting of each thing)."""
        try:
            return str(self._rows("SELECT formatQuery({q:String})", {"q": _escaped(sql)})[0][0])
        except Exception as ex:  # chdb raises plain RuntimeErrors carrying ClickHouse's message
            message = _IN_SCOPE_RE.sub(r". \1", str(ex))
            if "Multi-statements are not allowed" in message:
                start = message.find("Code: ")
                text = message[start:].split("DB::Exception: ", 1)[-1].rsplit(". (", 1)[0]
                raise Refused(400, 62, "SYNTAX_ERROR", text, "more than one statement") from None
            raise RuntimeError(message) from None
