"""The trainer's config file no longer carries H (issue 13, item 4): the task's spec does."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncline.run.agent_config import InnerOptimizerConfig, config_from_mapping


def _raw(**inner: object) -> dict[str, object]:
    return {
        "node_rpc": "http://127.0.0.1:1",
        "task_id": 1,
        "deployment": "deployment.json",
        "blob_store": "http://127.0.0.1:2",
        "state_dir": "state",
        "inner": {"lr": 1e-3, "batch_size": 4, **inner},
    }


def test_a_config_without_inner_steps_is_complete() -> None:
    cfg = config_from_mapping(_raw())
    assert cfg.inner.lr == 1e-3 and cfg.inner.batch_size == 4
    assert cfg.state_dir == Path("state")


def test_an_old_config_s_inner_steps_is_ignored_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config_from_mapping(_raw(inner_steps=5))
    assert cfg.inner.inner_steps == InnerOptimizerConfig().inner_steps  # not 5: the trainer runs the spec's H
    err = capsys.readouterr()
    assert "config.ignored" in err.out + err.err and "inner.inner_steps" in err.out + err.err
