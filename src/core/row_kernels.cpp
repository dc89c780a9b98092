// Highway implementations of lmcore/core/internal/row_kernels.h, one copy per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/row_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "lmcore/core/internal/hwy_tail-inl.h"
#include "lmcore/core/internal/row_kernels.h"
#include "lmcore/core/internal/simd_dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

float RowMax(const float* HWY_RESTRICT x, std::int64_t n) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const float ninf = -std::numeric_limits<float>::infinity();
  V acc = hn::Set(d, ninf);
  // The NaN rule: x86 max drops a NaN operand, so NaN lanes are counted on the side.
  auto nan = hn::Lt(acc, acc);  // all false
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const V v = hn::LoadU(d, x + j);
    acc = hn::Max(acc, v);
    nan = hn::Or(nan, hn::IsNaN(v));
  }
  if (j < n) {
    const V v = LoadTail(d, x, j, n, ninf);
    acc = hn::Max(acc, v);
    nan = hn::Or(nan, hn::IsNaN(v));
  }
  if (!hn::AllFalse(d, nan)) return std::numeric_limits<float>::quiet_NaN();
  // Reduced by hand: the emulated targets' MaxOfLanes starts from the lowest finite float, so a row of
  // -inf (or an empty one) came out as -FLT_MAX instead of -inf. Once per row, a few lanes.
  HWY_ALIGN float lanes[hn::MaxLanes(D())];
  hn::Store(acc, d, lanes);
  float m = ninf;
  for (std::int64_t i = 0; i < N; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}

// bf16 bits of v rounded to nearest even, NaN as 0xFFFF: the rounding of cast_f32_to_lowp
// (src/core/cast_kernels.cpp), so that fused and separate rounding give the same bits.
HWY_INLINE void StoreBF16(D /*d*/, V v, std::uint16_t* HWY_RESTRICT out) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<std::uint16_t, D> du16;
  const auto u = hn::BitCast(du, v);
  const auto rounded =
      hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)))));
  const auto is_nan = hn::RebindMask(du, hn::IsNaN(v));
  hn::StoreU(hn::TruncateTo(du16, hn::IfThenElse(is_nan, hn::Set(du, 0xFFFFu), rounded)), du16, out);
}

HWY_INLINE void StoreTailBF16(D d, V v, std::uint16_t* HWY_RESTRICT out, std::int64_t j, std::int64_t n) {
  HWY_ALIGN std::uint16_t buf[hn::MaxLanes(D())];
  StoreBF16(d, v, buf);
  for (std::int64_t i = 0; j + i < n; ++i) out[j + i] = buf[i];
}

// Where ExpSum puts the exps: nowhere, back into x, or rounded to bf16 into a separate row.
enum class ExpOut { kNone, kInPlace, kBF16 };

