"""The fraud demo's scenarios: who cheats how, and which challenge must end up upheld.

Kept free of heavy imports: the command line lists these names without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from syncline.protocol.enums import ChallengeKind


@dataclass(frozen=True)
class Scenario:
    """Who cheats how, and which challenge must end up upheld; ``dtypes`` names the trainers that
    train in another precision than fp32 (honest ones: the referees must not convict them);
    ``checkpoints`` is the task's checkpoint mode (``on-demand`` scenarios have the committee draw
    every submission: ``spot_check_rate`` 1)."""

    misbehave: dict[str, str]
    expect: ChallengeKind
    story: str
    dtypes: dict[str, str] = field(default_factory=dict)
    checkpoints: str = "eager"

    @property
    def spot_check_rate(self) -> float | None:
        return 1.0 if self.checkpoints == "on-demand" else None


SCENARIOS: dict[str, Scenario] = {
    "trainer-equivocation": Scenario(
        {"trainer-2": "equivocate"},
        ChallengeKind.TRAINER_EQUIVOCATION,
        "trainer-2 announces a signed commitment that differs from the one it commits on chain",
    ),
    "witness-equivocation": Scenario(
        {"witness-2": "equivocate"},
        ChallengeKind.WITNESS_EQUIVOCATION,
        "witness-2 votes the honest result on chain but announces a signed vote for another one",
    ),
    "aggregation": Scenario(
        {"witness-1": "bad-aggregate", "witness-2": "bad-aggregate"},
        ChallengeKind.AGGREGATION_FRAUD,
        "a colluding quorum (witness-1, witness-2) finalizes a state that is not the median step",
    ),
    "censorship": Scenario(
        {"witness-1": "censor", "witness-2": "censor"},
        ChallengeKind.CENSORSHIP,
        "a colluding quorum leaves trainer-1's valid, on-time submission out of the aggregate",
    ),
    "lazy-trainer": Scenario(
        {"trainer-2": "lazy"},
        ChallengeKind.TRAINING_FRAUD,
        "trainer-2 trains half its inner steps and fakes the later checkpoints; "
        "trainer-1 trains honestly in bf16 (CPU autocast) and the fp32 referees must let it be",
        dtypes={"trainer-1": "bf16"},
    ),
    "fake-gradient": Scenario(
        {"trainer-2": "fake-gradient"},
        ChallengeKind.TRAINING_FRAUD,
        "trainer-2 trains honestly but submits a gradient that does not derive from its checkpoints; "
        "trainer-1 trains honestly in bf16 (CPU autocast) and the fp32 referees must let it be",
        dtypes={"trainer-1": "bf16"},
    ),
    "free-rider": Scenario(
        {"trainer-2": "copy-payload"},
        ChallengeKind.TRAINING_FRAUD,
        "trainer-2 waits for another trainer's payload of the open round to copy it plus 5 % noise; "
        "payloads are revealed only after the commit phase closes, so it gets none and commits noise, "
        "which its own honest checkpoints convict",
    ),
    "withheld-checkpoints": Scenario(
        {"trainer-2": "withhold"},
        ChallengeKind.TRAINING_FRAUD,
        "checkpoints on demand: trainer-2 keeps its checkpoints to itself when the committee's spot check "
        "names its segment and stays silent on the claim that follows; trainer-1 and trainer-3 publish theirs",
        checkpoints="on-demand",
    ),
    "answer-withhold": Scenario(
        {"trainer-2": "answer-withhold"},
        ChallengeKind.TRAINING_FRAUD,
        "checkpoints on demand: trainer-2 trains lazily, answers every claim on chain at once and never "
        "publishes a checkpoint; the referees find the store up and the segment absent and vote Unavailable",
        checkpoints="on-demand",
    ),
}
