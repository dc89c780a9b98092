// Argument checks, reductions and the add-into helper shared by every loss in this part.
#include "src/loss/loss_common.h"

#include <string>

#include "lmcore/core/copy.h"
#include "lmcore/core/parallel.h"

namespace lmcore {

Reduction reduction_from_name(std::string_view name) {
  if (name == "none") return Reduction::none;
  if (name == "mean") return Reduction::mean;
  if (name == "sum") return Reduction::sum;
  fail("loss: reduction '{}' is not one of 'none', 'mean', 'sum'", name);
}

std::string_view reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}

namespace loss_detail {

template <typename Acc>
Buffer<Acc> vector_as(const char* op, const char* what, const Tensor& t, std::int64_t v) {
  LMCORE_CHECK(t.dim() == 1 && t.size(0) == v, "{}: {} must have shape [{}] (V), found {}", op, what, v,
               shape_str(t.shape()));
  LMCORE_CHECK(is_floating(t.dtype()) && !is_storage_only(t.dtype()),
               "{}: {} must be a float tensor (f32, f64, bf16, f16), found {}", op, what, t.dtype());
  Buffer<Acc> b(v);
  Tensor dst = b.tensor;
  copy_cast(t, dst);
  return b;
}

template <typename Acc>
LossSetup<Acc> make_setup(const char* op, std::int64_t n, std::int64_t v, const Tensor& target,
                          const LossOptions& o, bool use_bias) {
  LMCORE_CHECK(target.defined(), "{}: target is undefined", op);
  LMCORE_CHECK(target.dtype() == DType::i64, "{}: target must be i64, found {}", op, target.dtype());
  LMCORE_CHECK(target.dim() == 1 && target.size(0) == n,
               "{}: target must have shape [{}] (one class per token), found {}", op, n, shape_str(target.shape()));
  LMCORE_CHECK(v >= 1, "{}: the vocabulary (number of classes) must be >= 1, found {}", op, v);
  LMCORE_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0,
               "{}: label_smoothing must be in [0, 1], found {}", op, o.label_smoothing);
  LMCORE_CHECK(o.z_loss >= 0.0 && std::isfinite(o.z_loss), "{}: z_loss scale must be finite and >= 0, found {}", op,
               o.z_loss);
  LMCORE_CHECK(o.softcap >= 0.0 && std::isfinite(o.softcap),
               "{}: softcap must be finite and >= 0 (0 disables it), found {}", op, o.softcap);

  LossSetup<Acc> S;
  S.n = n;
  S.v = v;
  S.target_storage = target.contiguous();
  S.target = S.target_storage.template data<std::int64_t>();
  S.eps = static_cast<Acc>(o.label_smoothing);
  S.z_scale = static_cast<Acc>(o.z_loss);
  S.cap = static_cast<Acc>(o.softcap);
  S.reduction = o.reduction;
  S.ignore_index = o.ignore_index;
  if (o.class_weight.defined()) {
    S.class_weight_buf = vector_as<Acc>(op, "class_weight", o.class_weight, v);
    S.class_weight = S.class_weight_buf.data();
  }
  if (use_bias && o.bias.defined()) {
    S.bias_buf = vector_as<Acc>(op, "bias", o.bias, v);
    S.bias = S.bias_buf.data();
  }
  S.weight_sum = static_cast<Acc>(v);
  if (S.class_weight) {
    Acc ws = 0;
    for (std::int64_t j = 0; j < v; ++j) ws += S.class_weight[j];
    S.weight_sum = ws;
  }

  double wsum = 0.0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = S.target[i];
    if (t == S.ignore_index) continue;
    LMCORE_CHECK(t >= 0 && t < v,
                 "{}: target[{}] = {} is out of range, expected 0 <= target < {} (V, the vocabulary size) or "
                 "ignore_index {}",
                 op, i, t, v, S.ignore_index);
    ++count;
    wsum += static_cast<double>(S.target_weight(i));
  }
  if (S.reduction == Reduction::mean) {
    S.ce_denom = wsum;
    S.z_denom = static_cast<double>(count);
  }
  return S;
}

template <typename Acc>
Buffer<Acc> grad_per_token(const char* op, const Tensor& grad_loss, Reduction reduction, std::int64_t n) {
  LMCORE_CHECK(grad_loss.defined(), "{}: grad_loss is undefined", op);
  LMCORE_CHECK(is_floating(grad_loss.dtype()) && !is_storage_only(grad_loss.dtype()),
               "{}: grad_loss must be a float tensor, found {}", op, grad_loss.dtype());
  Buffer<Acc> g(n);
  if (reduction == Reduction::none) {
    LMCORE_CHECK(grad_loss.dim() == 1 && grad_loss.size(0) == n,
                 "{}: grad_loss for reduction 'none' must have shape [{}], found {}", op, n,
                 shape_str(grad_loss.shape()));
    Tensor dst = g.tensor;
    copy_cast(grad_loss, dst);
  } else {
    LMCORE_CHECK(grad_loss.numel() == 1, "{}: grad_loss for reduction '{}' must be a scalar, found shape {}", op,
                 reduction_name(reduction), shape_str(grad_loss.shape()));
    const Acc v = static_cast<Acc>(grad_loss.item_as_double(Shape(static_cast<std::size_t>(grad_loss.dim()), 0)));
    for (std::int64_t i = 0; i < n; ++i) g[i] = v;
  }
  return g;
}

