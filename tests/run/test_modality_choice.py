"""The modality adapter comes from the spec through one function (issue 13, item 4)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from syncline.errors import SpecError
from syncline.modality import adapter_for
from syncline.modality.language import LanguageAdapter
from syncline.protocol.enums import Modality
from syncline.protocol.spec import TrainingTaskSpec

AGENTS = Path(__file__).resolve().parents[2] / "agents" / "syncline"
SPEC = {
    "name": "m",
    "model": {"family": "llama", "config": {}},
    "dataset": {"shard_hashes": ["0x" + "11" * 32]},
    "inner_steps": 4,
    "rounds": 1,
    "round_duration_s": 60,
    "trainer_stake_wei": 1,
    "min_trainers": 1,
    "max_trainers": 1,
    "enrollment_deadline": 1,
    "witnesses": ["0x2222222222222222222222222222222222222222"],
    "threshold": 1,
    "reward_pool_wei": 1,
    "initial_state_root": "0x" + "33" * 32,
    "metadata": {"seq_len": 48, "method": "sft", "token_bytes": 4},
}


def test_a_language_spec_gets_a_language_adapter_with_its_metadata() -> None:
    adapter = adapter_for(TrainingTaskSpec.from_mapping(SPEC))
    assert isinstance(adapter, LanguageAdapter)
    assert (adapter.seq_len, adapter.method, adapter.token_bytes) == (48, "sft", 4)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        # a language spec's metadata read as another modality's: that modality's own one-line error
        ({"modality": Modality.TIME_SERIES}, "needs context_length"),
        ({"modality": Modality.VISION}, "needs image_size"),
        ({"metadata": {}}, "needs seq_len"),
        ({"metadata": {"seq_len": 48, "method": "dpo"}}, "method 'dpo'"),
        ({"metadata": {"seq_len": 48, "token_bytes": 3}}, "token_bytes 3"),
    ],
)
def test_what_the_agents_cannot_run_is_one_line(change: dict[str, object], words: str) -> None:
    spec = replace(TrainingTaskSpec.from_mapping(SPEC), **change)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=words) as err:
        adapter_for(spec)
    assert "\n" not in str(err.value)


def test_no_agent_builds_a_language_adapter_itself() -> None:
    """Trainers, witnesses, the challenger, the referee and the shared task context take the
    adapter from :func:`adapter_for`; only the sponsor (which builds a language task before a spec
    exists) and the demo's setups name ``LanguageAdapter``."""
    allowed = {"modality", "sponsor", "demo"}
    offenders = []
    for path in AGENTS.rglob("*.py"):
        if path.relative_to(AGENTS).parts[0] in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name | ast.alias) and "LanguageAdapter" in (
                getattr(node, "id", None),
                getattr(node, "name", None),
            ):
                offenders.append(f"{path.relative_to(AGENTS)}:{getattr(node, 'lineno', '?')}")
    assert not offenders, offenders
