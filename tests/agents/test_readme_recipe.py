"""The README's "Running the agents yourself" recipe, followed command by command on a fresh devnet
(issue 13: it had rotted without anyone noticing). The commands are read out of the README, so the
recipe and this test cannot drift apart; only the task is shorter (2 rounds of a tiny model, the
corpus the agent tests already prepared), and the checkout is a directory of its own: ``.venv``
and ``examples/`` (with that shorter ``task.yaml``) in it, ``.syncline`` seeded with the compiled
contracts, so nothing lands in the repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from syncline.demo.trainer_setup import TINY_MODEL
from syncline.paths import repo_root

from ._agent_harness import SEQ_LEN, SHARD_COUNT, VOCAB_SIZE

pytestmark = [pytest.mark.chain, pytest.mark.slow]

README = repo_root() / "README.md"
SECTION = "## Running the agents yourself"


def recipe() -> list[str]:
    """The commands of the section's first ``bash`` block, comments dropped."""
    text = README.read_text()
    section = text[text.index(SECTION) :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, f"no bash block under {SECTION!r}"
    commands = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c and not c.startswith("#")]


def short_task(tmp: Path) -> Path:
    """``examples/task.yaml`` with 2 short rounds of the tiny model on the prepared corpus."""
    spec = yaml.safe_load((repo_root() / "examples" / "task.yaml").read_text())
    spec.update(
        rounds=2,
        inner_steps=8,
        checkpoint_interval=4,
        # chain seconds; `devnet up`'s clock runs 30 times the wall's: 15 s rounds, a 20 s window
        round_duration_s=450,
        challenge_window_s=600,
        dataset_source={
            "corpus": "shakespeare",
            "shard_count": SHARD_COUNT,
            "vocab_size": VOCAB_SIZE,
            "seq_len": SEQ_LEN,
        },
        model=dict(TINY_MODEL),
    )
    path = tmp / "task.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_readme_recipe_runs_command_by_command(agents_state_dir: Path, tmp_path: Path) -> None:
    commands = recipe()
    assert commands[0] == "make install", commands  # the install step is named first ...
    assert re.search(r"^install:", (repo_root() / "Makefile").read_text(), re.M)  # ... and exists
    commands = commands[1:]  # this test runs inside the installed venv

    checkout = tmp_path / "checkout"
    (checkout / "examples").mkdir(parents=True)
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    for name in ("trainer.yaml", "witness.yaml", "challenger.yaml"):
        shutil.copy(repo_root() / "examples" / name, checkout / "examples" / name)
    shutil.move(short_task(tmp_path), checkout / "examples" / "task.yaml")
    state = checkout / ".syncline"
    for sub in ("artifacts", "datasets"):
        shutil.copytree(agents_state_dir / sub, state / sub)
    env = {
        **{k: v for k, v in os.environ.items() if k != "SYNCLINE_PRIVATE_KEY"},
        "SYNCLINE_STATE_DIR": str(state),
        "HF_HUB_OFFLINE": "1",
        "SYNCLINE_LOG_FORMAT": "console",
    }
    outputs: dict[str, str] = {}
    try:
        for command in commands:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=checkout,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
                stdin=subprocess.DEVNULL,
            )
            assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
            assert "Traceback" not in done.stderr, f"`{command}`:\n{done.stderr[-3000:]}"
            outputs[command.split("--")[0].strip()] = done.stdout
    finally:
        for cleanup in ("network down", "devnet down"):
            subprocess.run(
                [str(checkout / ".venv" / "bin" / "syncline"), *cleanup.split()],
                cwd=checkout,
                env=env,
                capture_output=True,
                timeout=60,
            )

    posted = json.loads(outputs[".venv/bin/syncline train post-task"])
    assert posted["task_id"] == 1
    run = json.loads(outputs[".venv/bin/syncline train get-run"])
    assert re.match(r"(enrolling: \d of 3 trainers|running: round \d of 2|awaiting seal|sealed)", run["progress"])
    agents = json.loads(outputs[".venv/bin/syncline network wait"])
    assert sorted(a["name"] for a in agents) == [f"{r}-{i}" for r in ("trainer", "witness") for i in (1, 2, 3)]
    assert all(a["exit_code"] == 0 for a in agents), agents
    assert [a["dev_account"] for a in agents] == [1, 2, 3, 4, 5, 6]
    logs = "".join(Path(a["log"]).read_text() for a in agents)
    assert "trainer.claimed" in logs and "witness.claimed" in logs
    model = checkout / "model"
    assert (model / "config.json").exists()
    assert stat.S_IMODE((model / "model.safetensors").stat().st_mode) & 0o044 == 0o044  # readable by others
