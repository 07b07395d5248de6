// The CPU SSM kernels composed into whole Mamba / Mamba-2 / Nemotron-H models over the
// tiny fixtures (test/reference/make_tiny_ssm_references.py: random f32
// checkpoints with float64 NumPy references written from transformers'
// MambaMixer / Mamba2Mixer, themselves checked against transformers by
// test/gpu/check_ssm_reference.py). The layer graph here is the one
// models/importer/SsmImporter.cpp emits; the checks: every position's logits
// within 1e-4, the carried conv and SSM states after a 40-token prompt,
// greedy continuations decoded one recurrent step at a time, and a prompt
// prefilled in one call or in several ending in the same state and logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/formats/ssm_source.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/cpu/kernels/rms_norm.h"
#include "runtime/cpu/kernels/ssm.h"
#include "test/source_root.h"

namespace kiln::cpu {
namespace {

using formats::SsmConfig;
using formats::SsmKind;
using formats::SsmSource;

// A layer's carried state: conv inputs and SSM state (Mamba layers), or the
// keys and values so far (a hybrid's attention layers, [T, kv heads, D]).
struct LayerState {
  std::vector<float> conv, ssm, k, v;
};

using formats::SsmLayerKind;

class TinySsm {
 public:
  explicit TinySsm(const std::string& dir) {
    auto opened = SsmSource::open(dir, formats::OpenMode::kWithData);
    if (!opened.ok()) {
      error_ = opened.error().message;
      return;
    }
    source_ = std::make_unique<SsmSource>(opened.take());
    if (Status s = source_->checkWeights(); !s.ok()) error_ = s.error().message;
  }
  const std::string& error() const { return error_; }
  const SsmConfig& config() const { return source_->config(); }

  SsmLayerKind kindOf(int64_t l) const { return config().layer_kinds[size_t(l)]; }

