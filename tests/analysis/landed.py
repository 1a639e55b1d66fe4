"""A simulated run landed in a chdb database through the real pipeline, for analysis tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocescope.analysis.frames import Window
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.run import RunSummary
from rocescope.sim.scoring import Truth


@dataclass
class Landed:
    path: Path
    database: str
    summary: RunSummary

    @property
    def window(self) -> Window:
        return Window(self.summary.start, self.summary.end)

    @property
    def truths(self) -> list[Truth]:
        return [Truth.from_dict(d) for d in self.summary.incidents]

    def at(self, seconds: float) -> dt.datetime:
        return self.summary.start + dt.timedelta(seconds=seconds)

    @contextmanager
    def open(self) -> Iterator[ChdbStore]:
        with ChdbStore(self.path, self.database) as store:
            yield store
