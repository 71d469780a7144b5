"""DP-SGD in the inner loop (Opacus, on the demo's Llama family): it replays bit for bit from the
same noise seeds and differs with others; a referee given the trainer's opening of one segment
passes an honest trainer and convicts a lazy one; without the opening it cannot judge (never guilty)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from syncline.court.referee import (
    PRIVATE_UNREVEALED,
    Claim,
    NoiseOpenings,
    Outcome,
    ReplayInputs,
    Undecided,
    check_segment,
)
from syncline.modality.language import LanguageAdapter
from syncline.modality.lora import trained_parameters
from syncline.privacy.dpsgd import DpSgd, draw_noise
from syncline.privacy.noise import Revealed, RoundNoise
from syncline.privacy.opening import encode_opening, parse_opening
from syncline.protocol.checkpoints import Checkpoint, CheckpointError, CheckpointManifest, checkpoint_hash
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.trainer.inner_loop import InnerLoop

TINY_LLAMA = {
    "family": "llama",
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16,
    "tie_word_embeddings": True,
}
H, INTERVAL = 4, 2
DP = DpSgd(noise_multiplier=1.1, clip_norm=1.0)
CFG = InnerOptimizerConfig(lr=3e-3, inner_steps=H, batch_size=4)


def setup() -> tuple[LanguageAdapter, ParameterLayout, TrainingState, list[bytes]]:
    adapter = LanguageAdapter(seq_len=16)
    rng = np.random.default_rng(3)
    shards = [rng.integers(0, 96, 400).astype("<u2").tobytes() for _ in range(2)]
    params = {k: v.detach() for k, v in trained_parameters(adapter.build_model(TINY_LLAMA, seed=0)).items()}
    layout = ParameterLayout.from_state_dict(params)
    return adapter, layout, TrainingState.from_model_state_dict(params, layout), shards


def noise_of(secret: bytes) -> RoundNoise:
    return RoundNoise.derive(secret, task_id=1, round_=0, fragment=0, interval=INTERVAL, inner_steps=H)


def openings_of(noise: RoundNoise) -> NoiseOpenings:
    """The referee's view of the trainer's published openings: parsed and verified against the
    commitment the manifest binds (as ``referee.blob_openings`` does with the blob store's)."""

    def opening(segment: int, commitment: bytes) -> Revealed:
        data = encode_opening(noise, segment)
        return parse_opening(data, interval=INTERVAL, segments=noise.segments).verify(commitment)

    return opening


def train(
    noise: RoundNoise, *, dp: DpSgd | None = DP, train_steps: int | None = None, dtype: str = "fp32"
) -> tuple[bytes, ...]:
    adapter, layout, state, shards = setup()
    loop = InnerLoop(adapter, adapter.build_model(TINY_LLAMA, seed=0), layout, CFG, privacy=dp, dtype=dtype)
    work = loop.run(
        state, shards, seed=noise.batch_seed, checkpoint_interval=INTERVAL, noise=noise, train_steps=train_steps
    )
    return work.checkpoints


def test_dp_sgd_replays_bit_for_bit_from_the_same_seed_and_differs_with_another() -> None:
    a = noise_of(b"\x01" * 32)
    first, again = train(a), train(a)
    assert len(first) == 3 and first == again
    other = train(noise_of(b"\x02" * 32))
    assert other[0] == first[0] and other[1] != first[1] and other[2] != first[2]
    plain = train(a, dp=None)
    assert plain[1] != first[1]  # the private loop is not the plain one


def test_a_private_loop_refuses_to_train_without_its_noise_seeds() -> None:
    adapter, layout, state, shards = setup()
    loop = InnerLoop(adapter, adapter.build_model(TINY_LLAMA, seed=0), layout, CFG, privacy=DP)
    with pytest.raises(CheckpointError, match="noise seeds"):
        loop.run(state, shards, seed=1)


def test_the_noise_is_the_gaussian_opacus_adds_to_clipped_gradients() -> None:
    """One step at lr 0 moves nothing, and the step's noised gradient has the right scale: with a
    huge noise multiplier the update is dominated by noise of std sigma * C / batch."""
    adapter, layout, state, shards = setup()
    dp = DpSgd(noise_multiplier=100.0, clip_norm=1.0)
    cfg = InnerOptimizerConfig(lr=3e-3, inner_steps=1, batch_size=4)
    loop = InnerLoop(adapter, adapter.build_model(TINY_LLAMA, seed=0), layout, cfg, privacy=dp)
    seen: list[torch.Tensor] = []
    assert loop.private is not None
    opt = loop.private.optimizer
    original = opt.original_optimizer.step

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(torch.cat([p.grad.reshape(-1) for p in opt.params if p.grad is not None]))
        return original(*args, **kwargs)

    opt.original_optimizer.step = spy  # type: ignore[method-assign]
    noise = noise_of(b"\x05" * 32)
    loop.run(state, shards, seed=noise.batch_seed, noise=noise)
    grad = seen[0]
    assert float(grad.std()) == pytest.approx(100.0 * 1.0 / 4, rel=0.05)


@pytest.mark.parametrize("segment", [0, 1])
def test_the_referee_replays_a_revealed_segment_and_convicts_only_the_lazy(segment: int) -> None:
    adapter, layout, state, shards = setup()
    secret = b"\x07" * 32
    noise = noise_of(secret)
    honest, lazy = train(noise), train(noise, train_steps=1)

    def outcome(ckpts: tuple[bytes, ...], revealed: bool) -> Outcome:
        hashes = tuple(checkpoint_hash(c) for c in ckpts)
        manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(hashes), noise=noise.commitment())
        claim = Claim(b"\x00" * 32, b"\x00" * 32, manifest.root)
        inputs = ReplayInputs(
            adapter=adapter,
            build_model=lambda: adapter.build_model(TINY_LLAMA, seed=9),
            layout=layout,
            shards=shards,
            seed=12345,  # the public round seed: a DP task's batches are not drawn from it
            inner_steps=H,
            interval=INTERVAL,
            gradient_bits=8,
            start_state=state,
            privacy=DP,
            openings=openings_of(noise) if revealed else None,
        )
        return check_segment(segment, claim, manifest, lambda m, i: ckpts[i], inputs)

    good = outcome(honest, True)
    assert not good.guilty and "bit-exactly" in good.reason
    bad = outcome(lazy, True)  # trained step 0 only and padded checkpoints 1 and 2 with that state
    assert bad.guilty and "does not give checkpoint" in bad.reason
    # the trainer's root must bind its noise commitment: a DP manifest without one is guilty
    hashes = tuple(checkpoint_hash(c) for c in honest)
    unbound = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(hashes))
    claim = Claim(b"\x00" * 32, b"\x00" * 32, unbound.root)
    inputs = ReplayInputs(
        adapter=adapter,
        build_model=lambda: adapter.build_model(TINY_LLAMA, seed=9),
        layout=layout,
        shards=shards,
        seed=12345,
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=8,
        start_state=state,
        privacy=DP,
        openings=openings_of(noise),
    )
    verdict = check_segment(segment, claim, unbound, lambda m, i: honest[i], inputs)
    assert verdict.guilty and "binds no noise commitment" in verdict.reason
    blind = outcome(honest, False)
    assert isinstance(blind, Undecided) and not blind.guilty and blind.reason.startswith(PRIVATE_UNREVEALED)
    assert Checkpoint.from_bytes(honest[1]).step == INTERVAL


