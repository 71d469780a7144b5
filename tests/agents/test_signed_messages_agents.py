"""The agents' signed messages on a real anvil (issue 10, findings 1 and 4).

* A trainer announces its signed commitment before its own transaction lands. An outsider that
  reads the announcement and relays it first (the front-run of finding 1) can only record the
  trainer's own commitment, ``uri`` included: a dead ``uri`` under the trainer's signature recovers
  to somebody else. The trainer's own transaction then succeeds as a no-op and it counts the round
  as committed.
* A witness whose finalize failed after it published its vote re-sends that very vote after a
  restart, even when a fresh computation would now sign a different one (here: another
  evaluation config changes the signed validation-loss metric) — two different signed votes for
  one (task, round, prevStateRoot) would be a provable equivocation.

The trainers and the witness run in this process (their real agent classes, the real chain and a
real blob store), so the test can stand between the announcement and the transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from conftest import travel_past
from syncline.blobstore import BlobRef, LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import ChainError
from syncline.run.agent_config import config_from_mapping
from syncline.run.gossip import decode_commitment, read_vote
from syncline.sponsor.task_builder import publish_language_task
from syncline.sponsor.task_defaults import default_task
from syncline.trainer.agent import TrainerAgent
from syncline.witness.agent import WitnessAgent

from ._agent_harness import tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

DEAD_URI = "http://dead.invalid/never-there"


class ObservedBlobStore(LocalBlobStore):
    """A real local blob store that lets the test watch every commitment announcement, the way
    an outsider polling the gossip aliases would, and act before the announcer's next step."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.on_commitment: Callable[[bytes], None] | None = None

    def put(self, data: bytes, *, alias: str | None = None, alias_signature: bytes | None = None) -> BlobRef:
        ref = super().put(data, alias=alias, alias_signature=alias_signature)
        if alias is not None and alias.startswith("gossip:commitment:") and self.on_commitment is not None:
            self.on_commitment(data)
        return ref


def _config(tmp_path: Path, deployment: Deployment, task_id: int, name: str, **extra: Any) -> Any:
    plan = tiny_plan()
    mapping: dict[str, Any] = {
        "node_rpc": deployment.rpc_url,
        "task_id": task_id,
        "deployment": str(Path(deployment.abi_path).with_name("deployment.json")),
        "blob_store": "http://127.0.0.1:1",
        "state_dir": str(tmp_path / name),
        "poll_interval_s": 0.05,
        "threads": 1,
    }
    if name.startswith("trainer"):
        mapping["inner"] = {
            "optimizer": "adamw",
            "lr": plan.inner_lr,
            "weight_decay": 0.01,
            "beta1": 0.9,
            "beta2": 0.95,
            "inner_steps": plan.inner_steps,
            "batch_size": plan.batch_size,
        }
        mapping.update(device="cpu", dtype="fp32", gradient_checkpointing=False)
    mapping.update(extra)
    return config_from_mapping(mapping)


def _start_task(
    tmp_path: Path,
    market: MarketClient,
    deployment: Deployment,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
) -> tuple[int, ObservedBlobStore, list[TrainerAgent]]:
    """A tiny task (long rounds: the agents run in this process) with three enrolled trainer agents."""
    plan = tiny_plan(round_duration_s=600, grace_window_s=600)
    blobs = ObservedBlobStore(tmp_path / "blobs")
    published = publish_language_task(
        blobs,
        template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
        shard_count=plan.shard_count,
        vocab_size=plan.vocab_size,
        seq_len=plan.seq_len,
        model=plan.model,
    )
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    agents = [
        TrainerAgent(_config(tmp_path, deployment, task_id, f"trainer-{i}"), t, market, blobs)
        for i, t in enumerate(trainers)
    ]
    for agent in agents:
        agent.step()  # enrolls; the third enrollment starts the run
    assert market.task(task_id).current_round == 0 and market.task(task_id).status.name == "RUNNING"
    return task_id, blobs, agents


