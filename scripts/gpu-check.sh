#!/usr/bin/env bash
# What runs on the GPU machine (see ../shared/GPU.md): the `gpu` test label
# from a build folder made on the dev machine and carried along (nothing heavy
# is built here), logs under $OUT, a short table last.
#
#   scripts/gpu-check.sh [BUILD_DIR]     (default: build-gpu)
#
# Exits non-zero when any part it ran failed or could not run; the summary
# table at the end (and $OUT/0-report.txt) says which.
#
# Everything docs/performance.md reports, in two device calls, each under the
# 10-minute limit. The trained model's GGUF (94 MiB) is over one call's 64
# MiB, so it comes in two halves (scripts/split-for-device.sh, here, first),
# and the build travels as its small gpu-bundle (scripts/gpu-bundle.sh build-gpu,
# which builds build-gpu and the artifacts first):
#   call 1, carry [".xfer/1", "build-gpu/gpu-bundle.tar.gz"]:
#     mkdir -p /tmp/kiln-xfer /tmp/build-gpu && cp .xfer/1/* /tmp/kiln-xfer/ &&
#     tar -xzf build-gpu/gpu-bundle.tar.gz -C /tmp/build-gpu &&
#     KILN_GPU_PARTS="kernels attention sanitizer bench" KILN_BENCH_RUNS="b1 b32 prefill" \
#       scripts/gpu-check.sh /tmp/build-gpu
#   call 2, within 30 s of call 1's end (/tmp is kept while the machine is warm),
#   carry [".xfer/2", ".whl"]:
#     cp .xfer/2/* /tmp/kiln-xfer/ && scripts/split-for-device.sh --join /tmp/kiln-xfer &&
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site &&
#     KILN_GPU_PARTS="hf trained" scripts/gpu-check.sh /tmp/build-gpu
# $OUT/0-report.txt collects every figure (written even when a limit stops the run).
#
# Parts (KILN_GPU_PARTS, default "kernels hf"):
#   kernels  the `gpu` test binaries (kernels_gpu_test, kiln_cuda_test) and kiln-kernels;
#            kiln_cuda_vs_cpu_executor_test includes the int8/fp8 KV cache runs of the
#            tiny-llama fixture against the CPU executor (ScaledKvCacheFollowsTheCpuExecutor)
#   hf       kiln's executors against Hugging Face transformers: for each model in
#            KILN_HF_MODELS (default "tiny-llama llama3.2-1b"), test/gpu/make_random_llama.py
#            writes a random bf16 checkpoint and the fp32 reference here, then
#            hf_logits_gpu_test runs the artifacts compiled on the dev machine
#            (BUILD_DIR/artifacts/<model>-bf16 for CUDA, <model>-f32 for the CPU executor),
#            then the CUDA executor again on <model>-f32 (hf_<model>_f32_cuda: f32
#            activations as vLLM's --dtype float32, logits within KILN_F32_TOLERANCE,
#            default 1e-4, of transformers fp32 and at least KILN_F32_MIN_GREEDY, default 9,
#            of the 10 greedy continuations identical):
#            (scripts/gpu-bundle.sh compiles every artifact this script runs).
#            KILN_HF_BENCH_MODEL (default llama3.2-1b) also gets the batch-1 decode timing,
#            transformers' eager decode and an HBM read probe in the same run.
#   trained  the same on a trained model, SmolLM2-135M-Instruct, with fewer near-ties than
#            random weights: the logits' bound, and issue #5's check, at least 9 of 10 CUDA
#            greedy continuations (64 tokens) equal to transformers fp32's, on the f32 CUDA
#            run (KILN_F32_MIN_GREEDY); the bf16 runs report theirs (KILN_TRAINED_MIN_GREEDY,
#            default 0: bf16 rounding flips the prompts' near-ties, docs/performance.md).
#            Then the GGUF itself on the GPU (its q4_1/q8_0 blocks) and its batch-1 decode.
#            test/gpu/make_gguf_reference.py loads the Q4_1 GGUF
#            (KILN_TRAINED_GGUF, default /tmp/kiln-xfer/SmolLM2-135M-Instruct.Q4_1.gguf,
#            brought in parts by scripts/split-for-device.sh) with transformers, which needs
#            the `gguf` package (carry .whl and install it first:
#              python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
#                --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site),
#            saves it in fp32 and writes the reference; the artifacts are from the
#            header-only test/models/smollm2-135m.
#            Without the GGUF or gguf it says why and counts as not run.
#   sweep    kiln_gemv_sweep: every skinny-GEMM tiling on the shipped decode shapes
#   bench    `kiln bench decode` on KILN_BENCH_MODEL (default llama3-8b; a random
#            checkpoint written here, artifact BUILD_DIR/artifacts/<model>-bf16):
#            accuracy against transformers fp32, cold and warm start, then each
#            workload of KILN_BENCH_RUNS (default "b1") beside the HF peers and the
#            roofline of the same run:  b1 (batch 1, 128 in / 128 out, peers eager +
#            compiled), b32 (batch 32, 128 in / 128 out, eager + compiled),
#            prefill (batch 1, 2048 in, eager); kiln alone: b1-no-pdl (programmatic
#            launch off), b32-no-autotune (cuBLASLt's first choice),
#            b1-host-sampling / b32-host-sampling (logits back, host argmax), b1-profile / b32-profile / prefill-profile (--profile-steps: each step's
#            GPU time); KILN_BENCH_PEER overrides the peer; KILN_BENCH_ACCURACY=0
#            skips the fp32 reference, the accuracy check and the start times
#   attention kiln_attention_bench beside torch SDPA (test/gpu/sdpa_bench.py), with
#            8k-context batch-1 decode_attention over int8/fp8 KV beside bf16 (kv_quant lines), and
#            kiln_swiglu_bench: gemm_swiglu_wgmma beside cuBLASLt + silu_mul
#   quant    decode speed of the int8 and int4 artifacts beside bf16 (and the HF peers) on
#            the bench model's random checkpoint, batches KILN_QUANT_BATCHES
#   sanitizer compute-sanitizer memcheck and racecheck over kernels_gpu_test
#   spec     speculative verify on CUDA: `kiln bench decode --verify` on the bench model's
#            random checkpoint (written here when missing) with the artifacts
#            BUILD_DIR/artifacts/llama3-8b-spec{4,16,64}-bf16 (trees chain:3,
#            widths:3,2,1, widths:3,4,4; root included) at batches KILN_SPEC_BATCHES (default "1 16"):
#            one verify step's time over one plain decode step's, a table on stdout
#            (the issue's goal: 16 nodes at most 1.3x at batch 1); then SmolLM2's Q4_1
#            GGUF (the trained part's, KILN_TRAINED_GGUF) through `kiln run --spec=ngram`
#            (chain of 4, and --spec-tree 2,2,1), greedy, on a few prompts: the text must be
#            the plain run's (artifact smollm2-q4_1-spec-bf16)
#   distill  scripts/distill_draft.py: a 4-layer draft for SmolLM2 distilled from the Q4_1
#            GGUF (KILN_TRAINED_GGUF, brought in parts as for `trained`) on the teacher's own
#            answers to Python-docstring prompts, into KILN_DRAFT_SOURCE (default
#            /tmp/kiln-draft: config.json, model.safetensors, tokenizer files, distill.json;
#            about 50 MB), where a later specbench call on the same machine finds it; a copy
#            comes back in $OUT/draft with model.safetensors in 15 MiB parts
#            (model.safetensors.part-aa, -ab, ...: `cat model.safetensors.part-* >
#            model.safetensors`). KILN_DISTILL_ARGS adds flags (e.g. --steps 800),
#            KILN_DISTILL_TIMEOUT (default 540 s) bounds it. The artifact smollm2-draft-bf16
#            (scripts/gpu-bundle.sh) is compiled from the draft's shape alone.
#   distillhead scripts/distill_head.py: Medusa draft heads (4 by default) for SmolLM2
#            trained on its own final hidden states (the distill part's teacher and corpus),
#            into $OUT/head (config.json, model.safetensors, head.json; about 5 MB);
#            KILN_DISTILL_HEAD_ARGS adds flags, KILN_DISTILL_TIMEOUT bounds it. Bring
#            $OUT/head back for `kiln bench spec smollm2 --spec=head:DIR` (CPU backend).
#   specbench `kiln bench spec` on SmolLM2 (the GGUF as --model-source, artifact
#            smollm2-q4_1-spec-bf16) at --batch KILN_SPECBENCH_BATCHES (default 1,16),
#            greedy, plain beside speculative, for --spec=ngram and for the draft models
#            of KILN_SPECBENCH_DRAFTS (default "self distilled layerskip": SmolLM2 drafting
#            for itself, the distilled draft, artifact smollm2-draft-bf16 with its checkpoint
#            KILN_DRAFT_SOURCE, default /tmp/kiln-draft, and --spec=layerskip:K with K
#            KILN_SPECBENCH_LAYERSKIP, default 24, the artifact's draft entry from
#            scripts/gpu-bundle.sh); every run must report identical greedy outputs
#   serve    the scheduler on the bench model's random checkpoint (bf16): batch
#            invariance (a probe alone and among 63 others: reported with the
#            default kernels, checked with --batch-invariant, whose batch-32 decode
#            cost is measured beside; n greedy completions over copied-on-write
#            blocks agree), then each `kiln bench serve` run of
#            KILN_SERVE_RUNS (default "offline offline-nocache poisson prefix"; also
#            offline-fp8kv, offline with the fp8 KV cache artifact, and http: offline
#            KILN_SERVE_HTTP_REQUESTS (default 500) 1000 in / 1000 out in-process and
#            through an in-process kiln serve with streaming HTTP clients, --http:
#            the JSON's http_overhead, the goal < 5%):
#            offline 1000 requests 1000 in / 1000 out (KILN_SERVE_REQUESTS), with
#            and without the prefix cache (its cost at a 0% hit rate); poisson:
#            a rate sweep, lognormal ~1000 in / 250 out (KILN_SERVE_POISSON_REQUESTS,
#            default 400); prefix: multi-turn conversations over shared system
#            prompts, cache on and off; KILN_SERVE_PEER (default none) adds the
#            HF static-batch peer to offline on KILN_SERVE_PEER_REQUESTS requests
#   moe      mixture of experts: moe_gpu_test (the gathered GEMVs and the grouped
#            tensor-core GEMMs against the CPU's f32 experts, 1 to 700 tokens), then
#            at Mixtral-8x7B's shape (hidden 4096, 8 experts of
#            14336, top 2, bf16, random weights) kiln_moe_bench times one
#            layer (router, experts, combine; then the expert GEMMs alone, as TFLOP/s
#            and as the bytes of the experts read, GB/s and a fraction of HBM:
#            KILN_READ_PROBE_GBPS if given, else the H200's nominal 4800) at
#            KILN_MOE_LAYER_ROWS (default "1 32 2048": decode batches and a prefill
#            chunk) on the expert path the compiler picks (KILN_MOE_PATHS, default
#            auto; "gemv,grouped" times both), checking token 0 against float64.
#            Then the whole model: `kiln bench decode` of the mixtral-8x7b-8l artifact
#            (gpu-bundle.sh; Mixtral-8x7B-v0.1 with 8 of its 32 layers, 11.6 B
#            parameters) on a random checkpoint test/gpu/make_random_checkpoint.py
#            writes under KILN_HF_DIR (23 GB, once) at batches KILN_MOE_BATCHES
#            (default "1 32"), 128 prompt and 128 generated tokens; then
#            test/gpu/hf_moe_bench.py runs transformers' MixtralForCausalLM of
#            KILN_MOE_LAYERS (default 8, kiln's shape) on the same card, eager and
#            compiled, at the same batches (KILN_MOE_HF_TIMEOUT, default 480 s).
#   mamba    state-space models (docs/design/state-space.md): ssm_gpu_test (the SSM
#            kernels in bf16 against the CPU's f32 kernels: selective_scan at
#            mamba-2.8b's shape, the Mamba-2 conv, chunked scan and gated norm at
#            tiny-mamba2's and mamba2-2.7b's, a 300-token prefill and 40 decode steps);
#            test/gpu/check_ssm_reference.py (tiny-mamba, tiny-mamba2 and tiny-hybrid's
#            float64 references against transformers, float64 on the CPU); the whole
#            models on the GPU: kiln_cuda_ssm_test (the CUDA executor and engine on
#            tiny-mamba, tiny-mamba2 and tiny-hybrid, f32 and bf16 plans, against the
#            CPU executor and the references: chunked prefill, slot reuse, preemption)
#            and `kiln run ART --device cuda` on each fixture's f32 and bf16 artifact.
#   mambabench the state-space performance table at mamba2-2.7b's shape (random bf16):
#            kiln_ssm_bench (one layer's SSM kernels, GEMMs excluded, scaled to 64
#            layers); the whole model, `kiln bench decode` at KILN_MAMBA_BATCHES
#            (default "1 64", 16 prompt and 128 generated tokens), the per-token decode
#            time after KILN_MAMBA_CONTEXTS tokens (default "1024 4096 16384 32768") and
#            `kiln bench prefill` at KILN_MAMBA_PREFILL tokens (default "8192 32768");
#            then test/gpu/hf_mamba_bench.py (transformers' Mamba2ForCausalLM at that
#            shape: the same rows; flags in KILN_MAMBA_HF_ARGS, KILN_MAMBA_HF_TIMEOUT,
#            default 900 s).
#   sparse   2:4 structured sparsity (docs/design/sparsity.md): kiln_sparse24_gpu_test
#            (the sparse kernels against float64), kiln_sparse24_bench (the sparse
#            linears beside the dense ones at Llama-3-8B's shapes), the CUDA-vs-CPU
#            executor's sparse case (SparseLlamaFollowsTheCpuExecutor: the tiny Llama's
#            tiny-llama-sparse-{bf16,int4-bf16} plans on the sparse kernels within bf16's
#            tolerance, -{f32,int4-f32} expanded to dense within 1e-5), then `kiln bench
#            decode` at batch 1 of llama3-8b-bf16 and llama3-8b-sparse-bf16 on the bench
#            model's random checkpoint (written here when missing; the sparse plan prunes
#            it by magnitude at load), a table last.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-${KILN_BUILD_DIR:-$ROOT/build-gpu}}"
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
# The shared libraries the GPU machine lacks travel in the bundle's lib/
# (scripts/gpu-bundle.sh); the binaries find the kernel templates in the
# build's share/kiln themselves, and the tests their fixtures in this checkout.
export LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_SOURCE_ROOT="$ROOT"
export KILN_HOME="${KILN_HOME:-/tmp/kiln-home}"
# The driver's own JIT cache could answer repeated compiles without a ptxas report.
export CUDA_CACHE_DISABLE=1
# The tiny Llama's 2:4 sparse plans gpu-bundle.sh compiles (the sparse cases
# of kiln_cuda_test and kiln_cuda_vs_cpu_executor_test read them).
export KILN_SPARSE24_PLANS="${KILN_SPARSE24_PLANS:-$BUILD/artifacts}"

