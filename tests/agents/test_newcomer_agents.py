"""A newcomer's agents on a local devnet (issue 13), as real processes: a config that leaves the
node, blob store and deployment out finds them in ``.syncline/devnet``; ``--dev-account N`` signs
with a development key that is never logged; a trainer started before its task waits for it
(no failures, no degraded health) and enrolls once it is posted, then says the run waits for more
trainers; a second agent on the same state_dir or metrics port stops with one error line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from syncline.blobstore import HttpBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import chain_time, local_devnet
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.run.agent_config import config_from_mapping
from syncline.sponsor.task_builder import publish_language_task
from syncline.sponsor.task_defaults import default_task

from ._agent_harness import tiny_plan

pytestmark = [pytest.mark.chain, pytest.mark.slow]

SYNCLINE = [sys.executable, "-m", "syncline.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(predicate: object, timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s:.0f} s; log:\n{log.read_text()[-3000:]}")


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return lines[-1]


def test_a_trainer_on_the_local_devnet_waits_for_its_task_then_enrolls(
    local_devnet_home: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    _root, env = local_devnet_home
    home = local_devnet()
    plan = tiny_plan()
    metrics_port = _free_port()
    config = {
        "task_id": 1,
        "state_dir": str(tmp_path / "trainer-1"),
        "metrics_port": metrics_port,
        "poll_interval_s": 0.2,
        "threads": 1,
        "inner": {"batch_size": plan.batch_size, "lr": plan.inner_lr},
    }
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump(config))
    # Filled in from .syncline/devnet/*.json, as `syncline api` does.
    cfg = config_from_mapping(config)
    assert (cfg.node_rpc, cfg.blob_store, cfg.deployment) == (home.rpc_url(), home.blob_url(), home.deployment_path)

    log = tmp_path / "trainer-1.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [*SYNCLINE, "trainer", "run", "--config", str(path), "--dev-account", "1"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        _wait_for(lambda: "agent.waiting_for_task" in log.read_text(), 60, "no waiting_for_task line", log)

        # A second agent on the same state_dir, then one on the same metrics port: one line each.
        second = subprocess.run(
            [*SYNCLINE, "trainer", "run", "--config", str(path), "--dev-account", "2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert f"state_dir {tmp_path / 'trainer-1'} is in use by another agent (pid {proc.pid})" in _one_error_line(
            second
        )
        other = tmp_path / "trainer-2.yaml"
        other.write_text(yaml.safe_dump({**config, "state_dir": str(tmp_path / "trainer-2")}))
        third = subprocess.run(
            [*SYNCLINE, "trainer", "run", "--config", str(other), "--dev-account", "2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert f"metrics_port {metrics_port} is already in use" in _one_error_line(third)

        # The sponsor posts the task now; the waiting trainer enrolls with dev account 1.
        keys = home.directory / "anvil-config.json"
        dev_keys = json.loads(keys.read_text())["private_keys"]
        deployment = Deployment.read(home.deployment_path)
        market = MarketClient.from_deployment(deployment)
        witnesses = [from_private_key(k) for k in dev_keys[4:7]]
        published = publish_language_task(
            HttpBlobStore(str(home.blob_url())),
            template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
            shard_count=plan.shard_count,
            vocab_size=plan.vocab_size,
            seq_len=plan.seq_len,
            model=plan.model,
        )
        time.sleep(5)  # the trainer keeps waiting meanwhile: still no failure
        task_id, _ = market.post_task(from_private_key(dev_keys[0]), published.spec, published.spec_uri)
        assert task_id == 1
        trainer = from_private_key(dev_keys[1]).address
        posted = time.monotonic()
        _wait_for(lambda: market.trainer(task_id, trainer).enrolled, 30, "the trainer did not enroll", log)
        assert time.monotonic() - posted < 15, "the trainer noticed its task late"
        _wait_for(lambda: "trainer.waiting_for_trainers" in log.read_text(), 30, "no hint about trainers", log)
        assert proc.poll() is None, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    text = log.read_text()
    for absent in ("agent.step_failed", "agent.degraded", "Traceback", *(k[2:] for k in dev_keys)):
        assert absent not in text, f"{absent[:20]}... in the trainer's log:\n{text[-3000:]}"
    hint = next(line for line in text.splitlines() if "trainer.waiting_for_trainers" in line)
    assert "enrolled=1" in hint and "max_trainers=3" in hint and "syncline network up" in hint


def test_dev_account_refuses_a_node_that_is_not_the_local_devnet(
    local_devnet_home: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    _root, env = local_devnet_home
    path = tmp_path / "witness.yaml"
    path.write_text(yaml.safe_dump({"task_id": 1, "state_dir": str(tmp_path / "w"), "node_rpc": "http://127.0.0.1:1"}))
    proc = subprocess.run(
        [*SYNCLINE, "witness", "run", "--config", str(path), "--dev-account", "4"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    line = _one_error_line(proc)
    assert line.startswith(
        "error: --dev-account signs with the local devnet's development keys; node_rpc http://127.0.0.1:1"
    )


def test_network_up_before_the_task_is_posted_is_one_error_line(
    local_devnet_home: tuple[Path, dict[str, str]],
) -> None:
    root, env = local_devnet_home
    proc = subprocess.run(
        [*SYNCLINE, "network", "up", "--task-id", "9"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert _one_error_line(proc) == "error: task 9 is not posted yet: `syncline train post-task` first"
    assert not (root / "network" / "network.json").exists()


def test_network_agents_keep_their_state_for_the_same_task_only(
    local_devnet_home: tuple[Path, dict[str, str]],
) -> None:
    """``network up`` again for the same task resumes the agents' state_dirs; for another task it
    starts them afresh (a trainer must not resume another task's optimizer state)."""
    root, env = local_devnet_home
    home = local_devnet()
    dev_keys = json.loads((home.directory / "anvil-config.json").read_text())["private_keys"]
    market = MarketClient.from_deployment(Deployment.read(home.deployment_path))
    plan = tiny_plan()
    witnesses = [from_private_key(k) for k in dev_keys[4:7]]

    def post() -> int:
        published = publish_language_task(
            HttpBlobStore(str(home.blob_url())),
            template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
            shard_count=plan.shard_count,
            vocab_size=plan.vocab_size,
            seq_len=plan.seq_len,
            model=plan.model,
        )
        return market.post_task(from_private_key(dev_keys[0]), published.spec, published.spec_uri)[0]

    def network(*args: str) -> subprocess.CompletedProcess[str]:
        command = [*SYNCLINE, "network", *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    marker = root / "network" / "trainer-1" / "state" / "from-before"
    first = post()
    try:
        agents = json.loads(network("up", "--task-id", str(first), "--trainers", "1").stdout)
        assert [(a["name"], a["dev_account"]) for a in agents] == [
            ("trainer-1", 1),
            ("witness-1", 4),
            ("witness-2", 5),
            ("witness-3", 6),
        ]
        assert len({a["metrics"] for a in agents}) == 4
        network("down")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("task 1")
        network("up", "--task-id", str(first), "--trainers", "1")
        network("down")
        assert marker.exists(), "a restart of the same task lost the agent's state"
        second = post()
        network("up", "--task-id", str(second), "--trainers", "1")
        assert not marker.exists(), "the agent would resume another task's state"
    finally:
        network("down")
