"""The post-task form's three modalities in a real browser (issue 14, item 6): Chromium picks
vision with an ``.npz`` in the API's data directory, prepares and posts it; then time series with
a CSV; a bad window plan is refused in the browser, and the API's refusal of a path outside the
data directory shows next to the form and at the field. A real anvil, blob service and API server
(tests/ui/test_post_sources.py's stack)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from api.test_prepare_modalities import write_csv, write_npz
from syncline.api.server import ApiServer, ApiSettings
from syncline.blobstore import BlobService, LocalBlobStore
from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.protocol.enums import Modality

from .conftest import FRONTEND_DIST, PageErrors
from .test_post_sources import SHORT_RUN, Stack, fill, open_form, posted_spec, shown, submit_and_capture, tid

pytestmark = [pytest.mark.chain, pytest.mark.slow]

LANGUAGE_ONLY = ("corpus.type", "corpus.shard_count", "method", "model.source", "model.hidden_size")
VISION_ONLY = ("image_source.type", "image_source.shard_count", "vision_model.patch_size")
SERIES_ONLY = ("series_source.type", "windows.context_length", "series_model.family")


STEP_RECORDER = """() => {
  window.__steps = [];
  const list = document.querySelector('[data-testid="post-progress"]');
  new MutationObserver(() => list.querySelectorAll("li").forEach((li) => window.__steps.push(li.textContent)))
    .observe(list, { childList: true, subtree: true, characterData: true });
}"""
"""Records every text the post form's progress list shows (a step's text is replaced when it settles)."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("ui-modalities")
    data_dir = workdir / "sponsor-data"
    write_npz(data_dir / "images" / "shapes.npz")
    write_csv(data_dir / "series" / "sales.csv")
    write_csv(workdir / "outside.csv")
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
            yield Stack(url, w3, market, store, data_dir, sponsor.address.lower(), 0)
        finally:
            server.stop()
            service.stop()


