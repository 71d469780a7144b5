// #/runs/<id> : status, timeline, loss curve, rounds (roots + votes), trainers, witnesses,
// challenges (resolve / expire), and the seal button once the challenge window has passed.
import {
  api,
  type Challenge,
  type JsonValue,
  type Losses,
  type Privacy,
  type Round,
  type RunDetail,
  type SealedManifest,
  type TimelineEntry,
  type Trainer,
  type Witness,
} from "../api";
import { LossChart, metricLabel } from "../chart";
import { h, replace } from "../dom";
import {
  addr,
  ethCell,
  hashWithCopy,
  humanize,
  isZeroHash,
  loss,
  percent,
  pill,
  popcount,
  relative,
  shortTx,
  time,
  timeEl,
  toWei,
} from "../format";
import { emptyRow, reportError, requestRefresh, RunGate, table, TxPanel, type Page } from "../ui";
import { wallet } from "../wallet";
import { SealedManifestCard } from "./sealed";

const OPEN_CHALLENGE = "open";
const AWAITING_SEAL = new Set(["awaiting_seal", "completed"]);

function num(value: JsonValue | undefined): number | null {
  if (typeof value === "number") return value;
  if (typeof value === "string" && /^\d+$/.test(value)) return Number(value);
  return null;
}

export function runPage(id: number): Page {
  const statusHost = h("span", { class: "status-host" });
  const titleText = h("span", null, `Run #${id}`);
  const meta = h("div", { class: "muted run-meta" });
  const summary = h("dl", { class: "kv kv-grid" });
  const sealHost = h("div", { class: "actions" });
  const txPanel = new TxPanel("run-tx");
  const timeline = h("ol", { class: "timeline", testid: "run-timeline" });
  const timelineWrap = h("div", { class: "timeline-wrap" }, timeline);
  const chartEl = h("div", { class: "chart", testid: "loss-chart" });
  const chart = new LossChart(chartEl);
  const roundsBody = h("tbody");
  const chartTitle = h("h2", { testid: "loss-chart-title" }, "Loss curve");
  let metricName = "validation_loss";
  const trainersBody = h("tbody");
  const witnessesBody = h("tbody");
  const challengesBody = h("tbody");
  const specHost = h("div");
  const privacyNote = h("p", { class: "muted", testid: "privacy-note" });
  const privacyHead = h("thead");
  const privacyBody = h("tbody");
  const privacyCard = h(
    "section",
    { class: "card", testid: "privacy-card", hidden: true },
    h("h2", null, "Differential privacy: ε spent"),
    privacyNote,
    h("div", { class: "table-wrap" }, h("table", { testid: "privacy-table" }, h("caption", { class: "sr-only" }, "ε spent per trainer and round"), privacyHead, privacyBody)),
  );
  const sealedCard = new SealedManifestCard(id);
  const modelLink = h("a", { href: api.modelUrl(id), class: "btn", download: `syncline-run-${id}-model.tar.gz`, testid: "link-model" }, "Download model");
  const challengeLink = h("a", { href: `#/runs/${id}/challenge`, class: "btn", testid: "link-challenge" }, "Challenge a round");
  const challengeLinkHost = h("span", { class: "link-host" }, challengeLink);
  const modelLinkHost = h("span", { class: "link-host" }, modelLink);

  const busy = new Set<string>();
  let detail: RunDetail | null = null;
  let challenges: Challenge[] = [];
  let chainNow = Math.floor(Date.now() / 1000);
  let chainFetchedAt = performance.now();
  const now = () => chainNow + Math.floor((performance.now() - chainFetchedAt) / 1000);
  const challengeCells = new Map<number, { cell: HTMLElement; challenge: Challenge }>();

  const el = h(
    "div",
    { class: "page" },
    h(
      "div",
      { class: "page-head" },
      h("h1", null, titleText, " ", statusHost),
      h(
        "div",
        { class: "head-links" },
        challengeLinkHost,
        h("a", { href: `#/runs/${id}/receipt`, class: "btn", testid: "link-receipt" }, "Receipt & claims"),
        modelLinkHost,
      ),
    ),
    meta,
    h("section", { class: "card" }, summary, sealHost, txPanel.el),
    sealedCard.el,
    h(
      "div",
      { class: "two-col" },
      h("section", { class: "card" }, chartTitle, chartEl),
      h("section", { class: "card" }, h("h2", null, "Timeline"), timelineWrap),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", null, "Rounds"),
      table("rounds-table", ["#Round", "Status", "State root", "Votes", "#Accepted", "Carried", "#Val. loss", "Closed", "Challenges", ""], roundsBody, "Rounds"),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", null, "Trainers"),
      table("trainers-table", ["Trainer", "#Fragment", "#Stake", "Shards", "#Submitted", "#Accepted", "#Missed", "#Acceptance", "#Reward", "#Slashed", "Status"], trainersBody, "Trainers"),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", null, "Witnesses"),
      table("witnesses-table", ["Witness", "Bonded", "#Bond", "#Slashed", "#Votes", "#Matched", "#Dissents", "#Fees"], witnessesBody, "Witnesses"),
      h(
        "p",
        { class: "muted small", testid: "witnesses-note" },
        "Votes: the votes the contract recorded for this run. A witness's log says witness.voted for every round it computed and sent, " +
          "but once k matching votes finalized a round the contract refuses later votes on it (the round has closed; the log then says witness.call_skipped what=finalize), " +
          "and votes on a round rolled back by a proven fault are discarded: those are not counted here. " +
          "Matched: recorded votes equal to the finalized result, each earning the witness fee. Dissents: votes against the first one cast.",
      ),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", null, "Challenges"),
      table("challenges-table", ["#Id", "Kind", "#Round", "#Fragment / segment", "Status", "Accused", "Challenger · tx", "#Bond", "#Slashed", "#Referee votes", "Deadline", "Action"], challengesBody, "Challenges"),
    ),
    privacyCard,
    specHost,
  );
  roundsBody.append(emptyRow(10, "Loading…"));
  const gate = new RunGate(el, Array.from(el.children) as HTMLElement[], id);

  // ---------------------------------------------------------------- actions

  async function act(key: string, functionName: string, arg: number, label: string): Promise<void> {
    if (busy.has(key)) return;
    busy.add(key);
    renderTimed();
    try {
      const outcome = await wallet.write(functionName, [BigInt(arg)], (stage) => txPanel.stage(`${label}: ${stage}`));
      txPanel.done(`${label}: mined in block ${outcome.receipt.blockNumber}`, outcome.hash);
    } catch (err) {
      txPanel.failed(err);
    } finally {
      busy.delete(key);
      renderTimed();
      requestRefresh();
    }
  }

  function actionButton(key: string, text: string, testid: string, onClick: () => void): HTMLButtonElement {
    const reason = wallet.notReadyReason;
    return h(
      "button",
      {
        type: "button",
        class: "btn btn-small btn-primary",
        testid,
        disabled: busy.has(key) || reason !== null,
        title: reason ?? undefined,
        onclick: onClick,
      },
      busy.has(key) ? `${text}…` : text,
    );
  }

  /** Seal button and challenge actions depend on chain time: re-rendered every second. */
  function renderTimed(): void {
    if (detail) {
      const status = detail.summary.status;
      const state = detail.state;
      const windowS = num(detail.spec.challenge_window_s) ?? 0;
      const lastClosed = num(state.last_closed_at) ?? 0;
      const until = lastClosed + windowS;
      const open = detail.summary.open_challenges;
      replace(statusHost, pill(underfilled(detail) ? "underfilled" : status, "run-status"));
      if (underfilled(detail)) {
        const s = detail.summary;
        replace(
          sealHost,
          h(
            "div",
            { class: "notice", testid: "underfilled" },
            h("strong", null, "Under-filled: can be cancelled. "),
            `Only ${s.trainers_enrolled} of the ${s.min_trainers} trainers needed enrolled by the deadline (${time(num(detail.spec.enrollment_deadline))}), so the run cannot start. `,
            "Anyone may cancel it: the sponsor's reward pool and fee budget, every trainer's stake and every witness's bond go back to their owners' credit, to claim on the receipt page.",
          ),
          actionButton("cancel", "Cancel and refund", "cancel-underfilled", () => void act("cancel", "cancelUnderfilled", id, `cancel run #${id}`)),
        );
      } else if (AWAITING_SEAL.has(status)) {
        if (open > 0) {
          replace(sealHost, h("span", { class: "muted" }, `Awaiting seal: ${open} open challenge${open > 1 ? "s" : ""} must be resolved first.`));
        } else if (now() < until) {
          replace(sealHost, h("span", { class: "muted", testid: "seal-wait" }, `Awaiting seal: the challenge window ends ${relative(until - now())} (${time(until)}).`));
        } else {
          replace(
            sealHost,
            actionButton("seal", "Seal the run", "seal-button", () => void act("seal", "seal", id, `seal run #${id}`)),
            h("span", { class: "muted" }, " Pays rewards, refunds stakes, bonds and the unspent escrow; everyone then claims."),
          );
        }
      } else {
        sealHost.replaceChildren();
      }
    }
    for (const [cid, { cell, challenge }] of challengeCells) {
      replace(cell, challengeAction(cid, challenge));
    }
  }

  function challengeAction(cid: number, c: Challenge): HTMLElement | string {
    if (c.status !== OPEN_CHALLENGE) return "";
    const passed = now() > c.deadline;
    if (c.kind === "censorship") {
      return passed
        ? actionButton(`resolve-${cid}`, "Resolve", `challenge-resolve-${cid}`, () => void act(`resolve-${cid}`, "resolveCensorship", cid, `resolve challenge #${cid}`))
        : h("span", { class: "muted small" }, `defence ends ${relative(c.deadline - now())}`);
    }
    if (c.kind === "training_fraud") {
      return passed
        ? actionButton(`expire-${cid}`, "Expire", `challenge-expire-${cid}`, () => void act(`expire-${cid}`, "expireChallenge", cid, `expire challenge #${cid}`))
        : h("span", { class: "muted small" }, `referee votes close ${relative(c.deadline - now())}`);
    }
    return "";
  }

  // ---------------------------------------------------------------- sections

  function renderSummary(d: RunDetail, witnesses: Witness[]): void {
    const s = d.summary;
    titleText.textContent = `Run #${id} · ${s.name || "unnamed"}`;
    replace(statusHost, pill(underfilled(d) ? "underfilled" : s.status, "run-status"));
    const closed = s.rounds_finalized + s.rounds_carried + s.rounds_invalidated;
    meta.textContent = `${s.tier} tier · ${humanize(s.rule)} · ${s.rounds} rounds · posted ${time(s.posted_at)}`;
    const fraction = Math.max(0, Math.min(1, s.progress ?? (s.rounds ? closed / s.rounds : 0)));
    const st = d.state;
    const hasClosed = closed > 0;
    const noRounds = hasClosed ? null : s.status === "running" ? "no round has closed yet" : "the run has not started: no round to challenge or model to download";
    replace(challengeLinkHost, noRounds ? disabledLink("Challenge a round", "link-challenge", `Nothing to challenge: ${noRounds}`) : challengeLink);
    replace(modelLinkHost, noRounds && s.status !== "sealed" ? disabledLink("Download model", "link-model", `No trained model yet: ${noRounds}`) : modelLink);
    replace(
      summary,
      kv("Progress", h("div", { class: "progress" }, h("div", { class: "progress-bar" }, h("div", { class: "progress-fill", style: `width:${(fraction * 100).toFixed(1)}%` })), h("span", { class: "progress-text" }, `${closed}/${s.rounds} rounds closed`))),
      kv("Rounds", `${s.rounds_finalized} finalized · ${s.rounds_carried} carried · ${s.rounds_invalidated} invalidated`),
      kv("Current round", s.status === "running" ? String(s.current_round) : "—"),
      kv("State root", hashWithCopy(s.state_root)),
      kv("Reward pool", ethCell(s.reward_pool_wei)),
      kv(
        h("span", { title: ESCROW_HELP, testid: "escrow-label" }, "Escrow held (pool, fees, stakes, bonds) ", h("span", { class: "info", "aria-hidden": "true" }, "ⓘ")),
        h("span", { title: ESCROW_HELP, testid: "escrow-held" }, ethCell(s.escrow_wei)),
      ),
      kv("Trainers", `${s.trainers_enrolled} enrolled (min ${s.min_trainers}, max ${s.max_trainers})`),
      num(d.spec.enrollment_deadline) !== null ? kv("Enrollment deadline", h("span", { testid: "run-enrollment-deadline" }, timeEl(num(d.spec.enrollment_deadline), now()), s.status === "enrolling" ? ` (${relative(num(d.spec.enrollment_deadline)! - now())})` : "")) : null,
      kv("Open challenges", s.open_challenges > 0 ? h("span", { class: "warn" }, String(s.open_challenges)) : "0"),
      kv("Sponsor", addr(s.sponsor)),
      st.fee_budget_wei !== undefined ? kv("Witness fee budget", feeBudget(d, witnesses)) : null,
      st.stake_held_wei !== undefined ? kv("Stakes held", ethCell(st.stake_held_wei)) : null,
      d.spec.spec_hash ? kv("Spec hash", hashWithCopy(String(d.spec.spec_hash))) : null,
    );
    replace(
      specHost,
      h(
        "details",
        { class: "card spec" },
        h("summary", null, "Spec (what the sponsor posted; its keccak is on chain)"),
        h("pre", { class: "mono" }, JSON.stringify(d.spec, null, 2)),
      ),
    );
  }

  let timelineShown = false;
  function renderTimeline(entries: TimelineEntry[]): void {
    // The first render shows the run from its start (the first entry whole, not scrolled out of
    // the box); after that the list follows new entries only while the reader is at its bottom.
    const atBottom = timelineShown && timelineWrap.scrollHeight > timelineWrap.clientHeight && timelineWrap.scrollTop + timelineWrap.clientHeight >= timelineWrap.scrollHeight - 8;
    timelineShown = entries.length > 0;
    if (entries.length === 0) {
      replace(timeline, h("li", { class: "muted" }, "Nothing yet."));
      return;
    }
    replace(
      timeline,
      ...entries.map((e) =>
        h(
          "li",
          { class: `tl tl-${e.kind}`, "data-kind": e.kind },
          h("span", { class: "tl-dot", "aria-hidden": "true" }),
          h("div", { class: "tl-body" }, h("div", { class: "tl-text" }, e.text), h("div", { class: "tl-meta muted" }, timeEl(e.timestamp, now()), ` · block ${e.block}`, e.round !== null && e.round !== undefined ? ` · round ${e.round}` : "", e.tx ? [" · ", shortTx(e.tx)] : null)),
        ),
      ),
    );
    if (atBottom) timelineWrap.scrollTop = timelineWrap.scrollHeight;
  }

  function votesCell(r: Round): HTMLElement {
    const td = h("td", { testid: `round-votes-${r.round}`, class: "votes" });
    const marks: HTMLElement[] = [];
    const dissenters = new Map((r.dissent ?? []).map((v) => [v.witness.toLowerCase(), v]));
    const voted = new Set<string>();
    for (const v of r.votes ?? []) {
      const who = v.witness.toLowerCase();
      voted.add(who);
      const dissent = dissenters.has(who);
      const agrees = v.agrees !== false && !dissent;
      const detail = `${v.witness}${v.state_root ? ` voted state root ${v.state_root}` : ""}${v.metric !== undefined && v.metric !== null ? `, ${metricLabel(metricName)} ${v.metric}` : ""}${agrees ? " (agrees with the finalized result)" : " (disagrees with the finalized result)"}`;
      marks.push(
        h("span", { class: `vote ${agrees ? "agree" : "disagree"}`, title: detail, "data-witness": who, "data-agrees": String(agrees) }, agrees ? "✓ " : "✗ ", wallet.label(who), dissent ? " dissent" : ""),
      );
    }
    for (const v of r.dissent ?? []) {
      const who = v.witness.toLowerCase();
      if (voted.has(who)) continue;
      marks.push(h("span", { class: "vote dissent", title: `${v.witness} dissented${v.state_root ? `: state root ${v.state_root}` : ""}`, "data-witness": who, "data-agrees": "false" }, "✗ ", wallet.label(who), " dissent"));
    }
    td.append(h("span", { class: "vote-count", title: "votes on chain" }, `${r.vote_count ?? (r.votes ?? []).length}`));
    for (const mark of marks) td.append(" ", mark);
    return td;
  }

  function renderRounds(rounds: Round[]): void {
    if (rounds.length === 0) {
      replace(roundsBody, emptyRow(10, "No round has opened yet (the run starts once enough trainers enroll)."));
      return;
    }
    replace(
      roundsBody,
      ...rounds.map((r) => {
        const committed = popcount(r.committed_mask);
        const accepted = popcount(r.accepted_mask);
        const revoked = popcount(r.revoked_mask);
        const root = isZeroHash(r.state_root) ? null : r.state_root;
        return h(
          "tr",
          { testid: `round-row-${r.round}`, "data-status": r.status },
          h("td", { class: "num" }, String(r.round)),
          h("td", null, pill(r.status)),
          h("td", { testid: `round-root-${r.round}`, title: root ?? "", "data-value": root ?? "" }, hashWithCopy(root)),
          votesCell(r),
          h("td", { class: "num", title: `${accepted} accepted of ${committed} committed (masks ${r.accepted_mask} / ${r.committed_mask})` }, `${accepted}/${committed}`, revoked ? h("span", { class: "warn" }, ` (${revoked} revoked)`) : null),
          h("td", null, r.carried_forward ? h("span", { class: "warn" }, "yes") : "—"),
          h("td", { class: "num" }, loss(r.validation_loss)),
          h("td", { testid: `round-closed-${r.round}` }, r.closed_at ? timeEl(r.closed_at, now()) : r.deadline ? ["deadline ", timeEl(r.deadline, now())] : "—"),
          h("td", null, ...(r.challenges ?? []).flatMap((cid, i) => [i ? ", " : "", h("a", { href: `#/runs/${id}`, class: "challenge-link", onclick: (ev: Event) => scrollToChallenge(ev, cid) }, `#${cid}`)])),
          h("td", null, r.status === "finalized" ? h("a", { href: `#/runs/${id}/challenge?round=${r.round}`, class: "small" }, "challenge…") : ""),
        );
      }),
    );
  }

  function scrollToChallenge(ev: Event, cid: number): void {
    ev.preventDefault();
    const row = el.querySelector<HTMLElement>(`[data-testid="challenge-row-${cid}"]`);
    if (row) {
      row.scrollIntoView({ behavior: "smooth", block: "center" });
      row.classList.add("highlight");
      window.setTimeout(() => row.classList.remove("highlight"), 1500);
    }
  }

  function renderTrainers(trainers: Trainer[]): void {
    if (trainers.length === 0) {
      replace(trainersBody, emptyRow(11, "No trainer has enrolled yet."));
      return;
    }
    replace(
      trainersBody,
      ...trainers.map((t) => {
        const a = t.address.toLowerCase();
        return h(
          "tr",
          { testid: `trainer-row-${a}` },
          h("td", null, addr(a)),
          h("td", { class: "num" }, String(t.fragment)),
          h("td", { class: "num", testid: `trainer-stake-${a}` }, returnedCell(t.stake_wei, t.stake_returned_wei, "trainer")),
          h("td", { class: "shards" }, (t.shards ?? []).join(", ") || "—"),
          h("td", { class: "num" }, String(t.submitted)),
          h("td", { class: "num" }, String(t.accepted)),
          h("td", { class: "num" }, String(t.missed)),
          h("td", { class: "num" }, percent(t.acceptance_rate)),
          h("td", { class: "num", testid: `trainer-reward-${a}` }, ethCell(t.reward_wei)),
          h("td", { class: "num", testid: `trainer-slashed-${a}` }, t.slashed_wei !== "0" ? h("span", { class: "bad" }, ethCell(t.slashed_wei)) : ethCell(t.slashed_wei)),
          h("td", null, pill(t.status, `trainer-status-${a}`)),
        );
      }),
    );
  }

  function renderWitnesses(witnesses: Witness[]): void {
    if (witnesses.length === 0) {
      replace(witnessesBody, emptyRow(8, "No witnesses."));
      return;
    }
    replace(
      witnessesBody,
      ...witnesses.map((w) => {
        const a = w.address.toLowerCase();
        return h(
          "tr",
          { testid: `witness-row-${a}` },
          h("td", null, addr(a)),
          h("td", null, w.bonded ? "yes" : h("span", { class: "muted" }, "no")),
          h("td", { class: "num", testid: `witness-bond-${a}` }, returnedCell(w.bond_wei, w.bond_returned_wei, "witness")),
          h("td", { class: "num", testid: `witness-slashed-${a}` }, w.slashed_wei !== "0" ? h("span", { class: "bad" }, ethCell(w.slashed_wei)) : ethCell(w.slashed_wei)),
          h("td", { class: "num" }, String(w.votes)),
          h("td", { class: "num" }, String(w.matched)),
          h("td", { class: "num" }, String(w.dissents)),
          h("td", { class: "num" }, ethCell(w.fees_wei)),
        );
      }),
    );
  }

  function renderChallenges(list: Challenge[]): void {
    challengeCells.clear();
    if (list.length === 0) {
      replace(challengesBody, emptyRow(12, "No challenges. Anyone can prove a fault from the challenge page."));
      return;
    }
    replace(
      challengesBody,
      ...list.map((c) => {
        const cid = c.challenge_id;
        const cell = h("td", { class: "action" });
        challengeCells.set(cid, { cell, challenge: c });
        const needsFragment = c.kind === "trainer_equivocation" || c.kind === "censorship" || c.kind === "training_fraud";
        return h(
          "tr",
          { testid: `challenge-row-${cid}`, "data-kind": c.kind, "data-status": c.status },
          h("td", { class: "num" }, `#${cid}`),
          h("td", null, humanize(c.kind)),
          h("td", { class: "num" }, String(c.round)),
          h("td", { class: "num" }, needsFragment ? `${c.fragment}${c.kind === "training_fraud" ? ` / ${c.segment}` : ""}` : "—"),
          h("td", null, pill(c.status, `challenge-status-${cid}`)),
          h("td", null, addr(c.accused)),
          h("td", { class: "stack" }, addr(c.challenger), shortTx(c.tx)),
          h("td", { class: "num" }, ethCell(c.bond_wei)),
          h("td", { class: "num" }, c.slashed_wei !== "0" ? h("span", { class: "bad" }, ethCell(c.slashed_wei)) : ethCell(c.slashed_wei)),
          h("td", { class: "num" }, c.kind === "training_fraud" ? `${c.guilty_votes} guilty / ${c.innocent_votes} innocent` : "—"),
          h("td", null, timeEl(c.deadline, now())),
          cell,
        );
      }),
    );
  }

  /** A DP run: each trainer's cumulative ε (at the spec's δ) after each round, and the target. */
  function renderPrivacy(p: Privacy | null): void {
    if (!p || !p.enabled) {
      privacyCard.hidden = true;
      return;
    }
    privacyCard.hidden = false;
    const rounds = p.rounds ?? [];
    const fmt = (x: number | null | undefined) => (typeof x === "number" ? x.toFixed(3) : "—");
    privacyNote.textContent =
      `ε spent (privacy loss, unitless; (ε, δ)-DP at δ = ${p.delta ?? "—"}), cumulative per trainer after each round, ` +
      `target ε ${fmt(p.target_epsilon)}; DP-SGD with clip norm ${p.clip_norm ?? "—"} and noise multiplier ` +
      `${fmt(p.noise_multiplier)} at sample rate ${p.sample_rate ?? "—"} (${p.accountant ?? "rdp"} accountant). ` +
      `* : a round whose noise opening was sealed to the witness committee (a drawn or claimed segment): ` +
      `against the committee that round has no protection; against everyone else it keeps this ε.`;
    replace(privacyHead, h("tr", null, h("th", { scope: "col" }, "Trainer"), ...rounds.map((r) => h("th", { scope: "col", class: "num" }, `ε after round ${r}`))));
    const rows = Object.entries(p.epsilon_per_round ?? {});
    replace(
      privacyBody,
      ...(rows.length
        ? rows.map(([who, eps]) => {
            const opened = new Set((p.rounds_opened ?? {})[who] ?? []);
            return h(
              "tr",
              null,
              h("td", null, addr(who)),
              ...eps.map((e, i) =>
                h("td", { class: "num", "data-epsilon": String(e), "data-opened": String(opened.has(rounds[i])) }, fmt(e) + (opened.has(rounds[i]) ? " *" : "")),
              ),
            );
          })
        : [emptyRow(rounds.length + 1, "No trainer yet")]),
    );
  }

  let timer: number | null = window.setInterval(renderTimed, 1000);

  return {
    title: `Run #${id}`,
    el,
    async refresh() {
      // The run first: an unknown id is one 404 and one error line.
      const d = await gate.load(() => api.run(id));
      if (!d) {
        detail = null;
        document.title = `No such run #${id} · Syncline`;
        return;
      }
      const [rounds, trainers, witnesses, list, losses, privacy, chainTime, sealed] = await Promise.all([
        api.rounds(id),
        api.trainers(id),
        api.witnesses(id),
        api.challenges(id),
        api.losses(id).catch((): Losses | null => null),
        api.privacy(id).catch((): Privacy | null => null),
        wallet.chainTime().catch(() => Math.floor(Date.now() / 1000)),
        d.summary.tier === "confidential"
          ? api.sealedManifest(id).catch((err: unknown): SealedManifest | null => {
              reportError(err, "load");
              return null;
            })
          : Promise.resolve(null),
      ]);
      detail = d;
      challenges = list;
      chainNow = chainTime;
      chainFetchedAt = performance.now();
      chainClock.base = chainTime;
      chainClock.at = chainFetchedAt;
      renderSummary(d, witnesses);
      renderTimeline(d.timeline ?? []);
      renderRounds(rounds);
      renderTrainers(trainers);
      renderWitnesses(witnesses);
      renderChallenges(challenges);
      chart.update(losses);
      renderPrivacy(privacy);
      sealedCard.update(d, sealed);
      if (losses?.metric && losses.metric !== metricName) {
        metricName = losses.metric;
        chartTitle.textContent = metricName === "validation_loss" ? "Loss curve" : `Training loss and ${metricLabel(metricName)}`;
        const header = el.querySelector('[data-testid="rounds-table"] thead th:nth-child(7)');
        if (header) header.textContent = metricName === "validation_loss" ? "Val. loss" : metricLabel(metricName);
      }
      renderTimed();
      document.title = `Run #${id} ${d.summary.status} · Syncline`;
    },
    destroy() {
      if (timer !== null) window.clearInterval(timer);
      timer = null;
      chart.destroy();
      sealedCard.destroy();
    },
  };
}

