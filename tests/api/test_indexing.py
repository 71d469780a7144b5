"""The indexer against the real market on anvil: a whole market lifecycle (post, bond, enroll,
commit, finalize, dissent, eviction with a slash, carry-forward, a proven witness equivocation,
seal) indexed and served over HTTP, every number equal to the contract's views to the wei; a
restart resumes at its cursor; a reverted chain or another market is re-indexed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from web3 import Web3

from conftest import commit, finalize, h32, start_task, travel_past
from syncline.api.db import Cursor, Database, RawEvent, TaskRow
from syncline.api.indexer import Indexer
from syncline.api.server import ApiServer
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import revert, snapshot
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.protocol.enums import TaskStatus
from syncline.protocol.spec import TrainingTaskSpec

from .conftest import Http

pytestmark = pytest.mark.chain


def _check_task(http: Http, market: MarketClient, task_id: int) -> dict[str, Any]:
    """Every row the API serves for ``task_id`` equals the contract's views."""
    view = market.task(task_id)
    detail = http.ok(f"/api/runs/{task_id}")
    state = detail["state"]
    assert state["status"] == view.status.name.lower()
    for name in ("reward_pool_wei", "fee_budget_wei", "fees_earned_wei", "stake_held_wei", "sealed_pool_wei"):
        assert state[name] == str(getattr(view, name)), name
    summary = detail["summary"]
    assert summary["escrow_wei"] == str(market.escrow_of(task_id))
    assert summary["state_root"] == view.state_root
    assert summary["current_round"] == view.current_round
    trainers = {t["address"]: t for t in http.ok(f"/api/runs/{task_id}/trainers")}
    assert set(trainers) == {a.lower() for a in market.trainers(task_id)}
    for address, row in trainers.items():
        tv = market.trainer(task_id, address)
        assert row["stake_wei"] == str(tv.stake_wei)
        assert row["slashed_wei"] == str(tv.slashed_wei)
        assert row["reward_wei"] == str(tv.reward_wei)
        assert row["shards"] == tv.shards
        assert (row["submitted"], row["accepted"], row["missed"], row["evicted"]) == (
            tv.submitted,
            tv.accepted,
            tv.missed,
            tv.evicted,
        )
    for row in http.ok(f"/api/runs/{task_id}/witnesses"):
        wv = market.witness(task_id, row["address"])
        assert (row["bond_wei"], row["slashed_wei"], row["fees_wei"]) == (
            str(wv.bond_wei),
            str(wv.slashed_wei),
            str(wv.fees_wei),
        )
        assert (row["votes"], row["matched"], row["dissents"]) == (wv.votes, wv.matched, wv.dissents)
    for row in http.ok(f"/api/runs/{task_id}/rounds"):
        rv = market.round(task_id, row["round"])
        assert row["status"] == rv.status.name.lower()
        assert (row["state_root"], row["vote_count"], row["accepted_mask"]) == (
            rv.state_root,
            rv.vote_count,
            str(rv.accepted_mask),
        )
    return detail


