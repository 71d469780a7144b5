"""Agent configuration files (YAML), parsed into frozen dataclasses with one-line errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from syncline.errors import SynclineError

T = TypeVar("T")


class ConfigError(SynclineError):
    """An agent config file is missing, malformed or inconsistent."""


TRAINER_MISBEHAVIOURS = ("fake-gradient", "lazy", "equivocate")
WITNESS_MISBEHAVIOURS = ("bad-aggregate", "censor", "equivocate")
"""``misbehave`` values of a trainer, TESTS AND DEMOS ONLY: ``fake-gradient`` commits noise instead
of the payload its checkpoints derive; ``lazy`` trains half the inner steps and pads its
checkpoints; ``equivocate`` (equivocation proofs) signs two different commitments for one round."""


@dataclass(frozen=True)
class InnerOptimizerConfig:
    """The trainer's inner optimizer (DiLoCo inner loop), shaped like the reference tutorial."""

    optimizer: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.95
    inner_steps: int = 24
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.optimizer != "adamw":
            raise ConfigError(f"inner.optimizer {self.optimizer!r}: only adamw is implemented")
        if self.lr <= 0 or self.inner_steps <= 0 or self.batch_size <= 0:
            raise ConfigError("inner: lr, inner_steps and batch_size must be positive")


@dataclass(frozen=True)
class AgentConfig:
    """Common to trainer and witness agents."""

    node_rpc: str
    task_id: int
    deployment: Path
    blob_store: str
    state_dir: Path
    key_env: str = "SYNCLINE_PRIVATE_KEY"
    keystore: Path | None = None
    metrics_port: int | None = None
    poll_interval_s: float = 0.5
    misbehave: str | None = None
    # trainer only
    inner: InnerOptimizerConfig = field(default_factory=InnerOptimizerConfig)
    device: str = "cpu"
    dtype: str = "fp32"
    gradient_checkpointing: bool = False
    threads: int | None = None
    # witness only
    eval_batches: int = 8
    eval_batch_size: int = 16
    # witness and challenger: audit closed rounds and prove faults (witnesses do by default)
    challenge: bool = True
    # inner-loop re-execution per accepted submission: all | spot | off (see challenger/training.py)
    training_checks: str = "spot"

    def __post_init__(self) -> None:
        if self.dtype not in ("fp32", "bf16"):
            raise ConfigError(f"dtype {self.dtype!r}: use fp32 or bf16")
        if self.poll_interval_s <= 0:
            raise ConfigError("poll_interval_s must be positive")
        if self.training_checks not in ("all", "spot", "off"):
            raise ConfigError(f"training_checks {self.training_checks!r}: use all, spot or off")


def load_agent_config(path: Path, overrides: Mapping[str, Any] | None = None) -> AgentConfig:
    """Read a YAML agent config; ``overrides`` (from the command line) win over the file."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping")
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return config_from_mapping(raw)


_STR, _INT, _FLOAT, _BOOL = "a string", "an integer", "a number", "true or false"
_FIELD_KINDS: dict[str, str] = {
    "node_rpc": _STR,
    "task_id": _INT,
    "deployment": _STR,
    "blob_store": _STR,
    "state_dir": _STR,
    "key_env": _STR,
    "keystore": _STR,
    "metrics_port": _INT,
    "poll_interval_s": _FLOAT,
    "misbehave": _STR,
    "device": _STR,
    "dtype": _STR,
    "gradient_checkpointing": _BOOL,
    "threads": _INT,
    "eval_batches": _INT,
    "eval_batch_size": _INT,
    "challenge": _BOOL,
    "training_checks": _STR,
    "inner.optimizer": _STR,
    "inner.lr": _FLOAT,
    "inner.weight_decay": _FLOAT,
    "inner.beta1": _FLOAT,
    "inner.beta2": _FLOAT,
    "inner.inner_steps": _INT,
    "inner.batch_size": _INT,
}
_OPTIONAL = {"keystore", "metrics_port", "misbehave", "threads"}


def _check_kind(name: str, value: object) -> None:
    """One-line ConfigError naming the field when ``value`` has the wrong type (bool is not a number)."""
    if value is None and name in _OPTIONAL:
        return
    kind = _FIELD_KINDS[name]
    ok = {
        _STR: isinstance(value, str | Path),
        _INT: isinstance(value, int) and not isinstance(value, bool),
        _FLOAT: isinstance(value, int | float) and not isinstance(value, bool),
        _BOOL: isinstance(value, bool),
    }[kind]
    if not ok:
        raise ConfigError(f"{name}: expected {kind}, got {value!r}")


def config_from_mapping(raw: Mapping[str, Any]) -> AgentConfig:
    known = {f.name for f in fields(AgentConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
    data = dict(raw)
    try:
        inner = data.pop("inner", {}) or {}
        if not isinstance(inner, Mapping):
            raise ConfigError("inner must be a mapping")
        inner_known = {f.name for f in fields(InnerOptimizerConfig)}
        bad = sorted(set(inner) - inner_known)
        if bad:
            raise ConfigError(f"unknown inner field(s): {', '.join(bad)}")
        for key, value in data.items():
            _check_kind(key, value)
        for key, value in inner.items():
            _check_kind(f"inner.{key}", value)
        for key in ("deployment", "state_dir", "keystore"):
            if data.get(key) is not None:
                data[key] = Path(data[key])
        return AgentConfig(inner=InnerOptimizerConfig(**inner), **data)
    except TypeError as exc:
        message = str(exc).split("__init__() ")[-1]
        raise ConfigError(f"config: {message}") from None
