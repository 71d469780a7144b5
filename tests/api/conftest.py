"""Fixtures of the API tests: the session's anvil and market (tests/conftest.py), a real blob
service, and one real API server (uvicorn on 127.0.0.1, its indexer thread, a SQLite file).

The server lives for the whole package (it stops before other packages run) while every test
reverts the chain to a snapshot: the indexer must notice each revert (its cursor's block hash
changes) and roll its index back.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from syncline.api import ApiServer, ApiSettings
from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.toolchain import compile_contracts
from syncline.confidential.sponsor import SealingRequest
from syncline.sponsor.task_builder import PublishedTask, cached_corpus, publish_language_task

SHARD_COUNT = 3
VOCAB_SIZE = 300
SEQ_LEN = 16
TINY_MODEL: dict[str, Any] = {
    "family": "llama",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": SEQ_LEN,
    "tie_word_embeddings": True,
}
ETH = 10**18


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


class Http:
    """A tiny urllib client of the API (no third-party HTTP library)."""

    def __init__(self, base: str):
        self.base = base

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        timeout: float = 120,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()})
        except urllib.error.HTTPError as err:
            return Reply(err.code, err.read(), {k.lower(): v for k, v in err.headers.items()})

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> Reply:
        return self.request("POST", path, body, raw=raw)

    def ok(self, path: str) -> Any:
        reply = self.get(path)
        assert reply.status == 200, reply.body
        return reply.json()


def assert_error(reply: Reply, status: int, contains: str = "") -> str:
    """The reply is the API's one-line JSON error with ``status``; returns its message."""
    assert reply.status == status, (reply.status, reply.body)
    body = reply.json()
    assert set(body) == {"error", "status"}, body
    assert body["status"] == status
    assert "\n" not in body["error"] and body["error"]
    assert contains in body["error"], body["error"]
    return str(body["error"])


@pytest.fixture(scope="session")
def api_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir with the contract artifacts and the tiny corpus (BPE training, ~10 s) prepared once."""
    root = tmp_path_factory.mktemp("syncline-api-state")
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, root / "artifacts" / cache.name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYNCLINE_STATE_DIR", str(root))
        cached_corpus(SHARD_COUNT, VOCAB_SIZE)
    return root


@pytest.fixture(autouse=True)
def state_env(api_state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every API test (and the server threads serving it) uses the prepared state dir, offline."""
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(api_state_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return api_state_dir


@pytest.fixture(scope="package")
def blob_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlobService]:
    service = BlobService(LocalBlobStore(tmp_path_factory.mktemp("api-blobs")), host="127.0.0.1", port=0)
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="package")
def blobs(blob_service: BlobService) -> HttpBlobStore:
    return HttpBlobStore(blob_service.url)


def deployment_file(deployment: Deployment) -> Path:
    return Path(deployment.abi_path).parent / "deployment.json"


@pytest.fixture(scope="package")
def api_settings(
    deployment: Deployment, blob_service: BlobService, api_state_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> ApiSettings:
    work = tmp_path_factory.mktemp("api")
    return ApiSettings(
        deployment=deployment_file(deployment),
        blob_store=blob_service.url,
        db_url=f"sqlite:///{work / 'index.db'}",
        port=0,
        poll_interval_s=0.1,
        frontend_dir=work / "no-frontend",
        state_dir=api_state_dir,
        # The package's tests share this server and one client address; the rate limit itself is
        # tested on its own (test_limits.test_prepare_gate_rate_limits_each_client).
        prepare_per_minute=1_000,
    )


@pytest.fixture(scope="package")
def api_server(api_settings: ApiSettings) -> Iterator[ApiServer]:
    with ApiServer(api_settings) as server:
        yield server


@pytest.fixture
def api(api_server: ApiServer, chain_snapshot: str) -> Iterator[ApiServer]:
    """The session's server; the chain is reverted after the test (the indexer follows)."""
    api_server.wait_indexed()
    yield api_server


@pytest.fixture
def http(api: ApiServer) -> Http:
    return Http(api.url)


def publish_tiny_task(
    blobs: HttpBlobStore, w3: Web3, witnesses: list[Signer], *, seal: SealingRequest | None = None, **overrides: Any
) -> PublishedTask:
    """A real (tiny) language task: tokenizer, shards, initial Llama state and spec in the blob store
    (with ``seal``: a Confidential one, its shards sealed: ``publish_language_task``)."""
    template: dict[str, Any] = {
        "name": "api-test-task",
        "tier": "verified",
        "aggregation": {"rule": "coordinate_median"},
        "inner_steps": 4,
        "checkpoint_interval": 2,
        "rounds": 3,
        "round_duration_s": 300,
        "grace_window_s": 120,
        "challenge_window_s": 600,
        "trainer_stake_wei": ETH,
        "min_trainers": 3,
        "max_trainers": 3,
        "enrollment_deadline": chain_time(w3) + 600,
        "witnesses": [w.address for w in witnesses],
        "threshold": 2,
        "witness_fee_wei": ETH // 100,
        "reward_pool_wei": 3 * ETH,
        "witness_bond_wei": ETH // 2,
        "challenge_bond_wei": ETH // 10,
        **overrides,
    }
    return publish_language_task(
        blobs,
        template=template,
        shard_count=SHARD_COUNT,
        vocab_size=VOCAB_SIZE,
        seq_len=SEQ_LEN,
        model=TINY_MODEL,
        seal=seal,
    )
