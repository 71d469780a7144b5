"""Follows the market's events into the database, idempotently, across restarts and reorgs.

Each pass:

1. **Reconcile the cursor.** The cursor row records the chain id, the market address and the last
   indexed block with its hash. Another chain or market wipes the index. A cursor block that is
   beyond the head or whose hash changed (a reorg, an ``evm_revert``, a restarted anvil) rolls the
   index back to the newest stored event block whose hash still matches, and rebuilds the tasks
   whose events were dropped; if none matches, the index is wiped and rebuilt from the deployment
   block.
2. **Index new blocks** in batches of ``batch_blocks``: one ``eth_getLogs`` per batch for the
   market's address, decoded by topic; the raw events and the read-model rows they touch
   (refreshed from the contract's views) are written in one transaction together with the new
   cursor, so a crash never leaves a half-applied batch. A restart resumes at the cursor.
3. **Enrich**, on a separate worker (:class:`IndexerThread` runs both), from the blob store with
   bounded retries: spec artifacts (checked against the on-chain spec hash) and trainers' signed
   loss reports (kept only when signed by the committing trainer). Every fetch has a total
   deadline and runs outside any database transaction, so a slow or hostile blob store never
   holds the indexing path: the index keeps up with the chain whatever the blob store does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eth_utils import event_abi_to_log_topic
from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from web3 import Web3
from web3.types import LogReceipt

from syncline.api.db import ChallengeRow, Cursor, Database, RawEvent
from syncline.api.events import MarketEvent, changes_of, json_safe
from syncline.api.metrics import ApiMetrics
from syncline.api.readmodel import Projector, fetch_reports, fetch_spec_artifacts
from syncline.blobstore import BlobStore
from syncline.chain.market import MarketClient
from syncline.observability import get_logger

log = get_logger("syncline.api.indexer")

DEFAULT_BATCH_BLOCKS = 2_000
ANCESTOR_CHECKS = 64


def _hex(value: Any) -> str:
    if isinstance(value, str):
        return value.lower() if value.startswith("0x") else "0x" + value.lower()
    return "0x" + bytes(value).hex()


class LogDecoder:
    """Decodes the market's raw logs by their first topic (unknown topics are skipped)."""

    def __init__(self, market: MarketClient):
        self._events: dict[bytes, Any] = {}
        abi: list[dict[str, Any]] = [dict(item) for item in market.contract.abi]
        for item in abi:
            if item.get("type") == "event" and not item.get("anonymous"):
                name = str(item["name"])
                topic = bytes(event_abi_to_log_topic(item))  # type: ignore[arg-type]
                self._events[topic] = getattr(market.contract.events, name)()

    def decode(self, log_: LogReceipt, timestamp: int) -> MarketEvent | None:
        topics = log_["topics"]
        if not topics:
            return None
        event = self._events.get(bytes(topics[0]))
        if event is None:
            return None
        data = event.process_log(log_)
        return MarketEvent(
            name=str(data["event"]),
            block_number=int(log_["blockNumber"]),
            block_hash=_hex(log_["blockHash"]),
            log_index=int(log_["logIndex"]),
            tx_hash=_hex(log_["transactionHash"]),
            timestamp=timestamp,
            args=json_safe(dict(data["args"])),
        )


@dataclass(frozen=True)
class SyncResult:
    indexed_block: int
    head_block: int
    events: int
    reset: str | None = None


