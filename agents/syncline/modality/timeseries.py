"""Time-series modality: forecasting with a ``transformers`` PatchTST or PatchTSMixer built from a
config (nothing is downloaded), on shards of fixed-size windows; a point head (``loss`` ``mse``,
the default) or a probabilistic one (``loss`` ``nll`` with ``distribution_output`` ``normal``).

A **window shard** (docs/protocol.md §12.7) is a canonical ``safetensors`` file of three float32
tensors: ``past`` ``[N, context_length, C]`` (the model's input), ``future``
``[N, prediction_length, C]`` (what it forecasts) and ``scale`` ``[N, C]`` (the seasonal-naive
in-sample error of each window's series and channel: the mean absolute ``season_length``-step
difference of everything before the window's forecast start, gluonts' ``seasonal_error``). A task
with ``K`` past covariates (``metadata.covariates``, their names) adds a fourth tensor,
``past_covariates`` ``[N, context_length, K]``: the covariates' values over the window's context,
which the model reads as ``K`` extra input channels after the ``C`` target channels
(``num_input_channels`` ``C + K``) and mixes into the targets' forecasts (:data:`CHANNEL_MIXING`:
both families are channel-independent by default, which would ignore them); the loss and every
metric read the target channels only. The
sponsor builds the windows (``syncline.sponsor.timeseries_task``) from series it has already
scaled, so every party reads the same floats and computes nothing but the model.

The loss is the model's own training loss (the forecast's mean squared error in the shard's units,
or a probabilistic head's negative log-likelihood); the metric is MASE of the point forecast (a
probabilistic head's: its mean), the mean absolute error divided by ``scale``, through gluonts'
``MASE`` (``gluonts.ev.metrics``): below 1, the model beats the seasonal-naive forecast's in-sample
error. :meth:`TimeSeriesAdapter.quantile_loss` scores a probabilistic head's quantiles
(gluonts' ``AverageMeanScaledQuantileLoss``, the same scale).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncline.errors import SpecError
from syncline.protocol.enums import Modality
from syncline.protocol.spec import TrainingTaskSpec

FAMILIES: dict[str, str] = {"patchtst": "PatchTSTForPrediction", "patchtsmixer": "PatchTSMixerForPrediction"}
"""Model families (``model.family``) and the ``transformers`` class each builds."""
FAMILY_NAMES = ", ".join(FAMILIES)
SHARD_TENSORS = ("future", "past", "scale")
"""The tensors of a window shard, in the order of their bytes (safetensors orders them by name)."""
COVARIATE_TENSOR = "past_covariates"
"""The fourth tensor of a task with covariates: ``[N, context_length, K]`` (between ``past`` and
``scale`` in the bytes)."""
CHANNEL_MIXING: dict[str, tuple[str, Any]] = {
    "patchtst": ("channel_attention", True),
    "patchtsmixer": ("mode", "mix_channel"),
}
"""The config setting of each family that lets a channel's forecast read the other channels: a
task with covariates needs it (the sponsor tooling sets it unless given)."""
MAX_COVARIATES = 32
MAX_COVARIATE_NAME = 64
"""Bounds of ``metadata.covariates``: how many, and the length of each name."""
SCALINGS = ("seasonal", "standard", "none")
"""``metadata.scaling``: how the sponsor scaled each series before cutting windows (§12.7)."""
MAX_SHARD_BYTES = 256 << 20
"""The largest window shard a trainer or witness reads."""
MAX_CONTEXT_LENGTH = 8192
MAX_PREDICTION_LENGTH = 2048
MAX_CHANNELS = 256
MAX_SEASON_LENGTH = 8760
"""Bounds of ``context_length``, ``prediction_length``, ``num_channels`` and ``season_length``."""
FROZEN_SUFFIX = "k_proj.bias"
"""Parameters not trained (``requires_grad`` false, so not in the state): the attention key
projections' biases. Adding ``b`` to every key adds ``q . b`` to all of a query's logits, which the
softmax cancels, so their gradient is exactly 0 and only rounding noise reaches them; AdamW
normalizes that noise into steps of about ``lr``, which differ between a bf16 trainer and an
fp32 referee by far more than the tolerance envelope (measured: a relative L2 of 4400 on this
tensor alone in one 4-step segment). Frozen, they keep their initial value and change nothing."""
HEADS: dict[str, tuple[str, str | None]] = {"point": ("mse", None), "normal": ("nll", "normal")}
"""Forecast heads: ``model.config`` ``loss`` and ``distribution_output`` of each (the point head
ignores ``distribution_output``). A normal head's quantiles are exact (``icdf``), so every party
computes them without sampling."""
QUANTILE_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The quantiles :meth:`TimeSeriesAdapter.quantile_loss` scores."""
EXPORT_FILE = "syncline_timeseries.json"
"""What :func:`write_export_files` writes beside the model: how to feed it and read its forecasts."""


