"""An honest trainer busy in its inner loop answers a training claim within the response window.

A training claim (``challengeTraining``) must be answered (``answerTraining``) by the accused
within ``challengeWindow / 2`` seconds, or it convicts; the demo's window is 5 s, so 2 s of chain
time. A trainer spends most of a round inside its inner loop: while it trains the open round,
and while it trains the next round ahead. Before the fix it looked for claims only every 5 s while
training ahead, and never while training the open round: an honest trainer could be slashed for
being busy.

On anvil, with the real contract, chain client and ``TrainerAgent`` (one trainer, a 1-layer Llama
on synthetic tokens): round 0 is trained, committed and finalized by two witnesses; an outsider
files a real training claim against the trainer's round-0 submission from inside the trainer's
next inner loop (a test hook in the step function; each step is slowed to about 0.12 s, like a
larger model's, so the loop outlasts the response window by seconds). The claim must be answered
before the loop ends, and so within the window (the contract refuses a late answer), with the
trainer still training after it. Fails before the fix: not answered while training, both ways.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from web3 import Web3

from conftest import chain_snapshot_ctx
from syncline.blobstore import LocalBlobStore
from syncline.chain.devnet import set_next_timestamp
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.modality.language import LanguageAdapter
from syncline.protocol.enums import ChallengeStatus, RoundStatus, TaskStatus
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import AggregationRule, AggregationSpec, DatasetManifest, ModelArchitecture, Tier
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import config_from_mapping
from syncline.run.context import TaskContext
from syncline.trainer import agent as trainer_agent
from syncline.trainer.agent import TrainerAgent

H, INTERVAL, BATCH, SEQ = 30, 15, 4, 32
WINDOW_S = 600  # the contract's minimum challenge window; the claim is answered within seconds anyway
STEP_SLEEP_S = 0.12  # each inner step of the hooked round lasts about this long (a larger model's pace)
CLAIM_AT_STEP = 3
MODEL: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": SEQ,
    "tie_word_embeddings": True,
    "vocab_size": 256,
}


def _shard(seed: int, tokens: int = 3000) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, tokens).astype("<u2").tobytes()


@dataclass
class ClaimDuringTraining:
    """Wraps the agent's inner step: files the claim at step ``CLAIM_AT_STEP``, then watches it."""

    file_claim: Callable[[], int]
    answered: Callable[[int], bool]
    step: Callable[..., Any]
    calls: int = 0
    claim: int | None = None
    filed_at: float = 0.0
    answered_after_s: float | None = None
    steps_after_answer: int = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == CLAIM_AT_STEP:
            self.claim = self.file_claim()
            self.filed_at = time.perf_counter()
        elif self.claim is not None and self.answered_after_s is None and self.calls % 3 == 0:
            if self.answered(self.claim):
                self.answered_after_s = time.perf_counter() - self.filed_at
        elif self.answered_after_s is not None:
            self.steps_after_answer += 1  # the loop went on training after the answer
        time.sleep(STEP_SLEEP_S)
        return self.step(*args, **kwargs)


@pytest.mark.chain
@pytest.mark.parametrize("train_ahead", [True, False], ids=["training-ahead", "training-the-open-round"])
def test_a_trainer_in_its_inner_loop_answers_a_claim_within_the_window(
    tmp_path: Path,
    w3: Web3,
    session_market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Any,
    train_ahead: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a round trained ahead waits this long for the chain to open it (the witnesses finalize only
    # when the test says so): shortened, the waits are not what is tested
    monkeypatch.setattr(trainer_agent, "FAST_WAIT_S", 1.0)
    market = session_market
    store = LocalBlobStore(tmp_path / "blobs", fsync=False)
    adapter = LanguageAdapter(seq_len=SEQ)
    net = adapter.build_model({"family": "llama", **MODEL}, seed=0)
    layout = ParameterLayout.from_state_dict(dict(net.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(net.named_parameters()), layout)
    store.put(start.to_bytes(), alias=start.state_root_hex)
    shards = [store.put(_shard(i)) for i in range(2)]
    tokenizer = store.put(b"{}")  # TaskContext only pins it; this task never tokenizes text
    with chain_snapshot_ctx(w3):
        spec = spec_factory(
            model=ModelArchitecture(family="llama", config=MODEL),
            dataset=DatasetManifest(
                shard_hashes=tuple(r.digest for r in shards), shard_uris=tuple(r.uri for r in shards)
            ),
            tier=Tier.OPEN,
            aggregation=AggregationSpec(rule=AggregationRule.MEAN),
            inner_steps=H,
            checkpoint_interval=INTERVAL,
            param_count=layout.numel,
            initial_state_root=start.state_root_hex,
            min_trainers=1,
            max_trainers=1,
            round_duration_s=600,
            challenge_window_s=WINDOW_S,
            metadata={"tokenizer": {"digest": tokenizer.digest, "uri": tokenizer.uri}, "seq_len": SEQ},
        )
        task_id, _ = market.post_task(sponsor, spec, store.put(spec.canonical_bytes()).uri)
        cfg = config_from_mapping(
            {
                "node_rpc": "http://127.0.0.1:1",
                "task_id": task_id,
                "deployment": str(tmp_path / "deployment.json"),
                "blob_store": str(tmp_path / "blobs"),
                "state_dir": str(tmp_path / "trainer"),
                "inner": {"lr": 3e-3, "inner_steps": H, "batch_size": BATCH},
                "train_ahead": train_ahead,
            }
        )
        agent = TrainerAgent(cfg=cfg, signer=trainers[0], market=market, blobs=store)
        agent.step()  # enroll: the run starts
        assert market.task(task_id).status == TaskStatus.RUNNING
        agent.step()  # train round 0 and commit (and, training ahead, train round 1 too)
        agent._reveal()  # its commit closed round 0's commit phase (one trainer): reveal (§10.6)
        ctx = TaskContext.load(market, store, task_id)
        result = ctx.compute_round(start, ctx.committed_submissions(0))
        assert result.accepted_mask == 0b1
        ctx.publish_state(result.state)
        set_next_timestamp(w3, market.round_deadline(task_id) + 1)
        for witness in witnesses[: spec.threshold]:
            market.ensure_witness_bonded(witness, task_id)
            market.finalize_round(witness, task_id, 0, result.state_root, result.aggregate_root, result.accepted_mask)
        assert market.round(task_id, 0).status == RoundStatus.FINALIZED
        fragment = market.trainer(task_id, trainers[0].address).fragment

        inner = agent.inner
        assert inner is not None
        hook = ClaimDuringTraining(
            file_claim=lambda: market.challenge_training(outsider, task_id, 0, fragment, 1),
            answered=lambda claim: market.availability_demand(claim).answered,
            step=inner._step,
        )
        inner._step = hook  # type: ignore[method-assign]
        torch.manual_seed(0)
        agent.step()  # round 1: commit the work trained ahead and train round 2 ahead, or train round 1
        assert hook.calls >= H and hook.claim is not None, (hook.calls, hook.claim)
        demand = market.availability_demand(hook.claim)
        assert hook.answered_after_s is not None, "the claim was not answered while the trainer trained"
        assert demand.answered and hook.steps_after_answer > 0
        c = market.challenge(hook.claim)
        assert c.status == ChallengeStatus.OPEN  # not convicted: the referees judge it on its merits
