"""``syncline train post-task`` for the other modalities (issue 14, item 3): a vision spec with an
``image_source`` (the sponsor's ``.npz``) and a time-series spec with a ``series_source`` (the
sponsor's CSV of ``timestamp, id, value`` rows) and ``windows``, posted on a real anvil; the
agents' ``TaskContext`` loads each (the adapter the modality names, the layout its ``param_count``
says). A missing file is one line before anything is uploaded or posted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from syncline.blobstore import BlobService, HttpBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.protocol.enums import Modality
from syncline.run.context import TaskContext

from .test_post_task_source import _post_task, _spec_yaml
from .test_post_task_source import blob_service as blob_service  # the fixture

pytestmark = [pytest.mark.chain]


def _spec(witnesses: list[Signer], **fields: Any) -> dict[str, Any]:
    spec = {**_spec_yaml(witnesses, {}), **fields}
    del spec["dataset_source"], spec["model"]
    return spec


def test_post_task_posts_vision_and_time_series_tasks_from_the_sponsor_s_files(
    tmp_path: Path,
    devnet: Devnet,
    deployment: Deployment,
    market: MarketClient,
    witnesses: list[Signer],
    blob_service: BlobService,
) -> None:
    from sklearn.datasets import load_digits

    sponsor = tmp_path / "sponsor"
    (sponsor / "data").mkdir(parents=True)
    digits = load_digits()
    images = (digits.images[:400] * 15).astype(np.uint8)  # 0..16 -> 0..240
    np.savez(sponsor / "data" / "digits.npz", images=images, labels=digits.target[:400].astype(np.int64))
    months = np.arange(240)
    rows = ["timestamp,id,value"] + [
        f"{2000 + m // 12}-{m % 12 + 1:02d}-01,{sid},{10 + 0.05 * m + amp * np.sin(2 * np.pi * m / 12):.4f}"
        for sid, amp in (("north", 3.0), ("south", 1.5))
        for m in months
    ]
    (sponsor / "data" / "series.csv").write_text("\n".join(rows) + "\n")
    # the same series with a covariate column (a temperature that leads the values by a season)
    with_temp = ["timestamp,id,value,temp"] + [f"{r},{np.cos(i / 7):.4f}" for i, r in enumerate(rows[1:])]
    (sponsor / "data" / "series_cov.csv").write_text("\n".join(with_temp) + "\n")
    covariate_source = {"type": "csv", "path": "data/series_cov.csv", "covariates": ["temp"], "shard_count": 3}
    windows = {"context_length": 24, "prediction_length": 6, "season_length": 12}
    key = devnet.private_keys()[0]
    store = HttpBlobStore(blob_service.url)

    def post(name: str, spec: dict[str, Any]) -> Any:
        (sponsor / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        return _post_task(sponsor / f"{name}.yaml", deployment, blob_service.url, key, tmp_path / "state")

    before = market.task_count()
    for name, spec, words in (
        ("no-npz", _spec(witnesses, image_source={"type": "npz", "path": "data/missing.npz"}), "missing.npz"),
        ("no-csv", _spec(witnesses, series_source={"type": "csv", "path": "data/missing.csv"}), "missing.csv"),
        (
            "bad-windows",
            _spec(witnesses, series_source={"type": "csv", "path": "data/series.csv"}, windows={"horizon": 3}),
            "horizon",
        ),
        (  # covariates need a model that mixes channels: refused before anything is read or uploaded
            "no-mixing",
            {
                **_spec(witnesses, series_source=covariate_source, windows=windows),
                "model": {"family": "patchtst", "patch_length": 6, "patch_stride": 6, "channel_attention": False},
            },
            "channel_attention False: a task with covariates needs True",
        ),
    ):
        done = post(name, spec)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr
    assert not any(p.is_file() for p in (tmp_path / "blobs").rglob("*")), "nothing may be uploaded"
    assert market.task_count() == before

    vision = _spec(witnesses, image_source={"type": "npz", "path": "data/digits.npz", "shard_count": 3})
    done = post("vision", vision)
    assert done.returncode == 0, done.stderr
    ctx = TaskContext.load(market, store, json.loads(done.stdout)["task_id"])
    assert ctx.spec.modality == Modality.VISION and ctx.adapter.metric_name == "top1_accuracy"
    assert ctx.spec.dataset.shard_count == 3 and ctx.layout.numel == ctx.spec.param_count

    series = _spec(
        witnesses,
        series_source={"type": "csv", "path": "data/series.csv", "shard_count": 3},
        windows={"context_length": 24, "prediction_length": 6, "season_length": 12},
    )
    done = post("series", series)
    assert done.returncode == 0, done.stderr
    ctx = TaskContext.load(market, store, json.loads(done.stdout)["task_id"])
    assert ctx.spec.modality == Modality.TIME_SERIES and ctx.adapter.metric_name == "mase"
    assert ctx.spec.metadata["context_length"] == 24 and ctx.layout.numel == ctx.spec.param_count

    done = post("series-covariates", _spec(witnesses, series_source=covariate_source, windows=windows))
    assert done.returncode == 0, done.stderr
    ctx = TaskContext.load(market, store, json.loads(done.stdout)["task_id"])
    assert ctx.spec.metadata["covariates"] == ["temp"] and ctx.spec.model.config["num_input_channels"] == 2
    assert ctx.adapter.num_covariates == 1  # type: ignore[attr-defined]
    shard = ctx.adapter.windows(store.get(ctx.spec.dataset.shard_hashes[0]))  # type: ignore[attr-defined]
    assert shard.past_covariates is not None and shard.past_covariates.shape[1:] == (24, 1)
