// The wallet: an injected EIP-1193 wallet when there is one; on a local devnet without one,
// anvil's unlocked development accounts (anvil signs eth_sendTransaction itself); otherwise none.
// A public client reads receipts, blocks and simulations straight from the chain's RPC.
import {
  BaseError,
  ContractFunctionRevertedError,
  UserRejectedRequestError,
  createClient,
  custom,
  decodeErrorResult,
  defineChain,
  encodeFunctionData,
  getAddress,
  http,
  parseEventLogs,
  type Abi,
  type AbiParameter,
  type Address,
  type Chain,
  type EIP1193Provider,
  type Hex,
  type Client,
  type TransactionReceipt,
} from "viem";
import {
  addChain,
  call,
  getBlock,
  getChainId,
  requestAddresses,
  sendTransaction,
  signMessage,
  switchChain,
  waitForTransactionReceipt,
} from "viem/actions";
import type { Config } from "./api";
import { oneLine } from "./api";
import { shortHex } from "./format";

export type WalletKind = "injected" | "dev" | "none";

export interface WalletAccount {
  address: Address; // lowercase
  label: string;
}

export interface TxRequest {
  from?: Address;
  to: Address;
  data: Hex;
  value?: bigint;
}

export interface TxOutcome {
  hash: Hex;
  receipt: TransactionReceipt;
}

/** A failed transaction: one line, plus the hash when it was sent. */
export class TxError extends Error {
  constructor(
    message: string,
    readonly hash?: Hex,
  ) {
    super(message);
    this.name = "TxError";
  }
}

type InjectedProvider = EIP1193Provider & {
  isMetaMask?: boolean;
  isRabby?: boolean;
  isCoinbaseWallet?: boolean;
  isBraveWallet?: boolean;
  isFrame?: boolean;
  isTrust?: boolean;
  isOkxWallet?: boolean;
};

const DEV_BANNER = "anvil development account (unlocked, local devnet only)";

function injectedProvider(): InjectedProvider | undefined {
  const candidate = (window as unknown as { ethereum?: InjectedProvider }).ethereum;
  return candidate && typeof candidate.request === "function" ? candidate : undefined;
}

function injectedName(provider: InjectedProvider): string {
  if (provider.isRabby) return "Rabby";
  if (provider.isCoinbaseWallet) return "Coinbase Wallet";
  if (provider.isBraveWallet) return "Brave Wallet";
  if (provider.isFrame) return "Frame";
  if (provider.isTrust) return "Trust Wallet";
  if (provider.isOkxWallet) return "OKX Wallet";
  if (provider.isMetaMask) return "MetaMask";
  return "injected (EIP-1193)";
}

export class Wallet {
  kind: WalletKind = "none";
  name = "";
  accounts: WalletAccount[] = [];
  selected: Address | null = null;
  connecting = false;
  config!: Config;
  chain!: Chain;
  publicClient!: Client;
  private walletClient: Client | null = null;
  private provider: InjectedProvider | undefined;
  private listeners = new Set<() => void>();

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(): void {
    for (const listener of this.listeners) {
      try {
        listener();
      } catch (err) {
        console.warn("wallet listener failed", err);
      }
    }
  }

  get abi(): Abi {
    return this.config.abi;
  }

  /** The banner text: "Wallet: MetaMask", the anvil notice, or why there is none. */
  get banner(): string {
    if (this.kind === "injected") return `Wallet: ${this.name}`;
    if (this.kind === "dev") return `Using an ${DEV_BANNER}`;
    return "No wallet: transactions need an EIP-1193 browser wallet (e.g. MetaMask)";
  }

