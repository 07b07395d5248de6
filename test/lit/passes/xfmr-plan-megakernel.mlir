// The decode entry cut into the megakernel's tasks (docs/design/megakernel.md).
// RUN: kiln-compile %models/tiny-llama --emit=kernels --target=cpu > %t.mlir
// RUN: kiln-opt %t.mlir --xfmr-plan-megakernel="max-batch=2 tile=64" | FileCheck %s
// RUN: kiln-compile %models/tiny-llama --emit=manifest --target=cpu --megakernel | FileCheck %s --check-prefix=MANIFEST
// RUN: kiln-compile %models/tiny-llama --emit=manifest --target=cpu | FileCheck %s --check-prefix=OFF
// RUN: rm -rf %t.art && kiln-compile %models/tiny-llama --target=cpu --megakernel -o %t.art 2>/dev/null
// RUN: kiln-kernels %t.art tasks | FileCheck %s --check-prefix=TASKS
// RUN: not kiln-opt %t.mlir --xfmr-plan-megakernel="tile=0" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: rm -rf %t.off && kiln-compile %models/tiny-llama --target=cpu -o %t.off 2>/dev/null
// RUN: not kiln-kernels %t.off tasks 2>&1 | FileCheck %s --check-prefix=NOTASKS

// tiny-llama: 2 layers, hidden 64, qkv 128 columns, 4 heads on 2 kv heads,
// gate_up 256, vocab 128. One counter a step (23 steps), final = its tasks.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: xfmr.megakernel = {counters = [{final = 1 : i64, id = 0 : i64, step = 0 : i64}, {final = 1 : i64, id = 1 : i64, step = 1 : i64}, {final = 2 : i64, id = 2 : i64, step = 2 : i64}, {final = 1 : i64, id = 3 : i64, step = 3 : i64}, {final = 4 : i64, id = 4 : i64, step = 4 : i64}, {final = 1 : i64, id = 5 : i64, step = 5 : i64}, {final = 1 : i64, id = 6 : i64, step = 6 : i64}, {final = 4 : i64, id = 7 : i64, step = 7 : i64}, {final = 1 : i64, id = 8 : i64, step = 8 : i64}, {final = 1 : i64, id = 9 : i64, step = 9 : i64}
// CHECK-SAME: {final = 2 : i64, id = 22 : i64, step = 22 : i64}], max_batch = 2 : i64,
// Layer 0 in list order: the embedding, its norm, the qkv projection's two
// tiles on the norm, rope on both tiles, attention per (sequence slot, kv
// head) on rope, the o_proj tile on all four attention tasks, the residual
// norm on o_proj, gate_up's four tiles on the norm, silu_mul on all four,
// down on silu_mul.
// CHECK-SAME: tasks = [{kind = "embedding", signals = array<i64: 0>, step = 0 : i64, waits = array<i64>},
// CHECK-SAME: {kind = "rms_norm", signals = array<i64: 1>, step = 1 : i64, waits = array<i64: 0, 1>},
// CHECK-SAME: {columns = array<i64: 0, 64>, kind = "gemm", signals = array<i64: 2>, step = 2 : i64, waits = array<i64: 1, 1>},
// CHECK-SAME: {columns = array<i64: 64, 128>, kind = "gemm", signals = array<i64: 2>, step = 2 : i64, waits = array<i64: 1, 1>},
// CHECK-SAME: {kind = "rope_kv_append", signals = array<i64: 3>, step = 3 : i64, waits = array<i64: 2, 2>},
// CHECK-SAME: {kind = "paged_attention", kv_head = 0 : i64, sequence = 0 : i64, signals = array<i64: 4>, step = 4 : i64, waits = array<i64: 3, 1>},
// CHECK-SAME: {kind = "paged_attention", kv_head = 1 : i64, sequence = 0 : i64, signals = array<i64: 4>, step = 4 : i64, waits = array<i64: 3, 1>},
// CHECK-SAME: {kind = "paged_attention", kv_head = 0 : i64, sequence = 1 : i64, signals = array<i64: 4>, step = 4 : i64, waits = array<i64: 3, 1>},
// CHECK-SAME: {kind = "paged_attention", kv_head = 1 : i64, sequence = 1 : i64, signals = array<i64: 4>, step = 4 : i64, waits = array<i64: 3, 1>},
// CHECK-SAME: {columns = array<i64: 0, 64>, kind = "gemm", signals = array<i64: 5>, step = 5 : i64, waits = array<i64: 4, 4>},
// CHECK-SAME: {kind = "residual_rms_norm", signals = array<i64: 6>, step = 6 : i64, waits = array<i64: 5, 1>},
// CHECK-SAME: {columns = array<i64: 0, 64>, kind = "gemm", signals = array<i64: 7>, step = 7 : i64, waits = array<i64: 6, 1>},
// CHECK-SAME: {columns = array<i64: 192, 256>, kind = "gemm", signals = array<i64: 7>, step = 7 : i64, waits = array<i64: 6, 1>},
// CHECK-SAME: {kind = "silu_mul", signals = array<i64: 8>, step = 8 : i64, waits = array<i64: 7, 4>},
// CHECK-SAME: {columns = array<i64: 0, 64>, kind = "gemm", signals = array<i64: 9>, step = 9 : i64, waits = array<i64: 8, 1>},
// Layer 1's attention waits on its own rope; the LM head's two tiles end the list.
// CHECK-SAME: {kind = "paged_attention", kv_head = 1 : i64, sequence = 1 : i64, signals = array<i64: 13>, step = 13 : i64, waits = array<i64: 12, 1>},
// CHECK-SAME: {kind = "rms_norm", signals = array<i64: 21>, step = 21 : i64, waits = array<i64: 20, 1>},
// CHECK-SAME: {columns = array<i64: 0, 64>, kind = "gemm", signals = array<i64: 22>, step = 22 : i64, waits = array<i64: 21, 1>},
// CHECK-SAME: {columns = array<i64: 64, 128>, kind = "gemm", signals = array<i64: 22>, step = 22 : i64, waits = array<i64: 21, 1>}], tile = 64 : i64}