/** A stake or bond held; once the run settled (nothing held), what came back to the owner's credit. */
function returnedCell(held: string, returned: string | undefined, who: string): HTMLElement {
  if ((toWei(returned) ?? 0n) === 0n || (toWei(held) ?? 0n) > 0n) return ethCell(held);
  return h("span", { class: "stake-returned", title: `credited back to the ${who}; claim it from the receipt page` }, ethCell(returned), " returned");
}

function kv(label: Node | string, value: Node | string | null): HTMLElement[] {
  return [h("dt", null, label), h("dd", null, value ?? "—")];
}


const ESCROW_HELP =
  "Everything the contract holds for this run: the reward pool, the witness fee budget not yet spent, fees earned and not yet paid, " +
  "the trainers' stakes and the witnesses' bonds. Stakes and bonds go back to their owners at seal or cancel.";

/** An action link that cannot be followed now: a disabled button saying why. */
function disabledLink(text: string, testid: string, reason: string): HTMLElement {
  return h("span", { class: "btn btn-disabled", testid, "aria-disabled": "true", title: reason, "data-reason": reason }, text);
}

/** Enrolling past its deadline with fewer than min_trainers: the run can never start, anyone may cancel it. */
function underfilled(d: RunDetail, nowS = Math.floor(Date.now() / 1000)): boolean {
  const deadline = num(d.spec.enrollment_deadline);
  return d.summary.status === "enrolling" && deadline !== null && chainClock.now(nowS) > deadline && d.summary.trainers_enrolled < d.summary.min_trainers;
}

