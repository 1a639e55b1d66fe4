"""What the fault tests watch: when each device's batches arrived, the collectors' self-metrics scraped as
Prometheus would (and the outages they show), and waits for events."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rocescope.pipeline.batch import Batch
from rocescope.pipeline.metrics import SelfMetrics
from rocescope.pipeline.transport import InProcessBus


class Arrivals:
    """The collectors' producer: publishes to a real in-process bus and notes when each device's batch came."""

    def __init__(self) -> None:
        self.bus = InProcessBus()
        self._producer = self.bus.producer()
        self._lock = threading.Lock()
        self.times: dict[str, list[float]] = defaultdict(list)

    def publish(self, batch: Batch) -> None:
        self._producer.publish(batch)
        with self._lock:
            self.times[batch.key].append(time.time())

    def flush(self, timeout: float | None = None) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""

    def between(self, device: str, start: float, end: float) -> list[float]:
        with self._lock:
            return [t for t in self.times[device] if start <= t <= end]


@dataclass
class Scrape:
    ts0: float  # reading began
    ts1: float  # reading ended
    up: dict[str, float]  # target -> 1 up / 0 down (gNMI `connected`, SNMP `device_up`)


@dataclass
class Outage:
    """One outage in the scraped series: the scrapes around its start and end (None: not seen)."""

    last_up: Scrape | None
    first_down: Scrape
    last_down: Scrape
    first_up: Scrape | None


@dataclass
class Scraper:
    """Scrapes the collectors' self-metrics in Prometheus' text format every `period_s`, as Prometheus would."""

    gauges: list[tuple[SelfMetrics, str, str]]  # (metrics, gauge name, label naming the target)
    period_s: float = 0.05
    scrapes: list[Scrape] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def scrape(self) -> Scrape:
        ts0 = time.time()
        up: dict[str, float] = {}
        for metrics, gauge, label in self.gauges:
            for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
                for sample in family.samples:
                    if sample.name == gauge:
                        up[sample.labels[label]] = sample.value
        return Scrape(ts0, time.time(), up)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.scrapes.append(self.scrape())

    def __enter__(self) -> Scraper:
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.scrapes.append(self.scrape())  # the state it ended in

    def outages(self, target: str) -> list[Outage]:
        """Every run of scrapes showing the target down."""
        out: list[Outage] = []
        last_up: Scrape | None = None
        down: list[Scrape] = []
        for s in self.scrapes:
            value = s.up.get(target)
            if value == 0:
                down.append(s)
            elif value == 1:
                if down:
                    out.append(Outage(last_up, down[0], down[-1], s))
                    down = []
                last_up = s
        if down:
            out.append(Outage(last_up, down[0], down[-1], None))
        return out

    def seen_up(self, target: str) -> bool:
        return any(s.up.get(target) == 1 for s in self.scrapes)


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 90.0) -> float:
    """Wait for an event (generous timeout: a loaded machine only makes it slower); returns when it was seen."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.time()


def wait_all(checks: dict[str, Callable[[], bool]], timeout_s: float = 90.0) -> dict[str, float]:
    """Wait for several events at once; when each was first seen."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < len(checks):
        assert time.monotonic() < deadline, f"timed out waiting for {sorted(set(checks) - set(seen))}"
        for what, check in checks.items():
            if what not in seen and check():
                seen[what] = time.time()
        time.sleep(0.02)
    return seen


def max_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without a batch in [start, end]."""
    points = [start, *sorted(times), end]
    return max(b - a for a, b in itertools.pairwise(points))
