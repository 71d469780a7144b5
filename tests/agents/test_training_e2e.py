"""A whole training run on a real anvil with real agent processes, shrunk to about a minute.

``TrainingDemo`` (the code ``syncline demo`` runs) with a tiny plan: 3 trainers and 3 witnesses
(k=2) as subprocesses, 3 rounds of H=8 AdamW steps on a 1-layer Llama with 26.7k parameters.
Every number the chain recorded is then re-derived in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from eth_utils import keccak

from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.protocol.quantization import QuantizedGradient
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.spot_checks import checkpoints_for_segment
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import load_agent_config
from syncline.trainer.inner_loop import replay_environment

from ._agent_harness import (
    RunRecord,
    read_jsonl,
    replay_from_payloads,
    run_recorded,
    simulate_trainers,
    tiny_plan,
)

pytestmark = [pytest.mark.chain, pytest.mark.slow]

# 8 s rounds: a trainer commits ~1 s after a round opens and witnesses vote ~1 s after its deadline.
# Rounds long enough that even a loaded machine commits well before the deadline: early close,
# not the deadline, must end every round (test_rounds_close_when_the_work_is_in).
PLAN = tiny_plan(round_duration_s=30)
# Validation loss (witness metric, 8 x 16 windows of the held-out shard) is 5.760 after round 0
# and 5.226 after round 2 (ln 512 = 6.24 at init), identical on every run: training is bit-exact
# on CPU. The 0.3 margin (observed 0.53) absorbs other torch/BLAS builds, not run-to-run noise.
LOSS_MARGIN = 0.3


@pytest.fixture(scope="module")
def finished_run(
    tmp_path_factory: pytest.TempPathFactory, agents_state_dir: Path
) -> tuple[TrainingReceipt, RunRecord, Path]:
    return run_recorded(tmp_path_factory.mktemp("e2e"), agents_state_dir, PLAN)


def test_every_round_finalized_and_sealed(finished_run: tuple[TrainingReceipt, RunRecord, Path]) -> None:
    receipt, record, _ = finished_run
    assert receipt.status == TaskStatus.SEALED
    assert receipt.rounds_total == PLAN.rounds
    assert receipt.rounds_finalized == PLAN.rounds and receipt.rounds_carried_forward == 0
    assert [r.status for r in record.rounds] == [RoundStatus.FINALIZED] * PLAN.rounds
    assert all(r.vote_count >= PLAN.threshold for r in record.rounds)
    assert all(r.committed_mask == 0b111 and r.accepted_mask == 0b111 for r in record.rounds)
    assert receipt.final_state_root == record.rounds[-1].state_root == record.task.state_root
    for line in receipt.trainers:
        assert (line.submitted, line.accepted, line.missed, line.evicted) == (PLAN.rounds, PLAN.rounds, 0, False)


def test_rounds_close_when_the_work_is_in(finished_run: tuple[TrainingReceipt, RunRecord, Path]) -> None:
    """Early close: every trainer committed in every round, so the witnesses finalized each round
    before its deadline (the contract refuses that otherwise); the trainers trained the next round
    from the state the payloads determine, and never had to drop that work."""
    _, record, workdir = finished_run
    for r, rr in enumerate(record.rounds):
        assert rr.committed_mask == 0b111
        assert rr.closed_at <= rr.opened_at + PLAN.round_duration_s, f"round {r} waited for its deadline"
    for i in range(PLAN.trainers):
        log = (workdir / "logs" / f"trainer-{i + 1}.log").read_text()
        assert "trainer.ahead_dropped" not in log


def test_state_roots_agree_across_chain_witnesses_and_replay(
    finished_run: tuple[TrainingReceipt, RunRecord, Path],
) -> None:
    """Chain == every witness's rounds.jsonl == compute_round redone here from the committed payloads."""
    _, record, workdir = finished_run
    chain = [(r.state_root, r.aggregate_root, r.accepted_mask) for r in record.rounds]

    replay = replay_from_payloads(record)
    assert [("0x" + x.state_root.hex(), "0x" + x.aggregate_root.hex(), x.accepted_mask) for x in replay] == chain
    assert all(not x.rejected for x in replay)
    assert replay[0].state_root != record.initial_state.state_root()  # training moved the weights

    recorded_by_round: dict[int, int] = {}
    for i in range(PLAN.witnesses):
        for line in read_jsonl(workdir / "agents" / f"witness-{i + 1}" / "rounds.jsonl"):
            r = line["round"]
            assert (line["state_root"], line["aggregate_root"], line["accepted_mask"]) == chain[r], (i, r)
            assert line["rejected"] == {}
            recorded_by_round[r] = recorded_by_round.get(r, 0) + 1
    assert all(recorded_by_round.get(r, 0) >= PLAN.threshold for r in range(PLAN.rounds)), recorded_by_round

    # The votes that finalized each round carried that very state root.
    for r, rr in enumerate(record.rounds):
        matching = [v for v in record.votes if v.round == r and v.result == rr.result]
        assert len(matching) == rr.vote_count >= PLAN.threshold
        assert {v.state_root for v in matching} == {rr.state_root}


