"""DP-SGD in the inner loop, through Opacus: per-example gradients (``GradSampleModule``, hooks
mode; Opacus computes the Llama's RMSNorm and tied embedding per example as well), each clipped to
``clip_norm``, summed, plus Gaussian noise of std ``noise_multiplier * clip_norm`` drawn from a
generator the inner loop re-seeds at every step (:mod:`syncline.privacy.noise`), divided by the
batch size, then the usual AdamW step (``DPOptimizer`` around the loop's own optimizer).

The generator is always torch's CPU generator and the noise is drawn on the CPU, then moved to the
parameters' device (:func:`draw_noise`): the noise of a step is a function of its seed alone, so a
CPU referee replays a CUDA trainer's DP segment with the very noise it added. On CPU this is
exactly what Opacus draws (``torch.normal`` on the CPU generator, the gradient's dtype)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

import torch

from syncline.privacy.accounting import PrivacyPlan


class StepNoise(Protocol):
    """Gives the noise generator's seed at an inner step (a round's or one segment's seeds)."""

    def step_seed(self, step: int) -> int: ...


@dataclass(frozen=True)
class DpSgd:
    """The mechanism one trainer runs: clip each example's gradient to ``clip_norm``, add noise of
    std ``noise_multiplier * clip_norm`` to the batch's sum."""

    noise_multiplier: float
    clip_norm: float

    @classmethod
    def of(cls, plan: PrivacyPlan) -> DpSgd:
        return cls(noise_multiplier=plan.noise_multiplier, clip_norm=plan.clip_norm)


def draw_noise(std: float, reference: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise of std ``std`` shaped like ``reference``, drawn from the CPU ``generator``
    and moved to ``reference``'s device (the values never depend on that device)."""
    if std == 0:
        return torch.zeros_like(reference)
    noise = torch.normal(
        mean=0, std=std, size=reference.shape, device="cpu", generator=generator, dtype=reference.dtype
    )
    return noise.to(reference.device)


def _cpu_noise_optimizer() -> type:
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    class CpuNoiseDPOptimizer(DPOptimizer):  # type: ignore[misc]
        """Opacus's optimizer, with the noise drawn on the CPU generator (:func:`draw_noise`)."""

        def add_noise(self) -> None:
            for p in self.params:
                _check_processed_flag(p.summed_grad)
                noise = draw_noise(self.noise_multiplier * self.max_grad_norm, p.summed_grad, self.generator)
                p.grad = (p.summed_grad + noise).view_as(p)
                _mark_as_processed(p.summed_grad)

    return CpuNoiseDPOptimizer


class PrivateStep:
    """Opacus's per-example machinery around one model and its optimizer."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, dp: DpSgd, *, batch_size: int):
        from opacus import GradSampleModule

        self.dp = dp
        self.generator = torch.Generator(device="cpu")  # on every device: see draw_noise
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Opacus warns about secure_mode and full backward hooks
            self.module = GradSampleModule(model, batch_first=True, loss_reduction="mean", strict=True)
            self.optimizer = _cpu_noise_optimizer()(
                optimizer,
                noise_multiplier=dp.noise_multiplier,
                max_grad_norm=dp.clip_norm,
                expected_batch_size=batch_size,
                loss_reduction="mean",
                generator=self.generator,
            )

    def step(self, loss: torch.Tensor, seed: int) -> None:
        """Backward ``loss`` (computed through :attr:`module`), then the noised, clipped step with
        the generator seeded by ``seed``."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss.backward()  # type: ignore[no-untyped-call]
        self.generator.manual_seed(seed)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
