#include "lmcore/base/page_offset_buffer.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "tests/base/base_test_util.h"

namespace lmcore {
namespace {

std::uintptr_t page_offset(const void* p) { return reinterpret_cast<std::uintptr_t>(p) & 4095; }

TEST(PageOffsetBuffer, SharesThePageOffsetOfTheArrayItIsPlacedLike) {
  std::vector<unsigned char> rows(3 * 4096);
  for (std::size_t at : {0, 4, 64, 1536, 3840, 4092, 4096 + 100}) {
    const unsigned char* like = rows.data() + at;
    const PageOffsetBuffer<float> b(37, like);
    EXPECT_EQ(page_offset(b.data()), page_offset(like) & ~std::uintptr_t{3}) << "like at +" << at;
    for (int i = 0; i < 37; ++i) ASSERT_EQ(b.data()[i], 0.0f) << "zero-initialised, element " << i;
  }
  // An offset that is not a multiple of the element's alignment is rounded down to one (bf16 rows).
  const PageOffsetBuffer<float> odd(5, rows.data() + 4096 - (page_offset(rows.data()) & 4095) + 6);
  EXPECT_EQ(page_offset(odd.data()), 4u);
}

TEST(PageOffsetBuffer, CopiesItsSourceAndStaysValidWhenMoved) {
  std::vector<float> src(1000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 3.0f;
  std::vector<float> rows(4096);
  PageOffsetBuffer<float> a(src.data(), src.size(), rows.data() + 700);
  EXPECT_EQ(page_offset(a.data()), page_offset(rows.data() + 700));
  const float* where = a.data();
  std::vector<PageOffsetBuffer<float>> v;
  v.push_back(std::move(a));
  v.emplace_back(src.data(), src.size(), rows.data());  // the vector grows: the first one moves again
  EXPECT_EQ(v[0].data(), where);
  for (std::size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(v[0].data()[i], src[i]) << i;
    ASSERT_EQ(v[1].data()[i], src[i]) << i;
  }
}

}  // namespace
}  // namespace lmcore
