"""Small pretrained models built here (never downloaded): a tiny config of each family, its
random initialisation (or a few training steps) saved with ``save_pretrained``, and a byte-level
BPE tokenizer trained on the test's texts saved beside it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from syncline.modality.language import train_tokenizer

VOCAB = 320
TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 64,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "tie_word_embeddings": True,
    },
    "gpt2": {"n_embd": 16, "n_layer": 2, "n_head": 2, "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0},
    "mistral": {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "sliding_window": 32,
    },
}


def save_tokenizer(texts: Sequence[str], out: Path, *, chat_template: str | None = None) -> Any:
    """A trained byte-level BPE tokenizer saved as a Hugging Face fast tokenizer; returns it."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer.from_str(train_tokenizer(texts, VOCAB)), eos_token="<|endoftext|>"
    )
    if chat_template is not None:
        tok.chat_template = chat_template
    tok.save_pretrained(out)
    return tok


def build_pretrained(
    family: str, out: Path, texts: Sequence[str], *, seed: int = 0, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """A tiny ``family`` model saved to ``out`` with its tokenizer (random initialisation)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(family, vocab_size=VOCAB, **TINY_CONFIGS[family])
    model = AutoModelForCausalLM.from_config(config)
    model.to(dtype)
    model.save_pretrained(out)
    save_tokenizer(texts, out)
    return model


def pretrain(model: torch.nn.Module, token_ids: torch.Tensor, *, steps: int, seq_len: int, lr: float = 3e-2) -> None:
    """A few AdamW steps of causal language modelling on ``token_ids`` (deterministic)."""
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(token_ids) - seq_len, (8,), generator=gen)
        ids = token_ids[starts[:, None] + torch.arange(seq_len)[None, :]]
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def task_template(name: str) -> dict[str, Any]:
    """The spec fields a sponsor writes (one trainer, one witness, two rounds), named ``name``."""
    return {
        "name": name,
        "inner_steps": 4,
        "rounds": 2,
        "round_duration_s": 60,
        "trainer_stake_wei": 1000,
        "min_trainers": 1,
        "max_trainers": 1,
        "enrollment_deadline": 1_700_000_000,
        "witnesses": ["0x2222222222222222222222222222222222222222"],
        "threshold": 1,
        "reward_pool_wei": 5000,
    }
