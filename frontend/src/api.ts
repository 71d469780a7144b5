// Typed client for the Syncline API (the JSON contract in docs/api.md).
// Wei amounts are decimal strings; addresses and hashes lowercase 0x-hex; timestamps chain seconds.
import type { Abi, Address, Hex } from "viem";

export type Wei = string;

export interface DevAccount {
  address: Address;
  label: string;
}

export interface Config {
  chain_id: number;
  rpc_url: string;
  market: Address;
  abi: Abi;
  blob_store: string;
  devnet: boolean;
  dev_accounts: DevAccount[];
  head_block: number;
  indexed_block: number;
}

export interface Health {
  status: string;
  indexed_block: number;
  head_block: number;
}

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export interface Limits {
  tier_rules?: Record<string, string[]>;
  gradient_bits?: number[];
  max_slash_bps?: number;
  max_window_s?: number;
  max_trainers?: number;
  max_witnesses?: number;
  max_shards?: number;
  [key: string]: JsonValue | undefined;
}

/** What the form offers for the corpus and the model (GET /api/template `sources`). */
export interface Sources {
  /** Data source types; `default` is the built-in corpus. */
  types: string[];
  default: string;
  /** The fields each source type takes besides `type` (path, glob, split, text/prompt/response fields). */
  fields: Record<string, string[]>;
  /** Source types whose records have named fields (the ones SFT can read). */
  record_types: string[];
  methods: string[];
  default_method: string;
  /** The record fields each training method reads (pretrain: text_field; sft: prompt_field, response_field). */
  method_fields: Record<string, string[]>;
  /** The fields a method cannot train without (sft: prompt_field, response_field): only a source type taking them can feed it. */
  method_requires: Record<string, string[]>;
  default_text_field: string;
  default_split: string;
  default_globs: string[];
  /** How the model is given: "config" (a new Llama) or "pretrained" (a directory on the API server). */
  models: string[];
  /** LoRA on a pretrained model (peft): the form's defaults and the API's bounds. */
  lora?: { r: number; alpha: number; target_modules: string[]; max_r: number; max_alpha: number; max_targets: number };
  /** The modalities the form offers (language, vision, time series): each one's sources, default model and bounds. */
  modalities?: Modalities;
  /** Whether the server's data directory was chosen (--data-dir, $SYNCLINE_API_DATA_DIR) or is its default. */
  data_dir_configured: boolean;
  paths: string;
}

export type Bounds = Record<string, { min: number; max: number }>;

export interface Modalities {
  names: string[];
  default: string;
  vision: {
    source_types: string[];
    default_source: string;
    /** The optional fields each image source type takes besides `type` and `shard_count`. */
    source_fields: Record<string, string[]>;
    channels: number[];
    shard_count: number;
    model: Record<string, string | number>;
    families: string[];
    bounds: Bounds;
    rules: string[];
  };
  time_series: {
    source_types: string[];
    default_source: string;
    source_fields: Record<string, string[]>;
    datasets: string[];
    default_datasets: string[];
    columns: { timestamp_column: string; id_column: string; value_columns: string[] };
    shard_count: number;
    windows: Record<string, string | number>;
    scalings: string[];
    families: string[];
    /** Each family's default sizes (patchtst: num_hidden_layers, heads, ffn_dim; patchtsmixer: num_layers). */
    models: Record<string, Record<string, number>>;
    bounds: Bounds;
    rules: string[];
  };
}

export interface Template {
  spec: JsonObject;
  corpus: JsonObject;
  model: JsonObject;
  limits: Limits;
  sources?: Sources;
  chain_time: number;
}

export interface Prepared {
  spec_hash: Hex;
  spec_uri: string;
  param_count: number;
  initial_state_root: Hex;
  escrow_wei: Wei;
  to: Address;
  data: Hex;
  value_wei: Wei;
}

export interface RunSummary {
  task_id: number;
  name: string;
  sponsor: Address;
  status: string;
  tier: string;
  rule: string;
  rounds: number;
  current_round: number;
  rounds_finalized: number;
  rounds_carried: number;
  rounds_invalidated: number;
  trainers_enrolled: number;
  min_trainers: number;
  max_trainers: number;
  reward_pool_wei: Wei;
  escrow_wei: Wei;
  state_root: Hex;
  open_challenges: number;
  posted_at: number;
  progress: number;
}

export interface TimelineEntry {
  kind: string;
  block: number;
  timestamp: number;
  round: number | null;
  text: string;
  tx: Hex | null;
}

export interface RunDetail {
  summary: RunSummary;
  spec: JsonObject;
  state: JsonObject;
  timeline: TimelineEntry[];
}

export interface Submission {
  fragment: number;
  trainer: Address;
  committed_at: number;
  payload_hash: Hex;
  uri: string;
  accepted: boolean;
}

export interface Vote {
  witness: Address;
  result?: Hex;
  state_root?: Hex;
  metric?: number | string | null;
  agrees?: boolean;
  tx?: Hex | null;
}

