"""Calibration of the training-fraud referee's tolerance: honest hardware divergence against cheats.

A referee that does not share the trainer's device class re-executes a segment in its own
precision and accepts the trainer's checkpoint when its distance (``syncline.protocol.tolerance``)
lies inside the spec's envelope. This bench measures, on the demo's model (DemoPlan: a 2-layer
Llama, 558k parameters, batch 8 x 64 tokens, AdamW lr 1e-3; ``--model gpt2`` / ``qwen2``: the same
shape in those families, whose attention biases include a key bias with no gradient; ``tiny``: the
e2e's 1-layer Llama), segments of ``n`` steps started from the checkpoints of an fp32 CPU
trajectory:

* honest pairs -- the trainer's checkpoint against the referee's fp32 CPU replay (1 thread):
  ``cpu-bf16`` (``torch.autocast("cpu", bfloat16)``), ``cpu-fp32`` with 2 threads, and
  ``cuda-fp32`` / ``cuda-bf16`` when ``torch.cuda.is_available()`` (skipped with a note otherwise);
* cheats, all declared ``cpu-bf16`` (the class that gets the tolerance) and trained in bf16, each
  with forged step counts (only the tensors are judged, the cheater's best case): lazy training
  skipping 50 / 25 / 10 % of the segment's steps, one skipped step at a random position, another
  trainer's shards, the learning rate halved, a noise update of the honest update's norm, and the
  honest bf16 update scaled by 1.01 / 1.02 / 1.05 / 1.1; and two that target the one-dimensional
  tensors the envelope's vector floor relaxes: every bias and norm left at its start value
  (``vectors-frozen``), and one random vector moved by ``±d * lr * n`` per coordinate on top of the
  honest update (``vector-shift-{d}``, d = 0.25 / 0.5 / 1).

Every sample is judged against the default envelope (``DEFAULT_VERIFICATION.tolerance``); the
table gives per pair the honest maxima and the false convictions, per cheat the detection rate and
its smallest distance. ``--json PATH`` writes the same as JSON.

Usage::

    .venv/bin/python scripts/bench/referee_tolerance.py --quick        # n=10, 50 samples (~3 min, 2 cores)
    .venv/bin/python scripts/bench/referee_tolerance.py --json .syncline/bench/referee_tolerance.json
    .venv/bin/python scripts/bench/referee_tolerance.py --quick --steps 1 2 --model gpt2   # short segments

``--cpu-capabilities`` measures instead how far apart honest ``cpu-fp32`` replays of the same
segments are when they run on other CPU kernels (``ATEN_CPU_CAPABILITY`` = ``avx512``, ``avx2``,
``default`` = scalar; each in a process of its own, as torch reads it once), for every ordered
pair (trainer, referee), next to the lazy / noise / scaled cheats' distances from the same
referee's replay, and whether the derivation segment (checkpoint -> quantized payload) gives the
same bytes on every instruction set. The referee compares same-class checkpoints bit for bit and
falls back to this envelope when the hash misses (``docs/protocol.md`` §13.6)::

    .venv/bin/python scripts/bench/referee_tolerance.py --cpu-capabilities --model tiny --samples 10 \\
        --json .syncline/bench/cpu_capabilities.json

Segments of 1 or 2 steps are where the whole-vector bound's floor (``weight_floor / sqrt(n)``)
decides: a new AdamW's first steps are about ``lr * sign(g)`` and bf16 flips the sign of
near-zero gradients, so the round's first segment diverges most.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import torch

from syncline.court.referee import kernel_description
from syncline.demo.trainer_setup import TrainerSetup, build_trainer_setup
from syncline.demo.training_run import DemoPlan
from syncline.protocol.checkpoints import Checkpoint
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.seeds import round_seed
from syncline.protocol.spec import DEFAULT_VERIFICATION, ToleranceModel
from syncline.protocol.state import TrainingState
from syncline.protocol.tolerance import SegmentDistance, compare, judge, segment_distance
from syncline.trainer.inner_loop import InnerLoop, replay_environment
from syncline.trainer.segments import derive_payload

PLAN = DemoPlan()
TASK_ID = 1
SCALES = (1.01, 1.02, 1.05, 1.1)
VECTOR_SHIFTS = (0.25, 0.5, 1.0)
LISTED_CHEATS = ("lazy-50%", "lazy-25%", "lazy-10%", "wrong-shard", "lr-x0.5", "noise")
FAMILY_MODELS: dict[str, dict[str, Any]] = {
    "gpt2": {"family": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 64},
    "qwen2": {
        "family": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "tie_word_embeddings": True,
    },
}
"""The demo's shape in other families (``--model gpt2`` / ``qwen2``), on the demo's data and AdamW."""
TINY_FAMILY_MODELS: dict[str, dict[str, Any]] = {
    "tiny-gpt2": {"family": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 32},
    "tiny-qwen2": {
        "family": "qwen2",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
        "tie_word_embeddings": True,
    },
}
"""The e2e's tiny shape in other families (``--model tiny-gpt2`` / ``tiny-qwen2``), on its data and AdamW (lr 3e-3)."""
REQUIRED_HONEST = 50
REQUIRED_DETECTION = 0.99
FRESH_EVERY = 5  # one sample in five is a round's first segment from a new optimizer


