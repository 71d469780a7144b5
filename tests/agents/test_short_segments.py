"""Segments of 1 or 2 inner steps right after a fresh AdamW: an honest bf16 trainer is innocent.

AdamW's first steps are about ``lr * sign(g)``, and bf16 autocast flips the sign of near-zero
gradients, so a bf16 trainer's first step differs from an fp32 replay by ``2 * lr`` on a few
percent of the coordinates: over the whole vector 0.06 to 0.09 of the update at ``n = 1`` and
0.05 to 0.06 at ``n = 2`` (``scripts/bench/referee_tolerance.py --steps 1 2``), more than the
whole-vector bound ``weight_base + weight_per_step * n`` (0.051 / 0.052). A task with
``checkpoint_interval`` 1 or 2 convicted its honest GPU trainers; the bound's floor
``weight_floor / sqrt(n)`` for a segment holding AdamW's first step (docs/protocol.md section
13.6) keeps them inside, and a lazy or noise checkpoint is still convicted at these lengths; the
later segments (from an AdamW that stepped) keep the bound without the floor.

Real training and the referee's own code (``check_segment``), no chain: a 1-layer GPT-2 (the
bench's family, ``n_embd`` 32) trains one round in bf16 with a checkpoint every 1 or 2 steps and
an fp32 CPU referee judges every segment.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from eth_utils import keccak

from syncline.court.referee import CPU_FP32, Claim, ReplayInputs, Verdict, check_segment
from syncline.modality.language import LanguageAdapter
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointManifest,
    checkpoint_hash,
    checkpoint_root,
    segment_count,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import DEFAULT_VERIFICATION, VerificationPolicy
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.trainer.inner_loop import InnerLoop, replay_environment
from syncline.trainer.segments import encode_payload

H, BATCH, SEQ, SEED = 4, 8, 32, 1234
GPT2: dict[str, Any] = {
    "family": "gpt2",
    "n_layer": 1,
    "n_embd": 32,
    "n_head": 2,
    "n_positions": SEQ,
    "vocab_size": 256,
}
INNER = InnerOptimizerConfig(lr=3e-3, inner_steps=H, batch_size=BATCH)


def _old_rule() -> VerificationPolicy:
    """The envelope before the whole-vector floor (``weight_floor`` 0)."""
    tolerance = dataclasses.replace(DEFAULT_VERIFICATION.tolerance, weight_floor=0.0)
    return dataclasses.replace(DEFAULT_VERIFICATION, tolerance=tolerance)


def _shard(seed: int, tokens: int = 4000) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, tokens).astype("<u2").tobytes()


@dataclass(frozen=True)
class Round:
    """A bf16 trainer's committed round: checkpoints every ``interval`` steps, served from memory."""

    adapter: LanguageAdapter
    layout: ParameterLayout
    start: TrainingState
    shards: list[bytes]
    interval: int
    claim: Claim
    manifest: CheckpointManifest
    blobs: list[bytes]

    def fetch(self, manifest: CheckpointManifest, index: int) -> bytes:
        return self.blobs[index]

    def build(self) -> torch.nn.Module:
        return self.adapter.build_model(GPT2, seed=0)

    def inputs(self, policy: VerificationPolicy = DEFAULT_VERIFICATION) -> ReplayInputs:
        return ReplayInputs(
            adapter=self.adapter,
            build_model=self.build,
            layout=self.layout,
            shards=self.shards,
            seed=SEED,
            inner_steps=H,
            interval=self.interval,
            gradient_bits=8,
            start_state=self.start,
            policy=policy,
            referee=CPU_FP32,
        )

    def with_blobs(self, blobs: list[bytes]) -> Round:
        """The same round committed to other checkpoints (a cheater's)."""
        first, last = Checkpoint.from_bytes(blobs[0]), Checkpoint.from_bytes(blobs[-1])
        return _commit(self, blobs, first.params - last.params)

    def judge(self, policy: VerificationPolicy = DEFAULT_VERIFICATION) -> list[Verdict]:
        out = []
        for segment in range(segment_count(H, self.interval) + 1):
            verdict = check_segment(segment, self.claim, self.manifest, self.fetch, self.inputs(policy))
            assert isinstance(verdict, Verdict), verdict
            out.append(verdict)
        return out


