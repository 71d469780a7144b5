"""Runs one full witness round from a seed and prints the resulting roots as JSON.

Used by ``test_state_determinism.py`` in subprocesses with different torch thread counts::

    python tests/protocol/_determinism_worker.py --seed 7 --threads 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    import syncline  # noqa: F401
except ImportError:  # pragma: no cover - a bare venv without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "agents"))

import torch

from syncline.protocol.aggregation import make_rule
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.quantization import dequantize, quantize
from syncline.protocol.state import TrainingState

TRAINERS = 9
RULE_PARAMS = {
    AggregationRule.MEAN: 0,
    AggregationRule.TRIMMED_MEAN: 2000,
    AggregationRule.COORDINATE_MEDIAN: 0,
    AggregationRule.KRUM: 2,
    AggregationRule.MULTI_KRUM: 2,
    AggregationRule.CENTERED_CLIP: 50_000,
}


def run(seed: int) -> dict[str, str]:
    """Model from ``seed``, ``TRAINERS`` quantized gradients, every rule, one outer step each."""
    g = torch.Generator().manual_seed(seed)
    sd = {
        "embed.weight": torch.randn(300, 257, generator=g) * 0.02,
        "head.bias": torch.randn(257, generator=g) * 0.01,
        "block.0.mlp.weight": torch.randn(257, 300, generator=g).to(torch.bfloat16),
    }
    state = TrainingState.from_model_state_dict(sd)
    numel = state.layout.numel
    grads = []
    for i in range(TRAINERS):
        grad = torch.randn(numel, generator=g) * 1e-3 * (1 + i % 3)
        if i == TRAINERS - 1:
            grad = grad * 1e4  # an outlier the robust rules must handle
        grads.append(quantize(grad, 8 if i % 2 else 16))
    out = {"initial": state.state_root_hex, "layout": "0x" + state.layout.digest().hex()}
    out["gradients"] = "0x" + b"".join(gradient_chunk_root(q) for q in grads).hex()
    x = torch.stack([dequantize(q) for q in grads])
    for rule, param in RULE_PARAMS.items():
        aggregate = make_rule(rule, param).aggregate(x)
        after = state.apply_round(aggregate, 700_000, 900_000).apply_round(aggregate, 700_000, 900_000)
        out[rule.name] = after.state_root_hex
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps({"threads": torch.get_num_threads(), "roots": run(args.seed)}))


if __name__ == "__main__":
    main()
