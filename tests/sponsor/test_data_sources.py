"""Sponsor data sources from real files: every source type, every bad-input error, determinism,
the prepared-corpus cache and the Shakespeare default's byte-identical artifacts.

Fixtures are tiny files written into ``tmp_path``; the tokenizer is the real byte-level BPE
(``tokenizers``), and the ``hf_disk`` fixture is written by ``datasets``' own ``save_to_disk``.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from syncline.blobstore import LocalBlobStore, digest_of
from syncline.modality.language import TOKEN_DTYPE
from syncline.protocol.hashing import keccak
from syncline.sponsor.data_sources import (
    DatasetPlan,
    DataSource,
    DataSourceError,
    PromptResponse,
    TextDocument,
    load_source,
    parse_source,
    read_source_files,
)
from syncline.sponsor.task_builder import cached_corpus, prepare_corpus, publish_language_task

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
    "matches",
]
TINY_MODEL: dict[str, Any] = {
    "family": "llama",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16,
}


def sentence(i: int, n: int = 12) -> str:
    """A deterministic sentence per index (distinct records, shared vocabulary)."""
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n)) + f" number {i}."


def rows(count: int) -> list[dict[str, str]]:
    return [
        {"text": sentence(i), "prompt": f"question {i}: {sentence(i, 4)}?", "answer": sentence(i + 1)}
        for i in range(count)
    ]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, records: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    return path


def source(kind: str, path: Path, **fields: Any) -> DataSource:
    return DataSource.from_mapping({"type": kind, "path": str(path), **fields})


def one_line_error(make: Callable[[], Any], *fragments: str) -> str:
    """``make()`` fails with a one-line ``DataSourceError`` holding every fragment."""
    with pytest.raises(DataSourceError) as err:
        make()
    message = str(err.value)
    assert "\n" not in message and message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def texts(src: DataSource) -> list[str]:
    return load_source(src).documents()


# ---------------------------------------------------------------------- each source type


def test_text_dir_reads_txt_and_md_recursively_in_sorted_order(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "b" / "deep").mkdir(parents=True)
    (root / "b" / "deep" / "z.txt").write_text("deep z\r\nline two\n")
    (root / "b" / "a.md").write_text("# heading\nmarkdown body\n")
    (root / "a.txt").write_text("first file\n")
    (root / "skip.json").write_text('{"not": "text"}')
    (root / "blank.txt").write_text("  \n")
    loaded = load_source(source("text_dir", root))
    assert loaded.records == (
        TextDocument("first file\n"),
        TextDocument("# heading\nmarkdown body\n"),
        TextDocument("deep z\nline two\n"),  # universal newlines, like the default corpus
    )
    assert loaded.validation_flags() is None  # documents: the tail of each is held out
    assert texts(source("text_dir", root, glob="*.json")) == ['{"not": "text"}']


def test_jsonl_text_field_default_and_named(tmp_path: Path) -> None:
    data = rows(3)
    path = write_jsonl(tmp_path / "train.jsonl", data)
    assert texts(source("jsonl", path)) == [r["text"] for r in data]
    assert texts(source("jsonl", path, text_field="answer")) == [r["answer"] for r in data]


def test_jsonl_prompt_response_pairs_stay_pairs(tmp_path: Path) -> None:
    data = rows(3)
    path = write_jsonl(tmp_path / "sft.jsonl", data)
    loaded = load_source(source("jsonl", path, prompt_field="prompt", response_field="answer"))
    assert loaded.records == tuple(PromptResponse(r["prompt"], r["answer"]) for r in data)
    assert loaded.documents()[0] == data[0]["prompt"] + "\n" + data[0]["answer"]


def test_jsonl_directory_reads_every_jsonl_file_sorted(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    write_jsonl(tmp_path / "d" / "sub" / "b.jsonl", [{"text": "from b"}])
    write_jsonl(tmp_path / "d" / "a.jsonl", [{"text": "from a"}, {"text": ""}])  # blank rows are skipped
    assert texts(source("jsonl", tmp_path / "d")) == ["from a", "from b"]


def test_csv_columns_with_quoted_multiline_fields(tmp_path: Path) -> None:
    data = rows(3)
    data[1]["text"] = 'a "quoted", multi-line\nfield'
    path = write_csv(tmp_path / "train.csv", data)
    assert texts(source("csv", path)) == [r["text"] for r in data]
    pairs = load_source(source("csv", path, prompt_field="prompt", response_field="answer")).records
    assert pairs[2] == PromptResponse(data[2]["prompt"], data[2]["answer"])


def test_parquet_columns(tmp_path: Path) -> None:
    data = rows(5)
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(data), path, row_group_size=2)
    assert texts(source("parquet", path)) == [r["text"] for r in data]
    pairs = load_source(source("parquet", path, prompt_field="prompt", response_field="answer")).records
    assert pairs == tuple(PromptResponse(r["prompt"], r["answer"]) for r in data)


def test_hf_disk_dataset_and_dataset_dict_from_save_to_disk(tmp_path: Path) -> None:
    import datasets  # dev dependency: the fixture is written by save_to_disk itself

    data = rows(4)
    single = datasets.Dataset.from_list(data)
    single.save_to_disk(str(tmp_path / "single"))
    assert texts(source("hf_disk", tmp_path / "single", text_field="answer")) == [r["answer"] for r in data]
    splits = datasets.DatasetDict({"train": single, "test": datasets.Dataset.from_list(rows(2)[::-1])})
    splits.save_to_disk(str(tmp_path / "splits"))
    assert texts(source("hf_disk", tmp_path / "splits")) == [r["text"] for r in data]  # default split: train
    test_pairs = load_source(
        source("hf_disk", tmp_path / "splits", split="test", prompt_field="prompt", response_field="answer")
    ).records
    assert test_pairs == tuple(PromptResponse(r["prompt"], r["answer"]) for r in rows(2)[::-1])
    one_line_error(
        lambda: load_source(source("hf_disk", tmp_path / "splits", split="validation")),
        "no split 'validation'",
        "'test', 'train'",
    )


def test_legacy_corpus_form_is_the_shakespeare_default() -> None:
    plan = DatasetPlan.from_mapping({"corpus": "shakespeare", "shard_count": 6, "vocab_size": 1024, "seq_len": 64})
    assert plan.source == DataSource.shakespeare()
    assert (plan.shard_count, plan.vocab_size, plan.seq_len) == (6, 1024, 64)
    assert DatasetPlan.from_mapping(
        {"type": "shakespeare", "shard_count": 1, "vocab_size": 300, "seq_len": 8}
    ).source == (DataSource.shakespeare())


def test_relative_path_is_read_from_the_base_directory(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [{"text": "relative"}])
    plan = DatasetPlan.from_mapping(
        {"type": "jsonl", "path": "train.jsonl", "shard_count": 1, "vocab_size": 300, "seq_len": 8},
        base_dir=tmp_path,
    )
    assert plan.source.path == (tmp_path / "train.jsonl").resolve()


# ---------------------------------------------------------------------- every error is one line


def test_undecodable_files_name_file_line_and_offset(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "good.txt").write_text("fine\n")
    (tmp_path / "dir" / "bad.txt").write_bytes(b"line one\nline two \xff\xfe\n")
    one_line_error(lambda: load_source(source("text_dir", tmp_path / "dir")), "bad.txt", "line 2", "byte offset 18")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    one_line_error(lambda: load_source(source("jsonl", bad)), "bad.jsonl", "not UTF-8 at line 2")
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_bytes(b"text\nok\n\x80oops\n")
    one_line_error(lambda: load_source(source("csv", bad_csv)), "bad.csv", "not UTF-8 at line 3")
    bad_parquet = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table({"text": pa.array([b"ok", b"\xc3\x28"], type=pa.binary()).cast(pa.string(), safe=False)}), bad_parquet
    )
    one_line_error(lambda: load_source(source("parquet", bad_parquet)), "bad.parquet", "row 1", "not UTF-8")


def test_missing_field_or_column_names_it_and_those_present(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "a"}, {"body": "b", "title": "c"}])
    one_line_error(lambda: load_source(source("jsonl", path)), "t.jsonl line 2", "no field 'text'", "'body', 'title'")
    csv_path = write_csv(tmp_path / "t.csv", [{"body": "x", "id": "1"}])
    one_line_error(
        lambda: load_source(source("csv", csv_path, prompt_field="body", response_field="answer")),
        "no column 'answer'",
        "'body', 'id'",
    )
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.table({"content": ["x"], "n": [1]}), parquet)
    one_line_error(lambda: load_source(source("parquet", parquet)), "no column 'text'", "'content', 'n'")
    one_line_error(
        lambda: load_source(source("parquet", parquet, text_field="n")), "column 'n' holds int64, expected text"
    )
    import datasets  # dev dependency: the fixture is written by save_to_disk itself

    datasets.Dataset.from_list([{"content": "x"}]).save_to_disk(str(tmp_path / "hf"))
    one_line_error(lambda: load_source(source("hf_disk", tmp_path / "hf")), "no column 'text'", "'content'")


def test_empty_sources(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    one_line_error(lambda: load_source(source("text_dir", tmp_path / "empty")), "is empty", "*.txt or *.md")
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text("\n \n")
    one_line_error(lambda: load_source(source("text_dir", tmp_path / "blank")), "is empty", "no text")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    one_line_error(lambda: load_source(source("jsonl", blank)), "is empty")
    header_only = tmp_path / "h.csv"
    header_only.write_text("text\n")
    one_line_error(lambda: load_source(source("csv", header_only)), "is empty")
    nothing = tmp_path / "nothing.csv"
    nothing.write_text("")
    one_line_error(lambda: load_source(source("csv", nothing)), "is empty")


def test_hostile_names_stay_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "evil\nname.txt").write_bytes(b"\xff")
    one_line_error(lambda: load_source(source("text_dir", tmp_path / "d")), "evil\\nname.txt", "not UTF-8")
    path = write_jsonl(tmp_path / "k.jsonl", [{"x" * 5000 + "\n": "long key"}])
    message = one_line_error(lambda: load_source(source("jsonl", path)), "no field 'text'")
    assert len(message) < 200


def test_malformed_records(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "unterminated\n')
    one_line_error(lambda: load_source(source("jsonl", path)), "m.jsonl line 2", "not valid JSON")
    path.write_text('["a list"]\n')
    one_line_error(lambda: load_source(source("jsonl", path)), "line 1", "expected a JSON object, got list")
    path.write_text('{"text": null}\n')
    one_line_error(lambda: load_source(source("jsonl", path)), "field 'text' is null, expected text")
    path.write_text('{"text": 5}\n')
    one_line_error(lambda: load_source(source("jsonl", path)), "field 'text' is int, expected text")
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_bytes(b"PAR1 but not really")
    one_line_error(lambda: load_source(source("parquet", not_parquet)), "x.parquet", "not a Parquet file")
    (tmp_path / "fake_hf").mkdir()
    one_line_error(lambda: load_source(source("hf_disk", tmp_path / "fake_hf")), "no state.json")
    (tmp_path / "fake_hf" / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../escape.arrow"}]}))
    one_line_error(lambda: load_source(source("hf_disk", tmp_path / "fake_hf")), "not a plain file name")


def test_bad_descriptions(tmp_path: Path) -> None:
    base = {"shard_count": 1, "vocab_size": 300, "seq_len": 8}
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "a"}])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"type": "sqlite", "path": str(path)}, "dataset_source.type 'sqlite' is not one of shakespeare, text_dir"),
        ({"corpus": "tinystories"}, "only 'shakespeare' is built in"),
        ({"type": "jsonl"}, "dataset_source.path: a jsonl source needs a path"),
        ({"type": "jsonl", "path": str(tmp_path / "missing.jsonl")}, "missing.jsonl does not exist"),
        ({"type": "jsonl", "path": str(path), "prompt_field": "q"}, "prompt_field and response_field go together"),
        (
            {"type": "jsonl", "path": str(path), "text_field": "t", "prompt_field": "q", "response_field": "a"},
            "not both",
        ),
        ({"type": "jsonl", "path": str(path), "colum": "t"}, "unknown field 'colum'"),
        ({"type": "jsonl", "path": str(path), "glob": "*.x"}, "a jsonl source takes only"),
        ({"type": "shakespeare", "path": str(path)}, "the shakespeare corpus takes no path"),
        ({"type": "text_dir", "path": str(tmp_path), "glob": "../*.txt"}, "glob: a file-name pattern"),
        ({"type": "text_dir", "path": str(tmp_path), "glob": "/etc/*"}, "glob: a file-name pattern"),
        ({"type": "jsonl", "path": str(path), "max_bytes": 0}, "max_bytes: expected a positive integer"),
    ]
    for raw, fragment in cases:
        one_line_error(lambda raw=raw: DatasetPlan.from_mapping({**raw, **base}), fragment)
    one_line_error(
        lambda: DatasetPlan.from_mapping({"type": "jsonl", "path": str(path)}), "shard_count: expected an integer"
    )
    one_line_error(lambda: DatasetPlan.from_mapping(["jsonl"]), "expected a mapping")


def test_bounds_on_bytes_and_records(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", rows(10))
    one_line_error(lambda: load_source(source("jsonl", path, max_bytes=100)), "exceed the limit of 100 bytes")
    one_line_error(lambda: load_source(source("jsonl", path, max_records=4)), "more than 4 records")
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows(10)), parquet)
    one_line_error(lambda: load_source(source("parquet", parquet, max_records=4)), "10 rows exceed the limit of 4")
    (tmp_path / "many").mkdir()
    for i in range(5):
        (tmp_path / "many" / f"{i}.txt").write_text(f"file {i}")
    one_line_error(lambda: load_source(source("text_dir", tmp_path / "many", max_records=3)), "5 files exceed")


def test_a_confined_source_never_reads_outside_its_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    secret = write_jsonl(tmp_path / "secret.jsonl", [{"text": "private"}])
    write_jsonl(root / "ok.jsonl", [{"text": "public"}])
    confined = DataSource.from_mapping({"type": "jsonl", "path": "ok.jsonl"}, root=root)
    assert texts(confined) == ["public"]
    for outside in (str(secret), "../secret.jsonl"):
        one_line_error(
            lambda outside=outside: DataSource.from_mapping(
                {"type": "jsonl", "path": outside}, root=root, label="corpus"
            ),
            "corpus.path",
            "outside the data directory",
        )
    (root / "docs").mkdir()
    (root / "docs" / "fine.txt").write_text("fine")
    os.symlink(tmp_path / "secret.jsonl", root / "docs" / "leak.txt")
    docs = DataSource.from_mapping({"type": "text_dir", "path": "docs"}, root=root)
    message = one_line_error(lambda: load_source(docs), "docs/leak.txt", "links outside the data directory")
    assert str(tmp_path) not in message  # the server's own paths are not echoed to a web client


# ---------------------------------------------------------------------- corpus: determinism, holdout, cache


def test_same_source_same_shard_bytes_and_hash(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    path = write_jsonl(tmp_path / "a" / "t.jsonl", rows(60))
    first = load_source(source("jsonl", path))
    second = load_source(source("jsonl", path))
    assert first.content_hash == second.content_hash
    one = prepare_corpus(first, shard_count=3, vocab_size=300)
    two = prepare_corpus(second, shard_count=3, vocab_size=300)
    assert one == two
    (tmp_path / "b").mkdir()
    moved = write_jsonl(tmp_path / "b" / "t.jsonl", rows(60))
    assert load_source(source("jsonl", moved)).content_hash == first.content_hash  # names, not places
    changed = write_jsonl(tmp_path / "b" / "t.jsonl", rows(61))
    assert load_source(source("jsonl", changed)).content_hash != first.content_hash
    assert load_source(source("jsonl", path, text_field="answer")).content_hash != first.content_hash


def test_every_record_format_makes_the_same_corpus_from_the_same_rows(tmp_path: Path) -> None:
    """The same 40 pairs as JSONL, CSV, Parquet and a save_to_disk dataset: identical artifacts."""
    import datasets  # dev dependency: the fixture is written by save_to_disk itself

    data = rows(40)
    write_jsonl(tmp_path / "t.jsonl", data)
    write_csv(tmp_path / "t.csv", data)
    pq.write_table(pa.Table.from_pylist(data), tmp_path / "t.parquet", row_group_size=7)
    datasets.Dataset.from_list(data).save_to_disk(str(tmp_path / "hf"))
    pair = {"prompt_field": "prompt", "response_field": "answer"}
    corpora = [
        prepare_corpus(load_source(source(kind, tmp_path / name, **pair)), shard_count=2, vocab_size=300)
        for kind, name in (("jsonl", "t.jsonl"), ("csv", "t.csv"), ("parquet", "t.parquet"), ("hf_disk", "hf"))
    ]
    assert all(c == corpora[0] for c in corpora[1:])
    assert all(len(s) > 0 for s in corpora[0].shards) and len(corpora[0].validation) > 0


def test_reading_and_parsing_are_apart(tmp_path: Path) -> None:
    """A cache lookup reads and hashes the files only; parsing (and its errors) come after a miss."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "fine"}\n{"text": broken\n')
    read = read_source_files(source("jsonl", path))
    assert [(f.name, f.label, f.data) for f in read.files] == [(str(path), "t.jsonl", path.read_bytes())]
    one_line_error(lambda: parse_source(read), "t.jsonl line 2", "not valid JSON")
    path.write_text('{"text": "fine"}\n')
    assert parse_source(read_source_files(source("jsonl", path))).records == (TextDocument("fine"),)


