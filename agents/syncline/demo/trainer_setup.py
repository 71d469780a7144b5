"""One trainer on the demo's model and data, outside the agents: what the benchmarks train.

``build_trainer_setup("demo")`` is the main demo's 2-layer Llama (``DemoPlan``: 558k parameters,
batch 8 x 64 tokens, AdamW lr 1e-3) on the first trainer's shards of the demo corpus;
``build_trainer_setup("tiny")`` is :data:`TINY_MODEL` as the CI's agent runs train it (vocab 512,
sequences of 32 tokens, lr 3e-3). ``other_shards`` is the next trainer's share (a wrong-shard cheat).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from syncline.demo.training_run import DemoPlan
from syncline.modality.language import LanguageAdapter
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.sponsor.task_builder import cached_corpus
from syncline.trainer.inner_loop import InnerLoop

TINY_MODEL: dict[str, Any] = {
    "family": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
    "tie_word_embeddings": True,
}
"""The 1-layer Llama (hidden 32, 32 positions) the CI's multi-process agent runs train."""


@dataclass
class TrainerSetup:
    name: str
    adapter: LanguageAdapter
    layout: ParameterLayout
    initial: TrainingState
    inner: InnerOptimizerConfig
    shards: list[bytes]
    other_shards: list[bytes]
    model_config: dict[str, Any]

    @property
    def seq_len(self) -> int:
        return self.adapter.seq_len

    def build_model(self) -> torch.nn.Module:
        return self.adapter.build_model(self.model_config, seed=0)

    def loop(
        self,
        device: str = "cpu",
        *,
        dtype: str = "fp32",
        steps: int | None = None,
        gradient_checkpointing: bool = False,
        deterministic: bool = False,
    ) -> InnerLoop:
        """A fresh trainer's inner loop (``steps``: another H than the plan's)."""
        inner = self.inner if steps is None else dataclasses.replace(self.inner, inner_steps=steps)
        return InnerLoop(
            self.adapter,
            self.build_model(),
            self.layout,
            inner,
            device=device,
            dtype=dtype,
            gradient_checkpointing=gradient_checkpointing,
            deterministic=deterministic,
        )


def build_trainer_setup(which: str = "demo") -> TrainerSetup:
    """The ``demo`` or the ``tiny`` setup (see the module docstring)."""
    plan = DemoPlan()
    if which == "tiny":
        model = dict(TINY_MODEL)
        plan = dataclasses.replace(
            plan, vocab_size=512, seq_len=32, inner_lr=3e-3, inner_steps=8, checkpoint_interval=4
        )
    elif which == "demo":
        model = dict(plan.model)
    else:
        raise ValueError(f"setup {which!r}: use demo or tiny")
    corpus = cached_corpus(plan.shard_count, plan.vocab_size)
    adapter = LanguageAdapter(seq_len=plan.seq_len)
    config = model | {"vocab_size": plan.vocab_size}
    params = {k: v.detach() for k, v in adapter.build_model(config, seed=0).named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    per = plan.shard_count // plan.trainers
    inner = InnerOptimizerConfig(
        lr=plan.inner_lr,
        weight_decay=0.01,
        beta1=0.9,
        beta2=0.95,
        inner_steps=plan.inner_steps,
        batch_size=plan.batch_size,
    )
    return TrainerSetup(
        name=which,
        adapter=adapter,
        layout=layout,
        initial=TrainingState.from_model_state_dict(params, layout),
        inner=inner,
        shards=list(corpus.shards[:per]),
        other_shards=list(corpus.shards[per : 2 * per]),
        model_config=config,
    )
