"""The market and its court modules (run by delegatecall) must agree on every storage slot."""

from __future__ import annotations

from typing import Any

from syncline.chain import toolchain
from syncline.paths import repo_root


def _layouts() -> dict[str, list[tuple[str, str, int, str]]]:
    payload = toolchain.standard_input()
    settings = {**payload["settings"], "outputSelection": {"*": {"*": ["storageLayout"]}}}
    # No bytecode is requested, so solc only analyses (seconds, even with viaIR).
    output: dict[str, Any] = toolchain._run_solc({**payload, "settings": settings}, repo_root())
    out: dict[str, list[tuple[str, str, int, str]]] = {}
    for contracts in output["contracts"].values():
        for name, data in contracts.items():
            if name in (
                "SynclineMarket",
                "SynclineCourt",
                "SynclineRulings",
                "SynclineConfidential",
                "SynclinePosting",
                "SynclineStorage",
            ):
                out[name] = [(s["label"], s["slot"], s["offset"], s["type"]) for s in data["storageLayout"]["storage"]]
    return out


def test_market_and_court_share_one_storage_layout() -> None:
    layouts = _layouts()
    market = layouts["SynclineMarket"]
    assert len(market) > 15, "the layout should list every state variable"
    assert layouts["SynclineCourt"] == market
    assert layouts["SynclineRulings"] == market
    assert layouts["SynclineConfidential"] == market
    assert layouts["SynclinePosting"] == market


def test_court_declares_no_storage_of_its_own() -> None:
    # Every variable comes from SynclineStorage (or its OpenZeppelin bases): nothing appended.
    layouts = _layouts()
    assert (
        layouts["SynclineStorage"]
        == layouts["SynclineCourt"]
        == layouts["SynclineRulings"]
        == layouts["SynclineConfidential"]
        == layouts["SynclinePosting"]
    )
