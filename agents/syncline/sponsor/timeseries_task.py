"""The sponsor side of a time-series task: read series, cut them into window shards and a held-out
validation shard, build the initial state, publish everything (docs/protocol.md §12.7).

Series come from a :class:`SeriesSource`:

``statsmodels``
    Data sets packaged with ``statsmodels`` (no download), each one or more regular series:
    ``co2`` (Mauna Loa CO2, weekly, averaged per month and its missing months interpolated),
    ``elnino`` (Pacific sea surface temperature, monthly), ``sunspots`` (yearly), ``macrodata``
    (every column of US quarterly macroeconomic data). The data sets of one task share a frequency.
    The default, ``co2`` and ``elnino``, gives two monthly series with a clear yearly season.
``csv`` / ``parquet``
    Bring your own: a file of rows ``(timestamp, id, value...)`` (column names configurable; one
    or more value columns, the task's channels). Every id is a series; its rows are sorted by
    timestamp and put on a regular grid of the source's frequency (given, or inferred from the
    first series); missing steps are linearly interpolated, up to :data:`MAX_GAP_FRACTION` of a
    series. ``covariates`` names further numeric columns read as past covariates: the model sees
    their values over every window's context as extra input channels, never forecasts them, and
    the metric ignores them. A covariate cell that is empty, not a number, NaN or infinite is
    refused (like a value cell: the error names the row and the column); only whole missing
    timestamps are interpolated. Packaged data sets have no covariates.

Windows (:func:`build_windows`): every series is scaled (``metadata.scaling``: ``seasonal``, the
mean and the seasonal-naive error of its training part, ``standard``, the mean and standard
deviation, or ``none``), each covariate by the same rule over the same part; its last
``prediction_length + (validation_windows - 1) * validation_stride`` steps are held out, and the
validation shard holds ``validation_windows`` forecasts inside that tail (gluonts' ``split`` and
``generate_instances``); training windows forecast steps before it only, every
``train_stride`` steps, shuffled from the seed and dealt into ``shard_count`` shards so every
trainer sees every series.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from eth_account.signers.local import LocalAccount

from syncline.blobstore import BlobStore
from syncline.errors import SpecError
from syncline.modality.lora import trained_parameters
from syncline.modality.timeseries import (
    CHANNEL_MIXING,
    FAMILIES,
    FAMILY_NAMES,
    MAX_COVARIATE_NAME,
    MAX_COVARIATES,
    SCALINGS,
    TimeSeriesAdapter,
    Windows,
    encode_windows,
    series_scaling,
)
from syncline.protocol.enums import Modality
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.sponsor.data_sources import DataSourceError, printable
from syncline.sponsor.task_builder import PublishedTask, publish_initial_state

STATSMODELS_DATASETS = ("co2", "elnino", "sunspots", "macrodata")
DEFAULT_DATASETS = ("co2", "elnino")
FILE_TYPES = ("csv", "parquet")
MAX_FILE_BYTES = 256 << 20
MAX_SERIES = 256
"""A task's series (``metadata.series`` lists each one's scaling)."""
MAX_SERIES_LENGTH = 1_000_000
MAX_GAP_FRACTION = 0.1
"""The largest share of a bring-your-own series' grid steps that may be missing (interpolated)."""

DEFAULT_TIMESERIES_MODEL: dict[str, Any] = {
    "family": "patchtst",
    "patch_length": 12,
    "patch_stride": 12,
    "d_model": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "ffn_dim": 64,
    "norm_type": "layernorm",
}
"""A small PatchTST (layer norm: the state carries no running statistics); the publisher fills
in ``context_length``, ``prediction_length`` and ``num_input_channels``."""


@dataclass(frozen=True)
class Series:
    """One regular series: ``values`` [T, C] (float64), its first timestamp and frequency, and its
    past covariates ``covariates`` [T, K] (float64; ``None`` without)."""

    id: str
    values: np.ndarray
    start: str
    freq: str
    covariates: np.ndarray | None = None


