// #/runs/<id>/receipt : the TrainingReceipt, payouts per trainer/witness, claimable credits with
// claim (withdraw()) buttons, and the model/state downloads.
import { api, type Credit, type ReceiptResponse, type RunDetail } from "../api";
import { h, replace, spinner } from "../dom";
import { addr, ethCell, hashWithCopy, isZeroHash, pill, shortTx, timeEl, toWei } from "../format";
import { emptyRow, requestRefresh, RunGate, table, TxPanel, type Page } from "../ui";
import { wallet } from "../wallet";

const sum = (...values: (string | undefined)[]) => values.reduce((acc, v) => acc + (toWei(v) ?? 0n), 0n).toString();

/** "paid 1.2 ETH (withdrawn)" with the last withdrawal's date and tx; "not yet withdrawn" before. */
function paidCell(c: Credit): HTMLElement {
  const paid = toWei(c.paid_wei) ?? 0n;
  const last = c.withdrawals?.[c.withdrawals.length - 1];
  if (paid === 0n) return h("span", { class: "muted" }, (toWei(c.credited_wei) ?? 0n) > 0n ? "not yet withdrawn" : "—");
  return h(
    "span",
    { class: "paid" },
    h("span", { class: "ok" }, "paid ", ethCell(c.paid_wei), " (withdrawn)"),
    // The withdrawal's event may not be indexed yet: the live credit already says it was paid.
    last ? h("span", { class: "muted small" }, " ", timeEl(last.timestamp), " ", shortTx(last.tx)) : null,
  );
}

