"""A local network of agents for one task on the local devnet: ``syncline network up|status|wait|down``.

``up`` reads the task from the chain and its spec from the blob store, and starts one trainer per
free development account (the sponsor's and the witnesses' excluded: 1-3 for the examples) and one
witness per development account the spec names as a witness (4-6 for ``examples/task.yaml``), each
a detached ``syncline trainer|witness run --dev-account N`` process with its own config, state_dir
and metrics port, all under ``<state dir>/network/``::

    network.json            the agents: name, role, dev account, address, pid, metrics port, paths
    <name>/<role>.yaml      the agent's config (the base config with task_id, state_dir, metrics_port)
    <name>/state/           its state_dir
    <name>/exit-code        its exit status, once it has exited
    logs/<name>.log         its log

Keys never leave anvil's config file: the command lines carry only the account's index.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from syncline.blobstore import HttpBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import DevnetHome, free_port, is_running
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.protocol.spec import MAX_SPEC_BYTES, TrainingTaskSpec
from syncline.run.context import fetch_by_digest

log = get_logger("syncline.network")

NETWORK_FILE = "network.json"
EXIT_FILE = "exit-code"


@dataclass(frozen=True)
class LocalAgent:
    """One agent process of the local network."""

    name: str
    role: str
    dev_account: int
    address: str
    pid: int
    metrics_port: int
    config: str
    state_dir: str
    log: str

    @property
    def alive(self) -> bool:
        return is_running(self.pid)

    def exit_code(self) -> int | None:
        """The agent's exit status once it has exited (None while it runs, or if it was killed
        before its wrapper could record it)."""
        try:
            return int((Path(self.config).parent / EXIT_FILE).read_text())
        except (OSError, ValueError):
            return None

    def last_line(self) -> str:
        try:
            lines = Path(self.log).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""


class LocalNetwork:
    """The trainers and witnesses ``syncline network`` runs in ``directory`` against ``devnet``."""

    def __init__(self, directory: Path, devnet: DevnetHome):
        self.directory = directory
        self.devnet = devnet

    @property
    def file(self) -> Path:
        return self.directory / NETWORK_FILE

    def agents(self) -> list[LocalAgent]:
        try:
            raw = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return []
        return [LocalAgent(**a) for a in raw["agents"]]

    # ------------------------------------------------------------------ up

    def up(
        self,
        task_id: int,
        *,
        trainer_config: Path,
        witness_config: Path,
        trainers: int | None = None,
    ) -> list[LocalAgent]:
        """Start the task's trainers and witnesses; refuses while a network from before still runs."""
        running = [a.name for a in self.agents() if a.alive]
        if running:
            raise SynclineError(f"a local network is running ({', '.join(running)}): `syncline network down` first")
        market, spec, sponsor = self._task(task_id)
        dev_keys = self._dev_keys()
        addresses = [from_private_key(k).address.lower() for k in dev_keys]
        witness_set = {w.lower() for w in spec.witnesses}
        witness_accounts = [i for i, a in enumerate(addresses) if a in witness_set]
        if len(witness_accounts) < spec.threshold:
            raise SynclineError(
                f"task {task_id} needs {spec.threshold} witnesses but only {len(witness_accounts)} of its "
                f"{len(spec.witnesses)} are development accounts of this devnet: run the others yourself"
            )
        count = spec.max_trainers if trainers is None else trainers
        if not 1 <= count <= spec.max_trainers:
            raise SynclineError(f"--trainers {count}: task {task_id} takes 1..{spec.max_trainers} trainers")
        enrolled = {a.lower() for a in market.trainers(task_id)}
        free = [i for i, a in enumerate(addresses) if a not in witness_set and a != sponsor.lower()]
        # Trainers already enrolled (a network restarted) first, then the next free accounts.
        trainer_accounts = sorted(free, key=lambda i: (addresses[i] not in enrolled, i))[:count]
        if len(trainer_accounts) < count:
            raise SynclineError(f"only {len(trainer_accounts)} development accounts are free for trainers")

        # Agents keep their state_dir across a restart of the same task, never into another task
        # (a new posting, or the same id on a fresh devnet: another spec hash).
        if self._previous_spec_hash(task_id) != spec.spec_hash:
            for old in self.directory.glob("*-*/state"):
                shutil.rmtree(old, ignore_errors=True)
        trainer_base = _read_config(trainer_config)
        witness_base = _read_config(witness_config)
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        agents: list[LocalAgent] = []
        try:
            for role, accounts, base in (
                ("trainer", trainer_accounts, trainer_base),
                ("witness", witness_accounts, witness_base),
            ):
                for n, account in enumerate(accounts, start=1):
                    agents.append(self._spawn(f"{role}-{n}", role, account, addresses[account], task_id, base))
        except BaseException:
            for agent in agents:
                _stop(agent.pid)
            raise
        record = {"task_id": task_id, "spec_hash": spec.spec_hash, "agents": [asdict(a) for a in agents]}
        self.file.write_text(json.dumps(record, indent=2) + "\n")
        return agents

    def _previous_spec_hash(self, task_id: int) -> str | None:
        try:
            raw = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return None
        return str(raw.get("spec_hash")) if raw.get("task_id") == task_id else None

    def _task(self, task_id: int) -> tuple[MarketClient, TrainingTaskSpec, str]:
        """The market, the task's full spec (verified against its on-chain hash) and its sponsor."""
        deployment = Deployment.read(self.devnet.deployment_path)
        rpc_url, blob_url = self.devnet.rpc_url(), self.devnet.blob_url()
        if rpc_url is None or blob_url is None:
            raise SynclineError("no local devnet runs: `syncline devnet up` first")
        market = MarketClient.from_deployment(deployment)
        if not market.w3.is_connected():
            raise SynclineError(f"cannot reach the devnet at {rpc_url}: `syncline devnet up` restarts it")
        if not 1 <= task_id <= market.task_count():
            raise SynclineError(f"task {task_id} is not posted yet: `syncline train post-task` first")
        onchain = market.spec_tuple(task_id)
        spec_hash = "0x" + bytes(onchain[0]).hex()
        raw = fetch_by_digest(HttpBlobStore(blob_url), spec_hash, (str(onchain[1]),), max_bytes=MAX_SPEC_BYTES)
        return market, TrainingTaskSpec.from_artifact(raw), market.task(task_id).sponsor

    def _dev_keys(self) -> list[str]:
        try:
            keys: list[str] = json.loads((self.devnet.directory / "anvil-config.json").read_text())["private_keys"]
        except (OSError, ValueError, KeyError) as exc:
            raise SynclineError(f"cannot read the devnet's development accounts: {exc}") from None
        return keys

    def _spawn(
        self, name: str, role: str, account: int, address: str, task_id: int, base: Mapping[str, Any]
    ) -> LocalAgent:
        home = self.directory / name
        home.mkdir(parents=True, exist_ok=True)
        (home / EXIT_FILE).unlink(missing_ok=True)
        port = free_port()
        config = {**base, "task_id": task_id, "state_dir": str(home / "state"), "metrics_port": port}
        for key in ("key_env", "keystore"):  # the key is the dev account's
            config.pop(key, None)
        config_path = home / f"{role}.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        log_path = self.directory / "logs" / f"{name}.log"
        command = [sys.executable, "-m", "syncline.cli", role, "run", "--config", str(config_path)]
        command += ["--dev-account", str(account)]
        env = {**os.environ, "SYNCLINE_LOG_FORMAT": "console", "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as fh:
            # sh records the agent's exit status: `network wait` is not its parent.
            proc = subprocess.Popen(
                ["/bin/sh", "-c", '"$@"; echo $? > "$0"', str(home / EXIT_FILE), *command],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: `down` stops the agent with it
            )
        agent = LocalAgent(
            name=name,
            role=role,
            dev_account=account,
            address=address,
            pid=proc.pid,
            metrics_port=port,
            config=str(config_path),
            state_dir=str(home / "state"),
            log=str(log_path),
        )
        log.info("network.started", name=name, dev_account=account, pid=proc.pid, metrics_port=port, log=str(log_path))
        return agent

    # ------------------------------------------------------------------ wait / down

    def wait(
        self,
        *,
        timeout_s: float | None = None,
        progress: Callable[[], str | None] | None = None,
        interval_s: float = 1.0,
    ) -> list[LocalAgent]:
        """Block until every agent has exited (they do once the run is sealed and they claimed),
        logging ``progress()`` whenever it changes; a SynclineError names an agent that failed."""
        agents = self.agents()
        if not agents:
            raise SynclineError("no local network: `syncline network up --task-id N` first")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        said: str | None = None
        while any(a.alive for a in agents):
            if deadline is not None and time.monotonic() > deadline:
                left = ", ".join(a.name for a in agents if a.alive)
                raise SynclineError(f"the network did not finish within {timeout_s:.0f} s (still running: {left})")
            if progress is not None:
                with contextlib.suppress(Exception):  # the node may restart meanwhile
                    now = progress()
                    if now is not None and now != said:
                        said = now
                        log.info("network.progress", run=now)
            time.sleep(interval_s)
        for agent in agents:
            code = agent.exit_code()
            if code != 0:
                raise SynclineError(f"{agent.name} exited with status {code} ({agent.log}): {agent.last_line()}")
        return agents

    def down(self) -> list[str]:
        """Stop every agent still running (its process group); returns their names."""
        stopped = []
        for agent in self.agents():
            if agent.alive:
                stopped.append(agent.name)
                _stop(agent.pid)
        return stopped


def _read_config(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SynclineError(f"cannot read base config {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise SynclineError(f"base config {path} must be a mapping")
    return raw


def _stop(pid: int, timeout_s: float = 15.0) -> None:
    """SIGTERM the process group ``pid`` leads, SIGKILL it if it outlives ``timeout_s``."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait_s
        while is_running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not is_running(pid):
            return
