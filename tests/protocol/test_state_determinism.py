"""TrainingState (round trips, validation, outer step) and cross-process bit-exactness."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import save

from syncline.protocol.chunking import state_chunk_root
from syncline.protocol.fixed_point import to_fixed
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.outer_optimizer import nesterov_step
from syncline.protocol.state import STATE_FORMAT, TrainingState

WORKER = Path(__file__).with_name("_determinism_worker.py")


def load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_determinism_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_sd() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"w": torch.randn(20, 30, generator=g), "b": torch.randn(30, generator=g).to(torch.float16)}


def test_from_model_state_dict_and_back() -> None:
    sd = small_sd()
    state = TrainingState.from_model_state_dict(sd)
    assert state.weights.dtype == torch.int64 and state.weights.numel() == 630
    assert not state.momentum.any()
    assert torch.equal(state.weights[:30], to_fixed(sd["b"].float()))
    back = state.to_state_dict()
    assert back["b"].dtype == torch.float16 and back["w"].shape == (20, 30)
    assert float((back["w"] - sd["w"]).abs().max()) <= 2.0**-33  # half a grid unit
    assert torch.equal(back["b"], sd["b"])  # float16 values all lie on the Q32 grid
    assert state.state_root() == state_chunk_root(state.weights, state.momentum)
    assert state.state_root_hex == "0x" + state.state_root().hex()


def test_apply_round_is_the_outer_step() -> None:
    state = TrainingState.from_model_state_dict(small_sd())
    delta = torch.arange(630, dtype=torch.int64) << 20
    after = state.apply_round(delta, 700_000, 900_000)
    theta, m = nesterov_step(state.weights, state.momentum, delta, 700_000, 900_000)
    assert torch.equal(after.weights, theta) and torch.equal(after.momentum, m)
    assert after.state_root() != state.state_root()
    assert after.layout is state.layout
    with pytest.raises(ValueError, match="delta"):
        state.apply_round(torch.zeros(630), 700_000, 900_000)


def test_bytes_round_trip() -> None:
    state = TrainingState.from_model_state_dict(small_sd()).apply_round(
        torch.full((630,), -(3 << 25), dtype=torch.int64), 700_000, 900_000
    )
    data = state.to_bytes()
    back = TrainingState.from_bytes(data, expected_layout=state.layout)
    assert back == state and back.state_root() == state.state_root()


def _state_payload(weights: torch.Tensor, momentum: torch.Tensor, lay: ParameterLayout, **meta: str) -> bytes:
    metadata = {"format": STATE_FORMAT, "layout": lay.canonical_json().decode(), **meta}
    return bytes(save({"weights": weights, "momentum": momentum}, metadata=metadata))


def test_from_bytes_rejects_bad_payloads() -> None:
    state = TrainingState.from_model_state_dict(small_sd())
    w, m, layout = state.weights, state.momentum, state.layout
    cases = [
        (_state_payload(w.to(torch.int32), m, layout), "dtype I32 != expected I64"),
        (_state_payload(w[:-1], m, layout), r"shape \[629\] != expected \[630\]"),
        (_state_payload(w, m, layout, format="other"), "state format"),
        (_state_payload(w, m, layout, layout="{"), "not JSON"),
        (_state_payload(torch.full_like(w, 1 << 46), m, layout), r"weights: values must satisfy \|x\| < 2\*\*46"),
        (state.to_bytes() + b"\x00", "trailing"),
    ]
    for data, reason in cases:
        with pytest.raises(ValueError, match=reason):
            TrainingState.from_bytes(data)
    other = ParameterLayout.from_state_dict({"w": torch.zeros(630)})
    with pytest.raises(ValueError, match="differs from the expected layout"):
        TrainingState.from_bytes(state.to_bytes(), expected_layout=other)
    with pytest.raises(ValueError, match="more than the limit"):
        TrainingState.from_bytes(state.to_bytes(), max_bytes=100)


def test_construction_validates() -> None:
    layout = ParameterLayout.from_state_dict({"w": torch.zeros(4)})
    z = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="weights has 3 coordinates"):
        TrainingState(layout, z[:3], z)
    with pytest.raises(ValueError, match="momentum: expected an int64"):
        TrainingState(layout, z, z.float())
    with pytest.raises(ValueError, match="to_fixed"):
        TrainingState.from_model_state_dict({"w": torch.tensor([float("nan"), 0, 0, 0])})
    with pytest.raises(ValueError, match=r"weights: values must satisfy \|x\| < 2\*\*46"):
        TrainingState.from_model_state_dict({"w": torch.tensor([2.0**14, 0, 0, 0])})


def test_roots_are_identical_across_processes_and_thread_counts() -> None:
    """Subprocesses with 1 and 4 torch threads and this process with 2 rebuild the inputs from the
    seed, quantize, aggregate with every rule, step twice and hash: every root must agree."""
    seed = 20240611
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "--seed", str(seed), "--threads", str(threads)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for threads in (1, 4)
    ]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        results.append(json.loads(stdout))
    assert [r["threads"] for r in results] == [1, 4]
    worker = load_worker()
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        in_process = worker.run(seed)
    finally:
        torch.set_num_threads(previous)
    for r in results:
        assert r["roots"] == in_process
    # Every rule produced its own state (the outlier makes the robust rules differ from the mean).
    rule_roots = [in_process[k] for k in ("MEAN", "TRIMMED_MEAN", "COORDINATE_MEDIAN", "KRUM", "CENTERED_CLIP")]
    assert len(set(rule_roots)) == len(rule_roots)
    assert worker.run(seed + 1)["MEAN"] != in_process["MEAN"]
