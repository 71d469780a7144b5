"""``/api/tasks/prepare`` with ``model: {pretrained: <dir>}`` (issue 13, item 2): a Hugging Face
directory under the API's data directory becomes the task's initial state and tokenizer; a
directory outside it, or a broken one, is a one-line 422 that does not echo the server's paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from web3 import Web3

from sponsor._pretrained_models import build_pretrained
from syncline.api.server import ApiServer
from syncline.blobstore import HttpBlobStore, digest_of
from syncline.chain.market import MarketClient
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState

from .conftest import SEQ_LEN, SHARD_COUNT, VOCAB_SIZE, Http, assert_error

pytestmark = pytest.mark.chain

TEXTS = [f"Note {i}: the river rose by {i % 9} inches and the mill kept turning." for i in range(60)]


def _body(http: Http, model_dir: str) -> dict[str, Any]:
    template = http.ok("/api/template")
    spec = {**template["spec"], "name": "fine-tune-task", "inner_steps": 4, "checkpoint_interval": 2, "rounds": 2}
    corpus = {"type": "jsonl", "path": "pretrained-texts.jsonl", "shard_count": SHARD_COUNT}
    return {
        "spec": spec,
        "corpus": {**corpus, "vocab_size": VOCAB_SIZE, "seq_len": SEQ_LEN},
        "model": {"pretrained": model_dir},
    }


def _model_dir(data_dir: Path, name: str) -> tuple[Path, torch.nn.Module]:
    (data_dir / "pretrained-texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    model_dir = data_dir / name
    return model_dir, build_pretrained("qwen2", model_dir, TEXTS)


def test_prepare_from_a_pretrained_directory(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    model_dir, model = _model_dir(api.settings.source_dir, "pretrained-qwen2")
    reply = http.post("/api/tasks/prepare", _body(http, "pretrained-qwen2"))
    assert reply.status == 200, reply.body
    prepared = reply.json()
    tx = w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": Web3.to_checksum_address(prepared["to"]), "data": prepared["data"]}
        | {"value": int(prepared["value_wei"])}
    )
    assert w3.eth.wait_for_transaction_receipt(tx)["status"] == 1
    spec = TrainingTaskSpec.from_artifact(
        blobs.fetch(prepared["spec_uri"], expected_digest=prepared["spec_hash"], max_bytes=1 << 20)
    )
    assert spec.model.family == "qwen2"
    params = {k: v.detach() for k, v in model.named_parameters()}
    candidates = list(blobs.candidates(spec.initial_state_root, signers=()))
    initial = TrainingState.from_bytes(blobs.get(candidates[0], max_bytes=1 << 24))
    assert initial.state_root_hex == prepared["initial_state_root"]
    assert initial == TrainingState.from_model_state_dict(params, initial.layout)
    assert spec.metadata["tokenizer"]["digest"] == digest_of((model_dir / "tokenizer.json").read_bytes())


def test_prepare_refuses_a_pretrained_directory_outside_the_data_directory_or_broken(
    api: ApiServer, http: Http
) -> None:
    data_dir = api.settings.source_dir
    outside, _ = _model_dir(data_dir.parent, "outside-model")
    for path in ("../outside-model", str(outside)):
        message = assert_error(http.post("/api/tasks/prepare", _body(http, path)), 422, "outside the data directory")
        assert message.startswith("model.pretrained ") and str(data_dir) not in message
    broken, _ = _model_dir(data_dir, "broken-model")
    (broken / "model.safetensors").rename(broken / "pytorch_model.bin")
    message = assert_error(
        http.post("/api/tasks/prepare", _body(http, "broken-model")),
        422,
        "weights in pickle files (.bin/.pt) are refused",
    )
    assert str(data_dir) not in message and message.startswith("broken-model: ")


def test_prepare_sft_on_prompt_response_pairs(api: ApiServer, http: Http, blobs: HttpBlobStore) -> None:
    """``spec.method: sft``: the task trains the responses of the corpus's pairs (``metadata.method``)."""
    data_dir = api.settings.source_dir
    _model_dir(data_dir, "pretrained-sft")
    pairs = [{"q": f"Where is mill {i}?", "a": f"Mill {i} stands by the river."} for i in range(60)]
    (data_dir / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    body = _body(http, "pretrained-sft")
    body["spec"]["method"] = "sft"
    body["corpus"].update(path="pairs.jsonl", prompt_field="q", response_field="a")
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    spec = TrainingTaskSpec.from_artifact(
        blobs.fetch(prepared["spec_uri"], expected_digest=prepared["spec_hash"], max_bytes=1 << 20)
    )
    assert spec.metadata["method"] == "sft"
    body["spec"]["method"] = "dpo"
    assert_error(http.post("/api/tasks/prepare", body), 422, "spec.method: 'dpo' is not one of pretrain, sft")


def test_prepare_a_lora_task_from_a_pretrained_directory(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    """``model: {pretrained, lora}``: the spec pins the base by digest, the state is the adapters'."""
    _, model = _model_dir(api.settings.source_dir, "lora-base")
    body = _body(http, "lora-base")
    body["model"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["v_proj", "q_proj"]}
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    spec = TrainingTaskSpec.from_artifact(
        blobs.fetch(prepared["spec_uri"], expected_digest=prepared["spec_hash"], max_bytes=1 << 20)
    )
    assert spec.model.lora is not None and spec.model.lora.target_modules == ("q_proj", "v_proj")
    base = TrainingState.from_bytes(blobs.get(spec.model.lora.base_digest, max_bytes=1 << 24))
    params = {k: v.detach() for k, v in model.named_parameters()}
    assert base == TrainingState.from_model_state_dict(params, base.layout)
    assert 0 < prepared["param_count"] == spec.param_count < sum(p.numel() for p in params.values()) // 4


@pytest.mark.parametrize(
    ("lora", "words"),
    [
        ({"r": 4, "target_modules": ["no_such_proj"]}, "model.lora.target_modules"),
        ({"r": 0, "target_modules": ["q_proj"]}, "model.lora.r"),
        ({"r": 4, "target_modules": []}, "model.lora.target_modules"),
        ({"r": 4, "target_modules": ["q_proj"], "base": {"digest": "0x" + "11" * 32}}, "model.lora.base"),
    ],
)
def test_prepare_refuses_a_bad_lora_in_one_line_before_any_build(
    api: ApiServer, http: Http, lora: dict[str, Any], words: str
) -> None:
    _model_dir(api.settings.source_dir, "lora-bad-base")
    body = _body(http, "lora-bad-base")
    body["model"]["lora"] = lora
    message = assert_error(http.post("/api/tasks/prepare", body), 422, words)
    assert "\n" not in message