template <typename Acc>
LossResult finish_loss(const LossSetup<Acc>& S, const Acc* ce, const Acc* zl, Tensor lse) {
  constexpr DType acc = dtype_of<Acc>;
  LossResult r;
  r.lse = std::move(lse);
  if (S.reduction == Reduction::none) {
    r.loss = Tensor::empty({S.n}, acc);
    r.z_loss = Tensor::empty({S.n}, acc);
    Acc* l = r.loss.data<Acc>();
    Acc* z = r.z_loss.data<Acc>();
    for (std::int64_t i = 0; i < S.n; ++i) {
      l[i] = ce[i] + zl[i];
      z[i] = zl[i];
    }
    return r;
  }
  // Sequential sums in double: deterministic, and never less precise than the f32 the issue asks for.
  double ce_sum = 0.0, zl_sum = 0.0;
  for (std::int64_t i = 0; i < S.n; ++i) {
    ce_sum += static_cast<double>(ce[i]);
    zl_sum += static_cast<double>(zl[i]);
  }
  double ce_total = ce_sum, zl_total = zl_sum;
  if (S.reduction == Reduction::mean) {
    ce_total = ce_sum / S.ce_denom;  // 0 / 0 = NaN when every token is ignored, as in torch
    // The z-loss term is 0 when it is off, even with every token ignored (it is not a 0 / 0 then).
    zl_total = S.z_scale == Acc(0) ? 0.0 : zl_sum / S.z_denom;
  }
  r.loss = Tensor::full({}, ce_total + zl_total, acc);
  r.z_loss = Tensor::full({}, zl_total, acc);
  return r;
}

void add_into(const Tensor& dst, const Tensor& src, const char* op) {
  LMCORE_CHECK(dst.shape() == src.shape(), "{}: gradient buffer has shape {}, expected {}", op,
               shape_str(dst.shape()), shape_str(src.shape()));
  LMCORE_CHECK(is_floating(dst.dtype()) && !is_storage_only(dst.dtype()),
               "{}: gradient buffer must be a float tensor, found {}", op, dst.dtype());
  LMCORE_CHECK(dst.dim() == 1 || dst.dim() == 2, "{}: gradient buffer must be 1-D or 2-D, found {}", op,
               shape_str(dst.shape()));
  const std::int64_t rows = dst.dim() == 2 ? dst.size(0) : 1;
  const std::int64_t cols = dst.dim() == 2 ? dst.size(1) : dst.size(0);
  const std::int64_t ds0 = dst.dim() == 2 ? dst.stride(0) : 0, ds1 = dst.stride(-1);
  const std::int64_t ss0 = src.dim() == 2 ? src.stride(0) : 0, ss1 = src.stride(-1);
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      if constexpr (std::is_floating_point_v<compute_t<D>> && std::is_floating_point_v<compute_t<S>>) {
        D* d = static_cast<D*>(dst.data_ptr());
        const S* s = static_cast<const S*>(src.data_ptr());
        parallel_for(0, rows, 16, [&](std::int64_t lo, std::int64_t hi) {
          for (std::int64_t r = lo; r < hi; ++r)
            for (std::int64_t c = 0; c < cols; ++c) {
              D& x = d[r * ds0 + c * ds1];
              const double sum = static_cast<double>(load_as_compute(x)) +
                                 static_cast<double>(load_as_compute(s[r * ss0 + c * ss1]));
              x = store_from_compute<D>(sum);
            }
        });
      } else {
        fail("{}: cannot add {} into a {} gradient buffer", op, src.dtype(), dst.dtype());
      }
    });
  });
}

template Buffer<float> vector_as<float>(const char*, const char*, const Tensor&, std::int64_t);
template Buffer<double> vector_as<double>(const char*, const char*, const Tensor&, std::int64_t);
template LossSetup<float> make_setup<float>(const char*, std::int64_t, std::int64_t, const Tensor&,
                                            const LossOptions&, bool);
template LossSetup<double> make_setup<double>(const char*, std::int64_t, std::int64_t, const Tensor&,
                                              const LossOptions&, bool);
template Buffer<float> grad_per_token<float>(const char*, const Tensor&, Reduction, std::int64_t);
template Buffer<double> grad_per_token<double>(const char*, const Tensor&, Reduction, std::int64_t);
template LossResult finish_loss<float>(const LossSetup<float>&, const float*, const float*, Tensor);
template LossResult finish_loss<double>(const LossSetup<double>&, const double*, const double*, Tensor);

}  // namespace loss_detail
}  // namespace lmcore