@dataclass(frozen=True)
class SeriesSource:
    """Where a time-series task's series come from (module docstring)."""

    type: str = "statsmodels"
    datasets: tuple[str, ...] = DEFAULT_DATASETS
    path: str = ""
    timestamp_column: str = "timestamp"
    id_column: str = "id"
    value_columns: tuple[str, ...] = ("value",)
    freq: str | None = None
    covariates: tuple[str, ...] = ()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SeriesSource:
        known = {"type", "datasets", "path", "timestamp_column", "id_column", "value_columns", "freq", "covariates"}
        extra = sorted(set(data) - known)
        if extra:
            raise DataSourceError(f"series source: unknown field {extra[0]!r} (fields: {', '.join(sorted(known))})")
        kind = str(data.get("type", "statsmodels"))
        if kind not in ("statsmodels", *FILE_TYPES):
            raise DataSourceError(f"series source type {kind!r} is not one of statsmodels, {', '.join(FILE_TYPES)}")
        values = data.get("value_columns", ("value",))
        covariates = data.get("covariates", ())
        covariates = (covariates,) if isinstance(covariates, str) else tuple(str(c) for c in covariates)
        if covariates and kind == "statsmodels":
            raise DataSourceError("series source statsmodels has no covariates: name them in a csv or parquet source")
        if len(covariates) > MAX_COVARIATES:
            raise DataSourceError(f"series source names {len(covariates)} covariates; the bound is {MAX_COVARIATES}")
        if any(not 1 <= len(c) <= MAX_COVARIATE_NAME for c in covariates) or len(set(covariates)) != len(covariates):
            raise DataSourceError(
                f"series source covariates must be distinct column names of 1 to {MAX_COVARIATE_NAME} characters"
            )
        return cls(
            type=kind,
            datasets=tuple(str(d) for d in data.get("datasets", DEFAULT_DATASETS)),
            path=str(data.get("path", "")),
            timestamp_column=str(data.get("timestamp_column", "timestamp")),
            id_column=str(data.get("id_column", "id")),
            value_columns=(values,) if isinstance(values, str) else tuple(str(v) for v in values),
            freq=None if data.get("freq") is None else str(data["freq"]),
            covariates=covariates,
        )


# ---------------------------------------------------------------------- reading series


def _statsmodels_series(name: str) -> list[Series]:
    import pandas as pd  # type: ignore[import-untyped]
    import statsmodels.datasets as sd  # type: ignore[import-untyped]

    if name == "co2":
        frame = sd.co2.load_pandas().data
        monthly = frame["co2"].resample("MS").mean().interpolate(method="linear", limit_direction="both")
        return [Series("co2", monthly.to_numpy()[:, None], str(monthly.index[0].date()), "MS")]
    if name == "elnino":
        frame = sd.elnino.load_pandas().data
        values = frame.drop(columns=["YEAR"]).to_numpy(dtype=np.float64).reshape(-1)
        return [Series("elnino", values[:, None], f"{int(frame['YEAR'].iloc[0])}-01-01", "MS")]
    if name == "sunspots":
        frame = sd.sunspots.load_pandas().data
        values = frame["SUNACTIVITY"].to_numpy(dtype=np.float64)
        return [Series("sunspots", values[:, None], f"{int(frame['YEAR'].iloc[0])}-01-01", "YS")]
    if name == "macrodata":
        frame = sd.macrodata.load_pandas().data
        start = str(
            pd.Period(
                year=int(frame["year"].iloc[0]), quarter=int(frame["quarter"].iloc[0]), freq="Q"
            ).start_time.date()
        )
        columns = [c for c in frame.columns if c not in ("year", "quarter")]
        return [Series(f"macrodata/{c}", frame[c].to_numpy(dtype=np.float64)[:, None], start, "QS") for c in columns]
    raise DataSourceError(f"statsmodels data set {name!r} is not one of {', '.join(STATSMODELS_DATASETS)}")