class WindowShardError(ValueError):
    """A window shard is malformed: one line that says what is wrong."""


@dataclass(frozen=True)
class Windows:
    """Forecasting windows: ``past`` [N, L, C], ``future`` [N, H, C], ``scale`` [N, C], and with
    covariates ``past_covariates`` [N, L, K] (else ``None``), float32."""

    past: torch.Tensor
    future: torch.Tensor
    scale: torch.Tensor
    past_covariates: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.past.shape[0])

    @property
    def inputs(self) -> torch.Tensor:
        """The model's ``past_values`` [N, L, C + K]: the target channels, then the covariates."""
        if self.past_covariates is None:
            return self.past
        return torch.cat([self.past, self.past_covariates], dim=-1)

    def select(self, index: torch.Tensor) -> Windows:
        covariates = None if self.past_covariates is None else self.past_covariates[index]
        return Windows(self.past[index], self.future[index], self.scale[index], covariates)

    @staticmethod
    def concat(parts: Sequence[Windows]) -> Windows:
        with_covariates = {p.past_covariates is not None for p in parts}
        if len(with_covariates) != 1:
            raise ValueError("windows with and without covariates do not concatenate")
        return Windows(
            torch.cat([p.past for p in parts]),
            torch.cat([p.future for p in parts]),
            torch.cat([p.scale for p in parts]),
            torch.cat([p.past_covariates for p in parts if p.past_covariates is not None])
            if with_covariates.pop()
            else None,
        )


def encode_windows(windows: Windows) -> bytes:
    """The canonical bytes of a window shard (``safetensors``, no metadata, little-endian float32)."""
    from safetensors.torch import save

    tensors = {
        "past": windows.past.detach().to(torch.float32).contiguous(),
        "future": windows.future.detach().to(torch.float32).contiguous(),
        "scale": windows.scale.detach().to(torch.float32).contiguous(),
    }
    if windows.past_covariates is not None:
        tensors[COVARIATE_TENSOR] = windows.past_covariates.detach().to(torch.float32).contiguous()
    data: bytes = save(tensors)
    return data


