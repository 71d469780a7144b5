"""``POST /api/tasks/prepare``: publish a language task's artifacts and return ``postTask`` calldata.

The browser's account then sends ``{to, data, value}`` itself: the API never holds a key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncline.api.errors import ApiError
from syncline.api.schemas import ModelParams, PreparedTask, PrepareRequest
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
from syncline.sponsor.task_builder import check_lora, publish_language_task

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
    return str(exc).replace(f"{root}/", "").replace(str(root), ".")


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


def prepare_task(services: ApiServices, req: PrepareRequest, client: str) -> PreparedTask:
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
