"""The post-task form with the sponsor's own files and model, in a real browser (issue 13, "Done
when": a sponsor posts a task from its own files and model in the web form).

A real anvil, blob service and API server (its data directory a temp dir holding a JSONL file of
prompt/response pairs and a tiny pretrained Llama saved with ``save_pretrained``); Chromium fills
the form, the API prepares the task, the browser posts it from anvil's development account. The
posted spec's shards are decoded with its tokenizer: the JSONL's responses, not Shakespeare. A
pretrained directory outside the data directory, or missing, or a column the file lacks, shows the
API's one-line refusal next to the form, and nothing reaches the chain.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from sponsor._pretrained_models import build_pretrained
from syncline.api.server import ApiServer, ApiSettings
from syncline.blobstore import BlobService, LocalBlobStore, digest_of
from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.modality.language import sft_tokens_of, tokens_of
from syncline.protocol.enums import TaskStatus
from syncline.protocol.spec import TrainingTaskSpec

from .conftest import FRONTEND_DIST, PageErrors

pytestmark = [pytest.mark.chain, pytest.mark.slow]

PAIRS = [{"q": f"Where is mill {i}?", "a": f"Mill {i} stands by the river bend."} for i in range(80)]
NOTES = [f"Note {i}: the weir held and the wheel turned {i % 7} times an hour." for i in range(80)]
TINY_LLAMA = {  # a new Llama small enough to build in a second
    "corpus.shard_count": "3",
    "corpus.vocab_size": "300",
    "corpus.seq_len": "32",
    "model.hidden_size": "16",
    "model.intermediate_size": "32",
    "model.num_hidden_layers": "1",
    "model.num_attention_heads": "2",
    "model.num_key_value_heads": "2",
    "model.max_position_embeddings": "32",
}
SHORT_RUN = {"rounds": "2", "inner_steps": "4", "checkpoint_interval": "2", "min_trainers": "3", "max_trainers": "3"}


@dataclass
class Stack:
    url: str
    w3: Web3
    market: MarketClient
    store: LocalBlobStore
    data_dir: Path
    sponsor: str
    pretrained_params: int


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("ui-sources")
    data_dir = workdir / "sponsor-data"
    (data_dir / "chat").mkdir(parents=True)
    (data_dir / "chat" / "mills.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    (data_dir / "notes.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in NOTES))
    model = build_pretrained("llama", data_dir / "models" / "tiny-llama", NOTES)
    params = sum(p.numel() for p in model.parameters())
    build_pretrained("llama", workdir / "outside-model", NOTES)
    with start_anvil(workdir / "anvil", accounts=12) as devnet:
        store = LocalBlobStore(workdir / "blobs")
        service = BlobService(store, host="127.0.0.1", port=0)
        service.start()
        w3 = devnet.web3()
        sponsor = from_private_key(devnet.private_keys()[0])
        deployment = deploy_market(w3, sponsor, devnet.rpc_url, workdir)
        server = ApiServer(
            ApiSettings(
                deployment=workdir / "deployment.json",
                blob_store=service.url,
                db_url=f"sqlite:///{workdir / 'index.db'}",
                port=0,
                frontend_dir=FRONTEND_DIST,
                poll_interval_s=0.3,
                state_dir=workdir / "api",
                data_dir=data_dir,
            )
        )
        url = server.start()
        try:
            market = MarketClient.from_deployment(deployment, w3)
            yield Stack(url, w3, market, store, data_dir, sponsor.address.lower(), params)
        finally:
            server.stop()
            service.stop()


def tid(page: Any, test_id: str) -> Any:
    return page.get_by_test_id(test_id)


def shown(page: Any, name: str) -> bool:
    return bool(page.locator(f'[data-field="{name}"]').is_visible())


def open_form(stack: Stack, page: Any) -> None:
    page.goto(stack.url + "/#/post")
    tid(page, "post-form").wait_for()
    page.select_option('[data-testid="account-select"]', stack.sponsor)


def fill(page: Any, fields: dict[str, str]) -> None:
    for name, value in fields.items():
        page.fill(f'[name="{name}"]', value)
        page.locator(f'[name="{name}"]').blur()


def submit_and_capture(page: Any) -> dict[str, Any]:
    """Click submit; the JSON body the browser sent to the prepare endpoint."""
    with page.expect_request(lambda r: r.url.endswith("/api/tasks/prepare") and r.method == "POST") as req:
        tid(page, "post-submit").click()
    body: dict[str, Any] = req.value.post_data_json
    return body


def posted_spec(stack: Stack, page: Any) -> tuple[int, TrainingTaskSpec]:
    tid(page, "posted-task-id").wait_for(timeout=60_000)
    task_id = int(tid(page, "posted-task-id").inner_text().strip())
    assert stack.market.task(task_id).status == TaskStatus.ENROLLING
    spec_hash = "0x" + bytes(stack.market.spec_tuple(task_id)[0]).hex()
    return task_id, TrainingTaskSpec.from_artifact(stack.store.get(spec_hash))


def test_the_form_posts_an_sft_task_from_a_jsonl_file(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    open_form(stack, page)
    legend = page.locator("fieldset.group-model legend").inner_text()
    assert legend == "Data & model" and "Model & corpus" not in page.inner_text("body")
    # The defaults: the built-in corpus, pretraining, a new Llama; no path or field inputs.
    assert page.input_value('[name="corpus.type"]') == "shakespeare"
    assert page.input_value('[name="method"]') == "pretrain"
    assert page.input_value('[name="model.source"]') == "config"
    for name in ("corpus.path", "corpus.text_field", "corpus.prompt_field", "corpus.glob", "model.pretrained"):
        assert not shown(page, name), name

    # SFT reads prompt/response records: not from the built-in corpus.
    page.select_option('[name="method"]', "sft")
    assert "pick a JSONL, CSV, Parquet" in tid(page, "field-error-method").inner_text()
    assert tid(page, "post-submit").is_disabled()
    page.select_option('[name="corpus.type"]', "jsonl")
    assert tid(page, "field-error-method").count() == 0
    assert shown(page, "corpus.path") and shown(page, "corpus.prompt_field") and shown(page, "corpus.response_field")
    assert not shown(page, "corpus.text_field") and not shown(page, "corpus.glob") and not shown(page, "corpus.split")
    assert "needs a path" in tid(page, "field-error-corpus.path").inner_text()
    assert "needs the prompt field" in tid(page, "field-error-corpus.prompt_field").inner_text()
    fill(page, {"corpus.path": "chat/mills.jsonl", "corpus.prompt_field": "q", "corpus.response_field": "q"})
    assert "must differ" in tid(page, "field-error-corpus.response_field").inner_text()
    fill(page, {"name": "form-sft", **SHORT_RUN, **TINY_LLAMA, "corpus.response_field": "a"})
    # A rule parameter left invalid and then hidden (another rule picked) is sent as 0, not parsed.
    page.select_option('[name="aggregation.rule"]', "krum")
    fill(page, {"aggregation.krum_f": "x"})
    assert tid(page, "field-error-aggregation.krum_f").count() == 1
    page.select_option('[name="aggregation.rule"]', "coordinate_median")
    assert page.locator('[data-testid^="field-error-"]').count() == 0

    body = submit_and_capture(page)
    assert body["corpus"] == {
        "type": "jsonl",
        "path": "chat/mills.jsonl",
        "prompt_field": "q",
        "response_field": "a",
        "shard_count": 3,
        "vocab_size": 300,
        "seq_len": 32,
    }
    assert body["spec"]["method"] == "sft" and body["model"]["hidden_size"] == 16
    assert body["spec"]["aggregation"] == {
        "rule": "coordinate_median",
        "trim_fraction": 0,
        "krum_f": 0,
        "clip_radius": 0,
    }
    _, spec = posted_spec(stack, page)
    assert spec.name == "form-sft" and spec.metadata["method"] == "sft" and spec.dataset.shard_count == 3

    # The shards are the JSONL's pairs, the loss on the responses only (not Shakespeare).
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(stack.store.get(spec.metadata["tokenizer"]["digest"]).decode())
    targets, context = [], []
    for digest in spec.dataset.shard_hashes:
        ids, flags = sft_tokens_of(stack.store.get(digest))
        targets.append(tokenizer.decode(ids[flags].tolist()))
        context.append(tokenizer.decode(ids[~flags].tolist()))
    trained, prompts = "".join(targets), "".join(context)
    assert sum(p["a"] in trained for p in PAIRS) >= 0.9 * len(PAIRS)
    assert sum(p["q"] in prompts for p in PAIRS) >= 0.9 * len(PAIRS)
    assert "Where is mill" not in trained and "stands by" not in prompts
    assert "ROMEO" not in trained + prompts
    assert tid(page, "post-error").is_hidden()
    assert page_errors == []


def test_the_form_posts_a_task_from_a_pretrained_model_directory(
    stack: Stack, new_page: Any, page_errors: PageErrors
) -> None:
    page = new_page
    open_form(stack, page)
    fill(page, {"name": "form-pretrained", **SHORT_RUN, **TINY_LLAMA, "model.hidden_size": "abc"})
    assert tid(page, "field-error-model.hidden_size").count() == 1
    # A pretrained model hides the Llama's sizes and the vocabulary (its tokenizer's), errors included.
    page.select_option('[name="model.source"]', "pretrained")
    for name in ("model.hidden_size", "model.num_hidden_layers", "model.family", "corpus.vocab_size"):
        assert not shown(page, name), name
    assert tid(page, "field-error-model.hidden_size").count() == 0
    assert "directory" in tid(page, "field-error-model.pretrained").inner_text()
    page.select_option('[name="corpus.type"]', "jsonl")
    assert shown(page, "corpus.text_field") and not shown(page, "corpus.prompt_field")
    fill(page, {"model.pretrained": "models/tiny-llama", "corpus.path": "notes.jsonl", "corpus.text_field": "body"})
    assert page.locator('[data-testid^="field-error-"]').count() == 0

    body = submit_and_capture(page)
    assert body["model"] == {"pretrained": "models/tiny-llama"}
    assert body["corpus"] == {
        "type": "jsonl",
        "path": "notes.jsonl",
        "text_field": "body",
        "shard_count": 3,
        "vocab_size": 1024,  # the template's, unused with a pretrained tokenizer
        "seq_len": 32,
    }
    assert body["spec"]["method"] == "pretrain"
    _, spec = posted_spec(stack, page)
    model_dir = stack.data_dir / "models" / "tiny-llama"
    assert spec.model.family == "llama" and "method" not in spec.metadata
    assert spec.metadata["tokenizer"]["digest"] == digest_of((model_dir / "tokenizer.json").read_bytes())
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    text = "".join(tokenizer.decode(tokens_of(stack.store.get(d)).tolist()) for d in spec.dataset.shard_hashes)
    assert "the weir held" in text and "ROMEO" not in text
    assert spec.param_count == stack.pretrained_params  # the directory's model, not the form's hidden Llama
    assert page_errors == []


def test_the_form_posts_a_lora_task_on_a_pretrained_model(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    """LoRA (issue 13, item 3) from the form: the adapter fields appear with a pretrained model,
    are checked as typed, and the posted spec pins the base by digest and trains the adapters only."""
    page = new_page
    open_form(stack, page)
    fill(page, {"name": "form-lora", **SHORT_RUN, **TINY_LLAMA})
    assert not shown(page, "model.lora")  # a new Llama: no LoRA choice
    page.select_option('[name="model.source"]', "pretrained")
    assert shown(page, "model.lora") and not shown(page, "model.lora.r")
    page.check('[name="model.lora"]')
    assert shown(page, "model.lora.r") and shown(page, "model.lora.target_modules")
    assert page.input_value('[name="model.lora.target_modules"]') == "q_proj, k_proj, v_proj, o_proj"
    page.select_option('[name="corpus.type"]', "jsonl")
    fill(page, {"model.pretrained": "models/tiny-llama", "corpus.path": "notes.jsonl", "corpus.text_field": "body"})
    fill(page, {"model.lora.r": "0", "model.lora.target_modules": "q_proj, v-proj"})
    assert "1.." in tid(page, "field-error-model.lora.r").inner_text()
    assert "letters, digits" in tid(page, "field-error-model.lora.target_modules").inner_text()
    fill(page, {"model.lora.r": "4", "model.lora.alpha": "8", "model.lora.target_modules": "v_proj, q_proj"})
    assert page.locator('[data-testid^="field-error-"]').count() == 0

    body = submit_and_capture(page)
    lora = {"r": 4, "alpha": 8, "target_modules": ["v_proj", "q_proj"]}
    assert body["model"] == {"pretrained": "models/tiny-llama", "lora": lora}
    _, spec = posted_spec(stack, page)
    assert spec.model.lora is not None and spec.model.lora.target_modules == ("q_proj", "v_proj")
    assert (spec.model.lora.r, spec.model.lora.alpha) == (4, 8)
    assert 0 < spec.param_count < stack.pretrained_params // 4  # the adapters', not the model's
    assert page_errors == []


def test_a_refused_model_directory_or_column_shows_the_api_error_next_to_the_form(
    stack: Stack, new_page: Any, page_errors: PageErrors
) -> None:
    page = new_page
    open_form(stack, page)
    before = stack.market.task_count()
    fill(page, {"name": "form-refused", **SHORT_RUN, **TINY_LLAMA})
    page.select_option('[name="model.source"]', "pretrained")
    assert page.locator('[data-testid^="field-error-"]').count() == 1  # the directory, still empty
    for path, expected in (
        ("../outside-model", "model.pretrained '../outside-model' is outside the data directory this server reads"),
        ("models/no-such-model", "model.pretrained: 'models/no-such-model' is not a directory"),
    ):
        fill(page, {"model.pretrained": path})
        body = submit_and_capture(page)
        assert body["model"] == {"pretrained": path}
        tid(page, "post-error").wait_for()
        message = tid(page, "post-error-message").inner_text()
        assert message.startswith(expected) and "\n" not in message
        assert str(stack.data_dir) not in message  # the server's own paths are never echoed
        # The refusal names the field: it shows there too, without blocking a corrected retry.
        assert tid(page, "field-server-error-model.pretrained").inner_text() == message
        assert tid(page, "post-submit").is_enabled()  # the sponsor fixes the path and tries again
    assert tid(page, "error").count() == 0  # shown next to the form, not in the page's error bar
    fill(page, {"model.pretrained": "models/tiny-llama"})
    assert tid(page, "field-server-error-model.pretrained").count() == 0  # edited: the refusal is gone

    # A column the file does not have is found when the API reads it: the same one line.
    page.select_option('[name="model.source"]', "config")
    page.select_option('[name="corpus.type"]', "jsonl")
    page.select_option('[name="method"]', "sft")
    fill(page, {"corpus.path": "chat/mills.jsonl", "corpus.prompt_field": "question", "corpus.response_field": "a"})
    submit_and_capture(page)
    tid(page, "post-error").wait_for()
    message = tid(page, "post-error-message").inner_text()
    assert message == "chat/mills.jsonl line 1: no field 'question' (fields present: 'a', 'q')", message
    assert stack.market.task_count() == before
    # Chromium logs each refused request as a console error; nothing else went wrong.
    refused = [e for e in page_errors if "status of 422 (Unprocessable Entity)" in e]
    assert len(refused) == 3 and [e for e in page_errors if e not in refused] == []
