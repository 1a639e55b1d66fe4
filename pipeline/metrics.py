"""Self-metrics of the pipeline, for Prometheus (and for the log line the sink prints)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class SelfMetrics:
    """A private registry per component, so several of them (tests, benchmarks) never share counters."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics; binds to loopback unless configured otherwise."""
        start_http_server(port, addr=host, registry=self.registry)

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (summed over the other labels), for logs and tests."""
        total = 0.0
        for metric in self.registry.collect():
            for sample in metric.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total


class CoverageMetrics(SelfMetrics):
    """`rocescope_coverage`: what the latest window could judge, so a drop in coverage can alert. Exported by every
    long-running command that holds the store (`analyze --follow`, `sink`)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        self.coverage = Gauge(
            "rocescope_coverage",
            "Places (ports, devices, jobs) per finding kind by whether the latest window's telemetry could judge "
            "them: judged, judged_with_caveat (an estimate or assumption), not_judged; reason: why, as a label "
            "(`rocescope coverage` says it in words, with the places).",
            ["kind", "state", "reason"],
            registry=self.registry,
        )

    def record_coverage(self, states: dict[tuple[str, str, str], int]) -> None:
        """The latest window's coverage, (kind, state, reason label) -> places (earlier windows' label sets
        dropped)."""
        self.coverage.clear()
        for (kind, state, reason), n in states.items():
            self.coverage.labels(kind=kind, state=state, reason=reason).set(n)


class SinkMetrics(CoverageMetrics):
    """The sink's own metrics: consumed, inserted, dead-lettered, lag, insert latency, and the coverage of what it
    landed (`sink.coverage_every_s`)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r = self.registry
        self.consumed = Counter(
            "rocescope_sink_messages_consumed", "Messages read from the transport.", ["stream"], registry=r
        )
        self.inserted_rows = Counter(
            "rocescope_sink_rows_inserted", "Rows inserted into the store.", ["table"], registry=r
        )
        self.dead_lettered = Counter(
            "rocescope_sink_dead_lettered", "Messages sent to the dead-letter topic.", ["reason"], registry=r
        )
        self.duplicates = Counter(
            "rocescope_sink_duplicates",
            "Messages dropped because their id was already taken at another offset (a retry logged twice).",
            ["stream"],
            registry=r,
        )
        self.expired_rows = Counter(
            "rocescope_sink_rows_expired", "Rows older than the retention (dropped by TTL).", ["stream"], registry=r
        )
        self.insert_errors = Counter("rocescope_sink_insert_errors", "Failed insert attempts (retried).", registry=r)
        self.commit_errors = Counter("rocescope_sink_commit_errors", "Failed offset commits.", registry=r)
        self.insert_seconds = Histogram(
            "rocescope_sink_insert_seconds",
            "Latency of one flush's inserts.",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.lag = Gauge(
            "rocescope_sink_lag_messages", "Messages behind the end of the assigned partitions.", registry=r
        )
        self.buffered_rows = Gauge("rocescope_sink_buffered_rows", "Rows waiting for the next insert.", registry=r)


class AnalysisMetrics(CoverageMetrics):
    """`analyze --follow`'s own metrics: what the latest window could judge and found."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        self.findings = Gauge("rocescope_findings", "Findings in the latest window.", ["kind"], registry=self.registry)

    def record(self, states: dict[tuple[str, str, str], int], kinds: dict[str, int]) -> None:
        """The latest window's coverage states and findings per kind (label sets of earlier windows dropped)."""
        self.record_coverage(states)
        self.findings.clear()
        for kind, n in kinds.items():
            self.findings.labels(kind=kind).set(n)
