"""The sponsor side: prepare a language task's artifacts (tokenizer, shards, validation shard,
initial state, spec), publish them to the blob store, post the task; export the final model.

The model is built from an architecture config (random initialisation), or read from a pretrained
Hugging Face directory (:mod:`syncline.sponsor.pretrained`): its weights are the initial state and
its own tokenizer tokenizes the data.

The training texts come from a :class:`~syncline.sponsor.data_sources.DataSource` (the default
demo's Shakespeare corpus unless the sponsor names one). Prepared corpora are cached under
``.syncline/datasets``, keyed by the source's content hash (its description and every byte read)
and the shard count and vocabulary size, so a second run does not retrain the tokenizer while a
changed file does.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from eth_account.signers.local import LocalAccount

from syncline.blobstore import BlobStore
from syncline.blobstore.store import BlobRef, digest_of_file, put_signed
from syncline.confidential.manifest import SealedDataset, seal_dataset
from syncline.confidential.sponsor import SealingRequest
from syncline.errors import SpecError
from syncline.modality import write_export_files
from syncline.modality.base import ModalityAdapter
from syncline.modality.language import (
    METHODS,
    LanguageAdapter,
    PreparedCorpus,
    build_corpus,
    token_count,
    tokenize_corpus,
    tokenize_sft_corpus,
    train_tokenizer,
)
from syncline.modality.lora import apply_lora, load_base_weights, merged_model, trained_parameters
from syncline.paths import state_dir
from syncline.protocol.enums import Modality
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import LoraSpec, TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.context import TaskContext, fetch_by_digest, load_weights, model_config
from syncline.run.state_file import use_disk_state
from syncline.sponsor.data_sources import (
    PAIR_SEPARATOR,
    DataSource,
    DataSourceError,
    LoadedSource,
    PromptResponse,
    parse_source,
    read_source_files,
)
from syncline.sponsor.pretrained import (
    MAX_SIDE_FILE_BYTES,
    TOKENIZER_SIDE_FILES,
    PretrainedModel,
    check_seq_len,
    pretrained_initial_state,
    spec_model,
)


def _hex(b: bytes) -> str:
    return "0x" + b.hex()


CORPUS_FORMAT = "v2"


def cached_corpus(
    shard_count: int,
    vocab_size: int,
    source: DataSource | None = None,
    pretrained: PretrainedModel | None = None,
    method: str = "pretrain",
) -> PreparedCorpus:
    """The corpus of ``source`` (default: the demo's Shakespeare) in ``shard_count`` shards,
    tokenized with the ``pretrained`` model's tokenizer when given (``vocab_size`` is then unused),
    else with a tokenizer of ``vocab_size`` tokens trained on it.

    The source's files are read and hashed on every call (bounded); they are parsed and the
    tokenizer trained only when no cached corpus matches that hash.
    """
    files = read_source_files(source or DataSource.shakespeare())
    tag = f"{files.content_hash}:{shard_count}:{vocab_size}:{CORPUS_FORMAT}"
    if pretrained is not None:
        tokenizer = hashlib.sha256(pretrained.tokenizer_json.encode())
        for name, content in sorted(pretrained.tokenizer_files.items()):  # the chat template renders SFT pairs
            tokenizer.update(f"{name}:{len(content)}:".encode() + content)
        tokenizer_hash = tokenizer.hexdigest()
        tag = f"{files.content_hash}:{shard_count}:pretrained:{tokenizer_hash}:{pretrained.eos_id}:{CORPUS_FORMAT}"
    if method != "pretrain":
        tag += f":{method}"
    key = hashlib.sha256(tag.encode()).hexdigest()
    path = state_dir() / "datasets" / f"{key[:24]}.pkl"
    if path.exists():
        corpus: PreparedCorpus = pickle.loads(path.read_bytes())
        return corpus
    loaded = parse_source(files)
    if method == "sft":
        corpus = prepare_sft_corpus(loaded, shard_count=shard_count, vocab_size=vocab_size, pretrained=pretrained)
    elif pretrained is not None:
        corpus = tokenize_corpus(
            loaded.documents(),
            tokenizer_json=pretrained.tokenizer_json,
            eos_id=pretrained.eos_id,
            shard_count=shard_count,
            held_out=loaded.validation_flags(),
        )
    else:
        corpus = prepare_corpus(loaded, shard_count=shard_count, vocab_size=vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(pickle.dumps(corpus))
    partial.replace(path)  # a concurrent reader never sees half a file
    return corpus


def prepare_corpus(loaded: LoadedSource, *, shard_count: int, vocab_size: int) -> PreparedCorpus:
    """Tokenizer, training shards and the held-out validation shard of a read source."""
    return build_corpus(
        loaded.documents(), shard_count=shard_count, vocab_size=vocab_size, held_out=loaded.validation_flags()
    )


def prepare_sft_corpus(
    loaded: LoadedSource, *, shard_count: int, vocab_size: int, pretrained: PretrainedModel | None
) -> PreparedCorpus:
    """SFT shards of a source's prompt/response pairs: rendered with the pretrained tokenizer's
    chat template when it has one (the prompt as a user turn with the generation prompt, the
    response as what the assistant turn adds), else ``prompt + "\n"`` and ``response`` followed
    by the end-of-text token; tokenized with the pretrained model's tokenizer, or one trained on
    the pairs."""
    pairs = [r for r in loaded.records if isinstance(r, PromptResponse)]
    if len(pairs) != len(loaded.records):
        raise DataSourceError(
            "method sft trains on prompt/response pairs: give the source a prompt_field and a response_field"
        )
    render = chat_renderer(pretrained) if pretrained is not None else None
    if pretrained is not None:
        tokenizer_json, eos_id = pretrained.tokenizer_json, pretrained.eos_id
    else:
        tokenizer_json, eos_id = train_tokenizer(loaded.documents(), vocab_size), 0
    if render is not None:
        rendered = [render(p.prompt, p.response) for p in pairs]
        return tokenize_sft_corpus(
            rendered,
            tokenizer_json=tokenizer_json,
            eos_id=None,
            shard_count=shard_count,
            held_out=loaded.validation_flags(),
        )
    rendered = [(p.prompt + PAIR_SEPARATOR, p.response) for p in pairs]
    return tokenize_sft_corpus(
        rendered,
        tokenizer_json=tokenizer_json,
        eos_id=eos_id,
        shard_count=shard_count,
        held_out=loaded.validation_flags(),
    )


def chat_renderer(pretrained: PretrainedModel) -> Callable[[str, str], tuple[str, str]] | None:
    """``(prompt, response) -> (prompt text, response text)`` through the tokenizer's chat
    template, or None when it has none."""
    import tempfile

    from transformers import AutoTokenizer

    if not {"tokenizer_config.json", "chat_template.jinja"} & set(pretrained.tokenizer_files):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        write_tokenizer(Path(tmp), pretrained.tokenizer_json, pretrained.tokenizer_files)
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    if not getattr(tokenizer, "chat_template", None):
        return None

    def render(prompt: str, response: str) -> tuple[str, str]:
        user = [{"role": "user", "content": prompt}]
        head = str(tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True))
        whole = str(tokenizer.apply_chat_template([*user, {"role": "assistant", "content": response}], tokenize=False))
        if not whole.startswith(head):
            raise DataSourceError("the tokenizer's chat template does not render the reply after the prompt's turn")
        return head, whole[len(head) :]

    return render


def check_corpus_fits(corpus: PreparedCorpus, *, seq_len: int, method: str = "pretrain") -> None:
    """Every training shard holds more than ``seq_len`` tokens and validation at least one sequence."""
    width = corpus.token_bytes
    smallest = min(token_count(s, method, width) for s in corpus.shards)
    validation = token_count(corpus.validation, method, width)
    if smallest <= seq_len or validation < seq_len:
        total = sum(token_count(s, method, width) for s in corpus.shards)
        raise DataSourceError(
            f"the source is too small: {total:,} training tokens over {len(corpus.shards)} shards "
            f"(smallest {smallest:,}) and {validation:,} validation tokens; every shard needs more than "
            f"seq_len={seq_len} tokens and validation at least {seq_len}: add text or lower shard_count or seq_len"
        )


@dataclass(frozen=True)
class PublishedTask:
    spec: TrainingTaskSpec
    spec_uri: str
    initial_state: TrainingState
    # A Confidential task's sealed dataset (its data keys go to the sponsor's encrypted store)
    sealed: SealedDataset | None = None


def publish_language_task(
    blobs: BlobStore,
    *,
    template: Mapping[str, Any],
    shard_count: int,
    vocab_size: int,
    seq_len: int,
    model: Mapping[str, Any] | PretrainedModel,
    seed: int = 0,
    source: DataSource | None = None,
    method: str = "pretrain",
    lora: Mapping[str, Any] | None = None,
    seal: SealingRequest | None = None,
    sponsor: LocalAccount | None = None,
) -> PublishedTask:
    """Publish every artifact of a language task and return its spec (not yet posted on chain).

    ``seal`` makes it a Confidential task: the shards and the validation shard are published only
    as AES-256-GCM ciphertexts (:mod:`syncline.confidential`), the spec's dataset names their
    hashes and its ``confidential`` section the verifier, allow-list and ``dataset_id``; the data
    keys are returned in ``PublishedTask.sealed`` for the sponsor's encrypted store.

    ``model`` is an architecture (``{family, **config}``, randomly initialised from ``seed``) or a
    :class:`PretrainedModel` (its weights are the initial state, its tokenizer tokenizes the
    source and is published with its side files, listed in ``metadata.tokenizer_files``).
    ``method`` ``sft`` trains on the source's prompt/response pairs with the loss on the responses
    only (:func:`prepare_sft_corpus`; ``metadata.method``); ``pretrain`` (the default, not written
    in the spec) on every token.

    ``lora`` (``{r, alpha, target_modules}``) trains LoRA adapters on the model instead of its
    weights: the model's initial weights become the base model, published as a blob and pinned by
    its digest in ``model.lora.base``; the task's state, layout and ``param_count`` are the
    adapters' (initialised by ``peft`` from ``seed``).

    ``template`` holds the remaining spec fields (rounds, witnesses, stake, bonds, ...) as in a
    YAML spec. ``param_count`` is always the model's canonical parameter count (the layout's
    numel, which sizes the chunk trees the contract checks proofs against), filled in here so
    sponsors never type it; a template value that disagrees with the model is a ``SpecError``.
    The source (default: the demo's corpus) is read and checked before anything is uploaded.
    """
    pretrained = model if isinstance(model, PretrainedModel) else None
    if pretrained is not None:
        check_seq_len(pretrained, seq_len)
    if method not in METHODS:
        raise SpecError(f"method {method!r} is not one of {', '.join(METHODS)}")
    corpus = cached_corpus(shard_count, vocab_size, source, pretrained, method)
    check_corpus_fits(corpus, seq_len=seq_len, method=method)
    adapter = LanguageAdapter(seq_len=seq_len, method=method, token_bytes=corpus.token_bytes)
    if pretrained is not None:
        spec_model_: dict[str, Any] = spec_model(pretrained)
        with torch.device("meta"):  # the layout trainers build, allocating nothing
            shapes = adapter.build_model(pretrained.model_config, seed=seed)
        initial = pretrained_initial_state(pretrained, ParameterLayout.from_state_dict(dict(shapes.named_parameters())))
    else:
        assert not isinstance(model, PretrainedModel)
        family = str(model.get("family", "llama"))
        config = {k: v for k, v in model.items() if k != "family"}
        config.setdefault("vocab_size", vocab_size)
        spec_model_ = {"family": family, "config": config}
        net = adapter.build_model({"family": family, **config}, seed=seed)
        params = {k: v.detach() for k, v in net.named_parameters()}
        initial = TrainingState.from_model_state_dict(params, ParameterLayout.from_state_dict(params))
    if lora is not None:  # the initial weights are the frozen base; the state is the adapters'
        initial, spec_model_ = _lora_initial_state(blobs, adapter, initial, spec_model_, lora, seed=seed)
    tokenizer = blobs.put(corpus.tokenizer_json.encode())
    sealed = seal_dataset(corpus.shards, corpus.validation) if seal is not None else None
    if sealed is not None:  # only ciphertexts leave the sponsor
        assert sealed.validation_blob is not None
        shard_refs = [blobs.put(b) for b in sealed.blobs]
        validation = blobs.put(sealed.validation_blob)
    else:
        shard_refs = [blobs.put(s) for s in corpus.shards]
        validation = blobs.put(corpus.validation)
    publish_initial_state(blobs, initial, sponsor)
    side_files: dict[str, dict[str, str]] = {}
    if pretrained is not None:
        for name, content in sorted(pretrained.tokenizer_files.items()):
            ref = blobs.put(content)
            side_files[name] = {"digest": ref.digest, "uri": ref.uri}

    data = dict(template)
    typed = data.get("param_count")
    if typed is not None and str(typed) != str(initial.layout.numel):
        raise SpecError(
            f"param_count {typed} disagrees with the model ({initial.layout.numel} parameters); "
            "leave it out, the sponsor tooling fills it in"
        )
    data.update(
        modality="language",
        model=spec_model_,
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
            "tokenizer": {"digest": tokenizer.digest, "uri": tokenizer.uri},
            "seq_len": seq_len,
            "initial_state": {"uri": initial.state_root_hex},
            **({"tokenizer_files": side_files} if pretrained is not None else {}),
            **({"method": method} if method != "pretrain" else {}),
            **({"token_bytes": corpus.token_bytes} if corpus.token_bytes != 2 else {}),
        },
    )
    if seal is not None and sealed is not None:
        data.update(tier="confidential", confidential=seal.section(sealed.dataset_id))
    spec = TrainingTaskSpec.from_mapping(data)
    ref = blobs.put(spec.canonical_bytes())
    if ref.digest != spec.spec_hash:
        raise RuntimeError("spec blob digest differs from the spec hash")  # keccak of the same bytes
    return PublishedTask(spec=spec, spec_uri=ref.uri, initial_state=initial, sealed=sealed)


def publish_initial_state(blobs: BlobStore, state: TrainingState, sponsor: LocalAccount | None) -> BlobRef:
    """Store the task's initial state under its state-root alias, in ``sponsor``'s signed slot
    (like every other alias an agent relies on: readers try the slots of the task's on-chain
    sponsor and witnesses first, so an anonymous upload under the same alias is never tried
    before it). ``sponsor=None`` (a task prepared for a browser wallet, which signs no alias) leaves
    the candidate unsigned: readers then verify every candidate against the root, and skip bad ones."""
    data = state.to_bytes()
    if sponsor is None:
        return blobs.put(data, alias=state.state_root_hex)
    return put_signed(blobs, data, state.state_root_hex, sponsor)


def sponsor_lora(lora: Mapping[str, Any], *, base_digest: str, base_uri: str = "") -> LoraSpec:
    """A sponsor's ``model.lora`` (``{r, alpha, target_modules}``) with the base model pinned by
    ``base_digest``; the sponsor never writes ``base`` (the tooling publishes the base model)."""
    if "base" in lora:
        raise SpecError("model.lora.base: the sponsor tooling publishes the base model and fills it in; leave it out")
    return LoraSpec.from_mapping({**lora, "base": {"digest": base_digest, "uri": base_uri}})


def check_lora(model_config: Mapping[str, Any], lora: Mapping[str, Any]) -> LoraSpec:
    """A sponsor's ``model.lora`` checked against the model ``model_config`` describes (``{family,
    **config}``) before anything is built or uploaded: valid fields, and target modules ``peft``
    finds in that model (built on the ``meta`` device). The base digest is a placeholder."""
    lora_spec = sponsor_lora(lora, base_digest="0x" + "5c" * 32)
    with torch.device("meta"):
        apply_lora(LanguageAdapter().build_model(model_config, seed=0), lora_spec, seed=0)
    return lora_spec


def _lora_initial_state(
    blobs: BlobStore,
    adapter: ModalityAdapter,
    base: TrainingState,
    spec_model_: dict[str, Any],
    lora: Mapping[str, Any],
    *,
    seed: int,
) -> tuple[TrainingState, dict[str, Any]]:
    """Publish ``base`` (the whole model's initial weights) as the LoRA task's base model blob and
    return the adapters' initial state and the spec's ``model`` with ``lora`` (the base pinned by
    the blob's digest)."""
    base_ref = blobs.put(base.to_bytes())
    lora_spec = sponsor_lora(lora, base_digest=base_ref.digest, base_uri=base_ref.uri)
    net = adapter.build_model({"family": spec_model_["family"], **spec_model_["config"]}, seed=seed)
    load_base_weights(net, base.to_state_dict())
    net = apply_lora(net, lora_spec, seed=seed)
    params = {k: v.detach() for k, v in trained_parameters(net).items()}
    initial = TrainingState.from_model_state_dict(params, ParameterLayout.from_state_dict(params))
    return initial, {**spec_model_, "lora": lora_spec.to_mapping()}


LORA_ADAPTER_DIR = "adapter"
"""Where :func:`export_model` writes a LoRA task's adapter (``peft``'s ``save_pretrained``)."""


def export_model(ctx: TaskContext, state_root: str, out_dir: Path) -> Path:
    """Write the state as a Hugging Face ``save_pretrained`` directory (model + tokenizer): the
    spec's model family, loadable with ``AutoModelForCausalLM.from_pretrained`` and its tokenizer
    with ``AutoTokenizer.from_pretrained`` (a pretrained model's tokenizer files as published).

    A LoRA task's export is the merged model (the base with the adapters folded in) in
    ``out_dir`` and the adapter alone in ``out_dir/adapter``, which ``peft`` loads on top of the
    base (``PeftModel.from_pretrained(base, out_dir / "adapter")``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = {p.name: p.stat().st_mtime_ns for p in out_dir.iterdir()}
    if use_disk_state(ctx.layout.numel, None):  # streamed from a file, one parameter at a time
        state_file, _ = ctx.fetch_state_file(state_root, out_dir / "state.safetensors")
        model = ctx.build_model()
        load_weights(model, state_file)
        weights_keccak = digest_of_file(state_file.path)[0]  # keccak of the state blob's bytes
        state_file.remove()
    else:
        state = ctx.fetch_state(state_root)
        model = ctx.build_model(state)
        weights_keccak = _hex(keccak(state.to_bytes()))
    lora = ctx.spec.model.lora
    if lora is not None:  # the adapter alone (peft's format), then the merged model beside it
        adapter_dir = out_dir / LORA_ADAPTER_DIR
        adapter_dir.mkdir(exist_ok=True)
        adapter_before = {p.name: p.stat().st_mtime_ns for p in adapter_dir.iterdir()}
        model.save_pretrained(adapter_dir)  # type: ignore[operator]
        _share_written(adapter_dir, adapter_before)
        model = merged_model(model)
    model.save_pretrained(out_dir)  # type: ignore[operator]
    if ctx.spec.modality == Modality.LANGUAGE:
        write_tokenizer(out_dir, ctx.tokenizer_json, tokenizer_side_files(ctx))
    else:
        write_export_files(out_dir, ctx.spec)
    (out_dir / "syncline.json").write_text(
        json.dumps(
            {
                "task_id": ctx.task_id,
                "state_root": state_root,
                "spec_hash": ctx.spec.spec_hash,
                "model": model_config(ctx.spec),
                "weights_keccak": weights_keccak,
                **({"lora": lora.to_mapping(), "adapter_dir": LORA_ADAPTER_DIR} if lora is not None else {}),
            },
            indent=2,
        )
    )
    _share_written(out_dir, before)
    return out_dir


def tokenizer_side_files(ctx: TaskContext) -> dict[str, bytes] | None:
    """The tokenizer files a pretrained model's task pins (``metadata.tokenizer_files``), fetched
    and hash-checked; None for a task with a trained tokenizer (no such key)."""
    if "tokenizer_files" not in ctx.spec.metadata:
        return None
    listed = ctx.spec.metadata["tokenizer_files"]
    if not isinstance(listed, Mapping):
        raise SpecError("metadata.tokenizer_files: expected {name: {digest, uri}}")
    files: dict[str, bytes] = {}
    for name, ref in listed.items():
        if name not in TOKENIZER_SIDE_FILES or not isinstance(ref, Mapping):
            raise SpecError(f"metadata.tokenizer_files: {name!r} is not one of {', '.join(TOKENIZER_SIDE_FILES)}")
        files[name] = fetch_by_digest(
            ctx.blobs, str(ref["digest"]), (str(ref.get("uri", "")),), max_bytes=MAX_SIDE_FILE_BYTES
        )
    return files


def write_tokenizer(out_dir: Path, tokenizer_json: str, side_files: Mapping[str, bytes] | None) -> None:
    """The task's tokenizer as ``AutoTokenizer.from_pretrained`` reads it: a pretrained model's
    ``tokenizer.json`` and side files as published; a trained one (``side_files`` None) wrapped
    with its ``<|endoftext|>`` end-of-text token."""
    if side_files is not None:
        (out_dir / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
        for name, data in side_files.items():
            (out_dir / name).write_bytes(data)
        return
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer.from_str(tokenizer_json), eos_token="<|endoftext|>"
    )
    tok.save_pretrained(out_dir)


def _share_written(directory: Path, before: Mapping[str, int]) -> None:
    """Give the files just written to ``directory`` the mode of any new file (0644 under the usual
    umask): ``safetensors`` writes its file 0600, which another user serving or loading the
    model cannot read. Files that were there before and are unchanged keep their mode."""
    umask = os.umask(0o022)
    os.umask(umask)
    mode = 0o666 & ~umask
    for path in directory.iterdir():
        if path.is_file() and before.get(path.name) != path.stat().st_mtime_ns:
            path.chmod(mode)


def check_language_template(
    template: Mapping[str, Any],
    *,
    shard_count: int,
    model: Mapping[str, Any] | PretrainedModel,
    now: int,
    sponsor: str,
    lora: Mapping[str, Any] | None = None,
) -> TrainingTaskSpec:
    """Validate a sponsor's language-task template before any artifact is built or uploaded.

    Every rule ``postTask`` enforces on what the sponsor wrote (k of N witnesses, trainers against
    shards, windows, bonds, the enrollment deadline against ``now``, the sponsor not a witness) is
    checked on a provisional spec whose artifact fields (shard hashes, initial state root,
    parameter count) are placeholders; a ``SpecError`` names the first problem. Returns the
    provisional spec."""
    placeholder = "0x" + "5c" * 32
    data = dict(template)
    if isinstance(model, PretrainedModel):
        described = spec_model(model)
    else:
        described = {
            "family": str(model.get("family", "llama")),
            "config": {k: v for k, v in model.items() if k != "family"},
        }
    if lora is not None:
        described["lora"] = check_lora({"family": described["family"], **described["config"]}, lora).to_mapping()
    data.update(
        modality="language",
        model=described,
        dataset={"shard_hashes": [placeholder] * shard_count},
        initial_state_root=placeholder,
        param_count=data.get("param_count") or 1,
    )
    return TrainingTaskSpec.from_mapping(data).validate(now=now, sponsor=sponsor)
