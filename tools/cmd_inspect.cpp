// lmcore inspect FILE [--json] — a checkpoint's format, tensors (name, dtype, shape, bytes, file
// offset), totals and metadata. The format is detected from the bytes; nothing is copied (the file is
// mapped), so inspecting a large checkpoint is fast.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lmcore/io/checkpoint.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_inspect(int argc, char** argv) {
  CLI::App app{"Show a checkpoint's format, tensors and metadata (safetensors, PyTorch, NumPy).", "lmcore inspect"};
  std::string path;
  bool json = false;
  app.add_option("file", path, "checkpoint file")->required();
  app.add_flag("--json", json, "print JSON");
  LMCORE_PARSE_ARGS(app, argc, argv);

  io::LoadResult r;
  try {
    r = io::load(path);
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore inspect: {}\n", e.what());
    return 1;
  }
  std::uint64_t total = 0;
  for (const auto& e : r.tensors) total += e.tensor.nbytes();

  if (json) {
    nlohmann::ordered_json j;
    j["file"] = path;
    j["format"] = io::format_name(r.format);
    j["count"] = r.tensors.size();
    j["total_bytes"] = total;
    auto& ts = j["tensors"] = nlohmann::ordered_json::array();
    for (const auto& e : r.tensors) {
      nlohmann::ordered_json t;
      t["name"] = e.name;
      t["dtype"] = dtype_name(e.tensor.dtype());
      t["shape"] = e.tensor.shape();
      t["bytes"] = e.tensor.nbytes();
      t["offset"] = e.file_offset >= 0 ? nlohmann::ordered_json(e.file_offset) : nlohmann::ordered_json(nullptr);
      ts.push_back(std::move(t));
    }
    j["metadata"] = r.metadata;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("file:    {}\nformat:  {}\ntensors: {}, {} bytes ({:.2f} MiB)\n\n", path, io::format_name(r.format),
             r.tensors.size(), total, static_cast<double>(total) / (1 << 20));
  std::size_t w = 4;
  for (const auto& e : r.tensors) w = std::max(w, e.name.size());
  fmt::print("{:<{}}  {:<9} {:<20} {:>14} {:>14}\n", "name", w, "dtype", "shape", "bytes", "offset");
  for (const auto& e : r.tensors)
    fmt::print("{:<{}}  {:<9} {:<20} {:>14} {:>14}\n", e.name, w, dtype_name(e.tensor.dtype()),
               shape_str(e.tensor.shape()), e.tensor.nbytes(),
               e.file_offset >= 0 ? std::to_string(e.file_offset) : std::string("-"));
  if (!r.metadata.empty()) {
    fmt::print("\nmetadata:\n");
    for (const auto& [k, v] : r.metadata) fmt::print("  {}: {}\n", k, v);
  }
  return 0;
}

}  // namespace lmcore::cli
