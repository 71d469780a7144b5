"""A valid DP task spec for the privacy tests."""

from __future__ import annotations

from typing import Any

from syncline.protocol.spec import TrainingTaskSpec

WITNESS = "0x" + "11" * 20


def dp_mapping(
    *,
    epsilon: float = 5.0,
    rounds: int = 4,
    inner_steps: int = 10,
    sample_rate: float = 0.05,
    accountant: str = "rdp",
    **privacy: Any,
) -> dict[str, Any]:
    return {
        "name": "dp",
        "model": {"family": "llama", "config": {}},
        "dataset": {"shard_hashes": ["0x" + "ab" * 32] * 3},
        "inner_steps": inner_steps,
        "rounds": rounds,
        "round_duration_s": 60,
        "challenge_window_s": 600,
        "trainer_stake_wei": 2,  # postTask: at least 2 x the reward per submission (1 wei)
        "min_trainers": 1,
        "max_trainers": 3,
        "enrollment_deadline": 10**9,
        "witnesses": [WITNESS],
        "threshold": 1,
        "reward_pool_wei": 1,
        "witness_bond_wei": 1,
        "initial_state_root": "0x" + "01" * 32,
        "param_count": 100,
        "privacy": {
            "epsilon": epsilon,
            "delta": 1e-5,
            "clip_norm": 1.0,
            "sample_rate": sample_rate,
            "accountant": accountant,
            **privacy,
        },
    }


def dp_spec(**kwargs: Any) -> TrainingTaskSpec:
    return TrainingTaskSpec.from_mapping(dp_mapping(**kwargs)).validate()
