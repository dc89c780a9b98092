// Highway kernels for comparisons of two dense runs (or a dense run and one broadcast value) of the
// same dtype, writing one bool byte per element. Lane masks are narrowed to bytes with DemoteTo.
// 8-byte types are left to the compiler's loop (no i64 -> u8 demotion on every target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/compare_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lmcore/core/internal/simd_dispatch.h"
#include "src/core/compare_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Highway 1.0 has Le/Ge for floats only; for integers (no NaN) a <= b is !(a > b). Ne is !(a == b):
// x86's ordered not-equal would call NaN != NaN false, while IEEE (and torch) say true.
template <int kOp, class D, class V>
HWY_INLINE auto CmpMask(D, V a, V b) {
  constexpr bool kFloat = hwy::IsFloat<hn::TFromD<D>>();
  if constexpr (kOp == 0) return hn::Eq(a, b);
  else if constexpr (kOp == 1) return hn::Not(hn::Eq(a, b));
  else if constexpr (kOp == 2) return hn::Lt(a, b);
  else if constexpr (kOp == 3) { if constexpr (kFloat) return hn::Le(a, b); else return hn::Not(hn::Gt(a, b)); }
  else if constexpr (kOp == 4) return hn::Gt(a, b);
  else { if constexpr (kFloat) return hn::Ge(a, b); else return hn::Not(hn::Lt(a, b)); }
}

template <int kOp, typename T>
HWY_INLINE bool CmpScalar(T a, T b) {
  if constexpr (kOp == 0) return a == b;
  else if constexpr (kOp == 1) return a != b;
  else if constexpr (kOp == 2) return a < b;
  else if constexpr (kOp == 3) return a <= b;
  else if constexpr (kOp == 4) return a > b;
  else return a >= b;
}

// out[i] = a[i] OP b[i * b_step], b_step 0 (broadcast value) or 1. An empty run reads nothing (b[0]
// included: b may then point at the end of its array).
template <int kOp, typename T>
void CmpRun(bool* HWY_RESTRICT out, const T* HWY_RESTRICT a, const T* HWY_RESTRICT b, std::int64_t b_step,
            std::int64_t n) {
  if (n <= 0) return;
  const hn::ScalableTag<T> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto* o = reinterpret_cast<std::uint8_t*>(out);
  std::int64_t i = 0;
  const auto bv = hn::Set(d, b[0]);
  for (; i + N <= n; i += N) {
    const auto va = hn::LoadU(d, a + i);
    const auto vb = b_step == 0 ? bv : hn::LoadU(d, b + i);
    const auto m = CmpMask<kOp>(d, va, vb);
    if constexpr (sizeof(T) == 1) {
      const hn::RebindToUnsigned<decltype(d)> du;
      hn::StoreU(hn::And(hn::BitCast(du, hn::VecFromMask(d, m)), hn::Set(du, 1)), du, o + i);
    } else {
      // Lanes of 2 or 4 bytes: 0/1 in a signed integer lane, then saturate down to bytes.
      const hn::RebindToSigned<decltype(d)> di;
      const hn::Rebind<std::uint8_t, decltype(di)> d8;
      const auto ones = hn::IfThenElseZero(hn::RebindMask(di, m), hn::Set(di, 1));
      hn::StoreU(hn::DemoteTo(d8, ones), d8, o + i);
    }
  }
  for (; i < n; ++i) out[i] = CmpScalar<kOp>(a[i], b[i * b_step]);
}

template <typename T>
void CmpDispatch(int op, bool* out, const T* a, const T* b, std::int64_t b_step, std::int64_t n) {
  switch (op) {
    case 0: return CmpRun<0>(out, a, b, b_step, n);
    case 1: return CmpRun<1>(out, a, b, b_step, n);
    case 2: return CmpRun<2>(out, a, b, b_step, n);
    case 3: return CmpRun<3>(out, a, b, b_step, n);
    case 4: return CmpRun<4>(out, a, b, b_step, n);
    default: return CmpRun<5>(out, a, b, b_step, n);
  }
}

void CompareF32(int op, bool* out, const float* a, const float* b, std::int64_t bs, std::int64_t n) { CmpDispatch(op, out, a, b, bs, n); }
void CompareI32(int op, bool* out, const std::int32_t* a, const std::int32_t* b, std::int64_t bs, std::int64_t n) { CmpDispatch(op, out, a, b, bs, n); }
void CompareI16(int op, bool* out, const std::int16_t* a, const std::int16_t* b, std::int64_t bs, std::int64_t n) { CmpDispatch(op, out, a, b, bs, n); }
void CompareI8(int op, bool* out, const std::int8_t* a, const std::int8_t* b, std::int64_t bs, std::int64_t n) { CmpDispatch(op, out, a, b, bs, n); }
void CompareU8(int op, bool* out, const std::uint8_t* a, const std::uint8_t* b, std::int64_t bs, std::int64_t n) { CmpDispatch(op, out, a, b, bs, n); }

}  // namespace lmcore::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::detail {

HWY_EXPORT(CompareF32);
HWY_EXPORT(CompareI32);
HWY_EXPORT(CompareI16);
HWY_EXPORT(CompareI8);
HWY_EXPORT(CompareU8);

void compare_run(int op, bool* out, const float* a, const float* b, std::int64_t b_step, std::int64_t n) {
  LMCORE_DISPATCH(CompareF32)(op, out, a, b, b_step, n);
}
void compare_run(int op, bool* out, const std::int32_t* a, const std::int32_t* b, std::int64_t b_step, std::int64_t n) {
  LMCORE_DISPATCH(CompareI32)(op, out, a, b, b_step, n);
}
void compare_run(int op, bool* out, const std::int16_t* a, const std::int16_t* b, std::int64_t b_step, std::int64_t n) {
  LMCORE_DISPATCH(CompareI16)(op, out, a, b, b_step, n);
}
void compare_run(int op, bool* out, const std::int8_t* a, const std::int8_t* b, std::int64_t b_step, std::int64_t n) {
  LMCORE_DISPATCH(CompareI8)(op, out, a, b, b_step, n);
}
void compare_run(int op, bool* out, const std::uint8_t* a, const std::uint8_t* b, std::int64_t b_step, std::int64_t n) {
  LMCORE_DISPATCH(CompareU8)(op, out, a, b, b_step, n);
}

}  // namespace lmcore::detail
#endif
