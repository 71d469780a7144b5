// App shell: header (nav, wallet banner, account picker), hash router, live updates.
import "./style.css";
import { api, type Config } from "./api";
import { h, replace } from "./dom";
import { eth, setAddressLabels, shortHex } from "./format";
import { challengePage } from "./pages/challenge";
import { postPage } from "./pages/post";
import { receiptPage } from "./pages/receipt";
import { runPage } from "./pages/run";
import { runsPage } from "./pages/runs";
import { clearError, mountErrorHost, reportError, setRefreshHook, type Page, type Route } from "./ui";
import { explainError, wallet } from "./wallet";

const app = document.getElementById("app")!;

const navRuns = h("a", { href: "#/", testid: "nav-runs" }, "Runs");
const navPost = h("a", { href: "#/post", testid: "nav-post" }, "Post a task");
const banner = h("span", { class: "wallet-banner", testid: "wallet-banner" }, "Loading…");
const accountSelect = h("select", { testid: "account-select", id: "account-select", "aria-label": "Account", disabled: true });
const connectButton = h("button", { type: "button", class: "btn btn-small", hidden: true }, "Connect wallet");
const accountInfo = h("span", { class: "account-info" });
const chainInfo = h("span", { class: "chain-info", title: "indexed block / chain head" });
const errorHost = h("div", { class: "error-host" });
const main = h("main", { id: "main" });

const header = h(
  "header",
  { class: "topbar" },
  h("div", { class: "brand" }, h("a", { href: "#/" }, h("span", { class: "logo", "aria-hidden": "true" }), "Syncline"), h("span", { class: "brand-sub" }, "sponsor console")),
  h("nav", { "aria-label": "Main" }, navRuns, navPost),
  h(
    "div",
    { class: "wallet" },
    banner,
    h("label", { for: "account-select", class: "sr-only" }, "Account"),
    accountSelect,
    connectButton,
    accountInfo,
    chainInfo,
  ),
);
replace(app, header, errorHost, main);
mountErrorHost(errorHost);

accountSelect.addEventListener("change", () => wallet.select(accountSelect.value));
connectButton.addEventListener("click", () => {
  wallet.connect().catch((err) => reportError(err, "action"));
});

function renderWallet(): void {
  banner.textContent = wallet.banner;
  banner.dataset.kind = wallet.kind;
  const options = wallet.accounts.map((a) =>
    h("option", { value: a.address, selected: a.address === wallet.selected }, `${a.label} · ${shortHex(a.address, 6, 4)}`),
  );
  if (options.length === 0) options.push(h("option", { value: "" }, wallet.kind === "injected" ? "not connected" : "no account"));
  replace(accountSelect, ...options);
  accountSelect.value = wallet.selected ?? "";
  accountSelect.disabled = wallet.accounts.length === 0;
  connectButton.hidden = !(wallet.kind === "injected" && wallet.accounts.length === 0);
  connectButton.disabled = wallet.connecting;
  void refreshAccountInfo();
}

let accountSeq = 0;
async function refreshAccountInfo(): Promise<void> {
  const selected = wallet.selected;
  const seq = ++accountSeq;
  if (!selected) {
    accountInfo.textContent = "";
    return;
  }
  try {
    const info = await api.account(selected);
    if (seq !== accountSeq) return;
    accountInfo.textContent = `${eth(info.balance_wei, 2)}${info.credit_wei !== "0" ? ` · credit ${eth(info.credit_wei, 4)}` : ""}`;
    accountInfo.title = `balance ${info.balance_wei} wei, claimable credit ${info.credit_wei} wei`;
  } catch {
    if (seq === accountSeq) accountInfo.textContent = "";
  }
}

function setChainInfo(indexed: number, head?: number): void {
  chainInfo.textContent = `chain ${wallet.config?.chain_id ?? "?"} · block ${indexed}${head !== undefined && head !== indexed ? `/${head}` : ""}`;
}

// ------------------------------------------------------------------ router

