"""The ``syncline`` command line in process against the session's anvil: wrong contract addresses
refused at start-up (one line), an under-filled task shown as cancellable and cancelled from the
CLI (and by its trainer agent), an account's balance and credit, the receipt's losses per round."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from web3 import Web3

from conftest import SPEC_URI, commit, finalize, start_task, travel_past
from syncline import cli
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import SynclineError
from syncline.protocol.enums import TaskStatus
from syncline.protocol.spec import TrainingTaskSpec
from syncline.run.agent_config import config_from_mapping
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


# ---------------------------------------------------------------------- under-filled tasks (finding 11)


def _trainer_config(tmp_path: Path, deployment: Deployment, task_id: int) -> Any:
    return config_from_mapping(
        {
            "node_rpc": deployment.rpc_url,
            "task_id": task_id,
            "deployment": str(_deployment_file(tmp_path, deployment)),
            "blob_store": "http://127.0.0.1:1",  # nothing to fetch: the spec artifact is not needed
            "state_dir": str(tmp_path / "trainer"),
        }
    )


def _underfilled(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainer: Signer,
    spec_factory: Callable[..., TrainingTaskSpec],
    *,
    past_deadline: bool = True,
) -> tuple[int, TrainingTaskSpec]:
    spec = spec_factory(min_trainers=3, max_trainers=3)
    task_id, _ = market.post_task(sponsor, spec, SPEC_URI)
    market.enroll(trainer, task_id)
    if past_deadline:
        travel_past(w3, spec.enrollment_deadline)
    return task_id, spec


def _cancel(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, devnet: Devnet, path: str, task_id: int
) -> tuple[int, str, str]:
    """``train cancel-underfilled`` sent by the outsider (account 7): anyone may."""
    monkeypatch.setenv("OUTSIDER_KEY", devnet.private_keys()[7])
    argv = ["train", "cancel-underfilled", "--deployment", path, "--task-id", str(task_id), "--key-env", "OUTSIDER_KEY"]
    return _cli(capsys, *argv)


def test_an_underfilled_task_is_shown_cancellable_and_cancelled_from_the_cli(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    outsider: Signer,
    devnet: Devnet,
    spec_factory: Callable[..., TrainingTaskSpec],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    task_id, spec = _underfilled(market, w3, sponsor, trainers[0], spec_factory)
    path = str(_deployment_file(tmp_path, deployment))
    code, out, err = _cli(capsys, "train", "get-run", "--deployment", path, "--task-id", str(task_id))
    assert code == 0, err
    progress = json.loads(out)["progress"]
    assert progress.startswith("underfilled: cancellable"), progress
    assert "cancel-underfilled" in progress
    code, out, err = _cli(capsys, "train", "list-runs", "--deployment", path)
    assert json.loads(out)[-1]["progress"].startswith("underfilled: cancellable")

    code, out, err = _cancel(capsys, monkeypatch, devnet, path, task_id)
    assert code == 0, err
    done = json.loads(out)
    assert done["status"] == "cancelled"
    assert market.task(task_id).status == TaskStatus.CANCELLED
    assert market.credit_of(trainers[0].address) == spec.trainer_stake_wei
    assert market.credit_of(sponsor.address) == spec.escrow_wei

    code, out, err = _cli(capsys, "account", "--deployment", path, "--address", trainers[0].address)
    assert code == 0, err
    account = json.loads(out)
    assert account["address"] == trainers[0].address
    assert account["withdrawable_wei"] == spec.trainer_stake_wei
    assert account["balance_wei"] == w3.eth.get_balance(trainers[0].address)
    assert {"task_id": task_id, "reason": "stake-refund", "wei": spec.trainer_stake_wei} in account["credited"]


def test_cancel_underfilled_before_the_deadline_is_one_decoded_line(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    devnet: Devnet,
    spec_factory: Callable[..., TrainingTaskSpec],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    task_id, _ = _underfilled(market, w3, sponsor, trainers[0], spec_factory, past_deadline=False)
    path = str(_deployment_file(tmp_path, deployment))
    code, out, _ = _cli(capsys, "train", "get-run", "--deployment", path, "--task-id", str(task_id))
    assert json.loads(out)["progress"].startswith("enrolling: 1 of 3")
    code, out, err = _cancel(capsys, monkeypatch, devnet, path, task_id)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "SynclineEnrollmentStillOpen" in err


def test_the_trainer_agent_of_an_underfilled_task_cancels_it_and_withdraws_its_stake(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    from structlog.testing import capture_logs

    task_id, spec = _underfilled(market, w3, sponsor, trainers[0], spec_factory)
    cfg = _trainer_config(tmp_path, deployment, task_id)
    before = w3.eth.get_balance(trainers[0].address)
    agent = TrainerAgent(cfg=cfg, signer=trainers[0], market=market, blobs=None)  # type: ignore[arg-type]
    with capture_logs() as logs:
        assert agent.step() is True  # done: the agent exits
    assert market.task(task_id).status == TaskStatus.CANCELLED
    assert market.credit_of(trainers[0].address) == 0
    gained = w3.eth.get_balance(trainers[0].address) - before
    assert spec.trainer_stake_wei - 10**16 < gained <= spec.trainer_stake_wei  # the stake, less gas
    lines = [e for e in logs if e["event"].startswith("trainer.")]
    assert [e["event"] for e in lines] == ["trainer.underfilled_cancelled"], lines
    assert lines[0]["withdrawn_wei"] == spec.trainer_stake_wei


def _closed_with(
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    enrolled: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
) -> int:
    """A task of 2 to 3 trainers with ``enrolled`` enrolled, its enrollment deadline passed."""
    spec = spec_factory(min_trainers=2, max_trainers=3)
    task_id, _ = market.post_task(sponsor, spec, SPEC_URI)
    for t in enrolled:
        market.enroll(t, task_id)
    travel_past(w3, spec.enrollment_deadline)
    return task_id


def test_a_task_past_its_deadline_with_min_trainers_is_started_from_the_cli(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    devnet: Devnet,
    spec_factory: Callable[..., TrainingTaskSpec],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing started a run that closed enrollment between min and max trainers: it stayed enrolling."""
    task_id = _closed_with(market, w3, sponsor, trainers[:2], spec_factory)
    path = str(_deployment_file(tmp_path, deployment))
    code, out, err = _cli(capsys, "train", "get-run", "--deployment", path, "--task-id", str(task_id))
    progress = json.loads(out)["progress"]
    assert progress.startswith("enrollment closed: startable") and "start-run" in progress, progress
    monkeypatch.setenv("OUTSIDER_KEY", devnet.private_keys()[7])
    argv = ["train", "start-run", "--deployment", path, "--task-id", str(task_id), "--key-env", "OUTSIDER_KEY"]
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["status"] == "running"
    t = market.task(task_id)
    assert t.status == TaskStatus.RUNNING and t.active == 2


