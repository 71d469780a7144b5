"""Bad inputs: every rejection reason of a witness (pure, no chain), a non-finite gradient that a
trainer refuses to send, and bad agent configs on the command line (one ``error:`` line, exit 2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from eth_utils import keccak
from safetensors.torch import save

from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet, chain_time
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import CHUNK_SIZE, num_chunks
from syncline.protocol.quantization import QuantizedGradient, quantize
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, RoundResult, compute_round, validate_submission
from syncline.run.agent_config import config_from_mapping
from syncline.run.context import max_payload_bytes
from syncline.sponsor.task_builder import publish_language_task
from syncline.sponsor.task_defaults import default_task
from syncline.trainer.agent import TrainerAgent
from syncline.trainer.inner_loop import RoundWork

from ._agent_harness import tiny_plan

BITS = 8
NUMEL = 900  # 4 chunks, the last one short
LIMIT = max_payload_bytes(NUMEL, BITS)  # what a witness allows
ROUND: dict[str, Any] = {
    "rule": AggregationRule.COORDINATE_MEDIAN,
    "rule_param": 0,
    "bits": BITS,
    "lr_ppm": 700_000,
    "momentum_ppm": 900_000,
    "max_payload_bytes": LIMIT,
}
BAD = 3  # the bad submission's fragment; 0..2 are honest


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def previous() -> TrainingState:
    sd = {"a.weight": torch.randn(20, 30, generator=_gen(0)), "b.bias": torch.randn(300, generator=_gen(1))}
    state = TrainingState.from_model_state_dict(sd)
    assert state.layout.numel == NUMEL and num_chunks(NUMEL) == 4  # the last chunk is short
    return state


def honest_gradient(seed: int, numel: int = NUMEL) -> torch.Tensor:
    return torch.randn(numel, generator=_gen(100 + seed)) * 1e-2


def submission(
    fragment: int, payload: bytes | None, *, chunk_root: bytes | None = None, **kw: Any
) -> CommittedSubmission:
    payload_hash = kw.pop("payload_hash", keccak(payload) if payload is not None else keccak(b"gone"))
    return CommittedSubmission(fragment, payload_hash, chunk_root or keccak(b"some chunk root"), payload, **kw)


def committed(fragment: int, qg: QuantizedGradient) -> CommittedSubmission:
    """What an honest trainer commits for ``qg``."""
    return submission(fragment, qg.to_safetensors_bytes(), chunk_root=gradient_chunk_root(qg))


@pytest.fixture(scope="module")
def honest() -> list[CommittedSubmission]:
    return [committed(f, quantize(honest_gradient(f), BITS)) for f in range(3)]


@pytest.fixture(scope="module")
def baseline(previous: TrainingState, honest: list[CommittedSubmission]) -> RoundResult:
    result = compute_round(previous, honest, **ROUND)
    assert result.accepted_mask == 0b111 and not result.rejected
    return result


def raw_payload(values: torch.Tensor, exponents: torch.Tensor, *, bits: int = BITS, numel: int = NUMEL) -> bytes:
    """A safetensors gradient payload written without QuantizedGradient's checks."""
    meta = {"bits": str(bits), "numel": str(numel), "chunk_size": str(CHUNK_SIZE)}
    return bytes(save({"values": values.contiguous(), "exponents": exponents.contiguous()}, metadata=meta))


