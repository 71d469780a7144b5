"""Prometheus metrics of long-running agents, served on 127.0.0.1."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


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
        self.rejected = Counter("syncline_witness_rejected", "submissions rejected, by reason", ["reason"], registry=r)
        self.finalized = Counter("syncline_witness_votes", "finalize calls sent", registry=r)
        self.aggregate_seconds = Gauge("syncline_witness_aggregate_seconds", "aggregation time", registry=r)
        self.errors = Counter("syncline_agent_errors", "failed iterations", ["role"], registry=r)
        self.role = role

    def serve(self, port: int) -> None:
        start_http_server(port, addr="127.0.0.1", registry=self.registry)
