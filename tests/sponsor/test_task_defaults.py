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

from conftest import build_spec
from syncline.chain.keys import from_private_key
from syncline.demo.training_run import DemoPlan
from syncline.errors import SpecError
from syncline.protocol.spec import ONCHAIN_FIELDS, TrainingTaskSpec
from syncline.protocol.spot_checks import checkpoint_bytes_per_payload_byte
from syncline.sponsor.task_defaults import ETH, TaskDefaults, default_task

AGENTS = Path(__file__).resolve().parents[2] / "agents"
NOW = 1_700_000_000
WITNESSES = [from_private_key(f"0x{i:064x}").address for i in (11, 12, 13)]

# sha256 of the canonical JSON (sorted keys, no spaces) of the demo's template, computed with
# ``syncline.demo.training_run._template`` before it moved here: the demo's spec, hence its spec
# hash and state roots, must not change, except for what issue 27 item 5 changed on purpose (the
# production windows and enrollment period, ISSUE_27_WINDOWS): with the old ones put back, the
# template hashes as before the move.
BEFORE_THE_MOVE = {
    "default": "045100b54d9ae88c5b5206c8ef644ebcb679f544e9d0c2b5aaf54935ead30040",
    "eager": "ae911860f50bc5b66b5bffed3753c449dc39494b253c8bf29e3d57017ec8e0cc",
    "spot-rate": "d7f56ef7457be27601dd07cfd9af88ad983f17aff4caab2c634b46afe5ba63b7",
}
ISSUE_27_WINDOWS = {  # field: (before, now); the enrollment deadline counts from NOW
    "round_duration_s": (20, 600),
    "grace_window_s": (20, 300),
    "challenge_window_s": (5, 900),
    "enrollment_deadline": (600, 3600),
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
    template = default_task(PLANS[name], WITNESSES, NOW)
    assert {k: template[k] for k in ISSUE_27_WINDOWS} == {
        k: (NOW + new if k == "enrollment_deadline" else new) for k, (_, new) in ISSUE_27_WINDOWS.items()
    }
    before = {k: (NOW + old if k == "enrollment_deadline" else old) for k, (old, _) in ISSUE_27_WINDOWS.items()}
    assert _canonical_sha256({**template, **before}) == BEFORE_THE_MOVE[name]


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


def _default_spec(defaults: TaskDefaults) -> TrainingTaskSpec:
    """The default task completed with the suite's artifacts (model, dataset, roots)."""
    base = build_spec(witnesses=tuple(WITNESSES), enrollment_deadline=NOW + 600).to_mapping()
    base.pop("verification", None)
    base.update(default_task(defaults, WITNESSES, NOW))
    return TrainingTaskSpec.from_mapping(base)


def test_the_default_task_derives_the_least_rate_that_deters() -> None:
    """Issue 27 item 3: 3 ETH over 8 rounds x 3 trainers is R = 0.125 ETH a submission; against the
    1 ETH stake the committee draws 2R / stake = 25 % of the submissions (it drew 0.38 %)."""
    spec = _default_spec(TaskDefaults())
    assert spec.reward_per_submission_wei == ETH // 8
    assert spec.spot_check_ppm == 250_000 and spec.spot_check_rate == 0.25
    assert spec.validate(now=NOW) is spec
    assert spec.onchain("ipfs://x")[ONCHAIN_FIELDS.index("spot_check_ppm")] == 250_000
    # bytes of checkpoints per payload byte at that rate: 0.25 x 12 x 7/4 / 1 = 5.25
    assert checkpoint_bytes_per_payload_byte(spec.spot_check_rate, spec.gradient_bits, spec.checkpoint_segments) == 5.25
    # eager checkpoints: the same draw, at the same derived rate
    assert _default_spec(TaskDefaults(checkpoints="eager")).spot_check_ppm == 250_000


def test_a_default_task_that_cannot_deter_is_refused_before_sending() -> None:
    low_stake = _default_spec(TaskDefaults(trainer_stake_wei=ETH // 5))  # 2R = 0.25 ETH > 0.2 ETH
    with pytest.raises(SpecError, match=r"^trainer_stake_wei 200000000000000000 does not deter .*no rate deters"):
        low_stake.validate(now=NOW)
    low_rate = _default_spec(TaskDefaults(spot_check_rate=0.1))
    with pytest.raises(SpecError, match=r"raise verification\.spot_check_rate to at least 0\.250000"):
        low_rate.validate(now=NOW)
