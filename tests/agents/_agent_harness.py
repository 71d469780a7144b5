"""Helpers shared by the agent integration tests (not collected: no ``test_`` prefix).

* ``tiny_plan``: a ``DemoPlan`` small enough for CI (Llama with 26.7k parameters).
* ``capture_run``: everything the assertions need, read from the chain and the blob service
  while they are still up (the demo tears both down when it returns).
* ``replay_from_payloads``: a witness's computation (``TaskContext.compute_round``) redone in the
  test process from the committed payloads (cross-process determinism of aggregation + outer step).
* ``simulate_trainers``: an uninterrupted run of the trainers' computation in the test process
  (the reference the restart test compares against).
* ``ManualRun``: the demo's building blocks, driven step by step so a test can SIGKILL and
  restart individual agents.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from eth_utils import keccak

from syncline.blobstore import BlobService, BlobStore, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment, deploy_market
from syncline.chain.devnet import Devnet, DevnetClock, chain_time, start_anvil
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient, RoundView, TaskView, WitnessView
from syncline.court.referee import Claim, find_manifest
from syncline.demo.trainer_setup import TINY_MODEL
from syncline.demo.training_run import AgentProcess, DemoPlan, TrainingDemo
from syncline.protocol.checkpoints import CheckpointManifest, manifest_alias
from syncline.protocol.seeds import round_seed
from syncline.protocol.spec import MIN_CHALLENGE_WINDOW_S
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, RoundResult
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.context import TaskContext
from syncline.run.loop import pending_time
from syncline.sponsor.task_builder import publish_language_task
from syncline.sponsor.task_defaults import default_task
from syncline.trainer.inner_loop import InnerLoop, replay_environment
from syncline.trainer.segments import encode_payload

CLOCK_SPEED = 60.0
"""How much faster than the wall the agent tests' devnet clock runs (``DevnetClock``)."""
SHARD_COUNT = 6
VOCAB_SIZE = 512
SEQ_LEN = 32

T = TypeVar("T")


def tiny_plan(**overrides: Any) -> DemoPlan:
    """3 rounds of H=8 AdamW steps on a 1-layer Llama (hidden 32, vocab 512, seq 32).

    Round timing: agents are separate processes that need ~5-10 s to import torch/transformers,
    but round 0 only opens when the third trainer enrolls, i.e. after the trainers have loaded.
    A trainer then needs ~1-2 s per round (sync, 8 steps, commit). The windows are production
    ones (the contract's minimum challenge window, 600 s) on a devnet clock running 60 times
    faster than the wall's (``clock_speed``): a round's deadline is 10 s of wall time away (a
    wide margin on a loaded 2-core box), a claim's response window 5 s, the seal 10 s after the
    last round; the grace window (carry-forward) is far beyond a witness vote.
    """
    values: dict[str, Any] = {
        "rounds": 3,
        "inner_steps": 8,
        "checkpoint_interval": 4,
        "clock_speed": CLOCK_SPEED,
        "round_duration_s": 10,
        "grace_window_s": 40,
        "challenge_window_s": 2,
        "enrollment_window_s": 300,
        "trainers": 3,
        "witnesses": 3,
        "threshold": 2,
        "shard_count": SHARD_COUNT,
        "vocab_size": VOCAB_SIZE,
        "seq_len": SEQ_LEN,
        "batch_size": 8,
        "inner_lr": 3e-3,
        "model": dict(TINY_MODEL),
        "timeout_s": 240.0,
    }
    values.update(overrides)
    # The windows above and in ``overrides`` are in seconds of WALL time; the task gets them in
    # chain seconds on the fast clock, the challenge window at least the contract's minimum.
    speed = float(values["clock_speed"])
    for name in ("round_duration_s", "grace_window_s", "challenge_window_s", "enrollment_window_s"):
        values[name] = math.ceil(values[name] * speed)
    values["challenge_window_s"] = max(MIN_CHALLENGE_WINDOW_S, values["challenge_window_s"])
    return DemoPlan(**values)


# ---------------------------------------------------------------------- what a run left on chain


@dataclass
class Vote:
    round: int
    witness: str
    result: str
    state_root: str
    metric: int