def test_a_market_lifecycle_is_indexed_to_the_wei(
    api: ApiServer,
    http: Http,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    spec = spec_factory(rounds=4, min_trainers=3, max_trainers=3, max_missed_rounds=1)
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)

    # Round 0: everyone commits; two witnesses finalize with metrics 4.0 and 4.2; the third dissents.
    for fragment, trainer in enumerate(trainers):
        commit(market, trainer, task_id, 0, fragment)
    travel_past(w3, market.round_deadline(task_id))
    root0 = h32(f"state/{task_id}/0")
    market.finalize_round(witnesses[0], task_id, 0, root0, h32("agg/0"), 0b111, metric=4_000_000)
    market.finalize_round(witnesses[2], task_id, 0, h32("other"), h32("agg/0"), 0b011, metric=9_000_000)
    market.finalize_round(witnesses[1], task_id, 0, root0, h32("agg/0"), 0b111, metric=4_200_000)
    # A witness signs a second, different vote for round 0: anyone proves the equivocation.
    a = market.sign_vote(witnesses[0], task_id, 0, root0, h32("agg/0"), 0b111)
    b = market.sign_vote(witnesses[0], task_id, 0, h32("forged"), h32("agg/0"), 0b111)
    challenge_id = market.prove_witness_equivocation(outsider, a[0], a[1], b[0], b[1])

    # Rounds 1 and 2: trainer 3 stays away and is evicted (max_missed_rounds=1) with a slash.
    for round_ in (1, 2):
        for fragment, trainer in enumerate(trainers[:2]):
            commit(market, trainer, task_id, round_, fragment)
        metric = 4_000_000 - round_ * 100_000
        finalize(market, w3, witnesses[1:], task_id, round_, 0b011, metrics=(metric, metric + 200_000))
    assert market.trainer(task_id, trainers[2].address).evicted

    # Round 3: nobody commits; carried forward (empty) after its one extension, which completes the run.
    travel_past(w3, market.round_deadline(task_id) + 3 * spec.round_duration_s)
    market.carry_forward(outsider, task_id, 3)
    assert market.task(task_id).status == TaskStatus.AWAITING_SEAL

    api.wait_indexed()
    detail = _check_task(http, market, task_id)
    summary = detail["summary"]
    assert summary["status"] == "awaiting_seal" and summary["progress"] == 1.0
    assert summary["name"] == f"task {task_id}"  # the test spec's artifact is not in the blob store
    assert detail["spec"]["artifact_verified"] is False
    assert detail["spec"]["spec_hash"] == spec.spec_hash
    assert detail["spec"]["witnesses"] == [w.address.lower() for w in witnesses]
    kinds = [e["kind"] for e in detail["timeline"]]
    for kind in ("posted", "enrolled", "started", "round_finalized", "challenge_opened", "challenge_resolved"):
        assert kind in kinds, kind
    for kind in ("slashed", "evicted", "round_carried", "completed"):
        assert kind in kinds, kind
    assert kinds[0] == "posted" and kinds.count("enrolled") == 3

    rounds = http.ok(f"/api/runs/{task_id}/rounds")
    assert [r["status"] for r in rounds] == ["finalized", "finalized", "finalized", "carried_forward"]
    assert rounds[3]["carried_forward"] is True
    r0 = rounds[0]
    assert r0["validation_loss"] == pytest.approx(4.1)  # median of 4.0 and 4.2; the dissent's 9.0 is ignored
    assert [v["agrees"] for v in r0["votes"]] == [True, False, True]
    assert [d["witness"] for d in r0["dissent"]] == [witnesses[2].address.lower()]
    assert [s["accepted"] for s in r0["submissions"]] == [True, True, True]
    assert r0["challenges"] == [challenge_id]
    assert [s["fragment"] for s in rounds[1]["submissions"]] == [0, 1]

    (challenge,) = http.ok(f"/api/runs/{task_id}/challenges")
    cv = market.challenge(challenge_id)
    assert challenge["kind"] == "witness_equivocation" and challenge["status"] == "upheld"
    assert challenge["accused"] == witnesses[0].address.lower()
    assert challenge["slashed_wei"] == str(cv.slashed_wei) == str(spec.witness_bond_wei)
    assert challenge["tx"].startswith("0x") and len(challenge["tx"]) == 66

    losses = http.ok(f"/api/runs/{task_id}/losses")
    assert losses["rounds"] == [0, 1, 2, 3]
    assert losses["validation"][0] == pytest.approx(4.1) and losses["validation"][3] is None
    assert (losses["metric"], losses["metric_higher_is_better"]) == ("validation_loss", False)  # a language task

    # Seal after the challenge window; credits are read live.
    travel_past(w3, market.task(task_id).last_closed_at + spec.challenge_window_s)
    market.seal(outsider, task_id)
    api.wait_indexed()
    detail = _check_task(http, market, task_id)
    assert detail["summary"]["status"] == "sealed" and "sealed" in [e["kind"] for e in detail["timeline"]]
    assert detail["summary"]["reward_pool_wei"] == str(market.task(task_id).sealed_pool_wei)
    assert int(detail["summary"]["reward_pool_wei"]) >= spec.reward_pool_wei  # plus the slashes
    receipt = http.ok(f"/api/runs/{task_id}/receipt")
    assert receipt["receipt"]["status"] == "sealed"
    credits = {c["address"]: c for c in receipt["credits"]}
    assert credits[sponsor.address.lower()]["role"] == "sponsor"
    for address, line in credits.items():
        assert line["credit_wei"] == str(market.credit_of(address))
    assert int(credits[trainers[0].address.lower()]["credit_wei"]) > 0
    account = http.ok(f"/api/accounts/{trainers[0].address}")
    assert account["credit_wei"] == str(market.credit_of(trainers[0].address))
    assert account["balance_wei"] == str(w3.eth.get_balance(trainers[0].address))


