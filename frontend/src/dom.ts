// A tiny hyperscript helper: h("div", {class: "x", testid: "y", onclick: fn}, child, ...).

export type Child = Node | string | number | bigint | null | undefined | false | Child[];

export type Attrs = {
  [key: string]: unknown;
  class?: string;
  testid?: string;
};

const PROPS = new Set(["value", "checked", "disabled", "selected", "hidden", "readOnly"]);

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") el.className = String(value);
      else if (key === "testid") el.dataset.testid = String(value);
      else if (key.startsWith("on") && typeof value === "function") {
        el.addEventListener(key.slice(2).toLowerCase(), value as EventListener);
      } else if (PROPS.has(key)) {
        (el as unknown as Record<string, unknown>)[key] = value;
      } else if (value === true) el.setAttribute(key, "");
      else el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Replace every child of `el`. */
export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** Find one element by data-testid inside `root`. */
export function byTestId<T extends HTMLElement = HTMLElement>(root: ParentNode, id: string): T | null {
  return root.querySelector<T>(`[data-testid="${CSS.escape(id)}"]`);
}

export function spinner(label?: string): HTMLElement {
  return h("span", { class: "spinner-wrap", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }), label ?? "");
}
