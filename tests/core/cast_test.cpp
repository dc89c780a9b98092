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

// Every 16-bit pattern widened to f32 by the vector kernels (any length's tail included) gives the
// scalar decode's bits, NaN payloads and subnormals included.
TEST(Cast, EveryLowPrecisionPatternWidensAsScalar) {
  for (DType narrow : {DType::bf16, DType::f16}) {
    const std::int64_t n = 65536 + 5;
    Tensor src = Tensor::empty({n}, narrow);
    auto* bits = static_cast<std::uint16_t*>(src.data_ptr());
    for (std::int64_t i = 0; i < n; ++i) bits[i] = static_cast<std::uint16_t>(i);
    const Tensor fast = src.to(DType::f32);
    Tensor ref = Tensor::empty({n}, DType::f32);
    copy_cast_reference(src, ref);
    const auto a = fast.to_vector<float>(), b = ref.to_vector<float>();
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i]))
          << narrow << " bits 0x" << std::hex << (i & 0xFFFF);
  }
}

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

// Issue 13, defect 8: float -> integer casts of NaN, Inf and out-of-range values gave 0. The expected
// values are what torch 1.13 gives on x86-64 (measured: x.to(dtype) for these inputs), which lmcore
// defines as its rule (lmcore/core/copy.h).
TEST(Cast, FloatToIntegerSpecialsAreTorchs) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {nan, inf, -inf, 3e9f, -3e9f, 300.7f, -300.7f, 2.5f, -2.5f, 1e20f, 255.9f, 256.0f, -1.0f, -129.0f};
  const Tensor src = Tensor::from_vector(x, {static_cast<std::int64_t>(x.size())});
  const auto got = [&](DType d) { return src.to(d).to(DType::i64).to_vector<std::int64_t>(); };
  EXPECT_EQ(got(DType::i8), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 44, -44, 2, -2, 0, -1, 0, -1, 127}));
  EXPECT_EQ(got(DType::u8), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 44, 212, 2, 254, 0, 255, 0, 255, 127}));
  EXPECT_EQ(got(DType::i16), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 300, -300, 2, -2, 0, 255, 256, -1, -129}));
  const std::int64_t m32 = std::numeric_limits<std::int32_t>::min(), m64 = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(got(DType::i32), (std::vector<std::int64_t>{m32, m32, m32, m32, m32, 300, -300, 2, -2, m32, 255, 256, -1, -129}));
  EXPECT_EQ(src.to(DType::i64).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{m64, m64, m64, 3000000000, -3000000000, 300, -300, 2, -2, m64, 255, 256, -1, -129}));
  // The same through f64, bf16 and f16 sources, and through the strided (non-dense) loop.
  for (DType s : {DType::f64, DType::bf16, DType::f16}) {
    const Tensor xs = src.to(s);
    for (DType d : {DType::i8, DType::u8, DType::i16, DType::i32, DType::i64}) {
      Tensor want = Tensor::empty(xs.shape(), d), strided = Tensor::empty({xs.numel(), 2}, d);
      copy_cast_reference(xs, want);
      Tensor view = strided.select(1, 0);
      copy_cast(xs, view);
      EXPECT_EQ(xs.to(d).to(DType::i64).to_vector<std::int64_t>(), want.to(DType::i64).to_vector<std::int64_t>());
      EXPECT_EQ(view.to(DType::i64).to_vector<std::int64_t>(), want.to(DType::i64).to_vector<std::int64_t>());
    }
  }
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{2147483647.0, -2147483648.0, 2147483648.0}, {3}).to(DType::i32).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{2147483647, static_cast<std::int32_t>(m32), static_cast<std::int32_t>(m32)}));
}

