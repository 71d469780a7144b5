// The run page's card for a Confidential task: the sealed manifest the chain names (version, hash,
// envelopes) and, for the sponsor, "Install sealed manifest": the sponsor's own API server wraps the
// data keys to the enclaves admitted since the last version and publishes the next manifest
// (POST /api/runs/{id}/sealed-manifest/build, authorised by the sponsor's wallet signing buildMessage);
// the wallet then signs and sends installSealedManifest.
import { api, type RunDetail, type SealedManifest } from "../api";
import { h, replace, spinner } from "../dom";
import { hashWithCopy, shortHex } from "../format";
import { clearError, reportError, requestRefresh, TxPanel } from "../ui";
import { wallet } from "../wallet";

const SETTLED = new Set(["sealed", "cancelled"]);
/** How long a build authorisation stays valid (the server accepts at most 600 s). */
const AUTH_TTL_S = 300;

/** The text the sponsor signs (EIP-191) to authorise one build; the server checks the same text
 * (syncline.confidential.authorise.build_message). */
export function buildMessage(chainId: number, market: string, taskId: number, version: number, expires: number): string {
  return [
    "Syncline: build the sealed manifest of a Confidential task",
    `chain id: ${chainId}`,
    `market: ${market.toLowerCase()}`,
    `task: ${taskId}`,
    `version: ${version}`,
    `expires: ${expires}`,
  ].join("\n");
}

export class SealedManifestCard {
  readonly el: HTMLElement;
  private readonly facts = h("dl", { class: "kv kv-grid" });
  private readonly note = h("p", { class: "muted", testid: "sealed-note" });
  private readonly actions = h("div", { class: "actions" });
  private readonly result = h("div", { testid: "sealed-result" });
  private readonly txPanel = new TxPanel("sealed-tx");
  private detail: RunDetail | null = null;
  private busy = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly id: number) {
    this.el = h(
      "section",
      { class: "card", testid: "sealed-card", hidden: true },
      h("h2", null, "Sealed data"),
      this.facts,
      this.note,
      this.actions,
      this.result,
      this.txPanel.el,
    );
    this.unsubscribe = wallet.onChange(() => this.renderActions());
  }

  /** Shown for a Confidential task only; `manifest` null: the GET failed (its error is reported). */
  update(detail: RunDetail, manifest: SealedManifest | null): void {
    this.detail = detail;
    this.el.hidden = detail.summary.tier !== "confidential";
    if (this.el.hidden) return;
    const m = manifest;
    replace(
      this.facts,
      h("dt", null, "Manifest version"),
      h("dd", { testid: "sealed-version" }, m ? String(m.version) : "—"),
      h("dt", null, "Manifest hash"),
      h("dd", null, hashWithCopy(m && m.version > 0 ? m.manifest_hash : null, "sealed-hash")),
      h("dt", null, "Envelopes"),
      h("dd", { testid: "sealed-envelopes" }, m ? String(m.envelopes) : "—"),
      h("dt", null, "Enclaves"),
      h("dd", { testid: "sealed-enclaves", title: (m?.enclaves ?? []).join("\n") }, m ? String(m.enclaves.length) : "—"),
      h("dt", null, "Sealed shards"),
      h("dd", null, m && m.version > 0 ? String(m.shards) : "—"),
    );
    this.note.textContent =
      m && m.version === 0
        ? "No sealed manifest is installed yet: admitted enclaves cannot open the shards until the sponsor installs one."
        : "The shards are encrypted; each data key is wrapped (HPKE) to the enclave keys the chain admitted. New enclaves get envelopes in a new version; the shards are never re-encrypted.";
    this.renderActions();
  }

  private isSponsor(): boolean {
    const sponsor = this.detail?.summary.sponsor?.toLowerCase();
    return !!sponsor && wallet.selected === sponsor;
  }

  private renderActions(): void {
    const d = this.detail;
    if (!d || this.el.hidden) return;
    if (SETTLED.has(d.summary.status)) {
      this.actions.replaceChildren();
      return;
    }
    if (!this.isSponsor()) {
      replace(
        this.actions,
        h("span", { class: "muted small", testid: "sealed-sponsor-only" }, `Only the sponsor (${shortHex(d.summary.sponsor)}) installs new versions, from its own API server that holds the data keys.`),
      );
      return;
    }
    const reason = wallet.notReadyReason;
    replace(
      this.actions,
      h(
        "button",
        { type: "button", class: "btn btn-primary", testid: "sealed-install", disabled: this.busy || reason !== null, title: reason ?? undefined, onclick: () => void this.install() },
        this.busy ? "Installing sealed manifest…" : "Install sealed manifest",
      ),
      h("span", { class: "muted small" }, " Your wallet signs to authorise the build (your API server checks you are the task's sponsor), then wraps the data keys to newly admitted enclaves; the wallet then sends the next version."),
    );
  }

  private async install(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    clearError();
    this.result.replaceChildren();
    this.txPanel.clear();
    this.renderActions();
    try {
      const current = await api.sealedManifest(this.id);
      const version = current.version + 1;
      const expires = Math.floor(Date.now() / 1000) + AUTH_TTL_S;
      const message = buildMessage(wallet.config.chain_id, wallet.config.market, this.id, version, expires);
      const signature = await wallet.signText(message, (stage) => replace(this.result, spinner(`authorising the build: ${stage}`)));
      replace(this.result, spinner("wrapping the data keys to the admitted enclaves and publishing the manifest…"));
      const built = await api.buildSealedManifest(this.id, { version, expires, signature });
      if (!built.call) {
        replace(this.result, h("p", { class: "muted", testid: "sealed-nothing" }, `Nothing to install: every admitted enclave already holds its envelopes (version ${built.version}).`));
        return;
      }
      replace(
        this.result,
        h("p", { class: "muted" }, `Built version ${built.version}: ${built.added} new envelope${built.added === 1 ? "" : "s"}, ${built.envelopes} in all, manifest ${shortHex(built.manifest_hash, 10, 6)}.`),
      );
      const outcome = await wallet.send({ to: built.call.to, data: built.call.data, value: BigInt(built.call.value_wei) }, (stage) => this.txPanel.stage(`install sealed manifest: ${stage}`));
      this.txPanel.done(`sealed manifest version ${built.version} installed in block ${outcome.receipt.blockNumber}`, outcome.hash);
      requestRefresh();
    } catch (err) {
      if (err instanceof Error && err.name === "TxError") {
        this.txPanel.failed(err);
      } else {
        this.result.replaceChildren();
        reportError(err, "action");
      }
    } finally {
      this.busy = false;
      this.renderActions();
    }
  }

  destroy(): void {
    this.unsubscribe();
  }
}
