"""The ``sft-lora`` scenario: fine-tune a pretrained model with LoRA on an instruction dataset
through the whole market (issue 13, item 5).

1. **A pretrained base, built here.** The default demo's Llama (same config and tokenizer as the
   main job) is pretrained locally for :data:`BASE_STEPS` AdamW steps on the Shakespeare corpus
   and saved with ``save_pretrained`` and its tokenizer (``.syncline/demo/sft-lora/base``; rebuilt
   only when its recipe changes). Nothing is downloaded.
2. **An instruction dataset in a JSONL file.** Speaker attribution from the plays: the prompt
   quotes a speech's first line and asks who says it, the response is the speaker's name
   (``instructions.jsonl``: ``{"prompt": ..., "response": ...}`` per line).
3. **The market.** The sponsor posts the task from those files (``model: {pretrained: base,
   lora: ...}``, ``method: sft``, a ``jsonl`` source): the base model is published and pinned
   by digest, the task's state and payloads are the LoRA adapters only. Three trainers and three
   witnesses enroll, every round is finalized on chain, the run seals and everyone claims.
4. **The result.** The export holds the merged model and the adapter alone; the adapter is loaded
   with ``peft`` on top of the base and generates, and its logits match the merged model's.

The receipt (``receipt.json``) carries ``validation_loss_per_round`` and the payload bytes per
round beside what a full-model payload of the same base would be.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from syncline.blobstore import BlobStore, LocalBlobStore
from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.modality.language import LanguageAdapter
from syncline.observability import get_logger
from syncline.protocol.receipt import TrainingReceipt
from syncline.run.agent_config import EVAL_BATCH_SIZE, EVAL_BATCHES
from syncline.run.context import TaskContext
from syncline.sponsor.data_sources import DataSource, parse_source, read_source_files
from syncline.sponsor.pretrained import read_pretrained
from syncline.sponsor.task_builder import (
    LORA_ADAPTER_DIR,
    PublishedTask,
    cached_corpus,
    publish_language_task,
    write_tokenizer,
)
from syncline.sponsor.task_defaults import DEFAULT_LORA
from syncline.trainer.segments import encode_payload

log = get_logger("syncline.demo.sft_lora")

BASE_STEPS = 300
"""AdamW steps of the local pretraining that makes the base model."""
BASE_LR = 3e-3
LORA: dict[str, Any] = DEFAULT_LORA
"""The adapters: the sponsor's default, rank 8 on every attention projection."""
MAX_PAIRS = 4000
PROMPT_CHARS = 120
SPEECH = re.compile(r"\n\n([A-Z][A-Z' ]{1,30})\.\n([^\n]{8,})")
"""A speech of the corpus: the speaker's name in capitals on its own line, then its first line."""
PLAN = dataclasses.replace(
    DemoPlan(),
    rounds=4,
    inner_steps=30,
    checkpoint_interval=10,
    inner_lr=3e-3,
    seq_len=64,
    timeout_s=600.0,
)
"""The run: the main demo's committee and windows, 4 rounds of 30 inner steps."""


def base_model_dir(workdir: Path, plan: DemoPlan = PLAN) -> Path:
    """The pretrained base (built by a short local pretraining the first time, then reused)."""
    out = workdir / "base"
    recipe = {
        "model": plan.model,
        "vocab_size": plan.vocab_size,
        "steps": BASE_STEPS,
        "lr": BASE_LR,
        "seq": plan.seq_len,
    }
    stamp = out / "syncline-base.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("recipe") == recipe:
        return out
    started = time.monotonic()
    corpus = cached_corpus(plan.shard_count, plan.vocab_size)  # the main demo's tokenizer and shards
    adapter = LanguageAdapter(seq_len=plan.seq_len)
    model = adapter.build_model({**plan.model, "vocab_size": plan.vocab_size}, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=BASE_LR, weight_decay=0.01)
    model.train()
    loss = float("nan")
    for batch in adapter.batches(corpus.shards, batch_size=plan.batch_size, seed=0, steps=BASE_STEPS):
        value = adapter.loss(model, batch)
        value.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = float(value.detach())
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # type: ignore[operator]
    write_tokenizer(out, corpus.tokenizer_json, None)
    stamp.write_text(json.dumps({"recipe": recipe, "final_train_loss": loss}, indent=2))
    log.info(
        "sft_lora.base_pretrained", steps=BASE_STEPS, loss=round(loss, 4), seconds=round(time.monotonic() - started, 1)
    )
    return out


