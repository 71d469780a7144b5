"""Every fraud scenario end to end: a real devnet run with one cheater, caught by an honest witness.

``TrainingDemo`` (the code ``syncline demo --scenario NAME`` runs) with the tiny CI model and the
scenario's ``misbehave`` map: 3 trainers and 3 witnesses as subprocesses, 2 rounds of H=8 AdamW
steps with a checkpoint every 4; the witnesses' challengers re-execute every training segment in
the training-fraud scenarios and none in the others. Trainers cheat from round 0, witnesses from
round 1 (``CHEAT_FROM_ROUND``): round 0 of a witness scenario is the honest state the cheat round
must roll back to, and in every scenario the run ends after the first cheat round has been judged,
so nothing after it muddies the accounting. Nothing here sends a challenge: the honest witnesses'
embedded challengers find the fault and prove it (training fraud: the witness committee referees
it). Everything asserted is read from the chain while it is still up, to the wei:

- the expected challenge kind is upheld on the cheat round, brought by an honest witness whose own
  challenger logged it, inside the challenge window; no challenge was rejected;
- the culprit lost its whole stake (trainer, also evicted) or bond (witness); each upheld challenge
  credited its challenger the challenge bond plus 50% of what that transaction slashed;
- aggregation / censorship: the round is invalidated and the task's state root rolled back to the
  round's ``prevStateRoot``; trainer faults: the culprit's reward for the round is revoked;
- nobody honest was slashed; every ``Credited`` (per account and reason) is what the receipt and the
  court decided, every account withdrew all of it, the task's escrow and the market are empty.

The seconds from the cheat round's close to the proof are printed (``-s`` shows them).

Timing, tuned on 2 loaded cores (about 40-55 s a scenario, ~5 min in all; most of it is agent
start-up and the windows): 8 s rounds leave a trainer 5+ s of slack (it commits 1-3 s after a
round opens). The grace window is long because a carry-forward is never wanted here (a slow
witness's first vote must not make a fast one carry round 0 forward) and costs nothing unless one
happens. The challenge window must hold the detection and the proof (observed 0-2 s after the round
closed) and, for training fraud, the committee's votes (2-4 s); it is also the censorship defence
period and the wait before the seal, so each extra second costs every run a second.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet, DevnetClock
from syncline.chain.market import ChallengeView, MarketClient, RoundView, TrainerView, WitnessView
from syncline.demo.fraud import FraudReport, check_report, collect_report
from syncline.demo.scenarios import SCENARIOS, Scenario
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.protocol.enums import ChallengeKind, ChallengeStatus, RoundStatus, TaskStatus
from syncline.protocol.receipt import TrainingReceipt
from syncline.protocol.spot_checks import spot_check_draw
from syncline.witness.agent import CHEAT_FROM_ROUND

from ._agent_harness import read_jsonl, tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

CHALLENGER_SHARE_BPS = 5_000  # half of a slash goes to the prover (checked against the contract)
BPS = 10_000
TRAINER_FAULTS = (ChallengeKind.TRAINER_EQUIVOCATION, ChallengeKind.TRAINING_FRAUD)
ROLLBACK_FAULTS = (ChallengeKind.AGGREGATION_FRAUD, ChallengeKind.CENSORSHIP)


def fraud_test_plan(scenario: Scenario) -> DemoPlan:
    training = scenario.expect == ChallengeKind.TRAINING_FRAUD
    return tiny_plan(
        rounds=2,
        round_duration_s=8,
        grace_window_s=30,
        challenge_window_s=10 if training else 8,
        training_checks="all" if training else "off",
        # k=3 when the culprit's own on-chain vote is half of the proof: with k=2 the other two
        # witnesses may finalize first, and a vote matching an already finalized result is a no-op
        # without a VoteCast event, so no challenger can see the vote the equivocator cast.
        threshold=3 if scenario.expect == ChallengeKind.WITNESS_EQUIVOCATION else 2,
        misbehave=dict(scenario.misbehave),
        checkpoints=scenario.checkpoints,
        spot_check_rate=scenario.spot_check_rate,
        trainer_dtypes=dict(scenario.dtypes),
        timeout_s=200.0,
    )


def cheat_round(scenario: Scenario) -> int:
    """The first round the cheater cheats in: trainers from round 0, witnesses from round 1."""
    return 0 if scenario.expect in TRAINER_FAULTS else CHEAT_FROM_ROUND


# ---------------------------------------------------------------------- what the chain recorded


@dataclass
class Outcome:
    """One challenge and the transaction that decided it (the proof itself for synchronous kinds)."""

    view: ChallengeView
    opened_at: int  # timestamp of the block that opened it
    round_closed_at: int
    resolved_at: int | None
    resolved_bounty: int | None  # ChallengeResolved.bounty
    credited: list[tuple[str, int, str]]  # Credited in the deciding tx: (account, amount, reason)
    slashed: dict[str, int]  # Stake/WitnessSlashed in the deciding tx: account -> amount
    revoked: list[tuple[int, str, int]]  # RewardRevoked in the deciding tx: (round, trainer, weight)
    invalidated: list[tuple[int, int, str]]  # RoundsInvalidated in the deciding tx
    state_root_after: str | None  # the task's state root right after the deciding tx


@dataclass
class FraudRecord:
    task_id: int
    names: dict[str, str]  # lower-case address -> trainer-N / witness-N
    sponsor: str
    report: FraudReport  # collect_report, right after the seal
    receipt: TrainingReceipt
    rounds: list[RoundView]
    outcomes: list[Outcome]
    trainers: dict[str, TrainerView]
    witnesses: dict[str, WitnessView]
    fragment_of: dict[str, int]
    submission_weight: dict[tuple[int, int], int]  # (round, fragment) -> weight
    stake_slashed: dict[str, int]  # summed StakeSlashed of the whole task
    witness_slashed: dict[str, int]  # summed WitnessSlashed of the whole task
    revoked: list[tuple[int, str, int]]  # every RewardRevoked of the task
    invalidations: list[tuple[int, int, str]]  # every RoundsInvalidated of the task
    credited: dict[str, int]  # summed Credited of the task, per account
    credited_by_reason: dict[tuple[str, str], int]  # summed Credited of the task, per (account, reason)
    withdrawn: dict[str, int]  # summed Withdrawn, per account
    credits_left: dict[str, int]  # creditOf after the run
    escrow: int
    market_balance: int
    challenger_share_bps: int  # the market's CHALLENGER_SHARE_BPS
    agent_exit_codes: dict[str, int | None]
    finalized_in: dict[int, bytes] = field(default_factory=dict)  # round -> hash of its RoundFinalized block
    challenger_logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # witness name -> challenges.jsonl
    # witness name -> its log lines of tolerant comparisons (a segment of a trainer of another device class,
    # or one whose bit-exact replay missed)
    tolerant_comparisons: dict[str, list[str]] = field(default_factory=dict)

    def name(self, address: str) -> str:
        return self.names.get(address.lower(), address)

    def address(self, name: str) -> str:
        return next(a for a, n in self.names.items() if n == name)


def _lower(value: Any) -> str:
    return str(value).lower()


def _hex32(value: Any) -> str:
    return "0x" + bytes(value).hex()


def _reason(value: Any) -> str:
    """A ``Credited`` reason (bytes32, zero-padded ASCII)."""
    return bytes(value).rstrip(b"\0").decode()


def _outcome(market: MarketClient, task_id: int, view: ChallengeView) -> Outcome:
    w3: Web3 = market.w3
    (opened,) = market.get_logs("ChallengeOpened", challengeId=view.challenge_id)
    opened_at = int(w3.eth.get_block(opened["blockNumber"])["timestamp"])
    round_closed_at = market.round(task_id, view.round).closed_at
    resolved = market.get_logs("ChallengeResolved", challengeId=view.challenge_id)
    if not resolved:
        return Outcome(view, opened_at, round_closed_at, None, None, [], {}, [], [], None)
    (ev,) = resolved
    receipt = w3.eth.get_transaction_receipt(ev["transactionHash"])
    block = int(ev["blockNumber"])
    slashed: dict[str, int] = defaultdict(int)
    for e in market.events(receipt, "StakeSlashed"):
        slashed[_lower(e["args"]["offender"])] += int(e["args"]["amount"])
    for e in market.events(receipt, "WitnessSlashed"):
        slashed[_lower(e["args"]["witness"])] += int(e["args"]["amount"])
    state = market.contract.functions.getTaskState(task_id).call(block_identifier=block)
    return Outcome(
        view=view,
        opened_at=opened_at,
        round_closed_at=round_closed_at,
        resolved_at=int(w3.eth.get_block(block)["timestamp"]),
        resolved_bounty=int(ev["args"]["bounty"]),
        credited=[
            (_lower(e["args"]["account"]), int(e["args"]["amount"]), _reason(e["args"]["reason"]))
            for e in market.events(receipt, "Credited")
        ],
        slashed=dict(slashed),
        revoked=[
            (int(e["args"]["round"]), _lower(e["args"]["trainer"]), int(e["args"]["weight"]))
            for e in market.events(receipt, "RewardRevoked")
        ],
        invalidated=[
            (int(e["args"]["fromRound"]), int(e["args"]["throughRound"]), _hex32(e["args"]["restoredRoot"]))
            for e in market.events(receipt, "RoundsInvalidated")
        ],
        state_root_after=_hex32(state[9]),  # TaskState.stateRoot
    )


def _summed(logs: list[Any], account: str, amount: str = "amount") -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for e in logs:
        out[_lower(e["args"][account])] += int(e["args"][amount])
    return dict(out)


class FraudDemo(TrainingDemo):
    """``TrainingDemo`` that reads the court's record back before the devnet is torn down: the
    fraud report right after the seal (``after_seal``), the rest once every agent has exited and
    the sponsor has withdrawn."""

    def __init__(self, workdir: Path, scenario_name: str, plan: DemoPlan):
        super().__init__(workdir, plan)
        self.scenario_name = scenario_name
        self.report: FraudReport | None = None
        self.names: dict[str, str] = {}
        self.record: FraudRecord | None = None
        self.after_seal = self._sealed

    def _sealed(self, market: MarketClient, task_id: int, names: dict[str, str]) -> None:
        self.report = collect_report(self.scenario_name, market, task_id, names)
        self.names = names

    def _run(self, devnet: Devnet, blob_url: str, started: float, clock: DevnetClock) -> TrainingReceipt:
        receipt = super()._run(devnet, blob_url, started, clock)
        market = MarketClient.from_deployment(Deployment.read(self.workdir / "deployment.json"), devnet.web3())
        self.record = self._capture(market, receipt.task_id)
        return receipt

    def _capture(self, market: MarketClient, task_id: int) -> FraudRecord:
        assert self.report is not None, "after_seal was not called"
        task = market.task(task_id)
        trainers = market.trainers(task_id)
        witnesses = [a for a, n in self.names.items() if n.startswith("witness-")]
        trainer_views = {a.lower(): market.trainer(task_id, a) for a in trainers}
        rounds = [market.round(task_id, r) for r in range(self.plan.rounds)]
        weights = {}
        for r, rr in enumerate(rounds):
            for fragment in range(len(trainers)):
                if rr.committed_mask >> fragment & 1:
                    weights[(r, fragment)] = market.submission(task_id, r, fragment).weight
        accounts = {*self.names, task.sponsor.lower()}
        credited_logs = market.get_logs("Credited", taskId=task_id)
        credited = _summed(credited_logs, "account")
        by_reason: dict[tuple[str, str], int] = defaultdict(int)
        for e in credited_logs:
            by_reason[(_lower(e["args"]["account"]), _reason(e["args"]["reason"]))] += int(e["args"]["amount"])
        accounts |= set(credited)
        return FraudRecord(
            task_id=task_id,
            names=dict(self.names),
            sponsor=task.sponsor.lower(),
            report=self.report,
            receipt=market.receipt(task_id),
            rounds=rounds,
            outcomes=[
                _outcome(market, task_id, market.challenge(int(e["args"]["challengeId"])))
                for e in market.get_logs("ChallengeOpened", taskId=task_id)
            ],
            trainers=trainer_views,
            witnesses={a: market.witness(task_id, a) for a in witnesses},
            fragment_of={a: v.fragment for a, v in trainer_views.items()},
            submission_weight=weights,
            stake_slashed=_summed(market.get_logs("StakeSlashed", taskId=task_id), "offender"),
            witness_slashed=_summed(market.get_logs("WitnessSlashed", taskId=task_id), "witness"),
            revoked=[
                (int(e["args"]["round"]), _lower(e["args"]["trainer"]), int(e["args"]["weight"]))
                for e in market.get_logs("RewardRevoked", taskId=task_id)
            ],
            invalidations=[
                (int(e["args"]["fromRound"]), int(e["args"]["throughRound"]), _hex32(e["args"]["restoredRoot"]))
                for e in market.get_logs("RoundsInvalidated", taskId=task_id)
            ],
            credited=credited,
            credited_by_reason=dict(by_reason),
            withdrawn=_summed(market.get_logs("Withdrawn"), "account"),
            credits_left={a: market.credit_of(a) for a in accounts},
            escrow=market.escrow_of(task_id),
            market_balance=int(market.w3.eth.get_balance(Web3.to_checksum_address(market.address))),
            challenger_share_bps=int(market.contract.functions.CHALLENGER_SHARE_BPS().call()),
            agent_exit_codes={a.name: a.process.poll() for a in self.agents},
            finalized_in={
                r: h for r in range(self.plan.rounds) if (h := market.finalization_block_hash(task_id, r)) is not None
            },
            challenger_logs={
                n: read_jsonl(self.workdir / "agents" / n / "challenges.jsonl")
                for n in self.names.values()
                if n.startswith("witness-")
            },
            tolerant_comparisons={
                n: [
                    line
                    for line in (self.workdir / "logs" / f"{n}.log").read_text(errors="replace").splitlines()
                    if "referee.tolerant_comparison" in line
                ]
                for n in self.names.values()
                if n.startswith("witness-")
            },
        )


# ---------------------------------------------------------------------- the checks


def check_upheld_by_honest_witness(record: FraudRecord, scenario: Scenario, plan: DemoPlan) -> Outcome:
    """The expected kind is upheld, first on the cheat round, every time brought by an honest
    witness whose own challenger logged the proof; returns the first such challenge."""
    check_report(record.report, scenario)
    kind = scenario.expect
    upheld = [o for o in record.outcomes if o.view.kind == kind and o.view.status == ChallengeStatus.UPHELD]
    assert upheld, [(o.view.kind.name, o.view.status.name) for o in record.outcomes]
    first = min(upheld, key=lambda o: o.view.challenge_id)
    if scenario.checkpoints == "on-demand":
        check_claim_names_the_drawn_segment(record, scenario, plan, first)
    else:
        assert first.view.round == cheat_round(scenario), (first.view.round, cheat_round(scenario))
    honest_witnesses = {n for n in record.names.values() if n.startswith("witness-")} - set(scenario.misbehave)
    for o in upheld:
        challenger = record.name(o.view.challenger)
        assert challenger in honest_witnesses, (challenger, honest_witnesses)
        logged = [line for line in record.challenger_logs[challenger] if line["challenge"] == o.view.challenge_id]
        assert len(logged) == 1, (challenger, record.challenger_logs[challenger])
        assert logged[0]["round"] == o.view.round
        # Within the window: the contract refuses later proofs; the challenger opens one look.
        assert o.round_closed_at <= o.opened_at <= o.round_closed_at + plan.challenge_window_s
    # An honest challenger is never wrong: nothing rejected (that would forfeit its bond).
    assert all(o.view.status in (ChallengeStatus.UPHELD, ChallengeStatus.EXPIRED) for o in record.outcomes), [
        (o.view.challenge_id, o.view.kind.name, o.view.status.name) for o in record.outcomes
    ]
    return first


def check_claim_names_the_drawn_segment(
    record: FraudRecord, scenario: Scenario, plan: DemoPlan, first: Outcome
) -> None:
    """Checkpoints on demand: the committee's draw (recomputed here from the chain) named a segment
    of every submission (rate 1); the withholder's claim is on the drawn segment of a round it
    committed. (Its round-0 segment 0 may pass unclaimed when another trainer's draw published
    checkpoint 0 of round 0: it is the same bytes for every trainer, initial weights and fresh
    moments. The claim then comes on round 1.)"""
    (name,) = scenario.misbehave
    fragment = record.fragment_of[record.address(name)]
    rr = record.rounds[first.view.round]
    assert rr.committed_mask >> fragment & 1 and first.view.fragment == fragment
    segments = -(-plan.inner_steps // plan.checkpoint_interval)
    drawn = spot_check_draw(
        record.task_id,
        first.view.round,
        fragment,
        bytes.fromhex(rr.state_root[2:]),
        record.finalized_in[first.view.round],
        ppm=1_000_000,
        segments=segments,
    )
    assert first.view.segment == drawn, (first.view.segment, drawn)


def cheat_round_of(scenario: Scenario, first: Outcome) -> int:
    """The round the culprit is convicted for: the first drawn segment it withheld (on demand)."""
    return first.view.round if scenario.checkpoints == "on-demand" else cheat_round(scenario)


def check_challenger_paid(record: FraudRecord, plan: DemoPlan) -> None:
    """Every decided challenge credited its challenger exactly its bond back, plus (upheld) half
    of what that very transaction slashed."""
    assert record.challenger_share_bps == CHALLENGER_SHARE_BPS
    for o in record.outcomes:
        c = o.view
        assert c.bond_wei == plan.challenge_bond_wei
        assert o.resolved_at is not None, f"challenge {c.challenge_id} was never decided"
        to_challenger = sorted((reason, amount) for a, amount, reason in o.credited if a == c.challenger.lower())
        if c.status == ChallengeStatus.EXPIRED:
            assert to_challenger == [("bond-refund", c.bond_wei)]
            continue
        assert c.slashed_wei == sum(o.slashed.values())
        bounty = c.slashed_wei * CHALLENGER_SHARE_BPS // BPS
        assert o.resolved_bounty == bounty
        expected = [("bond-refund", c.bond_wei)] + ([("challenge-bounty", bounty)] if bounty else [])
        assert to_challenger == sorted(expected), (c.challenge_id, to_challenger, expected)


def check_culprits_slashed_honest_spared(record: FraudRecord, scenario: Scenario, plan: DemoPlan) -> None:
    culprits = {record.address(n) for n in scenario.misbehave}
    total_slashed = sum(o.view.slashed_wei for o in record.outcomes if o.view.status == ChallengeStatus.UPHELD)
    if scenario.expect in TRAINER_FAULTS:
        (trainer,) = culprits
        culprit = record.trainers[trainer]
        assert record.stake_slashed == {trainer: plan.trainer_stake_wei}, record.stake_slashed
        assert record.witness_slashed == {}
        assert culprit.evicted and culprit.slashed_wei == plan.trainer_stake_wei
        line = next(t for t in record.receipt.trainers if t.trainer.lower() == trainer)
        assert (line.evicted, line.stake_refund_wei, line.slashed_wei) == (True, 0, plan.trainer_stake_wei)
        assert total_slashed == plan.trainer_stake_wei
    else:
        assert record.witness_slashed == dict.fromkeys(culprits, plan.witness_bond_wei), record.witness_slashed
        assert record.stake_slashed == {}
        for w in culprits:
            cw = record.witnesses[w]
            assert (cw.bonded, cw.bond_wei, cw.slashed_wei) == (True, 0, plan.witness_bond_wei)
        assert total_slashed == len(culprits) * plan.witness_bond_wei
    for a, tv in record.trainers.items():
        if a not in culprits:
            assert (tv.evicted, tv.slashed_wei) == (False, 0), record.name(a)
    for a, wv in record.witnesses.items():
        if a not in culprits:
            assert (wv.bonded, wv.slashed_wei) == (True, 0), record.name(a)


def check_consequences(record: FraudRecord, scenario: Scenario, first: Outcome) -> None:
    r = cheat_round_of(scenario, first)
    rr = record.rounds[r]
    if scenario.expect in ROLLBACK_FAULTS:
        # The round is void and the task's state went back to where the round started.
        assert record.invalidations == first.invalidated == [(r, len(record.rounds) - 1, rr.prev_state_root)]
        assert rr.status == RoundStatus.INVALIDATED
        assert rr.prev_state_root == record.rounds[r - 1].state_root  # round r-1 was finalized honestly
        assert first.state_root_after == rr.prev_state_root
        assert record.receipt.final_state_root == rr.prev_state_root  # no round after the cheat round
        assert record.receipt.rounds_invalidated == 1 and record.receipt.rounds_finalized == len(record.rounds) - 1
        assert record.revoked == []
        return
    assert record.invalidations == []
    assert all(x.status == RoundStatus.FINALIZED for x in record.rounds)
    if scenario.expect in TRAINER_FAULTS:
        (name,) = scenario.misbehave
        trainer = record.address(name)
        fragment = record.fragment_of[trainer]
        # The culprit's reward for the proven round is revoked, and nobody else's.
        assert (r, trainer, record.submission_weight[(r, fragment)]) in first.revoked
        assert all(t == trainer for _, t, _ in record.revoked), record.revoked
        assert rr.revoked_mask == 1 << fragment
        for x in record.rounds:
            assert x.revoked_mask & ~(1 << fragment) == 0
    else:
        assert record.revoked == []


def check_ledger(record: FraudRecord, plan: DemoPlan) -> None:
    """Every wei the task credited, per account and reason, is what the receipt and the court
    decided: rewards and stake refunds (trainers), fees and unslashed bonds (witnesses), challenge
    bonds back and bounties (challengers), the rest to the sponsor. Nothing was forfeited."""
    expected: dict[tuple[str, str], int] = defaultdict(int)
    for t in record.receipt.trainers:
        expected[(t.trainer.lower(), "reward")] += t.reward_wei
        expected[(t.trainer.lower(), "stake-refund")] += t.stake_refund_wei
    for w in record.receipt.witnesses:
        expected[(w.witness.lower(), "witness-fee")] += w.fees_wei
        if w.slashed_wei == 0:
            expected[(w.witness.lower(), "bond-refund")] += plan.witness_bond_wei
    for o in record.outcomes:
        expected[(o.view.challenger.lower(), "bond-refund")] += o.view.bond_wei
        if o.view.status == ChallengeStatus.UPHELD:
            expected[(o.view.challenger.lower(), "challenge-bounty")] += (
                o.view.slashed_wei * CHALLENGER_SHARE_BPS // BPS
            )
    expected[(record.sponsor, "sponsor-refund")] += record.receipt.sponsor_refund_wei
    named = {(record.name(a), r): v for (a, r), v in record.credited_by_reason.items()}
    assert record.credited_by_reason == {k: v for k, v in expected.items() if v}, named


def check_other_precisions_spared(record: FraudRecord, scenario: Scenario, plan: DemoPlan) -> None:
    """A trainer that trained honestly in bf16 (CPU autocast) was re-executed by the fp32 witnesses'
    challengers (every training segment of every audited round), judged inside the tolerance every
    time, never challenged, and kept its stake and rewards."""
    if not scenario.dtypes:
        return
    assert plan.training_checks == "all"
    for name in scenario.dtypes:
        assert name not in scenario.misbehave
        trainer = record.address(name)
        assert all(o.view.accused.lower() != trainer for o in record.outcomes), name
        assert (record.trainers[trainer].evicted, record.trainers[trainer].slashed_wei) == (False, 0)
        line = next(t for t in record.receipt.trainers if t.trainer.lower() == trainer)
        assert line.stake_refund_wei == plan.trainer_stake_wei and line.reward_wei > 0, line
    segments = -(-plan.inner_steps // plan.checkpoint_interval)
    honest_witnesses = [n for n in record.tolerant_comparisons if n not in scenario.misbehave]
    for witness in honest_witnesses:
        every = record.tolerant_comparisons[witness]
        # the fp32 trainers' segments are replayed bit-exactly first; only a replay that misses the
        # hash (the culprit's, one on a shard set that was not the trainer's, or other CPU kernels)
        # is compared against the envelope: every other tolerant comparison is the bf16 trainer's
        assert all("not_bit_exact=True" in x for x in every if "trainer_class=cpu-fp32" in x), every
        lines = [x for x in every if "trainer_class=cpu-fp32" not in x]
        assert len(lines) >= segments * len(scenario.dtypes), (witness, lines)
        assert all("trainer_class=cpu-bf16" in x and "referee_class=cpu-fp32" in x for x in lines), lines
        # Outside the envelope only on a candidate shard set that was not the trainer's (its shards
        # were reassigned while the round was open, after the culprit's eviction), and then the
        # next comparison, on another candidate set of the same segment, is inside it.
        for i, x in enumerate(lines):
            if "within=True" in x:
                continue
            assert "shard_sets=1 " not in x and i + 1 < len(lines), (witness, lines)
            assert "within=True" in lines[i + 1] and _segment_of(lines[i + 1]) == _segment_of(x), (witness, lines)


def _segment_of(line: str) -> str:
    """The ``segment=N`` field of a referee log line."""
    return next(f for f in line.split() if f.startswith("segment="))


def check_everyone_withdrew(record: FraudRecord) -> None:
    assert record.receipt.status == TaskStatus.SEALED
    assert record.agent_exit_codes == dict.fromkeys(record.agent_exit_codes, 0), record.agent_exit_codes
    assert record.credits_left == dict.fromkeys(record.credits_left, 0), record.credits_left
    # Single task on this chain: every wei credited to an account was withdrawn by it.
    assert record.withdrawn == record.credited, (record.withdrawn, record.credited)
    assert record.escrow == 0
    assert record.market_balance == 0


def report_timing(record: FraudRecord, scenario_name: str, first: Outcome, wall_s: float) -> None:
    c = first.view
    proof = first.opened_at - first.round_closed_at
    decided = first.resolved_at - first.round_closed_at if first.resolved_at is not None else None
    print(
        f"\n[{scenario_name}] {c.kind.name.lower()} challenge #{c.challenge_id} on round {c.round} by "
        f"{record.name(c.challenger)}: proof {proof} s after the round closed, decided after {decided} s; "
        f"run took {wall_s:.0f} s"
    )


def run_fraud_demo(demo: FraudDemo) -> tuple[FraudRecord, float]:
    """Run ``demo``; its record of the chain and the run's wall seconds."""
    started = time.monotonic()
    demo.run()
    wall = time.monotonic() - started
    assert demo.record is not None
    return demo.record, wall


