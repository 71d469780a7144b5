"""Receipts and credits, read live from the chain (they move with every withdrawal)."""

from __future__ import annotations

from syncline.api.schemas import Account, Credit, ReceiptOut
from syncline.api.specs import wei_strings
from syncline.chain.market import MarketClient


def receipt(market: MarketClient, task_id: int) -> ReceiptOut:
    r = market.receipt(task_id)
    mapping = wei_strings(r.to_mapping())
    sponsor = market.task(task_id).sponsor.lower()
    roles: dict[str, str] = {sponsor: "sponsor"}
    for t in r.trainers:
        roles.setdefault(t.trainer.lower(), "trainer")
    for w in r.witnesses:
        roles.setdefault(w.witness.lower(), "witness")
    mapping["trainers"] = [{**t, "trainer": str(t["trainer"]).lower()} for t in mapping["trainers"]]
    mapping["witnesses"] = [{**w, "witness": str(w["witness"]).lower()} for w in mapping["witnesses"]]
    credits = [
        Credit(address=address, role=role, credit_wei=str(market.credit_of(address)))  # type: ignore[arg-type]
        for address, role in roles.items()
    ]
    return ReceiptOut(
        receipt=mapping,
        credits=credits,
        model_url=f"/api/runs/{task_id}/model",
        final_state_url=f"/api/runs/{task_id}/state/{r.final_state_root}",
    )


def account(market: MarketClient, address: str) -> Account:
    return Account(
        address=address.lower(),
        credit_wei=str(market.credit_of(address)),
        balance_wei=str(market.w3.eth.get_balance(market.w3.to_checksum_address(address))),
    )
