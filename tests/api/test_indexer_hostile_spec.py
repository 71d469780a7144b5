"""One hostile spec artifact marks only its own task bad (issue 26 item 7).

A spec artifact with a 400-digit ``privacy.delta`` (its keccak posted on chain as the spec hash,
so the blob verifies) raised ``OverflowError`` out of the spec parser; the enrichment pass caught
only ``SynclineError``/``ValueError``, so every pass died on that task and the API never fetched
the spec artifact of any task again, later ones included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from eth_utils import keccak
from web3 import Web3

from syncline.api.db import Database, TaskRow
from syncline.api.indexer import Indexer
from syncline.blobstore import LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.protocol.spec import TrainingTaskSpec

pytestmark = pytest.mark.chain


def _post_with_artifact(
    market: MarketClient, sponsor: Signer, spec: TrainingTaskSpec, artifact: bytes, uri: str
) -> int:
    """Post ``spec`` on chain with the keccak of ``artifact`` as its spec hash."""
    onchain = list(spec.onchain(uri))
    onchain[0] = keccak(artifact)
    receipt = market._send(sponsor, "postTask", tuple(onchain), value=spec.escrow_wei)
    (event,) = market.events(receipt, "TaskPosted")
    return int(event["args"]["taskId"])


def test_a_hostile_spec_artifact_does_not_stop_the_indexing_of_later_tasks(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    tasks: dict[str, int] = {}
    good = spec_factory(name="good-before")
    tasks["before"], _ = market.post_task(sponsor, good, blobs.put(good.canonical_bytes()).uri)
    for label, hostile_value in (("delta", 10**400), ("epsilon", 1e300)):
        doc = json.loads(good.canonical_bytes())
        doc["name"] = f"hostile-{label}"
        doc["privacy"] = {"epsilon": 5.0, "delta": 1e-5, "clip_norm": 1.0, "sample_rate": 0.1, label: hostile_value}
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        tasks[label] = _post_with_artifact(market, sponsor, good, raw, blobs.put(raw).uri)
    later = spec_factory(name="good-after")
    tasks["after"], _ = market.post_task(sponsor, later, blobs.put(later.canonical_bytes()).uri)

    db = Database(f"sqlite:///{tmp_path / 'index.db'}")
    indexer = Indexer(
        db,
        MarketClient(w3, deployment.market, deployment.abi()),
        deployment_block=deployment.deployed_at_block,
        blobs=blobs,
    )
    indexer.sync()
    indexer.enrich()  # raised OverflowError before the fix, every pass
    with db.session() as s:
        rows = {label: s.get(TaskRow, task_id) for label, task_id in tasks.items()}
        assert rows["before"].spec_artifact is not None and rows["before"].name == "good-before"
        assert rows["after"].spec_artifact is not None and rows["after"].name == "good-after"
        for label in ("delta", "epsilon"):
            row = rows[label]
            assert row.spec_artifact is None and row.spec_attempts == 1
            assert row.spec_error is not None and f"privacy.{label}" in row.spec_error, row.spec_error
            assert "\n" not in row.spec_error and len(row.spec_error) < 300
    db.dispose()
