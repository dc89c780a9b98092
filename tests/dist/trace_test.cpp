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

// Issue 13, defect 9: a killed rank writes no dump. It used to count as absent from every sequence
// number, so the report named the first collective in the buffers (seq 0 here) instead of the one
// it died in. A collective that completed on any rank was entered by every rank.
TEST(TraceAnalysis, ARankWithoutADumpIsMissingFromTheFirstCollectiveNotCompletedEverywhere) {
  std::vector<TraceEntry> survivor;
  for (int s = 0; s < 5; ++s) survivor.push_back(entry(s, s % 2 == 0 ? "all_reduce" : "all_gather_single", 8));
  survivor.push_back(entry(5, "reduce_scatter_single", 8, "failed"));
  auto a = analyze_traces({dump(0, 3, survivor), dump(2, 3, survivor)});
  EXPECT_FALSE(a.agree);
  EXPECT_EQ(a.first_seq, 5) << a.report;
  EXPECT_EQ(a.op, "reduce_scatter_single");
  EXPECT_EQ(a.missing_ranks, std::vector<int>{1});
  EXPECT_NE(a.report.find("collective seq 5 (reduce_scatter_single"), std::string::npos) << a.report;
  EXPECT_NE(a.report.find("no dump"), std::string::npos) << a.report;

  // Completed on one survivor, not on the other (the rank died after its data reached rank 0):
  // still the first collective not completed everywhere.
  std::vector<TraceEntry> half = survivor;
  half.back().state = "completed";
  auto b = analyze_traces({dump(0, 3, half), dump(2, 3, survivor)});
  EXPECT_EQ(b.first_seq, 5) << b.report;
  EXPECT_EQ(b.missing_ranks, std::vector<int>{1});

  // A rank with a dump that stopped earlier is missing from its first absent collective, together
  // with the rank that left none.
  std::vector<TraceEntry> early(survivor.begin(), survivor.begin() + 3);
  auto c = analyze_traces({dump(0, 4, survivor), dump(2, 4, early), dump(3, 4, survivor)});
  EXPECT_EQ(c.first_seq, 3) << c.report;
  EXPECT_EQ(c.missing_ranks, (std::vector<int>{1, 2}));

  // Every recorded collective completed: no collective can be named, only the rank without a dump.
  auto d = analyze_traces({dump(0, 2, {entry(0, "barrier", 0), entry(1, "all_reduce", 8)})});
  EXPECT_FALSE(d.agree);
  EXPECT_EQ(d.first_seq, -1) << d.report;
  EXPECT_EQ(d.missing_ranks, std::vector<int>{1});
  EXPECT_NE(d.report.find("no dump from rank 1"), std::string::npos) << d.report;
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