@dataclass
class Tally:
    """Distances of one honest pair or one cheat over every sample."""

    name: str
    distances: list[SegmentDistance] = field(default_factory=list)
    outside: int = 0  # judged outside the envelope (a conviction)

    def add(self, distance: SegmentDistance, within: bool) -> None:
        self.distances.append(distance)
        self.outside += 0 if within else 1

    def maxima(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            k: max(float(getattr(d, k)) for d in self.distances) for k in SegmentDistance.MEASURES
        }
        out["worst_tensor"] = max(self.distances, key=lambda d: d.weight_rel_l2_tensor).worst_tensor
        # the whole-vector ratio of the segments holding AdamW's first step (their bound has the floor)
        # and of the others
        for key, first in (("weight_rel_l2_first_step", True), ("weight_rel_l2_later", False)):
            values = [d.weight_rel_l2 for d in self.distances if d.first_step == first]
            out[key] = max(values) if values else float("nan")
        return out

    def minima(self) -> dict[str, float]:
        keys = ("weight_rel_l2", "weight_rel_l2_tensor", "exp_avg_rel_l2")
        return {k: min(float(getattr(d, k)) for d in self.distances) for k in keys}


def trajectory(setup: TrainerSetup, steps: int, samples: int) -> list[tuple[int, int, Checkpoint, Checkpoint]]:
    """``(seed, start, c_s, c_{s+1})`` of consecutive ``steps``-step segments of an fp32 CPU run
    (1 thread): the referee's replay of each segment is its next checkpoint."""
    loop = setup.loop()
    per_round = max(1, setup.inner.inner_steps // steps)
    out: list[tuple[int, int, Checkpoint, Checkpoint]] = []
    state = setup.initial
    round_ = 0
    while len(out) < samples:
        seed = round_seed(TASK_ID, round_, 0)
        cfg = dataclasses.replace(setup.inner, inner_steps=per_round * steps)
        loop.cfg = cfg
        with replay_environment(1):
            work = loop.run(state, setup.shards, seed=seed, checkpoint_interval=steps)
        ckpts = [Checkpoint.from_bytes(b) for b in work.checkpoints]
        out += [(seed, i * steps, ckpts[i], ckpts[i + 1]) for i in range(per_round)]
        state = TrainingState.from_model_state_dict(
            {k: v.detach() for k, v in loop.model.named_parameters()}, setup.layout
        )
        round_ += 1
    return out[:samples]


def run_steps(
    loop: InnerLoop,
    start_ckpt: Checkpoint,
    shards: Sequence[bytes],
    *,
    seed: int,
    start: int,
    steps: int,
    dtype: str = "bf16",
    threads: int = 1,
    skip: frozenset[int] = frozenset(),
    lr_factor: float = 1.0,
) -> Checkpoint:
    """Steps ``[start, start + steps)`` from ``start_ckpt``, skipping the steps in ``skip`` (their
    batches are drawn and dropped) and with the learning rate scaled; the result is labelled with
    the honest step number and step counts (what a cheater forges)."""
    with replay_environment(threads):
        loop.restore(start_ckpt)
        loop.dtype = dtype
        for group in loop.optimizer.param_groups:
            group["lr"] = start_ckpt.optimizer.lr * lr_factor
        batches = loop.adapter.batches(shards, batch_size=loop.batch_size, seed=seed, steps=start + steps)
        for i, batch in enumerate(islice(batches, start, start + steps)):
            if i not in skip:
                loop._step(batch)
        done = loop.checkpoint(start + steps)
    honest_counts = tuple(c + steps for c in start_ckpt.adam_steps)
    return dataclasses.replace(done, optimizer=start_ckpt.optimizer, adam_steps=honest_counts)


def with_params(ckpt: Checkpoint, params: torch.Tensor) -> Checkpoint:
    return dataclasses.replace(ckpt, params=params.contiguous())


@dataclass
class Sample:
    """One segment: the round's seed, its first step, the start checkpoint and the referee's replay."""

    seed: int
    start: int
    c0: Checkpoint
    replay: Checkpoint
    fresh: bool


def fresh_samples(setup: TrainerSetup, steps: int, count: int) -> list[Sample]:
    """First segments of round 0 (initial weights, a new AdamW: the largest honest divergence, as
    Adam's first steps are about ``lr * sign(g)``), each on another data seed."""
    out = []
    cfg = dataclasses.replace(setup.inner, inner_steps=steps)
    for k in range(count):
        loop = setup.loop()
        loop.cfg = cfg
        seed = round_seed(TASK_ID, 1000 + k, 0)
        with replay_environment(1):
            work = loop.run(setup.initial, setup.shards, seed=seed, checkpoint_interval=steps)
        c0, c1 = (Checkpoint.from_bytes(b) for b in work.checkpoints)
        out.append(Sample(seed, 0, c0, c1, True))
    return out


def measure(
    setup: TrainerSetup,
    sample: Sample,
    steps: int,
    model: ToleranceModel,
    loops: dict[str, InnerLoop],
    rng: random.Random,
    honest: dict[str, Tally],
    cheats: dict[str, Tally],
) -> None:
    """Judge every honest pair and every cheat on one sample."""
    c0, replay = sample.c0, sample.replay

    def go(loop: str = "cpu", **kw: Any) -> Checkpoint:
        shards = kw.pop("shards", setup.shards)
        return run_steps(loops[loop], c0, shards, seed=sample.seed, start=sample.start, steps=steps, **kw)

    def honest_pair(name: str, claimed: Checkpoint) -> None:
        v = compare(c0, claimed, replay, setup.layout, model)
        honest.setdefault(name, Tally(name)).add(v.distance, v.within)

    def cheat(name: str, claimed: Checkpoint) -> None:
        d = segment_distance(c0, claimed, replay, setup.layout, steps=steps, vector_floor=model.vector_floor)
        cheats.setdefault(name, Tally(name)).add(d, judge(d, model).within)

    bf16 = go(dtype="bf16")
    honest_pair("cpu-bf16", bf16)
    honest_pair("cpu-fp32-2-threads", go(dtype="fp32", threads=2))
    if "cuda" in loops:
        for dtype in ("fp32", "bf16"):
            honest_pair(f"cuda-{dtype}", go(loop="cuda", dtype=dtype))
    for pct in (50, 25, 10):
        skipped = max(1, math.ceil(steps * pct / 100))
        cheat(f"lazy-{pct}%", go(skip=frozenset(range(steps - skipped, steps))))
    cheat("skip-1-step", go(skip=frozenset({rng.randrange(steps)})))
    cheat("wrong-shard", go(shards=setup.other_shards))
    cheat("lr-x0.5", go(lr_factor=0.5))
    update = bf16.params - c0.params
    noise = torch.randn(update.shape, generator=torch.Generator().manual_seed(rng.randrange(2**31)))
    cheat("noise", with_params(bf16, c0.params + noise * (update.norm() / noise.norm())))
    for f in SCALES:
        cheat(f"scale-x{f}", with_params(bf16, c0.params + f * update))
    vectors = [e for e in setup.layout.entries if len(e.shape) <= 1]
    if vectors:
        frozen = bf16.params.clone()
        for e in vectors:
            frozen[e.offset : e.offset + e.numel] = c0.params[e.offset : e.offset + e.numel]
        cheat("vectors-frozen", with_params(bf16, frozen))
        target = vectors[rng.randrange(len(vectors))]
        signs = torch.randint(0, 2, (target.numel,), generator=torch.Generator().manual_seed(rng.randrange(2**31)))
        for d in VECTOR_SHIFTS:
            shifted = bf16.params.clone()
            step = d * c0.optimizer.lr * steps
            shifted[target.offset : target.offset + target.numel] += (2.0 * signs - 1.0) * step
            cheat(f"vector-shift-{d}", with_params(bf16, shifted))


def run(steps_list: Sequence[int], samples: int, model: ToleranceModel, setup: TrainerSetup) -> dict[str, Any]:
    torch.manual_seed(0)
    rng = random.Random(0)
    loops = {"cpu": setup.loop()}
    if torch.cuda.is_available():
        loops["cuda"] = setup.loop("cuda")
    results: list[dict[str, Any]] = []
    for steps in steps_list:
        began = time.perf_counter()
        fresh = max(1, samples // FRESH_EVERY)
        segs = fresh_samples(setup, steps, fresh) + [
            Sample(seed, start, c0, c1, False) for seed, start, c0, c1 in trajectory(setup, steps, samples - fresh)
        ]
        honest: dict[str, Tally] = {}
        cheats: dict[str, Tally] = {}
        for sample in segs:
            measure(setup, sample, steps, model, loops, rng, honest, cheats)
        results.append(summarize(steps, len(segs), fresh, model, honest, cheats, time.perf_counter() - began))
    return {
        "model": setup.name + " " + json.dumps(setup.model_config, sort_keys=True),
        "numel": setup.layout.numel,
        "inner_lr": setup.inner.lr,
        "batch_size": setup.inner.batch_size,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "cuda_note": None if torch.cuda.is_available() else "no GPU here: the CUDA pairs were skipped",
        "envelope": dataclasses.asdict(model),
        # pooled over every segment length (each length's own figures are in by_segment_length)
        "honest_replays": sum(r["honest_replays"] for r in results),
        "false_convictions": sum(r["false_convictions"] for r in results),
        "cheats": {
            name: {
                "detection_rate": sum(r["cheats"][name]["detection_rate"] * r["samples"] for r in results)
                / sum(r["samples"] for r in results)
            }
            for name in results[0]["cheats"]
        },
        "by_segment_length": results,
    }


def summarize(
    steps: int,
    samples: int,
    fresh: int,
    model: ToleranceModel,
    honest: dict[str, Tally],
    cheats: dict[str, Tally],
    seconds: float,
) -> dict[str, Any]:
    detected = {n: t.outside / len(t.distances) for n, t in cheats.items()}
    scaled = [f for f in SCALES if detected[f"scale-x{f}"] >= REQUIRED_DETECTION]
    return {
        "steps": steps,
        "samples": samples,
        "fresh_samples": fresh,
        "seconds": round(seconds, 1),
        "envelope": {
            "weight_rel_l2": model.weight_bound(steps),
            # a segment holding AdamW's first step (one sample in five here): at least weight_floor / sqrt(n)
            "weight_rel_l2_first_step": model.weight_bound(steps, first_step=True),
            "weight_rel_l2_tensor": model.tensor_bound(steps),
            # the largest RMS change per coordinate of a vector, in lr * n, the floor lets through
            "vector_rms_lr": model.tensor_bound(steps) * model.vector_floor / math.sqrt(steps),
            "weight_max_abs_lr": model.max_abs_lr,
            "moments_rel_l2": model.moment_bound(steps),
        },
        "honest": {
            n: {"honest_replays": len(t.distances), "false_convictions": t.outside, "max": t.maxima()}
            for n, t in honest.items()
        },
        "honest_replays": sum(len(t.distances) for t in honest.values()),
        "false_convictions": sum(t.outside for t in honest.values()),
        "cheats": {
            n: {"detection_rate": detected[n], "trials": len(t.distances), "min": t.minima()} for n, t in cheats.items()
        },
        "smallest_scale_detected": min(scaled) if scaled else None,
        "meets_requirements": all(t.outside == 0 and len(t.distances) >= REQUIRED_HONEST for t in honest.values())
        and all(detected[n] >= REQUIRED_DETECTION for n in LISTED_CHEATS),
    }


def print_table(report: dict[str, Any]) -> None:
    name, numel, lr = report["model"].split()[0], report["numel"], report["inner_lr"]
    print(f"\nreferee tolerance, {name} model, {numel} parameters (lr {lr}); {report['cuda_note'] or ''}")
    for r in report["by_segment_length"]:
        env = r["envelope"]
        print(
            f"\n-- segments of {r['steps']} steps, {r['samples']} samples ({r['fresh_samples']} from a new optimizer), "
            f"{r['seconds']} s; envelope: weights "
            f"{env['weight_rel_l2']:.4f} (from AdamW's first step {env['weight_rel_l2_first_step']:.4f}; "
            f"per tensor {env['weight_rel_l2_tensor']:.4f}), moments "
            f"{env['moments_rel_l2']:.4f}, max-abs {env['weight_max_abs_lr']:.2f} lr/step, a vector's RMS "
            f"{env['vector_rms_lr']:.3f} lr/step"
        )
        print(
            f"{'honest pair':<22}{'replays':>8}{'convicted':>10}{'w-L2':>9}{'w-tensor':>10}{'max-abs':>9}"
            f"{'m1-L2':>9}{'m2-L2':>9}   (maxima)"
        )
        for n, h in r["honest"].items():
            m = h["max"]
            print(
                f"{n:<22}{h['honest_replays']:>8}{h['false_convictions']:>10}{m['weight_rel_l2']:>9.4f}"
                f"{m['weight_rel_l2_tensor']:>10.4f}{m['weight_max_abs_lr']:>9.3f}{m['exp_avg_rel_l2']:>9.4f}"
                f"{m['exp_avg_sq_rel_l2']:>9.4f}   {m['worst_tensor']}; w-L2 from a first step "
                f"{m['weight_rel_l2_first_step']:.4f}, later {m['weight_rel_l2_later']:.4f}"
            )
        print(f"{'cheat':<22}{'trials':>8}{'detected':>10}{'w-L2':>9}{'w-tensor':>10}{'m1-L2':>9}   (minima)")
        for n, c in r["cheats"].items():
            m = c["min"]
            print(
                f"{n:<22}{c['trials']:>8}{c['detection_rate']:>10.1%}{m['weight_rel_l2']:>9.4f}"
                f"{m['weight_rel_l2_tensor']:>10.4f}{m['exp_avg_rel_l2']:>9.4f}"
            )
        print(
            f"honest replays {r['honest_replays']}, false convictions {r['false_convictions']}; smallest scaled "
            f"update detected >= 99%: x{r['smallest_scale_detected']}; requirements met: {r['meets_requirements']}"
        )


def trainer_setup(which: str) -> TrainerSetup:
    """``demo`` / ``tiny`` (:func:`build_trainer_setup`), or the demo's setup with the model of
    :data:`FAMILY_MODELS` / the tiny one with that of :data:`TINY_FAMILY_MODELS` (its own initial
    weights and layout)."""
    if which not in FAMILY_MODELS and which not in TINY_FAMILY_MODELS:
        return build_trainer_setup(which)
    demo = build_trainer_setup("demo" if which in FAMILY_MODELS else "tiny")
    config = (FAMILY_MODELS | TINY_FAMILY_MODELS)[which] | {"vocab_size": demo.model_config["vocab_size"]}
    params = {k: v.detach() for k, v in demo.adapter.build_model(config, seed=0).named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    initial = TrainingState.from_model_state_dict(params, layout)
    return dataclasses.replace(demo, name=which, layout=layout, initial=initial, model_config=config)


# ---------------------------------------------------------------------- --cpu-capabilities

CAPABILITIES = ("avx512", "avx2", "default")
ISA_CHEATS = ("lazy-50%", "lazy-10%", "skip-1-step", "noise", "scale-x1.01", "scale-x1.1")


def isa_worker(directory: Path, which: str) -> None:
    """In a process whose kernels ``ATEN_CPU_CAPABILITY`` chose: replay every sample of
    ``directory/samples.json`` in fp32 (1 thread) from its start checkpoint, write the results,
    and derive the payload of each sample's common end checkpoint against the initial state (the
    derivation segment, which must give the same bytes on every instruction set)."""
    setup = trainer_setup(which)
    index = json.loads((directory / "samples.json").read_text())
    loop = setup.loop()
    start_state = TrainingState.from_bytes((directory / "start.bin").read_bytes())
    out: dict[str, Any] = {"kernels": kernel_description(), "payloads": []}
    for i, sample in enumerate(index["samples"]):
        c0 = Checkpoint.from_bytes((directory / f"start-{i}.bin").read_bytes())
        done = run_steps(
            loop, c0, setup.shards, seed=sample["seed"], start=sample["start"], steps=sample["steps"], dtype="fp32"
        )
        name = f"replay-{out['kernels'].split()[0]}-{i}.bin"
        (directory / name).write_bytes(done.to_bytes())
        # the derivation of one common checkpoint (this sample's end as the parent replayed it)
        end = Checkpoint.from_bytes((directory / f"end-{i}.bin").read_bytes())
        payload, root = derive_payload(start_state, end, 8)
        out["payloads"].append(keccak(payload).hex() + root.hex())
    requested = os.environ.get("ATEN_CPU_CAPABILITY", "native")
    (directory / f"result-{requested}.json").write_text(json.dumps(out))


def _spawn_isa_worker(capability: str, directory: Path, which: str) -> dict[str, Any]:
    """Run :func:`isa_worker` on ``capability``'s kernels (a CPU without them runs its best below)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    subprocess.run([sys.executable, __file__, "--isa-worker", str(directory), "--model", which], env=env, check=True)
    result: dict[str, Any] = json.loads((directory / f"result-{capability}.json").read_text())
    return result | {"file": result["kernels"].split()[0], "requested": capability}


def run_cpu_capabilities(which: str, steps: int, samples: int, model: ToleranceModel) -> dict[str, Any]:
    """Honest cross-kernel distances of every ordered pair and the cheats' distances, per sample."""
    setup = trainer_setup(which)
    torch.manual_seed(0)
    rng = random.Random(0)
    fresh = max(1, samples // FRESH_EVERY)
    segs = fresh_samples(setup, steps, fresh) + [
        Sample(seed, start, c0, c1, False) for seed, start, c0, c1 in trajectory(setup, steps, samples - fresh)
    ]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="isa-") as tmp:
        directory = Path(tmp)
        (directory / "start.bin").write_bytes(setup.initial.to_bytes())
        for i, sample in enumerate(segs):
            (directory / f"start-{i}.bin").write_bytes(sample.c0.to_bytes())
            (directory / f"end-{i}.bin").write_bytes(sample.replay.to_bytes())
        index = {"samples": [{"seed": x.seed, "start": x.start, "steps": steps} for x in segs]}
        (directory / "samples.json").write_text(json.dumps(index))
        runs = [_spawn_isa_worker(c, directory, which) for c in CAPABILITIES]
        kernels = {r["file"]: r for r in runs}  # one entry per distinct instruction set actually run
        replays = {
            k: [Checkpoint.from_bytes((directory / f"replay-{k}-{i}.bin").read_bytes()) for i in range(len(segs))]
            for k in kernels
        }
    derivation_exact = len({tuple(r["payloads"]) for r in runs}) == 1
    honest: dict[str, Tally] = {}
    bit_exact: dict[str, int] = {}
    for trainer in kernels:
        for referee in kernels:
            if trainer == referee:
                continue
            name = f"{trainer}->{referee}"
            for i, sample in enumerate(segs):
                claimed, replayed = replays[trainer][i], replays[referee][i]
                bit_exact[name] = bit_exact.get(name, 0) + (claimed.to_bytes() == replayed.to_bytes())
                v = compare(sample.c0, claimed, replayed, setup.layout, model)
                honest.setdefault(name, Tally(name)).add(v.distance, v.within)
    # the cheats, trained here, against this process's replay (the referee's)
    cheats: dict[str, Tally] = {}
    loop = setup.loop()
    for sample in segs:
        c0, replay = sample.c0, sample.replay

        def go(loop: InnerLoop = loop, c0: Checkpoint = c0, sample: Sample = sample, **kw: Any) -> Checkpoint:
            return run_steps(
                loop, c0, setup.shards, seed=sample.seed, start=sample.start, steps=steps, dtype="fp32", **kw
            )

        def cheat(name: str, claimed: Checkpoint, c0: Checkpoint = c0, replay: Checkpoint = replay) -> None:
            d = segment_distance(c0, claimed, replay, setup.layout, steps=steps, vector_floor=model.vector_floor)
            cheats.setdefault(name, Tally(name)).add(d, judge(d, model).within)

        for pct in (50, 10):
            skipped = max(1, math.ceil(steps * pct / 100))
            cheat(f"lazy-{pct}%", go(skip=frozenset(range(steps - skipped, steps))))
        cheat("skip-1-step", go(skip=frozenset({rng.randrange(steps)})))
        update = replay.params - c0.params
        noise = torch.randn(update.shape, generator=torch.Generator().manual_seed(rng.randrange(2**31)))
        cheat("noise", with_params(replay, c0.params + noise * (update.norm() / noise.norm())))
        for f in (1.01, 1.1):
            cheat(f"scale-x{f}", with_params(replay, c0.params + f * update))
    return {
        "model": setup.name + " " + json.dumps(setup.model_config, sort_keys=True),
        "numel": setup.layout.numel,
        "steps": steps,
        "samples": len(segs),
        "fresh_samples": fresh,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "kernels": {r["requested"]: r["kernels"] for r in runs},
        "derivation_exact": derivation_exact,
        "envelope": {
            "weight_rel_l2": model.weight_bound(steps),
            "weight_rel_l2_first_step": model.weight_bound(steps, first_step=True),
            "weight_rel_l2_tensor": model.tensor_bound(steps),
            "weight_max_abs_lr": model.max_abs_lr,
            "moments_rel_l2": model.moment_bound(steps),
        },
        "honest": {
            n: {
                "replays": len(t.distances),
                "bit_exact": bit_exact[n],
                "false_convictions": t.outside,
                "max": t.maxima(),
            }
            for n, t in honest.items()
        },
        "cheats": {n: {"detection_rate": t.outside / len(t.distances), "min": t.minima()} for n, t in cheats.items()},
        "seconds": round(time.perf_counter() - began, 1),
    }


def print_cpu_capabilities(report: dict[str, Any]) -> None:
    env = report["envelope"]
    print(
        f"\nCPU kernels, {report['model'].split()[0]} model, {report['numel']} parameters, segments of "
        f"{report['steps']} steps, {report['samples']} samples; kernels: "
        + ", ".join(f"{k}={v}" for k, v in report["kernels"].items())
    )
    print(
        f"envelope: weights {env['weight_rel_l2']:.4f} (first step {env['weight_rel_l2_first_step']:.4f}), per tensor "
        f"{env['weight_rel_l2_tensor']:.4f}, max-abs {env['weight_max_abs_lr']:.2f}, "
        f"moments {env['moments_rel_l2']:.4f}; "
        f"derivation bit-exact across kernels: {report['derivation_exact']}"
    )
    print(
        f"{'honest trainer->referee':<24}{'bit-exact':>10}{'convicted':>10}{'w-L2':>11}{'w-tensor':>11}"
        f"{'max-abs':>11}{'m1-L2':>11}{'m2-L2':>11}   (maxima)"
    )
    for n, h in report["honest"].items():
        m = h["max"]
        print(
            f"{n:<24}{h['bit_exact']:>7}/{h['replays']:<2}{h['false_convictions']:>10}{m['weight_rel_l2']:>11.3g}"
            f"{m['weight_rel_l2_tensor']:>11.3g}{m['weight_max_abs_lr']:>11.3g}{m['exp_avg_rel_l2']:>11.3g}{m['exp_avg_sq_rel_l2']:>11.3g}"
        )
    print(f"{'cheat':<24}{'detected':>10}{'w-L2 min':>11}{'w-tensor min':>13}")
    for n, c in report["cheats"].items():
        m = c["min"]
        print(f"{n:<24}{c['detection_rate']:>10.0%}{m['weight_rel_l2']:>11.3g}{m['weight_rel_l2_tensor']:>13.3g}")


def main(argv: Sequence[str] | None = None, *, out: Callable[[dict[str, Any]], None] = print_table) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="segments of 10 steps only, 50 samples (< 5 min)")
    parser.add_argument("--samples", type=int, default=None, help="samples per segment length (default 100, quick 50)")
    parser.add_argument("--steps", type=int, nargs="*", default=None, help="segment lengths (default 4 10 20)")
    parser.add_argument(
        "--model",
        choices=("demo", "tiny", *FAMILY_MODELS, *TINY_FAMILY_MODELS),
        default="demo",
        help="demo (default), the e2e's tiny, the demo's shape as gpt2 / qwen2, the tiny one as tiny-gpt2 / tiny-qwen2",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument(
        "--cpu-capabilities",
        action="store_true",
        help="honest fp32 replays on AVX-512 / AVX2 / scalar kernels against each other and the cheats (one length)",
    )
    parser.add_argument("--isa-worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.isa_worker is not None:
        isa_worker(args.isa_worker, args.model)
        return 0
    if args.cpu_capabilities:
        steps = (args.steps or [4 if args.model.startswith("tiny") else PLAN.checkpoint_interval])[0]
        report = run_cpu_capabilities(args.model, steps, args.samples or 20, DEFAULT_VERIFICATION.tolerance)
        print_cpu_capabilities(report)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2))
        honest_ok = all(h["false_convictions"] == 0 for h in report["honest"].values())
        cheats_ok = all(
            report["cheats"][n]["detection_rate"] >= REQUIRED_DETECTION for n in ("lazy-50%", "lazy-10%", "noise")
        )
        return 0 if honest_ok and cheats_ok and report["derivation_exact"] else 1
    samples = args.samples or (REQUIRED_HONEST if args.quick else 100)
    default_steps = [4] if args.model.startswith("tiny") else [PLAN.checkpoint_interval] if args.quick else [4, 10, 20]
    steps = args.steps or default_steps
    if samples < 1 or any(s < 1 for s in steps):
        parser.error("--samples and --steps must be positive")
    began = time.perf_counter()
    report = run(steps, samples, DEFAULT_VERIFICATION.tolerance, trainer_setup(args.model))
    report["seconds"] = round(time.perf_counter() - began, 1)
    report["quick"] = bool(args.quick)
    out(report)
    print(f"\ntotal {report['seconds']} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if all(r["meets_requirements"] for r in report["by_segment_length"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
