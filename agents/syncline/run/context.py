"""What every agent knows about one task: the on-chain spec, the full spec artifact, the model
layout, the modality adapter and verified access to the task's blobs.

The full ``TrainingTaskSpec`` lives in the blob store; its keccak256 must equal the ``specHash``
stored on chain, so a tampered spec is refused. Every blob (tokenizer, shards, states) is checked
against the hash that pins it before use.

Blobs are located by what the chain binds, never by what a URI or an alias says: a blob pinned by a
digest (spec, tokenizer, shards, submission payloads) is read by that digest from the agent's blob
store first, and only then from the URI recorded with it (a hint anyone may have chosen); a state
is located through the candidates of its state-root alias (the task's witnesses' and sponsor's
signed slots first) and kept only if its bytes recompute the root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from eth_account.signers.local import LocalAccount

from syncline.blobstore import BlobStore, find_verified, put_signed
from syncline.blobstore.store import (
    MAX_ALIAS_SIGNERS,
    BlobStoreBase,
    BlobUnavailable,
    digest_of,
    max_state_bytes,
    put_signed_file,
    write_file_atomic,
)
from syncline.chain.market import MarketClient, RoundView, SubmissionView
from syncline.confidential.enclave import EnclaveSession
from syncline.confidential.keystore import EnclaveKey
from syncline.confidential.sealing import VALIDATION_INDEX
from syncline.errors import SpecError, SynclineError, candidate_failure
from syncline.modality import ModalityAdapter, adapter_for
from syncline.modality.language import MAX_TOKENIZER_BYTES
from syncline.modality.lora import apply_lora, trained_parameters
from syncline.paths import state_dir
from syncline.protocol.disk_round import DiskRoundResult, PayloadFile, compute_round_on_disk
from syncline.protocol.enums import Modality, RoundStatus, Tier
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import MAX_PARAM_COUNT, MAX_SPEC_BYTES, ONCHAIN_FIELDS, TrainingTaskSpec
from syncline.protocol.spot_checks import spot_check_draw
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, RoundResult, compute_round
from syncline.run.state_file import StateFile

T = TypeVar("T")
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
    adapter: ModalityAdapter
    layout: ParameterLayout
    tokenizer_json: str
    _base_file: Path | None = None
    """A LoRA task's base model blob on disk (fetched once, by the digest the spec pins)."""
    _shards: dict[int, bytes] = field(default_factory=dict)
    _validation: bytes | None = None
    enclave: EnclaveKey | None = field(default=None, repr=False)
    """A Confidential task's enclave key (the agent's keystore): its shards open only with it, in memory."""
    _sealed: EnclaveSession | None = None
    _publishers: tuple[str, ...] | None = None
    # (round, state root) -> hash of the block that finalized it (the spot-check draw's seed)
    _finalized_in: dict[tuple[int, str], bytes] = field(default_factory=dict)

    @classmethod
    def load(
        cls, market: MarketClient, blobs: BlobStore, task_id: int, *, enclave: EnclaveKey | None = None
    ) -> TaskContext:
        onchain = market.spec_tuple(task_id)
        spec_hash, spec_uri = _hex(onchain[0]), str(onchain[1])
        raw = fetch_by_digest(blobs, spec_hash, (spec_uri,), max_bytes=MAX_SPEC_BYTES)
        try:
            spec = TrainingTaskSpec.from_artifact(raw)
        except SpecError as exc:
            raise SpecError(f"task {task_id}: {exc}") from None
        if spec.spec_hash != spec_hash:
            raise SpecError(f"task {task_id}: spec artifact hash {spec.spec_hash} != on-chain {spec_hash}")
        check_onchain_terms(task_id, onchain, spec.onchain(spec_uri))
        if spec.tier == Tier.CONFIDENTIAL and spec.confidential is None:
            raise SpecError(f"task {task_id}: a Confidential task's spec must name its sealed dataset (confidential)")
        try:
            adapter = adapter_for(spec)
        except SpecError as exc:
            raise SpecError(f"task {task_id}: {exc}") from None
        tokenizer_json = ""
        if spec.modality == Modality.LANGUAGE:  # a language task pins its tokenizer
            try:
                tokenizer = dict(spec.metadata)["tokenizer"]
                digest, uri = str(tokenizer["digest"]), str(tokenizer["uri"])
            except (KeyError, TypeError):
                raise SpecError(f"task {task_id}: spec metadata needs the tokenizer's digest and uri") from None
            tokenizer_json = fetch_by_digest(blobs, digest, (uri,), max_bytes=MAX_TOKENIZER_BYTES).decode()
        try:
            layout = state_layout(adapter, spec)
        except SpecError as exc:
            raise SpecError(f"task {task_id}: {exc}") from None
        if layout.numel != spec.param_count:  # the chain sizes every chunk tree by param_count
            raise SpecError(
                f"task {task_id}: param_count {spec.param_count} is not the model's ({layout.numel} trained parameters)"
            )
        return cls(
            task_id=task_id,
            market=market,
            blobs=blobs,
            spec=spec,
            spec_uri=spec_uri,
            adapter=adapter,
            layout=layout,
            tokenizer_json=tokenizer_json,
            enclave=enclave,
        )

    # ------------------------------------------------------------------ data

    def drawn_segment(self, round_: int, fragment: int, rr: RoundView) -> int | None:
        """The segment the committee's spot-check draw names of submission ``(round_, fragment)``
        at the task's on-chain ``spotCheckPpm`` (the spec's ``spot_check_ppm``: ``check_onchain_terms``
        refused the task unless they are equal), in an eager or on-demand task (``rr``: the round
        as just read); None when the round is not
        finalized or the draw passes the submission over (:mod:`syncline.protocol.spot_checks`)."""
        if rr.status != RoundStatus.FINALIZED:
            return None
        key = (round_, rr.state_root)
        if key not in self._finalized_in:
            block_hash = self.market.finalization_block_hash(self.task_id, round_)
            if block_hash is None:
                return None
            self._finalized_in[key] = block_hash
        return spot_check_draw(
            self.task_id,
            round_,
            fragment,
            bytes.fromhex(rr.state_root[2:]),
            self._finalized_in[key],
            ppm=self.spec.spot_check_ppm,
            segments=self.spec.checkpoint_segments,
        )

    def shard(self, index: int) -> bytes:
        """Training shard ``index``, verified against the dataset manifest (cached in memory)."""
        if index not in self._shards:
            digest = self.spec.dataset.shard_hashes[index]
            uri = self.spec.dataset.shard_uris[index]
            blob = fetch_by_digest(self.blobs, digest, (uri,), max_bytes=MAX_SHARD_BYTES)
            self._shards[index] = self._unseal(index, blob)
        return self._shards[index]

    def validation_shard(self) -> bytes:
        if self._validation is None:
            d = self.spec.dataset
            if not d.validation_hash or not d.validation_uri:
                raise SpecError(f"task {self.task_id}: the dataset has no validation shard")
            blob = fetch_by_digest(self.blobs, d.validation_hash, (d.validation_uri,), max_bytes=MAX_SHARD_BYTES)
            self._validation = self._unseal(VALIDATION_INDEX, blob)
        return self._validation

    def _unseal(self, index: int, blob: bytes) -> bytes:
        """A Confidential task's shard ``blob`` (its ciphertext, verified by digest) opened in memory
        with this agent's enclave key and the task's sealed manifest; other tiers: ``blob`` itself."""
        if self.spec.confidential is None:
            return blob
        if self._sealed is None:
            self._sealed = EnclaveSession(
                task_id=self.task_id,
                spec=self.spec,
                key=self.enclave,
                pointer=lambda: self.market.get_sealed_manifest(self.task_id),
                fetch=lambda digest, hints, limit: fetch_by_digest(self.blobs, digest, hints, max_bytes=limit),
            )
        return self._sealed.open(index, blob)

    # ------------------------------------------------------------------ model state

    def fetch_state(self, state_root: str) -> TrainingState:
        """The state whose Merkle root is ``state_root``: located by alias, verified by recomputing the root."""
        return self.fetch_state_sized(state_root)[0]

    def fetch_state_sized(self, state_root: str) -> tuple[TrainingState, int]:
        """Like :meth:`fetch_state`, also returning the blob's size in bytes.

        Every candidate of the state-root alias is a hint (the slots the task's witnesses and
        sponsor signed first); the first whose bytes recompute ``state_root`` is kept, so a poisoned
        alias cannot stall a sync. Raises :class:`StateUnavailable` when none does (yet).
        """
        root = state_root.lower()

        def check(data: bytes) -> tuple[TrainingState, int]:
            state = TrainingState.from_bytes(data, expected_layout=self.layout)
            if state.state_root_hex != root:
                raise StateUnavailable(f"a candidate holds state {state.state_root_hex}, not {root}")
            return state, len(data)

        try:
            return find_verified(
                self.blobs,
                (root,),
                check,
                signers=self.publishers(),
                what=f"state {root}",
                max_bytes=max_state_bytes(self.layout.numel),
            )
        except BlobUnavailable as exc:
            raise StateUnavailable(f"cannot look up state root {state_root}: {_one_line(exc)}", outage=True) from None
        except SynclineError as exc:
            raise StateUnavailable(f"no blob is known for state root {state_root}: {_one_line(exc)}") from None

    def fetch_state_file(self, state_root: str, dest: Path) -> tuple[StateFile, int]:
        """:meth:`fetch_state_sized` into the file ``dest`` (bounded memory: the blob is streamed
        to disk and its root recomputed range by range). Raises :class:`StateUnavailable`."""
        root = state_root.lower()
        tmp = dest.with_name(dest.name + ".download")
        tried, last = 0, "no candidate"
        try:
            for digest in self.blobs.candidates(root, signers=self.publishers()):
                tried += 1
                try:
                    size = get_to_file(self.blobs, digest, tmp, max_bytes=max_state_bytes(self.layout.numel))
                    state = StateFile.open(tmp, self.layout)
                    if state.state_root_hex == root:
                        return state.move_to(dest), size
                    last = f"a candidate holds state {state.state_root_hex}, not {root}"
                except BlobUnavailable:
                    raise
                except Exception as exc:  # any failure of one candidate: a bad candidate, not a failed step
                    last = candidate_failure(exc)
        except BlobUnavailable as exc:
            raise StateUnavailable(f"cannot look up state root {state_root}: {_one_line(exc)}", outage=True) from None
        finally:
            tmp.unlink(missing_ok=True)
        raise StateUnavailable(f"no blob is known for state root {state_root}: {tried} candidates tried; last: {last}")

    def publishers(self) -> tuple[str, ...]:
        """Who signs the state blobs this task's agents rely on: its witnesses, then its sponsor."""
        if self._publishers is None:
            sponsor = self.market.task(self.task_id).sponsor
            signers = dict.fromkeys(a.lower() for a in (*self.spec.witnesses, sponsor))
            self._publishers = tuple(signers)[:MAX_ALIAS_SIGNERS]
        return self._publishers

    # ------------------------------------------------------------------ rounds

    @property
    def max_payload_bytes(self) -> int:
        """Largest outer-gradient payload a witness accepts (:func:`max_payload_bytes`)."""
        return max_payload_bytes(self.layout.numel, self.spec.gradient_bits)

    def committed_submissions(
        self, round_: int, committed_mask: int | None = None, known: Mapping[str, bytes] | None = None
    ) -> list[CommittedSubmission]:
        """Every commitment of ``round_`` with its payload fetched and hash-checked (or the fetch error).

        ``committed_mask`` is the round's ``committedMask`` when the caller has already read it;
        ``known`` maps payload hashes to payloads the caller already holds (its own, prefetched
        ones): one whose hash matches the commitment is used instead of fetching it.
        """

        def fetch(s: SubmissionView) -> bytes:
            held = (known or {}).get(s.payload_hash.lower())
            if held is not None and digest_of(held) == s.payload_hash.lower():
                return held
            return fetch_by_digest(self.blobs, s.payload_hash, (s.uri,), max_bytes=self.max_payload_bytes)

        return [
            CommittedSubmission(fragment, _b32(s.payload_hash), _b32(s.chunk_root), payload, error)
            for fragment, s, payload, error in self._fetch_commitments(round_, committed_mask, fetch)
        ]

    def committed_payload_files(
        self, round_: int, directory: Path, committed_mask: int | None = None, known: Mapping[str, Path] | None = None
    ) -> list[PayloadFile]:
        """:meth:`committed_submissions` with each payload streamed to a file in ``directory``
        (:meth:`fetch_payload_file`); ``known`` maps payload hashes to files the caller already
        fetched there or wrote itself (its own payload, named by the digest of what it wrote).
        Every file was hash-checked as it was written, so the round does not read it for its
        keccak again (``PayloadFile.digest_verified``); every other check still runs."""

        def fetch(s: SubmissionView) -> str:
            held = (known or {}).get(s.payload_hash.lower())
            if held is not None and held.exists():
                return str(held)
            return str(self.fetch_payload_file(round_, s, directory))

        return [
            PayloadFile(
                fragment, _b32(s.payload_hash), _b32(s.chunk_root), path, error, digest_verified=path is not None
            )
            for fragment, s, path, error in self._fetch_commitments(round_, committed_mask, fetch)
        ]

    def fetch_payload_file(self, round_: int, s: SubmissionView, directory: Path) -> Path:
        """Stream the payload of the commitment ``s`` of ``round_`` into a file in ``directory``
        (hash-checked); raises :class:`SynclineError` when no source has it."""
        directory.mkdir(parents=True, exist_ok=True)
        path = payload_file_path(directory, round_, s.payload_hash)
        fetch_file_by_digest(self.blobs, s.payload_hash, (s.uri,), path, max_bytes=self.max_payload_bytes)
        return path

    def _fetch_commitments(
        self, round_: int, committed_mask: int | None, fetch: Callable[[SubmissionView], T]
    ) -> list[tuple[int, SubmissionView, T | None, str | None]]:
        """``(fragment, submission, fetch(submission) or None, the fetch error or None)`` of every
        commitment of ``round_``, in fragment order."""
        out: list[tuple[int, SubmissionView, T | None, str | None]] = []
        for fragment, s in self._commitments(round_, committed_mask):
            try:
                out.append((fragment, s, fetch(s), None))
            except SynclineError as exc:
                out.append((fragment, s, None, f"fetch failed: {str(exc).splitlines()[0][:160]}"))
        return out

    def _commitments(self, round_: int, committed_mask: int | None) -> Iterator[tuple[int, SubmissionView]]:
        """``(fragment, submission)`` of every commitment of ``round_``, in fragment order."""
        committed = self.market.round(self.task_id, round_).committed_mask if committed_mask is None else committed_mask
        for fragment in range(256):
            if committed >> fragment & 1:
                yield fragment, self.market.submission(self.task_id, round_, fragment)

    def compute_round_file(
        self, previous: StateFile, submissions: list[PayloadFile], dest: Path, *, in_place: bool = False
    ) -> tuple[StateFile, DiskRoundResult]:
        """:meth:`compute_round` on disk: the new state is written to ``dest``, a copy of
        ``previous`` updated in place (``previous`` is left as it was), or with ``in_place``
        ``previous``'s own file, updated and moved (one state file on disk instead of two; if the
        computation fails, the file is deleted). The payload files are deleted afterwards."""
        work = previous if in_place else previous.copy_to(dest.with_name(dest.name + ".work"))
        weights, momentum = work.regions(writable=True)
        try:
            result = compute_round_on_disk(
                weights,
                momentum,
                submissions,
                **self._round_rules(),
            )
        except BaseException:
            work.remove()
            raise
        finally:
            weights.close()
            momentum.close()
            remove_payload_files(submissions)
        work.adopt_root(result.state_root)
        return work.move_to(dest), result

    def compute_round(self, previous: TrainingState, submissions: list[CommittedSubmission]) -> RoundResult:
        """The round's result under this task's rule, quantization and outer optimizer."""
        return compute_round(previous, submissions, **self._round_rules())

    def _round_rules(self) -> dict[str, Any]:
        """The task's rule, quantization and outer optimizer, as the round functions take them."""
        spec = self.spec
        return {
            "rule": spec.aggregation.rule,
            "rule_param": spec.aggregation.rule_param,
            "bits": spec.gradient_bits,
            "lr_ppm": spec.outer_lr_ppm,
            "momentum_ppm": spec.outer_momentum_ppm,
            "max_payload_bytes": self.max_payload_bytes,
        }

    def publish_state(
        self, state: TrainingState, signer: LocalAccount | None = None, *, root: bytes | None = None
    ) -> str:
        """Store a state blob as a candidate of its state-root alias (in ``signer``'s own slot when
        given: a witness or the sponsor, whose slots readers try first); returns the root.
        ``root`` is the state's root when the caller computed it with the state (it is hashed
        otherwise)."""
        alias = "0x" + root.hex() if root is not None else state.state_root_hex
        if signer is None:
            self.blobs.put(state.to_bytes(), alias=alias)
        else:
            put_signed(self.blobs, state.to_bytes(), alias, signer)
        return alias

    def publish_state_file(self, state: StateFile, signer: LocalAccount) -> str:
        """:meth:`publish_state` for a state in a file, streamed (``put_file``); returns the root."""
        root = state.state_root_hex
        if isinstance(self.blobs, BlobStoreBase):
            put_signed_file(self.blobs, state.path, root, signer)
        else:
            put_signed(self.blobs, state.path.read_bytes(), root, signer)
        return root

    def build_model(self, state: TrainingState | StateFile | None = None) -> torch.nn.Module:
        """The task's model with ``state``'s weights (a LoRA task's: the base model's weights and
        adapters holding ``state``; without a state, the adapters ``peft`` initialises)."""
        model = self.adapter.build_model(model_config(self.spec), seed=0)
        lora = self.spec.model.lora
        if lora is not None:
            layout = ParameterLayout.from_state_dict(dict(model.named_parameters()))
            StateFile.open(self.base_file(layout), layout).load_into(model)  # parameter by parameter
            model = apply_lora(model, lora, seed=0)
        if state is not None:
            load_weights(model, state)
        return model

    def base_file(self, layout: ParameterLayout) -> Path:
        """A LoRA task's base model blob (a state of the base's ``layout``, §12.5 of
        docs/protocol.md) as a file: fetched by the digest ``model.lora.base`` pins, streamed to
        disk and checked against it as it arrives (bounded by that layout's state size), and kept
        under ``<state_dir>/lora-bases`` by digest, so agents on one machine fetch it once."""
        lora = self.spec.model.lora
        if lora is None:
            raise SpecError(f"task {self.task_id} trains no LoRA adapters: it has no base model")
        if self._base_file is None:
            directory = state_dir() / "lora-bases"
            path = directory / f"{lora.base_digest[2:]}.state"
            if not path.is_file():
                directory.mkdir(parents=True, exist_ok=True)
                fetch_file_by_digest(
                    self.blobs, lora.base_digest, (lora.base_uri,), path, max_bytes=max_state_bytes(layout.numel)
                )
            try:
                StateFile.open(path, layout)
            except ValueError as exc:
                raise SpecError(f"task {self.task_id}: the base model blob does not decode: {_one_line(exc)}") from None
            self._base_file = path
        return self._base_file


