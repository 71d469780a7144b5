"""A witness's round at 10^6..10^9 parameters: time, memory and the hashing floor (issue 12).

For each ``--params`` size this measures, on this machine, one round exactly as a witness runs
it: validate ``--inputs`` int8 payload files (size bound, header, exponent and value ranges,
chunk root), aggregate with ``--rule``, apply the outer step and compute the new state root and
aggregate root (:func:`syncline.protocol.disk_round.compute_round_on_disk`, worker processes over
chunk ranges). Up to ``--disk-from`` parameters the state is held in memory (16 B/param, updated
in place); from there on it stays on disk and is updated in place with pread/pwrite. Payloads are
files as a witness holds them after the blob store's verified fetch, which hashed each one's
bytes against its ``payloadHash`` as they arrived (``PayloadFile.digest_verified``): that keccak
is the download's, and is reported apart as ``payload_digest_s`` (all n payloads, one core).

Every size runs in fresh processes: one builds the inputs (not timed: a float32 gradient file,
a random in-bounds state, payloads quantized from distinct synthetic gradients), one measures
the trainer's encode (quantize + payload file + chunk root, from the float32 file), one the
witness's round. Memory is the peak of the witness process tree's PSS (resident memory with
shared pages counted once, sampled every 20 ms), minus the same process's PSS right after its
imports: ``peak_rss_bytes_per_param`` = that difference / params.

The floor: ``keccak_floor_params_per_s`` = the project's keccak (``syncline.protocol.hashing``)
on 4 KiB messages on one core, in bytes/s, divided by the bytes a round must hash per parameter
(16 of state + ``inputs * bits / 8`` of payloads), as the issue defines it (per core);
``ratio_to_floor`` = ``params_per_s`` / that. The all-core floor (every worker hashing at once)
and its ratio are reported too.

Usage::

    .venv/bin/python scripts/bench/scale.py --params 1e6 1e7 1e8 1e9 --inputs 8 --json .syncline/bench/scale.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from syncline.protocol.enums import AggregationRule
from syncline.protocol.hashing import keccak

ROOT = Path(__file__).resolve().parents[2]
RULE_PARAMS = {"mean": 0, "trimmed_mean": 2000, "coordinate_median": 0, "multi_krum": 1, "krum": 1, "centered_clip": 1}


# ------------------------------------------------------------------------------------------------
# measurements shared by the roles
# ------------------------------------------------------------------------------------------------


def keccak_bytes_per_s(seconds: float = 1.0) -> float:
    """The project's keccak on 4 KiB messages, one core."""
    block = os.urandom(4096)
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(1000):
            keccak(block)
        count += 1000
    return count * 4096 / elapsed


def _keccak_worker(_: int) -> float:
    return keccak_bytes_per_s()


def keccak_all_cores_bytes_per_s(workers: int) -> float:
    """The same, in ``workers`` processes at once (summed)."""
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return float(sum(pool.map(_keccak_worker, range(workers))))


