"""Request and response bodies of the HTTP API (pydantic: they make /openapi.json meaningful).

Conventions (docs/api.md): addresses and bytes32 are lowercase 0x-hex; wei amounts and 256-bit
masks are decimal strings (they overflow JavaScript numbers); timestamps are chain seconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from syncline.modality.language import MAX_VOCAB_SIZE
from syncline.modality.timeseries import MAX_CONTEXT_LENGTH, MAX_COVARIATES, MAX_PREDICTION_LENGTH, MAX_SEASON_LENGTH
from syncline.modality.vision import MAX_IMAGE_SIZE
from syncline.protocol.spec import LORA_MAX_ALPHA, LORA_MAX_RANK, LORA_MAX_TARGETS, MAX_SHARDS

ChallengeKindName = Literal[
    "trainer_equivocation", "witness_equivocation", "aggregation_fraud", "censorship", "training_fraud"
]

# Sizes the API will build a task for (the browser form mirrors them from /api/template limits).
# Each one admits a 1e9-parameter Llama; the total, llama_parameter_count, is bounded by the
# spec's MAX_PARAM_COUNT (checked with the corpus's vocabulary in prepare.check_request).
CORPUS_BOUNDS: dict[str, tuple[int, int]] = {
    "shard_count": (1, MAX_SHARDS),
    "vocab_size": (260, MAX_VOCAB_SIZE),
    "seq_len": (8, 8192),
}
VISION_BOUNDS: dict[str, tuple[int, int]] = {
    "shard_count": (1, MAX_SHARDS),
    "image_size": (1, MAX_IMAGE_SIZE),
}
VIT_BOUNDS: dict[str, tuple[int, int]] = {
    "patch_size": (1, MAX_IMAGE_SIZE),
    "hidden_size": (4, 4096),
    "num_hidden_layers": (1, 48),
    "num_attention_heads": (1, 64),
    "intermediate_size": (4, 16384),
}
SERIES_BOUNDS: dict[str, tuple[int, int]] = {"shard_count": (1, MAX_SHARDS)}
WINDOW_BOUNDS: dict[str, tuple[int, int]] = {
    "context_length": (1, MAX_CONTEXT_LENGTH),
    "prediction_length": (1, MAX_PREDICTION_LENGTH),
    "season_length": (1, MAX_SEASON_LENGTH),
    "validation_windows": (1, 10_000),
    "validation_stride": (1, 10_000),
    "train_stride": (1, 10_000),
}
SERIES_MODEL_BOUNDS: dict[str, tuple[int, int]] = {
    "patch_length": (1, MAX_CONTEXT_LENGTH),
    "patch_stride": (1, MAX_CONTEXT_LENGTH),
    "d_model": (4, 4096),
    "num_hidden_layers": (1, 48),
    "num_attention_heads": (1, 64),
    "ffn_dim": (4, 16384),
}
MODEL_BOUNDS: dict[str, tuple[int, int]] = {
    "hidden_size": (8, 8192),
    "intermediate_size": (8, 32768),
    "num_hidden_layers": (1, 128),
    "num_attention_heads": (1, 128),
    "num_key_value_heads": (1, 128),
    "max_position_embeddings": (8, 131072),
}


class ErrorBody(BaseModel):
    error: str
    status: int


class DependencyHealth(BaseModel):
    ok: bool
    detail: str | None = None


class Health(BaseModel):
    status: str  # "ok" or "degraded"
    indexed_block: int
    head_block: int
    lag_blocks: int
    max_lag_blocks: int
    dependencies: dict[str, DependencyHealth]


class DevAccount(BaseModel):
    address: str
    label: str


class ApiConfig(BaseModel):
    chain_id: int
    rpc_url: str
    market: str
    abi: list[dict[str, Any]]
    blob_store: str
    devnet: bool
    dev_accounts: list[DevAccount]
    head_block: int
    indexed_block: int


SourceTypeName = Literal["shakespeare", "text_dir", "jsonl", "csv", "parquet", "hf_disk"]


class CorpusSizes(BaseModel):
    """Shards, tokenizer vocabulary and sequence length (the form's defaults in ``/api/template``)."""

    model_config = ConfigDict(extra="forbid")
    shard_count: int = Field(ge=CORPUS_BOUNDS["shard_count"][0], le=CORPUS_BOUNDS["shard_count"][1])
    vocab_size: int = Field(ge=CORPUS_BOUNDS["vocab_size"][0], le=CORPUS_BOUNDS["vocab_size"][1])
    seq_len: int = Field(ge=CORPUS_BOUNDS["seq_len"][0], le=CORPUS_BOUNDS["seq_len"][1])


class CorpusParams(CorpusSizes):
    """Where the training texts come from, and the corpus sizes (``syncline.sponsor.data_sources``).

    ``type`` ``shakespeare`` is the default demo's corpus; the other types read ``path``, a file or
    directory under the API's data directory (``ApiSettings.source_dir``), never elsewhere.
    """

    type: SourceTypeName = "shakespeare"
    path: str | None = Field(default=None, min_length=1, max_length=1024)
    text_field: str | None = Field(default=None, min_length=1, max_length=256)
    prompt_field: str | None = Field(default=None, min_length=1, max_length=256)
    response_field: str | None = Field(default=None, min_length=1, max_length=256)
    glob: str | None = Field(default=None, min_length=1, max_length=256)
    split: str | None = Field(default=None, min_length=1, max_length=256)


class ModelParams(BaseModel):
    """A Llama built from a ``transformers`` config (at most ``MAX_PARAM_COUNT`` parameters in all)."""

    model_config = ConfigDict(extra="forbid")
    family: Literal["llama"] = "llama"
    hidden_size: int = Field(ge=MODEL_BOUNDS["hidden_size"][0], le=MODEL_BOUNDS["hidden_size"][1])
    intermediate_size: int = Field(ge=MODEL_BOUNDS["intermediate_size"][0], le=MODEL_BOUNDS["intermediate_size"][1])
    num_hidden_layers: int = Field(ge=MODEL_BOUNDS["num_hidden_layers"][0], le=MODEL_BOUNDS["num_hidden_layers"][1])
    num_attention_heads: int = Field(
        ge=MODEL_BOUNDS["num_attention_heads"][0], le=MODEL_BOUNDS["num_attention_heads"][1]
    )
    num_key_value_heads: int = Field(
        ge=MODEL_BOUNDS["num_key_value_heads"][0], le=MODEL_BOUNDS["num_key_value_heads"][1]
    )
    max_position_embeddings: int = Field(
        ge=MODEL_BOUNDS["max_position_embeddings"][0], le=MODEL_BOUNDS["max_position_embeddings"][1]
    )
    tie_word_embeddings: bool = True

    @model_validator(mode="after")
    def _heads(self) -> ModelParams:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError("hidden_size / num_attention_heads (the head size) must be even")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        return self


class LoraParams(BaseModel):
    """LoRA adapters (``peft``) trained on the frozen pretrained model: the task's state and
    payloads are the adapters' alone (docs/protocol.md §12.5)."""

    model_config = ConfigDict(extra="forbid")
    r: int = Field(default=8, ge=1, le=LORA_MAX_RANK)
    alpha: int | None = Field(default=None, ge=1, le=LORA_MAX_ALPHA)
    target_modules: list[str] = Field(min_length=1, max_length=LORA_MAX_TARGETS)


class PretrainedParams(BaseModel):
    """A pretrained Hugging Face model directory (``config.json``, safetensors weights,
    ``tokenizer.json``) under the API's data directory: its weights are the initial state and its
    tokenizer tokenizes the corpus (``corpus.vocab_size`` is then unused). With ``lora`` only
    adapters train and the weights are the frozen base."""

    model_config = ConfigDict(extra="forbid")
    pretrained: str = Field(min_length=1, max_length=1024)
    lora: LoraParams | None = None


class Template(BaseModel):
    spec: dict[str, Any]
    corpus: CorpusSizes
    model: ModelParams
    limits: dict[str, Any]
    sources: dict[str, Any]
    """The data source types, the fields each takes, the training methods and the fields each reads
    (``syncline.api.template.sources``): the form shows only the inputs a choice takes."""
    chain_time: int


def _model_kind(value: Any) -> str:
    """Which model a request describes: a pretrained directory when it names one, else a new Llama
    (so a refusal names the fields of the kind the client meant; the tags are dropped from it)."""
    pretrained = isinstance(value, PretrainedParams) or (isinstance(value, dict) and "pretrained" in value)
    return "Pretrained" if pretrained else "Config"


ModelChoice = Annotated[
    Annotated[ModelParams, Tag("Config")] | Annotated[PretrainedParams, Tag("Pretrained")],
    Discriminator(_model_kind),
]


class PrepareRequest(BaseModel):
    """A language task (the default modality: a body without ``modality`` is one)."""

    model_config = ConfigDict(extra="forbid")
    modality: Literal["language"] = "language"
    spec: dict[str, Any]
    corpus: CorpusParams
    model: ModelChoice


ImageSourceTypeName = Literal["digits", "npz", "image_folder"]
TimeSeriesSourceTypeName = Literal["statsmodels", "csv", "parquet"]
StatsmodelsDataset = Literal["co2", "elnino", "sunspots", "macrodata"]
_Name = Annotated[str, Field(min_length=1, max_length=256)]


class ImageSourceParams(BaseModel):
    """Where a vision task's labelled images come from (``syncline.sponsor.vision_task.ImageSource``):
    the packaged digits, or an ``.npz`` / a folder of class folders under the API's data directory."""

    model_config = ConfigDict(extra="forbid")
    type: ImageSourceTypeName = "digits"
    path: str | None = Field(default=None, min_length=1, max_length=1024)
    shard_count: int = Field(ge=VISION_BOUNDS["shard_count"][0], le=VISION_BOUNDS["shard_count"][1])
    image_size: int | None = Field(default=None, ge=VISION_BOUNDS["image_size"][0], le=VISION_BOUNDS["image_size"][1])
    num_channels: Literal[1, 3, 4] | None = None

    @model_validator(mode="after")
    def _path(self) -> ImageSourceParams:
        if self.type == "digits" and self.path is not None:
            raise ValueError("path: the digits data set is packaged; it takes no path")
        if self.type != "digits" and self.path is None:
            raise ValueError(f"path: a {self.type} source needs a path in the data directory")
        return self


class VitParams(BaseModel):
    """A ViT built from a ``transformers`` config (``ViTForImageClassification``)."""

    model_config = ConfigDict(extra="forbid")
    family: Literal["vit"] = "vit"
    patch_size: int = Field(ge=VIT_BOUNDS["patch_size"][0], le=VIT_BOUNDS["patch_size"][1])
    hidden_size: int = Field(ge=VIT_BOUNDS["hidden_size"][0], le=VIT_BOUNDS["hidden_size"][1])
    num_hidden_layers: int = Field(ge=VIT_BOUNDS["num_hidden_layers"][0], le=VIT_BOUNDS["num_hidden_layers"][1])
    num_attention_heads: int = Field(ge=VIT_BOUNDS["num_attention_heads"][0], le=VIT_BOUNDS["num_attention_heads"][1])
    intermediate_size: int = Field(ge=VIT_BOUNDS["intermediate_size"][0], le=VIT_BOUNDS["intermediate_size"][1])

    @model_validator(mode="after")
    def _heads(self) -> VitParams:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        return self


class VisionPrepareRequest(BaseModel):
    """A vision task: images from ``image_source``, a ViT (default: the digits' small ViT)."""

    model_config = ConfigDict(extra="forbid")
    modality: Literal["vision"]
    spec: dict[str, Any]
    image_source: ImageSourceParams
    model: VitParams | None = None

    @model_validator(mode="after")
    def _patches(self) -> VisionPrepareRequest:
        size = self.image_source.image_size
        if self.model is not None and size is not None and size % self.model.patch_size:
            raise ValueError(f"model.patch_size {self.model.patch_size} must divide image_source.image_size {size}")
        return self


class SeriesSourceParams(BaseModel):
    """Where a time-series task's series come from (``syncline.sponsor.timeseries_task.SeriesSource``):
    data sets packaged with statsmodels, or a CSV/Parquet file of ``(timestamp, id, value...)`` rows
    under the API's data directory."""

    model_config = ConfigDict(extra="forbid")
    type: TimeSeriesSourceTypeName = "statsmodels"
    path: str | None = Field(default=None, min_length=1, max_length=1024)
    datasets: list[StatsmodelsDataset] | None = Field(default=None, min_length=1, max_length=4)
    timestamp_column: _Name | None = None
    id_column: _Name | None = None
    value_columns: list[_Name] | None = Field(default=None, min_length=1, max_length=64)
    freq: str | None = Field(default=None, min_length=1, max_length=32)
    # past covariates: further numeric columns the model reads beside the values (§12.7)
    covariates: list[_Name] | None = Field(default=None, max_length=MAX_COVARIATES)
    shard_count: int = Field(ge=SERIES_BOUNDS["shard_count"][0], le=SERIES_BOUNDS["shard_count"][1])

    @model_validator(mode="after")
    def _fields(self) -> SeriesSourceParams:
        if self.type == "statsmodels":
            given = [k for k in SERIES_FILE_FIELDS if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{given[0]}: a statsmodels source takes datasets only")
        else:
            if self.datasets is not None:
                raise ValueError(f"datasets: a {self.type} source reads path, not packaged data sets")
            if self.path is None:
                raise ValueError(f"path: a {self.type} source needs a path in the data directory")
        return self


SERIES_FILE_FIELDS = ("path", "timestamp_column", "id_column", "value_columns", "freq", "covariates")


class WindowParams(BaseModel):
    """How the series are cut into windows (``syncline.sponsor.timeseries_task.WindowPlan``)."""

    model_config = ConfigDict(extra="forbid")
    context_length: int = Field(ge=WINDOW_BOUNDS["context_length"][0], le=WINDOW_BOUNDS["context_length"][1])
    prediction_length: int = Field(ge=WINDOW_BOUNDS["prediction_length"][0], le=WINDOW_BOUNDS["prediction_length"][1])
    season_length: int = Field(ge=WINDOW_BOUNDS["season_length"][0], le=WINDOW_BOUNDS["season_length"][1])
    validation_windows: int = Field(
        default=9, ge=WINDOW_BOUNDS["validation_windows"][0], le=WINDOW_BOUNDS["validation_windows"][1]
    )
    validation_stride: int = Field(
        default=3, ge=WINDOW_BOUNDS["validation_stride"][0], le=WINDOW_BOUNDS["validation_stride"][1]
    )
    train_stride: int = Field(default=1, ge=WINDOW_BOUNDS["train_stride"][0], le=WINDOW_BOUNDS["train_stride"][1])
    scaling: Literal["seasonal", "standard", "none"] = "seasonal"


class PatchTSTParams(BaseModel):
    """A PatchTST built from a ``transformers`` config (layer norm: the state carries no running statistics)."""

    model_config = ConfigDict(extra="forbid")
    family: Literal["patchtst"] = "patchtst"
    patch_length: int = Field(ge=SERIES_MODEL_BOUNDS["patch_length"][0], le=SERIES_MODEL_BOUNDS["patch_length"][1])
    patch_stride: int = Field(ge=SERIES_MODEL_BOUNDS["patch_stride"][0], le=SERIES_MODEL_BOUNDS["patch_stride"][1])
    d_model: int = Field(ge=SERIES_MODEL_BOUNDS["d_model"][0], le=SERIES_MODEL_BOUNDS["d_model"][1])
    num_hidden_layers: int = Field(
        ge=SERIES_MODEL_BOUNDS["num_hidden_layers"][0], le=SERIES_MODEL_BOUNDS["num_hidden_layers"][1]
    )
    num_attention_heads: int = Field(
        ge=SERIES_MODEL_BOUNDS["num_attention_heads"][0], le=SERIES_MODEL_BOUNDS["num_attention_heads"][1]
    )
    ffn_dim: int = Field(ge=SERIES_MODEL_BOUNDS["ffn_dim"][0], le=SERIES_MODEL_BOUNDS["ffn_dim"][1])

    @model_validator(mode="after")
    def _heads(self) -> PatchTSTParams:
        if self.d_model % self.num_attention_heads:
            raise ValueError("d_model must be a multiple of num_attention_heads")
        return self


class PatchTSMixerParams(BaseModel):
    """A PatchTSMixer built from a ``transformers`` config."""

    model_config = ConfigDict(extra="forbid")
    family: Literal["patchtsmixer"]
    patch_length: int = Field(ge=SERIES_MODEL_BOUNDS["patch_length"][0], le=SERIES_MODEL_BOUNDS["patch_length"][1])
    patch_stride: int = Field(ge=SERIES_MODEL_BOUNDS["patch_stride"][0], le=SERIES_MODEL_BOUNDS["patch_stride"][1])
    d_model: int = Field(ge=SERIES_MODEL_BOUNDS["d_model"][0], le=SERIES_MODEL_BOUNDS["d_model"][1])
    num_layers: int = Field(
        ge=SERIES_MODEL_BOUNDS["num_hidden_layers"][0], le=SERIES_MODEL_BOUNDS["num_hidden_layers"][1]
    )


def _series_family(value: Any) -> str:
    family = value.get("family") if isinstance(value, dict) else getattr(value, "family", None)
    return "Mixer" if family == "patchtsmixer" else "PatchTST"


SeriesModelChoice = Annotated[
    Annotated[PatchTSTParams, Tag("PatchTST")] | Annotated[PatchTSMixerParams, Tag("Mixer")],
    Discriminator(_series_family),
]


class TimeSeriesPrepareRequest(BaseModel):
    """A time-series task: series from ``series_source`` cut by ``windows``, a PatchTST or PatchTSMixer."""

    model_config = ConfigDict(extra="forbid")
    modality: Literal["time_series"]
    spec: dict[str, Any]
    series_source: SeriesSourceParams
    windows: WindowParams
    model: SeriesModelChoice | None = None

    @model_validator(mode="after")
    def _patches(self) -> TimeSeriesPrepareRequest:
        w = self.windows
        if self.model is not None and self.model.patch_length > w.context_length:
            raise ValueError(
                f"model.patch_length {self.model.patch_length} must not exceed "
                f"windows.context_length {w.context_length}"
            )
        return self


def _modality(value: Any) -> str:
    """The request's modality (no ``modality``: a language task, as before modalities were offered);
    the tags are capitalized so a refusal's field path leaves them out (errors.validation_message)."""
    modality = value.get("modality", "language") if isinstance(value, dict) else getattr(value, "modality", None)
    return {"vision": "Vision", "time_series": "TimeSeries"}.get(str(modality), "Language")


AnyPrepareRequest = Annotated[
    Annotated[PrepareRequest, Tag("Language")]
    | Annotated[VisionPrepareRequest, Tag("Vision")]
    | Annotated[TimeSeriesPrepareRequest, Tag("TimeSeries")],
    Discriminator(_modality),
]


class PreparedTask(BaseModel):
    spec_hash: str
    spec_uri: str
    param_count: int
    initial_state_root: str
    escrow_wei: str
    to: str
    data: str
    value_wei: str


class RunSummary(BaseModel):
    task_id: int
    name: str
    sponsor: str
    status: str
    tier: str
    rule: str
    rounds: int
    current_round: int
    rounds_finalized: int
    rounds_carried: int
    rounds_invalidated: int
    trainers_enrolled: int
    min_trainers: int
    max_trainers: int
    reward_pool_wei: str
    escrow_wei: str
    state_root: str
    open_challenges: int
    posted_at: int
    progress: float


class TimelineEntry(BaseModel):
    kind: str
    block: int
    timestamp: int
    round: int | None
    text: str
    tx: str


class RunDetail(BaseModel):
    summary: RunSummary
    spec: dict[str, Any]
    state: dict[str, Any]
    timeline: list[TimelineEntry]


class SubmissionOut(BaseModel):
    fragment: int
    trainer: str
    committed_at: int
    payload_hash: str
    uri: str
    accepted: bool


class VoteOut(BaseModel):
    witness: str
    result: str
    state_root: str
    metric: float | None = Field(description="the vote's validation loss (metric / 1e6); null when it carried none")
    agrees: bool
    tx: str


class RoundOut(BaseModel):
    round: int
    status: str
    opened_at: int
    deadline: int
    closed_at: int
    state_root: str
    prev_state_root: str
    aggregate_root: str
    vote_count: int
    committed_mask: str
    accepted_mask: str
    revoked_mask: str
    submissions: list[SubmissionOut]
    votes: list[VoteOut]
    dissent: list[VoteOut]
    carried_forward: bool
    validation_loss: float | None
    trainer_losses: dict[str, float]
    challenges: list[int]


TrainerStatus = Literal["active", "left", "evicted", "sealed", "refunded"]


class TrainerOut(BaseModel):
    address: str
    fragment: int
    enrolled: bool
    evicted: bool
    status: TrainerStatus
    stake_wei: str
    stake_returned_wei: str
    slashed_wei: str
    shards: list[int]
    submitted: int
    accepted: int
    missed: int
    acceptance_rate: float | None
    accepted_weight: int
    reward_wei: str


class WitnessOut(BaseModel):
    address: str
    bonded: bool
    bond_wei: str
    bond_returned_wei: str
    slashed_wei: str
    votes: int
    matched: int
    dissents: int
    fees_wei: str


class ChallengeOut(BaseModel):
    challenge_id: int
    kind: str
    status: str
    round: int
    fragment: int
    segment: int
    challenger: str
    accused: str
    bond_wei: str
    slashed_wei: str
    opened_at: int
    deadline: int
    guilty_votes: int
    innocent_votes: int
    tx: str


class Losses(BaseModel):
    rounds: list[int]
    validation: list[float | None]
    """The witnesses' validation metric per round (the median of the finalized result's votes)."""
    trainers: dict[str, list[float | None]]
    metric: str = "validation_loss"
    """The metric's name: ``validation_loss`` (language), ``top1_accuracy`` (vision), ``mase`` (time series)."""
    metric_higher_is_better: bool = False


class Privacy(BaseModel):
    """A run's differential privacy (docs/privacy.md): the target, the noise every trainer adds,
    and the ε each trainer has spent after each round (cumulative; flat across a round it did not
    commit to). ``enabled`` is false, and the rest empty, for a task without a ``privacy`` section."""

    enabled: bool
    target_epsilon: float | None = None
    delta: float | None = None
    clip_norm: float | None = None
    sample_rate: float | None = None
    accountant: str | None = None
    noise_multiplier: float | None = None
    rounds: list[int] = Field(default_factory=list)
    epsilon_per_round: dict[str, list[float]] = Field(default_factory=dict)
    """Trainer address -> ε spent after each round of ``rounds``."""
    rounds_opened: dict[str, list[int]] = Field(default_factory=dict)
    """Trainer address -> the rounds of a drawn or claimed training segment: their noise opening
    was sealed to the witness committee, against which those rounds have no DP protection
    (against everyone else they keep the accounted ε). Trainers with none are absent."""


class Withdrawal(BaseModel):
    amount_wei: str
    block: int
    timestamp: int
    tx: str


class Credit(BaseModel):
    address: str
    role: Literal["sponsor", "trainer", "witness"]
    credit_wei: str
    credited_wei: str = "0"
    paid_wei: str = "0"
    withdrawals: list[Withdrawal] = Field(default_factory=list)


class ReceiptOut(BaseModel):
    receipt: dict[str, Any]
    credits: list[Credit]
    model_url: str
    final_state_url: str


class Account(BaseModel):
    address: str
    credit_wei: str
    balance_wei: str


class ChallengeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    round: int = Field(ge=0)
    kind: ChallengeKindName
    fragment: int | None = Field(default=None, ge=0, le=255)
    segment: int | None = Field(default=None, ge=0)


class ChallengeProof(BaseModel):
    kind: ChallengeKindName
    round: int
    accused: str
    description: str
    function: str
    to: str
    data: str
    value_wei: str
