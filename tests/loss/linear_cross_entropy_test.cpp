// Fused and unfused linear cross-entropy against the naive f64 transcription of the definition
// (tests/loss/naive_reference.h, which shares no code with src/loss) for every option combination in
// f64, f32 and bf16; that reference's gradients against finite differences; chunk sizes, thread counts
// and the edge cases (all ignored, N = 0, bad targets).
//
// Bounds (tests/common/bounds.h): |diff| <= eps (a max|want| + r |want|), eps of the result dtype, each
// also shown to reject a 1% error. Measured with LMCORE_TEST_REPORT_ERRORS=1
// build/release/tests/loss/test_loss (Xeon, 2 threads), in eps max|want|, against the bound (a, r):
//
//   f64 and f32 accumulation: loss, z_loss 1.8 (8, 0)   lse 0.84 (4, 0)   d_hidden 4.2 (16, 0)
//                             d_weight 3.0 (16, 0)      d_bias 3.3 (16, 0)
//   (f32 alone: loss 1.2, lse 0.57, d_hidden 2.4, d_weight 2.5, d_bias 2.2)
//   threads 1, 2, 5 against each other: 1.2 (4, 0); bf16 d_hidden identical (1/64, 1)
//
// Before: fused against unfused at 1e-12 (they share the per-token helpers of loss_common.h, so a
// wrong helper passed), the loss alone against a naive formula, the gradients only through finite
// differences at 1e-7 absolute on a 5 x 6 problem, thread counts at 1e-5 (f32) and 1e-2 (bf16).
#include "lmcore/loss/linear_cross_entropy.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lmcore/core/matmul.h"
#include "lmcore/core/parallel.h"
#include "tests/common/bounds.h"
#include "tests/loss/loss_test_util.h"
#include "tests/loss/naive_reference.h"