// sum_j exp(x[j] - m), and the exps themselves as `Out` says. Two accumulators, so that the adds
// do not wait on each other behind the long exp; the tail pads with -inf (exp gives 0). The sum's
// order is the same for every Out.
template <ExpOut Out>
float ExpSum(std::conditional_t<Out == ExpOut::kInPlace, float*, const float*> HWY_RESTRICT x, std::int64_t n, float m,
             std::uint16_t* HWY_RESTRICT p = nullptr) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const V vm = hn::Set(d, m);
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  std::int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    const V e0 = ExpNaN(d, hn::Sub(hn::LoadU(d, x + j), vm));
    const V e1 = ExpNaN(d, hn::Sub(hn::LoadU(d, x + j + N), vm));
    if constexpr (Out == ExpOut::kInPlace) {
      hn::StoreU(e0, d, x + j);
      hn::StoreU(e1, d, x + j + N);
    } else if constexpr (Out == ExpOut::kBF16) {
      StoreBF16(d, e0, p + j);
      StoreBF16(d, e1, p + j + N);
    }
    s0 = hn::Add(s0, e0);
    s1 = hn::Add(s1, e1);
  }
  for (; j + N <= n; j += N) {
    const V e = ExpNaN(d, hn::Sub(hn::LoadU(d, x + j), vm));
    if constexpr (Out == ExpOut::kInPlace) hn::StoreU(e, d, x + j);
    else if constexpr (Out == ExpOut::kBF16) StoreBF16(d, e, p + j);
    s0 = hn::Add(s0, e);
  }
  if (j < n) {
    const V e = ExpNaN(d, hn::Sub(LoadTail(d, x, j, n, -std::numeric_limits<float>::infinity()), vm));
    if constexpr (Out == ExpOut::kInPlace) StoreTail(d, e, x, j, n);
    else if constexpr (Out == ExpOut::kBF16) StoreTailBF16(d, e, p, j, n);
    s1 = hn::Add(s1, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

float RowExpSum(const float* HWY_RESTRICT x, std::int64_t n, float m) { return ExpSum<ExpOut::kNone>(x, n, m); }
float RowExpStoreSum(float* HWY_RESTRICT x, std::int64_t n, float m) { return ExpSum<ExpOut::kInPlace>(x, n, m); }
float RowExpSumStoreBF16(const float* HWY_RESTRICT x, std::uint16_t* HWY_RESTRICT p, std::int64_t n, float m) {
  return ExpSum<ExpOut::kBF16>(x, n, m, p);
}

void RowExp(float* HWY_RESTRICT x, std::int64_t n, float m) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const V vm = hn::Set(d, m);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(ExpNaN(d, hn::Sub(hn::LoadU(d, x + j), vm)), d, x + j);
  if (j < n)
    StoreTail(d, ExpNaN(d, hn::Sub(LoadTail(d, x, j, n, -std::numeric_limits<float>::infinity()), vm)), x, j, n);
}

void RowScale(float* HWY_RESTRICT x, std::int64_t n, float a) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const V va = hn::Set(d, a);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), va), d, x + j);
  if (j < n) StoreTail(d, hn::Mul(LoadTail(d, x, j, n, 0.0f), va), x, j, n);
}

float RowDot(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, std::int64_t n) {
  const D d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  std::int64_t j = 0;
  if (w != nullptr) {
    for (; j + N <= n; j += N) s0 = hn::MulAdd(hn::LoadU(d, w + j), hn::LoadU(d, x + j), s0);
    if (j < n) s1 = hn::Mul(LoadTail(d, w, j, n, 0.0f), LoadTail(d, x, j, n, 0.0f));
  } else {
    for (; j + N <= n; j += N) s0 = hn::Add(s0, hn::LoadU(d, x + j));
    if (j < n) s1 = LoadTail(d, x, j, n, 0.0f);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

}  // namespace lmcore::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::internal {

HWY_EXPORT(RowMax);
HWY_EXPORT(RowExpSum);
HWY_EXPORT(RowExpStoreSum);
HWY_EXPORT(RowExpSumStoreBF16);
HWY_EXPORT(RowExp);
HWY_EXPORT(RowScale);
HWY_EXPORT(RowDot);

float row_max(const float* x, std::int64_t n) { return LMCORE_DISPATCH(RowMax)(x, n); }
float row_exp_sum(const float* x, std::int64_t n, float m) { return LMCORE_DISPATCH(RowExpSum)(x, n, m); }
float row_exp_store_sum(float* x, std::int64_t n, float m) { return LMCORE_DISPATCH(RowExpStoreSum)(x, n, m); }
float row_exp_sum_store_bf16(const float* x, bf16* p, std::int64_t n, float m) {
  return LMCORE_DISPATCH(RowExpSumStoreBF16)(x, reinterpret_cast<std::uint16_t*>(p), n, m);
}
void row_exp(float* x, std::int64_t n, float m) { LMCORE_DISPATCH(RowExp)(x, n, m); }
void row_scale(float* x, std::int64_t n, float a) { LMCORE_DISPATCH(RowScale)(x, n, a); }
float row_dot(const float* x, const float* w, std::int64_t n) { return LMCORE_DISPATCH(RowDot)(x, w, n); }

}  // namespace lmcore::internal
#endif  // HWY_ONCE
