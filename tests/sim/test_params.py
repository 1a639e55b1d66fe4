"""The fluid model's knobs are validated."""

from __future__ import annotations

import pytest

from rocescope.sim.params import EngineParams


def test_params_are_validated() -> None:
    with pytest.raises(ValueError, match="fine_dt_s"):
        EngineParams(dt_s=1e-3, fine_dt_s=3e-4)
    with pytest.raises(ValueError, match="Kmin"):
        EngineParams(ecn_kmin_bytes=2_000_000, ecn_kmax_bytes=1_000_000)
    assert EngineParams().fine_steps == 20
