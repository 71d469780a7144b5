"""LoRA fine-tuning through ``peft``: low-rank adapters on a frozen base model.

A LoRA task's model is the spec's architecture with the base model's weights (the blob
``model.lora.base`` pins by digest) and ``peft`` adapters on the modules ``target_modules``
names. Only the adapters train, so only they are the task's state: every party takes the state's
parameters with :func:`trained_parameters` (the parameters that require a gradient), which for a
model without adapters is every parameter, so one code path serves both.

Layout names are ``peft``'s own parameter names (``base_model.model.<module>.lora_A.default.weight``);
the export writes the adapter in ``peft``'s format (``save_pretrained``) and the merged model in the
base family's.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from syncline.errors import SpecError
from syncline.protocol.spec import LoraSpec

ADAPTER_NAME = "default"


def trained_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The parameters a round trains and the state holds: those that require a gradient (a LoRA
    model's adapters; every parameter of a model without adapters), by name."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def apply_lora(model: torch.nn.Module, lora: LoraSpec, *, seed: int) -> torch.nn.Module:
    """``model`` (its base weights already loaded) wrapped with ``peft`` LoRA adapters of rank
    ``lora.r`` on ``lora.target_modules``: the base's parameters frozen, the adapters initialised
    as ``peft`` does (``lora_A`` random from ``seed``, ``lora_B`` zero, so the wrapped model
    computes exactly what the base does), no dropout (rounds are re-executed bit for bit)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        target_modules=list(lora.target_modules),
        lora_dropout=0.0,
        bias="none",
    )
    torch.manual_seed(seed)
    try:
        wrapped: torch.nn.Module = get_peft_model(model, config, adapter_name=ADAPTER_NAME)  # type: ignore[arg-type]
    except ValueError as exc:  # no module matches target_modules, or one peft cannot adapt
        raise SpecError(f"model.lora.target_modules: {' '.join(str(exc).split())[:300]}") from None
    return wrapped


def load_base_weights(model: torch.nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy the base model's weights (its whole state dict of parameters) into ``model`` before
    the adapters are added."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(weights))
    if missing:
        raise ValueError(f"base weights lack parameter {missing[0]!r}")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name])


def merged_model(model: torch.nn.Module) -> torch.nn.Module:
    """The base model with the adapters folded into its weights (``peft``'s ``merge_and_unload``):
    the base family's own model class, loadable without ``peft``."""
    merge = getattr(model, "merge_and_unload", None)
    if not callable(merge):
        raise TypeError("the model has no LoRA adapters to merge")
    merged: torch.nn.Module = merge()
    return merged