class StateUnavailable(SynclineError):
    """The state blob for a root cannot be found or does not match it (yet).

    ``outage`` is True when the blob store itself could not be asked (connection refused, a
    deadline): the agent's loop then backs off and reports degraded health instead of polling.
    Either way it is never evidence against anyone.
    """

    def __init__(self, message: str, *, outage: bool = False) -> None:
        super().__init__(message)
        self.outage = outage


def check_onchain_terms(task_id: int, onchain: tuple[Any, ...], expected: tuple[Any, ...]) -> None:
    """The task's ``TaskSpec`` on chain must be exactly what its spec artifact says
    (``TrainingTaskSpec.onchain``): the chain enforces its copy (stakes, windows, the rule a fraud
    proof is checked against, ``paramCount``) while agents follow the artifact, so a task whose two
    copies differ is refused before anyone enrolls or bonds. One-line ``SpecError`` naming the
    first differing field."""

    def canonical(value: Any) -> Any:
        if isinstance(value, bytes | bytearray):
            return "0x" + bytes(value).hex()
        if isinstance(value, list | tuple):
            return tuple(str(v).lower() for v in value)
        if isinstance(value, str):
            return value
        return int(value)

    if len(onchain) != len(expected):
        raise SpecError(f"task {task_id}: the chain's TaskSpec has {len(onchain)} fields, expected {len(expected)}")
    for name, got, want in zip(ONCHAIN_FIELDS, onchain, expected, strict=True):
        if canonical(got) != canonical(want):
            raise SpecError(
                f"task {task_id}: the chain's {name} ({canonical(got)!r}) differs from its spec artifact's "
                f"({canonical(want)!r}); refusing a task whose on-chain terms are not its spec's"
            )


