"""Prometheus metrics of long-running agents, served on 127.0.0.1."""

from __future__ import annotations

import errno
import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server

from syncline.run.agent_config import ConfigError


def serve_metrics(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``registry`` for Prometheus on ``127.0.0.1:port``; a port another process holds is a
    :class:`ConfigError` (one line), not an ``OSError`` traceback."""
    try:
        start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise ConfigError(
            f"metrics_port {port} is already in use (another agent on this config?): "
            "give each agent its own metrics_port, or leave it out"
        ) from None


class LoopMetrics:
    """Health of one agent's polling loop (:func:`syncline.run.loop.run_forever`).

    ``syncline_agent_degraded`` is 1 while the loop keeps failing and retries with backoff (alert
    on it), ``syncline_agent_consecutive_failures`` counts the current run of failures,
    ``syncline_agent_retry_delay_seconds`` is the wait before the next try (0 when healthy) and
    ``syncline_agent_errors_total`` counts every failed tick."""

    def __init__(self, role: str, registry: CollectorRegistry):
        degraded, failures, delay, errors = _loop_families(registry)
        self.degraded = degraded.labels(role=role)
        self.consecutive_failures = failures.labels(role=role)
        self.retry_delay = delay.labels(role=role)
        self.errors = errors.labels(role=role)

    def failed(self, failures: int, *, degraded: bool, retry_in_s: float) -> None:
        self.errors.inc()
        self.consecutive_failures.set(failures)
        self.degraded.set(1 if degraded else 0)
        self.retry_delay.set(retry_in_s)

    def succeeded(self) -> None:
        self.consecutive_failures.set(0)
        self.degraded.set(0)
        self.retry_delay.set(0)


_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Gauge, Gauge, Gauge, Counter]] = (
    weakref.WeakKeyDictionary()
)


def _loop_families(registry: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge, Counter]:
    """The loop metrics (labelled by role) of ``registry``, registered once per registry."""
    if registry not in _FAMILIES:
        _FAMILIES[registry] = (
            Gauge(
                "syncline_agent_degraded",
                "1 while the agent's loop keeps failing and retries with backoff",
                ["role"],
                registry=registry,
            ),
            Gauge("syncline_agent_consecutive_failures", "failed ticks in a row", ["role"], registry=registry),
            Gauge(
                "syncline_agent_retry_delay_seconds",
                "wait before the next try (0 when healthy)",
                ["role"],
                registry=registry,
            ),
            Counter("syncline_agent_errors", "failed ticks", ["role"], registry=registry),
        )
    return _FAMILIES[registry]


def default_loop_metrics(role: str) -> LoopMetrics:
    """Loop metrics of ``role`` on prometheus_client's default registry, for an agent that serves
    that registry (the standalone challenger)."""
    return LoopMetrics(role, REGISTRY)


class AgentMetrics:
    """One registry per agent process (so tests can run several agents in one process)."""

    def __init__(self, role: str):
        self.registry = CollectorRegistry()
        r = self.registry
        self.round = Gauge("syncline_round", "round the agent is working on", registry=r)
        self.steps_per_s = Gauge("syncline_trainer_steps_per_second", "inner steps per second", registry=r)
        self.tokens_per_s = Gauge("syncline_trainer_tokens_per_second", "training tokens per second", registry=r)
        self.train_loss = Gauge("syncline_trainer_loss", "mean inner-loop loss of the last round", registry=r)
        self.utilization = Gauge("syncline_trainer_utilization", "time in inner steps / wall time", registry=r)
        self.submissions = Counter("syncline_submissions", "trainer submissions by outcome", ["outcome"], registry=r)
        self.validation_loss = Gauge("syncline_witness_validation_loss", "validation loss of the new state", registry=r)
        self.validation_metric = Gauge(
            "syncline_witness_validation_metric", "the task's validation metric of the new state", ["name"], registry=r
        )
        self.rejected = Counter("syncline_witness_rejected", "submissions rejected, by reason", ["reason"], registry=r)
        self.finalized = Counter("syncline_witness_votes", "finalize calls sent", registry=r)
        self.aggregate_seconds = Gauge("syncline_witness_aggregate_seconds", "aggregation time", registry=r)
        self.uploads_pending = Gauge(
            "syncline_trainer_uploads_pending", "blobs waiting in the outbox for the blob store", registry=r
        )
        self.loop = LoopMetrics(role, r)
        self.role = role

    def serve(self, port: int) -> None:
        serve_metrics(port, self.registry)
