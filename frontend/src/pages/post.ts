// #/post : the post-a-task form. Every field of GET /api/template, grouped; defaults from the
// template; client-side validation mirroring the contract (TaskEscrow._validateSpec) with the
// template's `limits`; the data source, training method and model from the template's `sources`
// (only the inputs a choice takes are shown and sent); live escrow; submit = prepare (publish
// artifacts) + postTask from the wallet. The API's refusal of a prepare shows under the form.
import { isAddress } from "viem";
import { api, ApiError, oneLine, type JsonObject, type JsonValue, type Modalities, type Prepared, type Sources, type Template } from "../api";
import { h, replace, spinner } from "../dom";
import { eth, fromLocalInput, humanize, parseEth, relative, shortHex, time, toLocalInput, toWei, weiToEthText } from "../format";
import { describeFailure, reportError, clearError, requestRefresh, type Page } from "../ui";
import { explainError, wallet } from "../wallet";

type Kind = "text" | "int" | "wei" | "float" | "number" | "select" | "addresses" | "list" | "bool" | "deadline";
type Values = Record<string, string | boolean>;

interface FieldDef {
  name: string;
  label: string;
  kind: Kind;
  group: GroupId;
  help?: string | ((s: Sources) => string);
  visible?: (v: Values, s: Sources | undefined) => boolean;
  /** Not a template leaf: offered whenever the template has `sources`; sent only while shown and filled in. */
  formOnly?: boolean;
  placeholder?: (s: Sources) => string;
  optionLabel?: (option: string) => string;
  /** An optional size: left empty, it is not sent (the API then takes the source's own). */
  optional?: boolean;
}

type GroupId = "basics" | "rounds" | "trainers" | "witnesses" | "aggregation" | "money" | "model" | "other";

const GROUPS: { id: GroupId; title: string; blurb: string }[] = [
  { id: "basics", title: "Basics", blurb: "What the run is called and how much verification it gets." },
  { id: "rounds", title: "Rounds & windows", blurb: "DiLoCo rounds, inner steps per round and the chain time windows (seconds)." },
  { id: "trainers", title: "Trainers & stake", blurb: "Who can train, what they bond and what missing rounds costs them." },
  { id: "witnesses", title: "Witnesses", blurb: "The k-of-N committee that aggregates each round and finalizes its state root." },
  { id: "aggregation", title: "Aggregation", blurb: "The robust aggregation rule and the outer optimizer the witnesses apply." },
  { id: "money", title: "Money", blurb: "What you escrow now: the reward pool plus the witness fee budget." },
  { id: "model", title: "Data & model", blurb: "The modality, then where the data comes from (built-in data sets, or your own files on the API server) and the model: for language a new Llama or your pretrained model, for vision a ViT, for time series a PatchTST or PatchTSMixer." },
  { id: "other", title: "Other fields", blurb: "Further template fields, sent as given." },
];

const ROBUST_PARAM: Record<string, string> = {
  trimmed_mean: "aggregation.trim_fraction",
  krum: "aggregation.krum_f",
  multi_krum: "aggregation.krum_f",
  centered_clip: "aggregation.clip_radius",
};

