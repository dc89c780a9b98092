// flex_attention and its backward: argument checks, dtype handling, and the calls into the kernels of
// flex_forward.cpp / flex_backward.cpp: bf16 inputs stay bf16 and meet the matrix units when gemm_lowp
// runs on oneDNN here; f64 inputs run the f64 kernels (f64 out, lse and gradients); every other case
// (f32, f16, bf16 without AVX-512 BF16) is widened once to f32.
#include "lmcore/attention/flex_attention.h"

#include <cmath>

#include "src/attention/flex_attention_internal.h"
#include "src/attention/flex_kernels.h"

namespace lmcore::attention {
namespace detail {

namespace {

void check_float(const Tensor& t, const char* op, const char* name) {
  LMCORE_CHECK(t.defined(), "{}: '{}' is undefined", op, name);
  LMCORE_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16 ||
                   t.dtype() == DType::f64,
               "{}: '{}' must be f32, bf16, f16 or f64, found {}", op, name, t.dtype());
}

}  // namespace

AttentionShape check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const char* op) {
  check_float(q, op, "q");
  check_float(k, op, "k");
  check_float(v, op, "v");
  LMCORE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "{}: q, k, v must share a dtype, found {}, {}, {}",
               op, q.dtype(), k.dtype(), v.dtype());
  LMCORE_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
               "{}: expected q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], found {}, {}, {}", op,
               shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  AttentionShape sh{};
  sh.batch = q.size(0);
  sh.q_heads = q.size(1);
  sh.q_len = q.size(2);
  sh.head_dim = q.size(3);
  sh.kv_heads = k.size(1);
  sh.kv_len = k.size(2);
  sh.value_dim = v.size(3);
  LMCORE_CHECK(k.size(0) == sh.batch && v.size(0) == sh.batch, "{}: batch sizes differ: q {}, k {}, v {}", op,
               shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  LMCORE_CHECK(k.size(3) == sh.head_dim, "{}: k has head dim {}, expected D = {} (q is {})", op, k.size(3),
               sh.head_dim, shape_str(q.shape()));
  LMCORE_CHECK(v.size(1) == sh.kv_heads && v.size(2) == sh.kv_len,
               "{}: v {} must match k {} in heads and length", op, shape_str(v.shape()), shape_str(k.shape()));
  LMCORE_CHECK(sh.kv_heads >= 1 && sh.q_heads % sh.kv_heads == 0,
               "{}: query heads ({}) must be a multiple of key/value heads ({})", op, sh.q_heads, sh.kv_heads);
  LMCORE_CHECK(sh.head_dim >= 1 && sh.head_dim <= 256 && sh.value_dim >= 1 && sh.value_dim <= 256,
               "{}: head dims must be in [1, 256], found D = {}, Dv = {}", op, sh.head_dim, sh.value_dim);
  LMCORE_CHECK(std::isfinite(scale), "{}: scale must be finite, found {}", op, scale);
  // The f32 kernels round it to f32, the f64 kernels take it as it is.
  sh.scale = scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(sh.head_dim)) : scale;
  return sh;
}

void check_block_mask(const BlockMask& bm, const AttentionShape& sh, const char* op) {
  LMCORE_CHECK(bm.q_len == sh.q_len && bm.kv_len == sh.kv_len,
               "{}: block mask was built for L = {}, S = {}, but q has L = {} and k has S = {}", op, bm.q_len,
               bm.kv_len, sh.q_len, sh.kv_len);
  // built_*: what it was made for, even when its lists are shared across (b, h).
  LMCORE_CHECK(bm.built_batch == 1 || bm.built_batch == sh.batch,
               "{}: block mask was built for batch B = {}, expected 1 or q's batch {}", op, bm.built_batch, sh.batch);
  LMCORE_CHECK(bm.built_heads == 1 || bm.built_heads == sh.q_heads,
               "{}: block mask was built for H = {} heads, expected 1 or q's heads Hq = {}", op, bm.built_heads,
               sh.q_heads);
  LMCORE_ASSERT(bm.batch == 1 || bm.batch == bm.built_batch);
  LMCORE_ASSERT(bm.heads == 1 || bm.heads == bm.built_heads);
  LMCORE_ASSERT_EQ(bm.partial.rows(), bm.batch * bm.heads * bm.num_q_blocks);
  LMCORE_ASSERT_EQ(bm.partial_t.rows(), bm.batch * bm.heads * bm.num_kv_blocks);
}

// What the kernels compute in (and return lse, the gradients and the parameter gradients in).
DType compute_dtype(DType input) { return input == DType::f64 ? DType::f64 : DType::f32; }

// Whether tensors of this dtype go to the kernels as they are (bf16 on the matrix units).
bool on_matrix_units(DType dt) { return dt == DType::bf16 && lowp_gemm_path(DType::bf16) == LowpGemmPath::onednn; }