export function receiptPage(id: number): Page {
  const statusHost = h("span");
  const summary = h("dl", { class: "kv kv-grid" });
  const downloads = h("div", { class: "actions" });
  const notice = h("div");
  const payoutBody = h("tbody");
  const creditsBody = h("tbody");
  const txPanel = new TxPanel("claim-tx");
  const busy = new Set<string>();
  let last: { receipt: ReceiptResponse; detail: RunDetail | null } | null = null;

  const el = h(
    "div",
    { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, `Receipt · run #${id} `, statusHost), h("a", { href: `#/runs/${id}`, class: "btn" }, "← Back to the run")),
    notice,
    h("section", { class: "card" }, summary, downloads),
    h(
      "section",
      { class: "card" },
      h("h2", null, "Payouts"),
      h("p", { class: "muted small" }, "What the contract paid each party at seal: rewards pro rata to accepted work, stakes and bonds back minus slashing, witness fees for matching votes."),
      table("receipt-table", ["Role", "Account", "Work", "#Reward / fees", "#Stake / bond back", "#Slashed", "#Total credited"], payoutBody, "Payouts"),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", null, "Claims"),
      h("p", { class: "muted small" }, "Payments are pulled: each account withdraws its whole credit (from every run) with withdraw(). Credited is what this run credited the account; paid is how much of it a withdrawal has paid out."),
      table("credits-table", ["Account", "Role", "#Credited by this run", "Paid", "#Claimable now", ""], creditsBody, "Credits and claims"),
      txPanel.el,
    ),
  );
  replace(payoutBody, h("tr", null, h("td", { colspan: 7 }, spinner("Loading…"))));
  const gate = new RunGate(el, Array.from(el.children) as HTMLElement[], id);

  async function claim(address: string): Promise<void> {
    const key = address.toLowerCase();
    if (busy.has(key)) return;
    busy.add(key);
    if (last) renderCredits(last.receipt.credits);
    try {
      const outcome = await wallet.write("withdraw", [], (stage) => txPanel.stage(`claim for ${wallet.label(key)}: ${stage}`), key as `0x${string}`);
      const paid = wallet.events(outcome.receipt, "Withdrawn")[0];
      txPanel.done(`claimed ${paid ? ethCell(String(paid.amount)).textContent : ""} for ${wallet.label(key)} in block ${outcome.receipt.blockNumber}`, outcome.hash);
    } catch (err) {
      txPanel.failed(err);
    } finally {
      busy.delete(key);
      requestRefresh();
    }
  }

  function renderCredits(credits: Credit[]): void {
    const merged = new Map<string, { address: string; roles: string[]; credit: string; line: Credit }>();
    for (const c of credits) {
      const key = c.address.toLowerCase();
      const entry = merged.get(key);
      if (entry) {
        if (!entry.roles.includes(c.role)) entry.roles.push(c.role);
      } else merged.set(key, { address: key, roles: [c.role], credit: c.credit_wei, line: c });
    }
    if (merged.size === 0) {
      replace(creditsBody, emptyRow(6, "Nobody has anything to claim."));
      return;
    }
    replace(
      creditsBody,
      ...Array.from(merged.values()).map((c) => {
        const credit = toWei(c.credit) ?? 0n;
        const available = wallet.kind !== "none" && wallet.has(c.address);
        const reason = credit === 0n ? "nothing to claim" : !available ? "this account is not in your wallet" : null;
        return h(
          "tr",
          { testid: `credit-row-${c.address}` },
          h("td", null, addr(c.address)),
          h("td", null, c.roles.join(", ")),
          h("td", { class: "num", testid: `credited-${c.address}` }, ethCell(c.line.credited_wei ?? "0")),
          h("td", { testid: `credit-paid-${c.address}` }, paidCell(c.line)),
          h("td", { class: "num", testid: `credit-${c.address}` }, ethCell(c.credit)),
          h(
            "td",
            null,
            h(
              "button",
              {
                type: "button",
                class: "btn btn-small btn-primary",
                testid: `claim-${c.address}`,
                disabled: reason !== null || busy.has(c.address),
                title: reason ?? `withdraw() from ${c.address}`,
                onclick: () => void claim(c.address),
              },
              busy.has(c.address) ? "Claiming…" : "Claim",
            ),
            reason && credit > 0n ? h("span", { class: "muted small" }, ` ${reason}`) : null,
          ),
        );
      }),
    );
  }

  function render(data: ReceiptResponse, detail: RunDetail | null): void {
    const r = data.receipt;
    replace(statusHost, pill(r.status, "receipt-status"));
    const sponsor = detail?.summary.sponsor ?? data.credits.find((c) => c.role === "sponsor")?.address;
    replace(
      summary,
      h("dt", null, "Run"), h("dd", null, detail ? `${detail.summary.name} (${detail.summary.tier}, ${detail.summary.rule.replace(/_/g, " ")})` : `#${r.task_id}`),
      h("dt", null, "Final state root"), h("dd", { testid: "receipt-root" }, hashWithCopy(r.final_state_root)),
      h("dt", null, "Spec hash"), h("dd", null, hashWithCopy(r.spec_hash)),
      h("dt", null, "Rounds"), h("dd", null, `${r.rounds_finalized} finalized · ${r.rounds_carried_forward} carried forward · ${r.rounds_invalidated} invalidated (of ${r.rounds_total})`),
      h("dt", null, "Reward pool"), h("dd", null, ethCell(r.reward_pool_wei)),
      h("dt", null, "Sponsor refund"), h("dd", { testid: "receipt-refund" }, ethCell(r.sponsor_refund_wei)),
    );
    const modelUrl = data.model_url || api.modelUrl(id);
    const stateUrl = data.final_state_url || (isZeroHash(r.final_state_root) ? "" : api.stateUrl(id, r.final_state_root));
    replace(
      downloads,
      h("a", { href: modelUrl, class: "btn btn-primary", testid: "model-download", download: `syncline-run-${id}-model.tar.gz` }, "Download model (Hugging Face, tar.gz)"),
      stateUrl
        ? h("a", { href: stateUrl, class: "btn", testid: "state-download", download: `syncline-run-${id}-state.bin` }, "Download final state")
        : h("span", { class: "muted", testid: "state-download" }, "no state yet"),
    );
    replace(
      notice,
      // A sealed run that trained nothing is not a success: said first, in plain words.
      r.trained_nothing
        ? h("div", { class: "notice bad", testid: "receipt-trained-nothing" }, `This run trained nothing: no round accepted any work, so the model is the initial one. ${r.verdict ?? ""}`)
        : null,
      r.late_commits
        ? h("div", { class: "notice", testid: "receipt-late" }, `${r.late_commits} late commit${r.late_commits === 1 ? "" : "s"}: made after a round's deadline, within its one extension (nobody had committed in time).`)
        : null,
      r.status === "sealed"
        ? null
        : h("div", { class: "notice" }, `The run is ${r.status.replace(/_/g, " ")}: payouts are final only once it is sealed. The figures below are the chain's current view.`),
    );

    const rows: HTMLTableRowElement[] = [];
    if (sponsor) {
      rows.push(
        h(
          "tr",
          { testid: "receipt-row-sponsor" },
          h("td", null, pill("sponsor")),
          h("td", null, addr(sponsor)),
          h("td", { class: "work" }, "refund of the unspent escrow"),
          h("td", { class: "num" }, "—"),
          h("td", { class: "num" }, ethCell(r.sponsor_refund_wei)),
          h("td", { class: "num" }, "—"),
          h("td", { class: "num" }, ethCell(r.sponsor_refund_wei)),
        ),
      );
    }
    for (const t of r.trainers ?? []) {
      const a = t.trainer.toLowerCase();
      rows.push(
        h(
          "tr",
          { testid: `receipt-row-trainer-${a}` },
          h("td", null, pill("trainer"), t.evicted ? [" ", pill("evicted")] : null),
          h("td", null, addr(a)),
          h("td", { class: "work" }, `fragment ${t.fragment}: ${t.accepted}/${t.submitted} accepted, ${t.missed} missed${t.late ? `, ${t.late} late` : ""}`),
          h("td", { class: "num", testid: `receipt-reward-${a}` }, ethCell(t.reward_wei)),
          h("td", { class: "num" }, ethCell(t.stake_refund_wei)),
          h("td", { class: "num" }, t.slashed_wei !== "0" ? h("span", { class: "bad" }, ethCell(t.slashed_wei)) : ethCell(t.slashed_wei)),
          h("td", { class: "num" }, ethCell(sum(t.reward_wei, t.stake_refund_wei))),
        ),
      );
    }
    for (const w of r.witnesses ?? []) {
      const a = w.witness.toLowerCase();
      // The receipt's bond is what was posted; it comes back at seal minus what was slashed.
      const bond = toWei(w.bond_wei) ?? 0n;
      const slashed = toWei(w.slashed_wei) ?? 0n;
      const back = (bond > slashed ? bond - slashed : 0n).toString();
      rows.push(
        h(
          "tr",
          { testid: `receipt-row-witness-${a}` },
          h("td", null, pill("witness")),
          h("td", null, addr(a)),
          h("td", { class: "work" }, `${w.matched}/${w.votes} votes matched, ${w.dissents} dissent${w.dissents === 1 ? "" : "s"}`),
          h("td", { class: "num", testid: `receipt-fees-${a}` }, ethCell(w.fees_wei)),
          h("td", { class: "num", title: `bond ${w.bond_wei ?? "0"} wei minus slashed ${w.slashed_wei ?? "0"} wei` }, ethCell(back)),
          h("td", { class: "num" }, (w.slashed_wei ?? "0") !== "0" ? h("span", { class: "bad" }, ethCell(w.slashed_wei)) : ethCell(w.slashed_wei ?? "0")),
          h("td", { class: "num" }, ethCell(sum(w.fees_wei, back))),
        ),
      );
    }
    replace(payoutBody, ...(rows.length ? rows : [emptyRow(7, "No payouts.")]));
    renderCredits(data.credits ?? []);
  }

  return {
    title: `Receipt #${id}`,
    el,
    async refresh() {
      const receipt = await gate.load(() => api.receipt(id));
      if (!receipt) return;
      const detail = await api.run(id).catch(() => null);
      last = { receipt, detail };
      render(receipt, detail);
    },
  };
}
