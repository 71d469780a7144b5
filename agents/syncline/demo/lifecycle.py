"""Scripted market lifecycle on the real contracts (the main job until the training agents land).

A sponsor posts a task, three witnesses post their bonds, three trainers enroll and commit each
round (EIP-712 signed commitments), the witnesses (k=2) finalize rounds with signed votes, one
round is carried forward, a trainer is evicted, the run seals and every party withdraws.
Payloads are deterministic stand-ins (hashes of labelled bytes); state roots are a hash chain
over the accepted payloads, so two witnesses computing from the chain agree.

Two clocks: on the local anvil the script time-travels past each deadline (``evm_increaseTime``);
on any other chain (``syncline demo --scenario lifecycle --rpc-url URL``) it runs on the real
clock with short windows (:func:`real_clock_timing`) and waits for the chain's blocks to pass each
deadline, using only standard JSON-RPC methods. There the operator's key sponsors the task and
funds seven role accounts derived from it (:func:`derived_cast`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_utils import keccak
from web3 import Web3

from syncline.chain.devnet import chain_time, increase_time
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.errors import ChainError
from syncline.observability import get_logger
from syncline.protocol import merkle
from syncline.protocol.enums import AggregationRule, Modality, Tier
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.spec import (
    MIN_CHALLENGE_WINDOW_S,
    AggregationSpec,
    DatasetManifest,
    ModelArchitecture,
    OuterOptimizerSpec,
    TrainingTaskSpec,
)

ETH = 10**18
log = get_logger("syncline.demo")


def _h(label: str) -> bytes:
    return keccak(text=label)


def _hexs(b: bytes) -> str:
    return "0x" + b.hex()


@dataclass(frozen=True)
class Cast:
    """Who plays which role in the demo."""

    sponsor: Signer
    trainers: Sequence[Signer]
    witnesses: Sequence[Signer]
    anyone: Signer


@dataclass(frozen=True)
class Timing:
    """The task's windows (seconds)."""

    round_duration_s: int = 120
    grace_window_s: int = 60
    challenge_window_s: int = MIN_CHALLENGE_WINDOW_S
    enrollment_window_s: int = 600


TIME_TRAVEL_TIMING = Timing()
"""The local anvil's windows: the script jumps over them, so they cost no wall time."""


def real_clock_timing(round_duration_s: int) -> Timing:
    """Windows for a chain whose clock cannot be moved: every round ``round_duration_s`` (long
    enough for three commits to be mined), the grace window as long as a round and the challenge
    window as long too but at least the contract's minimum (``MIN_CHALLENGE_WINDOW_S``, 600 s: the
    seal waits that long after the last round), enrollment ten rounds."""
    if round_duration_s < 2:
        raise ValueError(f"round duration {round_duration_s} s: at least 2 s")
    return Timing(
        round_duration_s=round_duration_s,
        grace_window_s=round_duration_s,
        challenge_window_s=max(MIN_CHALLENGE_WINDOW_S, round_duration_s),
        enrollment_window_s=10 * round_duration_s,
    )