def honest_parts(seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    qg = quantize(honest_gradient(seed), BITS)
    return qg.values.clone(), qg.exponents.clone()


def _oversized() -> CommittedSubmission:
    payload = quantize(honest_gradient(9), BITS).to_safetensors_bytes() + b"\x00" * (LIMIT + 1)
    return submission(BAD, payload)


def _hash_mismatch() -> CommittedSubmission:
    qg = quantize(honest_gradient(9), BITS)
    other = quantize(honest_gradient(10), BITS).to_safetensors_bytes()
    return submission(BAD, qg.to_safetensors_bytes(), chunk_root=gradient_chunk_root(qg), payload_hash=keccak(other))


def _wrong_numel() -> CommittedSubmission:
    return committed(BAD, quantize(honest_gradient(9, NUMEL + 1), BITS))


def _wrong_shape() -> CommittedSubmission:
    values, exps = honest_parts()
    return submission(BAD, raw_payload(values.reshape(NUMEL // 2, 2), exps))


def _wrong_dtype() -> CommittedSubmission:
    values, exps = honest_parts()
    return submission(BAD, raw_payload(values.to(torch.int16), exps))  # bits says 8, values are I16


def _exponent_out_of_range() -> CommittedSubmission:
    values, exps = honest_parts()
    exps[1] = 35  # the int8 cap is 34: 127 << 35 would break the aggregation's |x| < 2**41 bound
    return submission(BAD, raw_payload(values, exps))


def _value_out_of_range() -> CommittedSubmission:
    values, exps = honest_parts()
    values[5] = -128  # int8 range is [-127, 127]
    return submission(BAD, raw_payload(values, exps))


def _wrong_bits() -> CommittedSubmission:
    return committed(BAD, quantize(honest_gradient(9), 16))  # well-formed, but the task uses 8 bits


def _chunk_root_mismatch() -> CommittedSubmission:
    qg = quantize(honest_gradient(9), BITS)
    other = quantize(honest_gradient(10), BITS)
    return submission(BAD, qg.to_safetensors_bytes(), chunk_root=gradient_chunk_root(other))


def _unavailable() -> CommittedSubmission:
    return submission(BAD, None)


def _fetch_failed() -> CommittedSubmission:
    return submission(BAD, None, fetch_error="fetch failed: no blob at http://127.0.0.1:1/blobs/0x00")


CASES: dict[str, tuple[Callable[[], CommittedSubmission], str]] = {
    "payload-unavailable": (_unavailable, "payload unavailable"),
    "fetch-failed": (_fetch_failed, "fetch failed: no blob at"),
    "oversized": (_oversized, "oversized payload ("),
    "hash-mismatch": (_hash_mismatch, "hash mismatch: payload keccak differs from the committed payloadHash"),
    "wrong-numel": (
        _wrong_numel,
        f"malformed payload: gradient has {NUMEL + 1} coordinates, the task layout has {NUMEL}",
    ),
    "wrong-shape": (_wrong_shape, f"malformed payload: tensor 'values': shape [{NUMEL // 2}, 2] != expected [{NUMEL}]"),
    "wrong-dtype": (_wrong_dtype, "malformed payload: tensor 'values': dtype I16 != expected I8"),
    "exponent-out-of-range": (_exponent_out_of_range, "malformed payload: exponent 35 exceeds the cap 34 for 8 bits"),
    "value-out-of-range": (_value_out_of_range, "malformed payload: quantized value -128 is out of range"),
    "wrong-bits": (_wrong_bits, "wrong quantization: 16 bits, the task uses 8"),
    "chunk-root-mismatch": (
        _chunk_root_mismatch,
        "chunk root mismatch: payload chunks differ from the committed chunkRoot",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_submission_is_rejected_and_the_rest_aggregates_unchanged(
    case: str, previous: TrainingState, honest: list[CommittedSubmission], baseline: RoundResult
) -> None:
    make, prefix = CASES[case]
    bad = make()

    qg, reason = validate_submission(bad, numel=NUMEL, bits=BITS, max_bytes=LIMIT)
    assert qg is None and reason is not None and reason.startswith(prefix), reason
    if case == "oversized":
        assert reason == f"oversized payload ({len(bad.payload or b'')} > {LIMIT} bytes)"

    for order in ([*honest, bad], [bad, *reversed(honest)]):  # position in the list does not matter
        result = compute_round(previous, order, **ROUND)
        assert result.rejected == {BAD: reason}
        assert result.accepted_mask == baseline.accepted_mask == 0b111
        assert result.aggregate_root == baseline.aggregate_root
        assert result.state_root == baseline.state_root and result.state == baseline.state


def test_a_fourth_honest_gradient_changes_the_result(
    previous: TrainingState, honest: list[CommittedSubmission], baseline: RoundResult
) -> None:
    """Sanity: an honest fourth gradient is accepted and changes the result (median of 4 != of 3)."""
    fourth = committed(BAD, quantize(honest_gradient(9), BITS))
    assert validate_submission(fourth, numel=NUMEL, bits=BITS, max_bytes=LIMIT)[1] is None
    result = compute_round(previous, [*honest, fourth], **ROUND)
    assert result.accepted_mask == 0b1111 and not result.rejected
    assert result.state_root != baseline.state_root


def test_only_bad_submissions_carry_the_state_over(previous: TrainingState) -> None:
    bad = [replace(make(), fragment=f) for f, make in enumerate((_hash_mismatch, _wrong_bits, _unavailable))]
    result = compute_round(previous, bad, **ROUND)
    assert result.accepted_mask == 0 and result.rule_used == "none"
    assert result.state_root == previous.state_root() and result.state == previous
    assert result.aggregate_root == b"\x00" * 32
    assert [result.rejected[f].split(":")[0] for f in range(3)] == [
        "hash mismatch",
        "wrong quantization",
        "payload unavailable",
    ]


# ---------------------------------------------------------------------- non-finite gradients


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), float("-inf")])
def test_quantize_refuses_non_finite_gradients(poison: float) -> None:
    grad = honest_gradient(0)
    grad[CHUNK_SIZE + 3] = poison
    with pytest.raises(ValueError, match="gradient holds NaN or Inf"):
        quantize(grad, BITS)


class Recorder:
    """Stands in for the market and the blob store; records every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise AssertionError(f"{name} called")

        return call


def test_trainer_sends_nothing_for_a_non_finite_gradient(previous: TrainingState, tmp_path: Path) -> None:
    """The trainer's commit path: quantize refuses the gradient before any blob upload or commit."""
    poisoned = honest_gradient(0)
    poisoned[17] = float("nan")

    class Inner:  # the trainer's InnerLoop, diverged
        private = None  # not a differentially private task

        def run(
            self, state: TrainingState, shards: list[bytes], *, seed: int, progress: bool = False, **_: object
        ) -> RoundWork:
            assert state is previous
            return RoundWork(poisoned, (5.0,), 0.01, 256)

        def save(self, path: Path) -> None:
            pass

    market, blobs = Recorder(), Recorder()
    cfg = config_from_mapping(
        {
            "node_rpc": "http://127.0.0.1:1",
            "task_id": 1,
            "deployment": str(tmp_path / "deployment.json"),
            "blob_store": "http://127.0.0.1:1",
            "state_dir": str(tmp_path),
        }
    )
    signer = from_private_key("0x" + "11" * 32)
    agent = TrainerAgent(cfg, signer, market, blobs)  # type: ignore[arg-type]
    agent.ctx = SimpleNamespace(
        task_id=1,
        spec=SimpleNamespace(
            gradient_bits=BITS,
            inner_steps=8,
            checkpoint_interval_steps=8,
            verification_policy=SimpleNamespace(on_demand=False),
        ),
        layout=previous.layout,
        shard=lambda i: b"",
    )  # type: ignore[assignment]
    agent.inner = Inner()  # type: ignore[assignment]
    agent._state = previous
    with pytest.raises(ValueError, match="NaN or Inf"):
        agent._train_and_commit(0, 0, [0], previous.state_root_hex, deadline=2**40)
    assert market.calls == [] and blobs.calls == []
    assert not (tmp_path / "rounds.jsonl").exists()


# ---------------------------------------------------------------------- bad agent configs on the CLI
#
# The installed ``syncline`` command is run as a subprocess for a few cases (it imports torch
# before reading the config: ~4 s each); the wider matrix calls the same ``syncline.cli.main``
# in-process, which is what the console script runs (``sys.exit(main())``).

SYNCLINE = str(Path(sys.executable).with_name("syncline"))
KEY = "0x" + "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"  # throwaway, unfunded


def base_config(tmp_path: Path, deployment: Path | None = None, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "node_rpc": "http://127.0.0.1:1",
        "task_id": 1,
        "deployment": str(deployment or tmp_path / "no-deployment.json"),
        "blob_store": "http://127.0.0.1:1",
        "state_dir": str(tmp_path / "state"),
        "poll_interval_s": 0.05,
    }
    config.update(extra)
    return config


def assert_one_error_line(code: int | None, stderr: str, *, names: str) -> str:
    assert code == 2, f"exit {code}; stderr:\n{stderr[-2000:]}"
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and stderr.rstrip().splitlines()[-1] == errors[0], stderr[-2000:]
    assert names in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("role", "text", "names"),
    [
        pytest.param("trainer", "BASE\nbogus_field: 1\n", "unknown config field(s): bogus_field", id="unknown-field"),
        pytest.param("witness", "node_rpc: [unclosed\n", "is not valid YAML", id="bad-yaml"),
    ],
)
def test_bad_config_via_the_installed_command(role: str, text: str, names: str, tmp_path: Path) -> None:
    path = tmp_path / f"{role}.yaml"
    path.write_text(text.replace("BASE", yaml.safe_dump(base_config(tmp_path), sort_keys=False)))
    env = {**os.environ, "SYNCLINE_PRIVATE_KEY": KEY, "SYNCLINE_LOG_FORMAT": "console"}
    proc = subprocess.run(
        [SYNCLINE, role, "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert_one_error_line(proc.returncode, proc.stderr, names=names)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1  # nothing but the error line


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str]]]:
    """``syncline <argv>`` in-process: (exit code, stderr). A raised exception fails the test."""
    import structlog

    from syncline.cli import main

    monkeypatch.setenv("SYNCLINE_PRIVATE_KEY", KEY)
    monkeypatch.setenv("SYNCLINE_LOG_FORMAT", "console")
    saved = structlog.get_config()

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except Exception as exc:  # what the console script would print as a traceback, exit 1
            pytest.fail(f"`syncline {' '.join(argv)}` crashed (traceback, exit 1): {type(exc).__name__}: {exc}"[:1500])
        return code, capsys.readouterr().err

    yield run
    structlog.configure(**saved)  # main() bound structlog to the captured stderr


@pytest.mark.parametrize("role", ["trainer", "witness"])
@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("BASE\nbogus_field: 1\n", "bogus_field", id="unknown-field"),
        pytest.param("BASE\ninner: {lr: 0.001, momentum: 0.9}\n", "momentum", id="unknown-inner-field"),
        pytest.param("node_rpc: [unclosed\n", "not valid YAML", id="bad-yaml"),
        pytest.param("- a list\n- not a mapping\n", "must be a mapping", id="not-a-mapping"),
        pytest.param("", "cannot read config", id="missing-file"),
    ],
)
def test_malformed_config_is_one_error_line(
    text: str, names: str, role: str, tmp_path: Path, cli: Callable[..., tuple[int, str]]
) -> None:
    path = tmp_path / f"{role}.yaml"
    if text:
        path.write_text(text.replace("BASE", yaml.safe_dump(base_config(tmp_path), sort_keys=False)))
    code, stderr = cli(role, "run", "--config", str(path))
    assert_one_error_line(code, stderr, names=names)