def test_a_front_run_commitment_records_the_trainers_own(
    tmp_path: Path,
    state_env: Path,
    market: MarketClient,
    deployment: Deployment,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
) -> None:
    task_id, blobs, agents = _start_task(tmp_path, market, deployment, sponsor, trainers, witnesses)
    domain = market.domain()
    attempts: list[str] = []

    def front_run(data: bytes) -> None:
        """The outsider read the announcement: it relays it first, with a dead uri if it can."""
        announced = decode_commitment(data, domain)
        try:
            market.send_commitment(outsider, _with_uri(announced.message, DEAD_URI), announced.signature)
            attempts.append("dead uri recorded")
        except ChainError as exc:
            attempts.append(f"dead uri refused: {exc.error_name}")
        market.send_commitment(outsider, announced.message, announced.signature)
        attempts.append("verbatim relayed")

    blobs.on_commitment = front_run
    victim = agents[0]
    victim.step()  # trains, announces (the outsider relays), then sends its own transaction
    blobs.on_commitment = None

    assert attempts == ["dead uri refused: SynclineWrongSigner", "verbatim relayed"]
    fragment = market.trainer(task_id, trainers[0].address).fragment
    sub = market.submission(task_id, 0, fragment)
    assert sub.trainer == trainers[0].address
    assert sub.uri != DEAD_URI  # its own locator
    # its payload stays sealed until the round's commit phase closes (commit, then reveal: §10.6)
    assert not blobs.has(sub.payload_hash)
    (recorded,) = market.get_logs("SubmissionCommitted", taskId=task_id, round=0, fragment=fragment)
    assert market.w3.eth.get_transaction(recorded["transactionHash"])["from"] == outsider.address  # relayed first
    sent = victim.metrics.submissions.labels(outcome="committed")._value.get()
    assert sent == 1, "the trainer counts the front-run round as committed"
    assert market.trainer(task_id, trainers[0].address).submitted == 1
    # The trainer does not train the round again: its submission is on record.
    assert victim.step() is False and market.trainer(task_id, trainers[0].address).submitted == 1


def _with_uri(message: Any, uri: str) -> Any:
    from dataclasses import replace

    return replace(message, uri=uri)


def test_a_restarted_witness_resends_its_published_vote(
    tmp_path: Path,
    state_env: Path,
    w3: Web3,
    market: MarketClient,
    deployment: Deployment,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
) -> None:
    task_id, blobs, agents = _start_task(tmp_path, market, deployment, sponsor, trainers, witnesses)
    for agent in agents:
        agent.step()  # each trains and commits round 0
    assert bin(market.round(task_id, 0).committed_mask).count("1") == 3
    for agent in agents:
        agent._reveal()  # the commit phase closed: each reveals its payload (§10.6)
    travel_past(w3, market.round_deadline(task_id))
    witness = witnesses[0]
    market.ensure_witness_bonded(witness, task_id)

    # First life: the vote is signed and published, but its transaction never lands (it waits in
    # a mempool that is then dropped, as after a node restart): the finalize failed.
    client = MarketClient.from_deployment(deployment, w3)
    client.sender.receipt_timeout_s = 2.0
    config = dict(training_checks="off", challenge=False, eval_batch_size=2)
    first_cfg = _config(tmp_path, deployment, task_id, "witness", eval_batches=1, **config)
    first_life = WitnessAgent(first_cfg, witness, client, blobs)
    first_life._bonded = True
    w3.provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        first_life.step()
    finally:
        w3.provider.make_request("anvil_dropAllTransactions", [])  # type: ignore[arg-type]
        w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    assert market.vote_of(task_id, 0, witness.address) == "0x" + "00" * 32, "the first finalize must have failed"
    published = read_vote(blobs, market.domain(), task_id, 0, witness.address)
    assert published is not None and published.signer == witness.address

    # Second life, another evaluation config: a fresh computation would sign another metric.
    second_life = WitnessAgent(
        _config(tmp_path, deployment, task_id, "witness", eval_batches=3, **config), witness, market, blobs
    )
    second_life._bonded = True
    second_life.step()

    (cast,) = market.get_logs("VoteCast", taskId=task_id, round=0, witness=witness.address)
    assert bytes(cast["args"]["signature"]) == published.signature, "the restarted witness signed a new vote"
    assert int(cast["args"]["metric"]) == published.message.metric
    assert "0x" + bytes(cast["args"]["prevStateRoot"]).hex() == market.task(task_id).state_root.lower()
    # The vote it would have signed now differs: re-sending the stored one is what kept it honest.
    ctx = second_life.ctx
    assert ctx is not None
    result = ctx.compute_round(ctx.fetch_state(market.task(task_id).state_root), ctx.committed_submissions(0))
    fresh = int(second_life._validation_metric(result.state) * 1_000_000)
    assert fresh != published.message.metric
