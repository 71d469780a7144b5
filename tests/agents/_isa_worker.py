"""Train or referee a round in a process of its own, so that ``ATEN_CPU_CAPABILITY`` (read once,
when torch starts) picks its CPU kernels: what ``test_cpu_capabilities.py`` and the bench's
``--cpu-capabilities`` mode run on each side.

``train DIR MODE...``: train the round (in ``DIR/MODE``) from ``DIR/MODE/start.bin`` with checkpoints, as a ``cpu-fp32``
trainer commits it (``honest``; ``lazy``: half the steps, the later checkpoints repeat the last
real state; ``lazy-forged``: the same with the AdamW step counts an honest run reaches, so only the
tensors can convict it; ``fake-gradient``: honest checkpoints, a noise payload), and write the
checkpoints, the manifest and the claim next to it. ``referee DIR...``: judge every segment of
each submission with the default ``cpu-fp32`` referee (``check_segment`` and ``find_faulty``, the
code witnesses and challengers run) and print one JSON line. Both print the kernels they ran.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from eth_utils import keccak

from syncline.court.referee import CPU_FP32, Claim, ReplayInputs, check_segment, find_faulty, kernel_description
from syncline.demo.trainer_setup import TINY_MODEL
from syncline.modality.language import LanguageAdapter
from syncline.protocol.checkpoints import Checkpoint, CheckpointManifest, checkpoint_hash, checkpoint_root
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.trainer.inner_loop import InnerLoop, replay_environment
from syncline.trainer.segments import encode_payload

H, INTERVAL, BATCH, SEQ, SEED, BITS = 8, 4, 8, 32, 1234, 8
MODEL: dict[str, Any] = TINY_MODEL | {"max_position_embeddings": SEQ, "vocab_size": 256}
INNER = InnerOptimizerConfig(lr=3e-3, inner_steps=H, batch_size=BATCH)
MODES = ("honest", "lazy", "lazy-forged", "fake-gradient")


def shards() -> list[bytes]:
    return [np.random.default_rng(s).integers(0, 256, 4000).astype("<u2").tobytes() for s in (1, 2)]


def start_state() -> TrainingState:
    """The round's start weights: built once by the caller (``torch.randn`` itself draws other
    values on scalar kernels) and handed to every process as bytes, as the chain's state root is."""
    params = {k: v.detach() for k, v in LanguageAdapter(seq_len=SEQ).build_model(MODEL, seed=0).named_parameters()}
    return TrainingState.from_model_state_dict(params, ParameterLayout.from_state_dict(params))


def _load_start(directory: Path) -> TrainingState:
    return TrainingState.from_bytes((directory / "start.bin").read_bytes())


def train(mode: str, directory: Path) -> dict[str, Any]:
    start = _load_start(directory)
    adapter = LanguageAdapter(seq_len=SEQ)
    loop = InnerLoop(adapter, adapter.build_model(MODEL, seed=0), start.layout, INNER)
    lazy = mode in ("lazy", "lazy-forged")
    with replay_environment(1):
        work = loop.run(start, shards(), seed=SEED, checkpoint_interval=INTERVAL, train_steps=H // 2 if lazy else None)
    blobs = list(work.checkpoints)
    gradient = work.pseudo_gradient
    if mode == "lazy-forged":  # the step counts an honest run reaches: only the tensors can tell
        ckpts = [Checkpoint.from_bytes(b) for b in blobs]
        first = ckpts[0].adam_steps
        blobs = [
            dataclasses.replace(c, adam_steps=tuple(n + c.step for n in first)).to_bytes() if c.step > H // 2 else b
            for c, b in zip(ckpts, blobs, strict=True)
        ]
    if mode == "fake-gradient":
        gradient = torch.randn(gradient.shape, generator=torch.Generator().manual_seed(7)) * 0.05
    payload, chunk_root = encode_payload(gradient, BITS)
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    for i, b in enumerate(blobs):
        (directory / f"c{i}.bin").write_bytes(b)
    claim = {
        "payload_hash": keccak(payload).hex(),
        "chunk_root": chunk_root.hex(),
        "root": checkpoint_root(hashes).hex(),
    }
    (directory / "claim.json").write_text(json.dumps(claim | {"hashes": [h.hex() for h in hashes]}))
    return {"mode": mode, "kernels": kernel_description(), "hashes": [h.hex() for h in hashes]}


def referee(directory: Path) -> dict[str, Any]:
    start = _load_start(directory)
    saved = json.loads((directory / "claim.json").read_text())
    claim = Claim(*(bytes.fromhex(saved[k]) for k in ("payload_hash", "chunk_root", "root")))
    hashes = tuple(bytes.fromhex(h) for h in saved["hashes"])
    manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(hashes))
    adapter = LanguageAdapter(seq_len=SEQ)
    inputs = ReplayInputs(
        adapter=adapter,
        build_model=lambda: adapter.build_model(MODEL, seed=0),
        layout=start.layout,
        shards=shards(),
        seed=SEED,
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=BITS,
        start_state=start,
        referee=CPU_FP32,
    )

    def fetch(_: CheckpointManifest, index: int) -> bytes:
        return (directory / f"c{index}.bin").read_bytes()

    outcomes = [check_segment(s, claim, manifest, fetch, inputs) for s in range(inputs.segments + 1)]
    faulty = find_faulty(claim, manifest, fetch, inputs)
    return {
        "kernels": kernel_description(),
        "verdicts": [
            {"segment": o.segment, "guilty": o.guilty, "reason": o.reason, "kind": type(o).__name__} for o in outcomes
        ],
        "find_faulty": None if faulty is None else {"segment": faulty.segment, "guilty": faulty.guilty},
    }


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    if argv[0] == "train":  # train DIR MODE... -> DIR/MODE
        print(json.dumps({m: train(m, Path(argv[1]) / m) for m in argv[2:]}))
    elif argv[0] == "referee":
        print(json.dumps({d: referee(Path(d)) for d in argv[1:]}))
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