  init(config: Config): void {
    this.config = config;
    const rpc = config.rpc_url;
    this.chain = defineChain({
      id: config.chain_id,
      name: config.devnet ? "Syncline devnet (anvil)" : `Chain ${config.chain_id}`,
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: [rpc] } },
      testnet: config.devnet,
    });
    this.publicClient = createClient({ chain: this.chain, transport: http(rpc), pollingInterval: 500 });
    this.provider = injectedProvider();
    if (this.provider) {
      this.kind = "injected";
      this.name = injectedName(this.provider);
      this.walletClient = createClient({ chain: this.chain, transport: custom(this.provider) });
      this.provider.on?.("accountsChanged", (accounts: readonly Address[]) => this.setInjectedAccounts(accounts));
      this.provider.on?.("chainChanged", () => this.emit());
      // Accounts already authorized: no prompt. Otherwise the banner offers "Connect".
      this.provider
        .request({ method: "eth_accounts" })
        .then((accounts) => this.setInjectedAccounts(accounts as readonly Address[]))
        .catch(() => undefined);
    } else if (config.devnet && config.dev_accounts.length > 0) {
      this.kind = "dev";
      this.name = "anvil";
      this.walletClient = createClient({ chain: this.chain, transport: http(rpc) });
      this.accounts = config.dev_accounts.map((a) => ({ address: a.address.toLowerCase() as Address, label: a.label }));
      const saved = localStorage.getItem(this.storageKey());
      this.selected = this.accounts.find((a) => a.address === saved)?.address ?? this.accounts[0]?.address ?? null;
    } else {
      this.kind = "none";
    }
    this.emit();
  }

  private storageKey(): string {
    return `syncline.account.${this.config.chain_id}`;
  }

  private setInjectedAccounts(accounts: readonly string[]): void {
    this.accounts = accounts.map((address, i) => ({
      address: address.toLowerCase() as Address,
      label: `${this.name} ${accounts.length > 1 ? `#${i}` : ""}`.trim(),
    }));
    if (!this.selected || !this.has(this.selected)) this.selected = this.accounts[0]?.address ?? null;
    this.emit();
  }

  /** Ask the injected wallet for accounts and for the API's chain. */
  async connect(): Promise<void> {
    if (this.kind !== "injected" || !this.walletClient) return;
    this.connecting = true;
    this.emit();
    try {
      const accounts = await requestAddresses(this.walletClient);
      this.setInjectedAccounts(accounts);
      await this.ensureChain();
    } finally {
      this.connecting = false;
      this.emit();
    }
  }

  private async ensureChain(): Promise<void> {
    if (this.kind !== "injected" || !this.walletClient) return;
    const current = await getChainId(this.walletClient);
    if (current === this.chain.id) return;
    try {
      await switchChain(this.walletClient, { id: this.chain.id });
    } catch (err) {
      const code = (err as { code?: number; cause?: { code?: number } }).code ?? (err as { cause?: { code?: number } }).cause?.code;
      if (code === 4902 || (err instanceof BaseError && /unrecognized|not been added|4902/i.test(err.message))) {
        await addChain(this.walletClient, { chain: this.chain });
        await switchChain(this.walletClient, { id: this.chain.id });
      } else {
        throw err;
      }
    }
  }

  select(address: string): void {
    const found = this.accounts.find((a) => a.address === address.toLowerCase());
    if (!found) return;
    this.selected = found.address;
    if (this.kind === "dev") localStorage.setItem(this.storageKey(), found.address);
    this.emit();
  }

  has(address: string): boolean {
    const lower = address.toLowerCase();
    return this.accounts.some((a) => a.address === lower);
  }

  /** Whether a transaction can be sent now (a wallet and a selected account). */
  get ready(): boolean {
    return this.kind !== "none" && this.walletClient !== null && this.selected !== null;
  }

  /** Why buttons that send transactions are disabled, or null. */
  get notReadyReason(): string | null {
    if (this.kind === "none") return "transactions need a wallet";
    if (!this.selected) return this.kind === "injected" ? "connect your wallet first" : "no account available";
    return null;
  }

  label(address: string): string {
    return this.accounts.find((a) => a.address === address.toLowerCase())?.label ?? shortHex(address);
  }

  /** Chain time of the next block (anvil's pending block), falling back to the latest block. */
  async chainTime(): Promise<number> {
    try {
      const block = await getBlock(this.publicClient, { blockTag: "pending" });
      return Number(block.timestamp);
    } catch {
      const block = await getBlock(this.publicClient, { blockTag: "latest" });
      return Number(block.timestamp);
    }
  }

  encode(functionName: string, args: readonly unknown[] = []): Hex {
    return encodeFunctionData({ abi: this.abi, functionName, args });
  }

  /** Call a market function from `from` (default: the selected account). */
  async write(
    functionName: string,
    args: readonly unknown[],
    onStage: (stage: string) => void,
    from?: Address,
  ): Promise<TxOutcome> {
    return this.send({ from, to: this.config.market, data: this.encode(functionName, args) }, onStage);
  }

  /**
   * Simulate, send, wait for the receipt. Stages: checking, waiting for signature, submitted,
   * mined in block N. Throws TxError with the decoded custom error on a revert.
   */
  async send(req: TxRequest, onStage: (stage: string) => void): Promise<TxOutcome> {
    const from = (req.from ?? this.selected)?.toLowerCase() as Address | undefined;
    if (!this.walletClient || !from) throw new TxError(this.notReadyReason ?? "transactions need a wallet");
    if (!this.has(from)) throw new TxError(`account ${shortHex(from)} is not available in this wallet`);
    const account = getAddress(from);
    const value = req.value ?? 0n;
    if (this.kind === "injected") {
      onStage("switching the wallet to the Syncline chain…");
      try {
        await this.ensureChain();
      } catch (err) {
        throw new TxError(explainError(err, this.abi));
      }
    }
    onStage("checking the transaction…");
    try {
      // against the pending block: the time and state the transaction will be mined with (an
      // idle devnet's latest block can be an hour old, and a deadline check passes there)
      await call(this.publicClient, { account, to: req.to, data: req.data, value, blockTag: "pending" });
    } catch (err) {
      throw new TxError(`would revert: ${explainError(err, this.abi)}`);
    }
    onStage(this.kind === "dev" ? `sending from ${this.label(from)} (anvil signs)…` : "waiting for signature…");
    let hash: Hex;
    try {
      hash = await sendTransaction(this.walletClient, { account, to: req.to, data: req.data, value, chain: this.chain });
    } catch (err) {
      throw new TxError(explainError(err, this.abi));
    }
    onStage(`submitted ${shortHex(hash, 10, 6)}, waiting to be mined…`);
    let receipt: TransactionReceipt;
    try {
      receipt = await waitForTransactionReceipt(this.publicClient, { hash, timeout: 120_000 });
    } catch (err) {
      throw new TxError(explainError(err, this.abi), hash);
    }
    if (receipt.status !== "success") {
      let reason = "";
      try {
        await call(this.publicClient, { account, to: req.to, data: req.data, value, blockNumber: receipt.blockNumber - 1n });
      } catch (err) {
        reason = `: ${explainError(err, this.abi)}`;
      }
      throw new TxError(`transaction reverted in block ${receipt.blockNumber}${reason}`, hash);
    }
    onStage(`mined in block ${receipt.blockNumber}`);
    return { hash, receipt };
  }

  /**
   * Sign `message` as text (EIP-191 personal_sign) with the selected account: the injected wallet
   * asks the user; anvil signs for its unlocked development accounts. Throws TxError (one line).
   */
  async signText(message: string, onStage: (stage: string) => void): Promise<Hex> {
    const from = this.selected;
    if (!this.walletClient || !from) throw new TxError(this.notReadyReason ?? "signing needs a wallet");
    onStage(this.kind === "dev" ? `signing as ${this.label(from)} (anvil signs)…` : "waiting for your signature in the wallet…");
    try {
      return await signMessage(this.walletClient, { account: getAddress(from), message });
    } catch (err) {
      throw new TxError(explainError(err, this.abi));
    }
  }

  /** Decoded `eventName` logs of the market in a receipt. */
  events(receipt: TransactionReceipt, eventName: string): Record<string, unknown>[] {
    const market = this.config.market.toLowerCase();
    const logs = receipt.logs.filter((log) => log.address.toLowerCase() === market);
    const parsed = parseEventLogs({ abi: this.abi, logs, eventName, strict: false });
    return parsed.map((log) => (log as unknown as { args: Record<string, unknown> }).args ?? {});
  }
}

