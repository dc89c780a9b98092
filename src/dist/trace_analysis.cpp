// analyze_traces: lines up the flight-recorder dumps of all ranks by collective sequence number and
// names the first collective where they disagree.
//
// For each sequence number s that every rank's ring buffer still covers (s >= the newest "oldest
// entry" among ranks), a rank with a dump is
//   * missing   when its dump has no entry s (it never called s);
//   * differing when it called s with another op, dtype or element counts than the majority.
// A rank without a dump (the usual case for a killed rank: it wrote nothing) cannot be judged by its
// own record, but a collective that completed on any rank was entered by every rank. So the answer
// is the first s with a missing or differing rank, or, when some rank sent no dump, the first s not
// completed on every rank that did; ranks without a dump are listed as missing from it. With every
// dump present and in agreement, the report names the first collective that did not complete
// everywhere, if any.
#include <algorithm>
#include <map>
#include <set>

#include "lmcore/core/error.h"
#include "lmcore/dist/flight_recorder.h"

namespace lmcore::dist {

namespace {

std::string describe(const TraceEntry& e) {
  return fmt::format("{} {}[in {}, out {}]", e.op, e.dtype, e.count_in, e.count_out);
}

std::string signature(const TraceEntry& e) {
  return fmt::format("{}|{}|{}|{}", e.op, e.dtype, e.count_in, e.count_out);
}

}  // namespace

TraceAnalysis analyze_traces(const std::vector<TraceDump>& all_dumps) {
  LMCORE_CHECK(!all_dumps.empty(), "analyze_traces: no dumps given");
  TraceAnalysis out;
  std::string notes;

  // Compare only the newest generation present: older generations ended in a shrink.
  int generation = 0;
  for (const auto& d : all_dumps) generation = std::max(generation, d.generation);
  std::map<int, const TraceDump*> by_rank;
  int world = 0;
  for (const auto& d : all_dumps) {
    if (d.generation != generation) {
      notes += fmt::format("ignored {} (rank {}, generation {} < {})\n", d.source, d.rank, d.generation, generation);
      continue;
    }
    world = std::max(world, d.world_size);
    if (by_rank.count(d.rank)) notes += fmt::format("two dumps for rank {}: using {}\n", d.rank, d.source);
    by_rank[d.rank] = &d;
  }

  std::vector<int> no_dump;
  for (int r = 0; r < world; ++r) {
    if (!by_rank.count(r)) no_dump.push_back(r);
  }

  // Collective entries by rank and seq.
  std::map<int, std::map<std::int64_t, const TraceEntry*>> coll;
  std::int64_t lo = 0, hi = -1;
  for (const auto& [rank, d] : by_rank) {
    auto& m = coll[rank];
    for (const auto& e : d->entries) {
      if (e.kind == "collective") m[e.seq] = &e;
    }
    if (!m.empty()) {
      lo = std::max(lo, m.begin()->first);
      hi = std::max(hi, m.rbegin()->first);
    }
  }

  std::int64_t first_incomplete = -1;
  for (std::int64_t s = lo; s <= hi; ++s) {
    std::map<std::string, std::vector<int>> sigs;
    std::vector<int> absent;  // ranks whose dump has no entry s
    std::map<int, const TraceEntry*> present;
    bool all_completed = true;
    for (const auto& [rank, m] : coll) {
      auto it = m.find(s);
      if (it == m.end()) {
        absent.push_back(rank);
        continue;
      }
      present[rank] = it->second;
      sigs[signature(*it->second)].push_back(rank);
      if (it->second->state != "completed") all_completed = false;
    }
    if (!all_completed && first_incomplete < 0) first_incomplete = s;
    const bool disagree = !absent.empty() || sigs.size() > 1;
    // Completed on every rank with a dump: the ranks without one entered it too.
    if (!disagree && (no_dump.empty() || all_completed)) continue;
    std::vector<int> missing = absent;
    missing.insert(missing.end(), no_dump.begin(), no_dump.end());
    std::sort(missing.begin(), missing.end());

    // The majority signature is "the" call; ranks with another one differ.
    auto best = std::max_element(sigs.begin(), sigs.end(),
                                 [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    out.agree = false;
    out.first_seq = s;
    out.missing_ranks = missing;
    std::string lines;
    if (best != sigs.end()) {
      const TraceEntry& ref = *present.at(best->second.front());
      out.op = ref.op;
      lines += fmt::format("first disagreement: collective seq {} ({}), generation {}\n", s, describe(ref), generation);
      for (const auto& [sig, ranks] : sigs) {
        if (sig == best->first) continue;
        for (int r : ranks) {
          out.differing_ranks.push_back(r);
          lines += fmt::format("  rank {} called {} instead\n", r, describe(*present.at(r)));
        }
      }
    } else {
      lines += fmt::format("first disagreement: collective seq {}, generation {}: no rank reached it\n", s, generation);
    }
    std::sort(out.differing_ranks.begin(), out.differing_ranks.end());
    if (!missing.empty()) lines += fmt::format("  ranks missing from it: {}\n", fmt::join(missing, ", "));
    if (!no_dump.empty()) {
      lines += fmt::format("  no dump from ranks {}: every collective before seq {} completed on the ranks that "
                           "sent one, so they stopped in or before seq {}\n",
                           fmt::join(no_dump, ", "), s, s);
    }
    for (const auto& [rank, e] : present) {
      lines += fmt::format("  rank {}: {}{}\n", rank, e->state, e->error.empty() ? "" : " (" + e->error + ")");
    }
    out.report = lines + notes;
    return out;
  }

  if (!no_dump.empty()) {
    // Nothing to name: every recorded collective completed, so the ranks without a dump stopped after
    // seq hi (or their dumps were lost).
    out.agree = false;
    out.missing_ranks = no_dump;
    out.first_seq = -1;
    out.report = fmt::format("no dump from rank {} (world size {}); every collective in the other dumps ({}..{}) "
                             "completed, so the missing ranks stopped after seq {}\n",
                             fmt::join(no_dump, ", "), world, lo, hi, hi);
  } else if (first_incomplete >= 0) {
    out.report = fmt::format("all ranks agree on collectives {}..{}; seq {} did not complete everywhere\n", lo, hi,
                             first_incomplete);
  } else {
    out.report = fmt::format("all ranks agree on collectives {}..{}, all completed\n", lo, hi);
  }
  out.report += notes;
  return out;
}

}  // namespace lmcore::dist