function parseRoute(hash: string): Route {
  const raw = hash.replace(/^#/, "") || "/";
  const [path = "/", query = ""] = raw.split("?");
  const params = new URLSearchParams(query);
  const parts = path.split("/").filter(Boolean);
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "runs")) return { name: "runs" };
  if (parts.length === 1 && parts[0] === "post") return { name: "post" };
  if (parts[0] === "runs" && parts[1] && /^\d+$/.test(parts[1])) {
    const id = Number(parts[1]);
    if (parts.length === 2) return { name: "run", id };
    if (parts.length === 3 && parts[2] === "challenge") {
      const round = params.get("round");
      return { name: "challenge", id, round: round !== null && /^\d+$/.test(round) ? Number(round) : undefined };
    }
    if (parts.length === 3 && parts[2] === "receipt") return { name: "receipt", id };
  }
  return { name: "notfound", path };
}

function makePage(route: Route): Page {
  switch (route.name) {
    case "runs":
      return runsPage();
    case "post":
      return postPage();
    case "run":
      return runPage(route.id);
    case "challenge":
      return challengePage(route.id, route.round);
    case "receipt":
      return receiptPage(route.id);
    case "notfound":
      return {
        title: "Not found",
        el: h("div", { class: "card" }, h("h1", null, "Not found"), h("p", null, `No page at ${route.path}. `, h("a", { href: "#/" }, "Back to the runs"))),
        refresh: async () => undefined,
      };
  }
}

let page: Page | null = null;
// One refetch loop per page: a refetch asked for while one runs is coalesced into one more.
let loop = { running: false, again: false };

async function refreshPage(): Promise<void> {
  const current = page;
  const state = loop;
  if (!current) return;
  if (state.running) {
    state.again = true;
    return;
  }
  state.running = true;
  try {
    do {
      state.again = false;
      try {
        await current.refresh();
        if (current === page) clearError("load");
      } catch (err) {
        if (current === page) reportError(err, "load");
      }
    } while (state.again && current === page);
  } finally {
    state.running = false;
  }
}

function navigate(): void {
  const route = parseRoute(window.location.hash);
  page?.destroy?.();
  clearError();
  page = makePage(route);
  document.title = `${page.title} · Syncline`;
  navRuns.classList.toggle("active", route.name === "runs");
  navPost.classList.toggle("active", route.name === "post");
  replace(main, page.el);
  loop = { running: false, again: false };
  void refreshPage();
}

setRefreshHook(() => {
  void refreshPage();
  void refreshAccountInfo();
});

// ------------------------------------------------------------------ live updates
// /api/stream sends `update` {"indexed_block": N} when the indexer advances; on a stream error
// the page polls every 2 s instead.

let pollTimer: number | null = null;
let lastIndexed = -1;

function onIndexed(indexed: number, head?: number): void {
  setChainInfo(indexed, head);
  if (indexed === lastIndexed) return;
  lastIndexed = indexed;
  void refreshPage();
  void refreshAccountInfo();
}

function startPolling(): void {
  if (pollTimer !== null) return;
  pollTimer = window.setInterval(() => {
    api.health().then(
      (health) => onIndexed(health.indexed_block, health.head_block),
      () => void refreshPage(),
    );
  }, 2000);
}

function startStream(): void {
  if (typeof EventSource === "undefined") {
    startPolling();
    return;
  }
  const source = new EventSource("/api/stream");
  source.addEventListener("update", (event) => {
    try {
      const data = JSON.parse((event as MessageEvent<string>).data) as { indexed_block?: number; head_block?: number };
      if (typeof data.indexed_block === "number") onIndexed(data.indexed_block, data.head_block);
      else void refreshPage();
    } catch {
      void refreshPage();
    }
  });
  source.addEventListener("error", () => {
    source.close();
    startPolling();
  });
}

// ------------------------------------------------------------------ boot

async function boot(): Promise<void> {
  let config: Config;
  for (;;) {
    try {
      config = await api.config();
      break;
    } catch (err) {
      banner.textContent = "API unreachable";
      reportError(err, "load");
      await new Promise((resolve) => window.setTimeout(resolve, 2000));
    }
  }
  clearError("load");
  setAddressLabels(config.dev_accounts ?? []);
  wallet.onChange(() => {
    renderWallet();
    void refreshPage();
  });
  wallet.init(config);
  lastIndexed = config.indexed_block;
  setChainInfo(config.indexed_block, config.head_block);
  window.addEventListener("hashchange", navigate);
  navigate();
  startStream();
}

// Nothing should reach here; if something does, the user sees it as the one-line error too.
window.addEventListener("unhandledrejection", (event) => reportError(event.reason, "action"));

boot().catch((err) => reportError(new Error(explainError(err)), "load"));
