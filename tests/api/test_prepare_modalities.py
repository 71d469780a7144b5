"""``/api/tasks/prepare`` for the other two modalities (issue 14, item 6): a vision task from an
``.npz`` and from a folder of PNG images per class, a time-series task from a CSV and from a
Parquet with covariates, all under the API's data directory; the returned call posts on chain and
the spec is the modality's, its ``param_count`` the model layout's. A path outside the data
directory, a bad window plan and a non-finite covariate are one-line 422s naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from web3 import Web3

from syncline.api.server import ApiServer
from syncline.blobstore import HttpBlobStore
from syncline.chain.market import MarketClient
from syncline.modality import adapter_for
from syncline.modality.lora import trained_parameters
from syncline.protocol.enums import Modality
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec

from .conftest import Http, assert_error

pytestmark = pytest.mark.chain

SHARDS = 3
TINY_VIT = {
    "family": "vit",
    "patch_size": 4,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
}
TINY_PATCHTST = {
    "family": "patchtst",
    "patch_length": 6,
    "patch_stride": 6,
    "d_model": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "ffn_dim": 32,
}
PLAN = {"context_length": 24, "prediction_length": 6, "season_length": 12, "validation_windows": 3}


def write_npz(path: Path, count: int = 90) -> Path:
    """Three classes of 8x8 grayscale images: a bright row, column or diagonal, with noise."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 40, size=(count, 8, 8)).astype(np.uint8)
    labels = np.arange(count) % 3
    for i, label in enumerate(labels):
        if label == 0:
            images[i, 3, :] = 250
        elif label == 1:
            images[i, :, 3] = 250
        else:
            images[i][np.eye(8, dtype=bool)] = 250
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, images=images, labels=labels, class_names=np.array(["row", "column", "diagonal"]))
    return path


def write_csv(path: Path, *, ids: int = 2, steps: int = 96) -> Path:
    """``ids`` monthly series with a trend and a yearly season (columns ts, store, sales)."""
    import pandas as pd

    stamps = [str(d.date()) for d in pd.date_range("2000-01-01", periods=steps, freq="MS")]
    rng = np.random.default_rng(1)
    t = np.arange(steps)
    rows = ["ts,store,sales"]
    for i in range(ids):
        y = 10 * i + 0.05 * t + 3 * np.sin(2 * np.pi * t / 12 + i) + rng.normal(0, 0.3, steps)
        rows += [f"{stamps[k]},s{i},{y[k]:.6f}" for k in range(steps)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


def write_image_folder(path: Path, per_class: int = 12) -> Path:
    """``path/<class>/<n>.png``: three classes of 8x8 grayscale PNGs (Pillow), as :func:`write_npz`
    draws them (a bright row, column or diagonal, with noise)."""
    from PIL import Image

    rng = np.random.default_rng(2)
    for name in ("column", "diagonal", "row"):  # sorted: the labels' order
        (path / name).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            image = rng.integers(0, 40, size=(8, 8)).astype(np.uint8)
            if name == "row":
                image[3, :] = 250
            elif name == "column":
                image[:, 3] = 250
            else:
                image[np.eye(8, dtype=bool)] = 250
            Image.fromarray(image, mode="L").save(path / name / f"{n:03d}.png")
    return path


def write_parquet(path: Path, *, steps: int = 96) -> Path:
    """:func:`write_csv`'s series with two covariate columns, ``rain`` and ``promo``, as Parquet."""
    import pandas as pd

    frame = pd.read_csv(write_csv(path.with_suffix(".csv"), steps=steps))
    rng = np.random.default_rng(3)
    frame["rain"] = rng.gamma(1.0, 3.0, len(frame))
    frame["promo"] = (rng.random(len(frame)) < 0.2).astype(np.float64)
    frame.to_parquet(path)
    path.with_suffix(".csv").unlink()
    return path


def _spec(http: Http, name: str) -> dict[str, Any]:
    template = http.ok("/api/template")
    return {
        **template["spec"],
        "name": name,
        "inner_steps": 4,
        "checkpoint_interval": 2,
        "rounds": 2,
        "min_trainers": SHARDS,
        "max_trainers": SHARDS,
    }


def _post(w3: Web3, prepared: dict[str, Any]) -> None:
    tx = w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": Web3.to_checksum_address(prepared["to"]), "data": prepared["data"]}
        | {"value": int(prepared["value_wei"])}
    )
    assert w3.eth.wait_for_transaction_receipt(tx)["status"] == 1