namespace lmcore {
namespace {

using bounds::Bound;
using bounds::close_within;
using test::all_close;
using test::naive_linear_cross_entropy;
using test::NaiveLoss;
using test::random_targets;
using test::random_tensor;
using test::vec;

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

// Scalar objective sum_i g_i * loss_i (none) or g * loss, for finite differences.
double objective(const Problem& p, const LossOptions& o, const Tensor& g) {
  const NaiveLoss r = naive_linear_cross_entropy(p.hidden, p.weight, p.target, o);
  if (o.reduction != Reduction::none) return g.item_as_double() * r.total;
  const auto gv = g.to_vector<double>();
  double s = 0.0;
  for (std::int64_t i = 0; i < p.n; ++i) s += gv[i] * (r.ce[i] + r.zl[i]);
  return s;
}

const Reduction kReductions[] = {Reduction::none, Reduction::mean, Reduction::sum};

// The reduction's loss as a tensor: [N] per token (ce + zl) for none, else the scalar.
Tensor naive_loss(const NaiveLoss& r, Reduction red, bool z_only) {
  if (red != Reduction::none) return Tensor::full({}, z_only ? r.z_total : r.total, DType::f64);
  std::vector<double> x;
  for (std::size_t i = 0; i < r.ce.size(); ++i) x.push_back(z_only ? r.zl[i] : r.ce[i] + r.zl[i]);
  return Tensor::from_vector(x, {static_cast<std::int64_t>(x.size())});
}

// Bounds per accumulation dtype (and the dtype d_hidden is stored in for bf16 inputs).
struct LossBounds {
  Bound loss, lse, d_hidden, d_weight;
};

LossBounds loss_bounds(DType dtype) {
  switch (dtype) {
    // loss and z_loss, lse, d_hidden, d_weight and d_bias
    case DType::bf16: return {{8, 0}, {4, 0}, {1.0 / 64, 0.5}, {16, 0}};  // d_hidden bf16, the rest f32
    default: return {{8, 0}, {4, 0}, {16, 0}, {16, 0}};
  }
}

// One run (fused, unfused, or the separate forward and backward) against the naive reference.
void expect_matches_naive(const std::string& what, const LinearCrossEntropyOutput& out, const Tensor& dw,
                          const Tensor& db, const NaiveLoss& ref, const Problem& p, const LossOptions& o,
                          DType input) {
  const DType acc = o.accumulate;
  const LossBounds b = loss_bounds(input == DType::bf16 ? DType::bf16 : acc);
  EXPECT_TRUE(close_within(what + " loss", out.loss, naive_loss(ref, o.reduction, false), acc, b.loss));
  if (o.z_loss > 0) {
    EXPECT_TRUE(close_within(what + " z_loss", out.z_loss, naive_loss(ref, o.reduction, true), acc, b.loss));
  }
  EXPECT_TRUE(close_within(what + " lse", out.lse, vec(ref.lse, {p.n}), acc, b.lse));
  if (!out.d_hidden.defined()) return;
  EXPECT_TRUE(close_within(what + " d_hidden", out.d_hidden, vec(ref.d_hidden, {p.n, p.h}), input == DType::bf16 ? input : acc,
                           b.d_hidden));
  EXPECT_TRUE(close_within(what + " d_weight", dw, vec(ref.d_weight, {p.v, p.h}), acc, b.d_weight));
  if (db.defined()) {
    EXPECT_TRUE(close_within(what + " d_bias", db, vec(ref.d_bias, {p.v}), acc, b.d_weight));
  }
}

// Fused (ragged chunks and token tiles), unfused and the separate forward/backward, each against the
// naive reference, for every combination of the options, in f64 and f32 accumulation.
TEST(LinearCrossEntropy, EveryOptionCombinationMatchesTheNaiveReference) {
  const Problem p64 = make_problem(13, 6, 37, 11);
  int combos = 0;
  for (DType acc : {DType::f64, DType::f32}) {
    const Problem p = acc == DType::f64 ? p64
                                        : Problem{p64.hidden.to(acc), p64.weight.to(acc), p64.target, p64.bias.to(acc),
                                                  p64.class_weight.to(acc), p64.n, p64.h, p64.v};
    for (bool bias : {false, true})
      for (bool weights : {false, true})
        for (Reduction red : kReductions)
          for (double ls : {0.0, 0.2})
            for (double z : {0.0, 0.05})
              for (double cap : {0.0, 2.5}) {
                const std::string name = std::string(dtype_name(acc)) + " " + describe(bias, weights, red, ls, z, cap);
                SCOPED_TRACE(name);
                LossOptions o = options_for(p, bias, weights, red, ls, z, cap);
                o.accumulate = acc;
                o.chunk_size = 7;  // 37 = 5 * 7 + 2: a ragged last chunk
                o.token_tile = 5;  // 13 = 2 * 5 + 3
                const Tensor g = grad_for(p64, red, 99).to(acc);
                const NaiveLoss ref = naive_linear_cross_entropy(p.hidden, p.weight, p.target, o, g);
                Tensor dw_f = Tensor::zeros({p.v, p.h}, acc), db_f = Tensor::zeros({p.v}, acc);
                Tensor dw_u = dw_f.clone(), db_u = db_f.clone(), dw_s = dw_f.clone(), db_s = db_f.clone();
                const auto f = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, o, g, dw_f, db_f);
                expect_matches_naive("fused", f, dw_f, bias ? db_f : Tensor(), ref, p, o, acc);
                const auto u = linear_cross_entropy_unfused_with_grad(p.hidden, p.weight, p.target, o, g, dw_u, db_u);
                expect_matches_naive("unfused", u, dw_u, bias ? db_u : Tensor(), ref, p, o, acc);
                const LossResult fwd = linear_cross_entropy(p.hidden, p.weight, p.target, o);
                const Tensor dh = linear_cross_entropy_backward(p.hidden, p.weight, p.target, g, o, fwd.lse, dw_s, db_s);
                expect_matches_naive("forward, then backward", {fwd.loss, fwd.z_loss, fwd.lse, dh}, dw_s,
                                     bias ? db_s : Tensor(), ref, p, o, acc);
                ++combos;
              }
  }
  EXPECT_EQ(combos, 192);
}

// d_weight and d_bias are added into what the buffers hold: the result is prior + the gradient alone,
// up to the rounding of that one addition.
TEST(LinearCrossEntropy, GradientsAreAddedIntoThePriorContents) {
  const Problem p = make_problem(13, 6, 37, 12);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    const LossOptions o = options_for(p, true, true, Reduction::mean, 0.1, 0.01, 0.0);
    const Tensor g = grad_for(p, Reduction::mean, 3);
    const Tensor dw0 = random_tensor({p.v, p.h}, 5), db0 = random_tensor({p.v}, 6);
    Tensor dw = dw0.clone(), db = db0.clone();
    Tensor dw_alone = Tensor::zeros({p.v, p.h}, DType::f64), db_alone = Tensor::zeros({p.v}, DType::f64);
    auto run = fused ? linear_cross_entropy_with_grad : linear_cross_entropy_unfused_with_grad;
    (void)run(p.hidden, p.weight, p.target, o, g, dw, db);
    (void)run(p.hidden, p.weight, p.target, o, g, dw_alone, db_alone);
    auto sum = [](const Tensor& a, const Tensor& b) {
      std::vector<double> x = a.to_vector<double>();
      const std::vector<double> y = b.to_vector<double>();
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
      return Tensor::from_vector(x, a.shape());
    };
    EXPECT_TRUE(close_within("d_weight", dw, sum(dw0, dw_alone), DType::f64, {1, 0}));
    EXPECT_TRUE(close_within("d_bias", db, sum(db0, db_alone), DType::f64, {1, 0}));
  }
}

