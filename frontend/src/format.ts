// Formatting of wei/ETH amounts, hashes, addresses, times and statuses.
import { formatEther } from "viem";
import { h } from "./dom";

/** Parse a wei decimal string (or number/bigint) to bigint; null when it is not a non-negative integer. */
export function toWei(value: unknown): bigint | null {
  if (typeof value === "bigint") return value >= 0n ? value : null;
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? BigInt(value) : null;
  if (typeof value === "string" && /^\d+$/.test(value.trim())) return BigInt(value.trim());
  return null;
}

/** Below this (0.000001 ETH) an amount is dust: shown in wei, not as 0.000000000000000001 ETH. */
const DUST_WEI = 10n ** 12n;

/** "3.16 ETH": exact by default (up to 18 decimals, trailing zeros removed); with fewer
 * `decimals` the value is truncated and dust shows as "<0.0001 ETH". An amount under 0.000001 ETH
 * shows in wei ("1 wei", "250,000 wei"), exact and readable. */
export function eth(value: unknown, decimals = 18): string {
  const wei = toWei(value);
  if (wei === null) return "—";
  if (wei === 0n) return "0 ETH";
  if (wei < DUST_WEI && decimals >= 18) return `${groupThousands(wei.toString())} wei`;
  const text = formatEther(wei);
  const [whole, frac = ""] = text.split(".");
  let cut = frac.slice(0, decimals).replace(/0+$/, "");
  if (cut === "" && whole === "0") return `<${decimals > 0 ? "0." + "0".repeat(decimals - 1) + "1" : "1"} ETH`;
  return `${groupThousands(whole ?? "0")}${cut ? "." + cut : ""} ETH`;
}

function groupThousands(digits: string): string {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** An element showing an ETH amount, with the exact wei in its title and data-wei. */
export function ethCell(value: unknown, testid?: string, decimals = 18): HTMLElement {
  const wei = toWei(value);
  return h(
    "span",
    { class: "amount", testid, title: wei === null ? undefined : `${wei.toString()} wei`, "data-wei": wei?.toString() },
    eth(value, decimals),
  );
}

export function shortHex(value: string | null | undefined, head = 6, tail = 4): string {
  if (!value) return "—";
  if (value.length <= head + tail + 3) return value;
  return `${value.slice(0, head)}…${value.slice(-tail)}`;
}

export function isZeroHash(value: string | null | undefined): boolean {
  return !value || /^0x0*$/.test(value);
}

/** Labels for known addresses (dev accounts: "anvil #4"). */
const labels = new Map<string, string>();

export function setAddressLabels(entries: { address: string; label: string }[]): void {
  labels.clear();
  for (const entry of entries) labels.set(entry.address.toLowerCase(), entry.label);
}

export function addressLabel(address: string): string | undefined {
  return labels.get(address.toLowerCase());
}

/** Monospace short address with the full value in its title and an optional label. */
export function addr(address: string | null | undefined): HTMLElement {
  if (!address) return h("span", { class: "muted" }, "—");
  const label = addressLabel(address);
  return h(
    "span",
    { class: "addr", title: address },
    label ? h("span", { class: "addr-label" }, label) : null,
    h("code", null, shortHex(address, 6, 4)),
  );
}

/** Hash shortened in a <code>, full value in the title, with a copy button. */
export function hashWithCopy(value: string | null | undefined, testid?: string): HTMLElement {
  if (!value) return h("span", { class: "muted", testid }, "—");
  return h(
    "span",
    { class: "hash", testid, title: value, "data-value": value },
    h("code", null, shortHex(value, 10, 6)),
    copyButton(value),
  );
}

export function copyButton(value: string): HTMLElement {
  const button = h(
    "button",
    {
      type: "button",
      class: "copy",
      title: "Copy to clipboard",
      "aria-label": "Copy to clipboard",
      onclick: () => {
        copyText(value).then(
          () => flash(button, "copied"),
          () => flash(button, "copy failed"),
        );
      },
    },
    copyIcon(),
  );
  return button;
}

function copyIcon(): SVGSVGElement {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "12");
  svg.setAttribute("height", "12");
  svg.setAttribute("aria-hidden", "true");
  for (const [x, y] of [[5, 5], [2, 2]] as const) {
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", String(x));
    rect.setAttribute("y", String(y));
    rect.setAttribute("width", "9");
    rect.setAttribute("height", "9");
    rect.setAttribute("rx", "1.5");
    rect.setAttribute("fill", x === 5 ? "currentColor" : "none");
    rect.setAttribute("fill-opacity", x === 5 ? "0.15" : "1");
    rect.setAttribute("stroke", "currentColor");
    rect.setAttribute("stroke-width", "1.4");
    svg.appendChild(rect);
  }
  return svg;
}

async function copyText(value: string): Promise<void> {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(value);
    return;
  }
  const area = h("textarea", { value, readonly: true, style: "position:fixed;left:-9999px" });
  document.body.appendChild(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("copy failed");
}

function flash(button: HTMLElement, text: string): void {
  button.dataset.flash = text;
  window.setTimeout(() => delete button.dataset.flash, 1200);
}

export function txLink(hash: string | null | undefined, testid?: string): HTMLElement {
  if (!hash) return h("span", { class: "muted", testid }, "—");
  return h("span", { class: "hash", title: hash }, h("code", { testid }, hash), copyButton(hash));
}

