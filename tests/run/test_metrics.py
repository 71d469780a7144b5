"""Agents expose Prometheus metrics over HTTP on 127.0.0.1."""

from __future__ import annotations

import urllib.request

from syncline.chain.devnet import free_port
from syncline.run.metrics import AgentMetrics


def test_metrics_are_served_on_loopback_with_the_agent_series() -> None:
    metrics = AgentMetrics("trainer")
    port = free_port()
    metrics.serve(port)
    metrics.steps_per_s.set(12.5)
    metrics.tokens_per_s.set(6400)
    metrics.train_loss.set(4.25)
    metrics.submissions.labels(outcome="accepted").inc()
    metrics.submissions.labels(outcome="rejected").inc(2)
    metrics.rejected.labels(reason="hash mismatch").inc()
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "syncline_trainer_steps_per_second 12.5" in body
    assert "syncline_trainer_tokens_per_second 6400.0" in body
    assert "syncline_trainer_loss 4.25" in body
    assert 'syncline_submissions_total{outcome="accepted"} 1.0' in body
    assert 'syncline_submissions_total{outcome="rejected"} 2.0' in body
    assert 'syncline_witness_rejected_total{reason="hash mismatch"} 1.0' in body


def test_each_agent_has_its_own_registry() -> None:
    a, b = AgentMetrics("trainer"), AgentMetrics("witness")
    a.train_loss.set(1.0)
    b.train_loss.set(2.0)
    assert a.registry.get_sample_value("syncline_trainer_loss") == 1.0
    assert b.registry.get_sample_value("syncline_trainer_loss") == 2.0
