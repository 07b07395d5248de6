// The megakernel section of a plan: the task graph planMegakernel makes of
// the tiny-llama fixture's forward entry (tiles, counters, waits, order),
// and the loader's checks of a section, each error naming what is wrong.
#include "runtime/artifact/megakernel.h"
#include "runtime/artifact/megakernel_graph.h"
#include "runtime/artifact/manifest.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kiln {
namespace {

using json = nlohmann::json;

class MegakernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream file(checkoutPath("test/fixtures/tiny-llama/artifact/manifest.json"));
    ASSERT_TRUE(file) << "cannot read the tiny-llama fixture";
    std::stringstream text;
    text << file.rdbuf();
    manifest_json_ = json::parse(text.str());
    auto manifest = Manifest::parse(text.str(), "manifest.json");
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    manifest_ = manifest.take();
    auto plan = planMegakernel(forward(), {.max_batch = 2, .tile = 64});
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    plan_ = plan.take();
  }
  const Entry& forward() const { return *manifest_.findEntry("forward"); }

  // The manifest with `section` as the forward entry's megakernel, parsed.
  Result<Manifest> withSection(const json& section) const {
    json m = manifest_json_;
    m["entries"]["forward"]["megakernel"] = section;
    return Manifest::parse(m.dump(), "manifest.json");
  }
  std::string errorOf(const json& section) const {
    auto parsed = withSection(section);
    return parsed.ok() ? "" : parsed.error().message;
  }
  // The index of the first task of `step`.
  size_t firstTaskOf(int64_t step) const {
    for (size_t i = 0; i < plan_.tasks.size(); ++i)
      if (plan_.tasks[i].step == step) return i;
    return plan_.tasks.size();
  }

  json manifest_json_;
  Manifest manifest_;
  MegakernelPlan plan_;
};

TEST_F(MegakernelTest, TilesCountersAndWaitsOfTinyLlama) {
  const Entry& e = forward();
  // 2 layers: embedding, norm, qkv [128], rope, attention, o [64], norm,
  // gate_up [256], silu_mul, down [64], norm, ... add, gather, norm, head [128].
  std::map<StepKind, int64_t> tasks;
  for (const MegakernelTask& t : plan_.tasks) ++tasks[t.kind];
  EXPECT_EQ(tasks[StepKind::kGemm], 2 * (2 + 1 + 4 + 1) + 2);
  EXPECT_EQ(tasks[StepKind::kPagedAttention], 2 * 2 * 2);  // layers x max_batch x kv heads
  EXPECT_EQ(tasks[StepKind::kRmsNorm] + tasks[StepKind::kResidualRmsNorm], 2 + 3);
  ASSERT_EQ(plan_.counters.size(), e.steps.size());
  for (const MegakernelCounter& c : plan_.counters) EXPECT_EQ(c.step, c.id);
  EXPECT_EQ(plan_.counters[2].final, 2);  // qkv: 128 columns in tiles of 64
  EXPECT_EQ(plan_.counters[4].final, 4);  // attention

  // Each task waits for exactly the steps it reads from (the arena's
  // reuse adds no wait the data flow does not imply here).
  auto waitsOf = [&](int64_t step) {
    std::vector<std::pair<int64_t, int64_t>> waits;
    for (const MegakernelWait& w : plan_.tasks[firstTaskOf(step)].waits) waits.push_back({w.counter, w.value});
    return waits;
  };
  using W = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(waitsOf(2), (W{{1, 1}}));           // qkv tiles: the norm
  EXPECT_EQ(waitsOf(3), (W{{2, 2}}));           // rope: both qkv tiles
  EXPECT_EQ(waitsOf(4), (W{{3, 1}}));           // attention: the rope and its KV append
  EXPECT_EQ(waitsOf(5), (W{{4, 4}}));           // o_proj tiles: every attention task
  EXPECT_EQ(waitsOf(6), (W{{5, 1}}));           // the norm: o_proj (the residual is implied)
  EXPECT_EQ(waitsOf(8), (W{{7, 4}}));           // silu_mul: all of gate_up
  EXPECT_TRUE(waitsOf(0).empty());

  // Listed topologically, and each signals its step's counter.
  for (const MegakernelTask& t : plan_.tasks) EXPECT_EQ(t.signals, std::vector<int64_t>{t.step});
  EXPECT_TRUE(checkMegakernel(plan_, e, "plan").ok());
  // The head's 2 tiles end the longest chain: every step is on it.
  EXPECT_EQ(criticalPath(plan_, e).tasks, int64_t(e.steps.size()));
  EXPECT_EQ(taskWeightBytes(plan_.tasks[firstTaskOf(2)], e), 64 * 64 * 4);
}

