// Highway kernels for dense reductions, compiled once per SIMD target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/reduce_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

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

// One block (n <= kBlock): four accumulators hide the add latency.
template <typename T>
float SumBlock(const T* HWY_RESTRICT p, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  std::int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, LoadF32(df, p + i));
    a1 = hn::Add(a1, LoadF32(df, p + i + N));
    a2 = hn::Add(a2, LoadF32(df, p + i + 2 * N));
    a3 = hn::Add(a3, LoadF32(df, p + i + 3 * N));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, LoadF32(df, p + i));
  float tail = 0.0f;
  for (; i < n; ++i) tail += ToF32(p[i]);
  const auto total = hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
  return hn::GetLane(hn::SumOfLanes(df, total)) + tail;
}

template <typename T>
float SumPairwise(const T* HWY_RESTRICT p, std::int64_t n) {
  if (n <= kBlock) return SumBlock(p, n);
  // Split at a block boundary so the tree's shape depends on n only.
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const std::int64_t half = (blocks / 2) * kBlock;
  return SumPairwise(p, half) + SumPairwise(p + half, n - half);
}

float SumF32(const float* HWY_RESTRICT p, std::int64_t n) { return SumPairwise(p, n); }
float SumBF16(const bf16* HWY_RESTRICT p, std::int64_t n) { return SumPairwise(p, n); }
float SumF16(const f16* HWY_RESTRICT p, std::int64_t n) { return SumPairwise(p, n); }

double SumBlockF64(const double* HWY_RESTRICT p, std::int64_t n) {
  const hn::ScalableTag<double> dd;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(dd));
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
  std::int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::LoadU(dd, p + i));
    a1 = hn::Add(a1, hn::LoadU(dd, p + i + N));
    a2 = hn::Add(a2, hn::LoadU(dd, p + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(dd, p + i + 3 * N));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, hn::LoadU(dd, p + i));
  double tail = 0.0;
  for (; i < n; ++i) tail += p[i];
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)))) + tail;
}

double SumF64(const double* HWY_RESTRICT p, std::int64_t n) {
  if (n <= kBlock) return SumBlockF64(p, n);
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const std::int64_t half = (blocks / 2) * kBlock;
  return SumF64(p, half) + SumF64(p + half, n - half);
}

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

float reduce_sum_f32(const float* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF32)(p, n); }
float reduce_sum_bf16(const bf16* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(SumBF16)(p, n); }
float reduce_sum_f16(const f16* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF16)(p, n); }
double reduce_sum_f64(const double* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF64)(p, n); }
float reduce_max_f32(const float* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxF32)(p, n); }
float reduce_min_f32(const float* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(MinF32)(p, n); }
float reduce_max_bf16(const bf16* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxBF16)(p, n); }
float reduce_min_bf16(const bf16* p, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(MinBF16)(p, n); }
float reduce_sum_exp_f32(const float* p, std::int64_t n, float shift) {
  return HWY_DYNAMIC_DISPATCH(SumExpF32)(p, n, shift);
}

}  // namespace lmcore::detail
#endif