def instruction_pairs(max_pairs: int = MAX_PAIRS) -> list[dict[str, str]]:
    """Speaker-attribution pairs from the plays, spread evenly over the whole corpus."""
    texts = parse_source(read_source_files(DataSource.shakespeare())).documents()
    found = [
        (m.group(1).strip(), m.group(2).strip())
        for text in texts
        for m in SPEECH.finditer(text)
        if not m.group(2).isupper()  # a list of persons, not a speech
    ]
    stride = max(1, len(found) // max_pairs)
    return [
        {"prompt": f'Who says "{line[:PROMPT_CHARS]}"?', "response": name} for name, line in found[::stride][:max_pairs]
    ]


def write_instructions(path: Path) -> Path:
    """The instruction dataset as a JSONL file (one ``{"prompt", "response"}`` object per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in instruction_pairs()), encoding="utf-8")
    return path


def full_payload_bytes(numel: int, bits: int) -> int:
    """Bytes of a payload of ``numel`` coordinates (what a full-model task of the base sends)."""
    payload, _ = encode_payload(torch.zeros(numel), bits)
    return len(payload)


class SftLoraDemo:
    """Runs the scenario in ``workdir`` (``.syncline/demo/sft-lora``)."""

    def __init__(self, workdir: Path, plan: DemoPlan = PLAN, lora: Mapping[str, Any] = LORA):
        self.workdir = workdir
        self.plan = plan
        self.lora = dict(lora)

    def run(self) -> TrainingReceipt:
        started = time.monotonic()
        base = base_model_dir(self.workdir, self.plan)
        data = write_instructions(self.workdir / "instructions.jsonl")
        base_model = read_pretrained(base)
        demo = TrainingDemo(self.workdir, self.plan)

        def publish(blobs: BlobStore, template: dict[str, Any]) -> PublishedTask:
            return publish_language_task(
                blobs,
                template={**template, "name": "shakespeare-speakers-sft-lora"},
                shard_count=self.plan.shard_count,
                vocab_size=self.plan.vocab_size,
                seq_len=self.plan.seq_len,
                model=base_model,
                source=DataSource.from_mapping(
                    {"type": "jsonl", "path": str(data), "prompt_field": "prompt", "response_field": "response"}
                ),
                method="sft",
                lora=self.lora,
            )

        demo.publish_task = publish
        initial: dict[str, float] = {}

        def score_base(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
            """The validation loss of the run's initial state (the base with fresh adapters, which
            computes what the base does), scored as the witnesses score every round."""
            ctx = TaskContext.load(market, LocalBlobStore(self.workdir / "blobs"), task_id)
            model = ctx.build_model(ctx.fetch_state(ctx.spec.initial_state_root))
            initial["loss"] = ctx.adapter.evaluate(
                model, ctx.validation_shard(), batch_size=EVAL_BATCH_SIZE, max_batches=EVAL_BATCHES
            )

        demo.after_seal = score_base
        demo.sample_prompt = instruction_pairs(1)[0]["prompt"] + "\n"
        receipt = demo.run()
        extras = dict(receipt.extras)
        model_dir = Path(extras["model_dir"])
        adapter_sample, agree = check_adapter(base, model_dir / LORA_ADAPTER_DIR, model_dir, demo.sample_prompt)
        per_round = extras.get("payload_bytes_per_submission") or []
        extras.update(
            scenario="sft-lora",
            validation_loss_initial=initial.get("loss"),
            base_model_dir=str(base),
            base_parameters=base_model.param_count,
            instructions=str(data),
            adapter_dir=str(model_dir / LORA_ADAPTER_DIR),
            adapter_sample_text=adapter_sample,
            adapter_matches_merged=agree,
            lora=self.lora,
            full_model_payload_bytes=full_payload_bytes(base_model.param_count, 8),
            lora_payload_bytes=per_round[0] if per_round else None,
            wall_seconds=round(time.monotonic() - started, 1),
        )
        return TrainingReceipt(**{**receipt.__dict__, "extras": extras})


def check_adapter(base_dir: Path, adapter_dir: Path, merged_dir: Path, prompt: str) -> tuple[str, bool]:
    """Load the exported adapter with ``peft`` on top of the base and generate from ``prompt``
    (greedy); also whether its logits equal the merged model's (to float32 rounding)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    base: Any = AutoModelForCausalLM.from_pretrained(base_dir)
    model: Any = PeftModel.from_pretrained(base, adapter_dir)
    merged: Any = AutoModelForCausalLM.from_pretrained(merged_dir)
    model.eval()
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        agree = bool(torch.allclose(model(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4))
        out = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    text = str(tokenizer.decode(out[0][ids.shape[1] :], skip_special_tokens=True))
    return text.replace("\n", " / ").strip(), agree
