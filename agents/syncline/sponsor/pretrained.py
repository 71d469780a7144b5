"""A sponsor's pretrained model: a local Hugging Face directory (``config.json``, safetensors
weights, ``tokenizer.json``) whose weights are a task's initial state (fine-tuning).

Every file is hostile input, read within bounds and checked before anything is uploaded: the
directory's files exist; ``config.json`` names a causal-LM family ``transformers`` builds (no
remote code); the model it describes has at most ``MAX_PARAM_COUNT`` parameters (counted on the
``meta`` device, before any weight is read); the weight files are safetensors (never pickles) of a
size that model can hold; every parameter is in the files with the config's shape and is finite.
Errors are one line (:class:`PretrainedModelError`).

What the spec pins: ``model.family`` (the config's ``model_type``) and ``model.config`` (the rest
of ``config.json`` with ``dtype`` set to ``float32``: trainers hold float32 weights whatever the
checkpoint's dtype), so trainers and witnesses rebuild the same architecture; the tokenizer
(``tokenizer.json``, published as the task's tokenizer artifact, and the side files in
:data:`TOKENIZER_SIDE_FILES`); the weights through the initial state root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from syncline.errors import SpecError
from syncline.modality.language import MAX_TOKENIZER_BYTES, causal_lm_config
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import MAX_PARAM_COUNT
from syncline.protocol.state import TrainingState

MAX_CONFIG_BYTES = 1 << 20
MAX_SIDE_FILE_BYTES = 1 << 20
TOKENIZER_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
"""Tokenizer files published with ``tokenizer.json`` when the directory has them (the special
tokens and the chat template ``AutoTokenizer`` reads)."""
DROPPED_CONFIG_KEYS = ("model_type", "transformers_version", "_name_or_path", "auto_map", "torch_dtype", "dtype")
WEIGHT_HEADROOM = 1 << 24
"""Bytes allowed beyond 8 per parameter (float64 weights) in the weight files: their headers."""


class PretrainedModelError(SpecError):
    """A pretrained model directory is incomplete, too large, or not a causal LM (one line)."""


@dataclass(frozen=True)
class PretrainedModel:
    """A pretrained model directory, checked: what the spec pins, read within bounds."""

    path: Path
    family: str
    config: dict[str, Any]
    """``config.json`` as the spec's ``model.config`` (see the module docstring)."""
    param_count: int
    tokenizer_json: str
    tokenizer_files: dict[str, bytes] = field(default_factory=dict)
    eos_id: int = 0
    weight_files: tuple[Path, ...] = ()

    @property
    def model_config(self) -> dict[str, Any]:
        """``{family, **config}``: what :meth:`LanguageAdapter.build_model` takes."""
        return {"family": self.family, **self.config}


def resolve_model_dir(text: str, *, base_dir: Path | None = None, root: Path | None = None) -> Path:
    """``model.pretrained`` as a directory: relative to ``base_dir`` (the spec file's directory),
    or confined under ``root`` (the API's data directory)."""
    raw = Path(text) if root is not None else Path(text).expanduser()
    path = ((root if root is not None else (base_dir or Path.cwd())) / raw).resolve()
    if root is not None and not path.is_relative_to(root.resolve()):
        raise PretrainedModelError(
            f"model.pretrained {text!r} is outside the data directory this server reads; put the model there "
            "and give a path relative to it"
        )
    if not path.is_dir():
        raise PretrainedModelError(f"model.pretrained: {text!r} is not a directory")
    return path


def _read(path: Path, limit: int, root: Path | None) -> bytes:
    if root is not None and not path.resolve().is_relative_to(root.resolve()):
        raise PretrainedModelError(f"{path.name}: links outside the data directory this server reads")
    size = path.stat().st_size
    if size > limit:
        raise PretrainedModelError(f"{path}: {size:,} bytes exceed the limit of {limit:,}")
    data = path.read_bytes()
    if len(data) > limit:
        raise PretrainedModelError(f"{path}: grew past the limit of {limit:,} bytes")
    return data


def _json_object(data: bytes, path: Path) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PretrainedModelError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise PretrainedModelError(f"{path}: expected a JSON object")
    return value