// The manifest's section (8 sequence slots by default).
// MANIFEST: "megakernel": {
// MANIFEST: "counters": [
// MANIFEST: "max_batch": 8,
// MANIFEST: "tasks": [
// MANIFEST: "columns": [
// MANIFEST-NEXT: 0,
// MANIFEST-NEXT: 64
// MANIFEST-NEXT: ],
// MANIFEST-NEXT: "kind": "gemm",
// MANIFEST-NEXT: "signals": [
// MANIFEST-NEXT: 2
// MANIFEST-NEXT: ],
// MANIFEST-NEXT: "step": 2,
// MANIFEST-NEXT: "waits": [
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "counter": 1,
// MANIFEST-NEXT: "value": 1
// MANIFEST: "tile": 64

// Off by default.
// OFF-NOT: "megakernel"

// The task list in bf16 weights: 64 columns of k = 64 are 8 KiB; down's
// k = 128 twice that.
// TASKS: entry forward: 62 tasks, 23 counters, max_batch 8, tile 64
// TASKS: task  kind                 step  tile            weight_bytes  waits                     signals
// TASKS: 2  gemm                    2  cols 0-64               8192  c1>=1                     c2
// TASKS: 20  paged_attention         4  seq 7 kvh 1                0  c3>=1                     c4
// TASKS: 21  gemm                    5  cols 0-64               8192  c4>=16                    c5
// TASKS: 28  gemm                    9  cols 0-64              16384  c8>=1                     c9
// TASKS: summary of forward:
// TASKS: gemm                    18 tasks        163840 weight bytes
// TASKS: paged_attention         32 tasks             0 weight bytes
// TASKS: counters               23 (one a step; final values = the step's task count)
// TASKS: critical path      23 tasks, 90112 weight bytes along the heaviest chain

// BADTILE: error: megakernel tile 0 is out of range, expected >= 1

// NOTASKS: kiln-kernels: {{.*}}manifest.json: no entry has a megakernel section (kiln-compile --megakernel writes one)
