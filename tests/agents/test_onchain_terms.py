"""A task's on-chain terms must be its spec artifact's: agents refuse a task whose ``TaskSpec``
tuple on chain differs from what the artifact (the one ``specHash`` binds) says.

The chain enforces its own copy (stakes, windows, the aggregation rule a fraud proof is checked
against, ``paramCount`` that sizes every chunk tree) while agents train and aggregate by the
artifact. A sponsor who posts an artifact saying one thing and a tuple saying another could have
honest witnesses "proven" wrong under the chain's rule and slashed, or trainers staking on terms
they never read. ``TaskContext.load`` therefore compares every field and refuses, in one line,
before anyone enrolls or bonds."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncline.blobstore import LocalBlobStore
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.errors import SpecError
from syncline.protocol.enums import AggregationRule
from syncline.protocol.spec import ONCHAIN_FIELDS
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import publish_language_task
from syncline.sponsor.task_defaults import default_task

from ._agent_harness import tiny_plan

pytestmark = pytest.mark.chain


@pytest.mark.parametrize(
    ("field", "tamper"),
    [
        ("param_count", lambda v: v + 256),
        ("rule", lambda v: int(AggregationRule.MEAN)),
        ("inner_steps", lambda v: v + 1),
        ("threshold", lambda v: v - 1),
    ],
)
def test_an_onchain_spec_that_differs_from_its_artifact_is_refused(
    tmp_path: Path, market: MarketClient, sponsor: Signer, witnesses: list[Signer], field: str, tamper: object
) -> None:
    # a rate above the least deterring one: a tampered threshold (a smaller fee budget, so a larger
    # reward per submission) must still pass postTask's deterrence rule and reach the agents' check
    plan = tiny_plan(spot_check_rate=1.0)
    blobs = LocalBlobStore(tmp_path / "blobs")
    published = publish_language_task(
        blobs,
        template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
        shard_count=plan.shard_count,
        vocab_size=plan.vocab_size,
        seq_len=plan.seq_len,
        model=plan.model,
    )
    honest_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    assert TaskContext.load(market, blobs, honest_id).spec.spec_hash == published.spec.spec_hash

    terms = list(published.spec.onchain(published.spec_uri))
    i = ONCHAIN_FIELDS.index(field)
    terms[i] = tamper(terms[i])  # type: ignore[operator]
    receipt = market._send(sponsor, "postTask", tuple(terms), value=published.spec.escrow_wei)
    (event,) = market.events(receipt, "TaskPosted")
    task_id = int(event["args"]["taskId"])
    with pytest.raises(SpecError, match=f"task {task_id}: the chain's {field} ") as err:
        TaskContext.load(market, blobs, task_id)
    assert "\n" not in str(err.value)


def test_a_spec_whose_param_count_is_not_its_model_s_is_refused(
    tmp_path: Path, market: MarketClient, sponsor: Signer, witnesses: list[Signer]
) -> None:
    """``paramCount`` sizes the chain's chunk trees; agents build the layout from the model: a spec
    (artifact and chain alike) whose count is not its model's is refused, as is a LoRA task whose
    base model is larger than the agents are built for (a tiny adapter count on a huge base)."""
    from syncline.protocol.spec import MAX_PARAM_COUNT, LoraSpec, ModelArchitecture

    plan = tiny_plan()
    blobs = LocalBlobStore(tmp_path / "blobs")
    published = publish_language_task(
        blobs,
        template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
        shard_count=plan.shard_count,
        vocab_size=plan.vocab_size,
        seq_len=plan.seq_len,
        model=plan.model,
    )
    wrong = published.spec.with_updates(param_count=published.spec.param_count + 256)
    uri = blobs.put(wrong.canonical_bytes()).uri
    task_id, _ = market.post_task(sponsor, wrong, uri)
    with pytest.raises(SpecError, match=f"task {task_id}: param_count {wrong.param_count} is not the model's"):
        TaskContext.load(market, blobs, task_id)

    huge = {**published.spec.model.config, "hidden_size": 16384, "intermediate_size": 65536, "num_hidden_layers": 64}
    lora = LoraSpec(r=4, alpha=8, target_modules=("q_proj",), base_digest="0x" + "11" * 32)
    giant = published.spec.with_updates(model=ModelArchitecture(published.spec.model.family, huge, lora))
    uri = blobs.put(giant.canonical_bytes()).uri
    task_id, _ = market.post_task(sponsor, giant, uri)
    with pytest.raises(SpecError, match=f"over the limit of {MAX_PARAM_COUNT:,}") as err:
        TaskContext.load(market, blobs, task_id)
    assert "\n" not in str(err.value)
