"""``syncline api --data-dir DIR``: the only directory a web client's data source or pretrained
model may name; the flag wins over ``$SYNCLINE_API_DATA_DIR``, which wins over ``<state_dir>/data``."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncline.api.settings import DATA_DIR_ENV
from syncline.cli import api_settings_from_args, build_parser
from syncline.errors import SynclineError

BLOB = ["--blob-store", "http://127.0.0.1:9"]


def test_the_flag_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "from-env"))
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(tmp_path / "state"))
    settings = api_settings_from_args(build_parser().parse_args(["api", *BLOB, "--data-dir", str(tmp_path / "flag")]))
    assert settings.source_dir == (tmp_path / "flag").resolve() and settings.source_dir.is_dir()
    assert settings.data_dir_configured
    assert not (tmp_path / "from-env").exists()

    settings = api_settings_from_args(build_parser().parse_args(["api", *BLOB]))
    assert settings.source_dir == (tmp_path / "from-env").resolve() and settings.data_dir_configured

    monkeypatch.delenv(DATA_DIR_ENV)
    settings = api_settings_from_args(build_parser().parse_args(["api", *BLOB]))
    assert settings.source_dir == (tmp_path / "state" / "data").resolve()
    assert not settings.data_dir_configured


def test_a_relative_data_dir_is_read_from_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    settings = api_settings_from_args(build_parser().parse_args(["api", *BLOB, "--data-dir", "sponsor-files"]))
    assert settings.source_dir == tmp_path / "sponsor-files"
    # Resolved once: a later change of the working directory does not move it.
    monkeypatch.chdir("/")
    assert settings.source_dir == tmp_path / "sponsor-files"


def test_a_data_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a directory")
    with pytest.raises(SynclineError) as exc:
        api_settings_from_args(build_parser().parse_args(["api", *BLOB, "--data-dir", str(tmp_path / "notes.txt")]))
    assert str(exc.value) == f"--data-dir {tmp_path / 'notes.txt'} is a file; give a directory (created if missing)"


def test_sealing_keys_flag_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from syncline.api.settings import SEALING_KEYS_ENV

    monkeypatch.setenv(SEALING_KEYS_ENV, str(tmp_path / "env-keys"))
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(tmp_path / "state"))
    settings = api_settings_from_args(build_parser().parse_args(["api", *BLOB, "--sealing-keys", str(tmp_path / "k")]))
    assert settings.sealing_keys_path == (tmp_path / "k").resolve()
    settings = api_settings_from_args(build_parser().parse_args(["api", *BLOB]))
    assert settings.sealing_keys_path == tmp_path / "env-keys"