  std::vector<LayerState> freshState() const {
    const SsmConfig& c = config();
    std::vector<LayerState> state(size_t(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (kindOf(l) == SsmLayerKind::kMamba) {
        state[size_t(l)].conv.assign(size_t(c.convStateElements()), 0.0f);
        state[size_t(l)].ssm.assign(size_t(c.ssmStateElements()), 0.0f);
      }
    return state;
  }

  // Logits [rows, vocab] of `tokens` after `state`, which is advanced past them.
  std::vector<float> forward(const std::vector<int32_t>& tokens, std::vector<LayerState>& state) const {
    const SsmConfig& c = config();
    const int64_t S = int64_t(tokens.size()), Hd = c.hidden_size, I = c.intermediate_size, N = c.state_size;
    const int64_t C = c.convChannels(), F = c.inProjFeatures();
    const float eps = float(c.layer_norm_epsilon);
    const float* embed = w("backbone.embeddings.weight");
    std::vector<float> x(size_t(S * Hd)), h(x.size()), proj(size_t(S * F)), conv(size_t(S * C)), y(size_t(S * I));
    for (int64_t t = 0; t < S; ++t)
      std::copy_n(embed + tokens[size_t(t)] * Hd, Hd, x.begin() + t * Hd);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      auto m = [&](const char* what) { return w(SsmSource::mixerName(l, what)); };
      EXPECT_TRUE(rmsNormResidual(x.data(), nullptr, w(SsmSource::layerNormName(l)), eps, S, Hd, h.data()).ok());
      if (kindOf(l) != SsmLayerKind::kMamba) {
        std::vector<float> out = kindOf(l) == SsmLayerKind::kAttention ? attention(l, h, S, state[size_t(l)])
                                                                       : mlp(l, h, S);
        for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
        continue;
      }
      EXPECT_TRUE(linear(h.data(), S, Hd, m("in_proj.weight"), WeightType::F32, F, nullptr, proj.data()).ok());
      LayerState& st = state[size_t(l)];
      std::vector<float> gated(size_t(S * I));
      if (c.kind == SsmKind::kMamba) {
        const int64_t R = c.time_step_rank;
        causalConv1d(proj.data(), S, I, F, m("conv1d.weight"), c.conv_kernel, m("conv1d.bias"), true,
                     st.conv.data(), conv.data(), C);
        std::vector<float> dbc(size_t(S * (R + 2 * N))), dt(size_t(S * I));
        EXPECT_TRUE(linear(conv.data(), S, I, m("x_proj.weight"), WeightType::F32, R + 2 * N, nullptr, dbc.data()).ok());
        std::vector<float> dtIn(size_t(S * R));
        for (int64_t t = 0; t < S; ++t) std::copy_n(dbc.begin() + t * (R + 2 * N), R, dtIn.begin() + t * R);
        EXPECT_TRUE(linear(dtIn.data(), S, R, m("dt_proj.weight"), WeightType::F32, I, m("dt_proj.bias"), dt.data()).ok());
        SelectiveScanArgs a{conv.data(), dt.data(), dbc.data() + R, dbc.data() + R + N, m("A_log"), m("D"),
                            S, I, N, C, I, R + 2 * N};
        selectiveScan(a, st.ssm.data(), y.data());
        for (int64_t t = 0; t < S; ++t)
          for (int64_t i = 0; i < I; ++i) {
            float z = proj[size_t(t * F + I + i)];
            gated[size_t(t * I + i)] = y[size_t(t * I + i)] * z / (1.0f + std::exp(-z));
          }
      } else {
        const int64_t G = c.n_groups;
        causalConv1d(proj.data() + I, S, C, F, m("conv1d.weight"), c.conv_kernel, m("conv1d.bias"), true,
                     st.conv.data(), conv.data(), C);
        SsdScanArgs a;
        a.x = conv.data();
        a.b = conv.data() + I;
        a.c = conv.data() + I + G * N;
        a.dt = proj.data() + I + C;
        a.dt_bias = m("dt_bias");
        a.a_log = m("A_log");
        a.d = m("D");
        a.rows = S;
        a.heads = c.num_heads;
        a.head_dim = c.head_dim;
        a.groups = G;
        a.state_size = N;
        a.x_stride = a.bc_stride = C;
        a.dt_stride = F;
        a.chunk_size = c.chunk_size;
        a.dt_min = float(c.time_step_min_limit);
        a.dt_max = float(c.time_step_max_limit);
        std::vector<float> scratch(size_t(ssdScratchFloats(a)));
        ssdScan(a, st.ssm.data(), y.data(), scratch.data());
        gatedRmsNorm(y.data(), I, proj.data(), F, m("norm.weight"), S, I, c.norm_group_size, eps, gated.data());
      }
      std::vector<float> out(size_t(S * Hd));
      EXPECT_TRUE(linear(gated.data(), S, I, m("out_proj.weight"), WeightType::F32, Hd, nullptr, out.data()).ok());
      for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
    }
    EXPECT_TRUE(rmsNormResidual(x.data(), nullptr, w("backbone.norm_f.weight"), eps, S, Hd, h.data()).ok());
    std::vector<float> logits(size_t(S * c.vocab_size));
    EXPECT_TRUE(linear(h.data(), S, Hd, w(source_->lmHeadName()), WeightType::F32, c.vocab_size, nullptr,
                       logits.data()).ok());
    return logits;
  }

 private:
  // Causal GQA over the carried and new keys, no positions (Nemotron-H), in f32.
  std::vector<float> attention(int64_t l, const std::vector<float>& h, int64_t S, LayerState& st) const {
    const SsmConfig& c = config();
    const int64_t H = c.attn_heads, Hkv = c.attn_kv_heads, D = c.attn_head_dim, Hd = c.hidden_size;
    auto m = [&](const char* what) { return w(SsmSource::mixerName(l, what)); };
    std::vector<float> q(size_t(S * H * D)), k(size_t(S * Hkv * D)), v(k.size());
    EXPECT_TRUE(linear(h.data(), S, Hd, m("q_proj.weight"), WeightType::F32, H * D, nullptr, q.data()).ok());
    EXPECT_TRUE(linear(h.data(), S, Hd, m("k_proj.weight"), WeightType::F32, Hkv * D, nullptr, k.data()).ok());
    EXPECT_TRUE(linear(h.data(), S, Hd, m("v_proj.weight"), WeightType::F32, Hkv * D, nullptr, v.data()).ok());
    const int64_t past = int64_t(st.k.size()) / (Hkv * D);
    st.k.insert(st.k.end(), k.begin(), k.end());
    st.v.insert(st.v.end(), v.begin(), v.end());
    std::vector<float> ctx(q.size());
    for (int64_t t = 0; t < S; ++t)
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t kv = hh / (H / Hkv), last = past + t;
        std::vector<float> score(size_t(last + 1));
        float peak = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[size_t((t * H + hh) * D + d)] * st.k[size_t((j * Hkv + kv) * D + d)];
          score[size_t(j)] = dot / std::sqrt(float(D));
          peak = std::max(peak, score[size_t(j)]);
        }
        float sum = 0;
        for (float& sc : score) sum += sc = std::exp(sc - peak);
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0;
          for (int64_t j = 0; j <= last; ++j) acc += score[size_t(j)] * st.v[size_t((j * Hkv + kv) * D + d)];
          ctx[size_t((t * H + hh) * D + d)] = acc / sum;
        }
      }
    std::vector<float> out(size_t(S * Hd));
    EXPECT_TRUE(linear(ctx.data(), S, H * D, m("o_proj.weight"), WeightType::F32, Hd, nullptr, out.data()).ok());
    return out;
  }