const KNOWN: FieldDef[] = [
  { name: "name", label: "Name", kind: "text", group: "basics", help: "A label for the run (part of the spec hash)." },
  { name: "tier", label: "Tier", kind: "select", group: "basics", help: "Open admits the mean only; verified and confidential admit the robust rules." },
  { name: "rounds", label: "Rounds", kind: "int", group: "rounds", help: "Outer (DiLoCo) rounds." },
  { name: "inner_steps", label: "Inner steps (H)", kind: "int", group: "rounds", help: "AdamW steps each trainer runs per round." },
  { name: "checkpoint_interval", label: "Checkpoint interval", kind: "int", group: "rounds", help: "Inner steps between committed checkpoints (0 = one segment of H steps)." },
  { name: "round_duration_s", label: "Round duration (s)", kind: "int", group: "rounds", help: "Commit deadline after a round opens." },
  { name: "grace_window_s", label: "Grace window (s)", kind: "int", group: "rounds", help: "No quorum by deadline + grace: anyone may carry the round forward." },
  { name: "challenge_window_s", label: "Challenge window (s)", kind: "int", group: "rounds", help: "Time to prove a fault after a round closes, before sealing; at least 600 s (an accused trainer answers a claim within half of it)." },
  { name: "enrollment_deadline", label: "Enrollment deadline", kind: "deadline", group: "rounds", help: "Date and time (your time zone) by which min trainers must enroll; compared with the chain's clock." },
  { name: "min_trainers", label: "Min trainers", kind: "int", group: "trainers" },
  { name: "max_trainers", label: "Max trainers", kind: "int", group: "trainers", help: "At most the number of shards." },
  { name: "trainer_stake_wei", label: "Trainer stake (ETH)", kind: "wei", group: "trainers" },
  { name: "max_missed_rounds", label: "Max missed rounds", kind: "int", group: "trainers", help: "Consecutive misses before eviction." },
  { name: "eviction_slash_bps", label: "Eviction slash (bps)", kind: "int", group: "trainers", help: "Share of the stake slashed on eviction (10000 = all)." },
  { name: "witnesses", label: "Witness addresses (one per line)", kind: "addresses", group: "witnesses" },
  { name: "threshold", label: "Threshold k", kind: "int", group: "witnesses", help: "Matching votes needed to finalize a round (1..N)." },
  { name: "witness_fee_wei", label: "Witness fee per vote (ETH)", kind: "wei", group: "witnesses" },
  { name: "witness_bond_wei", label: "Witness bond (ETH)", kind: "wei", group: "witnesses", help: "Each witness bonds this before voting; slashed on a proven fault." },
  { name: "aggregation.rule", label: "Aggregation rule", kind: "select", group: "aggregation" },
  { name: "aggregation.trim_fraction", label: "Trim fraction", kind: "float", group: "aggregation", help: "Per side, 0 < β < 0.5; trims floor(β·min_trainers) ≥ 1.", visible: (v) => v["aggregation.rule"] === "trimmed_mean" },
  { name: "aggregation.krum_f", label: "Krum f (tolerated Byzantine trainers)", kind: "int", group: "aggregation", help: "Needs min_trainers ≥ 2f + 3.", visible: (v) => v["aggregation.rule"] === "krum" || v["aggregation.rule"] === "multi_krum" },
  { name: "aggregation.clip_radius", label: "Clip radius", kind: "float", group: "aggregation", help: "Centered clipping radius (> 0).", visible: (v) => v["aggregation.rule"] === "centered_clip" },
  { name: "outer_optimizer.lr", label: "Outer learning rate", kind: "float", group: "aggregation", help: "Nesterov outer step (DiLoCo: 0.7)." },
  { name: "outer_optimizer.momentum", label: "Outer momentum", kind: "float", group: "aggregation", help: "0 ≤ μ < 1 (DiLoCo: 0.9)." },
  { name: "gradient_bits", label: "Gradient bits", kind: "select", group: "aggregation", help: "Quantization of the committed outer gradients." },
  { name: "reward_pool_wei", label: "Reward pool (ETH)", kind: "wei", group: "money", help: "Paid to trainers pro rata to accepted work at seal." },
  { name: "challenge_bond_wei", label: "Challenge bond (ETH)", kind: "wei", group: "money", help: "Posted with every challenge; returned plus a bounty when the fault is proven." },
  { name: "modality", label: "Modality", kind: "select", group: "model", formOnly: true, optionLabel: (o) => MODALITY_LABELS[o] ?? humanize(o), help: "What the model learns: text (a Llama), images (a ViT classifier) or time series (a forecaster)." },
  { name: "corpus.type", label: "Data source", kind: "select", group: "model", formOnly: true, optionLabel: (o) => SOURCE_LABELS[o] ?? humanize(o), help: "The built-in corpus, or your files in the API server's data directory." },
  { name: "corpus.path", label: "Path (in the data directory)", kind: "text", group: "model", formOnly: true, visible: (v, s) => takes(v, s, "path"), placeholder: () => "e.g. my-data/train.jsonl", help: pathHelp },
  { name: "corpus.glob", label: "File pattern", kind: "text", group: "model", formOnly: true, visible: (v, s) => takes(v, s, "glob"), placeholder: (s) => s.default_globs.join(", "), help: "Optional: which files of the directory to read, e.g. *.rst (no directories)." },
  { name: "corpus.split", label: "Split", kind: "text", group: "model", formOnly: true, visible: (v, s) => takes(v, s, "split"), placeholder: (s) => s.default_split, help: (s) => `Optional: the dataset's split (default ${s.default_split}).` },
  { name: "method", label: "Training method", kind: "select", group: "model", formOnly: true, optionLabel: (o) => METHOD_LABELS[o] ?? humanize(o), help: "SFT trains prompt/response pairs with the loss on the response only." },
  { name: "corpus.text_field", label: "Text field", kind: "text", group: "model", formOnly: true, visible: (v, s) => takes(v, s, "text_field") && reads(v, s, "text_field"), placeholder: (s) => s.default_text_field, help: (s) => `Optional: the column or JSON key holding the text (default ${s.default_text_field}).` },
  { name: "corpus.prompt_field", label: "Prompt field", kind: "text", group: "model", formOnly: true, visible: (v, s) => takes(v, s, "prompt_field") && reads(v, s, "prompt_field"), placeholder: () => "e.g. prompt", help: "The column or JSON key holding the prompt." },
  { name: "corpus.response_field", label: "Response field", kind: "text", group: "model", formOnly: true, visible: (v, s) => takes(v, s, "response_field") && reads(v, s, "response_field"), placeholder: () => "e.g. response", help: "The column or JSON key holding the response (trained on)." },
  { name: "corpus.shard_count", label: "Shards", kind: "int", group: "model", help: "Token shards (at least max trainers)." },
  { name: "corpus.vocab_size", label: "Vocabulary size", kind: "int", group: "model", help: "BPE tokenizer vocabulary.", visible: (v) => !pretrained(v) },
  { name: "corpus.seq_len", label: "Sequence length", kind: "int", group: "model" },
  { name: "model.source", label: "Model", kind: "select", group: "model", formOnly: true, optionLabel: (o) => MODEL_LABELS[o] ?? humanize(o), help: "A pretrained model brings its weights (the initial state) and its tokenizer." },
  { name: "model.pretrained", label: "Model directory (in the data directory)", kind: "text", group: "model", formOnly: true, visible: (v) => pretrained(v), placeholder: () => "e.g. models/my-llama", help: (s) => `What save_pretrained writes: config.json, safetensors weights, tokenizer.json. ${pathHelp(s)}` },
  { name: "model.lora", label: "LoRA adapters only", kind: "bool", group: "model", formOnly: true, visible: (v, s) => pretrained(v) && s?.lora !== undefined, help: "Train low-rank adapters (peft) on the frozen pretrained weights: the state and every payload hold the adapters only." },
  { name: "model.lora.r", label: "LoRA rank r", kind: "int", group: "model", formOnly: true, visible: (v) => lora(v), help: (s) => `1..${s.lora?.max_r ?? 256}.` },
  { name: "model.lora.alpha", label: "LoRA alpha", kind: "int", group: "model", formOnly: true, visible: (v) => lora(v), help: "Scale of the adapters' update (alpha / r); commonly 2r." },
  { name: "model.lora.target_modules", label: "Adapted modules", kind: "text", group: "model", formOnly: true, visible: (v) => lora(v), placeholder: () => "e.g. q_proj, v_proj", help: "Comma-separated: a module is adapted when its name ends with one of these." },
  { name: "model.family", label: "Model family", kind: "select", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.hidden_size", label: "Hidden size", kind: "int", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.intermediate_size", label: "Intermediate size", kind: "int", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.num_hidden_layers", label: "Layers", kind: "int", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.num_attention_heads", label: "Attention heads", kind: "int", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.num_key_value_heads", label: "Key/value heads", kind: "int", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.max_position_embeddings", label: "Max positions", kind: "int", group: "model", visible: (v) => !pretrained(v) },
  { name: "model.tie_word_embeddings", label: "Tie word embeddings", kind: "bool", group: "model", visible: (v) => !pretrained(v) },
  // Vision (sources.modalities.vision): labelled images and a ViT.
  { name: "image_source.type", label: "Image source", kind: "select", group: "model", formOnly: true, optionLabel: (o) => IMAGE_SOURCE_LABELS[o] ?? humanize(o), help: "The packaged handwritten digits, or your images in the API server's data directory." },
  { name: "image_source.path", label: "Path (in the data directory)", kind: "text", group: "model", formOnly: true, visible: (v, s) => imageTakes(v, s, "path"), placeholder: () => "e.g. images/train.npz or images/", help: (s) => `An .npz with images and labels, or a folder of class folders. ${pathHelp(s)}` },
  { name: "image_source.shard_count", label: "Shards", kind: "int", group: "model", formOnly: true, help: "Image shards (at least max trainers); every 5th image of a class is held out for validation." },
  { name: "image_source.image_size", label: "Image size (pixels)", kind: "int", group: "model", formOnly: true, optional: true, visible: (v, s) => imageTakes(v, s, "image_size"), placeholder: () => "the source's own", help: "Optional: images are resized to this square." },
  { name: "image_source.num_channels", label: "Channels", kind: "int", group: "model", formOnly: true, optional: true, visible: (v, s) => imageTakes(v, s, "num_channels"), placeholder: () => "the images' own", help: "Optional: 1 (grayscale), 3 (RGB) or 4 (RGBA)." },
  { name: "vision_model.patch_size", label: "Patch size", kind: "int", group: "model", formOnly: true, help: "Must divide the image size." },
  { name: "vision_model.hidden_size", label: "Hidden size", kind: "int", group: "model", formOnly: true },
  { name: "vision_model.num_hidden_layers", label: "Layers", kind: "int", group: "model", formOnly: true },
  { name: "vision_model.num_attention_heads", label: "Attention heads", kind: "int", group: "model", formOnly: true },
  { name: "vision_model.intermediate_size", label: "Intermediate size", kind: "int", group: "model", formOnly: true },
  // Time series (sources.modalities.time_series): series, the window plan and a forecaster.
  { name: "series_source.type", label: "Series source", kind: "select", group: "model", formOnly: true, optionLabel: (o) => SERIES_SOURCE_LABELS[o] ?? humanize(o), help: "Data sets packaged with statsmodels, or your CSV/Parquet of (timestamp, id, value) rows." },
  { name: "series_source.datasets", label: "Data sets", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "datasets"), help: (s) => `Comma-separated, of one frequency: ${s.modalities?.time_series.datasets.join(", ") ?? ""}.` },
  { name: "series_source.path", label: "Path (in the data directory)", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "path"), placeholder: () => "e.g. series/sales.csv", help: pathHelp },
  { name: "series_source.timestamp_column", label: "Timestamp column", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "timestamp_column"), placeholder: (s) => s.modalities?.time_series.columns.timestamp_column ?? "", help: "Optional." },
  { name: "series_source.id_column", label: "Series id column", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "id_column"), placeholder: (s) => s.modalities?.time_series.columns.id_column ?? "", help: "Optional: every id is a series." },
  { name: "series_source.value_columns", label: "Value columns", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "value_columns"), placeholder: (s) => s.modalities?.time_series.columns.value_columns.join(", ") ?? "", help: "Optional, comma-separated: the forecast channels." },
  { name: "series_source.covariates", label: "Covariate columns", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "covariates"), placeholder: () => "none, e.g. precipitation, wind", help: "Optional, comma-separated: numeric columns the model reads over each window's context (past covariates); never forecast or scored. Empty or non-finite cells are refused." },
  { name: "series_source.freq", label: "Frequency", kind: "text", group: "model", formOnly: true, visible: (v, s) => seriesTakes(v, s, "freq"), placeholder: () => "inferred, e.g. MS, D, h", help: "Optional: a pandas frequency." },
  { name: "series_source.shard_count", label: "Shards", kind: "int", group: "model", formOnly: true, help: "Window shards (at least max trainers)." },
  { name: "windows.context_length", label: "Context length", kind: "int", group: "model", formOnly: true, help: "Past steps the model reads." },
  { name: "windows.prediction_length", label: "Prediction length", kind: "int", group: "model", formOnly: true, help: "Steps it forecasts." },
  { name: "windows.season_length", label: "Season length", kind: "int", group: "model", formOnly: true, help: "The seasonal-naive baseline's period (MASE's scale), e.g. 12 for monthly data." },
  { name: "windows.validation_windows", label: "Validation windows", kind: "int", group: "model", formOnly: true, help: "Held-out forecasts per series at its end." },
  { name: "windows.validation_stride", label: "Validation stride", kind: "int", group: "model", formOnly: true },
  { name: "windows.train_stride", label: "Training stride", kind: "int", group: "model", formOnly: true },
  { name: "windows.scaling", label: "Scaling", kind: "select", group: "model", formOnly: true, help: "Per-series scaling of the values." },
  { name: "series_model.family", label: "Model family", kind: "select", group: "model", formOnly: true, optionLabel: (o) => SERIES_MODEL_LABELS[o] ?? humanize(o) },
  { name: "series_model.patch_length", label: "Patch length", kind: "int", group: "model", formOnly: true, help: "At most the context length." },
  { name: "series_model.patch_stride", label: "Patch stride", kind: "int", group: "model", formOnly: true },
  { name: "series_model.d_model", label: "Model width (d_model)", kind: "int", group: "model", formOnly: true },
  { name: "series_model.num_hidden_layers", label: "Layers", kind: "int", group: "model", formOnly: true, visible: (v) => v["series_model.family"] === "patchtst" },
  { name: "series_model.num_attention_heads", label: "Attention heads", kind: "int", group: "model", formOnly: true, visible: (v) => v["series_model.family"] === "patchtst" },
  { name: "series_model.ffn_dim", label: "Feed-forward size", kind: "int", group: "model", formOnly: true, visible: (v) => v["series_model.family"] === "patchtst" },
  { name: "series_model.num_layers", label: "Mixer layers", kind: "int", group: "model", formOnly: true, visible: (v) => v["series_model.family"] === "patchtsmixer" },
];

