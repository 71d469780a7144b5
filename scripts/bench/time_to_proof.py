"""Time from a cheat's finalization to its fraud proof landing on chain, per fraud scenario.

Runs the fraud demo (``syncline demo --scenario NAME``: a real devnet, 3 trainer and 3 witness
processes, one cheater, the honest witnesses' challengers) for each scenario and prints, for every
challenge brought: the chain-time seconds from the cheating round's close (its finalization) to
the block holding the proof transaction, and to the challenge's resolution (upheld). Equivocation
and aggregation proofs resolve in the same transaction; censorship waits out its defence period
and training fraud waits for the referees' re-execution and votes.

Usage::

    .venv/bin/python scripts/bench/time_to_proof.py                      # every scenario (~15 min)
    .venv/bin/python scripts/bench/time_to_proof.py aggregation censorship
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from syncline.demo.fraud import run_scenario
from syncline.demo.scenarios import SCENARIOS
from syncline.paths import state_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    rows = []
    for name in names:
        report = run_scenario(name, state_dir() / "bench" / "time-to-proof" / name)
        for c in report.challenges:
            rows.append(
                {
                    "scenario": name,
                    "challenge": c["kind"],
                    "round": c["round"],
                    "status": c["status"],
                    "time_to_proof_s": c["time_to_proof_s"],
                    "time_to_resolution_s": c["time_to_resolution_s"],
                }
            )
    print("\nscenario               challenge              round  outcome   proof landed (s)  resolved (s)")
    for r in rows:
        print(
            f"{r['scenario']:<22} {r['challenge']:<22} {r['round']:>5}  {r['status']:<8}  "
            f"{r['time_to_proof_s']!s:>16}  {r['time_to_resolution_s']!s:>12}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
