"""Fraud demos: one cheater per scenario on a real devnet run, caught and punished.

``syncline demo --scenario NAME`` (or ``make demo-fraud`` for all of them) runs a short version of
the main job with one misbehaving role. The honest witnesses run the challenger, which finds the
fault, proves it on chain, and is paid. The report shows the detection, the proof transaction, the
slash, the corrected state and the final balances, plus the time from the cheat's finalization to
the proof landing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from web3 import Web3

from syncline.chain.market import MarketClient
from syncline.demo.scenarios import SCENARIOS, Scenario
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.protocol.enums import ChallengeKind, ChallengeStatus
from syncline.sponsor.task_defaults import ETH

log = get_logger("syncline.demo")


def fraud_plan(scenario: Scenario) -> DemoPlan:
    """A short run on a smaller Llama (about 0.2 M parameters): 3 rounds of 12 inner steps with a
    checkpoint every 4, and a 20-minute challenge window (40 s of wall time on the demo's clock,
    30 times the wall's). The witnesses' challengers re-execute every
    training segment in the training-fraud scenarios and skip re-execution in the others (the
    2-core demo machine cannot afford both at once)."""
    training = scenario.expect == ChallengeKind.TRAINING_FRAUD
    return replace(
        DemoPlan(),
        rounds=3,
        inner_steps=12,
        checkpoint_interval=4,
        round_duration_s=1200 if training else 900,
        grace_window_s=600,
        challenge_window_s=1200,
        timeout_s=480.0,
        training_checks="all" if training else "off",
        misbehave=dict(scenario.misbehave),
        checkpoints=scenario.checkpoints,
        spot_check_rate=scenario.spot_check_rate,
        trainer_dtypes=dict(scenario.dtypes),
        # With 2 of 3 the equivocator's on-chain vote may come after quorum (a silent no-op, no
        # VoteCast to compare against) or never: all three must vote for its vote to be on record.
        threshold=3 if scenario.expect == ChallengeKind.WITNESS_EQUIVOCATION else 2,
        model={**DemoPlan().model, "hidden_size": 64, "intermediate_size": 192, "num_attention_heads": 4},
    )


@dataclass
class FraudReport:
    scenario: str
    story: str
    challenges: list[dict[str, Any]] = field(default_factory=list)
    invalidations: list[dict[str, Any]] = field(default_factory=list)
    slashes: list[dict[str, Any]] = field(default_factory=list)
    balances: dict[str, Any] = field(default_factory=dict)
    final_state_root: str = ""

    def to_json(self) -> dict[str, Any]:
        return self.__dict__


def collect_report(scenario_name: str, market: MarketClient, task_id: int, names: dict[str, str]) -> FraudReport:
    """Everything the court did in the task, read back from the chain."""
    scenario = SCENARIOS[scenario_name]
    w3: Web3 = market.w3
    report = FraudReport(scenario_name, scenario.story)
    for ev in market.get_logs("ChallengeOpened", taskId=task_id):
        a = ev["args"]
        cid = int(a["challengeId"])
        c = market.challenge(cid)
        opened_block = w3.eth.get_block(ev["blockNumber"])
        opened_at = int(opened_block["timestamp"])
        closed_at = market.round(task_id, int(a["round"])).closed_at
        resolved = market.get_logs("ChallengeResolved", challengeId=cid)
        resolved_at = int(w3.eth.get_block(resolved[0]["blockNumber"])["timestamp"]) if resolved else None
        report.challenges.append(
            {
                "id": cid,
                "kind": ChallengeKind(int(a["kind"])).name.lower(),
                "round": int(a["round"]),
                "challenger": names.get(str(a["challenger"]).lower(), str(a["challenger"])),
                "accused": names.get(str(a["accused"]).lower(), str(a["accused"]))
                if int(str(a["accused"]), 16)
                else "",
                "status": c.status.name.lower(),
                "slashed_eth": c.slashed_wei / ETH,
                "bounty_eth": (resolved[0]["args"]["bounty"] / ETH) if resolved else 0.0,
                "proof_tx": "0x" + bytes(ev["transactionHash"]).hex(),
                "time_to_proof_s": opened_at - closed_at if closed_at else None,
                "time_to_resolution_s": (resolved_at - closed_at) if (resolved_at and closed_at) else None,
            }
        )
    for ev in market.get_logs("RoundsInvalidated", taskId=task_id):
        a = ev["args"]
        report.invalidations.append(
            {
                "from_round": int(a["fromRound"]),
                "through_round": int(a["throughRound"]),
                "restored_root": "0x" + bytes(a["restoredRoot"]).hex(),
            }
        )
    for name in ("StakeSlashed", "WitnessSlashed"):
        for ev in market.get_logs(name, taskId=task_id):
            a = ev["args"]
            who = str(a.get("offender") or a.get("witness"))
            report.slashes.append(
                {"event": name, "who": names.get(who.lower(), who), "amount_eth": int(a["amount"]) / ETH}
            )
    receipt = market.receipt(task_id)
    report.final_state_root = receipt.final_state_root
    report.balances = {
        "trainers": {
            names.get(t.trainer.lower(), t.trainer): {
                "reward_eth": t.reward_wei / ETH,
                "stake_refund_eth": t.stake_refund_wei / ETH,
                "slashed_eth": t.slashed_wei / ETH,
                "evicted": t.evicted,
            }
            for t in receipt.trainers
        },
        "witnesses": {
            names.get(w.witness.lower(), w.witness): {
                "fees_eth": w.fees_wei / ETH,
                "bond_eth": w.bond_wei / ETH,
                "slashed_eth": w.slashed_wei / ETH,
            }
            for w in receipt.witnesses
        },
        "challenge_bounties_eth": {
            names.get(str(ev["args"]["account"]).lower(), str(ev["args"]["account"])): ev["args"]["amount"] / ETH
            for ev in market.get_logs("Credited", taskId=task_id)
            if bytes(ev["args"]["reason"]).rstrip(b"\0") == b"challenge-bounty"
        },
        "rounds_finalized": receipt.rounds_finalized,
        "rounds_carried": receipt.rounds_carried_forward,
        "rounds_invalidated": receipt.rounds_invalidated,
    }
    return report


def check_report(report: FraudReport, scenario: Scenario) -> None:
    """The demo fails unless the expected fault was proven and upheld."""
    upheld = [
        c
        for c in report.challenges
        if c["kind"] == scenario.expect.name.lower() and c["status"] == ChallengeStatus.UPHELD.name.lower()
    ]
    if not upheld:
        raise SynclineError(
            f"scenario {report.scenario}: no upheld {scenario.expect.name.lower()} challenge "
            f"(challenges: {[(c['kind'], c['status']) for c in report.challenges]})"
        )


def print_report(report: FraudReport) -> None:
    print(f"\n== fraud demo: {report.scenario} ==")
    print(f"cheat: {report.story}")
    for c in report.challenges:
        print(
            f"challenge #{c['id']} {c['kind']} round {c['round']} by {c['challenger']} against {c['accused'] or '-'}: "
            f"{c['status']}; slashed {c['slashed_eth']:.3f} ETH, bounty {c['bounty_eth']:.3f} ETH; "
            f"proof tx {c['proof_tx'][:18]}… landed {c['time_to_proof_s']} s after the round closed"
        )
    for inv in report.invalidations:
        print(
            f"rounds {inv['from_round']}..{inv['through_round']} invalidated; state rolled back to "
            f"{inv['restored_root'][:18]}…"
        )
    for s in report.slashes:
        print(f"slash: {s['who']} lost {s['amount_eth']:.3f} ETH ({s['event']})")
    print("final balances:")
    for name, b in report.balances["trainers"].items():
        print(
            f"  {name}: reward {b['reward_eth']:.4f} ETH, stake back {b['stake_refund_eth']:.3f} ETH, "
            f"slashed {b['slashed_eth']:.3f} ETH{' (evicted)' if b['evicted'] else ''}"
        )
    for name, b in report.balances["witnesses"].items():
        print(
            f"  {name}: fees {b['fees_eth']:.4f} ETH, bond {b['bond_eth']:.3f} ETH, slashed {b['slashed_eth']:.3f} ETH"
        )
    for name, amount in report.balances["challenge_bounties_eth"].items():
        print(f"  challenger {name}: bounty {amount:.3f} ETH (plus its bond back)")
    print(f"final state root {report.final_state_root}")


def run_scenario(name: str, workdir: Path) -> FraudReport:
    if name not in SCENARIOS:
        raise SynclineError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    scenario = SCENARIOS[name]
    demo = TrainingDemo(workdir, fraud_plan(scenario))
    captured: dict[str, Any] = {}

    def on_sealed(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
        captured["report"] = collect_report(name, market, task_id, names)

    demo.after_seal = on_sealed
    demo.run()
    report: FraudReport = captured["report"]
    (workdir / "report.json").write_text(json.dumps(report.to_json(), indent=2, default=str))
    print_report(report)
    check_report(report, scenario)
    return report
