// Highway helpers shared by the row and column kernels (src/core/row_kernels.cpp,
// src/loss/row_kernels.cpp, src/loss/col_kernels.cpp): a vector's worth of tail elements loaded with
// padding and stored back, and the softmax's exp with the NaN rule. Included once per SIMD target from
// a file that foreach_target.h re-includes (the toggle guard below is Highway's per-target include pattern).
#if defined(LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
#undef LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
#else
#define LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
#endif

#include <hwy/highway.h>

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

// exp for the softmax rows and columns: arguments are differences against a running max (<= 0), NaN
// or -inf. NaN stays NaN (Highway's Exp maps NaN to 0, which would make a NaN vanish from a sum).
// Not Highway's Exp, which is ~30 instructions: exp(y) = 2^n e^r with n = round(y / ln 2),
// r = y - n ln 2 in two FMAs (Cody-Waite, so r keeps its bits for large |y|) and e^r on
// [-ln 2 / 2, ln 2 / 2] from its degree-7 Taylor polynomial (truncation < 5e-9), ~18 instructions.
// Measured against f64 exp (row_kernels_test): at most 0.84 ulp on AVX-512, 0.98 on the other
// targets; 1.45x Highway's throughput in a loop of exp + sum on Zen 5 (AVX-512), flex attention's
// forward 5-8% faster. y is clamped to [-88.03, 88.72] first: at the bottom 2^n is 2^-127, built as
// the bits 0, so the result is exactly 0 (true exp < 1e-38, under FLT_MIN); at the top 2^128 is built
// as +inf. Valid for y <= 88.37 (+inf above, 0.35 early: 2^128 has no float); the callers' arguments
// are <= 0.
template <class D>
HWY_INLINE hn::Vec<D> ExpNaN(D d, hn::Vec<D> v) {
  using V = hn::Vec<D>;
  const hn::RebindToSigned<D> di;
  const auto nan = hn::IsNaN(v);
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  // Their float -> int conversion is a C++ cast, undefined for NaN: NaN lanes go through as 0.
  const V y = hn::IfThenZeroElse(nan, v);
#else
  const V y = v;  // x86's min, max and conversion are defined for NaN; the blend below restores it
#endif
  const V yc = hn::Min(hn::Set(d, 88.7228394f), hn::Max(hn::Set(d, -88.0296936f), y));
  const V n = hn::Round(hn::Mul(yc, hn::Set(d, 1.44269504088896341f)));
  V r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), yc);  // ln 2 = 0.693145751953125 + 1.4286e-6
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  V p = hn::Set(d, 1.0f / 5040.0f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  // 2^n from its exponent bits: n in [-127, 128] gives the bits of 0 ... +inf.
  const V two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenElse(nan, v, hn::Mul(p, two_n));
}

}  // namespace lmcore::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LMCORE_CORE_INTERNAL_HWY_TAIL_INL_H_
