"""A real on-chain run of a GPT-2-small-sized Llama (about 120M parameters) on this machine (issue 12, item 6).

The demo's whole job (``syncline.demo.training_run.TrainingDemo``) with a large model: anvil, the
contracts, a blob service, a sponsor that publishes the task, 3 trainer and 3 witness processes
(k = 2), at least 2 rounds finalized on chain, the seal, the claims and the exported model. The
agents keep the state and payloads in files and stream them (``state_on_disk``, their default from
4M parameters up; ``--state-on-disk off`` forces the in-memory path).

What it reports:

* per round, the wall time on chain (round opened to round finalized, block timestamps) and its
  parts as the agents timed them (``rounds.jsonl`` of each agent; mean over the trainers /
  witnesses, and the max): the trainers' state **sync** (re-derive the state from the previous
  round's payloads, or download it), **inner steps**, checkpoint capture, **encode** (quantize +
  chunk root + payload file), **upload** and commit (a trainer that trained the round ahead did
  all of it before the round opened, while the witnesses voted on the previous one: its sync is
  then the state derived from that round's payloads; ``trainers_ahead`` counts them); the
  witnesses' fetch, **witness compute**
  (validation, aggregation, outer step, roots), state publish, validation loss and **finalize**
  (the vote transaction). A round closes once every trainer committed and the witnesses voted
  (early close), or at its deadline (``--round-duration``) if that comes first;
* per agent, the peak resident memory: the process's own high-water mark (``VmHWM``) and the
  peak of its process tree's PSS (forked round workers included, shared pages counted once),
  sampled every ``--sample-s`` seconds; and the machine's peak memory in use
  (``MemTotal - MemAvailable``);
* the court: the witnesses run their challenger (``--no-challenger`` turns it off) with training
  checks (``--training-checks``, the witnesses' default ``spot``), on disk like the rounds
  (``syncline.court.files``): each closed round is audited (the round recomputed on a copy of the
  previous state's file, the payloads in files) and the segment the committee's public draw
  names of each accepted submission is refereed (the checkpoints fetched into files, the start
  state a file; a training segment replayed into a file and hashed, the derivation segment's
  payload derived range by range). Reported: the task's on-chain spot-check rate, the draws, each
  witness's refereed segments with their verdicts and times (``training-checks.jsonl``), its
  audit passes (``audits.jsonl``), the challenges brought and the stakes slashed.

The spot-check rate is the least that deters by default (``postTask`` refuses less: stake x ppm >=
2 R 10^6, R the reward per submission); with 2 rounds and 3 trainers that is every submission.
``--spot-check-rate`` sets a higher one (a lower one is refused here, as the chain would).

Usage::

    nice -n 10 .venv/bin/python scripts/bench/onchain_scale.py --json .syncline/bench/onchain_scale.json
    .venv/bin/python scripts/bench/onchain_scale.py --preset small      # ~6M parameters, minutes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.protocol.spec import MIN_CHALLENGE_WINDOW_S, TrainingTaskSpec
from syncline.protocol.spot_checks import deterrence_ppm, rate_ppm, spot_check_draw
from syncline.sponsor.task_builder import PublishedTask
from syncline.sponsor.task_defaults import default_task

ROOT = Path(__file__).resolve().parents[2]
PRESETS: dict[str, dict[str, int]] = {
    # GPT-2 small's shape (hidden 768, 12 layers, 12 heads, 4 x hidden MLP) as a Llama with a
    # vocabulary of 8192 and tied embeddings: 119,556,864 parameters.
    "124m": {"hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072, "vocab": 8192},
    # the same pipeline in minutes: 6.0M parameters (still on disk by default)
    "small": {"hidden": 256, "layers": 4, "heads": 4, "intermediate": 1024, "vocab": 8192},
}
TRAINER_PARTS = ("sync_s", "inner_s", "checkpoints_s", "save_optimizer_s", "encode_s", "upload_s", "commit_s")
WITNESS_PARTS = ("fetch_s", "compute_s", "publish_s", "eval_s", "finalize_s")


# ------------------------------------------------------------------------------------------------
# memory sampling (/proc)
# ------------------------------------------------------------------------------------------------


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def _machine_used_kib() -> int:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        info[key] = int(value.split()[0])
    return info["MemTotal"] - info["MemAvailable"]


class MemorySampler(threading.Thread):
    """Peak memory of every agent process (and its forked workers), of this process (the
    sponsor and the blob service) and of the machine, sampled every ``interval`` seconds."""

    def __init__(self, demo: TrainingDemo, interval: float, min_free_gib: float) -> None:
        super().__init__(daemon=True)
        self.demo = demo
        self.interval = interval
        self.min_free = int(min_free_gib * (1 << 30))
        self.disk_free_at_start = _disk_free(demo.workdir)
        self.disk_free_min = self.disk_free_at_start
        self.aborted = False
        self.stop = threading.Event()
        self.hwm: dict[str, int] = {}
        self.tree_pss: dict[str, int] = {}
        self.machine_base = _machine_used_kib()
        self.machine_peak = self.machine_base

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def sample(self) -> None:
        procs = [(a.name, a.process.pid, True) for a in list(self.demo.agents) if a.process.poll() is None]
        # this process alone: its children are the agents and anvil
        procs.append(("orchestrator (sponsor + blob service)", os.getpid(), False))
        for name, pid, tree in procs:
            self.hwm[name] = max(self.hwm.get(name, 0), _status_kib(pid, "VmHWM"))
            pss = sum(_pss_kib(p) for p in _tree(pid)) if tree else _pss_kib(pid)
            self.tree_pss[name] = max(self.tree_pss.get(name, 0), pss)
        self.machine_peak = max(self.machine_peak, _machine_used_kib())
        free = _disk_free(self.demo.workdir)
        self.disk_free_min = min(self.disk_free_min, free)
        if free < self.min_free and not self.aborted:  # the disk is shared: stop before it fills
            self.aborted = True
            print(f"only {free / (1 << 30):.1f} GiB of disk left: stopping the agents", file=sys.stderr)
            for agent in list(self.demo.agents):
                agent.process.kill()


def _disk_free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# ------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _summary(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 2), "max": round(max(values), 2)} if values else {}


def breakdown(workdir: Path, chain_rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per round: the wall time on chain and the agents' timed parts (mean and max over agents)."""
    agents = sorted((workdir / "agents").iterdir())
    trainer = {a.name: _records(a / "rounds.jsonl") for a in agents if a.name.startswith("trainer")}
    witness = {a.name: _records(a / "rounds.jsonl") for a in agents if a.name.startswith("witness")}
    rows = []
    for view in chain_rounds:
        r = view["round"]
        row: dict[str, Any] = {**view, "trainer": {}, "witness": {}}
        for parts, side, records in ((TRAINER_PARTS, "trainer", trainer), (WITNESS_PARTS, "witness", witness)):
            mine = [rec for recs in records.values() for rec in recs if rec.get("round") == r and "timings" in rec]
            for part in parts:
                row[side][part] = _summary([rec["timings"][part] for rec in mine if part in rec["timings"]])
            row[f"{side}s_reporting"] = len(mine)
        # trained ahead: the trainer's parts ran before the round opened, during the previous
        # round's witness work (sync_s is then the state derived from that round's payloads)
        row["trainers_ahead"] = sum(
            1 for recs in trainer.values() for rec in recs if rec.get("round") == r and rec.get("trained_ahead")
        )
        rows.append(row)
    return rows


