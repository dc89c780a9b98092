// ModelOptions::codegen: the blocks' RMSNorm and weight products through generated kernels give the loss and every
// gradient of the regular path within f32 rounding (different summation orders: tiled GEMMs, SiLU by a
// polynomial exp). The bound per parameter tensor is 2^-16 max|grad| (128 f32 ulps of its largest
// element; measured differences are at most ~3 ulps, LMCORE_PRINT_ERRORS=1), which a 1% error in the
// tensor's largest gradient would exceed 600-fold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "lmcore/core/parallel.h"
#include "lmcore/model/llama.h"
#include "model_test_util.h"

namespace lmcore::model {
namespace {

TEST(LlamaCodegen, MatchesTheRegularPath) {
  // Kernels go to a cache of the tests' own (kept between runs), never to the user's.
  ::setenv("LMCORE_CACHE_DIR", (std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                                "/lmcore-test-kernels-" + std::to_string(::getuid())).c_str(), 1);
  // The default variants (tuning, timed in the codegen tests, would compile every candidate of the
  // model's eight GEMMs first).
  ::setenv("LMCORE_AUTOTUNE", "0", 0);
  ModelConfig c;
  c.vocab_size = 61;
  c.dim = 48;  // not a multiple of 16: the generated kernels' tails run
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 80;
  c.max_seq_len = 24;
  const ModelOptions base{.batch = 3, .seq_len = 24};
  ModelOptions with = base;
  with.codegen = true;
  Llama off(c, base), on(c, with);
  off.init_weights(7);
  on.init_weights(7);
  std::vector<std::int32_t> tokens(72), targets(72);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % 61);
    targets[i] = static_cast<std::int32_t>((i * 5 + 1) % 61);
  }
  const StepLoss l_off = off.forward_backward(tokens.data(), targets.data(), 1.0f);
  const StepLoss l_on = on.forward_backward(tokens.data(), targets.data(), 1.0f);
  EXPECT_NEAR(l_on.loss, l_off.loss, 64 * 1.2e-7 * std::abs(l_off.loss));
  for (const ParamSpec& p : off.layout().params()) {
    const std::vector<float> g_off = off.grad(p.name).to_vector<float>(), g_on = on.grad(p.name).to_vector<float>();
    const double scale = testing::max_abs(g_off);
    ASSERT_GT(scale, 0) << p.name;
    testing::expect_close(g_on, g_off, scale / 65536, p.name);
  }
}

}  // namespace
}  // namespace lmcore::model