def _read_frame(source: SeriesSource) -> tuple[Any, Callable[[int], str]]:
    """The table of a csv or parquet source, and where its row ``i`` (from 0) is for a message: the
    file's name and, for a CSV, the line a text editor shows (header line 1, blank lines counted)."""
    import pandas as pd  # type: ignore[import-untyped]

    path = Path(source.path)
    if not path.is_file():
        raise DataSourceError(f"series file {str(path)!r} does not exist or is not a file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise DataSourceError(f"series file {str(path)!r} is {size:,} bytes; the bound is {MAX_FILE_BYTES:,}")
    data = path.read_bytes()
    try:
        frame = pd.read_csv(io.BytesIO(data)) if source.type == "csv" else pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pandas and pyarrow raise many kinds on undecodable input
        raise DataSourceError(
            f"series file {str(path)!r} is not a readable {source.type}: {' '.join(str(exc).split())[:200]}"
        ) from None
    name = printable(path.name)  # the name only: an API message never shows the server's directories
    lines = _csv_record_lines(data) if source.type == "csv" else None

    def where(row: int) -> str:
        if lines is not None and row + 1 < len(lines):
            return f"{name} line {lines[row + 1]}"
        return f"{name} row {row + 1}"

    return frame, where


def _csv_record_lines(data: bytes) -> list[int] | None:
    """The line (from 1) each CSV record starts on, the header's first; blank lines are skipped as
    pandas skips them, but counted. None when the csv module cannot split the file."""
    starts: list[int] = []
    previous = 0
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8-sig", errors="replace"), newline=""))
        for record in reader:
            if record:
                starts.append(previous + 1)
            previous = reader.line_num
    except csv.Error:
        return None
    return starts


def frame_series(frame: Any, source: SeriesSource, where: Callable[[int], str] | None = None) -> list[Series]:
    """The series of a ``(timestamp, id, value...)`` table (module docstring); ``where(i)`` names
    row ``i`` (from 0) in messages (default ``series table row i+1``)."""
    import pandas as pd  # type: ignore[import-untyped]

    numeric = [*source.value_columns, *source.covariates]
    columns = [source.timestamp_column, source.id_column, *numeric]
    if len(set(columns)) != len(columns):
        raise DataSourceError("series table: a column is named twice among timestamp, id, values and covariates")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataSourceError(
            f"series table lacks column {missing[0]!r} (columns: {', '.join(map(str, frame.columns))})"
        )
    if len(frame) == 0:
        raise DataSourceError("series table has no rows")
    try:
        stamps = pd.to_datetime(frame[source.timestamp_column])
    except (ValueError, TypeError) as exc:
        raise DataSourceError(
            f"column {source.timestamp_column!r}: not timestamps ({' '.join(str(exc).split())[:120]})"
        ) from None
    values = frame[numeric].apply(pd.to_numeric, errors="coerce")
    finite = np.isfinite(values.to_numpy(dtype=np.float64))
    bad = ~finite.all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        index = int(np.flatnonzero(~finite[row])[0])
        column = numeric[index]
        kind = "covariate" if column in source.covariates else "value"
        at = where(row) if where is not None else f"series table row {row + 1}"
        cell = frame[numeric].iat[row, index]
        if pd.isna(cell):
            raise DataSourceError(f"{at}: missing value in {kind} column {column!r}")
        shown = printable(str(cell), 40)
        raise DataSourceError(f"{at}: {kind} column {column!r} is not a finite number ({shown!r})")
    inner = [f"v{i}" for i in range(len(numeric))]  # the table's own names: a column may be called "t" or "id"
    table = pd.DataFrame({"t": stamps, "id": frame[source.id_column].astype(str)}).join(values.set_axis(inner, axis=1))
    ids = list(dict.fromkeys(table["id"]))
    if len(ids) > MAX_SERIES:
        raise DataSourceError(f"series table holds {len(ids)} ids; a task takes at most {MAX_SERIES}")
    freq = source.freq
    out: list[Series] = []
    for sid in ids:
        rows = table[table["id"] == sid].sort_values("t")
        if rows["t"].duplicated().any():
            raise DataSourceError(f"series {sid!r} has two rows at {rows['t'][rows['t'].duplicated()].iloc[0]}")
        if freq is None:
            freq = pd.infer_freq(rows["t"]) if len(rows) >= 3 else None
            if freq is None:
                raise DataSourceError(f"cannot infer the frequency of series {sid!r}: give the source a freq")
        try:
            grid = rows.set_index("t")[inner].asfreq(freq)
        except ValueError as exc:
            raise DataSourceError(f"series {sid!r} on frequency {freq!r}: {' '.join(str(exc).split())[:120]}") from None
        gaps = int(grid.isna().any(axis=1).sum())
        if gaps > MAX_GAP_FRACTION * len(grid):
            raise DataSourceError(f"series {sid!r} misses {gaps} of its {len(grid)} steps at frequency {freq!r}")
        if len(grid) > MAX_SERIES_LENGTH:
            raise DataSourceError(f"series {sid!r} has {len(grid):,} steps; the bound is {MAX_SERIES_LENGTH:,}")
        filled = grid.interpolate(method="linear").to_numpy(dtype=np.float64)
        c = len(source.value_columns)
        covariates = filled[:, c:] if source.covariates else None
        out.append(Series(sid, filled[:, :c], str(grid.index[0]), str(freq), covariates))
    return out


def read_series(source: SeriesSource | None = None) -> list[Series]:
    """Every series of ``source`` (default: ``co2`` and ``elnino`` from statsmodels), one frequency."""
    source = source or SeriesSource()
    if source.type == "statsmodels":
        if not source.datasets:
            raise DataSourceError("series source statsmodels names no data set")
        series = [s for name in source.datasets for s in _statsmodels_series(name)]
    else:
        frame, where = _read_frame(source)
        series = frame_series(frame, source, where)
    freqs = sorted({s.freq for s in series})
    if len(freqs) > 1:
        raise DataSourceError(f"the series have different frequencies ({', '.join(freqs)}): a task has one")
    return series


# ---------------------------------------------------------------------- windows


@dataclass(frozen=True)
class WindowPlan:
    """How series are cut into windows (module docstring); every field lands in the spec's metadata
    or decides the shards."""

    context_length: int = 48
    prediction_length: int = 12
    season_length: int = 12
    validation_windows: int = 9
    validation_stride: int = 3
    train_stride: int = 1
    scaling: str = "seasonal"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> WindowPlan:
        """A plan from a sponsor's YAML or API fields (absent ones take the defaults), checked."""
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise SpecError(f"windows: unknown field {extra[0]!r} (fields: {', '.join(sorted(known))})")
        plan = cls(**{k: v for k, v in data.items() if k in known})
        plan.check()
        return plan

    @property
    def held_out(self) -> int:
        """Steps at the end of every series that only validation windows forecast."""
        return self.prediction_length + (self.validation_windows - 1) * self.validation_stride

    def check(self) -> None:
        TimeSeriesAdapter(
            context_length=self.context_length,
            prediction_length=self.prediction_length,
            season_length=self.season_length,
        )
        for key in ("validation_windows", "validation_stride", "train_stride"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise SpecError(f"{key} {value!r} must be an integer in [1, 10000]")
        if self.scaling not in SCALINGS:
            raise SpecError(f"scaling {self.scaling!r} is not one of {', '.join(SCALINGS)}")


@dataclass(frozen=True)
class PreparedWindows:
    """Training shards and the validation shard (bytes), and each series' scaling."""

    shards: tuple[bytes, ...]
    validation: bytes
    series: tuple[dict[str, Any], ...]
    num_channels: int
    freq: str
    train_windows: int = 0
    validation_windows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    covariates: tuple[str, ...] = ()


def _period(start: str, freq: str) -> Any:
    """``start`` as the ``pandas.Period`` gluonts dates a series by (a period frequency: ``MS``
    is ``M``, ``QS`` is ``Q``, ``YS`` is ``Y``)."""
    import pandas as pd  # type: ignore[import-untyped]

    head, _, tail = freq.partition("-")
    for candidate in (freq, head.removesuffix("S") + (f"-{tail}" if tail else ""), head.removesuffix("S")):
        try:
            return pd.Period(start, freq=candidate)
        except ValueError:
            continue
    raise DataSourceError(f"frequency {freq!r} has no pandas period frequency")


def _instances(
    target: np.ndarray,
    *,
    start: str,
    freq: str,
    offset: int,
    plan: WindowPlan,
    windows: int,
    distance: int,
    channels: int | None = None,
) -> Windows:
    """``windows`` windows of ``target`` [C, T] whose forecasts start ``offset`` steps from its end,
    ``distance`` apart (gluonts' ``split`` and ``generate_instances``); each window's scale is
    gluonts' ``seasonal_error`` of everything before its forecast. With ``channels`` < C the rows
    after the first ``channels`` are covariates: only their context is kept."""
    from gluonts.dataset.split import split  # type: ignore[import-untyped]
    from gluonts.ev.ts_stats import seasonal_error  # type: ignore[import-untyped]

    entry = {"start": _period(start, freq), "target": target}
    _, template = split([entry], offset=offset)
    c = len(target) if channels is None else channels
    past, future, scale, covariates = [], [], [], []
    for inp, label in template.generate_instances(plan.prediction_length, windows=windows, distance=distance):
        history = inp["target"]
        past.append(history[:c, -plan.context_length :].T)
        covariates.append(history[c:, -plan.context_length :].T)
        future.append(label["target"][:c].T)
        scale.append(seasonal_error(history[:c], plan.season_length, time_axis=1)[:, 0])
    return Windows(
        torch.from_numpy(np.stack(past).astype(np.float32)),
        torch.from_numpy(np.stack(future).astype(np.float32)),
        torch.from_numpy(np.stack(scale).astype(np.float32)),
        torch.from_numpy(np.stack(covariates).astype(np.float32)) if c < len(target) else None,
    )


def build_windows(
    series: Sequence[Series],
    plan: WindowPlan,
    *,
    shard_count: int,
    seed: int = 0,
    covariates: Sequence[str] = (),
) -> PreparedWindows:
    """Scale every series, cut its training and validation windows and deal the training windows
    into ``shard_count`` shards (module docstring); ``covariates`` names the series' covariate
    columns, in order."""
    plan.check()
    if shard_count < 1:
        raise SpecError("shard_count must be at least 1")
    if not series:
        raise DataSourceError("the source holds no series")
    channels = {s.values.shape[1] for s in series}
    if len(channels) != 1:
        raise DataSourceError("the series have different numbers of channels")
    kinds = {0 if s.covariates is None else s.covariates.shape[1] for s in series}
    if len(kinds) != 1:
        raise DataSourceError("the series have different numbers of covariates")
    num_covariates = kinds.pop()
    covariates = tuple(covariates)
    if num_covariates != len(covariates):
        raise DataSourceError(f"the series carry {num_covariates} covariates; {len(covariates)} are named")
    train_parts: list[Windows] = []
    valid_parts: list[Windows] = []
    described: list[dict[str, Any]] = []
    need = plan.context_length + plan.prediction_length + plan.held_out
    for s in series:
        length = len(s.values)
        if length < need:
            raise DataSourceError(
                f"series {s.id!r} has {length} steps; it needs {need} (context_length + prediction_length + the "
                f"{plan.held_out} held-out steps): lower them or drop the series"
            )
        train_len = length - plan.held_out
        loc, spread = series_scaling(s.values[:train_len], plan.scaling, plan.season_length)
        scaled = ((s.values - loc) / spread).astype(np.float32).T  # [C, T]
        described.append({"id": s.id, "length": length, "loc": loc.tolist(), "scale": spread.tolist()})
        c = scaled.shape[0]
        if s.covariates is not None and num_covariates:
            if s.covariates.shape[0] != length:
                raise DataSourceError(f"series {s.id!r}: its covariates are not as long as its values")
            cov_loc, cov_spread = series_scaling(s.covariates[:train_len], plan.scaling, plan.season_length)
            cov_scaled = ((s.covariates - cov_loc) / cov_spread).astype(np.float32).T  # [K, T]
            scaled = np.concatenate([scaled, cov_scaled])  # [C + K, T]: targets, then covariates
            described[-1].update(covariate_loc=cov_loc.tolist(), covariate_scale=cov_spread.tolist())
        valid = _instances(
            scaled,
            start=s.start,
            freq=s.freq,
            offset=-plan.held_out,
            plan=plan,
            windows=plan.validation_windows,
            distance=plan.validation_stride,
            channels=c,
        )
        count = (train_len - plan.context_length - plan.prediction_length) // plan.train_stride + 1
        train = _instances(
            scaled[:, :train_len],
            start=s.start,
            freq=s.freq,
            offset=-(plan.prediction_length + (count - 1) * plan.train_stride),
            plan=plan,
            windows=count,
            distance=plan.train_stride,
            channels=c,
        )
        if not bool((valid.scale > 0).all() and (train.scale > 0).all()):
            raise DataSourceError(f"series {s.id!r} is constant over a window's history: its MASE scale is 0")
        train_parts.append(train)
        valid_parts.append(valid)
    train_all = Windows.concat(train_parts)
    if len(train_all) < shard_count:
        raise DataSourceError(f"{len(train_all)} training windows cannot fill {shard_count} shards")
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(train_all)))
    shards = tuple(encode_windows(train_all.select(part)) for part in torch.tensor_split(order, shard_count))
    validation = Windows.concat(valid_parts)
    return PreparedWindows(
        shards=shards,
        validation=encode_windows(validation),
        series=tuple(described),
        num_channels=channels.pop(),
        freq=series[0].freq,
        train_windows=len(train_all),
        validation_windows=len(validation),
        covariates=covariates,
    )


