// Cross-entropy on materialised logits [N, V]: the unfused reference. Each token's row is widened to
// the accumulation type, softcapped, and run through the same per-token math as the fused path.
#include "lmcore/loss/cross_entropy.h"

#include "lmcore/core/parallel.h"
#include "src/loss/loss_common.h"

namespace lmcore {

namespace {

using loss_detail::Buffer;
using loss_detail::LossSetup;
using loss_detail::RowStats;

void check_logits(const char* op, const Tensor& logits) {
  LMCORE_CHECK(logits.defined(), "{}: logits is undefined", op);
  LMCORE_CHECK(logits.dim() == 2, "{}: logits must be 2-D [N, V], found {}", op, shape_str(logits.shape()));
  LMCORE_CHECK(is_floating(logits.dtype()) && !is_storage_only(logits.dtype()),
               "{}: logits must be f32, f64, bf16 or f16, found {}", op, logits.dtype());
}

// Copies row i of logits into z (widened to Acc) and applies the softcap (not the bias: these are
// already logits).
template <typename Acc>
void load_row(const Tensor& logits, std::int64_t i, Acc* z, const LossSetup<Acc>& S) {
  visit_dtype(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      const T* p = static_cast<const T*>(logits.data_ptr()) + i * logits.stride(0);
      const std::int64_t s1 = logits.stride(1);
      for (std::int64_t j = 0; j < S.v; ++j) z[j] = static_cast<Acc>(load_as_compute(p[j * s1]));
    }
  });
  if (S.cap > 0) {
    const Acc inv = Acc(1) / S.cap;
    for (std::int64_t j = 0; j < S.v; ++j) z[j] = S.cap * std::tanh(z[j] * inv);
  }
}

template <typename Acc>
LossResult forward(const Tensor& logits, const Tensor& target, const LossOptions& options) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const LossSetup<Acc> S = loss_detail::make_setup<Acc>("cross_entropy", n, v, target, options, false);
  Buffer<Acc> ce(n), zl(n);
  Tensor lse = Tensor::empty({n}, dtype_of<Acc>);
  Acc* lse_p = lse.data<Acc>();
  parallel_for(0, n, 8, [&](std::int64_t lo, std::int64_t hi) {
    Buffer<Acc> row(v);
    for (std::int64_t i = lo; i < hi; ++i) {
      load_row(logits, i, row.data(), S);
      RowStats<Acc> st;
      loss_detail::fold_chunk(S, i, st, row.data(), 0, v);
      lse_p[i] = st.lse();
      loss_detail::row_loss(S, i, lse_p[i], st.zt, st.wz, ce[i], zl[i]);
    }
  });
  return loss_detail::finish_loss(S, ce.data(), zl.data(), std::move(lse));
}

template <typename Acc>
Tensor backward(const Tensor& logits, const Tensor& target, const Tensor& grad_loss, const LossOptions& options,
                const Tensor& lse_in) {
  const char* op = "cross_entropy_backward";
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const LossSetup<Acc> S = loss_detail::make_setup<Acc>(op, n, v, target, options, false);
  const Buffer<Acc> g = loss_detail::grad_per_token<Acc>(op, grad_loss, options.reduction, n);
  Tensor lse = lse_in.defined() ? lse_in : forward<Acc>(logits, target, options).lse;
  LMCORE_CHECK(lse.dim() == 1 && lse.size(0) == n, "{}: lse must have shape [{}], found {}", op, n,
               shape_str(lse.shape()));
  lse = lse.to(dtype_of<Acc>).contiguous();
  const Acc* lse_p = lse.data<Acc>();
  Tensor out = Tensor::empty({n, v}, logits.dtype());
  parallel_for(0, n, 8, [&](std::int64_t lo, std::int64_t hi) {
    Buffer<Acc> row(v);
    for (std::int64_t i = lo; i < hi; ++i) {
      load_row(logits, i, row.data(), S);
      const auto rg = loss_detail::row_grad(S, i, lse_p[i], g[i]);
      loss_detail::grad_chunk(S, i, rg, lse_p[i], row.data(), 0, v);
      visit_dtype(out.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          T* o = out.data<T>() + i * v;
          for (std::int64_t j = 0; j < v; ++j) o[j] = store_from_compute<T>(static_cast<compute_t<T>>(row[j]));
        }
      });
    }
  });
  return out;
}

void check_accumulate(const char* op, DType acc) {
  LMCORE_CHECK(acc == DType::f32 || acc == DType::f64, "{}: accumulate must be f32 or f64, found {}", op, acc);
}

}  // namespace

LossResult cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions& options) {
  check_logits("cross_entropy", logits);
  check_accumulate("cross_entropy", options.accumulate);
  if (options.accumulate == DType::f64) return forward<double>(logits, target, options);
  return forward<float>(logits, target, options);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& grad_loss,
                              const LossOptions& options, const Tensor& lse) {
  check_logits("cross_entropy_backward", logits);
  check_accumulate("cross_entropy_backward", options.accumulate);
  if (options.accumulate == DType::f64) return backward<double>(logits, target, grad_loss, options, lse);
  return backward<float>(logits, target, grad_loss, options, lse);
}

}  // namespace lmcore
