"""``scripts/bench/gpu_trainer.py`` on the fraud e2e's tiny model: the JSON has its fields, the CPU
bf16 autocast row (the stand-in for the CUDA rows on a machine without a GPU) really trains, and the
CPU fp32 referee finds it innocent on every segment."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from syncline.demo.trainer_setup import build_trainer_setup
from syncline.trainer.inner_loop import deterministic_algorithms

ROW_FIELDS = {"tokens_per_s", "steps_per_s", "seconds", "peak_memory_bytes", "deterministic_overhead", "verdicts"}


def _bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "gpu_trainer.py"
    spec = importlib.util.spec_from_file_location("gpu_trainer_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses resolve annotations there
    spec.loader.exec_module(bench)
    return bench


def test_the_gpu_trainer_bench_reports_rows_and_innocent_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench(monkeypatch)
    out = tmp_path / "report.json"
    threads = torch.get_num_threads()
    try:
        code = bench.main(["--tiny", "--rounds", "2", "--threads", "1", "--json", str(out)], out=lambda report: None)
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    assert code == 0
    assert (report["rounds"], report["inner_steps"], report["checkpoint_interval"]) == (2, 8, 4)
    cuda = torch.cuda.is_available()
    names = [r["name"] for r in report["rows"]]
    if cuda:
        assert report["cuda"] and report["cuda_note"] is None
        assert names == [
            "cpu-fp32",
            *(f"{s} {m}" for s in ("cuda-fp32", "cuda-bf16", "cuda-bf16-gc") for m in ("nondet", "det")),
        ]
    else:
        assert report["cuda"] is None
        assert report["cuda_note"] == "no GPU here: CUDA rows skipped; the CPU bf16 autocast row stands in"
        assert names == ["cpu-fp32", "cpu-bf16"]
    rows = {r["name"]: r for r in report["rows"]}
    for row in rows.values():
        assert set(row) >= ROW_FIELDS, row
        assert row["tokens_per_s"] > 0 and row["steps_per_s"] > 0 and row["steps"] == 16
        assert row["tokens"] == 16 * 8 * 32  # steps x batch x seq_len
        assert (row["peak_memory_bytes"] is None) == (row["device_class"].startswith("cpu"))
    assert rows["cpu-fp32"]["verdicts"] is None  # the referee's own class: not judged
    assert rows["cpu-fp32"]["deterministic_overhead"] is None
    judged = [r for r in rows.values() if r["name"] != "cpu-fp32"]
    for row in judged:
        verdicts = row["verdicts"]
        assert len(verdicts) == 2 * 3  # 2 rounds x (2 training segments + the derivation)
        assert [v["verdict"] for v in verdicts] == ["innocent"] * 6, [v["reason"] for v in verdicts]
        assert row["false_convictions"] == 0 and row["undecided"] == 0
        training = [v for v in verdicts if not v["derivation"]]
        assert all(f"against the trainer's {row['device_class']}: within the envelope" in v["reason"] for v in training)
        assert all(0 < v["distance"]["weight_rel_l2"] <= report["weight_bound"] for v in training)  # it diverges
        if row["device_class"].startswith("cuda"):
            assert row["deterministic_overhead"] > 0
            assert row["deterministic"] == row["name"].endswith(" det")
    assert report["judged_segments"] == 6 * len(judged)
    assert (report["false_convictions"], report["undecided"], report["errors"]) == (0, 0, 0)


def test_cpu_settings_exercise_gradient_checkpointing_and_the_exact_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--settings``: the gradient-checkpointing path on CPU, and a cpu-fp32 trainer with it is
    still replayed bit for bit by the CPU fp32 referee."""
    bench = _bench(monkeypatch)
    out = tmp_path / "report.json"
    threads = torch.get_num_threads()
    try:
        argv = ["--tiny", "--rounds", "1", "--threads", "1", "--settings", "cpu-fp32-gc", "cpu-bf16-gc"]
        code = bench.main([*argv, "--json", str(out)], out=lambda report: None)
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    assert code == 0 and report["false_convictions"] == 0
    rows = {r["name"]: r for r in report["rows"]}
    assert set(rows) == {"cpu-fp32-gc", "cpu-bf16-gc"}
    assert all(r["gradient_checkpointing"] for r in rows.values())
    exact = [v["reason"] for v in rows["cpu-fp32-gc"]["verdicts"] if not v["derivation"]]
    assert exact == ["steps 0..3 re-run bit-exactly", "steps 4..7 re-run bit-exactly"]
    assert [bench.Setting(*a).name for a in (("cuda", "bf16", True, False), ("cuda", "fp32"))] == [
        "cuda-bf16-gc nondet",
        "cuda-fp32 det",
    ]
    assert [s.name for s in bench.parse_settings(["cuda-bf16-gc"])] == ["cuda-bf16-gc nondet", "cuda-bf16-gc det"]
    with pytest.raises(ValueError, match="device-dtype"):
        bench.parse_settings(["tpu-fp8"])


def test_the_cuda_rows_mode_and_overhead_logic_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """What only a GPU session runs end to end: the trainer's deterministic-mode switch (flags
    only, no kernel; a CPU loop never changes them) and the pairing of a setting's deterministic
    and non-deterministic rows."""
    bench = _bench(monkeypatch)
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic
    for deterministic in (True, False):
        with deterministic_algorithms(deterministic):
            assert torch.are_deterministic_algorithms_enabled() is deterministic
            assert torch.backends.cudnn.deterministic is deterministic
        assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic) == before
    setup = build_trainer_setup("tiny")
    cpu = bench.setting_loop(setup, bench.Setting("cpu", "fp32", deterministic=True), 2)
    assert not cpu.deterministic and isinstance(cpu._mode(), contextlib.nullcontext)  # CPU torch is deterministic
    rows: list[dict[str, Any]] = [
        {"name": "cpu-fp32", "setting": "cpu-fp32", "seconds": 1.0, "deterministic_overhead": None},
        {"name": "cuda-fp32 nondet", "setting": "cuda-fp32", "seconds": 2.0, "deterministic_overhead": None},
        {"name": "cuda-fp32 det", "setting": "cuda-fp32", "seconds": 3.0, "deterministic_overhead": None},
        {"name": "cuda-bf16 nondet", "setting": "cuda-bf16", "seconds": 1.0, "deterministic_overhead": None},
        {"name": "cuda-bf16 det", "setting": "cuda-bf16", "error": "no deterministic kernel"},
    ]
    bench.add_overheads(rows)
    assert [r.get("deterministic_overhead") for r in rows] == [None, 1.5, 1.5, None, None]
