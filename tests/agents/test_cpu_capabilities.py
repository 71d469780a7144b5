"""An honest ``cpu-fp32`` trainer on other CPU kernels than its referee's is never convicted.

ATen dispatches its CPU kernels on the instruction set (``AVX512``, ``AVX2``, ``DEFAULT`` =
scalar; ``ATEN_CPU_CAPABILITY`` lowers it when torch starts), and the kernels sum in other orders:
the same round trained on AVX2 and on AVX-512 ends ~1e-6 apart, never bit for bit. A referee that
compared same-class checkpoints by hash alone judged an honest AVX2 trainer guilty on every
training segment. Each side here is a process of its own (``_isa_worker.py``) with its own
``ATEN_CPU_CAPABILITY``; the referee is ``check_segment`` / ``find_faulty`` with the default
``cpu-fp32`` referee, as witnesses and challengers run it. A pair the machine cannot run (no
AVX-512: the request falls back to AVX2, both sides run the same kernels) is skipped.

Model: the fraud e2e's 1-layer Llama (hidden 32, vocab 256), H = 8 AdamW steps, a checkpoint every 4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import _isa_worker as worker

WORKER = Path(__file__).with_name("_isa_worker.py")
AGENTS = Path(__file__).resolve().parents[2] / "agents"
S = 2  # training segments; segment S is the derivation


def _run(capability: str, *args: str) -> Any:
    env = {
        **os.environ,
        "ATEN_CPU_CAPABILITY": capability,
        "PYTHONPATH": f"{AGENTS}{os.pathsep}" + os.environ.get("PYTHONPATH", ""),
    }
    done = subprocess.run(
        [sys.executable, str(WORKER), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


TRAINERS = {"avx2": worker.MODES, "default": ("honest",), "avx512": worker.MODES}
"""What each trainer process trains (one process per instruction set)."""
REFEREES = {
    "avx512": [(m, "avx2") for m in worker.MODES] + [("honest", "default")],
    "avx2": [(m, "avx512") for m in worker.MODES] + [("honest", "default"), ("honest", "avx2")],
    "default": [("honest", "avx512"), ("honest", "avx2")],
}
"""What each referee process judges: ``(mode, the trainer's capability)``."""


@dataclass(frozen=True)
class Judged:
    trainer_kernels: str
    referee_kernels: str
    report: dict[str, Any]


Reports = dict[tuple[str, str, str], Judged]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    """``(mode, trainer capability, referee capability) -> Judged``: 3 trainer and 3 referee processes."""
    start = worker.start_state().to_bytes()
    root = tmp_path_factory.mktemp("isa")
    kernels: dict[tuple[str, str], str] = {}
    for capability, modes in TRAINERS.items():
        for mode in modes:
            (root / capability / mode).mkdir(parents=True)
            (root / capability / mode / "start.bin").write_bytes(start)
        for mode, out in _run(capability, "train", str(root / capability), *modes).items():
            kernels[(mode, capability)] = out["kernels"]
    judged: Reports = {}
    for referee, subs in REFEREES.items():
        out = _run(referee, "referee", *(str(root / c / m) for m, c in subs))
        for mode, capability in subs:
            report = out[str(root / capability / mode)]
            judged[(mode, capability, referee)] = Judged(kernels[(mode, capability)], report["kernels"], report)
    return judged


def _judged(reports: Reports, mode: str, trainer: str, referee: str) -> dict[str, Any]:
    """The referee's report; skip when both sides ran the same kernels (no AVX-512 here, say)."""
    judged = reports[(mode, trainer, referee)]
    if judged.trainer_kernels == judged.referee_kernels:
        pytest.skip(f"the {trainer} trainer and the {referee} referee both run {judged.trainer_kernels} here")
    return judged.report


PAIRS = [
    ("avx2", "avx512"),
    ("default", "avx512"),
    ("avx512", "avx2"),
    ("default", "avx2"),
    ("avx512", "default"),
    ("avx2", "default"),
]


@pytest.mark.parametrize(("trainer", "referee"), PAIRS)
def test_an_honest_trainer_on_other_kernels_is_never_convicted(reports: Reports, trainer: str, referee: str) -> None:
    honest = _judged(reports, "honest", trainer, referee)
    verdicts = honest["verdicts"]
    assert [v["guilty"] for v in verdicts] == [False] * (S + 1), verdicts
    assert all(v["kind"] == "Verdict" for v in verdicts)
    for v in verdicts[:S]:  # the kernels really differ: judged inside the envelope, not bit-exactly
        assert "against the trainer's cpu-fp32: not bit-exactly, within the envelope" in v["reason"], v
    assert verdicts[S]["reason"] == "the payload is derived from the last checkpoint"  # the derivation stays exact
    assert honest["find_faulty"] is None


@pytest.mark.parametrize(("trainer", "referee"), [("avx2", "avx512"), ("avx512", "avx2")])
def test_cheats_on_other_kernels_are_still_convicted(reports: Reports, trainer: str, referee: str) -> None:
    lazy, forged, fake = (_judged(reports, m, trainer, referee) for m in ("lazy", "lazy-forged", "fake-gradient"))
    # lazy: trains half the steps, its second segment's checkpoint repeats the first's end
    assert [v["guilty"] for v in lazy["verdicts"]] == [False, True, False], lazy
    assert "does not give checkpoint 2: AdamW step counts differ" in lazy["verdicts"][1]["reason"]
    assert lazy["find_faulty"] == {"segment": 1, "guilty": True}
    # with forged step counts the tensors convict it: it lies a whole update away
    assert [v["guilty"] for v in forged["verdicts"]] == [False, True, False], forged
    assert "does not give checkpoint 2: weight relative L2 1 exceeds the envelope" in forged["verdicts"][1]["reason"]
    # fake gradient: honest checkpoints, a payload they do not derive
    assert [v["guilty"] for v in fake["verdicts"]] == [False, False, True], fake
    assert fake["verdicts"][S]["reason"] == "the committed payload is not the one derived from the last checkpoint"
    assert fake["find_faulty"] == {"segment": S, "guilty": True}


def test_the_same_kernels_still_replay_bit_exactly(reports: Reports) -> None:
    """Where bit-exactness holds the hash decides alone."""
    judged = reports[("honest", "avx2", "avx2")]
    assert judged.trainer_kernels == judged.referee_kernels
    reasons = [v["reason"] for v in judged.report["verdicts"]]
    assert reasons[:S] == ["steps 0..3 re-run bit-exactly", "steps 4..7 re-run bit-exactly"]
