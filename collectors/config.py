"""The `collectors:` section of the config: one typed sub-section per source, each owned by its package.

The core config keeps this section as it was given (a mapping); `CollectorsConfig.of(settings)`
validates it, so `rocescope.config` needs no collector and the CLI still refuses a bad section at start.
"""

from __future__ import annotations

from pydantic import Field, ValidationError

from rocescope.collectors.common.config import Strict
from rocescope.collectors.ebpf.config import EbpfSection
from rocescope.collectors.gnmi.config import GnmiSection
from rocescope.collectors.jobs.config import JobsSection
from rocescope.collectors.lldp.config import LldpSection
from rocescope.collectors.nccl.config import NcclSection
from rocescope.collectors.nic.config import NicSection
from rocescope.collectors.pcap.config import PcapSection
from rocescope.collectors.snmp.config import SnmpSection
from rocescope.config import Settings, describe_errors
from rocescope.errors import ConfigError

__all__ = ["CollectorsConfig"]


class CollectorsConfig(Strict):
    """Per-collector settings; each `rocescope collect <x>` flag overrides its key here."""

    gnmi: GnmiSection = GnmiSection()
    snmp: SnmpSection = SnmpSection()
    nic: NicSection = NicSection()
    ebpf: EbpfSection = EbpfSection()
    pcap: PcapSection = PcapSection()
    lldp: LldpSection = LldpSection()
    jobs: JobsSection = JobsSection()
    nccl: NcclSection = NcclSection()
    #: where a running `collect <x>` serves its own metrics (`rocescope_<x>_values_total{outcome,reason}`, polls,
    #: failures, target_up...) for Prometheus; one collector per process, so one port each (0: not served)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(0, ge=0, le=65535)

    @classmethod
    def of(cls, settings: Settings) -> CollectorsConfig:
        """The validated `collectors:` section of `settings`; ConfigError naming each bad key."""
        try:
            return cls.model_validate(settings.collectors)
        except ValidationError as exc:
            raise ConfigError(f"invalid config: {describe_errors(exc, 'collectors')}") from None