# ---------------------------------------------------------------------- publishing


def spec_model(
    model: Mapping[str, Any], plan: WindowPlan, num_channels: int, num_covariates: int = 0
) -> dict[str, Any]:
    """The spec's ``model`` (``{family, config}``) of a sponsor's ``{family, **config}``: the task's
    lengths and input channels (``num_channels + num_covariates``) filled in (a value that
    disagrees is a ``SpecError``), PatchTST's ``norm_type`` ``layernorm`` unless given, and with
    covariates the family's channel mixing (``CHANNEL_MIXING``) unless given."""
    family = str(model.get("family", "patchtst"))
    if family not in FAMILIES:
        raise SpecError(f"model family {family!r} is not a time-series family these agents train ({FAMILY_NAMES})")
    config = {k: v for k, v in model.items() if k != "family"}
    for key, value in (
        ("context_length", plan.context_length),
        ("prediction_length", plan.prediction_length),
        ("num_input_channels", num_channels + num_covariates),
    ):
        if key in config and config[key] != value:
            raise SpecError(f"model.{key} {config[key]!r} disagrees with the task's {value}; leave it out")
        config[key] = value
    if family == "patchtst":
        config.setdefault("norm_type", "layernorm")
    if num_covariates:  # the targets' forecasts read the covariate channels
        key, mixing = CHANNEL_MIXING[family]
        config.setdefault(key, mixing)
    return {"family": family, "config": config}


