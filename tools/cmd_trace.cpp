// lmcore trace DUMP... — reads the flight-recorder dumps of all ranks (see
// lmcore/dist/flight_recorder.h) and names the first collective where they disagree and the ranks
// missing from it. Exit status 0 when the ranks agree, 1 when they disagree, 2 on bad input.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lmcore/dist/flight_recorder.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_trace(int argc, char** argv) {
  CLI::App app{"Compare the flight-recorder dumps of all ranks of a process group.", "lmcore trace"};
  std::vector<std::string> files;
  bool json = false;
  app.add_option("dumps", files, "one JSON dump per rank")->required()->check(CLI::ExistingFile);
  app.add_flag("--json", json, "print the analysis as JSON");
  LMCORE_PARSE_ARGS(app, argc, argv);
  std::vector<dist::TraceDump> dumps;
  for (const auto& f : files) dumps.push_back(dist::load_trace_dump(f));
  const dist::TraceAnalysis a = dist::analyze_traces(dumps);
  if (json) {
    nlohmann::json j = {{"agree", a.agree},
                        {"first_seq", a.first_seq},
                        {"op", a.op},
                        {"missing_ranks", a.missing_ranks},
                        {"differing_ranks", a.differing_ranks},
                        {"report", a.report}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}", a.report);
  }
  return a.agree ? 0 : 1;
}

}  // namespace lmcore::cli
