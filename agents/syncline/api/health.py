"""``GET /healthz``: the index against the live chain head, and each dependency probed now.

``status`` is ``degraded`` when the index is more than ``max_lag_blocks`` behind the head or any
dependency is failing; the answer is 200 either way (it is a report, the fields say what is wrong).
Each probe has a short timeout, so the endpoint answers even when a dependency hangs.
"""

from __future__ import annotations

import time

from web3 import Web3

from syncline.api.indexer import IndexerThread, PassLoop
from syncline.api.schemas import DependencyHealth, Health
from syncline.blobstore import BlobStoreError, HttpBlobStore

PROBE_TIMEOUT_S = 1.0
STALE_PASS_S = 30.0
"""A worker whose last pass ended longer ago than this (plus its poll interval) is reported stuck."""


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _worker(loop: PassLoop) -> DependencyHealth:
    if not loop.alive():
        return DependencyHealth(ok=False, detail="not running")
    if loop.last_error is not None:
        return DependencyHealth(ok=False, detail=loop.last_error)
    if loop.last_pass_at is None:
        return DependencyHealth(ok=True, detail="first pass running")
    age = time.monotonic() - loop.last_pass_at
    if age > STALE_PASS_S + loop.poll_interval_s:
        return DependencyHealth(ok=False, detail=f"no pass completed for {age:.0f} s")
    return DependencyHealth(ok=True)


def health(w3: Web3, blobs: HttpBlobStore, indexer: IndexerThread, *, max_lag_blocks: int) -> Health:
    """Probe the chain RPC and the blob store, read the workers' state, and compare the index with
    the head (the live one when the RPC answers, else the last one the indexer saw)."""
    head = indexer.head_block
    try:
        head = int(w3.eth.block_number)
        chain = DependencyHealth(ok=True)
    except Exception as exc:  # any transport or node error is what this probe reports
        chain = DependencyHealth(ok=False, detail=_error(exc))
    try:
        blobs.check_health()
        blob = DependencyHealth(ok=True)
    except BlobStoreError as exc:
        blob = DependencyHealth(ok=False, detail=_error(exc))
    indexed = indexer.indexed_block
    lag = max(0, head - indexed)
    dependencies = {
        "chain_rpc": chain,
        "blob_store": blob,
        "indexer": _worker(indexer),
        "enrichment": _worker(indexer.enricher),
    }
    if lag > max_lag_blocks and dependencies["indexer"].ok:
        dependencies["indexer"] = DependencyHealth(ok=False, detail=f"{lag} blocks behind the chain head")
    degraded = lag > max_lag_blocks or not all(d.ok for d in dependencies.values())
    return Health(
        status="degraded" if degraded else "ok",
        indexed_block=indexed,
        head_block=head,
        lag_blocks=lag,
        max_lag_blocks=max_lag_blocks,
        dependencies=dependencies,
    )
