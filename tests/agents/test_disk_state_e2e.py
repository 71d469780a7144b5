"""A whole training run with the agents' state on disk, trained ahead: the large-model path of
issue 12 (item 6) with early close and train-ahead (item 5), on the tiny model so it runs in about
a minute.

``TrainingDemo`` with ``state_on_disk: true`` for every agent (the default only from 4M parameters
up): the witnesses compute each round in place on their state file, and the trainers derive the
next state in place on theirs from the complete round's payload files and train the next round
while the witnesses vote. The state each trainer derived must be the one the witnesses finalized
(else its work would be dropped), its file must hold exactly that state, and the roots must be
those of the in-memory computation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import wait_for
from syncline.protocol.checkpoints import checkpoint_steps
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.spot_checks import MIN_CHALLENGE_BLOCKS
from syncline.run.state_file import StateFile

from ._agent_harness import (
    ManualRun,
    RunRecord,
    capture_run,
    read_jsonl,
    replay_from_payloads,
    run_recorded,
    tiny_plan,
)

pytestmark = [pytest.mark.chain, pytest.mark.slow]

# Long rounds: early close, not the deadline, must end every round.
PLAN = tiny_plan(round_duration_s=30, state_on_disk=True)


@pytest.fixture(scope="module")
def finished_run(
    tmp_path_factory: pytest.TempPathFactory, agents_state_dir: Path
) -> tuple[TrainingReceipt, RunRecord, Path]:
    return run_recorded(tmp_path_factory.mktemp("disk-e2e"), agents_state_dir, PLAN)


def _field(line: str, key: str) -> str:
    """A ``key=value`` of a console log line (ANSI colours stripped)."""
    match = re.search(rf"\b{key}=([^\s\x1b]+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
    assert match, (key, line)
    return match.group(1)


def _trainer_dirs(workdir: Path) -> list[Path]:
    return [workdir / "agents" / f"trainer-{i + 1}" for i in range(PLAN.trainers)]


def test_every_round_closes_early_with_the_in_memory_roots(
    finished_run: tuple[TrainingReceipt, RunRecord, Path],
) -> None:
    """Every round finalized before its deadline, every submission accepted, and the chain's roots
    are those the in-memory round computation gives from the committed payloads."""
    receipt, record, workdir = finished_run
    assert receipt.status == TaskStatus.SEALED
    assert [r.status for r in record.rounds] == [RoundStatus.FINALIZED] * PLAN.rounds
    for r, rr in enumerate(record.rounds):
        assert rr.committed_mask == rr.accepted_mask == 0b111, r
        assert rr.closed_at <= rr.opened_at + PLAN.round_duration_s, f"round {r} waited for its deadline"
    replay = replay_from_payloads(record)
    assert ["0x" + x.state_root.hex() for x in replay] == [r.state_root for r in record.rounds]
    for i in range(PLAN.witnesses):
        witness = workdir / "agents" / f"witness-{i + 1}"
        assert list((witness / "states").glob("*.safetensors")), "the witness kept no state file"
        for line in read_jsonl(witness / "rounds.jsonl"):
            assert line["state_root"] == record.rounds[line["round"]].state_root


def test_trainers_train_ahead_from_the_state_they_derive_on_disk(
    finished_run: tuple[TrainingReceipt, RunRecord, Path],
) -> None:
    """Every round after the first was trained ahead, from a state file the trainer derived in
    place before the round was finalized, and committed: its root is the root the witnesses
    finalized (a different one drops the work)."""
    _, record, workdir = finished_run
    for trainer in _trainer_dirs(workdir):
        log = (workdir / "logs" / f"{trainer.name}.log").read_text()
        assert "trainer.ahead_dropped" not in log
        lines = read_jsonl(trainer / "rounds.jsonl")
        assert [line["round"] for line in lines] == list(range(PLAN.rounds))
        assert [line["trained_ahead"] for line in lines] == [False] + [True] * (PLAN.rounds - 1), trainer.name
        ahead = [line for line in log.splitlines() if "trainer.trained_ahead" in line]
        assert [_field(line, "round") for line in ahead] == [str(r) for r in range(1, PLAN.rounds)]
        assert [_field(line, "start_root") for line in ahead] == [
            record.rounds[r - 1].state_root[:18] for r in range(1, PLAN.rounds)
        ]


def test_a_trainer_holds_one_state_file_with_the_finalized_state(
    finished_run: tuple[TrainingReceipt, RunRecord, Path],
) -> None:
    """Disk use stays bounded: after the run a trainer holds exactly one state file (named by its
    root, nothing derived or dropped left over), and its bytes are the state the chain finalized
    for the last round's start; no payload file is left behind."""
    _, record, workdir = finished_run
    layout = record.ctx.layout
    for trainer in _trainer_dirs(workdir):
        files = sorted(p.name for p in (trainer / "states").iterdir())
        root = record.rounds[PLAN.rounds - 2].state_root
        assert files == [f"{root}.safetensors"], (trainer.name, files)
        held = StateFile.open(trainer / "states" / files[0], layout)
        assert held.state_root_hex == root  # recomputed from the file's bytes
        assert list((trainer / "payloads").iterdir()) == []


