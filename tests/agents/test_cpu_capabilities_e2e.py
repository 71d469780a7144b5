"""End to end on anvil: trainers on AVX2 kernels, witnesses (challengers and referees) on AVX-512.

The fraud e2e's ``lazy-trainer`` run (``TrainingDemo`` with the tiny CI model: 3 trainers and 3
witnesses as subprocesses, 2 rounds of H=8 AdamW steps with a checkpoint every 4, every witness's
challenger re-executing every training segment of every round) with ``ATEN_CPU_CAPABILITY=avx2``
in every trainer's environment and ``avx512`` in every witness's: trainer-3 trains honestly in
fp32, trainer-1 honestly in bf16, trainer-2 lazily. Before the referee fell back to the envelope
on a missed hash, the AVX-512 challengers claimed trainer-3's every segment and the committee
convicted it. Now: the lazy trainer is convicted and slashed exactly as on one machine, the honest
ones keep their stakes and rewards, and the witnesses' logs show trainer-3's segments judged
inside the envelope after a missed bit-exact replay. Skipped on a CPU without AVX-512.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from syncline.demo.scenarios import SCENARIOS

from .test_fraud_e2e import (
    FraudDemo,
    check_challenger_paid,
    check_consequences,
    check_culprits_slashed_honest_spared,
    check_everyone_withdrew,
    check_ledger,
    check_other_precisions_spared,
    check_upheld_by_honest_witness,
    fraud_test_plan,
    report_timing,
)

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def _capability(name: str, agent_dir: Path, address: str) -> tuple[dict[str, Any], dict[str, str]]:
    return {}, {"ATEN_CPU_CAPABILITY": "avx2" if name.startswith("trainer-") else "avx512"}


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512", reason="needs a CPU with AVX-512")
def test_avx2_trainers_and_avx512_referees(state_env: Path, tmp_path: Path) -> None:
    scenario = SCENARIOS["lazy-trainer"]
    plan = fraud_test_plan(scenario)
    demo = FraudDemo(tmp_path, "lazy-trainer", plan)
    demo.agent_setup = _capability
    started = time.monotonic()
    demo.run()
    record = demo.record
    assert record is not None
    first = check_upheld_by_honest_witness(record, scenario, plan)
    report_timing(record, "lazy-trainer, avx2 trainers, avx512 witnesses", first, time.monotonic() - started)
    check_challenger_paid(record, plan)
    check_culprits_slashed_honest_spared(record, scenario, plan)  # trainer-1 and trainer-3 keep their stakes
    check_consequences(record, scenario, first)
    check_ledger(record, plan)
    check_other_precisions_spared(record, scenario, plan)
    check_everyone_withdrew(record)
    honest = record.address("trainer-3")
    assert all(o.view.accused.lower() != honest for o in record.outcomes)
    line = next(t for t in record.receipt.trainers if t.trainer.lower() == honest)
    assert line.stake_refund_wei == plan.trainer_stake_wei and line.reward_wei > 0, line
    # trainer-3's segments missed the bit-exact replay on AVX-512 and were judged inside the envelope
    segments = -(-plan.inner_steps // plan.checkpoint_interval)
    for witness, lines in record.tolerant_comparisons.items():
        fallback = [x for x in lines if "trainer_class=cpu-fp32" in x and "within=True" in x]
        assert len(fallback) >= segments, (witness, lines)  # at least a whole round of trainer-3's
        assert all("not_bit_exact=True" in x and "referee_kernels=" in x and "AVX512" in x for x in fallback), fallback
