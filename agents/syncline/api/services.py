"""What the request handlers share: the chain client, the blob store, the database, the indexer
thread, the metrics and a cache of loaded task contexts."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from web3 import Web3

from syncline.api.db import Database
from syncline.api.health import PROBE_TIMEOUT_S
from syncline.api.indexer import Indexer, IndexerThread
from syncline.api.limits import PrepareGate
from syncline.api.metrics import ApiMetrics
from syncline.api.settings import ApiSettings
from syncline.blobstore import HttpBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import DEVNET_CHAIN_ID, chain_time
from syncline.chain.market import MarketClient, _hex
from syncline.chain.rpc import http_web3
from syncline.errors import SynclineError
from syncline.run.context import TaskContext

CONTEXT_CACHE = 8
INDEXER_BLOB_TIMEOUT_S = 5.0


def _web3(url: str, timeout_s: float = 30.0) -> Web3:
    return http_web3(url, timeout_s=timeout_s)


def _blob_store(url: str, timeout_s: float = 30.0) -> HttpBlobStore:
    try:
        return HttpBlobStore(url, timeout_s=timeout_s)
    except ValueError as exc:
        raise SynclineError(f"--blob-store: {exc}") from None


class ApiServices:
    """Built once per app from :class:`ApiSettings`; raises ``SynclineError`` (one line) when the
    deployment, the node or the blob store URL is unusable."""

    def __init__(self, settings: ApiSettings):
        self.settings = settings
        self.deployment = Deployment.read(settings.deployment)
        self.rpc_url = settings.rpc_url or self.deployment.rpc_url
        self.w3 = _web3(self.rpc_url)
        if not self.w3.is_connected():
            raise SynclineError(f"cannot reach {self.rpc_url}: is the node running?")
        self.chain_id = int(self.w3.eth.chain_id)
        if self.chain_id != self.deployment.chain_id:
            raise SynclineError(
                f"{self.rpc_url} is chain {self.chain_id} but {settings.deployment} is for chain "
                f"{self.deployment.chain_id}"
            )
        self.abi = self.deployment.abi()
        self.market = MarketClient(self.w3, self.deployment.market, self.abi)
        self.blob_url = settings.blob_store.rstrip("/")
        self.blobs = _blob_store(self.blob_url)
        # /healthz probes with short timeouts, on connections of their own.
        self.probe_w3 = _web3(self.rpc_url, PROBE_TIMEOUT_S)
        self.probe_blobs = _blob_store(self.blob_url, PROBE_TIMEOUT_S)
        self.db = Database(settings.database_url)
        self.metrics = ApiMetrics()
        # The indexer has its own connection and a short blob timeout (it must not stall on a fetch).
        indexer_market = MarketClient(_web3(self.rpc_url), self.deployment.market, self.abi)
        self.indexer = IndexerThread(
            Indexer(
                self.db,
                indexer_market,
                deployment_block=self.deployment.deployed_at_block,
                blobs=_blob_store(self.blob_url, INDEXER_BLOB_TIMEOUT_S),
                batch_blocks=settings.batch_blocks,
                metrics=self.metrics,
            ),
            poll_interval_s=settings.poll_interval_s,
        )
        self.stopping = threading.Event()
        self.prepare_gate = PrepareGate(settings.prepare_per_minute)
        self._contexts: OrderedDict[tuple[int, str], TaskContext] = OrderedDict()
        self._contexts_lock = threading.Lock()
        self._file_locks: dict[str, threading.Lock] = {}

    @property
    def devnet(self) -> bool:
        return self.chain_id == DEVNET_CHAIN_ID

    @property
    def cache_dir(self) -> Path:
        path = self.settings.api_dir / "models"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def dev_accounts(self) -> list[str]:
        """anvil's unlocked accounts (devnet only), lowercase."""
        if not self.devnet:
            return []
        return [str(a).lower() for a in self.w3.eth.accounts]

    def chain_time(self) -> int:
        """The time the next block will carry: the pending block's, never before the latest's. An
        idle devnet mines nothing, so its latest block can be an hour old; a deadline computed or
        checked against that would already be past when the transaction is mined."""
        latest = chain_time(self.w3)
        try:
            return max(latest, int(self.w3.eth.get_block("pending")["timestamp"]))
        except Exception:  # a node without a pending block: the latest one's time
            return latest

    def task_context(self, task_id: int) -> TaskContext:
        """The task's verified context (spec artifact, tokenizer, layout), cached per task and spec
        hash (a reverted devnet can reuse a task id for another task)."""
        spec_hash = _hex(self.market.spec_tuple(task_id)[0])
        key = (task_id, spec_hash)
        with self._contexts_lock:
            ctx = self._contexts.get(key)
            if ctx is not None:
                self._contexts.move_to_end(key)
                return ctx
        ctx = TaskContext.load(self.market, self.blobs, task_id)
        with self._contexts_lock:
            self._contexts[key] = ctx
            while len(self._contexts) > CONTEXT_CACHE:
                self._contexts.popitem(last=False)
        return ctx

    def forget_contexts(self) -> None:
        with self._contexts_lock:
            self._contexts.clear()

    def file_lock(self, key: str) -> threading.Lock:
        with self._contexts_lock:
            return self._file_locks.setdefault(key, threading.Lock())

    def close(self) -> None:
        self.stopping.set()
        self.indexer.stop()
        self.db.dispose()