def test_record_sources_hold_out_every_twentieth_whole_record(tmp_path: Path) -> None:
    data = rows(40)
    loaded = load_source(
        source("jsonl", write_jsonl(tmp_path / "t.jsonl", data), prompt_field="prompt", response_field="answer")
    )
    corpus = prepare_corpus(loaded, shard_count=2, vocab_size=300)
    tokenizer = Tokenizer.from_str(corpus.tokenizer_json)
    validation = np.frombuffer(corpus.validation, dtype=TOKEN_DTYPE).tolist()
    documents = [tokenizer.decode(part) for part in _split_at_eot(validation)]
    assert documents == [data[i]["prompt"] + "\n" + data[i]["answer"] for i in (19, 39)]
    training = [
        tokenizer.decode(p) for s in corpus.shards for p in _split_at_eot(np.frombuffer(s, dtype=TOKEN_DTYPE).tolist())
    ]
    assert data[19]["answer"] not in "".join(training) and data[18]["answer"] in "".join(training)


def _split_at_eot(ids: list[int]) -> list[list[int]]:
    parts, current = [], []
    for token in ids:
        if token == 0:
            parts.append(current)
            current = []
        else:
            current.append(token)
    return parts + ([current] if current else [])


def test_cache_is_keyed_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(tmp_path / "state"))
    path = write_jsonl(tmp_path / "t.jsonl", rows(30))
    first = cached_corpus(2, 300, source("jsonl", path))
    cache = tmp_path / "state" / "datasets"
    assert len(list(cache.glob("*.pkl"))) == 1
    assert cached_corpus(2, 300, source("jsonl", path)) == first
    assert len(list(cache.glob("*.pkl"))) == 1
    write_jsonl(path, rows(31))  # same name and sizes, new content: a new corpus
    assert cached_corpus(2, 300, source("jsonl", path)) != first
    assert len(list(cache.glob("*.pkl"))) == 2


