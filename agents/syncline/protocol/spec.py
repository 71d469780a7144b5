"""``TrainingTaskSpec``: what a sponsor posts.

The whole spec is a content-addressed artifact: its canonical JSON (sorted keys, no spaces,
integers only where the chain reads them) hashed with keccak256 is the ``specHash`` stored on
chain. ``validate`` applies every rule the contract enforces at ``postTask``, so bad specs fail
here with a one-line reason before any transaction is sent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from eth_utils import to_checksum_address

from syncline.errors import SpecError
from syncline.protocol import merkle, tier_policy
from syncline.protocol.enums import AggregationRule, Modality, Tier, parse_enum
from syncline.protocol.hashing import keccak
from syncline.protocol.spot_checks import (
    CHECKPOINT_MODES,
    DETERRENCE_MARGIN,
    PPM_SCALE,
    deterrence_ppm,
    rate_ppm,
    reward_per_submission,
)
from syncline.protocol.wire import WireFormatError, load_bounded_json

# Solidity integer width of each numeric field of the on-chain TaskSpec (SynclineTypes.sol).
ONCHAIN_BITS: dict[str, int] = {
    "inner_steps": 32,
    "rounds": 32,
    "round_duration_s": 64,
    "grace_window_s": 64,
    "challenge_window_s": 64,
    "enrollment_deadline": 64,
    "trainer_stake_wei": 128,
    "min_trainers": 16,
    "max_trainers": 16,
    "max_missed_rounds": 16,
    "eviction_slash_bps": 16,
    "threshold": 8,
    "witness_fee_wei": 128,
    "gradient_bits": 8,
    "param_count": 64,
    "checkpoint_interval": 32,
    "witness_bond_wei": 128,
    "challenge_bond_wei": 128,
}
# Field names of the on-chain TaskSpec tuple, in SynclineTypes.sol order (YAML spelling).
ONCHAIN_FIELDS: tuple[str, ...] = (
    "spec_hash",
    "spec_uri",
    "model_config_hash",
    "dataset_root",
    "initial_state_root",
    "modality",
    "tier",
    "rule",
    "rule_param",
    "shard_count",
    "inner_steps",
    "rounds",
    "round_duration_s",
    "grace_window_s",
    "challenge_window_s",
    "enrollment_deadline",
    "trainer_stake_wei",
    "min_trainers",
    "max_trainers",
    "max_missed_rounds",
    "eviction_slash_bps",
    "threshold",
    "witness_fee_wei",
    "outer_lr_ppm",
    "outer_momentum_ppm",
    "gradient_bits",
    "param_count",
    "checkpoint_interval",
    "witness_bond_wei",
    "challenge_bond_wei",
    "spot_check_ppm",
    "witnesses",
)
MAX_WINDOW_S = 365 * 24 * 3600  # TaskEscrow.MAX_WINDOW
MIN_CHALLENGE_WINDOW_S = 600  # SynclineStorage.MIN_CHALLENGE_WINDOW: an accused answers within half of it
MAX_TRAINERS = 64
MAX_WITNESSES = 32
MAX_SHARDS = 256
MAX_PARAM_COUNT = 2_000_000_000
"""Largest model (``param_count``) Syncline's agents, blob store and API are built for: twice the
1e9-parameter scale target. The contract's ``paramCount`` is a uint64; this bound is the tooling's,
so that every size limit derived from it (a 16 B/param state is at most 32 GB) stays finite."""
MAX_SPEC_BYTES = 1 << 20
"""Largest spec artifact agents and the API read."""
MAX_SPEC_DEPTH = 8
"""Deepest nesting a spec artifact may have (a model config's own mappings included)."""
PPM = 1_000_000


def _hex32(value: object, field_name: str) -> str:
    if not isinstance(value, str):
        raise SpecError(
            f"{field_name}: expected a 0x-prefixed 32-byte hex string, got {type(value).__name__} "
            "(quote hex values in YAML)"
        )
    text = value.lower()
    if not (text.startswith("0x") and len(text) == 66 and all(c in "0123456789abcdef" for c in text[2:])):
        raise SpecError(f"{field_name}: expected a 0x-prefixed 32-byte hex string, got {value!r}")
    return text


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8 (SpecError for a string UTF-8 cannot
    encode, such as a lone surrogate)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise SpecError(f"spec holds a string that is not valid Unicode text ({exc.reason})") from None


MAX_SPEC_STRING_NODES = 100_000
"""Most strings, numbers and containers :func:`check_spec_strings` walks (a spec artifact is
bounded in size and depth before, this bounds a mapping built in memory)."""


def check_spec_strings(data: object, where: str = "spec") -> None:
    """Raise SpecError (one line naming the field) unless every string in ``data`` (keys and
    values, at any depth) is text a spec may hold: no NUL character and no lone surrogate (which
    UTF-8 cannot encode, so the spec hash could not be computed)."""
    stack: list[tuple[object, str]] = [(data, where)]
    seen = 0
    while stack:
        value, path = stack.pop()
        seen += 1
        if seen > MAX_SPEC_STRING_NODES:
            raise SpecError(f"{where}: more than {MAX_SPEC_STRING_NODES} values")
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str):
                    _check_text(key, f"{path} key")
                stack.append((item, f"{path}.{key}" if isinstance(key, str) and len(key) < 64 else path))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise SpecError(f"{path}: contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(f"{path}: contains a lone surrogate (not valid Unicode text)") from None


VALIDATION_METRICS: dict[Modality, tuple[str, bool]] = {
    Modality.LANGUAGE: ("validation_loss", False),
    Modality.VISION: ("top1_accuracy", True),
    Modality.TIME_SERIES: ("mase", False),
}
"""The metric a task's witnesses vote (x 1e6, docs/protocol.md §11.1) per modality, and whether
higher is better; each modality adapter's ``metric_name`` is its entry."""

LORA_MAX_RANK = 256
LORA_MAX_ALPHA = 1 << 16
LORA_MAX_TARGETS = 64
_MODULE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


@dataclass(frozen=True)
class LoraSpec:
    """Low-rank adapters (LoRA, through ``peft``) on a frozen base model pinned by hash.

    The task's state, layout, payloads and checkpoints cover only the adapter weights (the
    parameters ``peft`` adds and trains); the base model's weights are the blob whose keccak256 is
    ``base_digest`` (a state encoding of the base model's own layout, docs/protocol.md §12.5), read
    by every party that runs the model and never changed by a round.
    """

    r: int
    alpha: int
    target_modules: tuple[str, ...]
    """Names of the modules adapted (``peft``'s ``target_modules``: a module whose name ends with
    one of them), sorted and unique."""
    base_digest: str
    base_uri: str = ""

    def to_mapping(self) -> dict[str, Any]:
        return {
            "r": self.r,
            "alpha": self.alpha,
            "target_modules": list(self.target_modules),
            "base": {"digest": self.base_digest, "uri": self.base_uri},
        }

    @classmethod
    def from_mapping(cls, data: object) -> LoraSpec:
        """Parse ``model.lora`` (one-line ``SpecError`` on anything malformed)."""
        lora = _mapping(data, "model.lora")
        unknown = sorted(set(lora) - {"r", "alpha", "target_modules", "base"})
        if unknown:
            raise SpecError(f"model.lora: unknown field(s) {', '.join(unknown)}")
        r = _int(lora.get("r", 8), "model.lora.r")
        alpha = _int(lora.get("alpha", 2 * r), "model.lora.alpha")
        if not 1 <= r <= LORA_MAX_RANK:
            raise SpecError(f"model.lora.r: {r} is outside 1..{LORA_MAX_RANK}")
        if not 1 <= alpha <= LORA_MAX_ALPHA:
            raise SpecError(f"model.lora.alpha: {alpha} is outside 1..{LORA_MAX_ALPHA}")
        targets = _seq(lora.get("target_modules", ()), "model.lora.target_modules")
        if not 1 <= len(targets) <= LORA_MAX_TARGETS:
            raise SpecError(f"model.lora.target_modules: name 1 to {LORA_MAX_TARGETS} modules (e.g. [q_proj, v_proj])")
        for name in targets:
            if not isinstance(name, str) or not 0 < len(name) <= 128 or not set(name) <= _MODULE_NAME_CHARS:
                raise SpecError(f"model.lora.target_modules: {name!r} is not a module name")
        base = _mapping(lora.get("base", {}), "model.lora.base")
        if "digest" not in base:
            raise SpecError("model.lora.base: needs the digest of the base model's weights")
        return cls(
            r=r,
            alpha=alpha,
            target_modules=tuple(sorted(set(targets))),
            base_digest=_hex32(base["digest"], "model.lora.base.digest"),
            base_uri=str(base.get("uri", "")),
        )


@dataclass(frozen=True)
class ModelArchitecture:
    """Model family and its config (e.g. a ``transformers`` config dict), and the LoRA adapters
    trained on it when the task fine-tunes with LoRA; the hash pins all of them (the base model's
    weights through ``lora.base_digest``)."""

    family: str
    config: Mapping[str, Any]
    lora: LoraSpec | None = None

    def to_mapping(self) -> dict[str, Any]:
        """``{family, config}``, with ``lora`` only when the task trains adapters."""
        data: dict[str, Any] = {"family": self.family, "config": dict(self.config)}
        if self.lora is not None:
            data["lora"] = self.lora.to_mapping()
        return data

    @property
    def config_hash(self) -> str:
        return "0x" + keccak(canonical_json(self.to_mapping())).hex()


@dataclass(frozen=True)
class DatasetManifest:
    """Shards of the training data: content hashes and where to fetch them (locators only)."""

    shard_hashes: tuple[str, ...]
    shard_uris: tuple[str, ...] = ()
    validation_hash: str | None = None
    validation_uri: str | None = None

    @property
    def shard_count(self) -> int:
        return len(self.shard_hashes)

    @property
    def root(self) -> str:
        """Merkle root over the shard hashes (leaf binds the shard index)."""
        return "0x" + merkle.root([bytes.fromhex(h[2:]) for h in self.shard_hashes]).hex()


@dataclass(frozen=True)
class AggregationSpec:
    """The robust aggregation rule and its parameter (see ``rule_param``)."""

    rule: AggregationRule = AggregationRule.MEAN
    trim_fraction: float = 0.0
    krum_f: int = 0
    clip_radius: float = 0.0

    @property
    def rule_param(self) -> int:
        """The single integer the contract stores: trim bps, Krum f, or clip radius in ppm."""
        if self.rule == AggregationRule.TRIMMED_MEAN:
            return round(self.trim_fraction * tier_policy.BPS)
        if self.rule in (AggregationRule.KRUM, AggregationRule.MULTI_KRUM):
            return self.krum_f
        if self.rule == AggregationRule.CENTERED_CLIP:
            return round(self.clip_radius * PPM)
        return 0


@dataclass(frozen=True)
class OuterOptimizerSpec:
    """Nesterov momentum SGD applied by the witnesses (DiLoCo defaults)."""

    lr: float = 0.7
    momentum: float = 0.9


DEVICE_CLASSES = ("cpu-fp32", "cpu-bf16", "cuda-fp32", "cuda-bf16")
"""Device classes a trainer can declare: where it trains and in which precision (``device-dtype``)."""


@dataclass(frozen=True)
class ToleranceModel:
    """Honest-divergence envelope for a re-executed segment of ``n`` inner steps (see
    :mod:`syncline.protocol.tolerance`): the weights' distance in units of the segment's update
    may reach ``weight_base + weight_per_step * n`` over the whole vector -- at least
    ``weight_floor / sqrt(n)`` for a segment that holds AdamW's first step (a new optimizer's first
    step is ``lr * sign(g)``, and bf16 flips the sign of near-zero gradients: short segments from a
    new optimizer diverge most) -- and ``tensor_factor * (weight_base + weight_per_step * n)`` for
    any single tensor, the moments' relative distance
    ``moment_base + moment_per_step * n``, and no coordinate may differ by more than
    ``max_abs_lr * lr * n``. A tensor of one dimension (a bias, a norm's gain or shift) is measured
    in units of at least ``vector_floor * lr * sqrt(n * numel)`` (the rounding noise AdamW turns
    into steps of about ``lr`` where the gradient is ~0, e.g. attention key biases). Defaults are
    calibrated by ``scripts/bench/referee_tolerance.py``; ``vector_floor`` and ``weight_floor`` are
    left out of the canonical JSON at their defaults (policies written before them keep their hash)."""

    weight_base: float = 0.05
    weight_per_step: float = 0.001
    tensor_factor: float = 3.0
    moment_base: float = 0.06
    moment_per_step: float = 0.0005
    max_abs_lr: float = 4.0
    vector_floor: float = 5.0
    weight_floor: float = 0.14

    def weight_bound(self, steps: int, *, first_step: bool = False) -> float:
        """The whole-vector bound: ``weight_base + weight_per_step * n``; at least
        ``weight_floor / sqrt(n)`` when the segment holds some tensor's first AdamW step."""
        linear = self.weight_base + self.weight_per_step * steps
        return max(linear, self.weight_floor / math.sqrt(max(1, steps))) if first_step else linear

    def tensor_bound(self, steps: int) -> float:
        """The per-tensor bound: ``tensor_factor * (weight_base + weight_per_step * n)`` (no floor)."""
        return self.tensor_factor * (self.weight_base + self.weight_per_step * steps)

    def moment_bound(self, steps: int) -> float:
        return self.moment_base + self.moment_per_step * steps


_DEFAULTED_TOLERANCE_FIELDS = ("vector_floor", "weight_floor")
"""Tolerance fields added after policies were written: left out of the canonical JSON at their defaults."""


MAX_MEASUREMENTS = 16
"""Largest measurement allow-list of a Confidential task (the market's ``configureConfidential``)."""


@dataclass(frozen=True)
class ConfidentialSpec:
    """A Confidential task's sealed data and attestation policy (docs/protocol.md §12.8).

    ``verifier``: the attestation verifier contract and ``measurements``: the allow-list, both
    installed on chain by the sponsor's ``configureConfidential`` (agents check they match).
    ``dataset_id``: the random 32 bytes every sealed shard's AES-GCM associated data and every
    wrapped key's HPKE ``info`` bind. The dataset's ``shard_hashes`` / ``validation_hash`` are the
    ciphertext hashes; the envelopes are in the sealed manifest the market's ``getSealedManifest``
    names, whose ``spec_hash`` must be this spec's.
    """

    verifier: str
    measurements: tuple[str, ...]
    dataset_id: str

    def __post_init__(self) -> None:  # one spelling, whoever built it: the spec hash depends on it
        object.__setattr__(self, "verifier", _address(self.verifier, "confidential.verifier"))
        object.__setattr__(
            self, "measurements", tuple(_hex32(m, "confidential.measurements") for m in self.measurements)
        )
        object.__setattr__(self, "dataset_id", _hex32(self.dataset_id, "confidential.dataset_id"))

    def to_mapping(self) -> dict[str, Any]:
        return {"verifier": self.verifier, "measurements": list(self.measurements), "dataset_id": self.dataset_id}

    @classmethod
    def from_mapping(cls, data: object) -> ConfidentialSpec:
        d = _mapping(data, "confidential")
        unknown = sorted(set(d) - {"verifier", "measurements", "dataset_id"})
        if unknown:
            raise SpecError(f"confidential: unknown field(s) {', '.join(unknown)}")
        try:
            measurements = _seq(d["measurements"], "confidential.measurements")
            if not 1 <= len(measurements) <= MAX_MEASUREMENTS:
                raise SpecError(f"confidential.measurements: expected 1 to {MAX_MEASUREMENTS} values")
            hexes = tuple(_hex32(m, "confidential.measurements") for m in measurements)
            if len(set(hexes)) != len(hexes):
                raise SpecError("confidential.measurements: duplicate measurement")
            verifier = _address(d["verifier"], "confidential.verifier")
            if int(verifier, 16) == 0:
                raise SpecError("confidential.verifier: the zero address is not a verifier")
            return cls(
                verifier=verifier, measurements=hexes, dataset_id=_hex32(d["dataset_id"], "confidential.dataset_id")
            )
        except KeyError as exc:
            raise SpecError(f"confidential: missing field {exc.args[0]!r}") from None


@dataclass(frozen=True)
class VerificationPolicy:
    """How training-fraud referees judge a re-executed segment.

    ``device_classes``: what trainers may declare in their checkpoints (a checkpoint declaring
    another class is guilty: the declaration is bound by the committed checkpoint root).
    ``tolerance``: the envelope a re-executed segment is judged by unless it replays bit for bit
    (a referee of the trainer's own device class and deterministic mode tries that first; other
    CPU kernels or torch builds miss it, docs/protocol.md §13.6).
    ``checkpoints``: ``eager`` (every checkpoint is uploaded with the commitment) or ``on-demand``
    (only the manifest; a segment's checkpoints when the committee's draw or a claim asks, see
    :mod:`syncline.protocol.spot_checks`). ``spot_check_rate``: the committee draw's rate, in both
    modes (None: the least rate that deters, ``TrainingTaskSpec.spot_check_ppm``); the chain holds
    it as ``spotCheckPpm``. Both are left out of the canonical JSON at their defaults, so policies
    written before them keep their hash.
    """

    device_classes: tuple[str, ...] = DEVICE_CLASSES
    tolerance: ToleranceModel = field(default_factory=ToleranceModel)
    checkpoints: str = "eager"
    spot_check_rate: float | None = None

    @property
    def on_demand(self) -> bool:
        """Whether trainers publish checkpoints only when asked."""
        return self.checkpoints == "on-demand"

    def validate(self) -> None:
        """Raise SpecError (one line) on an empty, unknown or duplicated device class or a bad bound."""
        if not self.device_classes:
            raise SpecError("verification.device_classes must list at least one device class")
        unknown = [c for c in self.device_classes if c not in DEVICE_CLASSES]
        if unknown:
            raise SpecError(
                f"verification.device_classes: unknown {', '.join(map(repr, unknown))}; "
                f"use any of {', '.join(DEVICE_CLASSES)}"
            )
        if len(set(self.device_classes)) != len(self.device_classes):
            raise SpecError("verification.device_classes: duplicate device class")
        for f in fields(ToleranceModel):
            value = getattr(self.tolerance, f.name)
            if not (math.isfinite(value) and value >= 0):
                raise SpecError(f"verification.tolerance.{f.name} must be a finite number >= 0, got {value!r}")
        if self.checkpoints not in CHECKPOINT_MODES:
            raise SpecError(f"verification.checkpoints {self.checkpoints!r}: use one of {', '.join(CHECKPOINT_MODES)}")
        rate = self.spot_check_rate
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not (math.isfinite(rate) and 0 < rate <= 1)
        ):
            raise SpecError(f"verification.spot_check_rate must be a number within (0, 1], got {rate!r}")

    def to_mapping(self) -> dict[str, Any]:
        tolerance = asdict(self.tolerance)
        for name in _DEFAULTED_TOLERANCE_FIELDS:
            if getattr(self.tolerance, name) == getattr(ToleranceModel, name):
                del tolerance[name]  # at its default: out of the canonical JSON
        data: dict[str, Any] = {"device_classes": list(self.device_classes), "tolerance": tolerance}
        if self.on_demand:
            data["checkpoints"] = self.checkpoints
        if self.spot_check_rate is not None:
            data["spot_check_rate"] = float(self.spot_check_rate)
        return data

    @classmethod
    def from_mapping(cls, data: object) -> VerificationPolicy:
        raw = dict(_mapping(data, "verification"))
        tol = dict(_mapping(raw.pop("tolerance", {}), "verification.tolerance"))
        classes = _seq(raw.pop("device_classes", DEVICE_CLASSES), "verification.device_classes")
        checkpoints = raw.pop("checkpoints", "eager")
        if not isinstance(checkpoints, str):
            raise SpecError(f"verification.checkpoints must be a string, got {checkpoints!r}")
        rate = raw.pop("spot_check_rate", None)
        if raw:
            raise SpecError(f"verification: unknown field(s) {', '.join(sorted(raw))}")
        defaults = ToleranceModel()
        values = {
            f.name: _float(tol.pop(f.name, getattr(defaults, f.name)), f"verification.tolerance.{f.name}")
            for f in fields(ToleranceModel)
        }
        if tol:
            raise SpecError(f"verification.tolerance: unknown field(s) {', '.join(sorted(tol))}")
        policy = cls(
            device_classes=tuple(str(c) for c in classes),
            tolerance=ToleranceModel(**values),
            checkpoints=checkpoints,
            spot_check_rate=None if rate is None else _float(rate, "verification.spot_check_rate"),
        )
        policy.validate()
        return policy


