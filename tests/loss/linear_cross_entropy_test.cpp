// Fused linear cross-entropy against the unfused path (f64, every option combination), against a
// naive transcription of the formula, against finite differences, across chunk sizes, in bf16, and
// on the edge cases (all ignored, N = 0, bad targets).
#include "lmcore/loss/linear_cross_entropy.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "tests/loss/loss_test_util.h"

namespace lmcore {
namespace {

using test::all_close;
using test::random_targets;
using test::random_tensor;

struct Problem {
  Tensor hidden, weight, target, bias, class_weight;
  std::int64_t n, h, v;
};

Problem make_problem(std::int64_t n, std::int64_t h, std::int64_t v, std::uint32_t seed, int ignore_every = 4,
                     DType dtype = DType::f64) {
  Problem p{random_tensor({n, h}, seed, 1.0, dtype),
            random_tensor({v, h}, seed + 1, 0.7, dtype),
            random_targets(n, v, seed + 2, ignore_every),
            random_tensor({v}, seed + 3, 0.5, dtype),
            test::random_uniform({v}, seed + 4, 0.2, 2.0).to(dtype),
            n,
            h,
            v};
  return p;
}

LossOptions options_for(const Problem& p, bool bias, bool weights, Reduction red, double ls, double z, double cap) {
  LossOptions o;
  if (bias) o.bias = p.bias;
  if (weights) o.class_weight = p.class_weight;
  o.reduction = red;
  o.label_smoothing = ls;
  o.z_loss = z;
  o.softcap = cap;
  o.accumulate = DType::f64;
  return o;
}

Tensor grad_for(const Problem& p, Reduction red, std::uint32_t seed) {
  if (red == Reduction::none) return random_tensor({p.n}, seed);
  return Tensor::full({}, 0.75, DType::f64);
}

std::string describe(bool bias, bool weights, Reduction red, double ls, double z, double cap) {
  return "bias=" + std::to_string(bias) + " weights=" + std::to_string(weights) + " reduction=" +
         std::string(reduction_name(red)) + " ls=" + std::to_string(ls) + " z=" + std::to_string(z) +
         " cap=" + std::to_string(cap);
}

// ---- an independent, naive transcription of the definition in cross_entropy.h ----
struct NaiveLoss {
  std::vector<double> ce, zl;
  double total = 0.0, z_total = 0.0;
};

NaiveLoss naive(const Problem& p, const LossOptions& o) {
  const auto h = p.hidden.to_vector<double>(), w = p.weight.to_vector<double>();
  const auto b = p.bias.to_vector<double>(), cw = p.class_weight.to_vector<double>();
  const auto t = p.target.to_vector<std::int64_t>();
  NaiveLoss r;
  double wsum_t = 0.0, count = 0.0, ce_sum = 0.0, zl_sum = 0.0;
  for (std::int64_t i = 0; i < p.n; ++i) {
    std::vector<double> z(static_cast<std::size_t>(p.v));
    for (std::int64_t j = 0; j < p.v; ++j) {
      double acc = o.bias.defined() ? b[j] : 0.0;
      for (std::int64_t k = 0; k < p.h; ++k) acc += h[i * p.h + k] * w[j * p.h + k];
      z[j] = o.softcap > 0 ? o.softcap * std::tanh(acc / o.softcap) : acc;
    }
    double mx = z[0];
    for (double x : z) mx = std::max(mx, x);
    double s = 0.0;
    for (double x : z) s += std::exp(x - mx);
    const double lse = mx + std::log(s);
    double ce = 0.0, zl = 0.0;
    if (t[i] != o.ignore_index) {
      auto wj = [&](std::int64_t j) { return o.class_weight.defined() ? cw[j] : 1.0; };
      const double logp_t = z[t[i]] - lse;
      double smooth = 0.0;
      for (std::int64_t j = 0; j < p.v; ++j) smooth += -wj(j) * (z[j] - lse);
      ce = -(1 - o.label_smoothing) * wj(t[i]) * logp_t + o.label_smoothing / p.v * smooth;
      zl = o.z_loss * lse * lse;
      wsum_t += wj(t[i]);
      count += 1;
    }
    r.ce.push_back(ce);
    r.zl.push_back(zl);
    ce_sum += ce;
    zl_sum += zl;
  }
  if (o.reduction == Reduction::mean) {
    r.total = ce_sum / wsum_t + zl_sum / count;
    r.z_total = zl_sum / count;
  } else {
    r.total = ce_sum + zl_sum;
    r.z_total = zl_sum;
  }
  return r;
}

// Scalar objective sum_i g_i * loss_i (none) or g * loss, for finite differences.
double objective(const Problem& p, const LossOptions& o, const Tensor& g) {
  const NaiveLoss r = naive(p, o);
  if (o.reduction != Reduction::none) return g.item_as_double() * r.total;
  const auto gv = g.to_vector<double>();
  double s = 0.0;
  for (std::int64_t i = 0; i < p.n; ++i) s += gv[i] * (r.ce[i] + r.zl[i]);
  return s;
}

const Reduction kReductions[] = {Reduction::none, Reduction::mean, Reduction::sum};

TEST(LinearCrossEntropy, FusedMatchesUnfusedForEveryOptionCombinationInF64) {
  const Problem p = make_problem(13, 6, 37, 11);
  int combos = 0;
  for (bool bias : {false, true})
    for (bool weights : {false, true})
      for (Reduction red : kReductions)
        for (double ls : {0.0, 0.2})
          for (double z : {0.0, 0.05})
            for (double cap : {0.0, 2.5}) {
              SCOPED_TRACE(describe(bias, weights, red, ls, z, cap));
              LossOptions o = options_for(p, bias, weights, red, ls, z, cap);
              o.chunk_size = 7;  // 37 = 5 * 7 + 2: a ragged last chunk
              o.token_tile = 5;  // 13 = 2 * 5 + 3
              const Tensor g = grad_for(p, red, 99);
              const Tensor dw0 = random_tensor({p.v, p.h}, 5), db0 = random_tensor({p.v}, 6);
              Tensor dw_f = dw0.clone(), db_f = db0.clone(), dw_u = dw0.clone(), db_u = db0.clone();
              const auto f = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o, g, dw_f, db_f);
              const auto u = linear_cross_entropy_unfused_with_grad(p.hidden, p.weight, p.target, o, g, dw_u, db_u);
              EXPECT_TRUE(all_close("loss", f.loss, u.loss, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("z_loss", f.z_loss, u.z_loss, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("lse", f.lse, u.lse, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("d_hidden", f.d_hidden, u.d_hidden, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("d_weight", dw_f, dw_u, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("d_bias", db_f, db_u, 1e-12, 1e-12));

              // The separate forward and backward give the same as the combined call.
              const LossResult fwd = linear_cross_entropy(p.hidden, p.weight, p.target, o);
              Tensor dw_s = dw0.clone(), db_s = db0.clone();
              const Tensor dh = linear_cross_entropy_backward(p.hidden, p.weight, p.target, g, o, fwd.lse, dw_s, db_s);
              EXPECT_TRUE(all_close("loss (forward)", fwd.loss, u.loss, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("d_hidden (backward)", dh, u.d_hidden, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("d_weight (backward)", dw_s, dw_u, 1e-12, 1e-12));
              EXPECT_TRUE(all_close("d_bias (backward)", db_s, db_u, 1e-12, 1e-12));
              ++combos;
            }
  EXPECT_EQ(combos, 96);
}

TEST(LinearCrossEntropy, LossMatchesNaiveDefinition) {
  const Problem p = make_problem(9, 5, 11, 21);
  for (bool weights : {false, true})
    for (Reduction red : kReductions)
      for (double cap : {0.0, 1.5}) {
        SCOPED_TRACE(describe(true, weights, red, 0.3, 0.01, cap));
        const LossOptions o = options_for(p, true, weights, red, 0.3, 0.01, cap);
        const LossResult r = linear_cross_entropy(p.hidden, p.weight, p.target, o);
        const NaiveLoss n = naive(p, o);
        if (red == Reduction::none) {
          std::vector<double> tot;
          for (std::size_t i = 0; i < n.ce.size(); ++i) tot.push_back(n.ce[i] + n.zl[i]);
          EXPECT_TRUE(all_close("loss", r.loss, Tensor::from_vector(tot, {p.n}), 1e-12, 1e-12));
          EXPECT_TRUE(all_close("z_loss", r.z_loss, Tensor::from_vector(n.zl, {p.n}), 1e-12, 1e-12));
        } else {
          EXPECT_NEAR(r.loss.item_as_double(), n.total, 1e-12 * (1 + std::abs(n.total)));
          EXPECT_NEAR(r.z_loss.item_as_double(), n.z_total, 1e-12 * (1 + std::abs(n.z_total)));
        }
      }
}

TEST(LinearCrossEntropy, GradientsMatchFiniteDifferences) {
  for (Reduction red : kReductions) {
    SCOPED_TRACE(std::string(reduction_name(red)));
    Problem p = make_problem(5, 3, 6, 31, 3);
    const LossOptions o = options_for(p, true, true, red, 0.25, 0.03, 2.0);
    const Tensor g = grad_for(p, red, 77);
    Tensor dw = Tensor::zeros({p.v, p.h}, DType::f64), db = Tensor::zeros({p.v}, DType::f64);
    LossOptions oc = o;
    oc.chunk_size = 4;
    const auto out = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, oc, g, dw, db);
    const double eps = 1e-6;
    auto check = [&](const char* name, Tensor& param, const Tensor& grad) {
      double* x = param.data<double>();
      const auto gv = grad.to_vector<double>();
      for (std::int64_t k = 0; k < param.numel(); ++k) {
        const double saved = x[k];
        x[k] = saved + eps;
        const double up = objective(p, o, g);
        x[k] = saved - eps;
        const double down = objective(p, o, g);
        x[k] = saved;
        EXPECT_NEAR(gv[k], (up - down) / (2 * eps), 1e-7) << name << "[" << k << "]";
      }
    };
    check("d_hidden", p.hidden, out.d_hidden);
    check("d_weight", p.weight, dw);
    Tensor bias = p.bias;  // options_for stored the same storage as o.bias
    check("d_bias", bias, db);
  }
}

TEST(LinearCrossEntropy, ChunkSizeInvariance) {
  const Problem p = make_problem(19, 7, 53, 41);
  for (Reduction red : kReductions) {
    LossOptions base = options_for(p, true, true, red, 0.1, 0.02, 3.0);
    const Tensor g = grad_for(p, red, 5);
    base.chunk_size = p.v;
    Tensor dw_ref = Tensor::zeros({p.v, p.h}, DType::f64), db_ref = Tensor::zeros({p.v}, DType::f64);
    const auto ref = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, base, g, dw_ref, db_ref);
    for (std::int64_t chunk : {1, 3, 7, 64, 0}) {
      for (std::int64_t rows : {0, 1, 4}) {
        SCOPED_TRACE("reduction " + std::string(reduction_name(red)) + " chunk " + std::to_string(chunk) +
                     " rows " + std::to_string(rows));
        LossOptions o = base;
        o.chunk_size = chunk;
        o.token_tile = rows;
        Tensor dw = Tensor::zeros({p.v, p.h}, DType::f64), db = Tensor::zeros({p.v}, DType::f64);
        const auto r = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o, g, dw, db);
        EXPECT_TRUE(all_close("loss", r.loss, ref.loss, 1e-12, 1e-12));
        EXPECT_TRUE(all_close("lse", r.lse, ref.lse, 1e-12, 1e-12));
        EXPECT_TRUE(all_close("d_hidden", r.d_hidden, ref.d_hidden, 1e-12, 1e-12));
        EXPECT_TRUE(all_close("d_weight", dw, dw_ref, 1e-12, 1e-12));
        EXPECT_TRUE(all_close("d_bias", db, db_ref, 1e-12, 1e-12));
      }
    }
  }
}

// Each thread takes a slice of the vocabulary and keeps its own partial d_hidden: the thread count
// (slices of uneven width, some empty) may change summation order, nothing else. f32 also covers the
// one-exp single-pass rows and bf16 the per-slice weight conversion panels.
TEST(LinearCrossEntropy, ThreadCountOnlyChangesSummationOrder) {
  const Problem p = make_problem(23, 5, 11, 45);
  const int saved = num_threads();
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const double tol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-5 : 1e-2;
    const Tensor hidden = p.hidden.to(dtype), weight = p.weight.to(dtype);
    for (std::int64_t chunk : {0, 4}) {
      LossOptions o = options_for(p, true, true, Reduction::mean, 0.1, 0.01, 0.0);
      o.accumulate = dtype == DType::f64 ? DType::f64 : DType::f32;
      o.chunk_size = chunk;
      o.token_tile = 6;
      o.memory_budget = 8 * 6 * 5 * 3;  // bf16: weight panels of a few rows per slice
      const Tensor g = Tensor::full({}, 1.0, DType::f64);
      std::vector<LinearCrossEntropyOutput> outs;
      std::vector<Tensor> dws;
      for (int threads : {1, 2, 5}) {
        set_num_threads(threads);
        dws.push_back(Tensor::zeros({p.v, p.h}, o.accumulate));
        outs.push_back(linear_cross_entropy_with_grad(hidden, weight, p.target, o, g, dws.back(), Tensor()));
      }
      set_num_threads(saved);
      for (std::size_t k = 1; k < outs.size(); ++k) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk) + " run " +
                     std::to_string(k));
        EXPECT_TRUE(all_close("loss", outs[k].loss, outs[0].loss, tol, tol));
        EXPECT_TRUE(all_close("d_hidden", outs[k].d_hidden, outs[0].d_hidden, tol, tol));
        EXPECT_TRUE(all_close("d_weight", dws[k], dws[0], tol, tol));
      }
    }
  }
}

TEST(LinearCrossEntropy, SmallMemoryBudgetChunksTheVocabulary) {
  // A budget too small for 64 rows of the whole vocabulary forces the two-pass, chunked path.
  const Problem p = make_problem(70, 4, 300, 51);
  LossOptions o = options_for(p, false, false, Reduction::mean, 0.1, 0.0, 0.0);
  const Tensor g = Tensor::full({}, 1.0, DType::f64);
  Tensor dw_u = Tensor::zeros({p.v, p.h}, DType::f64);
  const auto u = linear_cross_entropy_unfused_with_grad(p.hidden, p.weight, p.target, o, g, dw_u, Tensor());
  o.memory_budget = 64 * 8 * 50;  // 64 rows x 50 columns of f64
  Tensor dw = Tensor::zeros({p.v, p.h}, DType::f64);
  const auto f = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o, g, dw, Tensor());
  EXPECT_TRUE(all_close("loss", f.loss, u.loss, 1e-12, 1e-12));
  EXPECT_TRUE(all_close("d_hidden", f.d_hidden, u.d_hidden, 1e-12, 1e-12));
  EXPECT_TRUE(all_close("d_weight", dw, dw_u, 1e-12, 1e-12));
}

