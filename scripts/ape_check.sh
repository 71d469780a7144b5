#!/usr/bin/env bash
# The Ape workflow, checked end to end (issue 16): `make ape-check`.
#
# From a clone where `make install` has run (node_modules: anvil, the npm solc, OpenZeppelin;
# .venv: the project), this
#   1. installs the pinned Ape (eth-ape + ape-solidity + ape-foundry, scripts/ape-constraints.txt)
#      into its OWN virtual environment .venv-ape (Ape needs web3 < 8 and eth-account < 0.14; the
#      project pins web3 8 and eth-account 0.14, so the two cannot share .venv),
#   2. points ape-solidity at the project's offline compiler (tools/solc, the npm solc 0.8.28),
#   3. runs `ape compile --force`, then `ape run ape_deploy --network ethereum:local:foundry`
#      (ape-foundry starts the pinned anvil on a free port; SynclineCourt then SynclineMarket),
#   4. checks `git status --porcelain` is what it was before (Ape's .build/ and
#      contracts/src/.cache/ are ignored) and that the project's own compile input is unchanged
#      and still compiles (syncline.chain.toolchain skips dot-folders).
# Prints the seconds each step took. Needs network access to the Python package index the first
# time (pip), none afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
APE_VENV=${APE_VENV:-$ROOT/.venv-ape}
APE_PYTHON=${APE_PYTHON:-python3}
PROJECT_PY=${PROJECT_PY:-$ROOT/.venv/bin/python}
ANVIL_DIR=$ROOT/node_modules/@foundry-rs/anvil-linux-amd64/bin
SOLC_VERSION=0.8.28

fail() { echo "ape-check: $*" >&2; exit 1; }
now() { date +%s.%N; }
took() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }

[ -x "$ANVIL_DIR/anvil" ] || fail "anvil not found in node_modules: run \`make install\` first"
[ -x "$PROJECT_PY" ] || fail "$PROJECT_PY not found: run \`make install\` first"
export PYTHONPATH=$ROOT/agents${PYTHONPATH:+:$PYTHONPATH}

input_digest() {
  "$PROJECT_PY" -c '
import hashlib, json
from syncline.chain.toolchain import standard_input
payload = standard_input()
print(hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest(), len(payload["sources"]))'
}

start=$(now)
before_status=$(git status --porcelain)
before_input=$(input_digest)

t=$(now)
[ -x "$APE_VENV/bin/python" ] || "$APE_PYTHON" -m venv "$APE_VENV"
"$APE_VENV/bin/pip" install --quiet --disable-pip-version-check -c scripts/ape-constraints.txt \
  eth-ape ape-solidity ape-foundry
"$APE_VENV/bin/pip" check >/dev/null || fail "pip check failed in $APE_VENV"
versions=$("$APE_VENV/bin/python" -c '
from importlib.metadata import version
print(" ".join(f"{p}=={version(p)}" for p in ("eth-ape", "ape-solidity", "ape-foundry")))')
echo "ape-check: $versions in $APE_VENV ($(took "$t") s)"

# ape-solidity finds solc-v<version> in SOLCX_BINARY_PATH: the project's offline compiler.
export SOLCX_BINARY_PATH=$APE_VENV/solcx
mkdir -p "$SOLCX_BINARY_PATH"
ln -sfn "$ROOT/tools/solc" "$SOLCX_BINARY_PATH/solc-v$SOLC_VERSION"
export PATH=$ANVIL_DIR:$APE_VENV/bin:$PATH

t=$(now)
ape compile --force
echo "ape-check: ape compile ($(took "$t") s)"

t=$(now)
ape run ape_deploy --network ethereum:local:foundry
echo "ape-check: ape run ape_deploy on a local anvil ($(took "$t") s)"

after_status=$(git status --porcelain)
if [ "$after_status" != "$before_status" ]; then
  echo "ape-check: git status changed:" >&2
  diff <(echo "$before_status") <(echo "$after_status") >&2 || true
  fail "Ape left files in the tree that git sees"
fi
after_input=$(input_digest)
[ "$after_input" = "$before_input" ] || fail "the project's compile input changed: $before_input -> $after_input"

t=$(now)
"$PROJECT_PY" -c '
from syncline.chain.toolchain import compile_contracts
names = sorted(compile_contracts())
assert "SynclineMarket" in names and "SynclineCourt" in names, names
print("project compile:", ", ".join(names))'
echo "ape-check: project compile ($(took "$t") s, cached by source hash)"
echo "ape-check: OK in $(took "$start") s; git status unchanged; compile input unchanged (${after_input#* } sources)"
