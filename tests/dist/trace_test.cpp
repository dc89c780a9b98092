// analyze_traces on hand-made dumps: the first collective where ranks disagree, the ranks missing
// from it, and ranks that called something else.
#include <gtest/gtest.h>

#include "lmcore/core/error.h"
#include "lmcore/dist/flight_recorder.h"

namespace lmcore::dist {
namespace {

TraceEntry entry(std::int64_t seq, const std::string& op, std::int64_t count, const std::string& state = "completed") {
  TraceEntry e;
  e.seq = seq;
  e.op = op;
  e.dtype = "f32";
  e.count_in = e.count_out = count;
  e.state = state;
  return e;
}

TraceDump dump(int rank, int world, std::vector<TraceEntry> entries) {
  TraceDump d;
  d.group = "pg";
  d.rank = rank;
  d.world_size = world;
  d.entries = std::move(entries);
  d.source = "rank" + std::to_string(rank);
  return d;
}

TEST(TraceAnalysis, NamesTheFirstCollectiveARankNeverReached) {
  auto a = analyze_traces({dump(0, 3, {entry(0, "barrier", 0), entry(1, "all_reduce", 8), entry(2, "all_reduce", 8, "failed")}),
                           dump(1, 3, {entry(0, "barrier", 0), entry(1, "all_reduce", 8)}),
                           dump(2, 3, {entry(0, "barrier", 0), entry(1, "all_reduce", 8), entry(2, "all_reduce", 8, "failed")})});
  EXPECT_FALSE(a.agree);
  EXPECT_EQ(a.first_seq, 2);
  EXPECT_EQ(a.op, "all_reduce");
  EXPECT_EQ(a.missing_ranks, std::vector<int>{1});
  EXPECT_NE(a.report.find("ranks missing from it: 1"), std::string::npos) << a.report;
}

TEST(TraceAnalysis, NamesARankThatCalledSomethingElse) {
  auto a = analyze_traces({dump(0, 3, {entry(5, "all_reduce", 8)}), dump(1, 3, {entry(5, "all_reduce", 8)}),
                           dump(2, 3, {entry(5, "all_reduce", 16)})});
  EXPECT_EQ(a.first_seq, 5);
  EXPECT_EQ(a.differing_ranks, std::vector<int>{2});
  EXPECT_TRUE(a.missing_ranks.empty());
}

TEST(TraceAnalysis, AgreementAndMissingDumps) {
  auto ok = analyze_traces({dump(0, 2, {entry(0, "barrier", 0)}), dump(1, 2, {entry(0, "barrier", 0)})});
  EXPECT_TRUE(ok.agree) << ok.report;
  auto missing = analyze_traces({dump(0, 2, {entry(0, "barrier", 0)})});
  EXPECT_FALSE(missing.agree);
  EXPECT_EQ(missing.missing_ranks, std::vector<int>{1});
}

TEST(TraceAnalysis, RingBufferWindowsAreAligned) {
  // Rank 1's buffer starts later (older entries overwritten): compare from seq 10 on.
  auto a = analyze_traces({dump(0, 2, {entry(8, "x", 1), entry(9, "x", 1), entry(10, "y", 1), entry(11, "z", 1)}),
                           dump(1, 2, {entry(10, "y", 1), entry(11, "z", 1)})});
  EXPECT_TRUE(a.agree) << a.report;
}

TEST(TraceDumpFormat, RoundTripsAndRejectsMalformedInput) {
  TraceDump d = dump(1, 2, {entry(3, "all_gather_single", 4)});
  TraceDump back = parse_trace_dump(trace_dump_to_json(d), "mem");
  ASSERT_EQ(back.entries.size(), 1u);
  EXPECT_EQ(back.entries[0].op, "all_gather_single");
  EXPECT_EQ(back.rank, 1);
  EXPECT_THROW(parse_trace_dump("{", "bad.json"), Error);
  EXPECT_THROW(parse_trace_dump(R"({"format": "other"})", "bad.json"), Error);
  EXPECT_THROW(parse_trace_dump(R"({"format": "lmcore-dist-trace", "group": "g", "rank": 5, "world_size": 2,
                                    "generation": 0, "entries": []})", "bad.json"), Error);
}

}  // namespace
}  // namespace lmcore::dist