PRIVACY_ACCOUNTANTS = ("rdp", "prv")
"""Privacy accountants a DP task may name (Opacus's RDP and PRV accountants)."""
MAX_PRIVATE_STEPS: dict[str, int] = {"rdp": 1_000_000, "prv": 10_000}
"""Most DP-SGD steps (``rounds * inner_steps``) a DP task may have per accountant: every party
computes ε from them, and Opacus's PRV accountant takes about 0.7 s per evaluation at 10^4 steps
(60 s at 10^6), RDP milliseconds."""


def check_private_steps(accountant: str, steps: int) -> None:
    """SpecError (one line) when a DP task's ``rounds * inner_steps`` exceeds its accountant's limit."""
    limit = MAX_PRIVATE_STEPS.get(accountant, 0)
    if steps > limit:
        raise SpecError(
            f"privacy: rounds x inner_steps = {steps} exceeds the {accountant} accountant's limit of {limit} steps"
        )


MAX_PRIVACY_EPSILON = 100.0
"""Largest ``privacy.epsilon`` a spec may target: far beyond any meaningful guarantee, and it
keeps the noise-multiplier search (privacy/accounting.py) bounded."""


@dataclass(frozen=True)
class PrivacySpec:
    """Differentially private training (DP-SGD in every trainer's inner loop, docs/privacy.md).

    Each trainer clips every example's gradient to ``clip_norm`` and adds Gaussian noise of
    standard deviation ``noise_multiplier * clip_norm`` per step; the noise multiplier is the
    smallest the ``accountant`` finds for the target (``epsilon``, ``delta``) over
    ``rounds * inner_steps`` steps at ``sample_rate`` (a step's batch over the examples of a
    trainer's shards), so the noise is a function of the spec alone.
    """

    epsilon: float
    delta: float
    clip_norm: float
    sample_rate: float
    accountant: str = "rdp"

    def validate(self) -> None:
        """Raise SpecError (one line naming ``privacy.*``) on a bad target or parameter."""
        for name in ("epsilon", "delta", "clip_norm", "sample_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise SpecError(f"privacy.{name} must be a finite number, got {value!r}")
        if not 0 < self.epsilon <= MAX_PRIVACY_EPSILON:
            raise SpecError(f"privacy.epsilon must be within (0, {MAX_PRIVACY_EPSILON:g}], got {self.epsilon!r}")
        if not 0 < self.delta < 1:
            raise SpecError(f"privacy.delta must be within (0, 1), got {self.delta!r}")
        if not self.clip_norm > 0:
            raise SpecError(f"privacy.clip_norm must be > 0, got {self.clip_norm!r}")
        if not 0 < self.sample_rate <= 1:
            raise SpecError(f"privacy.sample_rate must be within (0, 1], got {self.sample_rate!r}")
        if self.accountant not in PRIVACY_ACCOUNTANTS:
            raise SpecError(f"privacy.accountant {self.accountant!r}: use one of {', '.join(PRIVACY_ACCOUNTANTS)}")

    def to_mapping(self) -> dict[str, Any]:
        return {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "clip_norm": float(self.clip_norm),
            "sample_rate": float(self.sample_rate),
            "accountant": self.accountant,
        }

    @classmethod
    def from_mapping(cls, data: object) -> PrivacySpec:
        raw = dict(_mapping(data, "privacy"))
        missing = [n for n in ("epsilon", "delta", "clip_norm", "sample_rate") if n not in raw]
        if missing:
            raise SpecError(f"privacy: missing field(s) {', '.join(missing)}")
        accountant = raw.pop("accountant", "rdp")
        values = {n: _float(raw.pop(n), f"privacy.{n}") for n in ("epsilon", "delta", "clip_norm", "sample_rate")}
        if raw:
            raise SpecError(f"privacy: unknown field(s) {', '.join(sorted(raw))}")
        if not isinstance(accountant, str):
            raise SpecError(f"privacy.accountant must be a string, got {accountant!r}")
        spec = cls(accountant=accountant, **values)
        spec.validate()
        return spec


DEFAULT_VERIFICATION = VerificationPolicy()
"""The policy of a spec that declares none (its canonical JSON then has no ``verification`` key)."""


@dataclass(frozen=True)
class TrainingTaskSpec:
    """Everything that defines a training run. Amounts are in wei, durations in seconds."""

    name: str
    modality: Modality
    model: ModelArchitecture
    dataset: DatasetManifest
    tier: Tier
    aggregation: AggregationSpec
    inner_steps: int
    rounds: int
    round_duration_s: int
    grace_window_s: int
    challenge_window_s: int
    trainer_stake_wei: int
    min_trainers: int
    max_trainers: int
    enrollment_deadline: int
    witnesses: tuple[str, ...]
    threshold: int
    witness_fee_wei: int
    reward_pool_wei: int
    initial_state_root: str
    outer_optimizer: OuterOptimizerSpec = field(default_factory=OuterOptimizerSpec)
    gradient_bits: int = 8
    max_missed_rounds: int = 2
    eviction_slash_bps: int = 1_000
    # Number of model parameters (the canonical layout's numel); the sponsor tooling fills it in.
    param_count: int = 0
    # Inner steps between committed checkpoints (training-fraud proofs); 0 means inner_steps.
    checkpoint_interval: int = 0
    # Bond each witness posts before voting (slashed on a proven witness fault); must be positive.
    witness_bond_wei: int = 0
    # Bond a challenger posts with each challenge (returned with a bounty when the fault is proven).
    challenge_bond_wei: int = 0
    # How training-fraud referees compare re-executed segments; None: DEFAULT_VERIFICATION (and
    # no ``verification`` key in the canonical JSON, so specs written before it keep their hash).
    verification: VerificationPolicy | None = None
    # A Confidential task's sealed data and attestation policy; None (and no ``confidential`` key in
    # the canonical JSON) for every other tier.
    confidential: ConfidentialSpec | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Differentially private training (docs/privacy.md); None: none (and no ``privacy`` key in the
    # canonical JSON, so specs written before it keep their hash).
    privacy: PrivacySpec | None = None

    # ------------------------------------------------------------------ derived values

    @property
    def witness_fee_budget_wei(self) -> int:
        return self.witness_fee_wei * self.threshold * self.rounds

    @property
    def outer_lr_ppm(self) -> int:
        """Outer learning rate in parts per million, as the chain stores it."""
        return round(self.outer_optimizer.lr * PPM)

    @property
    def outer_momentum_ppm(self) -> int:
        return round(self.outer_optimizer.momentum * PPM)

    @property
    def checkpoint_interval_steps(self) -> int:
        """Inner steps between committed checkpoints, as the chain stores it (0 means ``inner_steps``)."""
        return self.checkpoint_interval or self.inner_steps

    @property
    def checkpoint_segments(self) -> int:
        """Number of checkpointed inner-loop segments: ``ceil(inner_steps / checkpoint_interval_steps)``."""
        interval = self.checkpoint_interval_steps
        return -(-self.inner_steps // interval) if interval > 0 else 0

    @property
    def verification_policy(self) -> VerificationPolicy:
        """The declared verification policy, or :data:`DEFAULT_VERIFICATION`."""
        return self.verification if self.verification is not None else DEFAULT_VERIFICATION

    @property
    def reward_per_submission_wei(self) -> int:
        """``R = ceil(reward_pool / (rounds · min_trainers))``, as ``postTask`` computes it."""
        return reward_per_submission(self.reward_pool_wei, self.rounds, self.min_trainers)

    @property
    def spot_check_ppm(self) -> int:
        """The committee's spot-check rate in parts per million, as the chain stores it
        (``spotCheckPpm``): the declared ``verification.spot_check_rate`` rounded up, else the least
        rate that deters (``2R · 10^6 / stake`` rounded up, at most 10^6). The draw applies in
        eager and on-demand tasks alike (:mod:`syncline.protocol.spot_checks`)."""
        declared = self.verification_policy.spot_check_rate
        if declared is not None:
            return rate_ppm(declared)
        return min(
            PPM_SCALE, deterrence_ppm(self.trainer_stake_wei, self.reward_pool_wei, self.rounds, self.min_trainers)
        )

    @property
    def spot_check_rate(self) -> float:
        """``spot_check_ppm / 10^6``: the probability that the committee's draw names a submission."""
        return self.spot_check_ppm / PPM_SCALE

    @property
    def escrow_wei(self) -> int:
        """What ``postTask`` must be sent: reward pool plus witness fee budget."""
        return self.reward_pool_wei + self.witness_fee_budget_wei

    def to_mapping(self) -> dict[str, Any]:
        data = asdict(self)
        data["modality"] = self.modality.name.lower()
        data["tier"] = self.tier.name.lower()
        data["aggregation"]["rule"] = self.aggregation.rule.name.lower()
        data["model"] = self.model.to_mapping()
        data["metadata"] = dict(self.metadata)
        data["witnesses"] = list(self.witnesses)
        data["dataset"]["shard_hashes"] = list(self.dataset.shard_hashes)
        data["dataset"]["shard_uris"] = list(self.dataset.shard_uris)
        if self.verification is None:
            del data["verification"]
        else:
            data["verification"] = self.verification.to_mapping()
        if self.confidential is None:
            del data["confidential"]
        else:
            data["confidential"] = self.confidential.to_mapping()
        if self.privacy is None:
            del data["privacy"]
        else:
            data["privacy"] = self.privacy.to_mapping()
        return data

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.to_mapping())

    @property
    def spec_hash(self) -> str:
        return "0x" + keccak(self.canonical_bytes()).hex()

    # ------------------------------------------------------------------ validation

    def validate(self, *, now: int | None = None, sponsor: str | None = None) -> TrainingTaskSpec:
        """Raise ``SpecError`` (one line) for any rule ``postTask`` would reject, or a model larger
        than :data:`MAX_PARAM_COUNT`; return self. ``sponsor`` (the address that will post it), when
        given, may not be a witness."""
        if self.param_count <= 0:
            raise SpecError(
                "param_count must be positive: it is the model's parameter count, "
                "which the sponsor tooling (`syncline train post-task` with dataset_source) fills in"
            )
        if self.param_count > MAX_PARAM_COUNT:
            raise SpecError(
                f"param_count {self.param_count} exceeds {MAX_PARAM_COUNT}, the largest model Syncline's agents "
                "and blob store are built for"
            )
        if self.inner_steps > 0 and not 1 <= self.checkpoint_interval_steps <= self.inner_steps:
            raise SpecError(
                f"checkpoint_interval {self.checkpoint_interval} must be within 1..inner_steps "
                f"({self.inner_steps}), or 0 for inner_steps"
            )
        for name in ("witness_bond_wei", "challenge_bond_wei"):
            if getattr(self, name) < 0:
                raise SpecError(f"{name} must not be negative")
        if self.witness_bond_wei == 0:
            raise SpecError("witness_bond_wei must be positive: every witness puts a bond at stake before it votes")
        for name, bits in ONCHAIN_BITS.items():
            value = getattr(self, name)
            if not 0 <= value < 2**bits:
                raise SpecError(f"{name}={value} does not fit the contract's uint{bits} field")
        if not 0 <= self.aggregation.rule_param < 2**32:
            raise SpecError(f"aggregation parameter {self.aggregation.rule_param} does not fit uint32")
        n = len(self.witnesses)
        if not (0 < self.threshold <= n) or n > MAX_WITNESSES:
            raise SpecError(f"threshold k={self.threshold} must satisfy 0 < k <= witnesses ({n}, at most 32)")
        if len({w.lower() for w in self.witnesses}) != n:
            raise SpecError("witnesses: duplicate address")
        if any(int(w, 16) == 0 for w in self.witnesses):
            raise SpecError("witnesses: the zero address cannot be a witness")
        if sponsor is not None and sponsor.lower() in {w.lower() for w in self.witnesses}:
            raise SpecError(f"witnesses: the sponsor {sponsor} cannot be a witness of its own task")
        for name in ("rounds", "inner_steps", "round_duration_s", "trainer_stake_wei", "reward_pool_wei"):
            if getattr(self, name) <= 0:
                raise SpecError(f"{name} must be positive")
        if int(self.initial_state_root, 16) == 0:
            raise SpecError("initial_state_root must not be zero (use the state root of the initial model)")
        for name in ("grace_window_s", "challenge_window_s", "witness_fee_wei", "max_missed_rounds"):
            if getattr(self, name) < 0:
                raise SpecError(f"{name} must not be negative")
        if not (1 <= self.min_trainers <= self.max_trainers <= MAX_TRAINERS):
            raise SpecError(
                f"trainers: need 1 <= min ({self.min_trainers}) <= max ({self.max_trainers}) <= {MAX_TRAINERS}"
            )
        if not (self.max_trainers <= self.dataset.shard_count <= MAX_SHARDS):
            raise SpecError(
                f"dataset: {self.dataset.shard_count} shards; need max_trainers ({self.max_trainers}) <= shards <= 256"
            )
        if self.dataset.shard_uris and len(self.dataset.shard_uris) != self.dataset.shard_count:
            raise SpecError("dataset: shard_uris must list one URI per shard")
        if not 0 <= self.eviction_slash_bps <= tier_policy.BPS:
            raise SpecError(f"eviction_slash_bps {self.eviction_slash_bps} must be within 0..10000")
        if self.gradient_bits not in (8, 16):
            raise SpecError(f"gradient_bits {self.gradient_bits}: only 8 or 16 are defined")
        if not 0 < self.outer_lr_ppm < 2**32 or not 0 <= self.outer_optimizer.momentum < 1:
            raise SpecError("outer_optimizer: need 1e-6 <= lr < 4294 and 0 <= momentum < 1")
        if self.outer_momentum_ppm >= PPM:
            raise SpecError(
                f"outer_optimizer: momentum {self.outer_optimizer.momentum!r} rounds to {self.outer_momentum_ppm} ppm; "
                "the outer step needs at most 999999 ppm (momentum < 0.9999995)"
            )
        if self.verification is not None:
            self.verification.validate()
        if self.confidential is not None and self.tier != Tier.CONFIDENTIAL:
            raise SpecError(f"confidential: only a Confidential task seals its data, not tier {self.tier.name.lower()}")
        if self.privacy is not None:
            self.privacy.validate()
            check_private_steps(self.privacy.accountant, self.rounds * self.inner_steps)
        if not tier_policy.admits(self.tier, self.aggregation.rule):
            raise SpecError(
                f"tier {self.tier.name.lower()} does not admit rule {self.aggregation.rule.name.lower()} "
                "(open admits mean only; use tier verified for robust rules)"
            )
        if not tier_policy.param_consistent(self.aggregation.rule, self.aggregation.rule_param, self.min_trainers):
            raise SpecError(
                f"aggregation {self.aggregation.rule.name.lower()} with parameter {self.aggregation.rule_param} "
                f"cannot work with min_trainers={self.min_trainers}"
            )
        for name in ("round_duration_s", "grace_window_s", "challenge_window_s"):
            if getattr(self, name) > MAX_WINDOW_S:
                raise SpecError(
                    f"{name}={getattr(self, name)} exceeds the contract's limit of {MAX_WINDOW_S} s (365 days)"
                )
        if self.challenge_window_s < MIN_CHALLENGE_WINDOW_S:
            raise SpecError(
                f"challenge_window_s={self.challenge_window_s} is below the contract's minimum of "
                f"{MIN_CHALLENGE_WINDOW_S} s (an accused trainer answers a claim within half of it)"
            )
        if now is not None and self.enrollment_deadline <= now:
            raise SpecError(f"enrollment_deadline {self.enrollment_deadline} is not after now ({now})")
        if now is not None and self.enrollment_deadline - now > MAX_WINDOW_S:
            raise SpecError(f"enrollment_deadline is more than 365 days after now ({now})")
        self._check_deterrence()
        return self

    def _check_deterrence(self) -> None:
        """``postTask``'s deterrence rule: ``trainer_stake · spot_check_ppm >= 2 · R · 10^6``."""
        if self.rounds <= 0 or self.min_trainers <= 0 or self.trainer_stake_wei <= 0:
            return  # refused above with its own message
        reward, ppm = self.reward_per_submission_wei, self.spot_check_ppm
        if self.trainer_stake_wei * ppm >= DETERRENCE_MARGIN * reward * PPM_SCALE:
            return
        least = deterrence_ppm(self.trainer_stake_wei, self.reward_pool_wei, self.rounds, self.min_trainers)
        fix = (
            f"raise verification.spot_check_rate to at least {least / PPM_SCALE:.6f}"
            if least <= PPM_SCALE
            else f"no rate deters: raise trainer_stake_wei to at least {DETERRENCE_MARGIN * reward}"
        )
        raise SpecError(
            f"trainer_stake_wei {self.trainer_stake_wei} does not deter at spot-check rate {ppm / PPM_SCALE:.6f}: "
            f"a submission earns {reward} wei (reward_pool / (rounds x min_trainers)) and postTask requires "
            f"stake x rate >= {DETERRENCE_MARGIN} x that; {fix} (or lower reward_pool_wei)"
        )

    # ------------------------------------------------------------------ chain encoding

    def onchain(self, spec_uri: str) -> tuple[Any, ...]:
        """The ``TaskSpec`` struct tuple for ``postTask`` (field order of SynclineTypes.sol)."""
        return (
            bytes.fromhex(self.spec_hash[2:]),
            spec_uri,
            bytes.fromhex(self.model.config_hash[2:]),
            bytes.fromhex(self.dataset.root[2:]),
            bytes.fromhex(self.initial_state_root[2:]),
            int(self.modality),
            int(self.tier),
            int(self.aggregation.rule),
            self.aggregation.rule_param,
            self.dataset.shard_count,
            self.inner_steps,
            self.rounds,
            self.round_duration_s,
            self.grace_window_s,
            self.challenge_window_s,
            self.enrollment_deadline,
            self.trainer_stake_wei,
            self.min_trainers,
            self.max_trainers,
            self.max_missed_rounds,
            self.eviction_slash_bps,
            self.threshold,
            self.witness_fee_wei,
            self.outer_lr_ppm,
            self.outer_momentum_ppm,
            self.gradient_bits,
            self.param_count,
            self.checkpoint_interval_steps,
            self.witness_bond_wei,
            self.challenge_bond_wei,
            self.spot_check_ppm,
            [to_checksum_address(w) for w in self.witnesses],
        )

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_artifact(cls, raw: bytes) -> TrainingTaskSpec:
        """Parse a spec artifact fetched from the network (size and nesting bounded before parsing).

        Raises
        ------
        SpecError
            One line: too large, too deeply nested, not JSON, or not a valid spec.
        """
        try:
            data = load_bounded_json(raw, max_bytes=MAX_SPEC_BYTES, max_depth=MAX_SPEC_DEPTH, what="spec artifact")
        except WireFormatError as exc:
            raise SpecError(str(exc)) from None
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrainingTaskSpec:
        """Build from a YAML/JSON mapping; every problem is one ``SpecError`` line naming the field."""
        if not isinstance(data, Mapping):
            raise SpecError("spec must be a mapping of fields")
        check_spec_strings(data)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown spec field(s): {', '.join(unknown)}")
        try:
            model = _mapping(data["model"], "model")
            dataset = _mapping(data["dataset"], "dataset")
            aggregation = dict(_mapping(data.get("aggregation", {}), "aggregation"))
            outer = dict(_mapping(data.get("outer_optimizer", {}), "outer_optimizer"))
            spec = cls(
                name=str(data["name"]),
                modality=parse_enum(Modality, data.get("modality", "language"), "modality"),
                model=ModelArchitecture(
                    family=str(model["family"]),
                    config=dict(_mapping(model.get("config", {}), "model.config")),
                    lora=LoraSpec.from_mapping(model["lora"]) if model.get("lora") is not None else None,
                ),
                dataset=DatasetManifest(
                    shard_hashes=tuple(
                        _hex32(h, "dataset.shard_hashes") for h in _seq(dataset["shard_hashes"], "dataset.shard_hashes")
                    ),
                    shard_uris=tuple(str(u) for u in _seq(dataset.get("shard_uris", ()), "dataset.shard_uris")),
                    validation_hash=(
                        _hex32(dataset["validation_hash"], "dataset.validation_hash")
                        if dataset.get("validation_hash")
                        else None
                    ),
                    validation_uri=dataset.get("validation_uri"),
                ),
                tier=parse_enum(Tier, data.get("tier", "open"), "tier"),
                aggregation=AggregationSpec(
                    rule=parse_enum(AggregationRule, aggregation.pop("rule", "mean"), "aggregation.rule"),
                    trim_fraction=_float(aggregation.pop("trim_fraction", 0.0), "aggregation.trim_fraction"),
                    krum_f=_int(aggregation.pop("krum_f", 0), "aggregation.krum_f"),
                    clip_radius=_float(aggregation.pop("clip_radius", 0.0), "aggregation.clip_radius"),
                ),
                inner_steps=_int(data["inner_steps"], "inner_steps"),
                rounds=_int(data["rounds"], "rounds"),
                round_duration_s=_int(data["round_duration_s"], "round_duration_s"),
                grace_window_s=_int(data.get("grace_window_s", 0), "grace_window_s"),
                challenge_window_s=_int(data.get("challenge_window_s", 0), "challenge_window_s"),
                trainer_stake_wei=_int(data["trainer_stake_wei"], "trainer_stake_wei"),
                min_trainers=_int(data["min_trainers"], "min_trainers"),
                max_trainers=_int(data["max_trainers"], "max_trainers"),
                enrollment_deadline=_int(data["enrollment_deadline"], "enrollment_deadline"),
                witnesses=tuple(_address(w) for w in _seq(data["witnesses"], "witnesses")),
                threshold=_int(data["threshold"], "threshold"),
                witness_fee_wei=_int(data.get("witness_fee_wei", 0), "witness_fee_wei"),
                reward_pool_wei=_int(data["reward_pool_wei"], "reward_pool_wei"),
                initial_state_root=_hex32(str(data["initial_state_root"]), "initial_state_root"),
                outer_optimizer=OuterOptimizerSpec(
                    lr=_float(outer.pop("lr", 0.7), "outer_optimizer.lr"),
                    momentum=_float(outer.pop("momentum", 0.9), "outer_optimizer.momentum"),
                ),
                gradient_bits=_int(data.get("gradient_bits", 8), "gradient_bits"),
                max_missed_rounds=_int(data.get("max_missed_rounds", 2), "max_missed_rounds"),
                eviction_slash_bps=_int(data.get("eviction_slash_bps", 1000), "eviction_slash_bps"),
                param_count=_int(data.get("param_count", 0), "param_count"),
                checkpoint_interval=_int(data.get("checkpoint_interval", 0), "checkpoint_interval"),
                witness_bond_wei=_int(data.get("witness_bond_wei", 0), "witness_bond_wei"),
                challenge_bond_wei=_int(data.get("challenge_bond_wei", 0), "challenge_bond_wei"),
                verification=(
                    VerificationPolicy.from_mapping(data["verification"])
                    if data.get("verification") is not None
                    else None
                ),
                confidential=(
                    ConfidentialSpec.from_mapping(data["confidential"])
                    if data.get("confidential") is not None
                    else None
                ),
                metadata=dict(_mapping(data.get("metadata", {}), "metadata")),
                privacy=PrivacySpec.from_mapping(data["privacy"]) if data.get("privacy") is not None else None,
            )
            if aggregation:
                raise SpecError(f"aggregation: unknown field(s) {', '.join(sorted(aggregation))}")
            if outer:
                raise SpecError(f"outer_optimizer: unknown field(s) {', '.join(sorted(outer))}")
        except KeyError as exc:
            raise SpecError(f"missing spec field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise SpecError(str(exc)) from None
        return spec

    def with_updates(self, **changes: Any) -> TrainingTaskSpec:
        return replace(self, **changes)


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(f"{name}: expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise SpecError(f"{name}: expected an integer, got {value!r}") from None


def _seq(value: object, name: str) -> Sequence[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise SpecError(f"{name}: expected a list, got {type(value).__name__}")
    return value


def _mapping(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(f"{name}: expected a mapping of fields, got {type(value).__name__}")
    return value


def _float(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SpecError(f"{name}: expected a number, got {_clip(value)}")
    try:
        return float(value)
    except (ValueError, OverflowError):  # OverflowError: an integer too large for a float
        raise SpecError(f"{name}: expected a number, got {_clip(value)}") from None


def _clip(value: object, limit: int = 40) -> str:
    """A value for a one-line error, shortened (a hostile spec may hold a 400-digit number)."""
    if isinstance(value, int) and value.bit_length() > 128:  # str() of a huge int is slow or refused
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _address(value: object, name: str = "witnesses") -> str:
    text = str(value)
    if not (text.startswith("0x") and len(text) == 42):
        raise SpecError(f"{name}: {text!r} is not a 0x-prefixed 20-byte address")
    try:
        return to_checksum_address(text)
    except ValueError:
        raise SpecError(f"{name}: {text!r} is not a valid address") from None
