"""Modality adapters: how a task's model is built, its data sharded and batched, and its loss measured.

Every adapter implements :class:`~syncline.modality.base.ModalityAdapter`; a task's adapter is
chosen from its spec by :func:`adapter_for`, the one place that maps ``spec.modality`` to an
implementation. Language is implemented now; time series and vision plug in behind the same
interface.
"""

from __future__ import annotations

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
    raise SpecError(f"modality {spec.modality.name.lower()!r} is not implemented by these agents (language is)")


__all__ = ["ModalityAdapter", "adapter_for"]