def timeseries_metadata(plan: WindowPlan, prepared: PreparedWindows) -> dict[str, Any]:
    """The spec metadata keys of a time-series task (docs/protocol.md §12.7); ``covariates`` only
    when the task has some (a task without keeps the spec bytes it always had)."""
    meta = {
        "context_length": plan.context_length,
        "prediction_length": plan.prediction_length,
        "num_channels": prepared.num_channels,
        "season_length": plan.season_length,
        "freq": prepared.freq,
        "scaling": plan.scaling,
        "series": list(prepared.series),
    }
    if prepared.covariates:
        meta["covariates"] = list(prepared.covariates)
    return meta


def publish_timeseries_task(
    blobs: BlobStore,
    *,
    template: Mapping[str, Any],
    model: Mapping[str, Any] | None = None,
    source: SeriesSource | None = None,
    plan: WindowPlan | None = None,
    shard_count: int = 6,
    seed: int = 0,
    sponsor: LocalAccount | None = None,
) -> PublishedTask:
    """Publish every artifact of a time-series task and return its spec (not yet posted on chain).

    ``model`` is ``{family, **config}`` (default :data:`DEFAULT_TIMESERIES_MODEL`), randomly
    initialised from ``seed``; ``source`` the series (default ``co2`` and ``elnino``); ``plan``
    the windows (default :class:`WindowPlan`: 48 steps of context, 12 forecast, season 12).
    ``template`` holds the remaining spec fields as in a YAML spec; ``param_count`` is filled in.
    The source is read, the windows cut and the model built before anything is uploaded."""
    plan = plan or WindowPlan()
    source = source or SeriesSource()
    prepared = build_windows(
        read_series(source), plan, shard_count=shard_count, seed=seed, covariates=source.covariates
    )
    k = len(prepared.covariates)
    described = spec_model(model or DEFAULT_TIMESERIES_MODEL, plan, prepared.num_channels, k)
    adapter = TimeSeriesAdapter(
        context_length=plan.context_length,
        prediction_length=plan.prediction_length,
        num_channels=prepared.num_channels,
        season_length=plan.season_length,
        num_covariates=k,
    )
    net = adapter.build_model({"family": described["family"], **described["config"]}, seed=seed)
    params = {k: v.detach() for k, v in trained_parameters(net).items()}
    initial = TrainingState.from_model_state_dict(params, ParameterLayout.from_state_dict(params))
    data = dict(template)
    typed = data.get("param_count")
    if typed is not None and str(typed) != str(initial.layout.numel):
        raise SpecError(
            f"param_count {typed} disagrees with the model ({initial.layout.numel} parameters); "
            "leave it out, the sponsor tooling fills it in"
        )
    shard_refs = [blobs.put(s) for s in prepared.shards]
    validation = blobs.put(prepared.validation)
    publish_initial_state(blobs, initial, sponsor)
    data.update(
        modality=Modality.TIME_SERIES.name.lower(),
        model=described,
        dataset={
            "shard_hashes": [r.digest for r in shard_refs],
            "shard_uris": [r.uri for r in shard_refs],
            "validation_hash": validation.digest,
            "validation_uri": validation.uri,
        },
        initial_state_root=initial.state_root_hex,
        param_count=initial.layout.numel,
        metadata={
            **dict(data.get("metadata", {})),
            **timeseries_metadata(plan, prepared),
            "initial_state": {"uri": initial.state_root_hex},
        },
    )
    spec = TrainingTaskSpec.from_mapping(data)
    ref = blobs.put(spec.canonical_bytes())
    if ref.digest != spec.spec_hash:
        raise RuntimeError("spec blob digest differs from the spec hash")  # keccak of the same bytes
    return PublishedTask(spec=spec, spec_uri=ref.uri, initial_state=initial)


