"""``syncline demo --scenario dp`` end to end on anvil, made small (2 rounds of 10 DP-SGD steps):
three trainer processes run DP-SGD through Opacus with secret, committed noise seeds, three
witnesses (k=2) finalize every round, the run seals and pays, and the receipt carries every
trainer's ε per round, equal to Opacus's own accountant and within the target."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from opacus.accountants import RDPAccountant

from syncline.demo.dp import PLAN, TARGET_EPSILON, DpDemo, privacy_section
from syncline.demo.lifecycle import write_receipt

pytestmark = [pytest.mark.chain, pytest.mark.slow]

SMALL = dataclasses.replace(
    PLAN,
    rounds=2,
    inner_steps=10,
    checkpoint_interval=5,
    timeout_s=300.0,
    # every witness's challenger re-checks every segment of every submission: the derivation
    # segments pass, the private training segments cannot be replayed without an opening and
    # must be left alone (no claim, no retry, nobody slashed)
    checkpoints="eager",
    training_checks="all",
    # 2 rounds: a submission earns 3 ETH / 6 = 0.5 ETH, and postTask's deterrence rule at the
    # demo's 0.34 rate asks for a stake of at least 2 x 0.5 / 0.34 = 2.94 ETH
    trainer_stake_wei=3 * 10**18,
)


def test_a_dp_run_reports_epsilon_per_trainer_and_round_within_the_target(tmp_path: Path) -> None:
    demo = DpDemo(tmp_path, SMALL, ui_port=0)
    receipt = demo.run()
    path = write_receipt(receipt, tmp_path / "receipt.json")
    data = json.loads(path.read_text())

    assert data["status"] == "sealed" and data["rounds_finalized"] == SMALL.rounds
    trainers = data["trainers"]
    assert len(trainers) == 3
    assert all(t["slashed_wei"] == 0 and t["reward_wei"] > 0 and t["accepted"] == SMALL.rounds for t in trainers)

    # ε per trainer address, per round: cumulative, rising, the last within the target.
    ledger = data["epsilon_per_round"]
    assert set(ledger) == {t["trainer"].lower() for t in trainers}
    privacy = data["privacy"]
    sigma, q = privacy["noise_multiplier"], privacy["sample_rate"]
    assert privacy_section(SMALL)["sample_rate"] == q and privacy["target_epsilon"] == TARGET_EPSILON
    for eps in ledger.values():
        assert len(eps) == SMALL.rounds and 0 < eps[0] < eps[1] <= TARGET_EPSILON
    # ... and what Opacus's accountant says for that noise, sample rate and step count.
    acc = RDPAccountant()
    for _ in range(SMALL.rounds * SMALL.inner_steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    expected = acc.get_epsilon(delta=privacy["delta"])
    assert all(eps[-1] == pytest.approx(expected, rel=1e-4) for eps in ledger.values())  # σ is rounded to 1e-6
    assert data["epsilon_final"] == {who: eps[-1] for who, eps in ledger.items()}

    # The sponsor API computes the same ledger from its index (run page table, receipt route).
    served = demo.api_views["privacy"]
    assert served["enabled"] and served["rounds"] == list(range(SMALL.rounds))
    assert {k.lower(): v for k, v in served["epsilon_per_round"].items()} == ledger
    assert served["noise_multiplier"] == pytest.approx(sigma, abs=1e-6)
    api_receipt = demo.api_views["receipt"]["receipt"]
    assert {k.lower(): v for k, v in api_receipt["epsilon_per_round"].items()} == ledger
    # an eager task with no claim opened no round to the committee: every round keeps its ε
    # against everyone, and the API recomputes the same from its index
    assert data["rounds_opened"] == {} == served["rounds_opened"] == api_receipt["rounds_opened"]
    assert api_receipt["epsilon_target"] == TARGET_EPSILON

    # The audits: every private training segment was left alone as unjudgeable, no claim was made.
    witness_logs = "".join((tmp_path / "logs" / f"witness-{i}.log").read_text() for i in (1, 2, 3))
    assert "challenger.training_check_private" in witness_logs
    assert witness_logs.count("witness.dispute_key_registered") == 3  # each in its state dir, encrypted
    assert "challenger.fault_found" not in witness_logs and "challenger.challenge_brought" not in witness_logs

    # Every trainer trained privately: its round's noise commitment is kept, its secret never logged.
    for i in (1, 2, 3):
        agent = tmp_path / "agents" / f"trainer-{i}"
        secret = (agent / "noise-secret").read_bytes()
        records = sorted((agent / "noise").glob("round-*.json"))
        assert len(records) == SMALL.rounds, records
        log = (tmp_path / "logs" / f"trainer-{i}.log").read_text()
        assert "trainer.dp_noise" in log and secret.hex() not in log