TEST(Cast, FullAndFillRefuseValuesAnIntegerDTypeCannotHold) {
  const auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { (void)Tensor::full({2}, std::nan(""), DType::i32); }),
            "full: value nan cannot be converted to i32 without overflow (i32 holds -2147483648 to 2147483647)");
  EXPECT_EQ(message([] { (void)Tensor::full({2}, 128.0, DType::i8); }),
            "full: value 128 cannot be converted to i8 without overflow (i8 holds -128 to 127)");
  EXPECT_EQ(message([] { Tensor t = Tensor::zeros({2}, DType::u8); t.fill_(-1.0); }),
            "fill_: value -1 cannot be converted to u8 without overflow (u8 holds 0 to 255)");
  EXPECT_NE(message([] { (void)Tensor::full({1}, 9.3e18, DType::i64); }), "no error");
  EXPECT_NE(message([] { (void)Tensor::full({1}, std::numeric_limits<double>::infinity(), DType::u64); }), "no error");
  EXPECT_EQ(Tensor::full({2}, 2.7, DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 2}));
  EXPECT_EQ(Tensor::full({1}, -128.0, DType::i8).to_vector<std::int8_t>()[0], -128);
  EXPECT_TRUE(std::isnan(Tensor::full({1}, std::nan(""), DType::f32).to_vector<float>()[0]));  // floats take anything
  EXPECT_TRUE(Tensor::full({1}, std::nan(""), DType::boolean).to_vector<bool>()[0]);
}

// Issue 13, defect 6: a view of read-only memory refuses every in-place operation.
TEST(Tensor, ReadOnlyStorageRefusesInPlaceOperations) {
  static const float data[4] = {1, 2, 3, 4};
  const auto storage = Storage::borrow(const_cast<float*>(data), sizeof data, nullptr, /*read_only=*/true);
  Tensor t = Tensor::from_storage(storage, DType::f32, {4}, {}, 0);
  EXPECT_TRUE(t.is_read_only());
  EXPECT_TRUE(t.narrow(0, 1, 2).is_read_only());  // views share it
  EXPECT_THROW(t.fill_(0.0), Error);
  EXPECT_THROW(t.copy_(Tensor::zeros({4}, DType::f32)), Error);
  Tensor v = t.narrow(0, 0, 2);
  EXPECT_THROW(copy_cast(Tensor::zeros({2}, DType::f32), v), Error);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  Tensor c = t.clone();
  EXPECT_FALSE(c.is_read_only());
  c.fill_(5.0);
  EXPECT_EQ(c.to_vector<float>()[3], 5.0f);
}

// fill_ of every dtype: each element holds the value across the parallel chunks (element 0 as item
// reads it back, every other element the same bytes), for values whose bytes are all alike (0) and
// not (-0.0, 2.5, NaN, 3); a strided view fills only its own elements.
TEST(Tensor, FillStoresTheValueInEveryElementOfEveryDtype) {
  constexpr std::int64_t n = 3 * 65536 + 7;
  for (int k = 0; k < kNumDTypes; ++k) {
    const auto dt = static_cast<DType>(k);
    std::vector<double> values = {0.0, 1.0, 3.0};
    if (is_floating(dt)) values.insert(values.end(), {-0.0, 2.5, std::numeric_limits<double>::quiet_NaN()});
    if (dt == DType::boolean) values = {0.0, 1.0};
    for (const double value : values) {
      Tensor t = Tensor::full({n}, 7.0 * (dt != DType::boolean) + (dt == DType::boolean), dt);
      t.fill_(value);
      const double first = t.item_as_double({0});
      ASSERT_TRUE(std::isnan(value) ? std::isnan(first) : first == value && std::signbit(first) == std::signbit(value))
          << dtype_name(dt) << " value " << value << " element 0 holds " << first;
      const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
      const std::size_t size = t.itemsize();
      for (std::int64_t i = 1; i < n; ++i)
        ASSERT_EQ(std::memcmp(bytes + static_cast<std::size_t>(i) * size, bytes, size), 0)
            << dtype_name(dt) << " value " << value << " element " << i << " holds " << t.item_as_double({i});
      Tensor m = Tensor::zeros({n / 2, 2}, dt);
      Tensor column = m.narrow(1, 1, 1);
      column.fill_(1.0);
      ASSERT_EQ(m.item_as_double({0, 0}), 0.0) << dtype_name(dt);
      ASSERT_EQ(m.item_as_double({0, 1}), 1.0) << dtype_name(dt);
      const auto* row0 = static_cast<const unsigned char*>(m.data_ptr());
      for (std::int64_t i = 1; i < n / 2; ++i)
        ASSERT_EQ(std::memcmp(row0 + static_cast<std::size_t>(i) * 2 * size, row0, 2 * size), 0)
            << dtype_name(dt) << " row " << i << " holds " << m.item_as_double({i, 0}) << ", " << m.item_as_double({i, 1});
    }
  }
}

}  // namespace
}  // namespace lmcore
