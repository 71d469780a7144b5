// #/runs/<id>/challenge : pick a finalized round and a fault type, let the API build the proof
// from public data, then send it with the challenge bond from the selected account.
import { api, type BuiltProof, type JsonValue, type Round, type RunDetail } from "../api";
import { h, replace, spinner } from "../dom";
import { eth, humanize, relative, shortHex, time, timeEl, toWei, txLink } from "../format";
import { clearError, reportError, requestRefresh, RunGate, TxPanel, type Page } from "../ui";
import { wallet } from "../wallet";

interface KindInfo {
  value: string;
  label: string;
  fragment: boolean;
  segment: boolean;
  blurb: string;
}

const KINDS: KindInfo[] = [
  { value: "aggregation_fraud", label: "Aggregation fraud", fragment: false, segment: false, blurb: "The committee finalized a wrong aggregate: the contract recomputes one opened chunk in exact integer arithmetic. Slashes every witness that voted for it and rolls the state back." },
  { value: "censorship", label: "Censorship", fragment: true, segment: false, blurb: "A valid, on-time submission of this fragment was left out. A defence period follows; unanswered, anyone resolves it and the voters are slashed." },
  { value: "trainer_equivocation", label: "Trainer equivocation", fragment: true, segment: false, blurb: "The trainer of this fragment signed two different commitments for the round. Slashes its whole stake and evicts it." },
  { value: "witness_equivocation", label: "Witness equivocation", fragment: false, segment: false, blurb: "A witness signed two different votes for the round. Slashes its whole bond." },
  { value: "training_fraud", label: "Training fraud", fragment: true, segment: true, blurb: "This fragment's inner loop does not reproduce. The accused must answer within half the claim's window (publishing the segment's checkpoints) or is convicted; then the committee re-executes the segment and votes k-of-N." },
];

function num(value: JsonValue | undefined): number | null {
  if (typeof value === "number") return value;
  if (typeof value === "string" && /^\d+$/.test(value)) return Number(value);
  return null;
}

