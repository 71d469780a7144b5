"""The main job: a real DiLoCo training run on a local devnet.

A sponsor publishes a Shakespeare language-modelling task (tokenizer, shards, initial Llama state)
and posts it; three trainer agents and three witness agents (k=2) run as separate processes,
train and finalize every round on chain; the orchestrator prints each round's validation loss,
then the run seals, everyone is paid, and the final model is exported as a Hugging Face
directory that loads offline and generates text.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from syncline.blobstore import BlobService, BlobStore, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment, deploy_market
from syncline.chain.devnet import Devnet, DevnetClock, chain_time, start_anvil
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.errors import SynclineError, TrainedNothing
from syncline.modality import adapter_for
from syncline.observability import get_logger
from syncline.protocol.enums import Modality, RoundStatus, TaskStatus
from syncline.protocol.receipt import TrainingReceipt
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import PublishedTask, export_model, publish_initial_state, publish_language_task
from syncline.sponsor.task_defaults import ETH, TaskDefaults, default_task

log = get_logger("syncline.demo")


@dataclass(frozen=True)
class DemoPlan(TaskDefaults):
    """The default task (``syncline.sponsor.task_defaults``) and how the demo's agents run it;
    the defaults finish in a few minutes on 2 CPU cores."""

    batch_size: int = 8
    inner_lr: float = 1e-3
    timeout_s: float = 540.0
    # The local devnet's clock runs this many times faster than the wall's (DevnetClock): the
    # task keeps production windows (a 15-minute challenge window, 10-minute rounds) and the demo
    # still finishes in about a minute. 1: the chain's own clock.
    clock_speed: float = 30.0
    misbehave: dict[str, str] = field(default_factory=dict)
    # Trainers that train in another precision than fp32, e.g. {"trainer-1": "bf16"} (CPU autocast).
    trainer_dtypes: dict[str, str] = field(default_factory=dict)
    # How much inner-loop re-execution the witnesses' challengers spend (all | spot | off).
    training_checks: str = "spot"
    # Whether honest witnesses run the challenger (the browser tests leave a fault to the UI).
    witness_challenges: bool = True
    # Whether witnesses vote as soon as a round's work is complete (early close) or wait for its deadline.
    witness_vote_early: bool = True
    # Agents keep the state in files and stream it (None: the agents' default, from 4M parameters up).
    state_on_disk: bool | None = None
    # Validation batches a witness scores per round (None: the agents' default, 8 x 16 windows).
    eval_batches: int | None = None


@dataclass
class AgentProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class TrainingDemo:
    """Runs the whole main job in ``workdir``."""

    def __init__(self, workdir: Path, plan: DemoPlan | None = None, *, ui_port: int | None = None):
        self.workdir = workdir
        self.plan = plan or DemoPlan()
        self.agents: list[AgentProcess] = []
        # Serve the sponsor web UI + API on this port (0: any free port) while the run trains.
        self.ui_port = ui_port
        self.ui_url: str | None = None
        self._ui: Any = None
        # Called with (market, task id, {address: role name}) once the run has sealed.
        self.after_seal: Callable[[MarketClient, int, dict[str, str]], None] | None = None
        # Builds and publishes the task from the blob store and the demo's spec template (default:
        # the main job's Shakespeare pretraining task); the sft-lora scenario brings its own.
        self.publish_task: Callable[[BlobStore, dict[str, Any]], PublishedTask] | None = None
        # What the exported model is asked to continue.
        self.sample_prompt = "ROMEO:"
        # The validation metric the witnesses vote (the task's modality's; set once the task is posted).
        self.metric_name = "validation_loss"
        # Called with (market, sponsor) once the contracts are deployed, before the task is published.
        self.before_publish: Callable[[MarketClient, Signer], None] | None = None
        # Called with (market, task id, the published task, the sponsor) once the task is posted,
        # before any agent starts (the confidential scenario configures its attestation policy).
        self.after_post: Callable[[MarketClient, int, PublishedTask, Signer], None] | None = None
        # (agent name, its directory, its account) -> (extra config fields, extra environment).
        self.agent_setup: Callable[[str, Path, str], tuple[dict[str, Any], dict[str, str]]] | None = None
        # Called with (market, task id) on every poll while the run is followed.
        self.on_tick: Callable[[MarketClient, int], None] | None = None

    def run(self) -> TrainingReceipt:
        started = time.monotonic()
        for sub in ("agents", "blobs", "logs", "model"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
        with start_anvil(self.workdir / "anvil", accounts=12) as devnet:
            service = BlobService(LocalBlobStore(self.workdir / "blobs"), host="127.0.0.1", port=0)
            service.start()
            clock = DevnetClock(devnet.web3(), self.plan.clock_speed)
            try:
                receipt = self._run(devnet, service.url, started, clock)
                self._linger()
                return receipt
            finally:
                clock.stop()
                self._stop_agents()
                if self._ui is not None:
                    self._ui.stop()
                service.stop()

    # ------------------------------------------------------------------ phases

    def _run(self, devnet: Devnet, blob_url: str, started: float, clock: DevnetClock) -> TrainingReceipt:
        keys = devnet.private_keys()
        signers = [from_private_key(k) for k in keys]
        sponsor = signers[0]
        trainer_keys = keys[1 : 1 + self.plan.trainers]
        witness_keys = keys[4 : 4 + self.plan.witnesses]
        w3 = devnet.web3()
        deployment = deploy_market(w3, sponsor, devnet.rpc_url, self.workdir)
        market = MarketClient.from_deployment(deployment, w3)
        log.info("demo.devnet", rpc_url=devnet.rpc_url, market=deployment.market, blob_store=blob_url)
        self._serve_ui(blob_url)
        if self.before_publish is not None:
            self.before_publish(market, sponsor)

        blobs = HttpBlobStore(blob_url)
        log.info(
            "sponsor.preparing", what="tokenizer + Shakespeare shards + initial Llama state (cached after first run)"
        )
        template = default_task(self.plan, [from_private_key(k).address for k in witness_keys], chain_time(w3))
        if self.publish_task is not None:
            published = self.publish_task(blobs, template)
            publish_initial_state(blobs, published.initial_state, sponsor.account)  # the sponsor's signed slot
        else:
            published = publish_language_task(
                blobs,
                template=template,
                shard_count=self.plan.shard_count,
                vocab_size=self.plan.vocab_size,
                seq_len=self.plan.seq_len,
                model=self.plan.model,
                sponsor=sponsor.account,
            )
        task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
        posted = time.monotonic()  # the time limit counts from here, not from the contracts' compile
        self.metric_name = adapter_for(published.spec).metric_name  # what the witnesses' votes carry
        if self.after_post is not None:
            self.after_post(market, task_id, published, sponsor)
        log.info(
            "sponsor.posted",
            task_id=task_id,
            params=published.initial_state.layout.numel,
            rule=published.spec.aggregation.rule.name.lower(),
            rounds=published.spec.rounds,
            H=published.spec.inner_steps,
            escrow_eth=published.spec.escrow_wei / ETH,
        )
        del published  # the initial state (16 B/param) is in the blob store: not held for the whole run

        clock.start()  # production windows pass in seconds of wall time (DemoPlan.clock_speed)
        for i, key in enumerate(trainer_keys):
            self._spawn("trainer", i, key, task_id, deployment, blob_url)
        for i, key in enumerate(witness_keys):
            self._spawn("witness", i, key, task_id, deployment, blob_url)

        names = {from_private_key(k).address.lower(): f"trainer-{i + 1}" for i, k in enumerate(trainer_keys)}
        names.update({from_private_key(k).address.lower(): f"witness-{i + 1}" for i, k in enumerate(witness_keys)})
        losses = self._watch(market, task_id, posted)
        if self.after_seal is not None:
            self.after_seal(market, task_id, names)
        self._wait_agents_exit(timeout_s=120)
        if market.credit_of(sponsor.address) > 0:
            amount, _ = market.withdraw(sponsor)
            log.info("sponsor.claimed", eth=amount / ETH)

        ctx = TaskContext.load(market, blobs, task_id)
        model_dir = export_model(ctx, market.task(task_id).state_root, self.workdir / "model")
        sample = generate_sample(model_dir, self.sample_prompt) if ctx.spec.modality == Modality.LANGUAGE else None
        payload_sizes = payload_bytes(market, ctx, task_id)
        log.info("model.generated", text=sample)

        receipt = market.receipt(task_id)
        # The witnesses' metric per finalized round, named (a language task's is its validation loss).
        by_name = (
            {
                "validation_loss_per_round": losses,
                "validation_loss_first": losses[0] if losses else None,
                "validation_loss_last": losses[-1] if losses else None,
            }
            if self.metric_name == "validation_loss"
            else {}
        )
        extras = {
            "validation_metric": self.metric_name,
            "validation_metric_per_round": losses,
            **by_name,
            "model_dir": str(model_dir),
            "model_parameters": ctx.layout.numel,
            "payload_bytes_per_round": [sum(sizes) for sizes in payload_sizes],
            "payload_bytes_per_submission": [max(sizes, default=0) for sizes in payload_sizes],
            "sample_text": sample,
            "trainer_throughput": self._trainer_throughput(),
            "wall_seconds": round(time.monotonic() - started, 1),
            "market": market.address,
        }
        full = TrainingReceipt(**{**receipt.__dict__, "extras": extras})
        if full.trained_nothing:  # sealed is not success: say so in one line (exit 2)
            raise TrainedNothing(f"the demo's run {full.verdict()} (task {task_id}, market {market.address})")
        return full

    def _serve_ui(self, blob_url: str) -> None:
        """Start the sponsor web UI + API (indexing this devnet) and print its URL."""
        if self.ui_port is None:
            return
        from syncline.api.server import ApiServer, ApiSettings

        settings = ApiSettings(
            deployment=self.workdir / "deployment.json",
            blob_store=blob_url,
            db_url=f"sqlite:///{self.workdir / 'index.db'}",
            port=self.ui_port,
            poll_interval_s=0.5,
            state_dir=self.workdir,
        )
        (self.workdir / "index.db").unlink(missing_ok=True)
        server = ApiServer(settings)
        try:
            self.ui_url = server.start()
        except SynclineError as exc:  # the port is taken: any free one will do
            log.warning("demo.ui_port_busy", port=self.ui_port, error=str(exc))
            settings.port = 0
            server = ApiServer(settings)
            self.ui_url = server.start()
        self._ui = server
        tqdm.write(f"==> sponsor web UI: {self.ui_url}/  (live while the run trains)", file=sys.stderr)
        log.info("demo.ui", url=self.ui_url, api_docs=f"{self.ui_url}/docs")

    def _linger(self) -> None:
        """Keep the devnet and the UI up after the run until Ctrl-C, when a person is watching
        (stdin is a terminal) or ``SYNCLINE_DEMO_LINGER_S`` asks for it."""
        if self.ui_url is None:
            return
        linger = os.environ.get("SYNCLINE_DEMO_LINGER_S")
        if linger is None and not sys.stdin.isatty():
            return
        seconds = float(linger) if linger else float("inf")
        tqdm.write(
            f"==> the run is over; the UI stays up at {self.ui_url}/ (receipt, model download). Ctrl-C to stop.",
            file=sys.stderr,
        )
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass

    def _spawn(self, role: str, index: int, key: str, task_id: int, deployment: Deployment, blob_url: str) -> None:
        name = f"{role}-{index + 1}"
        agent_dir = self.workdir / "agents" / name
        agent_dir.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "node_rpc": deployment.rpc_url,
            "task_id": task_id,
            "deployment": str(self.workdir / "deployment.json"),
            "blob_store": blob_url,
            "state_dir": str(agent_dir),
            "key_env": "SYNCLINE_PRIVATE_KEY",
            "poll_interval_s": 0.5,
            "threads": 1,
        }
        if self.plan.state_on_disk is not None:
            config["state_on_disk"] = self.plan.state_on_disk
        if role == "trainer":
            config["inner"] = {
                "optimizer": "adamw",
                "lr": self.plan.inner_lr,
                "weight_decay": 0.01,
                "beta1": 0.9,
                "beta2": 0.95,
                "batch_size": self.plan.batch_size,
            }
            config.update(device="cpu", dtype=self.plan.trainer_dtypes.get(name, "fp32"), gradient_checkpointing=False)
        if role == "witness":
            config["training_checks"] = self.plan.training_checks
            config["challenge"] = self.plan.witness_challenges
            config["vote_early"] = self.plan.witness_vote_early
            if self.plan.eval_batches is not None:
                config["eval_batches"] = self.plan.eval_batches
        extra_env: dict[str, str] = {}
        if self.agent_setup is not None:
            extra, extra_env = self.agent_setup(name, agent_dir, from_private_key(key).address)
            config.update(extra)
        config_path = agent_dir / f"{role}.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        cmd = [sys.executable, "-m", "syncline.cli", role, "run", "--config", str(config_path)]
        if name in self.plan.misbehave:
            cmd += ["--misbehave", self.plan.misbehave[name]]
        log_path = self.workdir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "SYNCLINE_PRIVATE_KEY": key,
            "SYNCLINE_LOG_FORMAT": "console",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        with log_path.open("wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.agents.append(AgentProcess(name, proc, log_path))
        log.info("agent.started", name=name, pid=proc.pid, log=str(log_path))

    def _watch(self, market: MarketClient, task_id: int, started: float) -> list[float]:
        """Follow the run on chain until it is sealed; print each round as it closes."""
        losses: list[float] = []
        reported = 0
        bar = tqdm(
            total=self.plan.rounds,
            desc="rounds",
            unit="round",
            file=sys.stderr,
            leave=False,
            disable=not sys.stderr.isatty(),
        )
        try:
            while True:
                if time.monotonic() - started > self.plan.timeout_s:
                    raise SynclineError(f"the demo did not finish within {self.plan.timeout_s:.0f}s of posting")
                self._check_agents()
                if self.on_tick is not None:
                    self.on_tick(market, task_id)
                t = market.task(task_id)
                closed = t.current_round if t.status == TaskStatus.RUNNING else self.plan.rounds
                if t.status == TaskStatus.ENROLLING:
                    closed = 0
                while reported < closed:
                    loss = self._report_round(market, task_id, reported)
                    if loss is not None:
                        losses.append(loss)
                    reported += 1
                    bar.update(1)
                if t.status == TaskStatus.SEALED:
                    return losses
                time.sleep(0.5)
        finally:
            bar.close()

    def _report_round(self, market: MarketClient, task_id: int, round_: int) -> float | None:
        r = market.round(task_id, round_)
        if r.status == RoundStatus.INVALIDATED:
            tqdm.write(
                f"round {round_}: finalized, then INVALIDATED by a fraud proof; state rolled back to "
                f"{r.prev_state_root[:18]}",
                file=sys.stderr,
            )
            return None
        if r.status != RoundStatus.FINALIZED:
            tqdm.write(f"round {round_}: carried forward (no quorum); state root unchanged", file=sys.stderr)
            return None
        votes = market.get_logs("VoteCast", from_block=0, taskId=task_id, round=round_)
        metrics = [v["args"]["metric"] / 1e6 for v in votes if "0x" + bytes(v["args"]["result"]).hex() == r.result]
        loss = statistics.median(metrics) if metrics else float("nan")
        tqdm.write(
            f"round {round_}: finalized by {r.vote_count} votes; accepted {bin(r.accepted_mask).count('1')}"
            f"/{bin(r.committed_mask).count('1')} submissions; {self.metric_name.replace('_', ' ')} {loss:.4f}; "
            f"state root {r.state_root[:18]}",
            file=sys.stderr,
        )
        return loss

    def _check_agents(self) -> None:
        for agent in self.agents:
            code = agent.process.poll()
            if code not in (None, 0):
                raise SynclineError(f"{agent.name} exited with code {code}; last log lines:\n{agent.tail()}")

    def _wait_agents_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for agent in self.agents:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                agent.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                log.warning("agent.still_running", name=agent.name)

    def _stop_agents(self) -> None:
        for agent in self.agents:
            if agent.process.poll() is None:
                agent.process.terminate()
        for agent in self.agents:
            try:
                agent.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.process.kill()

    def _trainer_throughput(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for agent in self.agents:
            if not agent.name.startswith("trainer"):
                continue
            path = self.workdir / "agents" / agent.name / "throughput.json"
            if path.exists():
                out[agent.name] = json.loads(path.read_text())
        return out


def payload_bytes(market: MarketClient, ctx: TaskContext, task_id: int) -> list[list[int]]:
    """Bytes of every committed payload, per round (read back from the blob store by the digests
    the chain binds)."""
    sizes: list[list[int]] = []
    for round_ in range(ctx.spec.rounds):
        mask = market.round(task_id, round_).committed_mask
        row = []
        for fragment in range(mask.bit_length()):
            if mask >> fragment & 1:
                s = market.submission(task_id, round_, fragment)
                row.append(len(ctx.blobs.get(s.payload_hash, max_bytes=ctx.max_payload_bytes)))
        sizes.append(row)
    return sizes


def generate_sample(model_dir: Path, prompt: str = "ROMEO:", max_new_tokens: int = 30) -> str:
    """Load the exported directory with ``transformers`` (offline) and generate a line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(0)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    out = model.generate(
        ids,
        max_new_tokens=max_new_tokens,
        do_sample=True,
        top_k=40,
        temperature=0.8,
        pad_token_id=tokenizer.eos_token_id,
    )
    text = str(tokenizer.decode(out[0], skip_special_tokens=True))
    return text.replace("\n", " / ")
