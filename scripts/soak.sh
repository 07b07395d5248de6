#!/usr/bin/env bash
# The serve soak test by hand: kiln serve on the CPU with SmolLM2 on
# loopback under random arrivals, cancellations, disconnects and oversized
# requests for SECONDS (default 600), checking the KV pool's accounting in
# every /metrics sample and the RSS after each minute against the RSS after
# the warm-up (test/server/serve_load_test.py). CI runs the same test for
# 60 s (ctest -R kiln_serve_load_test). At the lowest CPU priority, so the
# machine stays usable.
#
#   scripts/soak.sh [SECONDS]        KILN_BUILD_DIR picks the build (default build/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KILN_BUILD_DIR:-$ROOT/build}"
SECONDS_TO_RUN="${1:-600}"
MODEL="${KILN_SOAK_MODEL:-$BUILD_DIR/test-artifacts/smollm2}"
if [[ ! -x "$BUILD_DIR/bin/kiln" ]]; then
  echo "soak: $BUILD_DIR/bin/kiln is missing: build it first (ninja -C $BUILD_DIR kiln)" >&2
  exit 2
fi
if [[ ! -e "$MODEL/manifest.json" ]]; then
  echo "soak: $MODEL/manifest.json is missing: build the SmolLM2 test artifact (ctest -R compile_smollm2_artifact) or set KILN_SOAK_MODEL" >&2
  exit 2
fi
exec nice -n 19 python3 "$ROOT/test/server/serve_load_test.py" --kiln "$BUILD_DIR/bin/kiln" --model "$MODEL" \
  --seconds "$SECONDS_TO_RUN"
