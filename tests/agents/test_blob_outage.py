"""A blob-service outage mid-run: the service is SIGKILLed while a round's votes are due and
restarted well after the old circuit breaker (20 failures at 0.5 s, about 10 s) would have stopped
the witnesses. Nobody is accused, nobody honest loses a wei, every agent rides it out, the run
completes and pays what an uninterrupted run pays.

Timeline (tiny plan, 3 trainers, 3 witnesses, k = 2, 10 s rounds): once round 1's three
submissions are committed and round 0's challenge window is over (so no audit is in flight), the
blob service is killed before round 1's deadline. The witnesses can then neither fetch the
previous state nor the payloads, so they cannot vote; the trainers wait for round 2 to open. The
service comes back on the same port and the same store ``OUTAGE_AFTER_DEADLINE_S`` after the
deadline; the witnesses' next retry (capped exponential backoff) votes, and the run goes on.
The grace window (after which a stuck round is carried forward) outlasts the outage plus the
longest backoff step it can leave pending.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from conftest import wait_for
from syncline.protocol.enums import RoundStatus, TaskStatus
from syncline.run.context import TaskContext

from ._agent_harness import ManualRun, tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

# The old breaker stopped a witness after 20 consecutive failures 0.5 s apart (~10 s): the
# outage lasts 16 s past the deadline, so a witness that quits would be gone before it ends.
OUTAGE_AFTER_DEADLINE_S = 16
OLD_BREAKER_FAILURES, POLL_S = 20, 0.5
# The witnesses wait for the round deadline (no early close), so the outage can begin after a
# round's three commits and before anyone fetched them.
# 20 s rounds (wall): the previous round's challenge window (the contract's minimum, 10 s of wall
# time on the tests' clock) ends well before the outage round's deadline.
PLAN = tiny_plan(round_duration_s=20, grace_window_s=75, timeout_s=300.0, witness_vote_early=False)
OUTAGE_ROUND = 1


class BlobServiceProcess:
    """``python -m syncline.blobstore`` as a separate process that can be SIGKILLed and restarted
    on the same port over the same store (what an operator or a supervisor does)."""

    def __init__(self, root: Path, log_dir: Path):
        self.root = root
        self.log_dir = log_dir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> str:
        self.starts += 1
        out = self.log_dir / f"blobstore.{self.starts}.out"
        cmd = [sys.executable, "-m", "syncline.blobstore", "--root", str(self.root), "--port", str(self.port)]
        with out.open("wb") as fh, (self.log_dir / f"blobstore.{self.starts}.log").open("wb") as err:
            self.process = subprocess.Popen(cmd, stdout=fh, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lines = out.read_text().splitlines()
            if lines:
                url = str(json.loads(lines[0])["url"])
                self.port = int(url.rsplit(":", 1)[1])
                return url
            assert self.process.poll() is None, f"the blob service exited with {self.process.returncode}"
            time.sleep(0.05)
        raise AssertionError("the blob service did not start within 30 s")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class OutageRun(ManualRun):
    """``ManualRun`` whose blob service is a process of its own."""

    def _start_blob_service(self) -> str:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.blob_process = BlobServiceProcess(self.workdir / "blobs", self.workdir / "logs")
        self._stack.callback(self.blob_process.stop)
        return self.blob_process.start()


def _summed(events: list[Any], key: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for e in events:
        out[str(e["args"][key]).lower()] += int(e["args"]["amount"])
    return dict(out)


def test_blob_service_outage_mid_run_is_ridden_out(tmp_path: Path, state_env: Path) -> None:
    with OutageRun(tmp_path, PLAN) as run:
        m, task = run.market, run.task_id
        wait_for(
            lambda: m.task(task).status == TaskStatus.RUNNING,
            timeout_s=120,
            what="3 enrollments",
            check=run.check_agents,
        )
        wait_for(
            lambda: m.task(task).current_round == OUTAGE_ROUND,
            timeout_s=PLAN.round_duration_s + 60,
            what=f"round {OUTAGE_ROUND} to open",
            check=run.check_agents,
        )
        audits_over = m.round(task, OUTAGE_ROUND - 1).closed_at + PLAN.challenge_window_s + 1
        wait_for(
            lambda: m.round(task, OUTAGE_ROUND).committed_mask == 0b111 and run.now() >= audits_over,
            timeout_s=PLAN.round_duration_s,
            what=f"round {OUTAGE_ROUND}'s three commits",
            check=run.check_agents,
        )
        deadline = run.deadline()
        assert run.now() < deadline, "too late: the witnesses may already have fetched the payloads"

        # -------------------------------------------------- the outage
        run.blob_process.kill()
        back_at = deadline + int(OUTAGE_AFTER_DEADLINE_S * PLAN.clock_speed)  # 16 s of wall time
        assert back_at - deadline >= OLD_BREAKER_FAILURES * POLL_S + 5
        wait_for(lambda: run.now() >= back_at, timeout_s=PLAN.round_duration_s + 30, what="the end of the outage")
        assert m.round(task, OUTAGE_ROUND).status == RoundStatus.PENDING, "a round closed without its payloads"
        crashed = {a.name: a.process.poll() for a in run.demo.agents if a.process.poll() is not None}
        assert crashed == {}, f"agents quit during the outage: {crashed}"
        assert run.blob_process.start() == run.blob_url  # same port, same store

        # -------------------------------------------------- the run goes on and completes
        wait_for(
            lambda: m.round(task, OUTAGE_ROUND).status == RoundStatus.FINALIZED,
            timeout_s=PLAN.grace_window_s,
            what=f"round {OUTAGE_ROUND} to finalize after the outage",
            check=run.check_agents,
        )
        wait_for(
            lambda: m.task(task).status == TaskStatus.SEALED, timeout_s=120, what="the seal", check=run.check_agents
        )
        run.wait_agents_exit(timeout_s=60)  # every agent claimed and exited 0

        # -------------------------------------------------- nobody accused, nobody honest lost a wei
        for event in ("ChallengeOpened", "StakeSlashed", "WitnessSlashed", "RoundMissed", "TrainerEvicted"):
            assert m.get_logs(event, taskId=task) == [], event
        assert m.get_logs("RoundCarriedForward", taskId=task) == []
        rounds = [m.round(task, r) for r in range(PLAN.rounds)]
        assert [r.status for r in rounds] == [RoundStatus.FINALIZED] * PLAN.rounds
        assert all(r.committed_mask == 0b111 and r.accepted_mask == 0b111 for r in rounds)

        trainers = [a.lower() for a in m.trainers(task)]
        witnesses = [run.address(f"witness-{i + 1}").lower() for i in range(PLAN.witnesses)]
        fee = TaskContext.load(m, run.blobs, task).spec.witness_fee_wei
        by_reason: dict[tuple[str, str], int] = defaultdict(int)
        for e in m.get_logs("Credited", taskId=task):
            reason = bytes(e["args"]["reason"]).rstrip(b"\0").decode()
            by_reason[(str(e["args"]["account"]).lower(), reason)] += int(e["args"]["amount"])
        pool = m.receipt(task).reward_pool_wei
        assert pool > 0
        for a in trainers:
            view = m.trainer(task, a)
            assert (view.evicted, view.slashed_wei) == (False, 0)
            # equal shards, every submission accepted: an equal share of the pool, and the stake back
            assert by_reason[(a, "stake-refund")] == PLAN.trainer_stake_wei
            assert by_reason[(a, "reward")] == pool // len(trainers)
        for w in witnesses:
            view = m.witness(task, w)
            assert (view.bonded, view.slashed_wei) == (True, 0)
            assert by_reason[(w, "bond-refund")] == PLAN.witness_bond_wei
            assert by_reason.get((w, "witness-fee"), 0) == view.matched * fee
        # every round was finalized by k matching votes, each paid one fee
        assert sum(m.witness(task, w).matched for w in witnesses) == PLAN.threshold * PLAN.rounds
        credited = _summed(m.get_logs("Credited", taskId=task), "account")
        assert _summed(m.get_logs("Withdrawn"), "account") == credited
        assert all(m.credit_of(a) == 0 for a in credited)
        assert m.escrow_of(task) == 0
        assert m.w3.eth.get_balance(Web3.to_checksum_address(m.address)) == 0

        # -------------------------------------------------- degraded once, recovered once (not a line per retry)
        for i in range(PLAN.witnesses):
            log = run.current(f"witness-{i + 1}").log_path.read_text()
            refused = [line for line in log.splitlines() if "Connection refused" in line]
            assert [line.split("] ", 1)[1].split()[0] for line in refused] == ["agent.step_failed"] * 2 + [
                "agent.degraded"
            ], log[-3000:]
            assert log.count("agent.degraded") == 1 and log.count("agent.recovered") == 1, log[-3000:]
