// Highway helpers shared by the row and column kernels (src/core/row_kernels.cpp,
// src/loss/row_kernels.cpp, src/loss/col_kernels.cpp): a vector's worth of tail elements loaded with
// padding and stored back, and exp with the NaN rule. Included once per SIMD target from a file that
// foreach_target.h re-includes (the toggle guard below is Highway's per-target include pattern).
#if defined(LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
#undef LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
#else
#define LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lmcore::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The last n - j (< one vector) elements of x with the missing lanes set to `pad`, so that the tail
// goes through the same vector code, and rounds the same way, as the body.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* HWY_RESTRICT x, std::int64_t j, std::int64_t n, float pad) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  const std::int64_t lanes = static_cast<std::int64_t>(hn::Lanes(d));
  for (std::int64_t i = 0; i < lanes; ++i) buf[i] = j + i < n ? x[j + i] : pad;
  return hn::Load(d, buf);
}

// Stores the first n - j lanes of v to x[j, n).
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, float* HWY_RESTRICT x, std::int64_t j, std::int64_t n) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  hn::Store(v, d, buf);
  for (std::int64_t i = 0; j + i < n; ++i) x[j + i] = buf[i];
}

// exp with the NaN rule: Highway's Exp maps NaN to 0 (its range check is false for NaN), which would
// make a NaN vanish from a sum. One compare and blend per vector, beside a ~20-instruction exp.
// On the emulated targets Exp's float -> int conversion is a C++ cast, undefined for NaN, so NaN lanes
// enter Exp as 0 there (the blend puts the NaN back); x86's conversion instruction is defined for NaN.
template <class D>
HWY_INLINE hn::Vec<D> ExpNaN(D d, hn::Vec<D> v) {
  const auto nan = hn::IsNaN(v);
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  return hn::IfThenElse(nan, v, hn::Exp(d, hn::IfThenZeroElse(nan, v)));
#else
  return hn::IfThenElse(nan, v, hn::Exp(d, v));
#endif
}

}  // namespace lmcore::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
