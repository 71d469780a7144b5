"""Fine-tuning a sponsor's pretrained model through the whole market (issue 13, item 2): a tiny
Llama pretrained here on the sponsor's JSONL texts and saved with its own tokenizer is posted with
``syncline train post-task`` (``model: {pretrained: model}``) on a real anvil, trained for 2 rounds
by 3 trainer and 3 witness processes, and exported. The witnesses' validation loss starts at the
pretrained model's loss, not a random initialisation's, and the export loads with
``from_pretrained`` with the final state's weights."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from tokenizers import Tokenizer

from sponsor._pretrained_models import build_pretrained, pretrain
from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import compile_contracts, deploy_market
from syncline.chain.devnet import chain_time, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.demo.training_run import TrainingDemo, _template
from syncline.modality.language import LanguageAdapter, tokens_of
from syncline.protocol.enums import TaskStatus
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import export_model

from ._agent_harness import tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

COLOURS = ["red", "green", "blue", "grey", "gold", "white", "black"]
ANIMALS = ["cat", "dog", "fox", "owl", "hen", "bee", "elk", "ram"]
FOODS = ["bread", "fish", "seeds", "grass", "honey", "apples"]
RECORDS = [
    {"text": f"The {COLOURS[i % 7]} {ANIMALS[i % 8]} eats {FOODS[i % 6]} at dawn. It sleeps at night. "}
    for i in range(400)
]
SEQ_LEN = 32
PLAN = tiny_plan(rounds=2, inner_steps=4, checkpoint_interval=2, round_duration_s=30, seq_len=SEQ_LEN, inner_lr=1e-3)


def test_post_task_fine_tunes_a_pretrained_model_and_exports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    state = tmp_path / "state"
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, state / "artifacts" / cache.name)
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(state))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    # The sponsor's files: texts, and a small model pretrained on them with its own tokenizer.
    sponsor = tmp_path / "sponsor"
    (sponsor / "data").mkdir(parents=True)
    (sponsor / "data" / "texts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    texts = [r["text"] for r in RECORDS]
    model = build_pretrained("llama", sponsor / "model", texts)
    tokenizer = Tokenizer.from_file(str(sponsor / "model" / "tokenizer.json"))
    ids = torch.tensor([t for text in texts for t in tokenizer.encode(text).ids], dtype=torch.long)
    pretrain(model, ids, steps=60, seq_len=SEQ_LEN)
    model.save_pretrained(sponsor / "model")

    workdir = tmp_path / "run"
    with start_anvil(workdir / "anvil", accounts=12) as devnet:
        service = BlobService(LocalBlobStore(workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        demo = TrainingDemo(workdir, PLAN)
        try:
            keys = devnet.private_keys()
            w3 = devnet.web3()
            deployment = deploy_market(w3, from_private_key(keys[0]), devnet.rpc_url, workdir)
            market = MarketClient.from_deployment(deployment, w3)
            witness_keys = keys[4:7]
            spec = _template(PLAN, [from_private_key(k) for k in witness_keys], chain_time(w3))
            spec.update(
                enrollment_deadline="+600",
                model={"pretrained": "model"},  # relative to the spec file's directory
                dataset_source={"type": "jsonl", "path": "data/texts.jsonl", "shard_count": 6, "seq_len": SEQ_LEN},
            )
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
            assert ctx.spec.model.family == "llama" and ctx.spec.model.config["dtype"] == "float32"

            # The pretrained model's loss, and a random initialisation's, on the task's validation shard.
            adapter = LanguageAdapter(seq_len=SEQ_LEN)
            pretrained_loss = adapter.evaluate(model, ctx.validation_shard(), batch_size=8, max_batches=8)
            random_loss = adapter.evaluate(ctx.build_model(), ctx.validation_shard(), batch_size=8, max_batches=8)
            assert random_loss - pretrained_loss > 1.0, (random_loss, pretrained_loss)
            assert len(tokens_of(ctx.validation_shard())) >= SEQ_LEN

            started = time.monotonic()
            for i, key in enumerate(keys[1:4]):
                demo._spawn("trainer", i, key, task_id, deployment, service.url)
            for i, key in enumerate(witness_keys):
                demo._spawn("witness", i, key, task_id, deployment, service.url)
            losses = demo._watch(market, task_id, started)
            demo._wait_agents_exit(timeout_s=120)
            assert market.task(task_id).status == TaskStatus.SEALED
            assert len(losses) == PLAN.rounds, losses
            assert abs(losses[0] - pretrained_loss) < 0.3, (losses, pretrained_loss)
            assert losses[0] < random_loss - 1.0

            root = market.task(task_id).state_root
            out = export_model(ctx, root, tmp_path / "export")
            final = ctx.fetch_state(root).to_state_dict()
        finally:
            demo._stop_agents()
            service.stop()

    exported = AutoModelForCausalLM.from_pretrained(out)
    assert type(exported) is type(model)
    for name, tensor in exported.named_parameters():  # the export is the dequantized final state
        assert torch.equal(tensor.detach(), final[name]), name
    weights = json.loads((out / "syncline.json").read_text())
    assert weights["spec_hash"] == ctx.spec.spec_hash
    tok = AutoTokenizer.from_pretrained(out)
    assert tok(texts[0])["input_ids"] == AutoTokenizer.from_pretrained(sponsor / "model")(texts[0])["input_ids"]
    prompt = tok("The red cat eats", return_tensors="pt")
    generated = exported.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]
