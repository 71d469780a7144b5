"""Trainer utilization on chain with early close: a real run on anvil at a large H.

Runs ``TrainingDemo`` (the code ``syncline demo`` runs: anvil, the contracts, a blob service, 3
trainer and 3 witness processes with k = 2, one thread each) on the demo's model and data with
``--inner-steps`` H (default 300) for ``--rounds`` rounds. The round deadline is set far beyond
the training time, so every round closes early (every active trainer committed; the witnesses
finalize at once and the trainers train the next round while they vote). Prints, per trainer,
training seconds / wall seconds (the receipt's ``trainer_throughput``: the wall clock starts at
the trainer's first trained round), and per round how long it stayed open and how early it closed.
``--json PATH`` writes the same as JSON.

Usage::

    .venv/bin/python scripts/bench/round_utilization.py                        # H = 300, 3 rounds
    .venv/bin/python scripts/bench/round_utilization.py --inner-steps 500 --json .syncline/bench/round_utilization.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.observability import configure_logging
from syncline.paths import state_dir
from syncline.protocol.enums import RoundStatus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner-steps", type=int, default=300, help="H, inner steps per round (default 300)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkpoint-interval", type=int, default=100)
    parser.add_argument("--round-duration", type=int, default=900, help="round deadline in s (far beyond training)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    configure_logging()  # progress on stderr at info level; the table on stdout
    if args.inner_steps < 1 or args.rounds < 1:
        parser.error("--inner-steps and --rounds must be positive")

    plan = DemoPlan(
        rounds=args.rounds,
        inner_steps=args.inner_steps,
        checkpoint_interval=min(args.checkpoint_interval, args.inner_steps),
        round_duration_s=args.round_duration,
        grace_window_s=60,
        timeout_s=float(args.rounds * args.round_duration + 600),
    )
    rounds: list[dict[str, Any]] = []

    def read_rounds(market: MarketClient, task_id: int, _names: dict[str, str]) -> None:
        for r in range(plan.rounds):
            rr = market.round(task_id, r)
            deadline = rr.opened_at + plan.round_duration_s
            rounds.append(
                {
                    "round": r,
                    "status": rr.status.name.lower(),
                    "open_s": rr.closed_at - rr.opened_at,
                    "closed_before_deadline_s": deadline - rr.closed_at,
                    "state_root": rr.state_root,
                }
            )

    demo = TrainingDemo(state_dir() / "bench" / "round-utilization", plan)
    demo.after_seal = read_rounds
    started = time.monotonic()
    receipt = demo.run()
    wall = time.monotonic() - started
    throughput: dict[str, Any] = receipt.extras["trainer_throughput"]

    trainers = [
        {
            "trainer": name,
            "rounds": t["rounds"],
            "train_seconds": t["train_seconds"],
            "wall_seconds": t["wall_seconds"],
            "utilization": t["utilization"],
            "steps_per_s": t["steps_per_s"],
        }
        for name, t in sorted(throughput.items())
    ]
    utilizations = [t["utilization"] for t in trainers]
    result = {
        "inner_steps": plan.inner_steps,
        "rounds": plan.rounds,
        "trainers": plan.trainers,
        "witnesses": plan.witnesses,
        "threshold": plan.threshold,
        "round_duration_s": plan.round_duration_s,
        "parameters": receipt.extras["model_parameters"],
        "all_finalized": all(r["status"] == RoundStatus.FINALIZED.name.lower() for r in rounds),
        "final_state_root": receipt.final_state_root,
        "utilization_min": min(utilizations),
        "utilization_mean": sum(utilizations) / len(utilizations),
        "per_trainer": trainers,
        "per_round": rounds,
        "bench_wall_s": round(wall, 1),
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }

    print(
        f"\nearly close on chain: H = {plan.inner_steps}, {plan.rounds} rounds, {plan.trainers} trainers, "
        f"{plan.witnesses} witnesses (k = {plan.threshold}), {result['parameters']:,} parameters, "
        f"round deadline {plan.round_duration_s} s"
    )
    print("\ntrainer     rounds  training s  wall s   utilization  steps/s")
    for t in trainers:
        print(
            f"{t['trainer']:<11} {t['rounds']:>6}  {t['train_seconds']:>10.2f}  {t['wall_seconds']:>6.2f}  "
            f"{100 * t['utilization']:>10.1f} %  {t['steps_per_s']:>7.2f}"
        )
    print("\nround  status     open s  closed before the deadline (s)")
    for r in rounds:
        print(f"{r['round']:>5}  {r['status']:<9}  {r['open_s']:>6}  {r['closed_before_deadline_s']:>8}")
    print(f"\nutilization: min {100 * result['utilization_min']:.1f} %, mean {100 * result['utilization_mean']:.1f} %")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
