// lmcore — command-line entry point. `lmcore help` lists the subcommands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include "lmcore/version.h"
#include "tools/command.h"

namespace {

void print_help() {
  fmt::print("lmcore {} — LLM training kernels, checkpoint I/O and collectives in C++\n\n", LMCORE_VERSION_STRING);
  fmt::print("usage: lmcore <command> [options]   (lmcore <command> --help for its options)\n\ncommands:\n");
  for (const auto& c : lmcore::cli::all_commands()) fmt::print("  {:<16} {}\n", c.name, c.summary);
  fmt::print("  {:<16} {}\n", "help", "this list");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help();
    return 2;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    print_help();
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    fmt::print("lmcore {}\n", LMCORE_VERSION_STRING);
    return 0;
  }
  for (const auto& c : lmcore::cli::all_commands()) {
    if (c.name != cmd) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      // A failure a command did not turn into its own message (usage errors exit 2 inside the command).
      fmt::print(stderr, "lmcore {}: error: {}\n", cmd, e.what());
      return 1;
    }
  }
  fmt::print(stderr, "lmcore: unknown command '{}' (lmcore help lists the commands)\n", cmd);
  return 2;
}