{
  echo "== card";  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "== nvrtc"; ls /usr/local/cuda/lib64/libnvrtc.so* 2>&1 | head -3
} | tee "$OUT/machine.txt"

# One file with every figure, named to sort first (the device tool brings
# back a limited number of files), written on any exit, a time limit's
# SIGTERM included, and rewritten as each part starts, so a call killed
# outright still leaves what the parts before finished.
write_report() {
{
  cat "$OUT/machine.txt"
  echo "== results"
  for t in "${tests[@]}"; do n="$(basename "$t")"; printf '%-24s %s\n' "$n" "${result[$n]:-not finished}"; done
  [[ -f "$OUT/read_probe.txt" ]] && { echo "== HBM read probe"; cat "$OUT/read_probe.txt"; }
  [[ -f "$OUT/start_times.txt" ]] && { echo "== start times"; cat "$OUT/start_times.txt"; }
  [[ -f "$OUT/hf_profile.txt" ]] && { echo "== hf profile"; cat "$OUT/hf_profile.txt" "$OUT/hf_profile.json"; }
  for f in "$OUT"/bench_*.txt; do [[ -f "$f" ]] && { echo "== $(basename "$f")"; cat "$f"; }; done
  for f in "$OUT"/hf_*.log "$OUT"/accuracy_*.log "$OUT"/bench_*_checkpoint.log; do
    [[ -f "$f" ]] && { echo "== $(basename "$f")"; grep -E "rel L2|graphs|batch-1|PASS|FAIL|load |transformers bf16|uploaded|programmatic|fastest|match config|tokenizer:|greedy text|margin" "$f"; }
  done
  [[ -f "$OUT/attention_bench.txt" ]] && { echo "== attention"; grep -E "best|floor|torch_sdpa|flash_attention(_wgmma)? prefill|hbm_read_probe|attention ceiling|^GPU|kv_quant" "$OUT/attention_bench.txt"; }
  [[ -f "$OUT/swiglu_bench.txt" ]] && { echo "== swiglu"; grep -vE "^round" "$OUT/swiglu_bench.txt"; }
  [[ -f "$OUT/moe_bench.txt" ]] && { echo "== moe (kiln's kernels, one layer)"; cat "$OUT/moe_bench.txt"; }
  for f in "$OUT"/moe_kiln_b*.txt; do [[ -f "$f" ]] && { echo "== moe (kiln, whole model: $(basename "$f" .txt))"; cat "$f"; }; done
  [[ -f "$OUT/moe_hf.json" ]] && { echo "== moe (transformers Mixtral)"; tail -1 "$OUT/moe_hf.json"; }
  [[ -f "$OUT/ssm_reference.txt" ]] && { echo "== mamba (references against transformers)"; cat "$OUT/ssm_reference.txt"; }
  [[ -f "$OUT/mamba_bench.txt" ]] && { echo "== mamba (kiln's SSM kernels, one mamba2-2.7b layer)"; cat "$OUT/mamba_bench.txt"; }
  [[ -f "$OUT/mamba_hf.json" ]] && { echo "== mamba (transformers Mamba2ForCausalLM)"; cat "$OUT/mamba_hf.json"; }
  # A failed test binary's failures, so they come back in this one file.
  for f in "$OUT"/*_test.log; do
    [[ -f "$f" ]] && grep -q "FAILED" "$f" && { echo "== $(basename "$f") failures"; grep -E -B3 -A12 "^\[  FAILED  \]|Failure" "$f" | head -60; }
  done
  for f in "$OUT"/sanitizer_*.log; do [[ -f "$f" ]] && { echo "== $(basename "$f")"; grep -E "SUMMARY|Hazard|hazard|Race|ERROR" "$f" | head -20; }; done
  [[ -f "$OUT/gemv_sweep.txt" ]] && { echo "== gemv sweep"; cat "$OUT/gemv_sweep.txt"; }
} > "$OUT/0-report.txt" 2>&1
}
trap write_report EXIT
trap 'exit 143' TERM INT

PARTS="${KILN_GPU_PARTS:-kernels hf}"
status=0
declare -A result
tests=()
# record NAME RC: a part's result; any failure makes the exit status 1.
record() {
  [[ " ${tests[*]} " == *" $1 "* ]] || tests+=("$1")
  result[$1]=$([[ $2 == 0 ]] && echo PASS || echo "FAIL (rc $2)")
  [[ $2 == 0 ]] || status=1
}
# fail NAME WHY: a part that could not run.
fail() {
  [[ " ${tests[*]} " == *" $1 "* ]] || tests+=("$1")
  result[$1]="$2"
  status=1
}
for part in $PARTS; do
  [[ " kernels hf trained sweep bench attention sanitizer quant serve spec distill distillhead specbench moe mamba mambabench sparse " == *" $part "* ]] ||
    fail "part_$part" "unknown part (KILN_GPU_PARTS): expected kernels hf trained sweep bench attention sanitizer quant serve spec distill distillhead specbench moe mamba mambabench sparse"
done

# Every binary's shared libraries resolve here (the bundle's lib/ included).
for b in "$BUILD"/bin/*; do
  missing="$(ldd "$b" 2>&1 | awk '/not found/{print $1}' | tr '\n' ' ')"
  [[ -z "$missing" ]] || fail "libs_$(basename "$b")" "MISSING ${missing}(scripts/gpu-bundle.sh carries what ldd lists)"
done

# ctest files hold the dev machine's absolute paths; run the binaries of the
# `gpu` label (and the NVRTC compile test) directly when those paths are absent.
if [[ " $PARTS " == *" kernels "* ]]; then
for name in kernels_gpu_test kiln_cuda_test kiln_cuda_executor_test kiln_cuda_vs_cpu_executor_test; do
  t="$BUILD/bin/$name"
  if [[ ! -x "$t" ]]; then
    fail "$name" "MISSING $t (scripts/gpu-bundle.sh builds it)"; continue
  fi
  "$t" --gtest_output="xml:$OUT/$name.xml" >"$OUT/$name.log" 2>&1
  record "$name" $?
done

# kiln-kernels on a real artifact: resources and the first SASS lines of one attention instance.
if [[ -x "$BUILD/bin/kiln-kernels" ]]; then
  art="$ROOT/test/fixtures/tiny-llama/artifact"
  inst="$("$BUILD/bin/kiln-kernels" "$art" list | awk 'NR>1 && $2=="paged_attention"{print $1; exit}')"
  # The whole SASS to a file, its head shown after: a pipe into head would
  # end kiln-kernels with SIGPIPE, which pipefail counts as a failure.
  { "$BUILD/bin/kiln-kernels" "$art" show "$inst" --resources && "$BUILD/bin/kiln-kernels" "$art" show "$inst" --sass; } \
    >"$OUT/kiln_kernels.txt" 2>&1
  record kiln_kernels $?
  echo "== kiln-kernels show $inst --resources / --sass (head)"; head -40 "$OUT/kiln_kernels.txt"
else
  fail kiln_kernels "MISSING $BUILD/bin/kiln-kernels"
fi

echo "== measurements (kernels_gpu_test)"
grep -E '^  |^GPU:' "$OUT/kernels_gpu_test.log" 2>/dev/null | head -80
echo "== failures"
grep -E '^\[  FAILED|Failure' -A4 "$OUT/kernels_gpu_test.log" 2>/dev/null | head -60
fi

# The HBM read ceiling beside torch's sum over 4 GiB: kiln's own single-row
# GEMV over 4 GB of weights (kiln_gemv_sweep --read-probe) reads faster than
# the sum on the H200, and a ceiling a kernel beats is no ceiling. kiln
# bench's roofline (scripts/hf_bench.py, through KILN_READ_PROBE_GBPS) and
# the attention part take the higher of the two.
write_report
if [[ " $PARTS " == *" bench "* || " $PARTS " == *" attention "* || " $PARTS " == *" hf "* ]]; then
  echo "== HBM read probe (kiln's GEMV)"
  "$BUILD/bin/kiln_gemv_sweep" --read-probe --reps 40 2>&1 | tee "$OUT/read_probe.txt"
  record read_probe "${PIPESTATUS[0]}"
  KILN_READ_PROBE_GBPS="$(awk '/^kiln_read_probe_GBps:/{print $2}' "$OUT/read_probe.txt")"
  export KILN_READ_PROBE_GBPS
fi

# The CUDA executor on a model's f32 artifact (vLLM's --dtype float32)
# against the same reference: f32 activations reach transformers fp32 to
# f32 rounding, so the logits bound is tight and the greedy paths keep
# (nearly) every near-tie.   run_f32_cuda MODEL CHECKPOINT REFERENCE
run_f32_cuda() {
  local model=$1 name="hf_$1_f32_cuda"
  echo "== $name"
  if [[ ! -f "$BUILD/artifacts/$model-f32/manifest.json" ]]; then
    fail "$name" "MISSING $BUILD/artifacts/$model-f32 (scripts/gpu-bundle.sh compiles it)"
    return
  fi
  timeout "${KILN_HF_TIMEOUT:-240}" "$BUILD/bin/hf_logits_gpu_test" --artifact "$BUILD/artifacts/$model-f32" \
    --model-source "$2" --reference "$3" --tolerance "${KILN_F32_TOLERANCE:-1e-4}" \
    --min-greedy-identical "${KILN_F32_MIN_GREEDY:-9}" --summary "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log"
  record "$name" "${PIPESTATUS[0]}"
}

# kiln vs Hugging Face transformers on random-weight checkpoints made here.
write_report
if [[ " $PARTS " == *" hf "* ]]; then
  HF_DIR="${KILN_HF_DIR:-/tmp/kiln-hf}"
  mkdir -p "$HF_DIR"
  for model in ${KILN_HF_MODELS:-tiny-llama llama3.2-1b}; do
    name="hf_$model"
    bench_py=() bench_cc=()
    if [[ "$model" == "${KILN_HF_BENCH_MODEL:-llama3.2-1b}" ]]; then
      bench_py=(--bench "$OUT/hf_bench_$model.json"); bench_cc=(--bench 128)
    fi
    cpu=()
    [[ -f "$BUILD/artifacts/$model-f32/manifest.json" ]] && cpu=(--cpu-artifact "$BUILD/artifacts/$model-f32")
    echo "== $name"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$ROOT/test/models/$model/model.safetensors" --out "$HF_DIR/$model" \
      --reference "$HF_DIR/$model.ref.json" "${bench_py[@]}" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    if [[ $rc != 0 ]]; then fail "$name" "FAIL (make_random_llama.py rc $rc)"; continue; fi
    timeout "${KILN_HF_TIMEOUT:-240}" "$BUILD/bin/hf_logits_gpu_test" --artifact "$BUILD/artifacts/$model-bf16" \
      --model-source "$HF_DIR/$model" --reference "$HF_DIR/$model.ref.json" "${cpu[@]}" "${bench_cc[@]}" \
      --summary "$OUT/$name.json" 2>&1 | tee -a "$OUT/$name.log"
    record "$name" "${PIPESTATUS[0]}"
    run_f32_cuda "$model" "$HF_DIR/$model" "$HF_DIR/$model.ref.json"
  done
fi

# kiln vs transformers on a trained model, from its GGUF brought over in parts.
write_report
if [[ " $PARTS " == *" trained "* ]]; then
  HF_DIR="${KILN_HF_DIR:-/tmp/kiln-hf}"
  model=smollm2-135m
  name="hf_$model"
  gguf_file="${KILN_TRAINED_GGUF:-/tmp/kiln-xfer/SmolLM2-135M-Instruct.Q4_1.gguf}"
  echo "== $name"
  if [[ ! -f "$gguf_file" ]]; then
    fail "$name" "NOT RUN: no $gguf_file (scripts/split-for-device.sh --join rebuilds it)"
  elif ! gguf_error="$(python3 -c "import gguf" 2>&1)"; then
    fail "$name" "NOT RUN: python3 cannot import gguf ($(tail -1 <<<"$gguf_error"); install the carried .whl, PYTHONPATH=/tmp/site)"
  else
    mkdir -p "$HF_DIR"
    cpu=()
    [[ -f "$BUILD/artifacts/$model-f32/manifest.json" ]] && cpu=(--cpu-artifact "$BUILD/artifacts/$model-f32")
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_gguf_reference.py" --gguf "$gguf_file" \
      --header "$ROOT/test/models/$model" --out "$HF_DIR/$model" --reference "$HF_DIR/$model.ref.json" \
      2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    if [[ $rc != 0 ]]; then
      fail "$name" "FAIL (make_gguf_reference.py rc $rc)"
    else
      timeout "${KILN_HF_TIMEOUT:-240}" "$BUILD/bin/hf_logits_gpu_test" --artifact "$BUILD/artifacts/$model-bf16" \
        --model-source "$HF_DIR/$model" --reference "$HF_DIR/$model.ref.json" "${cpu[@]}" \
        --min-greedy-identical "${KILN_TRAINED_MIN_GREEDY:-0}" --summary "$OUT/$name.json" 2>&1 | tee -a "$OUT/$name.log"
      record "$name" "${PIPESTATUS[0]}"
      run_f32_cuda "$model" "$HF_DIR/$model" "$HF_DIR/$model.ref.json"
      # The GGUF itself on the GPU: its q4_1 and q8_0 blocks through the
      # quantized kernels, against the same reference (transformers on the
      # dequantized weights: the logits bound; bf16 activations flip the
      # prompts' near-ties, as on the bf16 path above), then batch-1 decode
      # beside HF compiled on them.
      q4="hf_${model}_q4_1_cuda"
      echo "== $q4"
      timeout "${KILN_HF_TIMEOUT:-240}" "$BUILD/bin/hf_logits_gpu_test" --artifact "$BUILD/artifacts/smollm2-q4_1-bf16" \
        --model-source "$gguf_file" --reference "$HF_DIR/$model.ref.json" \
        --min-greedy-identical "${KILN_TRAINED_MIN_GREEDY:-0}" --summary "$OUT/$q4.json" 2>&1 | tee "$OUT/$q4.log"
      record "$q4" "${PIPESTATUS[0]}"
      timeout 300 "$BUILD/bin/kiln" bench decode "$BUILD/artifacts/smollm2-q4_1-bf16" --model-source "$gguf_file" \
        --device cuda --batch 1 --peer hf --peer-model "$HF_DIR/$model" >"$OUT/bench_${model}_q4_1.txt" \
        2>"$OUT/bench_${model}_q4_1.err"
      record "bench_${model}_q4_1" $?
      cat "$OUT/bench_${model}_q4_1.txt"
    fi
  fi
  echo "$name: ${result[$name]}"
  [[ -n "${result[${name}_f32_cuda]:-}" ]] && echo "${name}_f32_cuda: ${result[${name}_f32_cuda]}"
fi

write_report
if [[ " $PARTS " == *" sweep "* ]]; then
  echo "== kiln_gemv_sweep"
  "$BUILD/bin/kiln_gemv_sweep" 2>&1 | tee "$OUT/gemv_sweep.txt"
  record gemv_sweep "${PIPESTATUS[0]}"
fi

write_report
if [[ " $PARTS " == *" bench "* ]]; then
  model="${KILN_BENCH_MODEL:-llama3-8b}"
  ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$model"
  art="$BUILD/artifacts/$model-bf16"
  header="$ROOT/test/models/$model"
  [[ -f "$header/model.safetensors" ]] && header="$header/model.safetensors"
  # KILN_BENCH_ACCURACY=0: the checkpoint alone, no fp32 reference, accuracy
  # check or start times (about a minute less of device time per call).
  accuracy="${KILN_BENCH_ACCURACY:-1}"
  if [[ ! -f "$ckpt/tokenizer.json" && "$accuracy" == 0 ]]; then
    echo "== checkpoint $ckpt (no reference)"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$header" --out "$ckpt" 2>&1 | tee "$OUT/bench_${model}_checkpoint.log"
    record "checkpoint_$model" "${PIPESTATUS[0]}"
  elif [[ ! -f "$ckpt/tokenizer.json" ]]; then
    echo "== checkpoint $ckpt"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$header" --out "$ckpt" --reference "$ckpt.ref.json" --prompts 4 --new 32 --logit-cases 2 \
      2>&1 | tee "$OUT/bench_${model}_checkpoint.log"
    record "checkpoint_$model" "${PIPESTATUS[0]}"
    timeout 300 "$BUILD/bin/hf_logits_gpu_test" --artifact "$art" --model-source "$ckpt" \
      --reference "$ckpt.ref.json" --summary "$OUT/accuracy_$model.json" 2>&1 | tee "$OUT/accuracy_$model.log"
    record "accuracy_$model" "${PIPESTATUS[0]}"
  fi
  # KILN_HF_PROFILE=1: transformers' eager decode alone under torch's profiler,
  # so a peer figure far from the card's ceiling can be explained.
  if [[ -n "${KILN_HF_PROFILE:-}" ]]; then
    python3 -c "import json; print(json.dumps(list(range(1000, 1128))))" >/tmp/kiln-profile-prompt.json
    echo "== transformers eager decode under the torch profiler"
    timeout 180 python3 "$ROOT/scripts/hf_bench.py" --model "$ckpt" --prompt-ids /tmp/kiln-profile-prompt.json \
      --gen 32 --batch 1 --modes eager --profile >"$OUT/hf_profile.json" 2>"$OUT/hf_profile.txt"
    record hf_profile $?
    tail -3 "$OUT/hf_profile.txt"; cat "$OUT/hf_profile.json"
  fi
  # Cold start: an empty JIT cache (the artifact is compiled on the dev
  # machine: kiln-compile needs MLIR, absent here; its time is measured there).
  for start in $([[ "$accuracy" == 0 ]] || echo cold warm); do
    [[ $start == cold ]] && rm -rf "$KILN_HOME/jit"
    t0=$(date +%s.%N)
    "$BUILD/bin/kiln" run "$art" --model-source "$ckpt" "Hello" --max-tokens 8 --device cuda --ignore-eos \
      >"$OUT/${start}_start.out" 2>"$OUT/${start}_start.err"
    rc=$?
    t1=$(date +%s.%N)
    record "start_$start" $rc
    echo "$start start ($model, kiln run to exit, rc $rc): $(python3 -c "print(round($t1 - $t0, 2))") s" | tee -a "$OUT/start_times.txt"
    tail -2 "$OUT/${start}_start.err"
  done
  for run in ${KILN_BENCH_RUNS:-b1}; do
    case $run in
      # Each run has its own time limit, so one slow peer cannot take the
      # whole device call (kiln prints its own figures first).
      b1) flags=(--batch 1 --prompt-tokens 128 --gen-tokens 128 --peer hf); limit=200 ;;
      b32) flags=(--batch 32 --prompt-tokens 128 --gen-tokens 128 --peer hf); limit=240 ;;
      prefill) flags=(--prompt-tokens 2048 --peer hf-eager); limit=90 ;;
      # A/B and where the time goes, kiln alone: programmatic launch off;
      # every step timed between events (the table is in the .err file).
      b32-no-autotune) flags=(--batch 32 --prompt-tokens 128 --gen-tokens 128 --peer none --no-gemm-autotune); limit=60 ;;
      b1-no-pdl) flags=(--batch 1 --prompt-tokens 128 --gen-tokens 128 --peer none --no-programmatic-launch); limit=60 ;;
      b1-host-sampling) flags=(--batch 1 --prompt-tokens 128 --gen-tokens 128 --peer none --host-sampling); limit=60 ;;
      b32-host-sampling) flags=(--batch 32 --prompt-tokens 128 --gen-tokens 128 --peer none --host-sampling); limit=60 ;;
      b1-profile) flags=(--batch 1 --prompt-tokens 128 --gen-tokens 32 --peer none --profile-steps); limit=60 ;;
      b32-profile) flags=(--batch 32 --prompt-tokens 128 --gen-tokens 32 --peer none --profile-steps); limit=60 ;;
      prefill-profile) flags=(--prompt-tokens 2048 --peer none --profile-steps); limit=90 ;;
      *) fail "bench_$run" "unknown bench run (KILN_BENCH_RUNS)"; continue ;;
    esac
    [[ -n "${KILN_BENCH_PEER:-}" ]] && flags+=(--peer "$KILN_BENCH_PEER")
    workload=decode; [[ $run == prefill* ]] && workload=prefill
    echo "== kiln bench $workload $model ${flags[*]}"
    timeout "$limit" "$BUILD/bin/kiln" bench $workload "$art" --model-source "$ckpt" --device cuda "${flags[@]}" \
      --json "$OUT/bench_${model}_$run.json" 2>"$OUT/bench_${model}_$run.err" | tee "$OUT/bench_${model}_$run.txt"
    rc=${PIPESTATUS[0]}
    grep -E "kiln bench: kiln prefill|^step profile|^  |decode forwards|launched step by step" "$OUT/bench_${model}_$run.err" | tee -a "$OUT/bench_${model}_$run.txt"
    record "bench_$run" "$rc"
    [[ $rc == 0 ]] || tail -5 "$OUT/bench_${model}_$run.err"
  done
fi

write_report
# quant: decode speed of kiln's quantized weights beside its bf16 plan on
# the same random checkpoint (the bench part's, written here when missing),
# each scheme's artifact from gpu-bundle.sh: KILN_QUANT_SCHEMES (default
# "bf16 int8 int4") x KILN_QUANT_BATCHES (default "1 16"), 128 prompt
# tokens, 64 generated; the batch-1 bf16 run also times the HF peers
# (KILN_QUANT_PEER, default hf: eager and compiled). KILN_QUANT_SWEEP=1
# first times every gemm_quant tiling on the decode shapes (kiln_quant_sweep).
if [[ " $PARTS " == *" quant "* ]]; then
  if [[ -n "${KILN_QUANT_SWEEP:-}" ]]; then
    echo "== kiln_quant_sweep"
    timeout 300 "$BUILD/bin/kiln_quant_sweep" 2>&1 | tee "$OUT/bench_quant_sweep.txt"
    record quant_sweep "${PIPESTATUS[0]}"
  fi
  model="${KILN_BENCH_MODEL:-llama3-8b}"
  ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$model"
  header="$ROOT/test/models/$model"
  [[ -f "$header/model.safetensors" ]] && header="$header/model.safetensors"
  if [[ ! -f "$ckpt/tokenizer.json" ]]; then
    echo "== checkpoint $ckpt (no reference)"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$header" --out "$ckpt" 2>&1 | tee "$OUT/bench_${model}_checkpoint.log"
    record "checkpoint_$model" "${PIPESTATUS[0]}"
  fi
  for batch in ${KILN_QUANT_BATCHES:-1 16}; do
    for scheme in ${KILN_QUANT_SCHEMES:-bf16 int8 int4}; do
      art="$BUILD/artifacts/$model-$scheme-bf16"
      [[ $scheme == bf16 ]] && art="$BUILD/artifacts/$model-bf16"
      peer=none
      [[ $scheme == bf16 && $batch == 1 ]] && peer="${KILN_QUANT_PEER:-hf}"
      name="quant_${scheme}_b$batch"
      echo "== kiln bench decode $model $scheme batch $batch (peer $peer)"
      timeout 240 "$BUILD/bin/kiln" bench decode "$art" --model-source "$ckpt" --device cuda --batch "$batch" \
        --prompt-tokens 128 --gen-tokens 64 --peer "$peer" --json "$OUT/bench_$name.json" \
        2>"$OUT/bench_$name.err" | tee "$OUT/bench_$name.txt"
      rc=${PIPESTATUS[0]}
      grep -E "ms/step|weights|uploaded" "$OUT/bench_$name.err" | tee -a "$OUT/bench_$name.txt"
      record "$name" "$rc"
      [[ $rc == 0 ]] || tail -5 "$OUT/bench_$name.err"
    done
  done
fi

write_report
if [[ " $PARTS " == *" serve "* ]]; then
  model="${KILN_BENCH_MODEL:-llama3-8b}"
  ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$model"
  art="$BUILD/artifacts/$model-bf16"
  header="$ROOT/test/models/$model"
  [[ -f "$header/model.safetensors" ]] && header="$header/model.safetensors"
  if [[ ! -f "$ckpt/tokenizer.json" ]]; then
    echo "== checkpoint $ckpt (no reference)"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$header" --out "$ckpt" 2>&1 | tee "$OUT/bench_${model}_checkpoint.log"
    record "checkpoint_$model" "${PIPESTATUS[0]}"
  fi
  if [[ -z "${KILN_SERVE_SKIP_INVARIANCE:-}" ]]; then
    # The default kernels (a measurement: where a probe's tokens first
    # differ), then --batch-invariant (a check), then what that mode costs
    # batch-32 decode.
    for mode in default invariant; do
      echo "== batch invariance ($mode kernels) and parallel sampling on the GPU ($model bf16)"
      KILN_INVARIANCE_ARTIFACT="$art" KILN_INVARIANCE_MODEL_SOURCE="$ckpt" KILN_INVARIANCE_DEVICE=cuda \
        KILN_INVARIANCE_TOKENS="${KILN_INVARIANCE_TOKENS:-64}" KILN_INVARIANCE_REPORT_ONLY=$([[ $mode == default ]] && echo 1) \
        KILN_INVARIANCE_BATCH_INVARIANT=$([[ $mode == invariant ]] && echo 1) \
        timeout 300 "$BUILD/bin/kiln_batch_invariance_test" >"$OUT/batch_invariance_${mode}_test.log" 2>&1
      rc=$?
      grep -E "batch invariance|OK|FAILED" "$OUT/batch_invariance_${mode}_test.log" | tee -a "$OUT/bench_serve_invariance.txt"
      record "batch_invariance_$mode" "$rc"
    done
    for flag in "" --batch-invariant; do
      echo "== kiln bench decode $model batch 32 ${flag:-(default kernels)}" | tee -a "$OUT/bench_serve_invariance.txt"
      timeout 120 "$BUILD/bin/kiln" bench decode "$art" --model-source "$ckpt" --device cuda --batch 32 \
        --prompt-tokens 128 --gen-tokens 128 --peer none $flag 2>/dev/null | tail -3 | tee -a "$OUT/bench_serve_invariance.txt"
      record "invariance_cost${flag:+_invariant}" "${PIPESTATUS[0]}"
    done
  fi
  requests="${KILN_SERVE_REQUESTS:-1000}"
  for run in ${KILN_SERVE_RUNS:-offline offline-nocache poisson prefix}; do
    common=(--max-sequences 256 --max-batch-tokens 8192)
    run_art="$art"
    case $run in
      offline) flags=(--requests "$requests" --input-len 1000 --output-len 1000 --peer "${KILN_SERVE_PEER:-none}")
               [[ "${KILN_SERVE_PEER:-none}" == hf ]] &&
                 flags+=(--peer-requests "${KILN_SERVE_PEER_REQUESTS:-64}" --peer-batch 64)
               limit=480 ;;
      offline-nocache) flags=(--requests "$requests" --input-len 1000 --output-len 1000 --no-prefix-cache --peer none)
                       limit=480 ;;
      offline-fp8kv) flags=(--requests "$requests" --input-len 1000 --output-len 1000 --peer none)
                     run_art="$BUILD/artifacts/$model-fp8kv-bf16"; limit=480 ;;
      poisson) flags=(--workload poisson --rate "${KILN_SERVE_RATES:-sweep}" --lengths lognormal
                      --requests "${KILN_SERVE_POISSON_REQUESTS:-400}" --input-len 1000 --output-len 250 --peer none)
               limit=540 ;;
      http) flags=(--requests "${KILN_SERVE_HTTP_REQUESTS:-500}" --input-len 1000 --output-len 1000 --peer none --http)
            limit=900 ;;
      prefix) flags=(--workload prefix --requests "${KILN_SERVE_PREFIX_REQUESTS:-512}" --turns 4 --system-prompts 4
                     --system-len 2048 --input-len 256 --output-len 256 --peer none); limit=540 ;;
      *) fail "serve_$run" "unknown serve run (KILN_SERVE_RUNS)"; continue ;;
    esac
    echo "== kiln bench serve $model $run"
    timeout "$limit" "$BUILD/bin/kiln" bench serve "$run_art" --model-source "$ckpt" --device cuda "${common[@]}" \
      "${flags[@]}" --json "$OUT/bench_serve_$run.json" 2>"$OUT/bench_serve_$run.err" | tee "$OUT/bench_serve_$run.txt"
    rc=${PIPESTATUS[0]}
    record "serve_$run" "$rc"
    [[ $rc == 0 ]] || tail -5 "$OUT/bench_serve_$run.err" | tee -a "$OUT/bench_serve_$run.txt"
  done
fi

write_report
if [[ " $PARTS " == *" attention "* ]]; then
  echo "== attention kernels alone beside torch SDPA"
  # SDPA first: its run ends with the HBM read probe, kiln's ceiling.
  python3 "$ROOT/test/gpu/sdpa_bench.py" 2>&1 | tee "$OUT/attention_bench.txt"
  record sdpa_bench "${PIPESTATUS[0]}"
  hbm="$(awk '/^hbm_read_probe:/{print $2}' "$OUT/attention_bench.txt")"
  # The ceiling: the higher of torch's sum and kiln's GEMV read (above).
  hbm="$(python3 -c "import sys; print(max(float(v) for v in sys.argv[1:] if v))" "$hbm" "${KILN_READ_PROBE_GBPS:-}")"
  echo "attention ceiling: HBM read $hbm GB/s (the higher of torch's sum and kiln's GEMV read)" | tee -a "$OUT/attention_bench.txt"
  "$BUILD/bin/kiln_attention_bench" ${hbm:+--hbm "$hbm"} 2>&1 | tee -a "$OUT/attention_bench.txt"
  record attention_bench "${PIPESTATUS[0]}"
  echo "== the gate/up projection with SwiGLU: cuBLASLt + silu_mul against gemm_swiglu_wgmma"
  "$BUILD/bin/kiln_swiglu_bench" 2>&1 | tee "$OUT/swiglu_bench.txt"
  record swiglu_bench "${PIPESTATUS[0]}"
fi

write_report
if [[ " $PARTS " == *" moe "* ]]; then
  moe_batches="${KILN_MOE_BATCHES:-1 32}"
  moe_rows="${KILN_MOE_LAYER_ROWS:-1 32 2048}"
  echo "== mixture of experts: both expert paths against the CPU's f32 experts (moe_gpu_test)"
  "$BUILD/bin/moe_gpu_test" > "$OUT/moe_gpu_test.log" 2>&1
  record moe_gpu_test "$?"
  grep -E "^moe |OK \]|FAILED|Failure" "$OUT/moe_gpu_test.log"
  echo "== mixture of experts: kiln's MoE kernels, one Mixtral-8x7B layer"
  "$BUILD/bin/kiln_moe_bench" --rows "${moe_rows// /,}" --paths "${KILN_MOE_PATHS:-auto}" \
    ${KILN_READ_PROBE_GBPS:+--hbm "$KILN_READ_PROBE_GBPS"} 2>&1 | tee "$OUT/moe_bench.txt"
  record moe_bench "${PIPESTATUS[0]}"
  moe_model=mixtral-8x7b-8l
  moe_art="$BUILD/artifacts/$moe_model-bf16"
  moe_ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$moe_model"
  if [[ ! -d "$moe_art" ]]; then
    fail moe_kiln "no $moe_art (scripts/gpu-bundle.sh compiles it)"
  else
    if [[ ! -f "$moe_ckpt/tokenizer.json" ]]; then
      echo "== checkpoint $moe_ckpt (random bf16)"
      python3 "$ROOT/test/gpu/make_random_checkpoint.py" --header "$ROOT/test/models/$moe_model/model.safetensors" \
        --out "$moe_ckpt" 2>&1 | tee "$OUT/moe_checkpoint.log"
      record moe_checkpoint "${PIPESTATUS[0]}"
    fi
    for batch in $moe_batches; do
      echo "== kiln bench decode $moe_model --batch $batch (whole model, 8 layers)"
      timeout 300 "$BUILD/bin/kiln" bench decode "$moe_art" --model-source "$moe_ckpt" --device cuda --batch "$batch" \
        --prompt-tokens 128 --gen-tokens 128 --peer none --json "$OUT/moe_kiln_b$batch.json" \
        2>"$OUT/moe_kiln_b$batch.err" | tee "$OUT/moe_kiln_b$batch.txt"
      rc=${PIPESTATUS[0]}
      record "moe_kiln_b$batch" "$rc"
      [[ $rc == 0 ]] || tail -5 "$OUT/moe_kiln_b$batch.err"
    done
  fi
  echo "== mixture of experts: transformers' Mixtral (${KILN_MOE_LAYERS:-8} layers) on the same card"
  timeout "${KILN_MOE_HF_TIMEOUT:-480}" python3 "$ROOT/test/gpu/hf_moe_bench.py" --layers "${KILN_MOE_LAYERS:-8}" \
    --batches "${moe_batches// /,}" > "$OUT/moe_hf.json" 2> "$OUT/moe_hf.err"
  record moe_hf "$?"
  tail -1 "$OUT/moe_hf.json"
  grep -E "^hf_bench" "$OUT/moe_hf.err" | tail -8
fi

write_report
if [[ " $PARTS " == *" mamba "* ]]; then
  echo "== state-space kernels on the GPU: bf16 against the CPU's f32"
  "$BUILD/bin/ssm_gpu_test" > "$OUT/ssm_gpu_test.log" 2>&1
  record ssm_gpu_test "$?"
  grep -E "^  |OK \]|FAILED" "$OUT/ssm_gpu_test.log"
  echo "== the CUDA executor and engine on the state-space fixtures, against the CPU and the references"
  "$BUILD/bin/kiln_cuda_ssm_test" --gtest_output="xml:$OUT/kiln_cuda_ssm_test.xml" > "$OUT/kiln_cuda_ssm_test.log" 2>&1
  record kiln_cuda_ssm_test "$?"
  grep -E "worst relative|first tokens|OK \]|FAILED" "$OUT/kiln_cuda_ssm_test.log"
  for f in tiny-mamba tiny-mamba2 tiny-hybrid; do
    for art in artifact artifact-bf16; do
      echo "== kiln run test/fixtures/$f/$art --device cuda"
      "$BUILD/bin/kiln" run "$ROOT/test/fixtures/$f/$art" "Hello" --device cuda --model-source "$ROOT/test/fixtures/$f" \
        --max-tokens 8 --ignore-eos > "$OUT/ssm_run_${f}_$art.out" 2> "$OUT/ssm_run_${f}_$art.err"
      rc=$?
      record "ssm_run_${f}_$art" $rc
      tail -1 "$OUT/ssm_run_${f}_$art.err"
    done
  done
  echo "== the SSM fixtures' float64 references against transformers"
  python3 "$ROOT/test/gpu/check_ssm_reference.py" "$ROOT/test/fixtures/tiny-mamba" "$ROOT/test/fixtures/tiny-mamba2" \
    "$ROOT/test/fixtures/tiny-hybrid" 2>&1 | tee "$OUT/ssm_reference.txt"
  record ssm_reference "${PIPESTATUS[0]}"
fi
if [[ " $PARTS " == *" mambabench "* ]]; then
  echo "== kiln's SSM kernels, one mamba2-2.7b layer"
  "$BUILD/bin/kiln_ssm_bench" 2>&1 | tee "$OUT/mamba_bench.txt"
  record mamba_bench "${PIPESTATUS[0]}"
  mamba_model=mamba2-2.7b
  mamba_art="$BUILD/artifacts/$mamba_model-bf16"
  mamba_ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$mamba_model"
  if [[ ! -d "$mamba_art" ]]; then
    fail mamba_kiln "no $mamba_art (scripts/gpu-bundle.sh compiles it)"
  else
    if [[ ! -f "$mamba_ckpt/tokenizer.json" ]]; then
      echo "== checkpoint $mamba_ckpt (random bf16)"
      python3 "$ROOT/test/gpu/make_random_checkpoint.py" --header "$ROOT/test/models/$mamba_model/model.safetensors" \
        --out "$mamba_ckpt" 2>&1 | tee "$OUT/mamba_checkpoint.log"
      record mamba_checkpoint "${PIPESTATUS[0]}"
    fi
    mamba_bench() {  # name, then kiln bench's workload and flags
      local name=$1; shift
      echo "== kiln bench $* ($mamba_model, whole model)"
      timeout 240 "$BUILD/bin/kiln" bench "$1" "$mamba_art" --model-source "$mamba_ckpt" --device cuda "${@:2}" \
        --peer none --json "$OUT/mamba_kiln_$name.json" 2>"$OUT/mamba_kiln_$name.err" | tee "$OUT/mamba_kiln_$name.txt"
      local rc=${PIPESTATUS[0]}
      record "mamba_kiln_$name" "$rc"
      [[ $rc == 0 ]] || tail -5 "$OUT/mamba_kiln_$name.err"
    }
    for batch in ${KILN_MAMBA_BATCHES:-1 64}; do
      mamba_bench "b$batch" decode --batch "$batch" --prompt-tokens 16 --gen-tokens 128
    done
    # Per-token decode time after a long context: flat for a state-space model.
    for ctx in ${KILN_MAMBA_CONTEXTS:-1024 4096 16384 32768}; do
      mamba_bench "ctx$ctx" decode --batch 1 --prompt-tokens "$ctx" --gen-tokens 33
    done
    for len in ${KILN_MAMBA_PREFILL:-8192 32768}; do
      mamba_bench "prefill$len" prefill --prompt-tokens "$len" --runs 2
    done
  fi
  echo "== transformers' Mamba2ForCausalLM at mamba2-2.7b's shape"
  # shellcheck disable=SC2086  # KILN_MAMBA_HF_ARGS is a list of flags
  timeout "${KILN_MAMBA_HF_TIMEOUT:-900}" python3 "$ROOT/test/gpu/hf_mamba_bench.py" ${KILN_MAMBA_HF_ARGS:-} \
    > "$OUT/mamba_hf.json" 2> "$OUT/mamba_hf.err"
  record mamba_hf "$?"
  cat "$OUT/mamba_hf.json"
fi

write_report
if [[ " $PARTS " == *" sanitizer "* ]]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool kernels_gpu_test"
    sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
    # The kernels at the test's smaller shapes (the bandwidth and 8k-context
    # cases would take many minutes under the tools).
    KILN_UNDER_SANITIZER=1 timeout "${KILN_SANITIZER_TIMEOUT:-150}" "$sanitizer" --tool "$tool" --error-exitcode 9 \
      "$BUILD/bin/kernels_gpu_test" \
      --gtest_filter="${KILN_SANITIZER_FILTER:-*Embedding*:*RmsNorm*:*F32Residual*:*Rope*:*PagedAttention*:*FlashAttentionWgmmaSmall*:*GemmSwiGluSmall*:*SiluMul*:*SkinnyGemm:*SkinnyGemmNormFold*:*Sampling*:*Argmax*}" \
      >"$OUT/sanitizer_$tool.log" 2>&1
    rc=$?
    tail -3 "$OUT/sanitizer_$tool.log"
    record "sanitizer_$tool" $rc
  done
fi

write_report
if [[ " $PARTS " == *" spec "* ]]; then
  model="${KILN_BENCH_MODEL:-llama3-8b}"
  ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$model"
  header="$ROOT/test/models/$model"
  [[ -f "$header/model.safetensors" ]] && header="$header/model.safetensors"
  if [[ ! -f "$ckpt/tokenizer.json" ]]; then
    echo "== checkpoint $ckpt (no reference)"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$header" --out "$ckpt" 2>&1 | tee "$OUT/bench_${model}_checkpoint.log"
    record "checkpoint_$model" "${PIPESTATUS[0]}"
  fi
  : >"$OUT/bench_spec_verify.txt"
  for nodes in 4 16 64; do
    art="$BUILD/artifacts/$model-spec$nodes-bf16"
    if [[ ! -f "$art/manifest.json" ]]; then
      fail "spec_verify_$nodes" "MISSING $art (scripts/gpu-bundle.sh compiles it)"; continue
    fi
    for batch in ${KILN_SPEC_BATCHES:-1 16}; do
      name="spec_verify_${nodes}_b$batch"
      echo "== kiln bench decode $art --verify --batch $batch"
      timeout 240 "$BUILD/bin/kiln" bench decode "$art" --model-source "$ckpt" --device cuda --verify \
        --batch "$batch" --prompt-tokens 128 --runs 3 --json "$OUT/$name.json" >"$OUT/$name.txt" 2>"$OUT/$name.err"
      rc=$?
      record "$name" $rc
      cat "$OUT/$name.txt"
      [[ $rc == 0 ]] || tail -5 "$OUT/$name.err"
      grep -h '^verify-ratio' "$OUT/$name.txt" >>"$OUT/bench_spec_verify.txt"
    done
  done
  echo "== verify step / plain decode step ($model, context 128)"
  {
    echo "| tree nodes | batch | plain decode ms | verify ms (ids back) | ratio | verify ms (logits back) | ratio |"
    echo "|---|---|---|---|---|---|---|"
    sed -E 's/.*nodes=([0-9]+) batch=([0-9]+) plain_ms=([0-9.]+) verify_ms=([0-9.]+) verify_logits_ms=([0-9.]+) ratio=([0-9.]+) logits_ratio=([0-9.]+).*/| \1 | \2 | \3 | \4 | \6 | \5 | \7 |/' \
      "$OUT/bench_spec_verify.txt"
  } | tee "$OUT/bench_spec_table.txt"

  # SmolLM2 (trained: the drafts get accepted) through kiln run on CUDA:
  # greedy text with n-gram speculation equals the plain run's.
  gguf_file="${KILN_TRAINED_GGUF:-/tmp/kiln-xfer/SmolLM2-135M-Instruct.Q4_1.gguf}"
  art="$BUILD/artifacts/smollm2-q4_1-spec-bf16"
  if [[ ! -f "$gguf_file" ]]; then
    fail spec_smollm2 "NOT RUN: no $gguf_file (scripts/split-for-device.sh --join rebuilds it)"
  elif [[ ! -f "$art/manifest.json" ]]; then
    fail spec_smollm2 "MISSING $art (scripts/gpu-bundle.sh compiles it)"
  else
    prompts=("Once upon a time, in a small village," "def fibonacci(n):"
             "Copy the list exactly. red green blue yellow red green blue yellow red green blue yellow red green")
    rc_all=0
    for i in "${!prompts[@]}"; do
      run=("$BUILD/bin/kiln" run "$art" --model-source "$gguf_file" "${prompts[$i]}" --max-tokens 64 --ignore-eos
           --device cuda)
      timeout 120 "${run[@]}" >"$OUT/spec_smollm2_${i}_plain.txt" 2>"$OUT/spec_smollm2_${i}_plain.err"
      rc=$?
      for spec in chain tree; do
        flags=(--spec=ngram); [[ $spec == tree ]] && flags+=(--spec-tree 2,2,1)
        timeout 120 "${run[@]}" "${flags[@]}" >"$OUT/spec_smollm2_${i}_$spec.txt" 2>"$OUT/spec_smollm2_${i}_$spec.err"
        rc_spec=$?
        if [[ $rc != 0 || $rc_spec != 0 ]]; then
          echo "prompt $i $spec: kiln run failed (rc $rc plain, $rc_spec speculating)"; tail -3 "$OUT/spec_smollm2_${i}_$spec.err"
          rc_all=1
        elif cmp -s "$OUT/spec_smollm2_${i}_plain.txt" "$OUT/spec_smollm2_${i}_$spec.txt"; then
          echo "prompt $i $spec: same text as plain; $(grep -hiE 'accept' "$OUT/spec_smollm2_${i}_$spec.err" | tail -1)"
        else
          echo "prompt $i $spec: DIFFERENT text from plain"; diff "$OUT/spec_smollm2_${i}_plain.txt" "$OUT/spec_smollm2_${i}_$spec.txt" | head -6
          rc_all=1
        fi
      done
    done 2>&1 | tee "$OUT/bench_spec_smollm2.txt"
    grep -q "DIFFERENT\|failed" "$OUT/bench_spec_smollm2.txt" && rc_all=1
    record spec_smollm2 $rc_all
  fi
fi

# distill_part PART SCRIPT OUT_SUBDIR EXTRA: train a draft with scripts/SCRIPT
# from the trained GGUF into $OUT/OUT_SUBDIR (none: EXTRA names --out); EXTRA
# is a list of extra flags.
distill_part() {
  local part=$1 script=$2 sub=$3 extra=$4
  gguf_file="${KILN_TRAINED_GGUF:-/tmp/kiln-xfer/SmolLM2-135M-Instruct.Q4_1.gguf}"
  if [[ ! -f "$gguf_file" ]]; then
    fail "$part" "NOT RUN: no $gguf_file (scripts/split-for-device.sh --join rebuilds it)"
  else
    # shellcheck disable=SC2086  # extra is a list of flags
    local out=()
    [[ -n "$sub" ]] && out=(--out "$OUT/$sub")
    timeout "${KILN_DISTILL_TIMEOUT:-540}" python3 "$ROOT/scripts/$script" --gguf "$gguf_file" \
      "${out[@]}" $extra 2>&1 | tee "$OUT/bench_$part.txt"
    record "$part" "${PIPESTATUS[0]}"
  fi
}

if [[ " $PARTS " == *" distill "* ]]; then
  draft_src="${KILN_DRAFT_SOURCE:-/tmp/kiln-draft}"
  distill_part distill distill_draft.py "" "--out $draft_src ${KILN_DISTILL_ARGS:-}"
  if [[ -f "$draft_src/model.safetensors" ]]; then
    # One file comes back from $OUT at most 16 MiB: the weights in parts.
    mkdir -p "$OUT/draft"
    find "$draft_src" -maxdepth 1 -type f ! -name model.safetensors -exec cp {} "$OUT/draft/" \;
    split -b 15M "$draft_src/model.safetensors" "$OUT/draft/model.safetensors.part-"
  fi
fi

if [[ " $PARTS " == *" distillhead "* ]]; then
  distill_part distillhead distill_head.py head "${KILN_DISTILL_HEAD_ARGS:-}"
fi

if [[ " $PARTS " == *" specbench "* ]]; then
  gguf_file="${KILN_TRAINED_GGUF:-/tmp/kiln-xfer/SmolLM2-135M-Instruct.Q4_1.gguf}"
  art="$BUILD/artifacts/smollm2-q4_1-spec-bf16"
  if [[ ! -f "$gguf_file" || ! -f "$art/manifest.json" ]]; then
    fail specbench "NOT RUN: needs $gguf_file and $art (scripts/gpu-bundle.sh)"
  else
    bench=("$BUILD/bin/kiln" bench spec "$art" --model-source "$gguf_file" --device cuda --quiet
           --batch "${KILN_SPECBENCH_BATCHES:-1,16}" --gen-tokens 128)
    rc_all=0
    runs=(ngram)
    for d in ${KILN_SPECBENCH_DRAFTS:-self distilled layerskip}; do runs+=("$d"); done
    for run in "${runs[@]}"; do
      case $run in
        ngram) flags=(--spec=ngram) ;;
        self) flags=(--spec=draft:"$art" --draft-source "$gguf_file") ;;
        distilled)
          draft_src="${KILN_DRAFT_SOURCE:-/tmp/kiln-draft}"
          if [[ ! -f "$draft_src/model.safetensors" || ! -f "$BUILD/artifacts/smollm2-draft-bf16/manifest.json" ]]; then
            echo "== $run: NOT RUN: needs $draft_src and the artifact smollm2-draft-bf16"; rc_all=1; continue
          fi
          flags=(--spec=draft:"$BUILD/artifacts/smollm2-draft-bf16" --draft-source "$draft_src") ;;
        layerskip) flags=(--spec=layerskip:"${KILN_SPECBENCH_LAYERSKIP:-24}") ;;
        *) echo "== $run: unknown (KILN_SPECBENCH_DRAFTS: self distilled layerskip)"; rc_all=1; continue ;;
      esac
      for shape in "" "--spec-tree 2,2,1"; do
        echo "== $run ${shape:-chain:4}"
        # shellcheck disable=SC2086  # $shape is two words or none
        timeout 150 "${bench[@]}" "${flags[@]}" $shape 2>"$OUT/specbench_${run}.err" || {
          echo "== $run: FAILED"; tail -3 "$OUT/specbench_${run}.err"; }
      done
    done 2>&1 | tee "$OUT/bench_specbench.txt"
    # The timed runs use the default kernels, whose rounding may flip near
    # ties; the batch-invariant ones must give plain greedy's tokens.
    echo "== ngram chain:4, --batch-invariant: the tokens must be plain greedy's" | tee -a "$OUT/bench_specbench.txt"
    { timeout 150 "${bench[@]}" --spec=ngram --batch-invariant 2>"$OUT/specbench_invariant.err" ||
        echo "== ngram --batch-invariant: FAILED"; } | tee -a "$OUT/bench_specbench.txt"
    grep -q "NOT RUN\|DIFFERENT\|unknown\|FAILED" "$OUT/bench_specbench.txt" && rc_all=1
    record specbench $rc_all
  fi
