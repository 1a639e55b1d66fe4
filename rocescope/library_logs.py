"""Client libraries' own log lines at debug level, so the console has one line per problem.

kafka-python logs every failed bootstrap and backoff as a warning (23 lines for one unreachable broker),
urllib3 and clickhouse-connect each warn before the error they raise anyway. rocescope reports those
problems itself, in one line naming the address and the setting; the libraries' detail stays available
under `--log-level DEBUG`.
"""

from __future__ import annotations

import logging

NOISY = ("kafka", "urllib3", "clickhouse_connect")


class _AtDebug(logging.Handler):
    """Re-emits a library's record at DEBUG through `rocescope.lib.<library>`, if that logs debug."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(f"rocescope.lib.{record.name}")
        if not target.isEnabledFor(logging.DEBUG):
            return
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        target.handle(record)


def demote(names: tuple[str, ...] = NOISY) -> None:
    """Send the named libraries' records to the log at debug level instead of their own levels."""
    for name in names:
        library = logging.getLogger(name)
        if not any(isinstance(h, _AtDebug) for h in library.handlers):
            library.addHandler(_AtDebug())
        library.propagate = False
