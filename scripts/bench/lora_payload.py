"""LoRA against full fine-tuning: the bytes a trainer uploads per round (issue 13, item 3).

For each base model this builds the spec's model on the ``meta`` device (no weight allocated),
wraps it with the task's LoRA adapters exactly as every agent does
(:func:`syncline.modality.lora.apply_lora`) and takes the state layout of each variant
(:func:`syncline.modality.lora.trained_parameters`: every parameter for full fine-tuning, the
adapters' for LoRA). A round's payload is the canonical payload file (§7.2 of docs/protocol.md)
of that many coordinates at ``--bits``; its size is measured by writing one (all-zero values:
the size does not depend on them). Per row: ``base_params``, ``lora_params``,
``full_payload_bytes``, ``lora_payload_bytes``, their ``ratio``, and the bytes per round for the
whole committee's upload (``--trainers`` payloads).

Usage::

    .venv/bin/python scripts/bench/lora_payload.py --json .syncline/bench/lora_payload.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from syncline.demo.training_run import DemoPlan
from syncline.modality.language import LanguageAdapter
from syncline.modality.lora import apply_lora, trained_parameters
from syncline.protocol.quantization import CHUNK_SIZE, QuantizedGradient
from syncline.protocol.spec import LoraSpec

BASES: dict[str, dict[str, Any]] = {
    "demo-0.56M": {**DemoPlan().model, "vocab_size": DemoPlan().vocab_size},
    "llama-768x12-152M": {
        "family": "llama",
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 12,
        "vocab_size": 50257,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
    },
    "tinyllama-shape-1.1B": {
        "family": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
}


def payload_bytes(numel: int, bits: int) -> int:
    """Size of the canonical payload file of ``numel`` coordinates."""
    dtype = torch.int8 if bits == 8 else torch.int16
    chunks = -(-numel // CHUNK_SIZE)
    payload = QuantizedGradient(
        bits=bits, values=torch.zeros(numel, dtype=dtype), exponents=torch.zeros(chunks, dtype=torch.uint8)
    )
    return len(payload.to_safetensors_bytes())


def measure(name: str, config: dict[str, Any], lora: LoraSpec, bits: int, trainers: int) -> dict[str, Any]:
    with torch.device("meta"):
        model = LanguageAdapter().build_model(config, seed=0)
        base_params = sum(p.numel() for p in trained_parameters(model).values())
        wrapped = apply_lora(model, lora, seed=0)
        lora_params = sum(p.numel() for p in trained_parameters(wrapped).values())
    full, adapters = payload_bytes(base_params, bits), payload_bytes(lora_params, bits)
    return {
        "base": name,
        "base_params": base_params,
        "lora_params": lora_params,
        "full_payload_bytes": full,
        "lora_payload_bytes": adapters,
        "ratio": round(full / adapters, 1),
        "full_bytes_per_round": trainers * full,
        "lora_bytes_per_round": trainers * adapters,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", nargs="+", choices=list(BASES), default=list(BASES))
    parser.add_argument("--r", type=int, default=8)
    parser.add_argument("--alpha", type=int, default=16)
    parser.add_argument("--targets", nargs="+", default=["q_proj", "k_proj", "v_proj", "o_proj"])
    parser.add_argument("--bits", type=int, choices=[8, 16], default=8)
    parser.add_argument("--trainers", type=int, default=3, help="payloads per round (the committee's upload)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lora = LoraSpec(
        r=args.r, alpha=args.alpha, target_modules=tuple(sorted(args.targets)), base_digest="0x" + "00" * 32
    )
    rows = [measure(name, BASES[name], lora, args.bits, args.trainers) for name in args.bases]
    print(f"LoRA r={args.r} on {', '.join(lora.target_modules)}; int{args.bits} payloads; {args.trainers} trainers")
    print("| base | params | LoRA params | full payload | LoRA payload | ratio | per round (full / LoRA) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['base']} | {r['base_params']:,} | {r['lora_params']:,} | {r['full_payload_bytes']:,} B "
            f"| {r['lora_payload_bytes']:,} B | {r['ratio']}x | {r['full_bytes_per_round']:,} / "
            f"{r['lora_bytes_per_round']:,} B |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"r": args.r, "targets": list(lora.target_modules), "bits": args.bits, "rows": rows}, indent=2)
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
