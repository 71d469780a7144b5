"""The ``timeseries`` scenario: a forecaster trained through the whole market (issue 14, item 5).

1. **Several seasonal series from a shipped data set.** ``statsmodels``' Mauna Loa CO2 (monthly
   means) and El Nino sea surface temperatures (monthly): two monthly series with a yearly season
   (``season_length`` 12), each scaled by its mean and seasonal-naive error, cut into windows of 48
   months of context and 12 forecast; the last 36 months of each series are held out and give the
   validation windows (``syncline.sponsor.timeseries_task``).
2. **The market.** The sponsor posts a small PatchTST (built from a config, nothing downloaded);
   three trainers and three witnesses (k=2) run as processes, the witnesses vote each round's
   MASE on the held-out windows, every round is finalized on chain, the run seals, everyone claims.
3. **The result.** The final state's MASE is below 1: better than the seasonal-naive forecast's
   in-sample error; the receipt also carries the initial model's MASE and the seasonal-naive
   forecast's own MASE on the same windows. The export (``save_pretrained`` plus
   ``syncline_timeseries.json``) loads with ``PatchTSTForPrediction.from_pretrained`` and forecasts.

With covariates (:func:`seattle_weather_source`): ``vega_datasets``' Seattle weather (daily, 2012 to
2015, shipped inside the package), written as a bring-your-own CSV whose target is the daily
maximum temperature and whose past covariates are precipitation, wind and the minimum temperature
(:data:`SEATTLE_WINDOWS`: 56 days of context, 7 forecast).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch

from syncline.blobstore import BlobStore, LocalBlobStore
from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.modality.timeseries import EXPORT_FILE, FAMILIES, TimeSeriesAdapter, mase, seasonal_naive
from syncline.observability import get_logger
from syncline.protocol.receipt import TrainingReceipt
from syncline.run.agent_config import EVAL_BATCH_SIZE, EVAL_BATCHES
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import PublishedTask
from syncline.sponsor.timeseries_task import (
    DEFAULT_TIMESERIES_MODEL,
    SeriesSource,
    WindowPlan,
    publish_timeseries_task,
)

log = get_logger("syncline.demo.timeseries")

SEATTLE_COVARIATES = ("precipitation", "wind", "temp_min")
"""The Seattle weather columns :func:`seattle_weather_csv` writes beside the target ``temp_max``."""
SEATTLE_WINDOWS = WindowPlan(
    context_length=56, prediction_length=7, season_length=1, validation_windows=20, validation_stride=7
)
"""Daily windows: 8 weeks of context, a week forecast, the naive forecast (season 1) as the MASE
scale; the last 140 days held out (20 validation windows a week apart)."""
SEATTLE_MODEL: dict[str, Any] = {**DEFAULT_TIMESERIES_MODEL, "patch_length": 7, "patch_stride": 7}
"""The scenario's PatchTST with weekly patches."""

WINDOWS = WindowPlan()
"""48 months of context, 12 forecast, season 12, 9 validation windows 3 months apart per series."""
MODEL: dict[str, Any] = DEFAULT_TIMESERIES_MODEL
PLAN = dataclasses.replace(
    DemoPlan(),
    rounds=5,
    inner_steps=50,
    checkpoint_interval=10,
    inner_lr=2e-3,
    batch_size=32,
    shard_count=6,
    timeout_s=420.0,
)
"""The run: the main demo's committee and windows, 5 rounds of 50 inner steps of 32 windows."""


def seattle_weather_csv(path: Path) -> Path:
    """Write ``vega_datasets``' local Seattle weather as a series CSV: ``timestamp``, ``id``
    (``seattle``), ``value`` (``temp_max``, degrees C) and the :data:`SEATTLE_COVARIATES` columns."""
    from vega_datasets import local_data  # type: ignore[import-untyped]

    frame = local_data.seattle_weather()
    out = frame.rename(columns={"date": "timestamp", "temp_max": "value"})
    out.insert(1, "id", "seattle")
    path.parent.mkdir(parents=True, exist_ok=True)
    out[["timestamp", "id", "value", *SEATTLE_COVARIATES]].to_csv(path, index=False)
    return path


def seattle_weather_source(path: Path, *, covariates: bool = True) -> SeriesSource:
    """A CSV source of :func:`seattle_weather_csv` (written at ``path``), with or without its
    covariates."""
    return SeriesSource(
        type="csv", path=str(seattle_weather_csv(path)), covariates=SEATTLE_COVARIATES if covariates else ()
    )


