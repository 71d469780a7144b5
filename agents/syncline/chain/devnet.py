"""A local anvil devnet: the real binary on a free loopback port, plus time-travel helpers.

The binary is started directly (not through the npm node shim, which leaves anvil running when
it is killed). Development account keys are read from anvil's ``--config-out`` file, so no key
is written in the source tree.

:class:`DevnetHome` is what ``syncline devnet up|status|down`` manage: anvil (with the contracts
deployed) and a blob service, detached, their pids and URLs in one directory. ``status`` probes
each service (JSON-RPC answers, ``GET /healthz`` answers); ``up`` starts what is missing and
restarts what died, on the same port (agents keep their URLs) and over the same state (anvil's
periodic state dump, the blob store's directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from web3 import Web3

from syncline.chain.deployment import Deployment, deploy_market
from syncline.chain.keys import from_private_key
from syncline.chain.rpc import http_web3
from syncline.chain.toolchain import foundry_binary
from syncline.errors import ChainError, SynclineError, ToolchainError
from syncline.observability import get_logger
from syncline.paths import state_dir

log = get_logger("syncline.devnet")

DEVNET_CHAIN_ID = 31337
STATE_DUMP_INTERVAL_S = 2
PROBE_TIMEOUT_S = 2.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Devnet:
    """A running anvil process."""

    rpc_url: str
    pid: int
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def private_keys(self) -> list[str]:
        """The development accounts' keys, from anvil's ``--config-out`` file."""
        data = json.loads(self.config_path.read_text())
        return list(data["private_keys"])

    def web3(self) -> Web3:
        return http_web3(self.rpc_url)

    def stop(self) -> None:
        """Terminate anvil and wait for it to exit."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
            return
        stop_process(self.pid)

    def __enter__(self) -> Devnet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_anvil(
    workdir: Path,
    *,
    port: int | None = None,
    accounts: int = 12,
    balance_eth: int = 10_000,
    block_time: float | None = None,
    detach: bool = False,
    state_path: Path | None = None,
    hardfork: str | None = None,
    timeout_s: float = 30.0,
) -> Devnet:
    """Start anvil on 127.0.0.1 and wait until it answers JSON-RPC.

    Parameters
    ----------
    workdir
        Directory for the config-out (keys) file and the log.
    detach
        Start in a new session so the process outlives the caller (``syncline devnet up``).
    block_time
        Seconds between blocks; ``None`` mines a block per transaction.
    state_path
        Load the chain from this file if it exists, and dump it there every
        ``STATE_DUMP_INTERVAL_S`` seconds and on exit (``anvil --state``): a restarted devnet
        resumes where the last dump left it.
    hardfork
        The EVM version anvil runs (``shanghai``, ``cancun``...); ``None``: anvil's latest.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config_path = workdir / "anvil-config.json"
    log_path = workdir / "anvil.log"
    config_path.unlink(missing_ok=True)
    cmd = [
        str(foundry_binary("anvil")),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chain-id",
        str(DEVNET_CHAIN_ID),
        "--accounts",
        str(accounts),
        "--balance",
        str(balance_eth),
        "--config-out",
        str(config_path),
        "--code-size-limit",
        "24576",
    ]
    if block_time is not None:
        cmd += ["--block-time", str(block_time)]
    if hardfork is not None:
        cmd += ["--hardfork", hardfork]
    if state_path is not None:
        cmd += ["--state", str(state_path), "--state-interval", str(STATE_DUMP_INTERVAL_S)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
        )
    rpc_url = f"http://127.0.0.1:{port}"
    devnet = Devnet(rpc_url=rpc_url, pid=proc.pid, config_path=config_path, log_path=log_path, process=proc)
    deadline = time.monotonic() + timeout_s
    w3 = devnet.web3()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ToolchainError(f"anvil exited with code {proc.returncode}; see {log_path}")
        try:
            if w3.is_connected() and config_path.exists() and config_path.stat().st_size > 0:
                json.loads(config_path.read_text())
                return devnet
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    devnet.stop()
    raise ToolchainError(f"anvil did not answer on {rpc_url} within {timeout_s:.0f}s; see {log_path}")


def stop_process(pid: int) -> None:
    """SIGTERM a process by pid, wait up to 5 s, then SIGKILL it and wait for it to be gone (no
    error if it is already gone)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not is_running(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # until its sockets are closed (a restart reuses its port)
        if not is_running(pid):
            return
        time.sleep(0.05)


# ---------------------------------------------------------------------- time travel and snapshots


def dev_rpc(w3: Web3, method: str, params: list[Any]) -> Any:
    """Call a development-node method (``evm_*``, ``anvil_*``) and return its result.

    A node that does not offer the method (a testnet, Hardhat without it, a proxy that refuses
    non-standard methods) answers with an error or without a result: that raises ``ChainError``
    naming the method, instead of carrying on as if the clock had moved."""
    try:
        resp = w3.provider.make_request(method, params)  # type: ignore[arg-type]
    except Exception as exc:  # transport errors, HTTP 4xx/5xx from a gateway
        raise ChainError(f"{method} failed: {_one_line(str(exc) or type(exc).__name__)}") from None
    if not isinstance(resp, dict):
        raise ChainError(f"{method} failed: the node answered {_one_line(repr(resp))}")
    error = resp.get("error")
    if error is not None:
        why = f"{error.get('message', '')} (code {error.get('code')})" if isinstance(error, dict) else str(error)
        raise ChainError(
            f"{method} refused by the node: {_one_line(why)}; it needs a development node (anvil), "
            "or the real-clock mode on other chains"
        )
    if "result" not in resp:
        raise ChainError(f"{method} failed: the node answered without a result")
    return resp["result"]


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


SLOT_S = 12
"""Seconds per block of the chain a devnet stands in for (Ethereum's slot): :func:`increase_time`
and :func:`set_next_timestamp` mine a block per slot they skip (at most :data:`MAX_MINED_BLOCKS`),
so windows with a minimum in blocks (``MIN_CHALLENGE_BLOCKS``) pass with their time, as they
would on a real chain."""
MAX_MINED_BLOCKS = 100
"""At most this many blocks per jump: more than any window's minimum in blocks (the filing window's
``MIN_CHALLENGE_BLOCKS`` and a response window's half of it), so a longer jump passes them all."""


def _blocks_for(seconds: int) -> int:
    return min(max(1, -(-seconds // SLOT_S)), MAX_MINED_BLOCKS)


def increase_time(w3: Web3, seconds: int) -> None:
    """Move the chain clock forward by ``seconds``, mining a block per ``SLOT_S`` seconds or part
    of it (no block more than ``SLOT_S`` after the one before, up to :data:`MAX_MINED_BLOCKS`): a
    development node's ``evm_increaseTime`` + ``anvil_mine`` (``evm_mine`` for one block);
    ``ChainError`` naming the method where the node refuses one."""
    seconds = int(seconds)
    blocks = _blocks_for(seconds)
    if blocks == 1:
        dev_rpc(w3, "evm_increaseTime", [seconds])
        dev_rpc(w3, "evm_mine", [])
        return
    interval = seconds // blocks
    dev_rpc(w3, "evm_increaseTime", [seconds - blocks * interval])
    dev_rpc(w3, "anvil_mine", [hex(blocks), hex(interval)])


class DevnetClock:
    """A local devnet's fast clock: the chain's time runs ``speed`` times faster than the wall's.

    Production windows (minutes: ``MIN_CHALLENGE_WINDOW_S`` and up) are what a demo or a test must
    run with; this is how they pass in seconds of wall time. Every ``tick_s`` of wall time a
    background thread moves the chain clock forward by ``(speed - 1) * tick_s`` seconds and mines
    a block (``evm_increaseTime`` + ``evm_mine``), so deadlines arrive ``speed`` times sooner while
    every agent keeps reading time from the chain (``pending_time``), as it does on a real chain.
    An agent then has ``window / speed`` seconds of wall time for a window: choose ``speed`` so
    that stays well above what it needs (the demo: a 15-minute challenge window in 30 s).

    Only for a development node the demo or a test started itself: any error from the node stops
    the clock (logged once), never the run.
    """

    def __init__(self, w3: Web3, speed: float, *, tick_s: float = 0.25):
        if not (speed >= 1.0 and tick_s > 0):
            raise ValueError(f"clock speed must be >= 1 and tick > 0, got speed={speed!r} tick={tick_s!r}")
        self.w3 = w3
        self.speed = float(speed)
        self.tick_s = float(tick_s)
        self.advanced_s = 0
        self._owed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> DevnetClock:
        if self.speed > 1.0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="devnet-clock", daemon=True)
            self._thread.start()
            log.info("devnet.clock", speed=self.speed, tick_s=self.tick_s)
        return self

    @property
    def running(self) -> bool:
        """Whether the clock's thread is moving the chain's time (False once the node went away)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> DevnetClock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            self._owed += (now - last) * (self.speed - 1.0)
            last = now
            step = int(self._owed)
            if step <= 0:
                continue
            try:
                increase_time(self.w3, step)
            except Exception as exc:  # the node went away (the run is ending): stop quietly
                log.info("devnet.clock_stopped", reason=_one_line(str(exc) or type(exc).__name__))
                return
            self._owed -= step
            self.advanced_s += step


def set_next_timestamp(w3: Web3, timestamp: int) -> None:
    """Mine blocks up to one whose timestamp is exactly ``timestamp``: a block per ``SLOT_S``
    seconds or part of them since the latest block (evenly spaced, up to :data:`MAX_MINED_BLOCKS`),
    the last at ``timestamp`` (``evm_mine`` with a timestamp)."""
    timestamp = int(timestamp)
    latest = int(w3.eth.get_block("latest")["timestamp"])
    span = timestamp - latest
    blocks = _blocks_for(span) if span > 0 else 1
    step = span // blocks if blocks > 1 else 0
    for i in range(1, blocks):
        dev_rpc(w3, "evm_mine", [latest + i * step])
    dev_rpc(w3, "evm_mine", [timestamp])


def snapshot(w3: Web3) -> str:
    return str(dev_rpc(w3, "evm_snapshot", []))


def revert(w3: Web3, snapshot_id: str) -> None:
    if not dev_rpc(w3, "evm_revert", [snapshot_id]):
        raise ToolchainError(f"evm_revert({snapshot_id}) failed: the node answered false (unknown snapshot)")


def chain_time(w3: Web3) -> int:
    """Timestamp of the latest block."""
    return int(w3.eth.get_block("latest")["timestamp"])


def is_running(pid: int) -> bool:
    """Whether a process with this pid exists and has not exited (a zombie that nobody reaped yet,
    as a detached service killed under a parent that does not reap becomes, is not running)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): the signal probe is all there is
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


# ---------------------------------------------------------------------- the managed devnet (`syncline devnet`)


def probe_rpc(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` if a JSON-RPC node at ``url`` answers ``eth_chainId``, else why not (one line)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            answer = json.loads(resp.read(64 * 1024))
    except (OSError, ValueError) as exc:
        return f"no answer from {url}: {' '.join(str(exc).split())[:160]}"
    if not isinstance(answer, dict) or "result" not in answer:
        return f"{url} answered eth_chainId without a result"
    return None


def probe_blob_service(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` if the blob service at ``url`` answers ``GET /healthz`` with 200, else why not."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        return f"no answer from {url}/healthz: {' '.join(str(exc).split())[:160]}"
    return None if status == 200 else f"{url}/healthz answered HTTP {status}"


@dataclass(frozen=True)
class ServiceStatus:
    """One managed service as ``devnet status`` reports it."""

    name: str
    pid: int | None
    url: str | None
    alive: bool  # the process exists
    answers: bool  # its liveness probe answered
    problem: str | None = None  # why it is not healthy (one line)

    @property
    def healthy(self) -> bool:
        return self.alive and self.answers


@dataclass(frozen=True)
class DevnetStatus:
    """Every managed service; ``state`` is ``up`` (all healthy), ``down`` (none running) or
    ``degraded`` (anything in between: a service dead, or alive but not answering)."""

    services: tuple[ServiceStatus, ...]

    @property
    def state(self) -> str:
        if all(s.healthy for s in self.services):
            return "up"
        if not any(s.alive for s in self.services):
            return "down"
        return "degraded"

    def service(self, name: str) -> ServiceStatus:
        return next(s for s in self.services if s.name == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "running": self.service(ANVIL).alive,
            "services": {s.name: {k: v for k, v in asdict(s).items() if k != "name"} for s in self.services},
        }


ANVIL, BLOB_SERVICE, CLOCK = "anvil", "blob_service", "clock"
DEFAULT_DEVNET_CLOCK_SPEED = 30.0
"""``syncline devnet up``'s clock: chain time runs 30 times the wall's, so a task's production
windows (a 15-minute challenge window) pass in seconds (``--clock-speed 1``: the wall's pace)."""


class DevnetHome:
    """The devnet ``syncline devnet`` manages, as files in ``directory``: ``anvil.pid``,
    ``anvil.json`` (URL and pid), ``anvil-state.json`` (chain dump), ``anvil-config.json`` (dev
    keys), ``deployment.json``, ``blobstore.pid``, ``blobstore.json`` (URL and pid), ``blobs/``
    (the store) and, with a fast clock, ``clock.pid`` (``python -m syncline.chain.clock_service``)."""

    def __init__(self, directory: Path):
        self.directory = directory

    # ------------------------------------------------------------------ what is on disk

    @property
    def deployment_path(self) -> Path:
        return self.directory / "deployment.json"

    @property
    def state_path(self) -> Path:
        return self.directory / "anvil-state.json"

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.directory / name).read_text())
        except (OSError, ValueError):
            return None

    def rpc_url(self) -> str | None:
        """The node's URL (``anvil.json``, else ``deployment.json``); None without a devnet."""
        for path, key in ((self.directory / "anvil.json", "url"), (self.deployment_path, "rpc_url")):
            try:
                return str(json.loads(path.read_text())[key])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return None

    def blob_url(self) -> str | None:
        """The blob service's URL (``blobstore.json``); None without a devnet."""
        try:
            return str(json.loads((self.directory / "blobstore.json").read_text())["url"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def _port(url: str | None) -> int | None:
        return int(url.rsplit(":", 1)[1]) if url else None

    # ------------------------------------------------------------------ status

    def status(self) -> DevnetStatus:
        """Each service: is its process alive, and does it answer its probe."""
        return DevnetStatus(
            (
                self._service(ANVIL, self._pid("anvil.pid"), self.rpc_url(), probe_rpc),
                self._service(BLOB_SERVICE, self._pid("blobstore.pid"), self.blob_url(), probe_blob_service),
            )
        )

    def clock_alive(self) -> bool:
        """Whether the fast clock's process runs (``syncline devnet up --clock-speed``)."""
        pid = self._pid("clock.pid")
        return pid is not None and is_running(pid)

    @staticmethod
    def _service(name: str, pid: int | None, url: str | None, probe: Any) -> ServiceStatus:
        alive = pid is not None and is_running(pid)
        if not alive:
            why = "not started" if pid is None else f"process {pid} is not running"
            return ServiceStatus(name, pid, url, alive=False, answers=False, problem=why)
        problem = probe(url) if url else "its URL is unknown"
        return ServiceStatus(name, pid, url, alive=True, answers=problem is None, problem=problem)

    # ------------------------------------------------------------------ up / down

    def up(
        self, port: int | None = None, clock_speed: float = DEFAULT_DEVNET_CLOCK_SPEED
    ) -> tuple[Deployment, str, list[str]]:
        """Start every service that is not healthy; returns the deployment, the blob service URL
        and the names of what was (re)started (empty: everything was already up).

        A dead or unresponsive service is restarted on its previous port; anvil resumes from its
        last state dump, and the contracts are deployed again only if that state lacks them."""
        self.directory.mkdir(parents=True, exist_ok=True)
        status = self.status()
        started: list[str] = []
        anvil = status.service(ANVIL)
        if not anvil.healthy:
            if anvil.alive and anvil.pid is not None:
                stop_process(anvil.pid)  # alive but not answering: a hung node
            net = start_anvil(
                self.directory,
                port=port or self._port(anvil.url),
                detach=True,
                state_path=self.state_path,
            )
            (self.directory / "anvil.pid").write_text(str(net.pid))
            (self.directory / "anvil.json").write_text(json.dumps({"url": net.rpc_url, "pid": net.pid}) + "\n")
            rpc_url = net.rpc_url
            log.info("devnet.restarted" if anvil.pid else "devnet.started", service=ANVIL, pid=net.pid, url=net.rpc_url)
            started.append(ANVIL)
        else:
            assert anvil.url is not None  # healthy: it answered at its URL
            rpc_url = anvil.url
        deployment = self._ensure_deployment(rpc_url)
        blob = status.service(BLOB_SERVICE)
        blob_url = blob.url or ""
        if not blob.healthy:
            if blob.alive and blob.pid is not None:
                stop_process(blob.pid)
            blob_url, blob_pid = start_blob_service(self.directory, port=self._port(blob.url) or 0)
            log.info(
                "devnet.restarted" if blob.pid else "devnet.started", service=BLOB_SERVICE, pid=blob_pid, url=blob_url
            )
            started.append(BLOB_SERVICE)
        if ANVIL in started or not self.clock_alive():
            old = self._pid("clock.pid")
            if old is not None:
                stop_process(old)
            (self.directory / "clock.pid").unlink(missing_ok=True)
            if clock_speed > 1.0:
                pid = start_clock_service(self.directory, rpc_url, clock_speed)
                log.info("devnet.started", service=CLOCK, pid=pid, speed=clock_speed)
                started.append(CLOCK)
        return deployment, blob_url, started

    def _ensure_deployment(self, rpc_url: str) -> Deployment:
        """The deployment on file if its market has code on the chain at ``rpc_url``, else a new one."""
        net = Devnet(
            rpc_url=rpc_url,
            pid=self._pid("anvil.pid") or 0,
            config_path=self.directory / "anvil-config.json",
            log_path=self.directory / "anvil.log",
        )
        w3 = net.web3()
        try:
            deployment = Deployment.read(self.deployment_path)
            if deployment.rpc_url == rpc_url and w3.eth.get_code(Web3.to_checksum_address(deployment.market)):
                return deployment
        except SynclineError:
            pass  # no deployment yet
        # a fresh chain, or one whose last state dump predates the deployment
        deployment = deploy_market(w3, from_private_key(net.private_keys()[0]), rpc_url, self.directory)
        log.info("devnet.deployed", market=deployment.market, court=deployment.court)
        return deployment

    def down(self) -> list[str]:
        """Stop every service and forget the chain (its state dump) and the ports; returns what was
        running. The blob store's directory is kept."""
        stopped: list[str] = []
        for name, pid_file in ((CLOCK, "clock.pid"), (ANVIL, "anvil.pid"), (BLOB_SERVICE, "blobstore.pid")):
            pid = self._pid(pid_file)
            if pid is not None:
                if is_running(pid):
                    stopped.append(name)
                stop_process(pid)
            (self.directory / pid_file).unlink(missing_ok=True)
        for leftover in (self.state_path, self.directory / "anvil.json", self.directory / "blobstore.json"):
            leftover.unlink(missing_ok=True)
        return stopped


def local_devnet() -> DevnetHome:
    """The devnet ``syncline devnet up`` manages: ``<state dir>/devnet`` (``.syncline/devnet``)."""
    return DevnetHome(state_dir() / "devnet")


def start_clock_service(directory: Path, rpc_url: str, speed: float) -> int:
    """Start ``python -m syncline.chain.clock_service`` detached (the devnet's fast clock); returns
    its pid, also written to ``clock.pid``."""
    cmd = [sys.executable, "-m", "syncline.chain.clock_service", "--rpc-url", rpc_url, "--speed", str(speed)]
    with (directory / "clock.log").open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    (directory / "clock.pid").write_text(str(proc.pid))
    return proc.pid


def start_blob_service(directory: Path, *, port: int = 0, timeout_s: float = 30.0) -> tuple[str, int]:
    """Start ``python -m syncline.blobstore`` detached over ``directory/blobs`` on ``port`` (0: any
    free one); returns its URL and pid, also written to ``blobstore.json`` and ``blobstore.pid``."""
    out = directory / "blobstore.out"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "syncline.blobstore", "--root", str(directory / "blobs"), "--port", str(port)]
    with out.open("wb") as fh, (directory / "blobstore.log").open("ab") as err:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = out.read_text().strip()
        if text:
            url = str(json.loads(text.splitlines()[0])["url"])
            (directory / "blobstore.json").write_text(json.dumps({"url": url, "pid": proc.pid}) + "\n")
            (directory / "blobstore.pid").write_text(str(proc.pid))
            return url, proc.pid
        if proc.poll() is not None:
            raise ToolchainError(
                f"the blob service exited with code {proc.returncode}; see {directory / 'blobstore.log'}"
            )
        time.sleep(0.1)
    stop_process(proc.pid)
    raise ToolchainError(f"the blob service did not start within {timeout_s:.0f} s; see {directory / 'blobstore.log'}")
