"""Witness-side throughput of the exact protocol kernels.

Prints one table: parameters (coordinates) per second for every aggregation rule at each ``n``,
plus quantize / dequantize and state-root hashing. Throughput is ``d / best time`` over the
repeats, i.e. how many model parameters a witness aggregates per second.

Usage::

    .venv/bin/python scripts/bench/aggregation.py --n 8 16 --d 1000000 --repeats 3
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from syncline.protocol.aggregation import make_rule
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import to_fixed
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import dequantize, quantize
from syncline.protocol.state import TrainingState

RULES: dict[str, tuple[AggregationRule, Callable[[int], int]]] = {
    "mean": (AggregationRule.MEAN, lambda n: 0),
    "trimmed_mean(20%)": (AggregationRule.TRIMMED_MEAN, lambda n: 2000),
    "coordinate_median": (AggregationRule.COORDINATE_MEDIAN, lambda n: 0),
    "krum(f)": (AggregationRule.KRUM, lambda n: max(0, (n - 3) // 2)),
    "multi_krum(f)": (AggregationRule.MULTI_KRUM, lambda n: max(0, (n - 3) // 2)),
    "centered_clip(r=1.0)": (AggregationRule.CENTERED_CLIP, lambda n: 1_000_000),
}


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[8, 16], help="numbers of inputs (trainers)")
    parser.add_argument("--d", type=int, default=1_000_000, help="coordinates (parameters)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bits", type=int, default=8, choices=(8, 16))
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    d = args.d
    print(f"d={d:,} bits={args.bits} threads={torch.get_num_threads()} repeats={args.repeats} (best time)")
    print(f"{'kernel':<24}{'n':>4}{'seconds':>12}{'params/s':>16}")

    def row(name: str, n: int | str, seconds: float) -> None:
        print(f"{name:<24}{n!s:>4}{seconds:>12.4f}{d / seconds:>16,.0f}")

    grads = [torch.randn(d, generator=gen) * 1e-3 for _ in range(max(args.n))]
    row("quantize", 1, best_time(lambda: quantize(grads[0], args.bits), args.repeats))
    qg = quantize(grads[0], args.bits)
    row("dequantize", 1, best_time(lambda: dequantize(qg), args.repeats))
    for n in args.n:
        x = torch.stack([dequantize(quantize(g, args.bits)) for g in grads[:n]])
        for name, (rule, param) in RULES.items():
            impl = make_rule(rule, param(n))
            row(name, n, best_time(lambda impl=impl, x=x: impl.aggregate(x), args.repeats))  # type: ignore[misc]
    layout = ParameterLayout.from_state_dict({"w": torch.zeros(d)})
    state = TrainingState(
        layout=layout, weights=to_fixed(torch.randn(d, generator=gen)), momentum=torch.zeros(d, dtype=torch.int64)
    )
    agg = torch.stack([dequantize(quantize(g, args.bits)) for g in grads[:2]]).sum(0) // 2
    row("outer_step", "-", best_time(lambda: state.apply_round(agg, 700_000, 900_000), args.repeats))
    row("state_root", "-", best_time(state.state_root, args.repeats))


if __name__ == "__main__":
    main()