TEST(LinearCrossEntropy, AllTokensIgnored) {
  Problem p = make_problem(4, 3, 5, 61);
  p.target = Tensor::full({4}, -100, DType::i64);
  for (Reduction red : kReductions) {
    LossOptions o = options_for(p, true, true, red, 0.1, 0.1, 0.0);
    const Tensor g = grad_for(p, red, 3);
    Tensor dw = Tensor::zeros({p.v, p.h}, DType::f64), db = Tensor::zeros({p.v}, DType::f64);
    const auto f = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o, g, dw, db);
    const auto u = linear_cross_entropy_unfused(p.hidden, p.weight, p.target, o);
    if (red == Reduction::mean) {
      EXPECT_TRUE(std::isnan(f.loss.item_as_double()));
      EXPECT_TRUE(std::isnan(u.loss.item_as_double()));
    } else if (red == Reduction::sum) {
      EXPECT_EQ(f.loss.item_as_double(), 0.0);
      EXPECT_EQ(u.loss.item_as_double(), 0.0);
    } else {
      EXPECT_EQ(f.loss.to_vector<double>(), std::vector<double>(4, 0.0));
    }
    for (double x : f.d_hidden.to_vector<double>()) EXPECT_EQ(x, 0.0);
    for (double x : dw.to_vector<double>()) EXPECT_EQ(x, 0.0);
    for (double x : db.to_vector<double>()) EXPECT_EQ(x, 0.0);
  }
}