class TimeSeriesDemo:
    """Runs the scenario in ``workdir`` (``.syncline/demo/timeseries``)."""

    def __init__(
        self,
        workdir: Path,
        plan: DemoPlan = PLAN,
        *,
        windows: WindowPlan = WINDOWS,
        model: dict[str, Any] | None = None,
        source: SeriesSource | None = None,
        name: str = "co2-elnino-patchtst-diloco",
    ):
        self.name = name
        self.workdir = workdir
        self.plan = plan
        self.windows = windows
        self.model = dict(model or MODEL)
        self.source = source or SeriesSource()

    def run(self) -> TrainingReceipt:
        started = time.monotonic()
        demo = TrainingDemo(self.workdir, self.plan)

        def publish(blobs: BlobStore, template: dict[str, Any]) -> PublishedTask:
            return publish_timeseries_task(
                blobs,
                template={**template, "name": self.name},
                model=self.model,
                source=self.source,
                plan=self.windows,
                shard_count=self.plan.shard_count,
            )

        demo.publish_task = publish
        baseline: dict[str, float] = {}

        def score_baselines(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
            """The initial model's MASE and the seasonal-naive forecast's, on the witnesses' windows,
            and the final model's scaled quantile loss."""
            ctx = TaskContext.load(market, LocalBlobStore(self.workdir / "blobs"), task_id)
            adapter = ctx.adapter
            assert isinstance(adapter, TimeSeriesAdapter)
            shard = ctx.validation_shard()
            model = ctx.build_model(ctx.fetch_state(ctx.spec.initial_state_root))
            baseline["initial"] = adapter.metric(model, shard, batch_size=EVAL_BATCH_SIZE, max_batches=EVAL_BATCHES)
            w = adapter.windows(shard)
            naive = seasonal_naive(w.past, adapter.prediction_length, adapter.season_length)  # targets only
            baseline["seasonal_naive"] = mase(naive, w.future, w.scale)
            baseline["windows"] = len(w)
            final = ctx.build_model(ctx.fetch_state(market.task(task_id).state_root))
            baseline["quantile_loss"] = adapter.quantile_loss(
                final, shard, batch_size=EVAL_BATCH_SIZE, max_batches=EVAL_BATCHES
            )

        demo.after_seal = score_baselines
        receipt = demo.run()
        extras = dict(receipt.extras)
        model_dir = Path(extras["model_dir"])
        forecast = check_export(model_dir)
        per_round = extras.get("validation_metric_per_round") or []
        extras.update(
            scenario="timeseries",
            series=[s["id"] for s in json.loads((model_dir / EXPORT_FILE).read_text())["series"]],
            validation_windows=baseline.get("windows"),
            mase_initial=baseline.get("initial"),
            mase_seasonal_naive=baseline.get("seasonal_naive"),
            mase_final=per_round[-1] if per_round else None,
            scaled_quantile_loss_final=baseline.get("quantile_loss"),
            beats_seasonal_naive=bool(per_round and per_round[-1] < 1.0),
            export_forecast_shape=forecast,
            wall_seconds=round(time.monotonic() - started, 1),
        )
        log.info(
            "timeseries.done",
            mase_per_round=[round(v, 4) for v in per_round],
            mase_seasonal_naive=baseline.get("seasonal_naive"),
        )
        return TrainingReceipt(**{**receipt.__dict__, "extras": extras})


def check_export(model_dir: Path) -> list[int]:
    """Load the export with ``transformers`` alone (the class :data:`EXPORT_FILE` names) and
    forecast from a window of zeros; the forecast's shape."""
    import transformers

    described = json.loads((model_dir / EXPORT_FILE).read_text())
    if described["model_class"] not in FAMILIES.values():
        raise ValueError(f"export names model class {described['model_class']!r}")
    model: Any = getattr(transformers, described["model_class"]).from_pretrained(model_dir).eval()
    channels = described["num_channels"] + len(described.get("covariates", []))
    past = torch.zeros(1, described["context_length"], channels)
    with torch.no_grad():
        out = model(past_values=past).prediction_outputs
    return [*out.shape[:-1], described["num_channels"]]  # the forecasts: the target channels
