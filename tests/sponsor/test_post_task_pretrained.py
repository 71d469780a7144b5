"""``syncline train post-task`` with ``model: {pretrained: dir}`` refuses, with one line and before
anything is uploaded or posted, a spec without a ``dataset_source``, a model key beside
``pretrained``, and a directory whose weights are pickles (the successful run is
``tests/agents/test_pretrained_e2e.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from syncline.blobstore import BlobService
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient

from ._pretrained_models import build_pretrained
from .test_post_task_source import SOURCE, _post_task, _spec_yaml
from .test_post_task_source import blob_service as blob_service  # the fixture

pytestmark = [pytest.mark.chain]


def test_post_task_refuses_a_bad_pretrained_spec_with_one_line(
    tmp_path: Path,
    devnet: Devnet,
    deployment: Deployment,
    market: MarketClient,
    witnesses: list[Signer],
    blob_service: BlobService,
) -> None:
    sponsor = tmp_path / "sponsor"
    (sponsor / "data").mkdir(parents=True)
    rows = [{"instruction": f"Say {i}.", "output": f"{i}."} for i in range(40)]
    (sponsor / "data" / "instructions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_pretrained("gpt2", sponsor / "model", [r["instruction"] + " " + r["output"] for r in rows])
    (sponsor / "model" / "model.safetensors").rename(sponsor / "model" / "pytorch_model.bin")
    key = devnet.private_keys()[0]
    tasks_before = market.task_count()

    def refused(name: str, changes: dict[str, object], drop_source: bool = False) -> str:
        spec = {**_spec_yaml(witnesses, SOURCE), **changes}
        spec["dataset_source"].pop("vocab_size")  # the pretrained tokenizer sets the vocabulary
        if drop_source:
            del spec["dataset_source"]
        (sponsor / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        done = _post_task(sponsor / f"{name}.yaml", deployment, blob_service.url, key, tmp_path / "state")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        return lines[0]

    assert "name the training data in dataset_source" in refused("nosource", {"model": {"pretrained": "model"}}, True)
    assert "with no other model keys" in refused("mixed", {"model": {"pretrained": "model", "hidden_size": 8}})
    assert "weights in pickle files (.bin/.pt) are refused" in refused("pickle", {"model": {"pretrained": "model"}})
    assert not any(p.is_file() for p in (tmp_path / "blobs").rglob("*")), "nothing may be uploaded"
    assert market.task_count() == tasks_before


def test_post_task_posts_a_lora_task_and_refuses_a_bad_one_with_one_line(
    tmp_path: Path,
    devnet: Devnet,
    deployment: Deployment,
    market: MarketClient,
    witnesses: list[Signer],
    blob_service: BlobService,
) -> None:
    """``model: {pretrained: dir, lora: {...}}`` from the CLI: posted with the base pinned by digest
    and the adapters as the state; a bad ``lora`` is one line before anything is uploaded."""
    from syncline.blobstore import HttpBlobStore
    from syncline.protocol.spec import TrainingTaskSpec

    sponsor = tmp_path / "sponsor"
    (sponsor / "data").mkdir(parents=True)
    rows = [{"instruction": f"Say {i}.", "output": f"{i}."} for i in range(40)]
    (sponsor / "data" / "instructions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_pretrained("gpt2", sponsor / "model", [r["instruction"] + " " + r["output"] for r in rows])
    key = devnet.private_keys()[0]

    def post(name: str, model: dict[str, object], drop_source: bool = False) -> subprocess.CompletedProcess[str]:
        spec = {**_spec_yaml(witnesses, SOURCE), "method": "sft", "model": model}
        spec["dataset_source"].pop("vocab_size")
        if drop_source:
            del spec["dataset_source"]
        (sponsor / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        return _post_task(sponsor / f"{name}.yaml", deployment, blob_service.url, key, tmp_path / "state")

    tasks_before = market.task_count()
    for name, model, words, drop in (
        ("nosource", {"pretrained": "model", "lora": {"r": 4, "target_modules": ["c_attn"]}}, "dataset_source", True),
        ("badtarget", {"pretrained": "model", "lora": {"r": 4, "target_modules": ["q_proj"]}}, "q_proj", False),
        ("badrank", {"pretrained": "model", "lora": {"r": 1000, "target_modules": ["c_attn"]}}, "model.lora.r", False),
    ):
        done = post(name, model, drop)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], done.stderr
    assert not any(p.is_file() for p in (tmp_path / "blobs").rglob("*")), "nothing may be uploaded"
    assert market.task_count() == tasks_before

    done = post("lora", {"pretrained": "model", "lora": {"r": 4, "alpha": 8, "target_modules": ["c_attn"]}})
    assert done.returncode == 0, done.stderr
    task_id = json.loads(done.stdout)["task_id"]
    spec_hash, spec_uri = market.spec_tuple(task_id)[:2]
    spec = TrainingTaskSpec.from_artifact(
        HttpBlobStore(blob_service.url).fetch(spec_uri, expected_digest="0x" + spec_hash.hex(), max_bytes=1 << 20)
    )
    assert spec.model.family == "gpt2" and spec.model.lora is not None and spec.model.lora.target_modules == ("c_attn",)
    assert spec.metadata["method"] == "sft"
    assert 0 < spec.param_count < 2_000  # the adapters of 2 layers' c_attn at r 4, not the model
