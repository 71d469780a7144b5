"""``syncline train post-task`` from a sponsor's own JSONL file, end to end on the session's anvil:
the CLI reads the file, trains the tokenizer, publishes the shards to a real blob service and posts
the task; a bad file is refused with one line before anything is uploaded or posted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from web3 import Web3

from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore, digest_of
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.protocol.spec import TrainingTaskSpec
from syncline.sponsor.data_sources import DataSource, load_source
from syncline.sponsor.task_builder import prepare_corpus

pytestmark = [pytest.mark.chain]

ETH = 10**18
SOURCE = {"type": "jsonl", "path": "data/instructions.jsonl", "prompt_field": "instruction", "response_field": "output"}
SIZES = {"shard_count": 3, "vocab_size": 300, "seq_len": 16}


@pytest.fixture
def blob_service(tmp_path: Path) -> Iterator[BlobService]:
    service = BlobService(LocalBlobStore(tmp_path / "blobs"), host="127.0.0.1", port=0)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def _spec_yaml(witnesses: list[Signer], source: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "own-jsonl-task",
        "tier": "verified",
        "aggregation": {"rule": "coordinate_median"},
        "inner_steps": 4,
        "checkpoint_interval": 2,
        "rounds": 2,
        "round_duration_s": 300,
        "grace_window_s": 120,
        "challenge_window_s": 600,
        "trainer_stake_wei": ETH,
        "min_trainers": 3,
        "max_trainers": 3,
        "enrollment_deadline": "+600",
        "witnesses": [w.address for w in witnesses],
        "threshold": 2,
        "witness_fee_wei": ETH // 100,
        "witness_bond_wei": ETH // 2,
        "challenge_bond_wei": ETH // 10,
        "reward_pool_wei": 3 * ETH,
        "dataset_source": {**source, **SIZES},
        "model": {
            "family": "llama",
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "max_position_embeddings": 16,
        },
    }


def _post_task(
    spec: Path, deployment: Deployment, blob_url: str, key: str, state: Path
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(state), "SYNCLINE_PRIVATE_KEY": key, "HF_HUB_OFFLINE": "1"}
    deployment_file = str(Path(deployment.abi_path).parent / "deployment.json")
    command = ["train", "post-task", "--spec", str(spec), "--deployment", deployment_file, "--blob-store", blob_url]
    return subprocess.run(
        [sys.executable, "-m", "syncline.cli", *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def test_post_task_from_a_jsonl_file(
    tmp_path: Path,
    devnet: Devnet,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    witnesses: list[Signer],
    blob_service: BlobService,
) -> None:
    data = tmp_path / "sponsor" / "data"
    data.mkdir(parents=True)
    lines = [
        {"instruction": f"Summarise item {i} in one line.", "output": f"Item {i} is about topic {i % 7}, briefly."}
        for i in range(80)
    ]
    (data / "instructions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    spec_file = tmp_path / "sponsor" / "task.yaml"  # the source's relative path is read from here
    spec_file.write_text(yaml.safe_dump(_spec_yaml(witnesses, SOURCE)))
    key = devnet.private_keys()[0]

    # A file whose records lack the response field: refused before any upload or transaction.
    (data / "broken.jsonl").write_text('{"instruction": "only half a pair"}\n')
    broken = tmp_path / "sponsor" / "broken.yaml"
    broken.write_text(yaml.safe_dump(_spec_yaml(witnesses, {**SOURCE, "path": "data/broken.jsonl"})))
    tasks_before = market.task_count()
    refused = _post_task(broken, deployment, blob_service.url, key, tmp_path / "state")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"error: {data / 'broken.jsonl'} line 1: no field 'output' (fields present: 'instruction')"
    ]
    assert not any(p.is_file() for p in (tmp_path / "blobs").rglob("*")), "nothing may be uploaded"
    assert market.task_count() == tasks_before

    done = _post_task(spec_file, deployment, blob_service.url, key, tmp_path / "state")
    assert done.returncode == 0, done.stderr
    posted = json.loads(done.stdout)
    assert posted["task_id"] == tasks_before + 1
    assert "0x" + bytes(market.spec_tuple(posted["task_id"])[0]).hex() == posted["spec_hash"]
    spec = TrainingTaskSpec.from_artifact(
        HttpBlobStore(blob_service.url).fetch(
            posted["spec_uri"], expected_digest=posted["spec_hash"], max_bytes=1 << 20
        )
    )

    # The manifest lists exactly the shards this file makes (built here independently).
    source = DataSource.from_mapping({**SOURCE, "path": str(data / "instructions.jsonl")})
    corpus = prepare_corpus(load_source(source), shard_count=3, vocab_size=300)
    assert list(spec.dataset.shard_hashes) == [digest_of(s) for s in corpus.shards]
    assert spec.dataset.validation_hash == digest_of(corpus.validation)
    assert spec.metadata["tokenizer"]["digest"] == digest_of(corpus.tokenizer_json.encode())
    assert spec.metadata["seq_len"] == 16
    for uri, digest in zip(spec.dataset.shard_uris, spec.dataset.shard_hashes, strict=True):
        assert digest_of(HttpBlobStore(blob_service.url).fetch(uri, expected_digest=digest, max_bytes=1 << 20))
    assert len(list((tmp_path / "state" / "datasets").glob("*.pkl"))) == 1  # cached by content