export function shortTx(hash: string | null | undefined): HTMLElement {
  if (!hash) return h("span", { class: "muted" }, "—");
  return h("span", { class: "hash", title: hash }, h("code", null, shortHex(hash, 6, 4)), copyButton(hash));
}

const pad = (n: number) => String(n).padStart(2, "0");

/** A chain timestamp (seconds) as a local date-time, always with its date: "2026-11-24 17:25:08". */
export function time(ts: number | null | undefined): string {
  if (!ts) return "—";
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** The same as a <time> element: machine-readable UTC in `datetime`, the UTC time and, when `now`
 * (chain seconds) is given, how long ago or ahead it is in the title. */
export function timeEl(ts: number | null | undefined, now?: number, testid?: string): HTMLElement {
  if (!ts) return h("span", { class: "muted", testid }, "—");
  const iso = new Date(ts * 1000).toISOString().replace(".000Z", "Z");
  const title = `${iso.replace("T", " ").replace("Z", " UTC")}${now !== undefined ? ` · ${relative(ts - now)}` : ""}`;
  return h("time", { class: "when", datetime: iso, title, testid }, time(ts));
}

/** "in 4 min 10 s" / "12 s ago". */
export function relative(seconds: number): string {
  const abs = Math.abs(Math.round(seconds));
  let text: string;
  if (abs < 60) text = `${abs} s`;
  else if (abs < 3600) text = `${Math.floor(abs / 60)} min ${abs % 60} s`;
  else if (abs < 86400) text = `${Math.floor(abs / 3600)} h ${Math.floor((abs % 3600) / 60)} min`;
  else text = `${Math.floor(abs / 86400)} d ${Math.floor((abs % 86400) / 3600)} h`;
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

export function loss(value: number | null | undefined): string {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(4) : "—";
}

export function percent(value: number | null | undefined): string {
  return typeof value === "number" && Number.isFinite(value) ? `${(value * 100).toFixed(0)}%` : "—";
}

export function humanize(value: string): string {
  return value.replace(/_/g, " ");
}

/** Status pill: class pill-<status> picks the colour. */
export function pill(status: string | null | undefined, testid?: string): HTMLElement {
  const s = (status ?? "unknown").toLowerCase();
  return h("span", { class: `pill pill-${s}`, testid, "data-status": s }, s);
}

/** Number of set bits of a mask given as number, decimal string or hex string. */
export function popcount(mask: unknown): number {
  let value: bigint;
  try {
    value = typeof mask === "bigint" ? mask : BigInt(String(mask ?? 0));
  } catch {
    return 0;
  }
  let count = 0;
  while (value > 0n) {
    count += Number(value & 1n);
    value >>= 1n;
  }
  return count;
}

// ------------------------------------------------------------------ amounts and times typed in forms

const WEI_DIGITS = 18;

/** An exact ETH decimal for a wei amount: "1.5", "0.000000000000000001", "3" (no grouping). */
export function weiToEthText(value: unknown): string {
  const wei = toWei(value);
  if (wei === null) return "";
  const digits = wei.toString().padStart(WEI_DIGITS + 1, "0");
  const whole = digits.slice(0, -WEI_DIGITS);
  const frac = digits.slice(-WEI_DIGITS).replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : whole;
}

/** Parse an amount typed in ETH ("1.5", "0.25", ".5", "2") to wei, exactly (string arithmetic,
 * no floating point). Returns the wei, or a one-line reason the text is not an amount. */
export function parseEth(text: string): { wei: bigint } | { error: string } {
  const s = text.trim();
  if (s === "") return { error: "enter an amount in ETH, e.g. 1.5" };
  if (/^-/.test(s)) return { error: "must not be negative" };
  if (/e/i.test(s) && /^[\d.]+e[-+]?\d+$/i.test(s)) return { error: "write the amount out in full, without an exponent (e.g. 0.001)" };
  if (/,/.test(s)) return { error: "use a dot for decimals and no thousands separators (e.g. 1250.5)" };
  const match = /^(\d*)(?:\.(\d*))?$/.exec(s);
  if (!match || (match[1] === "" && (match[2] ?? "") === "")) return { error: "not an amount in ETH: digits with at most one dot, e.g. 1.5" };
  const whole = match[1] || "0";
  const frac = match[2] ?? "";
  if (frac.length > WEI_DIGITS) return { error: "at most 18 decimals (1 wei = 0.000000000000000001 ETH)" };
  return { wei: BigInt(whole) * 10n ** BigInt(WEI_DIGITS) + BigInt(frac.padEnd(WEI_DIGITS, "0") || "0") };
}

/** A chain timestamp (seconds) as the value of an <input type="datetime-local"> (local time). */
export function toLocalInput(ts: number): string {
  return time(ts).replace(" ", "T");
}

/** The chain timestamp (seconds) of a datetime-local value ("2026-11-24T18:30" or with seconds),
 * read as local time; null when it is not one. */
export function fromLocalInput(value: string): number | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(value.trim());
  if (!m) return null;
  const [, y, mo, d, hh, mm, ss] = m;
  const date = new Date(Number(y), Number(mo) - 1, Number(d), Number(hh), Number(mm), Number(ss ?? "0"));
  return Number.isNaN(date.getTime()) ? null : Math.floor(date.getTime() / 1000);
}