fi

write_report
if [[ " $PARTS " == *" sparse "* ]]; then
  for name in kiln_sparse24_gpu_test kiln_sparse24_bench; do
    t="$BUILD/bin/$name"
    [[ -x "$t" ]] || { fail "$name" "MISSING $t (scripts/gpu-bundle.sh builds it)"; continue; }
    echo "== $name"
    timeout 150 "$t" >"$OUT/$name.log" 2>&1
    rc=$?
    record "$name" "$rc"
    tail -25 "$OUT/$name.log" | tee "$OUT/bench_sparse_${name#kiln_sparse24_}.txt"
  done
  echo "== kiln_cuda_vs_cpu_executor_test (the sparse plans)"
  timeout 120 "$BUILD/bin/kiln_cuda_vs_cpu_executor_test" --gtest_filter='CudaExecutor.SparseLlama*' \
    >"$OUT/kiln_cuda_vs_cpu_sparse_test.log" 2>&1
  record sparse_vs_cpu $?
  grep -E "worst relative L2|run dense|SKIPPED|FAILED" "$OUT/kiln_cuda_vs_cpu_sparse_test.log" |
    tee "$OUT/bench_sparse_vs_cpu.txt"
  model="${KILN_BENCH_MODEL:-llama3-8b}"
  ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$model"
  header="$ROOT/test/models/$model"
  [[ -f "$header/model.safetensors" ]] && header="$header/model.safetensors"
  if [[ ! -f "$ckpt/tokenizer.json" ]]; then
    echo "== checkpoint $ckpt (no reference)"
    PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
      --header "$header" --out "$ckpt" 2>&1 | tee "$OUT/bench_${model}_checkpoint.log"
    record "checkpoint_$model" "${PIPESTATUS[0]}"
  fi
  for plan in bf16 sparse-bf16; do
    name="sparse_decode_${plan}"
    echo "== kiln bench decode $model-$plan batch 1"
    timeout 240 "$BUILD/bin/kiln" bench decode "$BUILD/artifacts/$model-$plan" --model-source "$ckpt" --device cuda \
      --batch 1 --prompt-tokens 128 --gen-tokens 64 --peer none --json "$OUT/$name.json" \
      2>"$OUT/$name.err" | tee "$OUT/$name.txt"
    rc=${PIPESTATUS[0]}
    record "$name" "$rc"
    [[ $rc == 0 ]] || tail -5 "$OUT/$name.err"
  done
  {
    echo "== 2:4 sparse decode, $model batch 1 (128 prompt, 64 generated tokens)"
    echo "| plan | decode tok/s | ms/token | weights uploaded |"
    echo "|---|---|---|---|"
    for plan in bf16 sparse-bf16; do
      json="$OUT/sparse_decode_${plan}.json"
      uploaded="$(grep -oE "uploaded [0-9.]+ GB" "$OUT/sparse_decode_${plan}.err" 2>/dev/null | tail -1)"
      python3 - "$json" "$plan" "${uploaded#uploaded }" <<'PY'
import json, sys
path, plan, uploaded = sys.argv[1:]
try:
    tps = json.load(open(path))["kiln"]["decode_tps"]
    print(f"| {plan} | {tps:.1f} | {1e3 / tps:.2f} | {uploaded or '?'} |")
except Exception as e:
    print(f"| {plan} | not run ({type(e).__name__}) | | |")
PY
    done
    cat "$OUT/bench_sparse_vs_cpu.txt"
  } | tee "$OUT/bench_sparse.txt"
fi

echo
printf '%-24s %s\n' "test" "result" | tee "$OUT/summary.txt"
for t in "${tests[@]}"; do n="$(basename "$t")"; printf '%-24s %s\n' "$n" "${result[$n]}"; done | tee -a "$OUT/summary.txt"

exit $status

