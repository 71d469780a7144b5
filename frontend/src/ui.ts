// Shared UI pieces: the one-line error, page interface, transaction progress panels.
import { decodeErrorResult, type AbiParameter, type Hex } from "viem";
import { call, getTransaction, getTransactionReceipt } from "viem/actions";
import { h, replace, spinner } from "./dom";
import { ApiError, oneLine } from "./api";
import { explainError, TxError, wallet } from "./wallet";
import { txLink } from "./format";

/** A page: its root element, a refetch of what it shows, and cleanup. */
export interface Page {
  title: string;
  el: HTMLElement;
  refresh(): Promise<void>;
  destroy?(): void;
}

export type Route =
  | { name: "runs" }
  | { name: "post" }
  | { name: "run"; id: number }
  | { name: "challenge"; id: number; round?: number }
  | { name: "receipt"; id: number }
  | { name: "notfound"; path: string };

// ------------------------------------------------------------------ the one-line error
// Exactly one element carries data-testid="error", and only while there is an error.
// "load" errors (a failed refetch) clear on the next successful refetch; "action" errors
// (a failed transaction or build) stay until the next action or navigation.

let errorHost: HTMLElement | null = null;
let errorSource: "load" | "action" | null = null;

export function mountErrorHost(host: HTMLElement): void {
  errorHost = host;
}

export function showError(message: string, source: "load" | "action" = "action", txHash?: string): void {
  if (!errorHost) return;
  if (source === "load" && errorSource === "action") return;
  errorSource = source;
  // The test id sits on an element holding only the text (and a tx hash): one line of innerText.
  replace(
    errorHost,
    h(
      "div",
      { class: "error-bar", role: "alert" },
      h(
        "div",
        { class: "error", testid: "error", title: message },
        oneLine(message),
        txHash ? h("span", { class: "error-tx" }, ` (tx ${txHash})`) : null,
      ),
      h("button", { type: "button", class: "error-close", "aria-label": "Dismiss the error", onclick: () => clearError() }, "×"),
    ),
  );
}

export function clearError(source?: "load" | "action"): void {
  if (!errorHost) return;
  if (source && errorSource !== source) return;
  errorSource = null;
  errorHost.replaceChildren();
}

export function reportError(err: unknown, source: "load" | "action" = "action"): void {
  const hash = err instanceof TxError ? err.hash : undefined;
  const line = explainError(err, wallet.config?.abi);
  showError(line, source, hash);
  // A transaction that reverted on chain after its simulation passed: the decoded reason comes
  // from the chain a moment later, and replaces the line while it is still the one shown.
  if (minedRevert(err)) {
    void describeFailure(err).then((decoded) => {
      if (decoded !== line && errorHost?.querySelector<HTMLElement>('[data-testid="error"]')?.title === line) showError(decoded, source, hash);
    });
  }
}

// ------------------------------------------------------------------ reverts on chain

/** Whether `err` is a transaction that was mined and reverted (the wallet's TxError with its hash). */
function minedRevert(err: unknown): err is TxError & { hash: Hex } {
  return err instanceof TxError && err.hash !== undefined && /^transaction reverted in block \d+/.test(err.message);
}

function formatArg(value: unknown): string {
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return `[${value.map(formatArg).join(", ")}]`;
  if (value && typeof value === "object") return JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
  return String(value);
}

/** "SynclineDeadlineInPast(deadline=…, now=…)" for revert data the market's ABI knows, else null. */
export function decodeRevert(data: string | null | undefined): string | null {
  const abi = wallet.config?.abi;
  if (!abi || typeof data !== "string" || !/^0x[0-9a-fA-F]{8,}$/.test(data)) return null;
  try {
    const decoded = decodeErrorResult({ abi, data: data as Hex });
    const args = (decoded.args ?? []) as readonly unknown[];
    if (decoded.errorName === "Error" && args.length === 1) return `reverted: ${formatArg(args[0])}`;
    if (decoded.errorName === "Panic" && args.length === 1) return `panic ${formatArg(args[0])}`;
    const inputs = (decoded.abiItem as { inputs?: readonly AbiParameter[] }).inputs ?? [];
    if (args.length === 0) return decoded.errorName;
    return `${decoded.errorName}(${args.map((a, i) => (inputs[i]?.name ? `${inputs[i]!.name}=${formatArg(a)}` : formatArg(a))).join(", ")})`;
  } catch {
    return `unknown error data ${data.slice(0, 10)}`;
  }
}

/**
 * Why a mined transaction reverted, decoded with the market's ABI: the revert data its trace
 * returned (`debug_traceTransaction`, anvil and most nodes), else a replay of the same call at
 * the block it was mined in (that block's time and the state after it: what made it revert after
 * a simulation against the previous block had passed). Null when neither tells.
 */