def test_a_too_small_source_fails_before_anything_is_uploaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(tmp_path / "state"))
    blobs = LocalBlobStore(tmp_path / "blobs")
    tiny = source("jsonl", write_jsonl(tmp_path / "t.jsonl", [{"text": "just a few words"}]))
    one_line_error(
        lambda: publish_language_task(
            blobs, template={}, shard_count=2, vocab_size=300, seq_len=16, model=TINY_MODEL, source=tiny
        ),
        "the source is too small",
        "seq_len=16",
    )
    assert not any(p.is_file() for p in (tmp_path / "blobs").rglob("*"))


# Keccak-256 of the default demo corpus's artifacts (3 shards, vocabulary 300) as built before data
# sources existed: the Shakespeare default must keep producing these bytes (the demo's state roots).
SHAKESPEARE_3x300 = {
    "tokenizer": "0xe65137a2e2eee9abe6444918109239a1272d0d665698b96bd46e440876c1f49c",
    "shards": [
        "0x5fdb737fdd7e3939ef4e057bf96290089aa7b1d198f2d28d7292a6580105b240",
        "0x5c8e11578f313a1be6686e521067563864614d44642a73410b28c876087f2a31",
        "0xd9c888326643c9d6eaf1e2d8470f9fe625eaad9d8604370f797c41ade680e915",
    ],
    "validation": "0x73d66717058c7b2ba4c96b91f888f160d968ae300f829700dca1d713b89586e7",
}


@pytest.mark.slow
def test_shakespeare_default_is_byte_identical_to_before(tmp_path: Path) -> None:
    corpus = prepare_corpus(load_source(DataSource.shakespeare()), shard_count=3, vocab_size=300)
    assert {
        "tokenizer": "0x" + keccak(corpus.tokenizer_json.encode()).hex(),
        "shards": [digest_of(s) for s in corpus.shards],
        "validation": digest_of(corpus.validation),
    } == SHAKESPEARE_3x300
