"""Defaults of the post-task form (the sponsor's default task, ``syncline.sponsor.task_defaults``)
and every bound the contract checks at ``postTask`` (``TaskEscrow._validateSpec``, ``TierPolicy``),
so the browser can validate as it types."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from syncline.api.schemas import (
    CORPUS_BOUNDS,
    MODEL_BOUNDS,
    SERIES_BOUNDS,
    SERIES_MODEL_BOUNDS,
    VISION_BOUNDS,
    VIT_BOUNDS,
    WINDOW_BOUNDS,
    CorpusParams,
    WindowParams,
)
from syncline.modality.language import METHODS
from syncline.modality.timeseries import FAMILIES as SERIES_FAMILIES
from syncline.modality.timeseries import SCALINGS
from syncline.modality.vision import FAMILIES as VISION_FAMILIES
from syncline.protocol import tier_policy
from syncline.protocol.enums import AggregationRule, Tier
from syncline.protocol.spec import (
    LORA_MAX_ALPHA,
    LORA_MAX_RANK,
    LORA_MAX_TARGETS,
    MAX_PARAM_COUNT,
    MAX_SHARDS,
    MAX_TRAINERS,
    MAX_WINDOW_S,
    MAX_WITNESSES,
    MIN_CHALLENGE_WINDOW_S,
    ONCHAIN_BITS,
    PPM,
)
from syncline.sponsor.data_sources import (
    DEFAULT_SPLIT,
    DEFAULT_TEXT_FIELD,
    DEFAULT_TEXT_GLOBS,
    RECORD_SOURCES,
    SOURCE_OPTIONS,
    SOURCE_TYPES,
)
from syncline.sponsor.task_defaults import DEFAULT_LORA, TaskDefaults, default_task
from syncline.sponsor.timeseries_task import (
    DEFAULT_DATASETS,
    DEFAULT_TIMESERIES_MODEL,
    STATSMODELS_DATASETS,
    WindowPlan,
)
from syncline.sponsor.timeseries_task import FILE_TYPES as SERIES_FILE_TYPES
from syncline.sponsor.vision_task import DEFAULT_VISION_MODEL, IMAGE_SOURCE_TYPES

DEFAULT_SHARDS = 6
"""The shards of a vision or time-series task the form starts from (the CLI's default)."""
DEVNET_WITNESS_ACCOUNTS = (4, 5, 6)  # the demo's witness accounts
METHOD_FIELDS: dict[str, tuple[str, ...]] = {
    "pretrain": ("text_field",),
    "sft": ("prompt_field", "response_field"),
}
"""The record fields the form asks for under each training method: pretraining reads a text field
(``text`` when not given) or whole documents; SFT reads a prompt field and a response field."""
METHOD_REQUIRES: dict[str, tuple[str, ...]] = {"pretrain": (), "sft": ("prompt_field", "response_field")}
"""The fields a method cannot train without: SFT needs prompt/response pairs (the loss is on the
response), so only a source type that takes both fields can feed it."""


def default_spec(defaults: TaskDefaults, witnesses: Sequence[str], now: int) -> dict[str, Any]:
    """The default task (``syncline.sponsor.task_defaults.default_task``) with every rule parameter
    spelled out, the given witnesses and wei as decimal strings."""
    spec = default_task(defaults, [], now)
    spec["aggregation"] = {"rule": defaults.rule, "trim_fraction": 0.0, "krum_f": 0, "clip_radius": 0.0}
    spec["witnesses"] = [w.lower() for w in witnesses]
    return {k: str(v) if k.endswith("_wei") else v for k, v in spec.items()}


def limits(now: int) -> dict[str, Any]:
    """Every rule ``postTask`` enforces, as data (plus the API's own corpus/model size bounds)."""
    return {
        "tier_rules": {
            tier.name.lower(): [r.name.lower() for r in AggregationRule if tier_policy.admits(tier, r)] for tier in Tier
        },
        "tiers": [t.name.lower() for t in Tier],
        "rules": [r.name.lower() for r in AggregationRule],
        "rule_param_field": {
            "trimmed_mean": "trim_fraction",
            "krum": "krum_f",
            "multi_krum": "krum_f",
            "centered_clip": "clip_radius",
        },
        "trimmed_mean": {
            "trim_fraction_min_exclusive": 0.0,
            "trim_fraction_max_exclusive": 0.5,
            "rule": "t = floor(round(trim_fraction * 10000) * min_trainers / 10000) needs t >= 1 and 2t < min_trainers",
        },
        "krum": {"rule": "min_trainers >= 2 * krum_f + 3 (krum and multi_krum)"},
        "centered_clip": {"rule": "round(clip_radius * 1e6) must be > 0 and < 2^32"},
        "parameterless_rules": ["mean", "coordinate_median"],
        "gradient_bits": [8, 16],
        "bps": tier_policy.BPS,
        "max_slash_bps": tier_policy.BPS,
        "max_window_s": MAX_WINDOW_S,
        "min_challenge_window_s": MIN_CHALLENGE_WINDOW_S,
        "max_trainers": MAX_TRAINERS,
        "max_witnesses": MAX_WITNESSES,
        "max_shards": MAX_SHARDS,
        "min_trainers_min": 1,
        "threshold_min": 1,
        "threshold_max": "number of witnesses",
        "witnesses": "distinct non-zero 20-byte addresses, 1..32 of them, not the sponsor's own",
        "positive": [
            "rounds",
            "inner_steps",
            "round_duration_s",
            "trainer_stake_wei",
            "reward_pool_wei",
            "witness_bond_wei",
        ],
        "non_negative": [
            "grace_window_s",
            "witness_fee_wei",
            "max_missed_rounds",
            "challenge_bond_wei",
        ],
        "windows": ["round_duration_s", "grace_window_s", "challenge_window_s"],
        "enrollment_deadline": {"min_exclusive": now, "max": now + MAX_WINDOW_S},
        "checkpoint_interval": "0 (= inner_steps) or 1..inner_steps",
        "trainers": (
            f"1 <= min_trainers <= max_trainers <= {MAX_TRAINERS} "
            f"and max_trainers <= corpus.shard_count <= {MAX_SHARDS}"
        ),
        "outer_optimizer": {
            "lr_min": 1 / PPM,
            "lr_max_exclusive": 2**32 / PPM,
            "momentum_min": 0.0,
            "momentum_max_exclusive": 1.0,
        },
        "uint_max": {name: str(2**bits - 1) for name, bits in ONCHAIN_BITS.items()},
        "escrow": "escrow_wei = reward_pool_wei + witness_fee_wei * threshold * rounds (reward_pool_wei > 0)",
        "deterrence": (
            "trainer_stake_wei * spot_check_ppm >= 2 * ceil(reward_pool_wei / (rounds * min_trainers)) * 1e6; "
            "spot_check_ppm (verification.spot_check_rate * 1e6, rounded up) defaults to the least value that "
            "satisfies it, at most 1e6: trainer_stake_wei >= 2 * ceil(reward_pool_wei / (rounds * min_trainers))"
        ),
        "corpus": {name: {"min": lo, "max": hi} for name, (lo, hi) in CORPUS_BOUNDS.items()},
        "model": {
            **{name: {"min": lo, "max": hi} for name, (lo, hi) in MODEL_BOUNDS.items()},
            "families": ["llama"],
            "max_parameters": MAX_PARAM_COUNT,
            "parameters": (
                "V*h*(tie_word_embeddings ? 1 : 2) + L*(2*h*h + 2*h*kv*(h/a) + 3*h*i + 2*h) + h with "
                "V = corpus.vocab_size, h = hidden_size, i = intermediate_size, L = num_hidden_layers, "
                "a = num_attention_heads, kv = num_key_value_heads"
            ),
            "rules": [
                "hidden_size % num_attention_heads == 0",
                "(hidden_size / num_attention_heads) is even",
                "num_attention_heads % num_key_value_heads == 0",
                "max_position_embeddings >= corpus.seq_len",
                "parameters <= max_parameters",
            ],
        },
    }


def sources(*, data_dir_configured: bool) -> dict[str, Any]:
    """What the form offers for the corpus and the model, as data: the source types and the fields
    each takes (``SOURCE_OPTIONS``), the training methods and the record fields each reads, and
    whether the server's data directory was chosen (else it is ``<state_dir>/data``)."""
    return {
        "types": list(SOURCE_TYPES),
        "default": CorpusParams.model_fields["type"].default,
        "fields": {kind: list(SOURCE_OPTIONS[kind]) for kind in SOURCE_TYPES},
        "record_types": list(RECORD_SOURCES),
        "methods": list(METHODS),
        "default_method": METHODS[0],
        "method_fields": {name: list(fields) for name, fields in METHOD_FIELDS.items()},
        "method_requires": {name: list(fields) for name, fields in METHOD_REQUIRES.items()},
        "default_text_field": DEFAULT_TEXT_FIELD,
        "default_split": DEFAULT_SPLIT,
        "default_globs": list(DEFAULT_TEXT_GLOBS),
        "models": ["config", "pretrained"],
        # LoRA on a pretrained model (peft): the form's defaults and bounds (docs/protocol.md §12.5)
        "lora": {
            **DEFAULT_LORA,
            "max_r": LORA_MAX_RANK,
            "max_alpha": LORA_MAX_ALPHA,
            "max_targets": LORA_MAX_TARGETS,
        },
        "modalities": modalities(),
        "data_dir_configured": data_dir_configured,
        "paths": "relative to the API's data directory (syncline api --data-dir DIR); nothing outside it is read",
    }


def _bounds(table: dict[str, tuple[int, int]]) -> dict[str, dict[str, int]]:
    return {name: {"min": lo, "max": hi} for name, (lo, hi) in table.items()}


def modalities() -> dict[str, Any]:
    """What the form offers for a vision or a time-series task (``POST /api/tasks/prepare`` with
    ``modality``): each one's source types and the fields each takes, the default model and window
    plan, and the bounds the API checks."""
    plan = WindowPlan()
    return {
        "names": ["language", "vision", "time_series"],
        "default": "language",
        "vision": {
            "source_types": list(IMAGE_SOURCE_TYPES),
            "default_source": "digits",
            "source_fields": {
                "digits": ["image_size"],
                "npz": ["path", "image_size"],
                "image_folder": ["path", "image_size", "num_channels"],
            },
            "channels": [1, 3, 4],
            "shard_count": DEFAULT_SHARDS,
            "model": dict(DEFAULT_VISION_MODEL),
            "families": list(VISION_FAMILIES),
            "bounds": {**_bounds(VISION_BOUNDS), **_bounds(VIT_BOUNDS)},
            "rules": [
                "hidden_size % num_attention_heads == 0",
                "image_size % patch_size == 0 (the source's own size when image_size is not given)",
            ],
        },
        "time_series": {
            "source_types": ["statsmodels", *SERIES_FILE_TYPES],
            "default_source": "statsmodels",
            "source_fields": {
                "statsmodels": ["datasets"],
                **{
                    t: ["path", "timestamp_column", "id_column", "value_columns", "freq", "covariates"]
                    for t in SERIES_FILE_TYPES
                },
            },
            "datasets": list(STATSMODELS_DATASETS),
            "default_datasets": list(DEFAULT_DATASETS),
            "columns": {"timestamp_column": "timestamp", "id_column": "id", "value_columns": ["value"]},
            "shard_count": DEFAULT_SHARDS,
            "windows": {name: getattr(plan, name) for name in WindowParams.model_fields},
            "scalings": list(SCALINGS),
            "families": list(SERIES_FAMILIES),
            "models": {
                "patchtst": {k: v for k, v in DEFAULT_TIMESERIES_MODEL.items() if k not in ("family", "norm_type")},
                "patchtsmixer": {"patch_length": 12, "patch_stride": 12, "d_model": 32, "num_layers": 2},
            },
            "bounds": {**_bounds(SERIES_BOUNDS), **_bounds(WINDOW_BOUNDS), **_bounds(SERIES_MODEL_BOUNDS)},
            "rules": [
                "d_model % num_attention_heads == 0 (patchtst)",
                "patch_length <= context_length",
            ],
        },
    }


def template(dev_accounts: Sequence[str], now: int, *, data_dir_configured: bool = False) -> dict[str, Any]:
    """``GET /api/template``: the default task's spec, corpus and model, the limits, the data
    sources and methods the form offers, and the chain time.

    ``now`` is the time the chain's next block will carry (``ApiServices.chain_time``). The default
    enrollment deadline counts from it or from this machine's clock, whichever is later: an idle
    devnet's latest block can be an hour old, and a deadline computed from it is already past when
    the ``postTask`` is mined (``SynclineDeadlineInPast``)."""
    defaults = TaskDefaults()
    start = max(now, int(time.time()))
    witnesses = (
        [dev_accounts[i] for i in DEVNET_WITNESS_ACCOUNTS] if len(dev_accounts) > max(DEVNET_WITNESS_ACCOUNTS) else []
    )
    return {
        "spec": default_spec(defaults, witnesses, start),
        "corpus": defaults.corpus,
        "model": dict(defaults.model),
        "limits": limits(now),
        "sources": sources(data_dir_configured=data_dir_configured),
        "chain_time": now,
    }
