"""kill -9 and restart: a trainer killed while it trains the next round ahead (the previous
round's work is complete, the witnesses are about to finalize it) and a witness killed before it
votes on that next round come back with the same config and state_dir, and the run ends with
exactly the state roots of an uninterrupted run.

The uninterrupted reference is the same task (same spec, task id, shard assignment) trained in
this process without any restart (``simulate_trainers``): CPU training is bit-exact given the
seeds (batches are seeded by (task, round, fragment)), so any divergence in how the restarted
trainer resumes (AdamW state, the state it starts the round from) changes the roots.

k = 3 of 3 witnesses here, so the round in which the witness is killed cannot finalize without
the restarted witness's own vote: its recomputation after the restart is on the critical path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import wait_for
from syncline.chain.calls import ZERO_ADDRESS
from syncline.chain.keys import from_private_key
from syncline.chain.market import SubmissionView
from syncline.court.referee import ZERO32
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.protocol.quantization import QuantizedGradient, quantize
from syncline.protocol.seeds import round_seed
from syncline.run.agent_config import load_agent_config
from syncline.run.context import TaskContext
from syncline.run.gossip import decode_vote
from syncline.trainer.inner_loop import InnerLoop, replay_environment
from syncline.witness.agent import VOTES_FILE, WitnessAgent

from ._agent_harness import (
    ManualRun,
    capture_run,
    read_jsonl,
    simulate_trainers,
    tiny_plan,
)

pytestmark = [pytest.mark.chain, pytest.mark.slow]

# 16 s rounds: the killed trainer must come back inside the round it was killed in (python +
# torch/transformers imports ~4-8 s, task context, full state download, 8 steps, commit).
# The grace window (after which a stuck round is carried forward) must outlast a witness restart.
PLAN = tiny_plan(round_duration_s=16, grace_window_s=60, threshold=3)
TRAINER, WITNESS = "trainer-2", "witness-2"
KILL_ROUND = 1  # not 0: the trainer must have AdamW state on disk to resume from


def test_sigkilled_trainer_and_witness_resume_to_the_reference_roots(tmp_path: Path, state_env: Path) -> None:
    with ManualRun(tmp_path, PLAN) as run:
        m, task = run.market, run.task_id
        rounds = PLAN.rounds

        wait_for(
            lambda: m.task(task).status == TaskStatus.RUNNING,
            timeout_s=120,
            what="3 enrollments",
            check=run.check_agents,
        )
        victim = run.address(TRAINER)
        fragment = m.trainer(task, victim).fragment

        # -------------------------------------------------- trainer: SIGKILL once round 0's work is complete
        # (it is deriving round 1's start state or training round 1 ahead, before round 0 finalizes)
        wait_for(
            lambda: m.round(task, KILL_ROUND - 1).committed_mask == 0b111,
            timeout_s=PLAN.round_duration_s + 60,
            what=f"round {KILL_ROUND - 1}'s work to be complete",
            check=run.check_agents,
        )
        run.kill(TRAINER)
        assert m.submission(task, KILL_ROUND, fragment).trainer == ZERO_ADDRESS, "killed too late: already committed"
        assert (tmp_path / "agents" / TRAINER / "optimizer" / f"before-round-{KILL_ROUND}.pt").is_file()
        run.restart(TRAINER)

        # -------------------------------------------------- witness: SIGKILL before it can vote on round 1
        # (round 1 cannot be complete before the restarted trainer commits: the witness waits)
        run.kill(WITNESS)
        witness = run.address(WITNESS)
        assert m.vote_of(task, KILL_ROUND, witness) == ZERO32, "killed too late: already voted"
        run.restart(WITNESS)

        wait_for(
            lambda: m.task(task).current_round == KILL_ROUND,
            timeout_s=PLAN.round_duration_s + 60,
            what=f"round {KILL_ROUND} to open",
            check=run.check_agents,
        )
        deadline = run.deadline()

        def committed_sub() -> SubmissionView | None:
            s = m.submission(task, KILL_ROUND, fragment)
            return s if s.trainer != ZERO_ADDRESS else None

        sub = wait_for(
            committed_sub,
            timeout_s=PLAN.round_duration_s + 10,
            what="the restarted trainer's commit",
            check=run.check_agents,
        )
        assert sub.trainer == victim and sub.committed_at <= deadline
        wait_for(
            lambda: m.round(task, KILL_ROUND).status == RoundStatus.FINALIZED,
            timeout_s=PLAN.grace_window_s,
            what=f"round {KILL_ROUND} to finalize with the restarted witness's vote",
            check=run.check_agents,
        )
        assert m.vote_of(task, KILL_ROUND, witness) == m.round(task, KILL_ROUND).result

        wait_for(
            lambda: m.task(task).status == TaskStatus.SEALED, timeout_s=120, what="the seal", check=run.check_agents
        )
        run.wait_agents_exit(timeout_s=60)  # every agent claimed and exited 0, restarted ones included
        record = capture_run(m, run.blobs, task, run.accounts)

        # -------------------------------------------------- the run completed like an uninterrupted one
        assert [r.status for r in record.rounds] == [RoundStatus.FINALIZED] * rounds
        assert all(r.committed_mask == 0b111 and r.accepted_mask == 0b111 for r in record.rounds)
        assert all(record.committers[(r, fragment)] == victim for r in range(rounds))
        assert record.escrow == 0
        assert all(record.credits[a] == 0 for a in [*record.trainers, *record.witnesses])  # everyone claimed

        # The trainer's inner optimizer with the task's H (the trainer reads H from the spec).
        inner = dataclasses.replace(
            load_agent_config(run.config_path(TRAINER)).inner, inner_steps=record.ctx.spec.inner_steps
        )
        reference = simulate_trainers(record, inner)
        assert [r.state_root for r in record.rounds] == ["0x" + x.state_root.hex() for x in reference.results]
        assert [r.aggregate_root for r in record.rounds] == ["0x" + x.aggregate_root.hex() for x in reference.results]

        # -------------------------------------------------- the trainer resumed its optimizer state
        first_log = run.incarnations[TRAINER][0].log_path.read_text()
        second_log = run.incarnations[TRAINER][1].log_path.read_text()
        assert "trainer.resumed" not in first_log  # nothing on disk at its first start
        assert "trainer.resumed" in second_log and "round=1" in second_log
        saved_path = tmp_path / "agents" / TRAINER / "optimizer" / f"before-round-{rounds}.pt"
        saved = torch.load(saved_path, weights_only=True)["optimizer"]
        expected = reference.loops[fragment].optimizer.state_dict()
        assert saved["state"].keys() == expected["state"].keys()
        for index, slots in expected["state"].items():
            for slot, value in slots.items():
                assert torch.equal(saved["state"][index][slot], value), (index, slot)
        # ... and it mattered: a fresh AdamW in round 1 would have committed another gradient.
        ctx = record.ctx
        with replay_environment(1):
            fresh = InnerLoop(ctx.adapter, ctx.build_model(), ctx.layout, inner)
            shards = [ctx.shard(i) for i in record.fragment_shards[fragment]]
            work = fresh.run(reference.results[0].state, shards, seed=round_seed(task, KILL_ROUND, fragment))
        (committed,) = [s for s in record.submissions[KILL_ROUND] if s.fragment == fragment]
        assert quantize(work.pseudo_gradient, ctx.spec.gradient_bits) != QuantizedGradient.from_safetensors_bytes(
            committed.payload or b""
        )

        # -------------------------------------------------- the restarted witness
        chain = {r: (rr.state_root, rr.aggregate_root, rr.accepted_mask) for r, rr in enumerate(record.rounds)}
        assert "witness.voted" in run.incarnations[WITNESS][1].log_path.read_text()
        lines = read_jsonl(tmp_path / "agents" / WITNESS / "rounds.jsonl")
        assert {line["round"] for line in lines} >= {KILL_ROUND, rounds - 1}
        for line in lines:
            assert (line["state_root"], line["aggregate_root"], line["accepted_mask"]) == chain[line["round"]]

        # Re-vote every round with the restarted witness's agent code, key, config and state_dir: it
        # re-sends the very votes it signed (its local store), never a new signature, and finalize
        # is a no-op on chain (idempotent).
        cfg = load_agent_config(run.config_path(WITNESS))
        signer = from_private_key(run.keys[WITNESS])
        before = ([m.round(task, r) for r in range(rounds)], m.task(task), m.witness(task, witness), len(record.votes))
        n_lines = len(lines)
        cast = {
            int(e["args"]["round"]): bytes(e["args"]["signature"])
            for e in m.get_logs("VoteCast", from_block=0, taskId=task, witness=witness)
        }
        for state_dir, recompute in ((cfg.state_dir, False), (tmp_path / "fresh-witness-state", True)):
            agent = WitnessAgent(replace(cfg, state_dir=state_dir), signer, m, run.blobs)
            agent.ctx = TaskContext.load(m, run.blobs, task)
            sent: list[tuple[str, object]] = []
            agent._send = lambda what, call, sent=sent: sent.append((what, call()))  # type: ignore[assignment,method-assign,misc,operator]
            with replay_environment(1):
                for r in range(rounds):
                    previous = record.initial_state.state_root_hex if r == 0 else record.rounds[r - 1].state_root
                    agent._vote(r, previous)
            votes_now = len(m.get_logs("VoteCast", from_block=0, taskId=task))
            assert (
                [m.round(task, r) for r in range(rounds)],
                m.task(task),
                m.witness(task, witness),
                votes_now,
            ) == before
            assert [what for what, _ in sent] == ["finalize"] * rounds
            for _, receipt in sent:
                assert receipt["status"] == 1  # type: ignore[index]
                assert not m.events(receipt, "VoteCast") and not m.events(receipt, "RoundFinalized")  # type: ignore[arg-type]
            stored = read_jsonl(Path(state_dir) / VOTES_FILE)
            signed = {int(x["round"]): decode_vote(str(x["vote"]).encode(), m.domain()) for x in stored}
            assert all(v.signer == witness for v in signed.values())
            if not recompute:
                assert not read_jsonl(tmp_path / "agents" / WITNESS / "rounds.jsonl")[n_lines:], "recomputed"
                assert {r: v.signature for r, v in signed.items() if r in cast} == cast, "a new signature"
                continue
            # Without its store the witness recomputes: the same results, bit for bit.
            revoted = read_jsonl(Path(state_dir) / "rounds.jsonl")
            assert [(x["state_root"], x["aggregate_root"], x["accepted_mask"]) for x in revoted] == [
                chain[r] for r in range(rounds)
            ]