TEST(LinearCrossEntropy, NoTokens) {
  const Problem p = make_problem(0, 3, 5, 71);
  for (Reduction red : kReductions) {
    LossOptions o = options_for(p, false, false, red, 0.0, 0.0, 0.0);
    const Tensor g = red == Reduction::none ? Tensor::empty({0}, DType::f64) : Tensor::full({}, 1.0, DType::f64);
    Tensor dw = Tensor::zeros({p.v, p.h}, DType::f64);
    const auto f = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o, g, dw, Tensor());
    EXPECT_EQ(f.d_hidden.shape(), (Shape{0, 3}));
    EXPECT_EQ(f.lse.shape(), (Shape{0}));
    if (red == Reduction::mean) {
      EXPECT_TRUE(std::isnan(f.loss.item_as_double()));
    } else if (red == Reduction::sum) {
      EXPECT_EQ(f.loss.item_as_double(), 0.0);
    } else {
      EXPECT_EQ(f.loss.shape(), (Shape{0}));
    }
    for (double x : dw.to_vector<double>()) EXPECT_EQ(x, 0.0);
  }
}

TEST(LinearCrossEntropy, TargetOutOfRangeNamesPositionValueAndVocabulary) {
  Problem p = make_problem(6, 3, 5, 81, 0);
  std::vector<std::int64_t> t = {0, 1, 2, 7, 4, 0};
  p.target = Tensor::from_vector(t, {6});
  const LossOptions o;
  try {
    (void)linear_cross_entropy(p.hidden, p.weight, p.target, o);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("target[3] = 7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("< 5"), std::string::npos) << msg;
  }
  t[3] = -1;
  EXPECT_THROW((void)linear_cross_entropy_unfused(p.hidden, p.weight, Tensor::from_vector(t, {6}), o), Error);
}

TEST(LinearCrossEntropy, RejectsBadArguments) {
  const Problem p = make_problem(4, 3, 5, 91, 0);
  LossOptions o;
  EXPECT_THROW((void)linear_cross_entropy(p.hidden, p.weight.narrow(1, 0, 2), p.target, o), Error);
  EXPECT_THROW((void)linear_cross_entropy(p.hidden, p.weight, p.target.to(DType::i32), o), Error);
  EXPECT_THROW((void)linear_cross_entropy(p.hidden, p.weight.to(DType::f32), p.target, o), Error);
  o.label_smoothing = 1.5;
  EXPECT_THROW((void)linear_cross_entropy(p.hidden, p.weight, p.target, o), Error);
  o = LossOptions();
  o.class_weight = Tensor::full({4}, 1.0, DType::f32);  // V is 5
  EXPECT_THROW((void)linear_cross_entropy(p.hidden, p.weight, p.target, o), Error);
  o = LossOptions();
  o.reduction = Reduction::none;
  Tensor dw = Tensor::zeros({5, 3}, DType::f32);
  EXPECT_THROW((void)linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o,
                                                    Tensor::full({}, 1.0, DType::f32), dw, Tensor()),
               Error);  // grad_loss must be [N] for reduction none
  o.reduction = Reduction::mean;
  Tensor dw_bad = Tensor::zeros({5, 4}, DType::f32);
  EXPECT_THROW((void)linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o,
                                                    Tensor::full({}, 1.0, DType::f32), dw_bad, Tensor()),
               Error);
}

}  // namespace
}  // namespace lmcore
