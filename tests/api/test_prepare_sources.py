"""``/api/tasks/prepare`` with a sponsor's own data: a JSONL file under the API's data directory
becomes the task's shards; a path outside it (or missing, or a file without the named field) is a
one-line 422 that does not echo the server's paths, and nothing outside the directory is read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from web3 import Web3

from syncline.api.server import ApiServer
from syncline.blobstore import HttpBlobStore, digest_of
from syncline.chain.market import MarketClient
from syncline.protocol.spec import TrainingTaskSpec
from syncline.sponsor.data_sources import DataSource, load_source
from syncline.sponsor.task_builder import prepare_corpus

from .conftest import SEQ_LEN, SHARD_COUNT, TINY_MODEL, VOCAB_SIZE, Http, assert_error

pytestmark = pytest.mark.chain

SIZES = {"shard_count": SHARD_COUNT, "vocab_size": VOCAB_SIZE, "seq_len": SEQ_LEN}


def _body(http: Http, corpus: dict[str, Any]) -> dict[str, Any]:
    template = http.ok("/api/template")
    # The form's defaults stay the sizes alone (the form turns every template leaf into a field).
    assert set(template["corpus"]) == set(SIZES)
    spec = {**template["spec"], "name": "own-data-task", "inner_steps": 4, "checkpoint_interval": 2, "rounds": 2}
    return {"spec": spec, "corpus": {**corpus, **SIZES}, "model": TINY_MODEL}


def test_prepare_from_a_jsonl_file_in_the_data_directory(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, blobs: HttpBlobStore
) -> None:
    data_dir = api.settings.source_dir
    folder = data_dir / "prepare-sources"
    folder.mkdir(exist_ok=True)
    lines = [{"q": f"What is {i} plus {i}?", "a": f"{i} plus {i} is {2 * i}."} for i in range(60)]
    (folder / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    corpus = {"type": "jsonl", "path": "prepare-sources/sums.jsonl", "prompt_field": "q", "response_field": "a"}
    reply = http.post("/api/tasks/prepare", _body(http, corpus))
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
    assert "0x" + bytes(market.spec_tuple(market.task_count())[0]).hex() == prepared["spec_hash"]
    expected = prepare_corpus(
        load_source(DataSource.from_mapping({**corpus, "path": str(folder / "sums.jsonl")})),
        shard_count=SHARD_COUNT,
        vocab_size=VOCAB_SIZE,
    )
    assert list(spec.dataset.shard_hashes) == [digest_of(s) for s in expected.shards]
    assert spec.dataset.validation_hash == digest_of(expected.validation)


def test_prepare_refuses_paths_outside_the_data_directory(api: ApiServer, http: Http) -> None:
    data_dir = api.settings.source_dir
    secret = data_dir.parent / "outside-secret.jsonl"
    secret.write_text('{"text": "not for the web"}\n')
    for path in ("../outside-secret.jsonl", str(secret), "/etc/passwd"):
        message = assert_error(
            http.post("/api/tasks/prepare", _body(http, {"type": "jsonl", "path": path})),
            422,
            "outside the data directory",
        )
        assert message.startswith("corpus.path ") and str(data_dir) not in message
    assert_error(
        http.post("/api/tasks/prepare", _body(http, {"type": "text_dir", "path": "no-such-folder"})),
        422,
        "corpus.path 'no-such-folder' does not exist in the data directory",
    )
    assert_error(
        http.post("/api/tasks/prepare", _body(http, {"type": "csv"})), 422, "corpus.path: a csv source needs a path"
    )
    assert_error(
        http.post("/api/tasks/prepare", _body(http, {"type": "sqlite", "path": "x"})),
        422,
        "corpus.type: Input should be",
    )
    (data_dir / "wrong-field.jsonl").write_text('{"body": "x"}\n')
    message = assert_error(
        http.post("/api/tasks/prepare", _body(http, {"type": "jsonl", "path": "wrong-field.jsonl"})),
        422,
        "wrong-field.jsonl line 1: no field 'text' (fields present: 'body')",
    )
    assert str(data_dir) not in message


def test_a_nul_or_a_lone_surrogate_in_a_request_is_a_422_not_a_500(api: ApiServer, http: Http) -> None:
    """Issue 26 item 9: ``corpus.path`` with a NUL byte raised ValueError in ``Path.resolve`` (a
    500); a lone surrogate in a spec string made ``spec_hash`` raise UnicodeEncodeError."""
    for corpus in ({"type": "jsonl", "path": "a\x00b.jsonl"}, {"type": "jsonl", "path": "x\ud800.jsonl"}):
        assert_error(http.post("/api/tasks/prepare", _body(http, corpus)), 422, "corpus.path")
    body = _body(http, {"type": "jsonl", "path": "sums.jsonl"})
    body["spec"]["name"] = "name\ud800"
    assert_error(http.post("/api/tasks/prepare", body), 422, "surrogate")
