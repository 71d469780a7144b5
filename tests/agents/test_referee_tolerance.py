"""The referee across device classes: an fp32 CPU referee judges a bf16 (CPU autocast) trainer by
re-executing each segment in fp32 and comparing against the spec's honest-divergence envelope.

Real training throughout (no chain): ``InnerLoop`` trains a round with checkpoint capture in the
trainer's precision, the checkpoints are committed (root over their hashes) and served from
memory, and ``check_segment`` / ``find_faulty`` -- the code witnesses and challengers run -- judge
them with a ``RefereeDevice``. Model: a 1-layer Llama (hidden 32, vocab 256), H = 8 AdamW steps
with a checkpoint every 4, as in the fraud e2e run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from eth_utils import keccak

from syncline.court.referee import (
    CPU_FP32,
    Claim,
    RefereeDevice,
    ReplayInputs,
    Verdict,
    check_segment,
    find_faulty,
)
from syncline.demo.trainer_setup import TINY_MODEL
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

H, INTERVAL, BATCH, SEQ, SEED = 8, 4, 8, 32, 1234
S = segment_count(H, INTERVAL)
MODEL: dict[str, Any] = TINY_MODEL | {"max_position_embeddings": SEQ, "vocab_size": 256}
INNER = InnerOptimizerConfig(lr=3e-3, inner_steps=H, batch_size=BATCH)


def _shard(seed: int, tokens: int = 4000) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, tokens).astype("<u2").tobytes()


@dataclass(frozen=True)
class Setup:
    adapter: LanguageAdapter
    layout: ParameterLayout
    start: TrainingState
    shards: list[bytes]
    config: dict[str, Any] = dataclasses.field(default_factory=lambda: MODEL)

    def build(self) -> torch.nn.Module:
        return self.adapter.build_model(self.config, seed=0)


@pytest.fixture(scope="module")
def setup() -> Setup:
    adapter = LanguageAdapter(seq_len=SEQ)
    net = adapter.build_model(MODEL, seed=0)
    params = {k: v.detach() for k, v in net.named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    return Setup(adapter, layout, TrainingState.from_model_state_dict(params, layout), [_shard(1), _shard(2)])


@dataclass(frozen=True)
class Submission:
    claim: Claim
    manifest: CheckpointManifest
    blobs: list[bytes]

    def fetch(self, manifest: CheckpointManifest, index: int) -> bytes:
        return self.blobs[index]


def _submit(setup: Setup, dtype: str, *, train_steps: int | None = None) -> Submission:
    """Train a round in ``dtype`` with checkpoints and commit to it as a trainer does."""
    loop = InnerLoop(setup.adapter, setup.build(), setup.layout, INNER, dtype=dtype)
    with replay_environment(1):
        work = loop.run(setup.start, setup.shards, seed=SEED, checkpoint_interval=INTERVAL, train_steps=train_steps)
    return _commit(list(work.checkpoints), work.pseudo_gradient)


def _commit(blobs: list[bytes], gradient: torch.Tensor) -> Submission:
    payload, chunk_root = encode_payload(gradient, 8)
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    claim = Claim(bytes(keccak(payload)), chunk_root, checkpoint_root(hashes))
    return Submission(claim, CheckpointManifest(INTERVAL, H, hashes, ("",) * len(blobs)), blobs)


def _inputs(
    setup: Setup, *, policy: VerificationPolicy = DEFAULT_VERIFICATION, referee: RefereeDevice = CPU_FP32
) -> ReplayInputs:
    return ReplayInputs(
        adapter=setup.adapter,
        build_model=setup.build,
        layout=setup.layout,
        shards=setup.shards,
        seed=SEED,
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=8,
        start_state=setup.start,
        policy=policy,
        referee=referee,
    )


@pytest.fixture(scope="module")
def bf16(setup: Setup) -> Submission:
    return _submit(setup, "bf16")


def _judge(setup: Setup, sub: Submission, **kw: Any) -> list[Verdict]:
    out = []
    for segment in range(S + 1):
        verdict = check_segment(segment, sub.claim, sub.manifest, sub.fetch, _inputs(setup, **kw))
        assert isinstance(verdict, Verdict), verdict
        out.append(verdict)
    return out


def test_the_bf16_trainer_really_trained_in_bf16(setup: Setup, bf16: Submission) -> None:
    fp32 = _submit(setup, "fp32")
    ours = [Checkpoint.from_bytes(b) for b in bf16.blobs]
    assert {c.device_class for c in ours} == {"cpu-bf16"}
    # the two precisions diverge: an exact comparison could never pass
    assert checkpoint_hash(bf16.blobs[-1]) != checkpoint_hash(fp32.blobs[-1])
    assert not torch.equal(ours[-1].params, Checkpoint.from_bytes(fp32.blobs[-1]).params)


def test_an_fp32_referee_finds_the_bf16_trainer_innocent_on_every_segment(setup: Setup, bf16: Submission) -> None:
    verdicts = _judge(setup, bf16)
    assert [v.guilty for v in verdicts] == [False] * (S + 1), [v.reason for v in verdicts]
    for v in verdicts[:S]:
        assert "against the trainer's cpu-bf16: within the envelope" in v.reason
    assert verdicts[S].reason == "the payload is derived from the last checkpoint"  # the derivation stays exact
    assert find_faulty(bf16.claim, bf16.manifest, bf16.fetch, _inputs(setup)) is None


def test_a_bf16_referee_replays_a_bf16_trainer_bit_exactly(setup: Setup, bf16: Submission) -> None:
    verdicts = _judge(setup, bf16, referee=RefereeDevice(dtype="bf16"))
    assert [v.guilty for v in verdicts] == [False] * (S + 1)
    assert all("bit-exactly" in v.reason for v in verdicts[:S])


def test_a_lazy_bf16_trainer_is_convicted_by_an_fp32_referee(setup: Setup) -> None:
    lazy = _submit(setup, "bf16", train_steps=H // 2)
    verdicts = _judge(setup, lazy)
    assert [v.guilty for v in verdicts] == [False, True, False], [v.reason for v in verdicts]
    assert "does not give checkpoint 2: AdamW step counts differ" in verdicts[1].reason
    faulty = find_faulty(lazy.claim, lazy.manifest, lazy.fetch, _inputs(setup))
    assert faulty is not None and faulty.guilty and faulty.segment == 1
    # a lazy trainer that also forges the step counts is caught on the tensors
    ckpts = [Checkpoint.from_bytes(b) for b in lazy.blobs]
    ckpts[2] = dataclasses.replace(ckpts[2], adam_steps=tuple(c + INTERVAL for c in ckpts[1].adam_steps))
    forged = _commit([c.to_bytes() for c in ckpts], ckpts[0].params - ckpts[2].params)
    verdict = check_segment(1, forged.claim, forged.manifest, forged.fetch, _inputs(setup))
    assert isinstance(verdict, Verdict) and verdict.guilty and "weight relative L2 1 exceeds" in verdict.reason


def test_a_bf16_trainer_declaring_fp32_gets_the_same_envelope_as_declared_bf16(setup: Setup, bf16: Submission) -> None:
    """A same-class replay that misses the hash is judged against the envelope (the same class runs
    other kernels on another CPU: docs/protocol.md §13.6), so the declaration no longer decides how
    strictly a segment is compared: bf16 tensors labelled cpu-fp32 are judged exactly as when they
    declare cpu-bf16 -- a label buys nothing, and a cheat convicted under one is under the other."""
    relabelled = [Checkpoint.from_bytes(b) for b in bf16.blobs]
    blobs = [dataclasses.replace(c, dtype="fp32").to_bytes() for c in relabelled]
    start = relabelled[0].params
    lying = _commit(blobs, start - relabelled[-1].params)
    verdicts = _judge(setup, lying)
    assert [v.guilty for v in verdicts] == [v.guilty for v in _judge(setup, bf16)] == [False] * (S + 1)
    for v in verdicts[:S]:
        assert "against the trainer's cpu-fp32: not bit-exactly, within the envelope" in v.reason, v.reason


def test_a_device_class_the_spec_does_not_allow_is_guilty(setup: Setup, bf16: Submission) -> None:
    policy = VerificationPolicy(device_classes=("cpu-fp32", "cuda-fp32"))
    verdict = check_segment(0, bf16.claim, bf16.manifest, bf16.fetch, _inputs(setup, policy=policy))
    assert isinstance(verdict, Verdict) and verdict.guilty
    assert verdict.reason == "checkpoint 0 declares device class cpu-bf16, the task allows cpu-fp32, cuda-fp32"


def test_a_forged_first_moment_is_convicted(setup: Setup, bf16: Submission) -> None:
    """The next segment is replayed from the claimed moments, so they are judged too."""
    ckpts = [Checkpoint.from_bytes(b) for b in bf16.blobs]
    steer = torch.randn(ckpts[1].numel, generator=torch.Generator().manual_seed(5)) * float(ckpts[1].exp_avg.std())
    ckpts[1] = dataclasses.replace(ckpts[1], exp_avg=ckpts[1].exp_avg + steer)
    forged = _commit([c.to_bytes() for c in ckpts], ckpts[0].params - ckpts[-1].params)
    verdict = check_segment(0, forged.claim, forged.manifest, forged.fetch, _inputs(setup))
    assert isinstance(verdict, Verdict) and verdict.guilty and "exp_avg relative L2" in verdict.reason


def test_a_noise_checkpoint_is_convicted(setup: Setup, bf16: Submission) -> None:
    ckpts = [Checkpoint.from_bytes(b) for b in bf16.blobs]
    update = ckpts[1].params - ckpts[0].params
    noise = torch.randn(update.shape, generator=torch.Generator().manual_seed(6))
    ckpts[1] = dataclasses.replace(ckpts[1], params=ckpts[0].params + noise * (update.norm() / noise.norm()))
    forged = _commit([c.to_bytes() for c in ckpts], ckpts[0].params - ckpts[-1].params)
    verdict = check_segment(0, forged.claim, forged.manifest, forged.fetch, _inputs(setup))
    assert isinstance(verdict, Verdict) and verdict.guilty and "exceeds the envelope" in verdict.reason


def test_the_calibration_bench_reports_what_the_docs_quote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``scripts/bench/referee_tolerance.py`` on the e2e's tiny model, a few samples: the JSON
    has the fields docs/benchmarks.md quotes, honest pairs are not convicted, gross cheats are."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "referee_tolerance.py"
    spec = importlib.util.spec_from_file_location("referee_tolerance_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses resolve annotations there
    spec.loader.exec_module(bench)
    out = tmp_path / "report.json"
    threads = torch.get_num_threads()
    try:
        code = bench.main(["--model", "tiny", "--samples", "5", "--json", str(out)], out=lambda report: None)
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    (result,) = report["by_segment_length"]
    assert result["steps"] == 4 and result["samples"] == 5 and result["fresh_samples"] == 1
    assert result["honest_replays"] == 10 and result["false_convictions"] == 0
    assert set(result["honest"]) == {"cpu-bf16", "cpu-fp32-2-threads"}
    assert result["honest"]["cpu-bf16"]["max"]["weight_rel_l2"] > 0  # bf16 really diverges
    for cheat in ("lazy-50%", "wrong-shard", "lr-x0.5", "noise", "scale-x1.1"):
        assert result["cheats"][cheat]["detection_rate"] == 1.0, cheat
    assert result["cheats"]["scale-x1.01"]["detection_rate"] == 0.0  # inside the tolerance: documented
    # the cheats aimed at the vectors the floor relaxes: biases and norms left untouched, or one moved
    # by lr per step and coordinate (or half that), are caught; a quarter of it hides under the floor
    for cheat in ("vectors-frozen", "vector-shift-0.5", "vector-shift-1.0"):
        assert result["cheats"][cheat]["detection_rate"] == 1.0, cheat
    assert result["cheats"]["vector-shift-0.25"]["detection_rate"] == 0.0  # documented
    assert result["envelope"]["vector_rms_lr"] == pytest.approx(0.162 * 5.0 / 2)
    assert report["envelope"] == dataclasses.asdict(DEFAULT_VERIFICATION.tolerance)
    assert (report["honest_replays"], report["false_convictions"]) == (10, 0)
    assert report["cheats"]["noise"]["detection_rate"] == 1.0
    assert code == (0 if result["meets_requirements"] else 1)


# ---------------------------------------------------------------- GPT-2: biases with no gradient

GPT2: dict[str, Any] = {
    "family": "gpt2",
    "n_layer": 1,
    "n_embd": 32,
    "n_head": 2,
    "n_positions": SEQ,
    "vocab_size": 256,
}
"""A 1-layer GPT-2 from a config, as a sponsor's pretrained/SFT task may name (``model.family: gpt2``)."""