def _pss(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def _descendants(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
                out += [int(child), *_descendants(int(child))]
    except OSError:
        pass
    return out


class TreeMemory:
    """Peak PSS of this process and its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.02) -> None:
        self.peak, self.interval = 0, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        me = os.getpid()
        return sum(_pss(p) for p in [me, *_descendants(me)])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(self.interval)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


class SyntheticGradient:
    """A float32 outer gradient generated range by range from a seed (no memory for the whole)."""

    def __init__(self, numel: int, seed: int, scale: float = 0.01) -> None:
        self.numel, self.seed, self.scale = numel, seed, scale

    def read(self, start: int, stop: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, start))
        return rng.standard_normal(stop - start, dtype=np.float32) * np.float32(self.scale)

    def write(self, start: int, values: np.ndarray) -> None:
        raise ValueError("read-only")


# ------------------------------------------------------------------------------------------------
# roles (each runs in its own process)
# ------------------------------------------------------------------------------------------------


def _encode_one(args: tuple[int, int, str, int]) -> tuple[str, str, int]:
    from syncline.protocol.disk_round import encode_payload_file

    numel, seed, path, bits = args
    enc = encode_payload_file(SyntheticGradient(numel, seed), bits, path)
    return enc.payload_hash.hex(), enc.chunk_root.hex(), enc.size


def role_setup(d: Path, numel: int, inputs: int, bits: int, workers: int) -> None:
    """Write the gradient file, the state and the payloads; record the commitments."""
    step = 1 << 22
    with open(d / "grad.f32", "wb") as f:
        g = SyntheticGradient(numel, 10_000)
        for s in range(0, numel, step):
            f.write(g.read(s, min(numel, s + step)).tobytes())
    with open(d / "state", "wb") as f:
        for part in (0, 1):  # weights then momentum, int64 little-endian, inside the state bound
            for s in range(0, numel, step):
                rng = np.random.default_rng((part, s))
                f.write(rng.integers(-(2**34), 2**34, min(numel, s + step) - s, dtype=np.int64).tobytes())
    jobs = [(numel, seed, str(d / f"payload{seed}"), bits) for seed in range(inputs)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        commitments = pool.map(_encode_one, jobs, chunksize=1)
    (d / "commitments.json").write_text(json.dumps(commitments))
    # Flush what the set-up wrote (up to 29 GB at 1e9): otherwise its writeback, not the round's
    # own I/O, throttles the timed round's writes (measured at 2e8 on disk: 31 s instead of 20 s).
    os.sync()


def role_trainer(d: Path, numel: int, bits: int) -> dict[str, float]:
    from syncline.protocol.disk_round import encode_payload_file
    from syncline.protocol.streaming import FileRegion

    grad = FileRegion(str(d / "grad.f32"), 0, numel, dtype="<f4")
    start = time.perf_counter()
    encode_payload_file(grad, bits, str(d / "trainer_payload"))
    elapsed = time.perf_counter() - start
    os.unlink(d / "trainer_payload")
    return {"trainer_encode_s": elapsed}


def role_witness(
    d: Path, numel: int, bits: int, rule: str, on_disk: bool, workers: int, memory_interval: float
) -> dict[str, object]:
    """One witness round; with ``memory_interval`` > 0 the process tree's PSS is sampled that often
    (reading ``smaps_rollup`` walks every page table: at 20 ms it costs the round about an eighth
    of a core, so the timed run samples nothing and a second run measures the memory)."""
    from syncline.protocol.disk_round import PayloadFile, compute_round_on_disk, file_keccak
    from syncline.protocol.streaming import FileRegion, shared_region

    memory = TreeMemory(memory_interval)
    baseline = memory.now()
    commitments = json.loads((d / "commitments.json").read_text())
    subs = [  # fetched by digest: the fetch checked the keccak (see payload_digest_s)
        PayloadFile(i, bytes.fromhex(h), bytes.fromhex(r), str(d / f"payload{i}"), digest_verified=True)
        for i, (h, r, _) in enumerate(commitments)
    ]
    max_bytes = max(size for _, _, size in commitments) + (1 << 20)
    with memory if memory_interval > 0 else contextlib.nullcontext():
        load_start = time.perf_counter()
        if on_disk:
            weights = FileRegion(str(d / "state"), 0, numel, writable=True)
            momentum = FileRegion(str(d / "state"), 8 * numel, numel, writable=True)
        else:  # the witness holds the state in memory (shared with its worker processes)
            weights, momentum = shared_region(numel), shared_region(numel)
            with open(d / "state", "rb") as f:
                f.readinto(memoryview(weights.array).cast("B"))
                f.readinto(memoryview(momentum.array).cast("B"))
        load_s = time.perf_counter() - load_start
        start = time.perf_counter()
        result = compute_round_on_disk(
            weights,
            momentum,
            subs,
            rule=AggregationRule[rule.upper()],
            rule_param=RULE_PARAMS[rule],
            bits=bits,
            lr_ppm=700_000,
            momentum_ppm=900_000,
            max_payload_bytes=max_bytes,
            workers=workers,
        )
        elapsed = time.perf_counter() - start
    if result.rejected:
        raise SystemExit(f"inputs rejected: {result.rejected}")
    digest_start = time.perf_counter()  # what the verified fetch hashed, on one core
    for sub in subs:
        if file_keccak(str(sub.path)) != sub.payload_hash:
            raise SystemExit(f"payload {sub.fragment} does not match its payloadHash")
    return {
        "compute_round_s": elapsed,
        "payload_digest_s": time.perf_counter() - digest_start,
        "state_load_s": load_s,
        "peak_rss_bytes": memory.peak if memory_interval > 0 else None,
        "baseline_rss_bytes": baseline,
        "state_root": "0x" + result.state_root.hex(),
    }


# ------------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------------


def _run_role(argv: list[str]) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, *argv], check=True, capture_output=True, text=True, env={**os.environ}
    )
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def measure(numel: int, args: argparse.Namespace, floor_core: float, floor_all: float) -> dict[str, object]:
    on_disk = numel >= args.disk_from
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        common = ["--numel", str(numel), "--bits", str(args.bits), "--dir", tmp]
        started = time.perf_counter()
        _run_role(["--role", "setup", "--inputs", str(args.inputs), "--workers", str(args.workers), *common])
        setup_s = time.perf_counter() - started
        trainer = _run_role(["--role", "trainer", *common])
        witness_args = ["--role", "witness", "--rule", args.rule, "--workers", str(args.workers), *common]
        witness_args += ["--on-disk"] if on_disk else []
        witness = _run_role([*witness_args, "--memory-interval", "0"])  # timed, nothing sampled
        memory = _run_role([*witness_args, "--memory-interval", "0.02"])  # the same round, memory sampled
    per_param_bytes = 16 + args.inputs * args.bits // 8
    params_per_s = numel / float(witness["compute_round_s"])  # type: ignore[arg-type]
    floor = floor_core / per_param_bytes
    floor_all_cores = floor_all / per_param_bytes
    extra = int(memory["peak_rss_bytes"]) - int(memory["baseline_rss_bytes"])  # type: ignore[call-overload]
    return {
        "params": numel,
        "inputs": args.inputs,
        "bits": args.bits,
        "rule": args.rule,
        "workers": args.workers,
        "state": "disk" if on_disk else "memory",
        "compute_round_s": round(float(witness["compute_round_s"]), 3),  # type: ignore[arg-type]
        "params_per_s": round(params_per_s),
        "peak_rss_bytes_per_param": round(extra / numel, 2),
        "peak_rss_bytes": memory["peak_rss_bytes"],
        "baseline_rss_bytes": memory["baseline_rss_bytes"],
        "compute_round_s_memory_sampled": round(float(memory["compute_round_s"]), 3),  # type: ignore[arg-type]
        "trainer_encode_s": round(float(trainer["trainer_encode_s"]), 3),  # type: ignore[arg-type]
        "payload_digest_s": round(float(witness["payload_digest_s"]), 3),  # type: ignore[arg-type]
        "keccak_floor_params_per_s": round(floor),
        "ratio_to_floor": round(params_per_s / floor, 3),
        "keccak_floor_all_cores_params_per_s": round(floor_all_cores),
        "ratio_to_all_cores_floor": round(params_per_s / floor_all_cores, 3),
        "state_load_s": round(float(witness["state_load_s"]), 3),  # type: ignore[arg-type]
        "setup_s": round(setup_s, 1),
        "state_root": witness["state_root"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, nargs="+", default=[1e6, 1e7, 1e8])
    parser.add_argument("--inputs", type=int, default=8, help="payloads per round (n)")
    parser.add_argument("--bits", type=int, default=8, choices=(8, 16))
    parser.add_argument("--rule", default="coordinate_median", choices=sorted(RULE_PARAMS))
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--disk-from", type=float, default=5e8, help="keep the state on disk from this size")
    parser.add_argument("--dir", default=None, help="where the inputs are written (default: the system temp dir)")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--role", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--numel", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--on-disk", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-interval", type=float, default=0.02, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        d = Path(args.dir)
        if args.role == "setup":
            role_setup(d, args.numel, args.inputs, args.bits, args.workers)
            print("{}")
        elif args.role == "trainer":
            print(json.dumps(role_trainer(d, args.numel, args.bits)))
        else:
            print(
                json.dumps(
                    role_witness(d, args.numel, args.bits, args.rule, args.on_disk, args.workers, args.memory_interval)
                )
            )
        return
    floor_core = keccak_bytes_per_s(2.0)
    floor_all = keccak_all_cores_bytes_per_s(args.workers)
    print(
        f"keccak (syncline.protocol.hashing) on 4 KiB: {floor_core / 1e6:.0f} MB/s on one core, "
        f"{floor_all / 1e6:.0f} MB/s on {args.workers}; inputs={args.inputs} bits={args.bits} rule={args.rule}"
    )
    header = (
        f"{'params':>14} {'state':>6} {'round s':>9} {'params/s':>12} {'B/param':>8} {'encode s':>9} "
        f"{'floor/s':>12} {'ratio':>6} {'ratio(all)':>10}"
    )
    print(header)
    rows = []
    for p in args.params:
        row = measure(int(p), args, floor_core, floor_all)
        rows.append(row)
        print(
            f"{row['params']:>14,} {row['state']:>6} {row['compute_round_s']:>9.2f} {row['params_per_s']:>12,} "
            f"{row['peak_rss_bytes_per_param']:>8.2f} {row['trainer_encode_s']:>9.2f} "
            f"{row['keccak_floor_params_per_s']:>12,} {row['ratio_to_floor']:>6.2f} "
            f"{row['ratio_to_all_cores_floor']:>10.2f}",
            flush=True,
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "machine": {"cpus": os.cpu_count(), "workers": args.workers},
            "keccak_bytes_per_s_one_core": round(floor_core),
            "keccak_bytes_per_s_all_cores": round(floor_all),
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
