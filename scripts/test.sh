#!/usr/bin/env bash
# Runs kiln's whole test suite on this machine: unit tests (GoogleTest), the
# lit/FileCheck suite and the bad-input tests, all through ctest. GPU tests
# carry the label `gpu`; without a GPU they are skipped, and this script says
# so and why.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KILN_BUILD_DIR:-$ROOT/build}"
export KILN_REQUIRE_MODELS="${KILN_REQUIRE_MODELS:-1}"

"$ROOT/scripts/setup.sh"

exclude=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[test] skipping tests labelled 'gpu': no NVIDIA GPU or driver on this machine (they run on the GPU machine via scripts/gpu-check.sh)" >&2
  exclude=(-LE gpu)
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "${exclude[@]}"
