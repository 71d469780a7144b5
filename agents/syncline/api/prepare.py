"""``POST /api/tasks/prepare``: publish a task's artifacts (language, vision or time series) and
return ``postTask`` calldata.

The browser's account then sends ``{to, data, value}`` itself: the API never holds a key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncline.api.errors import ApiError
from syncline.api.schemas import (
    SERIES_FILE_FIELDS,
    ModelParams,
    PreparedTask,
    PrepareRequest,
    TimeSeriesPrepareRequest,
    VisionPrepareRequest,
)
from syncline.api.services import ApiServices
from syncline.api.settings import ApiSettings
from syncline.errors import SpecError
from syncline.modality.language import METHODS, llama_parameter_count
from syncline.protocol.spec import MAX_PARAM_COUNT, TrainingTaskSpec
from syncline.sponsor.data_sources import DataSource, DataSourceError
from syncline.sponsor.pretrained import (
    PretrainedModel,
    PretrainedModelError,
    check_seq_len,
    read_pretrained,
    resolve_model_dir,
)
from syncline.sponsor.task_builder import PublishedTask, check_lora, publish_language_task
from syncline.sponsor.timeseries_task import (
    DEFAULT_TIMESERIES_MODEL,
    SeriesSource,
    WindowPlan,
    check_timeseries_template,
    publish_timeseries_task,
    spec_model,
)
from syncline.sponsor.vision_task import (
    DEFAULT_VISION_MODEL,
    ImageSource,
    check_vision_template,
    publish_vision_task,
)

# Filled in by the API from ``corpus`` and ``model``: a sponsor does not type them.
DERIVED_FIELDS = ("modality", "model", "dataset", "initial_state_root")
PLACEHOLDER_ROOT = "0x" + "11" * 32


def check_request(req: PrepareRequest, now: int, pretrained: PretrainedModel | None = None) -> dict[str, Any]:
    """The spec template, checked against every ``postTask`` rule before anything is built
    (``pretrained``: the request's model directory, already read by :func:`pretrained_model`)."""
    template = dict(req.spec)
    method = template.pop("method", "pretrain")
    if method not in METHODS:
        raise ApiError(422, f"spec.method: {method!r} is not one of {', '.join(METHODS)}")
    for name in DERIVED_FIELDS:
        if name in template:
            raise ApiError(422, f"spec.{name}: derived from corpus and model by the API; leave it out")
    if pretrained is not None:
        try:
            check_seq_len(pretrained, req.corpus.seq_len)
            lora = request_lora(req)
            if lora is not None:
                check_lora(pretrained.model_config, lora)
        except SpecError as exc:
            raise ApiError(422, str(exc) if str(exc).startswith("model.") else f"model: {exc}") from None
        return _check_draft(template, family=pretrained.family, shard_count=req.corpus.shard_count, now=now)
    if not isinstance(req.model, ModelParams):
        raise ApiError(422, "model: the pretrained directory was not read")
    if req.model.max_position_embeddings < req.corpus.seq_len:
        raise ApiError(
            422,
            f"model.max_position_embeddings ({req.model.max_position_embeddings}) must be at least "
            f"corpus.seq_len ({req.corpus.seq_len})",
        )
    count = model_parameter_count(req)
    if count > MAX_PARAM_COUNT:
        raise ApiError(
            422,
            f"model: {count:,} parameters (with corpus.vocab_size {req.corpus.vocab_size}) exceed the limit of "
            f"{MAX_PARAM_COUNT:,}; make it smaller",
        )
    return _check_draft(template, family=req.model.family, shard_count=req.corpus.shard_count, now=now)


def _check_draft(template: dict[str, Any], *, family: str, shard_count: int, now: int) -> dict[str, Any]:
    """``template`` with placeholder artifacts, checked against every ``postTask`` rule."""
    draft = {
        **template,
        "modality": "language",
        "model": {"family": family, "config": {}},
        "dataset": {"shard_hashes": [PLACEHOLDER_ROOT] * shard_count},
        "initial_state_root": PLACEHOLDER_ROOT,
        "param_count": template.get("param_count", 1),
    }
    TrainingTaskSpec.from_mapping(draft).validate(now=now)  # SpecError -> 422, one line
    return template


def request_lora(req: PrepareRequest) -> dict[str, Any] | None:
    """The request's ``model.lora`` as the sponsor tooling takes it (None: full fine-tuning)."""
    if isinstance(req.model, ModelParams) or req.model.lora is None:
        return None
    return req.model.lora.model_dump(exclude_none=True)


def pretrained_model(req: PrepareRequest, settings: ApiSettings) -> PretrainedModel | None:
    """The request's pretrained model directory, confined to the API's data directory and read
    within bounds (config, tokenizer, weight headers; the weights are read when the task is built)."""
    if isinstance(req.model, ModelParams):
        return None
    root = settings.source_dir
    try:
        return read_pretrained(resolve_model_dir(req.model.pretrained, root=root), root=root)
    except SpecError as exc:
        raise ApiError(422, confined_message(exc, root)) from None


def confined_message(exc: Exception, root: Path) -> str:
    """``exc``'s message with the data directory's path left out: files are named relative to it,
    never by the server's own paths."""
    text = str(exc)
    for r in dict.fromkeys((str(root.resolve()), str(root))):
        text = text.replace(f"{r}/", "").replace(r, ".")
    return text


def corpus_source(req: PrepareRequest, settings: ApiSettings) -> DataSource:
    """The request's data source, confined to the API's data directory and bounded by its limits."""
    description = req.corpus.model_dump(exclude_none=True, exclude={"shard_count", "vocab_size", "seq_len"})
    try:
        return DataSource.from_mapping(
            description,
            root=settings.source_dir,
            max_bytes=settings.max_source_bytes,
            max_records=settings.max_source_records,
            label="corpus",
        )
    except DataSourceError as exc:
        raise ApiError(422, str(exc)) from None


def model_parameter_count(req: PrepareRequest) -> int:
    """The parameters of the model ``req`` describes, before anything is built."""
    m = req.model
    if not isinstance(m, ModelParams):
        raise ValueError("a pretrained model's parameters are counted from its config")
    return llama_parameter_count(
        vocab_size=req.corpus.vocab_size,
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_hidden_layers,
        num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_key_value_heads,
        tie_word_embeddings=m.tie_word_embeddings,
    )


def prepare_task(
    services: ApiServices, req: PrepareRequest | VisionPrepareRequest | TimeSeriesPrepareRequest, client: str
) -> PreparedTask:
    """Check ``req`` (every ``postTask`` rule, the model, the source's path), build and publish its
    artifacts (one build at a time) and return the ``postTask`` call."""
    if isinstance(req, VisionPrepareRequest):
        return _prepared(services, prepare_vision(services, req, client))
    if isinstance(req, TimeSeriesPrepareRequest):
        return _prepared(services, prepare_timeseries(services, req, client))
    return _prepared(services, prepare_language(services, req, client))


def prepare_language(services: ApiServices, req: PrepareRequest, client: str) -> PublishedTask:
    now = services.chain_time()
    pretrained = pretrained_model(req, services.settings)
    template = check_request(req, now, pretrained)
    source = corpus_source(req, services.settings)
    model = pretrained if pretrained is not None else req.model.model_dump()
    method = str(req.spec.get("method", "pretrain"))  # checked by check_request
    with services.prepare_gate.build(client):  # one CPU-bound corpus/model build at a time, rate-limited
        try:
            published = publish_language_task(
                services.blobs,
                template=template,
                shard_count=req.corpus.shard_count,
                vocab_size=req.corpus.vocab_size,
                seq_len=req.corpus.seq_len,
                model=model,
                source=source,  # read (bounded) and checked before anything is uploaded
                method=method,
                lora=request_lora(req),
            )
        except PretrainedModelError as exc:  # weights that do not load, NaN, out of range
            raise ApiError(422, confined_message(exc, services.settings.source_dir)) from None
    return published


# Filled in by the API from the source and the model (vision and time series).
OTHER_DERIVED_FIELDS = (*DERIVED_FIELDS, "param_count")
NO_SPONSOR = "0x" + "00" * 20
"""The sponsor the draft is checked with: none yet (the browser's account posts it; the zero
address is never a witness, so the rule that a sponsor is not its own witness is the chain's)."""


def _template(spec: dict[str, Any]) -> dict[str, Any]:
    template = dict(spec)
    if "method" in template:
        raise ApiError(422, "spec.method: a training method applies to language tasks only; leave it out")
    for name in OTHER_DERIVED_FIELDS:
        if name in template:
            raise ApiError(422, f"spec.{name}: derived from the source and the model by the API; leave it out")
    return template


def _model_error(exc: Exception) -> ApiError:
    text = str(exc)
    return ApiError(422, text if text.startswith(("model.", "windows.", "spec.")) else f"model: {text}")


def _meta_parameter_count(build: Any) -> int:
    """The parameters of the model ``build()`` makes on the ``meta`` device (nothing allocated)."""
    import torch

    with torch.device("meta"):
        net = build()
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def _check_size(count: int) -> None:
    if count > MAX_PARAM_COUNT:
        raise ApiError(422, f"model: {count:,} parameters exceed the limit of {MAX_PARAM_COUNT:,}; make it smaller")


def prepare_vision(services: ApiServices, req: VisionPrepareRequest, client: str) -> PublishedTask:
    """A vision task from ``req.image_source`` (confined to the data directory) and a ViT."""
    from syncline.modality.vision import VisionAdapter

    settings = services.settings
    template = _template(req.spec)
    src = req.image_source
    model = req.model.model_dump() if req.model is not None else dict(DEFAULT_VISION_MODEL)
    # The source's image size when it is not given is known once it is read: the draft is checked
    # at a size the patches divide, and the build refuses a real size they do not.
    size = src.image_size or (8 if src.type == "digits" else int(model["patch_size"]))
    channels = src.num_channels or 1
    try:
        source = ImageSource.from_mapping(
            {
                "type": src.type,
                **({"path": src.path} if src.path is not None else {}),
                "max_bytes": settings.max_source_bytes,
                "max_images": settings.max_source_records,
            },
            root=settings.source_dir,
            label="image_source",
        )
    except DataSourceError as exc:
        raise ApiError(422, confined_message(exc, settings.source_dir)) from None
    if source.path is not None and not (source.path.is_file() if src.type == "npz" else source.path.is_dir()):
        kind = "file" if src.type == "npz" else "directory"
        raise ApiError(422, f"image_source.path {src.path!r} is not an existing {kind} in the data directory")
    try:
        check_vision_template(
            template,
            shard_count=src.shard_count,
            model=model,
            now=services.chain_time(),
            sponsor=NO_SPONSOR,
            image_size=size,
            num_channels=channels,
        )
        family = str(model["family"])
        config = {k: v for k, v in model.items() if k != "family"}
        adapter = VisionAdapter(
            image_size=size,
            num_channels=channels,
            num_labels=10,
            pixel_mean=[0.5] * channels,
            pixel_std=[1.0] * channels,
        )
        vit = {"family": family, **config}
        _check_size(_meta_parameter_count(lambda: adapter.build_model(vit, seed=0)))
    except SpecError as exc:
        raise _model_error(exc) from None
    with services.prepare_gate.build(client):  # one CPU-bound build at a time, rate-limited
        try:
            return publish_vision_task(
                services.blobs,
                template=template,
                shard_count=src.shard_count,
                model=model,
                source=source,  # read (bounded) and checked before anything is uploaded
                image_size=src.image_size,
                num_channels=src.num_channels,
            )
        except DataSourceError as exc:
            raise ApiError(422, f"image_source: {confined_message(exc, settings.source_dir)}") from None
        except SpecError as exc:
            raise _model_error(exc) from None


def series_path(text: str, settings: ApiSettings) -> Path:
    """``series_source.path``: a file under the API's data directory (symlinks followed), never elsewhere."""
    root = settings.source_dir.resolve()
    path = (root / Path(text)).resolve()
    if not path.is_relative_to(root):
        raise ApiError(
            422,
            f"series_source.path {text!r} is outside the data directory this server reads; put the files there "
            "and give a path relative to it",
        )
    if not path.is_file():
        raise ApiError(422, f"series_source.path {text!r} is not a file in the data directory")
    size = path.stat().st_size
    if size > settings.max_source_bytes:
        raise ApiError(
            422, f"series_source.path {text!r}: {size:,} bytes exceed the limit of {settings.max_source_bytes:,}"
        )
    return path


def prepare_timeseries(services: ApiServices, req: TimeSeriesPrepareRequest, client: str) -> PublishedTask:
    """A time-series task from ``req.series_source`` (confined to the data directory), its window
    plan and a PatchTST or PatchTSMixer."""
    from syncline.modality.timeseries import TimeSeriesAdapter

    settings = services.settings
    template = _template(req.spec)
    src = req.series_source
    described: dict[str, Any] = {"type": src.type}
    if src.datasets is not None:
        described["datasets"] = list(src.datasets)
    for key in SERIES_FILE_FIELDS:
        value = getattr(src, key)
        if value is not None:
            described[key] = value
    if src.path is not None:
        described["path"] = str(series_path(src.path, settings))
    model = req.model.model_dump() if req.model is not None else dict(DEFAULT_TIMESERIES_MODEL)
    channels = len(src.value_columns) if src.value_columns else 1
    covariates = len(src.covariates) if src.covariates else 0
    try:
        series = SeriesSource.from_mapping(described)
        plan = WindowPlan.from_mapping(req.windows.model_dump())
    except (DataSourceError, SpecError) as exc:
        raise ApiError(422, f"windows: {exc}" if isinstance(exc, SpecError) else str(exc)) from None
    try:
        check_timeseries_template(
            template,
            shard_count=src.shard_count,
            model=model,
            plan=plan,
            num_channels=channels,
            num_covariates=covariates,
            now=services.chain_time(),
            sponsor=NO_SPONSOR,
        )
        spec = spec_model(model, plan, channels, covariates)
        adapter = TimeSeriesAdapter(
            context_length=plan.context_length,
            prediction_length=plan.prediction_length,
            num_channels=channels,
            season_length=plan.season_length,
            num_covariates=covariates,
        )
        net = {"family": spec["family"], **spec["config"]}
        _check_size(_meta_parameter_count(lambda: adapter.build_model(net, seed=0)))
    except SpecError as exc:
        raise _model_error(exc) from None
    with services.prepare_gate.build(client):  # one CPU-bound build at a time, rate-limited
        try:
            return publish_timeseries_task(
                services.blobs,
                template=template,
                model=model,
                source=series,  # read (bounded) and windowed before anything is uploaded
                plan=plan,
                shard_count=src.shard_count,
            )
        except DataSourceError as exc:
            raise ApiError(422, f"series_source: {confined_message(exc, settings.source_dir)}") from None
        except SpecError as exc:
            raise _model_error(exc) from None


def _prepared(services: ApiServices, published: PublishedTask) -> PreparedTask:
    spec = published.spec
    try:
        spec.validate(now=services.chain_time())
    except SpecError as exc:
        raise ApiError(422, str(exc)) from None
    data = services.market.contract.encode_abi("postTask", args=[spec.onchain(published.spec_uri)])
    return PreparedTask(
        spec_hash=spec.spec_hash,
        spec_uri=published.spec_uri,
        param_count=spec.param_count,
        initial_state_root=spec.initial_state_root,
        escrow_wei=str(spec.escrow_wei),
        to=services.market.address.lower(),
        data=str(data),
        value_wei=str(spec.escrow_wei),
    )
