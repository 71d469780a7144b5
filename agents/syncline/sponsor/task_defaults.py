"""The sponsor's default language task: what the web form starts from and the default demo posts.

:class:`TaskDefaults` holds the sizes and rules of that task (a 2-layer Llama on the Shakespeare
shards, 8 DiLoCo rounds of 30 inner steps, three trainers, a 2-of-3 witness committee) and
:func:`default_task` turns them into the spec template ``publish_language_task`` completes with
the model, the dataset and the initial state. The demo's ``DemoPlan`` extends the defaults with how
its agents run; the API's ``GET /api/template`` serves them to the browser. Both import them from
here, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ETH = 10**18

DEFAULT_TASK_NAME = "shakespeare-llama-diloco"
DEFAULT_ENROLLMENT_S = 3600
"""The default enrollment deadline is this many seconds after the chain's current time."""

DEFAULT_LORA: dict[str, Any] = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
"""LoRA's defaults (``model.lora``): rank 8 on every attention projection of a Llama-like model."""


def _default_model() -> dict[str, Any]:
    return {
        "family": "llama",
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "tie_word_embeddings": True,
    }


@dataclass(frozen=True)
class TaskDefaults:
    """Sizes and rules of the default task; the defaults finish in a few minutes on 2 CPU cores.

    ``trainers`` is both ``min_trainers`` and ``max_trainers``; ``witnesses`` is the size of the
    committee the demo runs (the template names its addresses). ``shard_count``, ``vocab_size``,
    ``seq_len`` and ``model`` describe the corpus and the new Llama the artifacts are built from.
    """

    rounds: int = 8
    inner_steps: int = 30
    checkpoint_interval: int = 10  # inner steps between committed checkpoints (0: one segment)
    # Production windows: a round's commit deadline (rounds close early once every trainer has
    # committed), the carry-forward grace, and the challenge window (at least the contract's
    # MIN_CHALLENGE_WINDOW, 600 s; an accused answers a claim within half of it). The demo passes
    # them in seconds of wall time with the devnet's fast clock (DemoPlan.clock_speed), never
    # with shorter windows.
    round_duration_s: int = 600
    grace_window_s: int = 300
    challenge_window_s: int = 900
    enrollment_window_s: int = DEFAULT_ENROLLMENT_S
    trainers: int = 3
    witnesses: int = 3
    threshold: int = 2
    shard_count: int = 6
    vocab_size: int = 1024
    seq_len: int = 64
    rule: str = "coordinate_median"
    tier: str = "verified"
    trainer_stake_wei: int = 1 * ETH
    witness_bond_wei: int = 1 * ETH  # as much at stake as a trainer
    challenge_bond_wei: int = ETH // 10
    model: dict[str, Any] = field(default_factory=_default_model)
    # eager: trainers upload every checkpoint with each commitment; on-demand: only the manifest,
    # and a segment's checkpoints when the committee's spot-check draw or a claim names it.
    checkpoints: str = "on-demand"
    # The committee's draw rate (None: the least that deters, 2R / stake with R = reward_pool /
    # (rounds x trainers): 0.25 at these defaults, R = 0.125 ETH against a 1 ETH stake; postTask
    # refuses a lower one).
    spot_check_rate: float | None = None

    @property
    def corpus(self) -> dict[str, int]:
        """The corpus sizes: shards, tokenizer vocabulary, sequence length."""
        return {"shard_count": self.shard_count, "vocab_size": self.vocab_size, "seq_len": self.seq_len}


def default_task(defaults: TaskDefaults, witnesses: Sequence[str], now: int) -> dict[str, Any]:
    """The spec template of the default task, without its artifacts.

    Parameters
    ----------
    defaults
        The task's sizes and rules (``TaskDefaults()``, or the demo's ``DemoPlan``).
    witnesses
        The committee's addresses, in the order given.
    now
        The chain's current time: the enrollment deadline is ``now + enrollment_window_s``.

    Returns
    -------
    dict
        Every field ``postTask`` needs except ``modality``, ``model``, ``dataset``,
        ``initial_state_root`` and ``param_count`` (the sponsor tooling fills those in); wei as
        integers.
    """
    return {
        "name": DEFAULT_TASK_NAME,
        "tier": defaults.tier,
        "aggregation": {"rule": defaults.rule},
        "inner_steps": defaults.inner_steps,
        "checkpoint_interval": defaults.checkpoint_interval,
        "rounds": defaults.rounds,
        "round_duration_s": defaults.round_duration_s,
        "grace_window_s": defaults.grace_window_s,
        "challenge_window_s": defaults.challenge_window_s,
        "trainer_stake_wei": defaults.trainer_stake_wei,
        "min_trainers": defaults.trainers,
        "max_trainers": defaults.trainers,
        "enrollment_deadline": now + defaults.enrollment_window_s,
        "witnesses": list(witnesses),
        "threshold": defaults.threshold,
        "witness_fee_wei": ETH // 100,
        "reward_pool_wei": 3 * ETH,
        "outer_optimizer": {"lr": 0.7, "momentum": 0.9},
        "gradient_bits": 8,
        "max_missed_rounds": 2,
        "eviction_slash_bps": 1000,
        "witness_bond_wei": defaults.witness_bond_wei,
        "challenge_bond_wei": defaults.challenge_bond_wei,
        **verification_policy(defaults),
    }


def verification_policy(defaults: TaskDefaults) -> dict[str, Any]:
    """The spec's ``verification`` key: absent for eager checkpoints at the derived rate (the
    default policy)."""
    if defaults.checkpoints == "eager":
        return (
            {} if defaults.spot_check_rate is None else {"verification": {"spot_check_rate": defaults.spot_check_rate}}
        )
    policy: dict[str, Any] = {"checkpoints": defaults.checkpoints}
    if defaults.spot_check_rate is not None:
        policy["spot_check_rate"] = defaults.spot_check_rate
    return {"verification": policy}
