// lmcore/dist/flight_recorder.h — the record of each rank's last N collectives, and the analysis
// that compares the records of all ranks after a hang or failure.
//
// Every ProcessGroup keeps a ring buffer of its last N calls (seq, op, dtype, sizes, state, enqueue /
// start / end times, error). It is written as JSON on timeout, on abort, or by dump_trace():
//
//   {"format": "lmcore-dist-trace", "version": 1, "group": "pg", "rank": 1, "world_size": 4,
//    "generation": 0, "reason": "timeout", "entries": [
//      {"seq": 7, "op": "all_reduce", "kind": "collective", "peer": -1, "dtype": "f32",
//       "count_in": 1024, "count_out": 1024, "bytes": 4096, "state": "completed",
//       "t_enqueue": 1764670000.1, "t_start": 1764670000.1, "t_end": 1764670000.2, "error": ""}, ...]}
//
// `lmcore trace DUMP...` loads one dump per rank and names the first collective where ranks
// disagree (a rank never reached it, or reached it with another op or size) and the missing ranks.
// A rank killed outright leaves no dump; it is named missing from the first collective that did not
// complete on every other rank (one that completed anywhere was entered by every rank):
//
//   auto a = analyze_traces({load_trace_dump("rank0.json"), load_trace_dump("rank1.json")});
//   std::cout << a.report;
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmcore::dist {

struct TraceEntry {
  std::int64_t seq = 0;
  std::string op;
  std::string kind = "collective";  // or "p2p" (send/recv are numbered per peer, not compared)
  int peer = -1;
  std::string dtype;
  std::int64_t count_in = 0, count_out = 0, bytes = 0;
  std::string state;  // scheduled, started, completed, failed
  double t_enqueue = 0, t_start = 0, t_end = 0;  // seconds since the Unix epoch; 0 = not yet
  std::string error;
};

struct TraceDump {
  std::string source;  // file it came from
  std::string group;
  int rank = -1, world_size = 0, generation = 0;
  std::string reason;
  std::vector<TraceEntry> entries;
};

// Parses a dump; throws Error naming `source` and the field when it is malformed.
TraceDump parse_trace_dump(const std::string& json_text, const std::string& source);
TraceDump load_trace_dump(const std::string& path);
std::string trace_dump_to_json(const TraceDump& dump);

struct TraceAnalysis {
  bool agree = true;                // no disagreement found
  // First collective where ranks disagree, or (when a rank sent no dump, as a killed rank does) the
  // first one not completed on every rank that sent one; -1 when none can be named.
  std::int64_t first_seq = -1;
  std::string op;                   // its op, as the ranks that reached it saw it
  std::vector<int> missing_ranks;   // ranks that never reached it (or sent no dump)
  std::vector<int> differing_ranks; // ranks that reached it with another op, dtype or size
  std::string report;               // human-readable summary
};

TraceAnalysis analyze_traces(const std::vector<TraceDump>& dumps);

}  // namespace lmcore::dist
