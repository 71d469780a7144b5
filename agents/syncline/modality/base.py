"""The interface every modality adapter implements."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch


class ModalityAdapter(Protocol):
    """Builds models and batches for one modality. Implementations are deterministic given seeds."""

    name: str
    metric_name: str
    """The modality's validation metric, as receipts and the UI name it: ``validation_loss``
    (language), ``top1_accuracy`` (vision), ``mase`` (time series)."""
    metric_higher_is_better: bool

    def build_model(self, config: Mapping[str, Any], *, seed: int) -> torch.nn.Module:
        """A freshly initialised model from an architecture config (no download)."""
        ...

    def batches(
        self, shards: Sequence[bytes], *, batch_size: int, seed: int, steps: int
    ) -> Iterator[dict[str, torch.Tensor]]:
        """``steps`` training batches drawn from the given shard payloads, reproducibly from ``seed``."""
        ...

    def loss(self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Scalar training loss of ``model`` on ``batch``."""
        ...

    def evaluate(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """Mean loss on a held-out shard (deterministic batches)."""
        ...

    def metric(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """The modality's metric (``metric_name``) on a held-out shard (deterministic batches):
        what a witness's vote carries (x 1e6, docs/protocol.md §11.1)."""
        ...