  // down(relu(up(h))²)
  std::vector<float> mlp(int64_t l, const std::vector<float>& h, int64_t S) const {
    const SsmConfig& c = config();
    const int64_t F = c.mlp_intermediate_size, Hd = c.hidden_size;
    std::vector<float> up(size_t(S * F)), out(size_t(S * Hd));
    EXPECT_TRUE(linear(h.data(), S, Hd, w(SsmSource::mixerName(l, "up_proj.weight")), WeightType::F32, F, nullptr,
                       up.data()).ok());
    for (float& u : up) u = u > 0 ? u * u : 0.0f;
    EXPECT_TRUE(linear(up.data(), S, F, w(SsmSource::mixerName(l, "down_proj.weight")), WeightType::F32, Hd, nullptr,
                       out.data()).ok());
    return out;
  }

  const float* w(const std::string& name) const {
    const formats::TensorInfo* t = source_->findTensor(name);
    EXPECT_NE(t, nullptr) << name;
    auto data = source_->checkpoint().tensorData(*t);
    EXPECT_TRUE(data.ok());
    return reinterpret_cast<const float*>(data->data());
  }

  std::unique_ptr<SsmSource> source_;
  std::string error_;
};

nlohmann::json readReference(const std::string& dir) {
  std::ifstream file(dir + "/reference.json");
  return nlohmann::json::parse(file);
}

std::vector<int32_t> tokensOf(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

class SsmModelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = checkoutPath(std::string("test/fixtures/") + GetParam());
    model_ = std::make_unique<TinySsm>(dir_);
    ASSERT_EQ(model_->error(), "");
    ref_ = readReference(dir_);
  }
  std::string dir_;
  std::unique_ptr<TinySsm> model_;
  nlohmann::json ref_;
};

TEST_P(SsmModelTest, LogitsAtEveryPositionWithin1e4OfFloat64) {
  const int64_t V = model_->config().vocab_size;
  for (auto& [name, seq] : ref_["sequences"].items()) {
    auto state = model_->freshState();
    std::vector<float> logits = model_->forward(tokensOf(seq["tokens"]), state);
    double worst = 0;
    for (size_t t = 0; t < seq["logits"].size(); ++t)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::abs(double(logits[t * size_t(V) + size_t(v)]) - seq["logits"][t][v].get<double>()));
    EXPECT_LT(worst, 1e-4) << GetParam() << " sequence " << name;
    RecordProperty(std::string("max_abs_logit_diff_") + name, std::to_string(worst));
    std::printf("%s %s: max |logit - float64| %.3g\n", GetParam(), name.c_str(), worst);
  }
}

