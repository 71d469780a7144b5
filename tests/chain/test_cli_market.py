"""The ``syncline`` command line in process against the session's anvil: wrong contract addresses
refused at start-up (one line), an under-filled task shown as cancellable and cancelled from the
CLI (and by its trainer agent), an account's balance and credit, the receipt's losses per round."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from web3 import Web3

from conftest import SPEC_URI, bond_witnesses, commit, finalize, start_task, travel_past
from syncline import cli
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import SynclineError
from syncline.protocol.enums import TaskStatus
from syncline.protocol.spec import TrainingTaskSpec
from syncline.run.agent_config import AgentConfig, config_from_mapping
from syncline.trainer.agent import TrainerAgent

pytestmark = [pytest.mark.chain]


def _deployment_file(tmp_path: Path, deployment: Deployment, **changes: Any) -> Path:
    return dataclasses.replace(deployment, **changes).write(tmp_path / "deployment.json")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------------- wrong addresses (finding 12)


@pytest.mark.parametrize("which", ["no_code", "court", "other_contract"])
def test_a_wrong_market_address_is_refused_with_one_line(
    which: str,
    tmp_path: Path,
    deployment: Deployment,
    session_market: MarketClient,
    outsider: Signer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    court = session_market.contract.functions.COURT().call()
    rulings = Web3.to_checksum_address(
        session_market.w3.eth.call({"to": court, "data": Web3.keccak(text="RULINGS()")[:4].hex()})[-20:]
    )
    address = {"no_code": outsider.address, "court": deployment.court, "other_contract": rulings}[which]
    path = _deployment_file(tmp_path, deployment, market=address)
    code, out, err = _cli(capsys, "train", "list-runs", "--deployment", str(path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert address.lower() in err.lower()
    expected = {"no_code": "no contract", "court": "SynclineCourt", "other_contract": "not a Syncline market"}[which]
    assert expected in err, err


def test_an_agent_with_a_wrong_market_address_stops_at_start(
    tmp_path: Path, deployment: Deployment, devnet: Devnet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The witness given the court's address used to loop on ``SynclineCourtDirectCall()`` forever."""
    path = _deployment_file(tmp_path, deployment, market=deployment.court)
    config = tmp_path / "witness.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "node_rpc": devnet.rpc_url,
                "task_id": 1,
                "deployment": str(path),
                "blob_store": "http://127.0.0.1:1",
                "state_dir": str(tmp_path / "w"),
            }
        )
    )
    monkeypatch.setenv("SYNCLINE_PRIVATE_KEY", devnet.private_keys()[4])
    args = argparse.Namespace(config=config, task_id=None, dev_account=None, misbehave=None)
    with pytest.raises(SynclineError, match="SynclineCourt"):
        cli._agent_setup(args)


