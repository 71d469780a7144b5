"""The sponsor's default task lives in ``syncline.sponsor.task_defaults`` (issue 13, item 4): the
demo and the API both build it from there, the demo's spec is the one it was before the move, and
neither the API nor the sponsor package imports the demo (the old api -> demo cycle)."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from syncline.chain.keys import from_private_key
from syncline.demo.training_run import DemoPlan
from syncline.sponsor.task_defaults import TaskDefaults, default_task

AGENTS = Path(__file__).resolve().parents[2] / "agents"
NOW = 1_700_000_000
WITNESSES = [from_private_key(f"0x{i:064x}").address for i in (11, 12, 13)]

# sha256 of the canonical JSON (sorted keys, no spaces) of the demo's template, computed with
# ``syncline.demo.training_run._template`` before it moved here: the demo's spec, hence its spec
# hash and state roots, must not change.
BEFORE_THE_MOVE = {
    "default": "045100b54d9ae88c5b5206c8ef644ebcb679f544e9d0c2b5aaf54935ead30040",
    "eager": "ae911860f50bc5b66b5bffed3753c449dc39494b253c8bf29e3d57017ec8e0cc",
    "spot-rate": "d7f56ef7457be27601dd07cfd9af88ad983f17aff4caab2c634b46afe5ba63b7",
}
PLANS = {
    "default": DemoPlan(),
    "eager": DemoPlan(checkpoints="eager"),
    "spot-rate": DemoPlan(spot_check_rate=0.25, rounds=3, tier="open", rule="mean"),
}


def _canonical_sha256(template: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_demo_task_is_the_one_built_before_the_move(name: str) -> None:
    assert _canonical_sha256(default_task(PLANS[name], WITNESSES, NOW)) == BEFORE_THE_MOVE[name]


def test_the_demo_plan_defaults_are_the_sponsor_defaults() -> None:
    plan, defaults = DemoPlan(), TaskDefaults()
    assert isinstance(plan, TaskDefaults)
    assert default_task(plan, WITNESSES, NOW) == default_task(defaults, WITNESSES, NOW)
    assert plan.corpus == defaults.corpus == {"shard_count": 6, "vocab_size": 1024, "seq_len": 64}
    assert plan.model == defaults.model
    task = default_task(defaults, WITNESSES, NOW)
    assert task["witnesses"] == WITNESSES and task["enrollment_deadline"] == NOW + 3600
    # production windows (issue 27 item 5): the demo passes them with the devnet's fast clock
    assert (task["round_duration_s"], task["grace_window_s"], task["challenge_window_s"]) == (600, 300, 900)
    assert task["verification"] == {"checkpoints": "on-demand"}


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(AGENTS).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("package", ["api", "sponsor"])
def test_api_and_sponsor_never_import_the_demo(package: str) -> None:
    files = sorted((AGENTS / "syncline" / package).rglob("*.py"))
    assert files
    offenders = {
        f"{path.relative_to(AGENTS)} imports {name}"
        for path in files
        for name in _imported_modules(path)
        if name == "syncline.demo" or name.startswith("syncline.demo.")
    }
    assert offenders == set()


def test_importing_the_api_and_the_sponsor_package_loads_no_demo_module() -> None:
    """The same, transitively: nothing the API's app or the sponsor's modules import pulls the demo in."""
    code = (
        "import sys, pkgutil, importlib, syncline.api.app, syncline.sponsor\n"
        "for m in pkgutil.iter_modules(syncline.sponsor.__path__):\n"
        "    importlib.import_module('syncline.sponsor.' + m.name)\n"
        "print(sorted(n for n in sys.modules if n == 'syncline.demo' or n.startswith('syncline.demo.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(AGENTS), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
