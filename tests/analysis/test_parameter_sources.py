"""Every detector threshold says where it comes from (issue 29 item 7): a standard, a vendor's documented
default, a derivation or an operators' convention, beside the parameter, where `rocescope detectors` shows it.
A parameter without one fails here, so no constant can be tuned to a seed without saying why it is what it is."""

from __future__ import annotations

from typing import Any

import pytest

from rocescope.analysis.detectors.base import SOURCE_KINDS, Detector, source_of, threshold
from rocescope.analysis.run import DETECTORS


@pytest.mark.parametrize("detector", DETECTORS, ids=[d.name for d in DETECTORS])
def test_every_parameter_has_a_source(detector: Detector[Any]) -> None:
    missing = [name for name in detector.params.model_fields if source_of(detector.params, name) is None]
    assert not missing, f"{detector.name}: parameters without a source: {missing}"
    for name in detector.params.model_fields:
        source = source_of(detector.params, name) or ""
        kind, _, why = source.partition(":")
        assert kind in SOURCE_KINDS and len(why.strip()) >= 20, (detector.name, name, source)
        assert detector.params.model_fields[name].description, (detector.name, name)


def test_a_source_without_a_kind_or_a_reason_is_refused() -> None:
    for bad in ("fitted on the twin", "derivation:", "guess: it works"):
        with pytest.raises(ValueError, match="source"):
            threshold(1.0, "a parameter", bad)
