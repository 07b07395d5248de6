// A request's speculative decoding between steps: its drafter (the
// engine's, shared by every request of that method), the tree it drafts,
// and the off-switch that pauses drafting while acceptance is too low to
// pay for the verify rows' extra tokens.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/spec/drafter.h"

namespace kiln {

// The off-switch (docs/design/speculative.md): over each window of
// kWindowRows verify rows that carried drafts, if fewer than
// kMinAcceptance of the drafted tokens were accepted, drafting pauses for
// the next `pause` generated tokens (kFirstPause, doubling while windows
// keep failing, at most kMaxPause); a window that passes resets the pause.
// Rows without drafts cost what a decode row costs and are not counted.
struct SpecState {
  static constexpr int kWindowRows = 8;
  static constexpr double kMinAcceptance = 0.25;
  static constexpr int64_t kFirstPause = 32;
  static constexpr int64_t kMaxPause = 512;

  spec::Drafter* drafter = nullptr;
  spec::TreeShape tree;
  // A draft head's input: the target's hidden state at the token whose
  // logits chose the last token (kept after each forward or verify).
  std::vector<float> hidden;
  int window_rows = 0;
  int64_t window_drafted = 0, window_accepted = 0;
  int64_t pause = kFirstPause;
  int64_t paused_until = 0;  // no drafts before this many generated tokens

  bool drafting(int64_t generated) const { return generated >= paused_until; }
  // One verify row's outcome, `generated` tokens generated after it.
  void record(int64_t drafted, int64_t accepted, int64_t generated) {
    if (drafted == 0) return;
    ++window_rows;
    window_drafted += drafted;
    window_accepted += accepted;
    if (window_rows < kWindowRows) return;
    if (double(window_accepted) < kMinAcceptance * double(window_drafted)) {
      paused_until = generated + pause;
      pause = std::min(2 * pause, kMaxPause);
    } else {
      pause = kFirstPause;
    }
    window_rows = 0;
    window_drafted = window_accepted = 0;
  }
};

}  // namespace kiln