def decode_windows(
    data: bytes,
    *,
    context_length: int,
    prediction_length: int,
    num_channels: int,
    num_covariates: int = 0,
    max_bytes: int = MAX_SHARD_BYTES,
) -> Windows:
    """Parse a window shard (hostile bytes): its size bounded by ``max_bytes``, exactly the tensors
    :data:`SHARD_TENSORS` (and :data:`COVARIATE_TENSOR` when ``num_covariates`` > 0) as float32 of
    the task's shapes, at least one window, every value finite,
    every scale positive, and the bytes canonical (what :func:`encode_windows` writes for them)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    if len(data) > max_bytes:
        raise WindowShardError(f"window shard of {len(data):,} bytes exceeds the {max_bytes:,}-byte bound")
    if len(data) < 8:
        raise WindowShardError("window shard is shorter than a safetensors header")
    header_len = int.from_bytes(data[:8], "little")
    if header_len > len(data) - 8:
        raise WindowShardError(f"window shard header of {header_len:,} bytes overruns the {len(data):,}-byte shard")
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise WindowShardError(f"window shard is not a safetensors file: {' '.join(str(exc).split())[:200]}") from None
    names = sorted((*SHARD_TENSORS, COVARIATE_TENSOR) if num_covariates else SHARD_TENSORS)
    if sorted(tensors) != names:
        raise WindowShardError(f"window shard holds tensors {sorted(tensors)}; expected {names}")
    for name, t in tensors.items():
        if t.dtype != torch.float32:
            raise WindowShardError(f"window shard tensor {name!r} is {t.dtype}; expected float32")
    past, future, scale = tensors["past"], tensors["future"], tensors["scale"]
    n = int(past.shape[0]) if past.dim() == 3 else -1
    expected = {
        "past": (n, context_length, num_channels),
        "future": (n, prediction_length, num_channels),
        "scale": (n, num_channels),
    }
    if num_covariates:
        expected[COVARIATE_TENSOR] = (n, context_length, num_covariates)
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape or n < 1:
            raise WindowShardError(
                f"window shard tensor {name!r} has shape {list(tensors[name].shape)}; expected "
                f"[N >= 1, {', '.join(str(d) for d in shape[1:])}] with the task's context_length "
                f"{context_length}, prediction_length {prediction_length}, {num_channels} channels"
                + (f" and {num_covariates} covariates" if num_covariates else "")
            )
    for name, t in tensors.items():
        if not bool(torch.isfinite(t).all()):
            raise WindowShardError(f"window shard tensor {name!r} holds NaN or Inf")
    if not bool((scale > 0).all()):
        raise WindowShardError("window shard tensor 'scale' holds a value <= 0 (a MASE scale must be positive)")
    windows = Windows(past, future, scale, tensors.get(COVARIATE_TENSOR))
    if encode_windows(windows) != data:
        raise WindowShardError("window shard is not canonical (safetensors metadata, padding or layout differs)")
    return windows


def seasonal_naive(past: torch.Tensor, prediction_length: int, season_length: int) -> torch.Tensor:
    """The seasonal-naive forecast of windows ``past`` [N, L, C]: the value one season earlier,
    repeated (``season_length`` 1: the last value), as gluonts' ``SeasonalNaivePredictor``."""
    m = season_length if season_length <= past.shape[1] else 1
    last = past[:, -m:, :]
    reps = -(-prediction_length // m)
    return last.repeat(1, reps, 1)[:, :prediction_length, :]


def mase(forecast: torch.Tensor, future: torch.Tensor, scale: torch.Tensor) -> float:
    """MASE of point forecasts [N, H, C] against ``future`` [N, H, C], each window and channel's
    absolute error divided by its ``scale`` [N, C] and averaged over every value, computed by
    gluonts' ``MASE`` (``gluonts.ev.metrics``, its median forecast the point forecast) on float32
    numpy arrays, one item per window and channel."""
    from gluonts.ev.metrics import MASE  # type: ignore[import-untyped]

    n, h, c = future.shape
    label = future.permute(0, 2, 1).reshape(n * c, h).numpy()
    point = forecast.detach().to(torch.float32).permute(0, 2, 1).reshape(n * c, h).numpy()
    scales = scale.reshape(n * c, 1).numpy()
    metric = MASE(forecast_type="0.5")(axis=None)
    metric.update({"label": label, "0.5": point, "seasonal_error": scales})
    return float(metric.get())


def model_config(config: Mapping[str, Any]) -> tuple[str, Any]:
    """The family (``patchtst`` or ``patchtsmixer``) and ``transformers`` config of a spec's model
    (``{family, **architecture}``); one-line ``SpecError`` for another family, a config
    ``transformers`` refuses, or a head these agents do not train (:data:`HEADS`)."""
    from transformers import AutoConfig

    cfg = dict(config)
    family = str(cfg.pop("family", cfg.pop("model_type", "patchtst")))
    if family not in FAMILIES:
        raise SpecError(f"model family {family!r} is not a time-series family these agents train ({FAMILY_NAMES})")
    try:
        hf_config = AutoConfig.for_model(family, **cfg)
    except (ValueError, TypeError, KeyError) as exc:
        raise SpecError(f"model config of family {family!r} is invalid: {' '.join(str(exc).split())[:300]}") from None
    head_of(hf_config)
    return family, hf_config


def head_of(hf_config: Any) -> str:
    """The :data:`HEADS` entry a model config describes; a one-line ``SpecError`` for another."""
    loss = getattr(hf_config, "loss", "mse")
    distribution = getattr(hf_config, "distribution_output", None)
    for head, (head_loss, head_distribution) in HEADS.items():
        if loss == head_loss and head_distribution in (None, distribution):
            return head
    raise SpecError(
        f"model.config loss {loss!r} with distribution_output {distribution!r}: these agents train a point "
        "head (loss 'mse') or a normal one (loss 'nll', distribution_output 'normal')"
    )


def scaled_quantile_loss(quantiles: Mapping[float, torch.Tensor], future: torch.Tensor, scale: torch.Tensor) -> float:
    """gluonts' ``AverageMeanScaledQuantileLoss``: for every level ``q`` of ``quantiles`` (forecast
    quantiles [N, H, C]) the mean over windows, channels and steps of ``2 |(y - f_q)(1[f_q >= y] - q)|``
    divided by ``scale`` [N, C], averaged over the levels (at ``q`` 0.5 alone: MASE)."""
    from gluonts.ev.metrics import AverageMeanScaledQuantileLoss  # type: ignore[import-untyped]

    n, h, c = future.shape

    def items(t: torch.Tensor) -> np.ndarray:
        flat: np.ndarray = t.detach().to(torch.float32).permute(0, 2, 1).reshape(n * c, h).numpy()
        return flat

    data = {"label": items(future), "seasonal_error": scale.reshape(n * c, 1).numpy()}
    data.update({str(q): items(f) for q, f in quantiles.items()})
    metric = AverageMeanScaledQuantileLoss(quantile_levels=tuple(quantiles))(axis=None)
    metric.update(data)
    return float(metric.get())


class TimeSeriesAdapter:
    """Forecasting ``prediction_length`` steps of ``num_channels`` channels from
    ``context_length`` past steps (and ``num_covariates`` past covariates, extra input channels
    whose forecasts nothing reads) with a PatchTST or PatchTSMixer built from a config.

    Training batches are windows drawn uniformly (with replacement) from the assigned shards by a
    generator seeded with ``seed``; evaluation and the metric read evenly spaced validation windows
    in a fixed order, with the model in eval mode, so every party computes the same floats.
    """

    name = Modality.TIME_SERIES.name.lower()
    metric_name = "mase"
    metric_higher_is_better = False

    def __init__(
        self,
        *,
        context_length: int,
        prediction_length: int,
        num_channels: int = 1,
        season_length: int = 1,
        num_covariates: int = 0,
    ):
        for key, value, low, bound in (
            ("context_length", context_length, 1, MAX_CONTEXT_LENGTH),
            ("prediction_length", prediction_length, 1, MAX_PREDICTION_LENGTH),
            ("num_channels", num_channels, 1, MAX_CHANNELS),
            ("season_length", season_length, 1, MAX_SEASON_LENGTH),
            ("num_covariates", num_covariates, 0, MAX_COVARIATES),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= bound:
                raise SpecError(f"{key} {value!r} must be an integer in [{low}, {bound}]")
        self.context_length = context_length
        self.prediction_length = prediction_length
        self.num_channels = num_channels
        self.season_length = season_length
        self.num_covariates = num_covariates

    # ------------------------------------------------------------------ model

    def check_config(self, config: Mapping[str, Any]) -> Any:
        """The ``transformers`` config of ``config``, refused unless its context and prediction
        lengths and input channels (targets and covariates) are this task's, and, with covariates,
        unless it mixes channels (:data:`CHANNEL_MIXING`)."""
        family, hf_config = model_config(config)
        key, mixing = CHANNEL_MIXING[family]
        if self.num_covariates and getattr(hf_config, key, None) != mixing:
            raise SpecError(
                f"model.config.{key} {getattr(hf_config, key, None)!r}: a task with covariates needs {mixing!r} "
                f"(a {family} forecasts each channel from that channel alone otherwise)"
            )
        for key, want in (
            ("context_length", self.context_length),
            ("prediction_length", self.prediction_length),
            ("num_input_channels", self.num_channels + self.num_covariates),
        ):
            if getattr(hf_config, key, None) != want:
                raise SpecError(f"model.config.{key} {getattr(hf_config, key, None)!r} differs from the task's {want}")
        indices = getattr(hf_config, "prediction_channel_indices", None)
        if indices is not None and list(indices) != list(range(self.num_channels)):
            raise SpecError(
                f"model.config.prediction_channel_indices {indices!r}: the forecast channels are the first "
                f"{self.num_channels} (the targets); leave it out"
            )
        return hf_config

    def build_model(self, config: Mapping[str, Any], *, seed: int) -> torch.nn.Module:
        import transformers

        family, _ = model_config(config)
        hf_config = self.check_config(config)
        torch.manual_seed(seed)
        model: torch.nn.Module = getattr(transformers, FAMILIES[family])(hf_config)
        for name, p in model.named_parameters():
            if name.endswith(FROZEN_SUFFIX):
                p.requires_grad_(False)
        buffers = [name for name, _ in model.named_buffers()]
        if buffers:  # the state holds parameters only: running statistics would differ per party
            raise SpecError(
                f"the model keeps buffers the state does not carry ({buffers[0]}): use layer norm "
                "(PatchTST norm_type 'layernorm', PatchTSMixer norm_mlp 'LayerNorm')"
            )
        return model

    # ------------------------------------------------------------------ data

    def windows(self, shard: bytes) -> Windows:
        """The windows of one shard, checked against this task's shapes."""
        return decode_windows(
            shard,
            context_length=self.context_length,
            prediction_length=self.prediction_length,
            num_channels=self.num_channels,
            num_covariates=self.num_covariates,
        )

    def batches(
        self, shards: Sequence[bytes], *, batch_size: int, seed: int, steps: int
    ) -> Iterator[dict[str, torch.Tensor]]:
        pool = Windows.concat([self.windows(s) for s in shards])
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            pick = torch.randint(0, len(pool), (batch_size,), generator=gen)
            yield {"past_values": pool.inputs[pick], "future_values": pool.future[pick]}

    def loss(self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The model's own training loss; with covariates the same loss on the target channels
        only (the mean squared error of their forecasts, or the mean negative log-likelihood of
        their distribution), as PatchTSMixer computes it with ``prediction_channel_indices``."""
        if not self.num_covariates:
            out = model(past_values=batch["past_values"], future_values=batch["future_values"])
            loss: torch.Tensor = out.loss
            return loss
        out = model(past_values=batch["past_values"])
        future = batch["future_values"]
        if head_of(model.config) == "point":
            point: torch.Tensor = out.prediction_outputs[..., : self.num_channels]
            return torch.nn.functional.mse_loss(point, future)
        nll: torch.Tensor = -self._distribution(model, out).log_prob(future)
        return nll.mean()

    def forecast(self, model: torch.nn.Module, past: torch.Tensor) -> torch.Tensor:
        """Point forecasts [N, prediction_length, C] of the target channels from windows' model
        inputs ``past`` [N, context_length, C + K]: a point head's output, a probabilistic head's
        mean."""
        out = model(past_values=past)
        if head_of(model.config) == "point":
            point: torch.Tensor = out.prediction_outputs[..., : self.num_channels]
            return point
        mean: torch.Tensor = self._distribution(model, out).mean
        return mean

    def _distribution(self, model: torch.nn.Module, out: Any) -> Any:
        """The forecast distribution of the target channels (the first ``num_channels``)."""
        c = self.num_channels
        params = out.prediction_outputs
        if params[0].shape[-1] != c:
            params = tuple(p[..., :c] for p in params)
        loc, scale = out.loc[..., :c], out.scale[..., :c]
        return model.distribution_output.distribution(params, loc=loc, scale=scale)  # type: ignore[operator,union-attr]

    def forecast_quantiles(
        self, model: torch.nn.Module, past: torch.Tensor, levels: Sequence[float] = QUANTILE_LEVELS
    ) -> dict[float, torch.Tensor]:
        """Forecast quantiles [N, prediction_length, C] of the target channels from windows' model
        inputs ``past`` per level: a normal head's exact quantiles
        (``loc + scale * icdf``), a point head's point forecast at every level."""
        if head_of(model.config) == "point":
            point = self.forecast(model, past)
            return {q: point for q in levels}
        d = self._distribution(model, model(past_values=past))
        base = d.base_dist  # Normal, or Independent(Normal) over the channels
        base = base.base_dist if isinstance(base, torch.distributions.Independent) else base
        return {q: base.icdf(torch.full_like(base.mean, q)) * d.scale + d.loc for q in levels}

    def _validation(self, shard: bytes, *, batch_size: int, max_batches: int) -> Windows:
        """Up to ``batch_size * max_batches`` evenly spaced windows of the validation shard, in order."""
        windows = self.windows(shard)
        wanted = min(len(windows), batch_size * max_batches)
        return windows.select(torch.linspace(0, len(windows) - 1, wanted).round().long())

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        windows = self._validation(shard, batch_size=batch_size, max_batches=max_batches)
        was_training = model.training
        model.eval()
        total = 0.0
        for i in range(0, len(windows), batch_size):
            part = slice(i, i + batch_size)
            n = len(windows.past[part])
            total += (
                float(self.loss(model, {"past_values": windows.inputs[part], "future_values": windows.future[part]}))
                * n
            )
        model.train(was_training)
        return total / len(windows)

    @torch.no_grad()
    def metric(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """MASE (:func:`mase`) of the model's forecasts of the validation windows :meth:`evaluate`
        reads: the target channels only, never a covariate."""
        windows = self._validation(shard, batch_size=batch_size, max_batches=max_batches)
        was_training = model.training
        model.eval()
        forecasts = torch.cat(
            [self.forecast(model, windows.inputs[i : i + batch_size]) for i in range(0, len(windows), batch_size)]
        )
        model.train(was_training)
        return mase(forecasts, windows.future, windows.scale)

    @torch.no_grad()
    def quantile_loss(
        self,
        model: torch.nn.Module,
        shard: bytes,
        *,
        batch_size: int,
        max_batches: int,
        levels: Sequence[float] = QUANTILE_LEVELS,
    ) -> float:
        """:func:`scaled_quantile_loss` of the model's forecast quantiles of the validation windows
        :meth:`metric` reads (not voted: a vote carries the metric alone)."""
        windows = self._validation(shard, batch_size=batch_size, max_batches=max_batches)
        was_training = model.training
        model.eval()
        parts = [
            self.forecast_quantiles(model, windows.inputs[i : i + batch_size], levels)
            for i in range(0, len(windows), batch_size)
        ]
        model.train(was_training)
        quantiles = {q: torch.cat([p[q] for p in parts]) for q in levels}
        return scaled_quantile_loss(quantiles, windows.future, windows.scale)


def _int_key(meta: Mapping[str, Any], key: str) -> int:
    if key not in meta:
        raise SpecError(f"spec metadata needs {key} (a time-series task, docs/protocol.md §12.7)")
    value = meta[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"spec metadata {key} {value!r} must be an integer")
    return value


def covariate_names(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """``metadata.covariates`` of a time-series task: a list of at most :data:`MAX_COVARIATES`
    distinct non-empty names of at most :data:`MAX_COVARIATE_NAME` characters (absent: none)."""
    names = meta.get("covariates", [])
    if not isinstance(names, list | tuple):
        raise SpecError(f"spec metadata covariates must be a list of names, not {type(names).__name__}")
    if len(names) > MAX_COVARIATES:
        raise SpecError(f"spec metadata covariates names {len(names)} covariates; the bound is {MAX_COVARIATES}")
    for name in names:
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_COVARIATE_NAME:
            raise SpecError(
                f"spec metadata covariates: {str(name)[:80]!r} is not a name of 1 to {MAX_COVARIATE_NAME} characters"
            )
    if len(set(names)) != len(names):
        raise SpecError("spec metadata covariates names a covariate twice")
    return tuple(names)


def adapter_from_spec(spec: TrainingTaskSpec) -> TimeSeriesAdapter:
    """The adapter of a time-series task: ``metadata`` ``context_length``, ``prediction_length``,
    ``num_channels`` (default 1), ``season_length``, ``scaling`` and ``covariates`` (default none),
    checked against the model's config; a one-line ``SpecError`` on anything missing or malformed."""
    meta = dict(spec.metadata)
    scaling = meta.get("scaling", "none")
    if scaling not in SCALINGS:
        raise SpecError(f"spec metadata scaling {scaling!r} is not one of {', '.join(SCALINGS)}")
    adapter = TimeSeriesAdapter(
        context_length=_int_key(meta, "context_length"),
        prediction_length=_int_key(meta, "prediction_length"),
        num_channels=_int_key(meta, "num_channels") if "num_channels" in meta else 1,
        season_length=_int_key(meta, "season_length"),
        num_covariates=len(covariate_names(meta)),
    )
    adapter.check_config({"family": spec.model.family, **dict(spec.model.config)})
    return adapter


def export_description(spec: TrainingTaskSpec) -> dict[str, Any]:
    """What a user needs beside the weights: the model class, the window sizes, the season, the
    frequency and the per-series scaling the sponsor applied (to map forecasts back to units)."""
    meta = dict(spec.metadata)
    described: dict[str, Any] = {
        "modality": Modality.TIME_SERIES.name.lower(),
        "model_class": FAMILIES.get(spec.model.family, spec.model.family),
        "head": "normal" if spec.model.config.get("loss") == "nll" else "point",
        "context_length": meta.get("context_length"),
        "prediction_length": meta.get("prediction_length"),
        "num_channels": meta.get("num_channels", 1),
        "season_length": meta.get("season_length"),
        "freq": meta.get("freq"),
        "scaling": meta.get("scaling", "none"),
        "series": meta.get("series", []),
        "usage": (
            "model(past_values=x) forecasts prediction_length steps from x of shape [batch, context_length, "
            "num_channels]: a point head's prediction_outputs are the forecast, a normal head's are the "
            "distribution's parameters (model.distribution_output.distribution(out.prediction_outputs, "
            "loc=out.loc, scale=out.scale)); unless scaling is 'none', feed (y - loc) / scale of a series "
            "and map forecasts back with f * scale + loc (its loc and scale in 'series')"
        ),
    }
    covariates = list(meta.get("covariates", []))
    if covariates:
        described["covariates"] = covariates
        described["usage"] += (
            "; with covariates x holds num_channels + len(covariates) channels: the targets, then the "
            "covariates in the order of 'covariates' (each scaled by its series' covariate_loc and "
            "covariate_scale), and only the first num_channels forecast channels are forecasts"
        )
    return described


def write_export_files(out_dir: Path, spec: TrainingTaskSpec) -> None:
    """Write :data:`EXPORT_FILE` (:func:`export_description`) into an exported model's directory."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / EXPORT_FILE).write_text(json.dumps(export_description(spec), indent=2) + "\n")


def series_scaling(values: np.ndarray, scaling: str, season_length: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(loc, scale)`` [C] (float64) of a series' values [T, C] under ``scaling``: ``seasonal`` is
    the mean and the seasonal-naive in-sample error (gluonts' ``seasonal_error``, the MASE
    denominator, so the squared-error loss weighs every series as MASE does); ``standard`` the mean
    and the population standard deviation; ``none`` (0, 1). A scale of 0 (a constant series) is 1."""
    from gluonts.ev.ts_stats import seasonal_error  # type: ignore[import-untyped]

    if scaling not in SCALINGS:
        raise SpecError(f"scaling {scaling!r} is not one of {', '.join(SCALINGS)}")
    x = values.astype(np.float64)
    c = x.shape[1]
    if scaling == "none":
        return np.zeros(c), np.ones(c)
    loc = x.mean(axis=0)
    spread = seasonal_error(x, season_length, time_axis=0)[0] if scaling == "seasonal" else x.std(axis=0)
    return loc, np.where(spread > 0, spread, 1.0)
