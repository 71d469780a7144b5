"""Issue 27 item 5: windows that honest parties can meet. Before, a challenge window of 0, 1 or
5 s was accepted and an honest trainer paused 4 s (SIGSTOP/SIGCONT, as a GC pause or a slow disk
would) was convicted unanswered and lost its stake to an outsider's claim. Now the chain refuses a
challenge window under 600 s, and an honest trainer paused for 10 % of the response window while
a claim is filed against it answers, is acquitted and keeps its stake; the claimant loses only the
referees' cost.

The run keeps the contract's minimum challenge window on the devnet's fast clock at 10 times the
wall's, so the pause is 3 s of wall time (30 s of the 300 s response window)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import wait_for
from syncline.chain.keys import from_private_key
from syncline.protocol.enums import ChallengeStatus, RoundStatus, TaskStatus

from ._agent_harness import ManualRun, tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

SPEED = 10.0
PLAN = tiny_plan(clock_speed=SPEED, round_duration_s=20, grace_window_s=60, timeout_s=300.0, rounds=2)
PAUSED = "trainer-1"


def test_an_honest_trainer_paused_for_a_tenth_of_the_response_window_keeps_its_stake(
    tmp_path: Path, state_env: Path
) -> None:
    assert PLAN.challenge_window_s == 600  # the contract's minimum: a 300 s response window
    response_s = PLAN.challenge_window_s // 2
    pause_wall_s = response_s / 10 / SPEED
    with ManualRun(tmp_path, PLAN) as run:
        m, task = run.market, run.task_id
        claimant = from_private_key(run.devnet.private_keys()[7])
        wait_for(lambda: m.task(task).status == TaskStatus.RUNNING, timeout_s=120, what="3 enrollments")
        wait_for(
            lambda: m.round(task, 0).status == RoundStatus.FINALIZED,
            timeout_s=120,
            what="round 0 to finalize",
            check=run.check_agents,
        )
        fragment = m.trainer(task, run.address(PAUSED)).fragment
        agent = run.current(PAUSED)

        # -------------------------------------------------- the pause, and a claim filed inside it
        os.kill(agent.process.pid, signal.SIGSTOP)
        try:
            paused_at = run.now()
            claim = m.challenge_training(claimant, task, 0, fragment, 0)
            time.sleep(pause_wall_s)
            paused_for = run.now() - paused_at
        finally:
            os.kill(agent.process.pid, signal.SIGCONT)
        assert paused_for >= response_s / 10 - 5, paused_for  # about 30 s of chain time

        # answered in the response window, or already acquitted on checkpoints the trainer published
        # for the committee's draw (the referees need no answer to replay)
        wait_for(
            lambda: m.availability_demand(claim).answered or m.challenge(claim).status != ChallengeStatus.OPEN,
            timeout_s=response_s / SPEED,
            what="the paused trainer's answer",
            check=run.check_agents,
        )
        wait_for(
            lambda: m.challenge(claim).status != ChallengeStatus.OPEN,
            timeout_s=120,
            what="the referees' verdict",
            check=run.check_agents,
        )
        assert m.challenge(claim).status == ChallengeStatus.REJECTED  # acquitted on its merits
        wait_for(
            lambda: m.task(task).status == TaskStatus.SEALED, timeout_s=240, what="the seal", check=run.check_agents
        )
        run.wait_agents_exit(timeout_s=60)

        for event in ("StakeSlashed", "TrainerEvicted"):
            assert m.get_logs(event, taskId=task) == [], event
        paused = m.trainer(task, run.address(PAUSED))
        assert paused.slashed_wei == 0 and not paused.evicted
        # the claimant paid at most the referees' cost: half its bond
        bond = PLAN.challenge_bond_wei
        refunded = sum(
            int(e["args"]["amount"])
            for e in m.get_logs("Credited", taskId=task)
            if str(e["args"]["account"]).lower() == claimant.address.lower()
        )
        assert bond // 2 <= refunded < bond, (refunded, bond)