def weight_files(path: Path, root: Path | None = None) -> tuple[Path, ...]:
    """The safetensors files of a model directory (one file, or the shards its index lists)."""
    single = path / "model.safetensors"
    if single.is_file():
        return (single,)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        mapping = _json_object(_read(index, MAX_CONFIG_BYTES * 16, root), index).get("weight_map")
        if not isinstance(mapping, dict) or not mapping:
            raise PretrainedModelError(f"{index}: no weight_map")
        names = sorted({str(v) for v in mapping.values()})
        for name in names:
            if Path(name).name != name or not (path / name).is_file():
                raise PretrainedModelError(f"{index}: lists {name!r}, which is not a file of the directory")
        return tuple(path / n for n in names)
    if any(path.glob("*.bin")) or any(path.glob("*.pt")):
        raise PretrainedModelError(
            f"{path}: weights in pickle files (.bin/.pt) are refused; save them as safetensors "
            "(model.save_pretrained(dir, safe_serialization=True))"
        )
    raise PretrainedModelError(f"{path}: no model.safetensors (or model.safetensors.index.json)")


def read_pretrained(path: Path, *, root: Path | None = None) -> PretrainedModel:
    """Check a model directory and read what the spec pins (the weights are read by
    :func:`pretrained_initial_state`, after this has bounded them)."""
    config_path = path / "config.json"
    if not config_path.is_file():
        raise PretrainedModelError(f"{path}: no config.json (a save_pretrained directory is expected)")
    raw = _json_object(_read(config_path, MAX_CONFIG_BYTES, root), config_path)
    family = raw.get("model_type")
    if not isinstance(family, str) or not family:
        raise PretrainedModelError(f"{config_path}: no model_type")
    config = {k: v for k, v in raw.items() if k not in DROPPED_CONFIG_KEYS}
    config["dtype"] = "float32"
    hf_config = causal_lm_config({"family": family, **config})  # SpecError names an unsupported family
    shapes, param_count = meta_shapes(hf_config)
    if param_count > MAX_PARAM_COUNT:
        raise PretrainedModelError(
            f"{path}: the model has {param_count:,} parameters, over the limit of {MAX_PARAM_COUNT:,}"
        )
    files = weight_files(path, root)
    if root is not None:
        for f in files:
            if not f.resolve().is_relative_to(root.resolve()):
                raise PretrainedModelError(f"{f.name}: links outside the data directory this server reads")
    total = sum(f.stat().st_size for f in files)
    if total > 8 * param_count + WEIGHT_HEADROOM:
        raise PretrainedModelError(
            f"{path}: {total:,} bytes of weights are more than a {param_count:,}-parameter model holds"
        )
    check_weight_shapes(files, shapes)
    tokenizer_path = path / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise PretrainedModelError(
            f"{path}: no tokenizer.json (a fast tokenizer; AutoTokenizer.from_pretrained(...).save_pretrained(dir) "
            "writes one)"
        )
    tokenizer_json = _read(tokenizer_path, MAX_TOKENIZER_BYTES, root)
    side = {n: _read(path / n, MAX_SIDE_FILE_BYTES, root) for n in TOKENIZER_SIDE_FILES if (path / n).is_file()}
    text = _tokenizer_text(tokenizer_json, tokenizer_path, hf_config)
    eos_id = end_of_text_id(text, hf_config, side.get("tokenizer_config.json"), path)
    return PretrainedModel(
        path=path,
        family=family,
        config=config,
        param_count=param_count,
        tokenizer_json=text,
        tokenizer_files=side,
        eos_id=eos_id,
        weight_files=files,
    )


def meta_shapes(hf_config: Any) -> tuple[dict[str, tuple[int, ...]], int]:
    """The state-dict shapes of the model ``hf_config`` describes and its parameter count (tied
    ones once), allocating nothing."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, RuntimeError) as exc:
        raise PretrainedModelError(f"the config builds no model: {' '.join(str(exc).split())[:300]}") from None
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    return shapes, sum(p.numel() for p in model.parameters())


FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def check_weight_shapes(files: tuple[Path, ...], shapes: dict[str, tuple[int, ...]]) -> None:
    """Every tensor of the weight files (headers only, no data read) that names a tensor of the
    config's model has its shape, and a floating dtype."""
    from safetensors import safe_open

    for path in files:
        try:
            with safe_open(str(path), "pt") as f:  # type: ignore[no-untyped-call]
                for key in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                    tensor = f.get_slice(key)
                    dtype, shape = tensor.get_dtype(), tuple(tensor.get_shape())
                    if key in shapes and shape != shapes[key]:
                        raise PretrainedModelError(
                            f"{path}: weight {key!r} has shape {list(shape)}, the config's model {list(shapes[key])}"
                        )
                    if dtype not in FLOAT_DTYPES:
                        raise PretrainedModelError(f"{path}: weight {key!r} is {dtype}, not a floating type")
        except PretrainedModelError:
            raise
        except Exception as exc:  # safetensors raises its own error type on a malformed file
            raise PretrainedModelError(f"{path}: not a safetensors file ({' '.join(str(exc).split())[:200]})") from None