// The element type the kernels read inputs of this dtype as: f64 and bf16 on the matrix units as they
// are, everything else widened to f32.
DType kernel_input(DType dt) { return dt == DType::f64 || on_matrix_units(dt) ? dt : DType::f32; }

// Whether a [B, H, rows, dim] tensor can be read through its strides: a contiguous last dim and rows
// that do not overlap (a BLAS leading dimension >= dim).
bool strided_ok(const Tensor& t) {
  return (t.stride(3) == 1 || t.size(3) == 1) && (t.size(2) == 1 || t.stride(2) >= t.size(3)) && t.stride(0) >= 0 &&
         t.stride(1) >= 0;
}

// An input as the kernels read it: itself when it already is `as` with readable strides (no copy),
// else a contiguous copy in `as`.
Tensor readable(const Tensor& t, DType as) {
  if (t.dtype() == as && strided_ok(t)) return t;
  return t.to(as).contiguous();
}

Strides4 strides_of(const Tensor& t) {
  // One row: any row stride >= dim keeps BLAS happy.
  const std::int64_t row = t.size(2) == 1 ? std::max<std::int64_t>(t.stride(2), t.size(3)) : t.stride(2);
  return {t.stride(0), t.stride(1), std::max<std::int64_t>(row, 1)};
}

// Checks an output tensor given by the caller (the _into entry points).
void check_output(const Tensor& t, const Shape& shape, DType dtype, const char* op, const char* name, bool contiguous) {
  LMCORE_CHECK(t.defined() && t.shape() == shape && t.dtype() == dtype,
               "{}: '{}' must be {} of shape {}, found {}", op, name, dtype, shape_str(shape),
               t.defined() ? t.describe() : "undefined");
  LMCORE_CHECK(contiguous ? t.is_contiguous() : strided_ok(t),
               "{}: '{}' must have {}, found strides {}", op, name,
               contiguous ? "contiguous strides" : "a contiguous last dim and non-overlapping rows",
               shape_str(t.strides()));
}

void forward_into(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& bm, const ScoreMod& mod,
                  const AttentionShape& sh, const char* op, Tensor& out, Tensor& lse) {
  check_block_mask(bm, sh, op);
  mod.check_heads(sh.q_heads, op);
  const DType in = kernel_input(q.dtype());
  const Tensor qr = readable(q, in), kr = readable(k, in), vr = readable(v, in);
  FlexLayout lay = dense_layout(sh);
  lay.q = strides_of(qr);
  lay.k = strides_of(kr);
  lay.v = strides_of(vr);
  lay.out = strides_of(out);
  if (in == DType::f64)
    flex_forward(sh, lay, bm, mod, qr.data<double>(), kr.data<double>(), vr.data<double>(), out.data<double>(),
                 lse.data<double>());
  else if (in == DType::bf16)
    flex_forward(sh, lay, bm, mod, qr.data<bf16>(), kr.data<bf16>(), vr.data<bf16>(), out.data<float>(), lse.data<float>());
  else
    flex_forward(sh, lay, bm, mod, qr.data<float>(), kr.data<float>(), vr.data<float>(), out.data<float>(),
                 lse.data<float>());
}

FlexResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& bm, const ScoreMod& mod,
                   const AttentionShape& sh, const char* op) {
  const DType acc = compute_dtype(q.dtype());
  Tensor out = Tensor::empty({sh.batch, sh.q_heads, sh.q_len, sh.value_dim}, acc);
  Tensor lse = Tensor::empty({sh.batch, sh.q_heads, sh.q_len}, acc);
  forward_into(q, k, v, bm, mod, sh, op, out, lse);
  return {out.to(q.dtype()), lse};
}

// The checks of a backward call and its d_lse in the compute dtype.
Tensor check_backward(const Tensor& q, const Tensor& out, const Tensor& lse, const Tensor& d_out, const ScoreMod& mod,
                      const AttentionShape& sh, const char* op, const Tensor& d_lse) {
  mod.check_heads(sh.q_heads, op);
  LMCORE_CHECK(mod.has_derivative(),
               "{}: score_mod '{}' contains a callable without a derivative; pass one to ScoreMod::from_function",
               op, mod.describe());
  const Shape out_shape{sh.batch, sh.q_heads, sh.q_len, sh.value_dim};
  LMCORE_CHECK(out.defined() && out.shape() == out_shape, "{}: 'out' must have shape {}, found {}", op,
               shape_str(out_shape), out.defined() ? shape_str(out.shape()) : "undefined");
  LMCORE_CHECK(d_out.defined() && d_out.shape() == out_shape, "{}: 'd_out' must have shape {}, found {}", op,
               shape_str(out_shape), d_out.defined() ? shape_str(d_out.shape()) : "undefined");
  const DType acc = compute_dtype(q.dtype());
  const Shape lse_shape{sh.batch, sh.q_heads, sh.q_len};
  LMCORE_CHECK(lse.defined() && lse.shape() == lse_shape && lse.dtype() == acc,
               "{}: 'lse' must be {} of shape {} (as the forward returns it for {} inputs), found {}", op, acc,
               shape_str(lse_shape), q.dtype(), lse.defined() ? lse.describe() : "undefined");
  check_float(out, op, "out");
  check_float(d_out, op, "d_out");
  // d_lse in the compute dtype, like lse (any float dtype is taken: it is a gradient from outside).
  Tensor dl;
  if (d_lse.defined()) {
    check_float(d_lse, op, "d_lse");
    LMCORE_CHECK(d_lse.shape() == lse_shape, "{}: 'd_lse' must have lse's shape {}, found {}", op,
                 shape_str(lse_shape), shape_str(d_lse.shape()));
    dl = d_lse.to(acc).contiguous();
  }
  return dl;
}

