"""What every agent knows about one task: the on-chain spec, the full spec artifact, the model
layout, the modality adapter and verified access to the task's blobs.

The full ``TrainingTaskSpec`` lives in the blob store; its keccak256 must equal the ``specHash``
stored on chain, so a tampered spec is refused. Every blob (tokenizer, shards, states) is checked
against the hash that pins it before use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from syncline.blobstore import BlobStore
from syncline.chain.market import MarketClient
from syncline.errors import SpecError, SynclineError
from syncline.modality.language import LanguageAdapter
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import MAX_SPEC_BYTES, TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, RoundResult, compute_round

MAX_SHARD_BYTES = 256 << 20
MAX_PAYLOAD_OVERHEAD = 1 << 20


def _hex(b: bytes) -> str:
    return "0x" + bytes(b).hex()


@dataclass
class TaskContext:
    """A task as agents see it. Build with :meth:`load`."""

    task_id: int
    market: MarketClient
    blobs: BlobStore
    spec: TrainingTaskSpec
    spec_uri: str
    adapter: LanguageAdapter
    layout: ParameterLayout
    tokenizer_json: str
    _shards: dict[int, bytes] = field(default_factory=dict)
    _validation: bytes | None = None

    @classmethod
    def load(cls, market: MarketClient, blobs: BlobStore, task_id: int) -> TaskContext:
        onchain = market.spec_tuple(task_id)
        spec_hash, spec_uri = _hex(onchain[0]), str(onchain[1])
        raw = blobs.fetch(spec_uri, expected_digest=spec_hash, max_bytes=MAX_SPEC_BYTES)
        try:
            spec = TrainingTaskSpec.from_artifact(raw)
        except SpecError as exc:
            raise SpecError(f"task {task_id}: {exc}") from None
        if spec.spec_hash != spec_hash:
            raise SpecError(f"task {task_id}: spec artifact hash {spec.spec_hash} != on-chain {spec_hash}")
        meta = dict(spec.metadata)
        try:
            tokenizer = meta["tokenizer"]
            seq_len = int(meta["seq_len"])
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"task {task_id}: spec metadata needs tokenizer and seq_len") from None
        tokenizer_json = blobs.fetch(tokenizer["uri"], expected_digest=tokenizer["digest"], max_bytes=MAX_SPEC_BYTES)
        adapter = LanguageAdapter(seq_len=seq_len)
        model = adapter.build_model(model_config(spec), seed=0)
        layout = ParameterLayout.from_state_dict(dict(model.named_parameters()))
        return cls(
            task_id=task_id,
            market=market,
            blobs=blobs,
            spec=spec,
            spec_uri=spec_uri,
            adapter=adapter,
            layout=layout,
            tokenizer_json=tokenizer_json.decode(),
        )

    # ------------------------------------------------------------------ data

    def shard(self, index: int) -> bytes:
        """Training shard ``index``, verified against the dataset manifest (cached in memory)."""
        if index not in self._shards:
            digest = self.spec.dataset.shard_hashes[index]
            uri = self.spec.dataset.shard_uris[index]
            self._shards[index] = self.blobs.fetch(uri, expected_digest=digest, max_bytes=MAX_SHARD_BYTES)
        return self._shards[index]

    def validation_shard(self) -> bytes:
        if self._validation is None:
            d = self.spec.dataset
            if not d.validation_hash or not d.validation_uri:
                raise SpecError(f"task {self.task_id}: the dataset has no validation shard")
            self._validation = self.blobs.fetch(
                d.validation_uri, expected_digest=d.validation_hash, max_bytes=MAX_SHARD_BYTES
            )
        return self._validation

    # ------------------------------------------------------------------ model state

    def fetch_state(self, state_root: str) -> TrainingState:
        """The state whose Merkle root is ``state_root``: located by alias, verified by recomputing the root."""
        return self.fetch_state_sized(state_root)[0]

    def fetch_state_sized(self, state_root: str) -> tuple[TrainingState, int]:
        """Like :meth:`fetch_state`, also returning the blob's size in bytes."""
        digest = self.blobs.resolve(state_root.lower())
        if digest is None:
            raise StateUnavailable(f"no blob is known for state root {state_root}")
        data = self.blobs.get(digest)
        state = TrainingState.from_bytes(data, expected_layout=self.layout)
        if state.state_root_hex != state_root.lower():
            raise StateUnavailable(f"blob {digest} does not hold state {state_root} (root {state.state_root_hex})")
        return state, len(data)

    # ------------------------------------------------------------------ rounds

    @property
    def max_payload_bytes(self) -> int:
        """Largest outer-gradient payload a witness accepts (:func:`max_payload_bytes`)."""
        return max_payload_bytes(self.layout.numel, self.spec.gradient_bits)

    def committed_submissions(self, round_: int, committed_mask: int | None = None) -> list[CommittedSubmission]:
        """Every commitment of ``round_`` with its payload fetched and hash-checked (or the fetch error).

        ``committed_mask`` is the round's ``committedMask`` when the caller has already read it.
        """
        committed = self.market.round(self.task_id, round_).committed_mask if committed_mask is None else committed_mask
        out: list[CommittedSubmission] = []
        for fragment in range(256):
            if not committed >> fragment & 1:
                continue
            s = self.market.submission(self.task_id, round_, fragment)
            payload: bytes | None = None
            error: str | None = None
            try:
                payload = self.blobs.fetch(s.uri, expected_digest=s.payload_hash, max_bytes=self.max_payload_bytes)
            except SynclineError as exc:
                error = f"fetch failed: {str(exc).splitlines()[0][:160]}"
            out.append(
                CommittedSubmission(
                    fragment=fragment,
                    payload_hash=bytes.fromhex(s.payload_hash[2:]),
                    chunk_root=bytes.fromhex(s.chunk_root[2:]),
                    payload=payload,
                    fetch_error=error,
                )
            )
        return out

    def compute_round(self, previous: TrainingState, submissions: list[CommittedSubmission]) -> RoundResult:
        """The round's result under this task's rule, quantization and outer optimizer."""
        spec = self.spec
        return compute_round(
            previous,
            submissions,
            rule=spec.aggregation.rule,
            rule_param=spec.aggregation.rule_param,
            bits=spec.gradient_bits,
            lr_ppm=spec.outer_lr_ppm,
            momentum_ppm=spec.outer_momentum_ppm,
            max_payload_bytes=self.max_payload_bytes,
        )

    def publish_state(self, state: TrainingState) -> str:
        """Store a state blob under its state root; returns the root."""
        root = state.state_root_hex
        self.blobs.put(state.to_bytes(), alias=root)
        return root

    def build_model(self, state: TrainingState | None = None) -> torch.nn.Module:
        model = self.adapter.build_model(model_config(self.spec), seed=0)
        if state is not None:
            load_weights(model, state)
        return model


class StateUnavailable(SynclineError):
    """The state blob for a root cannot be found or does not match it (yet)."""


def max_payload_bytes(numel: int, bits: int) -> int:
    """Largest outer-gradient payload a witness accepts for ``numel`` coordinates quantized to
    ``bits``: the values, one exponent per chunk and room for the header."""
    return numel * (bits // 8) + numel // 128 + MAX_PAYLOAD_OVERHEAD


def model_config(spec: TrainingTaskSpec) -> dict[str, Any]:
    return {"family": spec.model.family, **dict(spec.model.config)}


def load_weights(model: torch.nn.Module, state: TrainingState) -> None:
    """Copy the state's weights into the model's parameters (tied parameters appear once)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in state.to_state_dict().items():
            params[name].copy_(tensor)


def flat_parameters(model: torch.nn.Module, layout: ParameterLayout) -> torch.Tensor:
    return layout.flatten({k: v.detach().float().cpu() for k, v in model.named_parameters()})
