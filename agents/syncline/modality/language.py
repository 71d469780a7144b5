"""Language modality: a byte-level BPE tokenizer trained offline with ``tokenizers`` on the task's
documents (``syncline.sponsor.data_sources`` reads them), or a pretrained model's own tokenizer
(``syncline.sponsor.pretrained``); token shards; and causal language models built from a
``transformers`` config: any family ``AutoModelForCausalLM`` builds (Llama by default; Qwen2,
GPT-2, Mistral, ...). Nothing is downloaded.

Token shards are little-endian uint16 arrays (SFT shards: ``(token, flag)`` pairs, see
:func:`sft_shard`); a shard's content hash (keccak256 of its bytes) is a leaf of the task's
dataset manifest.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from syncline.errors import SpecError
from syncline.protocol.enums import Modality
from syncline.protocol.spec import VALIDATION_METRICS

TOKEN_DTYPE = "<u2"
"""Token shards hold little-endian uint16 token ids (``token_bytes`` 2, the default)."""
WIDE_TOKEN_DTYPE = "<u4"
"""... or little-endian uint32 ids (``metadata.token_bytes`` 4) for a tokenizer of more than
65 536 tokens (Qwen2's 151k, Llama 3's 128k)."""
MAX_VOCAB_SIZE = 1 << 16
"""The largest tokenizer a uint16 token shard can index (65 536 tokens)."""


def token_dtype(token_bytes: int) -> str:
    """The numpy dtype of token ids ``token_bytes`` wide (2 or 4)."""
    if token_bytes not in (2, 4):
        raise SpecError(f"token_bytes {token_bytes!r}: token ids are 2 or 4 bytes wide")
    return TOKEN_DTYPE if token_bytes == 2 else WIDE_TOKEN_DTYPE


def token_bytes_for(vocab_size: int) -> int:
    """The narrowest token id width that indexes ``vocab_size`` tokens."""
    return 2 if vocab_size <= MAX_VOCAB_SIZE else 4


METHODS = ("pretrain", "sft")
"""Training methods (``metadata.method`` of a language task; absent means ``pretrain``)."""
IGNORE_INDEX = -100
"""The label of a token whose prediction is not trained on (prompt tokens under SFT)."""
MAX_TOKENIZER_BYTES = 64 << 20
"""The largest tokenizer artifact (``tokenizer.json``) a task may pin: the big Qwen2 and Llama 3
tokenizers are 7-9 MB."""


def llama_parameter_count(
    *,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    tie_word_embeddings: bool = True,
) -> int:
    """Parameters of a ``transformers`` Llama (no biases) as its layout counts them (tied embeddings once).

    Per layer: the q and o projections (``hidden^2`` each), k and v (``hidden * kv_heads * head_dim``
    each), gate, up and down (``hidden * intermediate`` each) and two RMSNorm weights; plus the
    embedding, the final norm and, untied, the output head.
    """
    kv_width = num_key_value_heads * (hidden_size // num_attention_heads)
    per_layer = 2 * hidden_size * hidden_size + 2 * hidden_size * kv_width + 3 * hidden_size * intermediate_size
    embeddings = vocab_size * hidden_size * (1 if tie_word_embeddings else 2)
    return embeddings + num_hidden_layers * (per_layer + 2 * hidden_size) + hidden_size


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> str:
    """Train a byte-level BPE tokenizer; returns its JSON (the artifact trainers download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    text: str = tokenizer.to_str()
    return text


def causal_lm_families() -> tuple[str, ...]:
    """Every ``model_type`` ``AutoModelForCausalLM`` builds from a config (no remote code)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return tuple(sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))


def causal_lm_config(config: Mapping[str, Any]) -> Any:
    """The ``transformers`` config of a spec's model (``{family, **architecture}``); a family that
    is not a causal language model, or a config ``transformers`` refuses, is a one-line ``SpecError``."""
    from transformers import AutoConfig

    cfg = dict(config)
    family = str(cfg.pop("family", cfg.pop("model_type", "llama")))
    if family not in causal_lm_families():
        raise SpecError(
            f"model family {family!r} is not a causal language model transformers builds "
            "(e.g. llama, qwen2, gpt2, mistral)"
        )
    try:
        return AutoConfig.for_model(family, **cfg)
    except (ValueError, TypeError, KeyError) as exc:
        raise SpecError(f"model config of family {family!r} is invalid: {' '.join(str(exc).split())[:300]}") from None


def encode(tokenizer_json: str, text: str) -> np.ndarray:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_str(tokenizer_json).encode(text).ids
    return np.asarray(ids, dtype=TOKEN_DTYPE)


@dataclass(frozen=True)
class PreparedCorpus:
    """Tokenizer plus training shards and a held-out validation shard, all as bytes."""

    tokenizer_json: str
    shards: tuple[bytes, ...]
    validation: bytes
    token_bytes: int = 2
    """Width of a token id in the shards (:func:`token_bytes_for` the tokenizer)."""


def build_corpus(
    documents: Sequence[str],
    *,
    shard_count: int,
    vocab_size: int,
    held_out: Sequence[bool] | None = None,
    validation_fraction: float = 0.05,
) -> PreparedCorpus:
    """Train the tokenizer on ``documents`` and split their tokens with :func:`tokenize_corpus`;
    every document ends with ``<|endoftext|>`` (id 0)."""
    if shard_count < 1:
        raise SpecError("shard_count must be at least 1")
    tokenizer_json = train_tokenizer(documents, vocab_size)
    return tokenize_corpus(
        documents,
        tokenizer_json=tokenizer_json,
        eos_id=0,
        shard_count=shard_count,
        held_out=held_out,
        validation_fraction=validation_fraction,
    )


def tokenize_corpus(
    documents: Sequence[str],
    *,
    tokenizer_json: str,
    eos_id: int,
    shard_count: int,
    held_out: Sequence[bool] | None = None,
    validation_fraction: float = 0.05,
) -> PreparedCorpus:
    """Tokenize ``documents`` (the tokenizer's own special tokens, e.g. a BOS, as it adds them)
    and split their tokens into ``shard_count`` contiguous training shards and one validation
    shard; every document ends with ``eos_id``.

    With ``held_out`` (one flag per document), the flagged documents go whole to the validation
    shard; without it, the last ``validation_fraction`` of every document does (so validation sees
    every document's style without overlapping any training shard).
    """
    from tokenizers import Tokenizer

    if shard_count < 1:
        raise SpecError("shard_count must be at least 1")
    if held_out is not None and len(held_out) != len(documents):
        raise ValueError("held_out needs one flag per document")
    tokenizer = Tokenizer.from_str(tokenizer_json)
    width = token_bytes_for(tokenizer.get_vocab_size(with_added_tokens=True))
    dtype = token_dtype(width)
    train_parts: list[np.ndarray] = []
    valid_parts: list[np.ndarray] = []
    eot = np.asarray([eos_id], dtype=dtype)
    for i, encoding in enumerate(tokenizer.encode_batch(list(documents))):
        ids = np.asarray(encoding.ids, dtype=dtype)
        if held_out is not None:
            (valid_parts if held_out[i] else train_parts).extend((ids, eot))
            continue
        cut = int(len(ids) * (1 - validation_fraction))
        train_parts += [ids[:cut], eot]
        valid_parts += [ids[cut:], eot]
    train = np.concatenate(train_parts) if train_parts else np.zeros(0, dtype=dtype)
    bounds = np.linspace(0, len(train), shard_count + 1).astype(np.int64)
    shards = tuple(train[bounds[i] : bounds[i + 1]].tobytes() for i in range(shard_count))
    validation = np.concatenate(valid_parts) if valid_parts else np.zeros(0, dtype=dtype)
    return PreparedCorpus(tokenizer_json, shards, validation.tobytes(), width)


def tokenize_sft_corpus(
    pairs: Sequence[tuple[str, str]],
    *,
    tokenizer_json: str,
    eos_id: int | None,
    shard_count: int,
    held_out: Sequence[bool] | None = None,
) -> PreparedCorpus:
    """SFT shards of ``(prompt text, response text)`` pairs (already rendered, e.g. by a chat
    template): each pair is its prompt's tokens (with the tokenizer's special tokens, e.g. a BOS)
    flagged 0, then its response's tokens (no special tokens), and ``eos_id`` when given, flagged 1.
    Shards are :func:`sft_shard` streams; with ``held_out`` the flagged pairs form the validation
    shard, without it the last pair does."""
    from tokenizers import Tokenizer

    if shard_count < 1:
        raise SpecError("shard_count must be at least 1")
    if not pairs:
        raise SpecError("an SFT task needs at least one prompt/response pair")
    flags_out = list(held_out) if held_out is not None else [i == len(pairs) - 1 for i in range(len(pairs))]
    if len(flags_out) != len(pairs):
        raise ValueError("held_out needs one flag per pair")
    tokenizer = Tokenizer.from_str(tokenizer_json)
    width = token_bytes_for(tokenizer.get_vocab_size(with_added_tokens=True))
    prompts = tokenizer.encode_batch([p for p, _ in pairs], add_special_tokens=True)
    responses = tokenizer.encode_batch([r for _, r in pairs], add_special_tokens=False)
    streams: dict[bool, tuple[list[int], list[int]]] = {False: ([], []), True: ([], [])}
    for prompt, response, out in zip(prompts, responses, flags_out, strict=True):
        ids, flags = streams[out]
        target = list(response.ids) + ([eos_id] if eos_id is not None else [])
        ids += list(prompt.ids) + target
        flags += [0] * len(prompt.ids) + [1] * len(target)
    train_ids, train_flags = streams[False]
    bounds = np.linspace(0, len(train_ids), shard_count + 1).astype(np.int64)
    shards = tuple(
        sft_shard(train_ids[bounds[i] : bounds[i + 1]], train_flags[bounds[i] : bounds[i + 1]], width)
        for i in range(shard_count)
    )
    return PreparedCorpus(tokenizer_json, shards, sft_shard(*streams[True], width), width)


def sft_shard(ids: Sequence[int], flags: Sequence[int], token_bytes: int = 2) -> bytes:
    """An SFT shard: little-endian pairs ``(token id, flag)`` of ``token_bytes`` each, flag 1 when
    the token is a training target (its prediction counts in the loss), 0 when it is context only."""
    dtype = token_dtype(token_bytes)
    return np.stack([np.asarray(ids, dtype=dtype), np.asarray(flags, dtype=dtype)], axis=1).tobytes()


def sft_tokens_of(shard: bytes, token_bytes: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The token ids and target flags (bool) of an SFT shard."""
    if len(shard) % (2 * token_bytes):
        raise ValueError(f"an SFT shard must hold (token, flag) pairs of {token_bytes}-byte integers")
    pairs = np.frombuffer(shard, dtype=token_dtype(token_bytes)).reshape(-1, 2).astype(np.int64)
    if pairs.size and int(pairs[:, 1].max()) > 1:
        raise ValueError("an SFT shard's flags must be 0 or 1")
    return torch.from_numpy(pairs[:, 0].copy()), torch.from_numpy(pairs[:, 1] == 1)


def token_count(shard: bytes, method: str = "pretrain", token_bytes: int = 2) -> int:
    """Tokens in a shard of ``method``'s encoding with ``token_bytes``-wide ids."""
    return len(shard) // (token_bytes * (2 if method == "sft" else 1))


def tokens_of(shard: bytes, token_bytes: int = 2) -> torch.Tensor:
    if len(shard) % token_bytes:
        raise ValueError(f"a token shard must hold a whole number of {token_bytes}-byte token ids")
    return torch.from_numpy(np.frombuffer(shard, dtype=token_dtype(token_bytes)).astype(np.int64))


class LanguageAdapter:
    """Causal language modelling with a ``transformers`` model built from a config.

    ``method`` ``pretrain`` trains on every token of the shards; ``sft`` on the target tokens of
    :func:`sft_shard` streams only (the prompt's are labelled :data:`IGNORE_INDEX`), with the loss
    the mean over target tokens (0 for a batch with none). Batches are drawn alike: the same random
    windows of ``seq_len`` tokens from the same seed.
    """

    name = "language"
    metric_name, metric_higher_is_better = VALIDATION_METRICS[Modality.LANGUAGE]

    def __init__(self, seq_len: int = 64, method: str = "pretrain", token_bytes: int = 2):
        if method not in METHODS:
            raise SpecError(f"method {method!r} is not one of {', '.join(METHODS)}")
        token_dtype(token_bytes)  # 2 or 4
        self.seq_len = seq_len
        self.method = method
        self.token_bytes = token_bytes

    def _stream(self, shards: Sequence[bytes]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The shards' tokens, and their target flags under SFT."""
        if self.method == "sft":
            parts = [sft_tokens_of(s, self.token_bytes) for s in shards]
            return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        return torch.cat([tokens_of(s, self.token_bytes) for s in shards]), None

    def _labels(self, ids: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
        return ids if targets is None else torch.where(targets, ids, torch.full_like(ids, IGNORE_INDEX))

    def build_model(self, config: Mapping[str, Any], *, seed: int) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        hf_config = causal_lm_config(config)
        torch.manual_seed(seed)
        model: torch.nn.Module = AutoModelForCausalLM.from_config(hf_config)  # type: ignore[no-untyped-call]
        return model

    def batches(
        self, shards: Sequence[bytes], *, batch_size: int, seed: int, steps: int
    ) -> Iterator[dict[str, torch.Tensor]]:
        tokens, targets = self._stream(shards)
        span = self.seq_len
        if len(tokens) <= span:
            raise ValueError(f"assigned shards hold {len(tokens)} tokens; need more than seq_len={span}")
        gen = torch.Generator().manual_seed(seed)
        offsets = torch.arange(span)
        for _ in range(steps):
            starts = torch.randint(0, len(tokens) - span, (batch_size,), generator=gen)
            window = starts[:, None] + offsets[None, :]
            ids = tokens[window]
            yield {"input_ids": ids, "labels": self._labels(ids, None if targets is None else targets[window])}

    def loss(self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if self.method == "sft":
            total, count = masked_loss_sum(model, batch["input_ids"], batch["labels"])
            return total / max(count, 1)
        out = model(input_ids=batch["input_ids"], labels=batch["labels"])
        loss: torch.Tensor = out.loss
        return loss

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        if self.method == "sft":
            return self._evaluate_sft(model, shard, batch_size=batch_size, max_batches=max_batches)
        tokens = tokens_of(shard, self.token_bytes)
        span = self.seq_len
        all_windows = tokens[: (len(tokens) // span) * span].view(-1, span)
        if len(all_windows) == 0:
            raise ValueError("validation shard is shorter than one sequence")
        # Evenly spaced windows over the whole shard (every play's held-out tail), not its head.
        wanted = min(len(all_windows), batch_size * max_batches)
        windows = all_windows[torch.linspace(0, len(all_windows) - 1, wanted).round().long()]
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        for i in range(0, len(windows), batch_size):
            ids = windows[i : i + batch_size]
            total += float(model(input_ids=ids, labels=ids).loss) * len(ids)
            count += len(ids)
        model.train(was_training)
        return total / count

    def metric(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """A language task's metric is its validation loss (:meth:`evaluate`)."""
        return self.evaluate(model, shard, batch_size=batch_size, max_batches=max_batches)

    def _evaluate_sft(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """Mean loss over the target tokens of evenly spaced windows of an SFT validation shard."""
        tokens, targets = sft_tokens_of(shard, self.token_bytes)
        span = self.seq_len
        whole = (len(tokens) // span) * span
        if whole == 0:
            raise ValueError("validation shard is shorter than one sequence")
        ids_all, labels_all = (
            tokens[:whole].view(-1, span),
            self._labels(tokens[:whole], targets[:whole]).view(-1, span),
        )
        wanted = min(len(ids_all), batch_size * max_batches)
        pick = torch.linspace(0, len(ids_all) - 1, wanted).round().long()
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        for i in range(0, wanted, batch_size):
            chosen = pick[i : i + batch_size]
            loss_sum, n = masked_loss_sum(model, ids_all[chosen], labels_all[chosen])
            total += float(loss_sum)
            count += n
        model.train(was_training)
        if count == 0:
            raise ValueError("the validation windows hold no response tokens")
        return total / count


def masked_loss_sum(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the labelled positions (not :data:`IGNORE_INDEX`)
    and their count."""
    logits = model(input_ids=ids).logits[:, :-1, :]
    targets = labels[:, 1:]
    total = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return total, int((targets != IGNORE_INDEX).sum())
