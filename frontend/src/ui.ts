// Shared UI pieces: the one-line error, page interface, transaction progress panels.
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
  showError(explainError(err, wallet.config?.abi), source, hash);
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
    replace(this.el, h("span", { class: "bad" }, "✗ failed"), hash ? h("span", { class: "tx-hash" }, " tx ", txLink(hash)) : null);
    reportError(err, "action");
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