std::vector<Tensor> backward_into(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& d_out, const BlockMask& bm, const ScoreMod& mod,
                                  const AttentionShape& sh, const char* op, bool score_mod_grads, const Tensor& d_lse,
                                  Tensor& dq, Tensor& dk, Tensor& dv) {
  check_block_mask(bm, sh, op);
  const Tensor dl = check_backward(q, out, lse, d_out, mod, sh, op, d_lse);
  const DType acc = compute_dtype(q.dtype()), in = kernel_input(q.dtype());
  const Tensor l32 = lse.contiguous();
  const std::vector<std::vector<std::int64_t>> param_shapes = score_mod_grads ? mod.parameter_shapes()
                                                                             : std::vector<std::vector<std::int64_t>>{};
  std::vector<std::vector<double>> param_grads;
  for (const auto& shape : param_shapes) param_grads.emplace_back(static_cast<std::size_t>(checked_numel(shape)), 0.0);
  std::vector<std::vector<double>>* pg = param_grads.empty() ? nullptr : &param_grads;
  // q, k, v, out and d_out as the kernels read them (out and d_out in the inputs' kernel type too).
  const Tensor qr = readable(q, in), kr = readable(k, in), vr = readable(v, in);
  const Tensor orr = readable(out, in), gr = readable(d_out, in);
  const FlexLayout lay{strides_of(qr), strides_of(kr), strides_of(vr), strides_of(orr), strides_of(gr),
                       strides_of(dq),  strides_of(dk), strides_of(dv)};
  if (in == DType::f64)
    flex_backward(sh, lay, bm, mod, qr.data<double>(), kr.data<double>(), vr.data<double>(), orr.data<double>(),
                  gr.data<double>(), l32.data<double>(), dq.data<double>(), dk.data<double>(), dv.data<double>(), pg,
                  dl.defined() ? dl.data<double>() : nullptr);
  else if (in == DType::bf16)
    flex_backward(sh, lay, bm, mod, qr.data<bf16>(), kr.data<bf16>(), vr.data<bf16>(), orr.data<bf16>(),
                  gr.data<bf16>(), l32.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>(), pg,
                  dl.defined() ? dl.data<float>() : nullptr);
  else
    flex_backward(sh, lay, bm, mod, qr.data<float>(), kr.data<float>(), vr.data<float>(), orr.data<float>(),
                  gr.data<float>(), l32.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>(), pg,
                  dl.defined() ? dl.data<float>() : nullptr);
  std::vector<Tensor> grads;
  for (std::size_t p = 0; p < param_grads.size(); ++p) {
    if (acc == DType::f64) {
      grads.push_back(Tensor::from_vector(param_grads[p], param_shapes[p]));
    } else {
      const std::vector<float> g(param_grads[p].begin(), param_grads[p].end());
      grads.push_back(Tensor::from_vector(g, param_shapes[p]));
    }
  }
  return grads;
}

FlexGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& d_out, const BlockMask& bm, const ScoreMod& mod, const AttentionShape& sh,
                   const char* op, bool score_mod_grads, const Tensor& d_lse) {
  const DType acc = compute_dtype(q.dtype());
  Tensor dq = Tensor::empty(q.shape(), acc), dk = Tensor::empty(k.shape(), acc), dv = Tensor::empty(v.shape(), acc);
  std::vector<Tensor> pg = backward_into(q, k, v, out, lse, d_out, bm, mod, sh, op, score_mod_grads, d_lse, dq, dk, dv);
  return {dq.to(q.dtype()), dk.to(k.dtype()), dv.to(v.dtype()), std::move(pg)};
}

}  // namespace detail

