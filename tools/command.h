// Subcommands of the `lmcore` CLI. Each is a thin layer over the library: it parses its own
// arguments (CLI11) and returns the process exit code. The table is in commands.cpp.
#pragma once

#include <string_view>
#include <vector>

namespace lmcore::cli {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(int argc, char** argv);  // argv[0] is the subcommand name
};

const std::vector<Command>& all_commands();

int run_info(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_launch(int argc, char** argv);
int run_trace(int argc, char** argv);
int run_upgrade_check(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_convert(int argc, char** argv);
int run_train(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_tokenizer(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_codegen(int argc, char** argv);

}  // namespace lmcore::cli
