"""The trainer on a GPU: inner-loop throughput per device class, what deterministic mode costs, and
a CPU referee's verdicts on the segments a GPU trained (issue 11, item 4).

On the demo's model and data (DemoPlan: a 2-layer Llama, 558k parameters, batch 8 x 64 tokens,
AdamW lr 1e-3, H = 30 inner steps with a checkpoint every 10), one trainer runs ``--rounds``
(default 3) rounds of :meth:`InnerLoop.run` with checkpoint capture per setting (each round starts from the
weights the previous one ended in; the AdamW state carries over, as in DiLoCo):

* ``cpu-fp32`` always;
* with ``torch.cuda.is_available()``: ``cuda-fp32``, ``cuda-bf16`` (autocast) and ``cuda-bf16-gc``
  (bf16 with gradient checkpointing), each non-deterministic and deterministic (the trainer
  config's ``deterministic`` option, ``InnerLoop(deterministic=True)``:
  ``torch.use_deterministic_algorithms`` and cuDNN's flag, with ``CUBLAS_WORKSPACE_CONFIG`` set
  before cuBLAS starts; the mode a checkpoint's header declares);
* without a GPU: ``cpu-bf16`` (``torch.autocast("cpu", bfloat16)``), the CPU stand-in that runs
  the same code path as the CUDA rows here.

Per row: ``tokens_per_s`` and ``steps_per_s`` over the training time (``RoundWork.train_seconds``:
checkpoint capture excluded, the device synchronized), ``seconds``, ``peak_memory_bytes`` (CUDA's
max allocated; null on CPU) and ``deterministic_overhead`` (deterministic over non-deterministic
seconds of the same setting; null on CPU, which is always deterministic). A few untimed warm-up
steps precede each row.

Every row but ``cpu-fp32`` (the referee's own class, replayed bit for bit) is then judged by the
default referee, CPU fp32, on its first ``--judge-rounds`` (default 2) rounds: the checkpoints are
committed as a trainer commits them (payload and chunk root from the outer gradient, root over the
checkpoint hashes), served from memory, and ``check_segment`` (``syncline.court.referee``'s pure
core) judges each training segment and the derivation segment against the spec's envelope; each
verdict keeps the distance the referee logged. A failing row (an op without a deterministic CUDA
kernel) is reported, not fatal. Required: innocent everywhere (``false_convictions == 0``). The
exit code is 1 otherwise, or when a row failed.

Usage::

    .venv/bin/python scripts/bench/gpu_trainer.py --quick        # 1 round (~10 s on 2 CPU cores)
    .venv/bin/python scripts/bench/gpu_trainer.py --rounds 10 --json .syncline/bench/gpu_trainer.json
    .venv/bin/python scripts/bench/gpu_trainer.py --tiny         # the fraud e2e's tiny model (tests)
    .venv/bin/python scripts/bench/gpu_trainer.py --settings cpu-fp32 cpu-bf16-gc
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from structlog.testing import capture_logs

from syncline.court.referee import CPU_FP32, Claim, ReplayInputs, Undecided, check_segment
from syncline.demo.trainer_setup import TrainerSetup, build_trainer_setup
from syncline.demo.training_run import DemoPlan
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointManifest,
    checkpoint_hash,
    checkpoint_root,
    segment_count,
)
from syncline.protocol.hashing import keccak
from syncline.protocol.seeds import round_seed
from syncline.protocol.spec import DEFAULT_VERIFICATION
from syncline.protocol.state import TrainingState
from syncline.protocol.tolerance import SegmentDistance
from syncline.trainer.inner_loop import CUBLAS_WORKSPACE, InnerLoop, RoundWork, replay_environment
from syncline.trainer.segments import encode_payload

PLAN = DemoPlan()
TASK_ID = 1
FRAGMENT = 0
GRADIENT_BITS = 8
WARMUP_STEPS = 2
CPU_NOTE = "no GPU here: CUDA rows skipped; the CPU bf16 autocast row stands in"
MEASURES = SegmentDistance.MEASURES
SETTING_NAME = re.compile(r"(cpu|cuda)-(fp32|bf16)(-gc)?")


@dataclass(frozen=True)
class Setting:
    """One row: where the trainer runs, its autocast dtype, gradient checkpointing, deterministic mode."""

    device: str
    dtype: str
    checkpointing: bool = False
    deterministic: bool = True

    @property
    def device_class(self) -> str:
        return f"{self.device}-{self.dtype}"

    @property
    def setting(self) -> str:
        """The name shared by the deterministic and non-deterministic rows of a setting."""
        return self.device_class + ("-gc" if self.checkpointing else "")

    @property
    def name(self) -> str:
        if self.device == "cpu":
            return self.setting
        return self.setting + (" det" if self.deterministic else " nondet")


def parse_settings(names: Sequence[str]) -> list[Setting]:
    """``device-dtype[-gc]`` names to rows: a CUDA setting gives a non-deterministic and a
    deterministic row, a CPU one a single row (CPU torch is deterministic)."""
    rows: list[Setting] = []
    for name in names:
        match = SETTING_NAME.fullmatch(name)
        if match is None:
            raise ValueError(f"setting {name!r} is not device-dtype[-gc] (device cpu|cuda, dtype fp32|bf16)")
        device, dtype, gc = match.group(1), match.group(2), bool(match.group(3))
        modes = (True,) if device == "cpu" else (False, True)
        rows += [Setting(device, dtype, gc, deterministic) for deterministic in modes]
    return list(dict.fromkeys(rows))


def default_settings(cuda: bool) -> list[str]:
    return ["cpu-fp32", "cuda-fp32", "cuda-bf16", "cuda-bf16-gc"] if cuda else ["cpu-fp32", "cpu-bf16"]


def setting_loop(setup: TrainerSetup, setting: Setting, steps: int) -> InnerLoop:
    """The trainer's inner loop in ``setting`` (deterministic mode as the trainer agent's
    ``deterministic`` option sets it: :class:`InnerLoop` ``deterministic``)."""
    return setup.loop(
        setting.device,
        dtype=setting.dtype,
        steps=steps,
        gradient_checkpointing=setting.checkpointing,
        deterministic=setting.deterministic,
    )


@dataclass(frozen=True)
class RoundRun:
    """One round a row trained: what a referee of that round needs."""

    round: int
    seed: int
    start: TrainingState
    work: RoundWork


@dataclass(frozen=True)
class Geometry:
    rounds: int
    steps: int
    interval: int
    threads: int

    @property
    def segments(self) -> int:
        return segment_count(self.steps, self.interval)


def train(setup: TrainerSetup, setting: Setting, geo: Geometry) -> tuple[dict[str, Any], list[RoundRun]]:
    """``geo.rounds`` rounds of the inner loop in ``setting``, after untimed warm-up steps: the
    row's figures and the rounds (each starts from the weights the previous one ended in)."""
    cuda = setting.device == "cuda"
    with replay_environment(geo.threads):
        warm = setting_loop(setup, setting, WARMUP_STEPS)
        warm.run(setup.initial, setup.shards, seed=round_seed(TASK_ID, 10**6, FRAGMENT))
        del warm
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        loop = setting_loop(setup, setting, geo.steps)
        state = setup.initial
        runs: list[RoundRun] = []
        wall = 0.0
        for round_ in range(geo.rounds):
            seed = round_seed(TASK_ID, round_, FRAGMENT)
            began = time.perf_counter()
            work = loop.run(state, setup.shards, seed=seed, checkpoint_interval=geo.interval)
            wall += time.perf_counter() - began
            runs.append(RoundRun(round_, seed, state, work))
            last = Checkpoint.from_bytes(work.checkpoints[-1])
            state = TrainingState.from_model_state_dict(setup.layout.unflatten(last.params), setup.layout)
        peak = int(torch.cuda.max_memory_allocated()) if cuda else None
        declared = Checkpoint.from_bytes(runs[0].work.checkpoints[0])
    seconds = sum(r.work.train_seconds for r in runs)
    tokens = sum(r.work.tokens for r in runs)
    steps = sum(len(r.work.losses) for r in runs)
    row = {
        "name": setting.name,
        "setting": setting.setting,
        "device_class": setting.device_class,
        "gradient_checkpointing": setting.checkpointing,
        "deterministic": declared.deterministic,  # what the checkpoints declare
        "rounds": geo.rounds,
        "steps": steps,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "checkpoint_seconds": round(wall - seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "steps_per_s": round(steps / seconds, 3),
        "peak_memory_bytes": peak,
        "deterministic_overhead": None,
        "last_round_mean_loss": round(runs[-1].work.mean_loss, 4),
    }
    return row, runs


def commit(
    run: RoundRun, geo: Geometry
) -> tuple[Claim, CheckpointManifest, Callable[[CheckpointManifest, int], bytes]]:
    """What the trainer agent commits for ``run`` (payload hash, chunk root, checkpoint root), its
    manifest and a fetcher over the checkpoints held in memory."""
    blobs = run.work.checkpoints
    payload, chunk_root = encode_payload(run.work.pseudo_gradient, GRADIENT_BITS)
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    claim = Claim(bytes(keccak(payload)), chunk_root, checkpoint_root(hashes))
    manifest = CheckpointManifest(geo.interval, geo.steps, hashes, ("",) * len(blobs))
    return claim, manifest, lambda _manifest, index: blobs[index]


def referee(setup: TrainerSetup, runs: Sequence[RoundRun], geo: Geometry) -> list[dict[str, Any]]:
    """The default referee's (CPU fp32) verdict on every training segment and the derivation
    segment of ``runs``, with the distance its tolerant comparison logged (None when it compared
    bit for bit, and for the derivation segment)."""
    verdicts: list[dict[str, Any]] = []
    for run in runs:
        claim, manifest, fetch = commit(run, geo)
        inputs = ReplayInputs(
            adapter=setup.adapter,
            build_model=setup.build_model,
            layout=setup.layout,
            shards=setup.shards,
            seed=run.seed,
            inner_steps=geo.steps,
            interval=geo.interval,
            gradient_bits=GRADIENT_BITS,
            start_state=run.start,
            policy=DEFAULT_VERIFICATION,
            referee=CPU_FP32,
        )
        for segment in range(geo.segments + 1):
            with capture_logs() as logs:
                outcome = check_segment(segment, claim, manifest, fetch, inputs)
            compared = [e for e in logs if e.get("event") == "referee.tolerant_comparison"]
            undecided = isinstance(outcome, Undecided)
            verdicts.append(
                {
                    "round": run.round,
                    "segment": segment,
                    "derivation": outcome.derivation,
                    "verdict": "undecided" if undecided else "guilty" if outcome.guilty else "innocent",
                    "reason": outcome.reason,
                    "distance": {k: compared[-1][k] for k in ("steps", *MEASURES)} if compared else None,
                }
            )
    return verdicts


def add_overheads(rows: Sequence[dict[str, Any]]) -> None:
    """Set ``deterministic_overhead`` (deterministic over non-deterministic seconds) on both rows of
    every setting that has the two (the CUDA ones)."""
    timed = {r["name"]: r for r in rows if "error" not in r}
    for row in timed.values():
        det, nondet = timed.get(row["setting"] + " det"), timed.get(row["setting"] + " nondet")
        if det is not None and nondet is not None:
            row["deterministic_overhead"] = round(det["seconds"] / nondet["seconds"], 3)


def run(setup: TrainerSetup, settings: Sequence[Setting], geo: Geometry, judge_rounds: int) -> dict[str, Any]:
    torch.manual_seed(0)
    rows: list[dict[str, Any]] = []
    for setting in settings:
        began = time.perf_counter()
        try:
            row, runs = train(setup, setting, geo)
        except RuntimeError as exc:  # e.g. an op without a deterministic CUDA kernel
            message = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            rows.append({"name": setting.name, "setting": setting.setting, "error": message})
            print(f"{setting.name}: failed: {message}", flush=True)
            continue
        row["verdicts"] = None
        row["false_convictions"] = None
        row["max_distance"] = None
        if setting != Setting("cpu", "fp32") and judge_rounds > 0:
            t0 = time.perf_counter()
            verdicts = referee(setup, runs[:judge_rounds], geo)
            row["referee_seconds"] = round(time.perf_counter() - t0, 1)
            row["verdicts"] = verdicts
            row["false_convictions"] = sum(v["verdict"] == "guilty" for v in verdicts)
            row["undecided"] = sum(v["verdict"] == "undecided" for v in verdicts)
            distances = [v["distance"] for v in verdicts if v["distance"] is not None]
            row["max_distance"] = {k: max(d[k] for d in distances) for k in MEASURES} if distances else None
        del runs
        rows.append(row)
        print(f"{setting.name}: {row['tokens_per_s']} tokens/s, {time.perf_counter() - began:.1f} s", flush=True)
    add_overheads(rows)
    judged = [r for r in rows if r.get("verdicts") is not None]
    cuda = torch.cuda.is_available()
    return {
        "model": setup.name + " " + json.dumps(setup.model_config, sort_keys=True),
        "numel": setup.layout.numel,
        "inner_lr": setup.inner.lr,
        "batch_size": setup.inner.batch_size,
        "seq_len": setup.seq_len,
        "rounds": geo.rounds,
        "inner_steps": geo.steps,
        "checkpoint_interval": geo.interval,
        "judged_rounds": min(judge_rounds, geo.rounds),
        "threads": geo.threads,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "cuda": torch.cuda.get_device_name() if cuda else None,
        "cuda_note": None if cuda else CPU_NOTE,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "referee": CPU_FP32.device_class,
        "envelope": dataclasses.asdict(DEFAULT_VERIFICATION.tolerance),
        "weight_bound": DEFAULT_VERIFICATION.tolerance.weight_bound(geo.interval),  # a full segment's
        "rows": rows,
        "judged_segments": sum(len(r["verdicts"]) for r in judged),
        "false_convictions": sum(r["false_convictions"] for r in judged),
        "undecided": sum(r["undecided"] for r in judged),
        "errors": sum("error" in r for r in rows),
    }


def print_table(report: dict[str, Any]) -> None:
    name, numel = report["model"].split()[0], report["numel"]
    print(
        f"\nthe trainer per device class, {name} model, {numel} parameters, batch {report['batch_size']} x "
        f"{report['seq_len']} tokens, {report['rounds']} round(s) of {report['inner_steps']} steps "
        f"(checkpoint every {report['checkpoint_interval']}), {report['threads']} CPU thread(s); "
        f"GPU: {report['cuda'] or report['cuda_note']}"
    )
    print(
        f"{'row':<20}{'tokens/s':>10}{'steps/s':>9}{'seconds':>9}{'ckpt s':>8}{'peak MiB':>10}{'det x':>7}"
        f"{'loss':>8}{'judged':>8}{'guilty':>8}{'max w-L2':>10}"
    )
    for r in report["rows"]:
        if "error" in r:
            print(f"{r['name']:<20}failed: {r['error']}")
            continue
        peak = "-" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**20:.0f}"
        over = "-" if r["deterministic_overhead"] is None else f"{r['deterministic_overhead']:.2f}"
        judged = "-" if r["verdicts"] is None else str(len(r["verdicts"]))
        guilty = "-" if r["verdicts"] is None else str(r["false_convictions"])
        dist = "-" if r["max_distance"] is None else f"{r['max_distance']['weight_rel_l2']:.4f}"
        print(
            f"{r['name']:<20}{r['tokens_per_s']:>10.0f}{r['steps_per_s']:>9.2f}{r['seconds']:>9.1f}"
            f"{r['checkpoint_seconds']:>8.2f}{peak:>10}{over:>7}{r['last_round_mean_loss']:>8.3f}"
            f"{judged:>8}{guilty:>8}{dist:>10}"
        )
    print(
        f"\nverdicts of the {report['referee']} referee (round/segment; segment S is the derivation); "
        f"envelope: weight relative L2 <= {report['weight_bound']:.3f} for a full segment"
    )
    for r in report["rows"]:
        for v in r.get("verdicts") or ():
            print(f"  {r['name']:<18} r{v['round']} s{v['segment']} {v['verdict']}: {v['reason']}")
    print(
        f"judged segments {report['judged_segments']}, false convictions {report['false_convictions']}, "
        f"undecided {report['undecided']}, failed rows {report['errors']}"
    )


