#!/usr/bin/env python
"""Does any cheat pay? Issue 27's strategies against the contract's own parameters.

For the sponsor defaults and for the extreme specs ``postTask`` still accepts (the least stake
for a rate of 1, the least rate for a stake, one training segment, a thousand, one trainer for one
round, the shortest challenge window with no challenge bond), this script

1. asks a freshly deployed market on a local anvil whether it accepts each spec (an ``eth_call``
   of ``postTask`` with the spec's escrow: nothing is posted), and shows it refusing the specs the
   attack used (a 1 wei stake against a 3 ETH pool, a 5 s challenge window, a zero rate);
2. reads the deterrence margin and the ppm scale from the contract's getters, and every figure of
   the model from the accepted on-chain tuple;
3. prints, per strategy (lazy 10 % and 50 %, free-rider copy + noise, answer-and-withhold, fake
   gradient, false claims against honest trainers, a claim racing a trainer paused for 10 % of the
   response window), the cheater's expected profit relative to honest behaviour
   (``syncline.protocol.economics``), and fails (exit 1) if any is above zero.

    .venv/bin/python scripts/bench/cheat_economics.py [--json out.json] [--answer-s 60]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import chain_time, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.chain.transactions import ErrorDecoder
from syncline.demo.lifecycle import Cast, demo_spec
from syncline.protocol import economics
from syncline.protocol.spec import MIN_CHALLENGE_WINDOW_S, ONCHAIN_FIELDS, TrainingTaskSpec, VerificationPolicy
from syncline.protocol.spot_checks import reward_per_submission
from syncline.sponsor.task_defaults import TaskDefaults

ETH = 10**18
FIELD = {name: i for i, name in enumerate(ONCHAIN_FIELDS)}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    spec: TrainingTaskSpec
    expect_accepted: bool = True


def _with(spec: TrainingTaskSpec, ppm: int | None = None, **changes: Any) -> TrainingTaskSpec:
    """``spec`` with ``changes``; ``ppm`` the on-chain spot-check rate (on-demand checkpoints)."""
    if ppm is not None:
        changes["verification"] = VerificationPolicy(checkpoints="on-demand", spot_check_rate=ppm / 1_000_000)
    return dataclasses.replace(spec, **changes)


def cases(base: TrainingTaskSpec) -> list[Case]:
    """The sponsor defaults, the extreme specs the chain accepts, and the specs it refuses."""
    d = TaskDefaults()
    defaults = _with(
        base,
        rounds=d.rounds,
        inner_steps=d.inner_steps,
        checkpoint_interval=d.checkpoint_interval,
        min_trainers=d.trainers,
        max_trainers=d.trainers,
        trainer_stake_wei=d.trainer_stake_wei,
        reward_pool_wei=3 * ETH,
        challenge_bond_wei=d.challenge_bond_wei,
        challenge_window_s=d.challenge_window_s,
        verification=VerificationPolicy(checkpoints="on-demand"),  # the least deterring rate
    )
    r = reward_per_submission(3 * ETH, d.rounds, d.trainers)
    least_stake = 2 * r  # at a rate of 1
    one_round = _with(defaults, rounds=1, min_trainers=1, max_trainers=1)
    r_one = reward_per_submission(3 * ETH, 1, 1)
    return [
        Case("sponsor defaults", defaults),
        Case("least stake (rate 1)", _with(defaults, ppm=1_000_000, trainer_stake_wei=least_stake)),
        Case("least rate (1 ppm)", _with(defaults, ppm=1, trainer_stake_wei=least_stake * 1_000_000)),
        Case(
            "one training segment",
            _with(defaults, ppm=1_000_000, trainer_stake_wei=least_stake, checkpoint_interval=d.inner_steps),
        ),
        Case(
            "1000 training segments",
            _with(defaults, ppm=1_000_000, trainer_stake_wei=least_stake, inner_steps=1000, checkpoint_interval=1),
        ),
        Case("one trainer, one round", _with(one_round, ppm=1_000_000, trainer_stake_wei=2 * r_one)),
        Case(
            "shortest window, no challenge bond",
            _with(defaults, challenge_window_s=MIN_CHALLENGE_WINDOW_S, challenge_bond_wei=0),
        ),
        Case("1 wei stake, 3 ETH pool (the attack)", _with(defaults, ppm=1_000_000, trainer_stake_wei=1), False),
        Case("5 s challenge window (the attack)", _with(defaults, challenge_window_s=5), False),
        Case("stake just below the rule", _with(defaults, ppm=1_000_000, trainer_stake_wei=least_stake - 1), False),
    ]


def terms_of(onchain: tuple[Any, ...], reward_pool_wei: int, challenge_bond_wei: int) -> economics.Terms:
    """The model's parameters, read from the on-chain ``TaskSpec`` tuple."""
    inner, interval = int(onchain[FIELD["inner_steps"]]), int(onchain[FIELD["checkpoint_interval"]])
    return economics.Terms(
        reward_pool_wei=reward_pool_wei,
        rounds=int(onchain[FIELD["rounds"]]),
        min_trainers=int(onchain[FIELD["min_trainers"]]),
        trainer_stake_wei=int(onchain[FIELD["trainer_stake_wei"]]),
        spot_check_ppm=int(onchain[FIELD["spot_check_ppm"]]),
        segments=-(-inner // interval),
        challenge_bond_wei=challenge_bond_wei,
        challenge_window_s=int(onchain[FIELD["challenge_window_s"]]),
    )


def run(answer_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, start_anvil(Path(tmp) / "anvil", accounts=10) as net:
        w3 = net.web3()
        signers = [from_private_key(k) for k in net.private_keys()]
        deployment = deploy_market(w3, signers[0], net.rpc_url, Path(tmp))
        market = MarketClient.from_deployment(deployment, w3)
        contract = market.contract
        margin = int(contract.functions.DETERRENCE_MARGIN().call())
        scale = int(contract.functions.SPOT_CHECK_PPM_SCALE().call())
        decoder = ErrorDecoder(contract.abi)
        cast = Cast(sponsor=signers[0], trainers=signers[1:4], witnesses=signers[4:7], anyone=signers[7])
        base = demo_spec(cast, chain_time(w3))
        rows: list[dict[str, Any]] = []
        for case in cases(base):
            onchain = case.spec.onchain("bench://cheat-economics")
            try:
                contract.functions.postTask(onchain).call({"from": cast.sponsor.address, "value": case.spec.escrow_wei})
                verdict: str | None = None
            except Exception as exc:  # a revert: decode the custom error
                data = getattr(exc, "data", None)
                decoded = decoder.decode(data if isinstance(data, (str, bytes)) else None)
                verdict = decoded[0] if decoded else " ".join(str(exc).split())[:120]
            row: dict[str, Any] = {
                "spec": case.name,
                "accepted": verdict is None,
                "expected_accepted": case.expect_accepted,
                "refusal": verdict,
            }
            if verdict is None:
                terms = terms_of(onchain, case.spec.reward_pool_wei, case.spec.challenge_bond_wei)
                outcomes = economics.strategies(terms, answer_s=answer_s)
                row.update(
                    reward_per_submission_eth=float(terms.reward_per_submission) / ETH,
                    trainer_stake_eth=terms.trainer_stake_wei / ETH,
                    spot_check_rate=terms.spot_check_ppm / scale,
                    segments=terms.segments,
                    challenge_window_s=terms.challenge_window_s,
                    deterrence=f"{terms.trainer_stake_wei} * {terms.spot_check_ppm} >= "
                    f"{margin} * {int(terms.reward_per_submission)} * {scale}",
                    strategies=[o.to_json() for o in outcomes],
                    max_expected_profit_eth=max(float(o.expected_profit_wei) for o in outcomes) / ETH,
                )
            rows.append(row)
        return {
            "deterrence_margin": margin,
            "ppm_scale": scale,
            "min_challenge_window_s": MIN_CHALLENGE_WINDOW_S,
            "answer_s": answer_s,
            "cases": rows,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--answer-s",
        type=float,
        default=60.0,
        help="how long an honest agent takes to answer a claim once it runs (upload included; 60 s "
        "covers a 120M-parameter segment at 100 MB/s)",
    )
    args = parser.parse_args(argv)
    report = run(args.answer_s)
    bad: list[str] = []
    print(
        f"deterrence: stake * ppm >= {report['deterrence_margin']} * R * {report['ppm_scale']}; "
        f"challenge window >= {report['min_challenge_window_s']} s; honest answer within {args.answer_s:g} s"
    )
    for row in report["cases"]:
        if row["accepted"] != row["expected_accepted"]:
            bad.append(f"{row['spec']}: accepted={row['accepted']}")
        if not row["accepted"]:
            print(f"\n{row['spec']}: refused by postTask ({row['refusal']})")
            continue
        print(
            f"\n{row['spec']}: R {row['reward_per_submission_eth']:.6g} ETH, stake {row['trainer_stake_eth']:.6g} ETH, "
            f"rate {row['spot_check_rate']:.6g}, S {row['segments']}, window {row['challenge_window_s']} s"
        )
        for s in row["strategies"]:
            print(
                f"  {s['strategy']:<44} gain {int(s['gain_wei']) / ETH:>10.6f}  P(caught) {s['detection']:.6f}  "
                f"expected profit vs honest {s['expected_profit_eth']:>+12.6f} ETH"
            )
            if s["profitable"]:
                bad.append(f"{row['spec']}: {s['strategy']}")
    worst = max(r["max_expected_profit_eth"] for r in report["cases"] if r["accepted"])
    report["max_expected_profit_eth"] = worst
    report["profitable"] = bad
    print(f"\nmost profitable cheat over every accepted spec: {worst:+.6f} ETH relative to honest work")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if bad:
        print("PROFITABLE OR MISJUDGED: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
