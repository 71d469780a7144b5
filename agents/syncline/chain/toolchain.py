"""Offline Solidity toolchain: compile the contracts with the npm ``solc`` behind ``tools/solc``.

Artifacts are cached under ``.syncline/artifacts/<input-hash>/`` keyed by the sha256 of the
standard-JSON input (every source's content and the settings) and the compiler version, so an
unchanged tree never recompiles and a changed one never reuses stale bytecode.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncline.errors import ToolchainError
from syncline.observability import get_logger
from syncline.paths import repo_root, state_dir

log = get_logger("syncline.toolchain")

COMPILER_SETTINGS: dict[str, Any] = {
    "optimizer": {"enabled": True, "runs": 200},
    "viaIR": True,
    "evmVersion": "cancun",
    "remappings": ["@openzeppelin/contracts/=node_modules/@openzeppelin/contracts/"],
    "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"]}},
}


@dataclass(frozen=True)
class Artifact:
    """A compiled contract."""

    name: str
    abi: list[dict[str, Any]]
    bytecode: str
    deployed_bytecode: str
    path: Path


def _platform_suffix() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    system = platform.system().lower()
    return f"{system}-{arch}"


def foundry_binary(tool: str) -> Path:
    """Path of the real ``anvil``/``forge`` binary installed by npm (not the node shim)."""
    path = repo_root() / "node_modules" / "@foundry-rs" / f"{tool}-{_platform_suffix()}" / "bin" / tool
    if not path.is_file():
        raise ToolchainError(f"{tool} not found at {path}; run `make install` (npm ci) first")
    return path


def solc_wrapper() -> Path:
    """The offline solc command (``tools/solc``)."""
    path = repo_root() / "tools" / "solc"
    if shutil.which("node") is None:
        raise ToolchainError("node is not on PATH; install Node.js 20+ to compile contracts")
    if not (repo_root() / "node_modules" / "solc").is_dir():
        raise ToolchainError("npm package solc missing; run `make install` (npm ci) first")
    return path


def solc_version() -> str:
    out = subprocess.run([str(solc_wrapper()), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1].removeprefix("Version: ")


def standard_input(sources_dir: Path | None = None) -> dict[str, Any]:
    """The standard-JSON input for every ``.sol`` file under ``contracts/src``.

    Files under a dot-folder (``.cache/``: Ape's copies of its dependencies; any tool's hidden
    state) are not the project's sources and are skipped."""
    root = repo_root()
    src = sources_dir or root / "contracts" / "src"
    files = [p for p in sorted(src.rglob("*.sol")) if not _hidden(p.relative_to(src))]
    sources = {str(p.relative_to(root)): {"content": p.read_text()} for p in files}
    if not sources:
        raise ToolchainError(f"no Solidity sources under {src}")
    return {"language": "Solidity", "sources": sources, "settings": COMPILER_SETTINGS}


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def compile_contracts(*, force: bool = False) -> dict[str, Artifact]:
    """Compile (or load from cache) every contract; returns artifacts by contract name."""
    root = repo_root()
    payload = standard_input()
    version = solc_version()
    digest = hashlib.sha256((version + json.dumps(payload, sort_keys=True)).encode()).hexdigest()[:24]
    cache = state_dir() / "artifacts" / digest
    if force or not (cache / "_complete").exists():
        log.info(
            "contracts.compiling",
            contracts=len(payload["sources"]),
            note="first run: ~1-3 min (longer on a busy machine); cached afterwards",
            cache=str(cache),
        )
        started = time.monotonic()
        output = _run_solc(payload, root)
        log.info("contracts.compiled", seconds=round(time.monotonic() - started, 1))
        cache.mkdir(parents=True, exist_ok=True)
        for source, contracts in output["contracts"].items():
            if not source.startswith("contracts/"):
                continue
            for name, data in contracts.items():
                bytecode = data["evm"]["bytecode"]["object"]
                if not bytecode:
                    continue  # interfaces and abstract contracts
                record = {
                    "contractName": name,
                    "sourceName": source,
                    "compiler": version,
                    "abi": data["abi"],
                    "bytecode": "0x" + bytecode,
                    "deployedBytecode": "0x" + data["evm"]["deployedBytecode"]["object"],
                }
                (cache / f"{name}.json").write_text(json.dumps(record, indent=1))
        (cache / "_complete").write_text(version)
    return load_artifacts(cache)


def compile_harness(source: str, contract: str, extra_sources: Sequence[Path] = ()) -> Artifact:
    """Compile one contract outside ``contracts/src`` (test harnesses), uncached.

    ``source`` is a path relative to the repository root; ``extra_sources`` are other files the
    compiler should see (imports it does not find in ``node_modules``).
    """
    root = repo_root()
    paths = [root / source, *extra_sources]
    sources = {str(p.relative_to(root)): {"content": p.read_text()} for p in paths}
    selection = {source: {contract: ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"]}}
    output = _run_solc(
        {"language": "Solidity", "sources": sources, "settings": {**COMPILER_SETTINGS, "outputSelection": selection}},
        root,
    )
    data = output["contracts"][source][contract]
    return Artifact(
        name=contract,
        abi=data["abi"],
        bytecode="0x" + data["evm"]["bytecode"]["object"],
        deployed_bytecode="0x" + data["evm"]["deployedBytecode"]["object"],
        path=root / source,
    )


def load_artifacts(directory: Path) -> dict[str, Artifact]:
    out: dict[str, Artifact] = {}
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        out[data["contractName"]] = Artifact(
            name=data["contractName"],
            abi=data["abi"],
            bytecode=data["bytecode"],
            deployed_bytecode=data["deployedBytecode"],
            path=path,
        )
    return out


def _stopped_by_signal(return_code: int | None) -> None:
    """A compiler killed by a signal did not fail: Ctrl-C reaches the whole process group, and the
    compiler may die of it before Python sees it. Raise ``KeyboardInterrupt`` for SIGINT (the CLI
    says "interrupted"), a ``ToolchainError`` naming any other signal; return for an exit code."""
    if return_code is None:
        return
    signum = -return_code if return_code < 0 else return_code - 128 if return_code > 128 else 0
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    if signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGKILL):
        raise ToolchainError(f"the compiler was stopped by {signal.Signals(signum).name} (interrupted)")


def _run_solc(payload: dict[str, Any], root: Path) -> dict[str, Any]:
    import solcx  # py-solc-x drives the wrapper like a native solc

    try:
        output: dict[str, Any] = solcx.compile_standard(
            payload,
            solc_binary=solc_wrapper(),
            base_path=str(root),
            allow_paths=[str(root)],
        )
    except solcx.exceptions.SolcError as exc:
        _stopped_by_signal(exc.return_code)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unknown error"
        raise ToolchainError(f"solc failed: {first}") from exc
    errors = [e for e in output.get("errors", []) if e.get("severity") == "error"]
    if errors:
        raise ToolchainError("solc failed: " + errors[0].get("formattedMessage", str(errors[0])).splitlines()[0])
    return output
