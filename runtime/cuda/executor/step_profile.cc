#include "runtime/cuda/executor/step_profile.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace kiln::cuda {

bool StepProfile::beginForward(const std::string& phase) {
  counting_ = warmed_[phase];
  warmed_[phase] = true;
  if (counting_) ++forwards_[phase];
  return counting_;
}

void StepProfile::addStep(const std::string& phase, const std::string& instance, double ms) {
  if (!counting_) return;
  Row& row = rows_[{phase, instance}];
  ++row.calls;
  row.ms += ms;
}

std::string StepProfile::report() const {
  std::string out;
  for (const auto& [phase, forwards] : forwards_) {
    std::vector<std::pair<std::string, Row>> rows;
    double total = 0;
    for (const auto& [key, row] : rows_) {
      if (std::get<0>(key) != phase) continue;
      rows.emplace_back(std::get<1>(key), row);
      total += row.ms;
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    const double per = 1.0 / double(forwards);
    out += fmt::format("step profile, {}: {} forward passes after the first, {:.3f} ms of kernels per pass "
                       "(steps timed one by one, no graph, no overlap)\n",
                       phase, forwards, total * per);
    out += fmt::format("  {:<72} {:>9} {:>10} {:>7} {:>9}\n", "instance", "launches", "ms/pass", "share",
                       "us/launch");
    for (const auto& [name, row] : rows)
      out += fmt::format("  {:<72} {:>9.0f} {:>10.3f} {:>6.1f}% {:>9.1f}\n", name, double(row.calls) * per,
                         row.ms * per, total > 0 ? 100.0 * row.ms / total : 0.0,
                         1e3 * row.ms / double(row.calls));
  }
  return out;
}

}  // namespace kiln::cuda
