"""What every detector is: a name, a version, the finding kinds it emits, its thresholds (a pydantic
model, overridable under `analysis.detectors.<name>` in the config) and a pure function from the
window's frames to findings."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.speeds import PortSpeeds
from rocescope.errors import ConfigError


class Params(BaseModel):
    """Thresholds of one detector; unknown keys are configuration errors, not silently ignored. Every field is
    declared with `threshold` (its source beside it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: Where a threshold comes from, the first word of its source: a `standard` (IEEE, IETF, a MIB), a `vendor`'s
#: documented default or behaviour, a `derivation` (from physics, from how the evidence is read, or from another
#: parameter), or a `convention` of operators (how the field reads such events, e.g. an error-disable default).
SOURCE_KINDS = ("standard", "vendor", "derivation", "convention")


def threshold(default: Any, description: str, source: str, **constraints: Any) -> Any:
    """A detector parameter with its source (`<kind>: <why>`, kind one of SOURCE_KINDS), kept in the field's
    JSON schema where `rocescope detectors` and the parameter-source test read it."""
    kind, _, why = source.partition(":")
    if kind not in SOURCE_KINDS or not why.strip():
        raise ValueError(f"a threshold's source is '<{'|'.join(SOURCE_KINDS)}>: <why>', not {source!r}")
    return Field(default, description=description, json_schema_extra={"source": source}, **constraints)


def lossless_threshold(description: str) -> Any:
    """The `lossless_priorities` parameter every detector that reads PFC or ECN evidence shares (its default and
    source in one place; the description says how the detector uses it). Observed PFC adds to it at run time
    (`rocescope.analysis.priorities`)."""
    return threshold(
        (3,),
        description,
        "vendor: RoCE's lossless class is priority 3 in NVIDIA/Mellanox RoCE setups and SONiC's default QoS "
        "(PFC on 3 and 4); priorities PFC frames are counted on are added at run time",
    )


def source_of(params: type[BaseModel], name: str) -> str | None:
    """The source a parameter was declared with (None: declared without one)."""
    extra = params.model_fields[name].json_schema_extra
    value = extra.get("source") if isinstance(extra, dict) else None
    return value if isinstance(value, str) else None


P = TypeVar("P", bound=Params)


@dataclass
class Context:
    """What a detector sees: the window's frames, the fabric and the port speeds (reported, or inferred where
    no source reports them). No fabric-wide poll interval: each series is judged at its own cadence (every
    rate sample carries its interval, `dt_s`; gauges get theirs from `align.with_intervals`)."""

    frames: Frames
    fabric: Fabric
    speeds: PortSpeeds = field(init=False)
    #: what the detectors that ran before found, jobs attributed (a detector of what nothing else explains)
    prior: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.speeds = PortSpeeds(self.frames, self.fabric)

    @property
    def window(self) -> Window:
        return self.frames.window

    def clip(self, start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
        """A span clipped to the window."""
        return max(start, self.window.start), min(end, self.window.end)


@dataclass(frozen=True)
class Detector(Generic[P]):
    name: str
    version: str
    kinds: tuple[str, ...]
    params: type[P]
    run: Callable[[Context, P], list[Finding]]

    def configure(self, overrides: Mapping[str, Any] | None) -> P:
        try:
            return self.params.model_validate(dict(overrides or {}))
        except ValidationError as exc:
            where = "; ".join(
                f"analysis.detectors.{self.name}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"invalid detector thresholds: {where}") from None

    def detect(self, ctx: Context, params: P) -> list[Finding]:
        return [f.with_(detector=self.name, detector_version=self.version) for f in self.run(ctx, params)]
