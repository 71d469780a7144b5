"""``syncline train post-task`` with ``model: {pretrained: dir}`` refuses, with one line and before
anything is uploaded or posted, a spec without a ``dataset_source``, a model key beside
``pretrained``, and a directory whose weights are pickles (the successful run is
``tests/agents/test_pretrained_e2e.py``)."""

from __future__ import annotations

import json
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
