"""What the project's own compile sees: the sources under ``contracts/src``, never a tool's
dot-folder inside it (Ape's ``contracts/src/.cache/`` of OpenZeppelin copies, issue 16)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from syncline.chain.toolchain import standard_input
from syncline.paths import repo_root


def test_standard_input_skips_dot_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "contracts" / "src"
    (src / "court").mkdir(parents=True)
    (src / ".cache" / "openzeppelin" / "5.4.0" / "utils").mkdir(parents=True)
    (src / ".hidden").mkdir()
    (src / "Market.sol").write_text("// market\n")
    (src / "court" / "Court.sol").write_text("// court\n")
    (src / ".cache" / "x.sol").write_text("// a stray Ape cache file\n")
    (src / ".cache" / "openzeppelin" / "5.4.0" / "utils" / "ReentrancyGuard.sol").write_text("// oz\n")
    (src / ".hidden" / "y.sol").write_text("// hidden\n")
    monkeypatch.setenv("SYNCLINE_ROOT", str(tmp_path))
    sources = standard_input()["sources"]
    assert sorted(sources) == ["contracts/src/Market.sol", "contracts/src/court/Court.sol"]


@pytest.mark.parametrize("path", ["contracts/src/.cache/openzeppelin/x.sol", ".build/__local__.json", ".venv-ape/x"])
def test_ape_outputs_are_ignored_by_git(path: str) -> None:
    out = subprocess.run(["git", "check-ignore", "-q", path], cwd=repo_root(), capture_output=True)
    assert out.returncode == 0, f"{path} is not ignored by git"
