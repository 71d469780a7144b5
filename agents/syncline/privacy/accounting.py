"""Privacy accounting of a DP task, through Opacus's accountants (RDP or PRV).

Everything here is a function of the spec's ``privacy`` section and of which rounds a trainer
trained in, so every party (trainer, witness, API, receipt) computes the same figures: the noise
multiplier is the smallest Opacus's ``get_noise_multiplier`` finds for the target
(``epsilon``, ``delta``) at ``sample_rate`` over the task's ``rounds * inner_steps`` steps, and the
ε a trainer has spent after some rounds is the accountant's ε for that noise multiplier and
sample rate over the steps of the rounds it trained in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from syncline.errors import SpecError
from syncline.protocol.spec import MAX_PRIVACY_EPSILON, PrivacySpec, TrainingTaskSpec, check_private_steps

EPSILON_TOLERANCE = 0.01
"""How far below the target the noise multiplier's search may leave the final ε (Opacus's
``epsilon_tolerance``)."""


MAX_SIGMA_DOUBLINGS = 64
"""Most doublings of the search's upper σ (Opacus stops at σ > 1e6, i.e. after 17)."""

MAX_SIGMA_BISECTIONS = 200
"""Most bisection steps of the σ search (Opacus's loop has no bound: a huge ε never reached its
tolerance and spun forever, issue 26 item 4). A spec target within ``MAX_PRIVACY_EPSILON`` needs
far fewer, so the σ found is Opacus's to the bit."""


@lru_cache(maxsize=64)
def noise_multiplier_for(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """The smallest noise multiplier σ whose ε over ``steps`` steps at ``sample_rate`` is at most
    ``epsilon``: Opacus's ``get_noise_multiplier`` (the same doubling, then bisection to
    ``EPSILON_TOLERANCE``), with both loops bounded so that no target can make it spin; SpecError
    (one line) when the search does not settle."""
    if steps <= 0:
        raise SpecError(f"privacy: the task trains {steps} steps; need at least one")
    if not (math.isfinite(epsilon) and 0 < epsilon <= MAX_PRIVACY_EPSILON):
        raise SpecError(f"privacy.epsilon must be within (0, {MAX_PRIVACY_EPSILON:g}], got {epsilon!r}")
    from opacus.accountants import create_accountant
    from opacus.accountants.utils import MAX_SIGMA

    acc = create_accountant(mechanism=accountant)

    def eps_of(sigma: float) -> float:
        acc.history = [(sigma, sample_rate, steps)]
        return float(acc.get_epsilon(delta=delta))

    try:
        eps_high, sigma_low, sigma_high = float("inf"), 0.0, 10.0
        for _ in range(MAX_SIGMA_DOUBLINGS):
            if not eps_high > epsilon:
                break
            sigma_high *= 2
            eps_high = eps_of(sigma_high)
            if sigma_high > MAX_SIGMA:
                raise ValueError("The privacy budget is too low.")
        else:
            raise ValueError("the search for an upper noise multiplier did not settle")
        for _ in range(MAX_SIGMA_BISECTIONS):
            if not epsilon - eps_high > EPSILON_TOLERANCE:
                return float(sigma_high)
            sigma = (sigma_low + sigma_high) / 2
            eps = eps_of(sigma)
            if eps < epsilon:
                sigma_high, eps_high = sigma, eps
            else:
                sigma_low = sigma
        raise ValueError(f"the search did not reach the tolerance in {MAX_SIGMA_BISECTIONS} steps")
    except (ValueError, ArithmeticError) as exc:
        raise SpecError(
            f"privacy: no noise multiplier reaches epsilon {epsilon} ({' '.join(str(exc).split())})"
        ) from None


@lru_cache(maxsize=4096)
def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str) -> float:
    """ε after ``steps`` DP-SGD steps of ``noise_multiplier`` at ``sample_rate`` (0 for none)."""
    from opacus.accountants import create_accountant

    if steps <= 0:
        return 0.0
    acc = create_accountant(accountant)
    acc.history = [(noise_multiplier, sample_rate, steps)]
    return float(acc.get_epsilon(delta=delta))


@dataclass(frozen=True)
class PrivacyPlan:
    """A DP task's mechanism: per-example clipping to ``clip_norm`` and Gaussian noise of std
    ``noise_multiplier * clip_norm`` at each of ``steps_per_round`` steps, for ``rounds`` rounds."""

    target: PrivacySpec
    rounds: int
    steps_per_round: int
    noise_multiplier: float

    @classmethod
    def of(cls, spec: TrainingTaskSpec) -> PrivacyPlan:
        """The plan of a task with a ``privacy`` section (SpecError without one)."""
        if spec.privacy is None:
            raise SpecError("privacy: the task is not differentially private")
        return cls.for_target(spec.privacy, rounds=spec.rounds, inner_steps=spec.inner_steps)

    @classmethod
    def for_target(cls, target: PrivacySpec, *, rounds: int, inner_steps: int) -> PrivacyPlan:
        """The plan for ``target`` over ``rounds`` rounds of ``inner_steps`` steps (SpecError
        beyond the accountant's step limit)."""
        check_private_steps(target.accountant, rounds * inner_steps)
        sigma = noise_multiplier_for(
            target.epsilon, target.delta, target.sample_rate, rounds * inner_steps, target.accountant
        )
        return cls(target=target, rounds=rounds, steps_per_round=inner_steps, noise_multiplier=sigma)

    @property
    def clip_norm(self) -> float:
        return self.target.clip_norm

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise added to a step's sum of clipped gradients."""
        return self.noise_multiplier * self.target.clip_norm

    def epsilon_after(self, rounds_trained: int) -> float:
        """ε spent by a trainer after training ``rounds_trained`` rounds of this task."""
        t = self.target
        return epsilon_spent(
            self.noise_multiplier, t.sample_rate, rounds_trained * self.steps_per_round, t.delta, t.accountant
        )

    def epsilon_per_round(self, trained: Sequence[bool]) -> list[float]:
        """The ε a trainer has spent after each round (cumulative), given whether it trained in
        each round: flat across a round it did not train in."""
        out: list[float] = []
        done = 0
        cache: dict[int, float] = {}
        for flag in trained:
            done += bool(flag)
            if done not in cache:
                cache[done] = self.epsilon_after(done)
            out.append(cache[done])
        return out

    def ledger(self, trained: Mapping[str, Sequence[bool]]) -> dict[str, list[float]]:
        """:meth:`epsilon_per_round` of every trainer address, rounded to 6 decimals."""
        return {who: [round(e, 6) for e in self.epsilon_per_round(flags)] for who, flags in trained.items()}

    def to_mapping(self) -> dict[str, float | int | str]:
        t = self.target
        return {
            "target_epsilon": t.epsilon,
            "delta": t.delta,
            "clip_norm": t.clip_norm,
            "sample_rate": t.sample_rate,
            "accountant": t.accountant,
            "noise_multiplier": round(self.noise_multiplier, 6),
            "steps_per_round": self.steps_per_round,
            "rounds": self.rounds,
        }
