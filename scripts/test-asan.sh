#!/usr/bin/env bash
# Builds kiln's CPU parts with AddressSanitizer + UndefinedBehaviorSanitizer
# (the `asan` CMake preset: -DKILN_SANITIZE=address,undefined, no MLIR
# compiler) and runs the fast subset under them: the file-format readers,
# the tokenizer, the Jinja and chat-template code, the manifest reader, the
# KV block pool and prefix cache, sampling, and the committed corpus of every
# fuzzer that needs no engine, replayed (label fuzz-replay). A leak, an
# out-of-bounds access or undefined behaviour fails the test that hit it.
# The engine-dependent tests (scheduler, OpenAI request reader) are left to
# KILN_ASAN_ALL=1: building the engine under ASan does not fit CI's time.
#
#   scripts/test-asan.sh            # configure, build the subset, run it
#   KILN_ASAN_BUILD_DIR=DIR ...     # build directory (default build-asan)
#   KILN_ASAN_ALL=1 ...             # build everything and run ctest -LE gpu
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KILN_ASAN_BUILD_DIR:-$ROOT/build-asan}"
log() { echo "[test-asan] $*" >&2; }
# As scripts/setup.sh: cache entries shared between clones. The preset
# builds with debug info, which ccache would otherwise key on the build
# directory's absolute path.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# The unit-test executables of the subset; the *_replay targets come from
# kiln_add_fuzzer (cmake/KilnFuzz.cmake).
SUBSET_TARGETS=(
  kiln_formats_test kiln_tokenizer_test kiln_jinja_test kiln_chat_test kiln_tool_calls_test
  kiln_artifact_test kiln_kv_test kiln_sampling_test
  gguf_fuzzer_replay safetensors_fuzzer_replay config_json_fuzzer_replay
  int4_checkpoint_fuzzer_replay tokenizer_json_fuzzer_replay jinja_fuzzer_replay
  manifest_fuzzer_replay
)
# ctest names: gtest_discover_tests names a test Suite.Case (Prefix/Suite.Case
# when parameterized), so the subset's tests are chosen by their suites and
# the replays by name.
SUBSET_SUITES='Gguf|Safetensors|ModelConfig|ModelSource|SsmConfig|TensorInfo|Int4|Tokenizer|PreTokenizer|StreamingDetokenizer|Utf8|ByteLevelBpe|SentencePiece|SmolLM2Tokenizer|JinjaTemplate|ChatTemplate|ToolCalls|Manifest|StepParams|BlockPool|BlockTable|KvQuant|PrefixCache|StatePool|Sampl|Logprobs|StopChecker'
SUBSET_REGEX="(^|/)($SUBSET_SUITES)[A-Za-z0-9_]*\\.|^($(IFS='|'; echo "${SUBSET_TARGETS[*]}" | tr ' ' '|'))\$"

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  log "configuring $BUILD_DIR (preset asan)"
  cmake --preset asan -S "$ROOT" -B "$BUILD_DIR" >&2
fi

# Leaks fail the run; UBSan prints a stack for each report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

if [ "${KILN_ASAN_ALL:-0}" = "1" ]; then
  log "building everything in $BUILD_DIR"
  cmake --build "$BUILD_DIR" -- -j"$(nproc)" >&2
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" -LE gpu
  exit
fi

log "building the subset in $BUILD_DIR"
cmake --build "$BUILD_DIR" --target "${SUBSET_TARGETS[@]}" -- -j"$(nproc)" >&2
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" -LE gpu -R "$SUBSET_REGEX"
