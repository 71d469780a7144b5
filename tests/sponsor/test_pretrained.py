"""A sponsor's pretrained Hugging Face directory as a task's initial state (issue 13, item 2).

Each family (Llama, Qwen2, GPT-2 with tied embeddings, Mistral) round-trips: the directory's
weights are the initial state (quantized to Q32 exactly as any initial state), its own tokenizer
tokenizes the data and is published hash-pinned, and the export is the same family and loads with
``from_pretrained`` with weights equal to the dequantized state. Bad directories are refused with
one line before anything is uploaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from syncline.blobstore import LocalBlobStore, digest_of
from syncline.errors import SpecError
from syncline.modality.language import TOKEN_DTYPE, LanguageAdapter, train_tokenizer
from syncline.protocol.fixed_point import FRAC_BITS
from syncline.protocol.state import TrainingState
from syncline.run.context import TaskContext, model_config
from syncline.sponsor.data_sources import DataSource
from syncline.sponsor.pretrained import read_pretrained
from syncline.sponsor.task_builder import export_model, publish_language_task

from ._pretrained_models import TINY_CONFIGS, VOCAB, build_pretrained, task_template

TEXTS = [f"Letter {i}: the harbour at dawn, ships number {i * 7 % 13}, wind from the west.\n" * 6 for i in range(24)]
SEQ_LEN = 16


@pytest.fixture
def texts_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    directory = tmp_path / "texts"
    directory.mkdir()
    for i, text in enumerate(TEXTS):
        (directory / f"{i:02d}.txt").write_text(text)
    return directory


@pytest.mark.parametrize("family", sorted(TINY_CONFIGS))
def test_each_family_round_trips_through_the_initial_state_and_the_export(
    family: str, tmp_path: Path, texts_dir: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tmp_path / "model"
    original = build_pretrained(family, model_dir, TEXTS)
    with torch.no_grad():  # weights a random init would not have: the state must carry these
        for p in original.parameters():
            p.add_(0.01 * torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape).sin())
    original.save_pretrained(model_dir)
    pretrained = read_pretrained(model_dir)
    assert pretrained.family == family and pretrained.config["dtype"] == "float32"

    blobs = LocalBlobStore(tmp_path / "blobs")
    published = publish_language_task(
        blobs,
        template=task_template("fine-tune"),
        shard_count=2,
        vocab_size=999,  # unused: the model brings its tokenizer
        seq_len=SEQ_LEN,
        model=pretrained,
        source=DataSource.from_mapping({"type": "text_dir", "path": str(texts_dir)}),
    )
    spec, initial = published.spec, published.initial_state
    assert spec.model.family == family
    assert spec.param_count == initial.layout.numel == sum(p.numel() for p in original.parameters())

    # The initial state is the pretrained weights, quantized as any initial state is.
    params = {k: v.detach() for k, v in original.named_parameters()}
    assert initial == TrainingState.from_model_state_dict(params, initial.layout)
    dequantized = initial.to_state_dict()
    assert set(dequantized) == set(params)
    for name, tensor in params.items():
        assert float((dequantized[name] - tensor).abs().max()) <= 2.0 ** -(FRAC_BITS + 1), name
    if family in ("gpt2", "qwen2"):  # tied: one entry, the head is the embedding
        assert not any(name.startswith("lm_head") for name in initial.layout.names)

    # The tokenizer is the model's own, pinned by hash; the data is tokenized with it.
    tokenizer_bytes = (model_dir / "tokenizer.json").read_bytes()
    assert spec.metadata["tokenizer"]["digest"] == digest_of(tokenizer_bytes)
    side = spec.metadata["tokenizer_files"]
    assert side["tokenizer_config.json"]["digest"] == digest_of((model_dir / "tokenizer_config.json").read_bytes())
    pinned = Tokenizer.from_str(tokenizer_bytes.decode())
    first = np.frombuffer(blobs.get(spec.dataset.shard_hashes[0]), dtype=TOKEN_DTYPE)
    expected = pinned.encode(TEXTS[0]).ids
    cut = int(len(expected) * 0.95)  # the document's last 5 % is held out for validation
    assert first[:cut].tolist() == expected[:cut]
    assert first[cut] == pinned.token_to_id("<|endoftext|>")

    # The export: same family, from_pretrained, weights equal to the dequantized state.
    ctx = TaskContext(
        task_id=1,
        market=None,  # type: ignore[arg-type]
        blobs=blobs,
        spec=spec,
        spec_uri="",
        adapter=LanguageAdapter(seq_len=SEQ_LEN),
        layout=initial.layout,
        tokenizer_json=tokenizer_bytes.decode(),
        _publishers=(),
    )
    out = export_model(ctx, initial.state_root_hex, tmp_path / "export")
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(loaded) is type(original) and loaded.config.model_type == family
    for name, tensor in loaded.named_parameters():
        assert torch.equal(tensor.detach(), dequantized[name]), name
    assert json.loads((out / "syncline.json").read_text())["model"] == model_config(spec)
    own, again = AutoTokenizer.from_pretrained(model_dir), AutoTokenizer.from_pretrained(out)
    assert type(again) is type(own)
    assert again(TEXTS[3])["input_ids"] == own(TEXTS[3])["input_ids"]
    assert again.eos_token == own.eos_token


def test_a_bfloat16_checkpoint_is_trained_in_float32(tmp_path: Path, texts_dir: Path) -> None:
    """Trainers hold float32 weights whatever the checkpoint's dtype: the state is the bf16 values
    widened exactly."""
    model_dir = tmp_path / "model"
    original = build_pretrained("llama", model_dir, TEXTS, dtype=torch.bfloat16)
    pretrained = read_pretrained(model_dir)
    built = LanguageAdapter(seq_len=SEQ_LEN).build_model(pretrained.model_config, seed=0)
    assert {p.dtype for p in built.parameters()} == {torch.float32}
    published = publish_language_task(
        LocalBlobStore(tmp_path / "blobs"),
        template=task_template("fine-tune"),
        shard_count=2,
        vocab_size=VOCAB,
        seq_len=SEQ_LEN,
        model=pretrained,
        source=DataSource.from_mapping({"type": "text_dir", "path": str(texts_dir)}),
    )
    params = {k: v.detach().float() for k, v in original.named_parameters()}
    assert published.initial_state == TrainingState.from_model_state_dict(params, published.initial_state.layout)
    assert {e.dtype for e in published.initial_state.layout.entries} == {"float32"}


def _edit_config(model_dir: Path, **changes: Any) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    config.update(changes)
    (model_dir / "config.json").write_text(json.dumps(config))


def _nan_weight(model_dir: Path) -> None:
    weights = load_file(model_dir / "model.safetensors")
    name = sorted(weights)[0]
    weights[name][0] = float("nan")
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})


def _pickle_weights(model_dir: Path) -> None:
    (model_dir / "model.safetensors").rename(model_dir / "pytorch_model.bin")


BAD_DIRECTORIES = {
    "no config": (lambda d: (d / "config.json").unlink(), "no config.json"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no model.safetensors"),
    "pickled weights": (_pickle_weights, "weights in pickle files (.bin/.pt) are refused"),
    "no tokenizer": (lambda d: (d / "tokenizer.json").unlink(), "no tokenizer.json"),
    "not a causal LM": (
        lambda d: _edit_config(d, model_type="t5"),
        "model family 't5' is not a causal language model transformers builds",
    ),
    "unknown family": (
        lambda d: _edit_config(d, model_type="nosuchmodel"),
        "model family 'nosuchmodel' is not a causal language model",
    ),
    "shapes differ": (
        lambda d: _edit_config(d, intermediate_size=48),
        "weight 'model.layers.0.mlp.down_proj.weight' has shape [16, 32], the config's model [16, 48]",
    ),
    "not safetensors": (lambda d: (d / "model.safetensors").write_bytes(b"junk" * 8), "not a safetensors file"),
    "too many parameters": (
        lambda d: _edit_config(d, vocab_size=4_000_000, hidden_size=1024, num_attention_heads=8),
        "parameters, over the limit of 2,000,000,000",
    ),
    "tokenizer larger than the vocabulary": (
        lambda d: (d / "tokenizer.json").write_text(train_tokenizer(TEXTS, 400)),
        "tokens but the model's vocab_size is 320",
    ),
    "NaN weight": (_nan_weight, "holds NaN or Inf"),
}


@pytest.mark.parametrize("case", sorted(BAD_DIRECTORIES))
def test_a_bad_directory_is_refused_with_one_line_before_any_upload(case: str, tmp_path: Path, texts_dir: Path) -> None:
    model_dir = tmp_path / "model"
    build_pretrained("llama", model_dir, TEXTS)
    damage, message = BAD_DIRECTORIES[case]
    damage(model_dir)
    blobs = LocalBlobStore(tmp_path / "blobs")
    with pytest.raises(SpecError) as exc:  # PretrainedModelError, or the family's SpecError
        pretrained = read_pretrained(model_dir)
        publish_language_task(
            blobs,
            template=task_template("fine-tune"),
            shard_count=2,
            vocab_size=VOCAB,
            seq_len=SEQ_LEN,
            model=pretrained,
            source=DataSource.from_mapping({"type": "text_dir", "path": str(texts_dir)}),
        )
    text = str(exc.value)
    assert message in text and "\n" not in text, text
    assert not any(p.is_file() for p in (tmp_path / "blobs").rglob("*")), "nothing may be uploaded"


def test_a_tokenizer_of_more_than_65536_tokens_gets_uint32_token_shards(tmp_path: Path, texts_dir: Path) -> None:
    """Qwen2's and Llama 3's tokenizers have more tokens than uint16 ids index: their shards hold
    uint32 ids (``metadata.token_bytes: 4``), and the adapter the spec describes trains on them."""
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    vocab = 66_000
    tokenizer = Tokenizer.from_str(train_tokenizer(TEXTS, VOCAB))
    tokenizer.add_tokens([f"<x{i}>" for i in range(vocab - VOCAB)])
    high = tokenizer.token_to_id("<x65500>")
    assert high is not None and high > 65_535
    model_dir = tmp_path / "model"
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>").save_pretrained(model_dir)  # type: ignore[no-untyped-call]
    config = AutoConfig.for_model("qwen2", vocab_size=vocab, **{**TINY_CONFIGS["qwen2"], "hidden_size": 8})
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
    (texts_dir / "wide.txt").write_text("A rare word <x65500> appears here. " * 40)

    published = publish_language_task(
        LocalBlobStore(tmp_path / "blobs"),
        template=task_template("fine-tune"),
        shard_count=2,
        vocab_size=0,
        seq_len=SEQ_LEN,
        model=read_pretrained(model_dir),
        source=DataSource.from_mapping({"type": "text_dir", "path": str(texts_dir)}),
    )
    spec = published.spec
    assert spec.metadata["token_bytes"] == 4
    blobs = LocalBlobStore(tmp_path / "blobs")
    shards = [blobs.get(h) for h in spec.dataset.shard_hashes]
    ids = np.concatenate([np.frombuffer(s, dtype="<u4") for s in shards])
    assert high in ids.tolist() and int(ids.max()) < vocab
    adapter = LanguageAdapter(seq_len=SEQ_LEN, token_bytes=4)
    model = adapter.build_model(model_config(spec), seed=0)
    batch = next(adapter.batches(shards, batch_size=4, seed=1, steps=1))
    assert int(batch["input_ids"].max()) < vocab
    assert torch.isfinite(adapter.loss(model, batch))
    assert np.isfinite(adapter.evaluate(model, blobs.get(spec.dataset.validation_hash), batch_size=2, max_batches=1))


def test_sharded_weights_load_as_one_state(tmp_path: Path, texts_dir: Path) -> None:
    """A directory whose weights are split over several safetensors files and an index."""
    model_dir = tmp_path / "model"
    original = build_pretrained("mistral", model_dir, TEXTS)
    (model_dir / "model.safetensors").unlink()
    original.save_pretrained(model_dir, max_shard_size="8KB")
    pretrained = read_pretrained(model_dir)
    assert len(pretrained.weight_files) > 1 and (model_dir / "model.safetensors.index.json").is_file()
    published = publish_language_task(
        LocalBlobStore(tmp_path / "blobs"),
        template=task_template("fine-tune"),
        shard_count=2,
        vocab_size=0,
        seq_len=SEQ_LEN,
        model=pretrained,
        source=DataSource.from_mapping({"type": "text_dir", "path": str(texts_dir)}),
    )
    params = {k: v.detach() for k, v in original.named_parameters()}
    assert published.initial_state == TrainingState.from_model_state_dict(params, published.initial_state.layout)
