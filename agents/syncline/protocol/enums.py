"""Protocol enums. Their integer values equal the Solidity enums in ``SynclineTypes.sol``."""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

E = TypeVar("E", bound=IntEnum)


class Tier(IntEnum):
    OPEN = 0
    VERIFIED = 1
    CONFIDENTIAL = 2


class AggregationRule(IntEnum):
    MEAN = 0
    TRIMMED_MEAN = 1
    COORDINATE_MEDIAN = 2
    KRUM = 3
    MULTI_KRUM = 4
    CENTERED_CLIP = 5


class Modality(IntEnum):
    LANGUAGE = 0
    TIME_SERIES = 1
    VISION = 2


class TaskStatus(IntEnum):
    NONE = 0
    ENROLLING = 1
    RUNNING = 2
    AWAITING_SEAL = 3
    SEALED = 4
    CANCELLED = 5


class RoundStatus(IntEnum):
    PENDING = 0
    FINALIZED = 1
    CARRIED_FORWARD = 2
    INVALIDATED = 3


class ChallengeKind(IntEnum):
    TRAINER_EQUIVOCATION = 0
    WITNESS_EQUIVOCATION = 1
    AGGREGATION_FRAUD = 2
    CENSORSHIP = 3
    TRAINING_FRAUD = 4


class ChallengeStatus(IntEnum):
    NONE = 0
    OPEN = 1
    UPHELD = 2
    REJECTED = 3
    EXPIRED = 4


def parse_enum(enum: type[E], value: object, field: str) -> E:
    """Accept a member, its int value or its name in any case/separator style ("trimmed-mean")."""
    if isinstance(value, enum):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum(value)
        except ValueError:
            pass
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_").replace(" ", "_")
        aliases = {m.name.replace("_", ""): m for m in enum}
        if key in enum.__members__:
            return enum[key]
        if key.replace("_", "") in aliases:
            return aliases[key.replace("_", "")]
    names = ", ".join(m.name.lower() for m in enum)
    raise ValueError(f"{field}: {value!r} is not one of {names}")