def _tokenizer_text(data: bytes, path: Path, hf_config: Any) -> str:
    from tokenizers import Tokenizer

    try:
        text = data.decode("utf-8")
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises its own Exception subclass
        raise PretrainedModelError(f"{path}: not a tokenizers JSON file ({' '.join(str(exc).split())[:200]})") from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    vocab = int(getattr(hf_config, "vocab_size", 0) or 0)
    if size > vocab:
        raise PretrainedModelError(f"{path}: the tokenizer has {size:,} tokens but the model's vocab_size is {vocab:,}")
    return text


def end_of_text_id(tokenizer_json: str, hf_config: Any, tokenizer_config: bytes | None, path: Path) -> int:
    """The token that ends every document: the tokenizer config's ``eos_token``, else the model
    config's ``eos_token_id`` (the first of a list)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    if tokenizer_config is not None:
        eos = _json_object(tokenizer_config, path / "tokenizer_config.json").get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        found = tokenizer.token_to_id(eos) if isinstance(eos, str) else None
        if found is not None:
            return int(found)
    eos_id = getattr(hf_config, "eos_token_id", None)
    if isinstance(eos_id, list) and eos_id:
        eos_id = eos_id[0]
    if isinstance(eos_id, int) and 0 <= eos_id < tokenizer.get_vocab_size(with_added_tokens=True):
        return eos_id
    raise PretrainedModelError(
        f"{path}: no end-of-text token (eos_token in tokenizer_config.json, or eos_token_id in config.json)"
    )


def pretrained_initial_state(model: PretrainedModel, layout: ParameterLayout) -> TrainingState:
    """The task's initial state: the directory's weights in ``layout`` (the layout of the model the
    spec's config builds), quantized to Q32. Every parameter must be in the weight files with its
    shape (tied parameters as the model ties them) and finite."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # the loading report is checked below, not printed
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            model.path,
            config=causal_lm_config(model.model_config),
            dtype=torch.float32,
            use_safetensors=True,
            local_files_only=True,
            output_loading_info=True,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise PretrainedModelError(
            f"{model.path}: the weights do not load: {' '.join(str(exc).split())[:300]}"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    net: torch.nn.Module = loaded[0]
    info: dict[str, Any] = loaded[1]
    for kind, what in (("mismatched_keys", "has a shape other than the config's"), ("missing_keys", "is missing")):
        keys = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(kind) or ())
        if keys:
            raise PretrainedModelError(f"{model.path}: weight {keys[0]!r} {what} ({len(keys)} such)")
    unexpected = sorted(str(k) for k in info.get("unexpected_keys") or ())
    if unexpected:
        raise PretrainedModelError(
            f"{model.path}: weight {unexpected[0]!r} is not a parameter of the config's model ({len(unexpected)} such)"
        )
    params = {name: p.detach() for name, p in net.named_parameters()}
    if ParameterLayout.from_state_dict(params).digest() != layout.digest():
        raise PretrainedModelError(f"{model.path}: the loaded model's parameters differ from the config's model")
    for name, tensor in params.items():
        if not bool(torch.isfinite(tensor).all()):
            raise PretrainedModelError(f"{model.path}: weight {name!r} holds NaN or Inf")
        peak = float(tensor.abs().max()) if tensor.numel() else 0.0
        if peak >= 2.0**14:
            raise PretrainedModelError(
                f"{model.path}: weight {name!r} reaches {peak:g}; the state holds |x| < 16384 (2^14)"
            )
    return TrainingState.from_model_state_dict(params, layout)


def spec_model(model: PretrainedModel) -> dict[str, Any]:
    """The spec's ``model`` object of a pretrained model."""
    return {"family": model.family, "config": dict(model.config)}


def check_seq_len(model: PretrainedModel, seq_len: int) -> None:
    """The model's context holds ``seq_len`` tokens (when its config says how many)."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        limit = model.config.get(key)
        if isinstance(limit, int) and limit < seq_len:
            raise PretrainedModelError(f"seq_len {seq_len} exceeds the model's {key} ({limit})")