def test_an_honest_bf16_dp_trainer_passes_the_fp32_referees_envelope_and_other_noise_does_not() -> None:
    """A trainer in bf16 (CPU autocast) replayed by the default fp32 referee with its opening lies
    inside the tolerance envelope; a bf16 trainer whose noise is not the committed one (it trained
    with other seeds than it opens) lies outside it and is convicted."""
    adapter, layout, state, shards = setup()
    noise = noise_of(b"\x0b" * 32)
    honest = train(noise, dtype="bf16")
    other = train(noise_of(b"\x0c" * 32), dtype="bf16")
    for segment in (0, 1):
        verdicts = []
        for ckpts in (honest, other):
            hashes = tuple(checkpoint_hash(c) for c in ckpts)
            manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(hashes), noise=noise.commitment())
            inputs = ReplayInputs(
                adapter=adapter,
                build_model=lambda: adapter.build_model(TINY_LLAMA, seed=9),
                layout=layout,
                shards=shards,
                seed=0,
                inner_steps=H,
                interval=INTERVAL,
                gradient_bits=8,
                start_state=state,
                privacy=DP,
                openings=openings_of(noise),
            )
            claim = Claim(b"\x00" * 32, b"\x00" * 32, manifest.root)
            verdicts.append(check_segment(segment, claim, manifest, lambda m, i, c=ckpts: c[i], inputs))
        assert not verdicts[0].guilty and "within the envelope" in verdicts[0].reason, verdicts[0]
        assert verdicts[1].guilty, verdicts[1]


def test_the_noise_is_drawn_on_the_cpu_generator_whatever_the_device() -> None:
    """The step's noise depends on its seed alone: drawn from a CPU generator, then moved (so a CPU
    referee replays a CUDA trainer's noise). On CPU it is bit for bit what Opacus itself draws, and
    a reference tensor on another device (``meta`` here; CUDA on a GPU) consumes the same CPU draws."""
    from opacus.optimizers.optimizer import _generate_noise

    reference = torch.zeros(3, 5)
    mine, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    assert torch.equal(draw_noise(0.7, reference, mine), _generate_noise(0.7, reference, theirs, False))
    cpu_gen, other_gen = torch.Generator().manual_seed(12), torch.Generator().manual_seed(12)
    on_cpu = draw_noise(0.7, reference, cpu_gen)
    elsewhere = draw_noise(0.7, torch.empty(3, 5, device="meta"), other_gen)
    assert elsewhere.device.type == "meta" and elsewhere.shape == on_cpu.shape
    assert torch.equal(cpu_gen.get_state(), other_gen.get_state())  # the same CPU draws were taken
    assert torch.equal(draw_noise(0.0, reference, cpu_gen), reference)
    adapter, layout, _, _ = setup()
    loop = InnerLoop(adapter, adapter.build_model(TINY_LLAMA, seed=0), layout, CFG, privacy=DP)
    assert loop.private is not None and loop.private.generator.device.type == "cpu"