FlexResult flex_attention(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& options) {
  const char* op = "flex_attention";
  const detail::AttentionShape sh = detail::check_qkv(q, k, v, options.scale, op);
  FlexResult r;
  if (options.block_mask != nullptr) {
    r = detail::forward(q, k, v, *options.block_mask, options.score_mod, sh, op);
  } else {
    const BlockMask bm = full_block_mask(sh.q_len, sh.kv_len);
    r = detail::forward(q, k, v, bm, options.score_mod, sh, op);
  }
  if (!options.return_lse) r.lse = Tensor();
  return r;
}

FlexGrads flex_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& d_out, const FlexOptions& options) {
  return flex_attention_backward(q, k, v, out, lse, d_out, Tensor(), options);
}

FlexGrads flex_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& d_out, const Tensor& d_lse,
                                  const FlexOptions& options) {
  const char* op = "flex_attention_backward";
  const detail::AttentionShape sh = detail::check_qkv(q, k, v, options.scale, op);
  if (options.block_mask != nullptr)
    return detail::backward(q, k, v, out, lse, d_out, *options.block_mask, options.score_mod, sh, op,
                            options.score_mod_grads, d_lse);
  const BlockMask bm = full_block_mask(sh.q_len, sh.kv_len);
  return detail::backward(q, k, v, out, lse, d_out, bm, options.score_mod, sh, op, options.score_mod_grads, d_lse);
}

void flex_attention_into(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse,
                         const FlexOptions& options) {
  const char* op = "flex_attention_into";
  const detail::AttentionShape sh = detail::check_qkv(q, k, v, options.scale, op);
  const DType acc = detail::compute_dtype(q.dtype());
  detail::check_output(out, {sh.batch, sh.q_heads, sh.q_len, sh.value_dim}, acc, op, "out", false);
  detail::check_output(lse, {sh.batch, sh.q_heads, sh.q_len}, acc, op, "lse", true);
  if (options.block_mask != nullptr) {
    detail::forward_into(q, k, v, *options.block_mask, options.score_mod, sh, op, out, lse);
  } else {
    const BlockMask bm = full_block_mask(sh.q_len, sh.kv_len);
    detail::forward_into(q, k, v, bm, options.score_mod, sh, op, out, lse);
  }
}

std::vector<Tensor> flex_attention_backward_into(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                                 Tensor dq, Tensor dk, Tensor dv, const FlexOptions& options) {
  const char* op = "flex_attention_backward_into";
  const detail::AttentionShape sh = detail::check_qkv(q, k, v, options.scale, op);
  const DType acc = detail::compute_dtype(q.dtype());
  detail::check_output(dq, q.shape(), acc, op, "dq", false);
  detail::check_output(dk, k.shape(), acc, op, "dk", false);
  detail::check_output(dv, v.shape(), acc, op, "dv", false);
  if (options.block_mask != nullptr)
    return detail::backward_into(q, k, v, out, lse, d_out, *options.block_mask, options.score_mod, sh, op,
                                 options.score_mod_grads, Tensor(), dq, dk, dv);
  const BlockMask bm = full_block_mask(sh.q_len, sh.kv_len);
  return detail::backward_into(q, k, v, out, lse, d_out, bm, options.score_mod, sh, op, options.score_mod_grads,
                               Tensor(), dq, dk, dv);
}

FlexFlops flex_flops(const BlockMask& mask, std::int64_t batch, std::int64_t q_heads, std::int64_t head_dim,
                     std::int64_t value_dim) {
  // Sum over computed blocks of (rows x cols), with the short last blocks counted at their size.
  double area = 0;
  const std::int64_t rows = mask.batch * mask.heads * mask.num_q_blocks;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t qi = r % mask.num_q_blocks;
    const double nq = static_cast<double>(std::min(mask.q_block, mask.q_len - qi * mask.q_block));
    for (const BlockRuns* runs : {&mask.partial, &mask.full}) {
      for (std::int64_t i = runs->offsets[static_cast<std::size_t>(r)]; i < runs->offsets[static_cast<std::size_t>(r) + 1]; ++i) {
        const BlockRun run = runs->runs[static_cast<std::size_t>(i)];
        const std::int64_t last = run.start + run.length - 1;
        const std::int64_t last_cols = std::min(mask.kv_block, mask.kv_len - last * mask.kv_block);
        area += nq * (static_cast<double>(run.length - 1) * static_cast<double>(mask.kv_block) +
                      static_cast<double>(last_cols));
      }
    }
  }
  // Broadcast masks count once per batch and head of the problem.
  area *= static_cast<double>(batch / mask.batch) * static_cast<double>(q_heads / mask.heads);
  FlexFlops f;
  f.forward = 2.0 * area * static_cast<double>(head_dim + value_dim);
  f.backward = 2.0 * area * static_cast<double>(3 * head_dim + 2 * value_dim);
  return f;
}

}  // namespace lmcore::attention