def check_timeseries_template(
    template: Mapping[str, Any],
    *,
    shard_count: int,
    model: Mapping[str, Any] | None = None,
    plan: WindowPlan | None = None,
    num_channels: int = 1,
    num_covariates: int = 0,
    now: int,
    sponsor: str,
) -> TrainingTaskSpec:
    """Validate a sponsor's time-series template before anything is read, built or uploaded: the
    window plan, the model (built on the ``meta`` device against the plan) and every rule
    ``postTask`` enforces, on a provisional spec with placeholder artifacts."""
    plan = plan or WindowPlan()
    plan.check()
    described = spec_model(model or DEFAULT_TIMESERIES_MODEL, plan, num_channels, num_covariates)
    adapter = TimeSeriesAdapter(
        context_length=plan.context_length,
        prediction_length=plan.prediction_length,
        num_channels=num_channels,
        season_length=plan.season_length,
        num_covariates=num_covariates,
    )
    with torch.device("meta"):
        adapter.build_model({"family": described["family"], **described["config"]}, seed=0)
    placeholder = "0x" + "5c" * 32
    data = dict(template)
    data.update(
        modality=Modality.TIME_SERIES.name.lower(),
        model=described,
        dataset={"shard_hashes": [placeholder] * shard_count},
        initial_state_root=placeholder,
        param_count=data.get("param_count") or 1,
    )
    return TrainingTaskSpec.from_mapping(data).validate(now=now, sponsor=sponsor)
