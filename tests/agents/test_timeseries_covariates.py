"""A time-series task with past covariates trained through the market (issue 14, item 1): the
Seattle weather shipped with ``vega_datasets`` as a bring-your-own CSV (daily maximum temperature,
with precipitation, wind and the minimum temperature as covariates), a PatchTST with channel
attention reading 1 + 3 input channels, 3 trainers and 3 witnesses (k=2) on a real anvil, every
round's MASE (of the temperature forecasts only) voted by the witnesses, the run sealed and paid,
and the export loaded with ``from_pretrained``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from syncline.demo.timeseries import (
    PLAN,
    SEATTLE_COVARIATES,
    SEATTLE_MODEL,
    SEATTLE_WINDOWS,
    TimeSeriesDemo,
    seattle_weather_source,
)

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def test_a_covariate_forecaster_trains_through_the_market(state_env: Path, tmp_path: Path) -> None:
    from transformers import PatchTSTForPrediction

    plan = replace(PLAN, rounds=2, inner_steps=16, checkpoint_interval=8, timeout_s=240.0)
    demo = TimeSeriesDemo(
        tmp_path / "run",
        plan,
        windows=SEATTLE_WINDOWS,
        model=SEATTLE_MODEL,
        source=seattle_weather_source(tmp_path / "seattle.csv"),
        name="seattle-weather-covariates",
    )
    receipt = demo.run().to_mapping()
    extras = receipt
    print(
        "covariate run:",
        json.dumps(
            {
                k: extras.get(k)
                for k in ("validation_metric_per_round", "mase_initial", "mase_seasonal_naive", "wall_seconds")
            }
        ),
    )

    # The market: both rounds finalized, the run sealed, every trainer paid and none slashed.
    assert receipt["status"] == "sealed" and receipt["rounds_finalized"] == receipt["rounds_total"] == 2
    trainers = receipt["trainers"]
    assert len(trainers) == 3 and all(t["reward_wei"] > 0 and t["slashed_wei"] == 0 for t in trainers), trainers

    # The witnesses voted MASE of the target (temperature) forecasts; training lowered it.
    assert extras["validation_metric"] == "mase"
    per_round = extras["validation_metric_per_round"]
    assert len(per_round) == 2 and all(v == v and v > 0 for v in per_round), per_round
    assert per_round[-1] < extras["mase_initial"], (extras["mase_initial"], per_round)
    assert extras["series"] == ["seattle"] and extras["validation_windows"] == 20

    # The export: 1 + 3 input channels, forecasts of the one target channel.
    model_dir = Path(extras["model_dir"])
    described = json.loads((model_dir / "syncline_timeseries.json").read_text())
    assert described["covariates"] == list(SEATTLE_COVARIATES) and described["num_channels"] == 1
    model = PatchTSTForPrediction.from_pretrained(model_dir).eval()
    assert model.config.num_input_channels == 4 and model.config.channel_attention is True
    with torch.no_grad():
        out = model(past_values=torch.zeros(2, 56, 4)).prediction_outputs
    assert out.shape == (2, 7, 4) and extras["export_forecast_shape"] == [1, 7, 1]