@pytest.mark.chain
@pytest.mark.parametrize(
    ("extra", "field"),
    [
        pytest.param({"inner": 5}, "inner", id="inner-not-a-mapping"),
        pytest.param({"dtype": 16}, "dtype", id="dtype-int"),
        pytest.param({"task_id": "one"}, "task_id", id="task_id-str"),
        pytest.param({"threads": "two"}, "threads", id="threads-str"),
        pytest.param({"metrics_port": "http"}, "metrics_port", id="metrics_port-str"),
        pytest.param({"poll_interval_s": "fast"}, "poll_interval_s", id="poll_interval_s-str"),
        pytest.param({"inner": {"lr": "high"}}, "lr", id="inner.lr-str"),
        pytest.param({"state_dir": 5}, "state_dir", id="state_dir-int"),
    ],
)
def test_wrongly_typed_config_is_one_error_line_naming_the_field(
    extra: dict[str, Any],
    field: str,
    tmp_path: Path,
    devnet: Devnet,
    deployment: Deployment,
    cli: Callable[..., tuple[int, str]],
) -> None:
    """A real node and deployment, so a value that slips through config parsing shows what the
    agent then does with it (no task exists on this chain: nothing can be enrolled or sent)."""
    config = base_config(tmp_path, Path(deployment.abi_path).with_name("deployment.json"), node_rpc=devnet.rpc_url)
    config["task_id"] = 10_000
    config.update(extra)
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    code, stderr = cli("trainer", "run", "--config", str(path))
    assert_one_error_line(code, stderr, names=field)