# ---------------------------------------------------------------------- the indexer alone


def _indexer(db: Database, deployment: Deployment, w3: Web3) -> tuple[Indexer, list[tuple[int, int]]]:
    """An indexer whose eth_getLogs calls are recorded as (fromBlock, toBlock)."""
    market = MarketClient(w3, deployment.market, deployment.abi())
    indexer = Indexer(db, market, deployment_block=deployment.deployed_at_block, batch_blocks=50)
    calls: list[tuple[int, int]] = []
    real = w3.eth.get_logs

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(w3.eth, name)

        def get_logs(self, params: Any) -> Any:
            calls.append((int(params["fromBlock"]), int(params["toBlock"])))
            return real(params)

    class W3:
        eth = Recording()

    indexer.w3 = W3()  # type: ignore[assignment]
    return indexer, calls


def test_a_restart_resumes_at_the_cursor(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'index.db'}")
    first, calls = _indexer(db, deployment, w3)
    result = first.sync()
    assert result.reset == "new" and result.indexed_block == w3.eth.block_number
    assert calls and calls[0][0] == deployment.deployed_at_block
    assert all(b - a < 50 for a, b in calls)  # batches
    task_id, _ = market.post_task(sponsor, spec_factory(), "ipfs://x")
    first.sync()
    db.dispose()

    # A new process on the same database: nothing is read again from the deployment block.
    db = Database(f"sqlite:///{tmp_path / 'index.db'}")
    second, calls = _indexer(db, deployment, w3)
    result = second.sync()
    assert result.reset is None and calls == [] and result.events == 0
    head = w3.eth.block_number
    market.post_task(sponsor, spec_factory(), "ipfs://y")
    result = second.sync()
    assert calls == [(head + 1, head + 1)] and result.events == 1
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(TaskRow)) == 2
        assert s.get(TaskRow, task_id) is not None
        assert s.scalar(select(func.count()).select_from(RawEvent).where(RawEvent.name == "TaskPosted")) == 2


def test_a_reverted_chain_is_rolled_back_and_another_market_wiped(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'index.db'}")
    indexer, calls = _indexer(db, deployment, w3)
    keep_id, _ = market.post_task(sponsor, spec_factory(rounds=5), "ipfs://kept")
    indexer.sync()
    snap = snapshot(w3)
    task_id, _ = market.post_task(sponsor, spec_factory(rounds=2), "ipfs://old")
    indexer.sync()
    with db.session() as s:
        row = s.get(TaskRow, task_id)
        assert row is not None and row.rounds == 2
    revert(w3, snap)

    # The chain is now shorter than the cursor: the orphaned task disappears.
    calls.clear()
    assert indexer.sync().reset == "reorg"
    with db.session() as s:
        assert s.get(TaskRow, task_id) is None
        kept = s.get(TaskRow, keep_id)
        assert kept is not None and kept.rounds == 5
    assert all(start > deployment.deployed_at_block for start, _ in calls)  # kept what still matches

    # A different block at the same heights (same task id, other spec) replaces it.
    snap = snapshot(w3)
    market.post_task(sponsor, spec_factory(rounds=2), "ipfs://a")
    indexer.sync()
    revert(w3, snap)
    travel_past(w3, w3.eth.get_block("latest")["timestamp"] + 7)  # one empty block: other hashes
    same_id, _ = market.post_task(sponsor, spec_factory(rounds=3), "ipfs://b")
    assert same_id == task_id
    assert indexer.sync().reset == "reorg"
    with db.session() as s:
        row = s.get(TaskRow, same_id)
        assert row is not None and row.rounds == 3 and row.spec_uri == "ipfs://b"
        uris = [e.args["specURI"] for e in s.scalars(select(RawEvent).where(RawEvent.name == "TaskPosted"))]
        assert sorted(uris) == ["ipfs://b", "ipfs://kept"]

    # The cursor names another market (a redeployment): everything is re-indexed.
    with db.transaction() as s:
        cursor = s.get(Cursor, 1)
        assert cursor is not None
        cursor.market = "0x" + "12" * 20
    calls.clear()
    assert indexer.sync().reset == "other_chain_or_market"
    assert calls[0][0] == deployment.deployed_at_block
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(TaskRow)) == 2


