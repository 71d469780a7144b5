"""Verification holds for vision (issue 14, item 4): on a real devnet, a ViT task on the digits
with a lazy trainer (half its inner steps, the later checkpoints padded) is caught by the honest
witnesses' re-execution and its stake slashed, while an honest trainer in bf16 (CPU autocast),
replayed in fp32 by the referees within the tolerance envelope, is not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from syncline.chain.market import MarketClient
from syncline.demo.fraud import FraudReport, check_report, collect_report
from syncline.demo.scenarios import SCENARIOS
from syncline.demo.training_run import TrainingDemo
from syncline.demo.vision import PLAN, VisionDemo

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def test_a_lazy_vision_trainer_is_slashed_and_an_honest_bf16_one_is_not(state_env: Path, tmp_path: Path) -> None:
    scenario = SCENARIOS["lazy-trainer"]
    plan = replace(
        PLAN,
        rounds=2,
        inner_steps=8,
        checkpoint_interval=4,
        # on the demo's clock (30 times the wall's): 10 s rounds, a 40 s grace, a 20 s challenge window
        round_duration_s=300,
        grace_window_s=1200,
        challenge_window_s=600,
        training_checks="all",
        checkpoints=scenario.checkpoints,  # eager: every segment's checkpoints come with the commitment
        spot_check_rate=scenario.spot_check_rate,
        misbehave=dict(scenario.misbehave),
        trainer_dtypes=dict(scenario.dtypes),
        timeout_s=240.0,
    )
    assert plan.trainer_dtypes == {"trainer-1": "bf16"} and plan.misbehave == {"trainer-2": "lazy"}
    demo = TrainingDemo(tmp_path, plan)
    demo.publish_task = VisionDemo(tmp_path, plan).publish
    captured: dict[str, Any] = {}

    def on_sealed(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
        captured["report"] = collect_report("lazy-trainer", market, task_id, names)

    demo.after_seal = on_sealed
    receipt = demo.run()
    report: FraudReport = captured["report"]
    assert receipt.extras["validation_metric"] == "top1_accuracy"
    check_report(report, scenario)  # a training-fraud challenge upheld
    frauds = [c for c in report.challenges if c["kind"] == "training_fraud"]
    assert {c["accused"] for c in frauds} == {"trainer-2"}, report.challenges
    assert all(c["status"] == "upheld" for c in frauds), report.challenges
    slashed = {s["who"] for s in report.slashes}
    assert "trainer-2" in slashed and "trainer-1" not in slashed, report.slashes
