#!/usr/bin/env bash
# Sets everything up, builds, and runs the daemon on the embedded default model.
# Arguments are passed to `mlaserve serve` (see docs/configuration.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
exec build/bin/mlaserve serve "$@"
