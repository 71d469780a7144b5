"""How much inner-loop re-execution a challenger spends per accepted submission.

- ``all``: the derivation segment, then every training segment (as much compute as the trainer
  spent; what a dedicated challenger runs).
- ``spot`` (the witnesses' default): the derivation segment of every submission (cheap: one
  checkpoint and a quantization) plus, with probability ``rate``, one training segment drawn at
  random. Witnesses draw independently (seeded by their address), so a trainer that fakes any
  segment of any round is caught with high probability over a run at a fraction of the cost.
- ``off``: no training checks.
"""

from __future__ import annotations

import random

from syncline.court.audit import TrainingChecker
from syncline.court.referee import Outcome, Undecided, check_segment, load_case, training_checker
from syncline.observability import get_logger
from syncline.run.context import TaskContext

log = get_logger("syncline.court")

MODES = ("all", "spot", "off")


def make_training_checker(mode: str, *, seed: int = 0, rate: float = 0.5) -> TrainingChecker | None:
    if mode not in MODES:
        raise ValueError(f"training check mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "off":
        return None
    if mode == "all":
        return training_checker
    rng = random.Random(seed)

    def spot(ctx: TaskContext, round_: int, fragment: int) -> Outcome | None:
        case = load_case(ctx, round_, fragment)
        total = case.inputs.segments
        segments = [total]
        if rng.random() < rate:
            segments.append(rng.randrange(total))
        undecided: Undecided | None = None
        for segment in segments:
            outcome = check_segment(segment, case.claim, case.manifest, case.fetch, case.inputs)
            if isinstance(outcome, Undecided):
                undecided = undecided or outcome
            elif outcome.guilty:
                return outcome
        return undecided

    return spot