def demo_spec(cast: Cast, now: int, timing: Timing = TIME_TRAVEL_TIMING, unit_wei: int = ETH) -> TrainingTaskSpec:
    """The demo's task; stakes, bonds and the reward pool are multiples of ``unit_wei``."""
    shard_hashes = tuple(_hexs(_h(f"shakespeare-shard-{i}")) for i in range(6))
    return TrainingTaskSpec(
        name="demo-lifecycle",
        modality=Modality.LANGUAGE,
        model=ModelArchitecture(
            family="llama", config={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
        ),
        dataset=DatasetManifest(shard_hashes=shard_hashes, shard_uris=tuple(f"blob://shard-{i}" for i in range(6))),
        tier=Tier.VERIFIED,
        aggregation=AggregationSpec(rule=AggregationRule.COORDINATE_MEDIAN),
        inner_steps=50,
        rounds=4,
        round_duration_s=timing.round_duration_s,
        grace_window_s=timing.grace_window_s,
        challenge_window_s=timing.challenge_window_s,
        trainer_stake_wei=1 * unit_wei,
        min_trainers=2,
        max_trainers=3,
        enrollment_deadline=now + timing.enrollment_window_s,
        witnesses=tuple(w.address for w in cast.witnesses),
        threshold=2,
        witness_fee_wei=unit_wei // 100,
        reward_pool_wei=3 * unit_wei,
        initial_state_root=_hexs(_h("initial-state")),
        outer_optimizer=OuterOptimizerSpec(lr=0.7, momentum=0.9),
        gradient_bits=8,
        max_missed_rounds=1,
        eviction_slash_bps=2_500,
        param_count=4 * 256,  # the stand-in payloads have 4 chunks of 256 coordinates
        checkpoint_interval=10,
        witness_bond_wei=1 * unit_wei,
        challenge_bond_wei=unit_wei // 10,
    )


class Lifecycle:
    """Drives one scripted run; ``advance_past`` moves chain time (anvil) or waits for the chain's
    blocks (any other chain: ``time_travel=False``, with windows from :func:`real_clock_timing`)."""

    def __init__(
        self,
        market: MarketClient,
        cast: Cast,
        *,
        time_travel: bool = True,
        timing: Timing = TIME_TRAVEL_TIMING,
        unit_wei: int = ETH,
        stall_timeout_s: float = 120.0,
    ):
        self.market = market
        self.cast = cast
        self.w3: Web3 = market.w3
        self.time_travel = time_travel
        self.timing = timing
        self.unit_wei = unit_wei
        self.stall_timeout_s = stall_timeout_s
        self.task_id = 0
        self.rounds: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ chain clock

    def advance_past(self, timestamp: int, why: str) -> None:
        now = chain_time(self.w3)
        if now > timestamp:
            return
        if self.time_travel:
            increase_time(self.w3, timestamp - now + 1)
            log.info("time.travel", seconds=timestamp - now + 1, why=why)
        else:
            log.info("time.wait", seconds=timestamp - now + 1, why=why)
            wait_for_chain_time(self.w3, timestamp, self.stall_timeout_s)

    # ------------------------------------------------------------------ roles

    def commit(self, round_: int, trainer: Signer) -> None:
        fragment = self.market.trainer(self.task_id, trainer.address).fragment
        chunks = [_h(f"task{self.task_id}/round{round_}/fragment{fragment}/chunk{c}") for c in range(4)]
        chunk_root = merkle.root(chunks)
        payload = keccak(b"".join(chunks))
        checkpoints = [_h(f"task{self.task_id}/round{round_}/fragment{fragment}/checkpoint{i}") for i in range(5)]
        self.market.commit_submission(
            trainer,
            self.task_id,
            round_,
            fragment,
            payload,
            chunk_root,
            f"blob://{payload.hex()[:16]}",
            checkpoint_root=merkle.root(checkpoints),
        )
        log.info("trainer.committed", round=round_, trainer=trainer.address[:10], fragment=fragment)

    def honest_result(self, round_: int, exclude: int = 0) -> tuple[bytes, bytes, int]:
        """Result a witness derives from the chain: accept every committed fragment (minus ``exclude``)."""
        r = self.market.round(self.task_id, round_)
        mask = r.committed_mask & ~exclude
        payloads = [
            bytes.fromhex(self.market.submission(self.task_id, round_, f).payload_hash[2:])
            for f in range(256)
            if mask >> f & 1
        ]
        aggregate = merkle.root(payloads) if payloads else _h("empty-aggregate")
        previous = bytes.fromhex(self.market.task(self.task_id).state_root[2:])
        return keccak(previous + aggregate), aggregate, mask

    def vote(self, round_: int, witness: Signer, result: tuple[bytes, bytes, int], loss: float) -> None:
        state_root, aggregate, mask = result
        receipt = self.market.finalize_round(
            witness, self.task_id, round_, state_root, aggregate, mask, metric=int(loss * 1e6)
        )
        names = [e["event"] for e in self.market.all_events(receipt)]
        log.info("witness.voted", round=round_, witness=witness.address[:10], events=",".join(names) or "none")

    # ------------------------------------------------------------------ script

    def run(self, on_step: Callable[[str], None] | None = None) -> TrainingReceipt:
        step = on_step or (lambda s: log.info("step", what=s))
        cast, market = self.cast, self.market
        t0, t1, _t2 = cast.trainers
        w0, w1, w2 = cast.witnesses

        step("1/7 sponsor posts a task and escrows the reward pool; the witnesses post their bonds")
        spec = demo_spec(cast, chain_time(self.w3), self.timing, self.unit_wei)
        self.task_id, _ = market.post_task(cast.sponsor, spec, spec_uri=f"blob://{spec.spec_hash[2:18]}")
        log.info(
            "task.posted",
            task_id=self.task_id,
            spec_hash=spec.spec_hash[:18],
            escrow_eth=spec.escrow_wei / ETH,
            rule=spec.aggregation.rule.name.lower(),
            tier=spec.tier.name.lower(),
        )

        for witness in cast.witnesses:
            market.bond_witness(witness, self.task_id)
            log.info("witness.bonded", witness=witness.address[:10], eth=spec.witness_bond_wei / ETH)

        step("2/7 three trainers enroll with their stake (the run starts at max trainers)")
        for trainer in cast.trainers:
            fragment, receipt = market.enroll(trainer, self.task_id)
            log.info("trainer.enrolled", trainer=trainer.address[:10], fragment=fragment)
        for ev in market.events(receipt, "ShardsAssigned"):
            log.info("shards.assigned", trainer=ev["args"]["trainer"][:10], shards=_shards(ev["args"]["shardMask"]))

        step("3/7 round 0: all commit; two witnesses reach quorum; the third re-finalizes idempotently")
        for trainer in cast.trainers:
            self.commit(0, trainer)
        self.advance_past(market.round_deadline(self.task_id), "round 0 deadline")
        result = self.honest_result(0)
        self.vote(0, w0, result, 5.20)
        self.vote(0, w1, result, 5.21)
        before = market.task(self.task_id)
        self.vote(0, w2, result, 5.20)
        if market.task(self.task_id) != before:
            raise RuntimeError("an idempotent finalize changed the task state")
        log.info("round.finalized", round=0, state_root=_hexs(result[0])[:18], idempotent_third_vote="no change")
        self.rounds.append(self._round_summary(0))

        step("4/7 round 1: trainer 3 misses; witness 2 dissents; a late conflicting finalize is refused")
        self.commit(1, t0)
        self.commit(1, t1)
        self.advance_past(market.round_deadline(self.task_id), "round 1 deadline")
        honest = self.honest_result(1)
        dissent = self.honest_result(1, exclude=1 << market.trainer(self.task_id, t1.address).fragment)
        self.vote(1, w0, honest, 4.61)
        self.vote(1, w1, dissent, 4.70)
        self.vote(1, w2, honest, 4.60)
        try:
            market.finalize_round(w1, self.task_id, 1, dissent[0], dissent[1], dissent[2])
            raise RuntimeError("a conflicting finalize after quorum was accepted")
        except ChainError as err:
            log.info("fork.detected", error=err.error_name, detail=str(err).split(": ", 1)[-1][:90])
        self.rounds.append(self._round_summary(1))

        step("5/7 round 2: only one witness is online; after the grace window anyone carries the round forward")
        self.commit(2, t0)
        self.commit(2, t1)
        self.advance_past(market.round_deadline(self.task_id), "round 2 deadline")
        self.vote(2, w0, self.honest_result(2), 4.20)
        try:
            market.carry_forward(cast.anyone, self.task_id, 2)
            raise RuntimeError("carry-forward inside the grace window was accepted")
        except ChainError as err:
            log.info("carry_forward.too_early", error=err.error_name)
        self.advance_past(market.round_deadline(self.task_id) + spec.grace_window_s, "round 2 grace window")
        receipt = market.carry_forward(cast.anyone, self.task_id, 2)
        for ev in market.all_events(receipt):
            args = ev["args"]
            if ev["event"] == "TrainerEvicted":
                log.info("trainer.evicted", trainer=args["trainer"][:10], after_round=args["round"])
            elif ev["event"] == "StakeSlashed":
                log.info("stake.slashed", offender=args["offender"][:10], eth=args["amount"] / ETH)
            elif ev["event"] == "ShardsAssigned":
                log.info("shards.rebalanced", trainer=args["trainer"][:10], shards=_shards(args["shardMask"]))
            elif ev["event"] == "RoundCarriedForward":
                log.info("round.carried_forward", round=args["round"], state_root=_hexs(args["stateRoot"])[:18])
        self.rounds.append(self._round_summary(2))

        step("6/7 round 3: the two remaining trainers commit; quorum finalizes the last round")
        self.commit(3, t0)
        self.commit(3, t1)
        self.advance_past(market.round_deadline(self.task_id), "round 3 deadline")
        result = self.honest_result(3)
        self.vote(3, w2, result, 3.95)
        self.vote(3, w0, result, 3.94)
        self.rounds.append(self._round_summary(3))

        step("7/7 after the challenge window the run seals; every party withdraws its credit")
        try:
            market.seal(cast.anyone, self.task_id)
            raise RuntimeError("sealing inside the challenge window was accepted")
        except ChainError as err:
            log.info("seal.too_early", error=err.error_name)
        self.advance_past(market.task(self.task_id).last_closed_at + spec.challenge_window_s, "challenge window")
        market.seal(cast.anyone, self.task_id)
        payouts: dict[str, int] = {}
        for signer in [cast.sponsor, *cast.trainers, *cast.witnesses]:
            if market.credit_of(signer.address) > 0:
                amount, _ = market.withdraw(signer)
                payouts[signer.address] = amount
                log.info("withdrawn", account=signer.address[:10], eth=round(amount / ETH, 6))
        escrow_left = market.escrow_of(self.task_id)
        if escrow_left != 0:
            raise RuntimeError(f"task still holds {escrow_left} wei after sealing")

        receipt_view = market.receipt(self.task_id)
        extras = {
            "rounds": self.rounds,
            "withdrawn_wei": payouts,
            "market": market.address,
            "chain_id": int(self.w3.eth.chain_id),
        }
        return TrainingReceipt(**{**receipt_view.__dict__, "extras": extras})

    def _round_summary(self, round_: int) -> dict[str, Any]:
        r = self.market.round(self.task_id, round_)
        return {
            "round": round_,
            "status": r.status.name.lower(),
            "state_root": r.state_root,
            "aggregate_root": r.aggregate_root,
            "accepted_mask": r.accepted_mask,
            "committed_mask": r.committed_mask,
            "votes": r.vote_count,
        }


def wait_for_chain_time(w3: Web3, timestamp: int, stall_timeout_s: float, poll_s: float = 0.5) -> int:
    """Wait until the latest block's timestamp is past ``timestamp``; returns it. A chain that
    mines no new block for ``stall_timeout_s`` (a node that mines only on demand) raises one line
    instead of waiting forever."""
    last_block = int(w3.eth.block_number)
    last_progress = time.monotonic()
    while True:
        now = chain_time(w3)
        if now > timestamp:
            return now
        block = int(w3.eth.block_number)
        if block != last_block:
            last_block, last_progress = block, time.monotonic()
        elif time.monotonic() - last_progress > stall_timeout_s:
            raise ChainError(
                f"the chain mined no block for {stall_timeout_s:.0f} s while waiting for time {timestamp}: "
                "the real-clock mode needs a chain that produces blocks on its own"
            )
        time.sleep(poll_s)


# ---------------------------------------------------------------------- the cast on any chain

ROLE_GAS_ALLOWANCE = 15_000_000
"""Gas each derived role account is funded for (enroll or bond, four commits or votes, withdraw)."""


def derived_cast(funder: Signer) -> Cast:
    """The sponsor is ``funder``; trainers, witnesses and "anyone" are seven accounts whose keys
    are derived from the funder's (keccak of the key and the role), so a rerun reuses them and the
    operator can recover what is left on them."""
    key = bytes(funder.account.key)
    roles = [
        from_private_key("0x" + keccak(key + f"syncline/demo-lifecycle/role/{i}".encode()).hex()) for i in range(7)
    ]
    return Cast(sponsor=funder, trainers=roles[0:3], witnesses=roles[3:6], anyone=roles[6])


def fund_cast(w3: Web3, cast: Cast, unit_wei: int) -> dict[str, int]:
    """Top every role account up to its stake or bond plus a gas allowance, from the sponsor;
    returns the wei sent to each (accounts already holding enough get nothing)."""
    gas_price = 2 * int(w3.eth.gas_price) + 1
    allowance = ROLE_GAS_ALLOWANCE * gas_price
    needs = {t.address: unit_wei + allowance for t in cast.trainers}
    needs |= {w.address: unit_wei + allowance for w in cast.witnesses}
    needs[cast.anyone.address] = allowance
    sponsor = Web3.to_checksum_address(cast.sponsor.address)
    nonce = int(w3.eth.get_transaction_count(sponsor, "pending"))
    chain_id = int(w3.eth.chain_id)
    sent: dict[str, int] = {}
    hashes = []
    for address, need in needs.items():
        missing = need - int(w3.eth.get_balance(Web3.to_checksum_address(address)))
        if missing <= 0:
            continue
        tx: Any = {
            "to": Web3.to_checksum_address(address),
            "value": missing,
            "gas": 21_000,
            "gasPrice": gas_price,
            "nonce": nonce,
            "chainId": chain_id,
        }
        signed = cast.sponsor.account.sign_transaction(tx)
        hashes.append(w3.eth.send_raw_transaction(signed.raw_transaction))
        sent[address] = missing
        nonce += 1
    for tx_hash in hashes:
        receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=180)
        if receipt["status"] != 1:
            raise ChainError(f"funding transfer 0x{bytes(tx_hash).hex()} failed")
    return sent


def _shards(mask: int) -> str:
    return ",".join(str(i) for i in range(256) if mask >> i & 1)


def write_receipt(receipt: TrainingReceipt, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(receipt.to_mapping(), indent=2) + "\n")
    return path
