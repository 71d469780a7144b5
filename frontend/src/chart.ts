// The loss curve: validation loss per round (bold) and each trainer's self-reported loss.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { Losses } from "./api";
import { h } from "./dom";
import { addressLabel, shortHex } from "./format";

const PALETTE = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];

export class LossChart {
  private plot: uPlot | null = null;
  private key = "";
  private observer: ResizeObserver;
  private readonly body: HTMLElement;
  private readonly note: HTMLElement;

  constructor(readonly container: HTMLElement) {
    this.body = h("div", { class: "chart-body" });
    this.note = h("p", { class: "muted small chart-note" });
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
    const perTrainer = trainers.map((t) => fit(losses?.trainers[t]));
    const points = [validation, ...perTrainer].reduce((n, s) => n + s.filter((v) => v !== null).length, 0);
    this.container.dataset.points = String(points);
    this.note.textContent = points === 0 ? "No losses reported yet: the curve fills in as rounds close." : "";
    const data: uPlot.AlignedData = [rounds, validation, ...perTrainer];
    const key = trainers.join(",");
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    this.destroyPlot();
    this.key = key;
    const series: uPlot.Series[] = [
      { label: "round" },
      {
        label: "validation loss",
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
        scales: { x: { time: false } },
        axes: [
          { label: "round", incrs: [1, 2, 5, 10, 20, 50, 100], values: (_u, ticks) => ticks.map((t) => String(t)) },
          { label: "loss", size: 60 },
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
