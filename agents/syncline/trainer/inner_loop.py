"""The DiLoCo inner loop: H AdamW steps from the round's state; the outer gradient is
``theta_start - theta_end`` (flattened in the canonical layout). The AdamW state persists across
rounds, as in DiLoCo."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from syncline.modality.language import LanguageAdapter
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.context import flat_parameters, load_weights


@dataclass(frozen=True)
class RoundWork:
    """What one round of inner training produced."""

    pseudo_gradient: torch.Tensor
    losses: tuple[float, ...]
    train_seconds: float
    tokens: int

    @property
    def mean_loss(self) -> float:
        return sum(self.losses) / len(self.losses)


class InnerLoop:
    """Owns the model replica and the inner optimizer of one trainer."""

    def __init__(
        self,
        adapter: LanguageAdapter,
        model: torch.nn.Module,
        layout: ParameterLayout,
        cfg: InnerOptimizerConfig,
        *,
        device: str = "cpu",
        dtype: str = "fp32",
        gradient_checkpointing: bool = False,
    ):
        self.adapter = adapter
        self.layout = layout
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = model.to(self.device)
        enable_checkpointing = getattr(self.model, "gradient_checkpointing_enable", None)
        if gradient_checkpointing and callable(enable_checkpointing):
            enable_checkpointing()
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            weight_decay=cfg.weight_decay,
        )

    def _autocast(self) -> contextlib.AbstractContextManager[object]:
        if self.dtype == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run(self, state: TrainingState, shards: Sequence[bytes], *, seed: int, progress: bool = False) -> RoundWork:
        """H inner steps from ``state`` on ``shards``; batches are reproducible from ``seed``."""
        load_weights(self.model, state)
        start = flat_parameters(self.model, self.layout)
        losses: list[float] = []
        tokens = 0
        began = time.perf_counter()
        batches = self.adapter.batches(shards, batch_size=self.cfg.batch_size, seed=seed, steps=self.cfg.inner_steps)
        for batch in tqdm(batches, total=self.cfg.inner_steps, disable=not progress, desc="inner steps", leave=False):
            batch = {k: v.to(self.device) for k, v in batch.items()}
            with self._autocast():
                loss = self.adapter.loss(self.model, batch)
            loss.backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            tokens += int(batch["input_ids"].numel())
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        train_seconds = time.perf_counter() - began
        end = flat_parameters(self.model, self.layout)
        gradient = start - end
        if not torch.isfinite(gradient).all():
            raise FloatingPointError("inner training diverged: the outer gradient holds NaN/Inf")
        return RoundWork(gradient, tuple(losses), train_seconds, tokens)

    # ------------------------------------------------------------------ persistence (restart)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"optimizer": self.optimizer.state_dict()}, tmp)
        tmp.replace(path)

    def load(self, path: Path) -> bool:
        if not path.exists():
            return False
        data = torch.load(path, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(data["optimizer"])
        return True
