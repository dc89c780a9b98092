// Progress's line: durations for the ETA, and a total no run will reach (--max-steps 2^63 - 1).
#include "lmcore/core/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <string>
#include <thread>

namespace lmcore {
namespace {

TEST(Progress, DurationsFromSecondsToCenturies) {
  EXPECT_EQ(Progress::format_duration(12.4), "12s");
  EXPECT_EQ(Progress::format_duration(185), "3m05s");
  EXPECT_EQ(Progress::format_duration(3720), "1h02m");
  EXPECT_EQ(Progress::format_duration(99 * 86400.0), "2376h00m");
  EXPECT_EQ(Progress::format_duration(1e7), "116d");
  EXPECT_EQ(Progress::format_duration(9.3e18), "107638888888889d");
  EXPECT_EQ(Progress::format_duration(1e300).find('-'), std::string::npos);
  EXPECT_EQ(Progress::format_duration(std::numeric_limits<double>::quiet_NaN()), "?");
  EXPECT_EQ(Progress::format_duration(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(Progress::format_duration(-1), "?");
}

TEST(Progress, AnUnreachableTotalGetsAPositiveEta) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    Progress p("train", std::numeric_limits<std::int64_t>::max(), "steps", out, /*log_interval_seconds=*/0.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.update(1);
  }
  std::rewind(out);
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, out);
  std::fclose(out);
  const std::string line(buf, n);
  const std::size_t at = line.find("| ETA ");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string eta = line.substr(at + 6, line.find_first_of(" \n", at + 6) - (at + 6));
  ASSERT_GE(eta.size(), 2u) << line;
  EXPECT_EQ(eta.back(), 'd') << line;
  EXPECT_EQ(eta.find_first_not_of("0123456789"), eta.size() - 1) << line;
}

}  // namespace
}  // namespace lmcore
