"""Prometheus metrics of one API instance (its own registry, so several can run in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ApiMetrics"]


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "syncline_api_requests_total",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.indexed_block = Gauge(
            "syncline_api_indexed_block", "Last block the indexer has indexed", registry=self.registry
        )
        self.head_block = Gauge("syncline_api_head_block", "Chain head seen by the indexer", registry=self.registry)
        self.lag = Gauge("syncline_api_indexer_lag_blocks", "Head block minus indexed block", registry=self.registry)
        self.events = Counter(
            "syncline_api_events_indexed_total", "Market events indexed, by name", ["event"], registry=self.registry
        )
        self.get_logs = Counter(
            "syncline_api_get_logs_calls_total", "eth_getLogs calls made by the indexer", registry=self.registry
        )
        self.resets = Counter(
            "syncline_api_indexer_resets_total",
            "Index rollbacks and wipes (reorg, reverted or restarted chain, other market)",
            ["reason"],
            registry=self.registry,
        )
        self.errors = Counter(
            "syncline_api_indexer_errors_total", "Indexer passes that failed (retried)", registry=self.registry
        )

    def observe_blocks(self, indexed: int, head: int) -> None:
        self.indexed_block.set(indexed)
        self.head_block.set(head)
        self.lag.set(max(0, head - indexed))

    def render(self) -> bytes:
        return generate_latest(self.registry)
