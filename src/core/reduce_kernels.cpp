// Highway kernels for dense reductions, compiled once per SIMD target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/reduce_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

#include "lmcore/core/internal/simd_dispatch.h"
#include "src/core/reduce_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace lmcore::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Elements summed by one block of vector accumulators before blocks are combined pairwise. Within a
// block each lane adds at most kBlock / (4 * lanes) values, so the block error stays small; the
// pairwise tree over blocks keeps the total error growing like log(n).
constexpr std::int64_t kBlock = 2048;

// Loads N lanes of T as f32.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const float* p) { return hn::LoadU(df, p); }
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const bf16* p) {
  const hn::Rebind<std::uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du32;
  const auto wide = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const std::uint16_t*>(p)));
  return hn::BitCast(df, hn::ShiftLeft<16>(wide));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const f16* p) {
  // F16C (AVX2 and up) converts exactly; older targets go through the scalar decoder, since Highway's
  // SSE4 emulation does not map f16 infinities and NaNs to f32 ones.
#if HWY_TARGET <= HWY_AVX2
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  HWY_ALIGN float tmp[hn::MaxLanes(df)];
  for (size_t i = 0; i < hn::Lanes(df); ++i) tmp[i] = p[i].to_f32();
  return hn::Load(df, tmp);
#endif
}

template <typename T>
HWY_INLINE float ToF32(T v) {
  if constexpr (std::is_same_v<T, float>) return v; else return v.to_f32();
}

template <class D>
HWY_INLINE hn::Vec<D> LoadAs(D d, const double* p) { return hn::LoadU(d, p); }
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadAs(D d, const T* p) { return LoadF32(d, p); }

// One block of whole vectors (n <= kBlock, a multiple of the lane count): four accumulators hide
// the add latency. Returns the lane sums, so that blocks combine without a horizontal reduction.
template <class D, typename T>
HWY_INLINE hn::Vec<D> SumBlock(D d, const T* HWY_RESTRICT p, std::int64_t n) {
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, LoadAs(d, p + i));
    a1 = hn::Add(a1, LoadAs(d, p + i + N));
    a2 = hn::Add(a2, LoadAs(d, p + i + 2 * N));
    a3 = hn::Add(a3, LoadAs(d, p + i + 3 * N));
  }
  for (; i < n; i += N) a0 = hn::Add(a0, LoadAs(d, p + i));
  return hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
}

// Pairwise over blocks, lane by lane, in one loop: a binary counter over the blocks keeps one
// partial per tree level (part[l] sums 2^l blocks), so the tree is the same as a recursive split
// at powers of two and the error grows like log(n). Recursing instead (and a horizontal sum per
// block) streamed from DRAM 1.45x slower on Zen 5: same loads, but the out-of-order window did not
// run ahead across the calls.
template <class D, typename T>
hn::Vec<D> SumPairwiseLanes(D d, const T* HWY_RESTRICT p, std::int64_t n) {
  if (n <= kBlock) return SumBlock(d, p, n);
  using Acc = hn::TFromD<D>;
  constexpr std::size_t kLanes = hn::MaxLanes(D());
  HWY_ALIGN Acc part[64 * kLanes];
  std::uint64_t count = 0;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    auto v = SumBlock(d, p + b, std::min(kBlock, n - b));
    int level = 0;
    for (; count >> level & 1; ++level) v = hn::Add(hn::Load(d, part + level * kLanes), v);
    hn::Store(v, d, part + level * kLanes);
    ++count;
  }
  auto total = hn::Zero(d);
  for (int level = 0; count != 0; ++level, count >>= 1)
    if (count & 1) total = hn::Add(hn::Load(d, part + level * kLanes), total);
  return total;
}

// Whole vectors pairwise, then the last n % lanes elements; Acc is float or double.
template <typename Acc, typename T>
Acc SumPairwise(const T* HWY_RESTRICT p, std::int64_t n) {
  const hn::ScalableTag<Acc> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t whole = n / N * N;  // kBlock is a multiple of N: blocks stay whole vectors
  Acc total = whole > 0 ? hn::GetLane(hn::SumOfLanes(d, SumPairwiseLanes(d, p, whole))) : Acc{0};
  Acc tail = 0;
  for (std::int64_t i = whole; i < n; ++i) {
    if constexpr (std::is_same_v<T, double>) tail += p[i]; else tail += ToF32(p[i]);
  }
  return total + tail;
}

float SumF32(const float* HWY_RESTRICT p, std::int64_t n) { return SumPairwise<float>(p, n); }
float SumBF16(const bf16* HWY_RESTRICT p, std::int64_t n) { return SumPairwise<float>(p, n); }
float SumF16(const f16* HWY_RESTRICT p, std::int64_t n) { return SumPairwise<float>(p, n); }
double SumF64(const double* HWY_RESTRICT p, std::int64_t n) { return SumPairwise<double>(p, n); }