@dataclass
class RunRecord:
    """A finished run as read from the chain (and its payloads from the blob service)."""

    task_id: int
    ctx: TaskContext  # shards, validation shard and initial state prefetched
    initial_state: TrainingState
    task: TaskView
    rounds: list[RoundView]
    submissions: dict[int, list[CommittedSubmission]]  # round -> committed payloads
    committers: dict[tuple[int, int], str]  # (round, fragment) -> trainer address
    fragment_of: dict[str, int]  # trainer address -> fragment
    fragment_shards: dict[int, list[int]]
    trainers: list[str]
    witnesses: list[str]
    witness_views: dict[str, WitnessView]
    credits: dict[str, int]
    escrow: int
    votes: list[Vote]
    withdrawn: dict[str, list[int]] = field(default_factory=dict)
    # Checkpoints on demand: per (round, fragment) the manifest that opens the committed root, the
    # committee's draw (None: not drawn), and per checkpoint digest whether the blob store has it.
    manifests: dict[tuple[int, int], CheckpointManifest] = field(default_factory=dict)
    draws: dict[tuple[int, int], int | None] = field(default_factory=dict)
    published: dict[str, bool] = field(default_factory=dict)
    # ... and the size of each published one (read while the blob service is up)
    published_bytes: dict[str, int] = field(default_factory=dict)


def capture_run(market: MarketClient, blobs: BlobStore, task_id: int, accounts: list[str]) -> RunRecord:
    ctx = TaskContext.load(market, blobs, task_id)
    for i in range(len(ctx.spec.dataset.shard_hashes)):
        ctx.shard(i)
    ctx.validation_shard()
    initial = ctx.fetch_state(ctx.spec.initial_state_root)
    task = market.task(task_id)
    rounds = [market.round(task_id, r) for r in range(ctx.spec.rounds)]
    submissions = {r: ctx.committed_submissions(r, rr.committed_mask) for r, rr in enumerate(rounds)}
    unfetched = [(r, s.fragment, s.fetch_error) for r, subs in submissions.items() for s in subs if s.payload is None]
    assert not unfetched, unfetched
    committers = {
        (int(e["args"]["round"]), int(e["args"]["fragment"])): str(e["args"]["trainer"])
        for e in market.get_logs("SubmissionCommitted", from_block=0, taskId=task_id)
    }
    trainers = market.trainers(task_id)
    views = {a: market.trainer(task_id, a) for a in trainers}
    witnesses = list(ctx.spec.witnesses)
    votes = [
        Vote(
            int(e["args"]["round"]),
            str(e["args"]["witness"]),
            "0x" + bytes(e["args"]["result"]).hex(),
            "0x" + bytes(e["args"]["stateRoot"]).hex(),
            int(e["args"]["metric"]),
        )
        for e in market.get_logs("VoteCast", from_block=0, taskId=task_id)
    ]
    manifests: dict[tuple[int, int], CheckpointManifest] = {}
    draws: dict[tuple[int, int], int | None] = {}
    for (r, fragment), trainer in committers.items():
        claim = Claim.of(market.submission(task_id, r, fragment))
        manifest = find_manifest(
            blobs,
            claim,
            trainer=trainer,
            inner_steps=ctx.spec.inner_steps,
            interval=ctx.spec.checkpoint_interval_steps,
            aliases=(manifest_alias(task_id, r, fragment),),
        )
        if manifest is not None:  # (a test of lost uploads may have none)
            manifests[(r, fragment)] = manifest
        draws[(r, fragment)] = ctx.drawn_segment(r, fragment, rounds[r])
    published = {m.digest(i): blobs.has(m.digest(i)) for m in manifests.values() for i in range(len(m.hashes))}
    published_bytes = {digest: len(blobs.get(digest)) for digest, there in published.items() if there}
    withdrawn: dict[str, list[int]] = {}
    for e in market.get_logs("Withdrawn", from_block=0):
        withdrawn.setdefault(str(e["args"]["account"]), []).append(int(e["args"]["amount"]))
    return RunRecord(
        task_id=task_id,
        ctx=ctx,
        initial_state=initial,
        task=task,
        rounds=rounds,
        submissions=submissions,
        committers=committers,
        fragment_of={a: v.fragment for a, v in views.items()},
        fragment_shards={v.fragment: v.shards for v in views.values()},
        trainers=trainers,
        witnesses=witnesses,
        witness_views={w: market.witness(task_id, w) for w in witnesses},
        credits={a: market.credit_of(a) for a in {*accounts, *trainers, *witnesses}},
        escrow=market.escrow_of(task_id),
        votes=votes,
        withdrawn=withdrawn,
        manifests=manifests,
        draws=draws,
        published=published,
        published_bytes=published_bytes,
    )