@pytest.fixture(scope="module")
def gpt2() -> Setup:
    adapter = LanguageAdapter(seq_len=SEQ)
    params = {k: v.detach() for k, v in adapter.build_model(GPT2, seed=0).named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    start = TrainingState.from_model_state_dict(params, layout)
    return Setup(adapter, layout, start, [_shard(1), _shard(2)], GPT2)


@pytest.fixture(scope="module")
def gpt2_bf16(gpt2: Setup) -> Submission:
    return _submit(gpt2, "bf16")


def _key_bias(layout: ParameterLayout) -> slice:
    """The key third of GPT-2's fused ``c_attn.bias`` (query, key, value biases) in the flat vector."""
    e = next(e for e in layout.entries if e.name.endswith("attn.c_attn.bias"))
    third = e.numel // 3
    return slice(e.offset + third, e.offset + 2 * third)


def test_an_fp32_referee_finds_an_honest_bf16_gpt2_trainer_innocent(gpt2: Setup, gpt2_bf16: Submission) -> None:
    """GPT-2's attention key bias has no gradient (the softmax cancels it): bf16 rounding noise
    reaches it and AdamW turns that into steps of about ``lr`` that an fp32 replay does not take.
    Measured per tensor against the segment's update alone, ``c_attn.bias`` was 0.43 away against
    the bound 0.162: an honest GPU trainer convicted. The vector floor keeps it inside."""
    ckpts = [Checkpoint.from_bytes(b) for b in gpt2_bf16.blobs]
    start, end = ckpts[0].params, ckpts[1].params
    key = _key_bias(gpt2.layout)
    assert float((end[key] - start[key]).abs().max()) > INNER.lr / 2  # the noise really moved it in bf16
    verdicts = _judge(gpt2, gpt2_bf16)
    assert [v.guilty for v in verdicts] == [False] * (S + 1), [v.reason for v in verdicts]
    assert find_faulty(gpt2_bf16.claim, gpt2_bf16.manifest, gpt2_bf16.fetch, _inputs(gpt2)) is None
    old = dataclasses.replace(DEFAULT_VERIFICATION.tolerance, vector_floor=0.0)  # the rule before the floor
    before = _judge(gpt2, gpt2_bf16, policy=dataclasses.replace(DEFAULT_VERIFICATION, tolerance=old))
    assert [v.guilty for v in before] == [True, True, False]
    assert all("weight relative L2 of transformer.h.0.attn.c_attn.bias" in v.reason for v in before[:S])


def _forge(gpt2: Setup, honest: Submission, segment: int, edit: Any) -> Verdict:
    """The honest bf16 checkpoints with ``c_{segment+1}``'s weights edited, committed, and judged."""
    ckpts = [Checkpoint.from_bytes(b) for b in honest.blobs]
    params = ckpts[segment + 1].params.clone()
    edit(params, ckpts[segment].params)
    ckpts[segment + 1] = dataclasses.replace(ckpts[segment + 1], params=params)
    forged = _commit([c.to_bytes() for c in ckpts], ckpts[0].params - ckpts[-1].params)
    verdict = check_segment(segment, forged.claim, forged.manifest, forged.fetch, _inputs(gpt2))
    assert isinstance(verdict, Verdict)
    return verdict


@pytest.mark.parametrize("segment", range(S))
def test_cheats_aimed_at_the_vectors_the_floor_relaxes_are_convicted(
    gpt2: Setup, gpt2_bf16: Submission, segment: int
) -> None:
    """The floor relaxes biases and norms, so a cheater would aim there: moving one bias by ``lr``
    per step on every coordinate (a steady push the max-abs bound, 4 ``lr`` per step, lets
    through), or leaving every bias and norm at its start value."""
    layout = gpt2.layout
    bias = next(e for e in layout.entries if e.name.endswith("mlp.c_fc.bias"))
    span = slice(bias.offset, bias.offset + bias.numel)

    def push(params: torch.Tensor, start: torch.Tensor) -> None:
        params[span] += INNER.lr * INTERVAL

    # (on a model this small the whole-vector ratio shows it first; on the demo-sized GPT-2 of the
    # bench only the per-tensor ratio does: docs/benchmarks.md)
    verdict = _forge(gpt2, gpt2_bf16, segment, push)
    assert verdict.guilty and "exceeds the envelope" in verdict.reason, verdict.reason

    def freeze(params: torch.Tensor, start: torch.Tensor) -> None:
        for e in layout.entries:
            if len(e.shape) == 1:
                params[e.offset : e.offset + e.numel] = start[e.offset : e.offset + e.numel]

    verdict = _forge(gpt2, gpt2_bf16, segment, freeze)
    assert verdict.guilty and "exceeds the envelope" in verdict.reason, verdict.reason


QWEN2: dict[str, Any] = TINY_MODEL | {"family": "qwen2", "max_position_embeddings": SEQ, "vocab_size": 256}
"""The e2e's tiny shape as Qwen2, whose attention projections have biases (``k_proj.bias``: no gradient)."""


def test_an_fp32_referee_finds_an_honest_bf16_qwen2_trainer_innocent() -> None:
    """Qwen2's ``k_proj.bias`` is all key bias: 0.38 and 0.21 per tensor against 0.162 before the floor."""
    adapter = LanguageAdapter(seq_len=SEQ)
    params = {k: v.detach() for k, v in adapter.build_model(QWEN2, seed=0).named_parameters()}
    layout = ParameterLayout.from_state_dict(params)
    assert any(e.name.endswith("k_proj.bias") for e in layout.entries)
    qwen2 = Setup(adapter, layout, TrainingState.from_model_state_dict(params, layout), [_shard(1), _shard(2)], QWEN2)
    honest = _submit(qwen2, "bf16")
    verdicts = _judge(qwen2, honest)
    assert [v.guilty for v in verdicts] == [False] * (S + 1), [v.reason for v in verdicts]
    old = dataclasses.replace(DEFAULT_VERIFICATION.tolerance, vector_floor=0.0)  # the rule before the floor
    before = _judge(qwen2, honest, policy=dataclasses.replace(DEFAULT_VERIFICATION, tolerance=old))
    assert before[0].guilty and "weight relative L2 of model.layers.0.self_attn.k_proj.bias" in before[0].reason