def _commit(base: Round, blobs: list[bytes], gradient: torch.Tensor) -> Round:
    payload, chunk_root = encode_payload(gradient, 8)
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    claim = Claim(bytes(keccak(payload)), chunk_root, checkpoint_root(hashes))
    manifest = CheckpointManifest(base.interval, H, hashes, ("",) * len(blobs))
    return dataclasses.replace(base, claim=claim, manifest=manifest, blobs=blobs)


def _train(interval: int) -> Round:
    adapter = LanguageAdapter(seq_len=SEQ)
    net = adapter.build_model(GPT2, seed=0)
    params = {k: v.detach() for k, v in net.named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    start = TrainingState.from_model_state_dict(params, layout)
    shards = [_shard(1), _shard(2)]
    loop = InnerLoop(adapter, net, layout, INNER, dtype="bf16")  # a new AdamW: the round's first steps
    with replay_environment(1):
        work = loop.run(start, shards, seed=SEED, checkpoint_interval=interval)
    blobs = list(work.checkpoints)
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    unclaimed = Round(
        adapter,
        layout,
        start,
        shards,
        interval,
        Claim(b"", b"", b""),
        CheckpointManifest(interval, H, hashes, ("",) * len(blobs)),
        [],
    )
    return _commit(unclaimed, blobs, work.pseudo_gradient)


@pytest.fixture(scope="module", params=[1, 2], ids=["n1", "n2"])
def honest(request: pytest.FixtureRequest) -> Round:
    return _train(request.param)


def test_an_honest_bf16_trainer_with_short_segments_from_a_fresh_optimizer_is_innocent(honest: Round) -> None:
    first = Checkpoint.from_bytes(honest.blobs[0])
    assert first.device_class == "cpu-bf16" and first.adam_steps == (0,) * len(first.adam_steps)  # fresh AdamW
    verdicts = honest.judge()
    assert [v.guilty for v in verdicts] == [False] * len(verdicts), [v.reason for v in verdicts]
    assert "within the envelope" in verdicts[0].reason
    # the rule before the floor convicted it on the first segment, on the whole-vector ratio
    before = honest.judge(_old_rule())
    assert before[0].guilty, before[0].reason
    assert "weight relative L2 0.0" in before[0].reason and "exceeds the envelope" in before[0].reason


@pytest.mark.parametrize("cheat", ["half-update", "noise", "no-update"])
def test_a_forged_short_segment_is_still_convicted(honest: Round, cheat: str) -> None:
    """The floor loosens the whole-vector bound at n = 1, 2 (0.14 / 0.099), not to a forger's size:
    half of the segment's update (a halved learning rate, or every other step skipped), a noise
    update of the honest update's norm, or no update at all are convicted on the first segment."""
    ckpts = [Checkpoint.from_bytes(b) for b in honest.blobs]
    start, end = ckpts[0].params, ckpts[1].params
    if cheat == "half-update":
        forged = start + 0.5 * (end - start)
    elif cheat == "noise":
        noise = torch.randn(start.shape, generator=torch.Generator().manual_seed(7))
        forged = start + noise * ((end - start).norm() / noise.norm())
    else:
        forged = start.clone()
    ckpts[1] = dataclasses.replace(ckpts[1], params=forged.contiguous())
    verdict = honest.with_blobs([c.to_bytes() for c in ckpts]).judge()[0]
    assert verdict.guilty and "exceeds the envelope" in verdict.reason, verdict.reason


def test_the_floor_is_only_for_the_segment_holding_adamws_first_step(honest: Round) -> None:
    """The later segments of the round start from an AdamW that already stepped: the honest bf16
    divergence there is small (at most 0.03 of the update measured at n = 1, 2), and the bound stays
    ``weight_base + weight_per_step * n``. An update scaled by 1.1 on the second segment (a ratio
    of about 0.1, under the floor's 0.14 / 0.099) is convicted there."""
    verdicts = honest.judge()
    bound = DEFAULT_VERIFICATION.tolerance.weight_bound(honest.interval)
    assert f"<= {bound:.3g})" in verdicts[1].reason, verdicts[1].reason
    ckpts = [Checkpoint.from_bytes(b) for b in honest.blobs]
    start, end = ckpts[1].params, ckpts[2].params
    ckpts[2] = dataclasses.replace(ckpts[2], params=(start + 1.1 * (end - start)).contiguous())
    verdict = honest.with_blobs([c.to_bytes() for c in ckpts]).judge()[1]
    assert verdict.guilty and "weight relative L2 0.1" in verdict.reason, verdict.reason