function formatArg(value: unknown): string {
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return `[${value.map(formatArg).join(", ")}]`;
  if (value && typeof value === "object") return JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? v.toString() : v));
  return String(value);
}

function formatCustomError(name: string, args: readonly unknown[] | undefined, inputs?: readonly AbiParameter[]): string {
  if (name === "Error" && args && args.length === 1) return `reverted: ${formatArg(args[0])}`;
  if (!args || args.length === 0) return name;
  const parts = args.map((arg, i) => {
    const label = inputs?.[i]?.name;
    return label ? `${label}=${formatArg(arg)}` : formatArg(arg);
  });
  return `${name}(${parts.join(", ")})`;
}

function revertData(err: BaseError): Hex | undefined {
  let found: Hex | undefined;
  err.walk((e) => {
    const data = (e as { data?: unknown }).data;
    const candidate =
      typeof data === "string" ? data : data && typeof data === "object" ? (data as { data?: unknown }).data : undefined;
    if (typeof candidate === "string" && /^0x[0-9a-fA-F]{8,}$/.test(candidate)) {
      found = candidate as Hex;
      return true;
    }
    return false;
  });
  return found;
}

/** One line for any error: the contract's custom error with its arguments when there is one. */
export function explainError(err: unknown, abi?: Abi): string {
  if (err instanceof TxError) return err.message;
  if (err instanceof BaseError) {
    if (err.walk((e) => e instanceof UserRejectedRequestError)) return "request rejected in the wallet";
    const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError) as ContractFunctionRevertedError | null;
    if (reverted?.data?.errorName) {
      const item = reverted.data.abiItem as { inputs?: readonly AbiParameter[] } | undefined;
      return formatCustomError(reverted.data.errorName, reverted.data.args, item?.inputs);
    }
    const data = revertData(err);
    if (data && abi) {
      try {
        const decoded = decodeErrorResult({ abi, data });
        const inputs = (decoded.abiItem as { inputs?: readonly AbiParameter[] }).inputs;
        return formatCustomError(decoded.errorName, decoded.args as readonly unknown[] | undefined, inputs);
      } catch {
        return `reverted with unknown error data ${shortHex(data, 10, 0)}`;
      }
    }
    const details = (err as { details?: string }).details;
    const line = err.shortMessage || err.message;
    return oneLine(details && !line.includes(details) && details.length < 200 ? `${line}: ${details}` : line);
  }
  if (err && typeof err === "object" && "code" in err && (err as { code: unknown }).code === 4001) {
    return "request rejected in the wallet";
  }
  return oneLine(err instanceof Error ? err.message : String(err));
}

export const wallet = new Wallet();
