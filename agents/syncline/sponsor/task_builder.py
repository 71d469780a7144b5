"""The sponsor side: prepare a language task's artifacts (tokenizer, shards, validation shard,
initial state, spec), publish them to the blob store, post the task; export the final model.

Prepared corpora are cached under ``.syncline/datasets`` (keyed by shard count and vocab size) so
a second run does not retrain the tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncline.blobstore import BlobStore
from syncline.blobstore.store import digest_of_file
from syncline.errors import SpecError
from syncline.modality.language import LanguageAdapter, PreparedCorpus, prepare_corpus
from syncline.paths import state_dir
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.context import TaskContext, load_weights, model_config
from syncline.run.state_file import use_disk_state


def _hex(b: bytes) -> str:
    return "0x" + b.hex()


def cached_corpus(shard_count: int, vocab_size: int) -> PreparedCorpus:
    key = hashlib.sha256(f"shakespeare:{shard_count}:{vocab_size}:v1".encode()).hexdigest()[:16]
    path = state_dir() / "datasets" / f"{key}.pkl"
    if path.exists():
        corpus: PreparedCorpus = pickle.loads(path.read_bytes())
        return corpus
    corpus = prepare_corpus(shard_count=shard_count, vocab_size=vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(corpus))
    return corpus


@dataclass(frozen=True)
class PublishedTask:
    spec: TrainingTaskSpec
    spec_uri: str
    initial_state: TrainingState


def publish_language_task(
    blobs: BlobStore,
    *,
    template: Mapping[str, Any],
    shard_count: int,
    vocab_size: int,
    seq_len: int,
    model: Mapping[str, Any],
    seed: int = 0,
) -> PublishedTask:
    """Publish every artifact of a language task and return its spec (not yet posted on chain).

    ``template`` holds the remaining spec fields (rounds, witnesses, stake, bonds, ...) as in a
    YAML spec. ``param_count`` is always the model's canonical parameter count (the layout's
    numel, which sizes the chunk trees the contract checks proofs against), filled in here so
    sponsors never type it; a template value that disagrees with the model is a ``SpecError``.
    """
    corpus = cached_corpus(shard_count, vocab_size)
    tokenizer = blobs.put(corpus.tokenizer_json.encode())
    shard_refs = [blobs.put(s) for s in corpus.shards]
    validation = blobs.put(corpus.validation)

    family = str(model.get("family", "llama"))
    config = {k: v for k, v in model.items() if k != "family"}
    config.setdefault("vocab_size", vocab_size)
    adapter = LanguageAdapter(seq_len=seq_len)
    net = adapter.build_model({"family": family, **config}, seed=seed)
    params = {k: v.detach() for k, v in net.named_parameters()}
    initial = TrainingState.from_model_state_dict(params, ParameterLayout.from_state_dict(params))
    blobs.put(initial.to_bytes(), alias=initial.state_root_hex)

    data = dict(template)
    typed = data.get("param_count")
    if typed is not None and str(typed) != str(initial.layout.numel):
        raise SpecError(
            f"param_count {typed} disagrees with the model ({initial.layout.numel} parameters); "
            "leave it out, the sponsor tooling fills it in"
        )
    data.update(
        modality="language",
        model={"family": family, "config": config},
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
        },
    )
    spec = TrainingTaskSpec.from_mapping(data)
    ref = blobs.put(spec.canonical_bytes())
    if ref.digest != spec.spec_hash:
        raise RuntimeError("spec blob digest differs from the spec hash")  # keccak of the same bytes
    return PublishedTask(spec=spec, spec_uri=ref.uri, initial_state=initial)


def export_model(ctx: TaskContext, state_root: str, out_dir: Path) -> Path:
    """Write the state as a Hugging Face ``save_pretrained`` directory (model + tokenizer)."""
    from transformers import PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
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
    model.save_pretrained(out_dir)  # type: ignore[operator]
    from tokenizers import Tokenizer

    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer.from_str(ctx.tokenizer_json), eos_token="<|endoftext|>"
    )
    tok.save_pretrained(out_dir)
    (out_dir / "syncline.json").write_text(
        json.dumps(
            {
                "task_id": ctx.task_id,
                "state_root": state_root,
                "spec_hash": ctx.spec.spec_hash,
                "model": model_config(ctx.spec),
                "weights_keccak": weights_keccak,
            },
            indent=2,
        )
    )
    return out_dir
