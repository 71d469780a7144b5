"""``GET /api/template``'s ``sources``: the data source types, the fields each takes and the
methods the web form offers, as the API itself accepts them (the form reads this table; nothing
is listed twice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncline.api.schemas import CorpusParams
from syncline.api.template import template
from syncline.modality.language import METHODS
from syncline.sponsor.data_sources import DataSource, DataSourceError

ACCOUNTS = [f"0x{i:040x}" for i in range(1, 8)]
NOW = 1_700_000_000
VALUES = {"path": "data", "glob": "*.txt", "split": "train", "text_field": "body"}


def test_the_template_lists_what_each_source_type_takes(tmp_path: Path) -> None:
    sources = template(ACCOUNTS, NOW)["sources"]
    assert sources["types"] == list(CorpusParams.model_fields["type"].annotation.__args__)  # type: ignore[union-attr]
    assert sources["default"] == "shakespeare" and sources["methods"] == list(METHODS)
    assert sources["method_fields"] == {"pretrain": ["text_field"], "sft": ["prompt_field", "response_field"]}
    assert sources["method_requires"] == {"pretrain": [], "sft": ["prompt_field", "response_field"]}
    (tmp_path / "data").mkdir()
    for kind, fields in sources["fields"].items():
        # Every listed field is accepted by the source reader the API uses ...
        raw = {"type": kind, **{f: VALUES[f] for f in fields if f in VALUES}}
        if "prompt_field" in fields:
            pairs = {**raw, "text_field": None, "prompt_field": "q", "response_field": "a"}
            DataSource.from_mapping(pairs, root=tmp_path)
        DataSource.from_mapping(raw, root=tmp_path)
        # ... and every field it does not list is refused.
        for other in sorted({"path", "glob", "split", "text_field"} - set(fields)):
            with pytest.raises(DataSourceError, match=other):
                DataSource.from_mapping({**raw, other: VALUES[other]}, root=tmp_path)
    assert sources["record_types"] == [k for k, f in sources["fields"].items() if "prompt_field" in f]


def test_the_template_says_whether_the_data_directory_was_chosen() -> None:
    assert template(ACCOUNTS, NOW, data_dir_configured=True)["sources"]["data_dir_configured"] is True
    assert template(ACCOUNTS, NOW)["sources"]["data_dir_configured"] is False