/** The chain's clock as last read by the run page (module-level so `underfilled` can read it). */
const chainClock = {
  base: null as number | null,
  at: 0,
  now(fallback: number): number {
    return this.base === null ? fallback : this.base + Math.floor((performance.now() - this.at) / 1000);
  },
};

/** "spent 0.02 ETH of 0.06 ETH · 0.04 ETH left": the fee budget is witness_fee × threshold × rounds at posting. */
function feeBudget(d: RunDetail, witnesses: Witness[]): HTMLElement {
  const fee = toWei(d.spec.witness_fee_wei) ?? 0n;
  const total = fee * BigInt(num(d.spec.threshold) ?? 0) * BigInt(num(d.spec.rounds) ?? 0);
  const spent = witnesses.reduce((sum, w) => sum + (toWei(w.fees_wei) ?? 0n), 0n);
  const left = toWei(d.state.fee_budget_wei) ?? 0n;
  const settled = d.summary.status === "sealed" || d.summary.status === "cancelled";
  return h(
    "span",
    { testid: "fee-budget", title: `witness fee ${fee} wei × threshold × rounds = ${total} wei` },
    "spent ",
    ethCell(spent.toString()),
    " of ",
    ethCell(total.toString()),
    settled ? (total > spent ? [" · the unspent ", ethCell((total - spent).toString()), " went back to the sponsor"] : null) : [" · ", ethCell(left.toString()), " left"],
  );
}