const MODALITY_LABELS: Record<string, string> = { language: "Language (text)", vision: "Vision (image classification)", time_series: "Time series (forecasting)" };
const IMAGE_SOURCE_LABELS: Record<string, string> = { digits: "Handwritten digits (built in)", npz: "NumPy .npz archive", image_folder: "Image folder (a folder per class)" };
const SERIES_SOURCE_LABELS: Record<string, string> = { statsmodels: "statsmodels data sets (built in)", csv: "CSV", parquet: "Parquet" };
const SERIES_MODEL_LABELS: Record<string, string> = { patchtst: "PatchTST", patchtsmixer: "PatchTSMixer" };
/** Prefixes of the fields each modality shows (the rest of the form is shared). */
const MODALITY_PREFIXES: Record<string, string[]> = {
  language: ["corpus.", "model.", "method"],
  vision: ["image_source.", "vision_model."],
  time_series: ["series_source.", "windows.", "series_model."],
};
/** The modality a field belongs to, or null for a shared one. */
function modalityOf(name: string): string | null {
  for (const [modality, prefixes] of Object.entries(MODALITY_PREFIXES)) {
    if (prefixes.some((p) => name === p || name.startsWith(p))) return modality;
  }
  return null;
}
function modality(v: Values): string {
  return String(v.modality || "language");
}
function imageTakes(v: Values, s: Sources | undefined, field: string): boolean {
  return (s?.modalities?.vision.source_fields[String(v["image_source.type"])] ?? []).includes(field);
}
function seriesTakes(v: Values, s: Sources | undefined, field: string): boolean {
  return (s?.modalities?.time_series.source_fields[String(v["series_source.type"])] ?? []).includes(field);
}

// Names of the choices the template's `sources` lists (an unknown one is shown humanized).
const SOURCE_LABELS: Record<string, string> = {
  shakespeare: "Shakespeare (built in)",
  text_dir: "Text files (a directory)",
  jsonl: "JSONL",
  csv: "CSV",
  parquet: "Parquet",
  hf_disk: "Hugging Face dataset (save_to_disk)",
};
const METHOD_LABELS: Record<string, string> = { pretrain: "Pretrain (every token)", sft: "SFT (prompt → response)" };
const MODEL_LABELS: Record<string, string> = { config: "New Llama from a config", pretrained: "Pretrained model directory" };

/** Whether the chosen source type takes `field` (sources.fields). */
function takes(v: Values, s: Sources | undefined, field: string): boolean {
  return (s?.fields[String(v["corpus.type"])] ?? []).includes(field);
}
/** Whether the chosen training method reads the record field `field` (sources.method_fields). */
function reads(v: Values, s: Sources | undefined, field: string): boolean {
  return (s?.method_fields[String(v.method)] ?? []).includes(field);
}
function pretrained(v: Values): boolean {
  return v["model.source"] === "pretrained";
}
function lora(v: Values): boolean {
  return pretrained(v) && v["model.lora"] === true;
}
const MODULE_NAME = /^[A-Za-z0-9_.]{1,128}$/;
function pathHelp(s: Sources): string {
  return `A path ${s.paths}${s.data_dir_configured ? "" : " (this server uses its default, .syncline/data)"}.`;
}

const SPEC_ROOTS = ["corpus", "model"] as const;
const U = (bits: number) => (1n << BigInt(bits)) - 1n;

// ------------------------------------------------------------------ template <-> values

function getPath(template: Template, name: string): JsonValue | undefined {
  const [root, ...rest] = name.split(".");
  let node: JsonValue | undefined =
    root === "corpus" || root === "model" ? (template[root] as JsonValue | undefined) : template.spec[root!];
  for (const key of rest) node = node && typeof node === "object" && !Array.isArray(node) ? (node as JsonObject)[key] : undefined;
  return node;
}

/** Every leaf of the template as a dotted path (arrays are leaves). */
function leaves(prefix: string, value: JsonValue, out: [string, JsonValue][]): void {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [key, child] of Object.entries(value)) leaves(prefix ? `${prefix}.${key}` : key, child, out);
  } else {
    out.push([prefix, value]);
  }
}

function fieldsFor(template: Template): FieldDef[] {
  const all: [string, JsonValue][] = [];
  leaves("", template.spec, all);
  for (const root of SPEC_ROOTS) leaves(root, template[root] ?? {}, all);
  const present = new Set(all.map(([name]) => name));
  const defs = KNOWN.filter((d) => present.has(d.name) || (d.formOnly === true && template.sources !== undefined));
  const known = new Set(defs.map((d) => d.name));
  for (const [name, value] of all) {
    if (known.has(name)) continue;
    const label = humanize(name.split(".").pop() ?? name);
    let kind: Kind = "text";
    if (typeof value === "boolean") kind = "bool";
    else if (typeof value === "number") kind = "number";
    else if (Array.isArray(value)) kind = "list";
    else if (name.endsWith("_wei")) kind = "wei";
    defs.push({ name, label: `${name.includes(".") ? `${label} (${name})` : label}${kind === "wei" ? " (ETH)" : ""}`, kind, group: "other" });
  }
  return defs;
}

