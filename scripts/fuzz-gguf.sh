#!/usr/bin/env bash
# Builds the GGUF (and safetensors) libFuzzer targets with clang-19 and runs the
# GGUF fuzzer over the committed seed corpus.
#
#   scripts/fuzz-gguf.sh [SECONDS] [extra libFuzzer flags...]
#
# Environment: BUILD_DIR (default build-fuzz), FUZZER (gguf_fuzzer or
# safetensors_fuzzer), JOBS for ninja (default 2). New corpus entries go to
# $BUILD_DIR/corpus-<fuzzer>/, crashes to $BUILD_DIR/artifacts/; the committed
# seeds in models/formats/fuzz/corpus/ are only read.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
fuzzer=${FUZZER:-gguf_fuzzer}
seconds=${1:-600}
shift || true

case $fuzzer in
  gguf_fuzzer) seeds=$root/models/formats/fuzz/corpus/gguf ;;
  safetensors_fuzzer) seeds=$root/models/formats/fuzz/corpus/safetensors ;;
  *) echo "unknown FUZZER=$fuzzer" >&2; exit 2 ;;
esac

if [[ ! -f $build/build.ninja ]]; then
  CC=clang-19 CXX=clang++-19 cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_ENABLE_COMPILER=OFF \
    -DKILN_ENABLE_TESTS=OFF -DKILN_ENABLE_FUZZERS=ON
fi
ninja -C "$build" -j"${JOBS:-2}" "$fuzzer"

corpus=$build/corpus-$fuzzer
mkdir -p "$corpus" "$build/artifacts"
# One job, low priority: the machine is shared.
exec nice -n 10 "$build/bin/$fuzzer" "$corpus" "$seeds" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -timeout=10 \
  -artifact_prefix="$build/artifacts/" -print_final_stats=1 "$@"
