"""LoRA fine-tuning (issue 13, item 3): the task's layout, state, payloads and checkpoints cover only
the ``peft`` adapters; the base model is a blob pinned by digest in ``model.lora.base`` (so in the
spec hash and the on-chain model config hash); the export offers the adapter alone and the merged
model. These tests run the real ``peft``, ``transformers`` and the trainer's inner loop; the whole
market path is tests/agents/test_sft_lora_scenario.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from syncline.blobstore import LocalBlobStore, digest_of
from syncline.errors import SpecError
from syncline.modality import adapter_for
from syncline.modality.lora import merged_model, trained_parameters
from syncline.protocol.spec import LoraSpec, TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.context import TaskContext, state_layout
from syncline.sponsor.data_sources import DataSource
from syncline.sponsor.pretrained import read_pretrained
from syncline.sponsor.task_builder import PublishedTask, check_language_template, publish_language_task
from syncline.trainer.inner_loop import InnerLoop
from syncline.trainer.segments import encode_payload

from ._pretrained_models import build_pretrained, task_template

PAIRS = [{"q": f"What is {i} plus {i % 5}?", "a": f"It is {i + i % 5}."} for i in range(80)]
SEQ_LEN = 24
LORA = {"r": 4, "alpha": 8, "target_modules": ["v_proj", "q_proj"]}


def _publish(tmp_path: Path, lora: dict[str, Any] | None = LORA) -> tuple[PublishedTask, LocalBlobStore, Path]:
    model_dir = tmp_path / "model"
    build_pretrained("llama", model_dir, [p["q"] + " " + p["a"] for p in PAIRS])
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    blobs = LocalBlobStore(tmp_path / "blobs")
    published = publish_language_task(
        blobs,
        template=task_template("lora"),
        shard_count=2,
        vocab_size=0,
        seq_len=SEQ_LEN,
        model=read_pretrained(model_dir),
        source=DataSource.from_mapping(
            {"type": "jsonl", "path": str(data), "prompt_field": "q", "response_field": "a"}
        ),
        method="sft",
        lora=lora,
    )
    return published, blobs, model_dir


def _context(published: PublishedTask, blobs: LocalBlobStore) -> TaskContext:
    spec = published.spec
    adapter = adapter_for(spec)
    return TaskContext(
        task_id=1,
        market=None,  # type: ignore[arg-type]  # building models reads only the spec and the blobs
        blobs=blobs,
        spec=spec,
        spec_uri=published.spec_uri,
        adapter=adapter,
        layout=state_layout(adapter, spec),
        tokenizer_json="",
    )


@pytest.fixture(scope="module")
def lora_task(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PublishedTask, LocalBlobStore, Path]]:
    workdir = tmp_path_factory.mktemp("lora")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYNCLINE_STATE_DIR", str(workdir / "state"))  # the agents' cache of base blobs
        yield _publish(workdir)


def test_agents_fetch_the_base_once_by_digest_and_keep_it_on_disk(
    lora_task: tuple[PublishedTask, LocalBlobStore, Path],
) -> None:
    published, blobs, _ = lora_task
    lora = published.spec.model.lora
    assert lora is not None
    ctx = _context(published, blobs)
    ctx.build_model()
    cached = Path(os.environ["SYNCLINE_STATE_DIR"]) / "lora-bases" / f"{lora.base_digest[2:]}.state"
    assert digest_of(cached.read_bytes()) == lora.base_digest
    # A blob store that lost the base: a second context still builds from the verified copy on disk.
    empty = _context(published, LocalBlobStore(cached.parent.parent / "empty"))
    assert empty.build_model() is not None


def test_the_state_is_the_adapters_and_the_base_is_pinned_by_digest(
    lora_task: tuple[PublishedTask, LocalBlobStore, Path],
) -> None:
    from transformers import AutoModelForCausalLM

    published, blobs, model_dir = lora_task
    spec = published.spec
    lora = spec.model.lora
    assert lora is not None and lora.target_modules == ("q_proj", "v_proj") and (lora.r, lora.alpha) == (4, 8)
    # Only adapter weights: every layout entry is a lora_A / lora_B matrix of a target module.
    names = published.initial_state.layout.names
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names), names
    assert all(".q_proj." in n or ".v_proj." in n for n in names)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    base_numel = sum(p.numel() for p in base.parameters())
    assert spec.param_count == published.initial_state.layout.numel < base_numel // 10
    # The base blob is the pretrained weights (Q32), found by the digest the spec pins.
    base_state = TrainingState.from_bytes(blobs.get(lora.base_digest, max_bytes=1 << 26))
    for name, tensor in base.named_parameters():
        assert torch.allclose(base_state.to_state_dict()[name], tensor.detach(), atol=2**-30), name
    # The spec hash and the on-chain model config hash bind the base digest and the adapter shape.
    other = spec.model.__class__(
        spec.model.family, spec.model.config, LoraSpec(4, 8, lora.target_modules, "0x" + "ab" * 32)
    )
    assert other.config_hash != spec.model.config_hash
    reparsed = TrainingTaskSpec.from_artifact(spec.canonical_bytes())
    assert reparsed.spec_hash == spec.spec_hash and reparsed.model.lora == lora


def test_the_wrapped_model_starts_as_the_base_and_trains_only_the_adapters(
    lora_task: tuple[PublishedTask, LocalBlobStore, Path],
) -> None:
    from transformers import AutoModelForCausalLM

    published, blobs, model_dir = lora_task
    ctx = _context(published, blobs)
    assert ctx.layout.digest() == published.initial_state.layout.digest()
    model = ctx.build_model(published.initial_state)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.arange(20).reshape(2, 10) % 300
    with torch.no_grad():  # lora_B starts at zero: the adapted model computes what the base does
        assert torch.allclose(model(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-5)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    shards = [blobs.get(h, max_bytes=1 << 24) for h in ctx.spec.dataset.shard_hashes]
    loop = InnerLoop(ctx.adapter, model, ctx.layout, InnerOptimizerConfig(lr=1e-2, inner_steps=4, batch_size=4))
    work = loop.run(published.initial_state, shards, seed=7, checkpoint_interval=2)
    for n, p in model.named_parameters():  # the base is frozen, whatever AdamW's weight decay
        if not p.requires_grad:
            assert torch.equal(p.detach(), frozen[n]), n
    gradient = work.pseudo_gradient
    assert gradient.shape == (ctx.layout.numel,) and bool(gradient.abs().sum() > 0)
    # The payload (the outer gradient, int8) and the checkpoints are adapter-sized.
    payload, _ = encode_payload(gradient, ctx.spec.gradient_bits)
    assert ctx.layout.numel <= len(payload) < ctx.layout.numel + 4096
    assert work.checkpoints and all(len(c) < 12 * ctx.layout.numel + 8192 for c in work.checkpoints)


def test_the_merged_model_equals_the_adapted_one(lora_task: tuple[PublishedTask, LocalBlobStore, Path]) -> None:
    published, blobs, _ = lora_task
    ctx = _context(published, blobs)
    trained = {n: t + 0.01 * torch.randn_like(t) for n, t in published.initial_state.to_state_dict().items()}
    state = TrainingState.from_model_state_dict(trained, ctx.layout)
    model = ctx.build_model(state)
    ids = torch.arange(30).reshape(3, 10) % 300
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        merged = merged_model(model)
        assert not any(".lora_" in n for n, _ in merged.named_parameters())
        assert torch.allclose(merged(input_ids=ids).logits, adapted, atol=1e-4)


def test_lora_errors_are_one_line_and_come_before_any_upload(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    build_pretrained("llama", model_dir, ["a b c"] * 10)
    model = read_pretrained(model_dir)
    for lora, words in (
        ({"r": 0, "target_modules": ["q_proj"]}, "model.lora.r"),
        ({"r": 4, "target_modules": []}, "target_modules"),
        ({"r": 4, "target_modules": ["no_such_proj"]}, "no_such_proj"),
        ({"r": 4, "target_modules": ["q_proj"], "base": {"digest": "0x" + "11" * 32}}, "model.lora.base"),
        ({"r": 4, "target_modules": ["q_proj"], "dropout": 0.1}, "dropout"),
    ):
        with pytest.raises(SpecError, match=words) as err:
            check_language_template(
                task_template("lora"), shard_count=2, model=model, now=0, sponsor="0x" + "33" * 20, lora=lora
            )
        assert "\n" not in str(err.value)


def test_trained_parameters_of_a_plain_model_are_all_of_them() -> None:
    from syncline.modality.language import LanguageAdapter

    net = LanguageAdapter().build_model(
        {
            "family": "llama",
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "vocab_size": 64,
        },
        seed=0,
    )
    assert list(trained_parameters(net)) == [n for n, _ in net.named_parameters()]
