"""Issue 26 item 3, end to end: a staked trainer commits a payload whose safetensors header says
``"data_offsets": null``. Before, ``fixed_point.safetensors_spans`` raised ``TypeError`` inside
every witness's payload checks, ``syncline witness run`` logged ``agent.step_failed`` on every tick
and round 0 never finalized. Now the witnesses reject that one submission as malformed and the
run goes on: every round finalizes with the two honest payloads, the junk one is never accepted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from syncline.protocol.enums import RoundStatus

from ._agent_harness import run_recorded, tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

PLAN = tiny_plan(rounds=2, misbehave={"trainer-3": "junk-payload"})


def test_a_staked_trainers_junk_payload_is_rejected_and_every_round_finalizes(
    tmp_path_factory: pytest.TempPathFactory, agents_state_dir: Path
) -> None:
    receipt, record, workdir = run_recorded(tmp_path_factory.mktemp("junk"), agents_state_dir, PLAN)
    assert [r.status for r in record.rounds] == [RoundStatus.FINALIZED] * PLAN.rounds
    enrolled = re.search(r"trainer\.enrolled.*?fragment[\"=: ]+(\d+)", (workdir / "logs" / "trainer-3.log").read_text())
    assert enrolled is not None
    junk_bit = 1 << int(enrolled.group(1))  # trainer-3's fragment: the order of enrollment, not of names
    for r in record.rounds:
        assert r.committed_mask == 0b111, r  # the junk trainer committed
        assert r.accepted_mask == 0b111 & ~junk_bit, r  # and only the honest two were accepted
    witness_logs = "".join((workdir / "logs" / f"witness-{i}.log").read_text() for i in (1, 2, 3))
    assert "agent.step_failed" not in witness_logs
    assert "malformed payload" in witness_logs or "malformed" in witness_logs
    assert receipt.final_state_root == record.rounds[-1].state_root