def replay_from_payloads(record: RunRecord) -> list[RoundResult]:
    """The witnesses' compute_round over each round's committed payloads, chained from the spec's
    initial state."""
    state = record.initial_state
    out = []
    for r in range(len(record.rounds)):
        result = record.ctx.compute_round(state, record.submissions[r])
        out.append(result)
        state = result.state
    return out


@dataclass
class Simulation:
    results: list[RoundResult]
    payloads: dict[tuple[int, int], bytes]  # (round, fragment) -> payload
    loops: dict[int, InnerLoop]  # fragment -> trainer replica (AdamW state after the last round)


def simulate_trainers(record: RunRecord, inner: InnerOptimizerConfig) -> Simulation:
    """The whole run, uninterrupted, in this process: one InnerLoop (model + AdamW) per fragment,
    the agents' batch seeds, quantization and compute_round. No chain, no blobs, no restarts.
    Agents run with ``threads: 1``; so does this, for bit-exact float results."""
    ctx = record.ctx
    inner = dataclasses.replace(inner, inner_steps=ctx.spec.inner_steps)  # H is the task's, as in the trainer
    with replay_environment(1):
        loops = {
            f: InnerLoop(ctx.adapter, ctx.build_model(), ctx.layout, inner) for f in sorted(record.fragment_shards)
        }
        state = record.initial_state
        results: list[RoundResult] = []
        payloads: dict[tuple[int, int], bytes] = {}
        for r in range(len(record.rounds)):
            subs = []
            for f, loop in loops.items():
                shards = [ctx.shard(i) for i in record.fragment_shards[f]]
                work = loop.run(state, shards, seed=round_seed(record.task_id, r, f))
                payload, chunk_root = encode_payload(work.pseudo_gradient, ctx.spec.gradient_bits)
                payloads[(r, f)] = payload
                subs.append(CommittedSubmission(f, keccak(payload), chunk_root, payload))
            result = ctx.compute_round(state, subs)
            results.append(result)
            state = result.state
    return Simulation(results, payloads, loops)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------- the demo, recorded


class RecordingDemo(TrainingDemo):
    """``TrainingDemo`` that reads the chain and the blob service before they are torn down."""

    record: RunRecord | None = None

    def _run(self, devnet: Devnet, blob_url: str, started: float, clock: DevnetClock) -> Any:
        receipt = super()._run(devnet, blob_url, started, clock)
        market = MarketClient.from_deployment(Deployment.read(self.workdir / "deployment.json"), devnet.web3())
        accounts = [from_private_key(k).address for k in devnet.private_keys()]
        self.record = capture_run(market, HttpBlobStore(blob_url), receipt.task_id, accounts)
        return receipt


