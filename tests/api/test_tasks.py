"""Real tasks through the API: ``/api/tasks/prepare`` calldata posted from an unlocked anvil account
(as the browser does), the spec artifact verified, signed trainer loss reports, the model and
state downloads, and fraud-proof calldata built from public data and accepted by the court."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest
import torch
from eth_utils import keccak
from web3 import Web3

from conftest import checkpoint_root, travel_past
from syncline.api.server import ApiServer
from syncline.blobstore import HttpBlobStore
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.protocol.enums import ChallengeStatus, RoundStatus
from syncline.protocol.state import TrainingState
from syncline.run.context import TaskContext
from syncline.run.gossip import TrainerReport, announce_report
from syncline.sponsor.task_builder import PublishedTask
from syncline.trainer.segments import encode_payload

from .conftest import SEQ_LEN, SHARD_COUNT, TINY_MODEL, VOCAB_SIZE, Http, assert_error, publish_tiny_task

pytestmark = pytest.mark.chain


def _send(w3: Web3, sender: str, to: str, data: str, value: int) -> Any:
    """What the browser does with an unlocked dev account: eth_sendTransaction, anvil signs."""
    tx = w3.eth.send_transaction(
        {"from": Web3.to_checksum_address(sender), "to": Web3.to_checksum_address(to), "data": data, "value": value}
    )
    receipt = w3.eth.wait_for_transaction_receipt(tx)
    assert receipt["status"] == 1
    return receipt


def test_prepare_post_follow_and_download(
    api: ApiServer,
    http: Http,
    market: MarketClient,
    w3: Web3,
    blobs: HttpBlobStore,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
) -> None:
    template = http.ok("/api/template")
    spec = {**template["spec"], "name": "browser-task", "inner_steps": 4, "checkpoint_interval": 2, "rounds": 2}
    body = {
        "spec": spec,
        "corpus": {"shard_count": SHARD_COUNT, "vocab_size": VOCAB_SIZE, "seq_len": SEQ_LEN},
        "model": TINY_MODEL,
    }
    reply = http.post("/api/tasks/prepare", body)
    assert reply.status == 200, reply.body
    prepared = reply.json()
    assert prepared["to"] == market.address.lower() and prepared["value_wei"] == prepared["escrow_wei"]
    assert int(prepared["escrow_wei"]) == 3 * 10**18 + 10**16 * 2 * 2  # pool + fee x k x rounds
    assert prepared["param_count"] > 0

    receipt = _send(w3, w3.eth.accounts[0], prepared["to"], prepared["data"], int(prepared["value_wei"]))
    (posted,) = market.events(receipt, "TaskPosted")
    task_id = int(posted["args"]["taskId"])
    assert "0x" + bytes(posted["args"]["specHash"]).hex() == prepared["spec_hash"]
    assert "0x" + bytes(market.spec_tuple(task_id)[0]).hex() == prepared["spec_hash"]
    assert posted["args"]["specURI"] == prepared["spec_uri"]

    for w in witnesses:
        market.bond_witness(w, task_id)
    for t in trainers:
        market.enroll(t, task_id)
    for fragment, trainer in enumerate(trainers):
        market.commit_submission(
            trainer,
            task_id,
            0,
            fragment,
            keccak(text=f"payload-{fragment}"),
            keccak(text=f"chunks-{fragment}"),
            f"blob://{fragment}",
            checkpoint_root=checkpoint_root(f"api-{fragment}"),
        )
        # Trainers 1 and 2 announce signed loss reports; fragment 2's is signed by someone else.
        report = TrainerReport(task_id, 0, fragment, 5.0 - fragment / 10, 4, 512, 0.5)
        if fragment == 1:
            announce_report(blobs, report, trainer)
        if fragment == 2:
            announce_report(blobs, report, outsider)

    api.wait_indexed()
    api.wait_indexed()  # one more pass fetches the reports the first one found due
    detail = http.ok(f"/api/runs/{task_id}")
    assert detail["summary"]["name"] == "browser-task", detail["spec"].get("artifact_error")
    assert detail["summary"]["status"] == "running"
    assert detail["spec"]["artifact_verified"] is True
    assert detail["spec"]["spec_hash"] == prepared["spec_hash"]
    assert detail["spec"]["param_count"] == prepared["param_count"]
    assert detail["spec"]["initial_state_root"] == prepared["initial_state_root"]
    assert detail["spec"]["witnesses"] == [w.address.lower() for w in witnesses]
    losses = http.ok(f"/api/runs/{task_id}/losses")
    assert losses["rounds"] == [0]
    by_trainer = losses["trainers"]
    assert by_trainer[trainers[1].address.lower()] == [pytest.approx(4.9)]
    assert by_trainer[trainers[0].address.lower()] == [None]  # no report (yet)
    assert by_trainer[trainers[2].address.lower()] == [None]  # signed by someone else: not trusted
    assert http.ok(f"/api/runs/{task_id}/rounds")[0]["trainer_losses"] == {"1": pytest.approx(4.9)}

    # Downloads: the current model (the initial state) and the initial state blob, verified.
    model = http.get(f"/api/runs/{task_id}/model")
    assert model.status == 200 and model.headers["content-type"] == "application/gzip"
    assert "attachment" in model.headers.get("content-disposition", "")
    with tarfile.open(fileobj=io.BytesIO(model.body), mode="r:gz") as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "syncline.json"):
        assert needed in names, names
    again = http.get(f"/api/runs/{task_id}/model")  # served from the cache
    assert again.body == model.body
    root = prepared["initial_state_root"]
    state = http.get(f"/api/runs/{task_id}/state/{root}")
    assert state.status == 200 and state.headers["content-type"] == "application/octet-stream"
    assert TrainingState.from_bytes(state.body).state_root_hex == root


def _forged_round(
    market: MarketClient,
    w3: Web3,
    blobs: HttpBlobStore,
    published: PublishedTask,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    *,
    tamper: bool,
) -> int:
    """Round 0 of a real tiny task: three real int8 gradients committed, and a quorum that finalizes
    the honest state or one with a single wrong coordinate (both states published)."""
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    for w in witnesses:
        market.bond_witness(w, task_id)
    for t in trainers:
        market.enroll(t, task_id)
    ctx = TaskContext.load(market, blobs, task_id)
    g = torch.Generator().manual_seed(5)
    for fragment, trainer in enumerate(trainers):
        payload, chunk_root = encode_payload(torch.randn(ctx.layout.numel, generator=g) * 0.01, 8)
        ref = blobs.put(payload)
        market.commit_submission(
            trainer, task_id, 0, fragment, keccak(payload), chunk_root, ref.uri, checkpoint_root=checkpoint_root("x")
        )
    previous = ctx.fetch_state(published.spec.initial_state_root)
    honest = ctx.compute_round(previous, ctx.committed_submissions(0)).state
    claimed = honest
    if tamper:
        weights = honest.weights.clone()
        weights[300] += 1
        claimed = TrainingState(layout=honest.layout, weights=weights, momentum=honest.momentum)
    ctx.publish_state(claimed)
    travel_past(w3, market.round_deadline(task_id))
    for w in witnesses[:2]:
        market.finalize_round(w, task_id, 0, claimed.state_root(), keccak(text="aggregate"), 0b111)
    return task_id


def test_challenge_proofs_from_public_data(
    api: ApiServer,
    http: Http,
    market: MarketClient,
    w3: Web3,
    blobs: HttpBlobStore,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
) -> None:
    published = publish_tiny_task(blobs, w3, witnesses)
    honest_id = _forged_round(market, w3, blobs, published, sponsor, trainers, witnesses, tamper=False)
    forged_id = _forged_round(market, w3, blobs, published, sponsor, trainers, witnesses, tamper=True)
    api.wait_indexed()

    for kind, what in (
        ("aggregation_fraud", "aggregation"),
        ("censorship", "censorship"),
        ("trainer_equivocation", "trainer equivocation"),
        ("witness_equivocation", "witness equivocation"),
    ):
        reply = http.post(f"/api/runs/{honest_id}/challenges/build", {"round": 0, "kind": kind})
        assert_error(reply, 409, f"round 0: no provable {what} fault")
    assert_error(http.post(f"/api/runs/{honest_id}/challenges/build", {"round": 1, "kind": "censorship"}), 409, "open")

    reply = http.post(f"/api/runs/{forged_id}/challenges/build", {"round": 0, "kind": "aggregation_fraud"})
    assert reply.status == 200, reply.body
    proof = reply.json()
    assert proof["function"] == "proveAggregationFraud" and proof["to"] == market.address.lower()
    assert proof["value_wei"] == str(market.challenge_bond(forged_id)) and proof["round"] == 0
    assert "chunk 1" in proof["description"] and "\n" not in proof["description"]

    challenger = w3.eth.accounts[7]
    receipt = _send(w3, challenger, proof["to"], proof["data"], int(proof["value_wei"]))
    (opened,) = market.events(receipt, "ChallengeOpened")
    challenge_id = int(opened["args"]["challengeId"])
    assert market.challenge(challenge_id).status == ChallengeStatus.UPHELD
    assert market.round(forged_id, 0).status == RoundStatus.INVALIDATED

    api.wait_indexed()
    (challenge,) = http.ok(f"/api/runs/{forged_id}/challenges")
    assert challenge["challenge_id"] == challenge_id and challenge["status"] == "upheld"
    assert challenge["kind"] == "aggregation_fraud" and challenge["challenger"] == challenger.lower()
    (round0,) = http.ok(f"/api/runs/{forged_id}/rounds")[:1]
    assert round0["status"] == "invalidated" and round0["challenges"] == [challenge_id]
    run = http.ok(f"/api/runs/{forged_id}")
    assert run["summary"]["rounds_invalidated"] == 1
    assert run["summary"]["state_root"] == published.spec.initial_state_root  # rolled back
    assert "round_invalidated" in [e["kind"] for e in run["timeline"]]
    slashed = [w for w in http.ok(f"/api/runs/{forged_id}/witnesses") if int(w["slashed_wei"]) > 0]
    assert sorted(w["address"] for w in slashed) == sorted(w.address.lower() for w in witnesses[:2])
    # The same fault cannot be proven twice: the round is no longer finalized.
    assert_error(http.post(f"/api/runs/{forged_id}/challenges/build", {"round": 0, "kind": "aggregation_fraud"}), 409)
