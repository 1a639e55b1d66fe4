"""The detector suite: one module per problem, each exposing `DETECTOR`."""

from __future__ import annotations

from typing import Any

from rocescope.analysis.detectors import (
    cnp_loss,
    incast,
    link_health,
    microburst,
    pfc_deadlock,
    pfc_storm,
    polarization,
)
from rocescope.analysis.detectors.base import Detector

#: In run order.
DETECTORS: tuple[Detector[Any], ...] = (
    pfc_storm.DETECTOR,
    pfc_deadlock.DETECTOR,
    polarization.DETECTOR,
    incast.DETECTOR,
    microburst.DETECTOR,
    cnp_loss.DETECTOR,
    link_health.DETECTOR,
)


def by_name(name: str) -> Detector[Any]:
    for d in DETECTORS:
        if d.name == name:
            return d
    raise KeyError(f"no detector {name!r}; known: {', '.join(d.name for d in DETECTORS)}")
