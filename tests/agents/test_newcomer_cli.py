"""What a newcomer hit following the README (issue 13), each against a real anvil and a real blob
service: the run's progress in words while it enrolls, a spec checked before anything is
uploaded, a typo'd device refused at config load, JSON piped into ``head``, the downloaded
model's file mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from conftest import build_spec
from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet, chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.sponsor.task_builder import publish_language_task
from syncline.sponsor.task_defaults import default_task

from ._agent_harness import SEQ_LEN, SHARD_COUNT, VOCAB_SIZE, tiny_plan

pytestmark = pytest.mark.chain

SYNCLINE = str(Path(sys.executable).with_name("syncline"))
THROWAWAY_KEY = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"  # unfunded


@pytest.fixture
def blob_service(tmp_path: Path) -> Iterator[BlobService]:
    service = BlobService(LocalBlobStore(tmp_path / "blobs"), host="127.0.0.1", port=0).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``syncline <argv>`` in-process, as the console script runs it: (exit code, stdout, stderr)."""
    import structlog

    from syncline.cli import main

    monkeypatch.setenv("SYNCLINE_LOG_FORMAT", "console")
    saved = structlog.get_config()

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run
    structlog.configure(**saved)


def _deployment_file(deployment: Deployment) -> str:
    return str(Path(deployment.abi_path).with_name("deployment.json"))


def test_get_run_and_list_runs_say_how_many_trainers_have_enrolled(
    state_env: Path,
    market: MarketClient,
    deployment: Deployment,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    spec = build_spec(
        witnesses=tuple(w.address for w in witnesses),
        enrollment_deadline=chain_time(market.w3) + 600,
        min_trainers=3,
        max_trainers=3,
    )
    task_id, _ = market.post_task(sponsor, spec, "ipfs://progress")
    market.enroll(trainers[0], task_id)
    code, out, err = cli("train", "get-run", "--task-id", str(task_id), "--deployment", _deployment_file(deployment))
    assert code == 0, err
    run = json.loads(out)
    assert run["progress"] == "enrolling: 1 of 3 trainers (the run starts when 3 have enrolled)"
    code, out, err = cli("train", "list-runs", "--deployment", _deployment_file(deployment))
    assert code == 0, err
    (row,) = [r for r in json.loads(out) if r["task_id"] == task_id]
    assert row["progress"].startswith("enrolling: 1 of 3 trainers")
    for t in trainers[1:]:
        market.enroll(t, task_id)
    code, out, _ = cli("train", "get-run", "--task-id", str(task_id), "--deployment", _deployment_file(deployment))
    assert json.loads(out)["progress"] == f"running: round 1 of {spec.rounds} (0 finalized), 3 trainers"


def test_post_task_checks_the_spec_before_uploading_anything(
    tmp_path: Path,
    state_env: Path,
    devnet: Devnet,
    deployment: Deployment,
    witnesses: list[Signer],
    blob_service: BlobService,
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """k=3 of 2 witnesses: one error line, and the blob store received nothing (before the fix
    the tokenizer, every shard and the initial state were published first)."""
    spec = yaml.safe_load((Path(__file__).parents[2] / "examples" / "task.yaml").read_text())
    spec.update(
        witnesses=[w.address for w in witnesses[:2]],
        threshold=3,
        dataset_source={"corpus": "shakespeare", "shard_count": SHARD_COUNT, "vocab_size": VOCAB_SIZE, "seq_len": 32},
    )
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SPONSOR_KEY", devnet.private_keys()[0])
    code, out, err = cli(
        "train",
        "post-task",
        "--spec",
        str(path),
        "--deployment",
        _deployment_file(deployment),
        "--blob-store",
        blob_service.url,
        "--key-env",
        "SPONSOR_KEY",
    )
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == "error: threshold k=3 must satisfy 0 < k <= witnesses (2, at most 32)"
    stored = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert stored == [], f"{len(stored)} blobs were uploaded for a spec that cannot be posted"


def test_a_typo_in_device_is_refused_at_config_load(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before the agent reaches for its node (here: none answers), not somewhere in training."""
    config = {
        "node_rpc": "http://127.0.0.1:1",
        "deployment": str(tmp_path / "deployment.json"),
        "blob_store": "http://127.0.0.1:1",
        "task_id": 1,
        "state_dir": str(tmp_path / "state"),
        "device": "cpuu",
    }
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("SYNCLINE_PRIVATE_KEY", THROWAWAY_KEY)
    code, _, err = cli("trainer", "run", "--config", str(path))
    assert code == 2
    assert err.strip().splitlines() == ["error: device 'cpuu': use cpu, cuda or cuda:N (N: the GPU's index)"]


def test_json_piped_into_a_reader_that_stops_exits_quietly(
    tmp_path: Path, state_env: Path, deployment: Deployment
) -> None:
    """``syncline train list-runs | head -1``: the reader is gone before the output is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [SYNCLINE, "train", "list-runs", "--deployment", _deployment_file(deployment)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr


def test_the_downloaded_model_is_readable_by_others(
    tmp_path: Path,
    state_env: Path,
    market: MarketClient,
    deployment: Deployment,
    devnet: Devnet,
    sponsor: Signer,
    witnesses: list[Signer],
    blob_service: BlobService,
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    """Every file of the exported directory is written 0666 & ~umask (0644 here), as any new file."""
    plan = tiny_plan()
    published = publish_language_task(
        HttpBlobStore(blob_service.url),
        template=default_task(plan, [w.address for w in witnesses], chain_time(market.w3)),
        shard_count=SHARD_COUNT,
        vocab_size=VOCAB_SIZE,
        seq_len=SEQ_LEN,
        model=plan.model,
    )
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    out = tmp_path / "model"
    old_umask = os.umask(0o022)
    try:
        code, _, err = cli(
            "train",
            "download-model",
            "--task-id",
            str(task_id),
            "--deployment",
            _deployment_file(deployment),
            "--blob-store",
            blob_service.url,
            "--out",
            str(out),
        )
    finally:
        os.umask(old_umask)
    assert code == 0, err
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert "model.safetensors" in modes
    assert modes == dict.fromkeys(modes, 0o644), modes


def test_a_relative_enrollment_deadline_counts_from_the_next_block(
    tmp_path: Path,
    state_env: Path,
    market: MarketClient,
    devnet: Devnet,
    deployment: Deployment,
    witnesses: list[Signer],
    blob_service: BlobService,
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle devnet's latest block is minutes old; ``+600`` counted from it had passed when the
    task was mined (``SynclineDeadlineInPast``). Here the next block comes 1000 s after the last."""
    next_block = chain_time(market.w3) + 1000
    market.w3.provider.make_request("evm_setNextBlockTimestamp", [next_block])  # type: ignore[arg-type]
    spec = yaml.safe_load((Path(__file__).parents[2] / "examples" / "task.yaml").read_text())
    spec.update(
        witnesses=[w.address for w in witnesses],
        enrollment_deadline="+600",
        dataset_source={"corpus": "shakespeare", "shard_count": SHARD_COUNT, "vocab_size": VOCAB_SIZE, "seq_len": 32},
        model=tiny_plan().model,
    )
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SPONSOR_KEY", devnet.private_keys()[0])
    code, out, err = cli(
        "train",
        "post-task",
        *("--spec", str(path), "--deployment", _deployment_file(deployment)),
        *("--blob-store", blob_service.url, "--key-env", "SPONSOR_KEY"),
    )
    assert code == 0, err
    task_id = json.loads(out)["task_id"]
    assert market.spec_tuple(task_id)[15] >= next_block + 600  # enrollmentDeadline
