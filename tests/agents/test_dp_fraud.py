"""A DP trainer whose noise is not the committed one is caught on anvil by re-executing a private
training segment, and slashed; the honest DP trainers, spot-checked the same way, are not.

``syncline demo --scenario dp`` made small (H=10 DP-SGD steps, a checkpoint every 2: 5 private
training segments per submission), on-demand checkpoints and the committee drawing
every submission (``spot_check_rate`` 1) and ``trainer-2`` training with noise other than the seeds it binds in its
checkpoint root (``--misbehave other-noise``: e.g. noise it could later subtract). When the public
draw names a training segment of a submission, its trainer publishes that segment's noise opening
sealed to the witnesses' registered dispute keys (docs/privacy.md); the witnesses' challengers
unseal it, verify it against the bound commitment and replay the segment bit for bit. The blob
store never holds a seed in the clear. The draw names the derivation segment (which replays no
noise) with probability 1/6 per submission, so the cheat escapes all five rounds with probability
(1/6)^5 < 0.013% (with three rounds it was 0.46%, and a fresh-clone run drew the cheater's
derivation segment in all three).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from syncline.demo.dp import PLAN, DpDemo
from syncline.demo.lifecycle import write_receipt
from syncline.privacy.noise import RoundNoise
from syncline.privacy.opening import MAGIC as CLEAR_OPENING
from syncline.privacy.sealed import MAGIC as SEALED_OPENING

pytestmark = [pytest.mark.chain, pytest.mark.slow]

CHEAT = dataclasses.replace(
    PLAN,
    rounds=5,
    inner_steps=10,
    checkpoint_interval=2,
    timeout_s=300.0,
    checkpoints="on-demand",
    spot_check_rate=1.0,
    misbehave={"trainer-2": "other-noise"},
)


def assert_openings_sealed(tmp_path: Path, data: dict[str, object], *, published: bool = True) -> None:
    """The blob store holds sealed openings only: no blob is a cleartext opening, and none holds
    any trainer's batch key or segment seed of any round (the seeds re-derived from the trainers'
    secrets); the witnesses registered their dispute keys."""
    blobs = [p.read_bytes() for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert not any(b.startswith(CLEAR_OPENING) for b in blobs)
    assert any(b.startswith(SEALED_OPENING) for b in blobs) == published
    secrets = []
    for i in (1, 2, 3):
        secret = (tmp_path / "agents" / f"trainer-{i}" / "noise-secret").read_bytes()
        for round_ in range(CHEAT.rounds):
            for fragment in range(3):
                noise = RoundNoise.derive(
                    secret,
                    task_id=int(str(data["task_id"])),
                    round_=round_,
                    fragment=fragment,
                    interval=CHEAT.checkpoint_interval,
                    inner_steps=CHEAT.inner_steps,
                )
                secrets += [noise.batch_key, *(noise.segment(s).seed for s in range(noise.segments))]
    leaked = [s.hex() for s in secrets if any(s in b for b in blobs)]
    assert not leaked, leaked
    logs = "".join(p.read_text() for p in (tmp_path / "logs").glob("witness-*.log"))
    assert logs.count("witness.dispute_key_registered") == 3


def test_a_dp_trainer_with_other_noise_is_replayed_and_slashed_and_the_honest_are_not(tmp_path: Path) -> None:
    receipt = DpDemo(tmp_path, CHEAT).run()
    data = json.loads(write_receipt(receipt, tmp_path / "receipt.json").read_text())
    slashed = {data["trainer_names"][t["trainer"].lower()]: t["slashed_wei"] for t in data["trainers"]}
    assert slashed["trainer-2"] > 0 and slashed["trainer-1"] == slashed["trainer-3"] == 0, slashed

    logs = {p.stem: p.read_text() for p in (tmp_path / "logs").glob("*.log")}
    witnesses = "".join(v for k, v in logs.items() if k.startswith("witness")).splitlines()
    # the conviction is a replay of a private training segment with its opening (not the derivation
    # check), against the cheater alone
    faults = [line for line in witnesses if "challenger.fault_found" in line]
    cheater = next(a for a, n in data["trainer_names"].items() if n == "trainer-2")
    assert faults and all("does not give checkpoint" in f and cheater in f.lower() for f in faults), faults
    votes = [line for line in witnesses if "witness.refereed" in line]
    assert votes and all("guilty=True" in v and "does not give checkpoint" in v for v in votes), votes
    assert "trainer.dp_opening_published" in logs["trainer-2"]
    # the honest trainers published the openings of their drawn segments and passed the replay
    assert any("trainer.dp_opening_published" in logs[n] for n in ("trainer-1", "trainer-3"))
    # ... sealed to the committee: the blob store holds no seed in the clear
    assert_openings_sealed(tmp_path, data)
    # the receipt names the rounds whose opening the committee could read: the cheater's claimed one
    assert cheater in data["rounds_opened"], data["rounds_opened"]


def test_a_dp_trainer_that_withholds_a_drawn_opening_is_convicted_like_one_that_withholds_a_checkpoint(
    tmp_path: Path,
) -> None:
    """``trainer-2`` publishes its drawn checkpoints but not the noise opening: the witnesses wait
    until the spot-check deadline (their own fetch failing is never guilt), escalate the drawn
    segment to a claim on chain, the trainer cannot answer it (the referees could not replay), and
    the unanswered claim convicts it; the honest trainers are not touched."""
    plan = dataclasses.replace(CHEAT, misbehave={"trainer-2": "withhold-opening"})  # escapes w.p. (1/6)^5
    receipt = DpDemo(tmp_path, plan).run()
    data = json.loads(write_receipt(receipt, tmp_path / "receipt.json").read_text())
    slashed = {data["trainer_names"][t["trainer"].lower()]: t["slashed_wei"] for t in data["trainers"]}
    assert slashed["trainer-2"] > 0 and slashed["trainer-1"] == slashed["trainer-3"] == 0, slashed
    logs = {p.stem: p.read_text() for p in (tmp_path / "logs").glob("*.log")}
    assert "mode=withhold-opening" in logs["trainer-2"] and "trainer.dp_opening_published" not in logs["trainer-2"]
    assert "trainer.training_answered" not in logs["trainer-2"]
    witnesses = "".join(v for k, v in logs.items() if k.startswith("witness"))
    assert "not published" in witnesses and "witness.refereed" not in witnesses
    assert_openings_sealed(tmp_path, data, published=any("dp_opening_published" in logs[n] for n in logs))
