"""Past covariates of a time-series task (issue 14, item 1; docs/protocol.md §12.7): named in
``metadata.covariates``, carried by window shards as ``past_covariates`` [N, context, K], read by
the model as K extra input channels after the targets, scaled per series like the targets, and
never scored: the loss and the metric read the target channels only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from syncline.blobstore import LocalBlobStore
from syncline.errors import SpecError
from syncline.modality.lora import trained_parameters
from syncline.modality.timeseries import (
    EXPORT_FILE,
    MAX_COVARIATES,
    Windows,
    WindowShardError,
    adapter_from_spec,
    decode_windows,
    encode_windows,
    mase,
    write_export_files,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec
from syncline.sponsor.data_sources import DataSourceError
from syncline.sponsor.task_defaults import TaskDefaults, default_task
from syncline.sponsor.timeseries_task import (
    SeriesSource,
    WindowPlan,
    build_windows,
    publish_timeseries_task,
    read_series,
)

L, H, C, K, M = 24, 6, 1, 2, 12
TINY_MODEL: dict[str, Any] = {
    "family": "patchtst",
    "patch_length": 6,
    "patch_stride": 6,
    "d_model": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "ffn_dim": 32,
}
MIXER_MODEL: dict[str, Any] = {
    "family": "patchtsmixer",
    "patch_length": 6,
    "patch_stride": 6,
    "d_model": 16,
    "num_layers": 1,
}
NORMAL_MODEL: dict[str, Any] = {**TINY_MODEL, "loss": "nll", "distribution_output": "normal"}
PLAN = WindowPlan(context_length=L, prediction_length=H, season_length=M, validation_windows=3, validation_stride=2)
WITNESSES = ["0x" + f"{i:040x}" for i in (4, 5, 6)]


def _windows(n: int = 5, k: int = K, seed: int = 0) -> Windows:
    gen = torch.Generator().manual_seed(seed)
    return Windows(
        torch.randn(n, L, C, generator=gen),
        torch.randn(n, H, C, generator=gen),
        torch.rand(n, C, generator=gen) + 0.5,
        torch.randn(n, L, k, generator=gen),
    )


def _decode(data: bytes, k: int = K) -> Windows:
    return decode_windows(data, context_length=L, prediction_length=H, num_channels=C, num_covariates=k)


def _covariate_csv(path: Path, ids: int = 2, steps: int = 120) -> Path:
    """Monthly series driven by their covariates: ``value`` follows ``rain`` ``H`` steps late (a
    forecast horizon, so every forecast step depends on a covariate in the context), plus a
    season; ``wind`` is noise."""
    rng = np.random.default_rng(5)
    stamps = pd.date_range("2000-01-01", periods=steps, freq="MS")
    frames = []
    t = np.arange(steps)
    for i in range(ids):
        rain = rng.normal(0, 1, steps)
        value = 5 * i + 2 * np.sin(2 * np.pi * t / M) + 3 * np.roll(rain, H) + rng.normal(0, 0.1, steps)
        frames.append(
            pd.DataFrame(
                {
                    "timestamp": stamps,
                    "id": f"s{i}",
                    "value": value,
                    "rain": rain * 10 + 50,
                    "wind": rng.normal(0, 1, steps),
                }
            )
        )
    pd.concat(frames).to_csv(path, index=False)
    return path


def _source(tmp_path: Path, covariates: tuple[str, ...] = ("rain", "wind")) -> SeriesSource:
    return SeriesSource(type="csv", path=str(_covariate_csv(tmp_path / "cov.csv")), covariates=covariates)


def _publish(
    tmp_path: Path, model: dict[str, Any] = TINY_MODEL, source: SeriesSource | None = None
) -> tuple[Any, LocalBlobStore]:
    blobs = LocalBlobStore(tmp_path / "blobs")
    template = default_task(TaskDefaults(shard_count=3), WITNESSES, now=1_000)
    published = publish_timeseries_task(
        blobs, template=template, model=model, source=source or _source(tmp_path), plan=PLAN, shard_count=3, seed=3
    )
    return published, blobs


# ---------------------------------------------------------------------- shards


def test_a_covariate_shard_round_trips_and_follows_the_protocol_doc() -> None:
    """§12.7: four tensors in name order, ``past_covariates`` between ``past`` and ``scale``."""
    import struct

    w = _windows(3)
    tensors = [("future", w.future), ("past", w.past), ("past_covariates", w.past_covariates), ("scale", w.scale)]
    entries, offset, body = [], 0, b""
    for name, t in tensors:
        assert t is not None
        raw = struct.pack(f"<{t.numel()}f", *t.reshape(-1).tolist())
        shape = ",".join(str(d) for d in t.shape)
        entries.append(f'"{name}":{{"dtype":"F32","shape":[{shape}],"data_offsets":[{offset},{offset + len(raw)}]}}')
        offset += len(raw)
        body += raw
    header = ("{" + ",".join(entries) + "}").encode()
    header += b" " * (-len(header) % 8)
    data = encode_windows(w)
    assert data == struct.pack("<Q", len(header)) + header + body
    back = _decode(data)
    assert back.past_covariates is not None and torch.equal(back.past_covariates, w.past_covariates)  # type: ignore[arg-type]
    assert torch.equal(back.inputs, torch.cat([w.past, w.past_covariates], dim=-1))  # type: ignore[list-item]


def _hostile_cases() -> dict[str, tuple[bytes, int, str]]:
    from safetensors.torch import save

    w = _windows()
    assert w.past_covariates is not None
    base = {"past": w.past, "future": w.future, "scale": w.scale, "past_covariates": w.past_covariates}
    plain = {k: v for k, v in base.items() if k != "past_covariates"}
    nan = w.past_covariates.clone()
    nan[2, 3, 1] = float("nan")
    inf = w.past_covariates.clone()
    inf[0, 0, 0] = float("-inf")
    return {
        "covariates missing": (save(plain), K, "holds tensors"),
        "covariates unexpected": (save(base), 0, "holds tensors"),
        "wrong covariate count": (
            save({**base, "past_covariates": torch.zeros(5, L, K + 1)}),
            K,
            "'past_covariates' has shape",
        ),
        "wrong covariate context": (
            save({**base, "past_covariates": torch.zeros(5, L - 1, K)}),
            K,
            "'past_covariates' has shape",
        ),
        "wrong covariate windows": (
            save({**base, "past_covariates": torch.zeros(4, L, K)}),
            K,
            "'past_covariates' has shape",
        ),
        "float16 covariates": (save({**base, "past_covariates": w.past_covariates.half()}), K, "expected float32"),
        "nan covariate": (save({**base, "past_covariates": nan}), K, "'past_covariates' holds NaN or Inf"),
        "inf covariate": (save({**base, "past_covariates": inf}), K, "'past_covariates' holds NaN or Inf"),
        "metadata": (save(base, metadata={"x": "y"}), K, "not canonical"),
    }


@pytest.mark.parametrize("case", sorted(_hostile_cases()))
def test_hostile_covariate_shards_are_refused_in_one_line(case: str) -> None:
    data, k, message = _hostile_cases()[case]
    with pytest.raises(WindowShardError, match=message) as err:
        _decode(data, k)
    assert "\n" not in str(err.value)


def test_windows_with_and_without_covariates_do_not_mix() -> None:
    plain = Windows(torch.zeros(1, L, C), torch.zeros(1, H, C), torch.ones(1, C))
    with pytest.raises(ValueError, match="do not concatenate"):
        Windows.concat([plain, _windows(1)])


# ---------------------------------------------------------------------- source and windows


def test_csv_and_parquet_covariates_are_read_beside_the_values(tmp_path: Path) -> None:
    csv = _covariate_csv(tmp_path / "c.csv")
    pd.read_csv(csv).to_parquet(tmp_path / "c.parquet")
    a = read_series(_source(tmp_path))
    b = read_series(
        SeriesSource.from_mapping(
            {"type": "parquet", "path": str(tmp_path / "c.parquet"), "covariates": ["rain", "wind"]}
        )
    )
    frame = pd.read_csv(csv)
    for x, y in zip(a, b, strict=True):
        assert x.values.shape == (120, 1) and x.covariates is not None and x.covariates.shape == (120, 2)
        assert np.array_equal(x.values, y.values) and np.array_equal(x.covariates, y.covariates)  # type: ignore[arg-type]
        rows = frame[frame["id"] == x.id]
        assert np.allclose(x.covariates, rows[["rain", "wind"]].to_numpy())
        assert np.allclose(x.values[:, 0], rows["value"].to_numpy())
    assert all(s.covariates is None for s in read_series(SeriesSource(type="csv", path=str(csv))))


@pytest.mark.parametrize(
    ("body", "covariates", "message"),
    [
        (
            "timestamp,id,value,rain\n2000-01-01,a,1,\n",
            ("rain",),
            "bad.csv line 2: missing value in covariate column 'rain'",
        ),
        (
            "timestamp,id,value,rain\n2000-01-01,a,1,2\n2000-02-01,a,1,inf\n",
            ("rain",),
            "bad.csv line 3: covariate column 'rain' is not a finite number",
        ),
        ("timestamp,id,value,rain\n2000-01-01,a,1,wet\n", ("rain",), "covariate column 'rain' is not a finite"),
        ("timestamp,id,value\n2000-01-01,a,1\n", ("rain",), "lacks column 'rain'"),
        ("timestamp,id,value\n2000-01-01,a,1\n", ("value",), "named twice"),
    ],
)
def test_bad_covariate_cells_are_refused_in_one_line(
    tmp_path: Path, body: str, covariates: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(DataSourceError, match=message) as err:
        read_series(SeriesSource(type="csv", path=str(path), covariates=covariates))
    assert "\n" not in str(err.value)


def test_covariate_columns_may_be_called_like_the_table_s_own(tmp_path: Path) -> None:
    path = tmp_path / "names.csv"
    frame = pd.read_csv(_covariate_csv(tmp_path / "c.csv")).rename(columns={"id": "store", "rain": "id", "wind": "t"})
    frame.to_csv(path, index=False)
    series = read_series(SeriesSource(type="csv", path=str(path), id_column="store", covariates=("id", "t")))
    assert [s.id for s in series] == ["s0", "s1"]
    assert series[0].covariates is not None
    assert np.allclose(series[0].covariates, frame[frame["store"] == "s0"][["id", "t"]].to_numpy())


def test_covariate_sources_are_bounded() -> None:
    with pytest.raises(DataSourceError, match="statsmodels has no covariates"):
        SeriesSource.from_mapping({"type": "statsmodels", "covariates": ["x"]})
    with pytest.raises(DataSourceError, match=f"the bound is {MAX_COVARIATES}"):
        SeriesSource.from_mapping({"type": "csv", "covariates": [f"c{i}" for i in range(MAX_COVARIATES + 1)]})
    with pytest.raises(DataSourceError, match="distinct column names"):
        SeriesSource.from_mapping({"type": "csv", "covariates": ["a", "a"]})
    assert SeriesSource.from_mapping({"type": "csv", "covariates": "rain"}).covariates == ("rain",)


def test_covariate_windows_align_with_the_targets_and_are_scaled_per_series(tmp_path: Path) -> None:
    series = read_series(_source(tmp_path))
    prepared = build_windows(series, PLAN, shard_count=2, covariates=("rain", "wind"))
    assert prepared.covariates == ("rain", "wind")
    meta = prepared.series[0]
    assert set(meta) == {"id", "length", "loc", "scale", "covariate_loc", "covariate_scale"}
    s = series[0]
    assert s.covariates is not None
    train_len = len(s.values) - PLAN.held_out
    assert np.allclose(meta["covariate_loc"], s.covariates[:train_len].mean(axis=0))
    # the last validation window of series 0: its context ends where its forecast starts
    valid = decode_windows(prepared.validation, context_length=L, prediction_length=H, num_channels=C, num_covariates=K)
    assert valid.past_covariates is not None
    end = len(s.values) - H  # forecast start of the last window (validation windows end at the series' end)
    want_cov = (s.covariates[end - L : end] - np.array(meta["covariate_loc"])) / np.array(meta["covariate_scale"])
    want_past = (s.values[end - L : end] - np.array(meta["loc"])) / np.array(meta["scale"])
    last = PLAN.validation_windows - 1
    assert np.allclose(valid.past_covariates[last].numpy(), want_cov, atol=1e-5)
    assert np.allclose(valid.past[last].numpy(), want_past, atol=1e-5)
    assert valid.future.shape[-1] == C  # covariates are never forecast targets
    with pytest.raises(DataSourceError, match="2 covariates; 1 are named"):
        build_windows(series, PLAN, shard_count=2, covariates=("rain",))


# ---------------------------------------------------------------------- spec, model, loss, metric


def test_a_covariate_task_names_them_and_widens_the_model_input(tmp_path: Path) -> None:
    published, blobs = _publish(tmp_path)
    spec = published.spec
    assert spec.metadata["covariates"] == ["rain", "wind"]
    assert spec.model.config["num_input_channels"] == C + K and spec.metadata["num_channels"] == C
    adapter = adapter_from_spec(TrainingTaskSpec.from_mapping(json.loads(spec.canonical_bytes())))
    assert adapter.num_covariates == K
    shard = adapter.windows(blobs.get(spec.dataset.shard_hashes[0]))
    assert shard.past_covariates is not None and shard.past_covariates.shape[1:] == (L, K)
    batch = next(iter(adapter.batches([blobs.get(spec.dataset.shard_hashes[0])], batch_size=4, seed=1, steps=1)))
    assert batch["past_values"].shape == (4, L, C + K) and batch["future_values"].shape == (4, H, C)


@pytest.mark.parametrize(
    ("covariates", "message"),
    [
        ("rain", "must be a list"),
        (["a", "a"], "names a covariate twice"),
        ([f"c{i}" for i in range(MAX_COVARIATES + 1)], "the bound is"),
        ([""], "is not a name"),
        (["rain"], "num_input_channels 3 differs from the task's 2"),
    ],
)
def test_spec_covariates_are_checked(tmp_path: Path, covariates: Any, message: str) -> None:
    published, _ = _publish(tmp_path)
    data = json.loads(published.spec.canonical_bytes())
    data["metadata"]["covariates"] = covariates
    with pytest.raises(SpecError, match=message) as err:
        adapter_from_spec(TrainingTaskSpec.from_mapping(data))
    assert "\n" not in str(err.value)


def test_a_spec_without_covariates_has_no_covariate_key(tmp_path: Path) -> None:
    published, blobs = _publish(tmp_path, source=SeriesSource(type="csv", path=str(_covariate_csv(tmp_path / "p.csv"))))
    assert "covariates" not in published.spec.metadata
    assert "covariate_loc" not in published.spec.metadata["series"][0]
    assert published.spec.model.config["num_input_channels"] == C
    w = adapter_from_spec(published.spec).windows(blobs.get(published.spec.dataset.validation_hash))
    assert w.past_covariates is None


@pytest.mark.parametrize("model", [TINY_MODEL, MIXER_MODEL], ids=["patchtst", "patchtsmixer"])
def test_loss_and_metric_read_the_target_channel_only(tmp_path: Path, model: dict[str, Any]) -> None:
    published, blobs = _publish(tmp_path, model=model)
    spec = published.spec
    adapter = adapter_from_spec(spec)
    net = adapter.build_model({"family": spec.model.family, **spec.model.config}, seed=0).eval()
    valid = blobs.get(spec.dataset.validation_hash)
    w = adapter.windows(valid)
    with torch.no_grad():
        full = net(past_values=w.inputs).prediction_outputs  # forecasts of all C + K input channels
        assert full.shape == (len(w), H, C + K)
        loss = adapter.loss(net, {"past_values": w.inputs, "future_values": w.future})
        assert float(loss) == pytest.approx(float(((full[..., :C] - w.future) ** 2).mean()), rel=1e-6)
        metric = adapter.metric(net, valid, batch_size=64, max_batches=4)
        assert metric == pytest.approx(mase(full[..., :C], w.future, w.scale), rel=1e-6)
        # the covariates are inputs: other covariate values give other target forecasts
        assert w.past_covariates is not None
        other = torch.cat([w.past, w.past_covariates.flip(0)], dim=-1)
        assert not torch.equal(adapter.forecast(net, other), adapter.forecast(net, w.inputs))


def test_a_normal_head_with_covariates_scores_the_targets_distribution(tmp_path: Path) -> None:
    published, blobs = _publish(tmp_path, model=NORMAL_MODEL)
    spec = published.spec
    adapter = adapter_from_spec(spec)
    net = adapter.build_model({"family": spec.model.family, **spec.model.config}, seed=0).eval()
    valid = blobs.get(spec.dataset.validation_hash)
    w = adapter.windows(valid)
    with torch.no_grad():
        out = net(past_values=w.inputs)
        mu, sigma = (p[..., :C] for p in out.prediction_outputs)
        d = net.distribution_output.distribution((mu, sigma), loc=out.loc[..., :C], scale=out.scale[..., :C])
        want = float((-d.log_prob(w.future)).mean())
        assert float(adapter.loss(net, {"past_values": w.inputs, "future_values": w.future})) == pytest.approx(
            want, rel=1e-6
        )
        assert adapter.forecast(net, w.inputs).shape == (len(w), H, C)
        quantile_loss = adapter.quantile_loss(net, valid, batch_size=64, max_batches=4)
    assert np.isfinite(quantile_loss) and quantile_loss > 0


@pytest.mark.parametrize("model", [TINY_MODEL, MIXER_MODEL], ids=["patchtst", "patchtsmixer"])
def test_inner_loop_with_covariates_replays_bit_for_bit(tmp_path: Path, model: dict[str, Any]) -> None:
    """Two runs of the real inner loop from one state and seed give identical checkpoints, and a
    segment replayed from a checkpoint lands on the next one (the referee's re-execution)."""
    from syncline.protocol.checkpoints import Checkpoint
    from syncline.run.agent_config import InnerOptimizerConfig
    from syncline.trainer.inner_loop import InnerLoop

    published, blobs = _publish(tmp_path, model=model)
    spec = published.spec
    adapter = adapter_from_spec(spec)
    assert adapter.num_covariates == K
    shards = [blobs.get(h) for h in spec.dataset.shard_hashes]
    cfg = InnerOptimizerConfig(lr=3e-3, inner_steps=6, batch_size=8)
    config = {"family": spec.model.family, **spec.model.config}

    def loop() -> InnerLoop:
        net = adapter.build_model(config, seed=0)
        return InnerLoop(adapter, net, ParameterLayout.from_state_dict(trained_parameters(net)), cfg)

    first = loop().run(published.initial_state, shards, seed=42, checkpoint_interval=3).checkpoints
    second = loop().run(published.initial_state, shards, seed=42, checkpoint_interval=3).checkpoints
    assert len(first) == 3 and first == second and first[0] != first[-1]
    referee = loop()
    start = Checkpoint.from_bytes(first[1], layout=published.initial_state.layout)
    assert referee.run_segment(start, shards, seed=42, start=3, stop=6) == first[2]


def test_the_export_describes_the_covariate_channels(tmp_path: Path) -> None:
    from syncline.demo.timeseries import check_export

    published, _ = _publish(tmp_path)
    spec = published.spec
    adapter = adapter_from_spec(spec)
    out = tmp_path / "model"
    adapter.build_model({"family": spec.model.family, **spec.model.config}, seed=0).save_pretrained(out)  # type: ignore[operator]
    write_export_files(out, spec)
    described = json.loads((out / EXPORT_FILE).read_text())
    assert described["covariates"] == ["rain", "wind"] and "covariate_loc" in described["series"][0]
    assert check_export(out) == [1, H, C]


def test_a_bf16_covariate_trainer_stays_within_the_fp32_referees_envelope(tmp_path: Path) -> None:
    """Channel attention over the target and its covariates keeps an honest bf16 segment, replayed
    in fp32, inside the default tolerance envelope; another learning rate falls outside."""
    from syncline.protocol.checkpoints import Checkpoint
    from syncline.protocol.spec import ToleranceModel
    from syncline.protocol.tolerance import compare
    from syncline.run.agent_config import InnerOptimizerConfig
    from syncline.trainer.inner_loop import InnerLoop

    published, blobs = _publish(tmp_path, model={**TINY_MODEL, "d_model": 32, "num_hidden_layers": 2})
    spec = published.spec
    assert spec.model.config["channel_attention"] is True
    adapter = adapter_from_spec(spec)
    shards = [blobs.get(h) for h in spec.dataset.shard_hashes]
    config = {"family": spec.model.family, **spec.model.config}
    layout = published.initial_state.layout

    def loop(lr: float, dtype: str = "fp32") -> InnerLoop:
        cfg = InnerOptimizerConfig(lr=lr, inner_steps=8, batch_size=16)
        return InnerLoop(adapter, adapter.build_model(config, seed=0), layout, cfg, dtype=dtype)

    def checkpoints(dtype: str, lr: float) -> tuple[Checkpoint, ...]:
        work = loop(lr, dtype).run(published.initial_state, shards, seed=9, checkpoint_interval=4)
        return tuple(Checkpoint.from_bytes(c, layout=layout) for c in work.checkpoints)

    honest, other_lr = checkpoints("bf16", 2e-3), checkpoints("fp32", 4e-3)
    referee = loop(2e-3)
    for s in (0, 1):
        replayed = Checkpoint.from_bytes(
            referee.run_segment(honest[s], shards, seed=9, start=4 * s, stop=4 * s + 4, dtype="fp32"), layout=layout
        )
        verdict = compare(honest[s], honest[s + 1], replayed, layout, ToleranceModel())
        assert verdict.within, verdict
    replayed = Checkpoint.from_bytes(
        referee.run_segment(honest[0], shards, seed=9, start=0, stop=4, dtype="fp32"), layout=layout
    )
    assert not compare(honest[0], other_lr[1], replayed, layout, ToleranceModel()).within
