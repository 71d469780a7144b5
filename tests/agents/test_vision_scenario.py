"""``syncline demo --scenario vision`` end to end (issue 14, item 5), as a user runs it: a ViT
trained on scikit-learn's digits through the whole market on a real anvil (3 trainer and 3 witness
processes, k=2), every round's top-1 accuracy voted by the witnesses, the run sealed and paid, and
the export loaded with ``from_pretrained`` and classifying the held-out digits, with the receipt
in ``.syncline/demo/vision``."""

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
from syncline.modality.vision import EXPORT_PROCESSOR_FILE, EXPORT_VISION_FILE, decode_image_shard, pixel_table
from syncline.sponsor.vision_task import prepare_images, read_images

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def test_vision_scenario_trains_a_vit_on_digits_through_the_market(tmp_path: Path) -> None:
    from transformers import AutoModelForImageClassification

    state = tmp_path / "state"
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, state / "artifacts" / cache.name)
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1", "SYNCLINE_LOG_FORMAT": "console"}
    run = subprocess.run(
        [sys.executable, "-m", "syncline.cli", "demo", "--scenario", "vision"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    workdir = state / "demo" / "vision"
    receipt = json.loads((workdir / "receipt.json").read_text())

    # The market: every round finalized on chain, the run sealed, every trainer paid, none slashed.
    assert receipt["status"] == "sealed"
    rounds = receipt["rounds_total"]
    assert receipt["rounds_finalized"] == rounds == 5
    trainers = receipt["trainers"]
    assert len(trainers) == 3
    assert all(t["reward_wei"] > 0 and t["slashed_wei"] == 0 and t["accepted"] == rounds for t in trainers), trainers

    # The witnesses voted top-1 accuracy; it rose from chance to the target (>= 80 %).
    assert receipt["validation_metric"] == "top1_accuracy"
    accuracy = receipt["validation_metric_per_round"]
    assert len(accuracy) == rounds and all(0.0 <= a <= 1.0 for a in accuracy), accuracy
    assert receipt["top1_accuracy_initial"] < 0.3
    assert accuracy[-1] >= 0.8 and accuracy[-1] > accuracy[0], accuracy

    # The export: save_pretrained + the class names and the pixel scaling, loadable offline, and
    # as accurate on the held-out digits as the witnesses' last vote.
    model_dir = workdir / "model"
    model = AutoModelForImageClassification.from_pretrained(model_dir).eval()
    assert model.config.id2label[7] == "7"
    summary = json.loads((model_dir / EXPORT_VISION_FILE).read_text())
    processor = json.loads((model_dir / EXPORT_PROCESSOR_FILE).read_text())
    assert summary["image_size"] == 8 and summary["num_channels"] == 1 and processor["size"]["height"] == 8
    prepared = prepare_images(read_images(), shard_count=6)
    assert summary["pixel_mean"] == list(prepared.pixel_mean)
    held_out = decode_image_shard(prepared.validation)
    table = pixel_table(summary["pixel_mean"], summary["pixel_std"])[0]
    with torch.no_grad():
        logits = model(pixel_values=table[held_out.images.long()]).logits
    exported = float((logits.argmax(-1) == held_out.labels).float().mean())
    assert exported == pytest.approx(accuracy[-1], abs=1.5 / len(held_out))  # batched vs whole: one image at most
    assert receipt["export_top1_accuracy"] == pytest.approx(exported, abs=1e-6)