export interface Round {
  round: number;
  status: string;
  opened_at: number;
  deadline: number;
  closed_at: number;
  state_root: Hex;
  prev_state_root: Hex;
  aggregate_root: Hex;
  vote_count: number;
  committed_mask: number | string;
  accepted_mask: number | string;
  revoked_mask: number | string;
  submissions: Submission[];
  votes: Vote[];
  dissent: Vote[];
  carried_forward: boolean;
  validation_loss: number | null;
  trainer_losses: Record<string, number>;
  challenges: number[];
}

/** active / left while the run goes on; evicted; sealed (stake and reward credited) or refunded
 * (cancelled: stake credited back) once it settled. */
export type TrainerStatus = "active" | "left" | "evicted" | "sealed" | "refunded";

export interface Trainer {
  address: Address;
  fragment: number;
  enrolled: boolean;
  evicted: boolean;
  status: TrainerStatus;
  /** Stake held now (0 once the run settled: it was credited back). */
  stake_wei: Wei;
  /** Stake credited back at seal or cancel. */
  stake_returned_wei: Wei;
  slashed_wei: Wei;
  shards: number[];
  submitted: number;
  accepted: number;
  missed: number;
  acceptance_rate: number | null;
  accepted_weight: number;
  reward_wei: Wei;
}

export interface Witness {
  address: Address;
  bonded: boolean;
  /** Bond held now (0 once the run settled: it was credited back). */
  bond_wei: Wei;
  /** Bond credited back at seal or cancel. */
  bond_returned_wei: Wei;
  slashed_wei: Wei;
  votes: number;
  matched: number;
  dissents: number;
  fees_wei: Wei;
}

export interface Challenge {
  challenge_id: number;
  kind: string;
  status: string;
  round: number;
  fragment: number;
  segment: number;
  challenger: Address;
  accused: Address;
  bond_wei: Wei;
  slashed_wei: Wei;
  opened_at: number;
  deadline: number;
  guilty_votes: number;
  innocent_votes: number;
  tx: Hex | null;
}

export interface Losses {
  rounds: number[];
  /** The witnesses' validation metric per round (named by `metric`). */
  validation: (number | null)[];
  trainers: Record<string, (number | null)[]>;
  /** validation_loss (language), top1_accuracy (vision), mase (time series). */
  metric?: string;
  metric_higher_is_better?: boolean;
}

/** A DP run's target and the ε each trainer has spent after each round (docs/privacy.md). */
export interface Privacy {
  enabled: boolean;
  target_epsilon?: number | null;
  delta?: number | null;
  clip_norm?: number | null;
  sample_rate?: number | null;
  accountant?: string | null;
  noise_multiplier?: number | null;
  rounds?: number[];
  /** Trainer address -> cumulative ε after each round of `rounds`. */
  epsilon_per_round?: Record<string, number[]>;
  /** Trainer address -> rounds whose noise opening the witness committee could read (a drawn or
   * claimed training segment): no DP protection against the committee for those rounds. */
  rounds_opened?: Record<string, number[]>;
}

export interface ReceiptTrainerLine {
  trainer: Address;
  fragment: number;
  evicted: boolean;
  submitted: number;
  accepted: number;
  missed: number;
  accepted_weight: number;
  reward_wei: Wei;
  stake_refund_wei: Wei;
  slashed_wei: Wei;
  /** Commitments made late: after a round's first deadline, within its one extension. */
  late?: number;
}

export interface ReceiptWitnessLine {
  witness: Address;
  votes: number;
  matched: number;
  dissents: number;
  fees_wei: Wei;
  bond_wei: Wei;
  slashed_wei: Wei;
}

export interface TrainingReceipt {
  task_id: number;
  spec_hash: Hex;
  status: string;
  final_state_root: Hex;
  rounds_total: number;
  rounds_finalized: number;
  rounds_carried_forward: number;
  rounds_invalidated: number;
  reward_pool_wei: Wei;
  sponsor_refund_wei: Wei;
  trainers: ReceiptTrainerLine[];
  witnesses: ReceiptWitnessLine[];
  /** No round accepted any work: the final state is the initial one. */
  trained_nothing?: boolean;
  late_commits?: number;
  /** One plain line: what the run trained. */
  verdict?: string;
  [extra: string]: unknown;
}

export interface Withdrawal {
  amount_wei: Wei;
  block: number;
  timestamp: number;
  tx: Hex;
}

export interface Credit {
  address: Address;
  role: string;
  /** Claimable now (live; from every run). */
  credit_wei: Wei;
  /** What this run credited the account. */
  credited_wei: Wei;
  /** How much of that a withdraw() has paid. */
  paid_wei: Wei;
  /** The account's withdrawals since this run first credited it. */
  withdrawals: Withdrawal[];
}

export interface ReceiptResponse {
  receipt: TrainingReceipt;
  credits: Credit[];
  model_url: string;
  final_state_url: string;
}