// The naive reference's closed-form gradients against fourth-order central differences of its own loss
// (h = 2^-10: truncation ~h^4 f^(5) / 30 ~ 1e-13, rounding ~1e-16 |objective| / h ~ 1e-13), and the
// fused kernel against that reference on the same problem.
TEST(LinearCrossEntropy, GradientsMatchFiniteDifferences) {
  for (Reduction red : kReductions) {
    SCOPED_TRACE(std::string(reduction_name(red)));
    Problem p = make_problem(5, 3, 6, 31, 3);
    const LossOptions o = options_for(p, true, true, red, 0.25, 0.03, 2.0);
    const Tensor g = grad_for(p, red, 77);
    const NaiveLoss ref = naive_linear_cross_entropy(p.hidden, p.weight, p.target, o, g);
    Tensor dw = Tensor::zeros({p.v, p.h}, DType::f64), db = Tensor::zeros({p.v}, DType::f64);
    LossOptions oc = o;
    oc.chunk_size = 4;
    const auto out = linear_cross_entropy_with_grad(p.hidden, p.weight, p.target, oc, g, dw, db);
    expect_matches_naive("fused", out, dw, db, ref, p, oc, DType::f64);
    const double h = 0x1p-10;
    auto check = [&](const std::string& name, Tensor& param, const std::vector<double>& grad) {
      double* x = param.data<double>();
      std::vector<double> fd(grad.size());
      for (std::int64_t k = 0; k < param.numel(); ++k) {
        const double saved = x[k];
        auto at = [&](double step) {
          x[k] = saved + step;
          const double l = objective(p, o, g);
          x[k] = saved;
          return l;
        };
        fd[k] = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
      }
      const Tensor want = Tensor::from_vector(fd, param.shape()), got = Tensor::from_vector(grad, param.shape());
      bounds::report_error(name + " naive vs differences", got, want, DType::f64, {1, 0});
      // Measured <= 5.1e-12 max|grad|; 1e-9 leaves a margin of 200, ten million times below 1%.
      EXPECT_TRUE(bounds::within(name, got, want, 1e-9 * bounds::max_abs(want), 0.0));
    };
    check("d_hidden", p.hidden, ref.d_hidden);
    check("d_weight", p.weight, ref.d_weight);
    Tensor bias = p.bias;  // options_for stored the same storage as o.bias
    check("d_bias", bias, ref.d_bias);
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
    // Two runs that differ in summation order: each within the kernel's own bound of the truth, so
    // (4, 0) between them; bf16 d_hidden may round to neighbouring values (one ulp <= eps |x|).
    const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Bound sums{4, 0}, dh = dtype == DType::bf16 ? Bound{1.0 / 64, 1} : sums;
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
        const std::string run = fmt::format("{} chunk {} threads {} vs 1:", dtype_name(dtype), chunk, k == 1 ? 2 : 5);
        EXPECT_TRUE(close_within(run + " loss", outs[k].loss, outs[0].loss, acc, sums));
        EXPECT_TRUE(close_within(run + " d_hidden", outs[k].d_hidden, outs[0].d_hidden, dtype, dh));
        EXPECT_TRUE(close_within(run + " d_weight", dws[k], dws[0], acc, sums));
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

// The NaN rule (lmcore/core/internal/row_kernels.h): a NaN in one token's hidden state makes that
// token's loss, lse and d_hidden row NaN and leaves the other tokens' values as they were; the mean is
// NaN, as torch's is. f32 (the vector row kernels) and f64, fused and unfused, one chunk or several.
TEST(LinearCrossEntropy, NanHiddenStateGivesANanTokenAndOnlyThat) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Problem p = make_problem(9, 5, 37, 95, 0, dtype);
    for (std::int64_t chunk : {0, 8}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk));
      LossOptions o = options_for(p, true, false, Reduction::none, 0.1, 0.01, 0.0);
      o.accumulate = dtype;
      o.chunk_size = chunk;
      const Tensor g = Tensor::full({p.n}, 1.0, dtype);
      std::vector<double> h = p.hidden.to_vector<double>();
      h[4 * 5 + 2] = NAN;  // token 4
      const Tensor bad = Tensor::from_vector(h, {p.n, p.h}).to(dtype);
      for (bool fused : {true, false}) {
        auto run = fused ? linear_cross_entropy_with_grad : linear_cross_entropy_unfused_with_grad;
        Tensor dw0 = Tensor::zeros({p.v, p.h}, dtype), dw1 = dw0.clone();
        const auto clean = run(p.hidden, p.weight, p.target, o, g, dw0, Tensor());
        const auto r = run(bad, p.weight, p.target, o, g, dw1, Tensor());
        const auto loss = r.loss.to_vector<double>(), loss0 = clean.loss.to_vector<double>();
        const auto lse = r.lse.to_vector<double>(), lse0 = clean.lse.to_vector<double>();
        const auto dh = r.d_hidden.to_vector<double>(), dh0 = clean.d_hidden.to_vector<double>();
        for (std::int64_t i = 0; i < p.n; ++i) {
          EXPECT_EQ(std::isnan(loss[i]), i == 4) << (fused ? "fused" : "unfused") << " token " << i;
          EXPECT_EQ(std::isnan(lse[i]), i == 4) << i;
          EXPECT_TRUE(i == 4 || loss[i] == loss0[i]) << i;
          for (std::int64_t k = 0; k < p.h; ++k)
            EXPECT_TRUE(i == 4 ? std::isnan(dh[i * p.h + k]) : dh[i * p.h + k] == dh0[i * p.h + k]) << i;
        }
      }
      o.reduction = Reduction::mean;
      EXPECT_TRUE(std::isnan(linear_cross_entropy(bad, p.weight, p.target, o).loss.item_as_double()));
    }
  }
}

TEST(LinearCrossEntropy, AllTokensIgnored) {
  Problem p = make_problem(4, 3, 5, 61);
  p.target = Tensor::full({4}, -100, DType::i64);
  for (Reduction red : kReductions) {
    // The z-loss term is off (0) or a mean over no token (0 / 0, as the loss).
    for (double z : {0.0, 0.1}) {
      LossOptions o = options_for(p, true, true, red, 0.1, z, 0.0);
      for (const auto& r : {linear_cross_entropy(p.hidden, p.weight, p.target, o),
                            linear_cross_entropy_unfused(p.hidden, p.weight, p.target, o),
                            cross_entropy(Tensor::zeros({4, p.v}, DType::f64), p.target, o)}) {
        for (double x : r.z_loss.to_vector<double>()) {
          if (z == 0.0 || red != Reduction::mean) EXPECT_EQ(x, 0.0) << reduction_name(red) << " z " << z;
          else EXPECT_TRUE(std::isnan(x)) << reduction_name(red);
        }
      }
    }
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