function initialValue(def: FieldDef, value: JsonValue | undefined): string | boolean {
  if (def.kind === "bool") return value === true;
  if (value === null || value === undefined) return "";
  // Amounts are typed in ETH (the spec holds wei); deadlines as a local date-time (the spec: seconds).
  if (def.kind === "wei") return weiToEthText(value);
  if (def.kind === "deadline" && typeof value === "number") return toLocalInput(value);
  if (Array.isArray(value)) return value.map((v) => (typeof v === "string" ? v : JSON.stringify(v))).join("\n");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function lines(text: string | boolean | undefined): string[] {
  return String(text ?? "")
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

// ------------------------------------------------------------------ the page

export function postPage(): Page {
  const el = h("div", { class: "page" }, h("div", { class: "page-head" }, h("h1", null, "Post a training task")), h("div", { class: "card" }, spinner("Loading the template…")));
  let template: Template | null = null;
  let fetchedAt = 0;
  let defs: FieldDef[] = [];
  const values: Values = {};
  const inputs = new Map<string, HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>();
  const wrappers = new Map<string, HTMLElement>();
  const hints = new Map<string, HTMLElement>();
  const errorSlots = new Map<string, HTMLElement>();
  let errors = new Map<string, string>();
  const serverErrors = new Map<string, string>();
  let busy = false;
  let timer: number | null = null;

  const escrowEl = h("strong", { class: "escrow", testid: "escrow", "aria-live": "polite" }, "—");
  const escrowDetail = h("div", { class: "muted small" });
  const submit = h("button", { type: "submit", class: "btn btn-primary", testid: "post-submit", disabled: true }, "Publish artifacts & post task");
  const submitNote = h("span", { class: "muted small" });
  const progress = h("ol", { class: "steps", testid: "post-progress", "aria-live": "polite" });
  const resultHost = h("div");
  const preparedHost = h("div");
  // The API's one-line refusal of the last prepare (422: a path outside the data directory, a missing column…).
  const formError = h("div", { class: "form-error", testid: "post-error", role: "alert", hidden: true });

  const limits = () => template?.limits ?? {};
  const sources = (): Sources | undefined => template?.sources;
  const tierRules = (): Record<string, string[]> =>
    limits().tier_rules ?? {
      open: ["mean"],
      verified: ["mean", "trimmed_mean", "coordinate_median", "krum", "multi_krum", "centered_clip"],
      confidential: ["mean", "trimmed_mean", "coordinate_median", "krum", "multi_krum", "centered_clip"],
    };
  const limitNum = (key: string, fallback: number): number => {
    const v = limits()[key];
    return typeof v === "number" ? v : fallback;
  };
  /** [min, max] for a corpus.* / model.* size: the API's bounds, else 1..uint32. */
  const sizeBounds = (name: string): [bigint, bigint] => {
    const [group, key] = name.split(".") as [string, string];
    const table = limits()[group];
    const entry = table && typeof table === "object" && !Array.isArray(table) ? (table as JsonObject)[key] : undefined;
    let lo = 1n;
    let hi = group === "corpus" && key === "shard_count" ? BigInt(limitNum("max_shards", 256)) : U(32);
    if (entry && typeof entry === "object" && !Array.isArray(entry)) {
      const { min, max } = entry as JsonObject;
      if (typeof min === "number") lo = BigInt(min);
      if (typeof max === "number" && BigInt(max) < hi) hi = BigInt(max);
    }
    return [lo, hi];
  };
  // The time the chain's next block will carry: the template's (the API reads the pending block),
  // resynchronized from the chain on every refresh, advancing with this page's clock in between.
  let chainBase: number | null = null;
  const chainNow = () => (chainBase !== null ? chainBase + Math.floor((performance.now() - fetchedAt) / 1000) : Math.floor(Date.now() / 1000));
  function syncChainTime(): void {
    void wallet.chainTime().then(
      (t) => {
        // Never backwards: a node answering with its stale latest block must not undo the API's pending time.
        if (t > chainNow()) {
          chainBase = t;
          fetchedAt = performance.now();
        }
      },
      () => undefined,
    );
  }
  /** The wei of an amount field (typed in ETH), or null while it is not a valid amount. */
  const weiOf = (name: string): bigint | null => {
    const parsed = parseEth(String(values[name] ?? ""));
    return "wei" in parsed ? parsed.wei : null;
  };

  function optionsFor(def: FieldDef): string[] {
    switch (def.name) {
      case "tier":
        return Object.keys(tierRules());
      case "aggregation.rule":
        return tierRules()[String(values.tier)] ?? ["mean"];
      case "gradient_bits":
        return (limits().gradient_bits ?? [8, 16]).map(String);
      case "corpus.type":
        return sources()?.types ?? [];
      case "method":
        return sources()?.methods ?? [];
      case "model.source":
        return sources()?.models ?? [];
      case "modality":
        return sources()?.modalities?.names ?? ["language"];
      case "image_source.type":
        return sources()?.modalities?.vision.source_types ?? [];
      case "series_source.type":
        return sources()?.modalities?.time_series.source_types ?? [];
      case "windows.scaling":
        return sources()?.modalities?.time_series.scalings ?? [];
      case "series_model.family":
        return sources()?.modalities?.time_series.families ?? [];
      case "model.family": {
        const model = limits().model;
        const families = model && typeof model === "object" && !Array.isArray(model) ? (model as JsonObject).families : undefined;
        return Array.isArray(families) && families.length ? families.map(String) : [String(values["model.family"] || "llama")];
      }
      default:
        return [];
    }
  }

  // ---------------------------------------------------------------- validation

  function validate(): Map<string, string> {
    const e = new Map<string, string>();
    const has = (name: string) => inputs.has(name) && isVisible(name);
    const raw = (name: string) => String(values[name] ?? "").trim();
    const int = (name: string): bigint | null => (/^\d+$/.test(raw(name)) ? BigInt(raw(name)) : null);
    const num = (name: string): number | null => {
      const text = raw(name);
      if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) return null;
      const n = Number(text);
      return Number.isFinite(n) ? n : null;
    };
    const needInt = (name: string, min: bigint, max: bigint, what?: string): bigint | null => {
      if (!has(name)) return null;
      const v = int(name);
      if (v === null) {
        e.set(name, "must be a non-negative whole number");
        return null;
      }
      if (v < min || v > max) {
        e.set(name, what ?? (max >= U(64) ? `must be at least ${min}` : `must be within ${min}..${max}`));
        return null;
      }
      return v;
    };
    const maxWindow = BigInt(limitNum("max_window_s", 365 * 24 * 3600));

    for (const def of defs) {
      if (!isVisible(def.name)) continue;
      const text = raw(def.name);
      if (def.kind === "wei") {
        const parsed = parseEth(text);
        if ("error" in parsed) e.set(def.name, parsed.error);
        else if (parsed.wei > U(def.name === "reward_pool_wei" ? 256 : 128)) e.set(def.name, "too large for the contract's field");
      } else if (def.kind === "number" && num(def.name) === null) e.set(def.name, "must be a number");
      else if (def.kind === "int" && int(def.name) === null && !(def.optional && text === "")) e.set(def.name, "must be a non-negative whole number");
      else if (def.kind === "text" && def.name === "name" && !text) e.set(def.name, "give the run a name");
    }

    const rounds = needInt("rounds", 1n, U(32), "at least 1 round");
    const inner = needInt("inner_steps", 1n, U(32), "at least 1 inner step");
    const checkpoint = needInt("checkpoint_interval", 0n, U(32));
    if (checkpoint !== null && inner !== null && checkpoint > inner) e.set("checkpoint_interval", `must be within 0..inner_steps (${inner})`);
    needInt("round_duration_s", 1n, maxWindow, `must be within 1..${maxWindow} s`);
    needInt("grace_window_s", 0n, maxWindow, `must be within 0..${maxWindow} s`);
    const minChallenge = BigInt(limitNum("min_challenge_window_s", 600));
    needInt("challenge_window_s", minChallenge, maxWindow, `must be within ${minChallenge}..${maxWindow} s: an accused trainer answers a claim within half of it`);
    if (has("enrollment_deadline")) {
      const ts = fromLocalInput(raw("enrollment_deadline"));
      const deadline = ts === null ? null : BigInt(ts);
      const now = BigInt(chainNow());
      if (deadline === null) e.set("enrollment_deadline", "pick a date and a time");
      else if (deadline <= now + DEADLINE_MARGIN_S) e.set("enrollment_deadline", `must be at least ${DEADLINE_MARGIN_S} s after the chain's current time (${time(Number(now))}): the transaction takes time to be mined`);
      else if (deadline - now > maxWindow) e.set("enrollment_deadline", "at most 365 days from now");
    }

    const maxTrainers = BigInt(limitNum("max_trainers", 64));
    const minT = needInt("min_trainers", 1n, maxTrainers, `must be within 1..${maxTrainers}`);
    const maxT = needInt("max_trainers", 1n, maxTrainers, `must be within 1..${maxTrainers}`);
    if (minT !== null && maxT !== null && minT > maxT) {
      e.set("max_trainers", `must be at least min trainers (${minT})`);
      e.set("min_trainers", `must not exceed max trainers (${maxT})`);
    }
    const [minShards, maxShards] = sizeBounds("corpus.shard_count");
    const shards = needInt("corpus.shard_count", minShards, maxShards, `must be within ${minShards}..${maxShards}`);
    if (shards !== null && maxT !== null && maxT > shards) e.set("corpus.shard_count", `need max trainers (${maxT}) ≤ shards`);
    const stake = has("trainer_stake_wei") ? weiOf("trainer_stake_wei") : null;
    if (stake === 0n) e.set("trainer_stake_wei", "must be positive");
    const bond = has("witness_bond_wei") ? weiOf("witness_bond_wei") : null;
    if (bond === 0n) e.set("witness_bond_wei", "must be positive: every witness puts a bond at stake before it votes");
    needInt("max_missed_rounds", 0n, U(16));
    const maxSlash = BigInt(limitNum("max_slash_bps", 10_000));
    needInt("eviction_slash_bps", 0n, maxSlash, `must be within 0..${maxSlash} bps`);

    // Witnesses: valid, non-zero, distinct addresses, not the sponsor's own; 0 < k <= N <= 32.
    const maxWitnesses = limitNum("max_witnesses", 32);
    const witnesses = has("witnesses") ? lines(values.witnesses) : [];
    if (has("witnesses")) {
      const seen = new Set<string>();
      for (const w of witnesses) {
        if (!isAddress(w, { strict: false })) {
          e.set("witnesses", `${shortHex(w, 12, 4)} is not a valid address`);
          break;
        }
        if (/^0x0{40}$/i.test(w)) {
          e.set("witnesses", "the zero address cannot be a witness");
          break;
        }
        if (seen.has(w.toLowerCase())) {
          e.set("witnesses", `duplicate address ${shortHex(w)}`);
          break;
        }
        if (wallet.selected && w.toLowerCase() === wallet.selected.toLowerCase()) {
          e.set("witnesses", `the sponsor ${shortHex(w)} (the selected account) cannot be a witness of its own task`);
          break;
        }
        seen.add(w.toLowerCase());
      }
      if (!e.has("witnesses") && witnesses.length === 0) e.set("witnesses", "at least one witness");
      if (!e.has("witnesses") && witnesses.length > maxWitnesses) e.set("witnesses", `at most ${maxWitnesses} witnesses`);
    }
    if (has("threshold")) {
      const k = int("threshold");
      const n = BigInt(witnesses.length);
      if (k === null || k < 1n || k > n || k > 255n) e.set("threshold", `must be within 1..${n} (the witness count)`);
    }

    const rule = String(values["aggregation.rule"] ?? "mean");
    const tier = String(values.tier ?? "open");
    if (has("aggregation.rule") && !(tierRules()[tier] ?? []).includes(rule)) e.set("aggregation.rule", `tier ${tier} does not admit ${humanize(rule)}`);
    const n = minT ?? 0n;
    if (rule === "trimmed_mean" && has("aggregation.trim_fraction")) {
      const beta = num("aggregation.trim_fraction");
      const bps = beta === null ? null : BigInt(Math.round(beta * 10_000));
      if (bps === null || bps <= 0n || bps >= 5_000n) e.set("aggregation.trim_fraction", "must be within 0 < β < 0.5");
      else if (minT !== null) {
        const trimmed = (bps * n) / 10_000n;
        if (trimmed < 1n || 2n * trimmed >= n) e.set("aggregation.trim_fraction", `trims ${trimmed} per side of min trainers (${n}): need ≥ 1 and 2t < n`);
      }
    }
    if ((rule === "krum" || rule === "multi_krum") && has("aggregation.krum_f")) {
      const f = needInt("aggregation.krum_f", 0n, U(32));
      if (f !== null && minT !== null && n < 2n * f + 3n) e.set("aggregation.krum_f", `needs min trainers ≥ 2f + 3 = ${2n * f + 3n}`);
    }
    if (rule === "centered_clip" && has("aggregation.clip_radius")) {
      const r = num("aggregation.clip_radius");
      if (r === null || Math.round(r * 1e6) <= 0 || Math.round(r * 1e6) >= 2 ** 32) e.set("aggregation.clip_radius", "must be positive (at least 1e-6)");
    }
    if (has("outer_optimizer.lr")) {
      const lr = num("outer_optimizer.lr");
      if (lr === null || Math.round(lr * 1e6) <= 0 || Math.round(lr * 1e6) >= 2 ** 32) e.set("outer_optimizer.lr", "need 1e-6 ≤ lr < 4294");
    }
    if (has("outer_optimizer.momentum")) {
      const m = num("outer_optimizer.momentum");
      if (m === null || m < 0 || m >= 1) e.set("outer_optimizer.momentum", "need 0 ≤ momentum < 1");
    }
    if (has("gradient_bits") && !optionsFor({ name: "gradient_bits" } as FieldDef).includes(raw("gradient_bits"))) {
      e.set("gradient_bits", "not a supported width");
    }
    const pool = has("reward_pool_wei") ? weiOf("reward_pool_wei") : null;
    if (pool === 0n) e.set("reward_pool_wei", "must be positive");
    // postTask's deterrence rule: stake × spot-check rate ≥ 2 × R, R = ceil(pool / (rounds × min trainers));
    // the spec's rate defaults to the least that satisfies it, at most 1 (every submission checked).
    if (pool && stake && rounds && minT && !e.has("trainer_stake_wei")) {
      const reward = (pool + rounds * minT - 1n) / (rounds * minT);
      if (stake < 2n * reward) e.set("trainer_stake_wei", `does not deter: a submission earns ${eth(reward)} and even checking every one needs a stake of at least ${eth(2n * reward)} (or a smaller pool)`);
    }

    // Vision and time series: their own source, model and window fields (sources.modalities).
    const src = sources();
    const chosen = modality(values);
    if (src?.modalities && chosen !== "language") {
      if (!src.modalities.names.includes(chosen)) e.set("modality", `must be one of ${src.modalities.names.join(", ")}`);
      else if (chosen === "vision") validateVision(e, src.modalities.vision, needInt, int, raw, maxT);
      else validateSeries(e, src.modalities.time_series, needInt, int, raw, maxT);
      return e;
    }

    // Data source, method and model directory: the fields the chosen source type and method take
    // (sources.fields / sources.method_fields); the files themselves are checked by the API.
    if (src) {
      const type = raw("corpus.type");
      const typeName = SOURCE_LABELS[type] ?? type;
      if (!src.types.includes(type)) e.set("corpus.type", `must be one of ${src.types.join(", ")}`);
      if (has("corpus.path") && !raw("corpus.path")) e.set("corpus.path", `a ${typeName} source needs a path in the API's data directory`);
      const glob = raw("corpus.glob");
      if (has("corpus.glob") && glob && (/[\/\\]/.test(glob) || glob === "." || glob === "..")) e.set("corpus.glob", "a file-name pattern such as *.rst (no directories)");
      const method = raw("method");
      const required = src.method_requires[method] ?? [];
      if (!src.methods.includes(method)) e.set("method", `must be one of ${src.methods.join(", ")}`);
      else if (required.some((f) => !takes(values, src, f))) {
        const kinds = src.types.filter((t) => required.every((f) => takes({ "corpus.type": t }, src, f)));
        e.set("method", `${METHOD_LABELS[method] ?? method} needs ${required.join(" and ")}: pick a ${kinds.map((t) => SOURCE_LABELS[t] ?? t).join(", ")} source`);
      }
      for (const field of required) {
        const name = `corpus.${field}`;
        if (has(name) && !raw(name)) e.set(name, `${METHOD_LABELS[method] ?? method} needs the ${humanize(field).toLowerCase()} (a column or JSON key)`);
      }
      if (has("corpus.prompt_field") && has("corpus.response_field") && raw("corpus.prompt_field") && raw("corpus.prompt_field") === raw("corpus.response_field")) {
        e.set("corpus.response_field", "must differ from the prompt field");
      }
      if (has("model.pretrained") && !raw("model.pretrained")) e.set("model.pretrained", "the model's directory in the API's data directory");
      if (lora(values) && src.lora) {
        needInt("model.lora.r", 1n, BigInt(src.lora.max_r), `must be within 1..${src.lora.max_r}`);
        needInt("model.lora.alpha", 1n, BigInt(src.lora.max_alpha), `must be within 1..${src.lora.max_alpha}`);
        const targets = lines(raw("model.lora.target_modules"));
        if (targets.length === 0) e.set("model.lora.target_modules", "name at least one module, e.g. q_proj, v_proj");
        else if (targets.length > src.lora.max_targets) e.set("model.lora.target_modules", `at most ${src.lora.max_targets} modules`);
        else if (targets.some((t) => !MODULE_NAME.test(t))) e.set("model.lora.target_modules", "module names are letters, digits, _ and . (e.g. q_proj)");
      }
    }

    // Corpus and model sizes: the API's bounds (limits.corpus / limits.model) and the Llama rules.
    for (const name of ["corpus.shard_count", "corpus.vocab_size", "corpus.seq_len", "model.hidden_size", "model.intermediate_size", "model.num_hidden_layers", "model.num_attention_heads", "model.num_key_value_heads", "model.max_position_embeddings"]) {
      if (e.has(name)) continue;
      const [lo, hi] = sizeBounds(name);
      needInt(name, lo, hi, hi >= U(32) ? `must be at least ${lo}` : `must be within ${lo}..${hi}`);
    }
    if (pretrained(values)) return e; // a pretrained model's sizes are its config's (checked by the API)
    const hidden = e.has("model.hidden_size") ? null : int("model.hidden_size");
    const heads = e.has("model.num_attention_heads") ? null : int("model.num_attention_heads");
    const kv = e.has("model.num_key_value_heads") ? null : int("model.num_key_value_heads");
    if (hidden && heads && hidden % heads !== 0n) e.set("model.hidden_size", `must be a multiple of the attention heads (${heads})`);
    else if (hidden && heads && (hidden / heads) % 2n !== 0n) e.set("model.hidden_size", `the head size hidden/heads = ${hidden / heads} must be even`);
    if (heads && kv && heads % kv !== 0n) e.set("model.num_key_value_heads", `must divide the attention heads (${heads})`);
    const positions = e.has("model.max_position_embeddings") ? null : int("model.max_position_embeddings");
    const seqLen = e.has("corpus.seq_len") ? null : int("corpus.seq_len");
    if (positions !== null && seqLen !== null && positions < seqLen) e.set("model.max_position_embeddings", `must be at least the sequence length (${seqLen})`);
    // The model's total size (the API checks the same count: limits.model.max_parameters).
    const count = parameterCount(e);
    const maxParams = modelLimit("max_parameters");
    if (count !== null && maxParams !== null && count > maxParams) {
      e.set("model.num_hidden_layers", `the model would have ${count.toLocaleString("en-US")} parameters; at most ${maxParams.toLocaleString("en-US")}`);
    }
    return e;
  }

  type NeedInt = (name: string, min: bigint, max: bigint, what?: string) => bigint | null;
  type IntOf = (name: string) => bigint | null;
  type RawOf = (name: string) => string;

  /** A bounded size of `bounds` (sources.modalities.*.bounds): required, or optional when empty. */
  function sized(e: Map<string, string>, bounds: Modalities["vision"]["bounds"], name: string, needInt: NeedInt, raw: RawOf, optional = false): bigint | null {
    if (!isVisible(name) || e.has(name) || (optional && raw(name) === "")) return null;
    const b = bounds[name.split(".").pop()!];
    const [lo, hi] = b ? [BigInt(b.min), BigInt(b.max)] : [1n, U(32)];
    return needInt(name, lo, hi, `must be within ${lo}..${hi}`);
  }

  function shardsFor(e: Map<string, string>, name: string, shards: bigint | null, maxT: bigint | null): void {
    if (shards !== null && maxT !== null && maxT > shards) e.set(name, `need max trainers (${maxT}) ≤ shards`);
  }

  function validateVision(e: Map<string, string>, m: Modalities["vision"], needInt: NeedInt, _int: IntOf, raw: RawOf, maxT: bigint | null): void {
    const type = raw("image_source.type");
    if (!m.source_types.includes(type)) e.set("image_source.type", `must be one of ${m.source_types.join(", ")}`);
    if (isVisible("image_source.path") && !raw("image_source.path")) e.set("image_source.path", `a ${IMAGE_SOURCE_LABELS[type] ?? type} source needs a path in the API's data directory`);
    shardsFor(e, "image_source.shard_count", sized(e, m.bounds, "image_source.shard_count", needInt, raw), maxT);
    const size = sized(e, m.bounds, "image_source.image_size", needInt, raw, true);
    if (isVisible("image_source.num_channels") && raw("image_source.num_channels") !== "" && !e.has("image_source.num_channels") && !m.channels.map(String).includes(raw("image_source.num_channels"))) {
      e.set("image_source.num_channels", `must be one of ${m.channels.join(", ")}`);
    }
    const patch = sized(e, m.bounds, "vision_model.patch_size", needInt, raw);
    const hidden = sized(e, m.bounds, "vision_model.hidden_size", needInt, raw);
    sized(e, m.bounds, "vision_model.num_hidden_layers", needInt, raw);
    const heads = sized(e, m.bounds, "vision_model.num_attention_heads", needInt, raw);
    sized(e, m.bounds, "vision_model.intermediate_size", needInt, raw);
    if (size !== null && patch !== null && size % patch !== 0n) e.set("vision_model.patch_size", `must divide the image size (${size})`);
    if (hidden !== null && heads !== null && hidden % heads !== 0n) e.set("vision_model.hidden_size", `must be a multiple of the attention heads (${heads})`);
  }

  function validateSeries(e: Map<string, string>, m: Modalities["time_series"], needInt: NeedInt, _int: IntOf, raw: RawOf, maxT: bigint | null): void {
    const type = raw("series_source.type");
    if (!m.source_types.includes(type)) e.set("series_source.type", `must be one of ${m.source_types.join(", ")}`);
    if (isVisible("series_source.datasets")) {
      const sets = lines(raw("series_source.datasets"));
      const unknown = sets.find((d) => !m.datasets.includes(d));
      if (sets.length === 0) e.set("series_source.datasets", `name at least one of ${m.datasets.join(", ")}`);
      else if (unknown !== undefined) e.set("series_source.datasets", `${unknown} is not one of ${m.datasets.join(", ")}`);
      else if (new Set(sets).size !== sets.length) e.set("series_source.datasets", "name each data set once");
    }
    if (isVisible("series_source.path") && !raw("series_source.path")) e.set("series_source.path", `a ${SERIES_SOURCE_LABELS[type] ?? type} source needs a path in the API's data directory`);
    if (isVisible("series_source.value_columns") && lines(raw("series_source.value_columns")).length > 64) e.set("series_source.value_columns", "at most 64 columns");
    if (isVisible("series_source.covariates")) {
      const covariates = lines(raw("series_source.covariates"));
      const valueColumns = lines(raw("series_source.value_columns"));
      if (covariates.length > 32) e.set("series_source.covariates", "at most 32 covariates");
      else if (new Set(covariates).size !== covariates.length) e.set("series_source.covariates", "name each covariate once");
      else if (covariates.some((c) => valueColumns.includes(c))) e.set("series_source.covariates", "a covariate column cannot also be a value column");
    }
    shardsFor(e, "series_source.shard_count", sized(e, m.bounds, "series_source.shard_count", needInt, raw), maxT);
    const context = sized(e, m.bounds, "windows.context_length", needInt, raw);
    sized(e, m.bounds, "windows.prediction_length", needInt, raw);
    sized(e, m.bounds, "windows.season_length", needInt, raw);
    for (const name of ["windows.validation_windows", "windows.validation_stride", "windows.train_stride"]) sized(e, m.bounds, name, needInt, raw);
    if (!m.scalings.includes(raw("windows.scaling"))) e.set("windows.scaling", `must be one of ${m.scalings.join(", ")}`);
    const family = raw("series_model.family");
    if (!m.families.includes(family)) e.set("series_model.family", `must be one of ${m.families.join(", ")}`);
    const patch = sized(e, m.bounds, "series_model.patch_length", needInt, raw);
    sized(e, m.bounds, "series_model.patch_stride", needInt, raw);
    const width = sized(e, m.bounds, "series_model.d_model", needInt, raw);
    const heads = sized(e, m.bounds, "series_model.num_attention_heads", needInt, raw);
    sized(e, m.bounds, "series_model.ffn_dim", needInt, raw);
    for (const name of ["series_model.num_hidden_layers", "series_model.num_layers"]) {
      if (!isVisible(name) || e.has(name)) continue;
      const b = m.bounds.num_hidden_layers;
      needInt(name, BigInt(b?.min ?? 1), BigInt(b?.max ?? 48), `must be within ${b?.min ?? 1}..${b?.max ?? 48}`);
    }
    if (patch !== null && context !== null && patch > context) e.set("series_model.patch_length", `must be at most the context length (${context})`);
    if (width !== null && heads !== null && width % heads !== 0n) e.set("series_model.d_model", `must be a multiple of the attention heads (${heads})`);
  }

  function modelLimit(key: string): bigint | null {
    const model = limits().model;
    const v = model && typeof model === "object" && !Array.isArray(model) ? (model as JsonObject)[key] : undefined;
    return typeof v === "number" ? BigInt(v) : null;
  }

  /** A Llama's parameters as the API counts them (llama_parameter_count), or null while a size is invalid. */
  function parameterCount(errors: Map<string, string>): bigint | null {
    const names = ["corpus.vocab_size", "model.hidden_size", "model.intermediate_size", "model.num_hidden_layers", "model.num_attention_heads", "model.num_key_value_heads"];
    if (names.some((n) => errors.has(n) || !/^\d+$/.test(String(values[n] ?? "").trim()))) return null;
    const [vocab, hidden, inter, layers, heads, kv] = names.map((n) => BigInt(String(values[n]).trim())) as [bigint, bigint, bigint, bigint, bigint, bigint];
    if (heads === 0n) return null;
    const kvWidth = kv * (hidden / heads);
    const perLayer = 2n * hidden * hidden + 2n * hidden * kvWidth + 3n * hidden * inter + 2n * hidden;
    const tied = values["model.tie_word_embeddings"] !== false;
    return vocab * hidden * (tied ? 1n : 2n) + layers * perLayer + hidden;
  }

  function isVisible(name: string): boolean {
    const owner = modalityOf(name);
    if (owner !== null && sources()?.modalities !== undefined && owner !== modality(values)) return false;
    const def = defs.find((d) => d.name === name);
    return def?.visible ? def.visible(values, sources()) : true;
  }

  // ---------------------------------------------------------------- escrow

  function escrow(): { total: bigint; pool: bigint; fees: bigint; fee: bigint; k: bigint; rounds: bigint } | null {
    const pool = weiOf("reward_pool_wei");
    const fee = values.witness_fee_wei === undefined ? 0n : weiOf("witness_fee_wei");
    const k = toWei(String(values.threshold ?? ""));
    const rounds = toWei(String(values.rounds ?? ""));
    if (pool === null || fee === null || k === null || rounds === null) return null;
    const fees = fee * k * rounds;
    return { total: pool + fees, pool, fees, fee, k, rounds };
  }

  // ---------------------------------------------------------------- rendering

  function update(): void {
    // Rule options follow the tier; keep the rule when the tier admits it.
    const ruleSelect = inputs.get("aggregation.rule") as HTMLSelectElement | undefined;
    if (ruleSelect) {
      const allowed = optionsFor({ name: "aggregation.rule" } as FieldDef);
      const current = Array.from(ruleSelect.options).map((o) => o.value);
      if (allowed.join() !== current.join()) {
        const keep = allowed.includes(String(values["aggregation.rule"])) ? String(values["aggregation.rule"]) : allowed[0] ?? "mean";
        replace(ruleSelect, ...allowed.map((r) => h("option", { value: r }, humanize(r))));
        ruleSelect.value = keep;
        values["aggregation.rule"] = keep;
      }
    }
    for (const def of defs) {
      const wrap = wrappers.get(def.name);
      if (wrap) wrap.hidden = !isVisible(def.name);
    }
    errors = validate();
    for (const def of defs) {
      const slot = errorSlots.get(def.name);
      const input = inputs.get(def.name);
      if (!slot || !input) continue;
      // The form's own check first; else the API's refusal that named this field (until it is edited).
      const message = errors.get(def.name) ?? serverErrors.get(def.name);
      const testid = errors.has(def.name) ? `field-error-${def.name}` : `field-server-error-${def.name}`;
      const existing = slot.firstElementChild as HTMLElement | null;
      if (message) {
        if (existing && existing.dataset.testid === testid) existing.textContent = message;
        else replace(slot, h("div", { class: "field-error", id: `err-${fieldId(def.name)}`, testid }, message));
        input.setAttribute("aria-invalid", "true");
      } else {
        existing?.remove();
        input.removeAttribute("aria-invalid");
      }
      const hint = hints.get(def.name);
      if (hint && def.kind === "wei") {
        const wei = weiOf(def.name);
        hint.textContent = wei === null ? "" : `= ${wei.toString()} wei`;
        hint.dataset.wei = wei === null ? "" : wei.toString();
      }
      if (hint && def.kind === "deadline") {
        const ts = fromLocalInput(String(values[def.name] ?? ""));
        hint.textContent = ts !== null ? `${relative(ts - chainNow())} · chain time now ${time(chainNow())}` : "";
        hint.dataset.ts = ts === null ? "" : String(ts);
      }
    }
    const e = escrow();
    if (e && !errors.has("reward_pool_wei") && !errors.has("witness_fee_wei")) {
      escrowEl.textContent = eth(e.total);
      escrowEl.title = `${e.total} wei`;
      escrowEl.dataset.wei = e.total.toString();
      escrowDetail.textContent = `reward pool ${eth(e.pool)} + witness fee budget ${eth(e.fees)} (fee ${eth(e.fee)} × k ${e.k} × ${e.rounds} rounds), as postTask computes it`;
    } else {
      escrowEl.textContent = "—";
      delete escrowEl.dataset.wei;
      escrowDetail.textContent = "fix the money fields to see the escrow";
    }
    updateSubmit();
  }

  function updateSubmit(): void {
    const reason = busy ? "working…" : errors.size > 0 ? `fix ${errors.size} field${errors.size > 1 ? "s" : ""} first` : wallet.notReadyReason;
    submit.disabled = reason !== null || !template;
    submitNote.textContent = reason && !busy ? reason : wallet.ready ? `from ${wallet.label(wallet.selected!)} ${wallet.selected}` : "";
  }

  function fieldId(name: string): string {
    return `f-${name.replace(/[^a-zA-Z0-9_-]/g, "-")}`;
  }

  function control(def: FieldDef): HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement {
    const id = fieldId(def.name);
    const common = { id, name: def.name, "aria-describedby": `hint-${id} err-${id}` };
    const value = values[def.name];
    if (def.kind === "select") {
      const options = optionsFor(def);
      const current = String(value ?? "");
      if (current && !options.includes(current)) options.unshift(current);
      const label = def.optionLabel ?? ((o: string) => (def.name === "gradient_bits" ? `${o} bits` : humanize(o)));
      const select = h("select", common, ...options.map((o) => h("option", { value: o }, label(o))));
      select.value = current || options[0] || "";
      values[def.name] = select.value;
      return select;
    }
    if (def.kind === "addresses" || def.kind === "list") {
      return h("textarea", { ...common, rows: 4, spellcheck: "false", class: "mono", value: String(value ?? "") });
    }
    if (def.kind === "bool") {
      return h("input", { ...common, type: "checkbox", checked: value === true });
    }
    if (def.kind === "deadline") {
      return h("input", { ...common, type: "datetime-local", step: 1, class: "mono", value: String(value ?? "") });
    }
    return h("input", {
      ...common,
      type: "text",
      inputmode: def.kind === "int" ? "numeric" : def.kind === "float" || def.kind === "number" || def.kind === "wei" ? "decimal" : undefined,
      autocomplete: "off",
      spellcheck: "false",
      class: def.kind === "wei" ? "mono" : undefined,
      placeholder: def.kind === "wei" ? "ETH, e.g. 1.5" : def.placeholder && sources() ? def.placeholder(sources()!) : undefined,
      value: String(value ?? ""),
    });
  }

  function helpText(def: FieldDef): string | undefined {
    if (typeof def.help !== "function") return def.help;
    const s = sources();
    return s ? def.help(s) : undefined;
  }

  function fieldView(def: FieldDef): HTMLElement {
    const input = control(def);
    inputs.set(def.name, input);
    const onChange = () => {
      values[def.name] = input instanceof HTMLInputElement && input.type === "checkbox" ? input.checked : input.value;
      serverErrors.delete(def.name);
      update();
    };
    input.addEventListener("input", onChange);
    input.addEventListener("change", onChange);
    const id = fieldId(def.name);
    const hint = h("span", { class: "hint", id: `hint-${id}` });
    hints.set(def.name, hint);
    const slot = h("div", { class: "error-slot" });
    errorSlots.set(def.name, slot);
    const extra: HTMLElement[] = [];
    if (def.kind === "deadline") {
      for (const [label, seconds] of [["+10 min", 600], ["+1 h", 3600], ["+1 day", 86400]] as const) {
        extra.push(
          h("button", {
            type: "button",
            class: "btn btn-small",
            onclick: () => {
              input.value = toLocalInput(chainNow() + seconds);
              onChange();
            },
          }, label),
        );
      }
    }
    const wrap = h(
      "div",
      { class: `field field-${def.kind}`, "data-field": def.name },
      def.kind === "bool"
        ? h("label", { for: id, class: "check" }, input, " ", def.label)
        : [h("label", { for: id }, def.label), h("div", { class: "control" }, input, ...extra)],
      h("div", { class: "field-foot" }, hint, helpText(def) ? h("span", { class: "help" }, helpText(def)) : null),
      slot,
    );
    wrappers.set(def.name, wrap);
    return wrap;
  }

  function buildBody(): JsonObject {
    const t = template!;
    const body = {
      spec: structuredClone(t.spec) as JsonObject,
      corpus: structuredClone(t.corpus ?? {}) as JsonObject,
      model: structuredClone(t.model ?? {}) as JsonObject,
    };
    const rule = String(values["aggregation.rule"] ?? "mean");
    const usedParam = ROBUST_PARAM[rule];
    const chosen = modality(values);
    for (const def of defs) {
      if (def.name === "model.source" || def.name.startsWith("model.lora")) continue; // the model's shape: below
      const owner = modalityOf(def.name);
      if (def.name === "modality" || (owner !== null && owner !== "language")) continue; // the other modalities: below
      const shown = isVisible(def.name);
      // A source, method or model input the current choice does not take (or an optional one
      // left empty) is not sent: the API refuses fields a source type does not take.
      if (def.formOnly && (!shown || String(values[def.name] ?? "").trim() === "")) continue;
      const parts = def.name.split(".");
      let target: JsonObject = body.spec;
      if (parts[0] === "corpus" || parts[0] === "model") {
        target = body[parts[0]];
        parts.shift();
      }
      for (const key of parts.slice(0, -1)) {
        const next = target[key];
        if (!next || typeof next !== "object" || Array.isArray(next)) target[key] = {};
        target = target[key] as JsonObject;
      }
      const leaf = parts[parts.length - 1]!;
      if (!shown) {
        // Hidden: a rule parameter the chosen rule does not use is sent as 0; any other field
        // keeps the template's value (a pretrained model hides the Llama sizes and the vocabulary).
        if (def.name in PARAM_NAMES) target[leaf] = 0;
        continue;
      }
      const raw = values[def.name];
      const text = String(raw ?? "").trim();
      let value: JsonValue;
      switch (def.kind) {
        case "bool":
          value = raw === true;
          break;
        case "wei":
          value = (parseEth(text) as { wei: bigint }).wei.toString();
          break;
        case "deadline":
          value = fromLocalInput(text) ?? 0;
          break;
        case "int": {
          const big = BigInt(text || "0");
          value = big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big.toString();
          break;
        }
        case "float":
        case "number":
          value = Number(text);
          break;
        case "addresses":
          value = lines(raw);
          break;
        case "list":
          value = lines(raw).map((item) => {
            try {
              return JSON.parse(item) as JsonValue;
            } catch {
              return item;
            }
          });
          break;
        case "select":
          value = def.name === "gradient_bits" ? Number(text) : text;
          break;
        default:
          value = typeof getPath(t, def.name) === "number" && text !== "" && Number.isFinite(Number(text)) ? Number(text) : String(raw ?? "");
      }
      // Rule parameters the chosen rule does not use are sent as 0.
      if (def.name in PARAM_NAMES && def.name !== usedParam) value = 0;
      target[leaf] = value;
    }
    if (chosen === "vision") return { modality: chosen, spec: body.spec, ...visionBody() };
    if (chosen === "time_series") return { modality: chosen, spec: body.spec, ...seriesBody() };
    if (pretrained(values)) {
      body.model = { pretrained: String(values["model.pretrained"] ?? "").trim() };
      if (lora(values)) {
        body.model.lora = {
          r: Number(String(values["model.lora.r"] ?? "").trim()),
          alpha: Number(String(values["model.lora.alpha"] ?? "").trim()),
          target_modules: lines(values["model.lora.target_modules"]),
        };
      }
    }
    return body;
  }

  /** The shown, filled-in fields under `prefix` as an object (ints as numbers, lists split). */
  function section(prefix: string, lists: string[] = []): JsonObject {
    const out: JsonObject = {};
    for (const def of defs) {
      if (!def.name.startsWith(prefix) || !isVisible(def.name)) continue;
      const key = def.name.slice(prefix.length);
      const text = String(values[def.name] ?? "").trim();
      if (text === "") continue; // an optional field left empty: the API's default
      out[key] = lists.includes(key) ? lines(text) : def.kind === "int" ? Number(text) : text;
    }
    return out;
  }

  function visionBody(): JsonObject {
    const family = sources()?.modalities?.vision.families[0] ?? "vit";
    return { image_source: section("image_source."), model: { family, ...section("vision_model.") } };
  }

  function seriesBody(): JsonObject {
    return { series_source: section("series_source.", ["datasets", "value_columns", "covariates"]), windows: section("windows."), model: section("series_model.") };
  }

  /** The form field an API refusal names: `model.x` is the chosen modality's model field. */
  function refusedField(path: string): string {
    const chosen = modality(values);
    if (path === "spec.method") return "method";
    if (chosen === "vision" && path.startsWith("model.")) return `vision_model.${path.slice(6).replace(/^config\./, "")}`;
    if (chosen === "time_series" && path.startsWith("model.")) return `series_model.${path.slice(6).replace(/^config\./, "")}`;
    return path;
  }

  function showFormError(message: string | null): void {
    serverErrors.clear();
    // A refusal that names a field ("corpus.path 'x' does not exist…", "model.pretrained …") shows there too.
    const named = message === null ? null : /^(corpus\.[a-z_]+|model\.pretrained|model\.lora\.(?:r|alpha|target_modules)|spec\.method|image_source\.[a-z_]+|series_source\.[a-z_]+|windows\.[a-z_]+|model\.(?:config\.)?[a-z_]+)\b/.exec(message);
    const field = named ? refusedField(named[1]!) : null;
    if (message !== null && field !== null && inputs.has(field)) serverErrors.set(field, oneLine(message));
    update();
    formError.hidden = message === null;
    replace(formError, ...(message === null ? [] : [h("strong", null, "The API refused the task: "), h("span", { testid: "post-error-message" }, oneLine(message))]));
    if (message !== null) formError.scrollIntoView({ block: "nearest" });
  }

  function step(text: string, state: "pending" | "done" | "failed" = "pending"): HTMLLIElement {
    const li = h("li", { "data-state": state }, state === "pending" ? spinner(text) : text);
    progress.appendChild(li);
    return li;
  }
  function settle(li: HTMLLIElement, text: string, state: "done" | "failed"): void {
    li.dataset.state = state;
    replace(li, `${state === "done" ? "✓" : "✗"} ${text}`);
  }

  async function onSubmit(event: Event): Promise<void> {
    event.preventDefault();
    update();
    if (submit.disabled || !template) return;
    busy = true;
    updateSubmit();
    clearError();
    replace(progress);
    replace(resultHost);
    replace(preparedHost);
    showFormError(null);
    // Only a language task has a tokenizer; the other modalities publish shards, state and spec.
    const artifacts = modality(values) === "language" ? "tokenizer, shards" : "shards";
    let current = step(`publishing artifacts… (${artifacts}, validation shard, initial state, spec)`);
    let preparing = true;
    try {
      const prepared: Prepared = await api.prepare(buildBody());
      preparing = false;
      settle(current, `published artifacts: spec ${shortHex(prepared.spec_hash, 10, 6)}, ${prepared.param_count.toLocaleString()} parameters`, "done");
      const computed = escrow()?.total;
      replace(
        preparedHost,
        h(
          "dl",
          { class: "kv", testid: "post-prepared" },
          h("dt", null, "Spec hash"), h("dd", null, h("code", null, prepared.spec_hash)),
          h("dt", null, "Spec URI"), h("dd", null, h("code", null, prepared.spec_uri)),
          h("dt", null, "Initial state root"), h("dd", null, h("code", null, prepared.initial_state_root)),
          h("dt", null, "Parameters"), h("dd", null, prepared.param_count.toLocaleString()),
          h("dt", null, "Escrow (prepare)"),
          h("dd", null, `${eth(prepared.escrow_wei)} `, h("span", { class: "muted" }, `(${prepared.escrow_wei} wei)`), computed !== undefined && computed.toString() !== prepared.escrow_wei ? h("span", { class: "warn" }, " differs from the form's estimate") : null),
        ),
      );
      current = step(wallet.kind === "injected" ? "waiting for signature…" : "sending…");
      const outcome = await wallet.send(
        { to: prepared.to, data: prepared.data, value: BigInt(prepared.value_wei) },
        (stage) => replace(current, spinner(stage)),
      );
      settle(current, `mined in block ${outcome.receipt.blockNumber}`, "done");
      const posted = wallet.events(outcome.receipt, "TaskPosted")[0];
      const taskId = posted?.taskId !== undefined ? String(posted.taskId) : null;
      replace(
        resultHost,
        h(
          "div",
          { class: "result ok-box", testid: "post-result" },
          h("div", null, "Task ", h("strong", { testid: "posted-task-id" }, taskId ?? "?"), " posted", posted ? ` with a reward pool of ${eth(String(posted.rewardPool ?? ""))} and a witness fee budget of ${eth(String(posted.witnessFeeBudget ?? ""))}.` : "."),
          h("div", null, "Transaction ", h("code", { testid: "post-tx" }, outcome.hash), ` (block ${outcome.receipt.blockNumber})`),
          taskId ? h("div", null, h("a", { href: `#/runs/${taskId}`, class: "btn", testid: "post-run-link" }, `Open run #${taskId} →`)) : h("div", { class: "warn" }, "No TaskPosted event in the receipt."),
        ),
      );
      requestRefresh();
    } catch (err) {
      // The step says why, decoded (a revert on chain: its custom error, read back from the chain).
      const failedStep = current;
      const stageText = (failedStep.textContent ?? "").replace(/…$/, "");
      settle(failedStep, `${stageText} — failed: ${explainError(err, wallet.config?.abi)}`, "failed");
      void describeFailure(err).then((line) => settle(failedStep, `${stageText} — failed: ${line}`, "failed"));
      // The API's refusal (a path outside the data directory, a missing column, a bad model
      // directory…) is one line next to the form; a wallet or chain failure goes to the error bar.
      if (preparing && err instanceof ApiError && err.status >= 400 && err.status < 500) showFormError(err.message);
      else reportError(err, "action");
    } finally {
      busy = false;
      updateSubmit();
    }
  }

  function render(t: Template): void {
    template = t;
    fetchedAt = performance.now();
    chainBase = t.chain_time;
    syncChainTime();
    defs = fieldsFor(t);
    for (const def of defs) values[def.name] = initialValue(def, getPath(t, def.name));
    const src = t.sources;
    if (src) {
      // The choices' defaults: the built-in corpus, the default method, a new Llama from the template's config.
      values["corpus.type"] ||= src.default;
      values.method ||= src.default_method;
      values["model.source"] ||= src.models[0] ?? "config";
      const m = src.modalities;
      if (m) {
        values.modality ||= m.default;
        values["image_source.type"] ||= m.vision.default_source;
        values["image_source.shard_count"] ||= String(m.vision.shard_count);
        for (const [key, value] of Object.entries(m.vision.model)) if (key !== "family") values[`vision_model.${key}`] ||= String(value);
        values["series_source.type"] ||= m.time_series.default_source;
        values["series_source.datasets"] ||= m.time_series.default_datasets.join(", ");
        values["series_source.shard_count"] ||= String(m.time_series.shard_count);
        for (const [key, value] of Object.entries(m.time_series.windows)) values[`windows.${key}`] ||= String(value);
        values["series_model.family"] ||= m.time_series.families[0] ?? "patchtst";
        for (const sizes of Object.values(m.time_series.models)) for (const [key, value] of Object.entries(sizes)) values[`series_model.${key}`] ||= String(value);
      }
      if (src.lora) {
        values["model.lora.r"] ||= String(src.lora.r);
        values["model.lora.alpha"] ||= String(src.lora.alpha);
        values["model.lora.target_modules"] ||= src.lora.target_modules.join(", ");
      }
    }
    const form = h("form", { testid: "post-form", class: "post-form", novalidate: true, onsubmit: (ev: Event) => void onSubmit(ev) });
    for (const group of GROUPS) {
      const members = defs.filter((d) => d.group === group.id);
      if (members.length === 0 && group.id !== "money") continue;
      const fieldset = h("fieldset", { class: `group group-${group.id}` }, h("legend", null, group.title), h("p", { class: "muted small" }, group.blurb), h("div", { class: "grid" }, ...members.map(fieldView)));
      if (group.id === "money") {
        fieldset.appendChild(h("div", { class: "escrow-box" }, h("div", null, "Escrow sent with postTask: ", escrowEl), escrowDetail));
      }
      form.appendChild(fieldset);
    }
    form.appendChild(h("div", { class: "submit-row" }, submit, submitNote));
    form.appendChild(formError);
    form.appendChild(progress);
    form.appendChild(preparedHost);
    form.appendChild(resultHost);
    replace(
      el,
      h("div", { class: "page-head" }, h("h1", null, "Post a training task"), h("span", { class: "muted" }, "Defaults come from the API's template; the contract's rules are checked as you type.")),
      form,
    );
    update();
    timer = window.setInterval(() => {
      if (!busy) update();
    }, 1000);
  }

  return {
    title: "Post a task",
    el,
    async refresh() {
      if (!template) {
        render(await api.template());
      } else {
        syncChainTime();
        updateSubmit();
      }
    },
    destroy() {
      if (timer !== null) window.clearInterval(timer);
    },
  };
}

/** Seconds a deadline must lie beyond the chain's time now: preparing and mining the postTask take a while. */
const DEADLINE_MARGIN_S = 60n;

const PARAM_NAMES: Record<string, true> = {
  "aggregation.trim_fraction": true,
  "aggregation.krum_f": true,
  "aggregation.clip_radius": true,
};