def check_deterrence(plan: DemoPlan) -> int:
    """The spot-check ppm the task will post: the least that deters unless ``plan`` names a rate,
    which must deter too (``postTask`` refuses ``stake * ppm < 2 R 1e6``)."""
    template = default_task(plan, [], 0)
    least = deterrence_ppm(
        template["trainer_stake_wei"], template["reward_pool_wei"], template["rounds"], template["min_trainers"]
    )
    if plan.spot_check_rate is None:
        return least
    ppm = rate_ppm(plan.spot_check_rate)
    if ppm < least:
        raise SystemExit(f"--spot-check-rate {plan.spot_check_rate} ({ppm} ppm) does not deter: at least {least} ppm")
    return ppm


def draws(market: MarketClient, task_id: int, spec: TrainingTaskSpec, rounds: int) -> list[dict[str, Any]]:
    """The committee's public draw of every accepted submission (round, fragment, segment or None)."""
    out = []
    for r in range(rounds):
        view = market.round(task_id, r)
        block = market.finalization_block_hash(task_id, r)
        for fragment in range(view.accepted_mask.bit_length()):
            if not view.accepted_mask >> fragment & 1 or block is None:
                continue
            segment = spot_check_draw(
                task_id,
                r,
                fragment,
                bytes.fromhex(view.state_root[2:]),
                block,
                ppm=spec.spot_check_ppm,
                segments=spec.checkpoint_segments,
            )
            out.append({"round": r, "fragment": fragment, "segment": segment})
    return out