def main(argv: Sequence[str] | None = None, *, out: Callable[[dict[str, Any]], None] = print_table) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=None, help="rounds per row (default 3, quick 1)")
    parser.add_argument("--steps", type=int, default=None, help="inner steps per round (default the demo's 30)")
    parser.add_argument("--interval", type=int, default=None, help="steps between checkpoints (default 10)")
    parser.add_argument("--quick", action="store_true", help="1 round (~10 s on 2 CPU cores, well under 3 min)")
    parser.add_argument("--tiny", action="store_true", help="the fraud e2e's tiny model, 8 steps every 4 (tests)")
    parser.add_argument("--judge-rounds", type=int, default=2, help="rounds the referee judges per row (default 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default torch's)")
    parser.add_argument("--settings", nargs="+", default=None, help="rows, device-dtype[-gc] (default: all here)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # before cuBLAS's first call
    cuda = torch.cuda.is_available()
    try:
        settings = parse_settings(args.settings or default_settings(cuda))
    except ValueError as exc:
        parser.error(str(exc))
    if not cuda and any(s.device == "cuda" for s in settings):
        parser.error("CUDA settings asked for, but torch.cuda.is_available() is False")
    steps = args.steps or (8 if args.tiny else PLAN.inner_steps)
    interval = args.interval or (4 if args.tiny else PLAN.checkpoint_interval)
    rounds = args.rounds or (1 if args.quick else 3)
    threads = args.threads or torch.get_num_threads()
    if min(steps, interval, rounds, threads) < 1 or interval > steps or args.judge_rounds < 0:
        parser.error("--rounds, --steps, --interval and --threads must be positive, --interval <= --steps")
    began = time.perf_counter()
    geo = Geometry(rounds=rounds, steps=steps, interval=interval, threads=threads)
    report = run(build_trainer_setup("tiny" if args.tiny else "demo"), settings, geo, args.judge_rounds)
    report["seconds"] = round(time.perf_counter() - began, 1)
    report["quick"] = bool(args.quick)
    out(report)
    print(f"\ntotal {report['seconds']} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["false_convictions"] == 0 and report["undecided"] == 0 and report["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