def fetch_by_digest(blobs: BlobStore, digest: str, hints: tuple[str, ...], *, max_bytes: int) -> bytes:
    """The blob ``digest`` (bound on chain or by a pinned artifact), verified: from the agent's blob
    store by digest first, then from each hint URI (untrusted locators, e.g. a submission's ``uri``).

    Raises the last :class:`SynclineError` when no source has it: unavailable, never evidence.
    """
    return _first_source(
        lambda: blobs.get(digest, max_bytes=max_bytes),
        lambda uri: blobs.fetch(uri, expected_digest=digest, max_bytes=max_bytes),
        hints,
    )


def payload_file_path(directory: Path, round_: int, payload_hash: str) -> Path:
    """Where an agent keeps the payload ``payload_hash`` of ``round_`` while it computes the round."""
    return directory / f"{round_}-{payload_hash.lower()}.bin"


def remove_payload_files(payloads: list[PayloadFile]) -> None:
    """Delete the files :meth:`TaskContext.committed_payload_files` fetched."""
    for p in payloads:
        if p.path is not None:
            Path(p.path).unlink(missing_ok=True)


def get_to_file(blobs: BlobStore, digest: str, dest: Path, *, max_bytes: int) -> int:
    """``blobs.get_to_file`` (streamed) where the store has it, else through memory."""
    if isinstance(blobs, BlobStoreBase):
        return blobs.get_to_file(digest, dest, max_bytes=max_bytes)
    return write_file_atomic(dest, iter((blobs.get(digest, max_bytes=max_bytes),)))