export async function onChainRevert(hash: Hex): Promise<string | null> {
  const client = wallet.publicClient;
  if (!client) return null;
  try {
    const trace = (await client.request({
      method: "debug_traceTransaction",
      params: [hash, { tracer: "callTracer" }],
    } as never)) as { output?: string; revertReason?: string } | null;
    const decoded = decodeRevert(trace?.output);
    if (decoded) return decoded;
    if (trace?.revertReason) return `reverted: ${oneLine(trace.revertReason)}`;
  } catch {
    // no debug namespace on this node: replay instead
  }
  try {
    const [tx, receipt] = await Promise.all([getTransaction(client, { hash }), getTransactionReceipt(client, { hash })]);
    if (!tx.to) return null;
    await call(client, { account: tx.from, to: tx.to, data: tx.input, value: tx.value, gas: tx.gas, blockNumber: receipt.blockNumber });
    return null; // the replay passes: the reason is not reproducible from outside
  } catch (err) {
    const line = explainError(err, wallet.config?.abi);
    return line ? line : null;
  }
}

/** The one line for a failure, with a mined revert's reason decoded from the chain. */
export async function describeFailure(err: unknown): Promise<string> {
  const line = explainError(err, wallet.config?.abi);
  if (!minedRevert(err)) return line;
  const reason = await onChainRevert(err.hash).catch(() => null);
  if (!reason) return line;
  const head = /^transaction reverted in block \d+/.exec(err.message)![0];
  return `${head}: ${reason}`;
}

// ------------------------------------------------------------------ transaction progress

/** A small status line for a transaction in flight: stages, then the hash and block. */
export class TxPanel {
  readonly el: HTMLElement;
  constructor(testid?: string) {
    this.el = h("div", { class: "tx-panel", testid, "aria-live": "polite" });
  }
  stage(text: string): void {
    this.el.dataset.state = "pending";
    replace(this.el, spinner(text));
  }
  done(text: string, hash?: string): void {
    this.el.dataset.state = "done";
    replace(this.el, h("span", { class: "ok" }, "✓ ", text), hash ? h("span", { class: "tx-hash" }, " tx ", txLink(hash)) : null);
  }
  failed(err: unknown): void {
    this.el.dataset.state = "failed";
    const hash = err instanceof TxError ? err.hash : undefined;
    const reason = h("span", { class: "tx-reason", testid: this.el.dataset.testid ? `${this.el.dataset.testid}-reason` : undefined }, explainError(err, wallet.config?.abi));
    replace(this.el, h("span", { class: "bad" }, "✗ failed: "), reason, hash ? h("span", { class: "tx-hash" }, " tx ", txLink(hash)) : null);
    reportError(err, "action");
    if (minedRevert(err)) void describeFailure(err).then((line) => (reason.textContent = line));
  }
  clear(): void {
    delete this.el.dataset.state;
    this.el.replaceChildren();
  }
}

/** Hook to ask the app for an immediate refetch (after a transaction). */
let refreshHook: () => void = () => undefined;
export function setRefreshHook(hook: () => void): void {
  refreshHook = hook;
}
export function requestRefresh(): void {
  refreshHook();
}

/** Section with a heading. */
export function section(title: string, ...children: (Node | string | null)[]): HTMLElement {
  return h("section", { class: "card" }, h("h2", null, title), ...children);
}

/** A table that scrolls horizontally inside its card; headers starting with "#" are numeric
 * columns (right-aligned, the "#" is dropped). */
export function table(testid: string, headers: string[], body: HTMLTableSectionElement, caption?: string): HTMLElement {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { testid },
      caption ? h("caption", { class: "sr-only" }, caption) : null,
      h("thead", null, h("tr", null, ...headers.map((x) => (x.startsWith("#") ? h("th", { scope: "col", class: "num" }, x.slice(1)) : h("th", { scope: "col" }, x))))),
      body,
    ),
  );
}

export function emptyRow(columns: number, text: string): HTMLTableRowElement {
  return h("tr", { class: "empty" }, h("td", { colspan: columns, class: "muted" }, text));
}

// ------------------------------------------------------------------ an unknown run

/** Whether `err` is the API's 404 for a task id the market does not have. */
export function isUnknownRun(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404;
}

/** What a run page shows for an id the market does not have: one message, no actions. */
export function missingRun(id: number, err: unknown): HTMLElement {
  return h(
    "section",
    { class: "card missing", testid: "run-missing" },
    h("h1", null, `No such run: #${id}`),
    h("p", null, `The market has no task #${id} (the API says: ${err instanceof Error ? oneLine(err.message) : "not found"}). It may not be posted yet, or the devnet was restarted.`),
    h("p", null, h("a", { href: "#/" }, "See every run")),
  );
}

/** A page body that gives way to `missingRun` while the run does not exist, and comes back when it does. */
export class RunGate {
  constructor(
    readonly el: HTMLElement,
    readonly body: HTMLElement[],
    readonly id: number,
  ) {}
  /** Show the run's page; returns false (and shows "no such run") when `load` got a 404. */
  async load<T>(load: () => Promise<T>): Promise<T | null> {
    try {
      const value = await load();
      if (this.el.dataset.missing !== undefined) {
        delete this.el.dataset.missing;
        replace(this.el, ...this.body);
      }
      return value;
    } catch (err) {
      if (!isUnknownRun(err)) throw err;
      this.el.dataset.missing = "";
      replace(this.el, missingRun(this.id, err));
      return null;
    }
  }
}
