"""The HTTP surface: every error is one JSON line with the right status, the schema lists every
endpoint, metrics and health answer, the config and template match the devnet and the demo, and
the event stream announces the indexer's progress."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from web3 import Web3

from syncline.api import ApiServer, ApiSettings
from syncline.api.settings import MAX_BODY_BYTES
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.cli import main
from syncline.errors import SynclineError
from syncline.protocol.spec import MAX_PARAM_COUNT, TrainingTaskSpec
from syncline.sponsor.task_defaults import TaskDefaults, default_task

from .conftest import Http, assert_error

pytestmark = pytest.mark.chain

ENDPOINTS = {
    "/healthz": "get",
    "/metrics": "get",
    "/api/config": "get",
    "/api/template": "get",
    "/api/tasks/prepare": "post",
    "/api/runs": "get",
    "/api/runs/{task_id}": "get",
    "/api/runs/{task_id}/rounds": "get",
    "/api/runs/{task_id}/trainers": "get",
    "/api/runs/{task_id}/witnesses": "get",
    "/api/runs/{task_id}/challenges": "get",
    "/api/runs/{task_id}/losses": "get",
    "/api/runs/{task_id}/receipt": "get",
    "/api/accounts/{address}": "get",
    "/api/runs/{task_id}/state/{root}": "get",
    "/api/runs/{task_id}/model": "get",
    "/api/runs/{task_id}/challenges/build": "post",
    "/api/stream": "get",
}


def test_every_error_is_one_json_line(http: Http, market: MarketClient, sponsor: Signer, spec_factory: Any) -> None:
    assert_error(http.get("/api/runs/999"), 404, "unknown task id 999")
    task_id, _ = market.post_task(sponsor, spec_factory(), "ipfs://errors")
    for suffix in ("", "/rounds", "/trainers", "/witnesses", "/challenges", "/losses", "/receipt", "/model"):
        assert_error(http.get(f"/api/runs/{task_id + 1}{suffix}"), 404, f"unknown task id {task_id + 1}")
    assert_error(http.get("/api/runs/-3"), 404, "unknown task id -3")
    assert_error(http.get("/api/runs/abc"), 422, "task_id:")
    assert_error(http.get("/api/nothing-here"), 404, "no such endpoint")
    assert_error(http.request("DELETE", "/api/runs"), 405, "not allowed")
    assert_error(http.get("/api/accounts/0x1234"), 422, "is not a 0x-prefixed 20-byte hex address")
    assert_error(http.get("/api/accounts/0x" + "zz" * 20), 422, "address:")
    assert_error(http.get(f"/api/runs/{task_id}/state/0x12"), 422, "root:")
    assert_error(http.get(f"/api/runs/{task_id}/state/0x" + "ab" * 32), 404, "is not a state root of task")
    # The test spec's artifact lives nowhere the API can fetch: the model cannot be built.
    assert_error(http.get(f"/api/runs/{task_id}/model"), 502, "unsupported URI scheme 'ipfs'")

    # Bodies: malformed JSON, wrong types, missing fields, unknown fields, oversized.
    assert_error(http.post("/api/tasks/prepare", raw=b"{not json"), 422, "not valid JSON")
    assert_error(http.post("/api/tasks/prepare", {"spec": {}, "corpus": {}}), 422, "required field missing")
    good_corpus = {"shard_count": 3, "vocab_size": 300, "seq_len": 16}
    model = dict(TaskDefaults().model)
    bad = {"spec": {}, "corpus": {**good_corpus, "shard_count": "many"}, "model": model}
    assert_error(http.post("/api/tasks/prepare", bad), 422, "corpus.shard_count:")
    huge = {"spec": {}, "corpus": good_corpus, "model": {**model, "hidden_size": 16384}}
    assert_error(
        http.post("/api/tasks/prepare", huge), 422, "model.hidden_size: Input should be less than or equal to 8192"
    )
    shape = {"hidden_size": 8192, "intermediate_size": 32768, "num_hidden_layers": 128, "num_attention_heads": 64}
    giant = {"spec": {}, "corpus": good_corpus, "model": {**model, **shape, "num_key_value_heads": 8}}
    assert_error(
        http.post("/api/tasks/prepare", giant), 422, "parameters (with corpus.vocab_size 300) exceed the limit"
    )
    heads = {"spec": {}, "corpus": good_corpus, "model": {**model, "num_attention_heads": 3}}
    assert_error(http.post("/api/tasks/prepare", heads), 422, "multiple of num_attention_heads")
    extra = {"spec": {}, "corpus": good_corpus, "model": model, "sneaky": 1}
    assert_error(http.post("/api/tasks/prepare", extra), 422, "sneaky")
    spec = {"name": "x", "rounds": 2}
    assert_error(
        http.post("/api/tasks/prepare", {"spec": spec, "corpus": good_corpus, "model": model}),
        422,
        "missing spec field",
    )
    assert_error(
        http.post("/api/tasks/prepare", {"spec": {"model": {}}, "corpus": good_corpus, "model": model}),
        422,
        "spec.model: derived from corpus and model",
    )
    big = json.dumps({"spec": {"name": "x" * (MAX_BODY_BYTES + 10)}}).encode()
    assert_error(http.post("/api/tasks/prepare", raw=big), 413, f"exceeds {MAX_BODY_BYTES} bytes")
    build = f"/api/runs/{task_id}/challenges/build"
    assert_error(http.post(build, {"round": 0, "kind": "bribery"}), 422, "kind: Input should be")
    assert_error(http.post(build, {"round": -1, "kind": "censorship"}), 422, "round:")
    assert_error(http.post(build, {"round": 99, "kind": "censorship"}), 422, "round: task")
    assert_error(http.post(build, {"round": 0, "kind": "censorship"}), 409, "round 0 has not opened")
    assert_error(http.post(f"/api/runs/{task_id + 5}/challenges/build", {"round": 0, "kind": "censorship"}), 404)


def test_a_spec_the_contract_would_refuse_is_a_422(http: Http, w3: Web3, witnesses: list[Signer]) -> None:
    template = http.ok("/api/template")
    body = {"spec": template["spec"], "corpus": template["corpus"], "model": template["model"]}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"threshold": 4}, "threshold k=4"),
        ({"tier": "open"}, "tier open does not admit rule coordinate_median"),
        ({"enrollment_deadline": chain_time(w3) - 1}, "enrollment_deadline"),
        ({"witnesses": [witnesses[0].address, witnesses[0].address]}, "duplicate"),
        ({"max_trainers": 7}, "shards"),
        ({"gradient_bits": 4}, "gradient_bits 4"),
        ({"rounds": "many"}, "rounds: expected an integer"),
    ]
    for change, message in cases:
        reply = http.post("/api/tasks/prepare", {**body, "spec": {**body["spec"], **change}})
        assert_error(reply, 422, message)


def test_schema_health_and_metrics(http: Http, api: ApiServer, w3: Web3) -> None:
    schema = http.ok("/openapi.json")
    for path, method in ENDPOINTS.items():
        assert method in schema["paths"].get(path, {}), path
    assert "RunSummary" in schema["components"]["schemas"]
    health = http.ok("/healthz")
    assert health["status"] == "ok" and health["indexed_block"] <= health["head_block"] + 1
    assert http.get("/docs").status == 200
    http.get("/api/runs/424242")
    metrics = http.get("/metrics")
    assert metrics.status == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.body.decode()
    assert 'syncline_api_requests_total{method="GET",route="/api/runs/{task_id}",status="404"}' in text
    assert "syncline_api_indexed_block" in text and "syncline_api_indexer_lag_blocks" in text
    assert "syncline_api_get_logs_calls_total" in text
    # No web UI built in the test settings: "/" says how to build it.
    assert_error(http.get("/"), 404, "web UI is not built")


def test_config_and_template(
    http: Http, api: ApiServer, w3: Web3, market: MarketClient, accounts: list[Signer]
) -> None:
    config = http.ok("/api/config")
    assert config["chain_id"] == 31337 and config["devnet"] is True
    assert config["market"] == market.address.lower()
    assert any(item.get("name") == "postTask" for item in config["abi"])
    dev = config["dev_accounts"]
    assert [d["label"] for d in dev[:3]] == ["anvil #0", "anvil #1", "anvil #2"]
    assert [d["address"] for d in dev] == [a.address.lower() for a in accounts]
    assert config["blob_store"] == api.settings.blob_store

    before = int(time.time())
    template = http.ok("/api/template")
    after = int(time.time())
    now = template["chain_time"]
    assert abs(now - chain_time(w3)) <= 2
    spec = template["spec"]

    def matches(start: int) -> bool:
        # the deadlines count from the chain's time or this machine's clock, whichever is later
        expected = default_task(TaskDefaults(), [a.address for a in accounts[4:7]], start)
        for name, value in expected.items():
            got = spec[name]
            if name == "witnesses":
                if got != [w.lower() for w in value]:
                    return False
            elif name == "aggregation":
                if got["rule"] != value["rule"]:
                    return False
            elif (str(got) if name.endswith("_wei") else got) != (str(value) if name.endswith("_wei") else value):
                return False
        return True

    assert any(matches(max(now, wall)) for wall in range(before, after + 1)), spec
    limits = template["limits"]
    assert limits["tier_rules"]["open"] == ["mean"]
    assert set(limits["tier_rules"]["verified"]) == set(limits["rules"])
    assert limits["gradient_bits"] == [8, 16] and limits["max_window_s"] == 365 * 24 * 3600
    assert limits["model"]["hidden_size"]["max"] == 8192 and limits["corpus"]["shard_count"]["max"] == 256
    assert limits["model"]["max_parameters"] == MAX_PARAM_COUNT and limits["corpus"]["vocab_size"]["max"] == 65536
    assert template["model"] == TaskDefaults().model


def test_the_event_stream_announces_new_blocks(
    http: Http, api: ApiServer, market: MarketClient, sponsor: Signer, spec_factory: Callable[..., TrainingTaskSpec]
) -> None:
    with urllib.request.urlopen(http.base + "/api/stream", timeout=30) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")

        def next_update() -> int:
            data = None
            while True:
                line = stream.readline().decode()
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                elif line == "\n" and data is not None:
                    return int(data["indexed_block"])

        first = next_update()
        market.post_task(sponsor, spec_factory(), "ipfs://stream")
        head = market.w3.eth.block_number
        while (block := next_update()) < head:
            assert block >= first
    assert api.wait_indexed() >= head


def test_settings_errors_are_one_line(
    tmp_path: Path, api_settings: ApiSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = ApiSettings(deployment=tmp_path / "none.json", blob_store=api_settings.blob_store, port=0)
    with pytest.raises(SynclineError, match="no deployment file"):
        ApiServer(missing).start()
    deployment = ["--deployment", str(api_settings.deployment)]
    blobs = ["--blob-store", api_settings.blob_store]
    try:
        assert main(["api", "--deployment", str(tmp_path / "none.json"), *blobs]) == 2
        assert "error: no deployment file" in capsys.readouterr().err
        assert main(["api", *deployment, "--blob-store", "ftp://x"]) == 2
        assert "error: --blob-store: blob service URL must be http(s)" in capsys.readouterr().err
        assert main(["api", *deployment, *blobs, "--rpc-url", "http://127.0.0.1:9"]) == 2
        assert "error: cannot reach http://127.0.0.1:9" in capsys.readouterr().err
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            assert main(["api", *deployment, *blobs, "--port", str(port), "--db", f"sqlite:///{tmp_path}/x.db"]) == 2
            errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
            assert errors == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]
    finally:
        structlog.reset_defaults()  # main() bound the logger to this test's captured stderr


def test_the_built_web_ui_is_served_beside_the_api(
    tmp_path: Path, api_settings: ApiSettings, market: MarketClient, sponsor: Signer, spec_factory: Any
) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<!doctype html><title>Syncline</title>")
    (dist / "assets" / "app.js").write_text("console.log('syncline')")
    task_id, _ = market.post_task(sponsor, spec_factory(), "ipfs://ui")
    settings = dataclasses.replace(api_settings, frontend_dir=dist, db_url=f"sqlite:///{tmp_path / 'ui.db'}")
    with ApiServer(settings) as server:
        http = Http(server.url)
        page = http.get("/")
        assert page.status == 200 and b"<title>Syncline</title>" in page.body
        assert page.headers["content-type"].startswith("text/html")
        assert http.get("/assets/app.js").body == b"console.log('syncline')"
        assert http.ok(f"/api/runs/{task_id}")["summary"]["task_id"] == task_id  # waits for its first pass
        assert_error(http.get("/api/nothing"), 404, "no such endpoint")
        assert http.get("/missing.js").status == 404