export function challengePage(id: number, initialRound?: number): Page {
  let rounds: Round[] = [];
  let segments: number | null = null;
  let selectedRound: number | null = initialRound ?? null;
  let kind = KINDS[0]!.value;
  let fragment = "";
  let segment = "0";
  let proof: BuiltProof | null = null;
  let building = false;
  let sending = false;
  let detail: RunDetail | null = null;
  let chainNow = Math.floor(Date.now() / 1000);
  let chainFetchedAt = performance.now();
  const now = () => chainNow + Math.floor((performance.now() - chainFetchedAt) / 1000);

  const roundSelect = h("select", { id: "challenge-round", testid: "challenge-round" });
  const kindSelect = h("select", { id: "challenge-kind", testid: "challenge-kind" }, ...KINDS.map((k) => h("option", { value: k.value }, k.label)));
  const fragmentInput = h("input", { id: "challenge-fragment", testid: "challenge-fragment", type: "text", inputmode: "numeric", autocomplete: "off", value: fragment });
  const segmentInput = h("input", { id: "challenge-segment", testid: "challenge-segment", type: "text", inputmode: "numeric", autocomplete: "off", value: segment });
  const fragmentHint = h("span", { class: "hint" });
  const segmentHint = h("span", { class: "hint" });
  const kindBlurb = h("p", { class: "muted small" });
  const roundInfo = h("div", { class: "muted small" });
  const extraFields = h("div", { class: "grid grid-wide" });
  const buildButton = h("button", { type: "button", class: "btn", testid: "challenge-build" }, "Build proof");
  const buildStatus = h("span", { class: "muted" });
  const buildRow = h("div", { class: "submit-row" }, buildButton, buildStatus);
  // Shown instead of the form (run settled) or of the build button (this round's window passed).
  const closedNotice = h("div", { class: "notice", testid: "challenge-closed", role: "status" });
  const proofHost = h("div");
  // What the challenger risks, shown before anything is built or sent.
  const stakes = h("div", { class: "notice stakes", testid: "challenge-stakes" });
  const resultHost = h("div");
  const txPanel = new TxPanel("challenge-tx-status");

  const el = h(
    "div",
    { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, `Challenge run #${id}`), h("a", { href: `#/runs/${id}`, class: "btn" }, "← Back to the run")),
    h("p", { class: "muted" }, "Anyone can prove a fault within the challenge window after a round closes. The API builds the proof from public data (chain, blob store, gossip); you send it with the challenge bond, which comes back with half the slash when the fault is proven."),
    closedNotice,
    h(
      "section",
      { class: "card", testid: "challenge-form" },
      h(
        "div",
        { class: "grid grid-wide" },
        h("div", { class: "field" }, h("label", { for: "challenge-round" }, "Round (finalized)"), roundSelect, roundInfo),
        h("div", { class: "field" }, h("label", { for: "challenge-kind" }, "Fault"), kindSelect, kindBlurb),
      ),
      extraFields,
      stakes,
      buildRow,
      proofHost,
      txPanel.el,
      resultHost,
    ),
  );
  const form = el.lastElementChild as HTMLElement;
  closedNotice.hidden = true;
  const gate = new RunGate(el, Array.from(el.children) as HTMLElement[], id);

  const info = () => KINDS.find((k) => k.value === kind) ?? KINDS[0]!;
  const round = () => rounds.find((r) => r.round === selectedRound) ?? null;

  function invalidateProof(): void {
    proof = null;
    proofHost.replaceChildren();
    buildStatus.textContent = "";
  }

  const fragmentField = h("div", { class: "field" }, h("label", { for: "challenge-fragment" }, "Fragment"), fragmentInput, fragmentHint);
  const segmentField = h("div", { class: "field" }, h("label", { for: "challenge-segment" }, "Segment"), segmentInput, segmentHint);
  let roundsKey = "";

  /** When the challenge window of round `r` ends (its close + challenge_window_s), or null while open. */
  function windowEnd(r: Round): number | null {
    const windowS = num(detail?.spec.challenge_window_s);
    return r.closed_at && windowS !== null ? r.closed_at + windowS : null;
  }
  const windowOpen = (r: Round) => {
    const end = windowEnd(r);
    return end === null || now() <= end;
  };

  /** Why nothing can be challenged in this run any more (settled or not started), or null. */
  function runClosed(): HTMLElement | null {
    const status = detail?.summary.status;
    if (!detail || status === "running" || status === "awaiting_seal") return null;
    const at = (kind: string) => detail!.timeline.find((e) => e.kind === kind)?.timestamp;
    if (status === "sealed") {
      return h("span", null, h("strong", null, "The challenge window closed: "), `run #${id} is sealed`, at("sealed") ? [" since ", timeEl(at("sealed"))] : null, ". Its rounds can no longer be challenged; its payouts are final (see the ", h("a", { href: `#/runs/${id}/receipt` }, "receipt"), ").");
    }
    if (status === "cancelled") return h("span", null, h("strong", null, "Nothing to challenge: "), `run #${id} was cancelled before it started.`);
    return h("span", null, h("strong", null, "Nothing to challenge yet: "), `run #${id} is ${humanize(status ?? "unknown")}; rounds can be challenged once they close.`);
  }

  /** Settled run: the notice instead of the form. Selected round past its window: the notice
   * instead of the build button. Otherwise the form as usual. */
  function renderWindow(): void {
    const closed = runClosed();
    if (closed) {
      replace(closedNotice, closed);
      closedNotice.hidden = false;
      form.hidden = true;
      replace(buildRow);
      invalidateProof();
      return;
    }
    form.hidden = false;
    const r = round();
    const end = r ? windowEnd(r) : null;
    if (r && end !== null && now() > end) {
      replace(closedNotice, h("strong", null, "The challenge window closed: "), `round ${r.round}'s window ended ${relative(end - now())} (${time(end)}); the contract refuses challenges after it.`);
      closedNotice.hidden = false;
      if (!building && !sending) {
        replace(buildRow);
        invalidateProof();
      }
    } else {
      closedNotice.hidden = true;
      if (buildRow.firstChild !== buildButton) replace(buildRow, buildButton, buildStatus);
    }
  }

  function renderRounds(): void {
    const finalized = rounds.filter((r) => r.status === "finalized");
    if (finalized.length === 0) {
      if (roundsKey !== "none") replace(roundSelect, h("option", { value: "" }, "no finalized round yet"));
      roundsKey = "none";
      roundSelect.disabled = true;
      selectedRound = null;
    } else {
      roundSelect.disabled = false;
      if (selectedRound === null || !finalized.some((r) => r.round === selectedRound)) {
        // The latest round still inside its challenge window, else the latest round.
        const open = finalized.filter(windowOpen);
        const pool = open.length ? open : finalized;
        selectedRound = pool[pool.length - 1]!.round;
      }
      const key = finalized.map((r) => `${r.round}:${r.state_root}:${r.vote_count}:${windowOpen(r)}`).join("|");
      if (key !== roundsKey) {
        replace(
          roundSelect,
          ...finalized.map((r) =>
            h("option", { value: String(r.round) }, `round ${r.round} · root ${shortHex(r.state_root, 8, 4)} · ${r.vote_count} vote${r.vote_count === 1 ? "" : "s"}${windowOpen(r) ? "" : " · window closed"}`),
          ),
        );
        roundsKey = key;
      }
      roundSelect.value = String(selectedRound);
    }
    const r = round();
    roundInfo.textContent = r
      ? `${r.submissions?.length ?? 0} submissions (fragments ${(r.submissions ?? []).map((s) => `${s.fragment}${s.accepted ? "" : " left out"}`).join(", ") || "none"}); ${(r.challenges ?? []).length} challenge(s) so far`
      : "";
    renderFields();
    renderWindow();
  }

  function renderStakes(): void {
    const bond = toWei(detail?.spec.challenge_bond_wei);
    const k = info();
    const sync = k.value === "aggregation_fraud" || k.value === "trainer_equivocation" || k.value === "witness_equivocation";
    replace(
      stakes,
      h("strong", null, "At stake: "),
      "sending this claim puts up the challenge bond of ",
      h("strong", { testid: "challenge-bond", "data-wei": bond?.toString() ?? "", title: bond === null ? "" : `${bond} wei` }, bond === null ? "—" : eth(bond)),
      wallet.selected ? ` from ${wallet.label(wallet.selected)}` : "",
      ", plus gas.",
      h(
        "ul",
        null,
        h("li", { testid: "stakes-proven" }, h("strong", null, "If the fault is proven: "), "the bond comes back with a bounty of half of what is slashed, credited to you (claim it on the receipt page)."),
        sync
          ? h("li", { testid: "stakes-failed" }, h("strong", null, "If the proof does not hold: "), "this fault is decided in the same transaction: the contract refuses a proof it cannot verify (the transaction reverts), so the bond is not taken; you lose only the gas.")
          : h(
              "li",
              { testid: "stakes-failed" },
              h("strong", null, "If the claim fails, the bond is lost: "),
              k.value === "censorship"
                ? "if a voter of the round shows the left-out submission was malformed (rightly left out), that voter takes the whole bond."
                : "when the referees vote the trainer innocent, the bond is shared among them.",
              k.value === "training_fraud"
                ? " If the referees do not decide in time, the claim expires and the bond comes back, less a share for each referee that re-executed the segment."
                : "",
            ),
      ),
    );
  }

  function renderFields(): void {
    const k = info();
    renderStakes();
    kindBlurb.textContent = k.blurb;
    const nodes: HTMLElement[] = [];
    const r = round();
    if (k.fragment) {
      const fragments = (r?.submissions ?? []).map((s) => s.fragment);
      if (fragment === "" && fragments.length) {
        const leftOut = k.value === "censorship" ? (r?.submissions ?? []).find((s) => !s.accepted)?.fragment : undefined;
        fragment = String(leftOut ?? fragments[0]);
      }
      if (fragmentInput.value !== fragment) fragmentInput.value = fragment;
      fragmentHint.textContent = fragments.length ? `fragments in this round: ${fragments.join(", ")}` : "the trainer's fragment number";
      nodes.push(fragmentField);
    }
    if (k.segment) {
      if (segmentInput.value !== segment) segmentInput.value = segment;
      segmentHint.textContent = segments ? `checkpointed segment, 0..${segments - 1}` : "checkpointed segment index";
      nodes.push(segmentField);
    }
    const current = Array.from(extraFields.children);
    if (current.length !== nodes.length || current.some((node, i) => node !== nodes[i])) replace(extraFields, ...nodes);
    updateButtons();
  }

  function inputError(): string | null {
    if (selectedRound === null) return "no finalized round to challenge";
    const k = info();
    if (k.fragment && !/^\d+$/.test(fragment.trim())) return "fragment must be a whole number";
    if (k.segment) {
      if (!/^\d+$/.test(segment.trim())) return "segment must be a whole number";
      if (segments !== null && Number(segment) >= segments) return `segment must be within 0..${segments - 1}`;
    }
    return null;
  }

  function updateButtons(): void {
    const problem = inputError();
    buildButton.disabled = building || sending || problem !== null;
    buildButton.title = problem ?? "";
    if (!building && !proof) buildStatus.textContent = problem ?? "";
    const submit = proofHost.querySelector<HTMLButtonElement>('[data-testid="challenge-submit"]');
    if (submit) {
      const reason = wallet.notReadyReason;
      submit.disabled = sending || building || reason !== null;
      submit.title = reason ?? "";
    }
  }

  async function build(): Promise<void> {
    if (inputError() || selectedRound === null || runClosed() || !round() || !windowOpen(round()!)) return;
    const k = info();
    building = true;
    invalidateProof();
    replace(resultHost);
    txPanel.clear();
    clearError();
    replace(buildStatus, spinner("building the proof from the chain, the blob store and gossip…"));
    updateButtons();
    try {
      const built = await api.buildChallenge(id, {
        round: selectedRound,
        kind: k.value,
        ...(k.fragment ? { fragment: Number(fragment) } : {}),
        ...(k.segment ? { segment: Number(segment) } : {}),
      });
      proof = built;
      buildStatus.textContent = "";
      renderProof(built);
    } catch (err) {
      buildStatus.textContent = "no proof built";
      reportError(err, "action");
    } finally {
      building = false;
      updateButtons();
    }
  }

  function renderProof(p: BuiltProof): void {
    const submit = h("button", { type: "button", class: "btn btn-primary", testid: "challenge-submit", onclick: () => void send() }, `Submit with bond (${eth(p.value_wei)})`);
    replace(
      proofHost,
      h(
        "div",
        { class: "proof", testid: "challenge-proof" },
        h("p", { class: "proof-desc" }, p.description),
        h(
          "dl",
          { class: "kv" },
          h("dt", null, "Function"), h("dd", null, h("code", null, p.function)),
          h("dt", null, "Fault"), h("dd", null, humanize(p.kind), ` in round ${p.round}`),
          h("dt", null, "Accused"), h("dd", null, p.accused ? h("code", { title: p.accused }, `${wallet.label(p.accused)} ${p.accused}`) : "—"),
          h("dt", null, "Bond"), h("dd", null, h("span", { "data-wei": p.value_wei, title: `${p.value_wei} wei` }, eth(p.value_wei))),
          h("dt", null, "Calldata"), h("dd", null, `${(p.data.length - 2) / 2} bytes to `, h("code", null, p.to)),
        ),
        h("div", { class: "submit-row" }, submit, h("span", { class: "muted small" }, wallet.selected ? `from ${wallet.label(wallet.selected)}` : "")),
      ),
    );
    updateButtons();
  }

  async function send(): Promise<void> {
    if (!proof || sending) return;
    const p = proof;
    sending = true;
    clearError();
    replace(resultHost);
    updateButtons();
    try {
      const outcome = await wallet.send({ to: p.to, data: p.data, value: BigInt(p.value_wei) }, (stage) => txPanel.stage(stage));
      txPanel.done(`mined in block ${outcome.receipt.blockNumber}`);
      const opened = wallet.events(outcome.receipt, "ChallengeOpened")[0];
      const resolved = wallet.events(outcome.receipt, "ChallengeResolved")[0];
      const cid = opened?.challengeId !== undefined ? String(opened.challengeId) : null;
      const STATUS = ["none", "open", "upheld", "rejected", "expired"];
      const resolvedText = resolved
        ? `resolved in the same transaction: ${STATUS[Number(resolved.status)] ?? String(resolved.status)}, slashed ${eth(String(resolved.slashed ?? "0"))}, bounty ${eth(String(resolved.bounty ?? "0"))}`
        : "open: it resolves after its deadline or the referees' votes";
      replace(
        resultHost,
        h(
          "div",
          { class: "result ok-box", testid: "challenge-result" },
          h("div", null, "Challenge ", h("strong", { testid: "challenge-id" }, cid ?? "?"), ` opened (${resolvedText}).`),
          h("div", null, "Transaction ", h("span", null, txLink(outcome.hash, "challenge-tx"))),
          h("div", null, h("a", { href: `#/runs/${id}`, class: "btn" }, "See it on the run page →")),
        ),
      );
      proof = null;
      proofHost.replaceChildren();
      requestRefresh();
    } catch (err) {
      txPanel.failed(err);
    } finally {
      sending = false;
      updateButtons();
    }
  }

  roundSelect.addEventListener("change", () => {
    selectedRound = roundSelect.value === "" ? null : Number(roundSelect.value);
    fragment = "";
    invalidateProof();
    renderRounds();
  });
  kindSelect.addEventListener("change", () => {
    kind = kindSelect.value;
    fragment = "";
    invalidateProof();
    renderFields();
  });
  fragmentInput.addEventListener("input", () => {
    fragment = fragmentInput.value;
    invalidateProof();
    updateButtons();
  });
  segmentInput.addEventListener("input", () => {
    segment = segmentInput.value;
    invalidateProof();
    updateButtons();
  });
  buildButton.addEventListener("click", () => void build());

  // A round's window can pass while the page is open.
  let timer: number | null = window.setInterval(() => {
    if (detail) renderWindow();
  }, 1000);

  return {
    title: `Challenge run #${id}`,
    el,
    destroy() {
      if (timer !== null) window.clearInterval(timer);
      timer = null;
    },
    async refresh() {
      const d = await gate.load(() => api.run(id));
      if (!d) return;
      const [list, chainTime] = await Promise.all([api.rounds(id), wallet.chainTime().catch(() => Math.floor(Date.now() / 1000))]);
      detail = d;
      chainNow = chainTime;
      chainFetchedAt = performance.now();
      const inner = num(d.spec.inner_steps);
      const interval = num(d.spec.checkpoint_interval) || inner;
      segments = inner && interval ? Math.ceil(inner / interval) : null;
      rounds = list;
      if (!building && !sending) renderRounds();
      else updateButtons();
    },
  };
}