def test_checkpoints_and_payloads_are_kept_until_no_claim_can_name_their_round(
    finished_run: tuple[TrainingReceipt, RunRecord, Path],
) -> None:
    """The checkpoints streamed into the keeper (c_0, c_4, c_8 of each round) and the own payloads
    are dropped only once a claim can no longer name their round, on the chain's clock
    (early-closed rounds are far shorter than round_duration_s); the others are all there."""
    _, record, workdir = finished_run
    window = record.ctx.spec.challenge_window_s
    per_round = len(checkpoint_steps(PLAN.inner_steps, PLAN.checkpoint_interval))
    for trainer in _trainer_dirs(workdir):
        log = (workdir / "logs" / f"{trainer.name}.log").read_text()
        kept_from = 0
        for line in (x for x in log.splitlines() if "trainer.pruned" in x):
            kept_from, now = int(_field(line, "before_round")), int(_field(line, "chain_time"))
            block = int(_field(line, "block"))
            # seen closed (both past) at (T, B), then a whole window and half the blocks more
            least_block = MIN_CHALLENGE_BLOCKS + MIN_CHALLENGE_BLOCKS // 2
            for r in range(kept_from):
                rr = record.rounds[r]
                assert now > rr.closed_at + 2 * window and block > rr.closed_block + least_block, (r, now, block)
        kept = {int(p.name.split("-")[0]) for p in (trainer / "checkpoints").glob("*.ckpt")}
        assert kept == set(range(kept_from, PLAN.rounds)), (trainer.name, kept_from, kept)
        for r in range(kept_from, PLAN.rounds):
            assert len(list((trainer / "checkpoints").glob(f"{r}-*.ckpt"))) == per_round
            assert len(list((trainer / "outbox" / "own").glob(f"{r}-*.bin"))) == 1


def test_work_trained_ahead_on_disk_is_dropped_when_the_chain_finalizes_another_state(
    tmp_path: Path, state_env: Path
) -> None:
    """Round 0 is carried forward (two of the three witnesses are down, k = 2): the trainers had
    already derived round 1's start state in place on their state file and trained round 1 from it,
    but round 1 opens from the initial state. They drop that work and its state file, download the
    initial state and train round 1 again; the run then ends with the roots of the in-memory
    computation, and each trainer holds one state file."""
    plan = tiny_plan(round_duration_s=12, grace_window_s=8, state_on_disk=True)
    with ManualRun(tmp_path, plan) as run:
        m, task = run.market, run.task_id
        wait_for(lambda: m.task(task).status == TaskStatus.RUNNING, timeout_s=120, what="3 enrollments")
        for name in ("witness-2", "witness-3"):
            run.kill(name)
        wait_for(
            lambda: m.round(task, 0).status == RoundStatus.CARRIED_FORWARD,
            timeout_s=plan.round_duration_s + plan.grace_window_s + 60,
            what="round 0 carried forward by the one witness left",
            check=run.check_agents,
        )
        for name in ("witness-2", "witness-3"):
            run.restart(name)
        wait_for(
            lambda: m.task(task).status == TaskStatus.SEALED, timeout_s=240, what="the seal", check=run.check_agents
        )
        run.wait_agents_exit(timeout_s=60)
        record = capture_run(m, run.blobs, task, run.accounts)

    assert record.rounds[0].committed_mask == 0b111  # the trainers' work for round 0 was complete
    assert [r.status for r in record.rounds] == [RoundStatus.CARRIED_FORWARD] + [RoundStatus.FINALIZED] * 2
    state, roots = record.initial_state, []
    for r in (1, 2):
        result = record.ctx.compute_round(state, record.submissions[r])
        state = result.state
        roots.append("0x" + result.state_root.hex())
    assert roots == [record.rounds[1].state_root, record.rounds[2].state_root]
    for i in range(plan.trainers):
        trainer = tmp_path / "agents" / f"trainer-{i + 1}"
        log = (tmp_path / "logs" / f"trainer-{i + 1}.log").read_text()
        dropped = [line for line in log.splitlines() if "trainer.ahead_dropped" in line]
        assert [_field(line, "round") for line in dropped] == ["1"], trainer.name
        assert [_field(line, "trained_from") for line in dropped] != [record.rounds[0].state_root[:18]]
        lines = read_jsonl(trainer / "rounds.jsonl")
        assert [(line["round"], line["trained_ahead"]) for line in lines[:2]] == [(0, False), (1, False)]
        assert sorted(p.name for p in (trainer / "states").iterdir()) == [f"{record.rounds[1].state_root}.safetensors"]
        assert list((trainer / "payloads").iterdir()) == []
