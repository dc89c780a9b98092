// lmcore launch --nproc N [--nnodes M --node-rank R --store URL] [--keep-going] [--restart-failed K] -- CMD ARGS
//
// The flags of lmcore::dist::LaunchOptions (lmcore/dist/launch.h, where the behaviour is described);
// lmcore.dist.launch() is the same from Python.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lmcore/core/error.h"
#include "lmcore/dist/launch.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_launch(int argc, char** argv) {
  // Everything after "--" is the command; CLI11 parses what comes before.
  int split = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      split = i;
      break;
    }
  }
  CLI::App app{"Start N local ranks of a command with the LMCORE_* environment of a process group; each line they "
               "print is prefixed with [rank R]. When a rank fails the others are stopped and its status is the "
               "launcher's.",
               "lmcore launch"};
  dist::LaunchOptions o;
  app.add_option("--nproc", o.nproc, "ranks on this machine")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", o.nnodes, "machines")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", o.node_rank, "this machine's index in [0, nnodes)")
      ->capture_default_str()
      ->check(cli::non_negative());
  app.add_option("--store", o.store, "file:///dir or redis://host:port (default: a fresh file store, removed at the end)");
  app.add_flag("--keep-going", o.keep_going, "do not stop the other ranks when one fails (default: stop them)");
  app.add_option("--restart-failed", o.restart_failed,
                 "start a failed rank again, up to K times per rank (LMCORE_RESTART_COUNT tells it which time); "
                 "the other ranks run on meanwhile")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  LMCORE_PARSE_ARGS(app, split, argv);
  if (split + 1 >= argc) {
    fmt::print(stderr, "lmcore launch: no command; usage: lmcore launch --nproc N [options] -- CMD ARGS\n");
    return 2;
  }
  o.command.assign(argv + split + 1, argv + argc);
  try {
    return dist::launch(o);
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore {}\n", e.what());  // e.what() starts with "launch: "
    return 2;
  }
}

}  // namespace lmcore::cli
