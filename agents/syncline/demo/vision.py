"""The ``vision`` scenario: a ViT learns scikit-learn's handwritten digits through the whole market
(issue 14, item 5).

1. **The data.** The packaged digits (1,797 grayscale 8x8 images, 10 classes): every 5th image of
   each class is held out for validation (355 images), the rest dealt into six class-balanced
   image shards (docs/protocol.md §12.6).
2. **The model.** A small ViT built from a config (:data:`~syncline.sponsor.vision_task.DEFAULT_VISION_MODEL`:
   2x2 patches, 2 layers of width 96), randomly initialised; nothing is downloaded.
3. **The market.** The sponsor publishes the shards, the validation shard and the initial state
   and posts the task; three trainers and three witnesses (k=2) enroll, the trainers run DiLoCo
   (AdamW inner steps, int8 payloads, outer Nesterov lr 0.7 and momentum 0.9) and the witnesses
   vote each round's top-1 accuracy on the whole validation shard; the run seals and everyone is
   paid.
4. **The result.** The final state is exported with ``save_pretrained`` plus the class names and
   the pixel scaling (``preprocessor_config.json``, ``vision.json``); the export is loaded back
   with ``AutoModelForImageClassification.from_pretrained`` and scored on the validation images.

The receipt (``receipt.json``) carries the accuracy per round (``validation_metric_per_round``,
named by ``validation_metric``), the initial state's and the export's; the issue's target is
>= 80 %. Measured on the 2-core machine: 0.36, 0.62, 0.85, 0.92, 0.94 over the 5 rounds (from
0.09 at the start), about a minute of wall time. The plan was tuned offline with the same
adapter, inner loop and round computation (5 rounds of H=50 ended at 0.93-0.96 over several
seeds).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import torch

from syncline.blobstore import BlobStore, LocalBlobStore
from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.modality.vision import VisionAdapter, decode_image_shard
from syncline.protocol.receipt import TrainingReceipt
from syncline.run.agent_config import EVAL_BATCH_SIZE, EVAL_BATCHES
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import PublishedTask
from syncline.sponsor.vision_task import DEFAULT_VISION_MODEL, ImageSource, publish_vision_task

TASK_NAME = "digits-vit-diloco"
VALIDATION_IMAGES = 355
"""Held-out digits (every 5th of each class); the witnesses score all of them."""
PLAN = dataclasses.replace(
    DemoPlan(),
    rounds=5,
    inner_steps=50,
    checkpoint_interval=10,
    inner_lr=1e-3,
    batch_size=32,
    model=dict(DEFAULT_VISION_MODEL),
    eval_batches=math.ceil(VALIDATION_IMAGES / EVAL_BATCH_SIZE),
    timeout_s=600.0,
)
"""The run: the main demo's committee and windows, 5 rounds of 50 inner steps on batches of 32 at
AdamW lr 1e-3. At 2e-3 the accuracy is the same but an honest bf16 trainer's later 10-step segments
fall outside the fp32 referee's default tolerance envelope (weight relative L2 0.06-0.14 against
0.06); at 1e-3 they stay below 0.03."""
TARGET_ACCURACY = 0.8


class VisionDemo:
    """Runs the scenario in ``workdir`` (``.syncline/demo/vision``)."""

    def __init__(self, workdir: Path, plan: DemoPlan = PLAN, source: ImageSource | None = None):
        self.workdir = workdir
        self.plan = plan
        self.source = source or ImageSource.digits()

    def publish(self, blobs: BlobStore, template: dict[str, Any]) -> PublishedTask:
        """The sponsor's step: the digits' shards, validation shard and initial ViT state."""
        return publish_vision_task(
            blobs,
            template={**template, "name": TASK_NAME},
            shard_count=self.plan.shard_count,
            model=self.plan.model,
            source=self.source,
        )

    def run(self) -> TrainingReceipt:
        started = time.monotonic()
        demo = TrainingDemo(self.workdir, self.plan)
        demo.publish_task = self.publish
        scored: dict[str, Any] = {}

        def score_initial(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
            """The initial state's accuracy, scored as the witnesses score every round."""
            ctx = TaskContext.load(market, LocalBlobStore(self.workdir / "blobs"), task_id)
            model = ctx.build_model(ctx.fetch_state(ctx.spec.initial_state_root))
            batches = self.plan.eval_batches or EVAL_BATCHES
            validation = ctx.validation_shard()
            scored["initial"] = ctx.adapter.metric(model, validation, batch_size=EVAL_BATCH_SIZE, max_batches=batches)
            scored["validation"] = validation
            scored["adapter"] = ctx.adapter

        demo.after_seal = score_initial
        receipt = demo.run()
        extras = dict(receipt.extras)
        adapter = scored["adapter"]
        assert isinstance(adapter, VisionAdapter)
        extras.update(
            scenario="vision",
            top1_accuracy_initial=scored["initial"],
            export_top1_accuracy=export_accuracy(Path(extras["model_dir"]), adapter, scored["validation"]),
            target_top1_accuracy=TARGET_ACCURACY,
            wall_seconds=round(time.monotonic() - started, 1),
        )
        return TrainingReceipt(**{**receipt.__dict__, "extras": extras})


def export_accuracy(model_dir: Path, adapter: VisionAdapter, validation: bytes) -> float:
    """Top-1 accuracy of the exported model, loaded with ``from_pretrained``, on every validation
    image (scaled as the export's ``preprocessor_config.json`` says)."""
    from transformers import AutoModelForImageClassification

    model: Any = AutoModelForImageClassification.from_pretrained(model_dir)
    model.eval()
    data = decode_image_shard(validation, num_labels=adapter.num_labels)
    with torch.no_grad():
        logits = model(pixel_values=adapter.pixel_values(data.images)).logits
    return float((logits.argmax(dim=-1) == data.labels).float().mean())
