"""The ``timeseries`` scenario end to end (issue 14, item 5), as a user runs it: a small PatchTST
forecasting the statsmodels CO2 and El Nino series, trained through the whole market on a real
anvil (3 trainer and 3 witness processes, k=2), every round's MASE voted by the witnesses, the
run sealed and paid, the export loaded with ``from_pretrained``, and the receipt in
``.syncline/demo/timeseries``. The target: a final MASE below 1 (better than the seasonal-naive
forecast's in-sample error)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from syncline.chain.deployment import compile_contracts

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def test_timeseries_scenario_beats_seasonal_naive_through_the_market(tmp_path: Path) -> None:
    from transformers import PatchTSTForPrediction

    state = tmp_path / "state"
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, state / "artifacts" / cache.name)
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1", "SYNCLINE_LOG_FORMAT": "console"}
    run = subprocess.run(
        [sys.executable, "-m", "syncline.cli", "demo", "--scenario", "timeseries"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    workdir = state / "demo" / "timeseries"
    receipt = json.loads((workdir / "receipt.json").read_text())

    # The market: every round finalized on chain, the run sealed, every trainer paid, none slashed.
    assert receipt["status"] == "sealed"
    assert receipt["rounds_finalized"] == receipt["rounds_total"] == 5
    trainers = receipt["trainers"]
    assert len(trainers) == 3
    assert all(t["reward_wei"] > 0 and t["slashed_wei"] == 0 and t["accepted"] == 5 for t in trainers), trainers

    # The witnesses voted MASE; the forecaster ends better than seasonal naive (MASE < 1), and
    # better than the untrained model and the seasonal-naive forecast on the same windows.
    assert receipt["validation_metric"] == "mase"
    per_round = receipt["validation_metric_per_round"]
    assert len(per_round) == 5 and all(v == v and v >= 0 for v in per_round), per_round
    assert per_round[-1] < 1.0 and receipt["beats_seasonal_naive"] is True, per_round
    assert per_round[-1] < receipt["mase_initial"], (receipt["mase_initial"], per_round)
    assert per_round[-1] < receipt["mase_seasonal_naive"] < 1.0, (receipt["mase_seasonal_naive"], per_round)
    assert receipt["series"] == ["co2", "elnino"] and receipt["validation_windows"] == 18

    # The export: transformers alone loads it and forecasts the task's horizon.
    model_dir = Path(receipt["model_dir"])
    described = json.loads((model_dir / "syncline_timeseries.json").read_text())
    assert (described["context_length"], described["prediction_length"], described["season_length"]) == (48, 12, 12)
    model = PatchTSTForPrediction.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model(past_values=torch.zeros(2, 48, 1)).prediction_outputs
    assert out.shape == (2, 12, 1)
    assert receipt["wall_seconds"] < 300, receipt["wall_seconds"]
