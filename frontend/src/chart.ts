// The loss curve: validation loss per round (bold) and each trainer's self-reported loss.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { Losses } from "./api";
import { h } from "./dom";
import { addressLabel, shortHex } from "./format";

const PALETTE = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];
const ROUND_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/** Round ticks from `first` to `last` at most `maxTicks` of them, always ending on `last` (the
 * final round) and starting on `first`; a regular tick too close to either end gives way. */
export function roundTicks(first: number, last: number, maxTicks: number): number[] {
  if (last <= first) return [first];
  const step = ROUND_STEPS.find((s) => (last - first) / s + 1 <= Math.max(2, maxTicks)) ?? Math.ceil((last - first) / Math.max(1, maxTicks - 1));
  const ticks = [first];
  for (let t = Math.ceil((first + 1) / step) * step; t < last; t += step) {
    if (t - first >= step / 2 && last - t >= step / 2) ticks.push(t);
  }
  ticks.push(last);
  return ticks;
}

/** Loss ticks: about `count` round numbers in [min, max], plus `final` (the last validation loss)
 * so the axis reads where the curve ends, and `top` (the highest validation loss, usually the
 * first) so the top of the curve is labelled too; a round tick too close to either gives way. */
export function lossTicks(min: number, max: number, count: number, final: number | null, top: number | null = null): number[] {
  const span = max - min;
  let ticks: number[] = [];
  if (span > 0 && Number.isFinite(span)) {
    const raw = span / Math.max(1, count);
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => x >= raw) ?? 10 * mag;
    for (let t = Math.ceil(min / step) * step; t <= max + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
    for (const mark of [final, top]) if (mark !== null) ticks = ticks.filter((t) => Math.abs(t - mark) >= step * 0.6);
  }
  if (final !== null && final >= min && final <= max) ticks.push(final);
  if (top !== null && top !== final && top >= min && top <= max) ticks.push(top);
  return ticks.sort((a, b) => a - b);
}

const METRIC_LABELS: Record<string, string> = { validation_loss: "validation loss", top1_accuracy: "top-1 accuracy", mase: "MASE" };

/** How a validation metric is named on the page ("validation loss", "top-1 accuracy", "MASE"). */
export function metricLabel(name: string | undefined): string {
  return METRIC_LABELS[name ?? "validation_loss"] ?? (name ?? "validation loss").replace(/_/g, " ");
}

export class LossChart {
  private plot: uPlot | null = null;
  private key = "";
  private observer: ResizeObserver;
  private readonly body: HTMLElement;
  private readonly note: HTMLElement;
  private final: number | null = null;
  private top: number | null = null;

  constructor(readonly container: HTMLElement) {
    this.body = h("div", { class: "chart-body" });
    this.note = h("p", { class: "muted small chart-note", testid: "loss-note" });
    container.append(this.body, this.note);
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(container);
  }

  private width(): number {
    return Math.max(320, Math.floor(this.container.clientWidth - 2));
  }

  private resize(): void {
    if (this.plot) this.plot.setSize({ width: this.width(), height: 280 });
  }