TEST_P(SsmModelTest, CarriedStatesAfterAPromptMatchFloat64) {
  const nlohmann::json& seq = ref_["sequences"]["a"];
  auto state = model_->freshState();
  model_->forward(tokensOf(seq["tokens"]), state);
  size_t mamba = 0;  // the reference lists the Mamba layers' states only
  for (size_t l = 0; l < state.size(); ++l) {
    if (model_->kindOf(int64_t(l)) != SsmLayerKind::kMamba) continue;
    auto conv = seq["conv_states"][mamba].get<std::vector<double>>();
    auto ssm = seq["ssm_states"][mamba++].get<std::vector<double>>();
    ASSERT_EQ(conv.size(), state[l].conv.size());
    ASSERT_EQ(ssm.size(), state[l].ssm.size());
    for (size_t i = 0; i < conv.size(); ++i) ASSERT_NEAR(state[l].conv[i], conv[i], 1e-4) << "layer " << l;
    for (size_t i = 0; i < ssm.size(); ++i) ASSERT_NEAR(state[l].ssm[i], ssm[i], 1e-4) << "layer " << l;
  }
}

TEST_P(SsmModelTest, GreedyDecodeByRecurrentStepsMatches) {
  const int64_t V = model_->config().vocab_size;
  int same = 0, total = 0;
  for (const auto& g : ref_["greedy"]) {
    auto state = model_->freshState();
    std::vector<int32_t> prompt = tokensOf(g["prompt"]);
    std::vector<float> logits = model_->forward(prompt, state);
    const float* row = logits.data() + (prompt.size() - 1) * size_t(V);
    std::vector<int32_t> out;
    std::vector<float> step;
    for (size_t i = 0; i < g["tokens"].size(); ++i) {
      out.push_back(int32_t(std::max_element(row, row + V) - row));
      step = model_->forward({out.back()}, state);
      row = step.data();
    }
    same += out == tokensOf(g["tokens"]);
    ++total;
  }
  EXPECT_GE(total, 5);
  EXPECT_EQ(same, total) << GetParam() << ": greedy " << same << "/" << total;
}

TEST_P(SsmModelTest, PrefillInOneChunkOrManyEndsInTheSameState) {
  std::vector<int32_t> tokens = tokensOf(ref_["sequences"]["a"]["tokens"]);
  const int64_t V = model_->config().vocab_size;
  auto whole = model_->freshState();
  std::vector<float> all = model_->forward(tokens, whole);
  auto pieces = model_->freshState();
  std::vector<float> joined;
  size_t at = 0;
  for (size_t n : {13u, 1u, 2u, 16u, 8u}) {
    std::vector<int32_t> part(tokens.begin() + long(at), tokens.begin() + long(at + n));
    std::vector<float> l = model_->forward(part, pieces);
    joined.insert(joined.end(), l.begin(), l.end());
    at += n;
  }
  ASSERT_EQ(at, tokens.size());
  ASSERT_EQ(joined.size(), size_t(tokens.size()) * size_t(V));
  for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(joined[i], all[i], 2e-5) << i;
  for (size_t l = 0; l < whole.size(); ++l) {
    for (size_t i = 0; i < whole[l].k.size(); ++i) ASSERT_NEAR(pieces[l].k[i], whole[l].k[i], 1e-5);
    // Not bit for bit: the projections feeding the conv round by their GEMM's row count.
    for (size_t i = 0; i < whole[l].conv.size(); ++i) ASSERT_NEAR(pieces[l].conv[i], whole[l].conv[i], 1e-5);
    for (size_t i = 0; i < whole[l].ssm.size(); ++i) ASSERT_NEAR(pieces[l].ssm[i], whole[l].ssm[i], 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SsmModelTest, ::testing::Values("tiny-mamba", "tiny-mamba2", "tiny-hybrid"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kiln::cpu