def fetch_file_by_digest(blobs: BlobStore, digest: str, hints: tuple[str, ...], dest: Path, *, max_bytes: int) -> int:
    """:func:`fetch_by_digest` into the file ``dest`` (streamed); returns its size."""

    def fetch(uri: str) -> int:
        if isinstance(blobs, BlobStoreBase):
            return blobs.fetch_to_file(uri, dest, expected_digest=digest, max_bytes=max_bytes)
        return write_file_atomic(dest, iter((blobs.fetch(uri, expected_digest=digest, max_bytes=max_bytes),)))

    return _first_source(lambda: get_to_file(blobs, digest, dest, max_bytes=max_bytes), fetch, hints)


def _first_source(get: Callable[[], T], fetch: Callable[[str], T], hints: tuple[str, ...]) -> T:
    """``get()`` (the agent's own store, by digest), else ``fetch(uri)`` of the first hint that
    answers; raises the last error when none does."""
    try:
        return get()
    except SynclineError as exc:
        error: SynclineError = exc
    for uri in hints:
        if not uri:
            continue
        try:
            return fetch(uri)
        except SynclineError as exc:
            error = exc
    raise error


def _b32(hex_value: str) -> bytes:
    return bytes.fromhex(hex_value[2:])


def _one_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def max_payload_bytes(numel: int, bits: int) -> int:
    """Largest outer-gradient payload a witness accepts for ``numel`` coordinates quantized to
    ``bits``: the values, one exponent per chunk and room for the header."""
    return numel * (bits // 8) + numel // 128 + MAX_PAYLOAD_OVERHEAD


def model_config(spec: TrainingTaskSpec) -> dict[str, Any]:
    return {"family": spec.model.family, **dict(spec.model.config)}


def state_layout(adapter: ModalityAdapter, spec: TrainingTaskSpec) -> ParameterLayout:
    """The layout of the task's state: the trained parameters (:func:`trained_parameters`) of the
    model the spec describes, built on the ``meta`` device (no weight is allocated)."""
    with torch.device("meta"):
        model = adapter.build_model(model_config(spec), seed=0)
        if spec.model.lora is not None:
            base = sum(p.numel() for p in model.parameters())
            if base > MAX_PARAM_COUNT:  # every agent that runs the model holds the base
                raise SpecError(f"the LoRA base model has {base:,} parameters, over the limit of {MAX_PARAM_COUNT:,}")
            model = apply_lora(model, spec.model.lora, seed=0)
    return ParameterLayout.from_state_dict(trained_parameters(model))


def load_weights(model: torch.nn.Module, state: TrainingState | StateFile) -> None:
    """Copy the state's weights into the model's trained parameters (tied parameters appear once)."""
    if isinstance(state, StateFile):
        state.load_into(model)
        return
    params = trained_parameters(model)
    with torch.no_grad():
        for name, tensor in state.to_state_dict().items():
            params[name].copy_(tensor)


def flat_parameters(model: torch.nn.Module, layout: ParameterLayout) -> torch.Tensor:
    """The model's trained parameters as one float32 vector in ``layout``'s order."""
    return layout.flatten({k: v.detach().float().cpu() for k, v in trained_parameters(model).items()})