class Indexer:
    """One market on one chain into one database. Not thread-safe: :class:`IndexerThread` runs it."""

    def __init__(
        self,
        db: Database,
        market: MarketClient,
        *,
        deployment_block: int,
        blobs: BlobStore | None = None,
        batch_blocks: int = DEFAULT_BATCH_BLOCKS,
        metrics: ApiMetrics | None = None,
    ):
        self.db = db
        self.market = market
        self.w3: Web3 = market.w3
        self.deployment_block = deployment_block
        self.blobs = blobs
        self.batch_blocks = batch_blocks
        self.metrics = metrics
        self.decoder = LogDecoder(market)
        self.get_logs_calls = 0
        self.resets: list[str] = []
        self.indexed_block = -1
        self.head_block = -1
        self.market_address = market.address.lower()

    # ------------------------------------------------------------------ one pass

    def sync(self) -> SyncResult:
        """Reconcile and index up to the head (no blob store I/O). Safe to call again after any failure."""
        reset = self._reconcile()
        head = int(self.w3.eth.block_number)
        self.head_block = head
        events = 0
        while self.indexed_block < head:
            done = self._index_batch(self.indexed_block + 1, min(head, self.indexed_block + self.batch_blocks))
            if done < 0:
                break  # the chain moved under the batch: reconcile on the next pass
            events += done
        if self.metrics is not None:
            self.metrics.observe_blocks(self.indexed_block, head)
        return SyncResult(self.indexed_block, head, events, reset)

    def _block_hash(self, number: int) -> str | None:
        if number < 0:
            return "0x" + "00" * 32
        try:
            block = self.w3.eth.get_block(number)
        except Exception:  # web3 raises BlockNotFound (and others on some nodes) past the head
            return None
        return _hex(block["hash"])

    def _reconcile(self) -> str | None:
        chain_id = int(self.w3.eth.chain_id)
        with self.db.transaction() as s:
            cursor = s.get(Cursor, 1)
            reason: str | None = None
            if cursor is None:
                reason = "new"
            elif cursor.chain_id != chain_id or cursor.market != self.market_address:
                reason = "other_chain_or_market"
            if reason is not None:
                self._wipe(s, chain_id)
                self._note_reset(reason)
                return reason
            assert cursor is not None
            if self._block_hash(cursor.last_block) == cursor.last_block_hash:
                self.indexed_block = cursor.last_block
                return None
            reason = self._rollback(s, cursor, chain_id)
            self._note_reset(reason)
            return reason

    def _note_reset(self, reason: str) -> None:
        self.resets.append(reason)
        if self.metrics is not None:
            self.metrics.resets.labels(reason=reason).inc()
        if reason != "new":
            log.info("api.index_reset", reason=reason, indexed_block=self.indexed_block)

    def _wipe(self, s: Session, chain_id: int) -> None:
        self.db.wipe(s)
        start = self.deployment_block - 1
        s.add(
            Cursor(
                id=1,
                chain_id=chain_id,
                market=self.market_address,
                deployment_block=self.deployment_block,
                last_block=start,
                last_block_hash=self._block_hash(start) or "",
            )
        )
        self.indexed_block = start

    def _rollback(self, s: Session, cursor: Cursor, chain_id: int) -> str:
        """The cursor's block is gone: keep what still matches the chain, rebuild the rest."""
        head = int(self.w3.eth.block_number)
        stored = s.execute(
            select(RawEvent.block_number, RawEvent.block_hash)
            .distinct()
            .where(RawEvent.block_number <= head)
            .order_by(RawEvent.block_number.desc())
            .limit(ANCESTOR_CHECKS)
        ).all()
        ancestor: tuple[int, str] | None = None
        for number, block_hash in stored:
            if self._block_hash(int(number)) == block_hash:
                ancestor = (int(number), str(block_hash))
                break
        if ancestor is None:
            self._wipe(s, chain_id)
            return "reorg_full"
        number, block_hash = ancestor
        dropped = s.scalars(select(RawEvent.task_id).distinct().where(RawEvent.block_number > number)).all()
        s.execute(delete(RawEvent).where(RawEvent.block_number > number))
        cursor.last_block, cursor.last_block_hash = number, block_hash
        projector = Projector(self.market, s)
        for task_id in sorted(t for t in dropped if t is not None):
            projector.whole_task(task_id)
        self.indexed_block = number
        return "reorg"

    def _timestamps(self, logs: Sequence[LogReceipt]) -> dict[int, int]:
        out: dict[int, int] = {}
        for log_ in logs:
            number = int(log_["blockNumber"])
            if number in out:
                continue
            stamp: Any = dict(log_).get("blockTimestamp")
            if stamp is None:
                stamp = self.w3.eth.get_block(number)["timestamp"]
            out[number] = int(stamp, 16) if isinstance(stamp, str) else int(stamp)
        return out

    def _index_batch(self, start: int, stop: int) -> int:
        """Index blocks ``start..stop``; returns the number of events, or -1 if the chain moved."""
        stop_hash = self._block_hash(stop)
        logs = self.w3.eth.get_logs({"address": self.market.address, "fromBlock": start, "toBlock": stop})
        self.get_logs_calls += 1
        if self.metrics is not None:
            self.metrics.get_logs.inc()
        if stop_hash is None or self._block_hash(stop) != stop_hash:
            return -1
        stamps = self._timestamps(logs)
        events = [e for e in (self.decoder.decode(log_, stamps[int(log_["blockNumber"])]) for log_ in logs) if e]
        with self.db.transaction() as s:
            cursor = s.get(Cursor, 1)
            if cursor is None or cursor.last_block != start - 1:
                return -1  # wiped or moved by someone else: start over
            # RefereeVoted names only the challenge: its task comes from the challenge's row (written
            # with its ChallengeOpened, in this batch or an earlier one).
            known = {int(c): int(t) for c, t in s.execute(select(ChallengeRow.challenge_id, ChallengeRow.task_id))}
            known.update(
                (int(ev.args["challengeId"]), ev.task_id)
                for ev in events
                if ev.name == "ChallengeOpened" and ev.task_id is not None
            )
            existing = {
                (int(b), int(i))
                for b, i in s.execute(
                    select(RawEvent.block_number, RawEvent.log_index).where(
                        RawEvent.block_number >= start, RawEvent.block_number <= stop
                    )
                )
            }
            for ev in events:
                if (ev.block_number, ev.log_index) in existing:
                    continue
                task_id = ev.task_id
                if task_id is None and "challengeId" in ev.args:
                    task_id = known.get(int(ev.args["challengeId"]))
                s.add(
                    RawEvent(
                        block_number=ev.block_number,
                        block_hash=ev.block_hash,
                        log_index=ev.log_index,
                        tx_hash=ev.tx_hash,
                        timestamp=ev.timestamp,
                        name=ev.name,
                        task_id=task_id,
                        round=ev.round,
                        args=ev.args,
                    )
                )
            s.flush()
            Projector(self.market, s).apply(changes_of(events, known))
            cursor.last_block, cursor.last_block_hash = stop, stop_hash
        self.indexed_block = stop
        if self.metrics is not None:
            for ev in events:
                self.metrics.events.labels(event=ev.name).inc()
        return len(events)

    def enrich(self) -> None:
        """Fetch due spec artifacts and loss reports (the enrichment worker's pass; never called by
        :meth:`sync`)."""
        if self.blobs is None:
            return
        fetch_spec_artifacts(self.db, self.blobs)
        fetch_reports(self.db, self.blobs)