def _posted_spec(market: MarketClient, blobs: HttpBlobStore, prepared: dict[str, Any]) -> TrainingTaskSpec:
    assert "0x" + bytes(market.spec_tuple(market.task_count())[0]).hex() == prepared["spec_hash"]
    spec = TrainingTaskSpec.from_artifact(
        blobs.fetch(prepared["spec_uri"], expected_digest=prepared["spec_hash"], max_bytes=1 << 20)
    )
    # The parameters the spec names are those of the model its adapter builds (the state's layout).
    net = adapter_for(spec).build_model({"family": spec.model.family, **spec.model.config}, seed=0)
    params = {k: v.detach() for k, v in trained_parameters(net).items()}
    assert spec.param_count == ParameterLayout.from_state_dict(params).numel == prepared["param_count"]
    return spec


def test_template_lists_the_modalities(http: Http) -> None:
    modalities = http.ok("/api/template")["sources"]["modalities"]
    assert modalities["names"] == ["language", "vision", "time_series"]
    assert modalities["vision"]["source_types"] == ["digits", "image_folder", "npz"]
    assert modalities["time_series"]["source_types"] == ["statsmodels", "csv", "parquet"]
    assert modalities["time_series"]["windows"]["context_length"] == 48
    assert modalities["vision"]["model"]["family"] == "vit"
    assert modalities["time_series"]["bounds"]["season_length"]["min"] == 1


