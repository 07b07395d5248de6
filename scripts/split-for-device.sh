#!/usr/bin/env bash
# A file too large for one device call (64 MiB a call, the working tree and
# every carried path together; ../shared/GPU.md) travels in parts, one part
# folder per call, and is rebuilt in /tmp on the GPU machine.
#
#   scripts/split-for-device.sh FILE [MIB ...]    (here)
#       Writes .xfer/1/, .xfer/2/, ... (ignored; KILN_XFER_DIR moves them):
#       .xfer/K/NAME.partK, the first parts MIB MiB each (default: 44,
#       KILN_XFER_SIZES), the last one the rest, at most KILN_XFER_LAST_MIB
#       (default 52), and in every folder NAME.sha256 (each part's checksum
#       and the whole file's).
#   scripts/split-for-device.sh --join DIR        (there)
#       Checks the parts in DIR against NAME.sha256, joins them into DIR/NAME
#       and checks that; exit 1 naming what is missing or wrong.
#
# Files inside the repo do not outlive a call there; /tmp does, while the
# machine stays warm (about 30 s after a call returns). So every call first
# copies what it carried to /tmp (its part to /tmp/kiln-xfer), each call
# comes within 30 s of the one before, and the last one joins. The defaults
# fit the SmolLM2 GGUF (93.8 MiB: parts of 44 and 49.8 MiB) into the two
# calls that run everything docs/performance.md reports, beside a tree of
# about 7 MiB and, in call 1, the build's gpu-bundle (scripts/gpu-bundle.sh,
# about 6 MiB packed), which call 2 finds in /tmp; each call under 61 MiB:
#   scripts/split-for-device.sh ~/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#   call 1, carry [.xfer/1, build-gpu/gpu-bundle.tar.gz]:
#     mkdir -p /tmp/kiln-xfer /tmp/build-gpu && cp .xfer/1/* /tmp/kiln-xfer/ &&
#     tar -xzf build-gpu/gpu-bundle.tar.gz -C /tmp/build-gpu && scripts/gpu-check.sh /tmp/build-gpu ...
#   call 2, carry [.xfer/2, .whl]:
#     cp .xfer/2/* /tmp/kiln-xfer/ && scripts/split-for-device.sh --join /tmp/kiln-xfer && ...
#     (scripts/gpu-check.sh's part `trained` reads /tmp/kiln-xfer/<the GGUF>)
# (scripts/gpu-check.sh's header has the two calls in full.) A call that
# finds the machine cold gets a bare /tmp: --join then names the missing
# parts, and the sequence starts again from call 1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ "${1:-}" == --join ]]; then
  dir="${2:?usage: $0 --join DIR}"
  shopt -s nullglob
  manifests=("$dir"/*.sha256)
  [[ ${#manifests[@]} -gt 0 ]] || { echo "$dir: no *.sha256 manifest (no part folder was copied there)" >&2; exit 1; }
  for manifest in "${manifests[@]}"; do
    name="$(basename "$manifest" .sha256)"
    mapfile -t parts < <(awk '$2 ~ /\.part[0-9]+$/ {print $2}' "$manifest")
    missing=()
    for p in "${parts[@]}"; do [[ -f "$dir/$p" ]] || missing+=("$p"); done
    if [[ ${#missing[@]} -gt 0 ]]; then
      echo "$dir: $name: missing ${missing[*]} (the machine went cold between calls, or a part folder was not carried)" >&2
      exit 1
    fi
    (cd "$dir" && awk '$2 ~ /\.part[0-9]+$/' "$(basename "$manifest")" | sha256sum --quiet -c -) ||
      { echo "$dir: $name: a part's checksum is wrong" >&2; exit 1; }
    for p in "${parts[@]}"; do cat "$dir/$p"; done >"$dir/$name"
    (cd "$dir" && awk -v n="$name" '$2 == n' "$(basename "$manifest")" | sha256sum --quiet -c -) ||
      { echo "$dir/$name: the joined file's checksum is wrong" >&2; exit 1; }
    echo "$dir/$name: joined from ${#parts[@]} parts, sha256 checked ($(stat -c %s "$dir/$name") bytes)"
  done
  exit 0
fi

file="${1:?usage: $0 FILE [MIB ...] | $0 --join DIR}"
shift
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || read -r -a sizes <<<"${KILN_XFER_SIZES:-44}"
last_max="${KILN_XFER_LAST_MIB:-52}"
name="$(basename "$file")"
total=$(stat -c %s "$file")
mib=$((1024 * 1024))

offset=0  # MiB
for s in "${sizes[@]}"; do
  [[ "$s" =~ ^[1-9][0-9]*$ ]] || { echo "part size '$s' is not a whole number of MiB" >&2; exit 2; }
  offset=$((offset + s))
done
(( offset * mib < total )) || { echo "$name ($total bytes) fits in fewer parts than ${sizes[*]} MiB" >&2; exit 2; }
rest=$((total - offset * mib))
if (( rest > last_max * mib )); then
  echo "$name: the last part would be $((rest / mib + 1)) MiB, over KILN_XFER_LAST_MIB=$last_max; give larger sizes" >&2
  exit 2
fi

out="${KILN_XFER_DIR:-$ROOT/.xfer}"
rm -rf "$out"
sizes+=("")  # the last part: the rest
offset=0
for i in "${!sizes[@]}"; do
  k=$((i + 1))
  mkdir -p "$out/$k"
  if [[ -n "${sizes[$i]}" ]]; then
    dd if="$file" of="$out/$k/$name.part$k" bs=1M skip="$offset" count="${sizes[$i]}" status=none
    offset=$((offset + sizes[i]))
  else
    dd if="$file" of="$out/$k/$name.part$k" bs=1M skip="$offset" status=none
  fi
done
{
  for k in $(seq 1 "${#sizes[@]}"); do (cd "$out/$k" && sha256sum "$name.part$k"); done
  (cd "$(dirname "$file")" && sha256sum "$name")
} >"$out/$name.sha256"
for k in $(seq 1 "${#sizes[@]}"); do
  cp "$out/$name.sha256" "$out/$k/"
  echo "$out/$k: $(du -sh "$out/$k" | cut -f1)  $(ls "$out/$k" | tr '\n' ' ')"
done
rm "$out/$name.sha256"