def run_recorded(workdir: Path, agents_state_dir: Path, plan: DemoPlan) -> tuple[Any, RunRecord, Path]:
    """Run ``plan`` to the end (:class:`RecordingDemo`): ``(receipt, record, workdir)``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYNCLINE_STATE_DIR", str(agents_state_dir))
        mp.setenv("HF_HUB_OFFLINE", "1")
        demo = RecordingDemo(workdir, plan)
        receipt = demo.run()
    assert demo.record is not None
    return receipt, demo.record, workdir


# ---------------------------------------------------------------------- a run driven step by step


class ManualRun:
    """Devnet + market + blob service + task + agent processes, like ``TrainingDemo.run`` but
    controlled from the test: agents can be SIGKILLed and restarted with the same config."""

    def __init__(self, workdir: Path, plan: DemoPlan):
        self.workdir = workdir
        self.plan = plan
        self.demo = TrainingDemo(workdir, plan)  # its _spawn writes the exact agent configs
        self.keys: dict[str, str] = {}
        self.incarnations: dict[str, list[AgentProcess]] = {}
        self._stack = contextlib.ExitStack()

    # ------------------------------------------------------------------ setup / teardown

    def __enter__(self) -> ManualRun:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        self.devnet = self._stack.enter_context(start_anvil(self.workdir / "anvil", accounts=12))
        self.blob_url = self._start_blob_service()
        keys = self.devnet.private_keys()
        self.w3 = self.devnet.web3()
        self.sponsor: Signer = from_private_key(keys[0])
        self.deployment = deploy_market(self.w3, self.sponsor, self.devnet.rpc_url, self.workdir)
        self.market = MarketClient.from_deployment(self.deployment, self.w3)
        self.blobs = HttpBlobStore(self.blob_url)
        trainer_keys = keys[1 : 1 + self.plan.trainers]
        witness_keys = keys[4 : 4 + self.plan.witnesses]
        published = publish_language_task(
            self.blobs,
            template=default_task(self.plan, [from_private_key(k).address for k in witness_keys], chain_time(self.w3)),
            shard_count=self.plan.shard_count,
            vocab_size=self.plan.vocab_size,
            seq_len=self.plan.seq_len,
            model=self.plan.model,
        )
        self.task_id, _ = self.market.post_task(self.sponsor, published.spec, published.spec_uri)
        self._stack.enter_context(DevnetClock(self.w3, self.plan.clock_speed))
        self.accounts = [from_private_key(k).address for k in keys]
        for role, role_keys in (("trainer", trainer_keys), ("witness", witness_keys)):
            for i, key in enumerate(role_keys):
                name = f"{role}-{i + 1}"
                self.keys[name] = key
                self.demo._spawn(role, i, key, self.task_id, self.deployment, self.blob_url)
                self.incarnations[name] = [self.demo.agents[-1]]

    def _start_blob_service(self) -> str:
        """The blob service every agent talks to (in this process); returns its URL. A test that
        must kill it overrides this with a separate process."""
        service = BlobService(LocalBlobStore(self.workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        self._stack.callback(service.stop)
        return service.url

    def close(self) -> None:
        self.demo._stop_agents()
        self._stack.close()

    # ------------------------------------------------------------------ agents

    def address(self, name: str) -> str:
        return from_private_key(self.keys[name]).address

    def config_path(self, name: str) -> Path:
        role = name.split("-")[0]
        return self.workdir / "agents" / name / f"{role}.yaml"

    def current(self, name: str) -> AgentProcess:
        return self.incarnations[name][-1]

    def kill(self, name: str) -> None:
        """SIGKILL the agent's process (no cleanup, no atexit) and forget it."""
        agent = self.current(name)
        os.kill(agent.process.pid, signal.SIGKILL)
        agent.process.wait(timeout=10)
        assert agent.process.returncode == -signal.SIGKILL
        self.demo.agents.remove(agent)

    def restart(self, name: str) -> AgentProcess:
        """The same command, config file, state_dir and key as the first start."""
        role = name.split("-")[0]
        n = len(self.incarnations[name])
        log_path = self.workdir / "logs" / f"{name}.run{n + 1}.log"
        env = {
            **os.environ,
            "SYNCLINE_PRIVATE_KEY": self.keys[name],
            "SYNCLINE_LOG_FORMAT": "console",
            "PYTHONUNBUFFERED": "1",
        }
        cmd = [sys.executable, "-m", "syncline.cli", role, "run", "--config", str(self.config_path(name))]
        with log_path.open("wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        agent = AgentProcess(name, proc, log_path)
        self.demo.agents.append(agent)
        self.incarnations[name].append(agent)
        return agent

    def check_agents(self) -> None:
        """Fail fast (with the log tail) if a live agent crashed."""
        self.demo._check_agents()

    def now(self) -> int:
        return pending_time(self.w3)

    def deadline(self) -> int:
        return self.market.round_deadline(self.task_id)

    def wait_agents_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for agent in self.demo.agents:
            try:
                agent.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{agent.name} did not exit; log tail:\n{agent.tail()}") from None
            assert agent.process.returncode == 0, f"{agent.name} exited {agent.process.returncode}:\n{agent.tail()}"