def court_summary(workdir: Path) -> dict[str, Any]:
    """Each witness's refereed segments and audit passes, from its state dir."""
    per_witness: dict[str, Any] = {}
    for agent in sorted((workdir / "agents").iterdir()):
        if not agent.name.startswith("witness"):
            continue
        checks = _records(agent / "training-checks.jsonl")
        audits = _records(agent / "audits.jsonl")
        per_witness[agent.name] = {
            "segments_refereed": len(checks),
            "verdicts": {v: sum(1 for c in checks if c["verdict"] == v) for v in ("innocent", "guilty", "undecided")},
            "checks": [
                {k: c[k] for k in ("round", "fragment", "segment", "segments", "why", "verdict", "seconds", "reason")}
                for c in checks
            ],
            "rounds_audited_complete": sorted({a["round"] for a in audits if a["complete"]}),
            "audit_passes": [
                {k: a[k] for k in ("round", "complete", "findings", "seconds", "on_disk")} for a in audits
            ],
        }
    return per_witness


def run(args: argparse.Namespace) -> dict[str, Any]:
    shape = dict(PRESETS[args.preset])
    for key in ("hidden", "layers", "heads", "intermediate", "vocab"):
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    plan = DemoPlan(
        rounds=args.rounds,
        inner_steps=args.inner_steps,
        checkpoint_interval=0,  # one segment: c_0 and c_H
        round_duration_s=args.round_duration,
        grace_window_s=args.grace,
        challenge_window_s=args.challenge_window,
        # the rounds are timed against real training (minutes at 120M parameters): real time by
        # default, so the seal waits the whole (minimum) challenge window after the last round
        clock_speed=args.clock_speed,
        vocab_size=shape["vocab"],
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        model={
            "family": "llama",
            "hidden_size": shape["hidden"],
            "intermediate_size": shape["intermediate"],
            "num_hidden_layers": shape["layers"],
            "num_attention_heads": shape["heads"],
            "num_key_value_heads": shape["heads"],
            "max_position_embeddings": args.seq_len,
            "tie_word_embeddings": True,
        },
        timeout_s=args.timeout,
        # the witnesses' challenger and training checks, on disk at this size (syncline.court.files)
        training_checks=args.training_checks,
        witness_challenges=not args.no_challenger,
        spot_check_rate=args.spot_check_rate,
        state_on_disk={"auto": None, "on": True, "off": False}[args.state_on_disk],
        eval_batches=args.eval_batches,
    )
    spot_check_ppm = check_deterrence(plan)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    demo = TrainingDemo(workdir, plan)
    chain_rounds: list[dict[str, Any]] = []
    posted: dict[str, TrainingTaskSpec] = {}
    court: dict[str, Any] = {}

    def after_post(market: MarketClient, task_id: int, published: PublishedTask, sponsor: Signer) -> None:
        posted["spec"] = published.spec

    demo.after_post = after_post

    def after_seal(market: MarketClient, task_id: int, names: dict[str, str]) -> None:
        for r in range(plan.rounds):
            v = market.round(task_id, r)
            chain_rounds.append(
                {
                    "round": r,
                    "status": v.status.name.lower(),
                    "opened_at": v.opened_at,
                    "closed_at": v.closed_at,
                    "wall_s": v.closed_at - v.opened_at if v.closed_at else None,
                    "votes": v.vote_count,
                    "accepted": bin(v.accepted_mask).count("1"),
                    "state_root": v.state_root,
                }
            )
        court["draws"] = draws(market, task_id, posted["spec"], plan.rounds)
        court["challenges_brought"] = market.challenge_count()

    demo.after_seal = after_seal
    sampler = MemorySampler(demo, args.sample_s, args.min_free_gib)
    sampler.start()
    started = time.monotonic()
    load_start = os.getloadavg()
    try:
        receipt = demo.run()
    finally:
        sampler.stop.set()
        sampler.join()
    wall = time.monotonic() - started
    extras = dict(receipt.extras)
    court.update(
        training_checks=plan.training_checks,
        challenger=plan.witness_challenges,
        spot_check_ppm=posted["spec"].spot_check_ppm,
        spot_check_ppm_expected=spot_check_ppm,
        checkpoint_segments=posted["spec"].checkpoint_segments,
        slashed_wei=sum(t.slashed_wei for t in receipt.trainers) + sum(w.slashed_wei for w in receipt.witnesses),
        witnesses=court_summary(workdir),
    )
    gib = 1 << 20  # KiB per GiB
    return {
        "config": {
            "preset": args.preset,
            "shape": shape,
            "parameters": extras.get("model_parameters"),
            "rounds": plan.rounds,
            "inner_steps": plan.inner_steps,
            "batch_size": plan.batch_size,
            "seq_len": plan.seq_len,
            "round_duration_s": plan.round_duration_s,
            "trainers": plan.trainers,
            "witnesses": plan.witnesses,
            "threshold": plan.threshold,
            "eval_batches": plan.eval_batches,
            "state_on_disk": args.state_on_disk,
            "challenge_window_s": plan.challenge_window_s,
        },
        "court": court,
        "rounds": breakdown(workdir, chain_rounds),
        "validation_loss_per_round": extras.get("validation_loss_per_round"),
        "peak_memory_gib": {
            "agent_vmhwm": {k: round(v / gib, 3) for k, v in sorted(sampler.hwm.items())},
            "agent_tree_pss": {k: round(v / gib, 3) for k, v in sorted(sampler.tree_pss.items())},
            "machine_in_use_peak": round(sampler.machine_peak / gib, 3),
            "machine_in_use_before": round(sampler.machine_base / gib, 3),
        },
        # the run's disk use: how far the free space on the workdir's file system fell
        "disk_used_peak_gib": round((sampler.disk_free_at_start - sampler.disk_free_min) / (1 << 30), 2),
        "trainer_throughput": extras.get("trainer_throughput"),
        "wall_seconds": round(wall, 1),
        "final_state_root": receipt.final_state_root,
        "rounds_finalized": receipt.rounds_finalized,
        "sample_text": extras.get("sample_text"),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "cpus": os.cpu_count(),
    }


