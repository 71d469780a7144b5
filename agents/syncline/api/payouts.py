"""Receipts and credits: the receipt and each credit read live from the chain (they move with
every withdrawal), and from the indexed events what the run credited each account and how much of
it a withdrawal has paid."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from syncline.api.db import RawEvent
from syncline.api.queries import privacy
from syncline.api.schemas import Account, Credit, ReceiptOut, Withdrawal
from syncline.api.specs import wei_strings
from syncline.chain.market import MarketClient


@dataclass
class CreditHistory:
    """What one run credited one account, and how much of that has been withdrawn."""

    credited_wei: int = 0
    paid_wei: int = 0
    withdrawals: list[Withdrawal] = field(default_factory=list)


def credit_histories(events: Iterable[RawEvent], task_id: int) -> dict[str, CreditHistory]:
    """Per account, from ``Credited`` events of ``task_id`` and ``Withdrawn`` events in chain order.

    ``withdraw()`` pays the account's whole credit (from every run), so a withdrawal pays every
    credit of the run made before it. The withdrawals listed are those after the run's first
    credit to the account.
    """
    out: dict[str, CreditHistory] = {}
    pending: dict[str, int] = {}
    for ev in events:
        account = str(ev.args["account"]).lower()
        amount = int(ev.args["amount"])
        if ev.name == "Credited" and ev.task_id == task_id:
            out.setdefault(account, CreditHistory()).credited_wei += amount
            pending[account] = pending.get(account, 0) + amount
        elif ev.name == "Withdrawn" and account in out:
            history = out[account]
            history.paid_wei += pending.pop(account, 0)
            history.withdrawals.append(
                Withdrawal(amount_wei=str(amount), block=ev.block_number, timestamp=ev.timestamp, tx=ev.tx_hash)
            )
    return out


def _credit_events(s: Session, task_id: int) -> list[RawEvent]:
    credited = and_(RawEvent.name == "Credited", RawEvent.task_id == task_id)
    first = s.scalar(select(RawEvent.block_number).where(credited).order_by(RawEvent.block_number).limit(1))
    if first is None:
        return []
    withdrawn = and_(RawEvent.name == "Withdrawn", RawEvent.block_number >= first)
    query = select(RawEvent).where(or_(credited, withdrawn)).order_by(RawEvent.block_number, RawEvent.log_index)
    return list(s.scalars(query))


def receipt(market: MarketClient, task_id: int, s: Session) -> ReceiptOut:
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
    histories = credit_histories(_credit_events(s, task_id), task_id)
    credits = []
    for address, role in roles.items():
        history = histories.get(address, CreditHistory())
        credit = market.credit_of(address)
        # A credit only falls by withdraw(), so at most ``credit`` of what the run credited is
        # unpaid: this holds even while the index has not seen the latest Withdrawn event.
        paid = max(history.paid_wei, history.credited_wei - credit)
        credits.append(
            Credit(
                address=address,
                role=role,  # type: ignore[arg-type]
                credit_wei=str(credit),
                credited_wei=str(history.credited_wei),
                paid_wei=str(paid),
                withdrawals=history.withdrawals,
            )
        )
    private = privacy(s, task_id)
    if private.enabled:  # a DP run's receipt carries each trainer's ε per round (docs/privacy.md)
        mapping["epsilon_per_round"] = private.epsilon_per_round
        mapping["rounds_opened"] = private.rounds_opened
        mapping["epsilon_target"] = private.target_epsilon
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
