"""``syncline demo --scenario sft-lora`` end to end (issue 13, item 5), as a user runs it: a base
Llama pretrained locally and saved, LoRA SFT on a JSONL instruction file through the whole market
on a real anvil (3 trainer and 3 witness processes), the run sealed and paid, the export's adapter
loaded with ``peft`` on top of the base, and the receipt in ``.syncline/demo/sft-lora``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from syncline.chain.deployment import compile_contracts

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def test_sft_lora_scenario_fine_tunes_adapters_through_the_market(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    state = tmp_path / "state"
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, state / "artifacts" / cache.name)
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1", "SYNCLINE_LOG_FORMAT": "console"}
    run = subprocess.run(
        [sys.executable, "-m", "syncline.cli", "demo", "--scenario", "sft-lora"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    workdir = state / "demo" / "sft-lora"
    receipt = json.loads((workdir / "receipt.json").read_text())

    # The market: every round finalized on chain, the run sealed, every trainer paid, none slashed.
    assert receipt["status"] == "sealed"
    assert receipt["rounds_finalized"] == receipt["rounds_total"] == 4
    assert len(receipt["trainers"]) == 3
    trainers = receipt["trainers"]
    assert all(t["reward_wei"] > 0 and t["slashed_wei"] == 0 and t["accepted"] == 4 for t in trainers), trainers

    # Fine-tuning works: the validation loss (response tokens only) falls from the base's.
    losses = receipt["validation_loss_per_round"]
    assert len(losses) == 4 and all(loss == loss for loss in losses), losses
    assert losses[-1] < losses[0] < receipt["validation_loss_initial"], (receipt["validation_loss_initial"], losses)

    # Only the adapters travel: every payload is the LoRA layout's, far below the base's.
    lora_bytes = receipt["lora_payload_bytes"]
    assert receipt["payload_bytes_per_submission"] == [lora_bytes] * 4
    assert receipt["payload_bytes_per_round"] == [3 * lora_bytes] * 4
    assert receipt["model_parameters"] * 20 < receipt["base_parameters"]
    assert lora_bytes * 20 < receipt["full_model_payload_bytes"]

    # The instruction set came from a JSONL file of prompt/response pairs.
    first = json.loads((workdir / "instructions.jsonl").read_text().splitlines()[0])
    assert set(first) == {"prompt", "response"}

    # The export: the adapter alone loads with peft on top of the base and generates; the merged
    # model (plain transformers) computes the same logits.
    base_dir, adapter_dir, merged_dir = Path(receipt["base_model_dir"]), Path(receipt["adapter_dir"]), workdir / "model"
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["peft_type"] == "LORA"
    assert sorted(config["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    ids = tokenizer(first["prompt"] + "\n", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4)
        assert not torch.allclose(adapted(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-3)
        out = adapted.generate(input_ids=ids, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert out.shape[1] > ids.shape[1]
    assert receipt["adapter_matches_merged"] is True and receipt["adapter_sample_text"]