def test_the_served_index_follows_reverts(
    api: ApiServer, http: Http, market: MarketClient, w3: Web3, sponsor: Signer, spec_factory: Callable[..., Any]
) -> None:
    """The session server saw earlier tests' tasks, all reverted: it serves only this chain's."""
    existing = market.task_count()
    assert [r["task_id"] for r in http.ok("/api/runs")] == list(range(existing, 0, -1))
    task_id, _ = market.post_task(sponsor, spec_factory(rounds=7), "ipfs://served")
    api.wait_indexed()
    run = http.ok("/api/runs")[0]
    assert run["task_id"] == task_id == existing + 1
    assert run["rounds"] == 7 and run["status"] == "enrolling" and run["progress"] == 0.0
    assert run["reward_pool_wei"] == str(market.task(task_id).reward_pool_wei)


def test_a_sealed_run_shows_returned_stakes_and_what_withdrawals_paid(
    api: ApiServer,
    http: Http,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    """After seal a trainer's stake is 0 on chain because it was credited back: the API says so
    (``status`` sealed, ``stake_returned_wei``; a witness's ``bond_returned_wei``); after
    ``withdraw()`` the credit is 0 and the receipt says what the run credited and what the
    withdrawal paid."""
    spec = spec_factory(rounds=1, min_trainers=3, max_trainers=3)
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    api.wait_indexed()
    assert {t["status"] for t in http.ok(f"/api/runs/{task_id}/trainers")} == {"active"}
    for fragment, trainer in enumerate(trainers):
        commit(market, trainer, task_id, 0, fragment)
    finalize(market, w3, witnesses[:2], task_id, 0, 0b111)
    travel_past(w3, market.task(task_id).last_closed_at + spec.challenge_window_s)
    market.seal(outsider, task_id)
    paid, withdraw_receipt = market.withdraw(trainers[0])
    api.wait_indexed()

    chain_receipt = market.receipt(task_id)
    refunds = {line.trainer.lower(): line.stake_refund_wei for line in chain_receipt.trainers}
    for row in http.ok(f"/api/runs/{task_id}/trainers"):
        assert row["stake_wei"] == "0" == str(market.trainer(task_id, row["address"]).stake_wei)
        assert row["status"] == "sealed"
        assert row["stake_returned_wei"] == str(refunds[row["address"]]) == str(spec.trainer_stake_wei)

    # Witness bonds, likewise: 0 on chain after seal, credited back.
    bonds = {line.witness.lower(): line.bond_wei - line.slashed_wei for line in chain_receipt.witnesses}
    for row in http.ok(f"/api/runs/{task_id}/witnesses"):
        assert row["bond_wei"] == "0" == str(market.witness(task_id, row["address"]).bond_wei)
        assert row["bond_returned_wei"] == str(bonds[row["address"]]) == str(spec.witness_bond_wei)

    credits = {c["address"]: c for c in http.ok(f"/api/runs/{task_id}/receipt")["credits"]}
    first = credits[trainers[0].address.lower()]
    line = next(t for t in chain_receipt.trainers if t.trainer.lower() == trainers[0].address.lower())
    assert first["credit_wei"] == "0"
    assert first["credited_wei"] == str(line.reward_wei + line.stake_refund_wei) == str(paid)
    assert first["paid_wei"] == str(paid)
    (withdrawal,) = first["withdrawals"]
    assert withdrawal["amount_wei"] == str(paid)
    assert withdrawal["tx"] == "0x" + bytes(withdraw_receipt["transactionHash"]).hex()
    assert withdrawal["block"] == withdraw_receipt["blockNumber"]
    for credit_line in credits.values():  # what is not paid is still claimable
        assert int(credit_line["paid_wei"]) >= int(credit_line["credited_wei"]) - int(credit_line["credit_wei"])
    second = credits[trainers[1].address.lower()]
    assert second["credit_wei"] == second["credited_wei"] != "0"
    assert second["paid_wei"] == "0" and second["withdrawals"] == []
