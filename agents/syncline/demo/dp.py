"""The ``dp`` scenario: the default language task trained with differential privacy through the
whole market (issue 15, item 4; docs/privacy.md).

1. **The task.** The demo's Shakespeare corpus and Llama, with a ``privacy`` section: target
   (ε = :data:`TARGET_EPSILON`, δ = :data:`DELTA`), per-example clipping norm :data:`CLIP_NORM`,
   and the sample rate of a step's batch over the smallest shard's windows (so the accounting is
   conservative for a trainer holding more). The noise multiplier follows from the spec alone
   (Opacus's RDP accountant over ``rounds * inner_steps`` steps).
2. **The market.** Three trainers run DP-SGD in their inner loops (Opacus: per-example clipping,
   Gaussian noise from a generator seeded per step by the trainer's secret round seed, batches
   drawn from it too); three witnesses (k=2) vote each round's validation loss; the run seals and
   everyone is paid. Checkpoints are published on demand: the committee's public draw (rate 0.34)
   names one segment per drawn submission; a drawn training segment is replayed with the trainer's noise
   opening, which it publishes sealed to the witnesses' dispute keys (each witness generates one
   in its state dir, password ``$SYNCLINE_DISPUTE_PASSWORD``, and registers it on chain), and so
   is a claimed one (docs/privacy.md).
3. **The receipt.** ``epsilon_per_round``: per trainer address, the ε spent after each round
   (cumulative, from the rounds it committed to), ``epsilon_final`` per trainer and the
   ``privacy`` plan (target, noise multiplier); every final ε is within the target;
   ``rounds_opened``: per trainer, the rounds whose noise opening the committee could read (a
   drawn or claimed training segment): against the committee those rounds have no protection.

Smaller than the main demo (4 rounds of 20 steps instead of 8 of 30) so the DP run, whose steps
cost about 3x a plain step on CPU (per-example gradients), takes about as long.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from pathlib import Path
from typing import Any

from syncline.blobstore import BlobStore
from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.modality.language import token_count
from syncline.privacy.accounting import PrivacyPlan
from syncline.privacy.committee import DISPUTE_PASSWORD_ENV
from syncline.privacy.exposure import rounds_opened
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.spec import TrainingTaskSpec
from syncline.sponsor.task_builder import PublishedTask, cached_corpus, publish_language_task
from syncline.sponsor.task_defaults import ETH

TASK_NAME = "shakespeare-llama-dp"
TARGET_EPSILON = 8.0
DELTA = 1e-5
CLIP_NORM = 1.0
PLAN = dataclasses.replace(
    DemoPlan(),
    rounds=4,
    inner_steps=20,
    checkpoint_interval=10,
    timeout_s=600.0,
    checkpoints="on-demand",
    spot_check_rate=0.34,
    # postTask's deterrence rule at 0.34: 2 x (3 ETH / 12 submissions) / 0.34 = 1.47 ETH at least
    trainer_stake_wei=2 * ETH,
    challenge_window_s=1200,
)
"""The main demo's committee, windows, model and corpus; 4 rounds of 20 DP-SGD steps (batches of
8 windows of 64 tokens, AdamW lr 1e-3). Checkpoints on demand, the committee drawing about a third
of the submissions (against a 2 ETH stake: postTask's deterrence rule needs 1.47 ETH at this rate): a
drawn training segment is replayed with its noise opening, sealed to the witnesses
(docs/privacy.md), and its round appears in the receipt's ``rounds_opened``. A 20-minute challenge
window (40 s of wall time on the demo's fast clock; the main demo's 15 minutes) leaves the
committee's audit of a round, and an honest trainer's answer to a drawn segment, time on a loaded
machine."""


def sample_rate(plan: DemoPlan) -> float:
    """A step's batch over the windows of the smallest shard (an upper bound on the sample rate
    of any trainer, which holds at least one shard)."""
    corpus = cached_corpus(plan.shard_count, plan.vocab_size)
    windows = min(token_count(s, token_bytes=corpus.token_bytes) for s in corpus.shards) // plan.seq_len
    return min(1.0, plan.batch_size / max(1, windows))


def privacy_section(plan: DemoPlan, epsilon: float = TARGET_EPSILON) -> dict[str, Any]:
    return {
        "epsilon": epsilon,
        "delta": DELTA,
        "clip_norm": CLIP_NORM,
        "sample_rate": round(sample_rate(plan), 6),
        "accountant": "rdp",
    }


def epsilon_ledger(market: MarketClient, spec: TrainingTaskSpec, task_id: int) -> dict[str, Any]:
    """Per trainer address, the ε spent after each round (from the rounds it committed to), its
    final ε, and the plan: what the receipt records."""
    plan = PrivacyPlan.of(spec)
    trained: dict[str, list[bool]] = {}
    for round_ in range(spec.rounds):
        mask = market.round(task_id, round_).committed_mask
        for fragment in range(mask.bit_length()):
            if mask >> fragment & 1:
                who = market.submission(task_id, round_, fragment).trainer.lower()
                trained.setdefault(who, [False] * spec.rounds)[round_] = True
    ledger = plan.ledger(trained)
    return {
        "privacy": plan.to_mapping(),
        "epsilon_per_round": ledger,
        "epsilon_final": {who: eps[-1] if eps else 0.0 for who, eps in ledger.items()},
        "epsilon_target": plan.target.epsilon,
        "epsilon_unit": f"(epsilon, delta={plan.target.delta:g})-DP per trainer's shard examples, cumulative",
    }


def api_views(demo: TrainingDemo, task_id: int) -> dict[str, Any]:
    """What the demo's API serves for the run once its indexer has caught up with the seal."""
    import urllib.request

    server = demo._ui  # the demo's own server (TrainingDemo started it)
    if server is not None:
        server.wait_indexed(timeout_s=60.0)
    views: dict[str, Any] = {}
    for name in ("privacy", "receipt"):
        with urllib.request.urlopen(f"{demo.ui_url}/api/runs/{task_id}/{name}", timeout=30) as reply:
            views[name] = json.loads(reply.read())
    return views


