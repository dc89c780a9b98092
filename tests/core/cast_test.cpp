#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "lmcore/core/copy.h"

namespace lmcore {
namespace {

// Sweeps f32 bit patterns (every exponent, spread mantissas, both signs) and checks the vector cast
// kernels give the scalar cast's bits, at lengths around the vector width.
std::vector<float> f32_sweep() {
  std::vector<float> v;
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 0x10001ull * 7) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  for (float x : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 3.4e38f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::nanf("")})
    v.push_back(x);
  return v;
}

template <typename Narrow>
void expect_vector_matches_scalar(DType narrow) {
  const std::vector<float> values = f32_sweep();
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{8}, std::int64_t{9}, std::int64_t{15},
                         std::int64_t{16}, std::int64_t{17}, std::int64_t{33}, static_cast<std::int64_t>(values.size())}) {
    Tensor src = Tensor::from_vector(std::vector<float>(values.begin(), values.begin() + n), {n});
    Tensor fast = src.to(narrow);
    Tensor ref = Tensor::empty({n}, narrow);
    copy_cast_reference(src, ref);
    ASSERT_EQ(std::memcmp(fast.data_ptr(), ref.data_ptr(), fast.nbytes()), 0) << "n=" << n << " to " << narrow;
    // And back to f32.
    Tensor back_fast = fast.to(DType::f32);
    Tensor back_ref = Tensor::empty({n}, DType::f32);
    copy_cast_reference(ref, back_ref);
    const auto a = back_fast.to_vector<float>(), b = back_ref.to_vector<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      if (std::isnan(a[i])) ASSERT_TRUE(std::isnan(b[i]));
      else ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i])) << i;
    }
  }
}

TEST(Cast, BF16VectorMatchesScalar) { expect_vector_matches_scalar<bf16>(DType::bf16); }
TEST(Cast, F16VectorMatchesScalar) { expect_vector_matches_scalar<f16>(DType::f16); }

TEST(Cast, RoundToNearestEven) {
  EXPECT_EQ(bf16::from_f32(std::bit_cast<float>(0x3F808000u)).bits, 0x3F80);  // tie, even stays
  EXPECT_EQ(bf16::from_f32(std::bit_cast<float>(0x3F818000u)).bits, 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f16::from_f32(65520.0f).bits, 0x7C00);                             // rounds to inf
  EXPECT_EQ(f16::from_f32(65519.0f).bits, 0x7BFF);
  EXPECT_EQ(f16::from_f32(-std::numeric_limits<float>::infinity()).bits, 0xFC00);
  EXPECT_EQ(f16::from_f32(5.9604645e-8f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(f16::from_f32(2.9802322e-8f).bits, 0x0000);  // half of it: tie to even (0)
  EXPECT_TRUE(std::isnan(f16::from_f32(std::nanf("")).to_f32()));
  EXPECT_TRUE(std::isnan(bf16::from_f32(std::nanf("")).to_f32()));
}

TEST(Cast, Float8) {
  EXPECT_EQ(f8_e4m3fn::from_f32(448.0f).bits, 0x7E);
  EXPECT_EQ(f8_e4m3fn::from_f32(464.0f).bits, 0x7E);          // tie to even -> 448
  EXPECT_EQ(f8_e4m3fn::from_f32(470.0f).bits, 0x7F);          // past the tie -> NaN (no inf)
  EXPECT_EQ(f8_e4m3fn::from_f32(-1.0f).bits, 0xB8);
  EXPECT_EQ(f8_e4m3fn::from_f32(std::ldexp(1.0f, -9)).bits, 0x01);  // smallest subnormal
  EXPECT_TRUE(std::isnan(f8_e4m3fn::from_bits(0x7F).to_f32()));
  EXPECT_EQ(f8_e5m2::from_f32(57344.0f).bits, 0x7B);
  EXPECT_EQ(f8_e5m2::from_f32(61440.0f).bits, 0x7C);  // tie, odd -> up -> inf
  EXPECT_EQ(f8_e5m2::from_f32(1.5f).bits, 0x3E);
  // Every code round-trips through f32.
  for (int b = 0; b < 256; ++b) {
    const float x = f8_e4m3fn::from_bits(static_cast<std::uint8_t>(b)).to_f32();
    if (!std::isnan(x)) {
      EXPECT_EQ(f8_e4m3fn::from_f32(x).bits, b);
    }
    const float y = f8_e5m2::from_bits(static_cast<std::uint8_t>(b)).to_f32();
    if (!std::isnan(y)) {
      EXPECT_EQ(f8_e5m2::from_f32(y).bits, b);
    }
  }
}

TEST(Cast, EveryPairOfDTypesStridedAndBroadcast) {
  Tensor base = Tensor::from_vector(std::vector<double>{0, 1, -2, 3.5, 100, -0.25, 7, 1}, {2, 4});
  for (int s = 0; s < kNumDTypes; ++s)
    for (int d = 0; d < kNumDTypes; ++d) {
      const DType sd = static_cast<DType>(s), dd = static_cast<DType>(d);
      Tensor src = base.to(sd).transpose(0, 1);  // strided
      Tensor fast = Tensor::empty({3, 4, 2}, dd);
      Tensor ref = Tensor::empty({3, 4, 2}, dd);
      fast.copy_(src);  // broadcast over the new leading dim
      copy_cast_reference(src, ref);
      ASSERT_EQ(std::memcmp(fast.data_ptr(), ref.data_ptr(), fast.nbytes()), 0) << sd << " -> " << dd;
    }
}

TEST(Cast, RejectsShapesThatDoNotBroadcast) {
  Tensor a = Tensor::zeros({3}, DType::f32), b = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(b.copy_(a), Error);
}

}  // namespace
}  // namespace lmcore
