"""DiLoCo benchmark: Syncline's protocol path, in one process and without a chain, against AdamW.

M trainers each run H inner AdamW steps (the trainers' own ``InnerLoop``) from the shared state
on their own contiguous shards, with the batch order the trainer agent uses (``round_seed``);
their outer gradients are quantized to int8 per 256-coordinate chunk, serialized, hashed and fed
to ``compute_round`` (payload validation, the integer aggregation rule, the Q32 Nesterov outer
step and the state root), exactly as witnesses and trainers run it. Printed figures:

1. final validation loss of Syncline against a single-process AdamW baseline that sees the same
   samples (by default the synchronous data-parallel equivalent: batch M*B for H*R steps, each
   step's batch being the M trainers' batches of that step concatenated), the ratio, and an
   unquantized DiLoCo variant (Q32 outer gradients, same rule and outer step) that isolates the
   cost of int8 quantization;
2. bytes each trainer sends and receives per round (its int8 payload; the other M-1 payloads,
   from which it re-derives the next state) against fp32 ring all-reduce over the same H steps,
   the first-round full-state download, and the factor at H=500 (analytic);
3. trainer utilization: inner-step time / wall time of a trainer's round, in process;
4. witness aggregation throughput per rule on this run's real int8 gradients, through the kernels
   and timer of ``scripts/bench/aggregation.py``.

It writes a JSON file (figures plus per-round loss curves at equal sample counts) and a loss-curve
plot. Usage::

    .venv/bin/python scripts/bench/diloco.py            # default configuration
    .venv/bin/python scripts/bench/diloco.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from syncline.demo.training_run import DemoPlan
from syncline.modality.language import LanguageAdapter
from syncline.protocol.aggregation import Krum, make_rule
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import to_fixed
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import QuantizedGradient, dequantize, quantize
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, compute_round
from syncline.run.agent_config import AgentConfig, InnerOptimizerConfig
from syncline.run.context import load_weights, max_payload_bytes
from syncline.sponsor.task_builder import cached_corpus
from syncline.trainer.agent import round_seed
from syncline.trainer.inner_loop import InnerLoop

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / ".syncline" / "bench" / "diloco.json"
DEFAULT_PLOT = REPO / "docs" / "img" / "diloco_loss.png"
DEFAULT_RECEIPT = REPO / ".syncline" / "demo" / "receipt.json"
PAPER_H = 500  # DiLoCo paper: 8 workers, H = 500
PAPER_M = 8
DEFAULT_RULE_PARAMS = {"trimmed_mean": 2000, "centered_clip": 1_000_000}  # krum / multi_krum: (M - 3) // 2

_PLAN = DemoPlan()
_INNER = InnerOptimizerConfig()
_WITNESS = AgentConfig(node_rpc="", task_id=0, deployment=Path(), blob_store="", state_dir=Path())


# ---------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class BenchConfig:
    trainers: int
    inner_steps: int
    rounds: int
    batch_size: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    seq_len: int
    shard_count: int
    inner_lr: float
    outer_lr: float
    outer_momentum: float
    rule: str
    rule_param: int
    seed: int
    task_id: int
    eval_batches: int
    eval_batch_size: int
    threads: int
    baseline: str
    unquantized: bool
    repeats: int
    quick: bool

    @property
    def lr_ppm(self) -> int:
        return round(self.outer_lr * 1_000_000)

    @property
    def momentum_ppm(self) -> int:
        return round(self.outer_momentum * 1_000_000)

    @property
    def samples_per_round(self) -> int:
        return self.trainers * self.inner_steps * self.batch_size

    def model(self) -> dict[str, Any]:
        return {
            "family": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.heads,
            "max_position_embeddings": self.seq_len,
            "tie_word_embeddings": True,
            "vocab_size": self.vocab,
        }

    def inner(self) -> InnerOptimizerConfig:
        return InnerOptimizerConfig(
            lr=self.inner_lr,
            weight_decay=0.01,  # the demo's trainer config
            beta1=0.9,
            beta2=0.95,
            inner_steps=self.inner_steps,
            batch_size=self.batch_size,
        )

    def is_demo_plan(self) -> bool:
        """Whether this run reproduces the on-chain demo's task (its receipt is then comparable)."""
        p = _PLAN
        return (
            (self.trainers, self.inner_steps, self.rounds, self.batch_size, self.shard_count)
            == (p.trainers, p.inner_steps, p.rounds, p.batch_size, p.shard_count)
            and (self.vocab, self.seq_len, self.inner_lr, self.rule) == (p.vocab_size, p.seq_len, p.inner_lr, p.rule)
            and (self.hidden, self.layers, self.heads, self.intermediate)
            == (
                p.model["hidden_size"],
                p.model["num_hidden_layers"],
                p.model["num_attention_heads"],
                p.model["intermediate_size"],
            )
            and (self.seed, self.task_id) == (0, 1)
        )