def _fmt(summary: dict[str, float]) -> str:
    return f"{summary['mean']:.1f} ({summary['max']:.1f})" if summary else "-"


def print_report(report: dict[str, Any]) -> None:
    cfg = report["config"]
    print(
        f"{cfg['parameters']:,} parameters, {cfg['trainers']} trainers + {cfg['witnesses']} witnesses "
        f"(k={cfg['threshold']}), H={cfg['inner_steps']}, batch {cfg['batch_size']} x {cfg['seq_len']}, "
        f"round_duration {cfg['round_duration_s']} s; wall {report['wall_seconds']} s"
    )
    print("seconds per round: mean over agents (max)")
    cols: list[tuple[str, str | None, str | None]] = [("round wall (chain)", None, None)]
    cols += [(p.removesuffix("_s"), "trainer", p) for p in TRAINER_PARTS]
    cols += [("w." + p.removesuffix("_s"), "witness", p) for p in WITNESS_PARTS]
    print(" | ".join(["round"] + [c[0] for c in cols]))
    for row in report["rounds"]:
        cells = [str(row["round"]), str(row["wall_s"])]
        cells += [_fmt(row[str(side)][part]) for _, side, part in cols[1:]]
        print(" | ".join(cells))
    mem = report["peak_memory_gib"]
    print("peak memory, GiB: agent VmHWM / process-tree PSS")
    for name in mem["agent_vmhwm"]:
        print(f"  {name}: {mem['agent_vmhwm'][name]:.2f} / {mem['agent_tree_pss'].get(name, 0):.2f}")
    print(f"  machine in use: {mem['machine_in_use_peak']:.2f} (before the run {mem['machine_in_use_before']:.2f})")
    print(f"disk used by the run at its peak: {report['disk_used_peak_gib']} GiB")
    print(f"validation loss per round: {report['validation_loss_per_round']}")
    court = report["court"]
    print(
        f"court: training checks {court['training_checks']}, challenger {'on' if court['challenger'] else 'off'}, "
        f"spot-check rate {court['spot_check_ppm']} ppm; challenges brought {court['challenges_brought']}, "
        f"slashed {court['slashed_wei']} wei"
    )
    print(
        f"  draws (round, fragment -> segment): {[(d['round'], d['fragment'], d['segment']) for d in court['draws']]}"
    )
    for name, w in court["witnesses"].items():
        times = [c["seconds"] for c in w["checks"]]
        print(
            f"  {name}: {w['segments_refereed']} segments refereed {w['verdicts']}, "
            f"seconds per check {_fmt(_summary(times))}; rounds audited {w['rounds_audited_complete']}, "
            f"audit passes {[(a['round'], a['seconds']) for a in w['audit_passes']]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="124m", choices=sorted(PRESETS))
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--intermediate", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inner-steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--round-duration", type=int, default=420, help="round_duration_s of the task")
    parser.add_argument("--grace", type=int, default=900, help="grace_window_s (witness work after the deadline)")
    parser.add_argument(
        "--clock-speed", type=float, default=1.0, help="devnet clock speed (1: real time; DemoPlan.clock_speed)"
    )
    parser.add_argument("--eval-batches", type=int, default=2, help="validation batches (x16 windows) per round")
    parser.add_argument("--state-on-disk", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--training-checks", default="spot", choices=("all", "spot", "off"), help="the witnesses' mode")
    parser.add_argument("--no-challenger", action="store_true", help="turn the witnesses' challenger off")
    parser.add_argument(
        "--spot-check-rate",
        type=float,
        default=None,
        help="the task's spot-check rate (default: the least that deters; a lower one is refused)",
    )
    parser.add_argument(
        "--challenge-window", type=int, default=MIN_CHALLENGE_WINDOW_S, help="challenge_window_s (the seal waits it)"
    )
    parser.add_argument("--timeout", type=float, default=5400.0)
    parser.add_argument("--sample-s", type=float, default=0.5)
    parser.add_argument("--min-free-gib", type=float, default=4.0, help="stop the agents below this much free disk")
    parser.add_argument("--workdir", default=str(ROOT / ".syncline" / "onchain-scale"))
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args()
    report = run(args)
    print_report(report)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