def test_prepare_a_vision_task_from_an_npz(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    write_npz(api.settings.source_dir / "vision" / "shapes.npz")
    body = {
        "modality": "vision",
        "spec": _spec(http, "api-vision"),
        "image_source": {"type": "npz", "path": "vision/shapes.npz", "shard_count": SHARDS},
        "model": TINY_VIT,
    }
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    _post(w3, prepared)
    spec = _posted_spec(market, blobs, prepared)
    assert spec.modality == Modality.VISION and spec.name == "api-vision"
    assert spec.metadata["class_names"] == ["row", "column", "diagonal"] and spec.metadata["image_size"] == 8
    assert spec.dataset.shard_count == SHARDS and spec.model.config["patch_size"] == 4
    # The run's chart names the modality's metric (what its witnesses vote).
    api.wait_indexed()
    losses = http.ok(f"/api/runs/{market.task_count()}/losses")
    assert (losses["metric"], losses["metric_higher_is_better"]) == ("top1_accuracy", True)


def test_prepare_a_time_series_task_from_a_csv(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    write_csv(api.settings.source_dir / "series" / "sales.csv")
    source = {
        "type": "csv",
        "path": "series/sales.csv",
        "timestamp_column": "ts",
        "id_column": "store",
        "value_columns": ["sales"],
        "shard_count": SHARDS,
    }
    body = {
        "modality": "time_series",
        "spec": _spec(http, "api-series"),
        "series_source": source,
        "windows": PLAN,
        "model": TINY_PATCHTST,
    }
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    _post(w3, prepared)
    spec = _posted_spec(market, blobs, prepared)
    assert spec.modality == Modality.TIME_SERIES and spec.model.family == "patchtst"
    assert [s["id"] for s in spec.metadata["series"]] == ["s0", "s1"]
    assert (spec.metadata["context_length"], spec.metadata["prediction_length"]) == (24, 6)
    assert spec.metadata["freq"] == "MS"
    api.wait_indexed()
    losses = http.ok(f"/api/runs/{market.task_count()}/losses")
    assert (losses["metric"], losses["metric_higher_is_better"]) == ("mase", False)


def test_prepare_a_vision_task_from_an_image_folder(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    write_image_folder(api.settings.source_dir / "vision" / "shapes")
    body = {
        "modality": "vision",
        "spec": _spec(http, "api-folder"),
        "image_source": {"type": "image_folder", "path": "vision/shapes", "shard_count": SHARDS},
        "model": TINY_VIT,
    }
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    _post(w3, prepared)
    spec = _posted_spec(market, blobs, prepared)
    assert spec.modality == Modality.VISION and spec.name == "api-folder"
    assert spec.metadata["class_names"] == ["column", "diagonal", "row"]  # the folders, sorted
    assert spec.metadata["image_size"] == 8 and spec.metadata["num_channels"] == 1
    assert spec.dataset.shard_count == SHARDS
    # every PNG landed in a shard or the validation shard, decoded to the pixels written
    adapter = adapter_for(spec)
    hashes = [*spec.dataset.shard_hashes, spec.dataset.validation_hash]
    shards = [adapter.decode(blobs.get(h)) for h in hashes]  # type: ignore[attr-defined]
    assert sum(len(s) for s in shards) == 36
    for shard in shards:
        rows = shard.images[shard.labels == 2][:, 0]  # class "row": its fourth row is bright
        assert rows.shape[0] > 0 and bool((rows[:, 3, :] == 250).all())


def test_prepare_a_time_series_task_with_covariates_from_a_parquet(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    write_parquet(api.settings.source_dir / "series" / "sales.parquet")
    source = {
        "type": "parquet",
        "path": "series/sales.parquet",
        "timestamp_column": "ts",
        "id_column": "store",
        "value_columns": ["sales"],
        "covariates": ["rain", "promo"],
        "shard_count": SHARDS,
    }
    body = {
        "modality": "time_series",
        "spec": _spec(http, "api-covariates"),
        "series_source": source,
        "windows": PLAN,
        "model": TINY_PATCHTST,
    }
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    _post(w3, prepared)
    spec = _posted_spec(market, blobs, prepared)
    assert [s["id"] for s in spec.metadata["series"]] == ["s0", "s1"] and spec.metadata["freq"] == "MS"
    assert spec.metadata["covariates"] == ["rain", "promo"] and spec.metadata["num_channels"] == 1
    assert spec.model.config["num_input_channels"] == 3 and spec.model.config["channel_attention"] is True
    windows = adapter_for(spec).windows(blobs.get(spec.dataset.validation_hash))  # type: ignore[attr-defined]
    assert windows.past_covariates.shape[1:] == (24, 2) and windows.future.shape[1:] == (6, 1)
    # a covariate cell that is not a finite number is a one-line 422 naming it
    import pandas as pd

    frame = pd.read_parquet(api.settings.source_dir / "series" / "sales.parquet")
    frame.loc[5, "rain"] = float("nan")
    frame.to_parquet(api.settings.source_dir / "series" / "holes.parquet")
    body["series_source"] = {**source, "path": "series/holes.parquet"}
    body["spec"] = _spec(http, "api-holes")
    message = assert_error(
        http.post("/api/tasks/prepare", body),
        422,
        "series_source: holes.parquet row 6: missing value in covariate column 'rain'",
    )
    assert str(api.settings.source_dir) not in message
    body["series_source"] = {"type": "statsmodels", "covariates": ["rain"], "shard_count": SHARDS}
    assert_error(http.post("/api/tasks/prepare", body), 422, "covariates: a statsmodels source takes datasets only")


def test_prepare_a_patchtsmixer_task_from_packaged_series(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    mixer = {"family": "patchtsmixer", "patch_length": 6, "patch_stride": 6, "d_model": 8, "num_layers": 1}
    body = {
        "modality": "time_series",
        "spec": _spec(http, "api-mixer"),
        "series_source": {"type": "statsmodels", "datasets": ["co2"], "shard_count": SHARDS},
        "windows": {"context_length": 24, "prediction_length": 6, "season_length": 12},
        "model": mixer,
    }
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    _post(w3, prepared)
    spec = _posted_spec(market, blobs, prepared)
    assert spec.model.family == "patchtsmixer" and spec.model.config["num_layers"] == 1
    assert [s["id"] for s in spec.metadata["series"]] == ["co2"] and spec.metadata["freq"] == "MS"


def test_paths_outside_the_data_directory_and_bad_plans_are_refused(api: ApiServer, http: Http) -> None:
    data_dir = api.settings.source_dir
    outside_npz = write_npz(data_dir.parent / "outside-images.npz")
    outside_csv = write_csv(data_dir.parent / "outside-series.csv")
    for path in ("../outside-images.npz", str(outside_npz)):
        body = {
            "modality": "vision",
            "spec": _spec(http, "refused"),
            "image_source": {"type": "npz", "path": path, "shard_count": SHARDS},
        }
        message = assert_error(http.post("/api/tasks/prepare", body), 422, "outside the data directory")
        assert message.startswith("image_source.path ") and str(data_dir) not in message
    series = {"type": "csv", "path": "x.csv", "value_columns": ["sales"], "shard_count": SHARDS}
    for path in ("../outside-series.csv", str(outside_csv), "/etc/passwd"):
        body = {
            "modality": "time_series",
            "spec": _spec(http, "refused"),
            "series_source": {**series, "path": path},
            "windows": PLAN,
        }
        message = assert_error(http.post("/api/tasks/prepare", body), 422, "outside the data directory")
        assert message.startswith("series_source.path ") and str(data_dir) not in message
    csv = {"type": "statsmodels", "shard_count": SHARDS}
    for plan, expected in (
        ({**PLAN, "context_length": 0}, "windows.context_length: Input should be greater than or equal to 1"),
        ({**PLAN, "season_length": 0}, "windows.season_length: Input should be greater than or equal to 1"),
        ({k: v for k, v in PLAN.items() if k != "prediction_length"}, "windows.prediction_length: required"),
        ({**PLAN, "stride": 2}, "windows.stride: Extra inputs are not permitted"),
    ):
        body = {"modality": "time_series", "spec": _spec(http, "refused"), "series_source": csv, "windows": plan}
        assert_error(http.post("/api/tasks/prepare", body), 422, expected)
    body = {
        "modality": "time_series",
        "spec": _spec(http, "refused"),
        "series_source": csv,
        "windows": {**PLAN, "context_length": 4},
        "model": TINY_PATCHTST,
    }
    assert_error(
        http.post("/api/tasks/prepare", body), 422, "model.patch_length 6 must not exceed windows.context_length 4"
    )
    vision = {"type": "digits", "shard_count": SHARDS, "image_size": 8}
    body = {
        "modality": "vision",
        "spec": _spec(http, "refused"),
        "image_source": vision,
        "model": {**TINY_VIT, "patch_size": 3},
    }
    assert_error(http.post("/api/tasks/prepare", body), 422, "model.patch_size 3 must divide image_source.image_size 8")
    # Found when the files are read (inside the build): still one line, naming the field.
    write_npz(data_dir / "vision" / "eights.npz")
    body = {
        "modality": "vision",
        "spec": _spec(http, "refused"),
        "image_source": {"type": "npz", "path": "vision/eights.npz", "shard_count": SHARDS},
        "model": {**TINY_VIT, "patch_size": 3},
    }
    expected = "model.config.patch_size 3 must be a positive divisor of image_size 8"
    assert_error(http.post("/api/tasks/prepare", body), 422, expected)
    write_csv(data_dir / "series" / "short.csv", steps=40)
    files = {"type": "csv", "path": "series/short.csv", "timestamp_column": "ts", "id_column": "store"}
    for source, expected in (
        ({**files, "value_columns": ["revenue"]}, "series_source: series table lacks column 'revenue'"),
        ({**files, "value_columns": ["sales"]}, "series_source: series 's0' has 40 steps; it needs 42"),
    ):
        body = {
            "modality": "time_series",
            "spec": _spec(http, "refused"),
            "series_source": {**source, "shard_count": SHARDS},
            "windows": PLAN,
            "model": TINY_PATCHTST,
        }
        message = assert_error(http.post("/api/tasks/prepare", body), 422, expected)
        assert str(data_dir) not in message
    body = {"modality": "audio", "spec": _spec(http, "refused"), "corpus": {}, "model": {}}
    assert_error(http.post("/api/tasks/prepare", body), 422, "modality")