export interface AccountInfo {
  address: Address;
  credit_wei: Wei;
  balance_wei: Wei;
}

export interface BuildRequest {
  round: number;
  kind: string;
  fragment?: number;
  segment?: number;
}

export interface BuiltProof {
  kind: string;
  round: number;
  accused: Address | null;
  description: string;
  function: string;
  to: Address;
  data: Hex;
  value_wei: Wei;
}

/** A Confidential task's sealed manifest as the chain names it (GET /api/runs/{id}/sealed-manifest). */
export interface SealedManifest {
  task_id: number;
  manifest_hash: Hex;
  uri: string;
  /** 0: no manifest installed yet. */
  version: number;
  shards: number;
  /** X25519 public keys holding envelopes. */
  enclaves: Hex[];
  envelopes: number;
}

/** The body of POST .../sealed-manifest/build: the task sponsor's wallet signature (personal_sign) of the
 * build message for `version` (the installed version + 1), valid until `expires` (unix s, at most 600 s ahead). */
export interface SealedBuildAuthorisation {
  version: number;
  expires: number;
  signature: Hex;
}

/** The next sealed-manifest version the sponsor's own API server built (POST .../sealed-manifest/build). */
export interface SealedManifestBuild {
  task_id: number;
  sponsor: Address;
  manifest_hash: Hex;
  uri: string;
  /** The version sending `call` installs; the current one when `call` is null. */
  version: number;
  current_version: number;
  envelopes: number;
  added: number;
  enclaves: number;
  /** installSealedManifest(task_id, manifest_hash, uri) for the sponsor's wallet; null: no enclave is new. */
  call: { function: string; args: (number | string)[]; to: Address; data: Hex; value_wei: Wei } | null;
}

/** An API failure: the one-line `error` of the JSON body, or the HTTP status. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

async function request<T>(method: "GET" | "POST", path: string, body?: unknown): Promise<T> {
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? { accept: "application/json" } : { "content-type": "application/json", accept: "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(`cannot reach the Syncline API (${method} ${path}): ${err instanceof Error ? err.message : String(err)}`, 0);
  }
  const text = await response.text();
  let data: unknown = undefined;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!response.ok) {
    const message =
      data && typeof data === "object" && "error" in data && typeof (data as { error: unknown }).error === "string"
        ? (data as { error: string }).error
        : `${method} ${path} failed: HTTP ${response.status} ${response.statusText}`.trim();
    throw new ApiError(oneLine(message), response.status);
  }
  if (data === undefined) throw new ApiError(`${method} ${path}: the API answered with no JSON`, response.status);
  return data as T;
}

export function oneLine(message: string): string {
  const line = message.replace(/\s+/g, " ").trim();
  return line.length > 400 ? `${line.slice(0, 397)}…` : line;
}

const enc = encodeURIComponent;

export const api = {
  health: () => request<Health>("GET", "/healthz"),
  config: () => request<Config>("GET", "/api/config"),
  template: () => request<Template>("GET", "/api/template"),
  /** Language: `{spec, corpus, model}`; vision: `{modality, spec, image_source, model}`; time series: `{modality, spec, series_source, windows, model}`. */
  prepare: (body: JsonObject) =>
    request<Prepared>("POST", "/api/tasks/prepare", body),
  runs: () => request<RunSummary[]>("GET", "/api/runs"),
  run: (id: number) => request<RunDetail>("GET", `/api/runs/${id}`),
  rounds: (id: number) => request<Round[]>("GET", `/api/runs/${id}/rounds`),
  trainers: (id: number) => request<Trainer[]>("GET", `/api/runs/${id}/trainers`),
  witnesses: (id: number) => request<Witness[]>("GET", `/api/runs/${id}/witnesses`),
  challenges: (id: number) => request<Challenge[]>("GET", `/api/runs/${id}/challenges`),
  losses: (id: number) => request<Losses>("GET", `/api/runs/${id}/losses`),
  privacy: (id: number) => request<Privacy>("GET", `/api/runs/${id}/privacy`),
  receipt: (id: number) => request<ReceiptResponse>("GET", `/api/runs/${id}/receipt`),
  account: (address: string) => request<AccountInfo>("GET", `/api/accounts/${enc(address)}`),
  buildChallenge: (id: number, body: BuildRequest) =>
    request<BuiltProof>("POST", `/api/runs/${id}/challenges/build`, body),
  sealedManifest: (id: number) => request<SealedManifest>("GET", `/api/runs/${id}/sealed-manifest`),
  /** The sponsor's EIP-191 authorisation (see buildMessage in pages/sealed.ts) travels as the body. */
  buildSealedManifest: (id: number, auth: SealedBuildAuthorisation) =>
    request<SealedManifestBuild>("POST", `/api/runs/${id}/sealed-manifest/build`, auth),
  modelUrl: (id: number) => `/api/runs/${id}/model`,
  stateUrl: (id: number, root: string) => `/api/runs/${id}/state/${enc(root)}`,
};
