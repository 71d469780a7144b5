"""Fine-tuning a sponsor's pretrained model through the whole market (issue 13, items 2 and 3):
a tiny Llama pretrained here on the sponsor's JSONL texts and saved with its own tokenizer is
posted with ``syncline train post-task`` (``model: {pretrained: model}``) on a real anvil, trained
for 2 rounds by 3 trainer and 3 witness processes, and exported.

Pretraining-style fine-tuning: the witnesses' validation loss starts at the pretrained model's
loss, not a random initialisation's, and the export loads with ``from_pretrained`` with the final
state's weights. SFT (``method: sft``, prompt/response pairs, a chat template): every round is
finalized and every training segment re-executed by the referee is innocent, while the same
re-execution with the unmasked pretraining loss convicts: trainers and referee share the mask."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tokenizers import Tokenizer

from sponsor._pretrained_models import build_pretrained, pretrain, save_tokenizer
from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import compile_contracts, deploy_market
from syncline.chain.devnet import DevnetClock, chain_time, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.court.referee import Verdict, referee_segment
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.modality.language import LanguageAdapter
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import export_model
from syncline.sponsor.task_defaults import default_task

from ._agent_harness import tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

COLOURS = ["red", "green", "blue", "grey", "gold", "white", "black"]
ANIMALS = ["cat", "dog", "fox", "owl", "hen", "bee", "elk", "ram"]
FOODS = ["bread", "fish", "seeds", "grass", "honey", "apples"]
TEXTS = [f"The {COLOURS[i % 7]} {ANIMALS[i % 8]} eats {FOODS[i % 6]} at dawn. It sleeps at night. " for i in range(400)]
PAIRS = [
    {"q": f"What does the {ANIMALS[i % 8]} eat?", "a": f"The {ANIMALS[i % 8]} eats {FOODS[i % 6]}."} for i in range(400)
]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}Q: {{ m['content'] }}\n"
    "{% else %}A: {{ m['content'] }}<|endoftext|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}"
)
SEQ_LEN = 32
PLAN = tiny_plan(rounds=2, inner_steps=4, checkpoint_interval=2, round_duration_s=30, seq_len=SEQ_LEN, inner_lr=1e-3)


def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, state / "artifacts" / cache.name)
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(state))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _pretrained_llama(sponsor: Path, texts: list[str], *, chat_template: str | None = None) -> torch.nn.Module:
    """A tiny Llama pretrained on ``texts`` with its own tokenizer, saved to ``sponsor/model``."""
    model = build_pretrained("llama", sponsor / "model", texts)
    if chat_template is not None:
        save_tokenizer(texts, sponsor / "model", chat_template=chat_template)
    tokenizer = Tokenizer.from_file(str(sponsor / "model" / "tokenizer.json"))
    ids = torch.tensor([t for text in texts for t in tokenizer.encode(text).ids], dtype=torch.long)
    pretrain(model, ids, steps=60, seq_len=SEQ_LEN)
    model.save_pretrained(sponsor / "model")
    return model


def _run_market(
    workdir: Path,
    sponsor: Path,
    plan: DemoPlan,
    task: dict[str, Any],
    during: Callable[[MarketClient, TaskContext], None],
) -> tuple[MarketClient, TaskContext, list[float]]:
    """Anvil + blob service; ``post-task`` of ``sponsor/task.yaml`` (``task`` over the demo's
    template); 3 trainer and 3 witness processes until the run is sealed; then ``during`` while the
    chain and the blob service still answer. Returns the witnesses' validation loss per round."""
    with start_anvil(workdir / "anvil", accounts=12) as devnet:
        service = BlobService(LocalBlobStore(workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        demo = TrainingDemo(workdir, plan)
        clock = DevnetClock(devnet.web3(), plan.clock_speed)
        try:
            keys = devnet.private_keys()
            w3 = devnet.web3()
            deployment = deploy_market(w3, from_private_key(keys[0]), devnet.rpc_url, workdir)
            market = MarketClient.from_deployment(deployment, w3)
            witness_keys = keys[4:7]
            spec = {**default_task(plan, [from_private_key(k).address for k in witness_keys], chain_time(w3)), **task}
            spec["enrollment_deadline"] = f"+{plan.enrollment_window_s}"
            (sponsor / "task.yaml").write_text(yaml.safe_dump(spec))
            command = [
                *("train", "post-task", "--spec", str(sponsor / "task.yaml")),
                *("--deployment", str(workdir / "deployment.json"), "--blob-store", service.url),
            ]
            posted = subprocess.run(
                [sys.executable, "-m", "syncline.cli", *command],
                capture_output=True,
                text=True,
                env={**os.environ, "SYNCLINE_PRIVATE_KEY": keys[0]},
                timeout=240,
                stdin=subprocess.DEVNULL,
            )
            assert posted.returncode == 0, posted.stderr[-3000:]
            task_id = json.loads(posted.stdout)["task_id"]
            ctx = TaskContext.load(market, HttpBlobStore(service.url), task_id)
            clock.start()  # tiny_plan's windows pass on the devnet's fast clock
            started = time.monotonic()
            for i, key in enumerate(keys[1:4]):
                demo._spawn("trainer", i, key, task_id, deployment, service.url)
            for i, key in enumerate(witness_keys):
                demo._spawn("witness", i, key, task_id, deployment, service.url)
            losses = demo._watch(market, task_id, started)
            demo._wait_agents_exit(timeout_s=120)
            assert market.task(task_id).status == TaskStatus.SEALED
            for r in range(plan.rounds):
                rr = market.round(task_id, r)
                assert rr.status == RoundStatus.FINALIZED and rr.accepted_mask == 0b111, (r, rr)
            during(market, ctx)
            return market, ctx, losses
        finally:
            clock.stop()
            demo._stop_agents()
            service.stop()


def test_post_task_fine_tunes_a_pretrained_model_and_exports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _state_dir(tmp_path, monkeypatch)
    sponsor = tmp_path / "sponsor"
    (sponsor / "data").mkdir(parents=True)
    (sponsor / "data" / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    model = _pretrained_llama(sponsor, TEXTS)
    out = tmp_path / "export"
    seen: dict[str, Any] = {}

    def export(market: MarketClient, ctx: TaskContext) -> None:
        root = market.task(ctx.task_id).state_root
        export_model(ctx, root, out)
        seen["final"] = ctx.fetch_state(root).to_state_dict()
        # The pretrained model's loss, and a random initialisation's, on the task's validation shard.
        adapter = LanguageAdapter(seq_len=SEQ_LEN)
        seen["pretrained"] = adapter.evaluate(model, ctx.validation_shard(), batch_size=8, max_batches=8)
        seen["random"] = adapter.evaluate(ctx.build_model(), ctx.validation_shard(), batch_size=8, max_batches=8)

    task = {
        "model": {"pretrained": "model"},  # relative to the spec file's directory
        "dataset_source": {"type": "jsonl", "path": "data/texts.jsonl", "shard_count": 6, "seq_len": SEQ_LEN},
    }
    _, ctx, losses = _run_market(tmp_path / "run", sponsor, PLAN, task, export)
    assert ctx.spec.model.family == "llama" and ctx.spec.model.config["dtype"] == "float32"
    assert seen["random"] - seen["pretrained"] > 1.0, seen
    assert len(losses) == PLAN.rounds, losses
    assert abs(losses[0] - seen["pretrained"]) < 0.3, (losses, seen["pretrained"])
    assert losses[0] < seen["random"] - 1.0

    exported = AutoModelForCausalLM.from_pretrained(out)
    assert type(exported) is type(model)
    for name, tensor in exported.named_parameters():  # the export is the dequantized final state
        assert torch.equal(tensor.detach(), seen["final"][name]), name
    assert json.loads((out / "syncline.json").read_text())["spec_hash"] == ctx.spec.spec_hash
    tok = AutoTokenizer.from_pretrained(out)
    assert tok(TEXTS[0])["input_ids"] == AutoTokenizer.from_pretrained(sponsor / "model")(TEXTS[0])["input_ids"]
    prompt = tok("The red cat eats", return_tensors="pt")
    generated = exported.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]


def test_sft_through_the_market_trains_and_referees_the_masked_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _state_dir(tmp_path, monkeypatch)
    sponsor = tmp_path / "sponsor"
    (sponsor / "data").mkdir(parents=True)
    (sponsor / "data" / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    _pretrained_llama(sponsor, [f"Q: {p['q']}\nA: {p['a']}" for p in PAIRS], chat_template=CHAT_TEMPLATE)
    plan = dataclasses.replace(PLAN, checkpoints="eager")  # every checkpoint published: every segment refereed
    verdicts: dict[str, list[Any]] = {"sft": [], "unmasked": []}

    def referee(market: MarketClient, ctx: TaskContext) -> None:
        unmasked = dataclasses.replace(ctx, adapter=LanguageAdapter(seq_len=SEQ_LEN))
        for fragment in range(3):
            for segment in range(ctx.spec.checkpoint_segments):
                verdicts["sft"].append(referee_segment(ctx, 1, fragment, segment))
            verdicts["unmasked"].append(referee_segment(unmasked, 1, fragment, 0))

    task = {
        "method": "sft",
        "model": {"pretrained": "model"},
        "dataset_source": {
            **{"type": "jsonl", "path": "data/pairs.jsonl", "prompt_field": "q", "response_field": "a"},
            **{"shard_count": 6, "seq_len": SEQ_LEN},
        },
    }
    _, ctx, losses = _run_market(tmp_path / "run", sponsor, plan, task, referee)
    assert ctx.spec.metadata["method"] == "sft" and ctx.adapter.method == "sft"
    assert len(losses) == PLAN.rounds and all(loss == loss for loss in losses), losses  # no NaN
    assert len(verdicts["sft"]) == 3 * ctx.spec.checkpoint_segments
    assert all(isinstance(v, Verdict) and not v.guilty for v in verdicts["sft"]), verdicts["sft"]
    assert all(isinstance(v, Verdict) and v.guilty for v in verdicts["unmasked"]), verdicts["unmasked"]