def test_trainers_are_deterministic_across_processes(finished_run: tuple[TrainingReceipt, RunRecord, Path]) -> None:
    """Every committed gradient is bit-identical to the same training redone in this process.

    Compared byte for byte (the payload encoding is canonical, see test_payload_encoding.py), as
    the committed payload hash and as the committed chunk root."""
    _, record, workdir = finished_run
    inner = load_agent_config(workdir / "agents" / "trainer-1" / "trainer.yaml").inner
    sim = simulate_trainers(record, inner)
    for r, subs in record.submissions.items():
        for sub in subs:
            where, ours = (r, sub.fragment), sim.payloads[(r, sub.fragment)]
            assert sub.payload == ours and sub.payload_hash == keccak(ours), where
            assert sub.chunk_root == gradient_chunk_root(QuantizedGradient.from_safetensors_bytes(ours)), where
    assert ["0x" + x.state_root.hex() for x in sim.results] == [r.state_root for r in record.rounds]


def test_checkpoints_stay_with_the_trainer_unless_the_committee_draws_them(
    finished_run: tuple[TrainingReceipt, RunRecord, Path],
) -> None:
    """Checkpoints on demand (the demo's setting): each commitment uploads its manifest only; a
    checkpoint is in the blob store iff some drawn segment needs it (checkpoint 0 of round 0 is the
    same bytes for every trainer), and each trainer's ``checkpoint_bytes_sent`` is its manifests
    plus what its own draws made it publish."""
    _, record, workdir = finished_run
    assert PLAN.checkpoints == "on-demand" and record.ctx.spec.verification_policy.on_demand
    segments = record.ctx.spec.checkpoint_segments
    assert set(record.manifests) == set(record.committers)
    needed: dict[str, int] = {}
    for key, segment in record.draws.items():
        if segment is not None:
            for i in checkpoints_for_segment(segment, segments):
                needed[record.manifests[key].digest(i)] = 1
    assert record.published == {d: d in needed for d in record.published}, (record.draws, record.published)
    reports = [json.loads(p.read_text()) for p in sorted((workdir / "agents").glob("trainer-*/throughput.json"))]
    assert len(reports) == len(record.fragment_of)
    for sent in reports:
        fragment = next(f for a, f in record.fragment_of.items() if a.lower() == sent["trainer"].lower())
        own = {k: v for k, v in record.manifests.items() if k[1] == fragment}
        published = 0
        for key, manifest in own.items():
            segment = record.draws[key]
            if segment is not None:
                published += sum(
                    record.published_bytes[manifest.digest(i)] for i in checkpoints_for_segment(segment, segments)
                )
        manifests = sum(2 * len(m.to_json()) for m in own.values())
        assert sent["checkpoints"] == "on-demand"
        assert sent["checkpoint_bytes_sent"] == manifests + published, (sent, manifests, published)


def test_validation_loss_decreases(finished_run: tuple[TrainingReceipt, RunRecord, Path]) -> None:
    receipt, record, _ = finished_run
    losses = receipt.extras["validation_loss_per_round"]
    assert len(losses) == PLAN.rounds
    assert losses[-1] < losses[0] - LOSS_MARGIN, losses
    # The metric the witnesses voted with is the loss of the finalized state (recomputed here).
    ctx = record.ctx
    final = replay_from_payloads(record)[-1].state
    with replay_environment(1):
        loss = ctx.adapter.evaluate(ctx.build_model(final), ctx.validation_shard(), batch_size=16, max_batches=8)
    assert loss == pytest.approx(losses[-1], abs=1e-5)


def test_everyone_paid_and_escrow_empty(finished_run: tuple[TrainingReceipt, RunRecord, Path]) -> None:
    receipt, record, _ = finished_run
    assert record.escrow == 0
    assert all(v == 0 for v in record.credits.values()), record.credits
    # Each trainer withdrew its stake plus its reward; each witness withdrew exactly its fees plus
    # its bond (each witness agent bonded itself before voting; nobody was slashed).
    for line in receipt.trainers:
        assert line.stake_refund_wei > 0 and line.reward_wei > 0
        assert record.withdrawn.get(line.trainer) == [line.stake_refund_wei + line.reward_wei]
    bond = record.ctx.spec.witness_bond_wei
    assert bond > 0
    for w in receipt.witnesses:
        view = record.witness_views[w.witness]
        assert (view.bonded, view.bond_wei, view.slashed_wei) == (True, 0, 0)  # bonded, refunded at seal
        assert record.withdrawn.get(w.witness, []) == [w.fees_wei + bond]
    assert sum(w.matched for w in receipt.witnesses) == PLAN.threshold * PLAN.rounds
    refund = receipt.sponsor_refund_wei  # 0 here: every round finalized, so the pool and fee budget were spent
    assert record.withdrawn.get(record.task.sponsor, []) == ([refund] if refund else [])
    # Every wei of the escrow went somewhere: rewards + witness fees + the sponsor's refund.
    paid = sum(t.reward_wei for t in receipt.trainers) + sum(w.fees_wei for w in receipt.witnesses)
    assert paid + receipt.sponsor_refund_wei == record.ctx.spec.escrow_wei


def test_exported_model_loads_and_generates(finished_run: tuple[TrainingReceipt, RunRecord, Path]) -> None:
    from transformers import AutoModelForCausalLM

    receipt, record, _ = finished_run
    model_dir = Path(receipt.extras["model_dir"])
    meta = json.loads((model_dir / "syncline.json").read_text())
    assert meta["state_root"] == receipt.final_state_root
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    final: TrainingState = replay_from_payloads(record)[-1].state
    params = dict(model.named_parameters())
    for name, tensor in final.to_state_dict().items():
        assert torch.equal(params[name].detach(), tensor), name
    sample = receipt.extras["sample_text"]
    assert isinstance(sample, str) and sample.startswith("ROMEO:") and len(sample.strip()) > len("ROMEO:")