  update(losses: Losses | null): void {
    const rounds = losses?.rounds ?? [];
    const trainers = Object.keys(losses?.trainers ?? {}).sort();
    const fit = (series: (number | null)[] | undefined) =>
      rounds.map((_, i) => {
        const v = series?.[i];
        return typeof v === "number" && Number.isFinite(v) ? v : null;
      });
    const validation = fit(losses?.validation);
    const metric = losses?.metric ?? "validation_loss";
    const label = metricLabel(metric);
    // A metric that is not a loss (accuracy, MASE) gets its own axis, on the right.
    const ownAxis = metric !== "validation_loss";
    this.container.dataset.metric = metric;
    const perTrainer = trainers.map((t) => fit(losses?.trainers[t]));
    const points = [validation, ...perTrainer].reduce((n, s) => n + s.filter((v) => v !== null).length, 0);
    this.container.dataset.points = String(points);
    this.note.textContent = points === 0 ? "No losses reported yet: the curve fills in as rounds close." : "";
    const data: uPlot.AlignedData = [rounds, validation, ...perTrainer];
    // The final validation loss: the y axis carries a tick at it, the note says it.
    let final: number | null = null;
    for (let i = validation.length - 1; i >= 0 && final === null; i--) final = validation[i] ?? null;
    this.final = final;
    const shown = validation.filter((v): v is number => v !== null);
    this.top = shown.length ? Math.max(...shown) : null;
    const lastRound = rounds[rounds.length - 1];
    this.container.dataset.finalLoss = final === null ? "" : String(final);
    if (final !== null && lastRound !== undefined) {
      const at = rounds[validation.lastIndexOf(final)] ?? lastRound;
      this.note.textContent = `Final ${label} ${final.toFixed(4)} (round ${at}).`;
    }
    // Losses are mean cross-entropies in nats (natural log) per predicted token (per image for
    // vision); the axis says so.
    const yLabel = metric === "validation_loss" ? "loss (nats/token)" : metric === "top1_accuracy" ? "training loss (nats)" : "training loss";
    this.container.dataset.yLabel = yLabel;
    const key = `${metric}:${trainers.join(",")}`;
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    this.destroyPlot();
    this.key = key;
    const series: uPlot.Series[] = [
      { label: "round" },
      {
        label,
        scale: ownAxis ? "metric" : "y",
        stroke: "#111827",
        width: 3,
        points: { show: true, size: 6 },
        spanGaps: true,
        value: (_u, v) => (v == null ? "—" : v.toFixed(4)),
      },
      ...trainers.map((t, i) => ({
        label: `trainer ${addressLabel(t) ?? shortHex(t)}`,
        stroke: PALETTE[i % PALETTE.length],
        width: 1.5,
        dash: [6, 4],
        spanGaps: true,
        points: { show: true, size: 4 },
        value: (_u: uPlot, v: number | null) => (v == null ? "—" : v.toFixed(4)),
      })),
    ];
    this.plot = new uPlot(
      {
        width: this.width(),
        height: 280,
        // Half a round of room on each side: the first and the final points are drawn whole.
        scales: { x: { time: false, range: (_u, min, max) => [min - 0.5, max + 0.5] }, ...(ownAxis ? { metric: { auto: true } } : {}) },
        axes: [
          {
            label: "round",
            splits: (u) => {
              const xs = (u.data[0] ?? []) as number[];
              const ticks = xs.length ? roundTicks(xs[0]!, xs[xs.length - 1]!, Math.floor(u.bbox.width / devicePixelRatio / 45)) : [];
              this.container.dataset.xTicks = ticks.join(",");
              return ticks;
            },
            values: (_u, ticks) => ticks.map((t) => String(t)),
          },
          {
            label: yLabel,
            size: 64,
            splits: (u, _axis, min, max) => {
              const ticks = lossTicks(min, max, Math.max(2, Math.floor(u.bbox.height / devicePixelRatio / 32)), this.final, ownAxis ? null : this.top);
              this.container.dataset.yTicks = ticks.join(",");
              this.container.dataset.yRange = `${min},${max}`;
              return ticks;
            },
            values: (_u, ticks) => ticks.map((t) => ((t === this.final || t === this.top) && !ownAxis ? t.toFixed(3) : String(Number(t.toPrecision(6))))),
          },
          ...(ownAxis
            ? [
                {
                  scale: "metric",
                  side: 1,
                  label,
                  size: 64,
                  grid: { show: false },
                  values: (_u: uPlot, ticks: number[]) => ticks.map((t) => String(Number(t.toPrecision(4)))),
                },
              ]
            : []),
        ],
        series,
        cursor: { drag: { x: false, y: false } },
        legend: { live: false },
      },
      data,
      this.body,
    );
  }

  private destroyPlot(): void {
    if (this.plot) {
      this.plot.destroy();
      this.plot = null;
      this.key = "";
    }
  }

  destroy(): void {
    this.observer.disconnect();
    this.destroyPlot();
  }
}
