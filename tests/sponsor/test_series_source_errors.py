"""A time-series table's bad cell is one line that names the file and the line a text editor
shows (the header is line 1; blank lines count), or the row of a Parquet file counted from 1, and
says whether the cell is missing or not a number (issue 26, the new user's CSV items)."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncline.sponsor.data_sources import DataSourceError
from syncline.sponsor.timeseries_task import SeriesSource, read_series


def _csv(path: Path, rows: int = 200, *, bad: dict[int, str] | None = None, blank_after: int | None = None) -> Path:
    """``ts,store,sales,rain`` with ``rows`` monthly rows of one series; ``bad`` replaces a data
    row's line (by file line number, header = 1) with its text; a blank line after ``blank_after``."""
    import pandas as pd

    stamps = [str(d.date()) for d in pd.date_range("2000-01-01", periods=rows, freq="MS")]
    lines = ["ts,store,sales,rain"] + [f"{stamps[k]},s0,{k * 0.5:.3f},{k % 7}" for k in range(rows)]
    for number, text in (bad or {}).items():
        lines[number - 1] = text
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def _source(path: Path, type_: str = "csv") -> SeriesSource:
    return SeriesSource.from_mapping(
        {
            "type": type_,
            "path": str(path),
            "timestamp_column": "ts",
            "id_column": "store",
            "value_columns": ["sales"],
            "covariates": ["rain"],
        }
    )


def _error(source: SeriesSource) -> str:
    with pytest.raises(DataSourceError) as caught:
        read_series(source)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_bad_number_names_the_file_and_its_line(tmp_path: Path) -> None:
    path = _csv(tmp_path / "sales.csv", bad={151: "2012-06-01,s0,abc,1"})
    assert _error(_source(path)) == "sales.csv line 151: value column 'sales' is not a finite number ('abc')"


def test_a_missing_field_is_called_missing(tmp_path: Path) -> None:
    path = _csv(tmp_path / "sales.csv", bad={40: "2003-02-01,s0,1.5,"})
    assert _error(_source(path)) == "sales.csv line 40: missing value in covariate column 'rain'"
    path = _csv(tmp_path / "short.csv", bad={12: "2000-11-01,s0"})  # a row with fields left out
    assert _error(_source(path)) == "short.csv line 12: missing value in value column 'sales'"


def test_blank_lines_count_like_an_editor_counts_them(tmp_path: Path) -> None:
    path = _csv(tmp_path / "gappy.csv", bad={151: "2012-06-01,s0,inf,1"}, blank_after=20)
    # the blank line inserted after line 20 moves the bad row to line 152
    assert _error(_source(path)) == "gappy.csv line 152: value column 'sales' is not a finite number ('inf')"


def test_a_parquet_row_is_counted_from_one(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.read_csv(_csv(tmp_path / "sales.csv"))
    frame.loc[5, "rain"] = float("nan")
    frame.to_parquet(tmp_path / "holes.parquet")
    message = _error(_source(tmp_path / "holes.parquet", "parquet"))
    assert message == "holes.parquet row 6: missing value in covariate column 'rain'"
    assert str(tmp_path) not in message  # the API's data directory is never in a message