def dispute_password(name: str, agent_dir: Path, account: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A witness's dispute keystore password (a fresh random one per agent: a devnet's, in its
    environment); the witness generates its key in its state dir on first use."""
    return {}, {DISPUTE_PASSWORD_ENV: secrets.token_hex(16)} if name.startswith("witness") else {}


class DpDemo:
    """Runs the scenario in ``workdir`` (``.syncline/demo/dp``)."""

    def __init__(
        self, workdir: Path, plan: DemoPlan = PLAN, epsilon: float = TARGET_EPSILON, *, ui_port: int | None = None
    ):
        self.workdir = workdir
        self.plan = plan
        self.epsilon = epsilon
        # Serve the sponsor API + UI while the run trains (0: any free port); once sealed, what it
        # reports for the run (``/privacy`` and ``/receipt``) is kept in ``api_views``.
        self.ui_port = ui_port
        self.api_views: dict[str, Any] = {}

    def publish(self, blobs: BlobStore, template: dict[str, Any]) -> PublishedTask:
        """The sponsor's step: the main demo's task with a ``privacy`` section."""
        return publish_language_task(
            blobs,
            template={**template, "name": TASK_NAME, "privacy": privacy_section(self.plan, self.epsilon)},
            shard_count=self.plan.shard_count,
            vocab_size=self.plan.vocab_size,
            seq_len=self.plan.seq_len,
            model=self.plan.model,
        )

    def run(self) -> TrainingReceipt:
        started = time.monotonic()
        demo = TrainingDemo(self.workdir, self.plan, ui_port=self.ui_port)
        demo.publish_task = self.publish
        demo.agent_setup = dispute_password
        accounted: dict[str, Any] = {}

        def account(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
            from syncline.blobstore import LocalBlobStore
            from syncline.run.context import TaskContext

            ctx = TaskContext.load(market, LocalBlobStore(self.workdir / "blobs"), task_id)
            accounted.update(epsilon_ledger(market, ctx.spec, task_id))
            accounted["rounds_opened"] = rounds_opened(ctx)
            accounted["trainer_names"] = {a: n for a, n in names.items() if n.startswith("trainer")}
            if demo.ui_url is not None:
                self.api_views = api_views(demo, task_id)

        demo.after_seal = account
        receipt = demo.run()
        extras = dict(receipt.extras)
        extras.update(scenario="dp", **accounted, wall_seconds=round(time.monotonic() - started, 1))
        return TrainingReceipt(**{**receipt.__dict__, "extras": extras})
