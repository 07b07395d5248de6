#!/usr/bin/env bash
# Builds one libFuzzer target (clang 19, ASan + UBSan) and runs it over its
# committed corpus.
#
#   scripts/fuzz.sh FUZZER [SECONDS] [extra libFuzzer flags...]
#   scripts/fuzz.sh --list
#
# FUZZER: gguf_fuzzer, safetensors_fuzzer, config_json_fuzzer,
# int4_checkpoint_fuzzer, tokenizer_json_fuzzer, jinja_fuzzer,
# manifest_fuzzer, openai_request_fuzzer (each declared by kiln_add_fuzzer,
# cmake/KilnFuzz.cmake). SECONDS defaults to 600.
# Environment: BUILD_DIR (default build-fuzz), JOBS for ninja (default 2).
# New corpus entries go to $BUILD_DIR/corpus-FUZZER/, crashes to
# $BUILD_DIR/artifacts/FUZZER/; the committed corpus is only read. A crash's
# input belongs in the committed corpus once it is fixed: the ctest
# FUZZER_replay runs every file there.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}

if [[ ! -f $build/build.ninja ]]; then
  # clang 19 with its libFuzzer runtime; Debian 12's clang 14 cannot compile
  # kiln (C++20 lambdas capturing structured bindings).
  if ! command -v clang++-19 >/dev/null; then
    echo "fuzz.sh needs clang 19 and libFuzzer: apt-get install clang-19 libclang-rt-19-dev" >&2
    exit 2
  fi
  CC=clang-19 CXX=clang++-19 cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_ENABLE_COMPILER=OFF \
    -DKILN_ENABLE_TESTS=OFF -DKILN_ENABLE_FUZZERS=ON >&2
fi

if [[ ${1:-} == --list || $# -eq 0 ]]; then
  for f in "$build"/fuzz/*.corpus; do basename "$f" .corpus; done
  [[ $# -eq 0 ]] && { echo "usage: $0 FUZZER [SECONDS] [libFuzzer flags...]" >&2; exit 2; }
  exit 0
fi

fuzzer=$1
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
if [[ ! -f $build/fuzz/$fuzzer.corpus ]]; then
  echo "unknown fuzzer '$fuzzer'; expected one of: $(cd "$build/fuzz" && ls *.corpus | sed 's/\.corpus$//' | tr '\n' ' ')" >&2
  exit 2
fi
mapfile -t seeds < "$build/fuzz/$fuzzer.corpus"

ninja -C "$build" -j"${JOBS:-2}" "$fuzzer" >&2

corpus=$build/corpus-$fuzzer
artifacts=$build/artifacts/$fuzzer
mkdir -p "$corpus" "$artifacts"
# One job at the lowest priority: the machine may be shared.
exec nice -n 19 "$build/bin/$fuzzer" "$corpus" "${seeds[@]}" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 "$@"
