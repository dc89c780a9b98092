// The model as a whole: config JSON and its errors, the parameter layout, and the KV-cache generator
// against the training forward. Gradients are checked against torch in tests/python/test_model_torch.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "lmcore/core/allocator.h"
#include "lmcore/core/error.h"
#include "lmcore/core/runtime_info.h"
#include "lmcore/loss/linear_cross_entropy.h"
#include "lmcore/model/config.h"
#include "lmcore/model/generate.h"
#include "lmcore/model/llama.h"
#include "lmcore/model/parameters.h"
#include "tests/base/base_test_util.h"

namespace lmcore::model {
namespace {

using base::testing::error_of;

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 61;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 48;
  c.max_seq_len = 40;
  c.eos_token_id = 3;
  c.tie_embeddings = false;
  return c;
}

TEST(ModelConfig, JsonRoundTripKeepsEveryField) {
  ModelConfig c = small_config();
  c.mask = AttentionMask::sliding_window;
  c.sliding_window = 17;
  c.z_loss = 1e-4;
  c.logit_softcap = 30;
  c.label_smoothing = 0.05;
  c.rope_theta = 500000;
  c.norm_eps = 1e-6;
  const ModelConfig d = ModelConfig::from_json(c.to_json(), "x");
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_EQ(d.mask, AttentionMask::sliding_window);
  EXPECT_EQ(d.sliding_window, 17);
  EXPECT_EQ(d.rope_theta, 500000);
  EXPECT_FALSE(d.tie_embeddings);
}

TEST(ModelConfig, ImpossibleValuesGetErrorsNamingTheField) {
  const std::string base = small_config().to_json();
  auto with = [&](const std::string& key, const std::string& value) {
    std::string s = base;
    const auto at = s.find("\"" + key + "\"");
    EXPECT_NE(at, std::string::npos) << key;
    const auto colon = s.find(':', at), end = s.find_first_of(",\n}", colon);
    s.replace(colon + 1, end - colon - 1, " " + value);
    return error_of([&] { ModelConfig::from_json(s, "cfg.json"); });
  };
  EXPECT_NE(with("hidden_size", "30").find("hidden_size 30 is not divisible by num_attention_heads 4"), std::string::npos);
  EXPECT_NE(with("num_key_value_heads", "3").find("num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
            std::string::npos);
  EXPECT_NE(with("hidden_size", "12").find("must be even (RoPE)"), std::string::npos);  // head dim 3
  EXPECT_NE(with("vocab_size", "0").find("vocab_size must be >= 1, found 0"), std::string::npos);
  EXPECT_NE(with("vocab_size", "\"big\"").find("'vocab_size' has the wrong type"), std::string::npos);
  EXPECT_NE(with("rms_norm_eps", "-1").find("rms_norm_eps must be in (0, 1)"), std::string::npos);
  EXPECT_NE(with("hidden_act", "\"gelu\"").find("hidden_act \"gelu\" is not supported"), std::string::npos);
  EXPECT_NE(with("lmcore_attention_mask", "\"diagonal\"").find("\"diagonal\" is not one of"), std::string::npos);
  EXPECT_NE(with("eos_token_id", "61").find("eos_token_id 61 is >= vocab_size 61"), std::string::npos);
  std::string e = error_of([] { ModelConfig::from_json(R"({"vocab_size": 10, "hidden_size": 8})", "c.json"); });
  EXPECT_NE(e.find("c.json: missing required key 'intermediate_size'"), std::string::npos) << e;
  e = error_of([] { ModelConfig::from_json(R"({"vocab_size": 10, "hiden_size": 8})", "c.json"); });
  EXPECT_NE(e.find("unknown key 'hiden_size'"), std::string::npos) << e;
  e = error_of([] { ModelConfig::from_json("{\"vocab_size\": ", "c.json"); });
  EXPECT_NE(e.find("c.json: not valid JSON"), std::string::npos) << e;
  // A number past double's range is the parser's out_of_range, not its parse_error: still the file's.
  e = error_of([] { ModelConfig::from_json(R"({"vocab_size": 10, "rope_theta": 1e400})", "c.json"); });
  EXPECT_NE(e.find("c.json: not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'"),
            std::string::npos) << e;
  ModelConfig doc = small_config();
  doc.mask = AttentionMask::document;
  doc.eos_token_id = -1;
  e = error_of([&] { doc.validate(); });
  EXPECT_NE(e.find("attention mask 'document' needs eos_token_id"), std::string::npos) << e;
}

TEST(ParameterLayout, HuggingFaceNamesFusedMatricesAndAlignment) {
  ModelConfig c = small_config();
  c.dim = 36;  // q/k/v rows * dim are not multiples of 16: the fused matrices must still be packed
  c.n_heads = 6;
  c.n_kv_heads = 3;
  const ParameterLayout L(c);
  EXPECT_EQ(L.params().size(), 3u + 9u * 2u);
  const ParamSpec& q = L.at("model.layers.1.self_attn.q_proj.weight");
  const ParamSpec& k = L.at("model.layers.1.self_attn.k_proj.weight");
  const ParamSpec& v = L.at("model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(k.offset, q.offset + q.numel);
  EXPECT_EQ(v.offset, k.offset + k.numel);
  const ParamSpec& g = L.at("model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(L.at("model.layers.0.mlp.up_proj.weight").offset, g.offset + g.numel);
  EXPECT_EQ(q.shape, (Shape{36, 36}));
  EXPECT_EQ(k.shape, (Shape{18, 36}));
  EXPECT_EQ(L.at("model.layers.0.mlp.down_proj.weight").shape, (Shape{36, 48}));
  EXPECT_EQ(L.at("lm_head.weight").shape, (Shape{61, 36}));
  EXPECT_FALSE(L.at("model.embed_tokens.weight").weight_decay);
  EXPECT_FALSE(L.at("model.layers.0.input_layernorm.weight").weight_decay);
  EXPECT_TRUE(L.at("lm_head.weight").weight_decay);
  for (const auto& u : L.units()) EXPECT_EQ(u.offset % 16, 0) << u.name;
  // Units tile the buffer.
  std::int64_t end = 0;
  for (const auto& u : L.units()) {
    EXPECT_EQ(u.offset, end) << u.name;
    end = u.offset + u.numel;
  }
  EXPECT_EQ(end, L.size());
  std::int64_t counted = 0;
  for (const auto& p : L.params()) counted += p.numel;
  EXPECT_EQ(counted, c.num_parameters());
  c.tie_embeddings = true;
  const ParameterLayout T(c);
  EXPECT_EQ(T.find("lm_head.weight"), nullptr);
  EXPECT_EQ(T.root().head, T.root().embed);
  EXPECT_NE(error_of([&] { (void)T.at("lm_head.weight"); }).find("no parameter named 'lm_head.weight'"),
            std::string::npos);
}

// The KV-cache decoder and the training forward compute the same function.
TEST(Generator, LogitsEqualTheTrainingForwardAtEveryPosition) {
  for (AttentionMask mask : {AttentionMask::causal, AttentionMask::sliding_window, AttentionMask::document}) {
    ModelConfig c = small_config();
    c.mask = mask;
    c.sliding_window = 5;
    c.logit_softcap = mask == AttentionMask::causal ? 20.0 : 0.0;
    const std::int64_t T = 33;
    Llama m(c, {.batch = 1, .seq_len = T});
    m.init_weights(5);
    std::vector<std::int32_t> tokens(T);
    for (std::int64_t t = 0; t < T; ++t) tokens[t] = static_cast<std::int32_t>((t * 17 + 5) % c.vocab_size);
    tokens[9] = tokens[20] = 3;  // eos: documents start there
    const Tensor want = m.logits(tokens.data());
    Generator g(c, m.params());
    const float* w = want.data<float>();
    double worst = 0, scale = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      const std::vector<float>& got = g.feed(tokens[t]);
      for (std::int64_t v = 0; v < c.vocab_size; ++v) {
        worst = std::max(worst, std::fabs(static_cast<double>(got[v]) - w[t * c.vocab_size + v]));
        scale = std::max(scale, std::fabs(static_cast<double>(w[t * c.vocab_size + v])));
      }
    }
    // Different summation orders in f32 (GEMV vs GEMM, a scalar softmax vs flex attention's online one):
    // measured 2.0e-7 (causal) to 2.3e-7 (sliding window, document) of the largest
    // logit; a 1% error in a logit is 4 orders above the bound.
    EXPECT_LE(worst, 2e-6 * scale) << attention_mask_name(mask);
    EXPECT_GT(scale, 0.0);
  }
}

TEST(Generator, SamplingRules) {
  const std::vector<float> logits = {0.5f, 3.0f, 2.9f, -1.0f, 3.0f};
  EXPECT_EQ(Generator::sample(logits, 0.0, 0, 0.7), 1);   // greedy: the first of the tied maxima
  EXPECT_EQ(Generator::sample(logits, 1.0, 1, 0.99), 1);  // top-1 is greedy
  // top-2 at temperature 1: ids 1 and 4 (tied, by id), each with probability 1/2.
  EXPECT_EQ(Generator::sample(logits, 1.0, 2, 0.49), 1);
  EXPECT_EQ(Generator::sample(logits, 1.0, 2, 0.51), 4);
  // Whole vocabulary: u just below 1 picks the least likely kept token.
  EXPECT_EQ(Generator::sample(logits, 1.0, 0, 0.999999), 3);
  for (double bad : {-1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_NE(error_of([&] { Generator::sample(logits, bad, 0, 0.5); })
                  .find("temperature must be a finite number >= 0"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of([&] { Generator::sample(logits, 1.0, -3, 0.5); }).find("top_k must be >= 0 (0: all), found -3"),
            std::string::npos);
}

// A config may claim any max_position_embeddings: a cache that cannot fit here is refused with its
// sizes (it was a bare std::bad_alloc), and one of a few positions is fine whatever the config says.
TEST(Generator, RefusesACacheBeyondThisMachinesMemory) {
  ModelConfig c = small_config();
  Llama m(c, {.batch = 1, .seq_len = 8});
  m.init_weights(1);
  c.max_seq_len = std::int64_t{1} << 40;
  const std::string e = error_of([&] { Generator g(c, m.params()); });
  EXPECT_NE(e.find("Generator: a KV cache of 1099511627776 positions needs"), std::string::npos) << e;
  Generator g(c, m.params(), 16);
  SampleOptions o;
  o.max_tokens = 4;
  EXPECT_EQ(g.generate({1, 2}, o).size(), 4u);
}

TEST(Generator, StopsAtEosAndAtTheEndOfTheCache) {
  ModelConfig c = small_config();
  Llama m(c, {.batch = 1, .seq_len = 8});
  m.init_weights(1);
  Generator g(c, m.params(), 6);
  SampleOptions o;
  o.max_tokens = 100;
  o.temperature = 1.0;
  o.top_k = 0;
  o.stop_at_eos = false;
  // 6 positions: 2 prompt tokens and 4 sampled ones fill the cache; the logits after the last give a 5th.
  EXPECT_EQ(g.generate({1, 2}, o).size(), 5u);
  EXPECT_NE(error_of([&] { g.generate({}, o); }).find("the prompt is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { g.generate({1, 99}, o); }).find("token 99 is outside [0, vocab_size = 61)"),
            std::string::npos);
}

TEST(Llama, RejectsBadTokensAndShapes) {
  ModelConfig c = small_config();
  EXPECT_NE(error_of([&] { Llama m(c, {.batch = 1, .seq_len = 41}); }).find("seq_len must be in [1, max_position_embeddings = 40]"),
            std::string::npos);
  Llama m(c, {.batch = 1, .seq_len = 4});
  m.init_weights(1);
  std::vector<std::int32_t> x = {1, 2, 61, 3}, y = {1, 2, 3, 4};
  EXPECT_NE(error_of([&] { m.forward_backward(x.data(), y.data(), 1.0f); }).find("input token 61 at position 2"),
            std::string::npos);
  x[2] = 5;
  y[3] = -1;
  EXPECT_NE(error_of([&] { m.forward_backward(x.data(), y.data(), 1.0f); }).find("target token -1 at position 3"),
            std::string::npos);
}

// A batch x seq_len whose activations cannot fit in this machine's memory is refused with the sizes
// before anything is allocated: once on the block inputs alone (N x C f32 per layer), and once on the
// whole arena plan (here ~12x that), for sizes whose block inputs alone would fit.
TEST(Llama, RefusesActivationsBeyondThisMachinesMemoryBeforeAllocating) {
  const std::uint64_t memory = physical_memory_bytes();
  if (memory == 0) GTEST_SKIP() << "the system does not report its physical memory";
  ModelConfig c = small_config();
  c.max_seq_len = 1 << 20;
  const std::int64_t before = current_bytes();
  const std::string huge = error_of([&] { Llama m(c, {.batch = std::int64_t{1} << 40, .seq_len = 1 << 20}); });
  EXPECT_NE(huge.find("Llama: batch 1099511627776 x seq_len 1048576"), std::string::npos) << huge;
  EXPECT_NE(huge.find("GiB of memory"), std::string::npos) << huge;
  // Block inputs: 2 layers x 32 x 4 bytes = 256 bytes a token; 300 bytes of memory a token fits them.
  const auto batch = static_cast<std::int64_t>(memory / 300 / (1 << 20));
  ASSERT_GE(batch, 1);
  const std::string plan = error_of([&] { Llama m(c, {.batch = batch, .seq_len = 1 << 20}); });
  EXPECT_NE(plan.find(fmt::format("batch {} x seq_len 1048576", batch)), std::string::npos) << plan;
  EXPECT_EQ(current_bytes(), before);
  EXPECT_NE(error_of([&] { Llama m(c, {.batch = std::int64_t{1} << 62, .seq_len = 4}); }).find("overflows 64 bits"),
            std::string::npos);
}

// The backward's recomputations (x_mid, the norms, SwiGLU's a, and gate|up without keep_gate_up) give
// the forward's bits: losses and every gradient equal those of a run that keeps them, f32 and bf16.
TEST(Llama, RecomputedActivationsGiveTheKeptBits) {
  ModelConfig c = small_config();
  const std::int64_t B = 2, T = 24;
  std::vector<std::int32_t> x(static_cast<std::size_t>(B * T)), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int32_t>((i * 7 + 3) % 61);
    y[i] = static_cast<std::int32_t>((i * 11 + 5) % 61);
  }
  for (const DType dt : {DType::f32, DType::bf16}) {
    std::vector<std::vector<float>> grads;
    std::vector<double> losses;
    for (const bool keep : {true, false}) {
      Llama m(c, {.batch = B, .seq_len = T, .compute = dt, .keep_gate_up = keep});
      m.init_weights(5);
      m.zero_grad();
      losses.push_back(m.forward_backward(x.data(), y.data(), 1.0f).loss);
      const float* g = m.grads().data<float>();
      grads.emplace_back(g, g + m.layout().size());
    }
    EXPECT_EQ(losses[0], losses[1]) << dtype_name(dt);
    std::size_t differ = 0;
    double gmax = 0;
    for (std::size_t i = 0; i < grads[0].size(); ++i) {
      differ += grads[0][i] != grads[1][i];
      gmax = std::max(gmax, static_cast<double>(std::fabs(grads[0][i])));
    }
    EXPECT_EQ(differ, 0u) << dtype_name(dt) << ": gradients that differ, of " << grads[0].size();
    EXPECT_GT(gmax, 0.0) << dtype_name(dt);  // the comparison compares something
  }
}

// ModelOptions::keep_gate_up unset follows keep_gate_up_rule: kept below kRecomputeGateUpParams
// parameters (the default model), recomputed from there on (the GPT-2-sized one); set, it wins.
TEST(Llama, KeepGateUpRuleBySize) {
  ModelConfig gpt2;
  gpt2.vocab_size = 32000;
  gpt2.dim = 768;
  gpt2.n_layers = 12;
  gpt2.n_heads = 12;
  gpt2.n_kv_heads = 12;
  gpt2.ffn_dim = 2048;
  gpt2.max_seq_len = 1024;
  gpt2.tie_embeddings = true;
  EXPECT_FALSE(keep_gate_up_rule(gpt2)) << gpt2.num_parameters();
  ModelConfig dflt = gpt2;
  dflt.vocab_size = 4096;
  dflt.dim = 384;
  dflt.n_layers = 6;
  dflt.n_heads = 6;
  dflt.n_kv_heads = 2;
  dflt.ffn_dim = 1024;
  EXPECT_TRUE(keep_gate_up_rule(dflt)) << dflt.num_parameters();
  // The threshold itself: vocabulary rows of dim 768 move the count across it.
  ModelConfig edge = gpt2;
  edge.n_layers = 1;
  edge.vocab_size = 1;
  const std::int64_t per_row = 768, base = edge.num_parameters() - per_row;
  edge.vocab_size = (kRecomputeGateUpParams - base) / per_row;  // just below (or at) the threshold
  if (edge.num_parameters() == kRecomputeGateUpParams) --edge.vocab_size;
  ASSERT_LT(edge.num_parameters(), kRecomputeGateUpParams);
  EXPECT_TRUE(keep_gate_up_rule(edge));
  edge.vocab_size += 1;
  ASSERT_GE(edge.num_parameters(), kRecomputeGateUpParams);
  EXPECT_FALSE(keep_gate_up_rule(edge));
  // The model follows the rule when unset and the option when set; the arena says which was planned.
  const ModelConfig c = small_config();
  Llama automatic(c, {.batch = 2, .seq_len = 24});
  Llama kept(c, {.batch = 2, .seq_len = 24, .keep_gate_up = true});
  Llama recomputed(c, {.batch = 2, .seq_len = 24, .keep_gate_up = false});
  EXPECT_TRUE(automatic.keeps_gate_up());
  EXPECT_TRUE(kept.keeps_gate_up());
  EXPECT_FALSE(recomputed.keeps_gate_up());
  EXPECT_EQ(automatic.activation_bytes(), kept.activation_bytes());
  EXPECT_LT(recomputed.activation_bytes(), kept.activation_bytes());
}

// The head's tiles live in the arena (the scratch and shared activations, dead while the head runs):
// a step allocates far less than the tiles would take. A wide vocabulary makes them the step's largest
// transient (64 tokens x 4096 logits in f32: 1 MiB; flex attention's copies here are a few KiB).
TEST(Llama, HeadTilesLiveInTheArena) {
  ModelConfig c = small_config();
  c.vocab_size = 4096;
  const std::int64_t B = 2, T = 32;
  std::vector<std::int32_t> x(static_cast<std::size_t>(B * T)), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int32_t>((i * 7 + 3) % 4096);
    y[i] = static_cast<std::int32_t>((i * 11 + 5) % 4096);
  }
  for (const DType dt : {DType::f32, DType::bf16}) {
    Llama m(c, {.batch = B, .seq_len = T, .compute = dt});
    m.init_weights(3);
    m.zero_grad();
    LossOptions o;
    o.memory_budget = m.options().head_memory_budget;
    const std::size_t tiles = linear_cross_entropy_workspace_bytes(B * T, c.dim, c.vocab_size, dt, o);
    ASSERT_GE(tiles, std::size_t{512} << 10) << dtype_name(dt);
    const std::size_t before = current_bytes();
    reset_peak_bytes();
    const double loss = m.forward_backward(x.data(), y.data(), 1.0f).loss;
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_LT(peak_bytes() - before, tiles / 2) << dtype_name(dt) << ": the step allocated " << peak_bytes() - before
                                                << " bytes, the tiles take " << tiles;
    reset_peak_bytes();
    const double eval = m.forward_loss(x.data(), y.data()).loss;
    EXPECT_TRUE(std::isfinite(eval));
    EXPECT_LT(peak_bytes() - before, tiles / 2) << dtype_name(dt) << " forward_loss";
  }
}

}  // namespace
}  // namespace lmcore::model
