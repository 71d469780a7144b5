"""Noise seeds: derived from the trainer's secret, committed per round, opened one segment at a time."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from syncline.privacy.noise import NoiseSeedError, RoundNoise, SegmentNoise, load_or_create_secret, open_reveal


def rn(secret: bytes = b"\x01" * 32, **kw: int) -> RoundNoise:
    args = {"task_id": 1, "round_": 2, "fragment": 0, "interval": 10, "inner_steps": 30} | kw
    return RoundNoise.derive(secret, **args)


def test_seeds_depend_on_secret_task_round_and_fragment() -> None:
    base = rn()
    assert base == rn() and base.segments == 3
    for other in (rn(b"\x02" * 32), rn(task_id=2), rn(round_=3), rn(fragment=1)):
        assert other.seed != base.seed and other.batch_seed != base.batch_seed
    steps = {base.step_seed(t) for t in range(30)}
    assert len(steps) == 30 and all(0 <= s < 2**63 for s in steps)


def test_a_revealed_segment_opens_the_commitment_and_gives_only_its_own_steps() -> None:
    noise = rn()
    revealed = open_reveal(noise.commitment(), noise.hashes(), noise.reveal(1))
    assert revealed.batch_seed == noise.batch_seed
    assert [revealed.segment.step_seed(t) for t in range(10, 20)] == [noise.step_seed(t) for t in range(10, 20)]
    with pytest.raises(NoiseSeedError, match="not in segment 1"):
        revealed.segment.step_seed(9)


def test_a_wrong_opening_is_refused_naming_what_differs() -> None:
    noise = rn()
    commitment, hashes = noise.commitment(), noise.hashes()
    forged = dataclasses.replace(noise.reveal(1), segment=SegmentNoise(1, 10, b"\x00" * 32))
    with pytest.raises(NoiseSeedError, match="seed of segment 1 is not the committed one"):
        open_reveal(commitment, hashes, forged)
    with pytest.raises(NoiseSeedError, match="batch key is not the committed one"):
        open_reveal(commitment, hashes, dataclasses.replace(noise.reveal(0), batch_key=b"\x00" * 32))
    with pytest.raises(NoiseSeedError, match="do not open the committed value"):
        open_reveal(rn(round_=9).commitment(), hashes, noise.reveal(0))
    with pytest.raises(NoiseSeedError, match="outside"):
        noise.segment(3)


def test_the_secret_is_created_once_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "noise-secret"
    first = load_or_create_secret(path)
    assert load_or_create_secret(path) == first and len(first) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_bytes(b"short")
    with pytest.raises(NoiseSeedError, match="expected 32 bytes"):
        load_or_create_secret(path)
