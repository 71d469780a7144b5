"""Modality adapters: how a task's model is built, its data sharded and batched, and its loss measured.

Every adapter implements :class:`~syncline.modality.base.ModalityAdapter`; a task's adapter is
chosen from its spec by :func:`adapter_for`, the one place that maps ``spec.modality`` to an
implementation. Language is implemented now; time series and vision plug in behind the same
interface.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from syncline.errors import SpecError
from syncline.modality.base import ModalityAdapter
from syncline.protocol.enums import Modality
from syncline.protocol.spec import TrainingTaskSpec


def adapter_for(spec: TrainingTaskSpec) -> ModalityAdapter:
    """The modality adapter of ``spec`` (its ``modality`` and the metadata that modality reads:
    for language ``seq_len``, ``method`` and ``token_bytes``); a one-line ``SpecError`` for a
    modality not implemented or metadata it cannot use."""
    meta = dict(spec.metadata)
    if spec.modality == Modality.LANGUAGE:
        from syncline.modality.language import LanguageAdapter

        try:
            return LanguageAdapter(
                seq_len=int(meta["seq_len"]),
                method=str(meta.get("method", "pretrain")),
                token_bytes=int(meta.get("token_bytes", 2)),
            )
        except KeyError:
            raise SpecError("spec metadata needs seq_len") from None
        except (SpecError, TypeError, ValueError) as exc:
            raise SpecError(f"spec metadata: {exc}") from None
    adapter: ModalityAdapter = _module(spec).adapter_from_spec(spec)
    return adapter


MODULES: dict[Modality, str] = {
    Modality.VISION: "syncline.modality.vision",
    Modality.TIME_SERIES: "syncline.modality.timeseries",
}
"""The module implementing each modality other than language: ``adapter_from_spec(spec)`` builds
its adapter, and ``write_export_files(out_dir, spec)`` (optional) writes what a user of the
exported model needs beside ``save_pretrained``'s files."""


def _module(spec: TrainingTaskSpec) -> Any:
    name = MODULES.get(spec.modality)
    try:
        return importlib.import_module(name) if name is not None else None
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
    raise SpecError(f"modality {spec.modality.name.lower()!r} is not implemented by these agents")


def write_export_files(out_dir: Path, spec: TrainingTaskSpec) -> None:
    """Beside the model's ``save_pretrained`` files: what the modality's users need (a vision
    model's image settings, a forecaster's window lengths and scaling); a language task's
    tokenizer is written by the sponsor tooling."""
    if spec.modality == Modality.LANGUAGE:
        return
    writer = getattr(_module(spec), "write_export_files", None)
    if callable(writer):
        writer(out_dir, spec)


__all__ = ["MODULES", "ModalityAdapter", "adapter_for", "write_export_files"]