def test_the_form_posts_a_vision_task_from_an_npz(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    open_form(stack, page)
    assert page.input_value('[name="modality"]') == "language"
    assert all(shown(page, n) for n in LANGUAGE_ONLY) and not any(shown(page, n) for n in VISION_ONLY)
    page.select_option('[name="modality"]', "vision")
    assert not any(shown(page, n) for n in LANGUAGE_ONLY + SERIES_ONLY)
    assert all(shown(page, n) for n in VISION_ONLY)
    # The packaged digits take no path; an .npz needs one.
    assert page.input_value('[name="image_source.type"]') == "digits" and not shown(page, "image_source.path")
    page.select_option('[name="image_source.type"]', "npz")
    assert "needs a path" in tid(page, "field-error-image_source.path").inner_text()
    assert not shown(page, "image_source.num_channels")  # an .npz's channels are its own
    fill(
        page,
        {"name": "form-vision", **SHORT_RUN, "image_source.shard_count": "3", "image_source.path": "images/shapes.npz"},
    )
    # ViT rules, checked as typed: patches divide the image, heads divide the width.
    fill(page, {"image_source.image_size": "8", "vision_model.patch_size": "3"})
    assert "must divide the image size (8)" in tid(page, "field-error-vision_model.patch_size").inner_text()
    fill(
        page,
        {"vision_model.patch_size": "4", "vision_model.hidden_size": "18", "vision_model.num_attention_heads": "4"},
    )
    assert "multiple of the attention heads" in tid(page, "field-error-vision_model.hidden_size").inner_text()
    assert tid(page, "post-submit").is_disabled()
    fill(page, {"vision_model.hidden_size": "16", "vision_model.num_hidden_layers": "1"})
    fill(page, {"vision_model.intermediate_size": "32", "image_source.image_size": ""})
    assert page.locator('[data-testid^="field-error-"]').count() == 0
    # Without an image size the .npz's own (8x8) is known once it is read: the API's refusal of a
    # patch that does not divide it shows next to the form and at the patch size.
    fill(page, {"vision_model.patch_size": "3"})
    submit_and_capture(page)
    tid(page, "post-error").wait_for()
    message = tid(page, "post-error-message").inner_text()
    assert message == "model.config.patch_size 3 must be a positive divisor of image_size 8", message
    assert tid(page, "field-server-error-vision_model.patch_size").inner_text() == message
    fill(page, {"vision_model.patch_size": "4"})
    assert tid(page, "field-server-error-vision_model.patch_size").count() == 0

    body = submit_and_capture(page)
    assert body["modality"] == "vision" and set(body) == {"modality", "spec", "image_source", "model"}
    assert body["image_source"] == {"type": "npz", "path": "images/shapes.npz", "shard_count": 3}
    assert body["model"] == {
        "family": "vit",
        "patch_size": 4,
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "intermediate_size": 32,
    }
    assert "method" not in body["spec"] and "modality" not in body["spec"]
    _, spec = posted_spec(stack, page)
    assert spec.modality == Modality.VISION and spec.name == "form-vision"
    assert spec.metadata["class_names"] == ["row", "column", "diagonal"] and spec.dataset.shard_count == 3
    assert tid(page, "post-prepared").inner_text().count(f"{spec.param_count:,}") == 1
    assert tid(page, "post-error").is_hidden()
    refused = [e for e in page_errors if "status of 422 (Unprocessable Entity)" in e]
    assert len(refused) == 1 and [e for e in page_errors if e not in refused] == []

    # The run's page names the metric its witnesses vote: top-1 accuracy, not a loss.
    task_id = int(tid(page, "posted-task-id").inner_text().strip())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the API indexes the new task within a poll or two
        try:
            with urllib.request.urlopen(f"{stack.url}/api/runs/{task_id}", timeout=5) as reply:
                if reply.status == 200:
                    break
        except urllib.error.HTTPError:
            time.sleep(0.3)
    page.goto(f"{stack.url}/#/runs/{task_id}")
    page.locator('[data-testid="loss-chart-title"]:has-text("top-1 accuracy")').wait_for(timeout=30_000)
    assert tid(page, "loss-chart-title").inner_text() == "Training loss and top-1 accuracy"
    header = page.locator('[data-testid="rounds-table"] thead th').nth(6).inner_text()
    assert header.lower() == "top-1 accuracy"
    assert tid(page, "loss-chart").get_attribute("data-metric") == "top1_accuracy"


def test_the_form_posts_a_time_series_task_from_a_csv(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    open_form(stack, page)
    page.select_option('[name="modality"]', "time_series")
    assert not any(shown(page, n) for n in LANGUAGE_ONLY + VISION_ONLY) and all(shown(page, n) for n in SERIES_ONLY)
    assert page.input_value('[name="series_source.datasets"]') == "co2, elnino"
    fill(page, {"series_source.datasets": "co2, tides"})
    assert "tides is not one of" in tid(page, "field-error-series_source.datasets").inner_text()
    page.select_option('[name="series_source.type"]', "csv")
    assert not shown(page, "series_source.datasets") and shown(page, "series_source.value_columns")
    fill(
        page,
        {
            "name": "form-series",
            **SHORT_RUN,
            "series_source.shard_count": "3",
            "series_source.path": "series/sales.csv",
        },
    )
    fill(page, {"series_source.timestamp_column": "ts", "series_source.id_column": "store"})
    fill(page, {"series_source.value_columns": "sales"})
    # A bad window plan is refused in the browser: nothing is sent.
    fill(page, {"windows.context_length": "0", "windows.season_length": "0"})
    assert "within 1.." in tid(page, "field-error-windows.context_length").inner_text()
    assert "within 1.." in tid(page, "field-error-windows.season_length").inner_text()
    assert tid(page, "post-submit").is_disabled()
    fill(page, {"windows.context_length": "24", "windows.prediction_length": "6", "windows.season_length": "12"})
    fill(page, {"windows.validation_windows": "3", "series_model.patch_length": "30"})
    assert "at most the context length (24)" in tid(page, "field-error-series_model.patch_length").inner_text()
    # PatchTSMixer takes mixer layers, not attention heads.
    page.select_option('[name="series_model.family"]', "patchtsmixer")
    assert shown(page, "series_model.num_layers") and not shown(page, "series_model.num_attention_heads")
    page.select_option('[name="series_model.family"]', "patchtst")
    fill(page, {"series_model.patch_length": "6", "series_model.patch_stride": "6", "series_model.d_model": "16"})
    fill(page, {"series_model.num_hidden_layers": "1", "series_model.num_attention_heads": "2"})
    fill(page, {"series_model.ffn_dim": "32"})
    assert page.locator('[data-testid^="field-error-"]').count() == 0

    # A path outside the data directory: the API's one line, next to the form and at the field.
    fill(page, {"series_source.path": "../outside.csv"})
    submit_and_capture(page)
    tid(page, "post-error").wait_for()
    message = tid(page, "post-error-message").inner_text()
    assert message.startswith("series_source.path '../outside.csv' is outside the data directory"), message
    assert tid(page, "field-server-error-series_source.path").inner_text() == message
    fill(page, {"series_source.path": "series/sales.csv"})

    page.evaluate(STEP_RECORDER)
    body = submit_and_capture(page)
    assert body["modality"] == "time_series"
    assert body["series_source"] == {
        "type": "csv",
        "path": "series/sales.csv",
        "timestamp_column": "ts",
        "id_column": "store",
        "value_columns": ["sales"],
        "shard_count": 3,
    }
    assert body["windows"] == {
        "context_length": 24,
        "prediction_length": 6,
        "season_length": 12,
        "validation_windows": 3,
        "validation_stride": 3,
        "train_stride": 1,
        "scaling": "seasonal",
    }
    assert body["model"] == {
        "family": "patchtst",
        "patch_length": 6,
        "patch_stride": 6,
        "d_model": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "ffn_dim": 32,
    }
    _, spec = posted_spec(stack, page)
    steps = page.evaluate("window.__steps")  # every text the progress list showed on the way
    assert any(t.startswith("publishing artifacts") for t in steps), steps
    assert not any("tokenizer" in t for t in steps), steps  # a time-series task has none (issue 26)
    assert spec.modality == Modality.TIME_SERIES and spec.name == "form-series"
    assert [s["id"] for s in spec.metadata["series"]] == ["s0", "s1"] and spec.metadata["context_length"] == 24
    refused = [e for e in page_errors if "status of 422 (Unprocessable Entity)" in e]
    assert len(refused) == 1 and [e for e in page_errors if e not in refused] == []


def test_the_form_posts_a_time_series_task_with_covariates(stack: Stack, new_page: Any) -> None:
    """The covariate field (issue 14, item 1): a value column named as a covariate is refused in
    the browser; named once, the covariates reach the API, the spec lists them and the model
    mixes channels (without it the covariates could not reach the forecast)."""
    import numpy as np
    import pandas as pd

    steps = 96
    stamps = [str(d.date()) for d in pd.date_range("2000-01-01", periods=steps, freq="MS")]
    rng = np.random.default_rng(3)
    rows = ["ts,store,sales,promo"]
    for i in range(2):
        promo = rng.integers(0, 2, steps)
        sales = 10 * i + 0.05 * np.arange(steps) + 2.0 * np.roll(promo, 1) + rng.normal(0, 0.3, steps)
        rows += [f"{stamps[k]},s{i},{sales[k]:.6f},{promo[k]}" for k in range(steps)]
    (stack.data_dir / "series" / "promo.csv").write_text("\n".join(rows) + "\n")

    page = new_page
    open_form(stack, page)
    page.select_option('[name="modality"]', "time_series")
    page.select_option('[name="series_source.type"]', "csv")
    assert shown(page, "series_source.covariates")
    fill(page, {"name": "form-covariates", **SHORT_RUN, "series_source.shard_count": "3"})
    fill(page, {"series_source.path": "series/promo.csv", "series_source.timestamp_column": "ts"})
    fill(page, {"series_source.id_column": "store", "series_source.value_columns": "sales"})
    fill(page, {"series_source.covariates": "sales"})
    assert "cannot also be a value column" in tid(page, "field-error-series_source.covariates").inner_text()
    assert tid(page, "post-submit").is_disabled()
    fill(page, {"series_source.covariates": "promo, promo"})
    assert "name each covariate once" in tid(page, "field-error-series_source.covariates").inner_text()
    fill(page, {"series_source.covariates": "promo"})
    fill(page, {"windows.context_length": "24", "windows.prediction_length": "6", "windows.season_length": "12"})
    fill(page, {"windows.validation_windows": "3", "series_model.patch_length": "6", "series_model.patch_stride": "6"})
    fill(page, {"series_model.d_model": "16", "series_model.num_hidden_layers": "1"})
    fill(page, {"series_model.num_attention_heads": "2", "series_model.ffn_dim": "32"})
    errors = page.locator('[data-testid^="field-error-"]')
    assert errors.count() == 0, [errors.nth(i).inner_text() for i in range(errors.count())]

    body = submit_and_capture(page)
    assert body["series_source"]["covariates"] == ["promo"]
    assert body["series_source"]["value_columns"] == ["sales"]
    _, spec = posted_spec(stack, page)
    assert spec.modality == Modality.TIME_SERIES and spec.name == "form-covariates"
    assert spec.metadata["covariates"] == ["promo"]
    assert spec.model.family == "patchtst" and spec.model.config["channel_attention"] is True
