#!/usr/bin/env bash
# Installs the locked npm dependencies of this test (the official `openai` client) into
# node_modules/, like `npm ci`, and does nothing when they are already there. Node and npm come
# from Debian (scripts/bootstrap.sh installs nodejs and npm when node is missing).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "openai test: node and npm are missing (scripts/bootstrap.sh installs them)" >&2
  exit 1
fi
locked=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/openai"].version)')
installed=$(node -e 'try { console.log(require("./node_modules/openai/package.json").version) } catch { console.log("") }')
if [ "$locked" = "$installed" ]; then exit 0; fi
npm ci --no-audit --no-fund --loglevel=error
