"""Do past covariates help? Seattle weather (``vega_datasets``, daily 2012-2015): the maximum
temperature forecast 7 days ahead from 56 days of context, with and without precipitation, wind
and the minimum temperature as past covariates, the scenario's PatchTST (channel attention with
covariates), trained alone (no market: one AdamW loop of ``--steps`` steps of 32 windows, the
adapter's own batches and loss) from ``--seeds`` seeds. Prints the validation MASE (target only)
of each run, their mean, and the naive forecast's; writes JSON.

Usage::

    .venv/bin/python scripts/bench/timeseries_covariates.py --steps 250 --seeds 0 1 2 --out covariates.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from syncline.demo.timeseries import SEATTLE_MODEL, SEATTLE_WINDOWS, seattle_weather_source
from syncline.modality.timeseries import TimeSeriesAdapter, mase, seasonal_naive
from syncline.sponsor.timeseries_task import build_windows, read_series, spec_model


def run(covariates: bool, *, steps: int, seed: int, lr: float, csv: Path) -> tuple[float, float]:
    """(validation MASE of the trained model, the naive forecast's MASE)."""
    source = seattle_weather_source(csv, covariates=covariates)
    plan = SEATTLE_WINDOWS
    prepared = build_windows(read_series(source), plan, shard_count=3, covariates=source.covariates)
    k = len(prepared.covariates)
    adapter = TimeSeriesAdapter(
        context_length=plan.context_length,
        prediction_length=plan.prediction_length,
        season_length=plan.season_length,
        num_covariates=k,
    )
    described = spec_model(SEATTLE_MODEL, plan, 1, k)
    model = adapter.build_model({"family": described["family"], **described["config"]}, seed=seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for batch in adapter.batches(prepared.shards, batch_size=32, seed=seed, steps=steps):
        adapter.loss(model, batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    w = adapter.windows(prepared.validation)
    naive = mase(seasonal_naive(w.past, plan.prediction_length, plan.season_length), w.future, w.scale)
    return adapter.metric(model, prepared.validation, batch_size=64, max_batches=8), naive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    csv = Path(tempfile.mkdtemp()) / "seattle.csv"
    result: dict[str, object] = {"steps": args.steps, "seeds": args.seeds, "lr": args.lr}
    for name, covariates in (("without", False), ("with", True)):
        scores = []
        for seed in args.seeds:
            score, naive = run(covariates, steps=args.steps, seed=seed, lr=args.lr, csv=csv)
            scores.append(score)
            result["naive_mase"] = naive
            print(f"{name:>8} covariates  seed {seed}  MASE {score:.4f}", flush=True)
        result[f"mase_{name}"] = scores
        result[f"mean_mase_{name}"] = statistics.fmean(scores)
    print(
        f"mean MASE without {result['mean_mase_without']:.4f}  with {result['mean_mase_with']:.4f}  "
        f"naive {result['naive_mase']:.4f}"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
