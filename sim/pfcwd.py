"""SONiC's PFC watchdog on the simulated switches: a lossless egress queue stuck paused is declared stormed,
mitigated, and restored once the pauses stop.

SONiC runs the watchdog on the lossless queues of every port (`pfcwd start_default`), polling every 200 ms
(`pfcwd interval`), with a detection and a restoration time of 200 ms and the `drop` action by default
(sonic-utilities `pfcwd/main.py`). The engine calls `PfcWatchdog.poll` on that cadence, between steps:

* Detection follows SONiC's Mellanox plugin (sonic-swss `orchagent/pfc_detect_mellanox.lua`): a queue whose
  transmitted-packet counter did not move since the last poll while pause frames arrived on its port
  and it holds bytes, or, when empty, whose port was paused for more than 80% of the poll, is charged a
  poll; when what is left of the detection time is at most one poll the queue is stormed
  (`PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED` + 1). A queue that fails the test starts over. The Broadcom
  plugin's test (pause frames but no XON transition between polls) is not used: the fluid model's pause
  is an on/off duty cycle averaged over a step, so that test would call every sustained congestion a
  storm; "sent nothing while paused" holds only for a stuck peer or a deadlock, as on real gear.
* Restoration follows `orchagent/pfc_restore.lua`: a stormed queue whose port received no pause frame
  since the last poll is charged a poll; when at most one poll of the restoration time is left it is
  restored (`PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED` + 1). With `alert` the queue is restored as soon as the
  detection test fails again, as the detect plugin does for that action.
* Actions (`orchagent/pfcactionhandler.cpp`): `drop` puts a zero-buffer profile on the queue and its
  ingress priority group: bytes queued or arriving for the queue and bytes its peer sends in on that
  priority are discarded (the kernel's `_wd_discard`), counted as queue and PG drops and, as SONiC
  derives them from those, in `PFC_WD_QUEUE_STATS_TX/RX_DROPPED_PACKETS`; `forward` makes the queue
  ignore pauses; `alert` only counts. Pause frames keep being counted: restoration waits for them to stop.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rocescope.sim import kernel as K
from rocescope.sim.params import EngineParams

_ACTION_STATE = {"drop": K.WD_DROP, "forward": K.WD_FORWARD, "alert": K.WD_OFF}
#: Mellanox plugin: an empty queue counts as paused when its pause duration grew by this share of the poll.
PAUSED_SHARE = 0.8


class PfcWatchdog:
    """Watchdog state of the lossless queue of every switch port (`ports`: their ids)."""

    def __init__(self, params: EngineParams, ports: npt.NDArray[np.int64]) -> None:
        self.priority = params.lossless_priority
        self.ports = ports
        self.poll_s = params.pfcwd_poll_s
        self.detection_s = params.pfcwd_detection_s
        self.restoration_s = params.pfcwd_restoration_s
        self.action = params.pfcwd_action
        n = len(ports)
        self.stormed = np.zeros(n, np.bool_)
        self.detect_left = np.full(n, self.detection_s)
        self.restore_left = np.full(n, self.restoration_s)
        self._last: tuple[npt.NDArray[np.float64], ...] | None = None

    def poll(self, net: K.Net, st: K.State, cnt: K.Counters) -> bool:
        """One poll on the kernel's arrays (queue lengths must be current); updates the watchdog counters
        and the kernel's `net.wd`. Returns whether a queue was stormed or restored."""
        q, ids = self.priority, self.ports
        tx = np.floor(cnt.pq[ids, q, K.Q_TX_PKTS] + 1e-6)
        rx = np.floor(cnt.pq[ids, q, K.Q_PFC_RX] + 1e-6)
        dur = np.floor(cnt.pq[ids, q, K.Q_PFC_RX_US] + 1e-6)
        last, self._last = self._last, (tx, rx, dur)
        if last is None:  # the first poll only takes the baseline
            return False
        sent = tx != last[0]
        frames = rx != last[1]
        paused_us = dur - last[2]
        held = st.qlen[q, ids] > 0.0
        stuck = ~sent & ((held & frames) | (~held & (paused_us > PAUSED_SHARE * self.poll_s * 1e6)))

        operational = ~self.stormed
        charged = operational & stuck
        fire = charged & (self.detect_left <= self.poll_s + 1e-9)
        self.detect_left = np.where(
            operational, np.where(charged & ~fire, self.detect_left - self.poll_s, self.detection_s), self.detect_left
        )
        if self.action == "alert":
            restore = self.stormed & ~stuck
        else:
            quiet = self.stormed & ~frames
            restore = quiet & (self.restore_left <= self.poll_s + 1e-9)
            self.restore_left = np.where(
                self.stormed,
                np.where(quiet & ~restore, self.restore_left - self.poll_s, self.restoration_s),
                self.restore_left,
            )
        if fire.any():
            hit = ids[fire]
            cnt.pq[hit, q, K.Q_WD_DETECTED] += 1
            net.wd[q, hit] = _ACTION_STATE[self.action]
            self.stormed |= fire
            self.restore_left[fire] = self.restoration_s
        if restore.any():
            back = ids[restore]
            cnt.pq[back, q, K.Q_WD_RESTORED] += 1
            net.wd[q, back] = K.WD_OFF
            self.stormed &= ~restore
            self.detect_left[restore] = self.detection_s
        return bool(fire.any() or restore.any())

    def stormed_ports(self) -> list[int]:
        """Ids of the switch ports whose lossless queue is stormed now."""
        return [int(p) for p in self.ports[self.stormed]]