class PassLoop:
    """Runs ``work`` every ``poll_interval_s`` in a daemon thread; waiters are told after each pass,
    failures are logged and counted and the next pass retries."""

    def __init__(
        self,
        name: str,
        work: Callable[[], object],
        *,
        poll_interval_s: float,
        on_error: Callable[[], None] | None = None,
        metrics: ApiMetrics | None = None,
    ):
        self.name = name
        self.work = work
        self.poll_interval_s = poll_interval_s
        self.on_error = on_error
        self.metrics = metrics
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._advanced = threading.Condition()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.last_pass_at: float | None = None  # monotonic time the last pass ended
        self.started = 0
        self.passes = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"syncline-api-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def wait_for_pass(self, timeout_s: float) -> bool:
        """Ask for a pass now and wait until one more has completed (``False`` on timeout)."""
        with self._advanced:
            target = self.started + 1  # a pass that starts after this call
            self._wake.set()
            return self._advanced.wait_for(lambda: self.passes >= target or self._stop.is_set(), timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._advanced:
                self.started += 1
            try:
                self.work()
                self.last_error = None
            except Exception as exc:  # the node, the blob store or the DB hiccuped: log, count, retry
                self.last_error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
                log.warning(f"api.{self.name}_error", error=self.last_error)
                if self.metrics is not None:
                    self.metrics.errors.inc()
                if self.on_error is not None:
                    self.on_error()
            with self._advanced:
                self.passes += 1
                self.last_pass_at = time.monotonic()
                self._advanced.notify_all()
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()


class IndexerThread(PassLoop):
    """The indexing loop (:meth:`Indexer.sync`) plus its enrichment worker (:meth:`Indexer.enrich`),
    each in its own daemon thread, so blob-store fetches never delay indexing."""

    def __init__(self, indexer: Indexer, poll_interval_s: float = 1.0, on_error: Callable[[], None] | None = None):
        super().__init__(
            "indexer", indexer.sync, poll_interval_s=poll_interval_s, on_error=on_error, metrics=indexer.metrics
        )
        self.indexer = indexer
        self.enricher = PassLoop("enrichment", indexer.enrich, poll_interval_s=poll_interval_s, metrics=indexer.metrics)

    @property
    def indexed_block(self) -> int:
        return self.indexer.indexed_block

    @property
    def head_block(self) -> int:
        return self.indexer.head_block

    def start(self) -> None:
        super().start()
        self.enricher.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        self.enricher.stop(timeout_s)

    def wake(self) -> None:
        super().wake()
        self.enricher.wake()
