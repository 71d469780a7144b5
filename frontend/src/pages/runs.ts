// #/ : every run, newest first.
import { api, type RunSummary } from "../api";
import { h, replace, spinner } from "../dom";
import { addr, ethCell, humanize, pill, timeEl } from "../format";
import { emptyRow, table, type Page } from "../ui";

const HEADERS = ["Run", "Name", "Status", "Tier", "Rule", "Progress", "#Reward pool", "#Trainers", "#Challenges", "Sponsor", "Posted"];

function progressBar(run: RunSummary): HTMLElement {
  const closed = run.rounds_finalized + run.rounds_carried + run.rounds_invalidated;
  const fraction = Math.max(0, Math.min(1, Number.isFinite(run.progress) ? run.progress : run.rounds ? closed / run.rounds : 0));
  const label = `${closed}/${run.rounds} rounds`;
  return h(
    "div",
    { class: "progress", title: `${run.rounds_finalized} finalized, ${run.rounds_carried} carried forward, ${run.rounds_invalidated} invalidated` },
    h(
      "div",
      { class: "progress-bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": run.rounds, "aria-valuenow": closed, "aria-label": label },
      h("div", { class: "progress-fill", style: `width:${(fraction * 100).toFixed(1)}%` }),
    ),
    h("span", { class: "progress-text" }, label),
  );
}

function row(run: RunSummary): HTMLTableRowElement {
  const id = run.task_id;
  const link = `#/runs/${id}`;
  return h(
    "tr",
    { testid: `run-row-${id}`, class: "clickable", "data-href": link },
    h("td", null, h("a", { href: link }, `#${id}`)),
    h("td", null, h("a", { href: link }, run.name || `task ${id}`)),
    h("td", null, pill(run.status, `run-status-${id}`)),
    h("td", null, run.tier),
    h("td", null, humanize(run.rule)),
    h("td", null, progressBar(run)),
    h("td", { class: "num" }, ethCell(run.reward_pool_wei)),
    h("td", { class: "num", title: `min ${run.min_trainers}, max ${run.max_trainers}` }, `${run.trainers_enrolled}/${run.max_trainers}`),
    h("td", { class: "num", title: "open challenges" }, run.open_challenges > 0 ? h("span", { class: "warn" }, String(run.open_challenges)) : "0"),
    h("td", null, addr(run.sponsor)),
    h("td", null, timeEl(run.posted_at, undefined, `run-posted-${id}`)),
  );
}

export function runsPage(): Page {
  const body = h("tbody");
  const count = h("span", { class: "muted" });
  const el = h(
    "div",
    { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "Training runs ", count), h("a", { href: "#/post", class: "btn btn-primary" }, "Post a task")),
    h("section", { class: "card" }, table("runs-table", HEADERS, body, "Training runs")),
  );
  body.append(emptyRow(HEADERS.length, "Loading…"));
  body.addEventListener("click", (event) => {
    const target = event.target as HTMLElement;
    if (target.closest("a,button")) return;
    const tr = target.closest<HTMLElement>("tr[data-href]");
    if (tr?.dataset.href) window.location.hash = tr.dataset.href;
  });
  return {
    title: "Runs",
    el,
    async refresh() {
      const runs = await api.runs();
      count.textContent = runs.length ? `(${runs.length})` : "";
      if (runs.length === 0) {
        // Nothing indexed is not "nothing posted" while the index is still catching up with the chain.
        const health = await api.health().catch(() => null);
        const lag = health ? Math.max(0, health.head_block - health.indexed_block) : 0;
        const text =
          health && lag > 1
            ? [spinner(`Indexing the chain: block ${health.indexed_block} of ${health.head_block}. Runs appear here as the index catches up.`)]
            : [
                "No runs yet. ",
                h("a", { href: "#/post" }, "Post a task"),
                " to start one. A demo (make demo) posts its task once its data and model are prepared, a minute or two after it starts; this list updates by itself.",
              ];
        replace(body, h("tr", { class: "empty" }, h("td", { colspan: HEADERS.length, class: "muted", testid: "runs-empty", "data-lag": String(lag) }, ...text)));
        return;
      }
      replace(body, ...runs.map(row));
    },
  };
}
