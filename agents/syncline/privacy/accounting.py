"""Privacy accounting of a DP task, through Opacus's accountants (RDP or PRV).

Everything here is a function of the spec's ``privacy`` section and of which rounds a trainer
trained in, so every party (trainer, witness, API, receipt) computes the same figures: the noise
multiplier is the smallest Opacus's ``get_noise_multiplier`` finds for the target
(``epsilon``, ``delta``) at ``sample_rate`` over the task's ``rounds * inner_steps`` steps, and the
ε a trainer has spent after some rounds is the accountant's ε for that noise multiplier and
sample rate over the steps of the rounds it trained in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from syncline.errors import SpecError
from syncline.protocol.spec import PrivacySpec, TrainingTaskSpec, check_private_steps

EPSILON_TOLERANCE = 0.01
"""How far below the target the noise multiplier's search may leave the final ε (Opacus's
``epsilon_tolerance``)."""


@lru_cache(maxsize=64)
def noise_multiplier_for(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """The smallest noise multiplier σ whose ε over ``steps`` steps at ``sample_rate`` is at most
    ``epsilon`` (Opacus's ``get_noise_multiplier``)."""
    from opacus.accountants.utils import get_noise_multiplier

    if steps <= 0:
        raise SpecError(f"privacy: the task trains {steps} steps; need at least one")
    try:
        return float(
            get_noise_multiplier(
                target_epsilon=epsilon,
                target_delta=delta,
                sample_rate=sample_rate,
                steps=steps,
                accountant=accountant,
                epsilon_tolerance=EPSILON_TOLERANCE,
            )
        )
    except ValueError as exc:
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