# ---------------------------------------------------------------------- the tests


@pytest.mark.parametrize("scenario_name", list(SCENARIOS))
def test_fraud_scenario_caught_and_punished(scenario_name: str, state_env: Path, tmp_path: Path) -> None:
    scenario = SCENARIOS[scenario_name]
    plan = fraud_test_plan(scenario)
    record, wall = run_fraud_demo(FraudDemo(tmp_path, scenario_name, plan))
    first = check_upheld_by_honest_witness(record, scenario, plan)
    report_timing(record, scenario_name, first, wall)
    check_challenger_paid(record, plan)
    check_culprits_slashed_honest_spared(record, scenario, plan)
    check_consequences(record, scenario, first)
    check_ledger(record, plan)
    check_other_precisions_spared(record, scenario, plan)
    check_everyone_withdrew(record)
    check_free_rider_saw_nothing(tmp_path, scenario)


def check_free_rider_saw_nothing(workdir: Path, scenario: Scenario) -> None:
    """Commit, then reveal (issue 27 item 2): a ``copy-payload`` trainer polls for another
    trainer's payload of the open round until shortly before the deadline and never obtains one
    (every payload is sealed until the commit phase closes), so each of its commitments is its
    noise-only fallback (which the training check then convicts)."""
    for name, mode in scenario.misbehave.items():
        if mode != "copy-payload":
            continue
        lines = [
            line
            for line in (workdir / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
            if "copy-payload" in line and "obtained" in line
        ]
        assert lines, f"{name} never tried to copy"
        assert all("obtained=False" in line for line in lines), lines
