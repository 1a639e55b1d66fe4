"""The knobs of the dynamic fabric model (`rocescope.sim.engine`), with defaults from field practice at 400G.

Everything is validated at construction so a bad scenario fails before a run starts. The compiled
kernel reads the numbers from one float64 vector (`to_array`), laid out by the `P_*` indices below.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import numpy as np
import numpy.typing as npt

from rocescope.errors import SimError

KB = 1000
MB = 1000 * KB
MiB = 1 << 20

#: What SONiC's PFC watchdog does with a stormed queue (CONFIG_DB `PFC_WD|<port>` `action`).
PfcWdAction = Literal["drop", "forward", "alert"]

# Layout of the parameter vector the kernel reads (module constants: numba folds them).
P_DT = 0
P_LOSSLESS = 1
P_PKT_WIRE = 2  # bytes of one full-MTU RoCEv2 frame on the wire (payload + headers)
P_BUFFER = 3
P_PFC_ALPHA = 4
P_XON_OFFSET = 5
P_LOSSY_ALPHA = 6
P_KMIN = 7
P_KMAX = 8
P_PMAX = 9
P_CNP_INTERVAL = 10
P_DCQCN_ON = 11
P_G = 12
P_ALPHA_TIMER = 13
P_RATE_TIMER = 14
P_BYTE_COUNTER = 15
P_FAST_RECOVERY = 16
P_RAI = 17
P_RHAI = 18
P_MIN_RATE = 19
P_QUANTA_FRACTION = 20
P_DONE_TOL = 21
P_FINE_DT = 22
P_SIZE = 23


@dataclass(frozen=True)
class EngineParams:
    """Time step, buffers, PFC, ECN and DCQCN settings of one simulated fabric.

    Byte sizes are wire bytes (Ethernet frames, FCS included); rates are bits per second.
    """

    #: Time step of the fluid model while the fabric is calm...
    dt_s: float = 1e-3
    #: ...and while any queue is congested (or about to be) or a sender's DCQCN rate is recovering:
    #: the congestion-control loop needs steps near the CNP interval. Must divide `dt_s`;
    #: set it equal to `dt_s` for a fixed step.
    fine_dt_s: float = 50e-6
    #: The lossless (PFC-protected, ECN-marked) priority RoCE uses; every other priority is lossy.
    lossless_priority: int = 3
    #: Priority of flows marked lossy (background traffic), for `Engine(..., flow_priorities=...)`.
    lossy_priority: int = 0
    #: RoCE path MTU (payload bytes per packet) and the per-packet header bytes on the wire
    #: (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4).
    mtu: int = 4096
    header_bytes: int = 62
    #: Preamble + inter-frame gap per frame: line rate counts them, byte counters do not.
    ifg_bytes: int = 20
    #: Shared packet buffer per switch (a 400G-class ASIC: 64 MB).
    buffer_bytes: int = 64 * MiB
    #: Dynamic threshold of a lossless ingress priority group: XOFF at alpha x (free shared buffer).
    pfc_alpha: float = 1 / 8
    #: XON = XOFF - xon_offset (hysteresis).
    xon_offset_bytes: int = 256 * KB
    #: Dynamic threshold of a lossy egress queue (tail drop above alpha x free buffer).
    lossy_alpha: float = 1 / 4
    #: RED/ECN profile on the lossless egress queue.
    ecn_kmin_bytes: int = 400 * KB
    ecn_kmax_bytes: int = 1600 * KB
    ecn_pmax: float = 0.2
    #: Notification point: at most one CNP per QP per interval.
    cnp_interval_s: float = 50e-6
    #: Reaction point (DCQCN, Zhu et al. 2015): off means senders always offer line rate.
    dcqcn: bool = True
    dcqcn_g: float = 1 / 256
    #: Alpha update period (K) and rate-increase timer (T).
    dcqcn_alpha_timer_s: float = 55e-6
    dcqcn_rate_timer_s: float = 55e-6
    #: Rate-increase byte counter (B).
    dcqcn_byte_counter_bytes: int = 10 * MB
    #: Fast-recovery stages (F) before additive, then hyper increase.
    dcqcn_fast_recovery: int = 5
    dcqcn_rai_bps: float = 400e6
    dcqcn_rhai_bps: float = 4e9
    dcqcn_min_rate_bps: float = 10e6
    #: PFC frames are refreshed every this fraction of the pause time one frame buys (65535 quanta).
    pause_refresh_fraction: float = 0.5
    #: Priorities reported in snapshots (per-priority metrics); the model tracks all 8.
    report_priorities: tuple[int, ...] = (0, 3)
    #: SONiC's PFC watchdog on every switch port's lossless queue (`rocescope.sim.pfcwd`), off by default;
    #: SONiC's defaults: detection and restoration 200 ms, polled every 200 ms, action drop.
    pfcwd: bool = False
    pfcwd_detection_s: float = 0.2
    pfcwd_restoration_s: float = 0.2
    pfcwd_poll_s: float = 0.2
    pfcwd_action: PfcWdAction = "drop"

    def __post_init__(self) -> None:
        def bad(msg: str) -> SimError:
            return SimError(f"EngineParams: {msg}")

        if not 1e-6 <= self.dt_s <= 0.1:
            raise bad(f"dt_s must be in [1 us, 100 ms], got {self.dt_s}")
        ratio = self.dt_s / self.fine_dt_s if self.fine_dt_s > 0 else 0.0
        if ratio < 1 or abs(ratio - round(ratio)) > 1e-6:
            raise bad(f"fine_dt_s must divide dt_s, got {self.fine_dt_s} and {self.dt_s}")
        for name in ("lossless_priority", "lossy_priority"):
            if not 0 <= getattr(self, name) <= 7:
                raise bad(f"{name} must be 0..7")
        if self.lossless_priority == self.lossy_priority:
            raise bad("the lossless and lossy priorities must differ")
        if self.mtu < 256 or self.header_bytes < 0 or self.ifg_bytes < 0:
            raise bad("mtu must be >= 256 and header/ifg bytes >= 0")
        if self.buffer_bytes <= 0 or self.pfc_alpha <= 0 or self.lossy_alpha <= 0 or self.xon_offset_bytes < 0:
            raise bad("buffer sizes and thresholds must be positive")
        if not 0 <= self.ecn_kmin_bytes < self.ecn_kmax_bytes or not 0 < self.ecn_pmax <= 1:
            raise bad("ECN needs 0 <= Kmin < Kmax and 0 < Pmax <= 1")
        if self.cnp_interval_s <= 0 or self.dcqcn_alpha_timer_s <= 0 or self.dcqcn_rate_timer_s <= 0:
            raise bad("CNP interval and DCQCN timers must be positive")
        if not 0 < self.dcqcn_g < 1 or self.dcqcn_fast_recovery < 0 or self.dcqcn_byte_counter_bytes <= 0:
            raise bad("DCQCN g must be in (0, 1), F >= 0, byte counter > 0")
        if min(self.dcqcn_rai_bps, self.dcqcn_rhai_bps, self.dcqcn_min_rate_bps) <= 0:
            raise bad("DCQCN rates must be positive")
        if not 0 < self.pause_refresh_fraction <= 1:
            raise bad("pause_refresh_fraction must be in (0, 1]")
        if any(not 0 <= p <= 7 for p in self.report_priorities) or not self.report_priorities:
            raise bad("report_priorities must be non-empty, each 0..7")
        if min(self.pfcwd_detection_s, self.pfcwd_restoration_s, self.pfcwd_poll_s) <= 0:
            raise bad("PFC watchdog times must be positive")
        if self.pfcwd_poll_s < self.dt_s:
            raise bad(f"pfcwd_poll_s must be at least dt_s ({self.dt_s} s)")
        if self.pfcwd_action not in ("drop", "forward", "alert"):
            raise bad(f"pfcwd_action must be drop, forward or alert, got {self.pfcwd_action!r}")

    @property
    def fine_steps(self) -> int:
        """Fine steps per coarse step."""
        return round(self.dt_s / self.fine_dt_s)

    @property
    def packet_wire_bytes(self) -> int:
        """Bytes of one full-MTU packet as port byte counters see it."""
        return self.mtu + self.header_bytes

    @property
    def wire_factor(self) -> float:
        """Wire bytes per payload byte (headers of full-MTU packets)."""
        return self.packet_wire_bytes / self.mtu

    def line_rate(self, speed_bps: float) -> float:
        """Frame bytes per second a port of `speed_bps` carries (preamble and gap excluded)."""
        return speed_bps / 8 * self.packet_wire_bytes / (self.packet_wire_bytes + self.ifg_bytes)

    def to_array(self) -> npt.NDArray[np.float64]:
        """The vector the compiled kernel reads."""
        v = np.zeros(P_SIZE)
        v[P_DT] = self.dt_s
        v[P_LOSSLESS] = self.lossless_priority
        v[P_PKT_WIRE] = self.packet_wire_bytes
        v[P_BUFFER] = self.buffer_bytes
        v[P_PFC_ALPHA] = self.pfc_alpha
        v[P_XON_OFFSET] = self.xon_offset_bytes
        v[P_LOSSY_ALPHA] = self.lossy_alpha
        v[P_KMIN] = self.ecn_kmin_bytes
        v[P_KMAX] = self.ecn_kmax_bytes
        v[P_PMAX] = self.ecn_pmax
        v[P_CNP_INTERVAL] = self.cnp_interval_s
        v[P_DCQCN_ON] = 1.0 if self.dcqcn else 0.0
        v[P_G] = self.dcqcn_g
        v[P_ALPHA_TIMER] = self.dcqcn_alpha_timer_s
        v[P_RATE_TIMER] = self.dcqcn_rate_timer_s
        v[P_BYTE_COUNTER] = self.dcqcn_byte_counter_bytes
        v[P_FAST_RECOVERY] = self.dcqcn_fast_recovery
        v[P_RAI] = self.dcqcn_rai_bps / 8
        v[P_RHAI] = self.dcqcn_rhai_bps / 8
        v[P_MIN_RATE] = self.dcqcn_min_rate_bps / 8
        v[P_QUANTA_FRACTION] = self.pause_refresh_fraction
        v[P_DONE_TOL] = self.packet_wire_bytes
        v[P_FINE_DT] = self.dt_s / self.fine_steps
        return v

    def describe(self) -> dict[str, object]:
        """The parameters as a plain dict (for ground-truth files and logs)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