// Max/min with NaN propagation: x86's max/min drop NaN, so NaNs are tracked in a separate mask.
template <bool kMax, typename T>
float Extremum(const T* HWY_RESTRICT p, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  float best = ToF32(p[0]);
  bool nan = std::isnan(best);
  std::int64_t i = 0;
  if (n >= 2 * N) {
    auto a0 = LoadF32(df, p), a1 = LoadF32(df, p + N);
    auto nan_mask = hn::Or(hn::IsNaN(a0), hn::IsNaN(a1));
    for (i = 2 * N; i + 2 * N <= n; i += 2 * N) {
      const auto v0 = LoadF32(df, p + i), v1 = LoadF32(df, p + i + N);
      nan_mask = hn::Or(nan_mask, hn::Or(hn::IsNaN(v0), hn::IsNaN(v1)));
      if constexpr (kMax) { a0 = hn::Max(a0, v0); a1 = hn::Max(a1, v1); }
      else { a0 = hn::Min(a0, v0); a1 = hn::Min(a1, v1); }
    }
    if (!hn::AllFalse(df, nan_mask)) return std::numeric_limits<float>::quiet_NaN();
    const auto m = kMax ? hn::Max(a0, a1) : hn::Min(a0, a1);
    best = hn::GetLane(kMax ? hn::MaxOfLanes(df, m) : hn::MinOfLanes(df, m));
  }
  for (; i < n; ++i) {
    const float v = ToF32(p[i]);
    if (std::isnan(v)) nan = true;
    best = kMax ? (v > best ? v : best) : (v < best ? v : best);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : best;
}

float MaxF32(const float* HWY_RESTRICT p, std::int64_t n) { return Extremum<true>(p, n); }
float MinF32(const float* HWY_RESTRICT p, std::int64_t n) { return Extremum<false>(p, n); }
float MaxBF16(const bf16* HWY_RESTRICT p, std::int64_t n) { return Extremum<true>(p, n); }
float MinBF16(const bf16* HWY_RESTRICT p, std::int64_t n) { return Extremum<false>(p, n); }

float SumExpBlock(const float* HWY_RESTRICT p, std::int64_t n, float shift) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto s = hn::Set(df, shift);
  auto a0 = hn::Zero(df), a1 = hn::Zero(df);
  std::int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::Add(a0, hn::Exp(df, hn::Sub(hn::LoadU(df, p + i), s)));
    a1 = hn::Add(a1, hn::Exp(df, hn::Sub(hn::LoadU(df, p + i + N), s)));
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += std::exp(p[i] - shift);
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1))) + tail;
}

float SumExpF32(const float* HWY_RESTRICT p, std::int64_t n, float shift) {
  if (n <= kBlock) return SumExpBlock(p, n, shift);
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const std::int64_t half = (blocks / 2) * kBlock;
  return SumExpF32(p, half, shift) + SumExpF32(p + half, n - half, shift);
}

}  // namespace lmcore::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmcore::detail {

HWY_EXPORT(SumF32);
HWY_EXPORT(SumBF16);
HWY_EXPORT(SumF16);
HWY_EXPORT(SumF64);
HWY_EXPORT(MaxF32);
HWY_EXPORT(MinF32);
HWY_EXPORT(MaxBF16);
HWY_EXPORT(MinBF16);
HWY_EXPORT(SumExpF32);

float reduce_sum_f32(const float* p, std::int64_t n) { return LMCORE_DISPATCH(SumF32)(p, n); }
float reduce_sum_bf16(const bf16* p, std::int64_t n) { return LMCORE_DISPATCH(SumBF16)(p, n); }
float reduce_sum_f16(const f16* p, std::int64_t n) { return LMCORE_DISPATCH(SumF16)(p, n); }
double reduce_sum_f64(const double* p, std::int64_t n) { return LMCORE_DISPATCH(SumF64)(p, n); }
float reduce_max_f32(const float* p, std::int64_t n) { return LMCORE_DISPATCH(MaxF32)(p, n); }
float reduce_min_f32(const float* p, std::int64_t n) { return LMCORE_DISPATCH(MinF32)(p, n); }
float reduce_max_bf16(const bf16* p, std::int64_t n) { return LMCORE_DISPATCH(MaxBF16)(p, n); }
float reduce_min_bf16(const bf16* p, std::int64_t n) { return LMCORE_DISPATCH(MinBF16)(p, n); }
float reduce_sum_exp_f32(const float* p, std::int64_t n, float shift) {
  return LMCORE_DISPATCH(SumExpF32)(p, n, shift);
}

}  // namespace lmcore::detail
#endif