TEST_F(MegakernelTest, SectionRoundTripsThroughTheManifest) {
  auto parsed = withSection(toJson(plan_));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const Entry* e = parsed->findEntry("forward");
  ASSERT_TRUE(e->megakernel.has_value());
  EXPECT_EQ(toJson(*e->megakernel), toJson(plan_));
  EXPECT_FALSE(manifest_.findEntry("forward")->megakernel.has_value());
}

TEST_F(MegakernelTest, ErrorsNameWhatIsWrong) {
  const json good = toJson(plan_);
  const size_t o_proj = firstTaskOf(5);
  const std::string where = "manifest.json: entries.forward.megakernel";
  {
    json s = good;
    s["tasks"][o_proj]["waits"][0]["counter"] = 999;
    EXPECT_EQ(errorOf(s), fmt::format("{}.tasks[{}].waits[0].counter: 999 is not a counter (there are {})", where,
                                      o_proj, plan_.counters.size()));
  }
  {
    json s = good;
    s["tasks"][o_proj]["waits"][0]["value"] = 5;
    EXPECT_EQ(errorOf(s), fmt::format("{}.tasks[{}].waits[0]: counter 4 (step 4) never reaches 5: its final value "
                                      "is 4",
                                      where, o_proj));
  }
  {
    json s = good;  // a tile of o_proj missing
    s["tasks"].erase(o_proj);
    EXPECT_NE(errorOf(s).find("step 5 (gemm) has its columns [0, 64) in no task"), std::string::npos) << errorOf(s);
  }
  {
    json s = good;  // o_proj's tile twice
    s["tasks"].push_back(s["tasks"][o_proj]);
    EXPECT_NE(errorOf(s).find("step 5 (gemm) has its columns [0, 64) in two tasks"), std::string::npos)
        << errorOf(s);
  }
  {
    json s = good;  // an attention task twice
    const size_t attention = firstTaskOf(4);
    s["tasks"][attention + 1] = s["tasks"][attention];
    EXPECT_NE(errorOf(s).find("step 4's sequence 0, kv head 0 is already another task's"), std::string::npos)
        << errorOf(s);
  }
  {
    json s = good;  // o_proj listed first: it would wait on tasks no SM has taken
    json task = s["tasks"][o_proj];
    s["tasks"].erase(o_proj);
    s["tasks"].insert(s["tasks"].begin(), task);
    EXPECT_EQ(errorOf(s), fmt::format("{}.tasks[0].waits[0]: counter 4 (step 4) reaches 4 only with tasks listed "
                                      "after this one (step 5, columns [0, 64)); the SMs take tasks in list order, "
                                      "so this one could wait forever",
                                      where));
  }
  {
    json s = good;
    s["counters"][3]["final"] = 2;
    EXPECT_EQ(errorOf(s), fmt::format("{}.counters[3].final: 2 but 1 tasks signal it", where));
  }
  {
    json s = good;
    s["tasks"][o_proj]["kind"] = "rms_norm";
    EXPECT_EQ(errorOf(s), fmt::format("{}.tasks[{}].kind: rms_norm but step 5 is a gemm step", where, o_proj));
  }
  {
    json s = good;
    s["tasks"][o_proj].erase("columns");
    EXPECT_EQ(errorOf(s), fmt::format("{}.tasks[{}].columns: expected [begin, end], two integers (a gemm task's "
                                      "output columns)",
                                      where, o_proj));
  }
  {
    json s = good;
    s["tasks"][0]["signals"] = json::array({plan_.counters.size()});
    EXPECT_EQ(errorOf(s), fmt::format("{}.tasks[0].signals[0]: {} is not a counter (there are {})", where,
                                      plan_.counters.size(), plan_.counters.size()));
  }
}

}  // namespace
}  // namespace kiln