def test_the_real_deployment_passes_the_check(
    tmp_path: Path, deployment: Deployment, market: MarketClient, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _deployment_file(tmp_path, deployment)
    code, out, err = _cli(capsys, "train", "list-runs", "--deployment", str(path))
    assert code == 0, err
    assert isinstance(json.loads(out), list)


# ---------------------------------------------------------------------- the enrollment deadline (finding 11)


@dataclass
class World:
    """The session's chain and market (reverted after each test) and the CLI pointed at them."""

    tmp_path: Path
    deployment: Deployment
    market: MarketClient
    w3: Web3
    sponsor: Signer
    trainers: list[Signer]
    witnesses: list[Signer]
    devnet: Devnet
    spec_factory: Callable[..., TrainingTaskSpec]
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    @property
    def path(self) -> str:
        return str(_deployment_file(self.tmp_path, self.deployment))

    def cli(self, command: str, *argv: str) -> tuple[int, str, str]:
        """``syncline [train] COMMAND --deployment PATH ARGV...``."""
        words = command.split()
        return _cli(self.capsys, *words, "--deployment", self.path, *argv)

    def by_outsider(self, action: str, task_id: int) -> tuple[int, str, str]:
        """``train ACTION --task-id N`` signed by the outsider (account 7): anyone may."""
        self.monkeypatch.setenv("OUTSIDER_KEY", self.devnet.private_keys()[7])
        return self.cli(f"train {action}", "--task-id", str(task_id), "--key-env", "OUTSIDER_KEY")

    def progress(self, task_id: int) -> str:
        code, out, err = self.cli("train get-run", "--task-id", str(task_id))
        assert code == 0, err
        return str(json.loads(out)["progress"])

    def task(self, low: int, high: int, enrolled: int, *, past_deadline: bool = True) -> tuple[int, TrainingTaskSpec]:
        """A task of ``low`` to ``high`` trainers with the first ``enrolled`` trainers enrolled."""
        spec = self.spec_factory(min_trainers=low, max_trainers=high)
        task_id, _ = self.market.post_task(self.sponsor, spec, SPEC_URI)
        for t in self.trainers[:enrolled]:
            self.market.enroll(t, task_id)
        if past_deadline:
            travel_past(self.w3, spec.enrollment_deadline)
        return task_id, spec

    def agent_config(self, task_id: int, role: str) -> AgentConfig:
        return config_from_mapping(
            {
                "node_rpc": self.deployment.rpc_url,
                "task_id": task_id,
                "deployment": self.path,
                "blob_store": "http://127.0.0.1:1",  # nothing to fetch: the spec artifact is not needed
                "state_dir": str(self.tmp_path / role),
            }
        )

    def trainer_agent(self, task_id: int, signer: Signer) -> TrainerAgent:
        cfg = self.agent_config(task_id, "trainer")
        return TrainerAgent(cfg=cfg, signer=signer, market=self.market, blobs=None)  # type: ignore[arg-type]


@pytest.fixture
def world(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    devnet: Devnet,
    spec_factory: Callable[..., TrainingTaskSpec],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> World:
    return World(
        tmp_path, deployment, market, w3, sponsor, trainers, witnesses, devnet, spec_factory, monkeypatch, capsys
    )


def test_an_underfilled_task_is_shown_cancellable_and_cancelled_from_the_cli(world: World) -> None:
    market, trainer = world.market, world.trainers[0]
    task_id, spec = world.task(3, 3, enrolled=1)
    progress = world.progress(task_id)
    assert progress.startswith("underfilled: cancellable") and "cancel-underfilled" in progress, progress
    _, out, _ = world.cli("train list-runs")
    assert json.loads(out)[-1]["progress"].startswith("underfilled: cancellable")

    code, out, err = world.by_outsider("cancel-underfilled", task_id)
    assert code == 0, err
    assert json.loads(out)["status"] == "cancelled"
    assert market.task(task_id).status == TaskStatus.CANCELLED
    assert market.credit_of(trainer.address) == spec.trainer_stake_wei
    assert market.credit_of(world.sponsor.address) == spec.escrow_wei

    code, out, err = world.cli("account", "--address", trainer.address)
    assert code == 0, err
    account = json.loads(out)
    assert account["address"] == trainer.address
    assert account["withdrawable_wei"] == spec.trainer_stake_wei
    assert account["balance_wei"] == world.w3.eth.get_balance(trainer.address)
    assert {"task_id": task_id, "reason": "stake-refund", "wei": spec.trainer_stake_wei} in account["credited"]


def test_cancel_underfilled_before_the_deadline_is_one_decoded_line(world: World) -> None:
    task_id, _ = world.task(3, 3, enrolled=1, past_deadline=False)
    assert world.progress(task_id).startswith("enrolling: 1 of 3")
    code, _, err = world.by_outsider("cancel-underfilled", task_id)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "SynclineEnrollmentStillOpen" in err


def test_the_trainer_agent_of_an_underfilled_task_cancels_it_and_withdraws_its_stake(world: World) -> None:
    from structlog.testing import capture_logs

    market, w3, trainer = world.market, world.w3, world.trainers[0]
    task_id, spec = world.task(3, 3, enrolled=1)
    before = w3.eth.get_balance(trainer.address)
    agent = world.trainer_agent(task_id, trainer)
    with capture_logs() as logs:
        assert agent.step() is True  # done: the agent exits
    assert market.task(task_id).status == TaskStatus.CANCELLED
    assert market.credit_of(trainer.address) == 0
    gained = w3.eth.get_balance(trainer.address) - before
    assert spec.trainer_stake_wei - 10**16 < gained <= spec.trainer_stake_wei  # the stake, less gas
    lines = [e for e in logs if e["event"].startswith("trainer.")]
    assert [e["event"] for e in lines] == ["trainer.underfilled_cancelled"], lines
    assert lines[0]["withdrawn_wei"] == spec.trainer_stake_wei


def test_the_witness_agent_of_an_underfilled_task_cancels_it_and_withdraws_its_bond(world: World) -> None:
    """The witness's bond stayed locked: its agent waited in ``enrolling`` for ever."""
    from structlog.testing import capture_logs

    from syncline.witness.agent import WitnessAgent

    market, w3, witness = world.market, world.w3, world.witnesses[0]
    task_id, spec = world.task(3, 3, enrolled=1, past_deadline=False)
    bond_witnesses(market, task_id, [witness])
    travel_past(w3, spec.enrollment_deadline)
    before = w3.eth.get_balance(witness.address)
    agent = WitnessAgent(cfg=world.agent_config(task_id, "witness"), signer=witness, market=market, blobs=None)  # type: ignore[arg-type]
    with capture_logs() as logs:
        assert agent.step() is True  # done: the agent exits
    assert market.task(task_id).status == TaskStatus.CANCELLED
    assert market.credit_of(witness.address) == 0
    gained = w3.eth.get_balance(witness.address) - before
    assert spec.witness_bond_wei - 10**16 < gained <= spec.witness_bond_wei  # the bond, less gas
    lines = [e for e in logs if e["event"].startswith("witness.")]
    assert [e["event"] for e in lines] == ["witness.underfilled_cancelled"], lines
    assert lines[0]["withdrawn_wei"] == spec.witness_bond_wei


def test_a_task_past_its_deadline_with_min_trainers_is_started_from_the_cli(world: World) -> None:
    """Nothing started a run that closed enrollment between min and max trainers: it stayed enrolling."""
    task_id, _ = world.task(2, 3, enrolled=2)
    progress = world.progress(task_id)
    assert progress.startswith("enrollment closed: startable") and "start-run" in progress, progress
    code, out, err = world.by_outsider("start-run", task_id)
    assert code == 0, err
    assert json.loads(out)["status"] == "running"
    t = world.market.task(task_id)
    assert t.status == TaskStatus.RUNNING and t.active == 2


def test_the_trainer_agent_starts_a_run_whose_enrollment_closed_with_enough_trainers(world: World) -> None:
    from structlog.testing import capture_logs

    task_id, _ = world.task(2, 3, enrolled=2)
    agent = world.trainer_agent(task_id, world.trainers[1])
    with capture_logs() as logs:
        assert agent.step() is False  # the run goes on: the next tick trains round 0
    assert world.market.task(task_id).status == TaskStatus.RUNNING
    assert [e["event"] for e in logs if e["event"].startswith("trainer.")] == ["trainer.run_started"]


# ---------------------------------------------------------------------- the receipt's losses


def test_get_receipt_lists_the_validation_metric_per_round(world: World) -> None:
    market, trainers, witnesses = world.market, world.trainers, world.witnesses
    task_id, _ = start_task(market, world.sponsor, world.spec_factory(), witnesses, trainers)
    for rnd, losses in enumerate(([6_900_000, 6_950_000], [5_100_000, 5_000_000])):
        for i, t in enumerate(trainers):
            commit(market, t, task_id, rnd, i)
        finalize(market, world.w3, witnesses[:2], task_id, rnd, 0b111, metrics=losses)
    code, out, err = world.cli("train get-receipt", "--task-id", str(task_id))
    assert code == 0, err
    receipt = json.loads(out)
    assert receipt["validation_metric"] == "validation_loss"
    assert receipt["validation_loss_per_round"] == [pytest.approx(6.925), pytest.approx(5.05), None, None]
    assert receipt["validation_metric_per_round"] == receipt["validation_loss_per_round"]


# ---------------------------------------------------------------------- help texts


def test_every_option_of_every_command_has_help_text() -> None:
    """A new user reads ``--help``: no option may appear there bare (``--deployment``, ``--port``...)."""
    bare: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help and action.dest != "help":
                bare.append(" ".join([*path, *action.option_strings]))

    walk(cli.build_parser(), ["syncline"])
    assert bare == []


def test_the_api_refuses_a_wrong_market_address_at_start(
    tmp_path: Path, deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    """``syncline api`` used to serve (and index nothing) from the court's address, for ever."""
    import threading

    path = _deployment_file(tmp_path, deployment, market=deployment.court)
    argv = ["api", "--deployment", str(path), "--port", "0", "--blob-store", "http://127.0.0.1:1"]
    argv += ["--db", f"sqlite:///{tmp_path / 'index.db'}"]
    codes: list[int] = []
    serving = threading.Thread(target=lambda: codes.append(cli.main(argv)), daemon=True)
    serving.start()
    serving.join(timeout=30)
    assert not serving.is_alive(), "the API started serving a wrong market address"
    err = capsys.readouterr().err
    assert codes == [2] and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "SynclineCourt" in err