# ---------------------------------------------------------------------- inner_steps vs the task's H


@pytest.fixture
def blob_service(tmp_path: Path) -> Iterator[BlobService]:
    service = BlobService(LocalBlobStore(tmp_path / "blobs"), host="127.0.0.1", port=0).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.mark.chain
@pytest.mark.slow
def test_inner_steps_come_from_the_spec_not_the_trainer_config(
    tmp_path: Path,
    state_env: Path,
    devnet: Devnet,
    deployment: Deployment,
    market: MarketClient,
    sponsor: Signer,
    witnesses: list[Signer],
    blob_service: BlobService,
) -> None:
    """The task says H=8, an old trainer config still says 5: H is the task's (issue 13, item 4), so
    the config's copy is ignored with a warning and the trainer enrolls and trains the spec's H."""
    plan = tiny_plan()
    published = publish_language_task(
        HttpBlobStore(blob_service.url),
        template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
        shard_count=plan.shard_count,
        vocab_size=plan.vocab_size,
        seq_len=plan.seq_len,
        model=plan.model,
    )
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    trainer_key = devnet.private_keys()[1]
    trainer = from_private_key(trainer_key).address
    config = base_config(
        tmp_path,
        Path(deployment.abi_path).with_name("deployment.json"),
        node_rpc=devnet.rpc_url,
        task_id=task_id,
        blob_store=blob_service.url,
        inner={"inner_steps": plan.inner_steps - 3},
        threads=1,
    )
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {**os.environ, "SYNCLINE_PRIVATE_KEY": trainer_key, "SYNCLINE_LOG_FORMAT": "console"}
    log = tmp_path / "trainer.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [SYNCLINE, "trainer", "run", "--config", str(path)], stdout=fh, stderr=fh, env=env, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            if market.trainer(task_id, trainer).enrolled:
                break
            time.sleep(0.2)
        enrolled = market.trainer(task_id, trainer).enrolled
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    stderr = log.read_text()
    assert enrolled, f"the trainer did not enroll; log:\n{stderr[-1500:]}"
    assert "config.ignored" in stderr and "inner.inner_steps" in stderr, stderr[-1500:]
    assert "Traceback" not in stderr, stderr[-1500:]
