#!/bin/bash
# libkiln as a user gets it: `cmake --install` of this build (component
# embed) into a temporary prefix, examples/ configured against that prefix
# alone and built, and its greedy answer on the SmolLM2 artifact compared
# with `kiln run`'s for the same prompt.
# With PYTHON (the module was built), the module installed under
# PREFIX/PYTHON_SITE must import and answer the same.
#   install_test.sh CMAKE BUILD_DIR EXAMPLES_DIR ARTIFACT KILN [PYTHON PYTHON_SITE]
set -euo pipefail
cmake=$1 build=$2 examples=$3 artifact=$4 kiln=$5 python=${6:-} python_site=${7:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$cmake" --install "$build" --prefix "$work/prefix" --component embed >/dev/null
for f in include/kiln/kiln.h include/kiln/kiln.hpp lib/libkiln.so lib/cmake/kiln/kilnConfig.cmake; do
  [[ -e $work/prefix/$f ]] || { echo "FAIL: the install lacks $f"; exit 1; }
done
# Only the API is exported: no C++ symbol of the runtime inside.
if nm -D --defined-only "$work/prefix/lib/libkiln.so" | awk '{print $3}' | grep -v '^kiln_' | grep -q .; then
  echo "FAIL: libkiln exports more than kiln_*:"
  nm -D --defined-only "$work/prefix/lib/libkiln.so" | awk '{print $3}' | grep -v '^kiln_' | head
  exit 1
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
"$cmake" -S "$examples" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }

prompt="Once upon a time"
"$work/build/generate" "$artifact" "$prompt" 24 >"$work/got.txt"
"$kiln" run "$artifact" "$prompt" --max-tokens 24 --device cpu --quiet >"$work/want.txt" 2>/dev/null
# kiln run ends its answer with a newline the example does not print.
printf '%s' "$(cat "$work/want.txt")" >"$work/want.txt"
printf '%s' "$(cat "$work/got.txt")" >"$work/got.txt"
if ! cmp -s "$work/got.txt" "$work/want.txt"; then
  echo "FAIL: the example's answer differs from kiln run's"
  echo "example:  $(cat "$work/got.txt")"
  echo "kiln run: $(cat "$work/want.txt")"
  exit 1
fi
[[ -s $work/got.txt ]] || { echo "FAIL: empty answer"; exit 1; }

if [[ -n $python ]]; then
  "$cmake" --install "$build" --prefix "$work/prefix" --component python >/dev/null
  PYTHONPATH="$work/prefix/$python_site" "$python" - "$artifact" "$prompt" "$work/prefix" >"$work/py.txt" <<'PY'
import sys
import kiln
assert kiln.__file__.startswith(sys.argv[3]), f"kiln imported from {kiln.__file__}, not the prefix"
out = kiln.LLM(sys.argv[1], device="cpu").generate(sys.argv[2], kiln.SamplingParams(max_tokens=24))
sys.stdout.write(out.text)
PY
  printf '%s' "$(cat "$work/py.txt")" >"$work/py.txt"
  cmp -s "$work/py.txt" "$work/want.txt" || { echo "FAIL: the installed Python module answered: $(cat "$work/py.txt")"; exit 1; }
fi
echo "PASS: $(cat "$work/got.txt")"
