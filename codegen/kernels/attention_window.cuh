// Sliding-window attention (Mistral's window, the sliding layers of Qwen2/3):
// with a window W the query at position p sees keys (p - W, p], at most W of
// them, as transformers masks them (kv_idx > q_idx - W). An instance's
// Config declares `static constexpr int kWindow = W` (absent, or 0: full
// causal attention). The attention kernels start their key loops at the
// window of the first query they serve, so a sequence's pool blocks wholly
// before its window are never read (the runtime may free them), and mask
// the keys a later query of the same tile no longer sees.
#pragma once

#include "tensor_core.cuh"  // KILN_HOST_DEVICE

namespace kiln {
namespace kernels {

// Config::kWindow, or 0 for a Config that declares none.
template <class C, class = void>
struct AttentionWindow {
  static constexpr int value = 0;
};
template <class C>
struct AttentionWindow<C, decltype(void(C::kWindow))> {
  static constexpr int value = C::kWindow;
};

// The first key the query at position `pos` sees: pos - window + 1, or 0
// (no window, or a window longer than the context).
KILN_HOST_DEVICE constexpr int window_begin(int window, int pos) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

}  // namespace kernels
}  // namespace kiln
