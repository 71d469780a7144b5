"""A task's spec as the API shows it: the on-chain ``TaskSpec`` fields, overlaid with the full
spec artifact once it has been fetched from the blob store and checked against the on-chain hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from syncline.blobstore import BlobStore
from syncline.chain.market import _hex
from syncline.errors import SpecError
from syncline.protocol.enums import AggregationRule, Modality, Tier
from syncline.protocol.spec import MAX_SPEC_BYTES, ONCHAIN_FIELDS, PPM, TrainingTaskSpec


def onchain_spec(raw: Sequence[Any]) -> dict[str, Any]:
    """The ``getSpec`` tuple as a JSON-safe mapping (wei as decimal strings, enums as names)."""
    if len(raw) != len(ONCHAIN_FIELDS):
        raise ValueError(f"getSpec returned {len(raw)} fields, expected {len(ONCHAIN_FIELDS)}")
    data = dict(zip(ONCHAIN_FIELDS, raw, strict=True))
    out: dict[str, Any] = {}
    for name, value in data.items():
        if name in ("spec_hash", "model_config_hash", "dataset_root", "initial_state_root"):
            out[name] = _hex(value)
        elif name == "spec_uri":
            out[name] = str(value)
        elif name == "witnesses":
            out[name] = [str(w).lower() for w in value]
        elif name.endswith("_wei"):
            out[name] = str(int(value))
        else:
            out[name] = int(value)
    out["modality"] = Modality(out["modality"]).name.lower()
    out["tier"] = Tier(out["tier"]).name.lower()
    out["rule"] = AggregationRule(out["rule"]).name.lower()
    return out


def wei_strings(value: Any, key: str = "") -> Any:
    """``value`` with every integer under a key ending in ``_wei`` turned into a decimal string."""
    if isinstance(value, Mapping):
        return {k: wei_strings(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wei_strings(v, key) for v in value]
    if key.endswith("_wei") and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def run_spec(onchain: Mapping[str, Any], artifact: Mapping[str, Any] | None) -> dict[str, Any]:
    """What ``GET /api/runs/{id}`` shows as ``spec``: the artifact's fields (when verified) over the
    on-chain ones, wei as strings, addresses lowercase; ``artifact_verified`` says which."""
    out: dict[str, Any] = dict(onchain)
    out["aggregation"] = {"rule": onchain["rule"], "rule_param": onchain["rule_param"]}
    out["outer_optimizer"] = {
        "lr": onchain["outer_lr_ppm"] / PPM,
        "momentum": onchain["outer_momentum_ppm"] / PPM,
    }
    if artifact is not None:
        full = wei_strings(dict(artifact))
        full["witnesses"] = [str(w).lower() for w in full.get("witnesses", [])]
        full["aggregation"] = {**full.get("aggregation", {}), "rule_param": onchain["rule_param"]}
        out.update(full)
    out["artifact_verified"] = artifact is not None
    return out


def fetch_artifact(blobs: BlobStore, spec_uri: str, spec_hash: str) -> dict[str, Any]:
    """The spec artifact at ``spec_uri``, checked against the on-chain ``spec_hash``."""
    raw = blobs.fetch(spec_uri, expected_digest=spec_hash, max_bytes=MAX_SPEC_BYTES)
    spec = TrainingTaskSpec.from_artifact(raw)
    if spec.spec_hash != spec_hash.lower():
        raise SpecError(f"spec artifact hash {spec.spec_hash} != on-chain {spec_hash}")
    return spec.to_mapping()
