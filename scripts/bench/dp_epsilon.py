"""Validation loss against the privacy target ε on the default task (docs/benchmarks.md).

The demo's language task (Shakespeare, the default Llama, 3 trainers on 2 contiguous shards each,
coordinate-median aggregation of int8 outer gradients, outer Nesterov lr 0.7 / momentum 0.9) run
in one process through Syncline's own code, as ``scripts/bench/diloco.py`` does: every trainer's
``InnerLoop`` (DP-SGD through Opacus when ε is finite, its noise and batches from a per-trainer
secret round seed, ``syncline.privacy.noise``), ``quantize`` and ``compute_round``. For each
ε ∈ {1, 5, 10, ∞} (∞: no clipping, no noise) it prints the noise multiplier Opacus's RDP accountant
derives for (ε, δ) at the trainers' sample rate over ``rounds * H`` steps, the ε spent after the
last round (which must be within the target), and the final validation loss; a fifth run clips
per example without noise (σ = 0) to separate the cost of clipping from that of noise. Writes JSON.

Smaller than the demo so the four runs take a few minutes on 2 busy cores: 4 rounds of H=20
(the demo: 8 of 30). Usage::

    .venv/bin/python scripts/bench/dp_epsilon.py                 # the table, JSON in .syncline/bench/
    .venv/bin/python scripts/bench/dp_epsilon.py --rounds 2 --inner-steps 5 --epsilons 5 inf
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from syncline.demo.training_run import DemoPlan
from syncline.modality.language import LanguageAdapter, token_count
from syncline.privacy.accounting import PrivacyPlan
from syncline.privacy.dpsgd import DpSgd
from syncline.privacy.noise import RoundNoise
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import quantize
from syncline.protocol.spec import PrivacySpec
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, compute_round
from syncline.run.agent_config import EVAL_BATCH_SIZE, EVAL_BATCHES, InnerOptimizerConfig
from syncline.run.context import load_weights, max_payload_bytes
from syncline.sponsor.task_builder import cached_corpus
from syncline.trainer.inner_loop import InnerLoop

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / ".syncline" / "bench" / "dp_epsilon.json"
DELTA = 1e-5
CLIP_NORM = 1.0
PLAN = DemoPlan()


def run_one(
    epsilon: float,
    *,
    rounds: int,
    inner_steps: int,
    trainers: int,
    seed: int,
    threads: int,
    clip_only: bool = False,
) -> dict[str, Any]:
    """One run at target ``epsilon`` (inf: plain AdamW; with ``clip_only``, DP-SGD's per-example
    clipping without noise, to separate the cost of clipping from the cost of noise)."""
    torch.set_num_threads(threads)
    corpus = cached_corpus(PLAN.shard_count, PLAN.vocab_size)
    s = PLAN.shard_count
    shards = [list(corpus.shards[p * s // trainers : (p + 1) * s // trainers]) for p in range(trainers)]
    adapter = LanguageAdapter(seq_len=PLAN.seq_len, token_bytes=corpus.token_bytes)
    model_cfg = {**PLAN.model, "vocab_size": PLAN.vocab_size}
    net = adapter.build_model(model_cfg, seed=seed)
    params = {k: v.detach() for k, v in net.named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    state = TrainingState.from_model_state_dict(params, layout)
    windows = min(sum(token_count(x, token_bytes=corpus.token_bytes) for x in held) for held in shards)
    sample_rate = min(1.0, PLAN.batch_size / (windows // PLAN.seq_len))
    plan = (
        PrivacyPlan.for_target(
            PrivacySpec(epsilon, DELTA, CLIP_NORM, sample_rate), rounds=rounds, inner_steps=inner_steps
        )
        if math.isfinite(epsilon)
        else None
    )
    cfg = InnerOptimizerConfig(lr=PLAN.inner_lr, inner_steps=inner_steps, batch_size=PLAN.batch_size)
    dp = DpSgd.of(plan) if plan is not None else (DpSgd(0.0, CLIP_NORM) if clip_only else None)
    loops = [InnerLoop(adapter, adapter.build_model(model_cfg, seed=seed), layout, cfg, privacy=dp) for _ in shards]

    def evaluate(st: TrainingState) -> float:
        load_weights(net, st)
        return adapter.evaluate(net, corpus.validation, batch_size=EVAL_BATCH_SIZE, max_batches=EVAL_BATCHES)

    losses = [evaluate(state)]
    began = time.perf_counter()
    for r in range(rounds):
        subs = []
        for i, loop in enumerate(loops):
            secret = keccak(b"bench-secret" + bytes([i]))
            noise = RoundNoise.derive(
                secret, task_id=1, round_=r, fragment=i, interval=inner_steps, inner_steps=inner_steps
            )
            work = loop.run(state, shards[i], seed=noise.batch_seed, noise=noise)
            qg = quantize(work.pseudo_gradient, 8)
            payload = qg.to_safetensors_bytes()
            subs.append(CommittedSubmission(i, keccak(payload), gradient_chunk_root(qg), payload))
        result = compute_round(
            state,
            subs,
            rule=AggregationRule.COORDINATE_MEDIAN,
            rule_param=0,
            bits=8,
            lr_ppm=700_000,
            momentum_ppm=900_000,
            max_payload_bytes=max_payload_bytes(layout.numel, 8),
        )
        state = result.state
        losses.append(evaluate(state))
        print(f"  eps={epsilon:g} round {r + 1}/{rounds}: val {losses[-1]:.4f}", file=sys.stderr)
    spent = plan.epsilon_per_round([True] * rounds) if plan is not None else []
    return {
        "epsilon_target": epsilon if math.isfinite(epsilon) else None,
        "clip_only": clip_only,
        "delta": DELTA if plan is not None else None,
        "clip_norm": CLIP_NORM if dp is not None else None,
        "sample_rate": sample_rate,
        "noise_multiplier": plan.noise_multiplier if plan is not None else 0.0,
        "epsilon_per_round": spent,
        "epsilon_spent": spent[-1] if spent else None,
        "validation_loss_per_round": losses,
        "validation_loss_final": losses[-1],
        "seconds": round(time.perf_counter() - began, 1),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 5.0, 10.0, math.inf])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--inner-steps", type=int, default=20)
    p.add_argument("--trainers", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    p.add_argument("--no-clip-only", action="store_true", help="skip the clipping-only run (sigma 0)")
    a = p.parse_args(argv)
    common = {"rounds": a.rounds, "inner_steps": a.inner_steps, "trainers": a.trainers, "seed": a.seed}
    runs = [run_one(e, threads=a.threads, **common) for e in a.epsilons]
    if not a.no_clip_only:
        runs.append(run_one(math.inf, threads=a.threads, clip_only=True, **common))
    res = {
        "what": "validation loss against the DP target epsilon on the default task (DP-SGD, Opacus RDP accountant)",
        "config": {
            "rounds": a.rounds,
            "inner_steps": a.inner_steps,
            "trainers": a.trainers,
            "batch_size": PLAN.batch_size,
            "seq_len": PLAN.seq_len,
            "inner_lr": PLAN.inner_lr,
            "rule": "coordinate_median",
            "gradient_bits": 8,
            "seed": a.seed,
            "threads": a.threads,
        },
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.machine()},
        "runs": runs,
    }
    print("\n| target ε | noise multiplier σ | ε spent (δ = 1e-5) | val. loss start | val. loss final | seconds |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        target = (
            f"{run['epsilon_target']:g}"
            if run["epsilon_target"] is not None
            else ("∞ (clipping only, σ = 0)" if run["clip_only"] else "∞ (no DP)")
        )
        spent = "—" if run["epsilon_spent"] is None else f"{run['epsilon_spent']:.3f}"
        print(
            f"| {target} | {run['noise_multiplier']:.3f} | {spent} | {run['validation_loss_per_round'][0]:.4f} | "
            f"{run['validation_loss_final']:.4f} | {run['seconds']:.0f} |"
        )
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nJSON: {a.json}", file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