def parse_args(argv: Sequence[str] | None = None) -> tuple[BenchConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trainers", "-M", type=int, default=_PLAN.trainers, help="M trainers (default %(default)s)")
    p.add_argument("--inner-steps", "-H", type=int, default=_PLAN.inner_steps, help="H inner steps per round")
    p.add_argument("--rounds", "-R", type=int, default=_PLAN.rounds, help="R outer rounds")
    p.add_argument("--batch-size", "-B", type=int, default=_PLAN.batch_size, help="per-trainer batch (sequences)")
    p.add_argument("--hidden", type=int, default=_PLAN.model["hidden_size"])
    p.add_argument("--layers", type=int, default=_PLAN.model["num_hidden_layers"])
    p.add_argument("--heads", type=int, default=_PLAN.model["num_attention_heads"])
    p.add_argument("--intermediate", type=int, default=_PLAN.model["intermediate_size"])
    p.add_argument("--vocab", type=int, default=_PLAN.vocab_size, help="BPE vocabulary (a new size retrains it)")
    p.add_argument("--seq-len", type=int, default=_PLAN.seq_len)
    p.add_argument("--shard-count", type=int, default=None, help="dataset shards (default 2*M, as the demo)")
    p.add_argument("--inner-lr", type=float, default=_PLAN.inner_lr)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--rule", choices=[r.name.lower() for r in AggregationRule], default=_PLAN.rule)
    p.add_argument("--rule-param", type=int, default=None, help="bps / f / radius ppm (default: per rule)")
    p.add_argument("--seed", type=int, default=0, help="model initialization seed (the sponsor's)")
    p.add_argument("--task-id", type=int, default=1, help="task id in round_seed (the batch order); demo: 1")
    p.add_argument("--eval-batches", type=int, default=_WITNESS.eval_batches, help="as the witnesses")
    p.add_argument("--eval-batch-size", type=int, default=_WITNESS.eval_batch_size)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: no oversubscription on 2 cores)")
    p.add_argument(
        "--baseline",
        choices=("dp", "serial", "both"),
        default="dp",
        help="dp: batch M*B for H*R steps (synchronous data parallel); serial: batch B for M*H*R steps",
    )
    p.add_argument("--no-unquantized", action="store_true", help="skip the unquantized DiLoCo variant")
    p.add_argument("--repeats", type=int, default=3, help="repeats of the aggregation timings (best time)")
    p.add_argument(
        "--quick", action="store_true", help="H=10, R=3, 4 eval batches, no unquantized variant, 1 repeat (< 2 min)"
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="results file (default %(default)s)")
    p.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="loss-curve PNG (default %(default)s)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--demo-receipt", type=Path, default=DEFAULT_RECEIPT, help="on-chain demo receipt, if any")
    a = p.parse_args(argv)
    if a.quick:
        a.inner_steps, a.rounds, a.eval_batches, a.repeats, a.no_unquantized = 10, 3, 4, 1, True
    if a.shard_count is None:
        a.shard_count = 2 * a.trainers
    if a.rule_param is None:
        a.rule_param = DEFAULT_RULE_PARAMS.get(a.rule, max(0, (a.trainers - 3) // 2) if "krum" in a.rule else 0)
    if a.trainers < 1 or a.shard_count < a.trainers:
        p.error("need M >= 1 trainers and at least M shards")
    cfg = BenchConfig(
        trainers=a.trainers,
        inner_steps=a.inner_steps,
        rounds=a.rounds,
        batch_size=a.batch_size,
        hidden=a.hidden,
        layers=a.layers,
        heads=a.heads,
        intermediate=a.intermediate,
        vocab=a.vocab,
        seq_len=a.seq_len,
        shard_count=a.shard_count,
        inner_lr=a.inner_lr,
        outer_lr=a.outer_lr,
        outer_momentum=a.outer_momentum,
        rule=a.rule,
        rule_param=a.rule_param,
        seed=a.seed,
        task_id=a.task_id,
        eval_batches=a.eval_batches,
        eval_batch_size=a.eval_batch_size,
        threads=a.threads,
        baseline=a.baseline,
        unquantized=not a.no_unquantized,
        repeats=a.repeats,
        quick=a.quick,
    )
    return cfg, a


# ---------------------------------------------------------------------------------------- setup


@dataclass
class Setup:
    cfg: BenchConfig
    adapter: LanguageAdapter
    shards: list[list[bytes]]  # per trainer (position = fragment)
    validation: bytes
    layout: ParameterLayout
    initial: TrainingState
    eval_model: torch.nn.Module

    def build_model(self) -> torch.nn.Module:
        return self.adapter.build_model(self.cfg.model(), seed=self.cfg.seed)

    def evaluate_state(self, state: TrainingState) -> float:
        load_weights(self.eval_model, state)
        return self.evaluate(self.eval_model)

    def evaluate(self, model: torch.nn.Module) -> float:
        c = self.cfg
        return self.adapter.evaluate(model, self.validation, batch_size=c.eval_batch_size, max_batches=c.eval_batches)

    def seed(self, round_: int, trainer: int) -> int:
        return round_seed(self.cfg.task_id, round_, trainer)

    def round_batches(self, round_: int, trainer: int) -> Iterator[dict[str, torch.Tensor]]:
        c = self.cfg
        return self.adapter.batches(
            self.shards[trainer], batch_size=c.batch_size, seed=self.seed(round_, trainer), steps=c.inner_steps
        )


def make_setup(cfg: BenchConfig) -> Setup:
    corpus = cached_corpus(cfg.shard_count, cfg.vocab)
    m, s = cfg.trainers, cfg.shard_count
    # ShardAssignment.maskFor: position p of m gets shards [floor(p*S/m), floor((p+1)*S/m)).
    shards = [list(corpus.shards[p * s // m : (p + 1) * s // m]) for p in range(m)]
    adapter = LanguageAdapter(seq_len=cfg.seq_len)
    net = adapter.build_model(cfg.model(), seed=cfg.seed)
    params = {k: v.detach() for k, v in net.named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    initial = TrainingState.from_model_state_dict(params, layout)
    return Setup(cfg, adapter, shards, corpus.validation, layout, initial, net)


# ---------------------------------------------------------------------------------------- runs


@dataclass
class Curve:
    name: str
    samples: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)  # mean training loss of each round
    seconds: float = 0.0

    @property
    def final(self) -> float:
        return self.val_loss[-1]


@dataclass
class TrainerRound:
    """One trainer's round, timed in process (seconds) and counted (bytes)."""

    round: int
    trainer: int
    sync_s: float  # state sync: full-state parse + root check (round 0) or compute_round over payloads
    inner_s: float  # the H inner steps (InnerLoop's train_seconds)
    load_flatten_s: float  # rest of InnerLoop.run: load weights, flatten, theta_start - theta_end
    quantize_s: float
    serialize_s: float
    hash_s: float  # keccak(payload) + gradient chunk root (the commitment)
    sent: int
    received: int
    tokens: int

    @property
    def wall_s(self) -> float:
        return self.sync_s + self.inner_s + self.load_flatten_s + self.quantize_s + self.serialize_s + self.hash_s


@dataclass
class SynclineRun:
    curve: Curve
    rounds: list[TrainerRound]
    state_bytes: int
    payload_bytes: list[list[int]]
    round_seconds: list[float]  # compute_round (validate, aggregate, outer step, state root)
    last_payloads: list[bytes]


def run_syncline(su: Setup) -> SynclineRun:
    """The protocol path: InnerLoop -> int8 quantize -> safetensors -> commit hashes -> compute_round."""
    c = su.cfg
    curve = Curve(f"Syncline int8 + {c.rule}")
    began = time.perf_counter()
    trainers = [InnerLoop(su.adapter, su.build_model(), su.layout, c.inner()) for _ in range(c.trainers)]
    state = su.initial
    curve.samples.append(0)
    curve.val_loss.append(su.evaluate_state(state))
    # Round 0: every trainer downloads the full state blob (16 B/param) and checks its root.
    blob = state.to_bytes()
    t0 = time.perf_counter()
    TrainingState.from_bytes(blob, expected_layout=su.layout).state_root()
    sync0 = time.perf_counter() - t0
    sync_s = [sync0] * c.trainers
    received_state = [len(blob)] * c.trainers
    max_bytes = max_payload_bytes(su.layout.numel, 8)  # what the witnesses (and a syncing trainer) accept
    records: list[TrainerRound] = []
    payload_bytes: list[list[int]] = []
    round_seconds: list[float] = []
    payloads: list[bytes] = []
    for r in range(c.rounds):
        subs: list[CommittedSubmission] = []
        losses: list[float] = []
        payloads = []
        for i, inner in enumerate(trainers):
            t0 = time.perf_counter()
            work = inner.run(state, su.shards[i], seed=su.seed(r, i))
            t1 = time.perf_counter()
            qg = quantize(work.pseudo_gradient, 8)
            t2 = time.perf_counter()
            payload = qg.to_safetensors_bytes()
            t3 = time.perf_counter()
            digest, root = keccak(payload), gradient_chunk_root(qg)  # what the trainer commits on chain
            t4 = time.perf_counter()
            subs.append(CommittedSubmission(i, digest, root, payload))
            payloads.append(payload)
            losses += work.losses
            records.append(
                TrainerRound(
                    round=r,
                    trainer=i,
                    sync_s=sync_s[i],
                    inner_s=work.train_seconds,
                    load_flatten_s=(t1 - t0) - work.train_seconds,
                    quantize_s=t2 - t1,
                    serialize_s=t3 - t2,
                    hash_s=t4 - t3,
                    sent=len(payload),
                    received=received_state[i],
                    tokens=work.tokens,
                )
            )
        # The witnesses' computation; every trainer runs the same one to derive the next state.
        t0 = time.perf_counter()
        result = compute_round(
            state,
            subs,
            rule=AggregationRule[c.rule.upper()],
            rule_param=c.rule_param,
            bits=8,
            lr_ppm=c.lr_ppm,
            momentum_ppm=c.momentum_ppm,
            max_payload_bytes=max_bytes,
        )
        cr_s = time.perf_counter() - t0
        if result.rejected:
            raise RuntimeError(f"round {r}: submissions rejected: {dict(result.rejected)}")
        state = result.state
        round_seconds.append(cr_s)
        sizes = [len(p) for p in payloads]
        payload_bytes.append(sizes)
        sync_s = [cr_s] * c.trainers
        received_state = [sum(sizes) - n for n in sizes]  # the other M-1 payloads, for round r+1
        curve.samples.append((r + 1) * c.samples_per_round)
        curve.val_loss.append(su.evaluate_state(state))
        curve.train_loss.append(sum(losses) / len(losses))
        print(f"  syncline  round {r + 1}/{c.rounds}: val {curve.val_loss[-1]:.4f}", file=sys.stderr)
    curve.seconds = time.perf_counter() - began
    return SynclineRun(curve, records, len(blob), payload_bytes, round_seconds, payloads)


def run_unquantized(su: Setup) -> Curve:
    """Same trainers, data, rule and Q32 outer step, but the outer gradients go onto the Q32 grid
    unquantized (``to_fixed``: finer than fp32 for these magnitudes): isolates int8's cost."""
    c = su.cfg
    curve = Curve(f"DiLoCo unquantized (Q32) + {c.rule}")
    began = time.perf_counter()
    trainers = [InnerLoop(su.adapter, su.build_model(), su.layout, c.inner()) for _ in range(c.trainers)]
    impl = make_rule(AggregationRule[c.rule.upper()], c.rule_param)
    if isinstance(impl, Krum) and c.trainers < 2 * impl.f + 3:
        impl = make_rule(AggregationRule.COORDINATE_MEDIAN, 0)  # compute_round's fallback
    state = su.initial
    curve.samples.append(0)
    curve.val_loss.append(su.evaluate_state(state))
    for r in range(c.rounds):
        works = [inner.run(state, su.shards[i], seed=su.seed(r, i)) for i, inner in enumerate(trainers)]
        grads = torch.stack([to_fixed(w.pseudo_gradient) for w in works])
        state = state.apply_round(impl.aggregate(grads), c.lr_ppm, c.momentum_ppm)
        curve.samples.append((r + 1) * c.samples_per_round)
        curve.val_loss.append(su.evaluate_state(state))
        curve.train_loss.append(sum(sum(w.losses) for w in works) / sum(len(w.losses) for w in works))
        print(f"  unquant.  round {r + 1}/{c.rounds}: val {curve.val_loss[-1]:.4f}", file=sys.stderr)
    curve.seconds = time.perf_counter() - began
    return curve


def run_baseline(su: Setup, kind: str) -> Curve:
    """Single-process AdamW over exactly the samples the M trainers see, evaluated every round.

    ``dp``: per inner step, one batch of M*B = the M trainers' batches of that step (synchronous
    data parallel with M workers). ``serial``: the same batches one by one (batch B, M*H*R steps).
    """
    c = su.cfg
    if kind == "dp":
        name = f"AdamW DP-equivalent (batch {c.trainers * c.batch_size}, {c.inner_steps * c.rounds} steps)"
    else:
        name = f"AdamW serial (batch {c.batch_size}, {c.trainers * c.inner_steps * c.rounds} steps)"
    curve = Curve(name)
    began = time.perf_counter()
    model = su.build_model()
    load_weights(model, su.initial)
    model.train()
    inner = c.inner()
    opt = torch.optim.AdamW(
        model.parameters(), lr=inner.lr, betas=(inner.beta1, inner.beta2), weight_decay=inner.weight_decay
    )

    def step(batch: dict[str, torch.Tensor]) -> float:
        loss = su.adapter.loss(model, batch)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    curve.samples.append(0)
    curve.val_loss.append(su.evaluate_state(su.initial))
    for r in range(c.rounds):
        losses: list[float] = []
        for per_trainer in zip(*(su.round_batches(r, i) for i in range(c.trainers)), strict=True):
            if kind == "dp":
                losses.append(step({k: torch.cat([b[k] for b in per_trainer]) for k in per_trainer[0]}))
            else:
                losses += [step(b) for b in per_trainer]
        curve.samples.append((r + 1) * c.samples_per_round)
        curve.val_loss.append(su.evaluate(model))
        curve.train_loss.append(sum(losses) / len(losses))
        print(f"  {kind:<8}  round {r + 1}/{c.rounds}: val {curve.val_loss[-1]:.4f}", file=sys.stderr)
    curve.seconds = time.perf_counter() - began
    return curve


# ---------------------------------------------------------------------------------------- figures


def communication(su: Setup, run: SynclineRun) -> dict[str, Any]:
    """Per-trainer bytes per round against fp32 ring all-reduce over the same H steps."""
    c = su.cfg
    m, h, p = c.trainers, c.inner_steps, su.layout.numel
    payload = max(max(r) for r in run.payload_bytes)  # identical sizes for a fixed layout
    sent = payload
    received = (m - 1) * payload
    ring_step = 2 * (m - 1) / m * 4 * p  # each direction, per step

    def factors(h_: int, m_: int) -> dict[str, float | None]:
        ring = 2 * (m_ - 1) / m_ * 4 * p * h_
        recv = (m_ - 1) * payload
        return {
            "ring_bytes_each_way_per_round": ring,
            "sent_factor": ring / payload if m_ > 1 else None,
            "received_factor": ring / recv if m_ > 1 else None,
            "total_factor": 2 * ring / (payload + recv) if m_ > 1 else None,
        }

    total_syncline = sum(r.sent + r.received for r in run.rounds if r.trainer == 0)
    total_ring = 2 * ring_step * h * c.rounds
    return {
        "parameters": p,
        "payload_bytes": payload,
        "payload_bytes_per_param": payload / p,
        "state_bytes": run.state_bytes,
        "sent_per_round": sent,
        "received_per_round": received,
        "ring_per_step_each_way": ring_step,
        "ring_per_round_each_way": ring_step * h,
        "measured": factors(h, m),
        "run_total_syncline_bytes_per_trainer": total_syncline,
        "run_total_ring_bytes_per_trainer": total_ring,
        "run_total_factor": total_ring / total_syncline if m > 1 else None,
        "analytic_h500_same_m": factors(PAPER_H, m),
        "analytic_h500_m8": factors(PAPER_H, PAPER_M),
    }


def utilization(run: SynclineRun, inner_steps: int) -> dict[str, Any]:
    """Inner-step time over a trainer's round wall time; also projected to H=500 (inner time
    scales with H, the rest is paid once per round)."""
    rs = run.rounds
    parts = ("sync_s", "inner_s", "load_flatten_s", "quantize_s", "serialize_s", "hash_s")
    totals = {k: sum(getattr(r, k) for r in rs) for k in parts}
    wall = sum(r.wall_s for r in rs)
    steady = [r for r in rs if r.round > 0]
    inner_h500 = totals["inner_s"] / inner_steps * PAPER_H
    return {
        "utilization_projected_h500": inner_h500 / (inner_h500 + wall - totals["inner_s"]),
        "utilization": totals["inner_s"] / wall,
        "utilization_after_round0": (sum(r.inner_s for r in steady) / sum(r.wall_s for r in steady))
        if steady
        else None,
        "seconds": totals,
        "wall_s": wall,
        "per_trainer_round_mean_s": {k: v / len(rs) for k, v in totals.items()},
        "tokens_per_inner_s": sum(r.tokens for r in rs) / totals["inner_s"],
    }


def load_aggregation_bench() -> ModuleType:
    path = Path(__file__).with_name("aggregation.py")
    spec = importlib.util.spec_from_file_location("syncline_bench_aggregation", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def aggregation_throughput(su: Setup, run: SynclineRun) -> dict[str, Any]:
    """Params/s of every rule (``aggregation.py``'s RULES and timer) on the last round's payloads."""
    bench = load_aggregation_bench()
    c = su.cfg
    grads = [QuantizedGradient.from_safetensors_bytes(p, expected_numel=su.layout.numel) for p in run.last_payloads]
    x = torch.stack([dequantize(g) for g in grads])
    n, d = x.shape
    rows: list[dict[str, Any]] = []
    for name, (rule, param) in bench.RULES.items():
        impl = make_rule(rule, param(n))
        if isinstance(impl, Krum) and n < 2 * impl.f + 3:  # too few gradients for Krum with this f
            continue
        seconds = bench.best_time(lambda impl=impl: impl.aggregate(x), c.repeats)
        rows.append({"rule": name, "n": n, "seconds": seconds, "params_per_s": d / seconds})
    rounds = run.round_seconds
    return {
        "d": d,
        "n": n,
        "rules": rows,
        "compute_round_seconds_median": sorted(rounds)[len(rounds) // 2],
        "compute_round_params_per_s": d / sorted(rounds)[len(rounds) // 2],
    }


# ---------------------------------------------------------------------------------------- output


def demo_receipt(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    extras = data.get("extras", data)
    out: dict[str, Any] = {
        "path": str(path),
        "validation_loss_per_round": extras.get("validation_loss_per_round"),
        "model_parameters": extras.get("model_parameters"),
        "wall_seconds": extras.get("wall_seconds"),
        "trainer_throughput": extras.get("trainer_throughput", {}),
    }
    return out


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    raise AssertionError


def fx(v: float | None) -> str:
    return "n/a (M=1)" if v is None else f"{v:,.0f}x" if v >= 100 else f"{v:,.1f}x"


def print_report(res: dict[str, Any]) -> None:
    c, loss, comm, util, agg = res["config"], res["loss"], res["communication"], res["utilization"], res["aggregation"]
    out: list[str] = [
        "",
        f"configuration: M={c['trainers']} trainers, H={c['inner_steps']}, R={c['rounds']}, B={c['batch_size']}, "
        f"seq_len={c['seq_len']}, llama hidden={c['hidden']} layers={c['layers']} heads={c['heads']} "
        f"ffn={c['intermediate']} vocab={c['vocab']} ({comm['parameters']:,} params), inner AdamW "
        f"lr={c['inner_lr']}, outer Nesterov lr={c['outer_lr']} momentum={c['outer_momentum']}, rule={c['rule']}"
        f"({c['rule_param']}), int8, shards={c['shard_count']}, threads={c['threads']}, "
        f"eval {c['eval_batches']}x{c['eval_batch_size']} windows, samples/round={res['samples_per_round']:,}",
        "",
        "1. final validation loss (same total samples)",
    ]
    base = loss["baseline_dp"] or loss["baseline_serial"]
    for key in ("syncline", "unquantized", "baseline_dp", "baseline_serial"):
        cv = loss[key]
        if cv is not None:
            ratio = cv["final"] / base["final"]
            out.append(f"   {cv['name']:<50}{cv['final']:>8.4f}   / baseline {ratio:.4f}   ({cv['seconds']:.0f} s)")
    out.append(f"   ratio syncline / baseline: {loss['ratio_syncline_baseline']:.4f}")
    if loss["ratio_syncline_unquantized"] is not None:
        out.append(f"   ratio syncline / unquantized DiLoCo (cost of int8): {loss['ratio_syncline_unquantized']:.4f}")
    m = comm["measured"]
    ring = fmt_bytes(comm["ring_per_round_each_way"])
    sent, received = fmt_bytes(comm["sent_per_round"]), fmt_bytes(comm["received_per_round"])
    total_s = fmt_bytes(comm["run_total_syncline_bytes_per_trainer"])
    total_r = fmt_bytes(comm["run_total_ring_bytes_per_trainer"])
    out += [
        "",
        "2. bytes per trainer per round",
        f"   {'':<34}{'sent':>14}{'received':>14}",
        f"   {'Syncline (int8 payloads)':<34}{sent:>14}{received:>14}",
        f"   {'fp32 ring all-reduce, H steps':<34}{ring:>14}{ring:>14}",
        f"   {'reduction factor':<34}{fx(m['sent_factor']):>14}{fx(m['received_factor']):>14}"
        f"   total {fx(m['total_factor'])}",
        f"   first-round full state download: {fmt_bytes(comm['state_bytes'])} (16 B/param); whole run per "
        f"trainer: {total_s} vs ring {total_r} ({fx(comm['run_total_factor'])})",
    ]
    analytic = [("analytic_h500_same_m", f"M={c['trainers']}"), ("analytic_h500_m8", f"M={PAPER_M}")]
    for key, label in analytic[: 1 if c["trainers"] == PAPER_M else 2]:
        a = comm[key]
        out.append(
            f"   analytic H={PAPER_H}, {label}: sent {fx(a['sent_factor'])}, received {fx(a['received_factor'])}, "
            f"total {fx(a['total_factor'])}"
        )
    steady = util["utilization_after_round0"]
    parts = ", ".join(f"{k[:-2]} {v:.3f}" for k, v in util["per_trainer_round_mean_s"].items())
    out += [
        "",
        f"3. trainer utilization (inner steps / round wall, in process): {util['utilization']:.1%}"
        + (f" ({steady:.1%} after round 0)" if steady is not None else "")
        + f"; projected at H={PAPER_H}: {util['utilization_projected_h500']:.1%}",
        f"   mean seconds per trainer-round: {parts}",
        f"   {util['tokens_per_inner_s']:,.0f} tokens/s per trainer in inner steps (on chain, a trainer also waits"
        " for the round deadline: that idle time counts against it there, not here)",
        "",
        f"4. witness aggregation throughput on this run's gradients (n={agg['n']}, d={agg['d']:,})",
    ]
    for row in agg["rules"]:
        out.append(f"   {row['rule']:<24}{row['seconds']:>10.4f} s{row['params_per_s']:>16,.0f} params/s")
    out.append(
        f"   {'compute_round (all)':<24}{agg['compute_round_seconds_median']:>10.4f} s"
        f"{agg['compute_round_params_per_s']:>16,.0f} params/s  (validate + aggregate + outer step + root)"
    )
    demo = res.get("demo_receipt")
    if demo:
        out += [
            "",
            f"on-chain demo run ({demo['path']}): validation loss per round {demo['validation_loss_per_round']}",
        ]
        for name, t in demo["trainer_throughput"].items():
            out.append(
                f"   {name}: sent {fmt_bytes(t['bytes_sent'])}, received {fmt_bytes(t['bytes_received'])}, "
                f"{t['tokens_per_s']:,.0f} tokens/s, utilization {t['utilization']:.1%}"
            )
    out += ["", f"total {res['machine']['bench_seconds']:.0f} s; load average {res['machine']['loadavg_end']}"]
    print("\n".join(out))


def plot(res: dict[str, Any], path: Path) -> Path:
    c = res["config"]
    seq = c["seq_len"]
    series: list[tuple[str, list[float], list[float], str]] = []
    styles = {"syncline": "-o", "unquantized": "--s", "baseline_dp": "-^", "baseline_serial": ":v"}
    for key, style in styles.items():
        cv = res["loss"][key]
        if cv is not None:
            series.append((cv["name"], [s * seq / 1e6 for s in cv["samples"]], cv["val_loss"], style))
    demo = res.get("demo_receipt")
    if demo and res["demo_comparable"] and demo["validation_loss_per_round"]:
        ys = demo["validation_loss_per_round"]
        xs = [(i + 1) * res["samples_per_round"] * seq / 1e6 for i in range(len(ys))]
        series.append(("on-chain demo (receipt)", xs, ys, "kx"))
    title = (
        f"M={c['trainers']} H={c['inner_steps']} R={c['rounds']} B={c['batch_size']}, "
        f"{res['communication']['parameters'] / 1e6:.2f}M-param llama, {c['rule']}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        svg = path.with_suffix(".svg")
        svg.write_text(_svg(series, title))
        return svg
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for name, xs, ys, style in series:
        ax.plot(xs, ys, style, label=name, markersize=8 if style == "kx" else 4)
    ax.set_xlabel("training tokens seen, all workers (millions)")
    ax.set_ylabel("validation loss")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _svg(series: list[tuple[str, list[float], list[float], str]], title: str) -> str:
    """A minimal line chart, for machines without matplotlib."""
    w, h, pad = 640, 400, 50
    xs = [x for _, s, _, _ in series for x in s]
    ys = [y for _, _, s, _ in series for y in s]
    x0, x1, y0, y1 = min(xs), max(xs) or 1.0, min(ys), max(ys)

    def px(x: float, y: float) -> str:
        u = pad + (x - x0) / (x1 - x0 or 1) * (w - 2 * pad)
        v = h - pad - (y - y0) / (y1 - y0 or 1) * (h - 2 * pad)
        return f"{u:.1f},{v:.1f}"

    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">']
    out.append(f'<text x="{pad}" y="20">{title}</text>')
    out.append(f'<text x="{pad}" y="{h - 10}">tokens (M) {x0:.2f} .. {x1:.2f}; loss {y0:.3f} .. {y1:.3f}</text>')
    out.append(f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" fill="none" stroke="#999"/>')
    for k, (name, sx, sy, _) in enumerate(series):
        col = colors[k % len(colors)]
        pts = " ".join(px(x, y) for x, y in zip(sx, sy, strict=True))
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
        out.append(f'<text x="{w - pad - 260}" y="{pad + 15 + 14 * k}" fill="{col}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    cfg, args = parse_args(argv)
    torch.set_num_threads(cfg.threads)
    started = time.perf_counter()
    load_start = os.getloadavg()
    su = make_setup(cfg)
    print(
        f"DiLoCo bench: {su.layout.numel:,} params, M={cfg.trainers} H={cfg.inner_steps} R={cfg.rounds} "
        f"B={cfg.batch_size}, rule={cfg.rule}, threads={torch.get_num_threads()}",
        file=sys.stderr,
    )
    syn = run_syncline(su)
    unq = run_unquantized(su) if cfg.unquantized else None
    dp = run_baseline(su, "dp") if cfg.baseline in ("dp", "both") else None
    serial = run_baseline(su, "serial") if cfg.baseline in ("serial", "both") else None
    base = dp or serial
    assert base is not None
    agg = aggregation_throughput(su, syn)
    util = utilization(syn, cfg.inner_steps)
    receipt = demo_receipt(args.demo_receipt)

    def cv(curve: Curve | None) -> dict[str, Any] | None:
        return None if curve is None else {**asdict(curve), "final": curve.final}

    res: dict[str, Any] = {
        "config": asdict(cfg),
        "samples_per_round": cfg.samples_per_round,
        "baseline_definition": (
            "dp: one AdamW process, batch M*B for H*R steps; each step's batch is the M trainers' batches of that "
            "inner step concatenated (synchronous data parallel, identical samples). serial: the same batches one "
            "at a time (batch B, M*H*R steps). Both start from the same initial state with the same AdamW "
            "hyper-parameters and constant lr as the inner loop."
        ),
        "loss": {
            "syncline": cv(syn.curve),
            "unquantized": cv(unq),
            "baseline_dp": cv(dp),
            "baseline_serial": cv(serial),
            "ratio_syncline_baseline": syn.curve.final / base.final,
            "ratio_syncline_unquantized": syn.curve.final / unq.final if unq else None,
            "ratio_unquantized_baseline": unq.final / base.final if unq else None,
        },
        "communication": communication(su, syn),
        "utilization": util,
        "trainer_rounds": [asdict(r) for r in syn.rounds],
        "aggregation": agg,
        "demo_receipt": receipt,
        "demo_comparable": cfg.is_demo_plan(),
        "machine": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "loadavg_start": [round(v, 2) for v in load_start],
            "loadavg_end": [round(v, 2) for v in os.getloadavg()],
            "bench_seconds": time.perf_counter() - started,
        },
    }
    if not args.no_plot:
        res["plot"] = str(plot(res, args.plot))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=2))
    print_report(res)
    print(f"wrote {args.json}" + (f" and {res['plot']}" if "plot" in res else ""))
    return res


if __name__ == "__main__":
    main()