def test_the_trainer_agent_starts_a_run_whose_enrollment_closed_with_enough_trainers(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
) -> None:
    from structlog.testing import capture_logs

    task_id = _closed_with(market, w3, sponsor, trainers[:2], spec_factory)
    agent = TrainerAgent(
        cfg=_trainer_config(tmp_path, deployment, task_id), signer=trainers[1], market=market, blobs=None
    )  # type: ignore[arg-type]
    with capture_logs() as logs:
        assert agent.step() is False  # the run goes on: the next tick trains round 0
    assert market.task(task_id).status == TaskStatus.RUNNING
    assert [e["event"] for e in logs if e["event"].startswith("trainer.")] == ["trainer.run_started"]


# ---------------------------------------------------------------------- the receipt's losses


def test_get_receipt_lists_the_validation_metric_per_round(
    tmp_path: Path,
    deployment: Deployment,
    market: MarketClient,
    w3: Web3,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:

    task_id, _ = start_task(market, sponsor, spec_factory(), witnesses, trainers)
    for rnd, losses in enumerate(([6_900_000, 6_950_000], [5_100_000, 5_000_000])):
        for i, t in enumerate(trainers):
            commit(market, t, task_id, rnd, i)
        finalize(market, w3, witnesses[:2], task_id, rnd, 0b111, metrics=losses)
    path = str(_deployment_file(tmp_path, deployment))
    code, out, err = _cli(capsys, "train", "get-receipt", "--deployment", path, "--task-id", str(task_id))
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
